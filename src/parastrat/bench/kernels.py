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
* :func:`measure_attention`: causal flash attention at head dimension 128 (the head dimension
  the defaults are quoted at), forward + backward (training: Transformer Engine's
  ``DotProductAttention`` where it is installed, else ``torch.nn.functional.
  scaled_dot_product_attention``) and forward alone (inference: ``scaled_dot_product_attention``,
  what diffusers and xDiT call), in the hardware FLOPs the step model counts (whole 128-key
  blocks under the causal mask, backward 2.5x the forward);
* :func:`measure_host_op`: host seconds to issue one eager operation (a small
  ``torch.nn.Linear`` forward, launched and not waited for: the measurement behind the step
  model's ``HOST_OP_S``, Transformer Engine issue #2053), on this machine's host CPU;
* :func:`kernel_calibration`: the measured rates over the accelerator preset's peaks.

* :func:`gemm_grid` / :func:`measure_grid` / :func:`fit_grid`: a grid of GEMM shapes (large and
  skinny dense GEMMs, and grouped GEMMs at the MoE presets' expert sizes, one GEMM per expert
  as TE's GroupedLinear issues them) measured on the device, and the shape model's parameter
  fitted to them: per precision, the median of ``measured / (peak x shape factor)``, i.e.
  the large-GEMM fraction that makes :mod:`parastrat.estimate.kernel_model` reproduce the
  grid.  The calibration carries the grid itself (``kernel_grid``) beside the fitted
  ``kernels.gemm_eff``, so the fit can be checked.

A CPU measurement describes the CPU, not an accelerator: :func:`check_device` refuses to label
one with a GPU or NPU preset's name (UsageError; ``parastrat bench --kernels --accelerator
h100`` on a machine without CUDA exits 2 instead of writing a calibration that makes the
planner think the H100 is a thousand times slower).  The measuring functions themselves run on
the CPU (that is how the path is tested).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from .._deps import require
from ..errors import UsageError
from ..estimate.layer_cost import ATTN_BWD_RATIO
from ..spec.cluster import Calibration
from ..spec.hardware import Accelerator, canonical_precision
from ..spec.hardware import get as get_accelerator
from .timing import measure, synchronize

#: Matrix size of the GEMM measurement: 8192^3, the "large GEMM" the defaults are quoted at.
GEMM_SIZE = 8192
#: Bytes of the copy measurement (1 GiB: far beyond any cache).
COPY_BYTES = 1 << 30
#: Attention measurement shape: (heads, sequence) at head dimension 128, batch 1: a long
#: sequence, as the defaults are quoted for.
ATTN_HEADS = 16
ATTN_SEQ = 8192
ATTN_HEAD_DIM = 128
#: Eager operations issued per host-time sample (a loop long enough to time with
#: ``perf_counter``, short enough that the launch queue never fills).
HOST_OPS_PER_SAMPLE = 200


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
    if key == "nvfp4":  # an FP8 _scaled_mm must not be written down as an NVFP4 rate
        raise UsageError(
            "bench --kernels measures bf16 and fp8 GEMMs only; NVFP4 GEMMs need Transformer "
            "Engine's block-scaled kernels, not torch._scaled_mm: measure fp8"
        )
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


@dataclass(frozen=True)
class AttentionRates:
    """Measured attention rates (hardware FLOP/s as the step model counts them) and the kernel
    that ran the training one."""

    train_flops: float
    forward_flops: float
    backend: str


def attention_flops(seq: int, heads: int, head_dim: int = ATTN_HEAD_DIM) -> float:
    """Hardware FLOPs of one causal forward: ``4 h s k d`` with ``k = s/2 + 64`` keys per
    query (whole 128-key blocks on the diagonal, :func:`~parastrat.estimate.kernel_model.
    attention_block_keys`)."""
    from ..estimate.kernel_model import attention_block_keys

    return 4.0 * heads * seq * attention_block_keys(seq) * head_dim


def measure_attention(
    *,
    seq: int = ATTN_SEQ,
    heads: int = ATTN_HEADS,
    device: Any = None,
    iters: int = 10,
    warmup: int = 3,
) -> AttentionRates:
    """Achieved rates of causal BF16 attention at head dimension 128 (see the module
    docstring): forward + backward, and forward alone."""
    torch = require("torch", why="measuring kernel rates")
    if seq < 1 or heads < 1 or iters < 1 or warmup < 0:
        raise UsageError(
            f"seq, heads and iters must be >= 1 and warmup >= 0, got {seq}, {heads}, "
            f"{iters}, {warmup}"
        )
    dev = _device(torch, device)
    shape = (1, seq, heads, ATTN_HEAD_DIM)  # batch, sequence, heads, head dim
    q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16) for _ in range(3))
    fwd = attention_flops(seq, heads)
    train, backend = _training_attention(torch, dev, q, k, v)
    t_train = _median_seconds(torch, dev, train, iters, warmup)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def forward() -> Any:
        with torch.no_grad():
            return sdpa(qt, kt, vt, is_causal=True)

    t_fwd = _median_seconds(torch, dev, forward, iters, warmup)
    return AttentionRates((1 + ATTN_BWD_RATIO) * fwd / t_train, fwd / t_fwd, backend)


def _training_attention(torch: Any, dev: Any, q: Any, k: Any, v: Any) -> tuple[Any, str]:
    """A forward + backward of causal attention over (batch, seq, heads, dim) ``q, k, v``:
    Transformer Engine's ``DotProductAttention`` on CUDA when it is installed (what Megatron
    Core trains with), else ``scaled_dot_product_attention``; and the kernel's name."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    grad = torch.ones_like(q)
    attn: Any = None
    backend = "torch scaled_dot_product_attention"
    if dev.type == "cuda":
        try:
            import transformer_engine.pytorch as te  # type: ignore[import-not-found]

            core = te.DotProductAttention(
                q.shape[2], q.shape[3], attn_mask_type="causal", qkv_format="bshd"
            )
            attn, backend = core, "Transformer Engine DotProductAttention"
        except (ImportError, TypeError, ValueError, RuntimeError):
            pass  # no TE, or one whose constructor differs: torch's kernel, named in source
    if attn is None:
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def attn(a: Any, b: Any, c: Any) -> Any:
            return sdpa(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2), is_causal=True)

    def run() -> Any:
        out = attn(q, k, v)
        out.backward(grad.reshape(out.shape))
        return out

    return run, backend


def measure_host_op(
    *, device: Any = None, ops: int = HOST_OPS_PER_SAMPLE, iters: int = 10, warmup: int = 3
) -> float:
    """Host seconds to issue one eager operation: the median over ``iters`` samples of
    ``ops`` back-to-back forwards of a 64-wide ``torch.nn.Linear`` on 64 tokens, timed on the
    host without waiting for the device (the queue is drained between samples, outside the
    timing).  On an accelerator the kernels are tiny, so the loop runs at the host's dispatch
    and launch rate; on the CPU the op also executes, so the figure is an upper bound."""
    torch = require("torch", why="measuring the host's operation rate")
    if ops < 1 or iters < 1 or warmup < 0:
        raise UsageError(f"ops and iters must be >= 1, warmup >= 0; got {ops}, {iters}, {warmup}")
    dev = _device(torch, device)
    layer = torch.nn.Linear(64, 64, device=dev)
    x = torch.randn(64, 64, device=dev)
    samples = []
    with torch.no_grad():
        for i in range(warmup + iters):
            synchronize(torch, dev)
            t0 = time.perf_counter()
            for _ in range(ops):
                layer(x)
            elapsed = time.perf_counter() - t0
            if i >= warmup:
                samples.append(elapsed / ops)
    synchronize(torch, dev)
    return statistics.median(samples)


def kernel_calibration(
    accelerator: str,
    gemm_flops: Mapping[str, float],
    copy_Bps: float | None = None,
    *,
    host_op_s: float | None = None,
    attention: AttentionRates | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The ``kernels`` calibration of measured rates on an ``accelerator`` preset.

    ``gemm_flops`` maps precisions to measured FLOP/s (:func:`measure_gemm`); ``copy_Bps`` is a
    measured copy bandwidth (:func:`measure_copy`).  Each becomes a fraction of the preset's
    dense peak / HBM bandwidth; ``host_op_s`` (:func:`measure_host_op`) is kept as measured.
    A rate above the preset's peak means the wrong preset (or a device that is not the
    preset): UsageError says so rather than writing a fraction > 1.
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
    if host_op_s is not None:
        kernels["host_op_s"] = host_op_s  # validated by Calibration.from_dict below
    if attention is not None:
        kernels.update(_attention_fractions(accel, attention))
    text = source or f"parastrat bench --kernels on {accel.name}, {date.today()}"
    if attention is not None:
        text += f"; attention (training) by {attention.backend}"
    out = {"kernels": kernels, "accelerator": accel.name, "source": text}
    Calibration.from_dict(out)  # the cost model's own validation
    return out


def _attention_fractions(accel: Accelerator, rates: AttentionRates) -> dict[str, float]:
    """``attn_eff`` and ``attn_fwd_eff``: the measured attention rates over the BF16 peak (a
    rate above it names the wrong preset)."""
    peak = accel.peak("bf16")
    out = {}
    for key, flops in (("attn_eff", rates.train_flops), ("attn_fwd_eff", rates.forward_flops)):
        if not 0 < flops <= peak:
            raise UsageError(
                f"measured attention rate {flops / 1e12:.1f} TFLOP/s is outside (0, "
                f"{peak / 1e12:.0f}] TFLOP/s of {accel.name}: is --accelerator the device "
                "that ran it?"
            )
        out[key] = flops / peak
    return out


#: Device kind each preset vendor's devices appear as in torch.
_DEVICE_KIND = {"nvidia": "cuda", "huawei": "npu"}


def check_device(accelerator: str | Accelerator, device: Any = None) -> str:
    """The torch device kind a measurement for ``accelerator`` must run on ("cuda" for NVIDIA
    presets, "npu" for Ascend), checked against ``device`` (default: the first accelerator
    torch sees, else the CPU).  UsageError when they differ: a CPU's rates must never be
    written under a GPU's name."""
    torch = require("torch", why="measuring kernel rates")
    accel = get_accelerator(accelerator)
    want = _DEVICE_KIND.get(accel.vendor, "cuda")
    got = _device(torch, device).type
    if got != want:
        raise UsageError(
            f"bench --kernels --accelerator {accel.name} measures a {want} device, but this "
            f"process runs on '{got}' ({want} not available): rates measured here would be "
            f"written as {accel.name}'s.  Run it on the {accel.name} itself"
        )
    return want


@dataclass(frozen=True)
class GemmShape:
    """One GEMM of the calibration grid: ``groups`` products of (m x k) @ (k x n)."""

    m: int
    n: int
    k: int
    groups: int = 1
    label: str = ""

    @property
    def flops(self) -> float:
        """FLOPs of all the groups."""
        return 2.0 * self.m * self.n * self.k * self.groups


#: MoE presets whose expert GEMMs the grid measures, with the expert-parallel degree that
#: puts them on one 8-GPU node, at 4,096 tokens per rank.
GRID_MOE = (("qwen3-30b-a3b", 8), ("gpt-oss-120b", 8), ("deepseek-v3", 64), ("mixtral-8x7b", 8))
#: Tokens per rank of the grid's MoE and skinny GEMMs (micro-batch 1 at sequence 4,096).
GRID_TOKENS = 4096


def gemm_grid(max_size: int = GEMM_SIZE, tokens: int = GRID_TOKENS) -> list[GemmShape]:
    """The calibration grid: square GEMMs of 1,024 up to ``max_size``; ``tokens`` x 4,096 x
    {1,024, 14,336}; and each :data:`GRID_MOE` preset's expert FC1 / FC2 forward GEMMs at the
    tokens one local expert sees (``tokens x topk / local experts``), grouped over its local
    experts (at most 8 in the grid, to keep the run short)."""
    from ..spec.models import get_llm as get_model

    out: list[GemmShape] = []
    size = 1024
    while size <= max_size:
        out.append(GemmShape(size, size, size, 1, f"square {size}"))
        size *= 2
    for n in (1024, 14336):
        if max(n, tokens) <= 4 * max_size:
            out.append(GemmShape(tokens, n, 4096, 1, f"tokens x {n} x 4096"))
    for name, ep in GRID_MOE:
        model = get_model(name)
        local = max(model.num_experts // ep, 1)
        m = max(1, tokens * model.moe_router_topk // local)
        f = model.moe_ffn_hidden_size or model.ffn_hidden_size
        up = 2 * f if model.gated_linear_unit else f
        h = model.hidden_size
        g = min(local, 8)
        out.append(GemmShape(m, up, h, g, f"{name} EP{ep} fc1 x{g}"))
        out.append(GemmShape(m, h, f, g, f"{name} EP{ep} fc2 x{g}"))
    return out


def measure_grouped_gemm(
    shape: GemmShape,
    precision: str = "bf16",
    *,
    device: Any = None,
    iters: int = 5,
    warmup: int = 2,
) -> float:
    """Achieved FLOP/s of ``shape`` at ``precision``: its ``groups`` GEMMs issued one after
    another (BF16 ``torch.matmul``; FP8 ``torch._scaled_mm`` where available)."""
    torch = require("torch", why="measuring kernel rates")
    key = canonical_precision(precision)
    dev = _device(torch, device)
    a = [
        torch.randn(shape.m, shape.k, device=dev, dtype=torch.bfloat16) for _ in range(shape.groups)
    ]
    b = [
        torch.randn(shape.k, shape.n, device=dev, dtype=torch.bfloat16) for _ in range(shape.groups)
    ]
    if key == "bf16":

        def run() -> Any:
            return [torch.matmul(x, y) for x, y in zip(a, b)]

    else:
        scaled_mm = getattr(torch, "_scaled_mm", None)
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if scaled_mm is None or fp8 is None or dev.type == "cpu":
            raise UsageError(
                f"{precision} GEMMs need torch._scaled_mm on an FP8-capable accelerator; "
                f"measure bf16 on {dev.type}"
            )
        a8 = [x.to(fp8) for x in a]
        b8 = [y.t().contiguous().to(fp8).t() for y in b]
        one = torch.ones((), device=dev, dtype=torch.float32)

        def run() -> Any:
            return [
                scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                for x, y in zip(a8, b8)
            ]

    seconds = _median_seconds(torch, dev, run, iters, warmup)
    return shape.flops / seconds


def measure_grid(
    shapes: list[GemmShape],
    precisions: list[str],
    *,
    device: Any = None,
    iters: int = 5,
    warmup: int = 2,
) -> list[dict[str, Any]]:
    """Rows ``{label, m, n, k, groups, precision, flops_per_s}`` of every shape at every
    precision."""
    rows = []
    for p in precisions:
        for sh in shapes:
            rate = measure_grouped_gemm(sh, p, device=device, iters=iters, warmup=warmup)
            rows.append(
                {
                    "label": sh.label,
                    "m": sh.m,
                    "n": sh.n,
                    "k": sh.k,
                    "groups": sh.groups,
                    "precision": canonical_precision(p),
                    "flops_per_s": rate,
                }
            )
    return rows


def model_fraction(accel: Accelerator, row: dict[str, Any]) -> float:
    """The shape model's share of the large-GEMM rate for a grid row (its tile, wave and
    K-depth factor; the groups run one after another, as measured)."""
    from ..estimate import kernel_model
    from ..estimate.efficiency import profile

    in_bytes = 1 if row["precision"] in ("fp8", "mxfp8") else 2
    return kernel_model.gemm_shape_factor(
        kernel_model.tiling(accel),
        profile(accel).units,
        row["m"],
        row["n"],
        row["k"],
        in_bytes,
        int(row.get("groups", 1)),
        1,
    )


def fit_grid(
    accelerator: str | Accelerator,
    rows: list[dict[str, Any]],
    copy_Bps: float | None = None,
    *,
    host_op_s: float | None = None,
    attention: AttentionRates | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The calibration of a measured grid: per precision, the shape model's large-GEMM
    fraction ``gemm_eff`` = median of ``measured / (peak x model_fraction)`` (so the model
    reproduces the grid's typical shape), the copy's ``mem_eff``, and the grid itself under
    ``kernel_grid`` (each row with its fitted model rate, for checking).  The same refusals
    as :func:`kernel_calibration` (a rate above the peak means the wrong preset)."""
    accel = get_accelerator(accelerator)
    if not rows:
        raise UsageError("nothing measured: the kernel grid is empty")
    by_prec: dict[str, list[float]] = {}
    for row in rows:
        peak = accel.peak(row["precision"])
        if not 0 < row["flops_per_s"] <= peak:
            raise UsageError(
                f"measured {row['label']} {row['precision']} rate "
                f"{row['flops_per_s'] / 1e12:.1f} TFLOP/s is outside (0, {peak / 1e12:.0f}] "
                f"TFLOP/s of {accel.name}: is --accelerator the device that ran it?"
            )
        frac = row["flops_per_s"] / (peak * model_fraction(accel, row))
        by_prec.setdefault(row["precision"], []).append(frac)
    eff = {p: min(1.0, statistics.median(v)) for p, v in by_prec.items()}
    cal = kernel_calibration(
        accel.name,
        {p: e * accel.peak(p) for p, e in eff.items()},
        copy_Bps,
        host_op_s=host_op_s,
        attention=attention,
        source=source or f"parastrat bench --kernels --grid on {accel.name}, {date.today()}",
    )
    cal["kernel_grid"] = [
        {
            **row,
            "model_flops_per_s": accel.peak(row["precision"])
            * eff[row["precision"]]
            * model_fraction(accel, row),
        }
        for row in rows
    ]
    return cal
