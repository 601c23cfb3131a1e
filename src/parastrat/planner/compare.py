"""Compare two strategies: what changes in memory per stage and in step time, term by term.

The question users bring after a config change produced an OOM or a throughput regression:
``compare(a, b, model=..., cluster=..., seq_len=..., global_batch_size=...)`` prices both with
the same model and batch, lists every memory component per pipeline stage and every step-time
term side by side, and names the degree changes and the term that dominate the difference.
``a``/``b`` may be :class:`~parastrat.Strategy` objects, ``"tp=4,pp=2,vpp=5"`` strings, the
form a strategy prints (``"TP4 PP2(VP5) CP1 DP8 SP"``, as a plan's table shows it) or dicts;
read a Megatron config first with :func:`parastrat.adapters.megatron.from_config` (the planner
imports no framework adapter).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import StrategyError, UsageError, Violation
from ..estimate.memory import MemoryReport
from ..estimate.step import StepReport
from ..estimate.track_record import TrackRecord, track_record
from ..spec.cluster import require_cluster
from ..spec.hardware import GiB
from ..spec.workload import Switches, Workload, resolve
from ..strategy import Strategy, as_training
from ..strategy_text import FIELDS
from ..strategy_text import parse_strategy as parse_strategy
from .explain import TERM_NAMES
from .price import price
from .price import price_strategy as price_strategy
from .sensitivity import RankingCheck, ranking_check, step_cost

if TYPE_CHECKING:
    from ..spec.cluster import Cluster


def as_strategy(obj: Any) -> Strategy:
    """A Strategy from a Strategy, a dict, a ``"tp=4,pp=2"`` string or the form a strategy
    prints (``"TP4 PP2 CP1 SP"``: :func:`parastrat.strategy_text.parse_strategy`), a text read
    as a training strategy (:func:`~parastrat.strategy.as_training`: "Ulysses4" is Megatron's
    CP4 with all-to-all, as ``explain --strategy`` reads it); UsageError otherwise (a Megatron
    config is read with :func:`parastrat.adapters.megatron.from_config`)."""
    if isinstance(obj, Strategy):
        return obj
    if isinstance(obj, str):
        return as_training(parse_strategy(obj))
    if isinstance(obj, dict):
        return Strategy.from_dict(obj)
    raise UsageError(
        f"cannot compare a {type(obj).__name__}: give a Strategy, a dict, a "
        '"tp=4,pp=2" string or a printed strategy ("TP4 PP2 CP1 SP"); read a Megatron config with '
        "parastrat.adapters.megatron.from_config(cfg) first"
    )


@dataclass
class Comparison:
    """Side-by-side memory and step time of two strategies, and what changed."""

    a: Strategy
    b: Strategy
    memory: tuple[MemoryReport, MemoryReport]
    step: tuple[StepReport, StepReport]
    changed: dict[str, tuple[Any, Any]]
    cause: str
    notes: list[str] = field(default_factory=list)
    #: the model's record on published runs of this class
    #: (:func:`~parastrat.estimate.track_record.track_record`): how far to trust the difference
    track_record: TrackRecord | None = None
    #: whether b's lead (or lag) over a survives each physical constant 10 % off
    #: (:func:`~parastrat.planner.sensitivity.ranking_check`)
    ranking: RankingCheck | None = None

    @property
    def step_delta(self) -> dict[str, float]:
        """b - a, seconds per step, for every breakdown term (and ``step_time_s``)."""
        sa, sb = self.step
        keys = list(dict.fromkeys([*sa.breakdown, *sb.breakdown]))
        out = {k: sb.breakdown.get(k, 0.0) - sa.breakdown.get(k, 0.0) for k in keys}
        out["step_time_s"] = sb.step_time_s - sa.step_time_s
        return out

    @property
    def memory_delta(self) -> list[dict[str, float]]:
        """Per stage, b - a in bytes for each component, when both pipelines have the same
        number of stages.  With different PP the stages hold different layers and a
        stage-by-stage difference means nothing: the rows then compare the peak (worst)
        stage of each side, ``[{"stage_a": i, "stage_b": j, ...deltas}]``."""
        ma, mb = self.memory
        keys = ("weights", "gradients", "optimizer", "activations", "other", "total")
        if len(ma.stages) == len(mb.stages):
            return [
                {k: getattr(sb, k) - getattr(sa, k) for k in keys}
                for sa, sb in zip(ma.stages, mb.stages)
            ]
        pa, pb = ma.peak_stage, mb.peak_stage
        row: dict[str, float] = {"stage_a": pa.stage, "stage_b": pb.stage}
        row.update({k: getattr(pb, k) - getattr(pa, k) for k in keys})
        return [row]

    def to_dict(self) -> dict[str, Any]:
        """Both sides and every delta, for ``parastrat explain --compare --format json``."""
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "changed": {k: list(v) for k, v in self.changed.items()},
            "memory": [self.memory[0].to_dict(), self.memory[1].to_dict()],
            "step": [self.step[0].to_dict(), self.step[1].to_dict()],
            "step_delta": self.step_delta,
            "memory_delta": self.memory_delta,
            "cause": self.cause,
            "notes": list(self.notes),
            "track_record": self.track_record.to_dict() if self.track_record else None,
            "ranking": self.ranking.to_dict() if self.ranking else None,
        }

    def summary(self) -> str:
        """A readable report: degrees changed, per-stage memory, step terms, the cause."""
        sa, sb = self.step
        ma, mb = self.memory
        lines = [
            f"A: {self.a}",
            f"B: {self.b}",
            "changed: "
            + (", ".join(f"{k} {x} -> {y}" for k, (x, y) in self.changed.items()) or "nothing"),
        ]
        lines.append(f"peak memory: {ma.peak_bytes / GiB:.1f} -> {mb.peak_bytes / GiB:.1f} GiB")
        comps = ("weights", "gradients", "optimizer", "activations", "total")
        if len(ma.stages) == len(mb.stages):
            lines.append("memory per stage (GiB, A -> B): stage weights grads optim activ total")
            for i, (x, y) in enumerate(zip(ma.stages, mb.stages)):
                cells = " ".join(
                    f"{getattr(x, k) / GiB:.1f}->{getattr(y, k) / GiB:.1f}" for k in comps
                )
                lines.append(f"  {i:>3}  {cells}")
        else:
            # different PP: each side's own stages (their layers differ), not a zip
            for name, rep in (("A", ma), ("B", mb)):
                lines.append(
                    f"memory per stage of {name} ({len(rep.stages)} stages, GiB): "
                    "stage layers weights grads optim activ total"
                )
                for st in rep.stages:
                    cells = " ".join(f"{getattr(st, k) / GiB:.1f}" for k in comps)
                    lines.append(f"  {st.stage:>3}  {st.layers:>3}  {cells}")
        lines.append(
            f"step: {sa.step_time_s:.3f} -> {sb.step_time_s:.3f} s "
            f"({sb.step_time_s / sa.step_time_s - 1:+.1%}); tokens/s/GPU "
            f"{sa.tokens_per_s_per_gpu:,.0f} -> {sb.tokens_per_s_per_gpu:,.0f}"
        )
        for k, d in sorted(self.step_delta.items(), key=lambda kv: -abs(kv[1])):
            if k != "step_time_s" and abs(d) > 1e-6:
                lines.append(
                    f"  {k:<12} {sa.breakdown.get(k, 0.0):9.4f} -> "
                    f"{sb.breakdown.get(k, 0.0):9.4f}  ({d:+.4f})"
                )
        lines.append(f"cause: {self.cause}")
        lines += [f"note: {n}" for n in self.notes]
        if self.ranking is not None:
            lines.append(f"robustness: {self.ranking.summary()}")
        if self.track_record is not None:
            lines.append(f"record: {self.track_record.summary()}")
        return "\n".join(lines)


def _sided(violations: list[Violation], side: str, obj: Any) -> list[Violation]:
    """``violations`` with each message naming the side (``a`` or ``b``) that broke it."""
    return [replace(v, message=f"strategy {side} ({obj}): {v.message}") for v in violations]


def compare(
    a: Any,
    b: Any,
    *,
    cluster: Cluster,
    model: Any = None,
    workload: Workload | None = None,
    switches: Switches | None = None,
    micro_batch_size: int | tuple[int, int] | None = None,
    recompute: str | tuple[str, str] | None = None,
    **options: Any,
) -> Comparison:
    """Price strategies ``a`` and ``b`` for the same model, cluster and batch; say what changed.

    Typed form: ``compare(a, b, cluster=..., workload=..., switches=...)``; the keyword form
    (``model=..., seq_len=..., global_batch_size=...`` and any
    :class:`~parastrat.spec.workload.Switches` field such as ``moe_dispatcher``) builds them.
    ``micro_batch_size`` and ``recompute`` may be pairs (one for each side).
    """
    pairs: dict[str, tuple[Any, Any]] = {}
    for name, value in (("micro_batch_size", micro_batch_size), ("recompute", recompute)):
        if isinstance(value, tuple):
            if len(value) != 2:
                raise UsageError(f"{name}={value!r}: give one value, or a pair (a's, b's)")
            pairs[name] = value
        elif value is not None:
            options[name] = value
    cluster = require_cluster(cluster, "compare()")
    wl, sw = resolve(model, workload, switches, who="compare", **options)
    sides, costs = [], []
    for i, obj in enumerate((a, b)):
        wl_i = (
            wl.with_micro_batch(pairs["micro_batch_size"][i]) if "micro_batch_size" in pairs else wl
        )
        sw_i = sw.with_recompute(pairs["recompute"][i]) if "recompute" in pairs else sw
        try:
            s, step, mem = price(wl_i, as_strategy(obj), cluster, sw_i)
        except StrategyError as exc:  # say which of the two broke the rules
            raise StrategyError(_sided(exc.violations, "ab"[i], obj)) from None
        sides.append((s, step, mem, wl_i.mbs, step.recompute))
        costs.append(step_cost(wl_i, s, sw_i))
    (sa, ta, ma, mba, ra), (sb, tb, mb, mbb, rb) = sides
    changed = {
        k: (getattr(sa, k), getattr(sb, k)) for k in FIELDS if getattr(sa, k) != getattr(sb, k)
    }
    if mba != mbb:
        changed["micro_batch_size"] = (mba, mbb)
    if ra != rb:
        changed["recompute"] = (ra, rb)
    cause = _cause(ta, tb, ma, mb, cluster, changed)
    notes = list(dict.fromkeys([*ta.notes, *tb.notes]))
    record = track_record(wl.model, cluster.accel)
    check = ranking_check(costs[0], costs[1], cluster)
    return Comparison(sa, sb, (ma, mb), (ta, tb), changed, cause, notes, record, check)


def _cause(
    ta: StepReport,
    tb: StepReport,
    ma: MemoryReport,
    mb: MemoryReport,
    cluster: Cluster,
    changed: dict[str, tuple[Any, Any]],
) -> str:
    what = ", ".join(f"{k} {x}->{y}" for k, (x, y) in changed.items()) or "no degree change"
    parts = []
    cap = cluster.memory_bytes
    fa, fb = ma.fits(cluster.accel), mb.fits(cluster.accel)
    if fa and not fb:
        st = mb.peak_stage
        # same PP: the same stage of A; different PP: A's own peak stage
        sa_ = ma.stages[st.stage] if len(ma.stages) == len(mb.stages) else ma.peak_stage
        comps = {
            k: getattr(st, k) - getattr(sa_, k)
            for k in ("weights", "gradients", "optimizer", "activations")
        }
        k = max(comps, key=comps.get)  # type: ignore[arg-type]
        parts.append(
            f"B runs out of memory ({mb.peak_bytes / GiB:.1f} GiB > {cap / GiB:.1f} "
            f"GiB) on stage {st.stage}, mostly {k} (+{comps[k] / GiB:.1f} GiB)"
        )
    delta = tb.step_time_s - ta.step_time_s
    terms = {k: tb.breakdown.get(k, 0.0) - ta.breakdown.get(k, 0.0) for k in TERM_NAMES}
    key = max(terms, key=lambda k: abs(terms[k]))
    direction = "slower" if delta > 0 else "faster"
    parts.append(
        f"B is {abs(delta) / ta.step_time_s:.1%} {direction}; the largest change is "
        f"{TERM_NAMES[key]} ({terms[key]:+.3f} s per step), from {what}"
    )
    return "; ".join(parts)
