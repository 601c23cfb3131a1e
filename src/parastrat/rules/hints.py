"""Hints that propose a pipeline split, held to the rules themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checks import fmt_set
from ..errors import StrategyError, Violation

if TYPE_CHECKING:
    from ..strategy import Strategy

#: Rules whose fix is a pipeline degree or split.
SPLIT_RULES = frozenset(
    {
        "world-dense",
        "layers-pp",
        "layers-vpp",
        "layers-accounted",
        "layers-uneven",
        "pipeline-layout-layers",
        "pipeline-layout-mtp",
        "pipeline-layout-embedding",
        "pipeline-layout-loss",
    }
)
_SPLIT_OFF = {
    "first_stage_layers": None,
    "last_stage_layers": None,
    "account_for_embedding": False,
    "account_for_loss": False,
    "pipeline_layout": None,
}


def _balanced_first_last(layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """The most even (first, last) stage layer counts whose rest splits over the middle
    stages, every count a multiple of vpp (first and last no larger than the middle)."""
    if pp < 3:
        return None
    best = None
    for first in range(vpp, layers, vpp):
        for last in range(vpp, layers - first, vpp):
            rest = layers - first - last
            if rest % (pp - 2) or (rest // (pp - 2)) % vpp:
                continue
            mid = rest // (pp - 2)
            if first <= mid and last <= mid:
                key = (mid - min(first, last), abs(first - last))
                if best is None or key < best[0]:
                    best = (key, (first, last))
    return best[1] if best else None


def _split_changes(s: Strategy, model: Any, world: int | None, rule: str) -> list[dict[str, Any]]:
    """Candidate fixes for a broken split rule, most recipe-like first."""
    from ..pipeline_layout import recipe_layouts

    layers = getattr(model, "num_layers", None) or 0
    mtp = getattr(model, "mtp_num_layers", None) or 0
    unit = s.tp * s.cp
    low = 1 if rule == "world-dense" else 2
    pps = [d for d in range(low, 129) if d != s.pp and (world is None or world % (unit * d) == 0)]
    out: list[dict[str, Any]] = [{"pp": d, **_SPLIT_OFF} for d in pps]
    if rule == "world-dense" or not layers:
        return out
    out += [{"vpp": v, **_SPLIT_OFF} for v in range(1, 9) if v != s.vpp]
    for emb, loss in ((True, True), (False, True), (True, False)):
        out.append({**_SPLIT_OFF, "account_for_embedding": emb, "account_for_loss": loss})
    pair = _balanced_first_last(layers, s.pp, s.vpp)
    if pair:
        out.append({**_SPLIT_OFF, "first_stage_layers": pair[0], "last_stage_layers": pair[1]})
    for text in recipe_layouts(layers, s.pp, s.vpp, mtp)[:1]:
        out.append({**_SPLIT_OFF, "pipeline_layout": text})
    return out


def _describe(change: dict[str, Any], s: Strategy) -> str:
    """``name=value`` for every field the change sets differently (resets included)."""
    shown = {k: v for k, v in change.items() if getattr(s, k) != v}
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in shown.items())


def verified_split_hints(
    s: Strategy, model: Any, errors: list[Violation], recheck: Any, world: int | None
) -> list[Violation]:
    """``errors`` with the hints of split rules rewritten to list only fixes that clear the
    rule and break no other: ``recheck(strategy)`` gives the set of rule ids a strategy
    breaks with the same model, world, sequence and batch."""
    before = {v.rule for v in errors}
    out = []
    for v in errors:
        if v.rule not in SPLIT_RULES:
            out.append(v)
            continue
        pps: list[int] = []
        others: list[str] = []
        for change in _split_changes(s, model, world, v.rule):
            try:
                after = recheck(s.replace(dp=None, **change))
            except StrategyError:
                continue
            if v.rule in after or not after <= before:
                continue
            if set(change) == {"pp", *_SPLIT_OFF} and not s.uneven and s.pipeline_layout is None:
                pps.append(change["pp"])
            elif len(others) < 3:
                others.append(_describe(change, s))
        fixes = ([f"pp in {fmt_set(pps)}"] if pps else []) + others
        if v.rule == "world-dense":  # other device counts stay the first answer
            fixes.insert(0, v.hint.split(", or pp in")[0].removeprefix("use "))
        hint = (
            "use " + "; or ".join(fixes)
            if fixes
            else f"no pipeline change fixes it alone ({v.hint})"
        )
        if fixes and v.rule.startswith("pipeline-layout"):  # mending the layout comes first
            hint = f"{v.hint}; or {hint}"
        out.append(Violation(v.rule, v.message, hint, v.severity))
    return out
