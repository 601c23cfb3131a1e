"""Typed errors and findings shared by every layer.

A :class:`StrategyError` is what a user sees when a strategy breaks a rule: it carries *every*
broken rule at once (``err.violations``), each with a short rule id, a message that states the
numbers, and a hint naming a concrete fix.  It subclasses :class:`ValueError` so callers that
already catch bad values keep working.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken (or, for a warning, bent) rule.

    ``rule`` is a short stable id (see ``docs/troubleshooting.md``), ``message`` states the
    numbers involved and ``hint`` names what to change.
    """

    rule: str
    message: str
    hint: str
    severity: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message} -> {self.hint}"

    def to_dict(self) -> dict[str, str]:
        """The finding as a JSON-ready dict (rule, message, hint, severity), as the JSON output of
        ``parastrat check`` lists it."""
        return {
            "rule": self.rule,
            "message": self.message,
            "hint": self.hint,
            "severity": self.severity,
        }


class StrategyError(ValueError):
    """A strategy (or its inputs) breaks one or more hard rules.

    ``violations`` lists every rule broken, not just the first.
    """

    def __init__(
        self,
        violations: Iterable[Violation] | Violation | str,
        hint: str = "",
        rule: str = "invalid",
    ):
        if isinstance(violations, str):
            violations = [Violation(rule, violations, hint or "see the message")]
        elif isinstance(violations, Violation):
            violations = [violations]
        self.violations: list[Violation] = list(violations)
        super().__init__(self._format())

    def _format(self) -> str:
        if len(self.violations) == 1:
            return str(self.violations[0])
        lines = [f"{len(self.violations)} rules broken:"]
        lines += [f"  - {v}" for v in self.violations]
        return "\n".join(lines)

    @property
    def rules(self) -> list[str]:
        """The ids of the broken rules, in the order they were found."""
        return [v.rule for v in self.violations]


class StrategyTypeError(StrategyError, TypeError):
    """Something that is not a :class:`~parastrat.Strategy` was passed where one is needed.

    One type for every API (rule ``strategy-type``): a :class:`StrategyError`, so the CLI and
    callers that catch bad strategies see it, and a :class:`TypeError`, as Python expects.
    """


class MissingExtraError(ImportError):
    """An optional framework is needed but not installed; the message names the extra."""

    def __init__(
        self,
        module: str,
        extra: str,
        why: str = "",
        *,
        needs: str | None = None,
        install: str | None = None,
    ):
        """``needs``: the version requirement an installed ``module`` does not meet (then the
        message says it is too old and how to upgrade, not that it is missing); ``install``:
        how to get ``module`` where no extra provides it (then the message says that instead
        of ``pip install "parastrat[extra]"``)."""
        self.module = module
        self.extra = extra
        if install is not None:
            msg = f"{module} is not importable{': ' + why if why else ''}. {install}"
        elif needs is not None:
            msg = (
                f"the installed {module} is too old{': ' + why if why else ''}. "
                f'Upgrade it with: pip install -U "{module}{needs}"'
            )
        else:
            msg = (
                f"{module} is not installed{': ' + why if why else ''}. "
                f'Install it with: pip install "parastrat[{extra}]"'
            )
        super().__init__(msg)


class SpecError(ValueError):
    """A model, accelerator or workload description is unknown or nonsensical.

    Raised by preset look-ups (the message lists the known names) and by
    ``ModelSpec.from_hf_config`` (the message names the missing or bad field).
    """


class UsageError(ValueError):
    """A user's request cannot be served as asked (nothing fits, an impossible device count).

    The message says what would work instead.  The CLI prints it and exits with status 2.
    """


class RankTimeoutError(RuntimeError):
    """A rank waited for its peers past the timeout, or lost them, while the process groups
    were being built (or before: a peer that never reached ``initialize``): another rank
    stopped or hung there (its own log names why).

    Raised by :func:`parastrat.initialize` in place of torch's store and network errors, with
    the strategy, this rank, how long it waited and what torch said.  Not a mistake in the
    request: the CLI reports it and exits with status 1.
    """
