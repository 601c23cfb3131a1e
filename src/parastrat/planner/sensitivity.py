"""Which measured constant a prediction hangs on, and so what to measure first.

The step model prices every strategy from a handful of physical constants per accelerator: the
fraction of the dense peak a large GEMM sustains, fused attention's fraction, the fraction of
HBM bandwidth element-wise kernels reach, the host's seconds per eager operation, and the bus
bandwidth of the scale-up and scale-out links (``parastrat.estimate.efficiency``,
``parastrat.spec.hardware``).  Each is a published or cited figure, not one measured on the
user's machine.  :func:`sensitivity` prices the strategy again with each constant 10 % worse,
one at a time, through the same calibration path a measurement takes
(:meth:`~parastrat.spec.cluster.Cluster.calibrate`), and says how much longer the step gets
and which ``parastrat bench`` run measures that constant.  The constant with the largest share
is the one to measure before trusting the prediction on another machine; one with no share
(the scale-out link of a one-node job) needs no measurement for this strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ..estimate.efficiency import host_op_time
from ..estimate.efficiency import profile as kernel_profile
from ..spec.cluster import HOST_OP_S_MAX, OPS, SPANS, Cluster
from ..spec.workload import Switches, Workload
from ..strategy import Strategy
from .price import price

if TYPE_CHECKING:
    from ..estimate.efficiency import KernelProfile

#: How much worse each constant is made: 10 %, about the spread of achievable rates between
#: machines of one kind (clocks, power limits, library versions).
WORSE = 0.10

#: ``parastrat bench`` runs that measure each kind of constant on the user's machine.
BENCH_KERNELS = "parastrat bench --kernels --accelerator {accel} --fit cal.json"
BENCH_LINKS = {
    "intra": "parastrat bench --span intra --fit cal.json (ranks of one node)",
    "inter": "parastrat bench --span inter --fit cal.json (ranks across nodes, under torchrun)",
}


@dataclass(frozen=True)
class Sensitivity:
    """How much one constant moves a prediction: ``step_change`` is the relative step-time
    increase when the constant is :data:`WORSE` worse (rates and bandwidths 10 % lower, host
    time 10 % higher)."""

    key: str
    constant: str
    value: str
    step_change: float
    measure: str
    #: the value comes from the cluster's calibration, not the model's default
    measured: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class _Knob:
    """One constant: its key, its name, its current value in words, and the calibration that
    scales it by a rate factor ``f`` (rates and bandwidths times ``f``, fractions capped at 1;
    the host time times ``2 - f``: ``f = 0.9`` is 10 % worse, ``1.1`` 10 % better)."""

    key: str
    constant: str
    value: Callable[[Cluster, KernelProfile, str], str]
    scaled: Callable[[Cluster, KernelProfile, float], dict[str, Any]]
    measure: str


def _calibration(cluster: Cluster) -> dict[str, Any]:
    """The calibration ``cluster`` already has, as a dict (an empty one without)."""
    return cluster.calibration.to_dict() if cluster.calibration is not None else {"ops": {}}


def _kernels(cluster: Cluster, **changed: Any) -> dict[str, Any]:
    """The calibration of ``cluster`` with its kernel constants changed as ``changed`` says."""
    cal = _calibration(cluster)
    cal["kernels"] = {**cal.get("kernels", {}), **changed}
    return cal


def _frac(value: float, f: float) -> float:
    """A fraction of a peak scaled by ``f``, kept at most 1."""
    return min(1.0, value * f)


def _attention(cluster: Cluster, prof: KernelProfile, f: float) -> dict[str, float]:
    """The attention constants scaled by ``f``: training's ``attn_eff``, and a measured
    forward ``attn_fwd_eff`` when the cluster's calibration has one (DiT inference reads it)."""
    out = {"attn_eff": _frac(prof.attn_eff, f)}
    fwd = (cluster.accel.kernels or {}).get("attn_fwd_eff")
    if fwd:
        out["attn_fwd_eff"] = _frac(float(fwd), f)
    return out


def _links(cluster: Cluster, span: str, f: float) -> dict[str, Any]:
    """The calibration of ``cluster`` with every collective's bus bandwidth on ``span`` scaled
    by ``f`` (its latency kept)."""
    cal = _calibration(cluster)
    ops = {op: dict(spans) for op, spans in cal.get("ops", {}).items()}
    for op in OPS:
        for sp in SPANS:
            alpha, bw = cluster.collective_params(op, sp)
            scale = f if sp == span else 1.0
            ops.setdefault(op, {})[sp] = {"alpha_s": alpha, "busbw_Bps": bw * scale}
    return {**cal, "ops": ops}


def _bw(span: str) -> Callable[[Cluster, KernelProfile, str], str]:
    def value(cluster: Cluster, _prof: KernelProfile, _prec: str) -> str:
        bws = {cluster.collective_params(op, span)[1] for op in OPS}
        return "/".join(f"{b / 1e9:.0f}" for b in sorted(bws)) + " GB/s bus bandwidth"

    return value


KNOBS = (
    _Knob(
        "gemm_eff",
        "GEMM rate",
        lambda _c, prof, prec: f"{prof.gemm_fraction(prec):.2f} of the {prec} peak",
        lambda c, prof, f: _kernels(c, gemm_eff={p: _frac(e, f) for p, e in prof.gemm_eff.items()}),
        BENCH_KERNELS,
    ),
    _Knob(
        "attn_eff",
        "attention rate",
        lambda _c, prof, _p: f"{prof.attn_eff:.2f} of the bf16 peak",
        lambda c, prof, f: _kernels(c, **_attention(c, prof, f)),
        BENCH_KERNELS,
    ),
    _Knob(
        "mem_eff",
        "HBM rate of element-wise kernels",
        lambda _c, prof, _p: f"{prof.mem_eff:.2f} of HBM bandwidth",
        lambda c, prof, f: _kernels(c, mem_eff=_frac(prof.mem_eff, f)),
        BENCH_KERNELS,
    ),
    _Knob(
        "host_op_s",
        "host time per eager operation",
        lambda c, _prof, _p: f"{host_op_time(c.accel) * 1e6:.1f} us",
        lambda c, _prof, f: _kernels(
            c, host_op_s=min(HOST_OP_S_MAX, host_op_time(c.accel) * (2 - f))
        ),
        BENCH_KERNELS,
    ),
    _Knob(
        "intra_bw",
        "scale-up link",
        _bw("intra"),
        lambda c, _p, f: _links(c, "intra", f),
        BENCH_LINKS["intra"],
    ),
    _Knob(
        "inter_bw",
        "scale-out link",
        _bw("inter"),
        lambda c, _p, f: _links(c, "inter", f),
        BENCH_LINKS["inter"],
    ),
)


def sensitivity(
    workload: Workload, strategy: Strategy, cluster: Cluster, switches: Switches
) -> list[Sensitivity]:
    """Each constant of :data:`KNOBS` :data:`WORSE` worse, one at a time: the relative step
    change it causes, largest first (a training step, :func:`~.price.price`)."""
    _s, base, _m = price(workload, strategy, cluster, switches)
    return changes(step_cost(workload, strategy, switches), cluster, base.precision)


def step_cost(
    workload: Workload, strategy: Strategy, switches: Switches
) -> Callable[[Cluster], float]:
    """Seconds of one training step of ``strategy`` on a cluster (:func:`~.price.price`)."""

    def seconds(cluster: Cluster) -> float:
        return price(workload, strategy, cluster, switches)[1].step_time_s

    return seconds


def changes(
    cost: Callable[[Cluster], float],
    cluster: Cluster,
    precision: str,
    attention_eff: float | None = None,
) -> list[Sensitivity]:
    """The relative change of ``cost`` (seconds of whatever is priced on a cluster: a training
    step, a DiT request) when each constant of :data:`KNOBS` is :data:`WORSE` worse on
    ``cluster``, largest first; ``precision`` names the GEMM peak the rate is a fraction of;
    ``attention_eff``, when the priced work uses another attention figure than the training
    profile's (DiT inference: the forward kernel's), is the value shown for attention."""
    base = cost(cluster)
    prof = kernel_profile(cluster.accel)
    out = []
    for knob in KNOBS:
        worse = cluster.calibrate(knob.scaled(cluster, prof, 1 - WORSE))
        out.append(
            Sensitivity(
                key=knob.key,
                constant=knob.constant,
                value=knob.value(cluster, prof, precision),
                step_change=cost(worse) / base - 1,
                measure=knob.measure.format(accel=cluster.accel.name),
                measured=_measured(knob.key, cluster),
            )
        )
    if attention_eff is not None:
        shown = f"{attention_eff:.2f} of the bf16 peak, forward"
        out = [replace(x, value=shown) if x.key == "attn_eff" else x for x in out]
    return sorted(out, key=lambda x: -x.step_change)


@dataclass(frozen=True)
class RankingCheck:
    """Whether one strategy's lead over another survives the constants being off: ``lead`` is
    ``b``'s cost over ``a``'s minus 1 as priced (negative: ``b`` is faster), ``leads`` the same
    with each constant of :data:`KNOBS` 10 % worse and 10 % better, one at a time
    (``(constant, "worse" | "better", lead)``)."""

    lead: float
    leads: tuple[tuple[str, str, float], ...]
    #: the host seconds per eager operation at which the order reverses (None: it holds from
    #: 1/:data:`HOST_RANGE` to :data:`HOST_RANGE` times ``host_op_s``), and the cluster's value
    host_break_even_s: float | None = None
    host_op_s: float = 0.0

    @property
    def flips(self) -> tuple[tuple[str, str, float], ...]:
        """The changes under which the other strategy comes out ahead."""
        return tuple(x for x in self.leads if (x[2] < 0) != (self.lead < 0) and x[2] != 0)

    def summary(self, a: str = "A", b: str = "B") -> str:
        """One line: how much faster or slower ``b`` is as priced, the range under the
        changes, and whether it stays so."""

        def word(x: float) -> str:
            return "faster" if x < 0 else "slower"

        lo, hi = (min(x[2] for x in self.leads), max(x[2] for x in self.leads))
        text = (
            f"{b} is {abs(self.lead):.1%} {word(self.lead)} than {a} as priced "
            f"({lo:+.1%} to {hi:+.1%} with any one constant 10% worse or better)"
        )
        if not self.flips:
            text += f"; it stays {word(self.lead)} under every one"
        else:
            flips = ", ".join(f"the {c} 10% {d}" for c, d, _ in self.flips)
            text += f"; it turns {word(-self.lead)} with {flips}"
        return text + self._host_clause(word(-self.lead))

    def _host_clause(self, turned: str) -> str:
        """Where the host constant reverses the order, if it does within the searched range."""
        if self.host_break_even_s is None:
            return ""
        return f"; it turns {turned} {host_clause(self.host_break_even_s, self.host_op_s)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "lead": self.lead,
            "leads": [{"constant": c, "change": d, "lead": x} for c, d, x in self.leads],
            "order_holds": not self.flips,
            "host_op_s": self.host_op_s,
            "host_break_even_s": self.host_break_even_s,
        }


def ranking_check(
    cost_a: Callable[[Cluster], float], cost_b: Callable[[Cluster], float], cluster: Cluster
) -> RankingCheck:
    """:class:`RankingCheck` of two priced things (seconds on a cluster) on ``cluster``, with
    the host constant's break-even (:func:`host_break_even`)."""
    prof = kernel_profile(cluster.accel)
    leads = []
    for knob in KNOBS:
        for word, f in (("worse", 1 - WORSE), ("better", 1 + WORSE)):
            c = cluster.calibrate(knob.scaled(cluster, prof, f))
            leads.append((knob.constant, word, cost_b(c) / cost_a(c) - 1))
    lead = cost_b(cluster) / cost_a(cluster) - 1
    even = host_break_even(cost_a, cost_b, cluster)
    return RankingCheck(lead, tuple(leads), even, host_op_time(cluster.accel))


#: How far :func:`host_break_even` looks: this many times the cluster's host seconds per
#: operation either way.  The per-operation costs published for PyTorch / TE modules span
#: about this much (13.5 us for ``nn.Linear`` on a DGX H100 host, 37 us on Grace, 2.7x that
#: for TE's modules before TE PR #2439: ``parastrat.estimate.efficiency.HOST_OP_S``).
HOST_RANGE = 8.0
#: Bisection steps of the search (the break-even to about 1 % of its value).
HOST_STEPS = 12


def host_clause(break_even_s: float, host_op_s: float) -> str:
    """ "if a host operation costs N us or more (priced at M us; ...)": a break-even of
    :func:`host_break_even` against the priced host time, in words."""
    side = "or more" if break_even_s > host_op_s else "or less"
    return (
        f"if a host operation costs {break_even_s * 1e6:.0f} us {side} "
        f"(priced at {host_op_s * 1e6:.1f} us; parastrat bench --kernels measures it)"
    )


def host_break_even(
    cost_a: Callable[[Cluster], float], cost_b: Callable[[Cluster], float], cluster: Cluster
) -> float | None:
    """Host seconds per eager operation at which ``b``'s lead over ``a`` changes sign,
    searched above the cluster's own value (up to :data:`HOST_RANGE` times it), then below;
    None when the order holds over that range.  The one constant the model's MoE rankings
    hang on where host launches are not hidden (``benchmarks/moe_layouts.py``)."""
    base = host_op_time(cluster.accel)
    if base <= 0:
        return None

    def lead(m: float) -> float:
        host = min(HOST_OP_S_MAX, base * m)
        c = cluster.calibrate(_kernels(cluster, host_op_s=host))
        return cost_b(c) / cost_a(c) - 1

    sign = lead(1.0) < 0
    for far in (HOST_RANGE, 1.0 / HOST_RANGE):
        if (lead(far) < 0) == sign:
            continue
        near = 1.0
        for _ in range(HOST_STEPS):  # bisect on a log scale
            mid = (near * far) ** 0.5
            near, far = (mid, far) if (lead(mid) < 0) == sign else (near, mid)
        return min(HOST_OP_S_MAX, base * far)
    return None


#: Changes below this share of the step are reported together as "the rest".
SHOWN = 0.005


#: The calibration keys that make each knob measured (links: any collective on the span).
_MEASURED_KEYS = {"attn_eff": ("attn_eff", "attn_fwd_eff")}


def _measured(key: str, cluster: Cluster) -> bool:
    """Whether ``cluster``'s calibration states the constant of knob ``key``."""
    cal = cluster.calibration
    if cal is None:
        return False
    if key.endswith("_bw"):
        span = key.removesuffix("_bw")
        return any(span in spans for spans in cal.ops.values())
    return any(k in cal.kernels for k in _MEASURED_KEYS.get(key, (key,)))


def sensitivity_lines(items: list[Sensitivity], indent: str = "") -> list[str]:
    """:func:`sensitivity`'s result as text: the constants that move the step by
    :data:`SHOWN` or more, largest first, and how to measure the first (nothing when nothing
    was priced)."""
    if not items:
        return []
    shown = [x for x in items if x.step_change >= SHOWN]
    if not shown:
        return [f"{indent}sensitivity: no constant 10% worse moves this step by 0.5% or more"]
    cells = "; ".join(
        f"{x.constant} ({x.value}{', measured' if x.measured else ''}) {x.step_change:+.1%}"
        for x in shown
    )
    rest = "; the rest < 0.5%" if len(shown) < len(items) else ""
    first = next((x for x in shown if not x.measured), None)
    advice = (
        f"measure first: {first.measure}, then price with that calibration "
        "(--calibration cal.json, or Cluster.calibrate)"
        if first is not None
        else "every constant shown is from the calibration"
    )
    return [f"{indent}sensitivity (each constant 10% worse, alone): {cells}{rest}",
            f"{indent}  {advice}"]  # fmt: skip
