"""ModelSpec: the shape of a transformer, everything the rules and cost models need.

Field names follow Megatron Core's ``TransformerConfig`` where one exists, so adapters and
readers of Megatron configs map them one to one.  Only the first six fields are required; the
rest default to a plain GPT (multi-head attention, 4h GELU MLP, learned positions, tied
embeddings, dense).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ..checks import is_count
from ..errors import SpecError
from .hf import spec_from_hf_config

#: Upper bounds on a model's shape: far above any model built so far (largest known: 126
#: layers, hidden 25,600, 128 heads, FFN 53,248, vocabulary 262,144, 10M positions, 384
#: experts), low enough that an absurd config (10^9 layers) is refused at once instead of
#: costing minutes and gigabytes before it fails (docs/troubleshooting.md, "Bounds").
MODEL_BOUNDS: dict[str, int] = {
    "num_layers": 4096,
    "hidden_size": 2**18,
    "num_attention_heads": 2**14,
    "ffn_hidden_size": 2**20,
    "vocab_size": 2**24,
    "max_position_embeddings": 2**30,
    "attention_chunk_size": 2**30,
    "num_query_groups": 2**14,
    "kv_channels": 2**14,
    "num_moe_experts": 2**16,
    "moe_ffn_hidden_size": 2**20,
    "moe_shared_expert_intermediate_size": 2**22,
    "moe_router_topk": 2**16,
    "mtp_num_layers": 4096,
    "moe_first_dense_layers": 4096,
    "q_lora_rank": 2**18,
    "kv_lora_rank": 2**18,
    "qk_head_dim": 2**14,
    "qk_pos_emb_head_dim": 2**14,
    "v_head_dim": 2**14,
}

POSITION_EMBEDDINGS = ("learned", "rope", "none")
NORMALIZATIONS = ("layernorm", "rmsnorm")
#: Attention softmax variants (Megatron Core ``TransformerConfig.softmax_type``).
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
#: MLP activations a model may name (``ModelSpec.activation``).  Megatron Core fuses GELU and
#: (gated) SiLU with the FC1 bias (``bias_activation_fusion``); any other runs eagerly.
ACTIVATIONS = ("gelu", "silu", "quick_gelu", "squared_relu")
#: Activations Megatron Core 0.16 runs as eager PyTorch operations: ``MLP.forward`` fuses only
#: GELU and SwiGLU ("Only support fusion of gelu and swiglu"), and ``squared_relu`` is
#: ``torch.pow(F.relu(x), 2)`` (``megatron/core/activations.py``), so Nemotron-4 runs it
#: with bias-activation fusion off.
EAGER_ACTIVATIONS = ("squared_relu",)
#: Layer symbols of a hybrid model's ``hybrid_override_pattern`` (Megatron Core
#: ``megatron/core/ssm/mamba_hybrid_layer_allocation.py`` ``Symbols``): Mamba-2 mixer,
#: self-attention, MLP, MoE.
HYBRID_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
#: Kernel width of the Mamba-2 mixer's causal depthwise convolution (``MambaMixer`` ``d_conv``).
MAMBA_CONV_KERNEL = 4


def mamba_heads(hidden_size: int, head_dim: int, num_heads: int | None = None) -> int:
    """Heads of a Mamba-2 mixer as ``MambaMixer`` sizes it: ``num_heads``, else its
    ``d_inner = expand * hidden_size`` (expand 2) over ``head_dim``."""
    return num_heads or 2 * hidden_size // head_dim


def mamba_in_proj_width(heads: int, head_dim: int, groups: int, state_dim: int) -> int:
    """Output width of the mixer's input projection: z, x, B, C and dt
    (``2 d_inner + 2 groups N + heads``, ``MambaMixer``'s ``in_proj``)."""
    return 2 * heads * head_dim + 2 * groups * state_dim + heads


class HybridShape:
    """The hybrid (Mamba) shape derived from a model's fields, for :class:`ModelSpec` and for
    the adapter's view of a Megatron config (one definition of each): the fields
    ``hybrid_override_pattern``, ``hidden_size`` and ``mamba_*`` come from the subclass."""

    hybrid_override_pattern: str | None
    hidden_size: int | None
    mamba_num_heads: int | None
    mamba_head_dim: int
    mamba_num_groups: int
    mamba_state_dim: int

    @property
    def is_hybrid(self) -> bool:
        """True for a hybrid model (``hybrid_override_pattern`` set: Mamba, attention, MLP and
        MoE layers as separate sub-blocks)."""
        return self.hybrid_override_pattern is not None

    @property
    def mamba_heads(self) -> int:
        """Mamba-2 heads: ``mamba_num_heads``, else ``2 * hidden_size / mamba_head_dim``."""
        return mamba_heads(self.hidden_size or 0, self.mamba_head_dim, self.mamba_num_heads)

    @property
    def mamba_d_inner(self) -> int:
        """The Mamba-2 mixer's inner width: heads x head dimension."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_in_proj_width(self) -> int:
        """Output width of the mixer's input projection (:func:`mamba_in_proj_width`)."""
        return mamba_in_proj_width(
            self.mamba_heads, self.mamba_head_dim, self.mamba_num_groups, self.mamba_state_dim
        )


#: ``ModelSpec`` fields that must be whole numbers >= 1.
_POSITIVE_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "vocab_size",
    "max_position_embeddings",
    "make_vocab_size_divisible_by",
    "moe_router_topk",
    "moe_layer_freq",
)
#: ``ModelSpec`` fields that are None or whole numbers >= 1.
_OPTIONAL_POSITIVE_FIELDS = (
    "num_query_groups",
    "kv_channels",
    "num_moe_experts",
    "moe_ffn_hidden_size",
    "q_lora_rank",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "sliding_window",
    "window_attn_skip_freq",
    "attention_chunk_size",
)
#: ``ModelSpec`` fields that are whole numbers >= 0.
_NON_NEGATIVE_FIELDS = (
    "moe_shared_expert_intermediate_size",
    "moe_first_dense_layers",
    "mtp_num_layers",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
)


@dataclass(frozen=True)
class ModelSpec(HybridShape):
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
    #: Clamp of the gated activation's inputs (GPT-OSS ``swiglu_limit``; Megatron's
    #: ``activation_func_clamp_value``, which Megatron Bridge's GPT-OSS provider sets to 7.0);
    #: None: no clamp.
    activation_clamp: float | None = None
    #: The MLP activation (:data:`ACTIVATIONS`); None: Megatron's fused default, GELU or, with
    #: a gated MLP, SwiGLU.  Nemotron-4's squared ReLU runs eagerly (:data:`EAGER_ACTIVATIONS`).
    activation: str | None = None
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
    #: Q/K/V projections carry a bias even when other linears do not (Qwen2, GPT-OSS).
    add_qkv_bias: bool = False
    #: Per-head RMSNorm on queries and keys (Qwen3, OLMoE).
    qk_layernorm: bool = False
    #: Dropout after attention and MLP (Megatron's default GPT: 0.1; Llama-style recipes: 0).
    #: A non-zero value makes training keep a 1-byte mask per element (memory model).
    hidden_dropout: float = 0.1
    #: Dropout on attention probabilities (only materialised without flash attention).
    attention_dropout: float = 0.1
    #: "layernorm" (weight + bias) or "rmsnorm" (weight only).
    normalization: str = "layernorm"
    #: Sliding-window attention: the keys a query sees, itself included (HF ``sliding_window``;
    #: Megatron's ``window_size = (sliding_window - 1, 0)``).  None: full attention.
    sliding_window: int | None = None
    #: With a window, every n-th layer (1-based) keeps full attention (Megatron's
    #: ``window_attn_skip_freq``; GPT-OSS: 2, alternating).  None: every layer is windowed.
    window_attn_skip_freq: int | None = None
    #: Attention softmax (Megatron's ``softmax_type``): "vanilla", or "off-by-one" / "learnable"
    #: for attention sinks (GPT-OSS: a learned per-head logit in every softmax denominator).
    softmax_type: str = "vanilla"
    #: Chunked attention (Megatron Bridge's Llama 4 ``attention_chunk_size``, HF
    #: ``attention_chunk_size``): a sequence longer than this is cut into chunks of this many
    #: tokens and each chunk attends causally within itself (Bridge's ``Llama4SelfAttention``
    #: chunks every layer).  None: no chunking.
    attention_chunk_size: int | None = None
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
    #: Group-limited routing (DeepSeek's ``n_group`` / ``topk_group``, Megatron's
    #: ``moe_router_num_groups`` / ``moe_router_group_topk``): the experts form this many equal
    #: contiguous groups and a token's experts come from at most ``moe_router_group_topk`` of
    #: them.  None: no limit.
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    # --- multi-head latent attention (DeepSeek-V2/V3, Kimi K2) -------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # --- multi-token prediction -------------------------------------------------------------
    mtp_num_layers: int = 0
    #: Hybrid (Mamba) models, as Megatron Core's ``MambaModel`` builds them: one symbol per
    #: layer (:data:`HYBRID_SYMBOLS`: ``M`` a Mamba-2 mixer, ``*`` self-attention, ``-`` an MLP,
    #: ``E`` an MoE), each layer one pre-normed sub-block.  None: every layer is attention
    #: followed by an MLP or MoE (a GPT).
    hybrid_override_pattern: str | None = None
    #: Mamba-2 mixer shape (``TransformerConfig`` names and defaults): SSM state size N, head
    #: dimension P, B/C groups, and heads (None: ``2 * hidden_size / mamba_head_dim``, the
    #: mixer's ``expand=2``).
    mamba_state_dim: int = 128
    mamba_head_dim: int = 64
    mamba_num_groups: int = 8
    mamba_num_heads: int | None = None
    #: Free-form provenance (paper, model card, config.json).
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    # ---- derived shape -------------------------------------------------------------------
    @property
    def query_groups(self) -> int:
        """KV heads: num_query_groups, or the number of attention heads for MHA."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def eager_activation(self) -> bool:
        """Whether the MLP activation runs as eager PyTorch operations (not fused with the FC1
        bias by Megatron Core: :data:`EAGER_ACTIVATIONS`)."""
        return self.activation in EAGER_ACTIVATIONS

    @property
    def head_dim(self) -> int:
        """Per-head dimension: ``kv_channels``, or hidden_size // num_attention_heads when unset."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts (``num_moe_experts`` set)."""
        return bool(self.num_moe_experts)

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense model)."""
        return self.num_moe_experts or 0

    def attended_len(self, seq_len: int) -> int:
        """The sequence length one causal attention runs over: ``seq_len``, or with chunked
        attention the chunk (a longer sequence is a batch of chunks)."""
        chunk = self.attention_chunk_size
        return min(seq_len, chunk) if chunk else seq_len

    def is_window_layer(self, index: int) -> bool:
        """True when layer ``index`` (0-based) uses sliding-window attention (Megatron's
        ``is_layer_window_attention`` rule: 1-based layer numbers divisible by
        ``window_attn_skip_freq`` keep full attention)."""
        if not self.sliding_window:
            return False
        freq = self.window_attn_skip_freq
        return not freq or (index + 1) % freq != 0

    @property
    def num_window_layers(self) -> int:
        """How many layers use sliding-window attention."""
        return sum(1 for i in range(self.num_layers) if self.is_window_layer(i))

    # ---- hybrid (Mamba) models ------------------------------------------------------------
    def layer_kind(self, index: int) -> str:
        """What layer ``index`` (0-based) is: for a hybrid model the pattern's kind
        (:data:`HYBRID_SYMBOLS` values: "mamba", "attention", "mlp", "moe"); for a GPT
        "moe" (attention + routed experts) or "dense" (attention + MLP)."""
        if self.hybrid_override_pattern is not None:
            return HYBRID_SYMBOLS[self.hybrid_override_pattern[index]]
        return "moe" if self.is_moe_layer(index) else "dense"

    def layer_count(self, kind: str) -> int:
        """How many layers are of ``kind`` (:meth:`layer_kind`)."""
        return sum(1 for i in range(self.num_layers) if self.layer_kind(i) == kind)

    @property
    def num_moe_layers(self) -> int:
        """How many of the layers carry routed experts."""
        if not self.is_moe:
            return 0
        if self.hybrid_override_pattern is not None:
            return self.hybrid_override_pattern.count("E")
        rest = range(self.moe_first_dense_layers, self.num_layers)
        return sum(1 for i in rest if (i - self.moe_first_dense_layers) % self.moe_layer_freq == 0)

    # ---- validation --------------------------------------------------------------------
    def __post_init__(self) -> None:
        """Reject shapes no framework could build, naming the field and the numbers."""

        def bad(fieldname: str, why: str) -> SpecError:
            return SpecError(f"model {self.name!r}: {fieldname} {why}")

        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"model name must be a non-empty string, got {self.name!r}")
        self._check_counts(bad)
        self._check_attention(bad)
        self._check_choices(bad)
        if self.num_moe_experts:
            if self.moe_router_topk > self.num_moe_experts:
                raise bad(
                    "moe_router_topk",
                    f"{self.moe_router_topk} exceeds num_moe_experts={self.num_moe_experts}",
                )
            self._check_router_groups(bad)
            if self.moe_first_dense_layers >= self.num_layers:
                raise bad(
                    "moe_first_dense_layers",
                    f"{self.moe_first_dense_layers} leaves no "
                    f"MoE layer among num_layers={self.num_layers}",
                )
        self._check_hybrid(bad)
        if self.multi_latent_attention and not (
            self.kv_lora_rank and self.qk_head_dim and self.v_head_dim
        ):
            raise bad(
                "kv_lora_rank",
                "multi-latent attention needs kv_lora_rank, qk_head_dim and v_head_dim >= 1",
            )

    def _check_counts(self, bad: Any) -> None:
        """Sizes and counts are whole numbers in range (:data:`MODEL_BOUNDS` above)."""
        for f in _POSITIVE_FIELDS:
            v = getattr(self, f)
            if not is_count(v):
                raise bad(f, f"must be a whole number >= 1, got {v!r}")
        for f in _OPTIONAL_POSITIVE_FIELDS:
            v = getattr(self, f)
            if v is not None and not is_count(v, 0):
                raise bad(f, f"must be None or a whole number >= 1, got {v!r}")
        for f in _NON_NEGATIVE_FIELDS:
            v = getattr(self, f)
            if not is_count(v, 0):
                raise bad(f, f"must be a whole number >= 0, got {v!r}")
        for f, top in MODEL_BOUNDS.items():
            v = getattr(self, f)
            if v is not None and v > top:
                raise bad(
                    f,
                    f"{v:,} is above {top:,}, parastrat's bound for it (no model built so far "
                    "comes near; see 'Bounds' in docs/troubleshooting.md)",
                )

    def _check_attention(self, bad: Any) -> None:
        """The head dimension follows from the sizes, query groups divide the heads."""
        h, a = self.hidden_size, self.num_attention_heads
        if not self.kv_channels and not self.multi_latent_attention and h % a:
            raise bad(
                "hidden_size",
                f"{h} is not divisible by num_attention_heads={a}; set "
                "kv_channels (the head dimension) explicitly",
            )
        g = self.num_query_groups
        if g and (g > a or a % g):
            raise bad("num_query_groups", f"{g} must divide num_attention_heads={a}")

    def _check_choices(self, bad: Any) -> None:
        """Dropouts are probabilities; named choices are among the known ones."""
        for f in ("hidden_dropout", "attention_dropout"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1:
                raise bad(f, f"must be a probability in [0, 1), got {v!r}")
        if self.position_embedding_type not in POSITION_EMBEDDINGS:
            raise bad(
                "position_embedding_type",
                f"{self.position_embedding_type!r} is not one of {POSITION_EMBEDDINGS}",
            )
        if self.normalization not in NORMALIZATIONS:
            raise bad("normalization", f"{self.normalization!r} is not one of {NORMALIZATIONS}")
        if self.softmax_type not in SOFTMAX_TYPES:
            raise bad("softmax_type", f"{self.softmax_type!r} is not one of {SOFTMAX_TYPES}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise bad("activation", f"{self.activation!r} is not one of {ACTIVATIONS} (or None)")

    def _check_hybrid(self, bad: Any) -> None:
        """A hybrid pattern must name every layer with Megatron's symbols, route its ``E``
        layers to experts, and give the Mamba mixer a shape ``MambaMixer`` accepts."""
        pattern = self.hybrid_override_pattern
        for f in ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups"):
            if not is_count(getattr(self, f)):
                raise bad(f, f"must be a whole number >= 1, got {getattr(self, f)!r}")
        if self.mamba_num_heads is not None and not is_count(self.mamba_num_heads):
            raise bad("mamba_num_heads", f"must be None or >= 1, got {self.mamba_num_heads!r}")
        if pattern is None:
            return
        if not isinstance(pattern, str) or len(pattern) != self.num_layers:
            got = len(pattern) if isinstance(pattern, str) else repr(pattern)
            raise bad(
                "hybrid_override_pattern",
                f"must hold one symbol per layer: {got} symbols for num_layers={self.num_layers}",
            )
        odd = sorted(set(pattern) - set(HYBRID_SYMBOLS))
        if odd:
            raise bad(
                "hybrid_override_pattern",
                f"has {odd}; the symbols are {''.join(HYBRID_SYMBOLS)} (Mamba, attention, "
                "MLP, MoE)",
            )
        if "E" in pattern and not self.num_moe_experts:
            raise bad("hybrid_override_pattern", "has MoE layers (E) but num_moe_experts is unset")
        if self.num_moe_experts and "E" not in pattern:
            raise bad("num_moe_experts", "is set but the hybrid pattern has no MoE layer (E)")
        if "M" in pattern:
            heads = self.mamba_heads
            if self.mamba_num_heads is None and (2 * self.hidden_size) % self.mamba_head_dim:
                raise bad(
                    "mamba_head_dim",
                    f"{self.mamba_head_dim} must divide 2 x hidden_size = {2 * self.hidden_size}"
                    " (or set mamba_num_heads)",
                )
            if heads % self.mamba_num_groups:
                raise bad(
                    "mamba_num_groups",
                    f"{self.mamba_num_groups} must divide the {heads} Mamba heads",
                )

    def _check_router_groups(self, bad: Any) -> None:
        """Group-limited routing must split the experts evenly and leave room for top-k."""
        groups, pick = self.moe_router_num_groups, self.moe_router_group_topk
        if not groups and not pick:
            return
        if not groups or not pick:
            raise bad(
                "moe_router_num_groups",
                "and moe_router_group_topk go together (set both, or neither)",
            )
        experts = self.num_experts
        if experts % groups:
            raise bad("moe_router_num_groups", f"{groups} must divide num_moe_experts={experts}")
        if pick > groups:
            raise bad("moe_router_group_topk", f"{pick} exceeds moe_router_num_groups={groups}")
        if self.moe_router_topk > pick * (experts // groups):
            raise bad(
                "moe_router_topk",
                f"{self.moe_router_topk} exceeds the {pick} x {experts // groups} experts "
                "that group-limited routing leaves",
            )

    # ---- parameter counts ----------------------------------------------------------------
    @cached_property
    def param_breakdown(self) -> dict[str, float]:
        """Parameters by kind, computed once per spec from the shape.

        Keys: ``embedding`` (V h, plus learned positions), ``output`` (V h when untied, else 0),
        ``final_norm``; per *one* layer: ``attention`` (projections, biases, QK norms; of which
        ``attention_replicated`` are not split by TP: MLA down-projections, QK norms),
        ``layer_norms`` (the two pre-norms), ``dense_mlp`` (a dense layer's MLP), ``expert``
        (one routed expert), ``shared_expert`` (all shared experts), ``router``; ``mtp`` (all
        multi-token-prediction modules, sharing the embedding and output layer).  Counts use the
        real vocabulary (padding is a memory matter, see :meth:`padded_vocab_size`).
        """
        h = self.hidden_size
        attention, replicated = self._attention_params()
        norm = 2 * h if self.normalization == "layernorm" else h
        learned = self.position_embedding_type == "learned"
        out: dict[str, float] = {
            "embedding": self.vocab_size * h + (self.max_position_embeddings * h if learned else 0),
            "output": 0 if self.tied_embeddings else self.vocab_size * h,
            "final_norm": norm,
            "attention": attention,
            "attention_replicated": replicated,
            # a hybrid model: one pre-norm per sub-block (fused into its first linear layer)
            "layer_norms": norm if self.is_hybrid else 2 * norm,
            "dense_mlp": self._mlp_params(self.ffn_hidden_size),
            "expert": self._mlp_params(self.moe_ffn_hidden_size or self.ffn_hidden_size)
            if self.is_moe
            else 0,
            "shared_expert": self._mlp_matrices * h * self.moe_shared_expert_intermediate_size
            if self.is_moe
            else 0,
            "router": h * self.num_experts,
            "mamba": self._mamba_params(),
        }
        if self.is_moe:
            ffn = self.num_experts * out["expert"] + out["shared_expert"] + out["router"]
        else:
            ffn = out["dense_mlp"]
        layer = attention + 2 * norm + ffn
        # DeepSeek MTP module: enorm + hnorm, eh_proj (2h -> h), one transformer layer, a norm.
        out["mtp"] = self.mtp_num_layers * (2 * norm + 2 * h * h + layer + norm)
        return {k: float(v) for k, v in out.items()}

    def _attention_params(self) -> tuple[int, int]:
        """One layer's attention parameters (projections, biases, QK norms) and, of those,
        the ones TP does not split (MLA down-projections and their norms, QK norms)."""
        h, a, g, d = self.hidden_size, self.num_attention_heads, self.query_groups, self.head_dim
        if self.multi_latent_attention:
            attention, replicated = self._mla_params()
        else:
            replicated = 2 * d if self.qk_layernorm else 0
            attention = h * a * d + 2 * h * g * d + a * d * h
            if self.add_bias_linear or self.add_qkv_bias:
                attention += a * d + 2 * g * d
            if self.qk_layernorm:
                attention += 2 * d
        if self.add_bias_linear:
            attention += h
        return attention, replicated

    def _mla_params(self) -> tuple[int, int]:
        """Multi-latent attention's parameters (without the output bias) and the ones TP
        does not split: Megatron's MLA keeps the down-projections and their norms whole."""
        h, a = self.hidden_size, self.num_attention_heads
        qk = self.qk_head_dim + self.qk_pos_emb_head_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk
        else:
            q = h * a * qk
        kv = (
            h * (self.kv_lora_rank + self.qk_pos_emb_head_dim)
            + self.kv_lora_rank
            + self.kv_lora_rank * a * (self.qk_head_dim + self.v_head_dim)
        )
        replicated = (
            h * (self.q_lora_rank or 0)
            + (self.q_lora_rank or 0)
            + h * (self.kv_lora_rank + self.qk_pos_emb_head_dim)
            + self.kv_lora_rank
        )
        return q + kv + a * self.v_head_dim * h, replicated

    @property
    def _mlp_matrices(self) -> int:
        """Weight matrices of one MLP: three with a gated linear unit, else two."""
        return 3 if self.gated_linear_unit else 2

    def _mlp_params(self, ffn: int) -> int:
        """One MLP of hidden width ``ffn``: its matrices, and their biases with
        ``add_bias_linear``."""
        mats, h = self._mlp_matrices, self.hidden_size
        return mats * h * ffn + ((mats - 1) * ffn + h if self.add_bias_linear else 0)

    def _mamba_params(self) -> int:
        """One Mamba-2 mixer (``MambaMixer``): input projection (z, x, B, C, dt), the depthwise
        causal convolution over x, B, C with its bias, ``dt_bias``, ``A_log`` and ``D`` per head,
        the gated RMSNorm over ``d_inner`` and the output projection; 0 without Mamba layers."""
        if not self.is_hybrid or "M" not in (self.hybrid_override_pattern or ""):
            return 0
        h, inner = self.hidden_size, self.mamba_d_inner
        conv = inner + 2 * self.mamba_num_groups * self.mamba_state_dim
        return (
            h * self.mamba_in_proj_width
            + conv * (MAMBA_CONV_KERNEL + 1)
            + 3 * self.mamba_heads
            + inner
            + inner * h
        )

    def kind_params(self, kind: str) -> float:
        """Parameters of one layer of ``kind`` (:meth:`layer_kind`), its norms included."""
        p = self.param_breakdown
        routed = self.num_experts * p["expert"] + p["shared_expert"] + p["router"]
        body = {
            "dense": p["attention"] + p["dense_mlp"],
            "mamba": p["mamba"],
            "attention": p["attention"],
            "mlp": p["dense_mlp"],
            "moe": routed + (0.0 if self.is_hybrid else p["attention"]),
        }[kind]
        return body + p["layer_norms"]

    @cached_property
    def num_params(self) -> int:
        """Total parameters of the main model (embedding, layers, output), as papers count.

        Multi-token-prediction modules are left out (DeepSeek-V3 publishes 671B without its
        14B MTP module); :attr:`num_mtp_params` has them.
        """
        p = self.param_breakdown
        if self.is_hybrid:
            ends = p["embedding"] + p["output"] + p["final_norm"]
            kinds = (self.layer_kind(i) for i in range(self.num_layers))
            return int(round(ends + sum(self.kind_params(k) for k in kinds)))
        dense_layers = self.num_layers - self.num_moe_layers
        per_common = p["attention"] + p["layer_norms"]
        total = (
            p["embedding"]
            + p["output"]
            + p["final_norm"]
            + self.num_layers * per_common
            + dense_layers * p["dense_mlp"]
            + self.num_moe_layers
            * (self.num_experts * p["expert"] + p["shared_expert"] + p["router"])
        )
        return int(round(total))

    @cached_property
    def num_active_params(self) -> int:
        """Parameters one token passes through: the routed top-k experts instead of all.

        Counts the input embedding and output layer (Mixtral's and DeepSeek's convention);
        equals :attr:`num_params` for a dense model.
        """
        if not self.is_moe:
            return self.num_params
        p = self.param_breakdown
        inactive = self.num_moe_layers * (self.num_experts - self.moe_router_topk) * p["expert"]
        return int(round(self.num_params - inactive))

    @property
    def num_mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (0 without MTP)."""
        return int(self.param_breakdown["mtp"])

    def padded_vocab_size(self, tp: int = 1) -> int:
        """Vocabulary rows Megatron allocates: rounded up to make_vocab_size_divisible_by * tp."""
        mult = self.make_vocab_size_divisible_by * max(1, tp)
        return -(-self.vocab_size // mult) * mult

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) carries routed experts."""
        if self.hybrid_override_pattern is not None:
            return self.is_moe and self.hybrid_override_pattern[index] == "E"
        if not self.is_moe or index < self.moe_first_dense_layers:
            return False
        return (index - self.moe_first_dense_layers) % self.moe_layer_freq == 0

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def from_hf_config(
        cls, path: str | Path | dict[str, Any], *, name: str | None = None
    ) -> ModelSpec:
        """Read a local Hugging Face ``config.json`` (a file, its folder, or the parsed dict).

        Never touches the network.  Llama, Mistral/Mixtral, Qwen2/3, Qwen3-MoE, DeepSeek-V2/V3
        (and Kimi K2), GPT-OSS, OLMoE, Llama 4, Nemotron and the hybrid Nemotron-H / Nemotron
        Nano v2 / Nemotron 3 Nano configs are understood; a missing or
        nonsensical field raises :class:`~parastrat.errors.SpecError` naming it.
        """
        return spec_from_hf_config(path, name=name, spec_type=cls)

    def with_(self, **changes: Any) -> ModelSpec:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``extra`` as a JSON-ready dict; ``ModelSpec(**d)`` rebuilds the spec."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}

    def __getstate__(self) -> dict[str, Any]:
        # Leave the cached counts out of pickles (they are recomputed on demand).
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
