"""Per-rank memory of Megatron-style training, per pipeline stage, before anything is launched.

:func:`estimate_memory` answers "will this fit?" for a model, a strategy and a batch shape.  It
follows Megatron's accounting where the assumptions match and departs, with reasons, where
Megatron's theoretical estimator is silent (``docs/memory-model.md`` has every formula):

Weights, gradients, optimizer (bytes per parameter held by the rank)
    bf16 weight 2, fp32 main gradient 4, fp32 master + Adam m, v 12.  With the distributed
    optimizer the 12 are sharded over ``dp * cp`` for dense parameters and over the expert
    data-parallel group ``world / (etp * ep * pp)`` for routed experts: ``6 + 12 / shard``.
    The parameters each rank holds are :mod:`parastrat.estimate.layers`' records (the one
    parameter accounting, which the step-time model reads too).
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
    ``estimate.layers.pipeline_split``).  Recompute: "none" and "selective" keep every
    tensor above except the attention scores (removed by selective recompute or flash
    attention); "full" keeps only each layer's input plus one layer's working set.
    "selective" drops what Megatron's ``recompute_modules`` re-run
    (``Mechanisms.recompute_modules``, default ``core_attn``: the scores): ``moe_act`` the
    routed experts' FC2 input (output-discarding checkpoint), ``layernorm`` an MoE layer's
    pre-MLP norm output, ``mla_up_proj`` MLA's up-projected Q/K/V, ``mlp`` a dense layer's
    MLP tensors but its input (MoE layers are skipped, as in Megatron Core).

Other (``StageMemory.other``)
    What no formula sees: CUDA/NPU context, NCCL/HCCL communicator buffers, cuBLAS/TE
    workspaces and allocator fragmentation.  Default :data:`OTHER_FIXED_BYTES` (2.5 GiB) per
    rank plus :data:`FRAGMENTATION` (5 %) of the activations; both are keyword arguments.

The hot path is plain float arithmetic on memoised per-shape records (parameters per stage,
activations per micro-batch); one call costs tens of microseconds
(``benchmarks/memory_speed.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from .._deps import require
from ..checks import require_nonnegative
from ..errors import SpecError, StrategyError
from ..rules import batch_violations, hybrid_workload_violations
from ..spec.hardware import Accelerator, GiB
from ..spec.hardware import get as get_accelerator
from ..spec.hardware import names as accelerator_names
from ..spec.model import ModelSpec
from ..spec.workload import Switches, Workload, language_model, resolve
from ..strategy import Strategy, as_training, require_strategy
from ..viz import save_figure
from .fp8 import SAVED_INPUT_BYTES
from .fsdp import ByteSizes, Sharding, fsdp_layer_memory, fsdp_working_set
from .layers import (
    FP8_EXTRA_BYTES,
    GRAD_BYTES,
    OPTIM_BYTES,
    WEIGHT_BYTES,
    Block,
    PipelineSplit,
    embedding_record,
    fp8_extra_bytes,
    kind_record,
    layer_record,
    output_record,
    pipeline_split,
    stage_params,
)
from .mamba import mixer_activation_bytes
from .memo import per_model
from .offload import saved_bytes as offload_saved_bytes

#: CUDA/NPU context + communicator buffers + workspaces, per rank (see the module docstring).
OTHER_FIXED_BYTES = int(2.5 * GiB)
#: Allocator fragmentation, as a fraction of the activation bytes.
FRAGMENTATION = 0.05
#: Public names; the bytes per parameter come from :mod:`parastrat.estimate.layers`, the one
#: parameter accounting.
__all__ = [
    "FP8_EXTRA_BYTES",
    "FRAGMENTATION",
    "GRAD_BYTES",
    "OPTIM_BYTES",
    "OTHER_FIXED_BYTES",
    "WEIGHT_BYTES",
    "MemoryReport",
    "StageMemory",
    "estimate_memory",
    "memory_of",
]


@dataclass(frozen=True)
class StageMemory:
    """What one rank of pipeline stage ``stage`` holds, in bytes.

    ``layers``/``moe_layers``: transformer layers on the stage (all its virtual chunks);
    ``in_flight``: micro-batches (or, with VPP, model chunks) whose activations are held at the
    peak; ``params``: parameters held by the rank (dense and routed-expert); ``working``: the
    unsharded FSDP units in flight (gathered weights, gradients awaiting their reduce-scatter;
    0 unless ``Strategy.fsdp`` shards gradients or parameters, :mod:`parastrat.estimate.fsdp`).
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
    working: float = 0.0

    @property
    def total(self) -> float:
        """Bytes one rank of this stage holds at its peak: weights + gradients + optimizer +
        FSDP working set + activations + other."""
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.working
            + self.activations
            + self.other
        )

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
            "working": self.working,
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
        return self.peak_bytes <= capacity_left(accelerator_or_bytes, headroom)

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
        fsdp = any(st.working for st in self.stages)  # the FSDP column only when it holds any
        rows = [
            head,
            f"{'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} "
            + (f"{'fsdp':>7} " if fsdp else "")
            + f"{'activ':>8} {'other':>7} {'total':>8}  (GiB)",
        ]
        for st in self.stages:
            rows.append(
                f"{st.stage:>5} {st.layers:>6} {st.weights / GiB:8.2f} "
                f"{st.gradients / GiB:8.2f} {st.optimizer / GiB:8.2f} "
                + (f"{st.working / GiB:7.2f} " if fsdp else "")
                + f"{st.activations / GiB:8.2f} {st.other / GiB:7.2f} "
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
        mpl = require("matplotlib", "plot", "needed for --plot")
        mpl.use("Agg")
        plt = require("matplotlib.pyplot", "plot")
        parts: tuple[str, ...] = (
            "weights",
            "gradients",
            "optimizer",
            "working",
            "activations",
            "other",
        )
        if not any(st.working for st in self.stages):
            parts = tuple(p for p in parts if p != "working")
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
        save_figure(fig, path, dpi=120)
        return path


def capacity_left(x: Accelerator | str | int | float, headroom: float = 0.0) -> float:
    """Bytes a peak may reach on device ``x`` (an accelerator, its name or a byte count) with
    ``headroom`` (a fraction) kept free: what :meth:`MemoryReport.fits` compares with."""
    return _capacity(x) * (1.0 - headroom)


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


# ---- activations per token of one micro-batch, per layer kind -------------------------------
@dataclass(frozen=True)
class Activations:
    """Activation bytes one rank keeps for one micro-batch (the per-token formulas of the
    module docstring times the micro-batch's tokens on the rank).

    ``dense`` / ``moe``: one transformer layer; ``layer_input``: one layer's input (what full
    recompute keeps); ``final``: the final norm, output layer input and FP32 logits;
    ``logits``: the FP32 logits alone; ``embedding``: per micro-batch on the first stage.
    """

    dense: float
    moe: float
    layer_input: float
    final: float
    logits: float
    embedding: float
    hidden: float
    #: a hybrid model: ``(kind, bytes)`` of one layer of each kind ("mamba", "attention",
    #: "mlp", "moe"); empty for a GPT
    kinds: tuple[tuple[str, float], ...] = ()


@per_model
def activations(
    model: ModelSpec,
    tp: int,
    sp: bool,
    cp: int,
    etp: int,
    micro_batch_size: int,
    seq_len: int,
    precision: str,
    recompute: str,
    flash_attention: bool,
    modules: tuple[str, ...] = ("core_attn",),
) -> Activations:
    """:class:`Activations` of one micro-batch on a rank of this shape (memoised: the planner
    asks for the same shapes many times); ``modules``: the selective recompute's modules."""
    h = model.hidden_size
    lin = SAVED_INPUT_BYTES[precision]  # TE keeps FP8 / NVFP4 copies of linear-layer inputs
    mask = h if model.hidden_dropout > 0 else 0.0
    rep_div = float(tp) if sp else 1.0
    tokens = seq_len / cp * micro_batch_size  # tokens of one micro-batch on this rank
    sel = set(modules) if recompute == "selective" else set()
    attn = _attention_bytes(model, tp, rep_div, cp, seq_len, lin, mask, sel, flash_attention)
    mats_in = 4.0 if model.gated_linear_unit else 2.0  # activation input bytes per FFN column
    dense_mlp = (2 * h + lin * h + mask) / rep_div + (mats_in + lin) * model.ffn_hidden_size / tp
    if "mlp" in sel:  # checkpointed dense MLP: only its input stays
        dense_mlp = 2 * h / rep_div
    act_moe = 0.0
    if model.is_moe:
        act_moe = _moe_layer_bytes(model, attn, tokens, tp, etp, rep_div, lin, mask, mats_in, sel)
    logits = 4.0 * model.padded_vocab_size(tp) / tp * tokens  # fp32 vocab-parallel softmax
    kinds: tuple[tuple[str, float], ...] = ()
    if model.is_hybrid:  # one block per layer: each kind's own tensors
        rep = (2 * h + lin * h + mask) / rep_div  # the pre-norm's input and output, the mask
        per_tok = {
            "mamba": rep + mixer_activation_bytes(model, tp, cp, lin),
            "attention": attn,
            "mlp": dense_mlp,
        }
        kinds = tuple((k, v * tokens) for k, v in per_tok.items())
        if model.is_moe:  # a hybrid MoE layer: routed and shared experts, no attention
            kinds += (("moe", act_moe - attn * tokens),)
    return Activations(
        dense=(attn + dense_mlp) * tokens,
        moe=act_moe,
        layer_input=2 * h / rep_div * tokens,  # full recompute: each layer's input
        final=(2 * h + lin * h) / rep_div * tokens + logits,
        logits=logits,
        embedding=tokens * (8.0 + (h / rep_div if model.hidden_dropout > 0 else 0.0)),
        hidden=h / rep_div * tokens,
        kinds=kinds,
    )


def _moe_layer_bytes(
    model: ModelSpec,
    attn: float,
    tokens: float,
    tp: int,
    etp: int,
    rep_div: float,
    lin: float,
    mask: float,
    mats_in: float,
    sel: set[str],
) -> float:
    """:attr:`Activations.moe`: one MoE layer's bytes for ``tokens`` (``attn`` bytes per token
    of attention, the routed and shared experts); ``rep_div``: ``tp`` with sequence
    parallelism, else 1; ``lin`` / ``mask`` / ``mats_in``: the bytes per element of a saved
    linear input, of the dropout mask and of an activation's input."""
    h = model.hidden_size
    if "moe" in sel:  # the MoE layer checkpointed: the pre-MLP norm's input and output stay
        return (attn * tokens) + (4.0 * h + mask) / rep_div * tokens
    moe_rep = 2 * h + lin * h + mask + 6.0 * model.num_experts  # norm, dispatch, scores
    if "layernorm" in sel:  # the pre-MLP norm's output is recomputed
        moe_rep -= lin * h
    shared = model.moe_shared_expert_intermediate_size
    if "shared_experts" in sel:  # checkpointed shared experts: their input is the norm's
        shared = 0
    moe_tok = moe_rep / rep_div + (mats_in + lin) * shared / tp
    local = tokens / rep_div  # tokens this rank routes
    dup = tp / rep_div  # copies of a token across the TP group: 1 with SP, else tp
    gathered = local * model.moe_router_topk * max(1.0, etp / dup)
    # permuted tokens (fc1 input), fc1 output, fc2 input, the routing prob (fp32); the
    # probs are applied inside the fused activation (Megatron Core >= 0.13), so the expert
    # outputs need not be kept for the combine.
    fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
    fc2_in = 0.0 if "moe_act" in sel else lin  # moe_act: FC2's input is recomputed
    experts = gathered * (lin * h + (mats_in + fc2_in) * fe / etp + 4.0)
    return (attn * tokens) + moe_tok * tokens + experts


def _attention_bytes(
    model: ModelSpec,
    tp: int,
    rep_div: float,
    cp: int,
    seq_len: int,
    lin: float,
    mask: float,
    sel: set[str],
    flash_attention: bool,
) -> float:
    """Attention-block activation bytes per token (norm input to the output projection);
    ``sel``: the modules the selective recompute re-runs (empty for other modes)."""
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.query_groups, model.head_dim
    if model.multi_latent_attention:
        qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        kvl, ql, rope = model.kv_lora_rank, model.q_lora_rank or 0, model.qk_pos_emb_head_dim
        rep_attn = 2 * h + lin * h + mask + 2 * rope + 2 * kvl + lin * kvl
        if ql:
            rep_attn += 2 * ql + lin * ql
        tp_attn = 2 * a * qk * 2 + 2 * a * model.v_head_dim + lin * a * model.v_head_dim
        if "mla_up_proj" in sel:  # the up-projected Q, K, V are recomputed
            tp_attn -= 2 * a * qk * 2 + 2 * a * model.v_head_dim
    else:
        rep_attn = 2 * h + lin * h + mask
        tp_attn = 2 * (a * d + 2 * g * d) + lin * a * d
        if model.qk_layernorm:
            tp_attn += 2 * (a * d + g * d)
    if flash_attention:
        tp_attn += 4 * a  # softmax log-sum-exp, fp32
    elif "core_attn" not in sel:
        # scores (2 B), and with attention dropout its mask (1 B) and output (2 B)
        tp_attn += a * (seq_len / cp) * (5 if model.attention_dropout > 0 else 2)
    return rep_attn / rep_div + tp_attn / float(tp)


# ---- the estimate -----------------------------------------------------------------------------
def estimate_memory(
    model: ModelSpec | Workload | None,
    strategy: Strategy,
    switches: Switches | None = None,
    *,
    seq_len: int | None = None,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
    recompute: str | None = None,
    distributed_optimizer: bool | None = None,
    precision: str | None = None,
    flash_attention: bool | None = None,
    fp8_param_gather: bool | None = None,
    grad_reduce_in_fp32: bool | None = None,
    cpu_offload_layers: int | None = None,
    other_bytes: float | None = None,
    fragmentation: float | None = None,
    workload: Workload | None = None,
) -> MemoryReport:
    """Bytes each rank of each pipeline stage needs to train ``model`` with ``strategy``.

    Typed form: ``estimate_memory(workload, strategy, switches)`` with a
    :class:`~parastrat.spec.workload.Workload` and :class:`~parastrat.spec.workload.Switches`;
    the keyword form (``model, strategy, seq_len=..., recompute=...``) builds them.
    ``strategy`` should carry its world size (``strategy.with_world_size(n)``); when ``dp`` is
    unset the smallest world that fits is assumed and a note says so.  ``global_batch_size``
    gives the number of micro-batches ``m = gbs / (mbs * dp)`` (fewer than ``pp`` means fewer
    in flight); without it the pipeline is assumed full.  ``recompute`` is "none",
    "selective" (Megatron's default core-attention recompute) or "full" (every layer, uniform,
    one layer per checkpoint).  ``precision`` "bf16", "fp8", "mxfp8" or "nvfp4".
    ``fp8_param_gather`` (Megatron's ``--fp8-param-gather``) keeps the primary linear weights
    in FP8, so FP8 costs no extra weight bytes; with False the bf16 weights stay and FP8 adds
    two 1-byte copies per linear weight.  None (default) follows Megatron Bridge's FP8/MXFP8
    mixed-precision recipes, which set it True, and its NVFP4 recipe, which sets it False (the
    BF16 weights stay and two FP4 copies with their E4M3 block scales are added).
    ``grad_reduce_in_fp32``: Megatron's gradient buffer in FP32 (4 bytes per parameter)
    instead of BF16 (2; the default, as Megatron Core and Bridge's performance recipes).
    ``flash_attention=False`` adds the ``5 a s / h`` score matrices Korthikanti counts (unless
    recompute is selective).  ``other_bytes``/``fragmentation`` override the allowance in
    ``.other`` (defaults :data:`OTHER_FIXED_BYTES`, :data:`FRAGMENTATION`).
    ``cpu_offload_layers``: CPU activation offloading (:mod:`parastrat.estimate.offload`).
    Raises :class:`StrategyError` with every hard rule the strategy breaks for the model (and
    its world and batch when they are known), as :func:`estimate_step` does.
    """
    if model is not None and not isinstance(model, Workload):
        language_model(model)  # SpecError naming plan_dit for a diffusion transformer
    strategy = as_training(require_strategy(strategy, "estimate_memory()"))
    if other_bytes is not None:
        other_bytes = require_nonnegative("other_bytes", other_bytes, "2.5 * 2**30")
    if fragmentation is not None:
        fragmentation = require_nonnegative("fragmentation", fragmentation, "0.05", maximum=1.0)
    wl, sw = resolve(
        model,
        workload,
        switches,
        who="estimate_memory",
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        precision=precision,
        recompute=recompute,
        distributed_optimizer=distributed_optimizer,
        flash_attention=flash_attention,
        fp8_param_gather=fp8_param_gather,
        grad_reduce_in_fp32=grad_reduce_in_fp32,
        cpu_offload_layers=cpu_offload_layers,
    )
    strategy.validate(  # what estimate_step refuses is not priced here either
        wl.model,
        world_size=strategy.world_size,
        seq_len=wl.seq_len,
        global_batch_size=wl.global_batch_size,
        micro_batch_size=wl.mbs,
    )
    return memory_of(wl, strategy, sw, other_bytes=other_bytes, fragmentation=fragmentation)


def memory_of(
    workload: Workload,
    strategy: Strategy,
    switches: Switches,
    *,
    other_bytes: float | None = None,
    fragmentation: float | None = None,
) -> MemoryReport:
    """:func:`estimate_memory` of typed values (no argument parsing: the planner's path)."""
    notes: list[str] = []
    model, s = workload.model, strategy
    s, m = _resolved(workload, s, switches.mode, notes)
    acts = activations(
        model,
        s.tp,
        s.sp,
        s.cp,
        s.etp,
        workload.mbs,
        workload.seq_len,
        workload.precision,
        switches.mode,
        switches.flash_attention,
        switches.mechanisms.recompute_modules,
    )
    split = pipeline_split(model, s)
    if split.note:
        notes.append(split.note)
    blocks = stage_params(model, s.tp, s.ep, s.etp, split.stage_layers, split.stage_moe, split.ends)
    alloc = (
        OTHER_FIXED_BYTES if other_bytes is None else float(other_bytes),
        FRAGMENTATION if fragmentation is None else float(fragmentation),
    )
    shapes = _StageShape(model, s, m, workload, switches, alloc)
    stages = [shapes.stage(j, split, blocks[j], acts) for j in range(s.pp)]
    if not switches.distributed_optimizer:
        notes.append(
            "without the distributed optimizer every rank keeps the full 12 B/param "
            "of optimizer state (18 B/param in all)"
        )
    return MemoryReport(
        model=model.name,
        strategy=str(s),
        stages=stages,
        seq_len=workload.seq_len,
        micro_batch_size=workload.mbs,
        num_microbatches=m,
        recompute=switches.mode,
        precision=workload.precision,
        distributed_optimizer=switches.distributed_optimizer,
        notes=notes,
        vpp=s.vpp,
    )


def _resolved(
    workload: Workload, s: Strategy, mode: str, notes: list[str]
) -> tuple[Strategy, int | None]:
    """(``s`` over its world, the smallest when ``dp`` is unset (said in ``notes``), its
    micro-batches per step); raises what Megatron Core refuses of a hybrid workload (FP8
    width, full recompute)."""
    if s.dp is None:
        s = s.with_world_size(s.min_world_size)
        notes.append(
            f"dp not set: assumed the smallest world, {s.world_size} ranks "
            f"(dp={s.dp}); pass strategy.with_world_size(n)"
        )
    m = _microbatches(workload, s, notes)
    if workload.model.is_hybrid:
        bad = hybrid_workload_violations(workload.model, workload.precision, mode)
        if bad:
            raise StrategyError(bad)
    return s, m


def _microbatches(workload: Workload, s: Strategy, notes: list[str]) -> int | None:
    """Micro-batches per step (None without a global batch: a full pipeline is assumed)."""
    gbs, b, dp = workload.global_batch_size, workload.mbs, cast(int, s.dp)
    if gbs is None:
        notes.append("global batch not given: assumed enough micro-batches to fill the pipeline")
        return None
    errors = [v for v in batch_violations(s, dp, gbs, b) if v.severity == "error"]
    if errors:
        raise StrategyError(errors)
    return gbs // (b * dp)


class _StageShape:
    """What every stage of one estimate shares (pipeline shape, optimizer shards, FP8 bytes,
    allowance), so that :meth:`stage` computes only what differs per stage."""

    def __init__(
        self,
        model: ModelSpec,
        s: Strategy,
        m: int | None,
        workload: Workload,
        switches: Switches,
        alloc: tuple[float, float],
    ) -> None:
        dist = switches.distributed_optimizer
        self.p, self.v, self.m = s.pp, s.vpp, m
        # One sharding for every level: no fsdp is "optim" with the distributed optimizer over
        # dp x cp, else "no_shard" (the identity tests hold these figures to the old ones).
        self.sh = Sharding.from_strategy(s, distributed_optimizer=dist)
        self.dense_shard = self.sh.dp_shard * s.cp
        edp = s.expert_dp or 1
        self.expert_shard = max(1, edp // self.sh.dp_replicate) if s.fsdp else edp
        self.bytes_of = (
            workload.precision,
            switches.fp8_param_gather,
            switches.grad_reduce_in_fp32,
        )
        self.sizes = _byte_sizes(*self.bytes_of)
        self.fp8x = fp8_extra_bytes(workload.precision, switches.fp8_param_gather)
        self.model, self.s = model, s
        self.full = switches.mode == "full"
        self.moe_model = model.is_moe
        self.fixed, self.frag = alloc
        self.switches = switches  # CPU activation offloading (estimate/offload.py)

    def in_flight(self, st: int) -> tuple[int, float]:
        """(micro-batches or model chunks in flight at stage ``st``'s peak, layers' share per
        unit): 1F1B holds ``min(p - s, m)``; interleaved ``min(v m, v p + p - 1 - 2 s)``."""
        p, v, m = self.p, self.v, self.m
        if v > 1:
            n = v * p + p - 1 - 2 * st
            return (n if m is None else min(n, m * v)), 1.0 / v
        return (p - st if m is None else min(p - st, m)), 1.0

    def stage(self, st: int, split: PipelineSplit, block: Block, acts: Activations) -> StageMemory:
        """What one rank of pipeline stage ``st`` holds: the stage's parameter record, and the
        activations of the micro-batches (or model chunks) in flight at its peak."""
        n_layers, n_moe = split.stage_layers[st], split.stage_moe[st]
        ends = split.ends[st]  # where the layout puts the embedding, loss and MTP modules
        first, last = ends.embedding, ends.loss
        in_flight, per_unit = self.in_flight(st)
        if acts.kinds:  # a hybrid stage: its layers by kind (no full recompute: MambaStack)
            per_kind = dict(acts.kinds)
            counts = split.stage_kinds[st]
            stored = in_flight * per_unit * sum(n * per_kind[k] for k, n in counts)
        elif self.full:
            one_layer = acts.moe if n_moe else acts.dense
            stored = in_flight * per_unit * n_layers * acts.layer_input + (
                one_layer if n_layers else 0.0
            )
        else:
            stored = in_flight * per_unit * ((n_layers - n_moe) * acts.dense + n_moe * acts.moe)
        stored -= offload_saved_bytes(self.model, self.s, self.switches, acts)
        if first:
            stored += (min(self.p, self.m) if self.m is not None else self.p) * acts.embedding
        if last:
            stored += acts.final
        if ends.mtp:
            mtp_act = (acts.moe if self.moe_model else acts.dense) + 4 * acts.hidden
            per_mtp = acts.layer_input if self.full else mtp_act
            stored += ends.mtp * (per_mtp + acts.logits)
        kept = self.kept(block)
        return StageMemory(
            stage=st,
            layers=n_layers,
            moe_layers=n_moe,
            weights=kept[0],
            gradients=kept[1],
            optimizer=kept[2],
            working=self.working(n_layers, n_moe, first, last, st),
            activations=stored,
            other=self.fixed + self.frag * stored,
            in_flight=in_flight,
            params=block.params,
            expert_params=block.expert_params,
            has_embedding=first,
            has_output=last,
        )

    def kept(self, block: Block) -> tuple[float, float, float]:
        """(weights, gradients, optimizer) bytes of a stage's parameter record under the
        strategy's sharding (:func:`~parastrat.estimate.fsdp.fsdp_layer_memory`): dense
        parameters over ``dp_shard * cp``, routed experts over the expert data-parallel group."""
        counts = (block.dense_params, block.expert_params, block.linear_params)
        shards = (self.sh.level, self.dense_shard, self.expert_shard)
        return _kept(self.model, *counts, *shards, *self.bytes_of)

    def working(self, n_layers: int, n_moe: int, first: bool, last: bool, st: int = 0) -> float:
        """Unsharded bytes of the FSDP units in flight on a stage: its largest unit (a layer,
        the embedding or the output layer), :func:`~parastrat.estimate.fsdp.fsdp_working_set`."""
        if self.sh.rank < 2:
            return 0.0
        model, s = self.model, self.s
        units: list[Block] = []
        if model.is_hybrid:  # a hybrid's units: one per layer kind the stage holds
            split = pipeline_split(model, s)
            for kind, _ in split.stage_kinds[st]:
                units.append(kind_record(model, kind, s.tp, s.ep, s.etp))
        elif n_layers - n_moe:
            units.append(layer_record(model, False, s.tp, s.ep, s.etp))
        if n_moe and not model.is_hybrid:
            units.append(layer_record(model, True, s.tp, s.ep, s.etp))
        if first:
            units.append(embedding_record(model, s.tp))
        if last:
            units.append(output_record(model, s.tp, s.pp > 1 or not model.tied_embeddings))
        if not units:
            return 0.0
        unit = max(units, key=lambda b: b.params)
        return fsdp_working_set(
            unit.params,
            self.sh,
            layers=n_layers + int(first) + int(last),
            shard=self.dense_shard,
            linear_params=unit.linear_params,
            sizes=self.sizes,
        ).total


@per_model
def _kept(
    model: ModelSpec,
    dense_params: float,
    expert_params: float,
    linear_params: float,
    level: str | None,
    dense_shard: int,
    expert_shard: int,
    precision: str,
    fp8_param_gather: bool | None,
    grad_reduce_in_fp32: bool,
) -> tuple[float, float, float]:
    """:meth:`_StageShape.kept` of a parameter record's counts and the byte sizes' arguments
    (memoised: the planner asks for the same stages under every micro-batch size and
    recompute mode)."""
    sizes = _byte_sizes(precision, fp8_param_gather, grad_reduce_in_fp32)
    expert_lin = min(expert_params, linear_params)
    dense = fsdp_layer_memory(
        dense_params, level, dense_shard, linear_params=linear_params - expert_lin, sizes=sizes
    )
    expert = fsdp_layer_memory(
        expert_params, level, expert_shard, linear_params=expert_lin, sizes=sizes
    )
    return (
        dense.weights + expert.weights,
        dense.gradients + expert.gradients,
        dense.optimizer + expert.optimizer,
    )


@lru_cache(maxsize=64)
def _byte_sizes(precision: str, fp8_param_gather: bool | None, grad_reduce: bool) -> ByteSizes:
    """:meth:`ByteSizes.megatron` (a frozen value), memoised."""
    return ByteSizes.megatron(precision, fp8_param_gather, grad_reduce)
