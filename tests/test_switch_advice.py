"""What the implementation switches would buy a strategy (``planner.advice``), and how
``explain`` writes it: priced by the same model, only above its resolution, and as flags the
CLI reads back."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

import parastrat as ps
from parastrat.cli import build_parser, main
from parastrat.cli._common import switch_flags, switches_from_args
from parastrat.planner.advice import switch_advice
from parastrat.planner.price import price
from parastrat.planner.ranking import RANK_TIE
from parastrat.spec.workload import Switches, Workload

QWEN30 = ps.models.get("qwen3-30b-a3b")
LLAMA70 = ps.models.get("llama3-70b")


def _qwen(precision="mxfp8"):
    wl = Workload(
        model=QWEN30, seq_len=4096, global_batch_size=512, micro_batch_size=1, precision=precision
    )
    return wl, ps.Strategy(ep=8).with_world_size(8), ps.Cluster(accelerator="b200", num_devices=8)


def test_each_change_is_priced_by_the_same_model_and_ranked():
    wl, s, cluster = _qwen()
    sw = Switches(recompute="none")
    advice = switch_advice(wl, s, cluster, sw)
    changes = [a.change for a in advice]
    # an eager alltoall MoE run on EP 8: combined 1F1B and the flex dispatcher both pay
    assert {"moe_a2a_overlap": True} in changes and {"moe_dispatcher": "flex"} in changes
    _, now, _ = price(wl, s, cluster, sw)
    for a in advice:
        _, again, _ = price(wl, s, cluster, replace(sw, **a.change))
        assert a.step.step_time_s == again.step_time_s
        assert a.gain == pytest.approx(1 - again.step_time_s / now.step_time_s)
        assert a.gain > RANK_TIE
    assert [a.gain for a in advice] == sorted((a.gain for a in advice), reverse=True)


def test_nothing_left_to_advise_once_the_switches_are_on():
    wl, s, cluster = _qwen()
    on = Switches(recompute="none", moe_a2a_overlap=True, moe_dispatcher="flex")
    changes = [a.change for a in switch_advice(wl, s, cluster, on)]
    assert {"moe_a2a_overlap": True} not in changes and {"moe_dispatcher": "flex"} not in changes


def test_combined_1f1b_is_not_advised_beside_graphs_megatron_refuses_it_with():
    """Whole-iteration graphs and combined 1F1B do not start together on Megatron Core 0.16
    (``apply`` refuses the pair, rule megatron-graphs-a2a): advised beside TE scopes only."""
    from parastrat.planner.advice import candidate_changes

    wl, s, cluster = _qwen()
    for graphs, advised in (("full_iteration", False), ("attn,moe_router,moe_preprocess", True)):
        sw = Switches(recompute="none", cuda_graphs=graphs)
        current = price(wl, s, cluster, sw)[1]
        changes = candidate_changes(wl, s, sw, current)
        assert any(c.get("moe_a2a_overlap") for c in changes) is advised


def test_tp_overlap_offered_when_off_but_not_at_nvfp4():
    cluster = ps.Cluster(accelerator="b200", num_devices=64)
    s = ps.Strategy(tp=4, pp=8, vpp=5, sp=True).with_world_size(64)
    off = Switches(recompute="none", tp_comm_overlap=False)
    wl = Workload(
        model=LLAMA70, seq_len=8192, global_batch_size=128, micro_batch_size=1, precision="fp8"
    )
    assert {"tp_comm_overlap": True} in [a.change for a in switch_advice(wl, s, cluster, off)]
    fp4 = Workload(
        model=LLAMA70, seq_len=8192, global_batch_size=128, micro_batch_size=1, precision="nvfp4"
    )
    assert all("tp_comm_overlap" not in a.change for a in switch_advice(fp4, s, cluster, off))


def test_no_cuda_switches_advised_off_nvidia():
    wl, s, b200 = _qwen("bf16")
    ascend = ps.Cluster(accelerator="ascend-910b", num_devices=8)
    assert switch_advice(wl, s, b200, Switches()) != []  # the same run on B200 has some
    assert switch_advice(wl, s, ascend, Switches()) == []


@pytest.mark.parametrize(
    "change, words",
    [
        ({"cuda_graphs": frozenset({"attn", "mlp"})}, "--cuda-graphs attn,mlp"),
        ({"tp_comm_overlap": True}, "--tp-comm-overlap"),
        ({"tp_comm_overlap": False}, "--no-tp-comm-overlap"),
        ({"moe_dispatcher": "flex"}, "--moe-dispatcher flex"),
        ({"moe_a2a_overlap": True}, "--moe-a2a-overlap"),
        ({"overlap_grad_reduce": True}, "without --no-overlap-grad-reduce"),
        ({"overlap_grad_reduce": False}, "--no-overlap-grad-reduce"),
    ],
)
def test_changes_are_written_as_the_cli_flags(change, words):
    assert switch_flags(change) == words
    if not words.startswith("without"):  # the flags parse back to the same switch values
        base = "explain --model qwen3-30b-a3b --gpus 8 --ep 8 "
        args = build_parser().parse_args(shlex.split(base + words))
        got = switches_from_args(args)
        assert {k: getattr(got, k) for k in change} == change


def _cli(capsys, command: str) -> str:
    """stdout of the CLI run with ``command`` (exit status 0 checked)."""
    assert main(shlex.split(command)) == 0
    return capsys.readouterr().out


def test_explain_lists_the_advice_as_flags_and_in_json(capsys):
    explain = (
        "explain --model qwen3-30b-a3b --gpus 8 --accelerator b200 --seq-len 4096 "
        "--global-batch-size 512 --precision mxfp8 --strategy 'TP1 PP1 CP1 EP8 DP8'"
    )
    out = _cli(capsys, explain)
    assert "switches that would shorten this step" in out
    assert "--moe-a2a-overlap: step" in out and "moe_a2a_overlap=" not in out
    doc = json.loads(_cli(capsys, explain + " --format json"))
    assert doc["switch_advice"][0]["set"] == {"moe_a2a_overlap": True}
    assert 0 < doc["switch_advice"][0]["step_time_s"] < doc["step"]["step_time_s"]


def test_plan_names_the_switches_that_would_shorten_its_choice(capsys):
    cluster = ps.Cluster(accelerator="h100", num_devices=16)
    kw = dict(seq_len=4096, global_batch_size=512, precision="fp8", top_k=3)
    plan = ps.plan(QWEN30, cluster, Switches(), **kw)
    line = next(x for x in plan.explain().splitlines() if "would shorten it" in x)
    assert "moe_a2a_overlap=True -" in line  # Python keywords by default
    # with the advised switches on, the plan has nothing left to advise for those
    on = ps.plan(QWEN30, cluster, Switches(moe_a2a_overlap=True, moe_dispatcher="flex"), **kw)
    assert "moe_a2a_overlap" not in on.explain() and "moe_dispatcher" not in on.explain()
    out = _cli(
        capsys,
        "plan --model qwen3-30b-a3b --gpus 16 --accelerator h100 --seq-len 4096 "
        "--global-batch-size 512 --precision fp8 --top-k 3",
    )
    assert "switches that would shorten it: --moe-a2a-overlap -" in out


def test_plan_json_carries_the_choice_advice(capsys):
    doc = json.loads(
        _cli(
            capsys,
            "plan --model qwen3-30b-a3b --gpus 16 --accelerator h100 --seq-len 4096 "
            "--global-batch-size 512 --precision fp8 --top-k 1 --format json",
        )
    )
    sets = [a["set"] for a in doc["switch_advice"]]
    assert {"moe_a2a_overlap": True} in sets
    choice = doc["candidates"][0]["step"]["step_time_s"]
    assert all(a["step_time_s"] < choice for a in doc["switch_advice"])
