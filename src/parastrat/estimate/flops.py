"""FLOP counting: the matrices a transformer really has, per token and per layer.

One source of truth for the model's arithmetic.  :func:`layer_matrices` lists every weight
matrix of one layer (with how tensor/expert parallelism splits it), so the FLOP counts here and
the GEMM shapes the step-time model prices (``estimate/step.py``) come from the same list.

Convention (stated once, used by ``StepReport.tflops_per_gpu`` and ``.mfu``): **model FLOPs**
are ``3 x forward`` (forward, backward-data, backward-weight), where the forward counts

* ``2 * in * out`` per token for every weight matrix the token passes through: attention
  projections (GQA, MLA down/up projections), the MLP (two matrices, or three when gated:
  SwiGLU), the MoE router, the ``top-k`` routed experts and the shared experts, the output
  (logits) layer, and the multi-token-prediction layers when the model has them;
* the attention core ``Q K^T`` and ``A V`` with **causal masking counted as half**
  (FlashAttention skips the masked blocks): ``2 * 2 * heads * head_dim * s / 2`` per token;
  a sliding-window layer (window ``w < s``) attends ``w - w^2 / (2 s)`` keys per query on
  average instead of ``s / 2``;
* nothing for the input embedding (a look-up), norms, activations or softmax.

This is "6 x active parameters x tokens + attention", the convention of Megatron-LM's
``num_floating_point_operations`` (newer versions, which halve causal attention).  Hardware
FLOPs (HFU) add recomputation; :func:`recompute_flops_per_token` gives that extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..spec.model import ModelSpec

# the recompute vocabulary lives with the switches (re-exported here for its old importers)
from ..spec.workload import RECOMPUTE_MODES as RECOMPUTE_MODES
from ..spec.workload import normalize_recompute as normalize_recompute
from .mamba import bridge_flops_per_token, scan_flops_per_token
from .memo import per_model

#: How tensor parallelism cuts a matrix: ``col`` splits the output features, ``row`` the input
#: features, ``dup`` keeps it whole on every TP rank (MLA down-projections, the router).
Split = Literal["col", "row", "dup"]
#: Which block a matrix belongs to; ``expert`` matrices are split by ETP and run per routed
#: token-expert pair, the others by TP.
Block = Literal["attn", "mlp", "router", "expert", "shared", "logits", "mtp", "mamba"]


@dataclass(frozen=True)
class Matrix:
    """One weight matrix: ``in_dim x out_dim``, applied ``per_token`` times per token."""

    name: str
    in_dim: int
    out_dim: int
    block: Block
    split: Split
    #: routed experts run top-k times per token; everything else once
    per_token: float = 1.0

    @property
    def flops_per_token(self) -> float:
        """Forward FLOPs this matrix costs per token (one multiply-add = 2 FLOPs)."""
        return 2.0 * self.in_dim * self.out_dim * self.per_token


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether layer ``index`` (0-based) carries routed experts (``ModelSpec.is_moe_layer``)."""
    return model.is_moe_layer(index)


def attention_matrices(model: ModelSpec) -> list[Matrix]:
    """Attention projections: fused QKV + output for MHA/GQA; down/up projections for MLA."""
    return list(_attention_matrices(model))


@per_model
def _attention_matrices(model: ModelSpec) -> tuple[Matrix, ...]:
    """:func:`attention_matrices`, memoised (the step model asks for every layer shape)."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.multi_latent_attention:
        qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        mats: list[Matrix] = []
        if model.q_lora_rank:
            mats.append(Matrix("q_down", h, model.q_lora_rank, "attn", "dup"))
            mats.append(Matrix("q_up", model.q_lora_rank, a * qk, "attn", "col"))
        else:
            mats.append(Matrix("q", h, a * qk, "attn", "col"))
        mats.append(
            Matrix("kv_down", h, model.kv_lora_rank + model.qk_pos_emb_head_dim, "attn", "dup")
        )
        mats.append(
            Matrix(
                "kv_up",
                model.kv_lora_rank,
                a * (model.qk_head_dim + model.v_head_dim),
                "attn",
                "col",
            )
        )
        mats.append(Matrix("proj", a * model.v_head_dim, h, "attn", "row"))
        return tuple(mats)
    d, g = model.head_dim, model.query_groups
    return (
        Matrix("qkv", h, (a + 2 * g) * d, "attn", "col"),
        Matrix("proj", a * d, h, "attn", "row"),
    )


def _mlp(
    prefix: str,
    h: int,
    f: int,
    gated: bool,
    block: Block,
    per_token: float = 1.0,
) -> list[Matrix]:
    up = 2 * f if gated else f
    col: Split = "col"
    row: Split = "row"
    return [
        Matrix(f"{prefix}fc1", h, up, block, col, per_token),
        Matrix(f"{prefix}fc2", f, h, block, row, per_token),
    ]


def mlp_matrices(model: ModelSpec, moe: bool) -> list[Matrix]:
    """The MLP of a dense layer, or router + routed experts (top-k) + shared experts."""
    return list(_mlp_matrices(model, moe))


@per_model
def _mlp_matrices(model: ModelSpec, moe: bool) -> tuple[Matrix, ...]:
    """:func:`mlp_matrices`, memoised (the step model asks for every layer shape)."""
    h, gated = model.hidden_size, model.gated_linear_unit
    if not moe:
        return tuple(_mlp("", h, model.ffn_hidden_size, gated, "mlp"))
    f = model.moe_ffn_hidden_size or model.ffn_hidden_size
    mats = [Matrix("router", h, model.num_experts, "router", "dup")]
    mats += _mlp("expert_", h, f, gated, "expert", float(model.moe_router_topk))
    if model.moe_shared_expert_intermediate_size:
        mats += _mlp("shared_", h, model.moe_shared_expert_intermediate_size, gated, "shared")
    return tuple(mats)


def layer_matrices(model: ModelSpec, index: int) -> list[Matrix]:
    """Every weight matrix of layer ``index`` (a hybrid's: of its kind alone)."""
    if model.is_hybrid:
        return list(kind_matrices(model, model.layer_kind(index)))
    return attention_matrices(model) + mlp_matrices(model, is_moe_layer(model, index))


@per_model
def mamba_matrices(model: ModelSpec) -> tuple[Matrix, ...]:
    """The Mamba-2 mixer's two GEMMs (``megatron/core/ssm/mamba_mixer.py``): ``in_proj``
    (column-parallel, ``h -> 2 d_inner + 2 G N + H``) and ``out_proj`` (row-parallel,
    ``d_inner -> h``)."""
    h = model.hidden_size
    return (
        Matrix("in_proj", h, model.mamba_in_proj_width, "mamba", "col"),
        Matrix("out_proj", model.mamba_d_inner, h, "mamba", "row"),
    )


@per_model
def kind_matrices(model: ModelSpec, kind: str) -> tuple[Matrix, ...]:
    """The weight matrices of one layer of ``kind`` (:meth:`ModelSpec.layer_kind`): a GPT's
    "dense" / "moe" layer is attention plus its MLP; a hybrid's layers hold one block each."""
    if kind == "mamba":
        return mamba_matrices(model)
    if kind == "attention":
        return _attention_matrices(model)
    if kind == "mlp":
        return _mlp_matrices(model, False)
    if model.is_hybrid:  # a hybrid's "moe" layer: router and experts alone
        return _mlp_matrices(model, True)
    return _attention_matrices(model) + _mlp_matrices(model, kind == "moe")


def logits_matrix(model: ModelSpec) -> Matrix:
    """The output layer (vocabulary projection), column-parallel over TP."""
    return Matrix("logits", model.hidden_size, model.vocab_size, "logits", "col")


def causal_keys(seq_len: float, window: int | None = None) -> float:
    """Keys a query attends on average under a causal mask: ``s / 2``, or with a sliding
    window ``w < s``: ``w - w^2 / (2 s)`` (the first ``w`` queries see fewer)."""
    if window and window < seq_len:
        return window - window * window / (2.0 * seq_len)
    return seq_len / 2.0


def attention_core_flops_per_token(
    model: ModelSpec, seq_len: int, causal: bool = True, window: int | None = None
) -> float:
    """Forward FLOPs of ``Q K^T`` and ``A V`` per token; causal masking counts as half, a
    sliding ``window`` (keys per query) caps the keys (:func:`causal_keys`), chunked attention
    attends within its chunk (:meth:`~parastrat.ModelSpec.attended_len`)."""
    a = model.num_attention_heads
    if model.multi_latent_attention:
        d_qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        d_v = model.v_head_dim
    else:
        d_qk = d_v = model.head_dim
    seq = model.attended_len(seq_len)  # chunked attention: causal within each chunk
    keys = causal_keys(seq, window) if causal else min(seq, window or seq)
    return 2.0 * a * (d_qk + d_v) * keys


def layer_attention_core_flops_per_token(model: ModelSpec, index: int, seq_len: int) -> float:
    """:func:`attention_core_flops_per_token` of layer ``index`` (windowed or full; 0 for a
    hybrid's layers without attention)."""
    if model.is_hybrid and model.layer_kind(index) != "attention":
        return 0.0
    window = model.sliding_window if model.is_window_layer(index) else None
    return attention_core_flops_per_token(model, seq_len, window=window)


def mean_attention_core_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """The attention core's forward FLOPs per token averaged over the layers (what one
    "typical" layer costs when windowed and full layers alternate)."""
    if model.is_hybrid:  # the attention layers' core (what one attention layer costs)
        return attention_core_flops_per_token(model, seq_len)
    if not model.sliding_window:
        return attention_core_flops_per_token(model, seq_len)
    n = model.num_layers
    return sum(layer_attention_core_flops_per_token(model, i, seq_len) for i in range(n)) / n


def layer_forward_flops_per_token(model: ModelSpec, index: int, seq_len: int) -> float:
    """Forward FLOPs per token of one layer (matrices + attention core; a Mamba layer's SSD
    scan, :func:`~parastrat.estimate.mamba.scan_flops_per_token`)."""
    mats = sum(m.flops_per_token for m in layer_matrices(model, index))
    if model.is_hybrid and model.layer_kind(index) == "mamba":
        return mats + scan_flops_per_token(model, seq_len)
    return mats + layer_attention_core_flops_per_token(model, index, seq_len)


def mtp_forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of the multi-token-prediction block (DeepSeek-V3 style).

    Each MTP depth projects ``[h; h] -> h``, runs one transformer layer (the kind of the last
    layer) and the shared output layer.
    """
    if not model.mtp_num_layers:
        return 0.0
    h = model.hidden_size
    one = (
        2.0 * 2 * h * h
        + layer_forward_flops_per_token(model, model.num_layers - 1, seq_len)
        + logits_matrix(model).flops_per_token
    )
    return model.mtp_num_layers * one


def forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of the whole model (layers, logits, MTP)."""
    layers = sum(layer_forward_flops_per_token(model, i, seq_len) for i in range(model.num_layers))
    return (
        layers + logits_matrix(model).flops_per_token + mtp_forward_flops_per_token(model, seq_len)
    )


@per_model
def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training model FLOPs per token: 3 x forward (the MFU convention in the module doc); a
    hybrid model's by Megatron Bridge's own formula
    (:func:`~parastrat.estimate.mamba.bridge_flops_per_token`), so that its TFLOPs mean what
    NVIDIA's published hybrid figures mean."""
    if model.is_hybrid:
        return bridge_flops_per_token(model, seq_len)
    return 3.0 * forward_flops_per_token(model, seq_len)


def recompute_flops_per_token(model: ModelSpec, seq_len: int, recompute: str) -> float:
    """Extra forward FLOPs per token that recomputation adds (hardware minus model FLOPs).

    ``none``: 0.  ``selective`` (Megatron's core-attention recompute): the attention core's
    forward again.  ``full``: every layer's forward again (not the logits).
    """
    mode = normalize_recompute(recompute)
    if mode == "none":
        return 0.0
    if mode == "selective":
        return sum(
            layer_attention_core_flops_per_token(model, i, seq_len) for i in range(model.num_layers)
        )
    return sum(layer_forward_flops_per_token(model, i, seq_len) for i in range(model.num_layers))
