"""The typed values (Workload, Switches, SearchSpace) and the one memo per workload."""

import argparse
import dataclasses
import inspect

import pytest

import parastrat as ps
from parastrat.cli import build_parser
from parastrat.errors import SpecError, UsageError
from parastrat.estimate.memory import estimate_memory
from parastrat.estimate.step import StepModel, estimate_step
from parastrat.planner.compare import compare
from parastrat.planner.search import plan
from parastrat.spec.workload import (
    SWITCH_FIELDS,
    WORKLOAD_FIELDS,
    Mechanisms,
    SearchSpace,
    Switches,
    Workload,
    parse_ablation,
)

LLAMA8 = ps.models.get("llama3-8b")
H100_8 = ps.Cluster("h100", num_devices=8)


def test_values_are_checked_at_construction():
    w = Workload(model="llama3-8b", seq_len=4096, global_batch_size=64, precision="FP8-CS")
    assert w.model is LLAMA8 and w.precision == "fp8" and w.mbs == 1
    with pytest.raises(UsageError, match="seq_len"):
        Workload(model=LLAMA8, seq_len=0)
    with pytest.raises(UsageError, match="micro_batch_size"):
        Workload(model=LLAMA8, seq_len=8, micro_batch_size=True)
    with pytest.raises(SpecError, match="precision"):
        Workload(model=LLAMA8, seq_len=8, precision="int4")
    with pytest.raises(TypeError):
        Workload(LLAMA8, 4096)  # keyword-only
    sw = Switches(recompute="OFF", cuda_graphs="attn, moe-router", moe_dispatcher="deepep")
    assert (sw.recompute, sw.moe_dispatcher) == ("none", "deepep")  # the backend kept (flex)
    assert sw.cuda_graphs == {"attn", "moe_router"}
    with pytest.raises(UsageError, match="flash_attention"):
        Switches(flash_attention="no")
    with pytest.raises(UsageError, match="dispatcher"):
        Switches(moe_dispatcher="nccl")
    space = SearchSpace(tp=4, pp=[8, 2, 8], recompute="full", max_vpp=4)
    assert (space.tp, space.pp, space.modes) == ((4,), (2, 8), ["full"])
    assert space.options("vpp", range(1, 9)) == [1, 2, 3, 4]
    with pytest.raises(UsageError, match="headroom"):
        SearchSpace(headroom=1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.tp = (8,)  # type: ignore[misc]


def test_every_step_switch_reaches_plan_compare_and_the_cli():
    """Every keyword switch of estimate_step is a Switches field, which plan, compare and the
    plan/explain commands accept (nobody can be left unable to plan with one)."""
    not_switches = {"model", "strategy", "cluster", "switches", "validate", "workload"}
    not_switches |= set(WORKLOAD_FIELDS) | {"other_bytes", "fragmentation"}
    for fn in (estimate_step, estimate_memory):
        keywords = set(inspect.signature(fn).parameters) - not_switches
        assert keywords and keywords <= set(SWITCH_FIELDS), keywords - set(SWITCH_FIELDS)
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("plan", "explain"):
        dests = {a.dest for a in sub[command]._actions if isinstance(a, argparse.Action)}
        assert set(SWITCH_FIELDS) <= dests, set(SWITCH_FIELDS) - dests
    memory_dests = {a.dest for a in sub["memory"]._actions}
    assert {"flash_attention", "distributed_optimizer", "fp8_param_gather"} <= memory_dests


def test_keyword_and_typed_forms_agree():
    s = ps.Strategy(tp=2, sp=True).with_world_size(8)
    w = Workload(model=LLAMA8, seq_len=4096, global_batch_size=64, micro_batch_size=2)
    sw = Switches(recompute="full", flash_attention=False, overlap_grad_reduce=False)
    kw = dict(seq_len=4096, global_batch_size=64, micro_batch_size=2)
    sw_kw = dict(recompute="full", flash_attention=False, overlap_grad_reduce=False)
    assert estimate_step(w, s, H100_8, sw) == estimate_step(LLAMA8, s, H100_8, **kw, **sw_kw)
    typed = estimate_memory(w, s, sw)
    assert typed == estimate_memory(LLAMA8, s, **kw, recompute="full", flash_attention=False)
    with pytest.raises(UsageError, match="not both"):
        estimate_step(w, s, H100_8, seq_len=2048)
    with pytest.raises(UsageError, match="not both"):
        estimate_step(w, s, H100_8, sw, recompute="none")


def test_plan_prices_with_the_switches_it_is_given():
    """flash_attention=False and overlap_grad_reduce=False were out of plan's reach; now every
    candidate is priced with them, as estimate_step prices the same strategy."""
    kw = dict(seq_len=4096, global_batch_size=32, top_k=1)
    off = plan(LLAMA8, H100_8, flash_attention=False, overlap_grad_reduce=False, **kw)
    on = plan(LLAMA8, H100_8, **kw)
    assert off.switches.flash_attention is False and off.switches.overlap_grad_reduce is False
    best = off.best
    again = estimate_step(
        LLAMA8,
        best.strategy,
        H100_8,
        seq_len=4096,
        global_batch_size=32,
        micro_batch_size=best.micro_batch_size,
        recompute=best.recompute,
        flash_attention=False,
        overlap_grad_reduce=False,
    )
    assert again.step_time_s == pytest.approx(best.step.step_time_s, rel=1e-12)
    assert off.best.step.step_time_s > on.best.step.step_time_s
    typed = plan(
        Workload(model=LLAMA8, seq_len=4096, global_batch_size=32),
        H100_8,
        Switches(flash_attention=False, overlap_grad_reduce=False),
        SearchSpace(),
        top_k=1,
    )
    assert typed.best.label() == off.best.label()
    with pytest.raises(UsageError, match="unknown argument"):
        plan(LLAMA8, H100_8, flash_atention=False, **kw)
    with pytest.raises(UsageError, match="give it once"):
        plan(
            Workload(model=LLAMA8, seq_len=4096, global_batch_size=32, micro_batch_size=2),
            H100_8,
            search=SearchSpace(micro_batch_size=4),
        )


def test_compare_takes_the_typed_values():
    w = Workload(model=LLAMA8, seq_len=4096, global_batch_size=64)
    c = compare("tp=2,sp", "tp=4,sp", cluster=H100_8, workload=w, switches=Switches())
    k = compare(
        "tp=2,sp", "tp=4,sp", cluster=H100_8, model=LLAMA8, seq_len=4096, global_batch_size=64
    )
    assert c.step == k.step and c.memory == k.memory
    with pytest.raises(UsageError, match="from_config"):
        compare(object(), "tp=2", cluster=H100_8, workload=w)


def test_a_memo_cannot_serve_another_workload():
    """Issue 13: a caller-owned memo built at seq 2048 / micro-batch 2 and reused at 4096 / 1
    returned 2.734 s instead of 2.888 s (Llama 3 8B, TP2 SP, 8 H100, global batch 64).  The
    memo now belongs to a StepModel built for one workload, which it keeps read-only; a
    micro-batch size (what one StepModel varies) is part of every key."""
    s = ps.Strategy(tp=2, sp=True).with_world_size(8)
    # the issue's figure was priced before issue 15's kernel mechanisms: switch them off
    then = Switches(mechanisms=parse_ablation("all"))
    before = estimate_step(LLAMA8, s, H100_8, then, seq_len=4096, global_batch_size=64)
    assert before.step_time_s == pytest.approx(2.888, abs=0.005)
    fresh = estimate_step(LLAMA8, s, H100_8, seq_len=4096, global_batch_size=64)
    assert fresh.step_time_s != before.step_time_s  # another Switches, another memo
    short = StepModel(
        H100_8,
        Workload(model=LLAMA8, seq_len=2048, global_batch_size=64, micro_batch_size=2),
        Switches(),
    )
    short.price(s)  # fill its memo at 2048 / 2
    with pytest.raises(AttributeError):
        short.workload = Workload(model=LLAMA8, seq_len=4096)  # type: ignore[misc]
    # the same object at another micro-batch size: keyed apart, equal to a fresh estimate
    one = estimate_step(LLAMA8, s, H100_8, seq_len=2048, global_batch_size=64)
    assert short.price(s, micro_batch_size=1).step_time_s == one.step_time_s
    # the module-level memos are keyed by everything: a plan at 2048 / 2 changes nothing
    plan(LLAMA8, H100_8, seq_len=2048, global_batch_size=64, micro_batch_size=2, top_k=1)
    again = estimate_step(LLAMA8, s, H100_8, seq_len=4096, global_batch_size=64)
    assert again.step_time_s == fresh.step_time_s


def test_cli_switch_flags_change_what_is_priced(capsys):
    """--no-flash-attention, --no-overlap-grad-reduce and --no-distributed-optimizer reach the
    step and memory models through the typed values, as the library's keywords do."""
    import json

    from parastrat.cli import main

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--sp"]
    base += ["--seq-len", "4096", "--global-batch-size", "64", "--format", "json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    flags = ["--no-flash-attention", "--no-overlap-grad-reduce", "--no-distributed-optimizer"]
    assert main([*base, *flags]) == 0
    off = json.loads(capsys.readouterr().out)
    s = ps.Strategy(tp=2, sp=True).with_world_size(8)
    kw = dict(seq_len=4096, global_batch_size=64, flash_attention=False, recompute="none")
    kw.update(overlap_grad_reduce=False, distributed_optimizer=False)  # the CLI's defaults
    assert off["step"]["step_time_s"] == estimate_step(LLAMA8, s, H100_8, **kw).step_time_s
    assert off["step"]["step_time_s"] > plain["step"]["step_time_s"]
    assert off["memory"]["peak_bytes"] > plain["memory"]["peak_bytes"]
    assert not off["memory"]["distributed_optimizer"]


def test_mechanisms_are_a_typed_switch_value_not_a_keyword():
    """The cost model's kernel mechanisms travel inside Switches (so every StepModel memo is
    keyed by them), are checked at construction, and are neither a keyword switch nor part of
    the JSON keyword form."""
    assert "mechanisms" not in SWITCH_FIELDS
    off = parse_ablation("shape,imbalance")
    sw = Switches(mechanisms=off)
    assert (sw.mechanisms.shape, sw.mechanisms.imbalance, sw.mechanisms.fp8) == (False, False, True)
    assert "mechanisms" not in sw.to_kwargs()
    assert Switches(mechanisms=off) == sw and Switches() != sw
    with pytest.raises(UsageError, match="capacity_factor"):
        Mechanisms(capacity_factor=True)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="shape"):
        Mechanisms(shape=1)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="tiles"):
        parse_ablation("tiles")
    # a step priced with mechanisms off differs from the default one and neither leaks
    s = ps.Strategy(tp=2, sp=True).with_world_size(8)
    kw = dict(seq_len=4096, global_batch_size=64)
    on = estimate_step(LLAMA8, s, H100_8, **kw)
    ablated = estimate_step(LLAMA8, s, H100_8, Switches(mechanisms=parse_ablation("all")), **kw)
    assert ablated.step_time_s != on.step_time_s
    assert estimate_step(LLAMA8, s, H100_8, **kw) == on


def test_fp8_recipe_follows_the_spelling_and_is_priced():
    """``fp8-ds`` / ``fp8-delayed`` and ``fp8-blockwise`` keep their recipe through the
    canonical precision, and the step model prices it: on H100 current scaling (amax pass +
    cast + transpose, 6 B per operand element, and its TP amax all-reduces) costs more than
    delayed scaling (4 B, no amax pass)."""
    import parastrat as ps
    from parastrat.errors import SpecError
    from parastrat.estimate.fp8 import cast_bytes_per_element
    from parastrat.estimate.step import estimate_step
    from parastrat.spec.workload import Workload

    m = ps.models.get("llama3-70b")
    assert Workload(model=m, seq_len=4096, precision="fp8").fp8_recipe == "current"
    assert Workload(model=m, seq_len=4096, precision="FP8-CS").fp8_recipe == "current"
    assert Workload(model=m, seq_len=4096, precision="fp8-ds").fp8_recipe == "delayed"
    assert Workload(model=m, seq_len=4096, precision="fp8_delayed").fp8_recipe == "delayed"
    assert Workload(model=m, seq_len=4096, precision="fp8-blockwise").fp8_recipe == "blockwise"
    assert Workload(model=m, seq_len=4096, precision="mxfp8").fp8_recipe == "mxfp8"
    assert Workload(model=m, seq_len=4096).fp8_recipe is None
    wl = Workload(model=m, seq_len=4096, precision="fp8", fp8_recipe="delayed")
    assert wl.precision == "fp8" and wl.fp8_recipe == "delayed"
    with pytest.raises(SpecError, match="does not apply to precision 'bf16'"):
        Workload(model=m, seq_len=4096, fp8_recipe="delayed")
    with pytest.raises(SpecError, match="current, delayed, blockwise"):
        Workload(model=m, seq_len=4096, precision="fp8", fp8_recipe="tensorwise")

    def step(precision):
        return estimate_step(
            m,
            ps.Strategy(tp=4, pp=2, sp=True).with_world_size(64),
            ps.Cluster("h100", num_devices=64),
            seq_len=4096,
            global_batch_size=256,
            precision=precision,
        )

    cs, ds = step("fp8-cs"), step("fp8-delayed")
    assert cast_bytes_per_element("current", "hopper") > cast_bytes_per_element("delayed", "hopper")
    assert ds.step_time_s < cs.step_time_s
    assert ds.breakdown["compute"] < cs.breakdown["compute"]
    assert ds.breakdown["tp_exposed"] < cs.breakdown["tp_exposed"]  # no amax all-reduces
    assert step("fp8").step_time_s == pytest.approx(cs.step_time_s)
    assert (ds.fp8_recipe, cs.fp8_recipe) == ("delayed", "current")
    assert ds.to_dict()["fp8_recipe"] == "delayed"
    from parastrat.planner.explain import explain_strategy

    text = explain_strategy(
        m,
        ps.Strategy(tp=4, pp=2, sp=True).with_world_size(64),
        ps.Cluster("h100", num_devices=64),
        seq_len=4096,
        global_batch_size=256,
        precision="fp8-ds",
    )
    assert "fp8 (delayed scaling) on 64 x h100" in text.splitlines()[0]
