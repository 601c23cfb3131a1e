"""How far the step model has been from published runs like the one being priced.

The project prices every published training run it holds with the same step model users call:
NVIDIA's tuned Megatron Bridge / NeMo releases (``benchmarks/planner_accuracy.py``, the rows
the model was developed against), the Megatron Bridge 25.11 performance summary
(``benchmarks/planner_crosscheck.py``, never used to choose a constant) and MindSpeed's
Ascend 910B scripts (``benchmarks/npu_training_accuracy.py``).  Their tokens/s/GPU errors,
grouped by the two things that change the model's accuracy most (dense or MoE; the platform:
an x86-hosted NVIDIA system, a Grace-hosted one, or Ascend), are the :func:`records`.
Diffusion-transformer inference has its own records, one per accelerator: the latency errors
of the xDiT and Wan measurements ``benchmarks/dit_accuracy.py`` prices.

A prediction is only as good as the model's record on runs of its class: MoE runs on x86 hosts
have been off by far more than dense runs (``docs/accuracy.md``).  :func:`track_record` finds
the class of a model on an accelerator, and ``plan`` / ``explain`` print it beside every
prediction.

The records live in ``track_record.json`` beside this module, written by
``tools/gen_track_record.py`` from the benchmarks' own output; the tests
(``tools/gen_track_record.py --check``) fail when a change to the model leaves it stale.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from ..spec.dit import DiTSpec
from ..spec.hardware import Accelerator
from ..spec.hardware import get as get_accelerator
from ..spec.model import ModelSpec
from .efficiency import host_cpu


@dataclass(frozen=True)
class TrackRecord:
    """A cost model's error over the published runs of one class.

    Errors are ``(predicted - published) / published`` of :attr:`metric`: tokens/s/GPU for
    training (positive: predicted faster than measured), latency for DiT inference (negative:
    predicted faster); :attr:`optimistic` reads the sign either way."""

    #: "dense" or "moe" (training), "dit" (diffusion-transformer inference)
    kind: str
    #: training: "x86" or "grace" (the host CPU of an NVIDIA system), or "ascend"; DiT
    #: inference: the accelerator
    platform: str
    #: published runs priced
    runs: int
    #: mean absolute error
    mape: float
    #: mean signed error (its direction: :attr:`optimistic`)
    bias: float
    #: signed error of the run furthest off, and which run it was
    worst: float
    worst_run: str
    #: the accelerators the runs were measured on (the record speaks for these only)
    accelerators: tuple[str, ...]
    #: the benchmark tables the runs come from
    tables: tuple[str, ...]
    #: what was compared: "tokens/s/GPU" (higher is faster) or "latency" (lower is faster)
    metric: str = "tokens/s/GPU"
    #: runs whose published layout was also compared with the plan's best (same switches), and
    #: of those, how many the plan priced within 10 % of its best: how far to trust a plan that
    #: says it beats a tuned layout by more
    planned: int = 0
    near_best: int = 0

    @property
    def optimistic(self) -> bool:
        """Whether the model predicted faster runs than were measured, on average."""
        return self.bias > 0 if self.metric == "tokens/s/GPU" else self.bias < 0

    def summary(self) -> str:
        """One line: the class, the runs, the error and its direction."""
        kind = {"moe": "MoE", "dit": "DiT inference"}.get(self.kind, self.kind)
        where = "/".join(self.accelerators)
        if self.platform in ("x86", "grace"):
            where += f" ({self.platform} hosts)"
        lean = "optimistic" if self.optimistic else "pessimistic"
        lean = f"{lean} by {abs(self.bias):.0%}" if abs(self.bias) >= 0.005 else "no lean"
        return (
            f"the model's record on {self.runs} published {kind} runs on {where}: "
            f"{self.metric} off by {self.mape:.0%} on average "
            f"({lean} on average; furthest: {self.metric} "
            f"{self.worst:+.0%}, {self.worst_run})"
            + (
                f"; the published layout within 10% of the plan's best in {self.near_best} of "
                f"{self.planned}"
                if self.planned
                else ""
            )
            + f"; {self.page}"
        )

    @property
    def page(self) -> str:
        """The documentation page that tells these runs' story."""
        if self.kind == "dit":
            return "docs/accuracy-dit.md"
        return "docs/accuracy-npu.md" if self.platform == "ascend" else "docs/accuracy.md"

    def to_dict(self) -> dict[str, Any]:
        """The record as plain values, for JSON output (with :attr:`optimistic`, so the sign of
        ``bias`` needs no reading of ``metric``)."""
        d = asdict(self)
        d["accelerators"] = list(self.accelerators)
        d["tables"] = list(self.tables)
        d["optimistic"] = self.optimistic
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrackRecord:
        """The record :meth:`to_dict` wrote (``optimistic`` is derived, not read)."""
        fields = {k: v for k, v in d.items() if k != "optimistic"}
        fields["accelerators"] = tuple(d["accelerators"])
        fields["tables"] = tuple(d["tables"])
        return cls(**fields)


#: The file the records are kept in (package data), written by ``tools/gen_track_record.py``.
RECORDS_FILE = "track_record.json"


@cache
def records() -> tuple[TrackRecord, ...]:
    """Every class's record, as ``tools/gen_track_record.py`` last wrote them."""
    text = files(__package__).joinpath(RECORDS_FILE).read_text(encoding="utf-8")
    return tuple(TrackRecord.from_dict(d) for d in json.loads(text)["records"])


def platform_of(accelerator: Accelerator) -> str:
    """The record's platform of ``accelerator``: "ascend" for Huawei parts, else the host CPU
    family of its reference system (:func:`~parastrat.estimate.efficiency.host_cpu`)."""
    return "ascend" if accelerator.vendor == "huawei" else host_cpu(accelerator)


def kind_of(model: ModelSpec) -> str | None:
    """The record's kind of ``model``: "moe" or "dense"; None for a hybrid (Mamba) model, of
    which no published run is priced."""
    if model.is_hybrid:
        return None
    return "moe" if model.is_moe else "dense"


def track_record(
    model: str | ModelSpec | DiTSpec, accelerator: str | Accelerator
) -> TrackRecord | None:
    """The record of the published runs of ``model``'s kind (a spec or a preset name) on
    ``accelerator``'s platform (a DiT: on that accelerator), when runs on that accelerator
    are among them; None when no published run speaks for it."""
    from ..spec.models import get as get_model

    model = get_model(model)  # a name: the preset, a language model's or a DiT's
    accel = get_accelerator(accelerator)
    key: tuple[str | None, str]
    if isinstance(model, DiTSpec):
        key = ("dit", accel.name)
    else:
        key = (kind_of(model), platform_of(accel))
    for rec in records():
        if (rec.kind, rec.platform) == key and accel.name in rec.accelerators:
            return rec
    return None
