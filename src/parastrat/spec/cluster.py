"""Cluster: how many devices of which kind, how they are wired, and what a collective costs.

This module is THE one place that prices a collective (:meth:`Cluster.collective_time`); the
step-time and DiT models call it, and the bench package reuses :func:`bus_factor` to turn
measured times into bus bandwidth.  A collective of ``S`` bytes (the full array, as nccl-tests
counts it) over ``n`` ranks costs::

    alpha * latency_steps(op, n) + S * bus_factor(op, n) / busbw

with ``(alpha, busbw)`` per link class ("intra": inside one NVLink/HCCS scale-up domain,
"inter": across domains), taken from the accelerator preset or from a calibration measured by
``parastrat bench`` (``Cluster.calibrate``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import gcd
from pathlib import Path
from typing import Any, NamedTuple

from ..checks import MAX_DEVICES as MAX_DEVICES
from ..checks import is_count
from ..errors import SpecError, UsageError
from .hardware import Accelerator, canonical_precision
from .hardware import get as get_accelerator

#: Collectives the cost model knows.  "ring" is one hop of a ring exchange (each rank sends S
#: bytes to its neighbour; callers multiply by the hops), "send_recv" one point-to-point send.

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ring", "send_recv", "broadcast")
SPANS = ("intra", "inter")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise SpecError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus factor: busbw = algbw * factor, with S the full array size.

    all_reduce ``2(n-1)/n``; all_gather, reduce_scatter, all_to_all ``(n-1)/n``;
    ring, send_recv, broadcast ``1`` (nccl-tests ``doc/PERFORMANCE.md``).  0 for n <= 1 except
    for point-to-point ops, which move their bytes whatever n is.
    """
    _check_op(op)
    if op in ("ring", "send_recv"):
        return 1.0
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def latency_steps(op: str, n: int) -> int:
    """How many latency terms (alpha) one collective pays over ``n`` ranks.

    all_reduce and broadcast: ``2 ceil(log2 n)`` / ``ceil(log2 n)`` (NCCL switches to trees for
    the small messages where latency matters); all_gather, reduce_scatter, all_to_all: ``n - 1``
    (ring / pairwise steps); ring hop and send_recv: 1.
    """
    _check_op(op)
    if op in ("ring", "send_recv"):
        return 1
    if n <= 1:
        return 0
    log = math.ceil(math.log2(n))
    if op == "all_reduce":
        return 2 * log
    if op == "broadcast":
        return log
    return n - 1


#: Physical bounds of a measured collective: a latency term over one second, or a bus
#: bandwidth below 1 kB/s or above 100 TB/s (beyond any link built), is a broken file, not a
#: measurement (and would price steps at inf / NaN).
ALPHA_MAX_S = 1.0
BUSBW_RANGE = (1e3, 1e14)


@dataclass(frozen=True)
class Calibration:
    """Measured ``(alpha_s, busbw_Bps)`` per collective and link class, and optionally
    measured kernel constants of the device.

    JSON form (what ``parastrat.bench.fit`` and ``parastrat.bench.kernel_calibration``
    write; either section may be absent)::

        {"ops": {"all_reduce": {"intra": {"alpha_s": 4e-6, "busbw_Bps": 3.6e11}, ...}, ...},
         "kernels": {"gemm_eff": {"bf16": 0.71, "fp8": 0.63}, "attn_eff": 0.5,
                     "mem_eff": 0.85, "host_op_s": 1.2e-5},
         "source": "bench on 2 x DGX H100, 2026-01-01"}

    ``kernels`` (:data:`KERNEL_KEYS`) replace the step model's per-device defaults
    (``parastrat.estimate.efficiency``): the fraction of the dense peak a large GEMM
    sustains per precision, fused attention's fraction of the BF16 peak, the fraction of HBM
    bandwidth element-wise kernels reach, and the host seconds per eager operation.
    """

    ops: Mapping[str, Mapping[str, tuple[float, float]]]
    source: str = ""
    kernels: Mapping[str, Any] = field(default_factory=dict)
    #: the accelerator preset the kernel constants were measured as (``bench --kernels
    #: --accelerator NAME``); a cluster of another accelerator refuses them
    accelerator: str | None = None
    #: the communication backend the collectives were measured with (``parastrat bench
    #: --fit`` writes it); a cluster whose devices talk through another refuses them
    #: (:data:`VENDOR_BACKEND`: gloo over host TCP is not what NVLink or HCCS deliver)
    backend: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | Calibration) -> Calibration:
        """Read the JSON form; a bad entry raises :class:`SpecError` naming it."""
        if isinstance(data, Calibration):
            return data
        if not isinstance(data, Mapping) or not isinstance(data.get("ops", {}), Mapping):
            raise SpecError(
                "calibration must be a mapping with an 'ops' mapping "
                "{op: {span: {alpha_s, busbw_Bps}}}"
            )
        ops: dict[str, dict[str, tuple[float, float]]] = {}
        for op, spans in data.get("ops", {}).items():
            _check_op(op)
            if not isinstance(spans, Mapping):
                raise SpecError(f"calibration ops.{op} must map spans to values")
            for span, vals in spans.items():
                if span not in SPANS:
                    raise SpecError(f"calibration ops.{op}.{span}: span must be one of {SPANS}")
                if not isinstance(vals, Mapping) or not all(
                    _is_finite_number(vals.get(k)) for k in ("alpha_s", "busbw_Bps")
                ):
                    raise SpecError(
                        f"calibration ops.{op}.{span} needs finite numbers 'alpha_s' and "
                        f"'busbw_Bps' (not strings, booleans, NaN or Infinity), got {vals!r}"
                    )
                alpha, bw = float(vals["alpha_s"]), float(vals["busbw_Bps"])
                if not (0 <= alpha <= ALPHA_MAX_S and BUSBW_RANGE[0] <= bw <= BUSBW_RANGE[1]):
                    raise SpecError(
                        f"calibration ops.{op}.{span}: alpha_s must be in [0, {ALPHA_MAX_S:g}] s "
                        f"and busbw_Bps in [{BUSBW_RANGE[0]:g}, {BUSBW_RANGE[1]:g}] B/s, got "
                        f"{alpha:g}, {bw:g}"
                    )
                ops.setdefault(op, {})[span] = (alpha, bw)
        kernels = _kernel_constants(data.get("kernels") or {})
        accel = data.get("accelerator")
        if accel is not None and not isinstance(accel, str):
            raise SpecError(f"calibration 'accelerator' must be a preset name, got {accel!r}")
        backend = data.get("backend")
        known = set(VENDOR_BACKEND.values()) | {"gloo"}
        if backend is not None and (not isinstance(backend, str) or backend not in known):
            raise SpecError(
                f"calibration 'backend' must be one of gloo, hccl, nccl, got {backend!r}"
            )
        source = str(data.get("source", ""))
        return cls(ops=ops, source=source, kernels=kernels, accelerator=accel, backend=backend)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form shown above, which :meth:`from_dict` and :func:`load_calibration` read
        back."""
        return {
            "ops": {
                op: {span: {"alpha_s": a, "busbw_Bps": b} for span, (a, b) in spans.items()}
                for op, spans in self.ops.items()
            },
            **({"kernels": dict(self.kernels)} if self.kernels else {}),
            **({"accelerator": self.accelerator} if self.accelerator else {}),
            **({"backend": self.backend} if self.backend else {}),
            "source": self.source,
        }


def _is_finite_number(value: Any) -> bool:
    """A JSON number (int or float, not bool) that is finite as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond the float range
        return False


#: Kernel constants a calibration may set, with what each is and its allowed range.
#: The longest host time per eager operation a calibration may state, seconds.
HOST_OP_S_MAX = 0.01

KERNEL_KEYS = {
    "gemm_eff": "fraction of the dense peak a large GEMM sustains, per precision: (0, 1]",
    "attn_eff": "fused attention's fraction of the BF16 peak, forward + backward: (0, 1]",
    "attn_fwd_eff": "flash attention's fraction of the BF16 peak, forward only (inference): (0, 1]",
    "mem_eff": "fraction of HBM bandwidth element-wise kernels reach: (0, 1]",
    "host_op_s": "host seconds per eager operation (dispatch + launch): (0, 0.01]",
}


def _kernel_constants(data: Any) -> dict[str, Any]:
    """Validate a calibration's ``kernels`` section (:data:`KERNEL_KEYS`); SpecError names
    the bad entry and the allowed range."""
    if not isinstance(data, Mapping):
        raise SpecError("calibration kernels must be a mapping of " + ", ".join(KERNEL_KEYS))
    out: dict[str, Any] = {}

    def fraction(where: str, value: Any, top: float = 1.0) -> float:
        if not _is_finite_number(value) or not 0 < value <= top:
            raise SpecError(f"calibration {where} must be a number in (0, {top:g}], got {value!r}")
        return float(value)

    for key, value in data.items():
        if key not in KERNEL_KEYS:
            raise SpecError(
                f"calibration kernels.{key} is not a kernel constant; use one of "
                + ", ".join(KERNEL_KEYS)
            )
        if key == "gemm_eff":
            if not isinstance(value, Mapping) or not value:
                raise SpecError(
                    "calibration kernels.gemm_eff must map precisions to fractions, "
                    'e.g. {"bf16": 0.7}'
                )
            out[key] = {
                canonical_precision(p): fraction(f"kernels.gemm_eff.{p}", v)
                for p, v in value.items()
            }
        elif key == "host_op_s":
            out[key] = fraction("kernels.host_op_s", value, HOST_OP_S_MAX)
        else:
            out[key] = fraction(f"kernels.{key}", value)
    return out


def _require_same_device(cal: Calibration, accel: Accelerator) -> None:
    """SpecError when ``cal``'s kernel constants were measured as another accelerator: they
    are fractions of that device's peaks, and would price this one wrongly."""
    measured = cal.accelerator
    if measured is None:
        return
    try:
        device = get_accelerator(measured)
    except SpecError as exc:  # name the calibration, not the user's --accelerator
        raise SpecError(f"the calibration's 'accelerator' {measured!r}: {exc}") from None
    if device.name != accel.name:
        raise SpecError(
            f"the calibration's kernel constants were measured as {measured}, and this "
            f"cluster is {accel.name}: measure on it (parastrat bench --kernels --accelerator "
            f"{accel.name} --fit FILE) or leave the calibration out"
        )


#: The collective backend a cluster's devices use, by accelerator vendor.
VENDOR_BACKEND = {"nvidia": "nccl", "huawei": "hccl"}


def _require_same_backend(cal: Calibration, accel: Accelerator) -> None:
    """SpecError when ``cal``'s collectives were measured with another backend than
    ``accel``'s devices use: a gloo sweep on a laptop priced as NVLink is off by 100x."""
    want = VENDOR_BACKEND.get(accel.vendor)
    if cal.backend is None or not cal.ops or want is None or cal.backend == want:
        return
    raise SpecError(
        f"the calibration's collectives were measured with {cal.backend}, and {accel.name} "
        f"devices talk through {want}: measure on the cluster (torchrun --nproc-per-node N "
        f"-m parastrat bench --fit FILE) or leave the calibration out"
    )


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration JSON file (see :class:`Calibration`)."""
    from .._io import read_json

    try:
        data = read_json(path, what="calibration file")
        if isinstance(data, Mapping) and not ({"ops", "kernels"} & set(data)):
            raise SpecError(
                "holds neither 'ops' (collectives: parastrat bench --fit FILE) nor 'kernels' "
                "(parastrat bench --kernels --accelerator NAME --fit FILE): not a calibration"
            )
        return Calibration.from_dict(data)
    except UsageError as exc:  # the file could not be read: a SpecError, as before
        raise SpecError(str(exc)) from None
    except SpecError as exc:
        raise SpecError(f"calibration file {Path(path)}: {exc}") from None


@dataclass(frozen=True, init=False)
class Cluster:
    """``num_devices`` accelerators of one kind and their interconnect.

    Fields left ``None`` come from the accelerator preset (devices per node, scale-up domain
    size, achievable scale-up bus bandwidth, scale-out bandwidth per device).  After
    construction every field holds a concrete value; ``.accel`` is the resolved
    :class:`~parastrat.Accelerator`.
    """

    # The annotations are the resolved types; __init__ accepts None for the preset's value.
    accelerator: str | Accelerator
    num_devices: int
    devices_per_node: int
    scale_up_domain: int
    scale_up_bw_Bps: float
    scale_out_bw_Bps: float
    calibration: Calibration | None
    _accel: Accelerator = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        accelerator: str | Accelerator = "h100",
        num_devices: int = 64,
        devices_per_node: int | None = None,
        scale_up_domain: int | None = None,
        scale_up_bw_Bps: float | None = None,
        scale_out_bw_Bps: float | None = None,
        calibration: Calibration | Mapping[str, Any] | None = None,
    ) -> None:
        accel = get_accelerator(accelerator)
        if isinstance(accelerator, str):  # canonical spelling ("H100-SXM" -> "h100")
            accelerator = accel.name
        resolved: dict[str, Any] = {"accelerator": accelerator, "num_devices": num_devices}
        for name, value in (
            ("devices_per_node", devices_per_node),
            ("scale_up_domain", scale_up_domain),
            ("scale_up_bw_Bps", scale_up_bw_Bps),
            ("scale_out_bw_Bps", scale_out_bw_Bps),
        ):
            resolved[name] = getattr(accel, name) if value is None else value
        # a node-bound NVLink / HCCS domain (H100's 8) is no wider than the node given
        node_bound = accel.scale_up_domain <= accel.devices_per_node
        if node_bound and scale_up_domain is None and is_count(devices_per_node):
            resolved["scale_up_domain"] = min(accel.scale_up_domain, int(devices_per_node or 1))
        resolved["calibration"] = (
            None if calibration is None else Calibration.from_dict(calibration)
        )
        for name in ("num_devices", "devices_per_node", "scale_up_domain"):
            value = resolved[name]
            if not is_count(value):
                raise SpecError(f"Cluster.{name} must be a whole number >= 1, got {value!r}")
            if value > MAX_DEVICES:
                raise SpecError(
                    f"Cluster.{name} = {value:,} is above {MAX_DEVICES:,}, parastrat's bound on "
                    "devices (no cluster built so far comes near; see 'Bounds' in "
                    "docs/troubleshooting.md)"
                )
        for name in ("scale_up_bw_Bps", "scale_out_bw_Bps"):
            value = resolved[name]
            if not _is_finite_number(value) or value <= 0:
                raise SpecError(
                    f"Cluster.{name} must be a finite number > 0 bytes/s, got {value!r}"
                )
        cal = resolved["calibration"]
        if cal is not None:
            _require_same_backend(cal, accel)
        if cal is not None and cal.kernels:
            _require_same_device(cal, accel)
            accel = replace(accel, kernels=dict(cal.kernels))
        usable = getattr(accel, "usable_memory_bytes", None)
        if usable and usable < accel.memory_bytes:
            # plan against what the device exposes (an "80 GB" H100: 79.6 GiB), not the label
            accel = replace(accel, memory_bytes=usable)
        object.__setattr__(self, "_accel", accel)
        for name, value in resolved.items():
            object.__setattr__(self, name, value)

    # ---- derived -------------------------------------------------------------------------
    @property
    def accel(self) -> Accelerator:
        """The accelerator preset (or the object that was passed)."""
        return self._accel

    @property
    def num_nodes(self) -> int:
        """Nodes needed for ``num_devices`` (the last one may be partly used)."""
        return -(-self.num_devices // self.devices_per_node)

    @property
    def memory_bytes(self) -> int:
        """Memory of one device."""
        return self._accel.memory_bytes

    def peak(self, precision: str = "bf16") -> float:
        """Dense peak FLOP/s of one device at ``precision``."""
        return self._accel.peak(precision)

    @property
    def segment(self) -> int:
        """Devices of one contiguous placement unit inside a scale-up domain, which ranks fill
        in order.  A single-node domain (8 GPUs of an HGX board) is its own unit.  A multi-node
        domain (GB200 / GB300 NVL72: 18 trays of 4 GPUs) is cut into Slurm segments: Megatron
        Bridge's performance launcher asks for ``--segment`` = the largest divisor of the node
        count up to the domain's nodes (``scripts/performance/utils/executors.py``: 16 nodes,
        64 GPUs, for 32 or 64 nodes; 18 for 36), so a job of more nodes than one domain holds
        is placed in whole segments of that many nodes."""
        dpn, dom = self.devices_per_node, self.scale_up_domain
        domain_nodes = dom // dpn
        if domain_nodes <= 1:
            return min(dom, self.num_devices)
        nodes = self.num_nodes
        if nodes <= domain_nodes:
            return nodes * dpn
        return dpn * max(k for k in range(domain_nodes, 0, -1) if nodes % k == 0)

    # ---- communication -------------------------------------------------------------------
    def span(self, group_size: int, stride: int = 1) -> str:
        """ "intra" when every group of ``group_size`` ranks ``stride`` apart stays in one
        scale-up domain: ``group_size * stride`` ranks fit in it, and, for a domain of several
        nodes, in one :attr:`segment`.  Megatron's rank order places such a group in an aligned
        block of ``group_size * stride`` consecutive ranks; the blocks stay inside the segment
        they start in when their size divides it (or the job is one segment), else some group
        straddles two segments (two racks) and runs at the scale-out link's pace.  (Inside one
        node the block's alignment is not priced.)"""
        extent = group_size * stride
        if extent > self.scale_up_domain:
            return "inter"
        if self.scale_up_domain <= self.devices_per_node:
            return "intra"
        seg = self.segment
        if extent > seg:
            return "inter"
        return "intra" if seg % extent == 0 or self.num_devices <= seg else "inter"

    def local_peers(self, group_size: int, stride: int = 1) -> int:
        """Fewest members of one group (a rank and those in its placement unit: the
        :attr:`segment` of a multi-node domain, the node's domain otherwise) that share a
        unit, over every group of ``group_size`` ranks ``stride`` apart: the ranks whose
        all-to-all slices stay on the scale-up link for the worst-placed rank."""
        dom = self.scale_up_domain
        unit = self.segment if dom > self.devices_per_node else dom
        return _local_peers(group_size, max(stride, 1), unit, self.num_devices)

    def hop_crossings(self, stages: int, stride: int, wrap: bool = False) -> Crossings:
        """The hops between consecutive pipeline stages (``stride`` ranks apart) that leave a
        placement unit (the :attr:`segment` of a multi-node domain, the node's domain
        otherwise): those transfers take the scale-out link.  ``wrap``: the last stage also
        sends to the first (an interleaved schedule's next virtual chunk).  A pipeline group is
        not an aligned block of consecutive ranks the way its collectives' groups are: stage
        ``k`` of every group sits ``k * stride`` ranks after its first, so hop ``k -> k + 1``
        leaves the unit wherever a unit boundary falls between them.  The worst pipeline
        group and the worst stage of any group are counted (:class:`Crossings`)."""
        dom = self.scale_up_domain
        unit = self.segment if dom > self.devices_per_node else dom
        return _hop_crossings(stages, max(stride, 1), wrap, unit, self.num_devices)

    def link(self, span: str) -> tuple[float, float]:
        """(per-step latency in s, achievable bus bandwidth in B/s) of a link class."""
        if span == "intra":
            return self._accel.intra_latency_s, float(self.scale_up_bw_Bps)
        if span == "inter":
            return self._accel.inter_latency_s, float(self.scale_out_bw_Bps)
        raise SpecError(f"unknown span {span!r}; use 'intra' or 'inter'")

    def collective_params(self, op: str, span: str) -> tuple[float, float]:
        """(alpha_s, busbw_Bps) for ``op`` on ``span``: the calibration's, else the link's."""
        _check_op(op)
        cal = self.calibration
        if cal is not None:
            hit = cal.ops.get(op, {}).get(span)
            if hit is not None:
                return hit
        return self.link(span)

    def collective_time(
        self, op: str, nbytes: float, group_size: int, span: str | None = None
    ) -> float:
        """Seconds for one ``op`` of ``nbytes`` (the full array) over ``group_size`` ranks.

        ``alpha * latency_steps(op, n) + nbytes * bus_factor(op, n) / busbw``; 0 when n == 1
        for collectives (a point-to-point op still moves its bytes).  ``span`` defaults to
        :meth:`span` of a contiguous group.
        """
        n = int(group_size)
        if n <= 1 and op not in ("ring", "send_recv"):
            _check_op(op)
            return 0.0
        if span is None:
            span = self.span(n)
        alpha, busbw = self.collective_params(op, span)
        return alpha * latency_steps(op, n) + nbytes * bus_factor(op, n) / busbw

    # ---- copies --------------------------------------------------------------------------
    def calibrate(self, calibration: Calibration | Mapping[str, Any]) -> Cluster:
        """A copy whose collectives (and, with a ``kernels`` section, whose kernel constants)
        use the measured ``calibration``."""
        return replace(self, calibration=Calibration.from_dict(calibration))

    def with_devices(self, num_devices: int) -> Cluster:
        """A copy with another device count."""
        return replace(self, num_devices=num_devices)

    @classmethod
    def from_calibration_file(
        cls,
        path: str | Path,
        *,
        accelerator: str | Accelerator = "h100",
        num_devices: int = 64,
        **overrides: Any,
    ) -> Cluster:
        """A cluster whose collectives come from the calibration JSON at ``path``."""
        return cls(
            accelerator=accelerator,
            num_devices=num_devices,
            calibration=load_calibration(path),
            **overrides,
        )

    def to_dict(self) -> dict[str, Any]:
        """The cluster as a JSON-ready dict of its resolved constructor arguments (the accelerator
        by name), so ``Cluster(**d)`` rebuilds it on a preset accelerator."""
        return {
            "accelerator": self._accel.name,
            "num_devices": self.num_devices,
            "devices_per_node": self.devices_per_node,
            "scale_up_domain": self.scale_up_domain,
            "scale_up_bw_Bps": self.scale_up_bw_Bps,
            "scale_out_bw_Bps": self.scale_out_bw_Bps,
            "calibration": self.calibration.to_dict() if self.calibration else None,
        }


@lru_cache(maxsize=4096)
class Crossings(NamedTuple):
    """Pipeline hops that leave a placement unit (:meth:`Cluster.hop_crossings`).

    ``hops``: the most in one pipeline group; ``at_stage``: the most among the two exchanges a
    stage makes per micro-batch and chunk in the steady state (Megatron's
    ``send_forward_recv_backward`` with the next stage, ``send_backward_recv_forward`` with
    the previous one; a first or last stage without the interleaved wrap makes both with its
    one neighbour), so 0, 1 or 2."""

    hops: int
    at_stage: int


@lru_cache(maxsize=4096)
def _hop_crossings(stages: int, stride: int, wrap: bool, unit: int, world: int) -> Crossings:
    """:meth:`Cluster.hop_crossings` over one period of the rank layout (pipeline groups of
    ``stages`` ranks ``stride`` apart; units of ``unit`` consecutive ranks)."""
    extent = stages * stride
    period = min(max(world, extent), extent * unit // gcd(extent, unit))
    most = Crossings(0, 0)
    for start in range(0, period, extent):
        for offset in range(stride):
            unit_of = [(start + offset + k * stride) // unit for k in range(stages)]
            crossed = [unit_of[k] != unit_of[(k + 1) % stages] for k in range(stages)]
            if not wrap:
                crossed[-1] = False  # no hop from the last stage back to the first
            hops = sum(crossed)
            at_stage = max(_stage_exchanges(crossed, k, wrap) for k in range(stages))
            most = Crossings(max(most.hops, hops), max(most.at_stage, at_stage))
    return most


def _stage_exchanges(crossed: list[bool], k: int, wrap: bool) -> int:
    """How many of stage ``k``'s two steady-state exchanges cross (``crossed[j]``: hop
    ``j -> j + 1``): one with the next stage, one with the previous; an end stage without
    the wrap makes both with its one neighbour."""
    last = len(crossed) - 1
    nxt = crossed[k] if (k < last or wrap) else None
    prev = crossed[k - 1] if (k > 0 or wrap) else None
    if nxt is None:
        return 2 * int(bool(prev))
    if prev is None:
        return 2 * int(nxt)
    return int(nxt) + int(prev)


def _local_peers(n: int, stride: int, unit: int, world: int) -> int:
    """:meth:`Cluster.local_peers` over one period of the rank layout (the groups of
    ``n`` ranks ``stride`` apart tile aligned blocks of ``n * stride`` ranks; units of ``unit``
    consecutive ranks)."""
    extent = n * stride
    period = min(max(world, extent), extent * unit // gcd(extent, unit))
    fewest = n
    for start in range(0, period, extent):
        for offset in range(stride):
            units = Counter((start + offset + i * stride) // unit for i in range(n))
            fewest = min(fewest, min(units.values()))
    return fewest


def require_cluster(value: Any, where: str) -> Cluster:
    """``value`` when it is a :class:`Cluster`; else :class:`UsageError` naming ``where``,
    the type received and a working example (an accelerator name alone is not a cluster: it
    needs a device count)."""
    if isinstance(value, Cluster):
        return value
    example = "parastrat.Cluster('h100', num_devices=64)"
    if isinstance(value, str):
        example = f"parastrat.Cluster({value!r}, num_devices=64)"
    raise UsageError(
        f"{where} takes cluster=parastrat.Cluster, got {type(value).__name__} {value!r:.40}; "
        f"e.g. {example}"
    )
