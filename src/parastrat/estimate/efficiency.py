"""Achievable kernel speed per accelerator: GEMMs by shape, attention, memory-bound kernels.

The step-time model (``estimate/step.py``) never divides FLOPs by a datasheet peak directly.
It asks this module how long a GEMM of a given shape takes on a given device, which is

    max(compute, memory) with
    compute = 2 m n k / (peak(precision) * GEMM_EFF * tile_fill(m, n) * wave_fill
                         * k / (k + K_HALF))
    memory  = (operand and result bytes) / (HBM bandwidth * MEM_EFF)

Every constant is physical and documented in ``docs/step-model.md``:

* ``gemm_eff``: the fraction of the dense datasheet peak that a *large* GEMM (8192^3) sustains
  under training power and clocks, per precision (cuBLAS/cuBLASLt and TE measurements published
  by NVIDIA and third parties);
* ``units`` and the tile: the number of SMs (AI cores on Ascend) and the output tile the
  kernels use, which quantise small GEMMs into partly idle waves;
* ``K_HALF``: the reduction depth at which the per-tile prologue/epilogue costs as much as the
  main loop (about two 64-deep k-iterations per side of the software pipeline);
* ``attn_eff``: fused (flash) attention's fraction of the BF16 peak over forward + backward
  (FlashAttention-2/3 and cuDNN published figures);
* ``mem_eff``: the fraction of HBM bandwidth that fused element-wise kernels reach;
* ``HOST_OP_S``: host (CPU) seconds to issue one eager framework operation (PyTorch dispatch,
  autograd bookkeeping and one kernel launch), by the host CPU of the accelerator's system
  (:func:`host_op_time`).

No constant depends on a model or on a row of the calibration tables.  Devices without an entry
fall back to ``DEFAULT`` (H100-like fractions, which are typical of modern tensor-core parts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from ..spec.hardware import Accelerator, canonical_precision
from . import kernel_model
from .fp8 import OPERAND_BYTES

#: K at which the per-tile prologue/epilogue equals the main loop (elements).
K_HALF = 64
#: Shortest K slice a split-K GEMM gives one SM.
SPLIT_K_MIN = 512
#: Shortest kernel, seconds (launch + ramp; CUDA graphs are not assumed).
MIN_KERNEL_S = 4e-6

#: Host seconds per eager operation (one PyTorch dispatch + one kernel launch), by host CPU.
#: Measured CPU time of one ``torch.nn.Linear`` forward (one cuBLAS GEMM) in BF16, hidden 2048,
#: 8,192 tokens (Transformer Engine issue #2053, "High CPU overhead on Grace systems",
#: 2025-08): 13.48 us on a DGX H100 (Intel Xeon Platinum 8480C), 37.08 us on GB200 and
#: 33.17 us on GH200 (Grace, Neoverse V2).  The same table puts TE's own Linear at 2.7x
#: torch's on Grace (99.66 / 37.08); TE's maintainers report that gap "greatly reduced" since
#: (TE issue #2126, 2026-01: TE Linear "nearly the same" as torch's), so torch's figure is the
#: per-operation cost used for the recipes' current software.
HOST_OP_S = {"x86": 13.5e-6, "grace": 37e-6}
#: Host CPU family of each accelerator's reference system: DGX A100/H100/H200/B200/B300 use
#: x86 hosts (the H100 figure above stands for all of them); GB200/GB300 NVL72 use Grace.
#: Ascend servers (Kunpeng hosts) have no published figure; they get the x86 value.
HOST_CPU = {"gb200": "grace", "gb300": "grace"}


@dataclass(frozen=True)
class KernelProfile:
    """Physical efficiency constants of one accelerator (see the module docstring)."""

    #: fraction of the dense peak a large GEMM sustains, per canonical precision
    gemm_eff: dict[str, float]
    #: fused attention's fraction of the BF16 peak (forward + backward, hardware FLOPs)
    attn_eff: float
    #: fraction of HBM bandwidth fused element-wise kernels reach
    mem_eff: float
    #: streaming multiprocessors (NVIDIA) / AI cores (Ascend) that take GEMM tiles
    units: int
    #: output tile (rows x columns) of the GEMM kernels
    tile_m: int = 128
    tile_n: int = 256
    source: str = ""

    def gemm_fraction(self, precision: str) -> float:
        """Achievable fraction of peak for large GEMMs at ``precision``: NVFP4 falls back to
        MXFP8's (no sustained NVFP4 GEMM rate is published; both are ``tcgen05`` block-scaled
        kernels), MXFP8 to FP8's, FP8 to BF16's."""
        key = precision if precision in self.gemm_eff else canonical_precision(precision)
        for k in _FRACTION_CHAIN.get(key, (key,)):
            if k in self.gemm_eff:
                return self.gemm_eff[k]
        return self.gemm_eff["bf16"]


#: Where a precision without its own measured fraction borrows one (see ``gemm_fraction``).
_FRACTION_CHAIN = {
    "nvfp4": ("nvfp4", "mxfp8", "fp8"),
    "mxfp8": ("mxfp8", "fp8"),
    "fp8": ("fp8",),
}

PROFILES: dict[str, KernelProfile] = {
    # A100: cuBLAS BF16 GEMMs reach ~270 of 312 TFLOP/s at 8192^3 (NVIDIA's A100 whitepaper
    # and MLPerf-era measurements: 85-88 %); FlashAttention-2 paper: 50-73 % of peak
    # forward, lower backward -> ~55 % over both; 108 SMs.
    "a100": KernelProfile(
        gemm_eff={"bf16": 0.86},
        attn_eff=0.55,
        mem_eff=0.80,
        units=108,
        tile_m=128,
        tile_n=256,
        source="A100 whitepaper; FlashAttention-2 (Dao 2023) Fig. 5-7",
    ),
    # H100 SXM: BF16 GEMMs sustain ~650-700 of 989 TFLOP/s at 700 W (cuBLASLt, TE);
    # FP8 ~1,200-1,300 of 1,979.  FlashAttention-3: 600-740 TFLOP/s forward, ~500 backward
    # BF16 -> ~0.55 over both.  132 SMs.
    "h100": KernelProfile(
        gemm_eff={"bf16": 0.68, "fp8": 0.62},
        attn_eff=0.52,
        mem_eff=0.80,
        units=132,
        source="NVIDIA TE/cuBLASLt benchmarks; FlashAttention-3 (Shah 2024)",
    ),
    "h200": KernelProfile(
        gemm_eff={"bf16": 0.70, "fp8": 0.64},
        attn_eff=0.54,
        mem_eff=0.80,
        units=132,
        source="as H100 (same SMs; 1000 W TDP, faster HBM)",
    ),
    # Blackwell: B200 (1000 W) sustains BF16 ~1.5 of 2.25 PFLOP/s and FP8/MXFP8 ~2.8 of 4.5
    # in cuBLASLt; cuDNN attention ~1.3 PFLOP/s forward, ~0.9 backward (head_dim 128);
    # 148 SMs, 256-wide 2-CTA tiles.
    "b200": KernelProfile(
        gemm_eff={"bf16": 0.68, "fp8": 0.62, "mxfp8": 0.60},
        attn_eff=0.45,
        mem_eff=0.80,
        units=148,
        tile_m=256,
        tile_n=256,
        source="NVIDIA Blackwell cuBLASLt / cuDNN published figures",
    ),
    # Blackwell Ultra doubles the SFU exponential rate (kernel_model.TILINGS): at head dim
    # 128 attention costs (1 + 0.5 x 0.5) instead of (1 + 0.5 x 1.0) tensor-core times
    # (kernel_model.attention_head_factor), so B300 / GB300 reach 1.5 / 1.25 = 1.2x the
    # B200 / GB200 attention rate: 0.45 x 1.2 = 0.54, 0.41 x 1.2 = 0.49.  Blackwell Ultra has
    # 160 SMs (NVIDIA technical blog "Inside NVIDIA Blackwell Ultra", 2025-08: 160 SMs, 640
    # tensor cores, 10.7 T exponentials/s against Blackwell's 5).
    "b300": KernelProfile(
        gemm_eff={"bf16": 0.68, "fp8": 0.62, "mxfp8": 0.60},
        attn_eff=0.54,
        mem_eff=0.80,
        units=160,
        tile_m=256,
        tile_n=256,
        source="as B200 (Blackwell Ultra doubles the attention SFU rate)",
    ),
    # GB200's datasheet peak (2.5 / 5 PFLOP/s) assumes clocks that sustained GEMMs at 1200 W
    # do not hold; sustained rates are close to B200's, so the fractions of the higher peak are
    # lower (B200's x 4.5/5).
    "gb200": KernelProfile(
        gemm_eff={"bf16": 0.61, "fp8": 0.56, "mxfp8": 0.54},
        attn_eff=0.41,
        mem_eff=0.80,
        units=148,
        tile_m=256,
        tile_n=256,
        source="B200 sustained rates over GB200's datasheet peak",
    ),
    "gb300": KernelProfile(
        gemm_eff={"bf16": 0.61, "fp8": 0.56, "mxfp8": 0.54},
        attn_eff=0.49,
        mem_eff=0.80,
        units=160,
        tile_m=256,
        tile_n=256,
        source="as GB200 (Blackwell Ultra attention)",
    ),
    # Ascend 910B: cube units reach ~70 % of the FP16/BF16 peak in large MatMul (CANN
    # aclnnMatmul figures); FlashAttentionScore ~45 %; 24 AI cores (cube) per die.
    "ascend-910b": KernelProfile(
        gemm_eff={"bf16": 0.70},
        attn_eff=0.45,
        mem_eff=0.70,
        units=24,
        tile_m=128,
        tile_n=256,
        source="CANN operator performance notes (estimate)",
    ),
    "ascend-910c": KernelProfile(
        gemm_eff={"bf16": 0.68},
        attn_eff=0.45,
        mem_eff=0.70,
        units=48,
        tile_m=128,
        tile_n=256,
        source="two 910B-class dies per package (estimate)",
    ),
}

# ---- DiT serving parts (issue 16): variants of the parts above, and Ada (sm_89) PCIe cards --
# A800 / H800 are the A100 / H100 with fewer NVLink links: same SMs, same kernels.  H20 is a
# Hopper whose tensor rate is cut to 148 TFLOP/s: the H100 fractions apply.  Ada (L40, L40S,
# L20, RTX 4090) runs mma.sync kernels like Ampere; cuBLAS FP16 GEMMs reach 105-115 of the
# L20's 119.5 TFLOP/s (DefTruth/CUDA-Learn-Notes hgemm benchmark) -> 0.88; SMs: L40/L40S
# 142, L20 92, RTX 4090 128 (NVIDIA datasheets).
PROFILES["a800"] = replace(PROFILES["a100"], source="as A100 (same die, fewer NVLinks)")
PROFILES["h800"] = replace(PROFILES["h100"], source="as H100 (same die, fewer NVLinks)")
PROFILES["h20"] = replace(PROFILES["h100"], source="as H100 (Hopper SMs at a lower tensor rate)")
for _name, _units in (("l40", 142), ("l40s", 142), ("l20", 92), ("rtx-4090", 128)):
    PROFILES[_name] = KernelProfile(
        gemm_eff={"bf16": 0.88, "fp8": 0.80},
        attn_eff=0.55,
        mem_eff=0.80,
        units=_units,
        source="Ada: cuBLAS HGEMM at 88-96 % of the L20 peak (CUDA-Learn-Notes); "
        "FlashAttention-2 fractions as Ampere",
    )

DEFAULT = PROFILES["h100"]


_CANONICAL = frozenset({"bf16", "fp8", "mxfp8", "nvfp4"})


def _peak(accel: Accelerator, key: str) -> float:
    """``accel.peak`` for an already canonical precision key (the hot path)."""
    flops = accel.peak_flops
    if key in flops:
        return flops[key]
    if key == "mxfp8" and "fp8" in flops:
        return flops["fp8"]
    return flops["bf16"]


def profile(accel: Accelerator) -> KernelProfile:
    """The kernel profile of ``accel`` (by preset name; H100-like fractions otherwise), with
    the measured constants of ``accel.kernels`` (a calibration's ``kernels`` section) in place
    of the defaults."""
    base = PROFILES.get(accel.name, DEFAULT)
    kern = accel.kernels
    if not kern:
        return base
    hit = accel.__dict__.get("_kernel_profile")
    if hit is None:
        hit = replace(
            base,
            gemm_eff={**base.gemm_eff, **kern.get("gemm_eff", {})},
            attn_eff=kern.get("attn_eff", base.attn_eff),
            mem_eff=kern.get("mem_eff", base.mem_eff),
            source=f"{base.source}; measured: {', '.join(sorted(kern))}",
        )
        accel.__dict__["_kernel_profile"] = hit  # frozen dataclass: cache on the instance
    return hit


def shape_factor(prof: KernelProfile, m: float, n: float, k: float, groups: int = 1) -> float:
    """How much of the large-GEMM rate a GEMM of shape (m, n, k) keeps (0..1].

    Product of three physical losses: partly filled output tiles (m and n rounded up to the
    tile), the last partial wave of tiles over the SMs, and the per-tile prologue/epilogue
    relative to the K loop.  A GEMM with fewer tiles than SMs is split along K (as cuBLAS's
    split-K / CUTLASS's stream-K do) into slices of at least ``SPLIT_K_MIN``.  ``groups``
    GEMMs of that shape run as one grouped kernel (MoE experts), so their tiles share waves.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 1.0
    tm = ceil(m / prof.tile_m)
    tn = ceil(n / prof.tile_n)
    fill = (m / (tm * prof.tile_m)) * (n / (tn * prof.tile_n))
    tiles = tm * tn * max(1, groups)
    if tiles < prof.units and k >= 2 * SPLIT_K_MIN:
        # too few tiles for the SMs: the library splits K (split-K / stream-K)
        split = max(1, min(prof.units // tiles, int(k // SPLIT_K_MIN)))
        tiles *= split
        k = k / split
    waves = ceil(tiles / prof.units)
    wave_fill = tiles / (waves * prof.units)
    depth = k / (k + K_HALF)
    return fill * wave_fill * depth


def gemm_time(
    accel: Accelerator,
    m: float,
    n: float,
    k: float,
    precision: str = "bf16",
    groups: int = 1,
    prof: KernelProfile | None = None,
    streams: int = 0,
    random_m: bool = False,
    shape: bool = True,
    fp4_tile: bool = True,
) -> float:
    """Seconds for ``groups`` GEMMs of (m x k) @ (k x n) at ``precision`` on ``accel``.

    The slower of the compute time (at the shape-dependent achievable rate) and the time to
    stream the operands and the BF16 result through HBM, and at least one kernel launch.
    ``streams`` > 0: the groups are separate GEMMs issued over that many streams (TE
    GroupedLinear); 0: one grouped kernel whose tiles share the waves.  With ``shape`` (the
    mechanism of :class:`~parastrat.spec.workload.Mechanisms`) the rate comes from
    :func:`~parastrat.estimate.kernel_model.gemm_shape_factor` (per-architecture tiles, FP8
    and FP4 K tiles; ``random_m``: ``m`` is the mean of a routed token count); off, from
    :func:`shape_factor` with the profile's tile.  ``fp4_tile`` (the ``nvfp4`` mechanism):
    NVFP4 GEMMs use the 256-deep FP4 K tile (off: FP8's); their operands stream
    at 0.5 + 1/16 B per element (:data:`~parastrat.estimate.fp8.OPERAND_BYTES`: E2M1 values
    and their E4M3 block scales), FP8's at 1 B, BF16's at 2.
    """
    if m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        return 0.0
    prof = prof or profile(accel)
    key = precision if precision in _CANONICAL else canonical_precision(precision)
    in_bytes: float = 1 if key in ("fp8", "mxfp8") and key in accel.peak_flops else 2
    op_bytes = in_bytes
    if key == "nvfp4":  # require_precision keeps NVFP4 off parts without FP4 tensor cores
        in_bytes = 0.5 if fp4_tile else 1
        op_bytes = OPERAND_BYTES["nvfp4"]
    launches = 1
    if shape:
        tiles = kernel_model.tiling(accel)
        together = streams if streams > 0 else groups
        sf = kernel_model.gemm_shape_factor(
            tiles, prof.units, m, n, k, in_bytes, groups, together, random_m
        )
        if streams > 0:
            launches = ceil(groups / streams)
    else:
        sf = shape_factor(prof, m, n, k, groups)
    rate = _peak(accel, key) * prof.gemm_fraction(key) * sf
    flops = 2.0 * m * n * k * groups
    nbytes = groups * ((m * k + k * n) * op_bytes + m * n * 2.0)
    return max(
        flops / rate,
        nbytes / (accel.mem_bandwidth_Bps * prof.mem_eff),
        launches * MIN_KERNEL_S,
    )


def attention_time(
    accel: Accelerator,
    hw_flops: float,
    prof: KernelProfile | None = None,
    head_dim: float = 128,
    backward: bool = False,
    shape: bool = True,
) -> float:
    """Seconds for fused attention doing ``hw_flops`` (always BF16: FP8 recipes keep it).

    ``attn_eff`` is quoted at head dimension 128; other head dimensions scale by
    :func:`~parastrat.estimate.kernel_model.attention_head_factor` (the SFU exponentials
    against the tensor-core products) when the ``shape`` mechanism is on.
    """
    if hw_flops <= 0:
        return 0.0
    prof = prof or profile(accel)
    t = hw_flops / (accel.peak("bf16") * prof.attn_eff)
    if shape and head_dim != 128:
        t *= kernel_model.attention_head_factor(accel, head_dim, backward)
    return t


def memory_time(accel: Accelerator, nbytes: float, prof: KernelProfile | None = None) -> float:
    """Seconds for memory-bound kernels that move ``nbytes`` through HBM."""
    if nbytes <= 0:
        return 0.0
    prof = prof or profile(accel)
    return nbytes / (accel.mem_bandwidth_Bps * prof.mem_eff)


def host_cpu(accel: Accelerator) -> str:
    """The host CPU family of ``accel``'s reference system (:data:`HOST_CPU`; x86 otherwise)."""
    return HOST_CPU.get(accel.name, "x86")


def host_op_time(accel: Accelerator) -> float:
    """Host seconds to issue one eager operation on ``accel``'s system: the measured
    ``host_op_s`` of ``accel.kernels`` when calibrated, else :data:`HOST_OP_S` by host CPU."""
    measured = accel.kernels.get("host_op_s") if accel.kernels else None
    return float(measured) if measured else HOST_OP_S[host_cpu(accel)]


def host_op_source(accel: Accelerator) -> str:
    """Where :func:`host_op_time`'s figure for ``accel`` comes from, in words."""
    if accel.kernels and accel.kernels.get("host_op_s"):
        return "measured by this calibration"
    return (
        f"the model's figure for {host_cpu(accel)} hosts, from TE issue #2053, "
        "not measured on this machine"
    )
