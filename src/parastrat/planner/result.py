"""What a plan returns: :class:`Candidate` (one priced strategy) and :class:`Plan` (the
ranking and how the search went)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..estimate.memory import MemoryReport
from ..estimate.step import StepReport
from ..estimate.track_record import TrackRecord, track_record
from ..spec.model import ModelSpec
from ..spec.workload import SearchSpace, Switches, Workload
from ..strategy import Strategy
from .explain import explain_plan
from .heuristics import Heuristic
from .published import PublishedBeside, published_beside
from .ranking import VPP_TIE, layout_degrees, layout_key

if TYPE_CHECKING:
    from ..spec.cluster import Cluster


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanContext:
    """What a plan priced every candidate for, carried by each candidate it returns
    (:attr:`Candidate.context`), so that a candidate applies, is checked and prints as its
    plan would (``apply(cfg, plan.candidates[1])``: the model and sequence length checked, the
    plan's switches written).  Its fields are :class:`Plan`'s, by the same names."""

    model: ModelSpec
    cluster: Cluster
    seq_len: int
    global_batch_size: int
    precision: str
    num_devices: int = 0
    workload: Workload | None = None
    switches: Switches = field(default_factory=Switches)
    search: SearchSpace = field(default_factory=SearchSpace)

    @classmethod
    def of(cls, plan: Plan) -> PlanContext:
        """``plan``'s context."""
        return cls(**{f.name: getattr(plan, f.name) for f in fields(cls)})

    def plan(self, candidate: Candidate) -> Plan:
        """The plan with only ``candidate``."""
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return Plan(**mine, candidates=[candidate], ranked=[candidate])


@dataclass
class Candidate:
    """One ranked strategy: degrees (world size set), micro-batch, recompute, memory, time."""

    strategy: Strategy
    micro_batch_size: int
    recompute: str
    memory: MemoryReport
    step: StepReport
    why: str = ""
    notes: tuple[str, ...] = field(default=())
    #: other VPP / layer-split variants of the same layout within :data:`VPP_TIE` (slower
    #: first-found order is not kept: sorted by step time)
    alternatives: list[Candidate] = field(default_factory=list)
    #: the switches it was priced with when they differ from the plan's (CPU activation
    #: offloading: planner/offload.py); None = the plan's
    switches: Switches | None = None
    #: the plan it was priced in (set by the planner on every candidate it returns; None for
    #: one built by hand); where it came from, not what was priced: not compared, not shown
    context: PlanContext | None = field(default=None, compare=False, repr=False)

    def as_plan(self) -> Plan | None:
        """The plan with only this candidate, as it was priced (None without a
        :attr:`context`): what the adapters apply, check and print for a candidate."""
        return self.context.plan(self) if self.context is not None else None

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted training throughput of this candidate."""
        return self.step.tokens_per_s_per_gpu

    @property
    def layout(self) -> tuple:
        """What the candidate is ranked as: degrees except VPP and the layer split, plus the
        micro-batch and recompute mode."""
        return layout_key(self.strategy, self.micro_batch_size, self.recompute)

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``{"candidates": [...]}`` in ``parastrat plan --format json``."""
        return {
            "strategy": self.strategy.to_dict(),
            "micro_batch_size": self.micro_batch_size,
            "recompute": self.recompute,
            "memory": self.memory.to_dict(),
            "step": self.step.to_dict(),
            "why": self.why,
            # only for a candidate priced with CPU offloading (planner/offload.py)
            **({"cpu_offload_layers": self.cpu_offload_layers} if self.cpu_offload_layers else {}),
            "alternatives": [
                {
                    "strategy": a.strategy.to_dict(),
                    "step_time_s": a.step.step_time_s,
                    "tokens_per_s_per_gpu": a.step.tokens_per_s_per_gpu,
                    "peak_bytes": a.memory.peak_bytes,
                }
                for a in self.alternatives
            ],
        }

    @property
    def cpu_offload_layers(self) -> int:
        """Layers priced with CPU activation offloading (0: none; planner/offload.py)."""
        return self.switches.cpu_offload_layers if self.switches else 0

    def label(self) -> str:
        """``TP4 PP8(VP5) CP1 DP2 SP mbs1 selective``."""
        return f"{self.strategy} mbs{self.micro_batch_size} {self.recompute}" + (
            f" offload{self.cpu_offload_layers}" if self.cpu_offload_layers else ""
        )


@dataclass
class Plan:
    """A ranked list of fitting strategies (best first) and how the search went."""

    model: ModelSpec
    cluster: Cluster
    seq_len: int
    global_batch_size: int
    precision: str
    #: the ranked candidates, best first, at most ``top_k`` of them
    candidates: list[Candidate]
    heuristic: Heuristic | None = None
    #: the whole ranking the search kept (at least :data:`KEEP_AT_LEAST` layouts, best first):
    #: ``candidates`` is its first ``top_k``; :meth:`find` looks here
    ranked: list[Candidate] = field(default_factory=list)
    #: legal strategies enumerated, (strategy, micro-batch) pairs priced, memory checks
    enumerated: int = 0
    priced: int = 0
    memory_checks: int = 0
    bounded: int = 0
    #: degree combinations dropped because their parameters alone cannot fit
    memory_pruned: int = 0
    elapsed_s: float = 0.0
    num_devices: int = 0
    #: the typed values the plan was made for: the workload (its micro-batch size unset: it
    #: was searched), the switches every candidate was priced with (recompute unset: searched)
    #: and the search space
    workload: Workload | None = None
    switches: Switches = field(default_factory=Switches)
    search: SearchSpace = field(default_factory=SearchSpace)

    @property
    def step_options(self) -> dict[str, Any]:
        """The switches every candidate was priced with, as :func:`parastrat.estimate_step`
        keyword arguments (to price other strategies alike)."""
        out = self.switches.to_kwargs()
        del out["recompute"], out["fp8_param_gather"]
        return out

    @property
    def best(self) -> Candidate:
        """The first-ranked candidate."""
        return self.candidates[0]

    def with_context(self) -> Plan:
        """This plan, each candidate it ranked (their alternatives too) carrying its
        :class:`PlanContext` (the planner's last step)."""
        context = PlanContext.of(self)
        for top in (*self.ranked, *self.candidates):
            for c in (top, *top.alternatives):
                c.context = context
        return self

    def priced_as(
        self, candidate: Candidate
    ) -> tuple[Workload, Strategy, Cluster, Switches] | None:
        """``candidate`` as the typed values that price it again: the workload at its
        micro-batch, its strategy, the cluster, the switches with its recompute (None for a
        hand-built plan without a workload)."""
        if self.workload is None:
            return None
        workload = self.workload.with_micro_batch(candidate.micro_batch_size)
        switches = (candidate.switches or self.switches).with_recompute(candidate.recompute)
        return workload, candidate.strategy, self.cluster, switches

    @property
    def track_record(self) -> TrackRecord | None:
        """The model's record on published runs of this model's class on this accelerator
        (:func:`~parastrat.estimate.track_record.track_record`): how far to trust the
        predictions and the ranking."""
        return track_record(self.model, self.cluster.accel)

    def published(self, limit: int = 3) -> list[PublishedBeside]:
        """The runs NVIDIA published for this model preset on this accelerator (the same job
        first, with its layout priced beside the choice), at most ``limit``
        (:func:`~parastrat.planner.published.published_beside`): what a tuned recipe ran and
        measured, and how far the model was from it."""
        return published_beside(self, limit)

    def __repr__(self) -> str:
        """One line: model, devices, the best strategy and how many were ranked (the
        candidates themselves are in :attr:`candidates`; ``print`` of a whole plan stays short)."""
        best = (
            f"{self.best.strategy} mbs{self.best.micro_batch_size} {self.best.recompute}, "
            f"{self.best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
            if self.candidates
            else "nothing fits"
        )
        return (
            f"Plan({self.model.name} on {self.num_devices or self.cluster.num_devices} x "
            f"{self.cluster.accel.name}: best {best}; {len(self.candidates)} candidates, "
            f"{len(self.ranked)} ranked)"
        )

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self) -> Iterator[Candidate]:
        """The candidates, best first (``for c in plan``)."""
        return iter(self.candidates)

    def __getitem__(self, i: int) -> Candidate:
        return self.candidates[i]

    @property
    def evaluations(self) -> int:
        """Candidate evaluations the search made: lower bounds, step pricings, memory checks
        (what "candidates per second" counts)."""
        return self.bounded + self.priced + self.memory_checks

    def to_dict(self) -> dict[str, Any]:
        """``{"candidates": [...], "track_record": ..., "published": [...]}``: each candidate
        with strategy, micro_batch_size, recompute, memory, step and why; the
        :attr:`track_record` (or None); the :meth:`published` runs of this model and
        accelerator."""
        record = self.track_record
        return {
            "candidates": [c.to_dict() for c in self.candidates],
            "track_record": record.to_dict() if record is not None else None,
            "published": [b.to_dict() for b in self.published()],
        }

    def explain(self, render: Callable[[dict[str, Any]], str] | None = None) -> str:
        """The seed guide's starting point beside the choice, and why the model departs; the
        switches that would shorten the choice's step, written by ``render`` (default: Python
        keywords; the CLI passes its flags)."""
        return explain_plan(self, render)

    def find(
        self, strategy: Strategy, *, step_time_s: float | None = None, tolerance: float = VPP_TIE
    ) -> int | None:
        """0-based rank of the first candidate with ``strategy``'s layout in
        :attr:`ranked` (which ``candidates`` begins), or None.

        Matching rule (any micro-batch and recompute mode): TP, PP, CP, EP and ETP equal, and
        VPP equal, or ``strategy``'s VPP among the candidate's near-equal ``alternatives``, or
        (when ``step_time_s``, the strategy's own predicted step, is given) within
        ``tolerance`` of the candidate's step time: a VPP the plan collapsed as a tie.
        """
        key = layout_degrees(strategy)
        for i, c in enumerate(self.ranked or self.candidates):
            if layout_degrees(c.strategy) != key:
                continue
            if c.strategy.vpp == strategy.vpp or any(
                a.strategy.vpp == strategy.vpp for a in c.alternatives
            ):
                return i
            if step_time_s is not None and (step_time_s <= c.step.step_time_s * (1 + tolerance)):
                return i
        return None
