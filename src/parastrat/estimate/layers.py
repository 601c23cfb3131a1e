"""One record per block of the model as one rank holds it: the single parameter accounting.

The memory model (:mod:`parastrat.estimate.memory`), the step-time model
(:mod:`parastrat.estimate.step`: data-parallel traffic, optimizer step) and the planner's
memory prefilter all read the same records, so they cannot disagree on a parameter count
(Calculon's ``Layer`` pattern: one object per layer carrying its FLOPs, weights, gradients,
optimizer state; the activations per token are in :mod:`parastrat.estimate.memory`, which
applies them per in-flight micro-batch).

A :class:`Block` is one transformer layer (dense or MoE), the input embedding, the output
layer with the final norm, or one multi-token-prediction (MTP) module, split by a rank's
(TP, EP, ETP) degrees:

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
from ..spec.model import ModelSpec
from ..strategy import Strategy
from .flops import Matrix, attention_matrices, is_moe_layer, logits_matrix, mlp_matrices
from .memo import model_memo, per_model

#: Bytes per parameter: bf16 weight, fp32 main gradient (Megatron Bridge's ``bf16_mixed``
#: keeps the gradient buffer in FP32: ``grad_reduce_in_fp32``), fp32 master + Adam m and v.
WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
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

    def weight_bytes(self, fp8_extra: float = 0.0) -> float:
        """BF16 weights plus ``fp8_extra`` bytes per linear-layer parameter."""
        return WEIGHT_BYTES * self.params + fp8_extra * self.linear_params

    def gradient_bytes(self) -> float:
        """FP32 main gradients."""
        return GRAD_BYTES * self.params

    def optimizer_bytes(self, dense_shard: float = 1.0, expert_shard: float = 1.0) -> float:
        """FP32 master weights and Adam moments, sharded ``dense_shard`` / ``expert_shard``
        ways by the distributed optimizer (1: not sharded)."""
        return OPTIM_BYTES * (self.dense_params / dense_shard + self.expert_params / expert_shard)

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


@per_model
def stage_params(
    model: ModelSpec,
    tp: int,
    ep: int,
    etp: int,
    stage_layers: tuple[int, ...],
    stage_moe: tuple[int, ...],
) -> tuple[Block, ...]:
    """What each pipeline stage's rank holds, as one :class:`Block` per stage (layers, and the
    embedding / output / MTP ends; see the module docstring)."""
    p = len(stage_layers)
    dense = layer_record(model, False, tp, ep, etp)
    moe = layer_record(model, True, tp, ep, etp) if model.is_moe else EMPTY
    out: list[Block] = []
    for j, (n, k) in enumerate(zip(stage_layers, stage_moe)):
        st = dense.times(n - k) + moe.times(k)
        if j == 0:
            st = st + embedding_record(model, tp)
        if j == p - 1:
            st = st + output_record(model, tp, p > 1 or not model.tied_embeddings)
            if model.mtp_num_layers:
                st = st + mtp_record(model, tp, ep, etp).times(model.mtp_num_layers)
                if p > 1:
                    st = st + embedding_record(model, tp)  # MTP's embedding copy
        out.append(Block("stage", st.dense_params, st.expert_params, st.linear_params))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Where the layers sit: the pipeline split, shared by memory, step and the planner
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelineSplit:
    """Where the transformer layers of a model sit in a strategy's pipeline.

    ``stage_layers[j]``: layers held by physical stage ``j`` (all its virtual chunks);
    ``stage_moe[j]``: how many of them carry routed experts; ``chunk_layers[c]``: layers of
    model chunk ``c`` (``pp * vpp`` chunks in Megatron's order, chunk ``c`` on stage
    ``c % pp``).  ``how`` is "even", "uneven" (first/last stage counts), "accounted"
    (``account_for_embedding/loss_in_pipeline_split``) or "mtp-layout" (the one approximation,
    see :func:`pipeline_split`); ``note`` says so in words (None for an even split).
    """

    stage_layers: tuple[int, ...]
    stage_moe: tuple[int, ...]
    chunk_layers: tuple[int, ...]
    how: str
    note: str | None = None


#: Rule ids that the MTP-layout approximation (and only it) stands in for.
MTP_LAYOUT_RULES = frozenset({"layers-accounted"})


def _mtp_slots(model: ModelSpec, strategy: Strategy) -> int | None:
    """Pipeline slots when the MTP modules count as slots of the last stage, or None."""
    s = strategy
    if (
        not model.mtp_num_layers
        or s.pp == 1
        or not s.account_for_loss
        or s.first_stage_layers is not None
        or s.last_stage_layers is not None
    ):
        return None
    total = model.num_layers + s.account_for_embedding + s.account_for_loss
    if total % (s.pp * s.vpp) == 0:
        return None  # Megatron's own accounted split works; no approximation needed
    slots = total + model.mtp_num_layers
    return slots if slots % (s.pp * s.vpp) == 0 else None


def pipeline_split(model: ModelSpec, strategy: Strategy) -> PipelineSplit:
    """Layers per stage and per model chunk, from :meth:`Strategy.stage_layers`.

    The strategy's own split is the one source of truth (even, first/last stage counts, or
    Megatron's ``account_for_embedding/loss_in_pipeline_split``); an impossible split raises
    the rules' :class:`StrategyError` with the fix.

    One documented approximation lives here and nowhere else: a model with MTP whose
    ``L + embedding + loss`` slots do not divide into ``pp * vpp`` chunks, but whose
    ``L + embedding + MTP + loss`` slots do (DeepSeek-V3: 61 + 1 + 1 + 1 = 64 on PP 8 x VPP 4
    or PP 4 x VPP 4), is split as Megatron Bridge's ``pipeline_model_parallel_layout`` does
    for those recipes (``"Et|(tt|)*30mL"``): every chunk holds the same number of slots, the
    first chunk gives one to the embedding and the last gives one to the MTP modules and one to
    the loss.  Megatron itself needs that layout string for it (``account_for_*`` alone is
    rejected), which the note says.
    """
    s = strategy
    key = (
        "pipeline_split",
        s.pp,
        s.vpp,
        s.first_stage_layers,
        s.last_stage_layers,
        s.account_for_embedding,
        s.account_for_loss,
    )
    memo = model_memo(model)  # the model's own memo, keyed by every field the split reads
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _split(model, s)
    return hit


def _split(model: ModelSpec, s: Strategy) -> PipelineSplit:
    chunks, how, note = _chunks(model, s)
    p = s.pp
    stage = [0] * p
    moe = [0] * p
    start = 0
    for c, size in enumerate(chunks):
        stage[c % p] += size
        moe[c % p] += sum(1 for i in range(start, start + size) if is_moe_layer(model, i))
        start += size
    return PipelineSplit(tuple(stage), tuple(moe), tuple(chunks), how, note)


def _chunks(model: ModelSpec, s: Strategy) -> tuple[list[int], str, str | None]:
    """(layers per model chunk, how, note) of a strategy's split."""
    L, p, v = model.num_layers, s.pp, s.vpp
    n = p * v
    slots = _mtp_slots(model, s)
    if slots is not None:
        per = slots // n
        chunks = [per] * n
        chunks[0] -= int(s.account_for_embedding)
        chunks[-1] -= int(s.account_for_loss) + model.mtp_num_layers
        if min(chunks) < 0:
            s.stage_layers(L)  # raises the rules' error
        note = (
            f"{L} layers + embedding + {model.mtp_num_layers} MTP + loss = {slots} slots "
            f"over pp*vpp = {n} chunks: priced as Megatron Bridge's "
            "pipeline_model_parallel_layout places them (MTP in the last chunk); Megatron "
            "needs that layout string, account_for_*_in_pipeline_split alone is rejected"
        )
        return chunks, "mtp-layout", note
    per_stage = s.stage_layers(L)  # raises StrategyError with the fix when impossible
    chunks = [0] * n
    for st, layers in enumerate(per_stage):
        base, extra = divmod(layers, v)
        for j in range(v):
            # a short chunk sits where the embedding (first chunk of stage 0) or the loss
            # (last chunk of the last stage) takes a slot
            short_first = st == 0 and s.account_for_embedding
            bonus = (j >= v - extra) if short_first else (j < extra)
            chunks[j * p + st] = base + (1 if bonus else 0)
    if s.account_for_embedding or s.account_for_loss:
        names = [
            name
            for name, on in (
                ("account_for_embedding_in_pipeline_split", s.account_for_embedding),
                ("account_for_loss_in_pipeline_split", s.account_for_loss),
            )
            if on
        ]
        return (
            chunks,
            "accounted",
            ("layers split with " + " and ".join(names) + f": {list(per_stage)} layers per stage"),
        )
    if s.uneven:
        return chunks, "uneven", f"uneven pipeline split: {list(per_stage)} layers per stage"
    return chunks, "even", None


def split_waived_rules(model: ModelSpec, strategy: Strategy) -> frozenset[str]:
    """Rule ids the layer-split approximation of :func:`pipeline_split` stands in for."""
    return MTP_LAYOUT_RULES if _mtp_slots(model, strategy) is not None else frozenset()


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
