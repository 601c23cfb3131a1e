"""The published training runs the project prices, one by one: what NVIDIA measured for a model
on an accelerator, with the layout it ran and what the step model predicts for it.

:mod:`parastrat.estimate.track_record` sums these runs up by class; this module keeps each run,
so that a plan can show the tuned layout and its measured throughput for the very model and
accelerator it was asked about, and price that layout beside its own choice when the job is
the same one.  The runs are the NVIDIA rows of the accuracy benchmarks
(``benchmarks/planner_accuracy.py``: Megatron Bridge performance summaries and archives 25.09
to 26.08, NeMo 25.02 / 25.04 docs; ``benchmarks/planner_crosscheck.py``: the Megatron Bridge
25.11 summary), each with its source.  ``predicted`` is the benchmark's own figure: the layout
priced with the switches its recipe sets, so ``error`` is the step model's error on that run.

The runs live in ``published_runs.json`` beside this module, written with the track record by
``tools/gen_track_record.py`` (``--check`` in the tests fails when it is stale).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from ..errors import SpecError
from ..spec.hardware import canonical_precision

#: The file the runs are kept in (package data), written by ``tools/gen_track_record.py``.
RUNS_FILE = "published_runs.json"


@dataclass(frozen=True)
class PublishedRun:
    """One measured training run: model preset, accelerator, the job and its layout, the
    measured and the predicted tokens/s/GPU, and where the measurement was published."""

    #: the :mod:`parastrat.spec.models` preset and the accelerator preset
    model: str
    accelerator: str
    #: the job: devices, tokens per sequence, sequences per step and per micro-batch
    devices: int
    seq_len: int
    global_batch_size: int
    micro_batch_size: int
    #: the precision the run was priced in, as parastrat reads it (``fp8-cs``, ``fp8-delayed``,
    #: ``mxfp8``, ``nvfp4``, ...)
    precision: str
    #: the layout as a strategy prints (``parastrat.Strategy.parse`` reads it back); layer
    #: splits the source does not give are the ones parastrat's recipe-like split proposes
    strategy: str
    #: the recompute mode the benchmark priced (the cheapest one that fits)
    recompute: str
    #: tokens/s/GPU measured (published) and predicted by the step model with the recipe's
    #: switches
    measured: float
    predicted: float
    #: the benchmark table and the publication
    table: str
    source: str

    @property
    def error(self) -> float:
        """The step model's error on this run, ``predicted / measured - 1`` (positive: the
        model predicted it faster than it ran)."""
        return self.predicted / self.measured - 1.0

    def same_job(self, devices: int, seq_len: int, global_batch_size: int, precision: str) -> bool:
        """Whether a job of ``devices`` devices, ``seq_len`` tokens, ``global_batch_size``
        sequences in ``precision`` is this run's (the same model and accelerator assumed)."""
        return (
            devices == self.devices
            and seq_len == self.seq_len
            and global_batch_size == self.global_batch_size
            and _precision(precision) == _precision(self.precision)
        )

    def summary(self) -> str:
        """One line: the job, the layout, measured and predicted, and the source."""
        return (
            f"{self.model} on {self.devices} {self.accelerator}, seq {self.seq_len}, global batch "
            f"{self.global_batch_size}, {self.precision}: {self.strategy} mbs"
            f"{self.micro_batch_size} {self.recompute} measured {self.measured:,.0f} "
            f"tokens/s/GPU, predicted {self.predicted:,.0f} ({self.error:+.1%}; {self.source})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The run as plain values, for JSON output (with :attr:`error`)."""
        return asdict(self) | {"error": round(self.error, 4)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PublishedRun:
        """The run :meth:`to_dict` wrote (``error`` is derived, not read)."""
        return cls(**{k: v for k, v in d.items() if k != "error"})


def _precision(name: str) -> str:
    """``name``'s canonical spelling, or the name itself when parastrat has none."""
    try:
        return canonical_precision(name)
    except SpecError:  # a spelling parastrat does not know compares as written
        return name.lower()


@cache
def all_runs() -> tuple[PublishedRun, ...]:
    """Every run, as ``tools/gen_track_record.py`` last wrote them."""
    text = files(__package__).joinpath(RUNS_FILE).read_text(encoding="utf-8")
    return tuple(PublishedRun.from_dict(d) for d in json.loads(text)["runs"])


def published_runs(model: str, accelerator: str | None = None) -> tuple[PublishedRun, ...]:
    """The published runs of preset ``model`` (on ``accelerator`` when given), fewest devices
    first; empty when none was published (or ``model`` is no preset)."""
    key = model.strip().lower()
    chosen = [
        r
        for r in all_runs()
        if r.model == key and (accelerator is None or r.accelerator == accelerator.lower())
    ]
    return tuple(sorted(chosen, key=lambda r: (r.accelerator, r.devices, r.precision)))
