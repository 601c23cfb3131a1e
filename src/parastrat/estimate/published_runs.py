"""The published runs the project prices, one by one: what NVIDIA measured for a model on an
accelerator, with the layout it ran and what the step model predicts for it; and what xDiT and
Wan measured for a diffusion transformer, with its split and what the DiT model predicts.

:mod:`parastrat.estimate.track_record` sums these runs up by class; this module keeps each run,
so that a plan can show the tuned layout and its measured throughput for the very model and
accelerator it was asked about, and price that layout beside its own choice when the job is
the same one.  The runs are the NVIDIA rows of the accuracy benchmarks
(``benchmarks/planner_accuracy.py``: Megatron Bridge performance summaries and archives 25.09
to 26.08, NeMo 25.02 / 25.04 docs; ``benchmarks/planner_crosscheck.py``: the Megatron Bridge
25.11 summary), each with its source.  ``predicted`` is the benchmark's own figure: the layout
priced with the switches its recipe sets, so ``error`` is the step model's error on that run.
The DiT runs are the rows of ``benchmarks/data/dit_measured.csv`` that
``benchmarks/dit_accuracy.py`` prices (:class:`PublishedDiTRun`).

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


@dataclass(frozen=True)
class PublishedDiTRun:
    """One measured diffusion-transformer generation: model preset, accelerator, the request
    and its split, the measured and the predicted seconds, and where it was published
    (xDiT's performance pages, Wan's README)."""

    #: the :mod:`parastrat.spec.dit` preset and the accelerator preset
    model: str
    accelerator: str
    #: the request: devices, output size, frames (1: an image) and denoising steps
    devices: int
    height: int
    width: int
    frames: int
    steps: int
    #: the split (Ulysses, ring, CFG degrees) and whether the transformer ran torch.compile'd
    ulysses: int
    ring: int
    cfg: int
    compiled: bool
    #: what the seconds measure: "latency" (one whole request) or "per step" (one denoising
    #: step, as some of xDiT's video charts give it)
    scope: str
    #: seconds measured (published) and predicted by the DiT model
    measured_s: float
    predicted_s: float
    #: the row of ``benchmarks/data/dit_measured.csv`` and the publication
    row: str
    source: str

    @property
    def error(self) -> float:
        """The DiT model's error on this run, ``predicted / measured - 1`` (negative: predicted
        faster than it ran)."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def split(self) -> str:
        """The split as the plan's table names it (``U2 x R2``; ``1 GPU``)."""
        named = (("U", self.ulysses), ("R", self.ring), ("CFG", self.cfg))
        return " x ".join(f"{k}{v}" for k, v in named if v > 1) or "1 GPU"

    def same_request(
        self, devices: int, height: int, width: int, frames: int, steps: int, compiled: bool
    ) -> bool:
        """Whether a request of this size on ``devices`` devices is this run's (the same model
        and accelerator assumed)."""
        mine = (self.devices, self.height, self.width, self.frames, self.steps, self.compiled)
        return mine == (devices, height, width, frames, steps, compiled)

    def summary(self) -> str:
        """One line: the request, the split, measured and predicted, and the source."""
        size = f"{self.width}x{self.height}" + (f"x{self.frames}" if self.frames > 1 else "")
        how = "compiled" if self.compiled else "eager"
        return (
            f"{self.model} on {self.devices} {self.accelerator}, {size}, {self.steps} steps, "
            f"{how}: {self.split} measured {self.measured_s:.3g} s {self.scope}, predicted "
            f"{self.predicted_s:.3g} s ({self.error:+.1%}; {self.source})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The run as plain values, for JSON output (with :attr:`error` and :attr:`split`)."""
        return asdict(self) | {"error": round(self.error, 4), "split": self.split}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PublishedDiTRun:
        """The run :meth:`to_dict` wrote (``error`` and ``split`` are derived, not read)."""
        return cls(**{k: v for k, v in d.items() if k not in ("error", "split")})


def _precision(name: str) -> str:
    """``name``'s canonical spelling, or the name itself when parastrat has none."""
    try:
        return canonical_precision(name)
    except SpecError:  # a spelling parastrat does not know compares as written
        return name.lower()


@cache
def _document() -> dict[str, Any]:
    """The runs' file, as ``tools/gen_track_record.py`` last wrote it."""
    doc: dict[str, Any] = json.loads(
        files(__package__).joinpath(RUNS_FILE).read_text(encoding="utf-8")
    )
    return doc


def all_runs() -> tuple[PublishedRun, ...]:
    """Every training run."""
    return tuple(PublishedRun.from_dict(d) for d in _document()["runs"])


def all_dit_runs() -> tuple[PublishedDiTRun, ...]:
    """Every diffusion-transformer run."""
    return tuple(PublishedDiTRun.from_dict(d) for d in _document()["dit_runs"])


def published_runs(model: Any = None, accelerator: Any = None) -> tuple[PublishedRun, ...]:
    """The published training runs of preset ``model`` (a name or a spec; every model when
    None), on ``accelerator`` when given; by accelerator, then fewest devices first; empty
    when none was published."""
    chosen = [r for r in all_runs() if _chosen(r, model, accelerator)]
    return tuple(sorted(chosen, key=lambda r: (r.accelerator, r.model, r.devices, r.precision)))


def published_dit_runs(model: Any = None, accelerator: Any = None) -> tuple[PublishedDiTRun, ...]:
    """The published generations of DiT preset ``model`` (a name or a spec; every model when
    None), on ``accelerator`` when given; by accelerator, then fewest devices first; empty
    when none was published."""
    chosen = [r for r in all_dit_runs() if _chosen(r, model, accelerator)]
    return tuple(sorted(chosen, key=lambda r: (r.accelerator, r.model, r.devices, r.row)))


def _chosen(run: PublishedRun | PublishedDiTRun, model: Any, accel: Any) -> bool:
    """Whether ``run`` is of ``model`` and on ``accel`` (None: any; a name as typed, or a
    spec / accelerator by its ``name``)."""
    return (model is None or run.model == _key(model, "model")) and (
        accel is None or run.accelerator == _key(accel, "accelerator")
    )


def _key(value: Any, what: str) -> str:
    """``value``'s preset name, lower-case: a name, or a spec's / accelerator's ``name``;
    SpecError for anything else."""
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if not isinstance(name, str):
        raise SpecError(f"{what} must be a preset name (or a spec with one), got {value!r:.40}")
    return name.strip().lower()
