"""A serving SLO for DiT plans: ``plan_dit(..., max_latency_s=)`` / ``plan-dit --max-latency``
drops the splits slower per request, so with replicas the plan is the most requests per
second within the bound."""

from __future__ import annotations

import shlex

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError

WORK = dict(height=1024, width=1024, steps=28)
ARGV = shlex.split(
    "plan-dit --model flux.1-dev --devices 8 --accelerator "
    "h100 --height 1024 --width 1024 --steps 28"
)


def _plan(**kw):
    return ps.plan_dit("flux.1-dev", ps.Cluster("h100", num_devices=8), top_k=50, **WORK, **kw)


def test_the_bound_keeps_the_best_throughput_within_it():
    free = _plan(data_parallel=True)
    fastest = min(c.latency_s for c in free.candidates)
    bound = (free.best.latency_s + fastest) / 2  # the unbounded best is too slow for it
    assert free.best.latency_s > bound
    bounded = _plan(data_parallel=True, max_latency_s=bound)
    assert all(c.latency_s <= bound for c in bounded.candidates)
    within = [c for c in free.candidates if c.latency_s <= bound]
    assert bounded.best.requests_per_s == pytest.approx(max(c.requests_per_s for c in within))
    assert bounded.rejected["over the latency bound"] == len(free.candidates) - len(within)


def test_a_bound_no_split_meets_names_the_fastest():
    fastest = _plan().best
    with pytest.raises(UsageError, match=r"within 0.5 s: the fastest \(.+\) takes"):
        _plan(max_latency_s=0.5)
    assert fastest.latency_s > 0.5


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_a_bound_that_is_not_a_number_of_seconds_is_refused(bad):
    with pytest.raises(UsageError, match="max_latency_s"):
        _plan(max_latency_s=bad)


def test_the_cli_takes_the_bound(capsys):
    assert main([*ARGV, "--data-parallel", "--max-latency", "3"]) == 0
    out = capsys.readouterr().out
    assert "Ulysses" in out and "| DP8 " not in out.replace("│", "|")
    assert main([*ARGV, "--max-latency", "0.5"]) == 2
    assert "serves flux.1-dev within 0.5 s" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*ARGV, "--max-latency", "0"])
