"""Sizing a job per accelerator: ``planner.sizing.size`` / ``parastrat size`` answer with the
fewest devices of each kind that train a token budget by a deadline, fewest device-hours
first, and say why an accelerator cannot."""

from __future__ import annotations

import json
import shlex

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.planner.sizing import size

WL = ps.Workload(model="llama3-8b", seq_len=8192, global_batch_size=256)


def test_each_accelerator_gets_the_fewest_devices_that_meet_the_budget():
    budget = ps.TrainingBudget("1T", days=30)
    answers = size(WL, ["h100", "gb200", "H100-SXM"], budget, max_devices=1024, objective="devices")
    assert [a.accelerator for a in answers].count("h100") == 1  # aliases sized once
    for a in answers:
        assert a.plan is not None and a.training is not None and budget.met_by(a.plan.best.step)
        direct = ps.plan(
            WL, ps.Cluster(a.accelerator, num_devices=1024), num_devices="smallest", budget=budget
        )
        assert a.devices == direct.num_devices
    hours = [a.training.device_hours for a in answers]
    assert hours == sorted(hours)


def test_an_accelerator_that_cannot_is_answered_with_the_reason():
    budget = ps.TrainingBudget("1T", days=30)
    fp8 = ps.Workload(model="llama3-8b", seq_len=8192, global_batch_size=256, precision="fp8")
    answers = size(fp8, ["a100", "h100"], budget, max_devices=1024)
    assert answers[0].accelerator == "h100" and answers[0].plan is not None
    assert answers[1].plan is None and "FP8 tensor cores" in answers[1].reason
    late = size(WL, ["h100"], ps.TrainingBudget("1T", days=0.01), max_devices=64)[0]
    assert late.plan is None and "no device count up to 64" in late.reason
    assert late.to_dict()["devices"] is None and late.to_dict()["reason"]


def test_bad_inputs_are_refused():
    with pytest.raises(UsageError, match="TrainingBudget"):
        size(WL, ["h100"], ("1T", 30), max_devices=64)
    with pytest.raises(UsageError, match="at least one accelerator"):
        size(WL, [], ps.TrainingBudget("1T", days=30), max_devices=64)
    with pytest.raises(ps.SpecError, match="did you mean h100"):
        size(WL, ["h1000"], ps.TrainingBudget("1T", days=30), max_devices=64)


def test_the_cli_prints_the_answers_and_exits_2_when_none_meets(capsys):
    argv = shlex.split(
        "size --model llama3-8b --seq-len 8192 --global-batch-size "
        "256 --train-tokens 1T --accelerators h100,a100 --max-gpus 1024"
    )
    assert main([*argv, "--deadline-days", "30"]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b: 1T tokens in 30 days" in out and "h100" in out
    assert main([*argv, "--deadline-days", "30", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {a["accelerator"] for a in doc["answers"]} == {"h100", "a100"}
    met = [a for a in doc["answers"] if a["devices"]]
    assert met and met[0]["time_to_train"]["days"] <= 30
    assert main([*argv, "--deadline-days", "0.01"]) == 2
    captured = capsys.readouterr()
    assert "no device count up to 1,024" in captured.out and "Traceback" not in captured.err


def test_the_default_answer_is_the_cheapest_count_that_meets_the_budget():
    wl = ps.Workload(model="llama3-70b", seq_len=8192, global_batch_size=2048)
    budget = ps.TrainingBudget("15T", days=90)
    fewest = size(wl, ["b300"], budget, max_devices=16384, objective="devices")[0]
    cheapest = size(wl, ["b300"], budget, max_devices=16384)[0]
    assert fewest.training is not None and cheapest.training is not None
    assert budget.met_by(cheapest.plan.best.step)
    assert cheapest.training.device_hours <= fewest.training.device_hours
    assert cheapest.devices >= fewest.devices
    if cheapest.devices != fewest.devices:
        assert cheapest.fewest == fewest.devices
        assert cheapest.to_dict()["fewest_devices"] == fewest.devices
    with pytest.raises(UsageError, match="objective"):
        size(wl, ["b300"], budget, max_devices=64, objective="cost")
