"""Rules for hybrid (Mamba) models, held to what Megatron Core 0.16.1 asserts: the real
``MambaContextParallel`` built on CPU, the assert texts of ``MambaMixer`` / ``MambaStack`` in the
installed source, and the planner never proposing a refused strategy."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat import ModelSpec, Strategy, StrategyError
from parastrat.checks import divisors
from tests.test_hybrid_model import NANO3, NH8, NH56, P8

#: Bridge's NemotronHModelProvider4B: 112 Mamba heads, 8 groups.
NH4 = NH8.with_(name="nemotron-h-4b-test", hidden_size=3072, mamba_num_heads=112)


def _errors(s: Strategy, model: ModelSpec, **kw) -> set[str]:
    return {v.rule for v in s.check(model, **kw) if v.severity == "error"}


def _source(rel: str) -> str:
    import megatron.core

    return (Path(megatron.core.__file__).parent / rel).read_text()


def test_mixer_tp_rules_follow_mambamixer_asserts():
    """MambaMixer asserts ``nheads % tp_size == 0`` and ``ngroups % tp_size == 0`` (text
    checked in the installed source); the rules refuse exactly those degrees, with numbers."""
    src = _source("ssm/mamba_mixer.py")
    assert "assert self.nheads % tp_size == 0" in src
    assert "assert self.ngroups % tp_size == 0" in src
    v = {x.rule: x for x in Strategy(tp=32, sp=True).check(NH4)}
    assert "32 does not divide the 112 Mamba heads" in v["mamba-heads-tp"].message
    assert "32 does not divide the 8 Mamba groups" in v["mamba-groups-tp"].message
    for tp in (1, 2, 4, 8, 16, 32):
        got = _errors(Strategy(tp=tp, sp=tp > 1), NH4)
        assert ("mamba-heads-tp" in got) == bool(112 % tp)
        assert ("mamba-groups-tp" in got) == bool(8 % tp)


def test_mixer_tp_fix_works():
    """Every tp the hint names clears both mixer rules."""
    (hint,) = {v.hint for v in Strategy(tp=32, sp=True).check(NH4) if v.rule.startswith("mamba")}
    for tp in map(int, re.findall(r"\d+", hint)):
        assert not {"mamba-heads-tp", "mamba-groups-tp"} & _errors(Strategy(tp=tp), NH4)


def _cp_asserts(model: ModelSpec, tp: int, cp: int) -> bool:
    """Whether the real ``MambaContextParallel.__init__`` asserts for (tp, cp)."""
    from megatron.core.ssm.mamba_context_parallel import MambaContextParallel

    group = SimpleNamespace(size=lambda: cp, rank=lambda: 0)
    try:
        MambaContextParallel(
            cp_group=group,
            d_inner_local_tp=model.mamba_d_inner // tp,
            nheads_local_tp=model.mamba_heads // tp,
            ngroups_local_tp=model.mamba_num_groups // tp,
            d_state=model.mamba_state_dim,
            conv1d_cp1=None,
            dt_bias_cp1=None,
            A_log_cp1=None,
            D_cp1=None,
            D_has_hdim=False,
        )
    except AssertionError:
        return True
    return False


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from([NH56, NH8, NH4, NANO3]),
    tp=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([2, 3, 4, 8, 16, 32, 64]),
)
def test_mamba_cp_rule_is_mambacontextparallels_asserts(model, tp, cp):
    """Rule ``mamba-cp`` fires exactly when Megatron Core's MambaContextParallel asserts."""
    if model.mamba_heads % tp or model.mamba_num_groups % tp:
        return  # the mixer's TP asserts come first
    s = Strategy(tp=tp, ring=cp, sp=tp > 1)
    assert ("mamba-cp" in _errors(s, model)) == _cp_asserts(model, tp, cp)


def test_mamba_cp_fix_works():
    """Every cp the hint names builds in MambaContextParallel and clears the rule."""
    (v,) = [v for v in Strategy(tp=8, ring=3, sp=True).check(NH56) if v.rule == "mamba-cp"]
    assert "cp=3" in v.message
    cps = [int(c) for c in re.findall(r"\d+", v.hint)]
    assert cps and all(not _cp_asserts(NH56, 8, c) for c in cps)
    assert all("mamba-cp" not in _errors(Strategy(tp=8, ring=c, sp=True), NH56) for c in cps)


def test_stack_rules_vpp_layout_accounting_mtp():
    """MambaStack: no VPP (its assert), no layout / account_for_* (it ignores them), and
    MambaModel builds no MTP; each fix clears its rule."""
    assert "virtual/interleaved pipeline parallelism" in _source("ssm/mamba_block.py")
    assert "mtp" not in _source("models/mamba/mamba_model.py").lower()
    assert "hybrid-vpp" in _errors(Strategy(pp=2, vpp=2), NH8)
    assert "hybrid-vpp" not in _errors(Strategy(pp=2), NH8)
    assert "hybrid-pipeline-layout" in _errors(Strategy(pp=2, pipeline_layout="Et*26|t*26L"), NH8)
    acc = Strategy(pp=4, account_for_embedding=True, account_for_loss=True)
    assert "hybrid-pipeline-accounting" in _errors(acc, NH56)
    fix = Strategy(pp=4, first_stage_layers=28, last_stage_layers=30)
    assert not _errors(fix, NH56)
    assert "hybrid-mtp" in _errors(Strategy(), NH8.with_(mtp_num_layers=1))


def test_gpt_models_are_untouched_by_hybrid_rules():
    """A GPT spec never sees a hybrid rule."""
    gpt = ps.models.get("llama3-8b")
    rules = {v.rule for v in Strategy(tp=16, pp=2, vpp=2, ring=2).check(gpt)}
    assert not {r for r in rules if r.startswith(("mamba-", "hybrid-"))}


#: A mixer whose in_proj width is not a multiple of 16: 2 x 6400 + 2 x 4 x 128 + 100 = 13924.
ODD = NH8.with_(name="odd-mixer", mamba_num_heads=100, mamba_num_groups=4)


def test_fp8_in_proj_width_and_full_recompute_are_refused_with_working_fixes():
    """MambaMixer's FP8 assert (text in the installed source) and MambaStack's missing
    full recompute are refused by estimate_step / estimate_memory / plan; the fixes price."""
    assert "must be a multiple of 16" in _source("ssm/mamba_mixer.py")
    assert "recompute" not in _source("ssm/mamba_block.py")
    cl = ps.Cluster("h100", num_devices=8)
    s = Strategy(tp=4, sp=True)
    kw = dict(seq_len=4096, global_batch_size=16, micro_batch_size=1)
    assert ODD.mamba_in_proj_width == 13924
    with pytest.raises(StrategyError, match=r"mamba-fp8-in-proj.*13924"):
        ps.estimate_step(ODD, s, cl, precision="fp8", **kw)
    with pytest.raises(StrategyError, match="mamba-fp8-in-proj"):
        ps.plan(ODD, cl, precision="fp8", seq_len=4096, global_batch_size=16)
    assert ps.estimate_step(ODD, s, cl, precision="bf16", **kw).step_time_s > 0
    assert ps.estimate_step(NH8, s, cl, precision="fp8", **kw).step_time_s > 0  # 18560 % 16 == 0
    with pytest.raises(StrategyError, match="hybrid-full-recompute"):
        ps.estimate_step(NH8, s, cl, recompute="full", **kw)
    with pytest.raises(StrategyError, match="hybrid-full-recompute"):
        ps.estimate_memory(NH8, s.with_world_size(8), recompute="full", **kw)
    assert ps.estimate_memory(NH8, s.with_world_size(8), recompute="selective", **kw).peak_bytes > 0


def test_plan_proposes_only_what_the_rules_allow():
    """plan() on 64 H100 for the 56B spec: every ranked candidate passes every rule, has no
    VPP, no layout / account_for_*, no full recompute, and a TP / CP MambaMixer accepts."""
    cl = ps.Cluster("h100", num_devices=64)
    result = ps.plan(NH56, cl, seq_len=8192, global_batch_size=768, top_k=10)
    assert result.candidates
    for c in result.candidates:
        s = c.strategy
        assert not _errors(s, NH56, world_size=64, seq_len=8192, global_batch_size=768)
        assert s.vpp == 1 and s.pipeline_layout is None
        assert not (s.account_for_embedding or s.account_for_loss)
        assert c.recompute in ("none", "selective")
        assert 256 % s.tp == 0 and 8 % s.tp == 0 and not _cp_asserts(NH56, s.tp, s.cp)


def test_pattern_helpers_agree():
    """The 8B pattern used here is Bridge's NemotronHModelProvider8B's."""
    assert NH8.hybrid_override_pattern == P8
    assert divisors(NH8.mamba_heads)[-1] == 128


@settings(max_examples=8, deadline=None)
@given(
    model=st.sampled_from([NH8, NH4, NANO3]),
    devices=st.sampled_from([8, 16, 32, 64]),
    seq=st.sampled_from([4096, 8192, 32768]),
)
def test_plan_never_proposes_a_refused_strategy(model, devices, seq):
    """For hybrid shapes, device counts and sequence lengths drawn at random, every strategy
    plan() ranks passes every rule (the hybrid ones included) and every asserting
    MambaContextParallel split is absent."""
    gbs = 4 * devices
    result = ps.plan(model, ps.Cluster("h100", num_devices=devices), seq_len=seq,
                     global_batch_size=gbs, top_k=5)  # fmt: skip
    for c in result.candidates:
        s = c.strategy
        assert not _errors(s, model, world_size=devices, seq_len=seq, global_batch_size=gbs)
        assert c.recompute != "full" and s.vpp == 1
        assert not _cp_asserts(model, s.tp, s.cp)


def test_no_interleaving_advice_for_hybrids():
    """MambaStack refuses a virtual pipeline (hybrid-vpp), so the soft rule that advises one
    (pp-without-vpp) is not given for a hybrid; a GPT still gets it."""
    import parastrat as ps

    hybrid = ps.models.get("nemotron-h-56b")
    s = ps.Strategy(tp=8, pp=4).with_world_size(64)
    assert "pp-without-vpp" not in {v.rule for v in s.check(model=hybrid)}
    gpt = ps.models.get("llama3-70b")
    assert "pp-without-vpp" in {v.rule for v in s.check(model=gpt)}


def test_a_hybrid_moe_runs_no_combined_1f1b_and_no_mlp_graph():
    """megatron-core's combined 1F1B asserts a GPTModel (a hybrid is a MambaModel), and its
    TransformerConfig refuses an mlp CUDA graph when moe_layer_freq (1 on a hybrid) marks no
    dense layer: the plan prices combined 1F1B off, never advises it, writes it off, and
    refuses the mlp graph."""
    from parastrat.adapters import megatron as mg
    from parastrat.errors import StrategyError, UsageError

    nano, cluster = ps.models.get("nemotron-3-nano"), ps.Cluster("h100", 16)
    kw = dict(seq_len=8192, global_batch_size=64, top_k=1)
    plan = ps.plan(nano, cluster, moe_a2a_overlap=True, **kw)
    if plan.best.strategy.ep > 1:
        assert any("GPTModel" in n for n in plan.best.notes)
    assert "comm_overlap.overlap_moe_expert_parallel_comm=true" not in mg.to_overrides(plan)
    from parastrat.planner.explain import choice_advice

    advice = choice_advice(ps.plan(nano, cluster, **kw))
    assert all("moe_a2a_overlap" not in a.change for a in advice)
    with pytest.raises((StrategyError, UsageError), match="mlp"):
        ps.plan(nano, cluster, cuda_graphs="attn,mlp", **kw)


def test_a_pinned_vpp_on_a_hybrid_is_told_vpp_1(capsys):
    """The fix of a pinned --vpp on a hybrid is vpp=1, not a pp that hybrid-vpp then refuses."""
    from parastrat.cli import main

    assert main(["plan", "--model", "nemotron-h-8b", "--gpus", "16", "--vpp", "2"]) == 2
    err = capsys.readouterr().err
    assert "use vpp=1" in err and "set pp >= 2" not in err
