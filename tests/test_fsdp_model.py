"""FSDP cost model: memory identities, monotonic sharding, ring-formula times, source facts."""

import ast
import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.estimate import comm, memory
from parastrat.estimate.fsdp import (
    LEVELS,
    MEGATRON_AG_PREFETCH_ELEMENTS,
    ByteSizes,
    LayerWork,
    ShardGroups,
    Sharding,
    fsdp_layer_collectives,
    fsdp_layer_comm,
    fsdp_layer_memory,
    fsdp_stage_comm,
    fsdp_stage_memory,
    fsdp_working_set,
    megatron_prefetch_depth,
    torchtitan_reshard_after_forward,
)
from parastrat.estimate.overlap import OVERLAP_SLOWDOWN
from parastrat.spec.cluster import Cluster, bus_factor, latency_steps

H100 = Cluster("h100", 64)  # 8 per NVLink domain


def dense_model():
    return ps.models.get("llama3-8b")


# ---- memory: identities with estimate_memory --------------------------------------------------
@pytest.mark.parametrize("dist_opt, level", [(False, "no_shard"), (True, "optim")])
def test_no_shard_and_optim_equal_todays_accounting(dist_opt, level):
    """no_shard = no distributed optimizer, optim = distributed optimizer over dp * cp."""
    s = ps.Strategy(tp=2, pp=2, cp=2, sp=True).with_world_size(32)  # dp 4
    r = ps.estimate_memory(
        dense_model(), s, seq_len=4096, distributed_optimizer=dist_opt, global_batch_size=32
    )
    for stage in r.stages:
        got = fsdp_layer_memory(stage.params, level, s.dp * s.cp)
        assert got.weights == pytest.approx(stage.weights, rel=1e-12)
        assert got.gradients == pytest.approx(stage.gradients, rel=1e-12)
        assert got.optimizer == pytest.approx(stage.optimizer, rel=1e-12)
    # and in memory.py's own constants
    one = fsdp_layer_memory(1.0, level, 8)
    shard = 8 if dist_opt else 1
    assert (one.weights, one.gradients, one.optimizer) == (
        memory.WEIGHT_BYTES,
        memory.GRAD_BYTES,
        memory.OPTIM_BYTES / shard,
    )


def test_fp8_bytes_follow_memory_model():
    for prec in ("fp8", "mxfp8"):
        kept = ByteSizes.megatron(prec, fp8_param_gather=False)
        assert kept.fp8_extra == memory.FP8_EXTRA_BYTES[prec] and kept.gather == comm.PARAM_BYTES
        fp8 = ByteSizes.megatron(prec)  # Bridge recipes: fp8_param_gather on, FP8 all-gather
        assert fp8.fp8_extra == memory.FP8_EXTRA_BYTES[prec] - 2.0 and fp8.gather == 1.0
    assert ByteSizes.megatron("bf16") == ByteSizes()


def test_full_sharding_weights_are_total_over_shard_plus_working_set():
    layers, unit, shard = 32, 218e6, 8
    sh = Sharding("optim_grads_params", dp_shard=shard, prefetch=1)
    stage = fsdp_stage_memory([unit] * layers, sh)
    b = ByteSizes()
    assert stage.weights == pytest.approx(b.weight * unit * layers / shard)
    assert stage.working.weights == pytest.approx(2 * b.gather * unit)  # current + next layer
    assert stage.working.gradients == pytest.approx(2 * b.reduce * unit)
    assert stage.gradients == pytest.approx(b.grad * unit * layers / shard)
    assert stage.optimizer == pytest.approx(b.optim * unit * layers / shard)


def test_prefetch_depth_and_reshard_after_forward_set_the_working_set():
    unit = 100e6
    deep = fsdp_working_set(unit, Sharding("optim_grads_params", 8, prefetch=3), layers=10)
    assert deep.weights == pytest.approx(4 * 2 * unit)
    kept = Sharding("optim_grads_params", 8, reshard_after_forward=False)
    assert fsdp_working_set(unit, kept, layers=10).weights == pytest.approx(10 * 2 * unit)
    # ZeRO-2 gathers nothing; a shard group of one distributes nothing
    assert fsdp_working_set(unit, Sharding("optim_grads", 8), layers=10).weights == 0.0
    assert fsdp_working_set(unit, Sharding("optim_grads_params", 1), layers=10).total == 0.0


def test_hsdp_does_not_divide_by_the_replicate_degree():
    params = [500e6] * 20
    fsdp8 = fsdp_stage_memory(params, Sharding("optim_grads_params", dp_shard=8))
    hsdp = fsdp_stage_memory(params, Sharding("optim_grads_params", dp_shard=8, dp_replicate=4))
    fsdp32 = fsdp_stage_memory(params, Sharding("optim_grads_params", dp_shard=32))
    assert hsdp == fsdp8
    assert fsdp32.total < hsdp.total


def test_fp8_copies_are_sharded_and_gathered_with_the_weights():
    b = ByteSizes.megatron("fp8", fp8_param_gather=False)
    lay = fsdp_layer_memory(10.0, "optim_grads_params", 5, linear_params=8.0, sizes=b)
    assert lay.weights == pytest.approx((2 * 10 + 2 * 8) / 5)
    ws = fsdp_working_set(10.0, Sharding("optim_grads_params", 5), linear_params=8.0, sizes=b)
    assert ws.weights == pytest.approx(1 * (2 * 10 + 2 * 8))  # one layer: nothing to prefetch


# ---- memory: more sharding never costs more ----------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    unit=st.floats(1e6, 2e9),
    layers=st.integers(1, 128),
    shard=st.integers(1, 512),
    prefetch=st.integers(0, 3),
)
def test_more_sharding_never_more_kept_memory(unit, layers, shard, prefetch):
    kept = [
        fsdp_stage_memory([unit] * layers, Sharding(lvl, shard, prefetch=prefetch))
        for lvl in LEVELS
    ]
    totals = [k.weights + k.gradients + k.optimizer for k in kept]
    assert all(a >= b - 1e-6 * a for a, b in itertools.pairwise(totals))
    # with the working set too, once a stage has at least 2 x the units in flight
    if layers >= 2 * (1 + prefetch) and shard >= 2:
        full = [k.total for k in kept]
        assert all(a >= b - 1e-6 * a for a, b in itertools.pairwise(full))
    # a larger shard group never keeps more
    wider = fsdp_stage_memory([unit] * layers, Sharding(LEVELS[-1], 2 * shard, prefetch=prefetch))
    assert wider.total <= kept[-1].total * (1 + 1e-12)


# ---- validation -------------------------------------------------------------------------------
def test_sharding_normalises_and_validates_with_fixes():
    assert Sharding(None).level == "no_shard"
    assert Sharding("optim_grads", 4, 2).dp == 8
    with pytest.raises(UsageError, match="use fsdp='optim_grads_params'"):
        Sharding("zero3")
    with pytest.raises(UsageError, match="one of 'no_shard'"):
        Sharding("everything")
    with pytest.raises(UsageError, match="dp_shard=1"):
        Sharding("optim", dp_shard=0)
    with pytest.raises(UsageError, match="prefetch=1"):
        Sharding("optim", prefetch=-1)
    with pytest.raises(UsageError, match="level='optim_grads_params'"):
        Sharding("optim_grads", 8, reshard_after_forward=False)
    with pytest.raises(UsageError, match="dp_replicate"):
        Sharding("optim", 8, dp_replicate=True)


def test_from_strategy_without_fsdp_fields_is_todays_dp():
    s = ps.Strategy(tp=4).with_world_size(32)
    sh = Sharding.from_strategy(s)
    assert (sh.level, sh.dp_shard, sh.dp_replicate) == ("no_shard", 8, 1)
    assert Sharding.from_strategy(s, distributed_optimizer=True).level == "optim"


def test_levels_are_megatron_fsdp_sharding_strategies():
    pytest.importorskip("torch")
    from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import ShardingStrategy

    assert tuple(x.name.lower() for x in sorted(ShardingStrategy)) == LEVELS


def _megatron_fsdp_src(name):
    import importlib.util

    spec = importlib.util.find_spec("megatron.core")
    if spec is None or spec.origin is None:
        pytest.skip("megatron-core not installed")
    return Path(spec.origin).parent / "distributed/fsdp/src/megatron_fsdp" / name


def test_megatron_prefetch_budget_is_read_from_its_source():
    text = _megatron_fsdp_src("megatron_fsdp.py").read_text()
    assert "max(\n                1_000_000_000, suggested_communication_unit_size" in text
    assert "suggested_AG_prefetch_size = suggested_communication_unit_size // 2" in text
    assert MEGATRON_AG_PREFETCH_ELEMENTS == 1_000_000_000 // 2
    assert megatron_prefetch_depth(218e6, double_buffer=False) == 3  # 3 x 218M >= 500M
    assert megatron_prefetch_depth(2e9, double_buffer=False) == 1
    assert megatron_prefetch_depth(218e6) == 1  # double buffer: two units
    buf = _megatron_fsdp_src("param_and_grad_buffer.py").read_text()
    assert "UB_BUFFER_NUM = 2" in buf


def test_torchtitan_reshard_policy_matches_its_source():
    """torchtitan's resolver, executed from its installed source (the package's own
    ``torchtitan.distributed`` import needs spmd_types, absent here)."""
    import importlib.util

    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtitan not installed")
    src = Path(next(iter(spec.submodule_search_locations))) / "distributed/fsdp.py"
    tree = ast.parse(src.read_text())
    fn = next(
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "get_fsdp_reshard_after_forward_policy"
    )
    ns: dict = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec"), ns)
    theirs = ns["get_fsdp_reshard_after_forward_policy"]
    for policy in ("default", "always", "never"):
        for pp in (1, 4):
            assert torchtitan_reshard_after_forward(policy, pp) == theirs(policy, pp > 1)


# ---- time: ring formulas on a known cluster ----------------------------------------------------
def ring(op, nbytes, n, span):
    alpha, bw = H100.link(span)
    return alpha * latency_steps(op, n) + nbytes * bus_factor(op, n) / bw


def hand_ring(op, nbytes, n, span):
    """nccl-tests: all-gather / reduce-scatter (n-1)/n, all-reduce 2(n-1)/n of the full array."""
    alpha, bw = H100.link(span)
    if op == "all_reduce":
        return alpha * 2 * math.ceil(math.log2(n)) + nbytes * 2 * (n - 1) / n / bw
    return alpha * (n - 1) + nbytes * (n - 1) / n / bw


def test_collectives_are_ring_formulas_inside_and_across_the_domain():
    p = 1e9
    inside = Sharding("optim_grads_params", dp_shard=8)
    c = fsdp_layer_collectives(p, inside, ShardGroups.dense(inside), H100)
    assert c.shard_span == "intra"
    assert c.gather == pytest.approx(hand_ring("all_gather", 2 * p, 8, "intra"))
    assert c.reduce == pytest.approx(hand_ring("reduce_scatter", 2 * p, 8, "intra"))
    assert c.outer == 0.0
    across = Sharding("optim_grads_params", dp_shard=16)
    c = fsdp_layer_collectives(p, across, ShardGroups.dense(across), H100)
    assert c.shard_span == "inter"
    assert c.gather == pytest.approx(hand_ring("all_gather", 2 * p, 16, "inter"))
    # TP2 inside the node pushes a dp_shard of 8 across nodes (stride 2, 16 ranks)
    tp2 = ShardGroups.dense(inside, tp=2)
    assert fsdp_layer_collectives(p, inside, tp2, H100).shard_span == "inter"


def test_hsdp_shards_inside_and_all_reduces_the_shard_across():
    p = 1e9
    sh = Sharding("optim_grads_params", dp_shard=8, dp_replicate=8)
    g = ShardGroups.dense(sh)
    assert (g.shard, g.shard_stride, g.replicate, g.replicate_stride) == (8, 1, 8, 8)
    c = fsdp_layer_collectives(p, sh, g, H100)
    assert (c.shard_span, c.outer_span) == ("intra", "inter")
    assert c.outer == pytest.approx(hand_ring("all_reduce", 2 * p / 8, 8, "inter"))
    ddp = fsdp_layer_collectives(p, Sharding(None, 64), ShardGroups(64), H100)
    assert ddp.reduce == pytest.approx(hand_ring("all_reduce", 2 * p, 64, "inter"))
    assert ddp.gather == 0.0


def test_exposure_of_one_layer_per_level():
    """Per pass: max(0, c - w) + slowdown min(c, w) exposed, (1 - slowdown) min(c, w) at the
    stage edge; per-micro-batch collectives repeat m times, per-step ones once."""
    p, m = 1e9, 4
    s = OVERLAP_SLOWDOWN
    for level in LEVELS:
        sh = Sharding(level, dp_shard=8)
        c = fsdp_layer_collectives(p, sh, ShardGroups.dense(sh), H100)
        g, r = c.gather, c.reduce
        # windows 0: everything exposed in the steady state, no tail left to add
        t0 = fsdp_layer_comm(p, sh, ShardGroups(8), H100, fwd_s=0, bwd_s=0, micro_batches=m)
        expect = {
            "no_shard": r,
            "optim": r + g,
            "optim_grads": m * r + g,
            "optim_grads_params": m * g + m * (g + r),
        }[level]
        assert t0.total == pytest.approx(expect)
        assert t0.exposed == pytest.approx(expect) and t0.tail == 0.0
        # huge windows: only the contention shows; the pass edges are the tail
        big = fsdp_layer_comm(p, sh, ShardGroups(8), H100, fwd_s=1, bwd_s=1, micro_batches=m)
        assert big.exposed == pytest.approx(s * expect)
        assert big.tail == pytest.approx((1 - s) * expect)


def test_uniform_stage_matches_the_pipelined_pass():
    """A pass of L layers with per-layer comm c and window w, prefetching the next layer,
    exposes c + (L - 1) max(0, c - w) + slowdown (L - 1) min(c, w)."""
    p, L = 1e9, 16
    sh = Sharding("optim_grads_params", dp_shard=8)
    c = fsdp_layer_collectives(p, sh, ShardGroups(8), H100)
    for w in (0.2 * c.gather, c.gather, 5 * c.gather):
        layers = [LayerWork(p, w, 2 * w)] * L
        got = fsdp_stage_comm(layers, sh, ShardGroups(8), H100, micro_batches=1)

        def pass_(cc, ww):
            return cc + (L - 1) * max(0.0, cc - ww) + OVERLAP_SLOWDOWN * (L - 1) * min(cc, ww)

        expect = pass_(c.gather, w) + pass_(c.gather + c.reduce, 2 * w)
        assert got.exposed == pytest.approx(expect)


def test_outer_all_reduce_runs_beside_the_inner_reduce_scatter():
    p = 1e9
    sh = Sharding("optim_grads", dp_shard=8, dp_replicate=8)
    c = fsdp_layer_collectives(p, sh, ShardGroups.dense(sh), H100)
    t = fsdp_layer_comm(p, sh, ShardGroups.dense(sh), H100, fwd_s=0, bwd_s=0, micro_batches=1)
    # forward: the updated weights' all-gather; backward: RS (NVLink) beside the AR (network)
    assert t.exposed == pytest.approx(c.gather + max(c.reduce, c.outer))
    assert t.total == pytest.approx(c.gather + c.reduce + c.outer)


def test_keeping_gathered_weights_skips_the_backward_all_gather():
    p = 1e9
    keep = Sharding("optim_grads_params", 8, reshard_after_forward=False)
    again = Sharding("optim_grads_params", 8)
    c = fsdp_layer_collectives(p, again, ShardGroups(8), H100)
    t_keep = fsdp_layer_comm(p, keep, ShardGroups(8), H100, fwd_s=0, bwd_s=0)
    t_again = fsdp_layer_comm(p, again, ShardGroups(8), H100, fwd_s=0, bwd_s=0)
    assert t_again.total - t_keep.total == pytest.approx(c.gather)


def test_torchtitan_bytes_reduce_in_fp32():
    p = 1e9
    sh = Sharding("optim_grads_params", 8)
    tt = fsdp_layer_collectives(p, sh, ShardGroups(8), H100, ByteSizes.torchtitan())
    assert tt.reduce == pytest.approx(ring("reduce_scatter", 4 * p, 8, "intra"))
    lay = fsdp_layer_memory(p, sh.level, 8, sizes=ByteSizes.torchtitan())
    assert lay.total == pytest.approx(16 * p / 8)


@pytest.mark.parametrize("level, dist_opt", [("no_shard", False), ("optim", True)])
def test_unsharded_gradient_levels_price_as_todays_dp_step(level, dist_opt):
    """One stage of L equal layers: the per-layer collectives of no_shard / optim move the same
    bytes as comm.dp_step's one collective per stage; only the latency terms differ (L - 1 more
    alphas per collective kind)."""
    s = ps.Strategy(tp=2).with_world_size(16)  # dp 8, stride 2: crosses the 8-GPU domain
    strides = comm.group_strides(s, dp=8, edp=8)
    layers, p = 32, 2e8
    today = comm.dp_step(s, layers * p, 0.0, 8, 8, strides, distributed_optimizer=dist_opt)
    sh = Sharding(level, dp_shard=8)
    groups = ShardGroups.dense(sh, tp=2)
    assert groups.shard_stride == strides["dp-cp"]
    got = fsdp_stage_comm([LayerWork(p, 0, 0)] * layers, sh, groups, H100)
    alpha, _ = H100.link("inter")
    extra = sum((layers - 1) * alpha * latency_steps(c.op, c.group_size) for c in today)
    assert got.total == pytest.approx(sum(c.time(H100) for c in today) + extra, rel=1e-9)
