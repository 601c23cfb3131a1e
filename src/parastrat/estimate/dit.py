"""Latency and memory of diffusion-transformer inference under Ulysses, ring, CFG and TP.

:func:`estimate_dit` prices one generation (all denoising steps, then the VAE decode) of a
:class:`~parastrat.spec.dit.DiTSpec` on a :class:`~parastrat.Cluster` under a
:class:`~parastrat.Strategy` (``ulysses``, ``ring``, ``cfg``, ``tp``; ``dp`` replicas serve
other requests and do not change the latency).  The model, stated once (docs/dit-model.md):

* **Sequence split** (xDiT / yunchang USP): image/video tokens are split over the
  ``sp = ulysses * ring`` ranks, padded up to a multiple of ``sp`` when they do not divide;
  text tokens are replicated on every sequence-parallel rank (yunchang's joint-tensor strategy),
  each rank using its head slice of them.  Ulysses turns the sequence split into a head split
  with four all-to-alls per attention (Q, K, V, output); ring keeps the sequence split and
  passes K/V blocks ``ring - 1`` hops around the ring, each hop overlapped with the attention
  of the block already there, plus a memory-bound merge of partial outputs per hop.
* **TP** (Megatron-style, no sequence parallelism): matrices split by columns then rows, one
  all-reduce of the block's activations per row-split matrix; weights are divided by TP.
* **CFG**: guidance runs a conditional and an unconditional branch.  Without CFG parallelism
  both run on every device as a batch of two; with ``cfg=2`` each half of the devices runs one
  branch and the noise predictions are all-gathered once per step.
* Compute: GEMMs through :func:`parastrat.estimate.efficiency.gemm_time` (shape-aware); the
  attention core at a forward-only flash-attention efficiency (:data:`ATTN_FWD_EFF`);
  element-wise kernels (norms, modulation, gates, RoPE, activations) as HBM traffic.
  Communication only through :meth:`Cluster.collective_time`.
* Outside the loop: text encoding and the VAE decode (on one device unless ``vae_parallel``).
* Memory per device, phase by phase (text encoding, denoising, VAE decode), with how the run
  keeps its weights (FSDP shards, offloading, stored dtype) in a
  :class:`~parastrat.estimate.dit_memory.DiTMemoryOptions` (:mod:`.dit_memory`).

Every constant is physical and documented; none is fitted to the comparisons in
docs/accuracy-dit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError, StrategyError, Violation
from ..spec.cluster import Cluster
from ..spec.dit import DiTSpec, ceil_div
from ..spec.dit import get as get_dit
from ..spec.hardware import Accelerator, GiB
from ..strategy import XDIT_ORDER, Strategy, require_strategy
from . import efficiency
from .dit_memory import (
    DTYPE_BYTES,
    DiTMemoryOptions,
    MemoryPhase,
    memory_hint,
    memory_phases,
    require_options,
    residency,
)
from .dit_serial import (
    POSTPROCESS_S_PER_ELEMENT,
    SerialParts,
    postprocess_time,
    scheduler_time,
    text_encode_times,
    vae_decode,
)

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

#: Live activation tensors per token while one block runs (inference keeps nothing for a
#: backward pass): hidden-width residual, normed, modulated, attention output, text stream and
#: one spare -> 6 x hidden; Q, K, V and the Ulysses all-to-all buffers -> 2 x (q + 2 kv) / tp;
#: MLP hidden before and after the activation -> 2 x ffn / tp.
ACT_LIVE_H = 6

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
#:   :func:`_usp_copy_bytes`;
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

#: Device memory outside the model: CUDA/CANN context, cuBLAS/flash workspaces, NCCL/HCCL
#: buffers and allocator fragmentation (typically 1-3 GiB on 80 GB parts).
RUNTIME_RESERVE_BYTES = 2 * GiB

#: Bytes per element of the precisions a DiT run computes in (fp32 is a stored dtype only).
BYTES = {k: v for k, v in DTYPE_BYTES.items() if k != "fp32"}


# ---------------------------------------------------------------------------------------------
# Report pieces.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenSplit:
    """How the workload's tokens land on one device.

    ``video`` image/video tokens in total, ``text`` text tokens (replicated on every
    sequence-parallel rank when they join the attention), ``sp`` the sequence split,
    ``per_device`` image/video tokens each rank holds (``ceil(video / sp)``), ``padding`` the
    tokens added so ``sp`` divides them, ``sequence`` the self-attention length
    (video + joint text) before padding.
    """

    video: int
    text: int
    sequence: int
    sp: int
    per_device: int
    padding: int
    text_in_sequence: bool

    @property
    def padded(self) -> int:
        """Image/video tokens after padding (``per_device * sp``): what the sequence-parallel ranks
        process together."""
        return self.video + self.padding

    def to_dict(self) -> dict[str, Any]:
        """The split as a JSON-ready dict (with ``padded``): the ``tokens`` entry of
        :meth:`DiTReport.to_dict`."""
        return {
            "video": self.video,
            "text": self.text,
            "sequence": self.sequence,
            "sp": self.sp,
            "per_device": self.per_device,
            "padding": self.padding,
            "padded": self.padded,
            "text_in_sequence": self.text_in_sequence,
        }


@dataclass(frozen=True)
class DiTMemory:
    """Bytes per device.  ``weights`` (transformer: whole, divided by TP, or FSDP shards plus
    the gathered blocks and root), ``encoders`` (text encoders on the device), ``activations``
    (one block's live tensors: divided by the sequence split, doubled by a batched CFG pair),
    ``other`` (runtime reserve) are the denoising loop's; ``phases`` holds every phase of the
    generation (text encoding, denoising, VAE decode: :mod:`~parastrat.estimate.dit_memory`),
    and :attr:`total` is the largest of them (:attr:`peak_phase`)."""

    weights: float
    encoders: float
    activations: float
    other: float
    capacity: float
    phases: tuple[MemoryPhase, ...] = ()

    @property
    def peak(self) -> MemoryPhase:
        """The phase that needs the most bytes (the loop's parts when no phases are given)."""
        if self.phases:
            return max(self.phases, key=lambda p: p.total)
        loop = {"transformer": self.weights, "text_encoders": self.encoders}
        loop.update(activations=self.activations, runtime=self.other)
        return MemoryPhase("denoise", loop)

    @property
    def peak_phase(self) -> str:
        """Name of the phase that needs the most bytes ("text_encode", "denoise", "vae_decode")."""
        return self.peak.name

    @property
    def total(self) -> float:
        """Bytes per device at the peak phase (what :meth:`fits` compares with the capacity)."""
        return self.peak.total

    @property
    def peak_bytes(self) -> float:
        """The same as :attr:`total`, under the name
        :class:`~parastrat.estimate.memory.MemoryReport` uses, so code reads either report's peak
        alike."""
        return self.total

    def fits(self, capacity: float | None = None) -> bool:
        """Whether the peak phase fits ``capacity`` bytes (default: the device's memory)."""
        return self.total <= (self.capacity if capacity is None else capacity)

    def to_dict(self) -> dict[str, Any]:
        """The breakdown as a JSON-ready dict, with ``total``, ``peak_phase``, ``phases`` and
        ``fits`` (against the device's capacity) added."""
        return {
            "weights": self.weights,
            "encoders": self.encoders,
            "activations": self.activations,
            "other": self.other,
            "total": self.total,
            "peak_phase": self.peak_phase,
            "phases": {p.name: p.to_dict() for p in self.phases},
            "capacity": self.capacity,
            "fits": self.fits(),
        }


@dataclass(frozen=True)
class DiTReport:
    """What one generation costs under one strategy.

    ``latency_s`` is the whole request (steps x ``per_step_s`` + text encoding + VAE decode);
    ``breakdown`` gives seconds over the whole request per component and sums to
    ``latency_s``; ``hidden`` gives communication that compute hides (not in the latency).
    """

    model: str
    strategy: Strategy
    accelerator: str
    devices: int
    height: int
    width: int
    frames: int
    steps: int
    guidance: bool
    latency_s: float
    per_step_s: float
    memory: DiTMemory
    breakdown: dict[str, float]
    hidden: dict[str, float]
    tokens: TokenSplit
    warnings: list[str] = field(default_factory=list)
    #: The serial parts in detail (:class:`~parastrat.estimate.dit_serial.SerialParts`).
    serial: dict[str, Any] = field(default_factory=dict)
    compiled: bool = False

    @property
    def requests_per_s(self) -> float:
        """Throughput with ``dp`` replicas each serving its own request."""
        return (self.strategy.dp or 1) / self.latency_s

    def to_dict(self) -> dict[str, Any]:
        """The whole report as one JSON-ready dict: the ``report`` entry of each candidate in
        ``parastrat plan-dit --format json``."""
        return {
            "model": self.model,
            "strategy": self.strategy.to_dict(),
            "strategy_str": str(self.strategy),
            "accelerator": self.accelerator,
            "devices": self.devices,
            "height": self.height,
            "width": self.width,
            "frames": self.frames,
            "steps": self.steps,
            "guidance": self.guidance,
            "latency_s": self.latency_s,
            "per_step_s": self.per_step_s,
            "requests_per_s": self.requests_per_s,
            "memory": self.memory.to_dict(),
            "breakdown": dict(self.breakdown),
            "hidden": dict(self.hidden),
            "tokens": self.tokens.to_dict(),
            "warnings": list(self.warnings),
            "serial": dict(self.serial),
            "compiled": self.compiled,
        }


# ---------------------------------------------------------------------------------------------
# Inputs.
# ---------------------------------------------------------------------------------------------
def as_inference(strategy: Strategy) -> Strategy:
    """The strategy on the xDiT grid (``tp-sp-pp-cfg-dp``): ring-only or TP-only strategies
    built without an order get Megatron's order by default; the degrees are the same."""
    require_strategy(strategy, "estimate_dit()")
    if strategy.is_inference:
        return strategy
    # Re-reading the degrees on the xDiT grid lets the Strategy's own rules refuse what
    # inference cannot express (ep > 1: rule inference-ep; vpp > 1: inference-vpp).
    return Strategy(
        tp=strategy.tp,
        pp=strategy.pp,
        vpp=strategy.vpp,
        ep=strategy.ep,
        ulysses=strategy.ulysses,
        ring=strategy.ring,
        cfg=strategy.cfg,
        dp=strategy.dp,
        order=XDIT_ORDER,
    )


def check_workload(model: DiTSpec, *, height: int, width: int, frames: int, steps: int) -> None:
    """SpecError for a workload the model cannot take (sizes, frames, steps)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SpecError(
            f"steps={steps!r} must be a whole number >= 1 (denoising steps, e.g. "
            "50 for HunyuanVideo, 28 for FLUX.1-dev)"
        )
    model.latent_shape(height, width, frames)


def resolve_guidance(model: DiTSpec, guidance: bool | None) -> bool:
    """Whether the run uses classifier-free guidance (two branches per step).

    ``None`` follows the model: guidance-distilled models (the guidance scale is an input
    embedding: FLUX.1-dev/schnell, HunyuanVideo) run one branch, the others two.  ``True`` /
    ``False`` override; anything else is a :class:`SpecError`.
    """
    if guidance is None:
        return not model.guidance_distilled
    if not isinstance(guidance, bool):
        raise SpecError(
            f"guidance={guidance!r} must be True, False or None (None follows the model: "
            f"{model.name} {'is' if model.guidance_distilled else 'is not'} guidance-distilled)"
        )
    return guidance


def _precision(precision: str) -> int:
    try:
        return BYTES[precision.lower()]
    except (KeyError, AttributeError):
        raise SpecError(f"unknown precision {precision!r}; known: {', '.join(BYTES)}") from None


#: FlashAttention-2's forward rate at head dim 64 relative to head dim 128 (Dao 2023, Fig. 5,
#: A100, non-causal, 16K tokens: ~196 against ~224 TFLOP/s): half the work per loaded K/V tile.
HEAD_DIM_64_FACTOR = 0.87


def attention_efficiency(accel: Accelerator, head_dim: int = 128) -> float:
    """Forward flash-attention efficiency used for ``accel`` (see :data:`ATTN_FWD_EFF`), at
    ``head_dim`` (64 and below run at :data:`HEAD_DIM_64_FACTOR` of the head-dim-128 rate)."""
    base = ATTN_FWD_EFF.get(accel.name, efficiency.profile(accel).attn_eff)
    return base * (HEAD_DIM_64_FACTOR if head_dim <= 64 else 1.0)


# ---------------------------------------------------------------------------------------------
# The model.
# ---------------------------------------------------------------------------------------------
def _block_gemms(
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


def _host_ops(model: DiTSpec, kind: str, compiled: bool, U: int, R: int, tp: int) -> float:
    """Host-issued operations of one block (eager: every op; compiled: GEMMs, attention and
    one kernel per fused pointwise chain), plus the sequence-parallel extras."""
    if compiled:
        ops = float(len(_block_gemms(model, kind, 1.0, 1.0, tp)) + 1 + FUSED_CHAINS[kind])
    else:
        ops = float(HOST_OPS[kind])
    ops += (ULYSSES_OPS if U > 1 else 0) + RING_HOP_OPS * (R - 1)
    if tp > 1:
        ops += len(_tp_allreduces(kind, 1.0, 1.0))
    return ops


#: Switch for the counted eager traffic (:mod:`~parastrat.spec.block_traffic`); off, every
#: model is priced with the generic :data:`ELEMENTWISE_PASSES_H` (the ablation of
#: ``benchmarks/dit_accuracy.py`` turns it off).
USE_EAGER_TRAFFIC = True


def _elementwise_bytes_per_token(
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


def _usp_copy_bytes(
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


def _tp_allreduces(kind: str, img: float, txt: float) -> list[float]:
    """Tokens in each TP all-reduce of one block (one per row-split matrix output)."""
    if kind == "double":
        return [img + txt, img + txt]  # attention output, MLP output (both streams)
    if kind == "single":
        return [img + txt]  # the fused output projection
    if kind == "cross":
        return [img, img, img]  # self-attention, cross-attention, MLP
    return [img + txt, img + txt]  # joint


def _memory(
    model: DiTSpec,
    opts: DiTMemoryOptions,
    s: Strategy,
    accel: Accelerator,
    *,
    nbytes: int,
    per_dev: int,
    batch: int,
    kv_loc: float,
    text_on_device: bool,
    prompts: int,
    latent: tuple[int, int, int],
    vae_devices: int,
    tiled: bool,
    decode: bool,
) -> DiTMemory:
    """Bytes per device, phase by phase (:mod:`~parastrat.estimate.dit_memory`).  ``batch``:
    guidance branches whose activations are live at once; ``latent``: (latent frames, pixel
    height, pixel width) of the output."""
    tp, U, R = s.tp, s.ulysses, s.ring
    kept = residency(
        model,
        opts,
        nbytes=nbytes,
        tp=tp,
        shard_world=U * R * s.cfg,
        text_on_device=text_on_device,
        prompts=prompts,
    )
    f, q, kv = model.ffn_hidden_size, model.inner_dim, model.kv_dim
    img, txt = batch * per_dev, batch * model.text_tokens
    activations = (
        (img + txt) * nbytes * (ACT_LIVE_H * model.hidden_size + 2 * (q + 2 * kv) / tp + 2 * f / tp)
    )
    if R > 1:
        activations += 2 * 2 * (U * img) * kv_loc * nbytes  # double-buffered K/V blocks
    frames, height, width = latent
    vae = model.vae
    lat = (frames, height // vae.spatial_factor, width // vae.spatial_factor) if vae else latent
    phases = memory_phases(
        model,
        opts,
        kept,
        activations=activations,
        runtime=RUNTIME_RESERVE_BYTES,
        latent=lat,
        vae_devices=vae_devices,
        tiled=tiled,
        decode=decode,
    )
    loop = phases[1].parts
    return DiTMemory(
        weights=loop["transformer"] + loop["transformer_gathered"],
        encoders=loop["text_encoders"],
        activations=activations,
        other=RUNTIME_RESERVE_BYTES,
        capacity=accel.memory_bytes,
        phases=phases,
    )


def estimate_dit(
    model: DiTSpec | str,
    strategy: Strategy,
    cluster: Cluster,
    *,
    height: int,
    width: int,
    frames: int = 1,
    steps: int,
    guidance: bool | None = None,
    precision: str = "bf16",
    vae_parallel: bool = False,
    text_encoder_on_device: bool = True,
    attention_eff: float | None = None,
    compiled: bool = False,
    vae_tiling: bool | None = None,
    output_type: str = "pil",
    vae_cold: bool = False,
    memory: DiTMemoryOptions | None = None,
) -> DiTReport:
    """Latency, memory and its breakdown for one generation of ``model`` under ``strategy``.

    ``strategy`` holds ``ulysses``, ``ring``, ``cfg`` (2 needs guidance), ``tp`` and
    optionally ``dp`` (replicas for throughput).  ``guidance=None`` (the default) follows the
    model: classifier-free guidance (two branches per step) unless the model is
    guidance-distilled (FLUX.1, HunyuanVideo: one branch); ``True``/``False`` override.
    ``compiled=True`` prices the transformer under torch.compile (fused element-wise chains,
    fewer host launches); ``vae_tiling`` forces tiled VAE decoding on/off (None: the VAE's
    default).  ``output_type`` is the pipeline's: "pil" (diffusers' default) and "np" add the
    host's conversion of the decoded pixels, "pt" keeps the tensor, "latent" also skips the VAE
    decode.  ``vae_cold=True``: the request's VAE decode is the serving process's first (no
    warm-up decoded before it), which adds a measured one-time cost.  The serial parts (text
    encoders, scheduler, VAE decode, output post-processing) are in ``.serial``.
    ``memory`` (:class:`~parastrat.estimate.dit_memory.DiTMemoryOptions`, default: whole
    weights on every device) says how the run keeps its weights: FSDP shards, offloading, the
    stored dtype, batched or sequential guidance branches; ``.memory`` reports every phase
    (text encoding, denoising, VAE decode) and the peak one.
    Raises :class:`SpecError` for a workload the
    VAE/patch cannot split or ``steps < 1``, :class:`StrategyError` for a strategy the model or
    cluster cannot take (heads vs Ulysses/TP, more devices than the cluster has, more
    sequence ranks than tokens); padding is reported in ``.warnings``.
    """
    model = get_dit(model)
    if not isinstance(cluster, Cluster):
        raise SpecError(f"cluster must be a parastrat.Cluster, got {type(cluster).__name__}")
    check_workload(model, height=height, width=width, frames=frames, steps=steps)
    if output_type not in POSTPROCESS_S_PER_ELEMENT:
        raise SpecError(
            f"output_type={output_type!r} is not one a diffusers pipeline takes; known: "
            f"{', '.join(POSTPROCESS_S_PER_ELEMENT)}"
        )
    mem_opts = require_options(memory)
    if mem_opts.encoder_fsdp and not text_encoder_on_device:
        raise SpecError(
            "memory=DiTMemoryOptions(encoder_fsdp=True) shards text encoders that "
            "text_encoder_on_device=False keeps on the host; use one or the other"
        )
    explicit_guidance = guidance is not None
    guidance = resolve_guidance(model, guidance)
    nbytes = _precision(precision)
    s = as_inference(strategy)
    accel = cluster.accel
    warnings: list[str] = []

    # ---- strategy rules (one source of truth: Strategy.check) -----------------------------
    replica = s.model_parallel_size
    devices = replica * (s.dp or 1)
    problems = [v for v in s.check(model, world_size=devices) if v.severity == "error"]
    if s.pp > 1:
        problems.append(
            Violation(
                "dit-pipefusion",
                f"pp={s.pp}: PipeFusion is not modelled (and must be 1 on NPU)",
                "use pp=1; split with ulysses/ring",
            )
        )
    if s.cfg > 1 and not guidance:
        why = (
            "guidance=False"
            if explicit_guidance
            else f"{model.name} is guidance-distilled and guidance=None follows the model"
        )
        problems.append(
            Violation(
                "cfg-without-guidance",
                f"cfg={s.cfg} but the run has one branch per step ({why}): CFG parallelism has "
                "nothing to split",
                "use cfg=1, or guidance=True to price true classifier-free guidance "
                "(two branches per step)",
            )
        )
    if devices > cluster.num_devices:
        problems.append(
            Violation(
                "devices",
                f"the strategy needs {devices} devices "
                f"({s}), the cluster has {cluster.num_devices}",
                f"use a cluster of >= {devices} devices or smaller degrees",
            )
        )
    shape = model.latent_shape(height, width, frames)
    video = shape.tokens
    sp = s.ulysses * s.ring
    if sp > video:
        problems.append(
            Violation(
                "sp-exceeds-tokens",
                f"ulysses*ring = {sp} sequence ranks for only {video} "
                f"image/video tokens of {model.name} at {width}x{height}",
                f"use ulysses*ring <= {video}, or give the devices to dp",
            )
        )
    if problems:
        raise StrategyError(problems)
    for v in s.warnings(model, devices_per_node=cluster.scale_up_domain):
        warnings.append(f"{v.rule}: {v.message} ({v.hint})")

    # ---- tokens ---------------------------------------------------------------------------
    text = model.text_tokens
    joint_txt = text if model.text_in_sequence else 0
    per_dev = ceil_div(video, sp)
    padding = per_dev * sp - video
    tokens = TokenSplit(
        video=video,
        text=text,
        sequence=video + joint_txt,
        sp=sp,
        per_device=per_dev,
        padding=padding,
        text_in_sequence=model.text_in_sequence,
    )
    if padding:
        warnings.append(
            f"padding: {video} image/video tokens do not divide by ulysses*ring = "
            f"{sp}; each rank holds {per_dev} tokens after padding {padding} "
            f"({100 * padding / video:.2f} % extra work; padded tokens need an "
            "attention mask, which some ring kernels lack)"
        )
    if shape.padded_latent_frames:
        warnings.append(
            f"padding: {shape.latent_frames} latent frames are padded to "
            f"{shape.latent_frames + shape.padded_latent_frames} for "
            f"{model.name}'s temporal patch of {model.patch_size_t}"
        )
    if guidance and model.guidance_distilled:
        warnings.append(
            f"guidance: {model.name} is guidance-distilled (its default pipeline "
            "runs one branch per step); guidance=True prices true CFG with two "
            "branches -- leave guidance=None to follow the model"
        )

    # ---- per-step compute, per device ------------------------------------------------------
    branches = 2 if guidance else 1
    batch = branches // s.cfg  # branches each device runs per step (1 or 2)
    tp, U, R = s.tp, s.ulysses, s.ring
    prof = efficiency.profile(accel)
    a_eff = (
        attention_eff if attention_eff is not None else attention_efficiency(accel, model.head_dim)
    )
    if not 0 < a_eff <= 1:
        raise SpecError(f"attention_eff={a_eff!r} must be in (0, 1]")
    peak = accel.peak("bf16")
    d = model.head_dim
    heads_loc = model.num_attention_heads / (tp * U)
    kv_loc = model.query_groups * d / (tp * U)  # K (or V) width per device after a2a
    img = batch * per_dev  # image/video tokens per device
    txt = batch * text
    padded = per_dev * sp

    t = dict.fromkeys(
        (
            "linear",
            "attention",
            "elementwise",
            "ulysses_all_to_all",
            "ring_kv_exchange",
            "ring_merge",
            "sp_layout",
            "tp_all_reduce",
        ),
        0.0,
    )
    ring_hidden = ring_uncovered = ring_total = 0.0
    host_ops = 0.0
    span_u = cluster.span(U, stride=tp)
    span_r = cluster.span(R, stride=tp * U)
    span_tp = cluster.span(tp, stride=1)
    for group in model.blocks:
        kind, n = group.kind, group.count
        jt = 0 if kind == "cross" else text  # text rows joining the attention
        lin = sum(
            efficiency.gemm_time(accel, m, nn, k, precision, prof=prof)
            for m, nn, k in _block_gemms(model, kind, img, txt, tp)
        )
        # attention core, non-causal, per branch: 4 * q_rows * kv_rows * head_dim per head.
        # After the all-to-all a rank holds its Ulysses group's U shards (+ the text) for
        # heads / (tp * U) heads; the ring brings every other shard's keys and values.
        q_rows = U * per_dev + jt
        kv_rows = padded + jt
        attn_flops = batch * 4.0 * d * heads_loc * q_rows * kv_rows
        if kind == "cross":  # cross-attention to the text: local queries, all heads / tp
            attn_flops += batch * 4.0 * d * (model.num_attention_heads / tp) * per_dev * text
        attn = attn_flops / (peak * a_eff)
        # element-wise traffic over the tokens this rank holds: eager, the bytes counted on the
        # family's real block where known; compiled (or uncounted), the generic passes
        ew_tokens = img + (txt if kind != "cross" else 0)
        ew_bytes = ew_tokens * _elementwise_bytes_per_token(model, kind, compiled, nbytes, tp)
        ew = efficiency.memory_time(accel, ew_bytes, prof)
        # Ulysses: Q, K, V in and the output back, each the local buffer of the image tokens
        uly = 0.0
        if U > 1:
            qb = img * model.inner_dim / tp * nbytes
            kb = img * model.kv_dim / tp * nbytes
            uly = sum(cluster.collective_time("all_to_all", b, U, span_u) for b in (qb, kb, kb, qb))
        # ring: ring-1 hops of this rank's K and V block, each overlapped with the attention
        # of the block already there; partial outputs (+ log-sum-exp) merge in fp32 per hop,
        # reading both and writing one.
        exposed = merge = 0.0
        if R > 1:
            kv_block = batch * 2 * (U * per_dev) * kv_loc * nbytes
            hop = cluster.collective_time("ring", kv_block, R, span_r)
            chunk = attn / R
            overlapped = (R - 1) * min(hop, chunk)
            uncovered = (R - 1) * max(0.0, hop - chunk)
            ring_uncovered += n * uncovered
            ring_total += n * (R - 1) * hop
            exposed = uncovered + OVERLAP_INTERFERENCE * overlapped
            ring_hidden += n * (1 - OVERLAP_INTERFERENCE) * overlapped
            merge_bytes = batch * (R - 1) * RING_MERGE_PASSES * 4 * q_rows * heads_loc * (d + 1)
            merge = efficiency.memory_time(accel, merge_bytes, prof)
        layout = 0.0
        if sp > 1 and USE_USP_COPIES:
            layout = efficiency.memory_time(
                accel, _usp_copy_bytes(model, kind, img, txt, batch, U, tp, nbytes), prof
            )
        ar = 0.0
        if tp > 1:
            ar = sum(
                cluster.collective_time("all_reduce", m * model.hidden_size * nbytes, tp, span_tp)
                for m in _tp_allreduces(kind, img, txt)
            )
        t["linear"] += n * lin
        t["attention"] += n * attn
        t["elementwise"] += n * ew
        t["ulysses_all_to_all"] += n * uly
        t["ring_kv_exchange"] += n * exposed
        t["ring_merge"] += n * merge
        t["sp_layout"] += n * layout
        t["tp_all_reduce"] += n * ar
        host_ops += n * _host_ops(model, kind, compiled, U, R, tp)

    # per step: gather the sequence shards (and the CFG branches) of the prediction
    latent_bytes = model.latent_elements(height, width, frames) * nbytes
    sp_gather = (
        cluster.collective_time("all_gather", batch * latent_bytes, sp, cluster.span(sp, stride=tp))
        if sp > 1
        else 0.0
    )
    cfg_gather = (
        cluster.collective_time(
            "all_gather", 2 * latent_bytes, s.cfg, cluster.span(s.cfg, stride=tp * sp)
        )
        if s.cfg > 1
        else 0.0
    )
    # ---- serial parts: scheduler per step; text encoders and the VAE once ------------------
    sched = scheduler_time(model, cluster, model.latent_elements(height, width, frames), guidance)
    gpu_step = sum(t.values()) + sp_gather + cfg_gather + sched
    # the host issues every kernel; when it is slower than the device, the step waits for it
    host_step = host_ops * efficiency.host_op_time(accel)
    host_wait = max(0.0, host_step - gpu_step)
    per_step = gpu_step + host_wait
    encoders_s = text_encode_times(model, cluster, prompts=branches)
    text_s = sum(encoders_s.values())
    vae_devices = (tp * sp * s.cfg) if vae_parallel else 1
    vae_s, vae_detail = vae_decode(
        model,
        cluster,
        height=height,
        width=width,
        frames=frames,
        devices=vae_devices,
        tiled=vae_tiling,
        nbytes=nbytes,
        cold=vae_cold,
    )
    if output_type == "latent":  # the pipeline returns the latents: no decode at all
        vae_s, vae_detail = 0.0, {"vae": None, "skipped": "output_type='latent'"}
    post_s = postprocess_time(
        model, height=height, width=width, frames=frames, output_type=output_type
    )
    serial = SerialParts(
        text_encode_s=text_s,
        text_encoders=encoders_s,
        scheduler_s=steps * sched,
        vae_decode_s=vae_s,
        vae=vae_detail,
        postprocess_s=post_s,
        output_type=output_type,
    )

    breakdown = {k: steps * v for k, v in t.items()}
    breakdown["sp_gather"] = steps * sp_gather
    breakdown["cfg_gather"] = steps * cfg_gather
    breakdown["host_wait"] = steps * host_wait
    breakdown["scheduler"] = steps * sched
    breakdown["text_encode"] = text_s
    breakdown["vae_decode"] = vae_s
    breakdown["postprocess"] = post_s
    latency = steps * per_step + text_s + vae_s + post_s
    hidden = {"ring_kv_exchange": steps * ring_hidden}
    if R > 1 and ring_uncovered > 0.05 * ring_total:
        warnings.append(
            f"ring: {steps * ring_uncovered:.3g} s of K/V exchange is not "
            f"hidden by attention ({video} tokens are too few per hop for "
            f"ring={R}); prefer Ulysses or CFG for this sequence"
        )
    if not vae_parallel and replica > 1 and vae_s > 0.1 * latency:
        warnings.append(
            f"vae: the VAE decode ({vae_s:.3g} s) runs on one device and is "
            f"{100 * vae_s / latency:.0f} % of the latency; a parallel VAE "
            "(MindIE-SD --vae_parallel, xDiT DistVAE) would shorten it"
        )

    # ---- memory per device, phase by phase ---------------------------------------------------
    memory_rep = _memory(
        model,
        mem_opts,
        s,
        accel,
        nbytes=nbytes,
        per_dev=per_dev,
        batch=batch if mem_opts.cfg_batched else 1,
        kv_loc=kv_loc,
        text_on_device=text_encoder_on_device,
        prompts=branches,
        latent=(shape.latent_frames, height, width),
        vae_devices=vae_devices,
        tiled=bool(vae_detail.get("tiled", False)),
        decode=output_type != "latent",
    )
    if not memory_rep.fits():
        worst = memory_rep.peak
        warnings.append(
            f"memory: {memory_rep.total / GiB:.1f} GiB per device exceeds the "
            f"{accel.memory_bytes / GiB:.0f} GiB of {accel.name} at the {worst.describe()}; "
            + memory_hint(worst.name)
        )

    return DiTReport(
        model=model.name,
        strategy=s,
        accelerator=accel.name,
        devices=devices,
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        guidance=guidance,
        latency_s=latency,
        per_step_s=per_step,
        memory=memory_rep,
        breakdown=breakdown,
        hidden=hidden,
        tokens=tokens,
        warnings=warnings,
        serial=serial.to_dict(),
        compiled=compiled,
    )
