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
from .fewest import sizing_counts
from .search import Plan, plan


@dataclass(frozen=True)
class Sizing:
    """One accelerator's answer: the plan on the fewest devices that meet the budget and its
    time to train, or why none up to the bound does (:attr:`reason`)."""

    accelerator: str
    plan: Plan | None
    training: TrainingTime | None
    reason: str = ""
    #: the fewest devices that meet the budget, when the answer (fewest device-hours) is more
    #: (None: the same)
    fewest: int | None = None

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
            "fewest_devices": self.fewest or self.devices,
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
    objective: str = "device-hours",
) -> list[Sizing]:
    """For each of ``accelerators``, the devices (up to ``max_devices``) whose best strategy
    trains ``budget.tokens`` within ``budget.days``: with ``objective="devices"`` the fewest
    (``plan(num_devices="smallest")``); with ``"device-hours"`` (the default) the cheapest of
    the fewest and the power-of-two and power-of-two-node counts up to twice as many (the
    fewest is often an odd count whose layout runs less efficiently: 768 B300 take more
    device-hours than 1,024 for Llama 3 70B).  The answers that meet the budget come first,
    fewest device-hours first, then the others with the reason.  An accelerator that cannot
    run the workload at all (a precision it lacks) is answered with that reason.
    ``progress(name)`` is called before each accelerator is sized."""
    if objective not in OBJECTIVES:
        raise UsageError(f"objective={objective!r}: use one of {', '.join(OBJECTIVES)}")
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
        answer = _size_one(workload, name, budget, max_devices, switches, search)
        if objective == "device-hours" and answer.plan is not None and answer.training:
            answer = _cheapest(
                answer,
                answer.plan,
                answer.training,
                workload,
                budget,
                max_devices,
                switches,
                search,
            )
        out.append(answer)
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


def _cheapest(
    fewest: Sizing,
    fewest_plan: Plan,
    fewest_training: TrainingTime,
    workload: Workload,
    budget: TrainingBudget,
    max_devices: int,
    switches: Switches | None,
    search: SearchSpace | None,
) -> Sizing:
    """``fewest`` (planned as ``fewest_plan``), or the count up to twice as many (of
    :func:`~parastrat.planner.fewest.sizing_counts`) that meets the budget in fewer
    device-hours."""
    n0 = fewest_plan.num_devices
    cluster = Cluster(accelerator=fewest.accelerator, num_devices=max_devices)
    best, hours = fewest, fewest_training.device_hours
    for n in sizing_counts(min(2 * n0, max_devices), cluster.devices_per_node):
        if n <= n0:
            continue
        try:
            found = plan(workload, cluster.with_devices(n), switches, search, top_k=1)
        except (UsageError, StrategyError, SpecError):
            continue
        training = found.best.step.time_to_train(budget.tokens)
        if budget.met_by(found.best.step) and training.device_hours < hours:
            best, hours = (
                Sizing(fewest.accelerator, found, training, fewest=n0),
                training.device_hours,
            )
    return best


#: What ``size`` minimises per accelerator.
OBJECTIVES = ("device-hours", "devices")


def _order(s: Sizing) -> tuple[int, float, str]:
    """Met budgets first, by device-hours; then the rest, by name."""
    if s.training is None:
        return (1, 0.0, s.accelerator)
    return (0, s.training.device_hours, s.accelerator)
