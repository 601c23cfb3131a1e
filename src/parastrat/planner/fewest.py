"""The bisection both sizing searches share: the fewest devices of an ascending list that a
probe accepts (training: ``plan(num_devices="smallest")``; DiT serving:
:func:`~parastrat.planner.dit_sizing.smallest_dit`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Device counts a "try N devices" suggestion tries at most, and how many it names.
MAX_TRIALS = 12
MAX_NAMED = 3


def sizing_counts(top: int, node: int) -> list[int]:
    """The device counts the sizing searches try first, ascending: powers of two, whole
    nodes in powers of two, and ``top`` itself, none above ``top``."""
    counts = {2**i for i in range(top.bit_length())} | {
        node * 2**i for i in range(top.bit_length())
    }
    return sorted({n for n in counts if n <= top} | {top})


def first_accepted(counts: Sequence[int], probe: Callable[[int], T | None]) -> T | None:
    """Bisect ascending ``counts`` for the first one ``probe`` accepts (returns non-None);
    None when it accepts none.  Assumes acceptance is monotone; where it is not (a count
    whose factors no strategy takes, between two that pass), the answer is an accepted
    count, not always the fewest."""
    lo, hi = 0, len(counts) - 1
    found: T | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        got = probe(counts[mid])
        if got is not None:
            found, hi = got, mid - 1
        else:
            lo = mid + 1
    return found


def whole_nodes_between(low: int, high: int, node: int) -> list[int]:
    """The whole-node device counts strictly between ``low`` and ``high``, ascending."""
    return [k * node for k in range(low // node + 1, high // node + 1) if low < k * node < high]


def accepted_counts(counts: Sequence[int], accepts: Callable[[int], bool]) -> list[int]:
    """The first :data:`MAX_NAMED` of ``counts`` (in their order) that ``accepts``, trying at
    most :data:`MAX_TRIALS`: device counts to suggest, each tried before it is named."""
    found: list[int] = []
    for n in counts[:MAX_TRIALS]:
        if accepts(n):
            found.append(n)
            if len(found) == MAX_NAMED:
                break
    return found
