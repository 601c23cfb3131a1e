"""Hints that propose a pipeline split, held to the rules themselves."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set
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


def verified_node_hint(
    s: Strategy, v: Violation, recheck: Any, before: set[str], devices_per_node: int
) -> Violation:
    """``v`` with, when it is ``tp-across-nodes``, a fix naming the largest tp inside a node
    that breaks no rule ``s`` does not already break (``before``; ``recheck(strategy)``
    gives the rule ids a strategy breaks): the heads and query groups allow it, the world
    and the sequence take it.  Any other violation is returned as is."""
    if v.rule != "tp-across-nodes":
        return v
    for tp in range(min(devices_per_node, s.tp - 1), 0, -1):
        change: dict[str, Any] = {"tp": tp, "sp": s.sp and tp > 1, "dp": None}
        try:
            after = recheck(s.replace(**change))
        except StrategyError:
            continue
        if after <= before:
            off = " without sp" if s.sp and tp == 1 else ""
            hint = (
                f"use tp={tp}{off} (the largest tp <= {devices_per_node} the rules allow "
                "here); use pp (or cp) across nodes"
            )
            return Violation(v.rule, v.message, hint, v.severity)
    hint = f"no tp <= {devices_per_node} passes the rules here; keep tp and mind the slow link"
    return Violation(v.rule, v.message, hint, v.severity)


#: ``works(change)``: whether the strategy with ``change`` applied builds and breaks no hard
#: rule on the world at hand (:func:`~parastrat.rules.check.world_fixes` makes one).
Works = Callable[[dict[str, Any]], bool]


def cp_ulysses_fix(fields: Mapping[str, Any], world: int, works: Works) -> str | None:
    """``cp-ulysses-ring``'s fix (cp not a multiple of ulysses, ring not given) on ``world``
    devices: the multiples of ulysses that work there, and the smaller ulysses that keep cp
    (ring = cp / ulysses); None when ring was given (another message, its own fix)."""
    u, cp = fields.get("ulysses") or 1, fields.get("cp")
    if cp is None or fields.get("ring") is not None:
        return None
    cps = [c for c in divisors(world) if c % u == 0 and works({"cp": c})]
    lower = [d for d in divisors(cp) if d < u and works({"ulysses": d})]
    fixes = [f"use cp in {fmt_set(cps)} (multiples of ulysses={u} that {world} devices take)"]
    if not cps:
        fixes = [f"no multiple of ulysses={u} fits {world} devices with the other degrees"]
    if lower:
        fixes.append(f"keep cp={cp} with ulysses in {fmt_set(lower)} (ring = cp / ulysses)")
    elif not cps:
        fixes.append(f"no ulysses dividing cp={cp} passes the rules either; change tp or pp")
    return "; or ".join(fixes)


def layout_pp_fix(fields: Mapping[str, Any], world: int, works: Works, model: Any) -> str | None:
    """The fix when a pipeline layout's stages do not suit pp (``pipeline-layout-pp``, and
    ``vpp-needs-pp`` at pp=1, where the layout set vpp): the pp > 1 dividing its stages that
    work on ``world`` devices, else a recipe-style layout that does; None without a layout."""
    from ..pipeline_layout import PipelineLayout, normalize

    layout = fields.get("pipeline_layout")
    if layout is None:
        return None
    stages = len(PipelineLayout(normalize(layout), 1).stages)
    pps = [p for p in divisors(stages) if p > 1 and works({"pp": p, "vpp": None})]
    if pps:
        return f"use pp in {fmt_set(pps)} (dividing the layout's {stages} stages)"
    return _recipe_layout_fix(fields, world, works, model, stages)


def _recipe_layout_fix(
    fields: Mapping[str, Any], world: int, works: Works, model: Any, stages: int
) -> str | None:
    """A recipe-style layout (:func:`~parastrat.pipeline_layout.recipe_layouts`) for the pp
    given (or, at pp=1, a pp up to 16 dividing ``world``), its stage count nearest the
    layout's ``stages``, that works; None when none does."""
    from ..pipeline_layout import recipe_layouts

    layers = getattr(model, "num_layers", None) or 0
    mtp = getattr(model, "mtp_num_layers", None) or 0
    pp = fields.get("pp") or 1
    pps = [pp] if pp > 1 else [d for d in divisors(world) if 1 < d <= 16]
    shapes = sorted(
        ((p, v) for p in pps for v in range(1, 17)),
        key=lambda x: (abs(x[0] * x[1] - stages), x[1]),
    )
    for p, v in shapes[:32] if layers else ():
        for text in recipe_layouts(layers, p, v, mtp)[:1]:
            if works({"pp": p, "vpp": None, "pipeline_layout": text}):
                where = f"pipeline_layout={text!r}"
                where = where if p == pp else f"pp={p} with {where}"
                return f"give the layout a multiple of pp={p} stages, e.g. {where} ({p * v} stages)"
    return None
