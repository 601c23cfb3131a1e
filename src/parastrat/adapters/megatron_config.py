"""A Megatron config as the adapter sees it: which kind it is (a Megatron Bridge
``ConfigContainer`` or a Megatron Core ``TransformerConfig`` / ``ModelParallelConfig``,
recognised by their attributes, nothing imported), where its sections live, the model shape
it holds under the names the rules read (:class:`ModelView`), and what a Megatron config
cannot express beyond the strategy's own rules (:func:`adapter_violations`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Violation
from ..spec.model import HybridShape
from ..strategy import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER, Strategy
from .megatron_fields import CONTAINER_SECTIONS, Field


@dataclass(frozen=True)
class ModelView(HybridShape):
    """The model shape a Megatron config holds, under the attribute names the rules read.

    Passed as ``model=`` to :meth:`Strategy.validate`, so the rules stay written once.
    """

    name: str
    num_layers: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_query_groups: int | None
    num_moe_experts: int | None
    mtp_num_layers: int | None = None
    add_bias_linear: bool = False
    #: keys a query sees under Megatron's ``window_size = (left, 0)``: left + 1; None: full
    sliding_window: int | None = None
    softmax_type: str = "vanilla"
    #: Llama 4's chunked attention (Bridge's ``attention_chunk_size``); None: not chunked
    attention_chunk_size: int | None = None
    #: Hybrid (Mamba) models: Megatron Core's ``MambaModel`` pattern and mixer shape, under
    #: :class:`~parastrat.ModelSpec`'s names (None: not a hybrid)
    hybrid_override_pattern: str | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int = 64
    mamba_num_groups: int = 8
    mamba_state_dim: int = 128


@dataclass(frozen=True)
class Target:
    """Where the parts of a config live: its sections by name (``model`` always; for a Bridge
    container ``train``, ``dist``, ``comm_overlap`` when present) and the path prefix."""

    root: Any
    sections: dict[str, Any]
    container: bool

    @property
    def model(self) -> Any:
        """The model section (the config itself for a Megatron Core config)."""
        return self.sections["model"]

    @property
    def train(self) -> Any | None:
        """Bridge's ``train`` section (batch sizes), None when absent."""
        return self.sections.get("train")

    @property
    def prefix(self) -> str:
        """The dotted-path prefix of model fields in messages (``model.`` in a container)."""
        return "model." if self.container else ""

    def place(self, f: Field) -> tuple[Any, str] | None:
        """(object, dotted path) where field ``f`` lives here, or None."""
        for name in f.sections:
            obj = self.sections.get(name)
            if obj is not None:
                return obj, (f"{name}.{f.name}" if self.container else f.name)
        return None


# ---------------------------------------------------------------------------------------------
# Recognising a config.
# ---------------------------------------------------------------------------------------------
def is_bridge_container(cfg: Any) -> bool:
    """True for a Megatron Bridge ``ConfigContainer``-shaped object (``cfg.model`` holds the
    parallel sizes; ``cfg.train``/``cfg.dist`` are read when present)."""
    model = getattr(cfg, "model", None)
    return model is not None and hasattr(model, "tensor_model_parallel_size")


def is_model_parallel_config(cfg: Any) -> bool:
    """True for a Megatron Core ``ModelParallelConfig`` (or ``TransformerConfig``) shape."""
    return hasattr(cfg, "tensor_model_parallel_size") and hasattr(
        cfg, "pipeline_model_parallel_size"
    )


def target_of(cfg: Any) -> Target:
    """``cfg``'s sections; TypeError for anything that is neither kind of Megatron config."""
    if is_bridge_container(cfg):
        names = ("model", *CONTAINER_SECTIONS)
        found = {n: getattr(cfg, n, None) for n in names}
        return Target(cfg, {n: v for n, v in found.items() if v is not None}, True)
    if is_model_parallel_config(cfg):
        return Target(cfg, {"model": cfg}, False)
    raise TypeError(
        f"{type(cfg).__name__} is neither a Megatron Bridge ConfigContainer (cfg.model with "
        "tensor_model_parallel_size) nor a Megatron Core TransformerConfig/ModelParallelConfig "
        "(tensor_model_parallel_size and pipeline_model_parallel_size)"
    )


def model_view(cfg: Any) -> ModelView:
    """The model shape of a Bridge container or a Megatron Core config, for the rules."""
    m = target_of(cfg).model

    def positive(name: str) -> int | None:
        value = getattr(m, name, None)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    return ModelView(
        name=type(m).__name__,
        num_layers=positive("num_layers"),
        hidden_size=positive("hidden_size"),
        num_attention_heads=positive("num_attention_heads"),
        num_query_groups=positive("num_query_groups"),
        num_moe_experts=positive("num_moe_experts"),
        mtp_num_layers=positive("mtp_num_layers"),
        add_bias_linear=getattr(m, "add_bias_linear", False) is True,
        sliding_window=_sliding_window(getattr(m, "window_size", None)),
        softmax_type=_text(getattr(m, "softmax_type", None)) or "vanilla",
        attention_chunk_size=positive("attention_chunk_size"),
        **_hybrid_fields(m, positive),
    )


def _hybrid_fields(m: Any, positive: Any) -> dict[str, Any]:
    """The hybrid fields of a Megatron Bridge ``MambaModelProvider`` (or a config carrying
    ``hybrid_override_pattern``); empty for a GPT config.  A Mamba provider without a
    pattern and without attention/MLP ratios is all Mamba layers, as ``allocate_layers``
    builds it."""
    pattern = _text(getattr(m, "hybrid_override_pattern", None))
    ratios = (getattr(m, "hybrid_attention_ratio", None), getattr(m, "hybrid_mlp_ratio", None))
    if pattern is None and hasattr(m, "mamba_stack_spec") and not any(ratios):
        layers = positive("num_layers")
        pattern = "M" * layers if layers else None
    if pattern is None:
        return {}
    out: dict[str, Any] = {"hybrid_override_pattern": pattern}
    for name in ("mamba_num_heads", "mamba_head_dim", "mamba_num_groups", "mamba_state_dim"):
        value = positive(name)
        if value is not None:
            out[name] = value
    return out


def _sliding_window(window_size: Any) -> int | None:
    """``ModelSpec.sliding_window`` from Megatron's ``window_size`` ((left, right), or the left
    alone; None or a negative left: no window)."""
    if isinstance(window_size, (tuple, list)) and window_size:
        window_size = window_size[0]
    # an int is Bridge's Gemma 3 provider's spelling: its attention makes it (w, 0) on the
    # local layers (models/gemma/gemma3_provider.py)
    if isinstance(window_size, int) and not isinstance(window_size, bool) and window_size >= 0:
        return window_size + 1
    return None


def _text(value: Any) -> str | None:
    """``value`` when it is a string (an enum member's ``value`` too), else None."""
    value = getattr(value, "value", value)
    return value if isinstance(value, str) else None


def seq_len_of(t: Target) -> int | None:
    """The sequence length the config trains at (model, then dataset), None when unset."""
    for obj, name in (
        (t.model, "seq_length"),
        (getattr(t.root, "dataset", None), "seq_length"),
        (getattr(t.root, "dataset", None), "sequence_length"),
    ):
        value = getattr(obj, name, None) if obj is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


#: Model providers whose attention refuses context parallelism when the model is built:
#: Megatron Bridge's Gemma 2 layer spec always uses its own unfused
#: ``Gemma2DotProductAttention`` (logit soft-capping), which asserts
#: ``context_parallel_size == 1`` ("Context parallelism is only supported by
#: TEDotProductAttention!", ``models/gemma/gemma2_provider.py``).
NO_CP_PROVIDERS = ("Gemma2",)


def adapter_violations(t: Target, s: Strategy) -> list[Violation]:
    """Rules about what a Megatron config can express, beyond the strategy's own rules."""
    out: list[Violation] = []
    provider = type(t.model).__name__
    if s.cp > 1 and provider.startswith(NO_CP_PROVIDERS):
        out.append(
            Violation(
                "provider-cp",
                f"cp={s.cp} on {provider}: Megatron Bridge builds its attention unfused "
                "(logit soft-capping), which asserts context_parallel_size == 1",
                "use cp=1 and split the sequence's memory with tp / recompute instead",
            )
        )
    for name in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups"):
        value = getattr(t.model, name, None)
        # 0 is let through: Bridge 0.3.1's deprecated DeepSeekV2/V3ModelProvider classes carry
        # 0 heads (the rules that need heads skip a 0); the HF-converted providers have them
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            out.append(
                Violation(
                    "megatron-config-field",
                    f"{type(t.model).__name__}.{name} is {value!r}, not a whole number, so "
                    "the rules that depend on it cannot be checked",
                    f"set {name} to a whole number (e.g. {name}=32, not '32')",
                )
            )
    if t.container and s.order not in (MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER):
        out.append(
            Violation(
                "bridge-order",
                f"Megatron Bridge can order ranks only as {MEGATRON_ORDER!r} or "
                f"{MEGATRON_TP_PP_DP_ORDER!r} (dist.use_tp_pp_dp_mapping); got {s.order!r}",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    if t.container and s.order == MEGATRON_TP_PP_DP_ORDER and (s.ep > 1 or s.cp > 1):
        out.append(
            Violation(
                "bridge-tp-pp-dp-mapping",
                f"order {s.order!r} (dist.use_tp_pp_dp_mapping) with ep={s.ep}, cp={s.cp}: "
                "Bridge supports that mapping only without EP and CP",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    return out
