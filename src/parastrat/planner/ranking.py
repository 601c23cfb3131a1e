"""How a plan's candidates are ordered.

Near-ties within the model's resolution (:data:`RANK_TIE`) are decided by practice and
robustness (:func:`tie_ordered`), and VPP / layer-split variants of one layout collapse into
one candidate (:data:`VPP_TIE`, :func:`layout_key`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..strategy import Strategy

if TYPE_CHECKING:
    from .result import Candidate

#: Candidates kept in a plan at least (the accuracy benchmark looks at the top 10).
KEEP_AT_LEAST = 10
#: Relative step-time difference below which two candidates are ranked as a tie: the step
#: model's constants (GEMM / attention efficiencies, overlap slowdown, link bandwidths) are
#: quoted to two significant figures, so a 1-2 % difference between two layouts is within
#: their rounding and is not a prediction.  Among tied candidates the plan prefers the one with
#: less model parallelism, then less exposed communication (less sensitive to network
#: contention and jitter), then more memory headroom (:func:`tie_ordered`).
RANK_TIE = 0.02
#: VPP / layer-split / Ulysses-x-ring variants of one layout (same TP, PP, CP, EP, ETP,
#: micro-batch, recompute) within this fraction of the layout's best step time are near-equal:
#: one candidate, the others listed in its ``alternatives``.  The same resolution as
#: :data:`RANK_TIE` (one figure for "the model cannot tell these apart").
VPP_TIE = RANK_TIE


def layout_degrees(s: Strategy) -> tuple:
    """TP, PP, CP, EP, ETP: the degrees :meth:`Plan.find` matches a strategy by."""
    return (s.tp, s.pp, s.cp, s.ep, s.etp)


def layout_key(s: Strategy, micro_batch_size: int, recompute: str) -> tuple:
    """Ranking identity of a candidate: TP, PP, CP, EP, ETP, the data-parallel sharding (FSDP
    level and HSDP replicas), micro-batch and recompute.  VPP, the layer split and the
    Ulysses x ring split of CP are sub-choices of one layout: the best is the candidate,
    near-equal ones its ``alternatives``."""
    shard = (s.fsdp, s.dp_replicate) if s.fsdp is not None else ()
    return (s.tp, s.pp, s.cp, s.ep, s.etp, micro_batch_size, recompute, *shard)


def exposure_class(c: Candidate, tie: float = RANK_TIE) -> int:
    """Exposed communication as a share of the step, in steps of ``tie``: shares that differ
    by less than the model's resolution fall in the same class."""
    return int(c.step.exposed_comm_s / c.step.step_time_s / tie)


def model_parallel_sizes(c: Candidate) -> tuple[int, int]:
    """(TP x CP x PP, EP x ETP) of a candidate: how far it splits the model rather than the
    batch.  A dense model has no expert grid (its ETP only mirrors TP): its second size is 1."""
    s = c.strategy
    moe = s.ep > 1 or getattr(c.step, "stage_expert_params", 0) > 0
    return (s.tp * s.cp * s.pp, s.ep * s.etp if moe else 1)


def _simplicity(c: Candidate) -> tuple:
    """How plain a variant is: without CPU activation offloading, without a custom pipeline
    layout (Megatron's default even split, or its embedding / loss accounting), with the
    fewest virtual stages, then the fastest."""
    s = c.strategy
    return (c.cpu_offload_layers > 0, s.pipeline_layout is not None, s.vpp or 1, c.step.step_time_s)


def plainest_variant(c: Candidate, tie: float = VPP_TIE) -> Candidate:
    """A layout's representative: of its fastest variant ``c`` and the variants within ``tie``
    of it (its ``alternatives``) that need no more memory than ``c``, the plainest
    (:func:`_simplicity`: no CPU activation offloading, no custom pipeline layout, the fewest
    virtual stages, then the fastest); the other near-equal variants become its
    ``alternatives``, fastest first.  Headroom is never traded for plainness: with fewer
    virtual stages the interleaved warm-up holds more layers' activations on the first stage,
    so a shallower variant can need more memory than the fastest.

    Variants of one layout differ in VPP, the layer split or CP's Ulysses x ring split.  When
    the model puts them within its resolution it cannot say that deeper interleaving pays, and
    each extra virtual stage is a cost the model prices only approximately (two more P2P
    transfers per micro-batch and chunk, their host launches, a longer warm-up holding more
    activations), so the plan shows the shallower schedule and lists the others."""
    limit = c.step.step_time_s * (1 + tie)
    near = [c, *(a for a in c.alternatives if a.step.step_time_s <= limit)]
    roomy = [a for a in near if a.memory.peak_bytes <= c.memory.peak_bytes]
    pick = min(roomy, key=_simplicity)
    c.alternatives = []
    pick.alternatives = sorted((a for a in near if a is not pick), key=lambda a: a.step.step_time_s)
    return pick


def tie_key(c: Candidate) -> tuple:
    """How tied candidates are ordered: without CPU activation offloading first (it moves
    activations over the host link and needs host memory, for a gain the model cannot
    resolve), then least model parallelism (:func:`model_parallel_sizes`), then exposure
    class, then peak memory, then step time."""
    return (
        c.cpu_offload_layers > 0,
        *model_parallel_sizes(c),
        exposure_class(c),
        c.memory.peak_bytes,
        c.step.step_time_s,
    )


#: The criteria of :func:`tie_key`, in its order.
TIE_CRITERIA = ("offload", "model", "experts", "exposure", "memory", "step")


def tie_criterion(c: Candidate, nxt: Candidate) -> str | None:
    """The :data:`TIE_CRITERIA` entry that puts tied ``c`` before ``nxt``: the first on which
    their :func:`tie_key` differs, when ``c`` is ahead on it; None when ``c`` is behind there
    (:func:`tie_ordered` placed it by its tie with a candidate ahead of both)."""
    for name, mine, theirs in zip(TIE_CRITERIA, tie_key(c), tie_key(nxt)):
        if mine != theirs:
            return name if mine < theirs else None
    return "step"


def tie_ordered(candidates: list[Candidate], tie: float = RANK_TIE) -> list[Candidate]:
    """``candidates`` (sorted by step time) re-ordered so that near-ties are decided by
    practice and robustness rather than by differences below the model's resolution.

    Repeatedly take, among the remaining candidates within ``tie`` of the fastest remaining
    one, one that offloads no activations to the CPU, then the one that splits the model least
    (TP x CP x PP, then EP x ETP: the Megatron Core MoE report's first guideline, "keep TP,
    EP, PP and CP as small as possible while avoiding OOM; maximise data parallelism"), then
    the one with the smallest exposed-communication share of its step (in classes of
    ``RANK_TIE``: :func:`exposure_class`), then the lowest peak memory, then the shortest step.
    No candidate is ever placed before one that is more than ``tie`` faster than it.
    """
    rest = list(candidates)
    out: list[Candidate] = []
    while rest:
        limit = rest[0].step.step_time_s * (1 + tie)
        group = [c for c in rest if c.step.step_time_s <= limit]
        pick = min(group, key=tie_key)
        out.append(pick)
        rest.remove(pick)
    return out
