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
included).  Re-exported here: ``to_overrides`` (the Hydra-style overrides Megatron Bridge's
``scripts/training/run_recipe.py`` takes), ``megatron_lm_args`` (Megatron-LM's
``pretrain_gpt.py`` arguments) and the launch commands, from
:mod:`parastrat.adapters.megatron_launch`; ``model_view`` and the config recognisers from
:mod:`parastrat.adapters.megatron_config`.

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
from ..strategy import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER, Strategy, as_training
from .bridge_overrides import quantises
from .megatron_config import (
    NO_CP_PROVIDERS,
    ModelView,
    Target,
    adapter_violations,
    is_bridge_container,
    is_model_parallel_config,
    model_view,
    seq_len_of,
    target_of,
)
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
    planned,
    run_of,
)
from .megatron_hybrid import hybrid_build_check
from .megatron_launch import (
    HCCL_CONNECT_TIMEOUT_S,
    NO_EXPORTED_RECIPE,
    RECIPE_NAMES,
    default_recipe,
    launch_command,
    launch_env,
    megatron_lm_args,
    megatron_lm_command,
    recompute_overrides,
    to_overrides,
)

#: The adapter's public names: apply and read back here, the config's view
#: (:mod:`.megatron_config`) and the launch lines (:mod:`.megatron_launch`) re-exported.
__all__ = [
    "HCCL_CONNECT_TIMEOUT_S",
    "NO_CP_PROVIDERS",
    "NO_EXPORTED_RECIPE",
    "PLAN_SHAPE_FIELDS",
    "RECIPE_NAMES",
    "START_UP_SECTIONS",
    "Change",
    "ModelView",
    "apply",
    "default_recipe",
    "from_config",
    "is_bridge_container",
    "is_model_parallel_config",
    "launch_command",
    "launch_env",
    "megatron_lm_args",
    "megatron_lm_command",
    "model_view",
    "plan_changes",
    "priced_for_violations",
    "recompute_overrides",
    "to_overrides",
]

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
# Planning the writes (pure: reads the config, never changes it).
# ---------------------------------------------------------------------------------------------
#: Shape fields a plan's model must share with the config's to be applied there.
PLAN_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_moe_experts")


def priced_for_violations(what: Any, cfg: Any, seq_len: int | None) -> list[Violation]:
    """A plan, or a candidate the planner returned (:func:`planned`: it carries its plan's
    context), applied to a config whose model or sequence length it was not priced for: its
    micro-batch, recompute and memory would be another model's (nothing to compare for a
    Strategy or a hand-built candidate, which carry no model)."""
    what = planned(what)
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
    seq = seq_len if seq_len is not None else seq_len_of(target_of(cfg))
    priced = getattr(what, "seq_len", None)
    if seq is not None and priced is not None and seq != priced:
        out.append(
            Violation(
                "plan-seq-len",
                f"the plan was priced at seq_len {priced}; the config trains at {seq}",
                f"plan at seq_len {seq}, or set the config's seq_length to {priced} first",
            )
        )
    return out


def _applied(t: Target, s: Strategy, run: RunSettings | None) -> Applied:
    m = t.model
    dtype = None
    if s.pp > 1 and getattr(m, "pipeline_dtype", None) is None:
        dtype = require("torch", "megatron", "pipeline_dtype is a torch.dtype").bfloat16
    return Applied(s, run, bool(getattr(m, "num_moe_experts", None)), dtype)


def _writes(t: Target, a: Applied) -> list[_Write]:
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


def _named_precision_write(t: Target, values: dict[str, Any]) -> list[_Write]:
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


def _missing(t: Target, f: Field, new: Any, why: str) -> Violation:
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


def _trial(t: Target, writes: Sequence[_Write], start_up: bool) -> Any:
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


def _framework_violations(t: Target, writes: Sequence[_Write]) -> list[Violation]:
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


def _same_refusal(t: Target, start_up: bool, refused: BaseException) -> bool:
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
) -> tuple[Target, list[_Write]]:
    s, run = run_of(what)
    s = as_training(s)
    t = target_of(cfg)
    problems = priced_for_violations(what, cfg, seq_len) + adapter_violations(t, s)
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
            seq_len=seq_len if seq_len is not None else seq_len_of(t),
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
    (``(cfg, changes)`` with ``report=True``).  A candidate the planner returned is applied
    exactly as its plan with only that candidate would be (it carries the plan's context:
    the same checks, the same writes).

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
    ``train.micro_batch_size`` (``train.global_batch_size`` for a plan or a planner's
    candidate; explicit
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
    _warn_numerics(changes)
    return (cfg, changes) if report else cfg


#: Fields whose change alters the numbers a run computes, not only its layout or speed:
#: ``apply`` writes them as the plan priced them, and says so louder than the INFO log.
NUMERICS_FIELDS = ("grad_reduce_in_fp32",)


def _warn_numerics(changes: list[Change]) -> None:
    """Warn when ``apply`` changed a field in :data:`NUMERICS_FIELDS` (Bridge's Llama 3
    recipes reduce gradients in FP32; the plan's default prices BF16 reduction, as Megatron
    Core's default and Bridge's performance recipes)."""
    moved = [c for c in changes if c.path.rsplit(".", 1)[-1] in NUMERICS_FIELDS]
    if not moved:
        return
    message = (
        "parastrat.apply: changed the run's numerics as the plan priced them ("
        + "; ".join(str(c) for c in moved)
        + "); to keep the container's, plan with grad_reduce_in_fp32=True "
        "(--grad-reduce-in-fp32) or False to match it"
    )
    log.warning(message)
    warnings.warn(message, stacklevel=3)


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
    t = target_of(cfg)
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


def _megatron_fsdp_on(t: Target) -> bool:
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
