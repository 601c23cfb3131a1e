"""One denoising step of a diffusion transformer on one device: the time model of
:func:`parastrat.estimate.dit.estimate_dit` (docs/dit-model.md).

One record per block kind (:class:`BlockTime`: GEMMs, attention core, element-wise traffic,
Ulysses all-to-alls, ring K/V exchange and merge, sequence-parallel copies, TP all-reduces,
host operations) for what one device holds (:class:`DeviceShard`); :func:`step_time` adds the
model's blocks, the per-step gathers of the prediction, the scheduler step and the time the
device waits for the host.  Every constant is physical and documented; none is fitted to the
comparisons in docs/accuracy-dit.md.  The module-level ``USE_*`` switches and the
``HOST_OPS`` / ``FUSED_CHAINS`` tables are what ``benchmarks/dit_accuracy.py``'s ablation
turns off.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.cluster import Cluster
from ..spec.dit import DiTSpec
from ..spec.hardware import Accelerator
from . import efficiency
from .dit_serial import scheduler_time

#: Forward-only fused attention's fraction of the dense BF16 peak, per accelerator, for the
#: kernels DiT serving stacks use (FlashAttention-2 in xDiT/yunchang and diffusers; CANN
#: FlashAttentionScore on Ascend).  FlashAttention-2 paper (Dao 2023, Fig. 5): ~70 % of A100
#: peak forward at head dim 128, non-causal, long sequences.  FlashAttention-3 paper (Shah et
#: al. 2024, Fig. 4-5): FlashAttention-2 reaches ~330-370 of 989 TFLOP/s forward on H100
#: (no TMA/WGMMA: its mma.sync path, not the peak, is the limit), i.e. ~0.35.  Parts whose
#: tensor peak sits below that mma.sync limit keep the Ampere-class fraction: A800 (an A100),
#: H20 (a Hopper cut to 148 TFLOP/s), and Ada (L40/L40S/L20/RTX 4090, sm_89, the same
#: mma.sync kernels as Ampere).  Devices not listed use their kernel profile's ``attn_eff``.
ATTN_FWD_EFF: dict[str, float] = {
    "a100": 0.70,
    "a800": 0.70,
    "h100": 0.35,
    "h800": 0.35,
    "h200": 0.36,
    "h20": 0.70,
    "l40": 0.70,
    "l40s": 0.70,
    "l20": 0.70,
    "rtx-4090": 0.70,
}

#: Element-wise passes (one read or one write of a hidden-width vector per token) per block
#: and stream, by execution mode.  Eager (diffusers 0.35 block forwards, counted): modulated
#: LayerNorm (norm, scale, shift: 6), layout copies of Q/K/V (6), RMSNorm of Q and K in fp32
#: (upcast, square, mean, scale, downcast: ~14 each -> 28), RoPE on Q and K in fp32 (~10 each
#: -> 20), concatenation/split of text and image (4), two gated residual adds (10), second
#: modulated norm (6) -> ~80.  Compiled (torch.compile / Inductor fuses each chain of pointwise
#: ops between two matmuls into one kernel that reads its inputs and writes its outputs once):
#: norm+modulate (2), QK-norm+RoPE+layout of Q, K, V (6), gate+residual+norm+modulate (5),
#: gate+residual (3) -> ~16.
ELEMENTWISE_PASSES_H = {False: 80, True: 16}
#: Read+write pairs over the MLP hidden per token: the activation and the bias add (2), in
#: either mode (Inductor does not fuse into cuBLAS GEMM epilogues by default).
ELEMENTWISE_PASSES_F = 2

#: Eager operations (host dispatch + kernel launch) per block, counted from diffusers 0.35
#: forwards: FLUX/HunyuanVideo dual-stream block ~93 (per stream: AdaLN 6, Q/K/V 3, RMSNorm of
#: Q and K 16, RoPE 8, out 1, gates/residuals 4, norm2 3, MLP 3; joint cat/SDPA 5), single-stream
#: ~48, Wan cross-attention block ~76, CogVideoX block ~57.  Compiled, the host issues the
#: GEMMs, the attention and one fused kernel per pointwise chain (:data:`FUSED_CHAINS`).
HOST_OPS = {"double": 93, "single": 48, "cross": 76, "joint": 57}
FUSED_CHAINS = {"double": 10, "single": 5, "cross": 8, "joint": 6}
#: Extra eager operations per attention for Ulysses (4 all-to-alls with their reshapes and
#: contiguous copies) and per ring hop (send, receive, attention, ~9 merge kernels).
ULYSSES_OPS = 12
RING_HOP_OPS = 12


#: fp32 passes over a rank's partial attention output per ring hop, from ring-flash-attention's
#: ``update_out_and_lse`` (as in yunchang): cast the new block to fp32, subtract, scale by a
#: sigmoid of the log-sum-exp difference, subtract again -- each an eager kernel that reads one
#: or two fp32 tensors and writes one: ~9 tensor passes.
RING_MERGE_PASSES = 9

#: Memory traffic of the sequence-parallel attention path as xDiT runs it (yunchang 0.6 and
#: xfuser's ``xFuserLongContextAttention``), counted from the code; all are copies the
#: single-device path does not make, in reads + writes of the per-rank tensor:
#: * yunchang ``all_to_all_4D`` makes the all-to-all'd tensors contiguous before
#:   ``all_to_all_single`` and after it, also when the Ulysses group has one rank (ring only):
#:   the output (scatter the sequence, gather the heads) is copied twice whatever the shape;
#:   Q, K and V (scatter the heads) are copied on the way in when the Ulysses group or the
#:   batch is larger than one (``input.reshape(...).transpose(0, 2).contiguous()``) and on the
#:   way out when the batch is (``output.transpose(0, 1).contiguous()``; with one sample the
#:   transposed dimension has size one and ``contiguous()`` returns the view) -- see
#:   :func:`usp_copy_bytes`;
#: * the ring attention (``xdit_ring_flash_attn_forward``) converts the first block's output
#:   to fp32 (``update_out_and_lse``) and back (``out.to(q.dtype)``): 2 + 4 and 4 + 2 bytes
#:   per output element (:data:`USP_OUT_FP32_BYTES`);
#: * with joint text (xDiT's FLUX / SD3 / CogVideoX / HunyuanVideo processors:
#:   ``use_long_ctx_attn_kvcache`` on) the KV-cache manager concatenates K and V
#:   (``torch.cat([k, v], dim=-1)``) and makes the chunks contiguous again
#:   (xfuser/core/cache_manager/cache_manager.py): two copies of K and V
#:   (:data:`USP_KV_CACHE_COPIES`);
#: * ``joint_strategy="front"`` concatenates the text with the query before the all-to-all and
#:   with K and V at the first ring step: one copy of each.  A dual-stream block's own
#:   processor concatenates text and image Q, K, V the same way on one device (counted in its
#:   eager traffic), so the copy is extra only for single-stream and CogVideoX-style joint
#:   blocks, whose processors concatenate nothing there (:data:`USP_FRONT_CAT_KINDS`).
USP_OUT_FP32_BYTES = 12
USP_KV_CACHE_COPIES = 2
USP_FRONT_CAT_KINDS = frozenset({"single", "joint"})
#: Switch for the sequence-parallel path's copies (the ablation of dit_accuracy.py).
USE_USP_COPIES = True

#: Fraction of the overlapped compute time that a hidden ring transfer still costs: NCCL's
#: point-to-point kernels occupy ~8-16 of 132 SMs (one CTA per channel) and share HBM
#: bandwidth while attention runs, so "hidden" communication is not free (~10 %).
OVERLAP_INTERFERENCE = 0.10

#: FlashAttention-2's forward rate at head dim 64 relative to head dim 128 (Dao 2023, Fig. 5,
#: A100, non-causal, 16K tokens: ~196 against ~224 TFLOP/s): half the work per loaded K/V tile.
HEAD_DIM_64_FACTOR = 0.87


def attention_efficiency(accel: Accelerator, head_dim: int = 128) -> float:
    """Forward flash-attention efficiency used for ``accel`` (see :data:`ATTN_FWD_EFF`), at
    ``head_dim`` (64 and below run at :data:`HEAD_DIM_64_FACTOR` of the head-dim-128 rate).

    A calibration's measured ``attn_fwd_eff`` (forward attention, ``bench --kernels``) is used
    as it is; a measured ``attn_eff`` alone (training attention, forward + backward) scales the
    table's forward figure by its ratio to the preset's own ``attn_eff``: attention measured
    10 % slower than the preset says is priced 10 % slower here too."""
    kern = accel.kernels or {}
    base = ATTN_FWD_EFF.get(accel.name)
    if kern.get("attn_fwd_eff"):
        base = float(kern["attn_fwd_eff"])
    elif base is None:
        base = efficiency.profile(accel).attn_eff  # the calibrated value, if any
    elif kern.get("attn_eff"):
        preset = efficiency.PROFILES.get(accel.name, efficiency.DEFAULT).attn_eff
        base = min(1.0, base * float(kern["attn_eff"]) / preset)
    return base * (HEAD_DIM_64_FACTOR if head_dim <= 64 else 1.0)


# ---------------------------------------------------------------------------------------------
# The block's work.
# ---------------------------------------------------------------------------------------------
def block_gemms(
    model: DiTSpec, kind: str, img: float, txt: float, tp: int
) -> list[tuple[float, float, float]]:
    """(m, n, k) of every GEMM one block runs on one device (m tokens, TP-split widths)."""
    h, f, q, kv = model.hidden_size, model.ffn_hidden_size, model.inner_dim, model.kv_dim
    qkv = (q + 2 * kv) / tp
    out: list[tuple[float, float, float]] = []
    if kind == "double":
        out += [(img, qkv, h), (img, h, q / tp), (img, f / tp, h), (img, h, f / tp)]
        c = model.text_width  # the text stream's own width (Mochi: 1536)
        fc = f * c / h
        out += [(txt, qkv, c), (txt, c, q / tp), (txt, fc / tp, c), (txt, c, fc / tp)]
    elif kind == "single":
        m = img + txt
        out += [(m, qkv + f / tp, h), (m, h, (q + f) / tp)]
    elif kind == "cross":
        out += [
            (img, qkv, h),
            (img, h, q / tp),  # self-attention
            (img, q / tp, h),
            (txt, 2 * kv / tp, h),
            (img, h, q / tp),  # cross-attention
            (img, f / tp, h),
            (img, h, f / tp),
        ]  # MLP
    elif kind == "joint":
        m = img + txt
        out += [(m, qkv, h), (m, h, q / tp), (m, f / tp, h), (m, h, f / tp)]
    return [g for g in out if g[0] > 0]


def host_ops(model: DiTSpec, kind: str, compiled: bool, U: int, R: int, tp: int) -> float:
    """Host-issued operations of one block (eager: every op; compiled: GEMMs, attention and
    one kernel per fused pointwise chain), plus the sequence-parallel extras."""
    if compiled:
        ops = float(len(block_gemms(model, kind, 1.0, 1.0, tp)) + 1 + FUSED_CHAINS[kind])
    else:
        ops = float(HOST_OPS[kind])
    ops += (ULYSSES_OPS if U > 1 else 0) + RING_HOP_OPS * (R - 1)
    if tp > 1:
        ops += len(tp_allreduces(kind, 1.0, 1.0))
    return ops


#: Switch for the counted eager traffic (:mod:`~parastrat.spec.block_traffic`); off, every
#: model is priced with the generic :data:`ELEMENTWISE_PASSES_H` (the ablation of
#: ``benchmarks/dit_accuracy.py`` turns it off).
USE_EAGER_TRAFFIC = True


def elementwise_bytes_per_token(
    model: DiTSpec, kind: str, compiled: bool, nbytes: int, tp: int
) -> float:
    """HBM bytes per token of one block's element-wise kernels (the MLP part divided by TP)."""
    if not compiled and USE_EAGER_TRAFFIC:
        for e in model.eager_traffic:
            if e.kind == kind:
                return e.hidden_bytes * model.hidden_size + e.ffn_bytes * model.ffn_hidden_size / tp
    return (
        2
        * nbytes
        * (
            ELEMENTWISE_PASSES_H[compiled] / 2 * model.hidden_size
            + ELEMENTWISE_PASSES_F * model.ffn_hidden_size / tp
        )
    )


def usp_copy_bytes(
    model: DiTSpec, kind: str, img: float, txt: float, batch: int, U: int, tp: int, nbytes: int
) -> float:
    """Bytes the sequence-parallel attention path copies per block and rank (see
    :data:`USP_OUT_FP32_BYTES`): ``img``/``txt`` are the image and text rows this rank holds,
    ``batch`` the samples per forward, ``U`` the Ulysses degree."""
    joint = kind != "cross" and model.text_in_sequence
    q = (img + (txt if joint else 0)) * model.inner_dim / tp * nbytes  # Q (and the output)
    kv = img * model.kv_dim / tp * nbytes  # K or V
    qkv_copies = (1 if U > 1 or batch > 1 else 0) + (1 if batch > 1 else 0)
    total = 2 * (qkv_copies * (q + 2 * kv) + 2 * q)  # reads + writes of each copy
    total += USP_OUT_FP32_BYTES * q / nbytes
    if joint:
        total += USP_KV_CACHE_COPIES * 2 * 2 * kv
        if kind in USP_FRONT_CAT_KINDS:
            total += 2 * q + 2 * 2 * kv
    return total


def tp_allreduces(kind: str, img: float, txt: float) -> list[float]:
    """Tokens in each TP all-reduce of one block (one per row-split matrix output)."""
    if kind == "double":
        return [img + txt, img + txt]  # attention output, MLP output (both streams)
    if kind == "single":
        return [img + txt]  # the fused output projection
    if kind == "cross":
        return [img, img, img]  # self-attention, cross-attention, MLP
    return [img + txt, img + txt]  # joint


# ---------------------------------------------------------------------------------------------
# One record per block kind, and the step.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceShard:
    """What one device runs per denoising step: ``batch`` guidance branches (1 or 2),
    ``per_dev`` image/video tokens (after padding) and the ``text`` tokens, under ``tp`` x
    ``ulysses`` x ``ring``; ``nbytes`` per activation element at ``precision``; ``compiled``
    under torch.compile; ``attention_eff`` the forward flash-attention fraction of peak;
    ``ring_gather``: the ring group's K/V gathered whole before the attention (MindIE-SD)
    rather than passed around behind it."""

    batch: int
    per_dev: int
    text: int
    tp: int
    ulysses: int
    ring: int
    nbytes: int
    precision: str
    compiled: bool
    attention_eff: float
    ring_gather: bool = False

    @property
    def sp(self) -> int:
        """Sequence ranks (``ulysses * ring``)."""
        return self.ulysses * self.ring

    @property
    def img(self) -> int:
        """Image/video rows this device runs (all its branches)."""
        return self.batch * self.per_dev

    @property
    def txt(self) -> int:
        """Text rows this device runs (all its branches)."""
        return self.batch * self.text


#: The per-step terms of :class:`BlockTime` that add to the device's time, in report order.
TERMS = (
    "linear",
    "attention",
    "elementwise",
    "ulysses_all_to_all",
    "ring_kv_exchange",
    "ring_merge",
    "sp_layout",
    "tp_all_reduce",
)


@dataclass(frozen=True)
class BlockTime:
    """Seconds of one block of one kind on one device, one denoising step (:data:`TERMS`),
    with the ring transfer ``ring_hidden`` behind the attention (its interference is in
    ``ring_kv_exchange``), ``ring_uncovered`` / ``ring_total`` of that transfer, and the
    ``host_ops`` the host issues."""

    linear: float = 0.0
    attention: float = 0.0
    elementwise: float = 0.0
    ulysses_all_to_all: float = 0.0
    ring_kv_exchange: float = 0.0
    ring_merge: float = 0.0
    sp_layout: float = 0.0
    tp_all_reduce: float = 0.0
    ring_hidden: float = 0.0
    ring_uncovered: float = 0.0
    ring_total: float = 0.0
    host_ops: float = 0.0


def block_time(model: DiTSpec, kind: str, d: DeviceShard, cluster: Cluster) -> BlockTime:
    """One block of ``kind`` for what ``d`` holds: GEMMs (shape-aware), the non-causal
    attention core, element-wise HBM traffic, and the sequence-parallel and TP collectives."""
    accel = cluster.accel
    prof = efficiency.profile(accel)
    tp, U = d.tp, d.ulysses
    text = 0 if kind == "cross" else d.text  # text rows joining the attention
    lin = sum(
        efficiency.gemm_time(accel, m, nn, k, d.precision, prof=prof)
        for m, nn, k in block_gemms(model, kind, d.img, d.txt, tp)
    )
    # attention core, non-causal, per branch: 4 * q_rows * kv_rows * head_dim per head.
    # After the all-to-all a rank holds its Ulysses group's U shards (+ the text) for
    # heads / (tp * U) heads; the ring brings every other shard's keys and values.
    q_rows = U * d.per_dev + text
    heads_loc = model.num_attention_heads / (tp * U)
    attn_flops = d.batch * 4.0 * model.head_dim * heads_loc * q_rows * (d.per_dev * d.sp + text)
    if kind == "cross":  # cross-attention to the text: local queries, all heads / tp
        heads = model.num_attention_heads / tp
        attn_flops += d.batch * 4.0 * model.head_dim * heads * d.per_dev * d.text
    attn = attn_flops / (accel.peak("bf16") * d.attention_eff)
    # element-wise traffic over the tokens this rank holds: eager, the bytes counted on the
    # family's real block where known; compiled (or uncounted), the generic passes
    ew_tokens = d.img + (d.txt if kind != "cross" else 0)
    per_token = elementwise_bytes_per_token(model, kind, d.compiled, d.nbytes, tp)
    ring = _ring(model, d, cluster, attn, q_rows, heads_loc)
    layout = 0.0
    if d.sp > 1 and USE_USP_COPIES:
        copies = usp_copy_bytes(model, kind, d.img, d.txt, d.batch, U, tp, d.nbytes)
        layout = efficiency.memory_time(accel, copies, prof)
    return BlockTime(
        linear=lin,
        attention=attn,
        elementwise=efficiency.memory_time(accel, ew_tokens * per_token, prof),
        ulysses_all_to_all=_ulysses(model, d, cluster),
        sp_layout=layout,
        tp_all_reduce=_tp_all_reduce(model, kind, d, cluster),
        host_ops=host_ops(model, kind, d.compiled, U, d.ring, tp),
        **ring,
    )


def _ulysses(model: DiTSpec, d: DeviceShard, cluster: Cluster) -> float:
    """Q, K, V in and the output back, each the local buffer of the image tokens."""
    if d.ulysses <= 1:
        return 0.0
    qb = d.img * model.inner_dim / d.tp * d.nbytes
    kb = d.img * model.kv_dim / d.tp * d.nbytes
    span = cluster.span(d.ulysses, stride=d.tp)
    return sum(cluster.collective_time("all_to_all", b, d.ulysses, span) for b in (qb, kb, kb, qb))


def _ring(
    model: DiTSpec, d: DeviceShard, cluster: Cluster, attn: float, q_rows: float, heads: float
) -> dict[str, float]:
    """ring - 1 hops of this rank's K and V block, each overlapped with the attention of the
    block already there; partial outputs (+ log-sum-exp) merge in fp32 per hop, reading both
    and writing one.  With ``d.ring_gather`` two exposed all-gathers (K, V) instead."""
    R = d.ring
    if R <= 1:
        return {}
    kv_loc = model.query_groups * model.head_dim / (d.tp * d.ulysses)  # K or V width per rank
    kv_block = d.batch * 2 * (d.ulysses * d.per_dev) * kv_loc * d.nbytes
    span = cluster.span(R, stride=d.tp * d.ulysses)
    if d.ring_gather:  # K, then V, gathered whole on every rank, before the attention
        gather = 2 * cluster.collective_time("all_gather", R * kv_block / 2, R, span)
        return {"ring_kv_exchange": gather, "ring_uncovered": gather, "ring_total": gather}
    hop = cluster.collective_time("ring", kv_block, R, span)
    chunk = attn / R
    overlapped = (R - 1) * min(hop, chunk)
    uncovered = (R - 1) * max(0.0, hop - chunk)
    merge_bytes = d.batch * (R - 1) * RING_MERGE_PASSES * 4 * q_rows * heads * (model.head_dim + 1)
    return {
        "ring_kv_exchange": uncovered + OVERLAP_INTERFERENCE * overlapped,
        "ring_merge": efficiency.memory_time(
            cluster.accel, merge_bytes, efficiency.profile(cluster.accel)
        ),
        "ring_hidden": (1 - OVERLAP_INTERFERENCE) * overlapped,
        "ring_uncovered": uncovered,
        "ring_total": (R - 1) * hop,
    }


def _tp_all_reduce(model: DiTSpec, kind: str, d: DeviceShard, cluster: Cluster) -> float:
    if d.tp <= 1:
        return 0.0
    span = cluster.span(d.tp, stride=1)
    return sum(
        cluster.collective_time("all_reduce", m * model.hidden_size * d.nbytes, d.tp, span)
        for m in tp_allreduces(kind, d.img, d.txt)
    )


@dataclass(frozen=True)
class StepTime:
    """One denoising step on one device: the blocks' :data:`TERMS` summed over the model
    (``terms``), the sequence and CFG gathers of the prediction, the scheduler step, the
    time the device waits for the host, and the ring transfer summed over the blocks."""

    terms: dict[str, float]
    sp_gather: float
    cfg_gather: float
    scheduler: float
    host_wait: float
    ring_hidden: float
    ring_uncovered: float
    ring_total: float

    @property
    def total(self) -> float:
        """Seconds of the step (the device's work, then what it waits for the host)."""
        return self.device + self.host_wait

    @property
    def device(self) -> float:
        """Seconds the device works: the blocks, the gathers and the scheduler."""
        return sum(self.terms.values()) + self.sp_gather + self.cfg_gather + self.scheduler


def step_time(
    model: DiTSpec,
    d: DeviceShard,
    cluster: Cluster,
    *,
    latent_elements: int,
    guidance: bool,
    cfg: int,
) -> StepTime:
    """Every block of ``model`` (:func:`block_time`, times its count), the all-gather of the
    prediction's sequence shards and CFG branches (``latent_elements`` per sample), the
    scheduler step, and the host: it issues every kernel, so when it is slower than the
    device the step waits for it."""
    total = dict.fromkeys(TERMS, 0.0)
    ring = dict.fromkeys(("ring_hidden", "ring_uncovered", "ring_total"), 0.0)
    ops = 0.0
    for group in model.blocks:
        b, n = block_time(model, group.kind, d, cluster), group.count
        for name in TERMS:
            total[name] += n * getattr(b, name)
        for name in ring:
            ring[name] += n * getattr(b, name)
        ops += n * b.host_ops
    latent_bytes = latent_elements * d.nbytes
    sp_gather = cfg_gather = 0.0
    if d.sp > 1:
        span = cluster.span(d.sp, stride=d.tp)
        sp_gather = cluster.collective_time("all_gather", d.batch * latent_bytes, d.sp, span)
    if cfg > 1:
        span = cluster.span(cfg, stride=d.tp * d.sp)
        cfg_gather = cluster.collective_time("all_gather", 2 * latent_bytes, cfg, span)
    sched = scheduler_time(model, cluster, latent_elements, guidance)
    device = sum(total.values()) + sp_gather + cfg_gather + sched
    host_wait = max(0.0, ops * efficiency.host_op_time(cluster.accel) - device)
    return StepTime(total, sp_gather, cfg_gather, sched, host_wait, **ring)
