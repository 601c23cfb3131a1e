"""Per-rank memory of Megatron-style training, per pipeline stage, before anything is launched.

:func:`estimate_memory` answers "will this fit?" for a model, a strategy and a batch shape.  It
follows Megatron's accounting where the assumptions match and departs, with reasons, where
Megatron's theoretical estimator is silent (``docs/memory-model.md`` has every formula):

Weights, gradients, optimizer (bytes per parameter held by the rank)
    bf16 weight 2, fp32 main gradient 4, fp32 master + Adam m, v 12.  With the distributed
    optimizer the 12 are sharded over ``dp * cp`` for dense parameters and over the expert
    data-parallel group ``world / (etp * ep * pp)`` for routed experts: ``6 + 12 / shard``.
    FP8/MXFP8 keep all of that and add cached low-precision copies of the linear weights
    (row-wise + column-wise, 1 byte each; MXFP8 adds its 1/32 scales).

Activations (bytes per token of one micro-batch, Korthikanti et al. 2022 generalised)
    Per layer: norm inputs, linear-layer inputs, Q/K/V (GQA: K and V have ``g`` heads, not
    ``a``), the attention output, the MLP's intermediate tensors (SwiGLU: ``2f`` in, ``f``
    out), 1-byte dropout masks when dropout is on, the attention score matrix only without
    flash attention.  Tensors split by TP are divided by ``t``; the rest are divided by ``t``
    only under sequence parallelism.  CP divides the sequence by ``c``.  MoE layers store the
    router scores, the shared experts' tensors, and for routed experts ``top-k`` copies of each
    local token (times ``etp`` when the expert-TP group gathers tokens) with expert widths split
    by ``etp``.  MLA stores its compressed latents and the decompressed per-head Q/K/V.  With
    FP8, TE keeps linear-layer inputs as 1-byte copies.

Pipeline
    Under 1F1B stage ``s`` of ``p`` holds ``min(p - s, m)`` micro-batches in flight; with
    ``v`` virtual stages it holds ``min(v m, v p + p - 1 - 2 s)`` model chunks (Megatron's
    interleaved warm-up + 1), i.e. the first stage holds ``L (1 + (p-1)/(p v))`` layers'
    worth.  The input embedding sits on the first stage and the output layer, final norm,
    logits (fp32, ``4 V / t`` bytes per token) and MTP modules on the last (tied embeddings
    keep a copy on both ends when ``p > 1``).  Layers per stage are the strategy's own split
    (``Strategy.stage_layers``, shared with the step model through
    ``estimate.step.pipeline_split``).  Recompute: "none" and "selective" keep every
    tensor above except the attention scores (removed by selective recompute or flash
    attention); "full" keeps only each layer's input plus one layer's working set.

Other (``StageMemory.other``)
    What no formula sees: CUDA/NPU context, NCCL/HCCL communicator buffers, cuBLAS/TE
    workspaces and allocator fragmentation.  Default :data:`OTHER_FIXED_BYTES` (2.5 GiB) per
    rank plus :data:`FRAGMENTATION` (5 %) of the activations; both are keyword arguments.

The hot path is plain float arithmetic with per-model constants cached on the spec; one call
costs tens of microseconds (``benchmarks/memory_speed.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import SpecError, StrategyError, UsageError
from ..rules import batch_violations
from ..spec.hardware import Accelerator, GiB, canonical_precision
from ..spec.hardware import get as get_accelerator
from ..spec.hardware import names as accelerator_names
from ..spec.model import ModelSpec
from ..strategy import Strategy
from .flops import normalize_recompute

#: CUDA/NPU context + communicator buffers + workspaces, per rank (see the module docstring).
OTHER_FIXED_BYTES = int(2.5 * GiB)
#: Allocator fragmentation, as a fraction of the activation bytes.
FRAGMENTATION = 0.05

#: Bytes per parameter: bf16 weight, fp32 main gradient, fp32 master + Adam m and v.
WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
OPTIM_BYTES = 12.0
#: Extra bytes per *linear-layer* parameter under FP8: row-wise and column-wise 1-byte copies
#: (MXFP8 adds one 1-byte scale per 32 values to each).
FP8_EXTRA_BYTES = {"bf16": 0.0, "fp8": 2.0, "mxfp8": 2.0 + 2.0 / 32}


@dataclass(frozen=True)
class StageMemory:
    """What one rank of pipeline stage ``stage`` holds, in bytes.

    ``layers``/``moe_layers``: transformer layers on the stage (all its virtual chunks);
    ``in_flight``: micro-batches (or, with VPP, model chunks) whose activations are held at the
    peak; ``params``: parameters held by the rank (dense and routed-expert).
    """

    stage: int
    layers: int
    moe_layers: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    in_flight: int
    params: float
    expert_params: float
    has_embedding: bool
    has_output: bool

    @property
    def total(self) -> float:
        """Bytes one rank of this stage holds at its peak: weights + gradients + optimizer +
        activations + other."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    def to_dict(self) -> dict[str, Any]:
        """The stage as a JSON-ready dict (with ``total``): one entry of ``stages`` in
        :meth:`MemoryReport.to_dict`."""
        return {
            "stage": self.stage,
            "layers": self.layers,
            "moe_layers": self.moe_layers,
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "other": self.other,
            "total": self.total,
            "in_flight": self.in_flight,
            "params": self.params,
            "expert_params": self.expert_params,
            "has_embedding": self.has_embedding,
            "has_output": self.has_output,
        }


@dataclass(frozen=True)
class MemoryReport:
    """Per-stage memory of one rank; ``peak_bytes`` is the worst stage's total."""

    model: str
    strategy: str
    stages: list[StageMemory]
    seq_len: int
    micro_batch_size: int
    num_microbatches: int | None
    recompute: str
    precision: str
    distributed_optimizer: bool
    notes: list[str] = field(default_factory=list)
    #: Virtual pipeline stages per rank (``in_flight`` counts model chunks when > 1).
    vpp: int = 1

    @property
    def peak_bytes(self) -> float:
        """The worst stage's total bytes per rank: what has to fit in device memory."""
        return max(st.total for st in self.stages)

    @property
    def peak_stage(self) -> StageMemory:
        """The stage whose rank needs the most memory."""
        return max(self.stages, key=lambda st: st.total)

    def fits(
        self, accelerator_or_bytes: Accelerator | str | int | float, headroom: float = 0.0
    ) -> bool:
        """True when the peak stays below the device memory less ``headroom`` (a fraction).

        ``.other`` already holds the default allowance for context, buffers and
        fragmentation; ``headroom`` is an extra safety margin on top of it.
        """
        return self.peak_bytes <= _capacity(accelerator_or_bytes) * (1.0 - headroom)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (peak, peak stage, every stage): the JSON output of
        ``parastrat memory`` (plus the device and the verdict), and the ``memory`` entry of the
        ``explain`` and ``plan`` JSON."""
        return {
            "model": self.model,
            "strategy": self.strategy,
            "seq_len": self.seq_len,
            "micro_batch_size": self.micro_batch_size,
            "num_microbatches": self.num_microbatches,
            "recompute": self.recompute,
            "precision": self.precision,
            "distributed_optimizer": self.distributed_optimizer,
            "vpp": self.vpp,
            "peak_bytes": self.peak_bytes,
            "peak_stage": self.peak_stage.stage,
            "stages": [st.to_dict() for st in self.stages],
            "notes": list(self.notes),
        }

    def breakdown(self) -> str:
        """A readable per-stage table in GiB, with the notes underneath."""
        head = (
            f"{self.model} | {self.strategy} | seq {self.seq_len} x mbs "
            f"{self.micro_batch_size} | recompute {self.recompute} | {self.precision}"
        )
        rows = [
            head,
            f"{'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} "
            f"{'activ':>8} {'other':>7} {'total':>8}  (GiB)",
        ]
        for st in self.stages:
            rows.append(
                f"{st.stage:>5} {st.layers:>6} {st.weights / GiB:8.2f} "
                f"{st.gradients / GiB:8.2f} {st.optimizer / GiB:8.2f} "
                f"{st.activations / GiB:8.2f} {st.other / GiB:7.2f} "
                f"{st.total / GiB:8.2f}"
            )
        rows.append(f"peak {self.peak_bytes / GiB:.2f} GiB on stage {self.peak_stage.stage}")
        rows += [f"note: {n}" for n in self.notes]
        return "\n".join(rows)

    __str__ = breakdown

    def plot(self, path: str, device: Accelerator | str | int | float | None = None) -> str:
        """Save a stacked bar per pipeline stage (GiB), with the device memory as a line.

        Needs matplotlib (``pip install "parastrat[plot]"``); returns ``path``.
        """
        from .._deps import require

        mpl = require("matplotlib", "plot", "needed for --plot")
        mpl.use("Agg")
        plt = require("matplotlib.pyplot", "plot")
        parts = ("weights", "gradients", "optimizer", "activations", "other")
        xs = [st.stage for st in self.stages]
        fig, ax = plt.subplots(figsize=(max(6.5, 0.5 * len(xs) + 4.5), 4.5))
        bottom = [0.0] * len(xs)
        for part in parts:
            vals = [getattr(st, part) / GiB for st in self.stages]
            ax.bar(xs, vals, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, vals)]
        if device is not None:
            cap = _capacity(device) / GiB
            name = device if isinstance(device, str) else getattr(device, "name", "device")
            ax.axhline(cap, color="red", linestyle="--", label=f"{name} {cap:.0f} GiB")
        ax.set_xlabel("pipeline stage")
        ax.set_ylabel("GiB per rank")
        ax.set_xticks(xs)
        ax.set_title(
            f"{self.model}  {self.strategy}\nseq {self.seq_len}, mbs "
            f"{self.micro_batch_size}, recompute {self.recompute}, {self.precision}",
            fontsize=9,
        )
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        from ..viz import save_figure

        save_figure(fig, path, dpi=120)
        return path


def _capacity(x: Accelerator | str | int | float) -> float:
    """Device memory in bytes: a byte count as is, else the accelerator preset's."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, (Accelerator, str)):
        return float(get_accelerator(x).memory_bytes)
    raise SpecError(
        f"device memory must be an accelerator name, an Accelerator or a byte "
        f"count, got {x!r}; known accelerators: {', '.join(accelerator_names())}"
    )


# ---- per-model constants (computed once per spec, cached on it) -----------------------------
class _Consts:
    """Shape numbers the hot path needs, read once from a ModelSpec."""

    __slots__ = (
        "E",
        "L",
        "a",
        "adrop",
        "attn_rep",
        "attn_shard",
        "d",
        "dense_mlp",
        "divisible",
        "expert",
        "f",
        "fe",
        "final_norm",
        "fs",
        "g",
        "gated",
        "h",
        "hdrop",
        "k",
        "kvl",
        "learned_pos",
        "lin_dense",
        "lin_expert",
        "lin_moe_shared",
        "max_pos",
        "mla",
        "moe",
        "mtp",
        "mtp_params",
        "norms",
        "qk",
        "qknorm",
        "ql",
        "rope",
        "router",
        "shared",
        "splits",
        "tied",
        "vd",
        "vocab",
    )

    def __init__(self, m: ModelSpec):
        p = m.param_breakdown
        self.L, self.h, self.a = m.num_layers, m.hidden_size, m.num_attention_heads
        self.g, self.d = m.query_groups, m.head_dim
        self.f, self.gated = m.ffn_hidden_size, m.gated_linear_unit
        self.E, self.k, self.moe = m.num_experts, m.moe_router_topk, m.is_moe
        self.fe = m.moe_ffn_hidden_size or m.ffn_hidden_size
        self.fs = m.moe_shared_expert_intermediate_size
        self.mla = m.multi_latent_attention
        self.ql, self.kvl = m.q_lora_rank or 0, m.kv_lora_rank
        self.qk, self.rope, self.vd = m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim
        self.qknorm = m.qk_layernorm
        self.hdrop, self.adrop = m.hidden_dropout > 0, m.attention_dropout > 0
        self.vocab, self.divisible = m.vocab_size, m.make_vocab_size_divisible_by
        self.tied = m.tied_embeddings
        self.learned_pos = m.position_embedding_type == "learned"
        self.max_pos = m.max_position_embeddings
        self.mtp = m.mtp_num_layers
        self.attn_rep = p["attention_replicated"]
        self.attn_shard = p["attention"] - p["attention_replicated"]
        self.norms = p["layer_norms"]
        self.dense_mlp, self.expert = p["dense_mlp"], p["expert"]
        self.shared, self.router = p["shared_expert"], p["router"]
        self.final_norm, self.mtp_params = p["final_norm"], p["mtp"]
        # linear-layer parameters per layer (what FP8 makes extra copies of)
        self.lin_dense = p["attention"] + p["dense_mlp"]
        self.lin_moe_shared = p["attention"] + p["shared_expert"]
        self.lin_expert = p["expert"]
        self.splits: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...], str | None]] = {}


def _consts(model: ModelSpec) -> _Consts:
    c = model.__dict__.get("_memory_consts")
    if c is None:
        c = _Consts(model)
        model.__dict__["_memory_consts"] = c  # frozen dataclass: write the cache directly
    return c


def _stage_layers(
    C: _Consts, model: ModelSpec, s: Strategy
) -> tuple[tuple[int, ...], tuple[int, ...], str | None]:
    """(layers, MoE layers) per physical stage and the split note, cached per model+split.

    The split is the strategy's own (:func:`parastrat.estimate.step.pipeline_split`, which
    the step-time model shares); an impossible split raises StrategyError with the fix.
    """
    key = (
        s.pp,
        s.vpp,
        s.first_stage_layers,
        s.last_stage_layers,
        s.account_for_embedding,
        s.account_for_loss,
    )
    hit = C.splits.get(key)
    if hit is None:
        from .step import pipeline_split

        sp = pipeline_split(model, s)
        hit = C.splits[key] = (sp.stage_layers, sp.stage_moe, sp.note)
    return hit


def estimate_memory(
    model: ModelSpec,
    strategy: Strategy,
    *,
    seq_len: int,
    micro_batch_size: int = 1,
    global_batch_size: int | None = None,
    recompute: str = "selective",
    distributed_optimizer: bool = True,
    precision: str = "bf16",
    flash_attention: bool = True,
    fp8_param_gather: bool | None = None,
    other_bytes: float | None = None,
    fragmentation: float | None = None,
) -> MemoryReport:
    """Bytes each rank of each pipeline stage needs to train ``model`` with ``strategy``.

    ``strategy`` should carry its world size (``strategy.with_world_size(n)``); when ``dp`` is
    unset the smallest world that fits is assumed and a note says so.  ``global_batch_size``
    gives the number of micro-batches ``m = gbs / (mbs * dp)`` (fewer than ``pp`` means fewer
    in flight); without it the pipeline is assumed full.  ``recompute`` is "none",
    "selective" (Megatron's default core-attention recompute) or "full" (every layer, uniform,
    one layer per checkpoint).  ``precision`` "bf16", "fp8" or "mxfp8".
    ``fp8_param_gather`` (Megatron's ``--fp8-param-gather``) keeps the primary linear weights
    in FP8, so FP8 costs no extra weight bytes; with False the bf16 weights stay and FP8 adds
    two 1-byte copies per linear weight.  None (default) follows Megatron Bridge's FP8/MXFP8
    mixed-precision recipes, which set it True.
    ``flash_attention=False`` adds the ``5 a s / h`` score matrices Korthikanti counts (unless
    recompute is selective).  ``other_bytes``/``fragmentation`` override the allowance in
    ``.other`` (defaults :data:`OTHER_FIXED_BYTES`, :data:`FRAGMENTATION`).
    """
    if not isinstance(model, ModelSpec):
        raise SpecError(
            f"estimate_memory needs a ModelSpec, got {type(model).__name__} "
            "(use parastrat.models.get(name))"
        )
    if not isinstance(strategy, Strategy):
        raise UsageError(f"estimate_memory needs a Strategy, got {type(strategy).__name__}")
    for name, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be a whole number >= 1, got {value!r}")
    recompute = normalize_recompute(recompute)
    prec = canonical_precision(precision)
    notes: list[str] = []
    C = _consts(model)
    s = strategy
    if s.dp is None:
        s = s.with_world_size(s.min_world_size)
        notes.append(
            f"dp not set: assumed the smallest world, {s.world_size} ranks "
            f"(dp={s.dp}); pass strategy.with_world_size(n)"
        )
    t, p, v, cp, ep, etp = s.tp, s.pp, s.vpp, s.cp, s.ep, s.etp
    dp = cast(int, s.dp)  # set by the caller or by with_world_size() just above
    edp = s.expert_dp or 1
    sp = s.sp
    b = micro_batch_size

    m: int | None = None
    if global_batch_size is not None:
        if (
            isinstance(global_batch_size, bool)
            or not isinstance(global_batch_size, int)
            or global_batch_size < 1
        ):
            raise UsageError(
                f"global_batch_size must be a whole number >= 1, got {global_batch_size!r}"
            )
        errors = [v for v in batch_violations(s, dp, global_batch_size, b) if v.severity == "error"]
        if errors:
            raise StrategyError(errors)
        m = global_batch_size // (b * dp)
    else:
        notes.append("global batch not given: assumed enough micro-batches to fill the pipeline")

    # ---- activation bytes per token, per layer kind, on one rank ----------------------------
    h, a, g, d = C.h, C.a, C.g, C.d
    lin = 1.0 if prec != "bf16" else 2.0  # TE keeps FP8 copies of linear-layer inputs
    mask = h if C.hdrop else 0.0
    tp_div = float(t)
    rep_div = float(t) if sp else 1.0
    tokens = seq_len / cp * b  # tokens of one micro-batch on this rank before SP
    if C.mla:
        qk = C.qk + C.rope
        rep_attn = 2 * h + lin * h + mask + 2 * C.rope + 2 * C.kvl + lin * C.kvl
        if C.ql:
            rep_attn += 2 * C.ql + lin * C.ql
        tp_attn = 2 * a * qk * 2 + 2 * a * C.vd + lin * a * C.vd
    else:
        rep_attn = 2 * h + lin * h + mask
        tp_attn = 2 * (a * d + 2 * g * d) + lin * a * d
        if C.qknorm:
            tp_attn += 2 * (a * d + g * d)
    if flash_attention:
        tp_attn += 4 * a  # softmax log-sum-exp, fp32
    elif recompute != "selective":
        # scores (2 B), and with attention dropout its mask (1 B) and output (2 B)
        tp_attn += a * (seq_len / cp) * (5 if C.adrop else 2)
    attn = rep_attn / rep_div + tp_attn / tp_div

    mats_in = 4.0 if C.gated else 2.0  # bytes of the activation's input per FFN column
    dense_mlp = (2 * h + lin * h + mask) / rep_div + (mats_in + lin) * C.f / tp_div
    act_dense = (attn + dense_mlp) * tokens

    act_moe = 0.0
    if C.moe:
        moe_rep = 2 * h + lin * h + mask + 6.0 * C.E  # norm in, dispatch in, router scores
        moe_tok = moe_rep / rep_div + (mats_in + lin) * C.fs / tp_div
        local = tokens / rep_div  # tokens this rank routes
        dup = 1.0 if sp else float(t)  # copies of a token across the TP group
        gathered = local * C.k * max(1.0, etp / dup)
        # permuted tokens (fc1 input), fc1 output, fc2 input, the routing prob (fp32); the
        # probs are applied inside the fused activation (Megatron Core >= 0.13), so the expert
        # outputs need not be kept for the combine.
        experts = gathered * (lin * h + (mats_in + lin) * C.fe / etp + 4.0)
        act_moe = (attn * tokens) + moe_tok * tokens + experts
    # full recompute keeps only each layer's input (sequence-sharded under SP)
    layer_input = 2 * h / rep_div * tokens

    # ---- parameters per rank, per layer kind --------------------------------------------------
    attn_params = C.attn_shard / t + C.attn_rep + C.norms
    dense_layer_params = attn_params + C.dense_mlp / t
    moe_dense_params = attn_params + C.shared / t + C.router
    local_experts = C.E / ep if C.moe else 0.0
    moe_expert_params = local_experts * C.expert / etp
    vocab_pad = -(-C.vocab // (C.divisible * t)) * (C.divisible * t)
    emb_params = vocab_pad * h / t + (C.max_pos * h if C.learned_pos else 0.0)
    out_params = vocab_pad * h / t
    fp8x = FP8_EXTRA_BYTES[prec]
    if fp8_param_gather is None:
        fp8_param_gather = True  # Megatron Bridge's bf16_with_fp8_*/mxfp8 recipes
    if fp8_param_gather and prec != "bf16":
        fp8x -= 2.0  # the bf16 copy of each linear weight is gone
    lin_dense_layer = C.lin_dense / t
    lin_moe_layer = C.lin_moe_shared / t + moe_expert_params

    dense_shard = float(dp * cp) if distributed_optimizer else 1.0
    expert_shard = float(edp) if distributed_optimizer else 1.0
    other_fixed = OTHER_FIXED_BYTES if other_bytes is None else float(other_bytes)
    frag = FRAGMENTATION if fragmentation is None else float(fragmentation)

    stage_layers, stage_moe, split_note = _stage_layers(C, model, s)
    if split_note:
        notes.append(split_note)

    logits = 4.0 * vocab_pad / t * tokens  # fp32 softmax kept by the vocab-parallel loss
    final_act = (2 * h + lin * h) / rep_div * tokens + logits
    stages: list[StageMemory] = []
    for st in range(p):
        n_layers, n_moe = stage_layers[st], stage_moe[st]
        n_dense = n_layers - n_moe
        first, last = st == 0, st == p - 1
        dense_p = n_dense * dense_layer_params + n_moe * moe_dense_params
        expert_p = n_moe * moe_expert_params
        lin_p = n_dense * lin_dense_layer + n_moe * lin_moe_layer
        if first:
            dense_p += emb_params
        if last:
            dense_p += C.final_norm
            if not C.tied or p > 1:  # untied output layer, or a tied copy on the last stage
                dense_p += out_params
            if C.mtp:
                # MTP modules: projections/norms and one layer each (MoE layer when MoE)
                mtp_layer_dense = moe_dense_params if C.moe else dense_layer_params
                dense_p += C.mtp * (mtp_layer_dense + 2 * h * h / t + 3 * h)
                expert_p += C.mtp * (moe_expert_params if C.moe else 0.0)
                lin_p += C.mtp * ((lin_moe_layer if C.moe else lin_dense_layer) + 2 * h * h / t)
                if p > 1:
                    dense_p += emb_params  # MTP's embedding copy on the last stage
        weights = WEIGHT_BYTES * (dense_p + expert_p) + fp8x * lin_p
        grads = GRAD_BYTES * (dense_p + expert_p)
        optim = OPTIM_BYTES * (dense_p / dense_shard + expert_p / expert_shard)

        # in-flight work at this stage's peak
        if v > 1:
            in_flight = v * p + p - 1 - 2 * st
            if m is not None:
                in_flight = min(in_flight, m * v)
            per_unit = 1.0 / v  # one chunk = 1/v of the stage's layers
        else:
            in_flight = p - st if m is None else min(p - st, m)
            per_unit = 1.0
        if recompute == "full":
            one_layer = act_moe if n_moe else act_dense
            stored = in_flight * per_unit * n_layers * layer_input + (
                one_layer if n_layers else 0.0
            )
        else:
            stored = in_flight * per_unit * (n_dense * act_dense + n_moe * act_moe)
        if first:
            emb_mb = min(p, m) if m is not None else p
            stored += emb_mb * tokens * (8.0 + (h / rep_div if C.hdrop else 0.0))
        if last:
            stored += final_act
            if C.mtp:
                mtp_act = (act_moe if C.moe else act_dense) + 4 * h / rep_div * tokens
                stored += C.mtp * ((layer_input if recompute == "full" else mtp_act) + logits)
        other = other_fixed + frag * stored
        stages.append(
            StageMemory(
                stage=st,
                layers=n_layers,
                moe_layers=n_moe,
                weights=weights,
                gradients=grads,
                optimizer=optim,
                activations=stored,
                other=other,
                in_flight=in_flight,
                params=dense_p + expert_p,
                expert_params=expert_p,
                has_embedding=first,
                has_output=last,
            )
        )
    if not distributed_optimizer:
        notes.append(
            "without the distributed optimizer every rank keeps the full 12 B/param "
            "of optimizer state (18 B/param in all)"
        )
    return MemoryReport(
        model=model.name,
        strategy=str(s),
        stages=stages,
        seq_len=seq_len,
        micro_batch_size=b,
        num_microbatches=m,
        recompute=recompute,
        precision=prec,
        distributed_optimizer=distributed_optimizer,
        notes=notes,
        vpp=v,
    )
