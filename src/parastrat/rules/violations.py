"""The two kinds of broken rule: an error (the frameworks would refuse or crash) and a warning
(a heuristic the planner may break, and says why)."""

from __future__ import annotations

from ..errors import Violation


def err(rule: str, message: str, hint: str) -> Violation:
    """A hard rule broken: the frameworks would refuse the strategy or crash on it."""
    return Violation(rule, message, hint, "error")


def warn(rule: str, message: str, hint: str) -> Violation:
    """A soft rule broken: a heuristic the planner may break, saying why."""
    return Violation(rule, message, hint, "warning")
