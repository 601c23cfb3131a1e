"""Time to train: a token count read the way people write it, turned into steps, days and
device-hours at a predicted step, in Python and on the CLI (``--train-tokens``)."""

from __future__ import annotations

import functools
import json
import math
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.estimate.train_time import MAX_TOKENS, token_count, tokens_text

TARGET = ["--model", "llama3-8b", "--gpus", "16", "--accelerator", "h100", "--seq-len", "8192"]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("15T", 15e12),
        ("1.5e12", 1.5e12),
        ("300b", 300e9),
        ("2.5M", 2.5e6),
        ("40k", 4e4),
        (".5T", 0.5e12),
        ("7", 7.0),
        (" 15T ", 15e12),
        ("1G", 1e9),
    ],
)
def test_token_counts_are_read_as_written(text, tokens):
    assert token_count(text) == pytest.approx(tokens)


@pytest.mark.parametrize(
    "bad", ["15X", "-5", "nan", "inf", "", "abc", "1e30", "0", "1.5.3T", True, None, 0.5, "1_000"]
)
def test_a_token_count_that_is_not_one_is_refused_with_an_example(bad):
    with pytest.raises(UsageError, match=r"15T|token count|bound"):
        token_count(bad)


@given(st.floats(min_value=1, max_value=MAX_TOKENS))
def test_the_printed_form_reads_back_within_its_four_digits(count):
    assert token_count(tokens_text(count)) == pytest.approx(count, rel=1e-3, abs=1)


def _step():
    plan = ps.plan(
        "llama3-8b", ps.Cluster("h100", num_devices=16), seq_len=8192, global_batch_size=64
    )
    return plan.best.step


def test_steps_days_and_device_hours_follow_from_the_step():
    step = _step()
    t = step.time_to_train("1T")
    assert t.tokens_per_step == 64 * 8192  # the global batch
    assert t.steps == math.ceil(1e12 / (64 * 8192))
    assert t.seconds == pytest.approx(t.steps * step.step_time_s)
    assert t.device_hours == pytest.approx(t.days * 24 * 16)
    assert step.time_to_train(1).steps == 1  # a part of a step is a whole step
    assert "1T tokens" in t.summary("h100") and "16 h100" in t.summary("h100")


def test_plan_and_explain_print_the_time_to_train(capsys):
    assert main(["plan", *TARGET, "--global-batch-size", "64", "--train-tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert "time to train #1: 1T tokens:" in out and "device-hours" in out
    assert (
        main(
            [
                "plan",
                *TARGET,
                "--global-batch-size",
                "64",
                "--train-tokens",
                "1T",
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    best = doc["candidates"][0]["step"]
    assert doc["time_to_train"]["steps"] == math.ceil(1e12 / (64 * 8192))
    assert doc["time_to_train"]["step_time_s"] == best["step_time_s"]
    argv = ["explain", *TARGET, "--global-batch-size", "64", "--tp", "2", "--train-tokens"]
    assert main([*argv, "300B"]) == 0
    assert "time to train: 300B tokens:" in capsys.readouterr().out
    assert main([*argv, "300B", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_to_train"]["tokens"] == 300e9


def test_a_bad_token_count_on_the_cli_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", *TARGET, "--train-tokens", "15Q"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cannot read '15Q' as a token count" in err and "Traceback" not in err


def _days(n: int, tokens: str = "1T") -> float:
    plan = ps.plan(
        "llama3-8b", ps.Cluster("h100", num_devices=n), seq_len=8192, global_batch_size=256
    )
    return plan.best.step.time_to_train(tokens).days


def test_a_budget_sizes_the_cluster_to_the_fewest_devices_that_meet_it():
    d32, d64 = _days(32), _days(64)
    assert d64 < d32
    budget = ps.TrainingBudget("1T", days=(d32 + d64) / 2)
    cluster = ps.Cluster("h100", num_devices=256)
    sized = ps.plan(
        "llama3-8b",
        cluster,
        seq_len=8192,
        global_batch_size=256,
        num_devices="smallest",
        budget=budget,
    )
    assert 32 < sized.num_devices <= 64 and budget.met_by(sized.best.step)
    assert sized.num_devices % cluster.devices_per_node == 0  # whole nodes
    for fewer in range(sized.num_devices - 8, 32, -8):  # no whole-node count below it meets
        try:
            found = ps.plan(
                "llama3-8b",
                ps.Cluster("h100", num_devices=fewer),
                seq_len=8192,
                global_batch_size=256,
            )
        except UsageError:
            continue
        assert not budget.met_by(found.best.step)
    too_tight = ps.TrainingBudget("1T", days=d64 / 100)
    with pytest.raises(UsageError, match=r"no device count up to 256 trains 1T tokens"):
        ps.plan(
            "llama3-8b",
            cluster,
            seq_len=8192,
            global_batch_size=256,
            num_devices="smallest",
            budget=too_tight,
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(tokens="1T", days=0), r"days must be in \(0, 36500\]"),
        (dict(tokens="1T", days=float("nan")), "days must be in"),
        (dict(tokens="1T", days="90"), "days must be a number"),
        (dict(tokens="1Q", days=9), "token count"),
    ],
)
def test_a_budget_that_is_not_one_is_refused(kwargs, match):
    with pytest.raises(UsageError, match=match):
        ps.TrainingBudget(**kwargs)


def test_a_budget_needs_the_smallest_search_and_its_own_type():
    cluster = ps.Cluster("h100", num_devices=16)
    plan8b = functools.partial(ps.plan, "llama3-8b", cluster, seq_len=8192, global_batch_size=64)
    with pytest.raises(UsageError, match="num_devices='smallest'"):
        plan8b(budget=ps.TrainingBudget("1T", days=9))
    with pytest.raises(UsageError, match="TrainingBudget"):
        plan8b(num_devices="smallest", budget=("1T", 9))


def test_the_cli_sizes_for_a_deadline_and_says_when_one_is_missed(capsys):
    d32, d64 = _days(32), _days(64)
    argv = shlex.split(
        "plan --model llama3-8b --accelerator h100 "
        "--seq-len 8192 --global-batch-size 256 --train-tokens 1T"
    )
    deadline = f"{(d32 + d64) / 2:.3f}"
    assert main([*argv, "--gpus", "256", "--smallest", "--deadline-days", deadline]) == 0
    out = capsys.readouterr().out
    sized = ps.plan(
        "llama3-8b",
        ps.Cluster("h100", num_devices=256),
        seq_len=8192,
        global_batch_size=256,
        num_devices="smallest",
        budget=ps.TrainingBudget("1T", days=float(deadline)),
    )
    assert f"on {sized.num_devices} x h100" in out and "misses" not in out
    assert main([*argv, "--gpus", "32", "--deadline-days", deadline]) == 0
    assert "misses the" in capsys.readouterr().out
    assert main([*argv, "--gpus", "32", "--deadline-days", deadline, "--format", "json"]) == 0
    timing = json.loads(capsys.readouterr().out)["time_to_train"]
    assert timing["meets_deadline"] is False and timing["deadline_days"] == float(deadline)
    assert main([*argv, "--gpus", "32", "--smallest", "--deadline-days", deadline]) == 2
    assert "no device count up to 32 trains 1T tokens" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--deadline-days", "9"]) == 2
    assert "--deadline-days needs --train-tokens" in capsys.readouterr().err


def test_explain_compare_prints_both_times_to_train(capsys):
    argv = [
        "explain",
        *TARGET,
        "--global-batch-size",
        "64",
        "--tp",
        "2",
        "--compare",
        "tp=4,sp",
        "--train-tokens",
        "300B",
    ]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "time to train" in x)
    assert line.startswith("time to train 300B tokens:") and "->" in line
    assert main([*argv, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a, b = doc["time_to_train"]["a"], doc["time_to_train"]["b"]
    assert a["steps"] == b["steps"] == math.ceil(300e9 / (64 * 8192))
    assert a["step_time_s"] == doc["step"][0]["step_time_s"]
    assert b["step_time_s"] == doc["step"][1]["step_time_s"]


def test_the_days_on_the_record_follow_its_mean_error_and_bias():
    step = _step()
    training = step.time_to_train("1T")
    record = ps.track_record(ps.models.get("llama3-8b"), "h100")
    assert record is not None and record.metric == "tokens/s/GPU"
    low, high = training.days_on_record(record)
    assert low == pytest.approx(training.days * max(0.0, 1 + record.bias - record.mape))
    assert high == pytest.approx(training.days * (1 + record.bias + record.mape))
    assert low <= training.days * (1 + record.bias) <= high
    assert training.to_dict(record)["days_on_record"] == [low, high]
    assert "days_on_record" not in training.to_dict()
    dit_record = ps.track_record(ps.models.get("flux.1-dev"), "h100")
    assert dit_record is not None  # a latency record says nothing of training time
    with pytest.raises(UsageError, match="latency"):
        training.days_on_record(dit_record)


def test_the_cli_line_gives_the_days_on_the_record(capsys):
    assert main(["plan", *TARGET, "--global-batch-size", "64", "--train-tokens", "1T"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("time to train"))
    assert "published runs of this class" in line and line.endswith(" days")
    argv = ["explain", *TARGET, "--global-batch-size", "64", "--tp", "2", "--train-tokens", "1T"]
    assert main([*argv, "--format", "json"]) == 0
    low, high = json.loads(capsys.readouterr().out)["time_to_train"]["days_on_record"]
    assert 0 < low < high
