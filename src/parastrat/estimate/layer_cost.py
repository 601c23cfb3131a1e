"""Compute time of one layer for one micro-batch on one rank, term by term.

The step model (:mod:`parastrat.estimate.step`) asks this module what one transformer layer
costs in a given shape (:class:`LayerShape`: tokens, TP / CP / EP / ETP, sequence
parallelism) run a given way (:class:`KernelSetup`: device, precision, flash attention, the
kernel :class:`~parastrat.spec.workload.Mechanisms`), and gets one record,
:class:`LayerCost`: GEMM, attention and memory-bound seconds forward and backward, the MLP
block's share, what selective recompute re-runs, and the local parameters
(:mod:`parastrat.estimate.layers`' one accounting).  The output layer and its cross-entropy
are :func:`head_cost`.

* GEMMs: every matrix of :mod:`parastrat.estimate.flops` at the rate its TP / EP-split shape
  reaches (:func:`parastrat.estimate.efficiency.gemm_time`); routed experts as grouped GEMMs
  on the slowest expert-parallel rank (:mod:`parastrat.estimate.moe_kernels`).
* Attention: fused (flash) attention at its own rate, or Megatron's unfused path with the
  scores through HBM; backward :data:`ATTN_BWD_RATIO` times the forward.
* Memory-bound kernels: norms, residuals, RoPE, activations, the MoE routing kernels and the
  quantisation of GEMM inputs at the achievable HBM bandwidth.

A hybrid model's Mamba, attention-only, MLP-only and MoE-only layers are priced by
:mod:`parastrat.estimate.hybrid_cost` from the same pieces.  Every constant is physical and
documented in ``docs/step-model.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..spec.hardware import QUANTISED, Accelerator
from ..spec.model import ModelSpec
from ..spec.workload import ALL_MECHANISMS, Mechanisms
from . import fp8 as fp8_overheads  # kernels: FP8 recipe overheads
from . import kernel_model, moe_kernels  # kernels: shape, expert load
from .efficiency import KernelProfile, attention_time, gemm_time, memory_time
from .efficiency import profile as kernel_profile
from .flops import (
    Matrix,
    attention_matrices,
    logits_matrix,
    mean_attention_core_flops_per_token,
    mlp_matrices,
)
from .layers import layer_record

#: Rate of a grouped expert GEMM (TE GroupedLinear / CUTLASS grouped kernels) relative to one
#: dense GEMM of the same per-group shape: per-group tile scheduling and prologues, and token
#: counts per expert that differ from group to group (the dense-equivalent efficiency already
#: counts partial tiles and waves).  NVIDIA's grouped-GEMM figures put it 10-20 % below dense.
GROUPED_GEMM_EFF = 0.85
#: FlashAttention backward FLOPs relative to its forward (5 GEMM-like products vs 2).
ATTN_BWD_RATIO = 2.5
#: Element-wise HBM traffic per element touched: read + write of BF16.
ELEM_BYTES = 2
#: Extra HBM bytes per GEMM activation operand element under FP8 (inputs forward, output
#: gradients backward): per-tensor current scaling reads the BF16 tensor twice (amax, cast)
#: and writes the FP8 copy and its transpose (2 + 2 + 1 + 1); MXFP8 finds its block scales in
#: the cast pass (2 + 1 + 1); NVFP4 one block-scaled pass at FP4 sizes (2 + 2 x 9/16).
FP8_CAST_BYTES = {"fp8": 6, "mxfp8": 4, "nvfp4": 3.125}
#: HBM bytes per attention-score element in an unfused forward: write the scores, the fused
#: scale-mask-softmax reads and writes them, dropout reads them and writes its output and
#: a 1-byte mask, A V reads them (2 + 4 + 5 + 2); the backward moves about twice as much.
SCORE_BYTES_FWD = 13
#: HBM bytes per logit element for the fused vocabulary-parallel cross-entropy, forward +
#: backward (``cross_entropy_loss_fusion``).
CE_BYTES_PER_LOGIT = 12
#: The same for Megatron Core's unfused ``_VocabParallelCrossEntropy``
#: (``tensor_parallel/cross_entropy.py``), op by op over FP32 logits: forward ``.float()``
#: (read 2, write 4), max (4), in-place subtract (8), in-place exp (8), sum (4), in-place
#: divide to the softmax it saves (8) = 38; backward the in-place multiply by the loss
#: gradient (8) and the cast back to BF16 for the output layer (6) = 14.
CE_UNFUSED_BYTES_PER_LOGIT = 52


# ---------------------------------------------------------------------------------------------
# Per-layer costs (cached: the planner asks for the same shapes many times)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerShape:
    """One layer's work on one rank for one micro-batch: ``tokens`` = b s / cp of a
    ``seq_len``-token sequence, split by TP (with sequence parallelism or not), CP, EP and
    ETP."""

    tokens: float
    seq_len: int
    tp: int = 1
    cp: int = 1
    sp: bool = False
    ep: int = 1
    etp: int = 1


@dataclass(frozen=True)
class KernelSetup:
    """How a layer's kernels run: on ``accel``, the linear layers at ``precision`` with its
    quantisation recipe ``fp8_recipe`` (None: the precision's default), flash attention or
    not, with the kernel mechanisms ``mech``."""

    accel: Accelerator
    precision: str
    flash_attention: bool = True
    mech: Mechanisms = field(default_factory=Mechanisms)
    fp8_recipe: str | None = None


@dataclass(frozen=True)
class LayerCost:
    """Seconds of one layer for one micro-batch on one rank."""

    gemm_fwd: float
    gemm_bwd: float
    attn_fwd: float
    attn_bwd: float
    elem_fwd: float
    elem_bwd: float
    dense_params: float  # local parameters (after TP / dup)
    expert_params: float  # local routed-expert parameters (after EP / ETP)
    #: GEMM seconds of the MLP block (router, routed and shared experts), forward / backward
    mlp_fwd: float = 0.0
    mlp_bwd: float = 0.0
    #: GEMM seconds of the shared experts alone, forward + backward
    shared: float = 0.0
    #: forward seconds the "selective" recompute mode re-runs in backward
    #: (:attr:`~parastrat.spec.workload.Mechanisms.recompute_modules`, :func:`_selective_fwd`)
    selective: float = 0.0
    #: a hybrid's Mamba layer: seconds (forward + backward) of its SSD scan and causal
    #: convolution, part of ``attn_fwd`` / ``attn_bwd`` (the layer's core)
    scan: float = 0.0

    @property
    def fwd(self) -> float:
        """Forward seconds: GEMMs, attention and memory-bound kernels."""
        return self.gemm_fwd + self.attn_fwd + self.elem_fwd

    @property
    def bwd(self) -> float:
        """Backward seconds: GEMMs, attention and memory-bound kernels."""
        return self.gemm_bwd + self.attn_bwd + self.elem_bwd

    @property
    def gemm(self) -> float:
        """GEMM seconds, forward and backward."""
        return self.gemm_fwd + self.gemm_bwd

    @property
    def attn(self) -> float:
        """Attention seconds, forward and backward."""
        return self.attn_fwd + self.attn_bwd


def _matrix_times(
    accel: Accelerator,
    prof: KernelProfile,
    mat: Matrix,
    tokens: float,
    tp: int,
    sp: bool,
    ep: int,
    etp: int,
    num_experts: int,
    precision: str,
    mech: Mechanisms = ALL_MECHANISMS,
    expert_m: float | None = None,
) -> tuple[float, float, float]:
    """(forward s, backward s, fp8-cast elements per micro-batch) of one matrix.

    ``expert_m``: tokens per local expert GEMM on the slowest EP rank (kernels: the
    imbalance mechanism, :func:`parastrat.estimate.moe_kernels.expert_load`)."""
    k_in: float = mat.in_dim
    n_out: float = mat.out_dim
    groups = 1
    if mat.block == "expert":
        local = max(num_experts // ep, 1)
        groups = local
        m = tokens / tp * mat.per_token * etp / local
        if expert_m is not None:  # kernels: slowest rank's tokens per expert
            m = expert_m
        if mat.split == "col":
            n_out = n_out / etp
        else:
            k_in = k_in / etp
    elif mat.split == "dup":
        m = tokens / tp if sp else tokens
    else:
        m = tokens
        if mat.split == "col":
            n_out = n_out / tp
        else:
            k_in = k_in / tp
    prec = "bf16" if mat.block in ("router", "logits") else precision
    # kernels: TE GroupedLinear runs one GEMM per local expert over its streams
    streams = kernel_model.GROUPED_STREAMS if (mech.shape and groups > 1) else 0
    # kernels: routed counts are random around their mean (the routed experts' GEMMs only;
    # attention, router and shared-expert GEMMs see every token of the micro-batch)
    rnd = expert_m is not None and mat.block == "expert"
    sh, f4 = mech.shape, mech.nvfp4
    fwd = gemm_time(accel, m, n_out, k_in, prec, groups, prof, streams, rnd, sh, f4)
    bwd = (
        gemm_time(accel, m, k_in, n_out, prec, groups, prof, streams, rnd, sh, f4)  # dgrad
        + gemm_time(accel, k_in, n_out, m, prec, groups, prof, streams, shape=sh, fp4_tile=f4)
    )  # wgrad
    if mech.fp8 and prec in ("fp8", "mxfp8"):  # kernels: Hopper's split accumulation
        bwd *= fp8_overheads.backward_gemm_slowdown(kernel_model.ARCH.get(accel.name, ""))
    cast = groups * m * (k_in + n_out) if prec in QUANTISED else 0.0
    return fwd, bwd, cast


def gemm_sums(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    mats: Iterable[Matrix],
    tokens: float,
    shape: tuple[int, bool, int, int],
    prec: str,
    mech: Mechanisms,
    expert_m: float | None,
    memo: dict[tuple, tuple[float, ...]],
) -> tuple[float, float, float, float, float, float, dict[str, float]]:
    """(forward s, backward s, FP8-cast elements, MLP-block forward s, MLP-block backward s,
    shared-expert s, forward s by matrix name) of ``mats`` for one micro-batch on a rank of
    ``shape`` = (TP, SP, EP, ETP); ``memo`` keeps the matrices outside the routed experts."""
    tp, sp, ep, etp = shape
    g_fwd = g_bwd = cast = 0.0
    mlp_f = mlp_b = shared = 0.0
    fwd_of: dict[str, float] = {}
    for mat in mats:
        key = (mat, tokens, tp, sp, expert_m is not None)  # what a non-expert matrix reads
        times = memo.get(key) if mat.block != "expert" else None
        if times is None:
            times = _matrix_times(
                accel, prof, mat, tokens, tp, sp, ep, etp, model.num_experts, prec, mech, expert_m
            )
            if mat.block != "expert":
                memo[key] = times
        f, b, c = times
        fwd_of[mat.name] = f
        if mat.block == "expert" and not mech.shape:
            f, b = f / GROUPED_GEMM_EFF, b / GROUPED_GEMM_EFF
        g_fwd += f
        g_bwd += b
        cast += c
        if mat.block in ("router", "expert", "shared", "mlp"):
            mlp_f += f
            mlp_b += b
        if mat.block == "shared":
            shared += f + b
    return g_fwd, g_bwd, cast, mlp_f, mlp_b, shared, fwd_of


def gemm_precision(kernels: KernelSetup) -> tuple[bool, str]:
    """(whether the device runs the quantised precision, the precision its GEMMs run at):
    a precision the device lacks falls back to BF16."""
    fp8 = kernels.precision in QUANTISED and kernels.accel.supports(kernels.precision)
    return fp8, kernels.precision if fp8 else "bf16"


def routed_load(model: ModelSpec, shape: LayerShape, mech: Mechanisms, moe: bool) -> tuple:
    """(the slowest EP rank's routed tokens, :func:`~.moe_kernels.expert_load`; their count
    per expert for the expert GEMMs, under the ``imbalance`` mechanism) of an MoE layer;
    (None, None) for a layer without routed experts."""
    if not moe:
        return None, None
    load = moe_kernels.expert_load(
        model,
        shape.tokens,
        shape.tp,
        shape.ep,
        shape.etp,
        mech.balance,
        mech.capacity_factor,
        mech.imbalance,
    )
    return load, (load.per_expert if mech.imbalance else None)


def elementwise_times(
    kernels: KernelSetup,
    prof: KernelProfile,
    e_bytes: float,
    cast: tuple[float, str],
    extra_fwd: Iterable[float],
    extra_bwd: Iterable[float],
) -> tuple[float, float]:
    """(forward s, backward s) of a layer's memory-bound kernels: ``e_bytes`` of element-wise
    traffic forward (twice backward), the GEMM inputs' quantisation (``cast`` = (its
    element count, the GEMMs' precision)) and the ``extra`` bytes of each direction."""
    accel = kernels.accel
    cast_b = _cast_bytes(cast[0], cast[1], accel, kernels.mech, kernels.fp8_recipe)
    fwd, bwd = e_bytes + cast_b, 2 * e_bytes + cast_b
    for x in extra_fwd:
        fwd += x
    for x in extra_bwd:
        bwd += x
    return memory_time(accel, fwd, prof), memory_time(accel, bwd, prof)


def _gpt_elementwise(
    model: ModelSpec,
    kernels: KernelSetup,
    prof: KernelProfile,
    moe: bool,
    shape: LayerShape,
    h_local: float,
    load: Any,
    fp8: bool,
    cast: tuple[float, str],
) -> tuple[float, float]:
    """(forward s, backward s) of a GPT layer's memory-bound kernels (:func:`elementwise_times`):
    norms, residuals, RoPE (and QK norms) over ``h_local`` elements a token, the MLP's
    activation or, with routed experts (``load``), the MoE kernels of the slowest rank (``fp8``:
    whether the GEMMs run quantised), and the eager activations."""
    tokens, tp, mech = shape.tokens, shape.tp, kernels.mech
    a, g = model.num_attention_heads, model.query_groups
    elems = 10 * h_local + 2 * (a + g) * model.head_dim / tp  # norms, residuals, RoPE
    if getattr(model, "qk_layernorm", False):
        elems += 2 * (a + g) * model.head_dim / tp
    act = 3 if model.gated_linear_unit else 2
    moe_f = moe_b = 0.0
    if moe and load is not None:  # kernels: MoE memory-bound kernels on the slowest rank
        moe_f, moe_b = moe_kernels.layer_bytes(model, tokens, tp, shape.ep, load, mech, fp8)
    else:
        elems += act * model.ffn_hidden_size / tp
    eager_f, eager_b = _eager_act_bytes(model, moe, tokens, tp, mech)
    return elementwise_times(
        kernels, prof, tokens * elems * ELEM_BYTES, cast, (moe_f, eager_f), (moe_b, eager_b)
    )


def gpt_layer_cost(
    model: ModelSpec,
    kernels: KernelSetup,
    moe: bool,
    shape: LayerShape,
    matrices: dict[tuple, tuple[float, ...]] | None = None,
) -> LayerCost:
    """Compute time of one GPT layer (dense or MoE: ``moe``) of ``shape`` run as ``kernels``
    say (uncached: the step model memoises it per workload and switches).  ``matrices``: a
    memo of the times of matrices outside the routed experts, which read no expert degree,
    and of the attention core (only for this model and ``kernels``)."""
    accel, mech, flash_attention = kernels.accel, kernels.mech, kernels.flash_attention
    tokens, seq_len = shape.tokens, shape.seq_len
    tp, cp, sp, ep, etp = shape.tp, shape.cp, shape.sp, shape.ep, shape.etp
    prof = kernel_profile(accel)
    fp8, prec = gemm_precision(kernels)
    load, expert_m = routed_load(model, shape, mech, moe)
    mats = attention_matrices(model) + mlp_matrices(model, moe)
    memo = {} if matrices is None else matrices
    g_fwd, g_bwd, cast, mlp_f, mlp_b, shared, fwd_of = gemm_sums(
        model, accel, prof, mats, tokens, (tp, sp, ep, etp), prec, mech, expert_m, memo
    )
    core = ("attention", tokens, seq_len, tp, cp, flash_attention)  # what the core reads
    attn = memo.get(core)
    if attn is None:
        attn = memo[core] = _attention_times(
            model, accel, prof, tokens, seq_len, tp, cp, flash_attention, mech.shape
        )
    a_fwd, a_bwd = attn
    h_local = model.hidden_size / tp if sp else model.hidden_size  # SP: norms on the shard
    e_fwd, e_bwd = _gpt_elementwise(
        model, kernels, prof, moe, shape, h_local, load, fp8, (cast, prec)
    )
    rec = layer_record(model, moe, tp, ep, etp)  # the one parameter accounting
    sel = _selective_fwd(model, accel, prof, moe, tokens, (tp, etp), h_local, load, mech, fwd_of)
    sel += a_fwd if "core_attn" in mech.recompute_modules else 0.0
    if moe:
        block = moe_kernels.layer_bytes(model, tokens, tp, ep, load, mech, fp8)[0] if load else 0.0
        sel += _moe_block_fwd(
            mech.recompute_modules, mlp_f, memory_time(accel, block, prof), fwd_of
        )
    return LayerCost(
        g_fwd,
        g_bwd,
        a_fwd,
        a_bwd,
        e_fwd,
        e_bwd,
        rec.dense_params,
        rec.expert_params,
        mlp_f,
        mlp_b,
        shared,
        sel,
    )


#: Passes over FC1's output (one read or write of each element) of an eagerly run activation
#: beyond the fused bias-activation kernel's (forward 2, backward 4 in the element count
#: above), for :data:`~parastrat.spec.model.EAGER_ACTIVATIONS`: squared ReLU forward is
#: ``relu`` + ``pow`` (4 passes); backward ``pow_backward`` (``x.pow(1)`` copy, ``* 2``,
#: ``* grad``) and ``threshold_backward`` (10 passes).
EAGER_ACT_EXTRA_PASSES = (2.0, 6.0)


def _eager_act_bytes(
    model: ModelSpec, moe: bool, tokens: float, tp: int, mech: Mechanisms
) -> tuple[float, float]:
    """(forward, backward) extra HBM bytes of a dense layer's eagerly run activation
    (mechanism ``eager_act``; MoE experts use Megatron's own grouped activation)."""
    if moe or not (mech.eager_act and model.eager_activation):
        return 0.0, 0.0
    per_pass = tokens * model.ffn_hidden_size / tp * ELEM_BYTES
    fwd, bwd = EAGER_ACT_EXTRA_PASSES
    return fwd * per_pass, bwd * per_pass


def _moe_block_fwd(
    mods: tuple[str, ...], gemm_fwd: float, kernels_fwd: float, fwd_of: dict[str, float]
) -> float:
    """Forward seconds of an MoE layer's block that ``moe`` / ``shared_experts`` recompute:
    the whole block (router, routed and shared expert GEMMs ``gemm_fwd``, and its memory-bound
    kernels ``kernels_fwd``: permutation, activation, probabilities, casts), or the shared
    experts' two GEMMs alone.  Its dispatch and combine run again too (the step model's
    ``estimate.step._recompute_terms``)."""
    if "moe" in mods:
        return gemm_fwd + kernels_fwd
    if "shared_experts" in mods:
        return fwd_of.get("shared_fc1", 0.0) + fwd_of.get("shared_fc2", 0.0)
    return 0.0


#: HBM bytes per element of one norm forward that the ``layernorm`` recompute module re-runs
#: (read the BF16 input, write the BF16 output).
NORM_BYTES = 2 * ELEM_BYTES


def _selective_fwd(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    moe: bool,
    tokens: float,
    tp_etp: tuple[int, int],
    h_norm: float,
    load: moe_kernels.ExpertLoad | None,
    mech: Mechanisms,
    fwd_of: dict[str, float],
) -> float:
    """Forward seconds of one layer and micro-batch that Megatron's selective recompute runs
    again in backward, module by module (``recompute_modules``, Megatron Core 0.16.1
    ``TransformerLayer.__init__`` / ``TEGroupedMLP`` / ``MLASelfAttention``):

    * ``core_attn``: the attention core (Megatron's default; added by the caller);
    * ``layernorm``: norms that are separate modules; Transformer Engine's layer spec fuses the
      input norm into the QKV projection and a dense layer's pre-MLP norm into FC1 (both
      ``IdentityOp``, not recomputed), so only an MoE layer's pre-MLP norm runs again;
    * ``mla_up_proj``: MLA's query and key/value up-projections (and RoPE, not counted);
    * ``mlp``: a dense layer's MLP (Megatron skips MoE layers: ``if not self.is_moe_layer``);
    * ``moe_act``: the routed experts' activation (TEGroupedMLP's output-discarding
      checkpoint), memory-bound, on the slowest EP rank's copies, with a clamped activation's
      eager clamp and concatenation (``act_clamp``);
    * ``moe`` / ``shared_experts``: the whole MoE block, or its shared experts
      (:func:`_moe_block_fwd`, added by the caller; ``moe`` covers ``moe_act``).
    """
    mods, (tp, etp) = mech.recompute_modules, tp_etp
    t = 0.0
    if "layernorm" in mods and moe:
        t += memory_time(accel, tokens * h_norm * NORM_BYTES, prof)
    if "mla_up_proj" in mods and model.multi_latent_attention:
        t += fwd_of.get("q_up", 0.0) + fwd_of.get("kv_up", 0.0)
    act = 3 if model.gated_linear_unit else 2
    if "mlp" in mods and not moe:
        t += fwd_of.get("fc1", 0.0) + fwd_of.get("fc2", 0.0)
        t += memory_time(accel, tokens * act * model.ffn_hidden_size / tp * ELEM_BYTES, prof)
    if "moe_act" in mods and "moe" not in mods and moe and load is not None:
        f = model.moe_ffn_hidden_size or model.ffn_hidden_size
        copies = load.slowest if mech.imbalance else load.mean
        clamp = moe_kernels.clamp_bytes(model)[0] if mech.act_clamp else 0.0  # kernels
        t += memory_time(accel, copies * (act * f * ELEM_BYTES + clamp) / etp, prof)
    return t


def _cast_bytes(
    cast: float, prec: str, accel: Accelerator, mech: Mechanisms, fp8_recipe: str | None = None
) -> float:
    """HBM bytes of one direction (half forward: inputs, half backward: output gradients) of
    the FP8 casts of ``cast`` GEMM operand elements (``fp8_recipe``: the workload's)."""
    if prec not in QUANTISED:
        return 0.0
    if mech.fp8:  # kernels: bytes per element of the recipe on this architecture
        per_elem = fp8_overheads.cast_bytes_per_element(
            fp8_overheads.recipe_for(prec, mech.nvfp4, fp8_recipe),
            kernel_model.ARCH.get(accel.name, ""),
        )
        return cast * per_elem / 2
    return cast * FP8_CAST_BYTES.get(prec, 0) / 2


def _attention_times(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    tokens: float,
    seq_len: int,
    tp: int,
    cp: int,
    flash_attention: bool,
    shape: bool = True,
) -> tuple[float, float]:
    """(forward s, backward s) of the attention core of one layer and micro-batch
    (``shape``: the kernel-shape mechanism, whole key blocks and the head dimension)."""
    # attention core: heads split by TP, keys halved by the causal mask
    core = mean_attention_core_flops_per_token(model, seq_len) * tokens / tp
    if flash_attention:
        d_attn: float = 128
        if shape:  # kernels: whole key blocks, head dimension vs the SFU
            core *= kernel_model.attention_block_ratio(model, seq_len)
            d_attn = kernel_model.attention_head_dim(model)
        return (
            attention_time(accel, core, prof, d_attn, shape=shape),
            attention_time(accel, ATTN_BWD_RATIO * core, prof, d_attn, True, shape),
        )
    # unfused: Q K^T and A V as batched GEMMs over every key (no causal skipping) and the
    # score matrix through HBM (scale-mask-softmax, dropout)
    heads = max(model.num_attention_heads // tp, 1)
    d = model.head_dim
    b_s = tokens / max(seq_len / cp, 1)  # sequences in the micro-batch
    q, keys = seq_len / cp, seq_len
    one = gemm_time(accel, q, keys, d, "bf16", int(heads * b_s), prof, shape=shape)
    a_fwd = 2 * one + memory_time(accel, heads * b_s * q * keys * SCORE_BYTES_FWD, prof)
    a_bwd = 4 * one + memory_time(accel, heads * b_s * q * keys * 2 * SCORE_BYTES_FWD, prof)
    return a_fwd, a_bwd


def head_cost(
    model: ModelSpec,
    accel: Accelerator,
    tokens: float,
    tp: int,
    shape: bool = True,
    fused_ce: bool = True,
) -> float:
    """Seconds (forward + backward) of the output layer and cross-entropy, one micro-batch
    (``shape``: the kernel-shape mechanism; ``fused_ce``: :data:`CE_BYTES_PER_LOGIT`, else
    :data:`CE_UNFUSED_BYTES_PER_LOGIT`)."""
    prof = kernel_profile(accel)
    mat = logits_matrix(model)
    n = mat.out_dim / tp
    t = (
        gemm_time(accel, tokens, n, mat.in_dim, "bf16", 1, prof, shape=shape)
        + gemm_time(accel, tokens, mat.in_dim, n, "bf16", 1, prof, shape=shape)
        + gemm_time(accel, mat.in_dim, n, tokens, "bf16", 1, prof, shape=shape)
    )
    ce = CE_BYTES_PER_LOGIT if fused_ce else CE_UNFUSED_BYTES_PER_LOGIT
    return t + memory_time(accel, tokens * n * ce, prof)
