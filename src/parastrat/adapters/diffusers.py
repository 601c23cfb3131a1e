"""diffusers adapter: a Strategy as diffusers' context-parallel (or tensor-parallel) config.

diffusers (tested with 0.39, which the test extra pins below 0.40; ``TensorParallelConfig``
only from 0.40, so :func:`to_parallel_config` builds a TP config only where the installed
diffusers has that class, and ``plan-dit --framework diffusers`` proposes no TP: the diffusers
entry of :data:`~parastrat.spec.dit_frameworks.FRAMEWORKS`) parallelises a transformer with
``model.enable_parallelism(config=...)`` where the config is

* ``ContextParallelConfig(ring_degree=, ulysses_degree=, ...)``: a device mesh of shape
  ``(ring, ulysses)`` over **all** ranks (``init_device_mesh``), Ulysses the inner (contiguous)
  dimension — the same placement as parastrat's layout (Ulysses innermost); at least one
  degree must be > 1; or
* ``TensorParallelConfig(tp_degree=)``: a one-dimensional ``tp`` mesh over all ranks.

A ``ParallelConfig`` may hold one of the two, not both (diffusers raises), and diffusers has
no pipeline, expert or CFG-parallel axis and no data-parallel replicas.  So the strategies
it can express are exactly: Ulysses x ring over the whole world, or TP over the whole world.
Anything else is refused with StrategyError naming what to change.

diffusers is imported only when a config is built; a missing one raises MissingExtraError
naming the ``diffusers`` extra.
"""

from __future__ import annotations

from typing import Any

from .._deps import require
from ..errors import MissingExtraError, StrategyError, Violation
from ..spec.dit_frameworks import FRAMEWORKS
from ..strategy import Strategy, require_strategy

#: Rules :func:`to_context_parallel_config` drops when ``ulysses_anything=True`` (diffusers then
#: pads heads itself).
_HEAD_RULES = ("heads-ulysses", "kv-heads-ulysses")


def _common_violations(s: Strategy, world_size: int | None, unit: int) -> list[Violation]:
    out: list[Violation] = []
    if s.pp > 1:
        out.append(
            Violation(
                "diffusers-pp",
                f"pp={s.pp}: diffusers has no pipeline parallelism",
                "use pp=1 and give the devices to ulysses or ring",
            )
        )
    if s.ep > 1:
        out.append(
            Violation("diffusers-ep", f"ep={s.ep}: diffusers has no expert parallelism", "use ep=1")
        )
    if s.cfg > 1:
        out.append(
            Violation(
                "diffusers-cfg",
                f"cfg={s.cfg}: diffusers has no CFG-parallel axis (both guidance "
                "branches run as one batch)",
                f"use cfg=1 and ulysses*ring = {s.cp * s.cfg} (xDiT or MindIE-SD take cfg=2)",
            )
        )
    if s.sp:
        out.append(
            Violation(
                "diffusers-megatron-sp",
                "sp=True is Megatron's activation "
                "sharding; diffusers shards the sequence with ulysses/ring",
                "use sp=False",
            )
        )
    if world_size is not None and world_size != unit and not out:  # else a consequence
        out.append(
            Violation(
                "diffusers-world",
                f"world size {world_size} != {unit}: diffusers builds its mesh over all ranks and "
                "has no data-parallel replicas",
                f"use {unit} devices, or degrees whose product is {world_size}",
            )
        )
    return out


def _model_errors(s: Strategy, model: Any, skip: tuple[str, ...] = ()) -> list[Violation]:
    if model is None:
        return []
    return [v for v in s.check(model) if v.severity == "error" and v.rule not in skip]


def _diffusers() -> Any:
    mod = require("diffusers", "diffusers", "diffusers context parallelism")
    if not hasattr(mod, "ContextParallelConfig"):
        raise MissingExtraError(
            "diffusers",
            "diffusers",
            f"diffusers {getattr(mod, '__version__', '?')} has no ContextParallelConfig",
            needs=">=0.36",
        )
    return mod


def to_context_parallel_config(
    s: Strategy, model: Any = None, *, world_size: int | None = None, **options: Any
) -> Any:
    """``diffusers.ContextParallelConfig(ulysses_degree=s.ulysses, ring_degree=s.ring)``.

    ``options`` pass through (``convert_to_fp32``, ``ulysses_anything``, ...).  With ``model``
    the head rules (heads and KV heads divisible by Ulysses) are checked, unless
    ``ulysses_anything=True`` lets diffusers handle any head count.  ``world_size`` defaults to
    ``s.world_size`` when dp is set and must equal ulysses * ring.
    """
    require_strategy(s, "diffusers adapter")
    if world_size is None:
        world_size = s.world_size
    problems = _common_violations(s, world_size, s.cp)
    if s.tp > 1 and s.cp > 1:
        problems.append(
            Violation(
                "diffusers-cp-tp",
                f"tp={s.tp} with context parallelism: a diffusers "
                "ParallelConfig holds a context- or a tensor-parallel config, not both",
                f"use tp=1 and ulysses*ring = {s.tp * s.cp}, or to_parallel_config() with tp only",
            )
        )
    if s.cp == 1:
        problems.append(
            Violation(
                "diffusers-cp-none",
                "ulysses=1 and ring=1: diffusers' ContextParallelConfig needs one of them > 1",
                "set ulysses (inside a node) or ring > 1"
                + (", or use to_parallel_config() for tp only" if s.tp > 1 else ""),
            )
        )
    problems += [
        v for v in FRAMEWORKS["diffusers"].violations(s, model) if v.rule == "diffusers-sp"
    ]
    skip = _HEAD_RULES if options.get("ulysses_anything") else ()
    problems += _model_errors(s, model, skip)
    if problems:
        raise StrategyError(problems)
    cls = _diffusers().ContextParallelConfig
    try:
        return cls(ulysses_degree=s.ulysses, ring_degree=s.ring, **options)
    except (TypeError, ValueError, NotImplementedError) as exc:  # diffusers refused an option
        raise StrategyError(
            Violation(
                "diffusers-cp-option",
                f"diffusers' ContextParallelConfig refuses {s} with options {options}: {exc}",
                "drop or change that option (see diffusers' ContextParallelConfig); the degrees "
                "alone build",
            )
        ) from None


def to_parallel_config(s: Strategy, model: Any = None, *, world_size: int | None = None) -> Any:
    """``diffusers.ParallelConfig`` holding a context-parallel config (ulysses/ring > 1) or a
    tensor-parallel one (tp > 1 only)."""
    require_strategy(s, "diffusers adapter")
    if s.cp > 1 or s.tp == 1:
        cp = to_context_parallel_config(s, model, world_size=world_size)
        return _diffusers().ParallelConfig(context_parallel_config=cp)
    if world_size is None:
        world_size = s.world_size
    problems = _common_violations(s, world_size, s.tp) + _model_errors(s, model)
    if problems:
        raise StrategyError(problems)
    mod = _diffusers()
    tp_cls = getattr(mod, "TensorParallelConfig", None)
    if tp_cls is None:
        raise MissingExtraError(
            "diffusers",
            "diffusers",
            f"diffusers {getattr(mod, '__version__', '?')} has no TensorParallelConfig",
            needs=">=0.40",
        )
    return mod.ParallelConfig(tensor_parallel_config=tp_cls(tp_degree=s.tp))
