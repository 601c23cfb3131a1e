"""How many devices a diffusion-transformer service needs: the fewest devices on which some
split fits (and, with a throughput target, serves that many requests per second, within a
latency bound if one is given): :func:`smallest_dit`, the serving counterpart of
``plan(num_devices="smallest", budget=...)`` for training."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..checks import require_positive
from ..errors import SpecError, UsageError
from ..estimate.dit_options import SEARCH_FIELDS, resolve_search
from ..spec.cluster import Cluster
from .dit import DiTPlan, label, plan_dit
from .fewest import first_accepted, sizing_counts, whole_nodes_between


def device_counts(cluster: Cluster) -> list[int]:
    """The counts tried first, ascending (:func:`~parastrat.planner.fewest.sizing_counts` of
    the cluster)."""
    return sizing_counts(cluster.num_devices, cluster.devices_per_node)


def smallest_dit(
    model: Any,
    cluster: Cluster,
    *,
    min_requests_per_s: float | None = None,
    **options: Any,
) -> DiTPlan:
    """The plan on the fewest devices on which a split fits, or, with
    ``min_requests_per_s``, whose best split (replicas allowed: ``data_parallel=True``)
    serves at least that many requests per second; every other keyword is
    :func:`~parastrat.planner.dit.plan_dit`'s (``max_latency_s`` bounds each request), the
    typed ``request`` / ``switches`` / ``search`` included (the search's ``devices`` is what
    this chooses).

    The search walks :func:`device_counts` up to the first count that meets the goal,
    bisects the whole-node counts between it and the last one that did not, then tries
    every count above the largest count found failing below that answer, ascending (fewer
    than ``devices_per_node`` more plans).  Meeting a rate is not monotone in the device
    count (a count a good replica size does not divide serves less than a smaller one it
    does), so with ``min_requests_per_s`` the answer is then lowered to the fewest devices
    any replica size needs (:func:`_fewest_replicas`: one plan per replica size below the
    answer), which is the fewest that serve the rate as the model prices it.  Without a rate
    a count below the answer was tried only if it is a power of two or whole nodes.  Raises
    :class:`UsageError` saying how far the most devices fall short."""
    target = _target(min_requests_per_s)
    search = resolve_search(options.pop("search", None), who="smallest_dit", **options)
    if search.devices is not None:
        raise UsageError("smallest_dit chooses the device count: give the most as the cluster's")
    options = {k: v for k, v in options.items() if k not in SEARCH_FIELDS}
    if target is not None:
        search = replace(search, data_parallel=True)
    tried: dict[int, DiTPlan | Exception] = {}
    failed: set[int] = set()

    def meets(n: int) -> DiTPlan | None:
        try:
            found = plan_dit(model, cluster, search=replace(search, devices=n), **options)
            tried[n] = found
        except (UsageError, SpecError) as exc:
            tried[n] = exc
            found = None
        if found is None or (target is not None and found.best.requests_per_s < target):
            failed.add(n)
            return None
        return found

    below, best = 0, None
    for n in device_counts(cluster):
        best = meets(n)
        if best is not None:
            break
        below = n
    if best is not None:
        between = whole_nodes_between(below, best.devices, cluster.devices_per_node)
        best = _refined(first_accepted(between, meets) or best, failed, meets)
    if target is not None:
        upper = best.devices if best is not None else cluster.num_devices + 1
        single = replace(search, data_parallel=False)

        def one_replica(g: int) -> DiTPlan | None:
            try:
                return plan_dit(model, cluster, search=replace(single, devices=g), **options)
            except (UsageError, SpecError):
                return None

        best = _fewest_replicas(upper, target, one_replica, meets) or best
    return best if best is not None else _short(tried, target)


def _fewest_replicas(
    upper: int,
    target: float,
    one_replica: Callable[[int], DiTPlan | None],
    meets: Callable[[int], DiTPlan | None],
) -> DiTPlan | None:
    """The fewest devices below ``upper`` serving ``target`` requests/s (None: none does):
    replicas of ``g`` devices serve ``dp / latency(g)``, so for each replica size ``g`` the
    fewest that serve it are ``g * ceil(target * latency(g))`` (``one_replica(g)``: the
    fastest split of ``g`` devices within the bounds, or None); the smallest such count that
    ``meets`` accepts is the answer.  Throughput is not monotone in the count: 36 H100 serve
    a rate 40 cannot, as 12 replicas of 3 where no replica size that divides 40 is as good."""
    counts: set[int] = set()
    for g in range(1, upper):
        if min(counts, default=upper) <= g:
            break  # a larger replica size cannot need fewer devices
        found = one_replica(g)
        if found is not None:
            counts.add(g * math.ceil(target * found.best.latency_s - 1e-9))
    for n in sorted(c for c in counts if c < upper):
        fewer = meets(n)
        if fewer is not None:
            return fewer
    return None


def _refined(best: DiTPlan, failed: set[int], meets: Callable[[int], DiTPlan | None]) -> DiTPlan:
    """The first count that ``meets`` accepts, ascending, above the largest count in
    ``failed`` below ``best.devices`` (``best`` when none does)."""
    low = max((n for n in failed if n < best.devices), default=0)
    for n in range(low + 1, best.devices):
        found = meets(n)
        if found is not None:
            return found
    return best


def _target(value: float | None) -> float | None:
    """``min_requests_per_s`` checked: None, or a positive finite rate."""
    return None if value is None else require_positive("min_requests_per_s", value, "2.5")


def _short(tried: dict[int, DiTPlan | Exception], target: float | None) -> DiTPlan:
    """Raise: no count tried meets the goal (the error of the largest, or how far its best
    split's rate falls short of ``target``)."""
    most = max(tried)
    last = tried[most]
    if isinstance(last, Exception):
        raise last
    best = last.best
    per_device = best.requests_per_s / last.devices
    need = math.ceil(target / per_device) if target and per_device > 0 else None
    more = f"about {need:,} devices at the same rate per device" if need else "more devices"
    raise UsageError(
        f"no device count up to {last.devices:,} serves {target:g} requests/s of "
        f"{last.model}: the best on {last.devices:,} {last.accelerator} "
        f"({label(best.strategy)}) serves {best.requests_per_s:.3g}; allow {more}, or more "
        "latency"
    )
