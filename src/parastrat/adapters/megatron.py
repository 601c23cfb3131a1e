"""Megatron Bridge / Megatron Core adapter: write a strategy (or a plan candidate) into a
config, read one back, print it as Bridge overrides or Megatron-LM arguments.

``apply(cfg, what)`` takes a :class:`~parastrat.Strategy`, a plan ``Candidate`` or a ``Plan``
(its best) and writes the rows of the one field table
(:mod:`parastrat.adapters.megatron_fields`) into

* a Megatron Bridge ``ConfigContainer`` (sections ``model``, ``train``, ``dist``,
  ``comm_overlap``), or
* a bare Megatron Core ``TransformerConfig`` / ``ModelParallelConfig`` (Bridge's model
  providers are subclasses of it),

recognised by their attributes, so neither Bridge nor megatron-core is imported here.  It
validates first — with :meth:`Strategy.check` against everything the config knows (heads,
query groups, layers, experts, sequence length, batch sizes against the world size) and then
by re-running the config's own checks on a copy — and changes nothing when it refuses.

Why validate here: Megatron Core's ``TransformerConfig`` runs its checks in ``__post_init__``,
that is only at construction; setting attributes afterwards does not re-run them (and
Bridge's providers defer them to ``finalize()``).  A config edited field by field is checked
by nobody until training starts; ``apply`` checks it when the fields are written.

``from_config(cfg)`` reads a Strategy back (``from_config(apply(cfg, s)) == s``, layouts
included); ``to_overrides`` gives the Hydra-style overrides Megatron Bridge's
``scripts/training/run_recipe.py`` takes, ``megatron_lm_args`` Megatron-LM's
``pretrain_gpt.py`` arguments.

Which fields exist is checked on the object, not pinned to a version: megatron-core 0.13+
(checked against 0.16.1) and megatron-bridge 0.3.1 (the real one, in the tests).
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._deps import require
from ..errors import StrategyError, Violation
from ..rules.offload import applied_violations
from ..spec.model import HybridShape
from ..strategy import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER, Strategy, as_training
from .bridge_overrides import hydra, override_lines, quantises, shape_of
from .megatron_fields import (
    CONTAINER_SECTIONS,
    CP_COMM_HIERARCHICAL,
    CP_COMM_RING,
    CP_COMM_ULYSSES,
    FIELDS,
    STRATEGY_FIELDS,
    Applied,
    Field,
    RunSettings,
    run_of,
)
from .megatron_hybrid import hybrid_build_check

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """One field ``apply`` sets: its dotted path in the config, the old and the new value."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.path}: {self.old!r} -> {self.new!r}"

    def to_dict(self) -> dict[str, Any]:
        """The change as a JSON-ready dict ``{"path", "old", "new"}`` (a torch dtype becomes its
        name), for machine-readable reports of what ``apply`` set."""
        return {"path": self.path, "old": _plain(self.old), "new": _plain(self.new)}


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
class _Target:
    """Where the parts of a config live: its sections by name (``model`` always; for a Bridge
    container ``train``, ``dist``, ``comm_overlap`` when present) and the path prefix."""

    root: Any
    sections: dict[str, Any]
    container: bool

    @property
    def model(self) -> Any:
        return self.sections["model"]

    @property
    def train(self) -> Any | None:
        return self.sections.get("train")

    @property
    def prefix(self) -> str:
        return "model." if self.container else ""

    def place(self, f: Field) -> tuple[Any, str] | None:
        """(object, dotted path) where field ``f`` lives here, or None."""
        for name in f.sections:
            obj = self.sections.get(name)
            if obj is not None:
                return obj, (f"{name}.{f.name}" if self.container else f.name)
        return None


@dataclass(frozen=True)
class _Write:
    obj: Any
    attr: str
    path: str
    old: Any
    new: Any

    @property
    def changes(self) -> bool:
        return not _same(self.old, self.new)


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


def _target(cfg: Any) -> _Target:
    if is_bridge_container(cfg):
        names = ("model", *CONTAINER_SECTIONS)
        found = {n: getattr(cfg, n, None) for n in names}
        return _Target(cfg, {n: v for n, v in found.items() if v is not None}, True)
    if is_model_parallel_config(cfg):
        return _Target(cfg, {"model": cfg}, False)
    raise TypeError(
        f"{type(cfg).__name__} is neither a Megatron Bridge ConfigContainer (cfg.model with "
        "tensor_model_parallel_size) nor a Megatron Core TransformerConfig/ModelParallelConfig "
        "(tensor_model_parallel_size and pipeline_model_parallel_size)"
    )


def model_view(cfg: Any) -> ModelView:
    """The model shape of a Bridge container or a Megatron Core config, for the rules."""
    m = _target(cfg).model

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


def _seq_len(t: _Target) -> int | None:
    for obj, name in (
        (t.model, "seq_length"),
        (getattr(t.root, "dataset", None), "seq_length"),
        (getattr(t.root, "dataset", None), "sequence_length"),
    ):
        value = getattr(obj, name, None) if obj is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# ---------------------------------------------------------------------------------------------
# Planning the writes (pure: reads the config, never changes it).
# ---------------------------------------------------------------------------------------------
#: Shape fields a plan's model must share with the config's to be applied there.
PLAN_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_moe_experts")


def priced_for_violations(what: Any, cfg: Any, seq_len: int | None) -> list[Violation]:
    """A plan applied to a config whose model or sequence length it was not priced for: its
    micro-batch, recompute and memory would be another model's (nothing to compare for a
    Strategy or a bare candidate, which carry no model)."""
    model = getattr(what, "model", None)
    if not (hasattr(what, "candidates") and hasattr(model, "num_layers")):
        return []
    view, out = model_view(cfg), []
    for name in PLAN_SHAPE_FIELDS:
        mine, theirs = getattr(model, name, None) or None, getattr(view, name, None)
        if mine is not None and theirs is not None and mine != theirs:
            out.append(
                Violation(
                    "plan-model",
                    f"the plan was priced for {getattr(model, 'name', 'its model')} "
                    f"({name} {mine}); the config's model "
                    f"({view.name}) has {name} {theirs}",
                    "plan the config's model (parastrat.plan with its ModelSpec or preset), or "
                    "apply plan.best.strategy to take its degrees alone",
                )
            )
    seq = seq_len if seq_len is not None else _seq_len(_target(cfg))
    planned = getattr(what, "seq_len", None)
    if seq is not None and planned is not None and seq != planned:
        out.append(
            Violation(
                "plan-seq-len",
                f"the plan was priced at seq_len {planned}; the config trains at {seq}",
                f"plan at seq_len {seq}, or set the config's seq_length to {planned} first",
            )
        )
    return out


#: Model providers whose attention refuses context parallelism when the model is built:
#: Megatron Bridge's Gemma 2 layer spec always uses its own unfused
#: ``Gemma2DotProductAttention`` (logit soft-capping), which asserts
#: ``context_parallel_size == 1`` ("Context parallelism is only supported by
#: TEDotProductAttention!", ``models/gemma/gemma2_provider.py``).
NO_CP_PROVIDERS = ("Gemma2",)


def _adapter_violations(t: _Target, s: Strategy) -> list[Violation]:
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


def _applied(t: _Target, s: Strategy, run: RunSettings | None) -> Applied:
    m = t.model
    dtype = None
    if s.pp > 1 and getattr(m, "pipeline_dtype", None) is None:
        dtype = require("torch", "megatron", "pipeline_dtype is a torch.dtype").bfloat16
    return Applied(s, run, bool(getattr(m, "num_moe_experts", None)), dtype)


def _writes(t: _Target, a: Applied) -> list[_Write]:
    """Every field of the table that applies here, with its old and new value."""
    writes: list[_Write] = []
    missing: list[Violation] = []
    named: dict[str, Any] = {}  # fields for a mixed_precision given as a recipe name
    for f in FIELDS:
        if not f.when(a):
            continue
        new = f.value(a)
        if f.sections[0] == "mixed_precision" and isinstance(t.sections.get(f.sections[0]), str):
            named[f.name] = new
            continue
        where = t.place(f)
        if f.optional and (where is None or not hasattr(where[0], f.name)):
            continue
        if where is None or not hasattr(where[0], f.name):
            if where is None and f.sections[0] in CONTAINER_SECTIONS:
                if f.name == "use_tp_pp_dp_mapping" and new and t.container:
                    missing.append(_missing(t, f, new, "this container has no dist section"))
                continue  # a bare Megatron Core config has no train/dist section
            if not _same(new, f.neutral):
                missing.append(_missing(t, f, new, "an older megatron-core?"))
            continue
        obj, path = where
        writes.append(_Write(obj, f.name, path, getattr(obj, f.name), new))
    if missing:
        raise StrategyError(missing)
    return writes + (_named_precision_write(t, named) if named else [])


def _named_precision_write(t: _Target, values: dict[str, Any]) -> list[_Write]:
    """A container whose ``mixed_precision`` is a recipe name ("bf16_mixed"): Bridge resolves
    it at start-up, so the fields are written on the resolved config, which replaces the name
    (nothing is written when the named recipe already has every value)."""
    mp = require("megatron.bridge.training.mixed_precision", "megatron", "a named recipe")
    old = t.sections["mixed_precision"]
    try:
        resolved = mp.get_mixed_precision_config(old)
    except ValueError as err:  # Bridge's message lists the recipe names it knows
        raise StrategyError(
            Violation(
                "mixed-precision-unknown",
                f"mixed_precision={old!r} names no Megatron Bridge recipe ({err})",
                "set cfg.mixed_precision to a known recipe name such as 'bf16_mixed' or to a "
                "MixedPrecisionConfig",
            )
        ) from None
    if all(_same(getattr(resolved, name, None), new) for name, new in values.items()):
        return []
    for name, new in values.items():
        setattr(resolved, name, new)
    return [_Write(t.root, "mixed_precision", "mixed_precision", old, resolved)]


def _missing(t: _Target, f: Field, new: Any, why: str) -> Violation:
    return Violation(
        "megatron-field-missing",
        f"{type(t.model).__name__} config has no field {f.name!r}, needed for "
        f"{f.name}={new!r} ({why})",
        "upgrade megatron-core (parastrat checks 0.13+; 0.16.1 has every field) or "
        "choose a strategy without that feature",
    )


def _rerun_checks(model: Any) -> None:
    """Run the config's own validation: Bridge's deferred ``finalize()``, else
    Megatron Core's ``__post_init__``; for a hybrid (Mamba) model also what Megatron Core
    asserts while building it (:func:`~parastrat.adapters.megatron_hybrid.hybrid_build_check`).
    Their warnings are silenced: this runs on a copy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finalize = getattr(model, "finalize", None)
        if callable(finalize):
            finalize()
        elif hasattr(model, "__post_init__"):
            model.__post_init__()
        hybrid_build_check(model)


#: Container sections Bridge's start-up (``runtime_config_update``) sets up onto the model
#: before its checks run, in its order: the mixed-precision recipe
#: (``MixedPrecisionConfig.setup``), then the comm-overlap settings (``CommOverlapConfig.setup``,
#: whose MoE-overlap checks are assertions of its own).
START_UP_SECTIONS = ("mixed_precision", "comm_overlap")


def _as_a_gpu_build(trial: Any) -> None:
    """The trial model as the GPU build it will run on has it: fused wgrad accumulation
    (``gradient_accumulation_fusion``, whose default asks for apex's CUDA kernel: False on a
    planning machine without one), so Megatron's "cannot defer embedding wgrad compute when
    gradient accumulation fusion is not used" is not charged to the strategy."""
    if getattr(trial, "gradient_accumulation_fusion", None) is False and not _cuda_available():
        trial.gradient_accumulation_fusion = True


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _trial(t: _Target, writes: Sequence[_Write], start_up: bool) -> Any:
    """A copy of the model section carrying the new values; with ``start_up``, as Bridge's
    start-up leaves it: copies of the container's ``mixed_precision`` (a recipe name
    resolved) and ``comm_overlap`` sections, with their new values, set up onto it."""
    trial = copy.deepcopy(t.model)
    for w in writes:
        if w.obj is t.model:
            setattr(trial, w.attr, w.new)
    _as_a_gpu_build(trial)
    if not start_up:
        return trial
    ddp = copy.deepcopy(t.sections.get("ddp"))
    for name in START_UP_SECTIONS:
        section: Any = t.sections.get(name)
        for w in writes:
            if w.obj is t.root and w.attr == name:  # a named recipe, resolved by apply
                section = w.new
        if isinstance(section, str):
            mp = require("megatron.bridge.training.mixed_precision", "megatron", "a recipe")
            section = mp.get_mixed_precision_config(section)
        if not callable(getattr(section, "setup", None)):
            continue
        done = copy.deepcopy(section)
        for w in writes:
            if w.obj is t.sections.get(name):
                setattr(done, w.attr, w.new)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            done.finalize()
            done.setup(trial, None, ddp)
    return trial


def _framework_violations(t: _Target, writes: Sequence[_Write]) -> list[Violation]:
    """Megatron's own checks, run on a copy carrying the new values.

    A second opinion for rules parastrat does not model (e.g. "bias in MoE needs ETP 1").
    For a Bridge container the copy first goes through what Bridge's start-up sets on the
    model (:data:`START_UP_SECTIONS`), so a setting that lives in ``comm_overlap`` (e.g. a
    recipe's ``defer_embedding_wgrad_compute``, which needs pp > 1) is seen before training
    starts.  A refusal stands even where the unchanged config is refused too (the written
    config would not start; :func:`_same_refusal` says so); checks that cannot run at all (no
    copy, a missing package) are skipped, first the start-up step, then the model's.
    """
    for start_up in (True, False) if t.container else (False,):
        try:
            _rerun_checks(_trial(t, writes, start_up))
            return []
        except (ValueError, AssertionError) as exc:
            refused = exc
        except Exception as exc:
            log.debug("megatron's own checks could not run on the new settings: %s", exc)
            continue
        where = " (with the container's mixed_precision and comm_overlap set up on it)"
        alike = _same_refusal(t, start_up, refused)
        return [
            Violation(
                "megatron-config",
                f"{type(t.model).__name__}{where if start_up else ''} refuses the new "
                f"settings: {refused}"
                + (" (it refuses the config without them too)" if alike else ""),
                getattr(refused, "hint", None)
                or "parastrat's rules passed; this is a Megatron rule about the rest of the "
                "config (comm_overlap and mixed_precision fields included): change that "
                "field, or the strategy",
            )
        ]
    return []


def _same_refusal(t: _Target, start_up: bool, refused: BaseException) -> bool:
    """True when the unchanged config is refused with the same message: the config fails to
    start with or without the strategy (said so in the refusal, which stands either way: the
    written config would not start)."""
    try:
        _rerun_checks(_trial(t, (), start_up))
    except Exception as exc:
        return str(exc) == str(refused)
    return False


def _plan(
    cfg: Any,
    what: Any,
    *,
    world_size: int | None,
    seq_len: int | None,
    global_batch_size: int | None,
    micro_batch_size: int | None,
    framework_check: bool,
) -> tuple[_Target, list[_Write]]:
    s, run = run_of(what)
    s = as_training(s)
    t = _target(cfg)
    problems = priced_for_violations(what, cfg, seq_len) + _adapter_violations(t, s)
    if (
        run is not None
        and run.moe_a2a_overlap
        and getattr(t.model, "hybrid_override_pattern", None)
    ):
        problems.append(
            Violation(
                "hybrid-a2a-overlap",
                "moe_a2a_overlap (overlap_moe_expert_parallel_comm) on a hybrid (Mamba) model: "
                "megatron-core's combined 1F1B schedule asserts a GPTModel at the first step",
                "leave moe_a2a_overlap off for hybrid models (a plan of the hybrid prices it off)",
            )
        )
    problems += applied_violations(t.model, s, run)  # CPU offloading priced (rules/offload.py)
    if micro_batch_size or global_batch_size:  # explicit sizes are written, as they are checked
        base = run or RunSettings()
        run = replace(
            base,
            micro_batch_size=micro_batch_size or base.micro_batch_size,
            global_batch_size=global_batch_size or base.global_batch_size,
        )
    if run is not None and t.train is None:  # nowhere to write the batch: keep it out
        run = replace(run, micro_batch_size=None, global_batch_size=None)
    if run is not None:
        micro_batch_size = micro_batch_size or run.micro_batch_size
        global_batch_size = global_batch_size or run.global_batch_size
    if global_batch_size is None and t.train is not None:
        global_batch_size = getattr(t.train, "global_batch_size", None)
    if micro_batch_size is None and t.train is not None:
        micro_batch_size = getattr(t.train, "micro_batch_size", None)
    problems += [
        v
        for v in s.check(
            model_view(cfg),
            world_size=world_size,
            seq_len=seq_len if seq_len is not None else _seq_len(t),
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            verify_hints=True,
        )
        if v.severity == "error"
    ]
    if problems:
        raise StrategyError(problems)
    writes = _writes(t, _applied(t, s, run))
    if framework_check:
        problems = _framework_violations(t, writes)
        if problems:
            raise StrategyError(problems)
    return t, writes


# ---------------------------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------------------------
def plan_changes(
    cfg: Any,
    s: Any,
    *,
    world_size: int | None = None,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    framework_check: bool = True,
) -> list[Change]:
    """What :func:`apply` would change (old -> new), after the same validation; the config is
    not touched.  Raises StrategyError exactly when ``apply`` would."""
    _, writes = _plan(
        cfg,
        s,
        world_size=world_size,
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
        framework_check=framework_check,
    )
    return [Change(w.path, w.old, w.new) for w in writes if w.changes]


def apply(
    cfg: Any,
    s: Any,
    *,
    world_size: int | None = None,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    framework_check: bool = True,
    report: bool = False,
) -> Any:
    """Write a strategy, a plan candidate or a plan (its best) into a Megatron Bridge
    ``ConfigContainer`` or a Megatron Core ``TransformerConfig``; return the config
    (``(cfg, changes)`` with ``report=True``).

    Validates first, against the strategy's rules with everything the config knows — model
    shape; ``seq_len`` (default: ``cfg.model.seq_length``); global/micro batch (default: the
    candidate's, else ``cfg.train``) against ``world_size`` (default: ``s.world_size`` when
    ``s.dp`` is set) — then, with ``framework_check``, against the config's own Megatron
    checks run on a copy.  Raises StrategyError listing every broken rule and leaves the
    config exactly as it was (also when interrupted while writing).

    Written (the field table :data:`parastrat.adapters.megatron_fields.FIELDS`): every
    parallel degree (ETP always explicitly), ``cp_comm_type`` (ring -> ``p2p``, Ulysses ->
    ``a2a``, both -> ``a2a+p2p`` with ``hierarchical_context_parallel_sizes=[ulysses, ring]``;
    untouched when cp = 1), ``sequence_parallel``, ``pipeline_dtype`` (``torch.bfloat16``
    when pp > 1 and it is unset), the pipeline split (first/last stage layer counts,
    ``account_for_*``, ``pipeline_model_parallel_layout``), for Bridge
    ``dist.use_tp_pp_dp_mapping``; and for a candidate or a plan what it was priced with:
    ``train.micro_batch_size`` (``train.global_batch_size`` for a plan; explicit
    ``global_batch_size`` / ``micro_batch_size`` are written too, replacing the candidate's,
    so that the run uses the sizes checked), recompute
    granularity/method/modules, and the MoE dispatcher, MoE and TP overlap and CUDA-graph
    switches it carries.  A bare Strategy changes nothing else.  Each change is logged at
    INFO level.
    """
    _, writes = _plan(
        cfg,
        s,
        world_size=world_size,
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
        framework_check=framework_check,
    )
    done = _commit([w for w in writes if w.changes])
    changes = [Change(w.path, w.old, w.new) for w in done]
    for c in changes:
        log.info("parastrat.apply: %s", c)
    _warn_kept_quantisation(cfg, s)
    return (cfg, changes) if report else cfg


def _warn_kept_quantisation(cfg: Any, what: Any) -> None:
    """Warn when a plan priced at BF16 lands on a container that quantises (its recipe's FP8 /
    FP4 is kept: ``apply`` never turns a recipe's FP8 off), so the run is not what was
    priced -- as the CLI's launch lines say."""
    _, run = run_of(what)
    mp = getattr(cfg, "mixed_precision", None)
    if run is None or run.precision != "bf16" or mp is None or not quantises(mp):
        return
    shown = mp if isinstance(mp, str) else type(mp).__name__
    message = (
        f"parastrat.apply: the plan was priced at bf16, and the container keeps its "
        f"quantised mixed precision ({shown}, fp8/fp4 on): plan at its precision "
        "(Workload(precision='fp8'), --precision fp8, ...) to price what it runs"
    )
    log.warning(message)
    warnings.warn(message, stacklevel=3)


def _commit(writes: list[_Write]) -> list[_Write]:
    """Write every change or none.

    Each object's new values are first set on a shallow copy (so a refusing setter fails
    before anything changes), then put in place with one ``__dict__.update`` per object; any
    BaseException (KeyboardInterrupt too) puts the old values back the same way.
    """
    by_obj: dict[int, tuple[Any, dict[str, Any], dict[str, Any]]] = {}
    for w in writes:
        obj, new, old = by_obj.setdefault(id(w.obj), (w.obj, {}, {}))
        new[w.attr], old[w.attr] = w.new, w.old
    staged = []
    for obj, new, old in by_obj.values():
        trial = copy.copy(obj)
        for attr, value in new.items():
            setattr(trial, attr, value)
        plain = hasattr(obj, "__dict__") and type(obj).__setattr__ is object.__setattr__
        staged.append((obj, {k: getattr(trial, k) for k in new}, old, plain))
    done: list[tuple[Any, dict[str, Any], bool]] = []
    try:
        for obj, new, old, plain in staged:
            done.append((obj, old, plain))
            _put(obj, new, plain)
    except BaseException:
        for obj, old, plain in reversed(done):
            _put(obj, old, plain)
        raise
    return writes


def _put(obj: Any, values: dict[str, Any], plain: bool) -> None:
    if plain:
        obj.__dict__.update(values)  # one step: nothing half-written
    else:
        for attr, value in values.items():
            setattr(obj, attr, value)


def from_config(cfg: Any, *, world_size: int | None = None) -> Strategy:
    """The Strategy a Bridge container or Megatron Core config describes (the field table
    read back, ``pipeline_model_parallel_layout`` included).

    ``cp_comm_type`` tells Ulysses from ring (``a2a`` -> Ulysses, ``a2a+p2p`` ->
    ``hierarchical_context_parallel_sizes``, ``p2p``/``all_gather``/unset -> ring).  The order
    is Megatron's default, or ``tp-cp-ep-pp-dp`` when ``cfg.dist.use_tp_pp_dp_mapping``.
    With ``world_size`` the data-parallel degree is filled in.
    """
    t = _target(cfg)
    kwargs: dict[str, Any] = {}
    for f in STRATEGY_FIELDS:
        where = t.place(f)
        if f.read is not None and where is not None and hasattr(where[0], f.name):
            kwargs.update(f.read(getattr(where[0], f.name)))
    if not _megatron_fsdp_on(t):  # a recipe's sharding strategy is read only under FSDP
        kwargs.pop("fsdp", None)
    m = t.model
    cp = getattr(m, "context_parallel_size", 1) or 1
    kwargs["ulysses"], kwargs["ring"] = _cp_split(m, cp, t.prefix)
    dist = t.sections.get("dist")
    mapping = dist is not None and bool(getattr(dist, "use_tp_pp_dp_mapping", False))
    kwargs["order"] = MEGATRON_TP_PP_DP_ORDER if mapping else MEGATRON_ORDER
    if kwargs.get("pipeline_layout") is not None:
        kwargs["vpp"] = None  # the layout sets it
    s = Strategy(**kwargs)
    return s.with_world_size(world_size) if world_size is not None else s


def _megatron_fsdp_on(t: _Target) -> bool:
    """Whether Megatron FSDP is on (``use_megatron_fsdp`` in ``ddp`` or ``dist``): only then
    does ``ddp.data_parallel_sharding_strategy`` mean anything (Bridge's Nemotron 3 Nano recipe
    leaves it at "optim_grads_params" with FSDP off)."""
    sections = [t.sections.get("ddp"), t.sections.get("dist")]
    if not t.container:
        sections.append(t.model)
    return any(getattr(sec, "use_megatron_fsdp", False) is True for sec in sections if sec)


def _cp_split(m: Any, cp: int, prefix: str) -> tuple[int, int]:
    """(ulysses, ring) from ``cp_comm_type`` and ``hierarchical_context_parallel_sizes``."""
    if cp == 1:
        return 1, 1
    kind = getattr(m, "cp_comm_type", None)
    if isinstance(kind, (list, tuple)):
        kinds = set(kind)
        if len(kinds) != 1:
            raise StrategyError(
                Violation(
                    "cp-comm-type-mixed",
                    f"{prefix}cp_comm_type differs between layers ({sorted(kinds)}); a Strategy "
                    "has one Ulysses x ring split for all layers",
                    f"set {prefix}cp_comm_type to one of 'p2p', 'a2a', 'a2a+p2p'",
                )
            )
        kind = kinds.pop()
    if kind is None or kind in CP_COMM_RING:
        return 1, cp
    if kind == CP_COMM_ULYSSES:
        return cp, 1
    if kind == CP_COMM_HIERARCHICAL:
        sizes = getattr(m, "hierarchical_context_parallel_sizes", None)
        if not sizes or len(sizes) != 2 or sizes[0] * sizes[1] != cp:
            raise StrategyError(
                Violation(
                    "cp-hierarchical-sizes",
                    f"{prefix}cp_comm_type='a2a+p2p' with context_parallel_size={cp} needs "
                    f"hierarchical_context_parallel_sizes=[ulysses, ring] with product {cp}; "
                    f"got {sizes!r}",
                    f"set {prefix}hierarchical_context_parallel_sizes, e.g. [2, {cp // 2}]"
                    if cp % 2 == 0
                    else f"use cp_comm_type='a2a' or 'p2p' for cp={cp}",
                )
            )
        return int(sizes[0]), int(sizes[1])
    raise StrategyError(
        Violation(
            "cp-comm-type-unknown",
            f"{prefix}cp_comm_type={kind!r} is not one parastrat knows",
            "use 'p2p' (ring), 'a2a' (Ulysses), 'a2a+p2p' (both) or 'all_gather'",
        )
    )


#: Sections ``to_overrides`` assumes a Bridge recipe's container has.
_OVERRIDE_SECTIONS = {"model": True, **dict.fromkeys(CONTAINER_SECTIONS, True)}


def _applied_to_recipe(s: Any, mbs: int | None, gbs: int | None) -> Applied:
    """What a launch line carries for a Strategy, candidate or plan on a recipe's container
    (every section present; MoE switches when the strategy has EP or the plan's model has
    experts); explicit batch sizes replace the candidate's."""
    strategy, run = run_of(s)
    strategy = as_training(strategy)
    problems = _adapter_violations(_Target(None, dict(_OVERRIDE_SECTIONS), True), strategy)
    if problems:
        raise StrategyError(problems)
    run = run or RunSettings()
    if mbs is not None:
        run = replace(run, micro_batch_size=mbs)
    if gbs is not None:
        run = replace(run, global_batch_size=gbs)
    return Applied(strategy, run, moe=strategy.ep > 1 or bool(run.moe_model))


def to_overrides(
    s: Any,
    *,
    recipe: Any = None,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
) -> list[str]:
    """Hydra-style overrides for Megatron Bridge's ``scripts/training/run_recipe.py``: the
    same field table as :func:`apply` on a recipe's container, for a Strategy, a plan
    candidate or a plan.

    ``["model.tensor_model_parallel_size=4", ..., "dist.use_tp_pp_dp_mapping=false"]`` —
    every degree explicitly (ETP too), so a recipe's own values cannot leak through.
    ``pipeline_dtype`` is not among them: Bridge's ``finalize()`` sets it from
    ``params_dtype`` when pp > 1, and a string override on an unset field would stay a string.
    A candidate adds what it was priced with (micro-batch, recompute, switches, precision);
    explicit batch sizes are added (or replace the candidate's).

    ``recipe``: the recipe the lines go onto — its ``ConfigContainer`` or its name as
    ``run_recipe.py --recipe`` takes it.  Bridge's parser refuses a line written for the
    other shape of the ``comm_overlap`` and ``mixed_precision`` sections, so they are placed
    as that recipe holds them (:mod:`parastrat.adapters.bridge_overrides`); with None, both
    sections are taken to be config objects.
    """
    a = _applied_to_recipe(s, micro_batch_size, global_batch_size)
    writes = [
        (f.sections, f.name, f.value(a)) for f in FIELDS if f.when(a) and f.name != "pipeline_dtype"
    ]
    return override_lines(writes, shape_of(recipe))


def megatron_lm_args(
    s: Any, *, micro_batch_size: int | None = None, global_batch_size: int | None = None
) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` arguments (MindSpeed-LLM takes the same) for a
    Strategy, a plan candidate or a plan: the field table's ``arg`` column.

    ``["--tensor-model-parallel-size", "4", ..., "--sequence-parallel"]`` as an argv list: a
    flag appears when on, a list gives one word per item, a layout is written in the string
    syntax.  The virtual pipeline size is ``--num-virtual-stages-per-pipeline-rank`` (it
    also holds with an uneven split), and is left out with a layout, which sets it.  Names
    checked against Megatron-LM's ``megatron/training/arguments.py`` (tests/data).
    """
    a = _applied_to_recipe(s, micro_batch_size, global_batch_size)
    strategy = a.s
    argv: list[str] = []
    for f in FIELDS:
        if f.arg is None or not f.when(a):
            continue
        if f.name == "virtual_pipeline_model_parallel_size" and strategy.pipeline_layout:
            continue
        value = f.value(a)
        if f.arg_value is not None and value is not None:
            value = f.arg_value(value)
        argv += _arg_words(f.arg, value)
    if _on_ascend(s) and strategy.cp > 1:
        argv += _mindspeed_cp_args(strategy)
    if a.run is not None and a.run.precision is not None:
        # every precision the step model prices keeps BF16 parameters and activations;
        # Megatron-LM's validate_args leaves params_dtype float32 without --bf16 (Bridge's
        # mixed-precision recipes set it themselves, so this is an argument only)
        argv.append("--bf16")
    return argv


def _on_ascend(what: Any) -> bool:
    """Whether ``what`` is a plan for an Ascend (huawei) cluster (MindSpeed-LLM runs it)."""
    accel = getattr(getattr(what, "cluster", None), "accel", None)
    return getattr(accel, "vendor", None) == "huawei"


def _mindspeed_cp_args(s: Strategy) -> list[str]:
    """MindSpeed's context-parallel algorithm for ``s``'s Ulysses x ring split: MindSpeed
    chooses it from ``--context-parallel-algo`` (``ulysses_cp_algo``, ``megatron_cp_algo`` for
    ring attention, ``hybrid_cp_algo`` with ``--ulysses-degree-in-cp``), not from Megatron's
    ``--cp-comm-type`` (MindSpeed ``arguments.py``, "cp parallel" group)."""
    if s.ulysses > 1 and s.ring > 1:
        return [
            "--context-parallel-algo",
            "hybrid_cp_algo",
            "--ulysses-degree-in-cp",
            str(s.ulysses),
        ]
    return ["--context-parallel-algo", "ulysses_cp_algo" if s.ulysses > 1 else "megatron_cp_algo"]


def _arg_words(arg: str, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [arg]
    if isinstance(value, (list, tuple)):
        return [arg, *map(str, value)]
    return [arg, str(value)]


def recompute_overrides(mode: str) -> list[str]:
    """Megatron Bridge overrides for a recompute mode ("none", "selective" or "full"; UsageError
    naming them for anything else): the recompute rows of the field table."""
    from ..estimate.flops import normalize_recompute

    run = RunSettings(recompute=normalize_recompute(mode))
    a = Applied(Strategy(), run, moe=False)
    return [
        f"{f.sections[0]}.{f.name}={hydra(f.value(a))}"
        for f in FIELDS
        if f.name.startswith("recompute_") and f.when(a)
    ]


#: HCCL's connection set-up timeout (s) MindSpeed-LLM's pretrain scripts export (1200-3600
#: in its examples; HCCL's default of 120 s is short for thousands of ranks).
HCCL_CONNECT_TIMEOUT_S = 1200


def launch_env(s: Strategy, *, vendor: str = "nvidia", scale_up_domain: int = 8) -> list[str]:
    """Environment variables the strategy wants at launch (``NAME=value`` strings).

    NVIDIA (NCCL): ``CUDA_DEVICE_MAX_CONNECTIONS=1`` when TP (with SP) stays in the NVLink
    domain, where Megatron overlaps TP communication with GEMMs and needs kernels issued in
    order; ``NCCL_P2P_NET_CHUNKSIZE`` larger for pipeline and context-parallel p2p across
    nodes; ``NCCL_NVLS_ENABLE=0`` (NVLink SHARP buffers cost memory Megatron does not use).
    Ascend (``vendor="huawei"``, HCCL): no NCCL variable; ``HCCL_CONNECT_TIMEOUT`` as
    MindSpeed-LLM's scripts set it, and ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with SP, which those
    scripts also export only to pass Megatron's own argument check (no effect on an NPU).
    Never ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with Megatron FSDP, which refuses it.
    """
    # Megatron FSDP needs more than one connection (Megatron-LM's validate_args asserts
    # "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
    fsdp = s.fsdp is not None
    if vendor == "huawei":
        env = [f"HCCL_CONNECT_TIMEOUT={HCCL_CONNECT_TIMEOUT_S}"]
        if s.tp > 1 and s.sp and not fsdp:
            env.append("CUDA_DEVICE_MAX_CONNECTIONS=1")
        return env
    env = []
    if vendor == "nvidia" and s.tp > 1 and s.sp and s.tp <= scale_up_domain and not fsdp:
        env.append("CUDA_DEVICE_MAX_CONNECTIONS=1")
    env += ["NCCL_IB_SL=1", "TORCH_NCCL_AVOID_RECORD_STREAMS=1"]
    if vendor == "nvidia":
        env.append("NCCL_NVLS_ENABLE=0")
    if s.pp > 1 or s.cp > 1:
        env.append("NCCL_P2P_NET_CHUNKSIZE=2097152")
    return env


def launch_command(
    s: Any,
    *,
    recipe: str,
    nproc_per_node: int,
    nnodes: int = 1,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
    recompute: str | None = None,
    rdzv_endpoint: str | None = None,
    script: str = "scripts/training/run_recipe.py",
) -> list[str]:
    """``torchrun ... run_recipe.py --recipe NAME <overrides>`` as an argv list.

    ``s``: a Strategy, a plan candidate or a plan; its :func:`to_overrides` for ``recipe``
    (placed as that recipe holds its sections), so a plan's switches and precision are part
    of the line.  ``recompute`` adds its overrides; an override given twice keeps its last
    value.  With ``rdzv_endpoint`` (e.g. ``"$MASTER_ADDR:29500"``) the c10d rendezvous flags a
    multi-node launch needs are added.
    """
    argv = ["torchrun", f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        argv.append(f"--nnodes={nnodes}")
    if rdzv_endpoint:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    lines = to_overrides(
        s,
        recipe=recipe,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
    )
    if recompute is not None:
        lines += recompute_overrides(recompute)
    by_key = {line.split("=", 1)[0]: line for line in lines}  # first place, last value
    return [*argv, script, "--recipe", recipe, *by_key.values()]


def megatron_lm_command(
    s: Any,
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    global_batch_size: int | None = None,
    rdzv_endpoint: str | None = None,
    script: str = "pretrain_gpt.py",
) -> list[str]:
    """``torchrun ... pretrain_gpt.py <Megatron-LM arguments>`` as an argv list: Megatron-LM's
    own launcher, which MindSpeed-LLM keeps on Ascend NPUs (no Transformer Engine, no CUDA).
    The model, data and optimizer arguments are the user's to add."""
    argv = ["torchrun", f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        argv.append(f"--nnodes={nnodes}")
    if rdzv_endpoint:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    return [*argv, script, *megatron_lm_args(s, global_batch_size=global_batch_size)]


#: Presets whose Megatron Bridge recipe is not named by the rule below: Bridge 0.3.1 drops the
#: dot of a Llama version (``megatron.bridge.recipes.llama31_405b_pretrain_config``,
#: ``llama32_1b_pretrain_config``) and the hyphen of Nemotron-H (``nemotronh_56b_...``), and
#: ``run_recipe.py`` finds a recipe only by its exact name
#: in ``megatron.bridge.recipes``.
RECIPE_NAMES = {
    "llama3.1-405b": "llama31_405b_pretrain_config",
    "llama3.2-1b": "llama32_1b_pretrain_config",
    # Bridge spells the Nemotron-H family without the hyphen (recipes/nemotronh/nemotronh.py);
    # nemotron-nano-9b-v2 and nemotron-3-nano follow the rule
    "nemotron-h-8b": "nemotronh_8b_pretrain_config",
    "nemotron-h-47b": "nemotronh_47b_pretrain_config",
    "nemotron-h-56b": "nemotronh_56b_pretrain_config",
}
#: Presets for which Megatron Bridge 0.3.1 exports no pretrain recipe from
#: ``megatron.bridge.recipes`` (so ``run_recipe.py --recipe`` cannot find one): GPT-3 175B's
#: and Kimi K2's live in modules the package does not export (``recipes/gpt/gpt3_175b.py``;
#: ``recipes/kimi`` has no ``__init__``), Mixtral, Nemotron-4 and Llama 4 have none.
NO_EXPORTED_RECIPE = frozenset(
    {
        "gpt3-175b",
        "kimi-k2",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "nemotron4-15b",
        "nemotron4-340b",
        "llama4-scout",
        "llama4-maverick",
    }
)


def default_recipe(model_name: str) -> str | None:
    """The Bridge recipe ``run_recipe.py`` would run for a preset: the name Bridge gives it
    (:data:`RECIPE_NAMES`), None where Bridge exports none (:data:`NO_EXPORTED_RECIPE`: the
    caller must name one), else the name the model's follows Bridge's rule
    (``llama3-70b`` -> ``llama3_70b_pretrain_config``)."""
    if model_name in NO_EXPORTED_RECIPE:
        return None
    return RECIPE_NAMES.get(model_name) or (
        model_name.replace(".", "_").replace("-", "_") + "_pretrain_config"
    )


# ---------------------------------------------------------------------------------------------
# Small helpers.
# ---------------------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) and not (
        isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
    ):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


def _plain(value: Any) -> Any:
    """JSON-ready form of a config value (a torch dtype becomes its name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
