"""How many devices a diffusion-transformer service needs: the fewest devices on which some
split fits (and, with a throughput target, serves that many requests per second, within a
latency bound if one is given): :func:`smallest_dit`, the serving counterpart of
``plan(num_devices="smallest", budget=...)`` for training."""

from __future__ import annotations

import math
from typing import Any

from ..checks import require_positive
from ..errors import SpecError, UsageError
from ..spec.cluster import Cluster
from .dit import DiTPlan, label, plan_dit


def device_counts(cluster: Cluster) -> list[int]:
    """The counts tried, ascending: powers of two and whole-node multiples up to the
    cluster's count, and that count itself (as the training search tries)."""
    top, node = cluster.num_devices, cluster.devices_per_node
    counts = {2**i for i in range(top.bit_length()) if 2**i <= top}
    counts |= {k * node for k in range(1, top // node + 1)}
    return sorted(counts | {top})


def smallest_dit(
    model: Any,
    cluster: Cluster,
    *,
    min_requests_per_s: float | None = None,
    **options: Any,
) -> DiTPlan:
    """The plan on the fewest of :func:`device_counts` devices on which a split fits, or,
    with ``min_requests_per_s``, whose best split (replicas allowed: ``data_parallel=True``)
    serves at least that many requests per second; every other keyword is
    :func:`~parastrat.planner.dit.plan_dit`'s (``max_latency_s`` bounds each request).
    Raises :class:`UsageError` saying how far the most devices fall short."""
    if "devices" in options:
        raise UsageError("smallest_dit chooses the device count: give the most as the cluster's")
    target = _target(min_requests_per_s)
    if target is not None:
        options["data_parallel"] = True
    last: DiTPlan | None = None
    error: Exception | None = None
    for n in device_counts(cluster):
        try:
            found = plan_dit(model, cluster, devices=n, **options)
        except (UsageError, SpecError) as exc:
            error = exc
            continue
        last = found
        if target is None or found.best.requests_per_s >= target:
            return found
    if last is None:
        assert error is not None
        raise error
    return _short(last, target)


def _target(value: float | None) -> float | None:
    """``min_requests_per_s`` checked: None, or a positive finite rate."""
    return None if value is None else require_positive("min_requests_per_s", value, "2.5")


def _short(last: DiTPlan, target: float | None) -> DiTPlan:
    """Raise: the most devices tried serve less than ``target`` requests per second."""
    best = last.best
    per_device = best.requests_per_s / last.devices
    need = math.ceil(target / per_device) if target and per_device > 0 else None
    more = f"about {need:,} devices at the same rate per device" if need else "more devices"
    raise UsageError(
        f"no device count up to {last.devices:,} serves {target:g} requests/s of "
        f"{last.model}: the best on {last.devices:,} {last.accelerator} "
        f"({label(best.strategy)}) serves {best.requests_per_s:.3g}; allow {more}, or more latency"
    )
