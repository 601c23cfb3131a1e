"""Which memory remedies make a DiT run fit, tried rather than listed.

When no split of the devices fits, :func:`parastrat.plan_dit`'s error names the remedies the
run does not use yet (:func:`~parastrat.estimate.dit_memory.memory_hint`).  One of them alone
often is not enough (a parallel VAE decode still leaves the transformer on the device), so
:func:`working_remedy` prices the splits that were too big again under each remedy, then
under each pair, then each triple, and finds the smallest set that fits and the split it
leaves: a fix the user can run as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import combinations

from ..errors import SpecError, StrategyError, UsageError
from ..estimate.dit import DiTReport
from ..estimate.dit_memory import DiTMemoryOptions
from ..estimate.dit_options import DiTSwitches
from .explain import TIGHT_MEMORY

#: Largest number of remedies combined in one try.
MOST_COMBINED = 3


@dataclass(frozen=True)
class Remedy:
    """One switch that saves memory: its Python spelling (what the planner's messages say;
    the CLI rewrites it to its flag) and the switches with it on."""

    spelling: str
    apply: Callable[[DiTSwitches], DiTSwitches]


def _memory(
    change: Callable[[DiTMemoryOptions], DiTMemoryOptions],
) -> Callable[[DiTSwitches], DiTSwitches]:
    """The switches with their :class:`DiTMemoryOptions` changed by ``change``."""
    return lambda sw: replace(sw, memory=change(sw.memory_options))


#: Every remedy, in the order :func:`~parastrat.estimate.dit_memory.memory_hint` names them.
REMEDIES = (
    Remedy("vae_parallel=True", lambda sw: replace(sw, vae_parallel=True)),
    Remedy("vae_tiling=True", lambda sw: replace(sw, vae_tiling=True)),
    Remedy("DiTMemoryOptions(offload=True)", _memory(lambda m: replace(m, offload=True))),
    Remedy("DiTMemoryOptions(dit_fsdp=True)", _memory(lambda m: replace(m, dit_fsdp=True))),
    Remedy("text_encoder_on_device=False", lambda sw: replace(sw, text_encoder_on_device=False)),
    Remedy("DiTMemoryOptions(encoder_fsdp=True)", _memory(lambda m: replace(m, encoder_fsdp=True))),
)

#: Prices one split's report again with other switches (None: the combination is refused).
Reprice = Callable[[DiTReport, DiTSwitches], "DiTReport | None"]


def _combined(base: DiTSwitches, remedies: Iterable[Remedy]) -> DiTSwitches | None:
    """``base`` with every remedy on; None when one changes nothing (already on) or the
    combination is refused (offloading with FSDP)."""
    sw = base
    try:
        for r in remedies:
            nxt = r.apply(sw)
            if nxt == sw:
                return None
            sw = nxt
    except (SpecError, UsageError):  # UsageError: a switch the framework lacks
        return None
    return sw


def _tight(rep: DiTReport) -> bool:
    """Whether ``rep`` fits with little headroom (above :data:`.explain.TIGHT_MEMORY`)."""
    return rep.memory.total > TIGHT_MEMORY * rep.memory.capacity


def _fitting(reports: list[DiTReport], sw: DiTSwitches, reprice: Reprice) -> DiTReport | None:
    """The fastest of ``reports``' splits that fits with ``sw`` leaving some headroom, else the
    fastest that fits at all, or None."""
    fits = []
    for rep in reports:
        try:
            again = reprice(rep, sw)
        except (SpecError, StrategyError):
            continue
        if again is not None and again.memory.fits():
            fits.append(again)
    return min(fits, key=lambda r: (_tight(r), r.latency_s), default=None)


def working_remedy(
    base: DiTSwitches, too_big: list[DiTReport], reprice: Reprice
) -> tuple[str, DiTReport] | None:
    """The fewest remedies with which one of ``too_big``'s splits fits, in words ("vae_parallel=True
    and DiTMemoryOptions(offload=True)"), with the fastest such split's report (one that
    leaves some headroom first, as the training planner's no-fit message does); None when no
    combination of up to :data:`MOST_COMBINED` does."""
    for size in range(1, MOST_COMBINED + 1):
        found = []
        for combo in combinations(REMEDIES, size):
            sw = _combined(base, combo)
            rep = _fitting(too_big, sw, reprice) if sw is not None else None
            if rep is not None:
                found.append(((_tight(rep), rep.latency_s), combo, rep))
        if found:
            _, combo, rep = min(found, key=lambda f: f[0])
            return " and ".join(r.spelling for r in combo), rep
    return None


__all__ = ["MOST_COMBINED", "REMEDIES", "Remedy", "working_remedy"]
