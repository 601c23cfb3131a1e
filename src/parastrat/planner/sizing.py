"""What a training job needs, accelerator by accelerator: the fewest devices of each kind that
train a token budget before a deadline, with the strategy, the wall clock and the
device-hours (:func:`size`).  A cluster owner's question before buying time, answered with
the same planner and step model as ``plan`` (``plan(..., num_devices="smallest",
budget=...)`` once per accelerator)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError, StrategyError, UsageError
from ..estimate.train_time import TrainingBudget, TrainingTime
from ..spec.cluster import Cluster
from ..spec.hardware import get as get_accelerator
from ..spec.workload import SearchSpace, Switches, Workload
from .search import Plan, plan


@dataclass(frozen=True)
class Sizing:
    """One accelerator's answer: the plan on the fewest devices that meet the budget and its
    time to train, or why none up to the bound does (:attr:`reason`)."""

    accelerator: str
    plan: Plan | None
    training: TrainingTime | None
    reason: str = ""

    @property
    def devices(self) -> int | None:
        """Devices of the sized cluster (None: the budget is not met)."""
        return self.plan.num_devices if self.plan is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The answer as plain values, for JSON output."""
        best = self.plan.best if self.plan is not None else None
        record = self.plan.track_record if self.plan is not None else None
        return {
            "accelerator": self.accelerator,
            "devices": self.devices,
            "strategy": best.strategy.to_dict() if best is not None else None,
            "micro_batch_size": best.micro_batch_size if best is not None else None,
            "recompute": best.recompute if best is not None else None,
            "cpu_offload_layers": best.cpu_offload_layers if best is not None else None,
            "tokens_per_s_per_gpu": best.step.tokens_per_s_per_gpu if best is not None else None,
            "time_to_train": self.training.to_dict(record) if self.training else None,
            "reason": self.reason or None,
        }


def size(
    workload: Workload,
    accelerators: Iterable[str],
    budget: TrainingBudget,
    *,
    max_devices: int,
    switches: Switches | None = None,
    search: SearchSpace | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Sizing]:
    """For each of ``accelerators``, the fewest devices (powers of two and whole-node
    multiples up to ``max_devices``, as ``plan(num_devices="smallest")`` tries) whose best
    strategy trains ``budget.tokens`` within ``budget.days``; the answers that meet it first,
    fewest device-hours first, then the others with the reason.  An accelerator that cannot
    run the workload at all (a precision it lacks) is answered with that reason.
    ``progress(name)`` is called before each accelerator is sized."""
    if not isinstance(budget, TrainingBudget):
        raise UsageError(
            f"budget must be a TrainingBudget, got {type(budget).__name__}; e.g. "
            "TrainingBudget('15T', days=90)"
        )
    names = list(dict.fromkeys(get_accelerator(a).name for a in accelerators))
    if not names:
        raise UsageError("size: name at least one accelerator, e.g. ['h100', 'gb200']")
    out = []
    for name in names:
        if progress is not None:
            progress(name)
        out.append(_size_one(workload, name, budget, max_devices, switches, search))
    return sorted(out, key=_order)


def _size_one(
    workload: Workload,
    accelerator: str,
    budget: TrainingBudget,
    max_devices: int,
    switches: Switches | None,
    search: SearchSpace | None,
) -> Sizing:
    """One accelerator's :class:`Sizing` (a refusal becomes its reason)."""
    cluster = Cluster(accelerator=accelerator, num_devices=max_devices)
    try:
        found = plan(
            workload, cluster, switches, search, num_devices="smallest", budget=budget, top_k=1
        )
    except (UsageError, StrategyError, SpecError) as exc:
        return Sizing(accelerator, None, None, reason=str(exc))
    return Sizing(accelerator, found, found.best.step.time_to_train(budget.tokens))


def _order(s: Sizing) -> tuple[int, float, str]:
    """Met budgets first, by device-hours; then the rest, by name."""
    if s.training is None:
        return (1, 0.0, s.accelerator)
    return (0, s.training.device_hours, s.accelerator)
