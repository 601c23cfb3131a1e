"""A strategy read back from the text it prints, and from ``key=value`` pairs."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import StrategyError, UsageError
from parastrat.planner.compare import as_strategy
from parastrat.strategy_text import parse_strategy


def _round_trip(s: ps.Strategy) -> None:
    back = ps.Strategy.parse(str(s))
    assert str(back) == str(s)
    # the text holds every degree; whether a serving order was chosen or derived from the
    # degrees it cannot say (it reads back as derived), the dict can
    assert {**back.to_dict(), "order_given": None} == {**s.to_dict(), "order_given": None}
    assert back.kind == s.kind
    assert s.to_dict()["text"] == str(s)  # JSON carries the text; from_dict ignores it
    again = ps.Strategy.from_dict(s.to_dict())
    assert again == s and again.order_given == s.order_given


def _plan_strategies(plan) -> list[ps.Strategy]:
    out = []
    for c in plan.ranked:
        out.append(c.strategy)
        out.extend(a.strategy for a in c.alternatives)
    return out


@pytest.mark.parametrize(
    "model, accel, n, kw",
    [
        ("llama3-70b", "h100", 64, {"seq_len": 8192, "global_batch_size": 256}),
        ("llama3.1-405b", "gb200", 256, {"seq_len": 8192, "global_batch_size": 1536}),
        ("deepseek-v3", "gb200", 256, {"seq_len": 4096, "global_batch_size": 4096}),
        ("qwen3-30b-a3b", "h100", 16, {"seq_len": 4096, "global_batch_size": 1024}),
    ],
)
def test_every_planned_strategy_reads_back(model, accel, n, kw):
    """What plan's table prints (custom pipeline layouts, uneven splits, the +emb/+loss
    accounting, Ulysses / ring CP) is a strategy the text form gives back exactly."""
    plan = ps.plan(model, ps.Cluster(accel, num_devices=n), top_k=10, **kw)
    strategies = _plan_strategies(plan)
    assert len(strategies) >= 10
    for s in strategies:
        _round_trip(s)


def test_serving_plans_read_back():
    """A diffusion-serving grid prints U, R and CFG and keeps xDiT's rank order."""
    plan = ps.plan_dit(
        "flux.1-dev", ps.Cluster("h100", num_devices=8), height=1024, width=1024, steps=28
    )
    assert plan.candidates
    for c in plan.candidates:
        _round_trip(c.strategy)
        assert ps.Strategy.parse(str(c.strategy)).is_inference


_DEGREES = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    tp=_DEGREES,
    pp=_DEGREES,
    vpp=st.sampled_from([1, 2, 3]),
    ulysses=st.sampled_from([1, 2]),
    ring=st.sampled_from([1, 2]),
    ep=_DEGREES,
    dp=st.sampled_from([None, 1, 2, 8]),
    sp=st.booleans(),
    fsdp=st.sampled_from([None, "optim", "optim_grads_params"]),
    uneven=st.sampled_from([None, (3, None), (None, 2), (3, 2)]),
    accounting=st.sampled_from([(False, False), (True, False), (True, True)]),
)
def test_any_training_strategy_reads_back(
    tp, pp, vpp, ulysses, ring, ep, dp, sp, fsdp, uneven, accounting
):
    first, last = uneven or (None, None)
    try:
        s = ps.Strategy(
            tp=tp,
            pp=pp,
            vpp=vpp,
            ulysses=ulysses,
            ring=ring,
            ep=ep,
            dp=dp,
            sp=sp,
            fsdp=fsdp,
            order="tp-cp-ep-dp-pp",
            first_stage_layers=first,
            last_stage_layers=last,
            account_for_embedding=accounting[0],
            account_for_loss=accounting[1],
        )
    except StrategyError:
        return
    _round_trip(s)


def test_pairs_and_printed_form_agree():
    printed = ps.Strategy.parse("TP2 PP8(VP4)[Et|(t*2|)*30mL] CP1 EP64 ETP1 DP64 SP")
    pairs = parse_strategy("tp=2,pp=8,vpp=4,ep=64,dp=64,sp,pipeline_layout=Et|(t*2|)*30mL")
    assert printed == pairs
    assert as_strategy(str(printed)) == printed


@pytest.mark.parametrize(
    "text, names",
    [
        ("", "empty strategy"),
        ("TP2 PPx", "'PPx'"),
        ("TP2 PP4 CP1 GPUS8", "'GPUS8'"),
        ("TP2 PP4[] CP1", r"'PP4\[\]'"),
        ("tq=4", "unknown strategy field 'tq'"),
        ("tp=four", "not a whole number"),
    ],
)
def test_unreadable_text_names_the_token(text, names):
    with pytest.raises(UsageError, match=names):
        ps.Strategy.parse(text)


def test_printed_strategy_breaking_a_rule_names_the_rule():
    with pytest.raises(StrategyError) as err:
        ps.Strategy.parse("TP4 PP2 CP1 DP2 EP3")
    assert err.value.violations


# ---- the CLI: a plan's printed candidate pasted back with --strategy / --pipeline-layout ----
def test_plan_candidate_pastes_into_explain_and_check(capsys):
    """The strategy column of ``plan --format json`` goes back into ``explain --strategy`` and
    ``check --strategy`` and is priced as the plan priced it."""
    import json

    from parastrat.cli import main

    target = ["--model", "deepseek-v3", "--gpus", "256", "--accelerator", "gb200"]
    batch = ["--seq-len", "4096", "--global-batch-size", "4096"]
    assert main(["plan", *target, *batch, "--format", "json", "--top-k", "3"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    printed = best["strategy"]["text"]
    assert printed == str(ps.Strategy.from_dict(best["strategy"]))
    run = ["--micro-batch-size", str(best["micro_batch_size"]), "--recompute", best["recompute"]]
    assert main(["explain", *target, *batch, *run, "--strategy", printed, "--format", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["step"]["step_time_s"] == pytest.approx(best["step"]["step_time_s"])
    assert main(["check", "--model", "deepseek-v3", "--gpus", "256", "--strategy", printed]) == 0


def test_pipeline_layout_flag_is_the_layout_of_the_strategy(capsys):
    from parastrat.cli import main

    layout = ["--tp", "2", "--pp", "8", "--ep", "64", "--sp", "--pipeline-layout", "Et|(t*2|)*30mL"]
    assert main(["check", "--model", "deepseek-v3", "--gpus", "1024", *layout]) == 0
    assert "PP8(VP4)[Et|(t*2|)*30mL]" in capsys.readouterr().out
    bad = [*layout[:-1], "Et|(t*2|)*29mL"]
    assert main(["check", "--model", "deepseek-v3", "--gpus", "1024", *bad]) == 2
    assert "pipeline-layout-pp" in capsys.readouterr().err


def test_strategy_text_with_degree_flags_is_refused(capsys):
    from parastrat.cli import main

    argv = ["check", "--model", "llama3-8b", "--gpus", "8", "--strategy", "TP2 PP1 CP1 DP4 SP"]
    assert main([*argv, "--pp", "2"]) == 2
    err = capsys.readouterr().err
    assert "drop --pp" in err and "Traceback" not in err
    assert main([*argv, "--fsdp", "optim"]) == 2
    assert "drop --fsdp" in capsys.readouterr().err
    assert main(["check", "--model", "llama3-8b", "--gpus", "8", "--strategy", "TP2 PPQ"]) == 2
    assert "cannot read 'PPQ'" in capsys.readouterr().err


def test_split_hints_name_flags_on_the_cli_and_arguments_in_python(capsys):
    """A broken pipeline split names the fix as the user would type it: ``--pipeline-layout``
    on the command line (check and explain alike), ``pipeline_layout=`` in Python."""
    from parastrat.cli import main

    argv = ["--model", "deepseek-v3", "--gpus", "1024", "--tp", "2", "--pp", "8", "--ep", "64"]
    assert main(["check", *argv]) == 2
    checked = capsys.readouterr().out
    assert main(["explain", *argv]) == 2
    explained = capsys.readouterr().err
    for out in (checked, explained):
        assert "--pipeline-layout '" in out and "--first-stage-layers" in out
        assert "pipeline_layout=" not in out
    with pytest.raises(StrategyError) as err:
        ps.estimate_step(
            "deepseek-v3",
            ps.Strategy(tp=2, pp=8, ep=64),
            ps.Cluster("h100", num_devices=1024),
            seq_len=4096,
            global_batch_size=1024,
        )
    hint = next(v.hint for v in err.value.violations if v.rule == "layers-pp")
    assert "pipeline_layout='" in hint
    layout = hint.split("pipeline_layout='")[1].split("'")[0]
    assert main(["check", *argv, "--pipeline-layout", layout]) == 0


def test_plan_dit_labels_and_single_tokens_read_back():
    """plan-dit prints its splits as "Ulysses4 x TP2" (its table and JSON strategy_str): they
    read back; so do single tokens (EP8, CP2, DP8, FSDP:optim); a plan candidate's run words
    (mbs1 none) are named as what they are, with the flags that set them."""
    from parastrat.planner.dit import label, plan_dit

    video = {"height": 720, "width": 1280, "frames": 81, "steps": 50}
    plan = plan_dit("wan2.1-t2v-14b", ps.Cluster("ascend-910b", 8), top_k=20, **video)
    for c in plan.candidates:
        back = parse_strategy(label(c.strategy))
        assert (back.tp, back.ulysses, back.ring, back.cfg) == (
            c.strategy.tp,
            c.strategy.ulysses,
            c.strategy.ring,
            c.strategy.cfg,
        )
    assert parse_strategy("EP8").ep == 8 and parse_strategy("CP2").cp == 2
    assert parse_strategy("DP8").dp == 8 and parse_strategy("FSDP:optim").fsdp == "optim"
    with pytest.raises(UsageError, match="--micro-batch-size"):
        parse_strategy("TP2 PP2(VP8) CP1 EP4 ETP2 DP4 SP mbs1 none")
