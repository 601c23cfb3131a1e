"""CPU activation offloading: memory, host-link time, Megatron's rules and the planner.

The rules are checked against the real megatron-core ``TransformerConfig`` (CPU, no TE): every
combination parastrat refuses is one Megatron refuses, and the other way round.  The times are
checked against hand computations from the constants (the host link of the device preset and
the memory model's per-layer activation bytes).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError, Switches
from parastrat.errors import UsageError
from parastrat.estimate import offload
from parastrat.estimate.memory import FRAGMENTATION
from parastrat.estimate.offload_step import offload_acts
from parastrat.rules.offload import offload_violations
from parastrat.spec.hardware import GRACE_C2C_PER_GPU_BPS, PCIE_GEN5_X16_BPS
from parastrat.spec.workload import Workload

LLAMA70 = ps.models.get("llama3-70b")
FSDP64 = Strategy(tp=1, pp=1, dp_shard=64, fsdp="optim_grads_params").with_world_size(64)
#: Megatron Bridge's Llama 3 70B FP8-CS row on 64 GPUs (docs/performance-summary.md, 25.11)
WL = Workload(
    model=LLAMA70, seq_len=8192, global_batch_size=256, micro_batch_size=2, precision="fp8"
)


def _step(accel: str, switches: Switches):
    return ps.estimate_step(WL, FSDP64, ps.Cluster(accelerator=accel, num_devices=64), switches)


def _layer_bytes() -> float:
    return offload_acts(WL, FSDP64, Switches()).dense


# ---- memory ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 20, 40, 79])
def test_memory_drops_by_the_offloaded_layers_activations(k):
    """The peak falls by k layers' activations (plus the fragmentation allowance on them):
    TE keeps L - k layers' worth on the device, its in-flight copies included."""
    none = ps.estimate_memory(WL, FSDP64, Switches(recompute="none"))
    off = ps.estimate_memory(WL, FSDP64, Switches(cpu_offload_layers=k))
    saved = k * _layer_bytes()
    assert none.peak_bytes - off.peak_bytes == pytest.approx(saved * (1 + FRAGMENTATION))
    assert off.stages[0].activations == pytest.approx(none.stages[0].activations - saved)
    assert off.recompute == "none"  # an unset recompute means none with offloading


def test_recipe_layer_counts_fit_where_no_recompute_does_not():
    """Megatron Bridge's recipes: 20 layers on GB300 (288 GB), 40 on GB200 (186 GB) fit at
    MBS 2 with FSDP; nothing offloaded does not."""
    for accel, k in (("gb300", 20), ("gb200", 40)):
        cap = ps.hardware.get(accel)
        assert not ps.estimate_memory(WL, FSDP64, Switches(recompute="none")).fits(cap)
        assert ps.estimate_memory(WL, FSDP64, Switches(cpu_offload_layers=k)).fits(cap)


# ---- time -----------------------------------------------------------------------------------
def test_schedule_by_hand_slow_link():
    """5 layers, 2 offloaded, forward 1 s, backward 2 s, 3 s per copy.  By hand, following
    TE's schedule: copy 0 runs 1-4 s, copy 1 4-7 s; layer 3's forward waits for copy 0 (until
    4 s), layer 4's for copy 1 (until 7 s): forward ends at 8 s, 3 s late.  Backward from 8 s:
    layer 4 to 10 s; reload 1 starts at layer 3's backward (10-13 s), reload 0 at layer 2's
    (13-16 s); layers 1 and 0 find them ready: the step ends at 18 s = 15 s of compute + 3 s."""
    got = offload.exposed_time([3.0] * 2, 5, 1.0, 2.0, 1.0)
    assert got.transfer_s == pytest.approx(12.0)
    assert got.exposed_s == pytest.approx(3.0)


def test_schedule_hides_a_fast_link_and_exposes_all_at_the_bound():
    fast = offload.exposed_time([1.0] * 10, 20, 1.0, 2.0, 10.0)  # 0.1 s copies in 1 s layers
    assert fast.exposed_s == 0.0 and fast.transfer_s == pytest.approx(2.0)
    # k = L - 1: each copy must end before the next layer and each reload starts when needed
    last = offload.exposed_time([1.0] * 3, 4, 1.0, 2.0, 1.0)
    assert last.exposed_s == pytest.approx(last.transfer_s)


def test_gb300_link_hides_the_recipe_offload():
    """GB300, 20 layers: the C2C share moves a layer in less than a layer's forward, so the
    step is the no-recompute step; the transfer time is 2 x 20 layers / 225 GB/s per
    micro-batch."""
    base = _step("gb300", Switches(recompute="none"))
    rep = _step("gb300", Switches(cpu_offload_layers=20))
    m = rep.micro_batches
    assert rep.breakdown["offload"] == pytest.approx(
        m * 2 * 20 * _layer_bytes() / GRACE_C2C_PER_GPU_BPS
    )
    assert rep.breakdown["offload_exposed"] == 0.0
    assert rep.step_time_s == pytest.approx(base.step_time_s)
    assert any("CPU activation offloading: 20 of 80 layers" in n for n in rep.notes)


def test_pcie_link_exposes_time_and_keeps_the_breakdown_invariant():
    """On an x86 B200 (PCIe Gen5, 53 GB/s) offloading 79 layers exposes every copy (nothing
    is left to hide behind); the step grows by exactly ``offload_exposed``, and the breakdown
    still sums to the step."""
    base = _step("b200", Switches(recompute="none"))
    rep = _step("b200", Switches(cpu_offload_layers=79))
    m = rep.micro_batches
    moved = m * 2 * 79 * _layer_bytes() / PCIE_GEN5_X16_BPS
    assert rep.breakdown["offload"] == pytest.approx(moved)
    assert rep.breakdown["offload_exposed"] == pytest.approx(moved)
    assert rep.step_time_s == pytest.approx(base.step_time_s + moved)
    parts = ("compute", "recompute", "bubble", "optimizer")
    total = sum(rep.breakdown[k] for k in parts)
    total += sum(v for k, v in rep.breakdown.items() if k.endswith("_exposed"))
    assert total == pytest.approx(rep.step_time_s)
    assert rep.tokens_per_s_per_gpu < base.tokens_per_s_per_gpu


# ---- rules ----------------------------------------------------------------------------------
def _megatron_refuses(k: int, pp: int, recompute: str, graphs: bool) -> bool:
    torch = pytest.importorskip("torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    kw: dict = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4}
    kw.update(cpu_offloading=k > 0, cpu_offloading_num_layers=k)
    kw.update(pipeline_model_parallel_size=pp, pipeline_dtype=torch.bfloat16)
    if recompute == "full":
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif recompute == "selective":
        kw.update(recompute_granularity="selective")
    if graphs:
        kw.update(cuda_graph_impl="local")
    try:
        tc.TransformerConfig(**kw)
    except (ValueError, AssertionError):
        return True
    return False


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "k,pp,recompute,graphs",
    list(itertools.product((0, 1, 3, 4, 5), (1, 2), ("none", "selective", "full"), (False,)))
    + [(0, 1, "none", True), (2, 1, "none", True)],
)
def test_rules_refuse_what_megatron_refuses(k, pp, recompute, graphs):
    """parastrat's offloading rules and Megatron Core's TransformerConfig agree (only
    offloading combinations are compared: without it Megatron's other checks decide)."""
    mine = offload_violations(
        4, Strategy(pp=pp), k, recompute, ("full_iteration",) if graphs else ()
    )
    refused = _megatron_refuses(k, pp, recompute, graphs)
    if k == 0:
        assert mine == []
        return
    assert bool(mine) == refused, (mine, refused)


def test_rule_ids_and_fixes():
    with pytest.raises(StrategyError) as err:
        ps.estimate_memory(
            LLAMA70,
            Strategy(tp=8, pp=2).with_world_size(64),
            Switches(cpu_offload_layers=80, recompute="full"),
            seq_len=4096,
        )
    assert {v.rule for v in err.value.violations} == {
        "cpu-offload-layers",
        "cpu-offload-pp",
        "cpu-offload-recompute",
    }
    # the fixes work: pp=1, layers <= 79, no recompute
    ps.estimate_memory(
        LLAMA70,
        Strategy(tp=8, pp=1).with_world_size(64),
        Switches(cpu_offload_layers=79),
        seq_len=4096,
    )


def test_no_host_link_and_host_memory_are_refused():
    with pytest.raises(StrategyError, match="cpu-offload-host-link"):
        ps.estimate_step(
            dataclasses.replace(WL, precision="bf16", fp8_recipe=None),
            FSDP64,
            ps.Cluster(accelerator="ascend-910b", num_devices=64),
            Switches(cpu_offload_layers=10),
        )
    # GB200's Grace holds 240 GB per GPU: 79 layers of ~3.6 GB do not fit; the hint's count does
    with pytest.raises(StrategyError, match="cpu-offload-host-memory") as err:
        _step("gb200", Switches(cpu_offload_layers=79))
    fit = offload.fitting_layers(LLAMA70, offload_acts(WL, FSDP64, Switches()), 240e9)
    assert f"cpu_offload_layers <= {fit}" in err.value.violations[0].hint
    _step("gb200", Switches(cpu_offload_layers=fit))


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_switch_value_is_checked(bad):
    with pytest.raises(UsageError, match="cpu_offload_layers"):
        Switches(cpu_offload_layers=bad)


def test_host_link_constants_per_preset():
    """Every NVIDIA preset has a sourced host link; Ascend has none (refused, not guessed)."""
    for name in ps.hardware.names():
        accel = ps.hardware.get(name)
        assert (accel.host_link_Bps is None) == (accel.vendor == "huawei"), name
    assert ps.hardware.get("gb300").host_link_Bps == 225e9
    assert ps.hardware.get("h100").host_link_Bps < 64e9  # below PCIe Gen5 x16's raw rate


# ---- planner --------------------------------------------------------------------------------
def _plan(accel: str):
    return ps.plan(
        LLAMA70,
        ps.Cluster(accelerator=accel, num_devices=64),
        seq_len=8192,
        global_batch_size=256,
        precision="fp8",
        top_k=10,
        tp=1,
        pp=1,
        cp=1,
        fsdp="optim_grads_params",
        micro_batch_size=2,
    )


def test_planner_proposes_offload_over_full_recompute_on_gb300():
    """Llama 3 70B at MBS 2, TP1 PP1 with FSDP on 64 GB300s: without recompute it does not
    fit; the plan's best offloads the fewest layers that fit, and beats full recompute."""
    plan = _plan("gb300")
    best = plan.best
    assert best.recompute == "none" and best.switches is not None
    k = best.switches.cpu_offload_layers
    assert 0 < k < 80
    assert best.memory.fits(ps.hardware.get("gb300"))
    fewer = ps.estimate_memory(WL, FSDP64, Switches(cpu_offload_layers=k - 1))
    assert not fewer.fits(ps.hardware.get("gb300"))
    full = next(c for c in plan.ranked if c.recompute == "full")
    assert best.tokens_per_s_per_gpu > full.tokens_per_s_per_gpu
    assert best.to_dict()["cpu_offload_layers"] == k
    assert f"offload{k}" in best.label()


def test_planner_does_not_offload_without_a_host_link_or_with_pp():
    plan = ps.plan(
        LLAMA70,
        ps.Cluster(accelerator="ascend-910c", num_devices=64),
        seq_len=8192,
        global_batch_size=256,
        top_k=5,
    )
    assert all(c.switches is None for c in plan.ranked)


def test_plan_refuses_a_pinned_offload_count():
    with pytest.raises(UsageError, match="chooses CPU activation offloading itself"):
        ps.plan(
            LLAMA70,
            ps.Cluster(accelerator="gb300", num_devices=64),
            Switches(cpu_offload_layers=20),
            seq_len=8192,
            global_batch_size=256,
        )


def test_hybrid_models_are_refused_offloading_and_never_planned_with_it():
    """Megatron Core's MambaStack has no CPU-offload context (``megatron/core/ssm/
    mamba_block.py`` never calls ``get_cpu_offload_context``): offloading a hybrid would move
    nothing, so it is refused with its rule, and the planner never proposes it."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("megatron.core")
    if spec is None or spec.origin is None:
        pytest.skip("megatron-core is not installed (the test extra has it)")
    source = Path(spec.origin).parent / "ssm" / "mamba_block.py"
    assert "offload" not in source.read_text()
    from parastrat.spec.model import ModelSpec

    model = ModelSpec(
        name="hybrid",
        num_layers=8,
        hidden_size=1024,
        num_attention_heads=8,
        ffn_hidden_size=4096,
        vocab_size=32000,
        hybrid_override_pattern="M-M*M-M-",
        mamba_num_heads=32,
        mamba_head_dim=64,
    )
    cluster = ps.Cluster(accelerator="gb200", num_devices=8)
    with pytest.raises(ps.StrategyError, match="cpu-offload-hybrid"):
        ps.estimate_step(
            model,
            ps.Strategy(tp=1).with_world_size(8),
            cluster,
            ps.Switches(cpu_offload_layers=2, recompute="none"),
            seq_len=4096,
            global_batch_size=64,
            micro_batch_size=1,
        )
    plan = ps.plan(model, cluster, seq_len=4096, global_batch_size=64, top_k=5)
    assert all(c.cpu_offload_layers == 0 for c in plan.candidates)


def test_plan_does_not_propose_offloading_for_moe_models():
    """The recipes offload dense models only; with experts the dispatcher's buffers and the EP
    overlap share memory and the copy stream unpriced, so plan() keeps to recompute there."""
    plan = ps.plan(
        ps.models.get("deepseek-v3"),
        ps.Cluster(accelerator="gb200", num_devices=256),
        seq_len=4096,
        global_batch_size=4096,
        precision="mxfp8",
        top_k=5,
    )
    assert plan.candidates
    assert all(c.cpu_offload_layers == 0 for c in plan.candidates)
