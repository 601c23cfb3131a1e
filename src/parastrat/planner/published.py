"""A plan beside the runs NVIDIA published for the same model on the same accelerator.

A planner that says "TP2 PP4 is best" is believed when it also says what the tuned recipe ran
and what that run measured.  :func:`published_beside` finds the published runs of the plan's
model preset on its accelerator (:mod:`parastrat.estimate.published_runs`); for a run of the
very job the plan was asked about (devices, sequence, global batch, precision), it prices the
published layout with the plan's own switches, so the choice and the tuned layout are compared
as the model prices both, next to what the tuned layout measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import SpecError, StrategyError, UsageError
from ..estimate.efficiency import host_op_time
from ..estimate.published_runs import PublishedRun, published_runs
from ..estimate.step import StepReport
from ..spec.models import get as get_model
from ..strategy import Strategy
from .price import price
from .ranking import layout_degrees
from .sensitivity import host_break_even, host_clause, step_cost

if TYPE_CHECKING:
    from ..spec.cluster import Cluster
    from ..spec.workload import Workload
    from .result import Plan


@dataclass(frozen=True)
class PublishedBeside:
    """One published run of the plan's model and accelerator, and (the same job only) its
    layout priced with the plan's switches."""

    run: PublishedRun
    #: whether the run is the job the plan was asked about
    same_job: bool
    #: the published layout priced with the plan's switches (the same job only; None when it
    #: is another job, or when the layout cannot be priced on this cluster: ``why_not``)
    priced: StepReport | None = None
    #: the plan's choice, tokens/s/GPU as priced (the same job only)
    choice_tokens_per_s: float | None = None
    why_not: str = ""
    #: the fastest run measured for the same job only: the host seconds per eager operation at
    #: which its layout, as priced, overtakes a choice priced faster (None: no such cost within
    #: :data:`~parastrat.planner.sensitivity.HOST_RANGE` of the priced one)
    host_break_even_s: float | None = None
    host_op_s: float = 0.0

    @property
    def choice_over_published(self) -> float | None:
        """The plan's choice over the published layout, both as priced (1.10: the plan
        believes its choice 10 % faster); None unless both were priced."""
        if self.priced is None or not self.choice_tokens_per_s:
            return None
        return self.choice_tokens_per_s / self.priced.tokens_per_s_per_gpu

    def summary(self) -> str:
        """One line: the run, and for the same job how the choice compares as priced."""
        head = "this job as published: " if self.same_job else "published: "
        line = head + self.run.summary()
        ratio = self.choice_over_published
        if ratio is not None and self.priced is not None:
            line += (
                f"; priced with this plan's switches {self.priced.tokens_per_s_per_gpu:,.0f}, "
                f"the choice prices {ratio:.2f}x that"
            )
            if self.host_break_even_s is not None:
                clause = host_clause(self.host_break_even_s, self.host_op_s)
                line += f"; this layout comes out ahead {clause}"
        elif self.why_not:
            line += f"; not priced here: {self.why_not}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The comparison as plain values, for JSON output."""
        return {
            **self.run.to_dict(),
            "same_job": self.same_job,
            "priced_tokens_per_s_per_gpu": (
                self.priced.tokens_per_s_per_gpu if self.priced is not None else None
            ),
            "choice_over_published": self.choice_over_published,
            "why_not": self.why_not or None,
            "host_break_even_s": self.host_break_even_s,
        }


def published_beside(plan: Plan, limit: int = 3) -> list[PublishedBeside]:
    """The published runs of ``plan``'s model preset on its accelerator, the same job first,
    then the nearest device counts (at most ``limit``); the same job's layout priced with the
    plan's switches beside its choice."""
    if not is_the_preset(plan.model):
        return []
    devices = plan.num_devices or plan.cluster.num_devices
    runs = published_runs(plan.model.name, plan.cluster.accel.name)
    job = (devices, plan.seq_len, plan.global_batch_size, plan.precision)
    same = [r for r in runs if r.same_job(*job)]
    others = sorted(
        (r for r in runs if not r.same_job(*job)), key=lambda r: abs(r.devices - devices)
    )
    out = _with_break_even(plan, [_priced(plan, r) for r in same])
    return out + [PublishedBeside(r, same_job=False) for r in others][: max(0, limit - len(out))]


def _with_break_even(plan: Plan, same: list[PublishedBeside]) -> list[PublishedBeside]:
    """``same`` with the host break-even of the fastest measured run whose layout the plan
    prices slower than its choice (:func:`~parastrat.planner.sensitivity.host_break_even`):
    the cost per host operation at which the model would agree with the measurement."""
    slower = [b for b in same if (b.choice_over_published or 0.0) > 1.0]
    choice = plan.priced_as(plan.best) if plan.candidates else None
    if not slower or choice is None or plan.workload is None:
        return same
    best = max(slower, key=lambda b: b.run.measured)
    wl = plan.workload.with_micro_batch(best.run.micro_batch_size)
    sw = plan.switches.with_recompute(best.run.recompute)
    published = step_cost(wl, Strategy.parse(best.run.strategy), sw)
    even = host_break_even(step_cost(choice[0], choice[1], choice[3]), published, plan.cluster)
    host = host_op_time(plan.cluster.accel)
    return [replace(b, host_break_even_s=even, host_op_s=host) if b is best else b for b in same]


def same_job_lines(
    workload: Workload, cluster: Cluster, strategy: Strategy, step: StepReport
) -> list[str]:
    """What ``explain`` says of the published runs of exactly this job: the layout each ran and
    measured, and for the very layout being explained, its measurement beside this price."""
    if workload.global_batch_size is None or not is_the_preset(workload.model):
        return []
    job = (cluster.num_devices, workload.seq_len, workload.global_batch_size, workload.precision)
    out = []
    for run in published_runs(workload.model.name, cluster.accel.name):
        if not run.same_job(*job):
            continue
        line = f"published: {run.summary()}"
        if _same_layout(Strategy.parse(run.strategy), strategy):
            priced = step.tokens_per_s_per_gpu
            line += f"; this layout, priced here {priced:,.0f} ({priced / run.measured - 1:+.1%})"
        out.append(line)
    return out


def is_the_preset(model: Any) -> bool:
    """Whether ``model`` is the preset its name names (the runs were measured on that model,
    not on a spec that borrowed its name with another shape)."""
    try:
        return bool(model == get_model(model.name))
    except SpecError:
        return False


def _same_layout(a: Strategy, b: Strategy) -> bool:
    """Whether two strategies are one layout: the degrees, the virtual stages and the
    data-parallel sharding (the layer split and the micro-batch may differ)."""
    return layout_degrees(a) + (a.vpp, a.fsdp) == layout_degrees(b) + (b.vpp, b.fsdp)


def _priced(plan: Plan, run: PublishedRun) -> PublishedBeside:
    """``run``'s layout priced on the plan's cluster with its switches (the run's micro-batch
    and recompute), beside the plan's choice."""
    choice = plan.best.tokens_per_s_per_gpu if plan.candidates else None
    if plan.workload is None:
        return PublishedBeside(run, True, why_not="the plan carries no workload")
    workload = plan.workload.with_micro_batch(run.micro_batch_size)
    switches = plan.switches.with_recompute(run.recompute)
    try:
        strategy = Strategy.parse(run.strategy)
        _, step, _ = price(workload, strategy, plan.cluster, switches)
    except (StrategyError, SpecError, UsageError) as e:
        why = str(e).splitlines()[0]
        return PublishedBeside(run, True, choice_tokens_per_s=choice, why_not=why)
    return PublishedBeside(run, True, priced=step, choice_tokens_per_s=choice)
