"""The step model's track record: the table is what the benchmarks print today, a model and an
accelerator find their class (or none), and plan / explain show it."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.estimate.track_record import TrackRecord, kind_of, platform_of, records

from ._modules import load_script

GEN = load_script("tools/gen_track_record.py")


def test_the_table_is_what_the_benchmarks_print_today(capsys):
    """A change to the cost model that moves any published run's error must regenerate it."""
    assert GEN.main(["--check"]) == 0, capsys.readouterr().out


def test_every_published_run_is_in_one_class():
    runs = GEN.priced()
    assert sum(r.runs for r in records()) == sum(GEN._key(r) is not None for r in runs)
    assert sum(kind_of(r["spec"]) is None for r in runs if "spec" in r) == 0  # none dropped
    assert len({(r.kind, r.platform) for r in records()}) == len(records())
    assert {r.metric for r in records() if r.kind == "dit"} == {"latency"}


def test_grouping_arithmetic_on_hand_made_runs():
    dense, moe = ps.models.get("llama3-8b"), ps.models.get("qwen3-30b-a3b")
    runs = [
        dict(table="t1", name="a", gpu="h100", err=0.10, spec=dense),
        dict(table="t2", name="b", gpu="b200", err=-0.30, spec=dense),
        dict(table="t1", name="c", gpu="gb200", err=0.20, spec=moe),
        dict(table="t1", name="h", gpu="h100", err=9.0, spec=ps.models.get("nemotron-h-8b")),
    ]
    got = {(r.kind, r.platform): r for r in GEN.records(runs)}
    assert set(got) == {("dense", "x86"), ("moe", "grace")}  # the hybrid run has no class
    x86 = got[("dense", "x86")]
    assert (x86.runs, x86.mape, x86.bias, x86.worst, x86.worst_run) == (2, 0.2, -0.1, -0.3, "b")
    assert x86.accelerators == ("b200", "h100") and x86.tables == ("t1", "t2")
    assert (x86.planned, x86.near_best) == (0, 0)  # no plan compared
    runs[0]["ratio"], runs[1]["ratio"] = 0.95, 0.6
    x86 = {(r.kind, r.platform): r for r in GEN.records(runs)}[("dense", "x86")]
    assert (x86.planned, x86.near_best) == (2, 1)


@pytest.mark.parametrize(
    "preset, accel, kind, platform",
    [
        ("qwen3-30b-a3b", "h100", "moe", "x86"),
        ("llama3-70b", "gb200", "dense", "grace"),
        ("llama3-70b", "ascend-910b", "dense", "ascend"),
    ],
)
def test_a_model_on_an_accelerator_finds_its_class(preset, accel, kind, platform):
    rec = ps.track_record(ps.models.get(preset), accel)
    assert isinstance(rec, TrackRecord)
    assert (rec.kind, rec.platform) == (kind, platform) and accel in rec.accelerators
    assert rec.runs > 0 and rec.mape >= abs(rec.bias)


@pytest.mark.parametrize(
    "preset, accel",
    [
        ("llama3-8b", "a100"),  # no published run on an A100 is priced
        ("llama3-8b", "h200"),  # an x86 host, but no run on this accelerator
        ("nemotron-h-8b", "h100"),  # no hybrid run
    ],
)
def test_no_record_where_no_published_run_speaks(preset, accel):
    assert ps.track_record(ps.models.get(preset), accel) is None


def test_a_record_reads_back_what_it_wrote():
    for rec in records():
        d = rec.to_dict()
        assert TrackRecord.from_dict(d) == rec and d["optimistic"] == rec.optimistic


def test_platform_and_kind():
    assert platform_of(ps.hardware.get("gb300")) == "grace"
    assert platform_of(ps.hardware.get("b200")) == "x86"
    assert platform_of(ps.hardware.get("ascend-910b")) == "ascend"
    assert kind_of(ps.models.get("deepseek-v3")) == "moe"
    assert kind_of(ps.models.get("nemotron-h-56b")) is None


def test_summary_says_the_size_and_direction_of_the_error():
    rec = TrackRecord("moe", "x86", 10, 0.62, 0.59, 1.85, "Qwen3 8xb200", ("b200", "h100"), ("t",))
    text = rec.summary()
    assert "10 published MoE runs on b200/h100 (x86 hosts)" in text
    assert "off by 62% on average" in text and "optimistic by 59%" in text
    assert "furthest: tokens/s/GPU +185%, Qwen3 8xb200" in text
    assert "plan's best" not in text  # no plan compared
    ranked = TrackRecord(
        "moe", "x86", 10, 0.6, 0.6, 1.8, "q", ("h100",), ("t",), planned=10, near_best=2
    )
    assert "the published layout within 10% of the plan's best in 2 of 10" in ranked.summary()
    low = TrackRecord("dense", "ascend", 3, 0.1, -0.05, -0.2, "x", ("ascend-910b",), ("t",))
    assert "pessimistic by 5%" in low.summary() and "hosts" not in low.summary()
    assert low.summary().endswith("docs/accuracy-npu.md")
    # latency: a negative error is a prediction faster than measured
    dit = TrackRecord("dit", "l40", 4, 0.2, -0.1, -0.5, "y", ("l40",), ("t",), "latency")
    assert dit.optimistic and "optimistic by 10%" in dit.summary()
    assert "furthest: latency -50%" in dit.summary() and "docs/accuracy-dit.md" in dit.summary()
    even = TrackRecord("dit", "h100", 4, 0.2, -0.001, -0.5, "y", ("h100",), ("t",), "latency")
    assert "(no lean on average;" in even.summary()


def test_plan_and_explain_show_the_record(capsys):
    args = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--accelerator", "h100"]
    args += ["--seq-len", "4096", "--global-batch-size", "256"]
    assert main(["plan", *args, "--top-k", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = ps.track_record(ps.models.get("qwen3-30b-a3b"), "h100")
    assert expected is not None and doc["track_record"] == expected.to_dict()
    plan = ps.plan(
        "qwen3-30b-a3b",
        ps.Cluster("h100", num_devices=16),
        seq_len=4096,
        global_batch_size=256,
        top_k=1,
    )
    assert plan.track_record == expected
    assert main(["plan", *args, "--top-k", "1"]) == 0
    assert f"record: {expected.summary()}" in capsys.readouterr().out
    assert main(["explain", *args, "--ep", "8"]) == 0
    assert f"record: {expected.summary()}" in capsys.readouterr().out
    # comparing two layouts: the record says how far to trust the difference
    assert main(["explain", *args, "--ep", "8", "--compare", "TP1 PP1 CP1 EP16 ETP1 DP16"]) == 0
    assert f"record: {expected.summary()}" in capsys.readouterr().out
    a100 = ["--model", "llama3-8b", "--gpus", "8", "--accelerator", "a100", "--seq-len", "2048"]
    assert main(["explain", *a100, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["track_record"] is None


def test_plan_dit_carries_the_record_of_its_accelerator():
    kw = dict(height=1024, width=1024, steps=28)
    plan = ps.plan_dit("flux.1-dev", ps.Cluster("l40", num_devices=4), **kw)
    rec = plan.track_record
    assert rec is not None and (rec.kind, rec.platform, rec.metric) == ("dit", "l40", "latency")
    assert f"record: {rec.summary()}" in plan.explain()
    assert plan.to_dict()["track_record"] == rec.to_dict()
    # xDiT's H100 pages (HunyuanVideo, FLUX.1-dev) are in the H100 record
    h100 = ps.plan_dit("flux.1-dev", ps.Cluster("h100", num_devices=4), **kw).track_record
    assert h100 is not None and set(h100.tables) == {"xdit_flux_dev_h100", "xdit_hunyuanvideo"}
    # no DiT run measured on an Ascend 910B: no record, and the CLI prints none
    npu = ps.plan_dit("flux.1-dev", ps.Cluster("ascend-910b", num_devices=4), **kw)
    assert npu.track_record is None and "record:" not in npu.explain()


def test_the_record_command_prints_every_class(capsys):
    assert main(["record", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [r.to_dict() for r in records()]
    assert main(["record"]) == 0
    out = capsys.readouterr().out
    assert "MoE training" in out and "DiT inference" in out and "tools/gen_track_record.py" in out
    assert "-0%" not in out
