"""Small value checks and number helpers shared by every layer (one definition each).

:func:`is_count` is *the* whole-number test: an ``int`` (never a ``bool``, which Python counts
as one) of at least ``minimum``.  Modules that validate degrees, sizes or counts call it, or
:func:`require_count` when a bad value should raise at once.
"""

from __future__ import annotations

from math import gcd, isfinite
from typing import Any

from .errors import UsageError

#: Most devices a Cluster may hold: 2^20, above the largest announced training clusters
#: (~200,000 accelerators) and low enough that planning stays seconds, not minutes
#: (docs/troubleshooting.md, "Bounds").  Hints never name a world beyond it.
MAX_DEVICES = 2**20


def is_int(value: Any) -> bool:
    """True when ``value`` is an ``int`` and not a ``bool`` (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_count(value: Any, minimum: int = 1) -> bool:
    """True when ``value`` is an ``int`` (not a ``bool``) and at least ``minimum``."""
    return is_int(value) and value >= minimum


def require_count(
    name: str, value: Any, *, minimum: int = 1, error: type[Exception] = UsageError
) -> int:
    """``value`` when :func:`is_count` accepts it, else ``error`` naming ``name`` and the value."""
    if not is_count(value, minimum):
        raise error(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def require_positive(name: str, value: Any, example: str, maximum: float = float("inf")) -> float:
    """``value`` as a float when it is a finite number in ``(0, maximum]`` (not a ``bool``,
    not text), else :class:`UsageError` naming ``name``, the value and an ``example``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {value!r}; e.g. {name}={example}")
    if not isfinite(value) or not 0 < value <= maximum:
        bound = f"in (0, {maximum:g}]" if isfinite(maximum) else "positive and finite"
        raise UsageError(f"{name} must be {bound}, got {value!r}; e.g. {name}={example}")
    return float(value)


def require_nonnegative(
    name: str, value: Any, example: str, maximum: float = float("inf")
) -> float:
    """``value`` as a float when it is a finite number in ``[0, maximum]`` (not a ``bool``,
    not text), else :class:`UsageError` naming ``name``, the value and an ``example``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {value!r}; e.g. {name}={example}")
    if not isfinite(value) or not 0 <= value <= maximum:
        bound = f"in [0, {maximum:g}]" if isfinite(maximum) else "zero or more, and finite"
        raise UsageError(f"{name} must be {bound}, got {value!r}; e.g. {name}={example}")
    return float(value)


def lcm(a: int, b: int) -> int:
    """Least common multiple of two positive integers."""
    return a * b // gcd(a, b)


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order (used in hints)."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def fmt_set(values: list[int], limit: int = 8) -> str:
    """``{1, 2, 4, 8}`` for hints, shortened when long."""
    if len(values) > limit:
        values = values[:limit]
        return "{" + ", ".join(map(str, values)) + ", ...}"
    return "{" + ", ".join(map(str, values)) + "}"
