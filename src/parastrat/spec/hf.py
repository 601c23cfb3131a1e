"""Read a local Hugging Face ``config.json`` into a :class:`~parastrat.ModelSpec`.

Only the file on disk is read; nothing is downloaded.  Understood ``model_type`` families:
Llama / Mistral / Mixtral, Qwen2 / Qwen2-MoE / Qwen3 / Qwen3-MoE, DeepSeek-V2 / V3 (and
Kimi K2, which reuses the V3 architecture), GPT-OSS, Llama 4, OLMoE, Nemotron and the hybrid
Mamba Nemotron-H family (``nemotron_h``: Nemotron-H, Nemotron Nano v2, Nemotron 3 Nano).  Other
decoder-only configs that use the same standard field names load too; a missing or nonsensical
field raises :class:`~parastrat.errors.SpecError` naming the file and the field as the file spells
it (``n_routed_experts``, not parastrat's name for it).  A ``text_config`` (multimodal wrapper,
Llama 4) must be a JSON object: the language model is read from it.

Missing fields.  parastrat does not guess a size a checkpoint's config always states:

* ``intermediate_size`` (or ``ffn_hidden_size`` / ``n_inner``): refused when absent, except in
  GPT-2, GPT-BigCode and Falcon, whose Hugging Face configs build 4 x ``hidden_size`` for a null
  one.  (transformers' class defaults, e.g. ``LlamaConfig``'s 11008, are one model's size.)
* the routed-expert count of a mixture-of-experts family (``num_local_experts`` for Mixtral,
  GPT-OSS, Llama 4, PhiMoE; ``num_experts`` for Qwen2/Qwen3-MoE, OLMoE; ``n_routed_experts`` for
  DeepSeek-V2/V3, Kimi K2; any of the three for another ``model_type`` naming "moe"): refused
  when absent or null, never read as a dense model.  Other families are dense without one (and
  with 0, as Hugging Face builds them).
* ``moe_intermediate_size`` of a model with experts: refused when absent, except in the families
  whose experts are ``intermediate_size`` wide (Mixtral, GPT-OSS, Llama 4, OLMoE, PhiMoE,
  GraniteMoE, Jamba, MiniMax).  Llama 4's ``intermediate_size_mlp`` likewise, when the model has
  dense layers (``interleave_moe_layer_step`` > 1).
* ``use_sliding_window`` absent or null means what Hugging Face means: off in the families whose
  config has that switch (Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Qwen2-VL, SmolLM3: default
  ``False``), so their ``sliding_window`` alone sets no window; elsewhere (Mistral, GPT-OSS) a
  ``sliding_window`` is the window.  Where it is on, Qwen's ``max_window_layers`` says which
  layers use it, as Hugging Face reads it (layers from that index on; class default when absent,
  :data:`_FULL_ATTENTION_LAYERS`): none when it covers every layer, all when it is 0, refused
  otherwise (a leading block of full-attention layers has no Megatron spelling).
* Shared experts absent from a family whose Hugging Face class builds some by default mean that
  default (:data:`_SHARED_EXPERTS_DEFAULT`: DeepSeek-V2 two, DeepSeek-V3 and GLM-4-MoE one
  expert wide, Qwen2-MoE 5,632, Qwen3-Next 512); a null or 0 means none, as Hugging Face builds.

Optional fields keep their documented defaults (no dropout, ``max_position_embeddings`` 4096, no
shared experts elsewhere, every layer MoE, ...).

HF -> Megatron field map (the ones that matter for cost):

==============================  ==========================================
``num_hidden_layers``           ``num_layers``
``intermediate_size``           ``ffn_hidden_size`` (and the expert size for Mixtral,
                                GPT-OSS, OLMoE, which have no ``moe_intermediate_size``);
                                required (see above)
``num_key_value_heads``         ``num_query_groups`` (ignored under MLA)
``head_dim``                    ``kv_channels``
``num_local_experts`` /         ``num_moe_experts`` (required in a MoE family)
``num_experts`` /
``n_routed_experts``
``num_experts_per_tok``         ``moe_router_topk``
``moe_intermediate_size``       ``moe_ffn_hidden_size`` (required, see above)
``n_shared_experts`` x size,    ``moe_shared_expert_intermediate_size``
``shared_expert_intermediate_
size``
``first_k_dense_replace``       ``moe_first_dense_layers``
``moe_layer_freq`` /            ``moe_layer_freq``
``decoder_sparse_step``
``num_nextn_predict_layers``    ``mtp_num_layers``
``n_group`` / ``topk_group``    ``moe_router_num_groups`` / ``moe_router_group_topk``
                                (when ``n_group`` > 1)
``sliding_window``,             ``sliding_window``, ``window_attn_skip_freq``
``use_sliding_window``,         (the period of full-attention layers); no window when
``layer_types``                 ``use_sliding_window`` is false, or absent in Qwen's families
``swiglu_limit``                ``activation_clamp`` (GPT-OSS)
``interleave_moe_layer_step``   ``moe_layer_freq`` and ``moe_first_dense_layers`` (Llama 4:
                                experts on layers k-1, 2k-1, ...)
``intermediate_size_mlp``       ``ffn_hidden_size`` of Llama 4's dense layers (its
                                ``intermediate_size`` is the expert and shared-expert size)
``use_qk_norm``                 ``qk_layernorm``
``attention_chunk_size``        ``attention_chunk_size`` (Llama 4's chunked attention)
``model_type: gpt_oss``         ``softmax_type="learnable"`` (attention sinks)
==============================  ==========================================

Hybrid (Mamba) configs, ``model_type: nemotron_h`` (``NemotronHForCausalLM``), as Megatron
Bridge's ``NemotronHBridge`` maps them onto Megatron Core's ``MambaModel``:

==============================  ==========================================
``hybrid_override_pattern`` /   ``hybrid_override_pattern`` (one of ``M * - E`` per layer;
``layers_block_type``           the list form names "mamba", "attention", "mlp", "moe")
``mamba_num_heads``             ``mamba_num_heads``
``mamba_head_dim``              ``mamba_head_dim``
``ssm_state_size``              ``mamba_state_dim``
``n_groups``                    ``mamba_num_groups`` (the B/C groups; ``n_group`` is routing)
``conv_kernel``                 must be 4: Megatron's ``MambaMixer`` is built with ``d_conv=4``
``expand``                      unused when ``mamba_num_heads`` is given: HF's and Megatron's
                                mixers are heads x head dim wide (Nemotron Nano v2 and
                                Nemotron 3 Nano publish ``expand: 2`` with another width; the
                                spec's ``extra["notes"]`` says so)
``mlp_hidden_act: relu2``       ``activation="squared_relu"`` (ungated MLP and experts)
``attention_head_dim``          ``kv_channels`` (Nemotron-H's spelling of ``head_dim``)
``moe_shared_expert_            ``moe_shared_expert_intermediate_size`` (Bridge's mapping)
intermediate_size``
==============================  ==========================================
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._io import read_json
from .._text import printable
from ..errors import SpecError, UsageError

if TYPE_CHECKING:  # model.py imports this module; ModelSpec arrives as spec_type
    from .model import ModelSpec

#: Families whose MLP is *not* gated (HF Llama-likes always use gate/up/down).
_UNGATED = {
    "nemotron": "squared ReLU",
    "nemotron_h": "squared ReLU",
    "gpt2": "GELU",
    "gpt_bigcode": "GELU",
    "starcoder2": "GELU",
    "falcon": "GELU",
}
#: Families with per-head QK RMSNorm.
_QK_NORM = {"qwen3", "qwen3_moe", "olmoe", "olmo2"}
#: Families with a bias on Q/K/V only.
_QKV_BIAS = {"qwen2", "qwen2_moe"}
_LAYERNORM = {"nemotron", "gpt2", "gpt_bigcode", "starcoder2", "falcon"}
_MLA = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
#: Families whose Hugging Face config builds a 4 x hidden MLP when its width is null.
_FFN_4X = {"gpt2", "gpt_bigcode", "falcon"}
#: Mixture-of-experts families -> the field that holds their routed-expert count; a config of
#: one of these without it is refused (never read as a dense model).
_EXPERT_COUNT = {
    "mixtral": "num_local_experts",
    "gpt_oss": "num_local_experts",
    "llama4": "num_local_experts",
    "llama4_text": "num_local_experts",
    "phimoe": "num_local_experts",
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "olmoe": "num_experts",
    "deepseek_v2": "n_routed_experts",
    "deepseek_v3": "n_routed_experts",
    "kimi_k2": "n_routed_experts",
}
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
#: Families whose experts are ``intermediate_size`` wide (no ``moe_intermediate_size``).
_EXPERT_FFN_IS_FFN = {
    "mixtral",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "olmoe",
    "phimoe",
    "granitemoe",
    "jamba",
    "minimax",
}
#: Families whose Hugging Face config has a ``use_sliding_window`` switch, default ``False``.
_SLIDING_SWITCH = {
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "qwen2_vl",
    "qwen2_vl_text",
    "qwen2_5_vl",
    "qwen2_5_vl_text",
    "smollm3",
}
#: Shared experts a Hugging Face config class builds when its file omits the field (transformers
#: 4.57 class defaults: ``DeepseekV2Config.n_shared_experts=2``, ``DeepseekV3Config`` and
#: ``Glm4MoeConfig`` 1, ``Qwen2MoeConfig.shared_expert_intermediate_size=5632``,
#: ``Qwen3NextConfig`` 512): (field, value); ``n_shared_experts`` counts routed-expert widths.
_SHARED_EXPERTS_DEFAULT = {
    "deepseek_v2": ("n_shared_experts", 2),
    "deepseek_v3": ("n_shared_experts", 1),
    "glm4_moe": ("n_shared_experts", 1),
    "qwen2_moe": ("shared_expert_intermediate_size", 5632),
    "qwen3_next": ("shared_expert_intermediate_size", 512),
}
#: ``max_window_layers`` class defaults of the families that read it (transformers 4.57
#: ``Qwen2Config`` / ``Qwen2MoeConfig`` / ``Qwen3Config`` 28, Qwen2-VL's text model 80): the
#: first that many layers keep full attention, the rest use the sliding window.
_FULL_ATTENTION_LAYERS = {
    "qwen2": 28,
    "qwen2_moe": 28,
    "qwen3": 28,
    "qwen2_vl": 80,
    "qwen2_vl_text": 80,
    "qwen2_5_vl": 80,
    "qwen2_5_vl_text": 80,
}
#: HF ``hidden_act`` spellings of activations Megatron Core runs eagerly ->
#: ``ModelSpec.activation`` (Nemotron's ``relu2`` is squared ReLU).  Others leave it unset:
#: Megatron's fused GELU / SwiGLU, which the step model prices alike.
#: Llama 4's text model (``model_type`` of its ``text_config``, or of the wrapper).
_LLAMA4 = ("llama4_text", "llama4")
_EAGER_ACTIVATIONS = {"relu2": "squared_relu", "squared_relu": "squared_relu"}
#: ``mlp_hidden_act`` of a hybrid's ungated MLP and experts -> ``ModelSpec.activation``.
_HYBRID_ACTIVATIONS = {**_EAGER_ACTIVATIONS, "silu": "silu", "gelu": "gelu"}
#: Hybrid layer kinds as the list form (``layers_block_type``) names them -> pattern symbols.
_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
#: Kernel width of Megatron Core's ``MambaMixer`` convolution (``d_conv=4``; neither its
#: ``TransformerConfig`` nor Bridge's ``MambaModelProvider`` has a field to change it).
_MEGATRON_CONV_KERNEL = 4


def _read(path: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(path, Mapping):
        return dict(path), "<dict>"
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = read_json(p, what="Hugging Face config")
    except UsageError as exc:
        raise SpecError(f"{exc} (pass a local config.json or the folder holding it)") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p} must hold a JSON object, got {type(data).__name__}")
    return data, str(p)


@dataclass(frozen=True)
class _Config:
    """A config's language-model section read with checks: every refusal names the file
    (``where``), the field and the ``model_type``."""

    cfg: Mapping[str, Any]
    where: str
    model_type: str

    def find(self, *keys: str) -> tuple[str, Any] | None:
        """The first of ``keys`` the config sets (not null) and its value, so that an error
        names the key the file uses."""
        for key in keys:
            if self.cfg.get(key) is not None:
                return key, self.cfg[key]
        return None

    def missing(self, *keys: str, why: str = "") -> SpecError:
        """The refusal of a config that sets none of ``keys``."""
        return SpecError(
            f"{self.where}: missing field {keys[0]!r}"
            + (f" (or {', '.join(map(repr, keys[1:]))})" if len(keys) > 1 else "")
            + f" for model_type {self.model_type or '?'!r}"
            + (f": {why}" if why else "")
        )

    def need(self, *keys: str) -> Any:
        """The first of ``keys`` the config sets; refused when it sets none."""
        found = self.find(*keys)
        if found is None:
            raise self.missing(*keys)
        return found[1]

    def need_whole(self, *keys: str, minimum: int = 1, why: str = "") -> int:
        """The first of ``keys`` the config sets, as a whole number >= ``minimum`` (errors
        name that key); refused when it sets none."""
        found = self.find(*keys)
        if found is None:
            raise self.missing(*keys, why=why)
        return self.whole(*found, minimum)

    def opt_whole(self, *keys: str, default: int, minimum: int = 1) -> int:
        """The first of ``keys`` the config sets, as a whole number >= ``minimum``, else
        ``default``."""
        found = self.find(*keys)
        return default if found is None else self.whole(*found, minimum)

    def opt(self, *keys: str, default: Any = None) -> Any:
        """The first of ``keys`` the config sets, else ``default``."""
        found = self.find(*keys)
        return default if found is None else found[1]

    def whole(self, key: str, value: Any, minimum: int = 1) -> int:
        """``value`` of field ``key`` as a whole number >= ``minimum``."""
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value != int(value)
            or value < minimum
        ):
            raise SpecError(
                f"{self.where}: field {key!r} must be a whole number >= {minimum}, got {value!r}"
            )
        return int(value)

    def fraction(self, key: str, value: Any) -> float:
        """``value`` of field ``key`` as a probability in [0, 1)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise SpecError(
                f"{self.where}: field {key!r} must be a probability in [0, 1), got {value!r}"
            )
        return float(value)

    def flag(self, key: str, value: Any) -> bool:
        """``value`` of field ``key`` as a boolean."""
        if not isinstance(value, bool):
            raise SpecError(f"{self.where}: field {key!r} must be true or false, got {value!r}")
        return value


def _refuse_diffusers(raw: Mapping[str, Any], where: str) -> None:
    """SpecError saying where a diffusers transformer config belongs (it names
    ``_class_name`` / ``_diffusers_version``): ``DiTSpec.from_diffusers_config`` /
    ``plan-dit --config``."""
    if not {"_class_name", "_diffusers_version"} & raw.keys():
        return
    kind = raw.get("_class_name") or "a diffusers model"
    path = "PATH" if where == "<dict>" else shlex.quote(where)
    raise SpecError(
        f"{where} is a diffusers config ({kind}): a diffusion transformer (DiT), not a language "
        "model; read it with DiTSpec.from_diffusers_config(path), or plan it with "
        f"`parastrat plan-dit --config {path}`"
    )


def spec_from_hf_config(
    path: str | Path | Mapping[str, Any], *, name: str | None = None, spec_type: type[ModelSpec]
) -> ModelSpec:
    """Translate a Hugging Face ``config.json`` (file, folder or dict) into a ``spec_type``
    (ModelSpec); call it as ``ModelSpec.from_hf_config``."""
    raw, where = _read(path)
    _refuse_diffusers(raw, where)
    cfg = _language_model(raw, where)
    model_type = str(cfg.get("model_type") or raw.get("model_type") or "").lower()
    c = _Config(cfg, where, model_type)
    fields = _base_fields(c, name or _default_name(raw, where, model_type))
    layers, hidden = fields["num_layers"], fields["hidden_size"]
    fields.update(_sliding_window(c, layers))
    fields.update(_linear_fields(c))
    fields.update(_attention_fields(c, fields["num_attention_heads"], hidden))
    fields.update(_moe_fields(c, fields["ffn_hidden_size"]))
    mtp = c.opt_whole("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        fields["mtp_num_layers"] = mtp
    if model_type == "nemotron_h" or "hybrid_override_pattern" in cfg:
        fields.update(_hybrid(cfg, where, layers, hidden, c.whole, c.flag))
    try:
        return spec_type(**fields)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _language_model(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The language model's section: ``text_config`` of a multimodal wrapper (Llama 4), else
    the whole config; a ``text_config`` that is no JSON object is refused naming it."""
    text_config = raw.get("text_config")
    if text_config is None:
        return raw
    if not isinstance(text_config, dict):
        shown = printable(repr(text_config))[:60]
        raise SpecError(
            f"{where}: field 'text_config' must be a JSON object (the language model's "
            f"config), got {type(text_config).__name__} {shown}"
        )
    return text_config


def _base_fields(c: _Config, name: str) -> dict[str, Any]:
    """Sizes, embeddings, norms and dropouts every decoder config states."""
    layers = c.need_whole("num_hidden_layers", "n_layer", "num_layers")
    hidden = c.need_whole("hidden_size", "n_embd", "d_model")
    heads = c.need_whole("num_attention_heads", "n_head")
    vocab = c.need_whole("vocab_size")
    ffn = _ffn_size(c, hidden)
    ungated = c.model_type in _UNGATED
    return dict(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        gated_linear_unit=not ungated,
        tied_embeddings=c.flag(
            "tie_word_embeddings", c.opt("tie_word_embeddings", default=ungated)
        ),
        position_embedding_type=("learned" if c.model_type in ("gpt2", "gpt_bigcode") else "rope"),
        max_position_embeddings=c.opt_whole(
            "max_position_embeddings", "n_positions", "seq_length", default=4096
        ),
        normalization="layernorm" if c.model_type in _LAYERNORM else "rmsnorm",
        qk_layernorm=c.model_type in _QK_NORM or c.opt("use_qk_norm", default=False) is True,
        hidden_dropout=c.fraction(*(c.find("hidden_dropout", "resid_pdrop") or ("", 0.0))),
        attention_dropout=c.fraction(*(c.find("attention_dropout", "attn_pdrop") or ("", 0.0))),
        make_vocab_size_divisible_by=128,
        source=f"Hugging Face config {c.where}",
    )


def _ffn_size(c: _Config, hidden: int) -> int:
    """The dense MLP's width: ``intermediate_size`` (or an alias); 4 x hidden where Hugging
    Face builds that for a null one (GPT-2, GPT-BigCode, Falcon); otherwise refused."""
    keys = ("intermediate_size", "ffn_hidden_size", "n_inner")
    if c.find(*keys) is None and c.model_type in _FFN_4X:
        return 4 * hidden
    return c.need_whole(*keys, why="the MLP width (parastrat does not guess it)")


def _linear_fields(c: _Config) -> dict[str, Any]:
    """Biases, the activation and its clamp."""
    out: dict[str, Any] = {}
    bias = c.flag("attention_bias", c.opt("attention_bias", default=False))
    out["add_qkv_bias"] = bias or c.model_type in _QKV_BIAS
    # GPT-OSS also puts biases on the output projection and the experts, and learns one
    # attention-sink logit per head (``GptOssAttention.sinks``; no config field names it).
    out["add_bias_linear"] = bias and c.model_type == "gpt_oss"
    if c.model_type == "gpt_oss":
        out["softmax_type"] = "learnable"
    act = c.opt("hidden_act", "activation_function")
    if isinstance(act, str) and act.lower() in _EAGER_ACTIVATIONS:
        out["activation"] = _EAGER_ACTIVATIONS[act.lower()]
    elif c.model_type == "nemotron":
        out["activation"] = "squared_relu"
    limit = c.opt("swiglu_limit")  # GPT-OSS clamps its gated activation's inputs
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
            raise SpecError(f"{c.where}: field 'swiglu_limit' must be a number > 0, got {limit!r}")
        out["activation_clamp"] = float(limit)
    return out


def _attention_fields(c: _Config, heads: int, hidden: int) -> dict[str, Any]:
    """Multi-latent attention's ranks and head sizes, else the key/value groups and the head
    dimension."""
    if c.model_type in _MLA or c.opt("kv_lora_rank") is not None:
        q_rank = c.cfg.get("q_lora_rank")
        return dict(
            multi_latent_attention=True,
            q_lora_rank=c.whole("q_lora_rank", q_rank) if q_rank else None,
            kv_lora_rank=c.need_whole("kv_lora_rank"),
            qk_head_dim=c.need_whole("qk_nope_head_dim"),
            qk_pos_emb_head_dim=c.need_whole("qk_rope_head_dim"),
            v_head_dim=c.need_whole("v_head_dim"),
        )
    out: dict[str, Any] = {}
    found = c.find("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if found is not None:
        kv = c.whole(*found)
        if kv > heads or heads % kv:
            raise SpecError(f"{c.where}: {found[0]}={kv} must divide num_attention_heads={heads}")
        out["num_query_groups"] = kv
    head_dim = c.find("head_dim", "kv_channels")
    if head_dim is not None:
        out["kv_channels"] = c.whole(*head_dim)
    elif hidden % heads:
        raise SpecError(
            f"{c.where}: hidden_size={hidden} is not divisible by "
            f"num_attention_heads={heads} and no head_dim is given"
        )
    return out


def _moe_fields(c: _Config, ffn: int) -> dict[str, Any]:
    """Routed and shared experts, the router's groups and which layers hold experts (none
    for a dense config)."""
    experts = _expert_count(c)
    if experts is None:
        return {}
    topk = c.need_whole("num_experts_per_tok", "experts_per_token", "moe_topk")
    expert_ffn = _expert_ffn(c, ffn)
    layers = _expert_layers(c)
    out: dict[str, Any] = dict(
        num_moe_experts=experts,
        moe_router_topk=topk,
        moe_ffn_hidden_size=expert_ffn,
        moe_shared_expert_intermediate_size=_shared_experts(c, expert_ffn),
        **layers,
    )
    groups = c.opt_whole("n_group", "moe_router_num_groups", default=1)
    if groups > 1:
        out["moe_router_num_groups"] = groups
        out["moe_router_group_topk"] = c.need_whole("topk_group", "moe_router_group_topk")
    if c.model_type in _LLAMA4:
        if c.find("attention_chunk_size") is not None:
            out["attention_chunk_size"] = c.need_whole("attention_chunk_size")
        out["ffn_hidden_size"] = _llama4_dense_ffn(c, ffn, layers)
    return out


def _expert_count(c: _Config) -> int | None:
    """The routed-expert count; None for a dense config.  A mixture-of-experts family
    (:data:`_EXPERT_COUNT`, or a ``model_type`` naming "moe") must state it: Hugging Face
    would build the class default's experts, and reading it as dense is the worst guess."""
    found = c.find(*_EXPERT_KEYS)
    own = _EXPERT_COUNT.get(c.model_type)
    if own is not None or "moe" in c.model_type:
        if found is None:
            raise c.missing(
                *((own,) if own else _EXPERT_KEYS),
                why="a mixture-of-experts config states its routed-expert count (parastrat "
                "does not read it as a dense model)",
            )
        return c.whole(*found)
    if found is None or (found[1] == 0 and not isinstance(found[1], bool)):
        return None  # Hugging Face builds a dense MLP for 0 experts
    return c.whole(*found)


def _expert_ffn(c: _Config, ffn: int) -> int:
    """The routed experts' width: ``moe_intermediate_size``, or ``intermediate_size`` in the
    families whose experts are that wide (:data:`_EXPERT_FFN_IS_FFN`); otherwise refused."""
    if c.find("moe_intermediate_size") is None and c.model_type in _EXPERT_FFN_IS_FFN:
        return ffn
    return c.need_whole(
        "moe_intermediate_size", why="the routed experts' width (parastrat does not guess it)"
    )


def _llama4_dense_ffn(c: _Config, ffn: int, layers: Mapping[str, int]) -> int:
    """Llama 4's dense layers' MLP width, ``intermediate_size_mlp``: needed when the model has
    dense layers (``interleave_moe_layer_step`` > 1), else unused."""
    if layers["moe_layer_freq"] == 1 and layers["moe_first_dense_layers"] == 0:
        return c.opt_whole("intermediate_size_mlp", default=ffn)
    return c.need_whole("intermediate_size_mlp", why="the width of its dense layers' MLP")


def _shared_experts(c: _Config, expert_ffn: int) -> int:
    """The shared experts' hidden size (0: none)."""
    if c.model_type in _LLAMA4:  # one shared expert of intermediate_size on every MoE layer
        return expert_ffn
    default = _SHARED_EXPERTS_DEFAULT.get(c.model_type)
    for key, width in (("n_shared_experts", expert_ffn), ("shared_expert_intermediate_size", 1)):
        if key in c.cfg:
            value = c.cfg[key]
            return 0 if value is None or value == 0 else c.whole(key, value) * width
        if default is not None and default[0] == key:
            return default[1] * width
    return 0


def _expert_layers(c: _Config) -> dict[str, int]:
    """``moe_first_dense_layers`` and ``moe_layer_freq``: DeepSeek's
    ``first_k_dense_replace``, a layer frequency, Llama 4's ``interleave_moe_layer_step``
    (experts on layers step-1, 2 step-1, ...), Qwen-MoE's ``mlp_only_layers``."""
    first_dense = c.opt_whole("first_k_dense_replace", default=0, minimum=0)
    freq = c.opt_whole("moe_layer_freq", "decoder_sparse_step", default=1)
    if c.find("interleave_moe_layer_step") is not None:
        freq = c.need_whole("interleave_moe_layer_step")
        first_dense = max(first_dense, freq - 1)
    dense_only = c.opt("mlp_only_layers", default=[]) or []
    if not isinstance(dense_only, list):
        raise SpecError(f"{c.where}: field 'mlp_only_layers' must be a list of layer indices")
    if dense_only:
        first_dense = max(first_dense, _leading_dense(c, dense_only))
    return {"moe_first_dense_layers": first_dense, "moe_layer_freq": freq}


def _leading_dense(c: _Config, dense_only: list[Any]) -> int:
    """Qwen-MoE's ``mlp_only_layers`` as a count of leading dense layers; SpecError for an
    index that is no layer, or a list that is not a leading run (layers 0..k-1), which the
    model's ``moe_first_dense_layers`` cannot say."""
    layers = c.cfg.get("num_hidden_layers")
    bad = [
        i
        for i in dense_only
        if isinstance(i, bool)
        or not isinstance(i, int)
        or i < 0
        or (isinstance(layers, int) and i >= layers)
    ]
    if bad:
        raise SpecError(
            f"{c.where}: field 'mlp_only_layers' holds {bad!r}, which are not layer indices "
            f"in [0, {layers})"
        )
    lead = len(set(dense_only))
    if sorted(set(dense_only)) != list(range(lead)):
        raise SpecError(
            f"{c.where}: field 'mlp_only_layers' {sorted(set(dense_only))} is not a leading run "
            "of layers (0, 1, ..., k-1); parastrat prices dense layers as the first k "
            "(Megatron's moe_layer_freq pattern is not read from it), so it cannot price this "
            "model as given"
        )
    return lead


def _hybrid(
    cfg: Mapping[str, Any], where: str, layers: int, hidden: int, whole: Any, flag: Any
) -> dict[str, Any]:
    """The hybrid (Mamba) fields of a ``nemotron_h`` config, as Bridge's ``NemotronHBridge``
    maps them (module docstring); refuses what Megatron's ``MambaMixer`` cannot build."""
    out: dict[str, Any] = {
        "hybrid_override_pattern": _pattern(cfg, where, layers),
        "position_embedding_type": "none",  # MambaModelProvider's default; no RoPE in HF
        "gated_linear_unit": False,
    }
    act = cfg.get("mlp_hidden_act", cfg.get("hidden_act"))
    if isinstance(act, str) and act.lower() in _HYBRID_ACTIVATIONS:
        out["activation"] = _HYBRID_ACTIVATIONS[act.lower()]
    head_dim = _first(cfg, "head_dim", "attention_head_dim")
    if head_dim is not None:
        out["kv_channels"] = whole(*head_dim)
    for key in ("use_bias", "mamba_proj_bias"):
        if flag(key, cfg.get(key, False)):
            raise SpecError(
                f"{where}: field {key!r} is true, but Megatron Core's MambaMixer builds no "
                "bias (it asserts `not bias`); this hybrid cannot be built by Megatron"
            )
    conv = whole("conv_kernel", cfg.get("conv_kernel", _MEGATRON_CONV_KERNEL))
    if conv != _MEGATRON_CONV_KERNEL:
        raise SpecError(
            f"{where}: field 'conv_kernel' is {conv}; Megatron Core's MambaMixer (as Megatron "
            f"Bridge builds it) has a {_MEGATRON_CONV_KERNEL}-wide convolution and no field "
            "to change it, so parastrat cannot price this mixer"
        )
    out.update(_mamba_shape(cfg, where, hidden, whole))
    shared = cfg.get("moe_shared_expert_intermediate_size")
    if shared and cfg.get("n_routed_experts"):
        out["moe_shared_expert_intermediate_size"] = whole(
            "moe_shared_expert_intermediate_size", shared
        )
    return out


def _pattern(cfg: Mapping[str, Any], where: str, layers: int) -> str:
    """``hybrid_override_pattern`` (or the list form ``layers_block_type``) as one symbol per
    layer; a missing, mistyped or wrong-length one is refused naming the field."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None and isinstance(cfg.get("layers_block_type"), list):
        kinds = cfg["layers_block_type"]
        odd = sorted({str(k) for k in kinds if k not in _BLOCK_SYMBOLS})
        if odd:
            raise SpecError(
                f"{where}: field 'layers_block_type' names {printable(', '.join(odd))}; "
                f"the kinds are {', '.join(_BLOCK_SYMBOLS)}"
            )
        pattern = "".join(_BLOCK_SYMBOLS[k] for k in kinds)
    if not isinstance(pattern, str) or not pattern:
        raise SpecError(
            f"{where}: missing field 'hybrid_override_pattern' (or 'layers_block_type') for a "
            f"hybrid model, got {printable(repr(pattern))[:80]}"
        )
    if len(pattern) != layers:
        raise SpecError(
            f"{where}: field 'hybrid_override_pattern' has {len(pattern)} symbols but "
            f"num_hidden_layers is {layers} (one symbol per layer)"
        )
    odd = sorted(set(pattern) - set(_BLOCK_SYMBOLS.values()))
    if odd:
        raise SpecError(
            f"{where}: field 'hybrid_override_pattern' has {printable(repr(''.join(odd)))}; "
            "the symbols are M (Mamba), * (attention), - (MLP), E (MoE)"
        )
    return pattern


def _mamba_shape(cfg: Mapping[str, Any], where: str, hidden: int, whole: Any) -> dict[str, Any]:
    """Heads, head dim, state size and groups of the Mamba-2 mixer; heads from ``expand``
    only when ``mamba_num_heads`` is absent, and a disagreeing ``expand`` noted."""
    head_dim = whole("mamba_head_dim", cfg.get("mamba_head_dim", 64))
    expand = cfg.get("expand")
    heads = cfg.get("mamba_num_heads")
    notes: list[str] = []
    if heads is None:
        expand = whole("expand", expand if expand is not None else 2)
        if (expand * hidden) % head_dim:
            raise SpecError(
                f"{where}: expand x hidden_size = {expand * hidden} is not a multiple of "
                f"mamba_head_dim={head_dim}; set mamba_num_heads"
            )
        heads = expand * hidden // head_dim
    else:
        heads = whole("mamba_num_heads", heads)
        if expand is not None and whole("expand", expand) * hidden != heads * head_dim:
            notes.append(
                f"expand={expand} ignored: the mixer is mamba_num_heads x mamba_head_dim = "
                f"{heads} x {head_dim} = {heads * head_dim} wide, not expand x hidden_size = "
                f"{expand * hidden} (as Hugging Face's and Megatron's mixers build it)"
            )
    groups = whole(*(_first(cfg, "n_groups", "mamba_num_groups") or ("n_groups", 8)))
    if heads % groups:
        raise SpecError(
            f"{where}: field 'n_groups' ({groups}) must divide mamba_num_heads ({heads}): "
            "MambaMixer asserts nheads % ngroups == 0"
        )
    out: dict[str, Any] = {
        "mamba_num_heads": heads,
        "mamba_head_dim": head_dim,
        "mamba_state_dim": whole("ssm_state_size", cfg.get("ssm_state_size", 128)),
        "mamba_num_groups": groups,
    }
    if notes:
        out["extra"] = {"notes": notes}
    return out


def _sliding_window(c: _Config, layers: int) -> dict[str, Any]:
    """``sliding_window`` / ``window_attn_skip_freq`` from a config: a window applies when
    ``sliding_window`` is set and ``use_sliding_window`` is on (its absence means what Hugging
    Face means: off in the families with that switch, :data:`_SLIDING_SWITCH`); ``layer_types``
    (GPT-OSS, Gemma 3) says which layers use it and must repeat with one full-attention layer
    every n-th layer (Megatron's ``window_attn_skip_freq``)."""
    found = c.find("sliding_window")
    if found is None or not _window_switched_on(c):
        return {}
    window = c.whole(*found)
    windowed, field = _windowed_layers(c, layers)
    if windowed is None or all(windowed):
        return {"sliding_window": window}
    if not any(windowed):
        return {}
    freq = windowed.index(False) + 1
    if any(w != ((i + 1) % freq != 0) for i, w in enumerate(windowed)):
        raise SpecError(
            f"{c.where}: field {field!r} does not give one full-attention layer every n-th "
            "layer; build the ModelSpec by hand with sliding_window and window_attn_skip_freq"
        )
    return {"sliding_window": window, "window_attn_skip_freq": freq}


def _windowed_layers(c: _Config, layers: int) -> tuple[list[bool] | None, str]:
    """Which layers use the window (None: every one) and the field that says so:
    ``layer_types`` (GPT-OSS, Gemma 3), else Qwen's ``max_window_layers`` (layers from that
    index on; the class default when absent, :data:`_FULL_ATTENTION_LAYERS`)."""
    types = c.cfg.get("layer_types")
    if types:
        if not isinstance(types, list) or len(types) != layers:
            raise SpecError(
                f"{c.where}: field 'layer_types' must list one entry per layer ({layers})"
            )
        return [t == "sliding_attention" for t in types], "layer_types"
    default = _FULL_ATTENTION_LAYERS.get(c.model_type)
    if default is None:
        return None, ""
    full = c.opt_whole("max_window_layers", default=default, minimum=0)
    return [i >= full for i in range(layers)], "max_window_layers"


def _window_switched_on(c: _Config) -> bool:
    """``use_sliding_window`` (true or false); absent or null: off in the families whose
    Hugging Face config has that switch (default ``False``), on elsewhere (Mistral, GPT-OSS:
    a ``sliding_window`` alone is the window)."""
    found = c.find("use_sliding_window")
    if found is not None:
        return c.flag(*found)
    return c.model_type not in _SLIDING_SWITCH


def _first(cfg: Mapping[str, Any], *keys: str) -> tuple[str, Any] | None:
    """The first of ``keys`` that ``cfg`` sets (not null) and its value."""
    return _Config(cfg, "", "").find(*keys)


def _default_name(raw: Mapping[str, Any], where: str, model_type: str) -> str:
    name = raw.get("_name_or_path")
    if isinstance(name, str):
        # a name to print and to build a recipe name from: no terminal escapes
        name = printable(name).strip().rstrip("/").split("/")[-1]
        if name:
            return name
    if where != "<dict>":
        p = Path(where)
        stem = p.parent.name if p.name == "config.json" else p.stem
        if stem:
            return stem
    return model_type or "hf-model"
