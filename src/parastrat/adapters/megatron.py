"""Megatron Bridge / Megatron Core adapter: write a Strategy into a config, read one back.

``apply(cfg, strategy)`` sets every parallelism field of

* a Megatron Bridge ``ConfigContainer`` (parallel sizes under ``cfg.model``, batch sizes under
  ``cfg.train``, the rank-order switch under ``cfg.dist``), or
* a bare Megatron Core ``TransformerConfig`` / ``ModelParallelConfig`` (Bridge's model
  providers are subclasses of it),

recognised by their attributes, so neither Bridge nor megatron-core is imported here.  It
validates first — with :meth:`Strategy.validate` against everything the config knows (heads,
query groups, layers, experts, sequence length, batch sizes against the world size) and then
by re-running the config's own checks on a copy — and changes nothing when it refuses.

Why validate here: Megatron Core's ``TransformerConfig`` runs its checks in ``__post_init__``,
that is only at construction; setting attributes afterwards does not re-run them (and
Bridge's providers defer them to ``finalize()``).  A config edited field by field is checked
by nobody until training starts; ``apply`` checks it when the fields are written.

``from_config(cfg)`` reads a Strategy back (``from_config(apply(cfg, s)) == s``), and
``to_overrides(s)`` gives the Hydra-style overrides Megatron Bridge's
``scripts/training/run_recipe.py`` takes on its command line.

Which fields exist is checked on the object, not pinned to a version: megatron-core 0.13+
(checked against 0.16.1) and megatron-bridge 0.3.1.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._deps import require
from ..errors import StrategyError, Violation
from ..strategy import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER, Strategy

log = logging.getLogger(__name__)

#: Fields ``apply`` may write on the model config (``cfg.model`` of a Bridge container, or the
#: Megatron Core config itself), in the order they are written.
MODEL_FIELDS: tuple[str, ...] = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "cp_comm_type",
    "hierarchical_context_parallel_sizes",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "pipeline_dtype",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)
#: Fields ``apply`` may write on a Bridge container's ``cfg.dist``.
DIST_FIELDS: tuple[str, ...] = ("use_tp_pp_dp_mapping",)
#: Fields read (never written) for validation: ``(section, field)``; section "" is the model.
READ_FIELDS: tuple[tuple[str, str], ...] = (
    ("model", "num_layers"),
    ("model", "hidden_size"),
    ("model", "num_attention_heads"),
    ("model", "num_query_groups"),
    ("model", "num_moe_experts"),
    ("model", "seq_length"),
    ("model", "pipeline_model_parallel_layout"),
    ("model", "account_for_embedding_in_pipeline_split"),
    ("model", "account_for_loss_in_pipeline_split"),
    ("train", "global_batch_size"),
    ("train", "micro_batch_size"),
)

#: Megatron's ``cp_comm_type`` values and how they read back as Ulysses x ring.
CP_COMM_RING = ("p2p", "all_gather")
CP_COMM_ULYSSES = "a2a"
CP_COMM_HIERARCHICAL = "a2a+p2p"


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
class ModelView:
    """The model shape a Megatron config holds, under the attribute names the rules read.

    Passed as ``model=`` to :meth:`Strategy.validate`, so the rules stay written once.
    """

    name: str
    num_layers: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_query_groups: int | None
    num_moe_experts: int | None


@dataclass(frozen=True)
class _Target:
    """Where the parts of a config live: the model config, and for Bridge train and dist."""

    root: Any
    model: Any
    train: Any | None
    dist: Any | None
    prefix: str  # "model." for a Bridge container, "" for a bare Megatron Core config

    @property
    def is_container(self) -> bool:
        return bool(self.prefix)


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


def _check_strategy(s: Any) -> None:
    """TypeError naming the type when ``s`` is not a :class:`~parastrat.Strategy`."""
    if not isinstance(s, Strategy):
        raise TypeError(
            f"expected a parastrat.Strategy, got {type(s).__name__}; build one with "
            "parastrat.Strategy(tp=..., pp=...) or parastrat.planner.compare.parse_strategy"
        )


def _target(cfg: Any) -> _Target:
    if is_bridge_container(cfg):
        return _Target(
            cfg, cfg.model, getattr(cfg, "train", None), getattr(cfg, "dist", None), "model."
        )
    if is_model_parallel_config(cfg):
        return _Target(cfg, cfg, None, None, "")
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
    )


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
def _adapter_violations(t: _Target, s: Strategy) -> list[Violation]:
    """Rules about what a Megatron config can express, beyond the strategy's own rules."""
    out: list[Violation] = []
    if s.is_inference:
        out.append(
            Violation(
                "megatron-inference-strategy",
                f"{s} uses the diffusion-inference rank order {s.order!r}"
                + (f" with cfg={s.cfg}" if s.cfg > 1 else "")
                + "; Megatron training has no CFG axis and orders ranks tp-cp-ep-dp-pp",
                "build the strategy with a training order, e.g. "
                f"Strategy(ulysses={s.ulysses}, ring={s.ring}, order={MEGATRON_ORDER!r}), "
                "and cfg=1",
            )
        )
        return out
    for name in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups"):
        value = getattr(t.model, name, None)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            out.append(
                Violation(
                    "megatron-config-field",
                    f"{type(t.model).__name__}.{name} is {value!r}, not a whole number >= 1, so "
                    "the rules that depend on it cannot be checked",
                    f"set {name} to a whole number (e.g. {name}=32, not '32')",
                )
            )
    if t.is_container and s.order not in (MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER):
        out.append(
            Violation(
                "bridge-order",
                f"Megatron Bridge can order ranks only as {MEGATRON_ORDER!r} or "
                f"{MEGATRON_TP_PP_DP_ORDER!r} (dist.use_tp_pp_dp_mapping); got {s.order!r}",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    if t.is_container and s.order == MEGATRON_TP_PP_DP_ORDER and (s.ep > 1 or s.cp > 1):
        out.append(
            Violation(
                "bridge-tp-pp-dp-mapping",
                f"order {s.order!r} (dist.use_tp_pp_dp_mapping) with ep={s.ep}, cp={s.cp}: "
                "Bridge supports that mapping only without EP and CP",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    m = t.model
    layout = getattr(m, "pipeline_model_parallel_layout", None)
    if layout is not None:
        current = (
            getattr(m, "pipeline_model_parallel_size", 1),
            getattr(m, "virtual_pipeline_model_parallel_size", None) or 1,
        )
        if (s.pp, s.vpp) != current or s.uneven:
            out.append(
                Violation(
                    "megatron-pipeline-layout",
                    f"{t.prefix}pipeline_model_parallel_layout is set (for pp={current[0]}, "
                    f"vpp={current[1]}) and would contradict pp={s.pp}, vpp={s.vpp}"
                    + (" with an uneven split" if s.uneven else ""),
                    f"set {t.prefix}pipeline_model_parallel_layout = None first, or keep "
                    f"pp={current[0]}, vpp={current[1]} and no first/last stage layer counts",
                )
            )
    if (
        (s.first_stage_layers is not None or s.last_stage_layers is not None)
        and (
            getattr(m, "account_for_embedding_in_pipeline_split", False)
            or getattr(m, "account_for_loss_in_pipeline_split", False)
        )
        and not (s.account_for_embedding or s.account_for_loss)
    ):
        out.append(
            Violation(
                "megatron-uneven-account-for",
                "first/last stage layer counts cannot be combined with "
                "account_for_embedding_in_pipeline_split/account_for_loss_in_pipeline_split "
                "(Megatron Core refuses both)",
                f"set {t.prefix}account_for_embedding_in_pipeline_split and "
                f"{t.prefix}account_for_loss_in_pipeline_split to False, or use an even split",
            )
        )
    return out


def _model_values(s: Strategy, set_pipeline_dtype: bool) -> list[tuple[str, Any, Any]]:
    """``(field, new value, neutral value)`` for the model config.

    A field the installed version lacks is skipped when the new value equals the neutral one
    (the feature is off), and refused otherwise.  ``pipeline_dtype`` (bf16) is included only
    with ``set_pipeline_dtype`` (pp > 1 and the config leaves it unset).
    """
    hier = [s.ulysses, s.ring] if s.ulysses > 1 and s.ring > 1 else None
    values: list[tuple[str, Any, Any]] = [
        ("tensor_model_parallel_size", s.tp, 1),
        ("pipeline_model_parallel_size", s.pp, 1),
        ("virtual_pipeline_model_parallel_size", s.vpp if s.vpp > 1 else None, None),
        ("context_parallel_size", s.cp, 1),
    ]
    if s.cp > 1:
        values.append(("cp_comm_type", s.cp_comm_type, "p2p"))
    values += [
        ("hierarchical_context_parallel_sizes", hier, None),
        ("expert_model_parallel_size", s.ep, 1),
        ("expert_tensor_parallel_size", s.etp, s.tp),
        ("sequence_parallel", s.sp, False),
    ]
    if set_pipeline_dtype:
        torch = require("torch", "megatron", "pipeline_dtype is a torch.dtype")
        values.append(("pipeline_dtype", torch.bfloat16, None))
    values += [
        ("num_layers_in_first_pipeline_stage", s.first_stage_layers, None),
        ("num_layers_in_last_pipeline_stage", s.last_stage_layers, None),
        ("account_for_embedding_in_pipeline_split", s.account_for_embedding, False),
        ("account_for_loss_in_pipeline_split", s.account_for_loss, False),
    ]
    return values


def _writes(t: _Target, s: Strategy) -> list[_Write]:
    m = t.model
    writes: list[_Write] = []
    missing: list[Violation] = []
    set_dtype = s.pp > 1 and getattr(m, "pipeline_dtype", None) is None
    for name, new, neutral in _model_values(s, set_dtype):
        path = t.prefix + name
        if not hasattr(m, name):
            if not _same(new, neutral):
                missing.append(
                    Violation(
                        "megatron-field-missing",
                        f"{type(m).__name__} has no field {name!r}, needed for {name}={new!r} "
                        "(an older megatron-core?)",
                        "upgrade megatron-core (parastrat checks 0.13+; 0.16.1 has every field) or "
                        "choose a strategy without that feature",
                    )
                )
            continue
        writes.append(_Write(m, name, path, getattr(m, name), new))
    if t.dist is not None and hasattr(t.dist, "use_tp_pp_dp_mapping"):
        writes.append(
            _Write(
                t.dist,
                "use_tp_pp_dp_mapping",
                "dist.use_tp_pp_dp_mapping",
                t.dist.use_tp_pp_dp_mapping,
                s.order == MEGATRON_TP_PP_DP_ORDER,
            )
        )
    elif t.is_container and s.order == MEGATRON_TP_PP_DP_ORDER:
        missing.append(
            Violation(
                "bridge-order",
                f"order {s.order!r} needs cfg.dist.use_tp_pp_dp_mapping, which "
                "this container lacks",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    if missing:
        raise StrategyError(missing)
    return writes


def _rerun_checks(model: Any) -> None:
    """Run the config's own validation: Bridge's deferred ``finalize()``, else
    Megatron Core's ``__post_init__``.  Their warnings are silenced: this runs on a copy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finalize = getattr(model, "finalize", None)
        if callable(finalize):
            finalize()
        elif hasattr(model, "__post_init__"):
            model.__post_init__()


def _framework_violations(model: Any, writes: Sequence[_Write]) -> list[Violation]:
    """Megatron Core's own checks, run on a copy carrying the new values.

    A second opinion for rules parastrat does not model (e.g. "bias in MoE needs ETP 1").
    When the unchanged config already fails them (or cannot be copied), nothing is reported:
    the refusal would not be about the strategy.
    """
    try:
        base = copy.deepcopy(model)
        _rerun_checks(base)
    except Exception as exc:
        log.debug("skipping megatron's own checks: the unchanged config fails them: %s", exc)
        return []
    trial = copy.deepcopy(model)
    for w in writes:
        if w.obj is model:
            setattr(trial, w.attr, w.new)
    try:
        _rerun_checks(trial)
    except (ValueError, AssertionError) as exc:
        return [
            Violation(
                "megatron-config",
                f"{type(model).__name__} refuses the new settings: {exc}",
                "parastrat's rules passed; this is a megatron-core rule about the rest of the "
                "config: change that field, or the strategy",
            )
        ]
    except Exception as exc:
        log.debug("megatron's own checks could not run on the new settings: %s", exc)
    return []


def _plan(
    cfg: Any,
    s: Strategy,
    *,
    world_size: int | None,
    seq_len: int | None,
    global_batch_size: int | None,
    micro_batch_size: int | None,
    framework_check: bool,
) -> tuple[_Target, list[_Write]]:
    _check_strategy(s)
    t = _target(cfg)
    problems = _adapter_violations(t, s)
    if not s.is_inference:
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
            )
            if v.severity == "error"
        ]
    if problems:
        raise StrategyError(problems)
    writes = _writes(t, s)
    if framework_check:
        problems = _framework_violations(t.model, writes)
        if problems:
            raise StrategyError(problems)
    return t, writes


# ---------------------------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------------------------
def plan_changes(
    cfg: Any,
    s: Strategy,
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
    s: Strategy,
    *,
    world_size: int | None = None,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    framework_check: bool = True,
    report: bool = False,
) -> Any:
    """Write strategy ``s`` into a Megatron Bridge ``ConfigContainer`` or a Megatron Core
    ``TransformerConfig``; return the config (``(cfg, changes)`` with ``report=True``).

    Validates first, against the strategy's rules with everything the config knows — model
    shape; ``seq_len`` (default: ``cfg.model.seq_length``); global/micro batch (default:
    ``cfg.train``) against ``world_size`` (default: ``s.world_size`` when ``s.dp`` is set) —
    then, with ``framework_check``, against the config's own Megatron checks run on a copy.
    Raises StrategyError listing every broken rule and leaves the config exactly as it was.

    Written: tensor/pipeline/virtual-pipeline/context/expert/expert-tensor parallel sizes
    (ETP always explicitly), ``cp_comm_type`` (ring -> ``p2p``, Ulysses -> ``a2a``, both ->
    ``a2a+p2p`` with ``hierarchical_context_parallel_sizes=[ulysses, ring]``; untouched when
    cp = 1), ``sequence_parallel``, ``pipeline_dtype`` (``torch.bfloat16`` when pp > 1 and it
    is unset), the first/last pipeline stage layer counts, and for Bridge
    ``dist.use_tp_pp_dp_mapping`` (the rank order).  Each change is logged at INFO level.
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
    done: list[_Write] = []
    try:
        for w in writes:
            if w.changes:
                done.append(w)  # before the write: a setter that fails half-way is undone too
                setattr(w.obj, w.attr, w.new)
    except BaseException:  # KeyboardInterrupt too: all or nothing
        _roll_back(done)
        raise
    changes = [Change(w.path, w.old, w.new) for w in done]
    for c in changes:
        log.info("parastrat.apply: %s", c)
    return (cfg, changes) if report else cfg


def _roll_back(done: Sequence[_Write]) -> None:
    """Restore every attempted write, newest first; a restore that raises does not stop the
    others (``object.__setattr__`` is tried for it), and one that cannot be done at all is
    reported after every other field is restored."""
    stuck: list[str] = []
    for w in reversed(done):
        try:
            setattr(w.obj, w.attr, w.old)
        except BaseException:
            try:
                object.__setattr__(w.obj, w.attr, w.old)
            except BaseException:
                stuck.append(w.path)
    if stuck:
        log.error("parastrat.apply could not restore %s after a failed write", ", ".join(stuck))


def from_config(cfg: Any, *, world_size: int | None = None) -> Strategy:
    """The Strategy a Bridge container or Megatron Core config describes.

    ``cp_comm_type`` tells Ulysses from ring (``a2a`` -> Ulysses, ``a2a+p2p`` ->
    ``hierarchical_context_parallel_sizes``, ``p2p``/``all_gather``/unset -> ring).  The order
    is Megatron's default, or ``tp-cp-ep-pp-dp`` when ``cfg.dist.use_tp_pp_dp_mapping``.
    With ``world_size`` the data-parallel degree is filled in.
    """
    t = _target(cfg)
    m = t.model
    cp = getattr(m, "context_parallel_size", 1) or 1
    ulysses, ring = _cp_split(m, cp, t.prefix)
    mapping = t.dist is not None and bool(getattr(t.dist, "use_tp_pp_dp_mapping", False))
    s = Strategy(
        tp=m.tensor_model_parallel_size,
        pp=m.pipeline_model_parallel_size,
        vpp=getattr(m, "virtual_pipeline_model_parallel_size", None) or 1,
        ulysses=ulysses,
        ring=ring,
        ep=getattr(m, "expert_model_parallel_size", 1) or 1,
        etp=getattr(m, "expert_tensor_parallel_size", None),
        sp=bool(getattr(m, "sequence_parallel", False)),
        order=MEGATRON_TP_PP_DP_ORDER if mapping else MEGATRON_ORDER,
        first_stage_layers=getattr(m, "num_layers_in_first_pipeline_stage", None),
        last_stage_layers=getattr(m, "num_layers_in_last_pipeline_stage", None),
        account_for_embedding=bool(getattr(m, "account_for_embedding_in_pipeline_split", False)),
        account_for_loss=bool(getattr(m, "account_for_loss_in_pipeline_split", False)),
    )
    return s.with_world_size(world_size) if world_size is not None else s


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


def to_overrides(
    s: Strategy, *, micro_batch_size: int | None = None, global_batch_size: int | None = None
) -> list[str]:
    """Hydra-style overrides for Megatron Bridge's ``scripts/training/run_recipe.py``.

    ``["model.tensor_model_parallel_size=4", ..., "dist.use_tp_pp_dp_mapping=false"]`` —
    every degree explicitly (ETP too), so a recipe's own values cannot leak through.
    ``pipeline_dtype`` is not among them: Bridge's ``finalize()`` sets it from
    ``params_dtype`` when pp > 1, and a string override on an unset field would stay a string.
    With batch sizes, ``train.micro_batch_size``/``train.global_batch_size`` are added.
    """
    _check_strategy(s)
    t = _Target(None, None, None, None, "model.")
    problems = _adapter_violations(t, s)
    if problems:
        raise StrategyError(problems)
    out = [f"model.{name}={_hydra(new)}" for name, new, _ in _model_values(s, False)]
    out.append(f"dist.use_tp_pp_dp_mapping={_hydra(s.order == MEGATRON_TP_PP_DP_ORDER)}")
    if micro_batch_size is not None:
        out.append(f"train.micro_batch_size={micro_batch_size}")
    if global_batch_size is not None:
        out.append(f"train.global_batch_size={global_batch_size}")
    return out


def recompute_overrides(mode: str) -> list[str]:
    """Megatron Bridge overrides for a recompute mode ("none", "selective" or "full"; UsageError
    naming them for anything else)."""
    from ..estimate.flops import normalize_recompute

    mode = normalize_recompute(mode)
    if mode == "full":
        return [
            "model.recompute_granularity=full",
            "model.recompute_method=uniform",
            "model.recompute_num_layers=1",
        ]
    if mode == "selective":
        return ["model.recompute_granularity=selective"]
    return ["model.recompute_granularity=null"]


def launch_env(s: Strategy, *, vendor: str = "nvidia", scale_up_domain: int = 8) -> list[str]:
    """Environment variables the strategy wants at launch (``NAME=value`` strings).

    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` when TP (with SP) stays in the NVLink domain, where
    Megatron overlaps TP communication with GEMMs and needs kernels issued in order;
    ``NCCL_P2P_NET_CHUNKSIZE`` larger for pipeline and context-parallel p2p across nodes;
    ``NCCL_NVLS_ENABLE=0`` on NVIDIA (NVLink SHARP buffers cost memory Megatron does not use).
    """
    env = []
    if vendor == "nvidia" and s.tp > 1 and s.sp and s.tp <= scale_up_domain:
        env.append("CUDA_DEVICE_MAX_CONNECTIONS=1")
    env += ["NCCL_IB_SL=1", "TORCH_NCCL_AVOID_RECORD_STREAMS=1"]
    if vendor == "nvidia":
        env.append("NCCL_NVLS_ENABLE=0")
    if s.pp > 1 or s.cp > 1:
        env.append("NCCL_P2P_NET_CHUNKSIZE=2097152")
    return env


def launch_command(
    s: Strategy,
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

    With ``rdzv_endpoint`` (e.g. ``"$MASTER_ADDR:29500"``) the c10d rendezvous flags a
    multi-node launch needs are added; ``recompute`` adds its overrides.
    """
    argv = ["torchrun", f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        argv.append(f"--nnodes={nnodes}")
    if rdzv_endpoint:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    argv += [script, "--recipe", recipe]
    argv += to_overrides(s, micro_batch_size=micro_batch_size, global_batch_size=global_batch_size)
    if recompute is not None:
        argv += recompute_overrides(recompute)
    return argv


def default_recipe(model_name: str) -> str:
    """A guess at the Bridge recipe for a preset (``llama3-70b`` -> ``llama3_70b_pretrain_config``).

    Bridge names its recipe functions after the model; pass the real one with ``--recipe``.
    """
    return model_name.replace(".", "_").replace("-", "_") + "_pretrain_config"


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


def _hydra(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    return str(value)


def _plain(value: Any) -> Any:
    """JSON-ready form of a config value (a torch dtype becomes its name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
