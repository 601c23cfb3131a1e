"""One record per block of the model as one rank holds it: the single parameter accounting.

The memory model (:mod:`parastrat.estimate.memory`), the step-time model
(:mod:`parastrat.estimate.step`: data-parallel traffic, optimizer step) and the planner's
memory prefilter all read the same records, so they cannot disagree on a parameter count
(Calculon's ``Layer`` pattern: one object per layer carrying its FLOPs, weights, gradients,
optimizer state; the activations per token are in :mod:`parastrat.estimate.memory`, which
applies them per in-flight micro-batch).

A :class:`Block` is one transformer layer (dense or MoE), one layer of a hybrid (Mamba)
model by kind (:func:`kind_record`: a Mamba-2 mixer, attention, an MLP or an MoE, each one
pre-normed block), the input embedding, the output layer with the final norm, or one
multi-token-prediction (MTP) module, split by a rank's (TP, EP, ETP) degrees:

* parameters come from :attr:`ModelSpec.param_breakdown` (projections, biases, QK / latent
  norms, the two pre-norms), split by TP except the replicated MLA down-projections and
  norms, the router and the norms; routed experts are split ``E / ep`` and by ETP;
* the embedding and output layer use Megatron's padded vocabulary
  (``make_vocab_size_divisible_by * tp``);
* ``linear_params`` are the linear-layer weights FP8 keeps extra 1-byte copies of;
* ``matrices`` are the block's weight matrices (:mod:`parastrat.estimate.flops`), whose
  FLOPs per token and GEMM shapes the time model prices.

:func:`stage_params` adds a pipeline stage's blocks: its layers, the embedding on the first
stage, the final norm and output layer on the last (a tied output layer only when ``pp > 1``),
and with MTP the MTP modules plus the copy of the embedding MTP uses on the last stage
(Megatron Core builds ``LanguageModelEmbedding`` wherever ``pre_process or mtp_process``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import StrategyError
from ..pipeline_layout import StagePlacement
from ..spec.model import ModelSpec
from ..strategy import Strategy
from .flops import (
    Matrix,
    attention_matrices,
    is_moe_layer,
    kind_matrices,
    logits_matrix,
    mlp_matrices,
)
from .mamba import HYBRID_KINDS, mixer_params_split
from .memo import model_memo, per_model

#: Bytes per parameter: bf16 weight, main gradient, fp32 master + Adam m and v.  The main
#: gradient (Megatron's DDP gradient buffer) is BF16, or FP32 with ``grad_reduce_in_fp32``
#: (:data:`MAIN_GRAD_BYTES`; the switch is ``Switches.grad_reduce_in_fp32``, default off as
#: Megatron Core and Megatron Bridge's performance recipes run).
WEIGHT_BYTES = 2.0
MAIN_GRAD_BYTES = {False: 2.0, True: 4.0}
GRAD_BYTES = MAIN_GRAD_BYTES[False]
OPTIM_BYTES = 12.0
#: Extra bytes per *linear-layer* parameter under FP8: row-wise and column-wise 1-byte copies
#: (MXFP8 adds one 1-byte scale per 32 values to each); NVFP4 caches two FP4 copies (0.5 B)
#: with one E4M3 scale per 16 values each (TE ``NVFP4Tensor`` row-wise and column-wise data).
FP8_EXTRA_BYTES = {"bf16": 0.0, "fp8": 2.0, "mxfp8": 2.0 + 2.0 / 32, "nvfp4": 2 * (0.5 + 1 / 16)}


def fp8_extra_bytes(precision: str, fp8_param_gather: bool | None) -> float:
    """Extra bytes per linear-layer parameter at ``precision``: :data:`FP8_EXTRA_BYTES`, less
    the bf16 copy that ``fp8_param_gather`` removes (None: what Megatron Bridge's recipes set,
    True for FP8 / MXFP8, False for NVFP4: ``bf16_with_nvfp4_mixed`` keeps the BF16 weights,
    FP4 parameter gather being unsupported)."""
    extra = FP8_EXTRA_BYTES[precision]
    if fp8_param_gather is None:
        fp8_param_gather = precision != "nvfp4"
    if fp8_param_gather and precision != "bf16":
        extra -= 2.0  # the bf16 copy of each linear weight is gone
    return extra


@dataclass(frozen=True)
class Block:
    """Parameters of one block on one rank, and the matrices it multiplies by.

    ``dense_params``: parameters replicated over data parallelism (sharded by the distributed
    optimizer over ``dp * cp``); ``expert_params``: routed-expert parameters (sharded over the
    expert data-parallel group); ``linear_params``: of both, the linear-layer weights.
    """

    name: str
    dense_params: float
    expert_params: float = 0.0
    linear_params: float = 0.0
    matrices: tuple[Matrix, ...] = ()

    @property
    def params(self) -> float:
        """Every parameter of the block on the rank."""
        return self.dense_params + self.expert_params

    @property
    def flops_fwd_per_token(self) -> float:
        """Forward FLOPs of the block's matrices per token (whole model, before any split)."""
        return sum(m.flops_per_token for m in self.matrices)

    @property
    def flops_bwd_per_token(self) -> float:
        """Backward FLOPs of the block's matrices per token (data + weight gradients)."""
        return 2.0 * self.flops_fwd_per_token

    def __add__(self, other: Block) -> Block:
        return Block(
            f"{self.name}+{other.name}",
            self.dense_params + other.dense_params,
            self.expert_params + other.expert_params,
            self.linear_params + other.linear_params,
            self.matrices + other.matrices,
        )

    def times(self, n: float) -> Block:
        """``n`` copies of the block (parameters scaled; the matrices listed once)."""
        return Block(
            self.name,
            n * self.dense_params,
            n * self.expert_params,
            n * self.linear_params,
            self.matrices,
        )


EMPTY = Block("empty", 0.0)


@per_model
def layer_record(model: ModelSpec, moe: bool, tp: int, ep: int = 1, etp: int = 1) -> Block:
    """One transformer layer (MoE when ``moe``) on a rank of the (TP, EP, ETP) grid."""
    p = model.param_breakdown
    attn = (p["attention"] - p["attention_replicated"]) / tp
    attn += p["attention_replicated"] + p["layer_norms"]
    mats = tuple(attention_matrices(model) + mlp_matrices(model, moe))
    if not moe:
        linear = (p["attention"] + p["dense_mlp"]) / tp
        return Block("dense", attn + p["dense_mlp"] / tp, 0.0, linear, mats)
    experts = max(model.num_experts // ep, 1) * p["expert"] / etp
    dense = attn + p["shared_expert"] / tp + p["router"]
    linear = (p["attention"] + p["shared_expert"]) / tp + experts
    return Block("moe", dense, experts, linear, mats)


@per_model
def kind_record(model: ModelSpec, kind: str, tp: int, ep: int = 1, etp: int = 1) -> Block:
    """One layer of ``kind`` (:meth:`ModelSpec.layer_kind`) on a rank of the (TP, EP, ETP)
    grid.  A GPT's "dense" / "moe" layer is :func:`layer_record`; a hybrid's layer is one
    pre-normed block (its norm whole on every TP rank, fused into the first linear layer):

    * "mamba": the whole mixer split by TP (``MambaMixer``: in_proj column-parallel,
      out_proj row-parallel, conv1d / dt_bias / A_log / D / gated norm over the local heads);
    * "attention": the projections split by TP (MLA's down-projections and QK norms whole);
    * "mlp": FC1 / FC2 split by TP;
    * "moe": the router whole, shared experts split by TP, routed experts by EP and ETP.
    """
    if not model.is_hybrid:
        return layer_record(model, kind == "moe", tp, ep, etp)
    p = model.param_breakdown
    norm = p["layer_norms"]
    mats = kind_matrices(model, kind)
    if kind == "mamba":
        params, linear = mixer_params_split(model)
        return Block("mamba", params / tp + norm, 0.0, linear / tp, mats)
    if kind == "attention":
        rep = p["attention_replicated"]
        dense = (p["attention"] - rep) / tp + rep + norm
        return Block("attention", dense, 0.0, p["attention"] / tp, mats)
    if kind == "mlp":
        return Block("mlp", p["dense_mlp"] / tp + norm, 0.0, p["dense_mlp"] / tp, mats)
    experts = max(model.num_experts // ep, 1) * p["expert"] / etp
    dense = p["shared_expert"] / tp + p["router"] + norm
    return Block("moe", dense, experts, p["shared_expert"] / tp + experts, mats)


@per_model
def embedding_record(model: ModelSpec, tp: int) -> Block:
    """The input embedding (padded vocabulary split by TP, learned positions whole)."""
    h = model.hidden_size
    pos = model.max_position_embeddings * h if model.position_embedding_type == "learned" else 0
    return Block("embedding", model.padded_vocab_size(tp) * h / tp + pos)


@per_model
def output_record(model: ModelSpec, tp: int, with_logits: bool) -> Block:
    """The final norm, and the output layer when ``with_logits`` (untied, or a tied copy on
    the last stage of a pipeline)."""
    norm = model.param_breakdown["final_norm"]
    if not with_logits:
        return Block("final_norm", norm)
    mat = logits_matrix(model)
    logits = model.padded_vocab_size(tp) * model.hidden_size / tp
    return Block("output", norm + logits, 0.0, 0.0, (mat,))


@per_model
def mtp_record(model: ModelSpec, tp: int, ep: int = 1, etp: int = 1) -> Block:
    """One multi-token-prediction module: the ``[h; h] -> h`` projection, its norms (enorm,
    hnorm, final) and one transformer layer of the kind of the model's last layer (what the
    FLOP count prices)."""
    h = model.hidden_size
    norm = model.param_breakdown["final_norm"]
    layer = layer_record(model, is_moe_layer(model, model.num_layers - 1), tp, ep, etp)
    proj = 2 * h * h / tp
    mat = Matrix("eh_proj", 2 * h, h, "mtp", "row")
    return Block(
        "mtp",
        layer.dense_params + proj + 3 * norm,
        layer.expert_params,
        layer.linear_params + proj,
        (*layer.matrices, mat),
    )


@dataclass(frozen=True)
class StageEnds:
    """What one physical pipeline stage holds besides its decoder layers, summed over its
    virtual chunks, as Megatron Core's ``GPTModel`` builds them: the input embedding where a
    chunk is ``pre_process``; the final norm, output layer and loss where it is
    ``post_process`` (the output weights unless they are tied to an embedding of the same
    chunk); the MTP modules, and an embedding copy for every chunk with MTP but no input
    embedding (``pre_process or mtp_process``)."""

    embedding: bool = False
    loss: bool = False
    mtp: int = 0
    embedding_copies: int = 0
    output_weights: bool = False


def _ends_default(model: ModelSpec, p: int) -> tuple[StageEnds, ...]:
    """The ends of a split given without a layout: embedding first, loss and MTP last."""
    mtp = model.mtp_num_layers or 0
    out = []
    for j in range(p):
        first, last = j == 0, j == p - 1
        copies = int(first) + int(last and mtp > 0 and p > 1)
        weights = last and (p > 1 or not model.tied_embeddings)
        out.append(StageEnds(first, last, mtp if last else 0, copies, weights))
    return tuple(out)


@per_model
def stage_params(
    model: ModelSpec,
    tp: int,
    ep: int,
    etp: int,
    stage_layers: tuple[int, ...],
    stage_moe: tuple[int, ...],
    ends: tuple[StageEnds, ...] | None = None,
) -> tuple[Block, ...]:
    """What each pipeline stage's rank holds, as one :class:`Block` per stage: its layers and
    the ends ``ends`` places on it (:attr:`PipelineSplit.ends`; None: embedding on the first
    stage, output, loss and MTP on the last); a hybrid's layers by kind, each stage taking
    consecutive layers (:func:`consecutive_kind_counts`)."""
    p = len(stage_layers)
    ends = ends if ends is not None else _ends_default(model, p)
    if model.is_hybrid:
        return _hybrid_stage_params(model, tp, ep, etp, stage_layers, ends)
    dense = layer_record(model, False, tp, ep, etp)
    moe = layer_record(model, True, tp, ep, etp) if model.is_moe else EMPTY
    out: list[Block] = []
    for n, k, end in zip(stage_layers, stage_moe, ends):
        st = dense.times(n - k) + moe.times(k)
        if end.embedding_copies:
            st = st + embedding_record(model, tp).times(end.embedding_copies)
        if end.loss:
            st = st + output_record(model, tp, end.output_weights)
        if end.mtp:
            st = st + mtp_record(model, tp, ep, etp).times(end.mtp)
        out.append(Block("stage", st.dense_params, st.expert_params, st.linear_params))
    return tuple(out)


def _hybrid_stage_params(
    model: ModelSpec,
    tp: int,
    ep: int,
    etp: int,
    stage_layers: tuple[int, ...],
    ends: tuple[StageEnds, ...],
) -> tuple[Block, ...]:
    """:func:`stage_params` of a hybrid model: each stage's layers by kind
    (:func:`consecutive_kind_counts`: MambaStack has no virtual stages) plus its ends."""
    out: list[Block] = []
    for counts, end in zip(consecutive_kind_counts(model, stage_layers), ends):
        st = EMPTY
        for kind, n in counts:
            st = st + kind_record(model, kind, tp, ep, etp).times(n)
        if end.embedding_copies:
            st = st + embedding_record(model, tp).times(end.embedding_copies)
        if end.loss:
            st = st + output_record(model, tp, end.output_weights)
        out.append(Block("stage", st.dense_params, st.expert_params, st.linear_params))
    return tuple(out)


def kind_counts(model: ModelSpec, ranges: list[range]) -> tuple[tuple[str, int], ...]:
    """``(kind, layers)`` of every layer kind among the layer indices ``ranges`` (one stage's
    chunks), in :data:`HYBRID_KINDS` order for a hybrid, "dense" then "moe" for a GPT."""
    kinds = HYBRID_KINDS if model.is_hybrid else ("dense", "moe")
    seen = [model.layer_kind(i) for r in ranges for i in r]
    return tuple((k, seen.count(k)) for k in kinds if seen.count(k))


@per_model
def consecutive_kind_counts(
    model: ModelSpec, stage_layers: tuple[int, ...]
) -> tuple[tuple[tuple[str, int], ...], ...]:
    """:func:`kind_counts` of stages that take consecutive layers (no virtual stages), as
    ``MambaStack._select_layers_for_pipeline_parallel`` slices a hybrid's pattern: what
    :func:`stage_params` reads when no :attr:`PipelineSplit.stage_kinds` is given."""
    out, start = [], 0
    for n in stage_layers:
        out.append(kind_counts(model, [range(start, start + n)]))
        start += n
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Where the layers sit: the pipeline split, shared by memory, step and the planner
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelineSplit:
    """Where the layers of a model sit in a strategy's pipeline, exactly as Megatron Core
    places them (:meth:`Strategy.placements`).

    ``stage_layers[j]``: decoder layers held by physical stage ``j`` (all its virtual chunks);
    ``stage_moe[j]``: how many of them carry routed experts (``stage_kinds[j]``: its layers by
    kind); ``chunk_layers[c]``: decoder
    layers of model chunk ``c`` (``pp * vpp`` chunks in Megatron's order, chunk ``c`` on
    stage ``c % pp``); ``ends[j]``: the embedding, loss and MTP modules stage ``j`` holds.
    ``how`` is "even", "uneven" (first/last stage counts), "accounted"
    (``account_for_embedding/loss_in_pipeline_split``) or "layout"
    (``pipeline_model_parallel_layout``); ``note`` says so in words (None for an even split).
    """

    stage_layers: tuple[int, ...]
    stage_moe: tuple[int, ...]
    chunk_layers: tuple[int, ...]
    how: str
    note: str | None = None
    ends: tuple[StageEnds, ...] = ()
    #: per stage, ``(kind, layers)`` of every layer kind it holds over all its chunks
    #: (:func:`kind_counts`: a hybrid's "mamba", "attention", "mlp", "moe"; a GPT's "dense",
    #: "moe")
    stage_kinds: tuple[tuple[tuple[str, int], ...], ...] = ()


def pipeline_split(model: ModelSpec, strategy: Strategy) -> PipelineSplit:
    """Decoder layers per stage and per model chunk, and where the embedding, loss and MTP
    modules sit, from :meth:`Strategy.placements` (the layout, ``account_for_*``, first/last
    stage counts or the even split).  An impossible split raises the rules'
    :class:`StrategyError` with the fix."""
    s = strategy
    key = (
        "pipeline_split",
        s.pp,
        s.vpp,
        s.first_stage_layers,
        s.last_stage_layers,
        s.account_for_embedding,
        s.account_for_loss,
        s.pipeline_layout,
    )
    memo = model_memo(model)  # the model's own memo, keyed by every field the split reads
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _split(model, s)
    return hit


def _split(model: ModelSpec, s: Strategy) -> PipelineSplit:
    p, v = s.pp, s.vpp
    places = s.placements(model.num_layers, model.mtp_num_layers or 0)  # rank-major
    chunks = [places[r * v + c] for c in range(v) for r in range(p)]  # Megatron's chunk order
    stage = [0] * p
    moe = [0] * p
    ranges: list[list[range]] = [[] for _ in range(p)]
    start = 0
    for pl in chunks:
        stage[pl.pp_rank] += pl.decoder
        moe[pl.pp_rank] += sum(
            1 for i in range(start, start + pl.decoder) if is_moe_layer(model, i)
        )
        ranges[pl.pp_rank].append(range(start, start + pl.decoder))
        start += pl.decoder
    ends = tuple(_stage_ends(model, places[r * v : (r + 1) * v]) for r in range(p))
    how, note = _describe(s, stage)
    kinds = tuple(kind_counts(model, r) for r in ranges)
    return PipelineSplit(
        tuple(stage), tuple(moe), tuple(pl.decoder for pl in chunks), how, note, ends, kinds
    )


def _stage_ends(model: ModelSpec, chunks: list[StagePlacement]) -> StageEnds:
    """The :class:`StageEnds` of one rank's chunks."""
    tied = model.tied_embeddings
    return StageEnds(
        embedding=any(c.embedding for c in chunks),
        loss=any(c.loss for c in chunks),
        mtp=sum(c.mtp for c in chunks),
        embedding_copies=sum(1 for c in chunks if c.embedding or c.mtp),
        output_weights=any(c.loss and not (tied and c.embedding) for c in chunks),
    )


def _describe(s: Strategy, per_stage: list[int]) -> tuple[str, str | None]:
    """(how, note) of a strategy's split."""
    if s.pipeline_layout is not None:
        return "layout", (
            f"pipeline layout {s.layout_parsed}: {per_stage} decoder layers per stage"
        )
    if s.account_for_embedding or s.account_for_loss:
        names = [
            name
            for name, on in (
                ("account_for_embedding_in_pipeline_split", s.account_for_embedding),
                ("account_for_loss_in_pipeline_split", s.account_for_loss),
            )
            if on
        ]
        return "accounted", (
            "layers split with " + " and ".join(names) + f": {per_stage} layers per stage"
        )
    if s.uneven:
        return "uneven", f"uneven pipeline split: {per_stage} layers per stage"
    return "even", None


@per_model
def try_split(
    model: ModelSpec, pp: int, vpp: int, split: tuple[tuple[str, Any], ...] = ()
) -> PipelineSplit | None:
    """:func:`pipeline_split` of a bare pipeline shape (``split``: the Strategy's split fields
    as sorted (name, value) pairs), or None when it is impossible.  Memoised."""
    try:
        return pipeline_split(model, Strategy(pp=pp, vpp=vpp, **dict(split)))
    except StrategyError:
        return None
