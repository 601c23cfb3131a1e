"""ModelSpec: the shape of a transformer, everything the rules and cost models need.

Field names follow Megatron Core's ``TransformerConfig`` where one exists, so adapters and
readers of Megatron configs map them one to one.  Only the first six fields are required; the
rest default to a plain GPT (multi-head attention, 4h GELU MLP, learned positions, tied
embeddings, dense).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer (dense, MoE, GQA/MQA, MLA, MTP)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    #: KV heads (GQA/MQA); None means multi-head attention (= num_attention_heads).
    num_query_groups: int | None = None
    #: Per-head dimension; None means hidden_size // num_attention_heads.
    kv_channels: int | None = None
    #: SwiGLU/GeGLU-style MLP with three matrices instead of two.
    gated_linear_unit: bool = False
    #: Input embedding and output layer share one matrix.
    tied_embeddings: bool = True
    #: "learned", "rope" or "none".
    position_embedding_type: str = "learned"
    #: Longest sequence the model was built for (learned positions add this many rows).
    max_position_embeddings: int = 4096
    #: Megatron pads the vocabulary to a multiple of this (times TP).
    make_vocab_size_divisible_by: int = 128
    #: Linear layers carry a bias (GPT-3 style); Llama-style models have none.
    add_bias_linear: bool = False
    #: "layernorm" (weight + bias) or "rmsnorm" (weight only).
    normalization: str = "layernorm"
    # --- mixture of experts -------------------------------------------------------------
    #: Routed experts per MoE layer; None (or 0) for a dense model.
    num_moe_experts: int | None = None
    #: Experts each token is routed to.
    moe_router_topk: int = 2
    #: FFN hidden size of one routed expert; None means ffn_hidden_size.
    moe_ffn_hidden_size: int | None = None
    #: Total FFN hidden size of the shared experts (0 when none).
    moe_shared_expert_intermediate_size: int = 0
    #: Leading layers that are dense (DeepSeek's first_k_dense_replace).
    moe_first_dense_layers: int = 0
    #: Every n-th layer (after the dense ones) is MoE; 1 means all of them.
    moe_layer_freq: int = 1
    # --- multi-head latent attention (DeepSeek-V2/V3, Kimi K2) -------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # --- multi-token prediction -------------------------------------------------------------
    mtp_num_layers: int = 0
    #: Free-form provenance (paper, model card, config.json).
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    # ---- derived shape -------------------------------------------------------------------
    @property
    def query_groups(self) -> int:
        """KV heads: num_query_groups, or the number of attention heads for MHA."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return bool(self.num_moe_experts)

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense model)."""
        return self.num_moe_experts or 0

    @property
    def num_moe_layers(self) -> int:
        """How many of the layers carry routed experts."""
        if not self.is_moe:
            return 0
        rest = range(self.moe_first_dense_layers, self.num_layers)
        return sum(1 for i in rest if (i - self.moe_first_dense_layers) % self.moe_layer_freq == 0)

    def with_(self, **changes: Any) -> "ModelSpec":
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
