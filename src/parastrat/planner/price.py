"""Price one given strategy: its step and its memory, from the same typed values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..estimate.memory import MemoryReport, memory_of
from ..estimate.step import StepReport, estimate_step
from ..spec.workload import Switches, Workload, resolve
from ..strategy import Strategy

if TYPE_CHECKING:
    from ..spec.cluster import Cluster


def price(
    workload: Workload, strategy: Strategy, cluster: Cluster, switches: Switches
) -> tuple[Strategy, StepReport, MemoryReport]:
    """(strategy with its world size, step, memory) of one strategy on ``cluster``: both
    models read the same workload and switches, so they always agree (the step checks the
    strategy against the rules first)."""
    s = strategy if strategy.dp is not None else strategy.with_world_size(cluster.num_devices)
    step = estimate_step(workload, s, cluster, switches)
    return s, step, memory_of(workload, s, switches)


def price_strategy(
    model: Any,
    strategy: Strategy,
    cluster: Cluster,
    switches: Switches | None = None,
    *,
    workload: Workload | None = None,
    **options: Any,
) -> tuple[Strategy, StepReport, MemoryReport]:
    """:func:`price` with the workload and switches given as typed values or as keywords
    (``seq_len``, ``global_batch_size``, ``micro_batch_size``, ``precision`` and any
    :class:`~parastrat.spec.workload.Switches` field)."""
    wl, sw = resolve(model, workload, switches, who="price_strategy", **options)
    return price(wl, strategy, cluster, sw)
