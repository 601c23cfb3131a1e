"""Strategy.fsdp through the memory model, the step model, the planner and its explanation.

The FSDP formulas themselves are tested in tests/test_fsdp_model.py; here: the estimates read
them (and only change for an FSDP strategy), the planner searches sharding levels only when
asked, its memory prefilter keeps the FSDP candidates that fit, and the explanation says why
FSDP wins or loses.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.estimate.fsdp import ByteSizes, fsdp_layer_memory
from parastrat.estimate.layers import stage_params
from parastrat.planner.explain import explain_plan, fsdp_verdict
from parastrat.planner.search import Search, hsdp_shard, static_lower_bound
from parastrat.spec.workload import FSDP_AUTO, SearchSpace, Switches, Workload

LEVELS = (None, "optim", "optim_grads", "optim_grads_params")
MODEL = ps.models.get("llama3-8b")
KW = dict(seq_len=8192, micro_batch_size=1, global_batch_size=64, recompute="full")


def memory(s: ps.Strategy, world: int = 64, **kw):
    return ps.estimate_memory(MODEL, s.with_world_size(world), **{**KW, **kw})


@settings(max_examples=25, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    level=st.sampled_from(LEVELS[1:]),
)
def test_stage_state_is_the_fsdp_model_of_its_parameter_record(tp, pp, level):
    """Each stage's weights/grads/optimizer are fsdp_layer_memory of the stage's record,
    sharded over dp_shard * cp; the working set is there exactly when gradients are sharded."""
    s = ps.Strategy(tp=tp, pp=pp, fsdp=level).with_world_size(64)
    rep = memory(s)
    split_layers = tuple(x.layers for x in rep.stages)
    blocks = stage_params(MODEL, tp, 1, tp, split_layers, (0,) * pp)
    for stage, block in zip(rep.stages, blocks):
        want = fsdp_layer_memory(
            block.dense_params, level, s.dp, linear_params=block.linear_params, sizes=ByteSizes()
        )
        assert stage.weights == pytest.approx(want.weights)
        assert stage.gradients == pytest.approx(want.gradients)
        assert stage.optimizer == pytest.approx(want.optimizer)
        assert (stage.working > 0) == (level != "optim")
        assert stage.total == pytest.approx(
            stage.weights
            + stage.gradients
            + stage.optimizer
            + stage.working
            + stage.activations
            + stage.other
        )


def test_optim_level_equals_the_distributed_optimizer_and_no_working_column():
    plain, optim = memory(ps.Strategy(tp=2)), memory(ps.Strategy(tp=2, fsdp="optim"))
    assert plain.peak_bytes == pytest.approx(optim.peak_bytes)
    assert "fsdp" not in plain.breakdown().splitlines()[1]
    full = memory(ps.Strategy(tp=2, fsdp="optim_grads_params"))
    assert "fsdp" in full.breakdown().splitlines()[1]
    assert full.to_dict()["stages"][0]["working"] == full.stages[0].working > 0


def test_sharding_more_keeps_less_state():
    kept = []
    for level in LEVELS[1:]:
        st0 = memory(ps.Strategy(tp=1, fsdp=level)).stages[0]
        kept.append(st0.weights + st0.gradients + st0.optimizer)
    assert kept == sorted(kept, reverse=True) and kept[0] > kept[-1]


def test_hsdp_keeps_whole_copies_across_replicas():
    fsdp = memory(ps.Strategy(tp=1, fsdp="optim_grads_params"))
    hsdp = memory(ps.Strategy(tp=1, dp_replicate=8, fsdp="optim_grads_params"))
    # shard group 8 instead of 64: eight times the sharded state
    assert hsdp.stages[0].optimizer == pytest.approx(8 * fsdp.stages[0].optimizer)


def step(s: ps.Strategy, world: int = 64):
    cluster = ps.Cluster("h100", world)
    return ps.estimate_step(MODEL, s.with_world_size(world), cluster, **KW)


def test_step_prices_the_levels_and_keeps_the_breakdown_whole():
    reps = {lv: step(ps.Strategy(tp=1, fsdp=lv)) for lv in LEVELS}
    dp = [reps[lv].breakdown["dp"] for lv in LEVELS[1:]]
    assert dp == sorted(dp) and dp[0] < dp[-1]  # RS each micro-batch, then AG fwd + bwd too
    for rep in reps.values():
        b = rep.breakdown
        keys = [k for k in b if k.endswith("_exposed")] + ["compute", "recompute", "bubble"]
        parts = sum(b[k] for k in keys) + b["optimizer"]
        assert parts == pytest.approx(rep.step_time_s)
        assert 0 < b["dp_exposed"] <= b["dp"] + 1e-12 or b["dp"] == 0


def test_hsdp_inside_the_node_exposes_less_than_fsdp_across_nodes():
    across = step(ps.Strategy(tp=1, fsdp="optim_grads_params"))
    inside = step(ps.Strategy(tp=1, dp_replicate=8, fsdp="optim_grads_params"))
    assert inside.breakdown["dp_exposed"] < across.breakdown["dp_exposed"]


# ---- the planner ------------------------------------------------------------------------------
def test_search_space_fsdp_values():
    assert SearchSpace().fsdp is None and SearchSpace(fsdp="off").fsdp is None
    assert SearchSpace(fsdp="auto").fsdp == FSDP_AUTO
    assert SearchSpace(fsdp=("optim_grads_params", "no_shard")).fsdp == (
        None,
        "optim_grads_params",
    )
    with pytest.raises(UsageError, match="optim_grads_params"):
        SearchSpace(fsdp="zero3")


def search(model: str, world: int, gbs: int, fsdp=None) -> Search:
    wl = Workload(model=ps.models.get(model), seq_len=8192, global_batch_size=gbs)
    return Search(ps.Cluster("h100", world), wl, Switches(), SearchSpace(fsdp=fsdp))


def test_enumeration_adds_fsdp_and_hsdp_only_when_asked():
    off = search("llama3-8b", 64, 64).enumerate()
    auto = search("llama3-8b", 64, 64, "auto").enumerate()
    assert all(s.fsdp is None for s in off)
    assert {str(s) for s in off} <= {str(s) for s in auto}
    sharded = [s for s in auto if s.fsdp is not None]
    assert {s.fsdp for s in sharded} == {"optim_grads", "optim_grads_params"}
    for s in sharded:
        assert not [v for v in s.check() if v.severity == "error"]
        shard = hsdp_shard(s, 8)
        assert s.dp_replicate in (1, s.dp // shard)
        if s.dp_replicate > 1:
            assert s.dp_shard_degree * s.cp * s.tp <= 8


def test_static_bound_keeps_the_fsdp_candidates_that_fit():
    model = ps.models.get("llama3.1-405b")
    off = static_lower_bound(model, 128, 8, 1, 1, 1, 1, 8, {})
    full = static_lower_bound(model, 128, 8, 1, 1, 1, 1, 8, {}, True, "optim_grads_params")
    cap = ps.Cluster("h100", 128).memory_bytes
    assert full < cap < off  # pp=1 TP8 fits only when weights and gradients are sharded
    kept = search("llama3.1-405b", 128, 128, "optim_grads_params").enumerate()
    assert any(s.pp == 1 and s.fsdp == "optim_grads_params" for s in kept)


def test_plan_with_fsdp_explains_the_choice():
    plan = ps.plan(MODEL, ps.Cluster("h100", 8), seq_len=8192, global_batch_size=32, fsdp="auto")
    assert any(c.strategy.fsdp for c in plan.ranked)
    verdict = fsdp_verdict(plan)
    assert verdict.startswith(("FSDP chosen", "FSDP not chosen"))
    assert "GPUs (inside the scale-up domain" in verdict
    assert "fsdp: " + verdict in explain_plan(plan)


def test_explanation_when_no_fsdp_candidate_ranks():
    """A plan without FSDP candidates: full sharding at pp=1 is priced beside its choice."""
    plan = ps.plan(
        ps.models.get("llama3-70b"), ps.Cluster("h100", 16), seq_len=8192, global_batch_size=32
    )
    verdict = fsdp_verdict(plan)
    assert verdict.startswith(("FSDP is slower: TP", "FSDP does not fit: TP")), verdict
    assert " PP1 " in verdict and "FSDP:optim_grads_params" in verdict


def test_cli_plan_fsdp(capsys):
    args = ["plan", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "8192"]
    assert main([*args, "--global-batch-size", "32", "--fsdp", "auto"]) == 0
    assert "fsdp: FSDP" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([*args, "--fsdp", "zero3"])
    assert exc.value.code == 2


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_hsdp_of_an_moe_model_keeps_replicas_dividing_the_expert_dp(model):
    """HSDP's replica count must divide the expert data-parallel size (rule
    dp-replicate-expert); before, one such variant made the whole FSDP search fail."""
    sharded = [s for s in search(model, 64, 256, "optim").enumerate() if s.fsdp is not None]
    assert any(s.dp_replicate > 1 for s in sharded)
    for s in sharded:
        assert s.expert_dp % s.dp_replicate == 0
        assert not [v for v in s.check() if v.severity == "error"]
    plan = ps.plan(model, ps.Cluster("a100", 64), seq_len=4096, global_batch_size=256, fsdp="optim")
    assert plan.best.strategy.fsdp == "optim"
