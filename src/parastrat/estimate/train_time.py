"""How long a training run of a given number of tokens takes at a predicted step: steps,
wall-clock time and device-hours, what a cluster owner books before buying time.

One :class:`~parastrat.estimate.step.StepReport` holds all it needs: a step consumes the global
batch (``world_size x tokens_per_s_per_gpu x step_time_s`` tokens), so a run of ``T`` tokens
takes ``ceil(T / tokens per step)`` steps.  Nothing else is priced: no restarts after failures,
no evaluation, no checkpoint stalls, no warm-up of the first steps; the figure is a lower
bound on the wall clock and carries the step model's error (``parastrat record``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..checks import require_positive
from ..errors import UsageError

if TYPE_CHECKING:
    from .step import StepReport
    from .track_record import TrackRecord

#: Decimal multipliers of a token count's suffix (``15T``, ``300B``, ``2.5M``, ``40k``).
SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
#: Largest token count taken: 10^18, a thousand times the largest published pre-training
#: corpora (tens of trillions of tokens); above it a typo is likelier than a plan.
MAX_TOKENS = 1e18
_COUNT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d{1,3}))?([A-Za-z]?)", re.ASCII)


def token_count(value: float | int | str) -> float:
    """A number of training tokens: a positive number, or text such as ``"15T"``,
    ``"1.5e12"``, ``"300B"`` (decimal suffixes K, M, B/G, T, P).  Anything else raises
    :class:`~parastrat.errors.UsageError` with an example."""
    example = "e.g. 15T, 300B or 1.5e12"
    if isinstance(value, bool):
        raise UsageError(f"a token count is a number, got {value!r}; {example}")
    if isinstance(value, str):
        match = _COUNT.fullmatch(value.strip())
        suffix = match.group(3).upper() if match else ""
        if match is None or suffix not in SUFFIXES:
            raise UsageError(f"cannot read {value!r} as a token count; {example}")
        exponent = int(match.group(2) or 0)
        try:
            count = float(match.group(1)) * 10.0**exponent * SUFFIXES[suffix]
        except OverflowError:  # 10.0**309 and above: beyond any bound, said as such below
            count = math.inf
    elif isinstance(value, (int, float)):
        count = float(value)
    else:
        raise UsageError(f"a token count is a number, got {type(value).__name__}; {example}")
    if math.isnan(count) or count < 1:
        raise UsageError(f"a token count must be at least 1, got {value!r}; {example}")
    if count > MAX_TOKENS:
        size = f"{count:.3g} tokens" if math.isfinite(count) else "more tokens than a float holds"
        raise UsageError(
            f"{value!r} is {size}, above parastrat's bound of {MAX_TOKENS:.0e} "
            f"(a thousand times the largest corpora); {example}"
        )
    return count


@dataclass(frozen=True)
class TrainingTime:
    """A run of :attr:`tokens` tokens at one predicted step (:func:`time_to_train`)."""

    tokens: float
    tokens_per_step: float
    steps: int
    step_time_s: float
    devices: int

    @property
    def seconds(self) -> float:
        """Wall-clock seconds: steps x step time."""
        return self.steps * self.step_time_s

    @property
    def days(self) -> float:
        """Wall-clock days."""
        return self.seconds / 86_400

    @property
    def device_hours(self) -> float:
        """Device-hours (GPU-hours, NPU-hours) booked: wall clock x devices."""
        return self.seconds * self.devices / 3_600

    def to_dict(self, record: TrackRecord | None = None) -> dict[str, Any]:
        """The figures as plain numbers, for JSON output (with ``record``, the days on that
        record as ``days_on_record``: :meth:`days_on_record`)."""
        out: dict[str, Any] = {
            "tokens": self.tokens,
            "tokens_per_step": self.tokens_per_step,
            "steps": self.steps,
            "step_time_s": self.step_time_s,
            "devices": self.devices,
            "seconds": self.seconds,
            "days": self.days,
            "device_hours": self.device_hours,
            "excludes": "restarts, evaluation, checkpoint stalls, warm-up",
        }
        if record is not None:
            out["days_on_record"] = list(self.days_on_record(record))
        return out

    def days_on_record(self, record: TrackRecord) -> tuple[float, float]:
        """Wall-clock days if the step is off as the model has been on published runs of its
        class: a run's time is the predicted time x ``(1 + e)``, ``e`` the relative
        throughput error (positive: predicted too fast), taken as the record's mean error
        ``bias`` plus or minus its mean absolute error ``mape``."""
        if record.metric != "tokens/s/GPU":
            raise UsageError(f"a {record.metric} record does not speak for training time")
        low = max(0.0, 1 + record.bias - record.mape)
        return self.days * low, self.days * (1 + record.bias + record.mape)

    def summary(self, accelerator: str = "devices") -> str:
        """One line: steps, days and device-hours, and what is not counted."""
        return (
            f"{tokens_text(self.tokens)} tokens: {self.steps:,} steps x {self.step_time_s:.3g} s = "
            f"{_duration(self.seconds)} on {self.devices:,} {accelerator}, "
            f"{self.device_hours:,.0f} device-hours (no restarts, evaluation or checkpoint "
            "stalls counted)"
        )


#: Longest deadline taken, in days (a century): above it a typo is likelier than a plan.
MAX_DAYS = 36_500


@dataclass(frozen=True)
class TrainingBudget:
    """A run of :attr:`tokens` tokens to finish within :attr:`days` days of wall clock: what
    ``plan(..., num_devices="smallest", budget=...)`` sizes a cluster for (the fewest devices
    whose best strategy meets it).  ``tokens`` is read as :func:`token_count` reads it."""

    tokens: float | int | str
    days: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", token_count(self.tokens))
        object.__setattr__(self, "days", require_positive("days", self.days, "90", MAX_DAYS))

    def met_by(self, step: StepReport) -> bool:
        """Whether a run at ``step``'s predicted step time finishes in time."""
        return time_to_train(step, self.tokens).days <= self.days

    def __str__(self) -> str:
        return f"{tokens_text(float(self.tokens))} tokens in {self.days:g} days"


def record_note(training: TrainingTime, record: TrackRecord | None) -> str:
    """``"; if off as on N such runs, A-B days"``: :meth:`TrainingTime.days_on_record` as the
    tail of a time-to-train line (empty without a record)."""
    if record is None:
        return ""
    low, high = training.days_on_record(record)
    return (
        f"; off as the model has been on {record.runs} published runs of this class "
        f"(tokens/s {record.bias:+.0%} on average, {record.mape:.0%} mean error): "
        f"{low:,.1f}-{high:,.1f} days"
    )


def time_to_train(step: StepReport, tokens: float | int | str) -> TrainingTime:
    """How long ``tokens`` training tokens take at ``step``'s predicted step time."""
    count = token_count(tokens)
    per_step = round(step.world_size * step.tokens_per_s_per_gpu * step.step_time_s)
    if per_step < 1 or not math.isfinite(step.step_time_s) or step.step_time_s <= 0:
        raise UsageError(f"the step priced consumes no tokens ({per_step}); nothing to time")
    return TrainingTime(
        tokens=count,
        tokens_per_step=per_step,
        steps=math.ceil(count / per_step),
        step_time_s=step.step_time_s,
        devices=step.world_size,
    )


def tokens_text(count: float) -> str:
    """``count`` with the largest decimal suffix it reaches: ``15T``, ``300B``, ``2.5M``."""
    for suffix in ("P", "T", "B", "M", "K"):
        if count >= SUFFIXES[suffix]:
            return f"{count / SUFFIXES[suffix]:.4g}{suffix}"
    return f"{count:.0f}"


def _duration(seconds: float) -> str:
    """``seconds`` in the largest unit that reads well (days, hours or minutes)."""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:,.1f} days"
    if seconds >= 2 * 3_600:
        return f"{seconds / 3_600:,.1f} hours"
    return f"{seconds / 60:,.1f} minutes"
