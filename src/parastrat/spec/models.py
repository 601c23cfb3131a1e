"""Model presets: the shapes of published LLMs, each from its paper, model card or config.json.

``parastrat.models.get("llama3-70b")`` returns a :class:`~parastrat.ModelSpec` (a DiT preset's
name, its :class:`~parastrat.DiTSpec`: one place to look a model up); an unknown name raises
:class:`~parastrat.errors.SpecError` listing the known ones, with "did you mean".
``register(spec)`` adds a user's own model under ``spec.name``.

The shapes are the released checkpoints' ``config.json`` values (field names translated to
Megatron's); ``tests/test_models.py`` pins each preset's parameter count against the total and
active counts its authors published.
"""

from __future__ import annotations

from ..errors import SpecError
from .dit import DiTSpec
from .model import ModelSpec

_PRESETS: dict[str, ModelSpec] = {}


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def register(spec: ModelSpec, *aliases: str) -> ModelSpec:
    """Add (or replace) a preset under ``spec.name`` (and any ``aliases``); returns it."""
    if not isinstance(spec, ModelSpec):
        raise SpecError(f"register() takes a ModelSpec, got {type(spec).__name__}")
    for key in (spec.name, *aliases):
        _PRESETS[_norm(key)] = spec
    return spec


def is_preset(name: str) -> bool:
    """Whether ``name`` (case-insensitive, aliases too) is a registered language-model preset."""
    return _norm(name) in _PRESETS


def names() -> list[str]:
    """Names of the registered presets (aliases not repeated)."""
    seen: dict[str, None] = {}
    for spec in _PRESETS.values():
        seen.setdefault(spec.name, None)
    return list(seen)


def get(name: str | ModelSpec | DiTSpec) -> ModelSpec | DiTSpec:
    """The preset called ``name`` (case-insensitive), a language model's or a diffusion
    transformer's: one place to look a model up (a spec passes through unchanged).  Where a
    language model is needed (training: ``plan``, ``Workload``), :func:`get_llm` says where
    a DiT name belongs instead."""
    from . import dit

    if isinstance(name, DiTSpec):
        return name
    if isinstance(name, str) and _norm(name) not in _PRESETS and _norm(name) in dit.names():
        return dit.get(_norm(name))
    return get_llm(name)


def get_llm(name: str | ModelSpec) -> ModelSpec:
    """The language-model preset called ``name`` (case-insensitive); a ModelSpec passes
    through unchanged; a DiT preset's name is refused with where it belongs."""
    if isinstance(name, ModelSpec):
        return name
    try:
        return _PRESETS[_norm(name)]
    except KeyError:
        pass
    import difflib

    from . import dit

    key = _norm(name)
    if key in dit.names():
        raise SpecError(
            f"{name!r} is a diffusion-transformer (DiT) preset, not a language model: use "
            f"parastrat.spec.dit.get({key!r}) / parastrat.plan_dit, or `parastrat plan-dit "
            f"--model {key}`"
        )
    near = difflib.get_close_matches(key, names() + dit.names(), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise SpecError(
        f"unknown model {name!r}{hint}; for a Hugging Face config.json pass its path (or "
        f"ModelSpec.from_hf_config(path)); presets: {', '.join(names())}; DiT presets "
        f"(plan-dit): {', '.join(dit.names())}"
    )


def _nodrop(**fields: object) -> ModelSpec:
    """A ModelSpec with dropout off, as modern pretraining recipes (and these models) run."""
    fields.setdefault("hidden_dropout", 0.0)
    fields.setdefault("attention_dropout", 0.0)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    groups: int,
    ffn: int,
    vocab: int,
    *,
    tied: bool = False,
    head_dim: int | None = None,
    max_pos: int = 8192,
    source: str,
) -> ModelSpec:
    """A Llama-style model: RoPE, RMSNorm, SwiGLU, GQA, no biases."""
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        gated_linear_unit=True,
        tied_embeddings=tied,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=max_pos,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        source=source,
    )


# ---- Llama 3 -----------------------------------------------------------------------------
# meta-llama/Llama-3.2-1B config.json; 1.24B parameters (model card), tied embeddings.
register(
    _llama(
        "llama3.2-1b",
        16,
        2048,
        32,
        8,
        8192,
        128256,
        tied=True,
        max_pos=131072,
        source="meta-llama/Llama-3.2-1B config.json; model card: 1.24B",
    ),
    "llama-3.2-1b",
)
# meta-llama/Meta-Llama-3-8B config.json; Llama 3 paper (Dubey et al. 2024) Table 3: 8B.
register(
    _llama(
        "llama3-8b",
        32,
        4096,
        32,
        8,
        14336,
        128256,
        source="meta-llama/Meta-Llama-3-8B config.json; 8.03B",
    ),
    "llama-3-8b",
    "llama3.1-8b",
)
# meta-llama/Meta-Llama-3-70B config.json; 70.6B.
register(
    _llama(
        "llama3-70b",
        80,
        8192,
        64,
        8,
        28672,
        128256,
        source="meta-llama/Meta-Llama-3-70B config.json; 70.6B",
    ),
    "llama-3-70b",
    "llama3.1-70b",
)
# meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3 (126 layers, 16384, 53248 FFN).
register(
    _llama(
        "llama3.1-405b",
        126,
        16384,
        128,
        8,
        53248,
        128256,
        max_pos=131072,
        source="meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3; 405B",
    ),
    "llama-3.1-405b",
    "llama3-405b",
)

# ---- Qwen 3 (dense: QK-norm, head_dim 128, untied above 4B) ------------------------------
# Qwen/Qwen3-8B config.json; Qwen3 technical report Table 1: 8.2B.
register(
    _nodrop(
        name="qwen3-8b",
        num_layers=36,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        ffn_hidden_size=12288,
        vocab_size=151936,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=40960,
        qk_layernorm=True,
        source="Qwen/Qwen3-8B config.json; Qwen3 tech report: 8.2B",
    )
)
# Qwen/Qwen3-32B config.json; 32.8B.
register(
    _nodrop(
        name="qwen3-32b",
        num_layers=64,
        hidden_size=5120,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=128,
        ffn_hidden_size=25600,
        vocab_size=151936,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=40960,
        qk_layernorm=True,
        source="Qwen/Qwen3-32B config.json; 32.8B",
    )
)
# Qwen/Qwen3-30B-A3B config.json (128 experts, top-8, expert FFN 768, no shared expert);
# 30.5B total, 3.3B active.
register(
    _nodrop(
        name="qwen3-30b-a3b",
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,
        ffn_hidden_size=6144,
        vocab_size=151936,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=40960,
        qk_layernorm=True,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=768,
        source="Qwen/Qwen3-30B-A3B config.json; 30.5B total, 3.3B active",
    )
)
# Qwen/Qwen3-235B-A22B config.json (94 layers, 128 experts, top-8, expert FFN 1536);
# 235B total, 22B active.
register(
    _nodrop(
        name="qwen3-235b-a22b",
        num_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        num_query_groups=4,
        kv_channels=128,
        ffn_hidden_size=12288,
        vocab_size=151936,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=40960,
        qk_layernorm=True,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=1536,
        source="Qwen/Qwen3-235B-A22B config.json; 235B total, 22B active",
    )
)

# ---- DeepSeek / Kimi (MLA + fine-grained MoE with shared experts) -------------------------
# deepseek-ai/DeepSeek-V2 config.json (160 routed + 2 shared experts of 1536, top-6 from at most
# 3 of 8 expert groups, first layer dense with FFN 12288, MLA q_lora 1536 / kv_lora 512 / rope
# 64); paper: 236B total, 21B active.
register(
    _nodrop(
        name="deepseek-v2",
        num_layers=60,
        hidden_size=5120,
        num_attention_heads=128,
        ffn_hidden_size=12288,
        vocab_size=102400,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=163840,
        num_moe_experts=160,
        moe_router_topk=6,
        moe_router_num_groups=8,
        moe_router_group_topk=3,
        moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=2 * 1536,
        moe_first_dense_layers=1,
        multi_latent_attention=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        source="deepseek-ai/DeepSeek-V2 config.json; DeepSeek-V2 paper: 236B/21B",
    )
)
# deepseek-ai/DeepSeek-V3 config.json (256 routed + 1 shared of 2048, top-8 from at most 4 of 8
# expert groups (n_group / topk_group: node-limited routing, V3 report 2.1.2), first 3 layers
# dense with FFN 18432, 1 MTP module); V3 report: 671B total (+14B MTP), 37B active.
register(
    _nodrop(
        name="deepseek-v3",
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        ffn_hidden_size=18432,
        vocab_size=129280,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=163840,
        num_moe_experts=256,
        moe_router_topk=8,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_first_dense_layers=3,
        multi_latent_attention=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        mtp_num_layers=1,
        source="deepseek-ai/DeepSeek-V3 config.json; DeepSeek-V3 report: 671B/37B",
    ),
    "deepseek-v3-671b",
)
# moonshotai/Kimi-K2-Instruct config.json (DeepSeek-V3 architecture with 384 experts, 64 heads,
# 1 dense layer, vocab 163840); model card: 1.04T total, 32B active.
register(
    _nodrop(
        name="kimi-k2",
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=64,
        ffn_hidden_size=18432,
        vocab_size=163840,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=131072,
        num_moe_experts=384,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_first_dense_layers=1,
        multi_latent_attention=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        source="moonshotai/Kimi-K2-Instruct config.json; model card: 1.04T/32B",
    ),
    "kimi-k2-1t",
)

# ---- Mixtral -----------------------------------------------------------------------------
# mistralai/Mixtral-8x7B-v0.1 config.json; Mixtral paper (Jiang et al. 2024): 46.7B total,
# 12.9B active.
register(
    _llama(
        "mixtral-8x7b",
        32,
        4096,
        32,
        8,
        14336,
        32000,
        max_pos=32768,
        source="mistralai/Mixtral-8x7B-v0.1 config.json; paper: 46.7B/12.9B",
    ).with_(num_moe_experts=8, moe_router_topk=2)
)
# mistralai/Mixtral-8x22B-v0.1 config.json (vocab 32000; v0.3 tokenizers use 32768); Mistral
# announcement: 141B total, 39B active.
register(
    _llama(
        "mixtral-8x22b",
        56,
        6144,
        48,
        8,
        16384,
        32000,
        max_pos=65536,
        source="mistralai/Mixtral-8x22B-v0.1 config.json; 141B/39B",
    ).with_(num_moe_experts=8, moe_router_topk=2)
)

# ---- GPT-OSS -------------------------------------------------------------------------------
# openai/gpt-oss-120b config.json (36 layers, 2880 hidden, 64 heads x 64, 8 KV heads, 128 experts
# of 2880, top-4, biases on attention and experts, attention sinks, a 128-token sliding window
# on every other layer, `layer_types`, `swiglu_limit` 7.0); model card: 116.8B total,
# 5.1B active (OpenAI's active count leaves out the input embedding, 0.58B).
GPT_OSS_120B = register(
    _nodrop(
        name="gpt-oss-120b",
        num_layers=36,
        hidden_size=2880,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=64,
        ffn_hidden_size=2880,
        vocab_size=201088,
        gated_linear_unit=True,
        activation_clamp=7.0,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=131072,
        add_bias_linear=True,
        add_qkv_bias=True,
        sliding_window=128,
        window_attn_skip_freq=2,
        softmax_type="learnable",
        num_moe_experts=128,
        moe_router_topk=4,
        moe_ffn_hidden_size=2880,
        source="openai/gpt-oss-120b config.json; model card: 116.8B/5.1B",
    )
)

# openai/gpt-oss-20b config.json: the 120B's layer (2880 hidden, 64 heads x 64, 8 KV heads, experts
# of 2880, top-4, biases, sinks, a 128-token window on every other layer) with 24 layers and 32
# experts; model card (arXiv 2508.10925, table 1): 20.91B total, 3.61B active without the input
# embedding.
register(
    GPT_OSS_120B.with_(
        name="gpt-oss-20b",
        num_layers=24,
        num_moe_experts=32,
        source="openai/gpt-oss-20b config.json; model card: 20.91B/3.61B",
    )
)

# ---- Llama 4 (MoE with one shared expert, top-1 sigmoid routing) --------------------------
# meta-llama/Llama-4-Scout-17B-16E config.json (text_config: 48 layers, 5120 hidden, 40 heads,
# 8 KV heads of 128, 16 experts of 8192 plus a shared expert of 8192 on every layer
# (interleave_moe_layer_step 1), top-1, vocabulary 202048, untied); model card: 109B total,
# 17B active.  Megatron Bridge's Llama4Experts16ModelProvider has the same shape.  Chunked
# attention: 8192-token chunks (HF chunks the RoPE layers; Bridge's Llama4SelfAttention chunks
# every layer, which is what is priced: causal within each chunk beyond 8192 tokens).
LLAMA4_SCOUT = register(
    _llama(
        "llama4-scout",
        48,
        5120,
        40,
        8,
        16384,
        202048,
        head_dim=128,
        max_pos=10485760,
        source="meta-llama/Llama-4-Scout-17B-16E config.json; model card: 109B/17B",
    ).with_(
        num_moe_experts=16,
        moe_router_topk=1,
        moe_ffn_hidden_size=8192,
        moe_shared_expert_intermediate_size=8192,
        attention_chunk_size=8192,
        qk_layernorm=True,
    ),
    "llama4-e16",
)
# meta-llama/Llama-4-Maverick-17B-128E config.json: the same layer with 128 experts on every
# other layer (interleave_moe_layer_step 2: layers 1, 3, ..., 47; Bridge's
# Llama4Experts128ModelProvider: moe_layer_freq [0, 1] * 24) and dense layers of 16384
# (intermediate_size_mlp), no QK norm; model card: 400B total, 17B active.
register(
    LLAMA4_SCOUT.with_(
        name="llama4-maverick",
        max_position_embeddings=1048576,
        num_moe_experts=128,
        moe_first_dense_layers=1,
        moe_layer_freq=2,
        qk_layernorm=False,
        source="meta-llama/Llama-4-Maverick-17B-128E config.json; model card: 400B/17B",
    ),
    "llama4-e128",
)

# ---- Nemotron-4 (squared-ReLU MLP, GQA, untied 256k vocabulary) ---------------------------
# Nemotron-4 15B technical report (Parmar et al. 2024): 32 layers, 6144 hidden, 48 heads, 8 KV
# heads, 256k vocab; 12.5B non-embedding + 3.2B embedding parameters.
register(
    _nodrop(
        name="nemotron4-15b",
        num_layers=32,
        hidden_size=6144,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=24576,
        vocab_size=256000,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="layernorm",
        activation="squared_relu",
        source="Nemotron-4 15B tech report (arXiv 2402.16819): 15.7B",
    ),
    "nemotron-4-15b",
)
# Nemotron-4 340B technical report (NVIDIA 2024): 96 layers, 18432 hidden, 96 heads, 8 KV heads,
# FFN 73728, 256k vocab, untied; 341B.
register(
    _nodrop(
        name="nemotron4-340b",
        num_layers=96,
        hidden_size=18432,
        num_attention_heads=96,
        num_query_groups=8,
        ffn_hidden_size=73728,
        vocab_size=256000,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="layernorm",
        activation="squared_relu",
        source="Nemotron-4 340B tech report (arXiv 2406.11704): 341B",
    ),
    "nemotron-4-340b",
)

# ---- GPT-3 -------------------------------------------------------------------------------
# GPT-3 paper (Brown et al. 2020) Table 2.1: 96 layers, d_model 12288, 96 heads, 2048 context,
# GPT-2 vocabulary 50257, learned positions, tied embeddings, biases; 175B.
register(
    ModelSpec(
        name="gpt3-175b",
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        ffn_hidden_size=4 * 12288,
        vocab_size=50257,
        tied_embeddings=True,
        position_embedding_type="learned",
        max_position_embeddings=2048,
        add_bias_linear=True,
        add_qkv_bias=True,
        normalization="layernorm",
        source="GPT-3 paper (arXiv 2005.14165) Table 2.1: 175B",
    ),
    "gpt-3-175b",
)

# ---- OLMoE ---------------------------------------------------------------------------------
# allenai/OLMoE-1B-7B-0924 config.json (16 layers, 2048 hidden, 16 heads, 64 experts of 1024,
# top-8, QK-norm, untied); OLMoE paper (Muennighoff et al. 2024): 6.9B total, 1.3B active.
register(
    _nodrop(
        name="olmoe-7b",
        num_layers=16,
        hidden_size=2048,
        num_attention_heads=16,
        ffn_hidden_size=1024,
        vocab_size=50304,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        max_position_embeddings=4096,
        qk_layernorm=True,
        num_moe_experts=64,
        moe_router_topk=8,
        moe_ffn_hidden_size=1024,
        source="allenai/OLMoE-1B-7B-0924 config.json; OLMoE paper: 6.9B/1.3B",
    ),
    "olmoe-1b-7b",
)


# ---- Hybrid Mamba: Nemotron-H, Nemotron Nano v2, Nemotron 3 Nano ----------------------------
def _nemotron_h(
    name: str, pattern: str, hidden: int, heads: int, ffn: int, mamba_heads: int, **kw: object
) -> ModelSpec:
    """A Nemotron-H-family hybrid as Megatron Bridge's ``NemotronHModelProvider`` builds it:
    Megatron Core's ``MambaModel`` with one sub-block per pattern symbol (Mamba-2 mixer,
    attention, squared-ReLU MLP or MoE), 8 query groups of 128, no position embedding,
    RMSNorm, untied 131,072-token vocabulary, Mamba-2 head dim 64 and 8 groups."""
    fields: dict[str, object] = dict(
        name=name,
        num_layers=len(pattern),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=8,
        kv_channels=128,
        ffn_hidden_size=ffn,
        vocab_size=131072,
        tied_embeddings=False,
        position_embedding_type="none",
        max_position_embeddings=8192,
        normalization="rmsnorm",
        activation="squared_relu",
        hybrid_override_pattern=pattern,
        mamba_num_heads=mamba_heads,
        mamba_head_dim=64,
        mamba_num_groups=8,
        mamba_state_dim=128,
    )
    fields.update(kw)
    return _nodrop(**fields)


#: Hybrid patterns (``hybrid_override_pattern``) of the released checkpoints, the same strings
#: as Megatron Bridge 0.3.1's providers (``models/nemotronh/nemotron_h_provider.py``).
_NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
_NEMOTRON_H_47B = (
    "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*"
    "-M-M-M-M-M-"
)
_NEMOTRON_H_56B = "M-M-M-M*" + "-M-M-M-M-M*" * 9 + "-M-M-M-M-M-"
_NEMOTRON_NANO_9B_V2 = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
_NEMOTRON_3_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"

# nvidia/Nemotron-H-8B-Base-8K config.json (52 layers: 24 Mamba-2, 4 attention, 24 MLP; 128
# Mamba heads, state 128); Nemotron-H paper (arXiv 2504.03624): 8B.
register(
    _nemotron_h(
        "nemotron-h-8b",
        _NEMOTRON_H_8B,
        4096,
        32,
        21504,
        128,
        source="nvidia/Nemotron-H-8B-Base-8K config.json; Nemotron-H paper: 8B",
    ),
    "nemotronh-8b",
)
# Nemotron-H 47B (MiniPuzzle-compressed from 56B: 98 layers, FFN 30720; Bridge's
# NemotronHModelProvider47B); Nemotron-H paper (arXiv 2504.03624): 47B.
register(
    _nemotron_h(
        "nemotron-h-47b",
        _NEMOTRON_H_47B,
        8192,
        64,
        30720,
        256,
        mamba_state_dim=256,
        source="nvidia/Nemotron-H-47B-Base-8K; Nemotron-H paper: 47B",
    ),
    "nemotronh-47b",
)
# nvidia/Nemotron-H-56B-Base-8K config.json (118 layers: 54 Mamba-2, 10 attention, 54 MLP;
# 256 Mamba heads, state 256); Nemotron-H paper (arXiv 2504.03624): 56B.
register(
    _nemotron_h(
        "nemotron-h-56b",
        _NEMOTRON_H_56B,
        8192,
        64,
        32768,
        256,
        mamba_state_dim=256,
        source="nvidia/Nemotron-H-56B-Base-8K config.json; Nemotron-H paper: 56B",
    ),
    "nemotronh-56b",
)
# nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json (56 layers: 27 Mamba-2 of 128 heads x 80,
# 4 attention of 40 heads, 25 MLP; 128k context); model card: 9B (8.89B in the checkpoint).
register(
    _nemotron_h(
        "nemotron-nano-9b-v2",
        _NEMOTRON_NANO_9B_V2,
        4480,
        40,
        15680,
        128,
        mamba_head_dim=80,
        max_position_embeddings=131072,
        source="nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json; model card: 9B",
    ),
    "nemotron-nano-v2-9b",
)
# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B config.json (52 layers: 23 Mamba-2, 6 attention with 2
# query groups, 23 MoE of 128 routed experts of 1856 (top-6, sigmoid, no group limit) plus a
# shared expert of 3712; 256k context); model card: 31.6B total, 3.2B active (3.6B with the
# embeddings, the convention num_active_params follows).
register(
    _nemotron_h(
        "nemotron-3-nano",
        _NEMOTRON_3_NANO,
        2688,
        32,
        1856,
        64,
        num_query_groups=2,
        max_position_embeddings=262144,
        num_moe_experts=128,
        moe_router_topk=6,
        moe_ffn_hidden_size=1856,
        moe_shared_expert_intermediate_size=3712,
        source="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B config.json; model card: 31.6B/3.6B",
    ),
    "nemotron-3-nano-30b-a3b",
)

#: Parameter counts the models' authors published: name -> (total, active or None when dense).
#: ``tests/test_models.py`` and ``benchmarks/memory_accuracy.py`` compare ``num_params`` and
#: ``num_active_params`` with these.
_B = 1e9
PUBLISHED_PARAMS: dict[str, tuple[float, float | None]] = {
    "llama3.2-1b": (1.24 * _B, None),  # model card: 1.24B
    "llama3-8b": (8.03 * _B, None),  # HF model size 8.03B
    "llama3-70b": (70.6 * _B, None),  # HF model size 70.6B
    "llama3.1-405b": (405 * _B, None),  # Llama 3 paper
    "qwen3-8b": (8.2 * _B, None),  # Qwen3 model card: 8.2B
    "qwen3-32b": (32.8 * _B, None),  # Qwen3 model card: 32.8B
    "qwen3-30b-a3b": (30.5 * _B, 3.3 * _B),  # model card: 30.5B total, 3.3B activated
    "qwen3-235b-a22b": (235 * _B, 22 * _B),  # model card: 235B / 22B
    "deepseek-v2": (236 * _B, 21 * _B),  # DeepSeek-V2 paper: 236B / 21B
    "deepseek-v3": (671 * _B, 37 * _B),  # DeepSeek-V3 report: 671B / 37B (MTP apart)
    "kimi-k2": (1.04e12, 32 * _B),  # Kimi K2 card: 1.04T total / 32B activated
    "mixtral-8x7b": (46.7 * _B, 12.9 * _B),  # Mixtral paper: 46.7B / 12.9B
    "mixtral-8x22b": (141 * _B, 39 * _B),  # Mistral: 141B / 39B
    # OpenAI model card: 116.83B total, 5.13B active *without* the input embedding
    # (201088 x 2880 = 0.579B); num_active_params counts it, as Mixtral and DeepSeek do.
    "gpt-oss-120b": (116.83 * _B, 5.13 * _B + 201088 * 2880),
    "gpt-oss-20b": (20.91 * _B, 3.61 * _B + 201088 * 2880),  # model card, same convention
    "llama4-scout": (109 * _B, 17 * _B),  # Llama 4 model card: 109B / 17B
    "llama4-maverick": (400 * _B, 17 * _B),  # Llama 4 model card: 400B / 17B
    "nemotron4-15b": (15.7 * _B, None),  # Nemotron-4 15B report: 12.5B + 3.2B embedding
    "nemotron4-340b": (341 * _B, None),  # Nemotron-4 340B report
    "gpt3-175b": (175 * _B, None),  # GPT-3 paper
    "olmoe-7b": (6.9 * _B, 1.3 * _B),  # OLMoE paper: 6.9B / 1.3B
    "nemotron-h-8b": (8 * _B, None),  # Nemotron-H paper (arXiv 2504.03624): 8B
    "nemotron-h-47b": (47 * _B, None),  # Nemotron-H paper: 47B
    "nemotron-h-56b": (56 * _B, None),  # Nemotron-H paper: 56B
    "nemotron-nano-9b-v2": (9 * _B, None),  # model card: 9B
    # model card: 31.6B total, 3.2B active (3.6B including embeddings)
    "nemotron-3-nano": (31.6 * _B, 3.6 * _B),
}
