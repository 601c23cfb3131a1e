"""Sizing a DiT service: ``smallest_dit`` / ``plan-dit --smallest [--min-rps R]`` give the plan
on the fewest devices on which a split fits, or that serve a request rate (within a latency
bound when one is given)."""

from __future__ import annotations

import shlex

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.planner.dit_sizing import device_counts, smallest_dit

FLUX = dict(height=1024, width=1024, steps=28)


def test_powers_of_two_first_then_whole_nodes_then_every_count_between():
    assert device_counts(ps.Cluster("h100", num_devices=40)) == [1, 2, 4, 8, 16, 32, 40]
    cluster = ps.Cluster("h100", num_devices=64)
    sized = smallest_dit("flux.1-dev", cluster, min_requests_per_s=4, max_latency_s=3, **FLUX)
    assert 32 < sized.devices < 64  # refined below the first power of two that serves 4/s
    try:  # refined to the count, not the whole node: one fewer misses the goal
        one_fewer = ps.plan_dit(
            "flux.1-dev",
            cluster,
            devices=sized.devices - 1,
            data_parallel=True,
            max_latency_s=3,
            **FLUX,
        )
    except UsageError as exc:
        assert "within 3 s" in str(exc)
    else:
        assert one_fewer.best.requests_per_s < 4


def test_the_fewest_devices_that_fit():
    cluster = ps.Cluster("ascend-910b", num_devices=16)
    work = dict(height=720, width=1280, frames=81, steps=50)
    sized = smallest_dit("wan2.1-t2v-14b", cluster, **work)
    for n in device_counts(cluster):
        if n >= sized.devices:
            break
        with pytest.raises(UsageError, match="fits"):
            ps.plan_dit("wan2.1-t2v-14b", cluster, devices=n, **work)


def test_the_fewest_devices_that_serve_a_rate_within_a_bound():
    cluster = ps.Cluster("h100", num_devices=64)
    sized = smallest_dit("flux.1-dev", cluster, min_requests_per_s=4, max_latency_s=3, **FLUX)
    assert sized.best.requests_per_s >= 4 and sized.best.latency_s <= 3
    smaller = [n for n in device_counts(cluster) if n < sized.devices]
    for n in smaller:
        try:
            fewer = ps.plan_dit(
                "flux.1-dev", cluster, devices=n, data_parallel=True, max_latency_s=3, **FLUX
            )
        except UsageError:
            continue
        assert fewer.best.requests_per_s < 4


def test_a_rate_the_most_devices_miss_says_by_how_much():
    with pytest.raises(UsageError, match=r"no device count up to 8 serves 40 requests/s"):
        smallest_dit("flux.1-dev", ps.Cluster("h100", num_devices=8), min_requests_per_s=40, **FLUX)
    for bad in (0, -1, float("nan"), "4", True):
        with pytest.raises(UsageError, match="min_requests_per_s"):
            smallest_dit(
                "flux.1-dev", ps.Cluster("h100", num_devices=8), min_requests_per_s=bad, **FLUX
            )
    with pytest.raises(UsageError, match="chooses the device count"):
        smallest_dit("flux.1-dev", ps.Cluster("h100", num_devices=8), devices=4, **FLUX)


def test_the_cli_sizes_the_service(capsys):
    argv = shlex.split(
        "plan-dit --model flux.1-dev --accelerator h100 --height 1024 --width 1024 --steps 28"
    )
    assert (
        main([*argv, "--devices", "64", "--smallest", "--min-rps", "4", "--max-latency", "3"]) == 0
    )
    expected = smallest_dit(
        "flux.1-dev",
        ps.Cluster("h100", num_devices=64),
        min_requests_per_s=4,
        max_latency_s=3,
        **FLUX,
    ).devices
    assert f"flux.1-dev on {expected} x h100" in capsys.readouterr().out
    assert main([*argv, "--devices", "8", "--min-rps", "4"]) == 2
    assert "--min-rps sizes the service" in capsys.readouterr().err
