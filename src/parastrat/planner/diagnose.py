"""Why nothing is legal: the rules that pinned degrees break whatever the device count.

When ``plan`` finds no legal strategy, suggesting other device counts or batch sizes helps only
if the device count is the problem.  A pin such as ``tp=3`` on a model with 64 attention heads
breaks ``heads-tp`` on every world size; the honest answer names that rule (with its fix)
instead.  :func:`pinned_violations` finds such rules with :meth:`Strategy.check` run without a
world size (so only the rules about the strategy, the model and the sequence apply) over every
variant the planner would try for those pins (an uneven pipeline split through
``account_for_embedding`` / ``account_for_loss``), keeping the rules broken in all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from itertools import product
from typing import Any

from ..errors import StrategyError, Violation
from ..strategy import MEGATRON_ORDER, Strategy

#: Degrees ``plan`` takes as pins.
PIN_NAMES = ("tp", "pp", "vpp", "cp", "ep", "etp", "ulysses")


def pinned_violations(
    model: Any, pins: Mapping[str, int | None], *, seq_len: int | None = None
) -> list[Violation]:
    """Hard rules the pinned degrees break on every world size (empty when the pins alone are
    fine, or when nothing is pinned)."""
    given: dict[str, Any] = {k: v for k, v in pins.items() if k in PIN_NAMES and v is not None}
    if not given:
        return []
    sp = (given.get("tp") or 1) > 1  # the planner runs TP with sequence parallelism
    splits = list(product((False, True), repeat=2)) if (given.get("pp") or 1) > 1 else [(0, 0)]
    per_variant: list[list[Violation]] = []
    for emb, loss in splits:
        try:
            s = Strategy(
                **given,
                sp=sp,
                account_for_embedding=bool(emb),
                account_for_loss=bool(loss),
                order=MEGATRON_ORDER,  # a training grid, also with Ulysses pinned
            )
        except StrategyError as exc:  # the pins contradict each other
            errors = [v for v in exc.violations if v.severity == "error"]
            per_variant.append(_for_hybrid(errors, model))
            continue
        per_variant.append([v for v in s.check(model, seq_len=seq_len) if v.severity == "error"])
    always = set.intersection(*({v.rule for v in vs} for vs in per_variant))
    return [v for v in per_variant[0] if v.rule in always]


def _for_hybrid(errors: list[Violation], model: Any) -> list[Violation]:
    """On a hybrid model a virtual pipeline is refused outright (MambaStack), so "vpp needs
    pp" would send the user to a pp that the next check refuses: say that instead."""
    if not getattr(model, "is_hybrid", False):
        return errors
    return [
        replace(v, hint="use vpp=1 (a hybrid's MambaStack takes no virtual pipeline at any pp)")
        if v.rule == "vpp-needs-pp"
        else v
        for v in errors
    ]
