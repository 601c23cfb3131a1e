"""Shape-aware kernel model: what rate a GEMM or an attention kernel of a given shape reaches.

One model, read by the dense GEMMs, the grouped expert GEMMs and attention at every head
dimension (:mod:`parastrat.estimate.step` calls it through :mod:`.efficiency`).  Pure
functions of shapes and :class:`~parastrat.spec.hardware.Accelerator` presets; every constant
is a hardware or library fact with its source here and in ``docs/step-model.md``:

* **CTA tiles per architecture** (:data:`TILINGS`).  cuBLAS/CUTLASS pick output tiles of
  128 x 256 on Hopper (two consumer warpgroups of 64 x 256 each: CUTLASS's
  ``KernelTmaWarpSpecializedCooperative`` with ``TileShape 128x256``; FP8 kernels deepen the K
  tile to 128 because one FP8 ``wgmma`` consumes 32 bytes of K; NVFP4 block-scaled kernels
  on Blackwell deepen it to 256 4-bit elements, the same 128 bytes per stage: CUTLASS's
  ``72a_blackwell_nvfp4_bf16_gemm`` example, ``MmaTileShape 256x256x256``, and the
  ``tcgen05.mma.kind::mxf4nvf4`` instruction's K of 64 elements, 4x BF16's 16), and on
  Blackwell 256 x 256
  *per pair of SMs* (``tcgen05`` 2-SM UMMA, CUTLASS ``KernelTmaWarpSpecialized2SmSm100``:
  M = 256 spans the two CTAs of a cluster, so each SM computes 128 x 256).  A100 cuBLAS runs
  256 x 128 per SM with a 32/64-deep K.  The SM counts are the datasheet ones (H100 SXM 132,
  B200/GB200/B300/GB300 148, A100 108).
* **Wave quantisation**: tiles are scheduled in waves of one tile per SM; the last wave is
  partly idle.  Split-K / stream-K (cuBLAS heuristics; CUTLASS ``StreamKScheduler``) split
  the reduction when there are fewer tiles than SMs.
* **Prologue/epilogue per tile** relative to the K loop: :data:`K_PIPE` K-tiles of pipeline
  fill + epilogue per tile (TMA multistage pipelines are 4-7 stages deep; the fill and the
  epilogue cost about two K-tiles).
* **Roofline**: operand and result bytes at the achievable HBM rate (``mem_eff``).
* **Grouped GEMMs** (MoE experts): Transformer Engine's ``GroupedLinear`` issues one GEMM per
  local expert on :data:`GROUPED_STREAMS` CUDA streams (TE PR #853,
  ``num_compute_streams = 4``), so tiles of up to four experts share a wave; each expert's
  M is its own token count (``tokens * topk / experts`` scaled by the load imbalance of
  :mod:`.moe_kernels`).
* **Attention by head dimension**: a flash-attention kernel does ``4 d`` tensor-core FLOPs
  and one exponential per score in forward; the exponentials run on the SFU (MUFU), 16 per
  SM per clock on Ampere/Hopper/Blackwell and 32 on Blackwell Ultra (CUDA C++ Programming
  Guide, arithmetic-instruction throughput table; NVIDIA's Blackwell Ultra technical brief:
  "2x attention-layer acceleration" from doubled SFU throughput).  FlashAttention-3 (Shah et
  al. 2024, section 3) quotes H100 SXM5 at 989 TFLOP/s matmul vs 3.9 T exponentials/s, i.e.
  the exponentials take half the matmul time at ``d = 128`` and all of it at ``d = 64``;
  its ping-pong scheduling overlaps them only in part.  The device's quoted attention
  efficiency is at ``d = 128``; other head dimensions scale by :func:`attention_head_factor`.
* **Attention tiles**: the kernels visit keys in blocks of :data:`ATTN_BLOCK` (FA2/FA3
  ``kBlockN`` = 128 for head dims 64-128) for query blocks of the same size: a causal mask
  computes the diagonal blocks whole and a sliding window of ``w`` keys touches
  ``ceil((w - 1)/128) + 1`` key blocks per query block (:func:`attention_block_keys`).

:class:`~parastrat.spec.workload.Mechanisms` (a field of the run's ``Switches``) switches
each mechanism on or off (the ablation of ``benchmarks/planner_accuracy.py --ablate``); the
step model passes it down, so there is no module state.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, log, sqrt

from ..spec.hardware import Accelerator
from ..spec.model import ModelSpec
from ..spec.workload import BALANCE_MODES as BALANCE_MODES
from ..spec.workload import Mechanisms as Mechanisms
from ..spec.workload import parse_ablation as parse_ablation


# ---------------------------------------------------------------------------------------------
# GEMM tiles and the shape factor
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tiling:
    """GEMM tile geometry of one architecture family, per SM."""

    #: output rows x columns of one SM's share of a CTA tile
    tile_m: int
    tile_n: int
    #: K depth of one main-loop iteration, by input bytes per element (2: BF16, 1: FP8,
    #: 0.5: NVFP4)
    tile_k: dict[float, int]
    #: one tensor-core FLOP per clock per SM (dense BF16), for the SFU ratio
    bf16_flops_per_clk: int
    #: exponentials per clock per SM (SFU / MUFU ``ex2``)
    exp_per_clk: int


#: Per architecture (see the module docstring for the sources).
TILINGS = {
    "ampere": Tiling(128, 256, {2: 32, 1: 32}, 2048, 16),
    "hopper": Tiling(128, 256, {2: 64, 1: 128}, 4096, 16),
    "blackwell": Tiling(128, 256, {2: 64, 1: 128, 0.5: 256}, 8192, 16),
    "blackwell-ultra": Tiling(128, 256, {2: 64, 1: 128, 0.5: 256}, 8192, 32),
    # Ascend cube units: 16 x 16 x 16 fractal, MatMul L0C tiles of 128 x 256 per AI core
    "ascend": Tiling(128, 256, {2: 64, 1: 64}, 4096, 16),
}
#: Architecture of each preset (unknown names: Hopper-like).
ARCH = {
    "a100": "ampere",
    "h100": "hopper",
    "h200": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
    "b300": "blackwell-ultra",
    "gb300": "blackwell-ultra",
    "ascend-910b": "ascend",
    "ascend-910c": "ascend",
}
#: Pipeline fill + epilogue per output tile, in main-loop K iterations.
K_PIPE = 2
#: Shortest K slice split-K / stream-K gives one SM (elements).
SPLIT_K_MIN = 512
#: CUDA streams TE ``GroupedLinear`` spreads the per-expert GEMMs over (TE PR #853).
GROUPED_STREAMS = 4


def tiling(accel: Accelerator) -> Tiling:
    """The :class:`Tiling` of ``accel``'s architecture."""
    return TILINGS[ARCH.get(accel.name, "hopper")]


def _waves(tiles: int, units: int) -> float:
    """Fraction of the SM-slots of ``ceil(tiles/units)`` waves that ``tiles`` fill."""
    waves = ceil(tiles / units)
    return tiles / (waves * units)


def gemm_shape_factor(
    tile: Tiling,
    units: int,
    m: float,
    n: float,
    k: float,
    in_bytes: float = 2,
    groups: int = 1,
    streams: int = 1,
    random_m: bool = False,
) -> float:
    """Fraction of the large-GEMM rate a GEMM of shape (m, n, k) keeps (0..1].

    ``groups`` GEMMs of that shape run ``streams`` at a time (TE GroupedLinear); their tiles
    share the waves of one batch.  Product of: partly filled output tiles, the idle part of
    the last wave (after split-K when there are fewer tiles than SMs), and the per-tile
    pipeline fill/epilogue (:data:`K_PIPE` K-iterations) relative to the K loop.
    ``random_m``: ``m`` is the mean of a random count (tokens routed to an expert), whose
    last row tile is half empty on average: ``m / T + 1/2`` tiles instead of ``ceil(m/T)``.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 1.0
    tm, tn = ceil(m / tile.tile_m), ceil(n / tile.tile_n)
    rows: float = tm * tile.tile_m
    if random_m:
        rows = tile.tile_m * max(1.0, m / tile.tile_m + 0.5)
    fill = (m / rows) * (n / (tn * tile.tile_n))
    together = max(1, min(groups, streams))
    tiles = tm * tn * together
    if tiles < units and k >= 2 * SPLIT_K_MIN:
        split = max(1, min(units // tiles, int(k // SPLIT_K_MIN)))
        tiles *= split
        k = k / split
    kt = tile.tile_k.get(in_bytes, 64)
    iters = ceil(k / kt)
    depth = (k / (iters * kt)) * iters / (iters + K_PIPE)
    return fill * _waves(tiles, units) * depth


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------
#: Key/query block of the flash-attention kernels (FA2/FA3 ``kBlockN`` for d <= 128).
ATTN_BLOCK = 128
#: Share of the shorter of (tensor-core, exponential) time that FA3's ping-pong and
#: intra-warpgroup pipelining leave un-hidden (FA3 section 3.1-3.2: overlap is partial; its
#: measured head-dim 64 vs 128 forward rates, ~500 vs ~650 TFLOP/s, follow from 0.5).
EXP_UNHIDDEN = 0.5
#: Exponentials per score element: forward 1; backward 1 (P recomputed from the LSE) against
#: 2.5x the forward's tensor-core FLOPs.
ATTN_BWD_MM = 2.5


def _exp_ratio(accel: Accelerator, head_dim: float) -> float:
    """Exponential time over tensor-core time of a forward attention at ``head_dim``."""
    t = tiling(accel)
    # 4 d tensor-core FLOPs per score vs one exponential; rates per SM per clock
    return t.bf16_flops_per_clk / (4.0 * head_dim * t.exp_per_clk)


def _attn_cost(r: float) -> float:
    return max(1.0, r) + EXP_UNHIDDEN * min(1.0, r)


def attention_head_factor(accel: Accelerator, head_dim: float, backward: bool = False) -> float:
    """Time of attention at ``head_dim`` relative to the same FLOPs at head dim 128 (the
    quoted efficiency's shape): the SFU exponentials against the tensor-core products."""
    if head_dim <= 0:
        return 1.0
    scale = 1.0 / ATTN_BWD_MM if backward else 1.0
    return _attn_cost(scale * _exp_ratio(accel, head_dim)) / _attn_cost(
        scale * _exp_ratio(accel, 128)
    )


def attention_block_keys(seq_len: float, window: int | None = None) -> float:
    """Keys per query the kernel computes (whole :data:`ATTN_BLOCK` blocks) under a causal
    mask: ``s/2 + B/2`` (the diagonal blocks whole), or ``B (ceil((w-1)/B) + 1)`` per
    query block for a sliding window of ``w`` keys."""
    b = ATTN_BLOCK
    if window and window < seq_len:
        return min(b * (ceil((window - 1) / b) + 1), seq_len / 2.0 + b / 2.0)
    return seq_len / 2.0 + b / 2.0


# ---------------------------------------------------------------------------------------------
# Order statistics (used by the load-imbalance mechanism)
# ---------------------------------------------------------------------------------------------
def expected_max_factor(mean: float, groups: int, rel_sd: float | None = None) -> float:
    """Expected maximum over ``groups`` loads of mean ``mean`` relative to the mean: the
    Gaussian extreme ``1 + sd/mean * sqrt(2 ln G)``; ``rel_sd`` defaults to the Poisson
    spread of random routing, ``1/sqrt(mean)``."""
    if groups <= 1 or mean <= 0:
        return 1.0
    sd = rel_sd if rel_sd is not None else 1.0 / sqrt(mean)
    return 1.0 + sd * sqrt(2.0 * log(groups))


def attention_head_dim(model: ModelSpec) -> float:
    """The head dimension the attention kernel's products run at: ``head_dim``, or for MLA
    the mean of the query-key (``qk + rope``) and value dimensions."""
    if model.multi_latent_attention:
        return (model.qk_head_dim + model.qk_pos_emb_head_dim + model.v_head_dim) / 2.0
    return float(model.head_dim)


def attention_block_ratio(model: ModelSpec, seq_len: int) -> float:
    """Keys the kernel computes over the keys the FLOP count charges, averaged over the
    layers (:func:`attention_block_keys` over :func:`parastrat.estimate.flops.causal_keys`)."""
    from .flops import causal_keys

    seq_len = model.attended_len(seq_len)  # chunked attention: one causal chunk
    if not model.sliding_window:
        return attention_block_keys(seq_len) / causal_keys(seq_len)
    hw = counted = 0.0
    for i in range(model.num_layers):
        w = model.sliding_window if model.is_window_layer(i) else None
        hw += attention_block_keys(seq_len, w)
        counted += causal_keys(seq_len, w)
    return hw / counted if counted else 1.0
