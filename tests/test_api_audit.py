"""The Python API as a notebook user meets it (eighth audit): every refusal's fix works, two
views of one job agree on what they refuse, a model can be given as a Hugging Face config, and
plans read as sequences with one-line reprs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError

HF = Path(__file__).parent / "data" / "hf" / "llama3-8b.json"


@pytest.mark.parametrize(
    ("kw", "fix"),
    [
        ({"pp": 2, "first_stage_layers": 0}, {"pp": 2, "first_stage_layers": None}),
        ({"tp": 0}, {"tp": 1}),
        ({"ring": 0}, {"ring": 1}),
        ({"dp": 0}, {"dp": 1}),
        ({"cfg": 0}, {"cfg": 1}),
    ],
)
def test_a_degree_below_one_is_refused_with_a_fix_that_builds(kw, fix):
    with pytest.raises(StrategyError) as refused:
        Strategy(**kw)
    (v,) = refused.value.violations
    assert "to disable" not in v.hint
    name = next(k for k in kw if kw[k] == 0)
    assert f"{name}={fix[name]}" in v.hint
    Strategy(**fix)  # what the hint names builds


def test_a_pipefusion_refusal_does_not_also_suggest_another_pp():
    with pytest.raises(StrategyError) as refused:
        ps.estimate_dit(
            "flux.1-dev",
            Strategy(tp=2, pp=2),
            ps.Cluster("l40", num_devices=4),
            height=1024,
            width=1024,
            steps=28,
        )
    rules = [v.rule for v in refused.value.violations]
    assert "dit-pipefusion" in rules and not any(r.startswith("layers-") for r in rules)


def test_estimate_memory_refuses_what_estimate_step_refuses():
    model = ps.models.get("llama3-70b")
    with pytest.raises(StrategyError, match="heads-tp"):
        ps.estimate_memory(model, Strategy(tp=3), seq_len=8192)
    with pytest.raises(StrategyError, match="heads-tp"):
        ps.estimate_step(
            model,
            Strategy(tp=3).with_world_size(6),
            ps.Cluster("h100", num_devices=6),
            seq_len=8192,
            global_batch_size=6,
        )
    assert ps.estimate_memory(model, Strategy(tp=8), seq_len=8192).peak_bytes > 0


@pytest.mark.parametrize(
    "s",
    [
        Strategy(tp=2, dp=3),
        Strategy(dp_shard=4),
        Strategy(tp=2, dp_shard=2, dp_replicate=3, ep=4),
        Strategy(tp=4, dp_replicate=2),
        Strategy(tp=2, pp=2, ep=8),
    ],
)
def test_min_world_size_is_a_world_the_strategy_takes(s):
    n = s.min_world_size
    assert s.with_world_size(n).world_size == n
    assert all(not _takes(s, w) for w in range(1, n))


def _takes(s: Strategy, world: int) -> bool:
    try:
        s.with_world_size(world)
    except StrategyError:
        return False
    return True


def test_a_model_can_be_a_hugging_face_config_path_or_dict():
    cluster = ps.Cluster("h100", 8)
    job = dict(seq_len=4096, global_batch_size=64, top_k=1)
    by_preset = ps.plan("llama3-8b", cluster, **job)
    for model in (str(HF), HF, json.loads(HF.read_text())):
        assert ps.plan(model, cluster, **job).best.strategy == by_preset.best.strategy
    with pytest.raises(ps.SpecError, match="never downloads"):
        ps.plan("meta-llama/Llama-3-8B", cluster, **job)


def test_plans_are_sequences_of_candidates_with_one_line_reprs():
    plan = ps.plan("llama3-8b", ps.Cluster("h100", 8), seq_len=4096, global_batch_size=64)
    assert list(plan) == plan.candidates and plan[0] is plan.best and len(plan) >= 1
    dit = ps.plan_dit("flux.1-dev", ps.Cluster("h100", 8), height=1024, width=1024, steps=28)
    assert list(dit) == dit.candidates and dit[0] is dit.best
    assert "\n" not in repr(dit) and len(repr(dit)) < 200 and "Ulysses" in repr(dit)


def test_initialize_on_torchs_fake_process_group_builds_megatrons_groups():
    """One process standing for 128 ranks: Megatron's gloo sub-groups cannot be made over the
    fake store, so they are switched off and the groups are built and match the layout."""
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    pytest.importorskip("megatron.core")
    if dist.is_initialized():
        pytest.skip("torch.distributed already initialized in this process")
    dist.init_process_group("fake", rank=5, world_size=128, store=fake_pg.FakeStore())
    try:
        s = Strategy(tp=2, pp=8, vpp=2, ep=8, sp=True)
        groups = s.initialize()
        assert groups.megatron and groups.ranks["tp"] == [4, 5]
        expected = ps.layout(s.with_world_size(128), 128)
        assert all(groups.layout[kind] == expected[kind] for kind in expected)
        assert "\n" not in repr(groups) and len(repr(groups)) < 200
    finally:
        ps.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()
