"""A candidate taken from a plan applies exactly as that plan with only that candidate would.

Before, ``apply(cfg, plan.best)`` wrote only the candidate's degrees, micro-batch and recompute:
the plan's switches were lost (llama3-8b on 16 H100 at 8,192 tokens kept the recipe's FP32
gradient reduction, 93 GiB where the plan priced 78), and a candidate was never checked
against the config's model or sequence length (``plan-model``, ``plan-seq-len``).  Now each
candidate the planner returns carries its plan's context (:class:`PlanContext`), and the
adapter treats it as that plan with only it.  On the real Megatron Bridge recipes (their
Hugging Face configs served from tests/data/hf).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

import parastrat as ps
from parastrat.adapters import megatron as mg
from parastrat.planner.result import PlanContext

from .test_adapter_bridge import differences, snapshot
from .test_bridge_overrides import at_seq, built, recipes  # noqa: F401 (the fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

RECIPE = "llama3_8b_pretrain_config"
GPUS = 16


def _plan(model: str, seq_len: int, top_k: int = 2) -> ps.Plan:
    return ps.plan(
        ps.models.get(model),
        ps.Cluster("h100", GPUS),
        seq_len=seq_len,
        global_batch_size=128,
        top_k=top_k,
    )


def _one(plan: ps.Plan, i: int) -> ps.Plan:
    """The plan with only its ``i``-th candidate (the acceptance benchmark's workaround)."""
    return dataclasses.replace(plan, candidates=[plan.candidates[i]])


@pytest.fixture(scope="module")
def plan8k() -> ps.Plan:
    return _plan("llama3-8b", 8192)


def test_every_returned_candidate_carries_its_plan(plan8k):
    ctx = plan8k.best.context
    assert isinstance(ctx, PlanContext)
    assert (ctx.model, ctx.seq_len, ctx.global_batch_size, ctx.precision, ctx.switches) == (
        plan8k.model,
        plan8k.seq_len,
        plan8k.global_batch_size,
        plan8k.precision,
        plan8k.switches,
    )
    every = [c for top in plan8k.ranked for c in (top, *top.alternatives)]
    assert all(c.context is ctx for c in every)
    # provenance, not part of what was priced: equality, the JSON and repr are unchanged
    assert dataclasses.replace(plan8k.best, context=None) == plan8k.best
    assert "context" not in plan8k.best.to_dict()
    assert "PlanContext" not in repr(plan8k.best)
    # the one-candidate plan it stands for
    alone = plan8k.best.as_plan()
    assert alone is not None and alone.candidates == [plan8k.best]
    assert alone.step_options == plan8k.step_options
    assert dataclasses.replace(plan8k.best, context=None).as_plan() is None


def test_apply_best_equals_apply_plan(recipes, plan8k):  # noqa: F811
    by_plan = mg.apply(at_seq(built(recipes, RECIPE), 8192), plan8k, world_size=GPUS)
    by_best = mg.apply(at_seq(built(recipes, RECIPE), 8192), plan8k.best, world_size=GPUS)
    assert differences(snapshot(by_plan), snapshot(by_best)) == []
    # the switch the audit found lost: BF16 gradient reduction, as the memory was priced
    assert by_best.ddp.grad_reduce_in_fp32 is False
    assert mg.to_overrides(plan8k.best, recipe=RECIPE) == mg.to_overrides(plan8k, recipe=RECIPE)


def test_apply_another_candidate_equals_its_one_candidate_plan(recipes, plan8k):  # noqa: F811
    second = plan8k.candidates[1]
    by_cand = mg.apply(at_seq(built(recipes, RECIPE), 8192), second, world_size=GPUS)
    by_plan = mg.apply(at_seq(built(recipes, RECIPE), 8192), _one(plan8k, 1), world_size=GPUS)
    assert differences(snapshot(by_plan), snapshot(by_cand)) == []
    assert by_cand.model.tensor_model_parallel_size == second.strategy.tp


def test_to_overrides_of_a_candidate_equal_its_one_candidate_plan(plan8k):
    second = plan8k.candidates[1]
    for recipe in (RECIPE, None):
        lines = mg.to_overrides(second, recipe=recipe)
        assert lines == mg.to_overrides(_one(plan8k, 1), recipe=recipe)
        assert "ddp.grad_reduce_in_fp32=false" in lines
        assert "model.seq_length=8192" in lines
    assert mg.megatron_lm_args(second) == mg.megatron_lm_args(_one(plan8k, 1))


def _refused(cfg, what, rule: str) -> None:
    before = copy.deepcopy(snapshot(cfg))
    with pytest.raises(ps.StrategyError) as err:
        mg.apply(cfg, what, world_size=GPUS)
    assert rule in {v.rule for v in err.value.violations}
    assert differences(before, snapshot(cfg)) == []


def test_a_candidate_of_another_sequence_length_is_refused(recipes):  # noqa: F811
    plan4k = _plan("llama3-8b", 4096, top_k=1)
    _refused(at_seq(built(recipes, RECIPE), 8192), plan4k.best, "plan-seq-len")


def test_a_candidate_of_another_model_is_refused(recipes):  # noqa: F811
    plan70b = _plan("llama3-70b", 8192, top_k=1)
    _refused(at_seq(built(recipes, RECIPE), 8192), plan70b.best, "plan-model")


def test_a_bare_strategy_still_writes_the_degrees_alone(recipes, plan8k):  # noqa: F811
    cfg = at_seq(built(recipes, RECIPE), 4096)  # another length: a Strategy carries none
    grad_fp32 = cfg.ddp.grad_reduce_in_fp32
    mg.apply(cfg, plan8k.best.strategy, world_size=GPUS)
    assert cfg.model.tensor_model_parallel_size == plan8k.best.strategy.tp
    assert cfg.ddp.grad_reduce_in_fp32 == grad_fp32
