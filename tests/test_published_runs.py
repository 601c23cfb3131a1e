"""The published runs one by one: the file holds every NVIDIA row the accuracy benchmarks price,
a model finds its runs, and a plan of the same job prices the published layout beside its
choice (the same number estimate_step gives it)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.estimate.published_runs import (
    PublishedDiTRun,
    PublishedRun,
    all_dit_runs,
    all_runs,
    published_dit_runs,
)
from parastrat.planner import published
from parastrat.planner.explain import explain_strategy
from parastrat.planner.published import PublishedBeside

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"

LLAMA70_H100 = dict(seq_len=8192, global_batch_size=256, precision="fp8")


def _rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name) as fh:
        return list(csv.DictReader(fh))


def test_every_nvidia_row_of_the_benchmarks_is_a_run():
    published, summary = _rows("published_configs.csv"), _rows("mb_2511_summary.csv")
    zoo = _rows("moe_zoo_layouts.csv")
    runs = all_runs()
    assert len(runs) == len(published) + len(summary) + len(zoo)
    assert {r.table for r in runs} == {"published_configs", "mb_2511_summary", "moe_zoo_layouts"}
    measured = sorted(r.measured for r in runs if r.table != "moe_zoo_layouts")
    rows = published + summary
    assert measured == sorted(float(r["tokens_per_s_per_gpu"]) for r in rows)
    # the Model Zoo gives step seconds (or TFLOP/s only): tokens/s/GPU follows from the job
    for row in zoo:
        run = next(
            r for r in runs if r.table == "moe_zoo_layouts" and f"row {row['id']}" in r.source
        )
        if row["step_s"]:
            tokens = int(row["gbs"]) * int(row["seq_len"]) / int(row["num_gpus"])
            assert run.measured == pytest.approx(tokens / float(row["step_s"]), abs=0.1)


@pytest.mark.parametrize("run", all_runs(), ids=lambda r: f"{r.model}-{r.devices}x{r.accelerator}")
def test_each_run_is_a_preset_layout_that_reads_back(run):
    model = ps.models.get(run.model)
    ps.hardware.get(run.accelerator)
    s = ps.Strategy.parse(run.strategy)
    assert s.world_size == run.devices
    s.validate(model, world_size=run.devices, seq_len=run.seq_len)
    assert run.source and run.measured > 0 and run.predicted > 0
    assert run.error == pytest.approx(run.predicted / run.measured - 1)


def test_a_run_reads_back_what_it_wrote():
    run = all_runs()[0]
    d = json.loads(json.dumps(run.to_dict()))
    assert PublishedRun.from_dict(d) == run
    assert d["error"] == round(run.error, 4)


def test_a_model_finds_its_runs_fewest_devices_first():
    runs = ps.published_runs("llama3-70b", "h100")
    assert [r.accelerator for r in runs] == ["h100"] * len(runs) and len(runs) == 2
    assert {r.global_batch_size for r in runs} == {128, 256}
    every = ps.published_runs("LLaMA3-70B ")
    assert len(every) > len(runs) and [r.accelerator for r in every] == sorted(
        r.accelerator for r in every
    )
    assert ps.published_runs("llama3-8b", "ascend-910b") == ()
    assert ps.published_runs("no-such-model") == ()


def test_same_job_reads_precision_spellings_alike():
    run = next(r for r in ps.published_runs("llama3-70b", "h100") if r.global_batch_size == 256)
    assert run.same_job(64, 8192, 256, "FP8-CS") and run.same_job(64, 8192, 256, "fp8")
    assert not run.same_job(64, 8192, 256, "bf16")
    assert not run.same_job(128, 8192, 256, "fp8") and not run.same_job(64, 4096, 256, "fp8")


def test_a_plan_of_the_published_job_prices_its_layout_beside_the_choice():
    plan = ps.plan("llama3-70b", ps.Cluster("h100", num_devices=64), **LLAMA70_H100)
    beside = plan.published()
    first = beside[0]
    assert first.same_job and first.priced is not None
    run = first.run
    # the layout priced as estimate_step prices it with the plan's switches
    again = ps.estimate_step(
        plan.workload.with_micro_batch(run.micro_batch_size),
        ps.Strategy.parse(run.strategy),
        plan.cluster,
        plan.switches.with_recompute(run.recompute),
    )
    assert first.priced.tokens_per_s_per_gpu == pytest.approx(again.tokens_per_s_per_gpu)
    ratio = plan.best.tokens_per_s_per_gpu / again.tokens_per_s_per_gpu
    assert first.choice_over_published == pytest.approx(ratio)
    assert [b.same_job for b in beside] == [True] + [False] * (len(beside) - 1)
    assert all(b.priced is None and b.choice_over_published is None for b in beside[1:])
    text = first.summary()
    assert text.startswith("this job as published: llama3-70b on 64 h100")
    assert "measured 1,664 tokens/s/GPU" in text and f"{ratio:.2f}x" in text
    assert plan.to_dict()["published"][0]["same_job"] is True


def test_another_job_lists_the_nearest_runs_unpriced():
    plan = ps.plan(
        "qwen3-30b-a3b", ps.Cluster("h100", num_devices=32), seq_len=4096, global_batch_size=512
    )
    beside = plan.published(limit=1)
    assert len(beside) == 1 and not beside[0].same_job and beside[0].run.devices == 16
    assert beside[0].summary().startswith("published: qwen3-30b-a3b on 16 h100")
    nothing = ps.plan(
        "llama3-8b", ps.Cluster("a100", num_devices=8), seq_len=4096, global_batch_size=64
    )
    assert nothing.published() == []


def test_a_layout_that_cannot_be_priced_says_why():
    run = ps.published_runs("llama3-70b", "h100")[0]
    plan = ps.plan("llama3-70b", ps.Cluster("h100", num_devices=64), **LLAMA70_H100)
    broken = replace(run, strategy="TP3 PP1 CP1 DP1")  # 64 heads do not split over TP3
    got = published._priced(plan, broken)
    assert isinstance(got, PublishedBeside) and got.priced is None and got.why_not
    assert "not priced here" in got.summary()


def test_plan_cli_shows_the_published_job(capsys):
    args = ["plan", "--model", "llama3-70b", "--gpus", "64", "--accelerator", "h100"]
    args += ["--seq-len", "8192", "--global-batch-size", "256", "--precision", "fp8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "this job as published: llama3-70b on 64 h100" in out
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["published"][0]
    assert first["same_job"] and first["measured"] == 1664 and first["choice_over_published"] > 0


def test_models_cli_lists_a_presets_published_runs(capsys):
    assert main(["models", "qwen3-30b-a3b"]) == 0
    out = capsys.readouterr().out
    assert "published runs" in out and "b200" in out
    assert main(["models", "qwen3-30b-a3b", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["published_runs"]) == len(ps.published_runs("qwen3-30b-a3b"))
    assert main(["models", "llama3.2-1b", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["published_runs"] == []
    assert main(["models", "cogvideox-2b", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["published_runs"]) == len(published_dit_runs("cogvideox-2b")) > 0
    assert main(["models", "cogvideox-2b"]) == 0
    assert "published generations" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Diffusion transformers: xDiT's and Wan's generations beside plan-dit
# ---------------------------------------------------------------------------------------------
COGVIDEO_L40 = dict(height=480, width=720, frames=49, steps=50)


def test_every_priced_dit_measurement_is_a_run():
    from ._modules import load_script

    gen = load_script("tools/gen_track_record.py")
    details = [r["dit_detail"] for r in gen.priced() if "dit_detail" in r]
    assert tuple(details) == all_dit_runs()
    for run in all_dit_runs():
        ps.models.get(run.model)  # a DiT preset, found through the one registry
        ps.hardware.get(run.accelerator)
        assert run.ulysses * run.ring * run.cfg == run.devices
        assert run.scope in ("latency", "per step") and run.measured_s > 0 and run.source
        assert PublishedDiTRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_a_dit_run_names_its_split_and_request():
    run = next(
        r for r in published_dit_runs("cogvideox-2b", "l40") if r.devices == 2 and r.cfg == 2
    )
    assert run.split == "CFG2" and run.scope == "per step"
    assert run.same_request(2, 480, 720, 49, 50, False)
    assert not run.same_request(2, 480, 720, 49, 50, True)  # the compiled run is another one
    assert "720x480x49, 50 steps, eager: CFG2 measured" in run.summary()
    assert published_dit_runs("flux.1-dev", "ascend-910b") == ()


def test_plan_dit_places_each_published_split_of_its_request():
    plan = ps.plan_dit("cogvideox-2b", ps.Cluster("l40", num_devices=2), **COGVIDEO_L40)
    same = [b for b in plan.published if b.same_request]
    assert len(same) == 3 and sorted(b.rank for b in same) == [1, 2, 3]
    first = next(b for b in same if b.rank == 1)
    best = plan.best.strategy
    assert (first.run.ulysses, first.run.ring, first.run.cfg) == (best.ulysses, best.ring, best.cfg)
    assert first.seconds == pytest.approx(plan.best.per_step_s)  # per-step rows: per step
    assert "this plan ranks it #1 of 3" in first.summary()
    assert plan.to_dict()["published"][0]["same_request"] is True


def test_another_request_lists_the_nearest_generations():
    plan = ps.plan_dit(
        "flux.1-dev", ps.Cluster("h100", num_devices=8), height=512, width=512, steps=20
    )
    assert plan.published and not any(b.same_request for b in plan.published)
    assert all(b.rank is None for b in plan.published) and len(plan.published) <= 3
    assert plan.published[0].summary().startswith("published: flux.1-dev on 4 h100")


def test_plan_dit_cli_shows_the_published_request(capsys):
    args = ["plan-dit", "--model", "flux.1-dev", "--devices", "4", "--accelerator", "h100"]
    args += ["--height", "1024", "--width", "1024", "--steps", "28"]
    assert main(args) == 0
    assert "this request as published: flux.1-dev on 4 h100" in capsys.readouterr().out
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {b["split"] for b in doc["published"] if b["same_request"]} == {"U2 x R2", "U4", "R4"}


def test_accelerators_cli_lists_the_runs_published_on_a_device(capsys):
    assert main(["accelerators", "gb300"]) == 0
    out = capsys.readouterr().out
    assert "published training runs on gb300" in out and "qwen3-30b-a3b" in out
    assert main(["accelerators", "l40", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["published_runs"] == [] and len(doc["published_dit_runs"]) == len(
        published_dit_runs(accelerator="l40")
    )
    assert main(["accelerators", "l40"]) == 0
    assert "published DiT generations on l40: " in capsys.readouterr().out
    assert {r.accelerator for r in ps.published_runs(accelerator="GB300 ")} == {"gb300"}


def test_a_spec_borrowing_a_presets_name_gets_no_published_runs():
    """The runs were measured on the preset: a spec of another shape under its name (a user's
    edit) must not be shown them, nor have them priced."""
    from dataclasses import replace as changed

    cluster = ps.Cluster("h100", num_devices=64)
    shallower = changed(ps.models.get("llama3-70b"), num_layers=40)
    plan = ps.plan(shallower, cluster, **LLAMA70_H100)
    assert plan.published() == [] and plan.to_dict()["published"] == []
    text = explain_strategy(shallower, ps.Strategy(tp=4, pp=4, sp=True), cluster, **LLAMA70_H100)
    assert "published:" not in text
    flux = changed(ps.models.get("flux.1-dev"), text_tokens=256)
    dit_plan = ps.plan_dit(
        flux, ps.Cluster("h100", num_devices=4), height=1024, width=1024, steps=28
    )
    assert dit_plan.published == ()


def test_the_fastest_measured_layout_says_at_what_host_cost_it_overtakes_the_choice():
    """Qwen3-235B-A22B on 256 H100 (the Model Zoo's job): the plan prices its EP 8 choice
    ahead of every measured layout; beside the fastest one measured it names the host cost
    per operation at which that layout, as priced, would come out ahead."""
    plan = ps.plan(
        "qwen3-235b-a22b",
        ps.Cluster("h100", num_devices=256),
        seq_len=4096,
        global_batch_size=2048,
        top_k=1,
    )
    same = [b for b in plan.published() if b.same_job]
    assert len(same) == 5
    marked = [b for b in same if b.host_break_even_s is not None]
    assert len(marked) == 1
    best = marked[0]
    assert best.run.measured == max(b.run.measured for b in same)
    assert best.host_break_even_s > best.host_op_s == pytest.approx(13.5e-6)
    assert "comes out ahead if a host operation costs" in best.summary()
    assert best.to_dict()["host_break_even_s"] == best.host_break_even_s
