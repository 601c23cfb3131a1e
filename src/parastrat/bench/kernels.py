"""Measured kernel constants of one device: GEMM rate per precision and HBM copy bandwidth.

The step model prices compute with a few constants per accelerator
(``parastrat.estimate.efficiency``: the fraction of the dense peak a large GEMM sustains per
precision, the fraction of HBM bandwidth element-wise kernels reach).  They are datasheet-based
defaults; this module measures them on the device at hand and writes them as the ``kernels``
section of a calibration (:class:`parastrat.spec.cluster.Calibration`), which
``Cluster.calibrate`` / ``parastrat plan --calibration`` apply:

* :func:`measure_gemm`: a square ``size``-cubed matrix product at ``bf16`` (``torch.matmul``) or
  ``fp8`` (``torch._scaled_mm`` on devices that have it), median of timed repetitions after
  warm-up, device-event timed (:class:`parastrat.bench.timing.Clock`);
* :func:`measure_copy`: a ``nbytes`` device-to-device copy (read + write);
* :func:`kernel_calibration`: the measured rates over the accelerator preset's peaks.

On the CPU the numbers describe the CPU, not an accelerator: useful for testing the path, not
as a calibration (``kernel_calibration`` refuses a rate above the preset's peak, and a CPU
against a GPU preset gives tiny fractions that a planner would treat as a very slow device).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from datetime import date
from typing import Any

from .._deps import require
from ..errors import UsageError
from ..spec.cluster import Calibration
from ..spec.hardware import canonical_precision
from ..spec.hardware import get as get_accelerator
from .timing import measure

#: Matrix size of the GEMM measurement: 8192^3, the "large GEMM" the defaults are quoted at.
GEMM_SIZE = 8192
#: Bytes of the copy measurement (1 GiB: far beyond any cache).
COPY_BYTES = 1 << 30


def _device(torch: Any, device: Any) -> Any:
    if device is not None:
        return torch.device(device)
    for kind in ("cuda", "npu"):
        mod = getattr(torch, kind, None)
        if mod is not None and mod.is_available():
            return torch.device(kind)
    return torch.device("cpu")


def _median_seconds(torch: Any, device: Any, fn: Any, iters: int, warmup: int) -> float:
    times = measure(fn, torch=torch, dist=None, device=device, iters=iters, warmup=warmup)
    return statistics.median(times)


def measure_gemm(
    precision: str = "bf16",
    *,
    size: int = GEMM_SIZE,
    device: Any = None,
    iters: int = 10,
    warmup: int = 3,
) -> float:
    """Achieved FLOP/s of a ``size`` x ``size`` x ``size`` matrix product at ``precision``.

    ``bf16``: ``torch.matmul`` of BF16 operands; ``fp8``/``mxfp8``: ``torch._scaled_mm`` of
    E4M3 operands with unit scales (per-tensor FP8, BF16 output), where the device and torch
    support it (UsageError otherwise).  ``device`` defaults to the first accelerator, else
    the CPU.
    """
    torch = require("torch", why="measuring kernel rates")
    if size < 1 or iters < 1 or warmup < 0:
        raise UsageError(
            f"size and iters must be >= 1 and warmup >= 0, got {size}, {iters}, {warmup}"
        )
    key = canonical_precision(precision)
    dev = _device(torch, device)
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    if key == "bf16":

        def run() -> Any:
            return torch.matmul(a, b)

    else:
        scaled_mm = getattr(torch, "_scaled_mm", None)
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if scaled_mm is None or fp8 is None or dev.type == "cpu":
            raise UsageError(
                f"{precision} GEMMs need torch._scaled_mm on an FP8-capable accelerator; "
                f"measure bf16 on {dev.type}"
            )
        a8 = a.to(fp8)
        b8 = b.t().contiguous().to(fp8).t()  # column-major second operand, as cuBLASLt wants
        one = torch.ones((), device=dev, dtype=torch.float32)

        def run() -> Any:
            return scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    seconds = _median_seconds(torch, dev, run, iters, warmup)
    return 2.0 * size**3 / seconds


def measure_copy(
    *, nbytes: int = COPY_BYTES, device: Any = None, iters: int = 10, warmup: int = 3
) -> float:
    """Achieved bytes/s of a device-to-device copy of ``nbytes`` (counted read + write)."""
    torch = require("torch", why="measuring kernel rates")
    if nbytes < 2 or iters < 1 or warmup < 0:
        raise UsageError(
            f"nbytes must be >= 2, iters >= 1, warmup >= 0; got {nbytes}, {iters}, {warmup}"
        )
    dev = _device(torch, device)
    src = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _median_seconds(torch, dev, lambda: dst.copy_(src), iters, warmup)
    return 2.0 * src.numel() * 2 / seconds


def kernel_calibration(
    accelerator: str,
    gemm_flops: Mapping[str, float],
    copy_Bps: float | None = None,
    *,
    source: str | None = None,
) -> dict[str, Any]:
    """The ``kernels`` calibration of measured rates on an ``accelerator`` preset.

    ``gemm_flops`` maps precisions to measured FLOP/s (:func:`measure_gemm`); ``copy_Bps`` is a
    measured copy bandwidth (:func:`measure_copy`).  Each becomes a fraction of the preset's
    dense peak / HBM bandwidth.  A rate above the preset's peak means the wrong preset (or a
    device that is not the preset): UsageError says so rather than writing a fraction > 1.
    """
    accel = get_accelerator(accelerator)
    if not gemm_flops and copy_Bps is None:
        raise UsageError("nothing measured: give at least one GEMM rate or a copy bandwidth")
    kernels: dict[str, Any] = {}
    eff: dict[str, float] = {}
    for precision, flops in gemm_flops.items():
        key = canonical_precision(precision)
        peak = accel.peak(key)
        if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not flops > 0:
            raise UsageError(f"measured {precision} GEMM rate must be > 0, got {flops!r}")
        if flops > peak:
            raise UsageError(
                f"measured {precision} GEMM rate {flops / 1e12:.1f} TFLOP/s exceeds the "
                f"{peak / 1e12:.0f} TFLOP/s dense peak of {accel.name}: is --accelerator the "
                "device that ran it?"
            )
        eff[key] = flops / peak
    if eff:
        kernels["gemm_eff"] = eff
    if copy_Bps is not None:
        if not isinstance(copy_Bps, (int, float)) or not 0 < copy_Bps <= accel.mem_bandwidth_Bps:
            raise UsageError(
                f"measured copy bandwidth {copy_Bps / 1e9:.0f} GB/s is outside (0, "
                f"{accel.mem_bandwidth_Bps / 1e9:.0f}] GB/s of {accel.name}"
            )
        kernels["mem_eff"] = copy_Bps / accel.mem_bandwidth_Bps
    out = {
        "kernels": kernels,
        "source": source or f"parastrat bench --kernels on {accel.name}, {date.today()}",
    }
    Calibration.from_dict(out)  # the cost model's own validation
    return out
