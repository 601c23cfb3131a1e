"""A DiT plan beside the generations xDiT and Wan published for the same model on the same
accelerator.

:func:`dit_published_beside` finds the published runs of the plan's DiT preset on its
accelerator (:func:`~parastrat.estimate.published_runs.published_dit_runs`); for a run of the
very request the plan was asked about (devices, output size, frames, steps, eager or compiled),
it finds the published split among the splits the plan priced, so its rank and the latency the
plan gives it stand next to what it measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..estimate.published_runs import PublishedDiTRun, published_dit_runs
from .published import is_the_preset

if TYPE_CHECKING:
    from ..spec.dit import DiTSpec
    from .dit import DiTCandidate


@dataclass(frozen=True)
class PublishedDiTBeside:
    """One published generation of the plan's model and accelerator, and (the same request
    only) where the plan ranks its split."""

    run: PublishedDiTRun
    #: whether the run is the request the plan was asked about
    same_request: bool
    #: the split's 1-based rank among the splits the plan priced, and the seconds the plan
    #: gives it in the run's scope (a request, or one step; None: another request, or a split
    #: the plan did not keep)
    rank: int | None = None
    seconds: float | None = None
    #: splits the plan priced and kept
    kept: int = 0

    def summary(self) -> str:
        """One line: the run, and for the same request where the plan ranks its split."""
        head = "this request as published: " if self.same_request else "published: "
        line = head + self.run.summary()
        if self.rank is not None and self.seconds is not None:
            per = " per step" if self.run.scope == "per step" else ""
            line += f"; this plan ranks it #{self.rank} of {self.kept} at {self.seconds:.3g} s{per}"
        elif self.same_request:
            line += "; not among the splits this plan kept (refused, out of memory or bound)"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The comparison as plain values, for JSON output."""
        return {
            **self.run.to_dict(),
            "same_request": self.same_request,
            "rank": self.rank,
            "seconds": self.seconds,
        }


def dit_published_beside(
    model: DiTSpec,
    accelerator: str,
    request: tuple[int, int, int, int, int, bool],
    ranked: Sequence[DiTCandidate],
    limit: int = 3,
) -> tuple[PublishedDiTBeside, ...]:
    """The published runs of DiT preset ``model`` on ``accelerator`` (none for a spec that is
    not the preset of its name): those of ``request``
    (devices, height, width, frames, steps, compiled) first, each with its split's place in
    ``ranked`` (the plan's priced splits, best first), then the nearest device counts, at most
    ``limit`` in all."""
    if not is_the_preset(model):  # a spec under a preset's name with another shape
        return ()
    runs = published_dit_runs(model.name, accelerator)
    same = [r for r in runs if r.same_request(*request)]
    others = sorted(
        (r for r in runs if not r.same_request(*request)),
        key=lambda r: abs(r.devices - request[0]),
    )
    out = [_placed(r, ranked) for r in same]
    out += [PublishedDiTBeside(r, same_request=False) for r in others]
    return tuple(out[: max(limit, len(same))])


def _placed(run: PublishedDiTRun, ranked: Sequence[DiTCandidate]) -> PublishedDiTBeside:
    """``run`` with its split's rank and latency among ``ranked`` (one request, no replicas)."""
    want = (run.ulysses, run.ring, run.cfg, 1, 1)
    for i, c in enumerate(ranked, 1):
        s = c.strategy
        if (s.ulysses, s.ring, s.cfg, s.tp, s.dp or 1) == want:
            seconds = c.per_step_s if run.scope == "per step" else c.latency_s
            return PublishedDiTBeside(run, True, rank=i, seconds=seconds, kept=len(ranked))
    return PublishedDiTBeside(run, True, kept=len(ranked))
