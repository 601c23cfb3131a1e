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
from dataclasses import dataclass, replace
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "key": self.key,
            "constant": self.constant,
            "value": self.value,
            "step_change": self.step_change,
            "measure": self.measure,
        }


@dataclass(frozen=True)
class _Knob:
    """One constant: its key, its name, its current value in words, and the calibration
    that makes it :data:`WORSE` worse."""

    key: str
    constant: str
    value: Callable[[Cluster, KernelProfile, str], str]
    worse: Callable[[Cluster, KernelProfile], dict[str, Any]]
    measure: str


def _kernels(cluster: Cluster, **changed: Any) -> dict[str, Any]:
    """The calibration of ``cluster`` with its kernel constants changed as ``changed`` says."""
    cal = cluster.calibration.to_dict() if cluster.calibration is not None else {"ops": {}}
    cal["kernels"] = {**cal.get("kernels", {}), **changed}
    return cal


def _attention_worse(cluster: Cluster, prof: KernelProfile) -> dict[str, float]:
    """The attention constants :data:`WORSE` lower: training's ``attn_eff``, and a measured
    forward ``attn_fwd_eff`` when the cluster's calibration has one (DiT inference reads it)."""
    out = {"attn_eff": prof.attn_eff * (1 - WORSE)}
    fwd = (cluster.accel.kernels or {}).get("attn_fwd_eff")
    if fwd:
        out["attn_fwd_eff"] = float(fwd) * (1 - WORSE)
    return out


def _links(cluster: Cluster, span: str) -> dict[str, Any]:
    """The calibration of ``cluster`` with every collective's bus bandwidth on ``span``
    :data:`WORSE` lower (its latency kept)."""
    cal = cluster.calibration.to_dict() if cluster.calibration is not None else {"ops": {}}
    ops = {op: dict(spans) for op, spans in cal.get("ops", {}).items()}
    for op in OPS:
        for sp in SPANS:
            alpha, bw = cluster.collective_params(op, sp)
            scale = 1 - WORSE if sp == span else 1.0
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
        lambda c, prof: _kernels(
            c, gemm_eff={p: e * (1 - WORSE) for p, e in prof.gemm_eff.items()}
        ),
        BENCH_KERNELS,
    ),
    _Knob(
        "attn_eff",
        "attention rate",
        lambda _c, prof, _p: f"{prof.attn_eff:.2f} of the bf16 peak",
        lambda c, prof: _kernels(c, **_attention_worse(c, prof)),
        BENCH_KERNELS,
    ),
    _Knob(
        "mem_eff",
        "HBM rate of element-wise kernels",
        lambda _c, prof, _p: f"{prof.mem_eff:.2f} of HBM bandwidth",
        lambda c, prof: _kernels(c, mem_eff=prof.mem_eff * (1 - WORSE)),
        BENCH_KERNELS,
    ),
    _Knob(
        "host_op_s",
        "host time per eager operation",
        lambda c, _prof, _p: f"{host_op_time(c.accel) * 1e6:.1f} us",
        lambda c, _prof: _kernels(
            c, host_op_s=min(HOST_OP_S_MAX, host_op_time(c.accel) * (1 + WORSE))
        ),
        BENCH_KERNELS,
    ),
    _Knob(
        "intra_bw",
        "scale-up link",
        _bw("intra"),
        lambda c, _p: _links(c, "intra"),
        BENCH_LINKS["intra"],
    ),
    _Knob(
        "inter_bw",
        "scale-out link",
        _bw("inter"),
        lambda c, _p: _links(c, "inter"),
        BENCH_LINKS["inter"],
    ),
)


def sensitivity(
    workload: Workload, strategy: Strategy, cluster: Cluster, switches: Switches
) -> list[Sensitivity]:
    """Each constant of :data:`KNOBS` :data:`WORSE` worse, one at a time: the relative step
    change it causes, largest first (a training step, :func:`~.price.price`)."""
    _s, base, _m = price(workload, strategy, cluster, switches)

    def step_time(c: Cluster) -> float:
        return price(workload, strategy, c, switches)[1].step_time_s

    return changes(step_time, cluster, base.precision)


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
        worse = cluster.calibrate(knob.worse(cluster, prof))
        out.append(
            Sensitivity(
                key=knob.key,
                constant=knob.constant,
                value=knob.value(cluster, prof, precision),
                step_change=cost(worse) / base - 1,
                measure=knob.measure.format(accel=cluster.accel.name),
            )
        )
    if attention_eff is not None:
        shown = f"{attention_eff:.2f} of the bf16 peak, forward"
        out = [replace(x, value=shown) if x.key == "attn_eff" else x for x in out]
    return sorted(out, key=lambda x: -x.step_change)


#: Changes below this share of the step are reported together as "the rest".
SHOWN = 0.005


def sensitivity_lines(items: list[Sensitivity], indent: str = "") -> list[str]:
    """:func:`sensitivity`'s result as text: the constants that move the step by
    :data:`SHOWN` or more, largest first, and how to measure the first (nothing when nothing
    was priced)."""
    if not items:
        return []
    shown = [x for x in items if x.step_change >= SHOWN]
    if not shown:
        return [f"{indent}sensitivity: no constant 10 % worse moves this step by 0.5 % or more"]
    cells = "; ".join(f"{x.constant} ({x.value}) {x.step_change:+.1%}" for x in shown)
    rest = "; the rest < 0.5 %" if len(shown) < len(items) else ""
    return [
        f"{indent}sensitivity (each constant 10 % worse, alone): {cells}{rest}",
        f"{indent}  measure first: {shown[0].measure}, then price with that calibration "
        "(--calibration cal.json, or Cluster.calibrate)",
    ]
