"""Every rule together: :func:`check`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..checks import is_count
from ..errors import Violation
from .batch import batch_violations, chunk_violations, sequence_violations
from .fsdp import fsdp_soft_violations
from .hints import (
    SPLIT_RULES,
    cp_ulysses_fix,
    layout_pp_fix,
    verified_node_hint,
    verified_split_hints,
)
from .model import model_violations, resolve_model
from .soft import soft_violations
from .violations import err
from .world import world_violations

if TYPE_CHECKING:
    from ..strategy import Strategy


def check(
    s: Strategy,
    model: Any = None,
    *,
    world_size: int | None = None,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    devices_per_node: int | None = None,
    verify_hints: bool = False,
) -> list[Violation]:
    """Every rule the given inputs allow checking: errors first, then warnings.

    With ``verify_hints`` (user-facing checks) a broken pipeline-split rule's hint lists only
    fixes that clear it and break no other rule (:func:`verified_split_hints`), and
    ``tp-across-nodes`` names the largest TP inside a node that does (:func:`verified_node_hint`).
    """
    model = resolve_model(model)
    out, world, world_ok = _world_check(s, world_size)
    if model is not None:
        out += model_violations(s, model)
    if seq_len is not None:
        if not is_count(seq_len):
            out.append(
                err(
                    "seq-len-positive",
                    f"seq_len={seq_len!r} must be an int >= 1",
                    "pass the training sequence length in tokens",
                )
            )
        else:
            out += sequence_violations(s, seq_len)
            if model is not None:
                out += chunk_violations(s, model, seq_len)
    if world_ok and world is not None and s.fsdp is not None:
        out += fsdp_soft_violations(s, world // s.model_parallel_size)
    if global_batch_size is not None or micro_batch_size is not None:
        dp = world // s.model_parallel_size if world_ok and world is not None else None
        out += _batch_check(s, dp, global_batch_size, micro_batch_size)
    soft = soft_violations(s, devices_per_node)
    if model is not None and getattr(model, "hybrid_override_pattern", None):
        # MambaStack takes no virtual pipeline (hybrid-vpp): no advice to interleave
        soft = [v for v in soft if v.rule not in ("pp-without-vpp", "vpp-pp2")]
    out += soft
    if verify_hints and model is not None:
        batch = (seq_len, global_batch_size, micro_batch_size)
        out = _verified(s, model, out, world, batch, devices_per_node)
    return sorted(out, key=lambda v: v.severity != "error")


def _verified(
    s: Strategy,
    model: Any,
    found: list[Violation],
    world: Any,
    batch: tuple[int | None, int | None, int | None],
    devices_per_node: int | None,
) -> list[Violation]:
    """``found`` with the hints that propose another pipeline split
    (:func:`verified_split_hints`) or TP (:func:`verified_node_hint`) listing only fixes
    that break no rule ``s`` does not already break; ``batch``: (seq_len, global batch,
    micro-batch)."""
    w = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None
    seq_len, gbs, mbs = batch

    def recheck(t: Strategy) -> set[str]:
        got = check(
            t, model, world_size=w, seq_len=seq_len, global_batch_size=gbs, micro_batch_size=mbs
        )
        return {v.rule for v in got if v.severity == "error"}

    errors = [v for v in found if v.severity == "error"]
    rest = [v for v in found if v.severity != "error"]
    if any(v.rule in SPLIT_RULES for v in errors):
        errors = verified_split_hints(s, model, errors, recheck, w)
    if devices_per_node:
        before = {v.rule for v in errors}
        rest = [verified_node_hint(s, v, recheck, before, devices_per_node) for v in rest]
    return errors + rest


def world_fixes(
    violations: list[Violation],
    fields: Mapping[str, Any],
    world: int,
    model: Any = None,
    **context: Any,
) -> list[Violation]:
    """``violations`` raised while building a Strategy from ``fields`` (its keyword
    arguments), before any world was known, with the fixes of ``cp-ulysses-ring``,
    ``pipeline-layout-pp`` and ``vpp-needs-pp`` (at pp=1 under a layout) worked out for
    ``world`` devices: each fix named is a change that builds and breaks no hard rule there
    (``model`` and ``context``, :func:`check`'s seq_len / batch keywords, checked too).
    Others are returned as they are."""
    from ..errors import StrategyError
    from ..strategy import Strategy

    model = resolve_model(model)

    def works(change: dict[str, Any]) -> bool:
        try:
            s = Strategy(**{**fields, **change})
        except StrategyError:
            return False
        found = check(s, model, world_size=world, **context)
        return not any(v.severity == "error" for v in found)

    out = []
    for v in violations:
        hint = None
        if v.rule == "cp-ulysses-ring":
            hint = cp_ulysses_fix(fields, world, works)
        elif v.rule in ("pipeline-layout-pp", "vpp-needs-pp"):
            hint = layout_pp_fix(fields, world, works, model)
        out.append(Violation(v.rule, v.message, hint, v.severity) if hint else v)
    return out


def _world_check(s: Strategy, world_size: Any) -> tuple[list[Violation], int | None, bool]:
    """(violations, the world to check against, whether it is a valid one): ``world_size``
    when given (checked against the grid), else the strategy's own."""
    if world_size is None:
        return [], s.world_size, s.world_size is not None
    if not is_count(world_size):
        bad = err(
            "world-size-positive",
            f"world_size={world_size!r} must be an int >= 1",
            "pass the number of devices",
        )
        return [bad], None, False
    found = world_violations(s, world_size)
    return found, world_size, not found


def _batch_check(
    s: Strategy, dp: int | None, global_batch_size: int | None, micro_batch_size: int | None
) -> list[Violation]:
    """The batch rules over ``dp`` replicas; without a valid world only what needs none (the
    micro-batch's, and the global batch's positivity)."""
    if dp is not None:
        return batch_violations(s, dp, global_batch_size, micro_batch_size)
    out = batch_violations(s, 1, None, micro_batch_size)
    if global_batch_size is not None:
        out += [
            v
            for v in batch_violations(s, 1, global_batch_size, None)
            if v.rule.endswith("-positive")
        ]
    return out
