"""The training planner: every legal strategy for a model on a cluster, priced and ranked.

``plan(model, cluster, seq_len=..., global_batch_size=...)`` enumerates TP, PP, VPP, CP (with
its Ulysses x ring split), EP, ETP, micro-batch size and recompute mode for the device count,
keeps what the rules allow (:meth:`Strategy.check`, the one source of truth) and what fits in
memory with headroom (:func:`parastrat.estimate_memory`), and ranks by predicted throughput
(:func:`parastrat.estimate_step`).

It is fast because it is a branch-and-bound, not because it skips legal strategies:

1. cheap divisibility prefilters (heads, experts, layers, world, batch) build the candidate
   degrees; each surviving strategy is checked once by the rules;
2. a parameter-only memory bound drops strategies whose weights and optimizer state alone
   cannot fit;
3. each (strategy, micro-batch) is priced with no recomputation, a lower bound of its step time
   under any recompute mode; candidates are visited fastest first and the search stops when
   the next lower bound is slower than the ``k``-th best fitting candidate;
4. for a visited candidate the cheapest recompute mode that fits memory is priced.

Enumeration limits (documented in ``docs/step-model.md``): TP up to the scale-up domain unless
``max_tp`` says otherwise, CP only while each rank keeps >= ``min_cp_tokens`` tokens, ETP in
{1, TP}, micro-batch sizes {1, 2, 4, 8}, SP on whenever TP > 1 (same traffic, less memory).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import SpecError, StrategyError, UsageError
from ..estimate.flops import RECOMPUTE_MODES, normalize_recompute
from ..estimate.step import (
    DEFAULT_MOE_COMM,
    MoEComm,
    StepReport,
    _estimate,
    check_errors,
    cuda_graph_scopes,
    layer_params,
    microbatch_lower_bound,
    moe_comm_options,
    pipeline_split,
)
from ..spec.hardware import GiB, canonical_precision
from ..spec.model import ModelSpec
from ..strategy import MEGATRON_ORDER, Strategy, divisors
from .heuristics import Heuristic, seed_strategy

if TYPE_CHECKING:
    from ..estimate.memory import MemoryReport
    from ..spec.cluster import Cluster

#: Candidates kept in a plan at least (the accuracy benchmark looks at the top 10).
KEEP_AT_LEAST = 10
#: Micro-batch sizes tried.
MICRO_BATCH_SIZES = (1, 2, 4, 8)
#: Fewest tokens per CP rank worth splitting a sequence for.
MIN_CP_TOKENS = 1024
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
#: Lower bound of bytes per local parameter (BF16 weight + BF16 gradient) plus
#: 12 / shard bytes of FP32 master weights and Adam moments (distributed optimizer).
_STATIC_BYTES, _OPT_BYTES = 4.0, 12.0


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    """One ranked strategy: degrees (world size set), micro-batch, recompute, memory, time."""

    strategy: Strategy
    micro_batch_size: int
    recompute: str
    memory: MemoryReport
    step: StepReport
    why: str = ""
    notes: tuple[str, ...] = field(default=())
    #: other VPP / layer-split variants of the same layout within :data:`VPP_TIE` (slower
    #: first-found order is not kept: sorted by step time)
    alternatives: list[Candidate] = field(default_factory=list)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted training throughput of this candidate."""
        return self.step.tokens_per_s_per_gpu

    @property
    def layout(self) -> tuple:
        """What the candidate is ranked as: degrees except VPP and the layer split, plus the
        micro-batch and recompute mode."""
        return layout_key(self.strategy, self.micro_batch_size, self.recompute)

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``{"candidates": [...]}`` in ``parastrat plan --format json``."""
        return {
            "strategy": self.strategy.to_dict(),
            "micro_batch_size": self.micro_batch_size,
            "recompute": self.recompute,
            "memory": self.memory.to_dict(),
            "step": self.step.to_dict(),
            "why": self.why,
            "alternatives": [
                {
                    "strategy": a.strategy.to_dict(),
                    "step_time_s": a.step.step_time_s,
                    "tokens_per_s_per_gpu": a.step.tokens_per_s_per_gpu,
                    "peak_bytes": a.memory.peak_bytes,
                }
                for a in self.alternatives
            ],
        }

    def label(self) -> str:
        """``TP4 PP8(VP5) CP1 DP2 SP mbs1 selective``."""
        return f"{self.strategy} mbs{self.micro_batch_size} {self.recompute}"


@dataclass
class Plan:
    """A ranked list of fitting strategies (best first) and how the search went."""

    model: ModelSpec
    cluster: Cluster
    seq_len: int
    global_batch_size: int
    precision: str
    #: the ranked candidates, best first, at most ``top_k`` of them
    candidates: list[Candidate]
    heuristic: Heuristic | None = None
    #: the whole ranking the search kept (at least :data:`KEEP_AT_LEAST` layouts, best first):
    #: ``candidates`` is its first ``top_k``; :meth:`find` looks here
    ranked: list[Candidate] = field(default_factory=list)
    #: legal strategies enumerated, (strategy, micro-batch) pairs priced, memory checks
    enumerated: int = 0
    priced: int = 0
    memory_checks: int = 0
    bounded: int = 0
    #: degree combinations dropped because their parameters alone cannot fit
    memory_pruned: int = 0
    elapsed_s: float = 0.0
    num_devices: int = 0
    #: the implementation switches every candidate was priced with, as
    #: :func:`parastrat.estimate_step` keyword arguments (to price other strategies alike)
    step_options: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> Candidate:
        """The first-ranked candidate."""
        return self.candidates[0]

    @property
    def evaluations(self) -> int:
        """Candidate evaluations the search made: lower bounds, step pricings, memory checks
        (what "candidates per second" counts)."""
        return self.bounded + self.priced + self.memory_checks

    def to_dict(self) -> dict[str, Any]:
        """``{"candidates": [...]}``, each with strategy, micro_batch_size, recompute,
        memory, step and why."""
        return {"candidates": [c.to_dict() for c in self.candidates]}

    def explain(self) -> str:
        """The seed guide's starting point beside the choice, and why the model departs."""
        from .explain import explain_plan

        return explain_plan(self)

    def find(
        self, strategy: Strategy, *, step_time_s: float | None = None, tolerance: float = VPP_TIE
    ) -> int | None:
        """0-based rank of the first candidate with ``strategy``'s layout in
        :attr:`ranked` (which ``candidates`` begins), or None.

        Matching rule (any micro-batch and recompute mode): TP, PP, CP, EP and ETP equal, and
        VPP equal, or ``strategy``'s VPP among the candidate's near-equal ``alternatives``, or
        (when ``step_time_s``, the strategy's own predicted step, is given) within
        ``tolerance`` of the candidate's step time: a VPP the plan collapsed as a tie.
        """
        key = _layout_degrees(strategy)
        for i, c in enumerate(self.ranked or self.candidates):
            if _layout_degrees(c.strategy) != key:
                continue
            if c.strategy.vpp == strategy.vpp or any(
                a.strategy.vpp == strategy.vpp for a in c.alternatives
            ):
                return i
            if step_time_s is not None and (step_time_s <= c.step.step_time_s * (1 + tolerance)):
                return i
        return None


def _layout_degrees(s: Strategy) -> tuple:
    return (s.tp, s.pp, s.cp, s.ep, s.etp)


def layout_key(s: Strategy, micro_batch_size: int, recompute: str) -> tuple:
    """Ranking identity of a candidate: TP, PP, CP, EP, ETP, micro-batch and recompute.  VPP,
    the layer split and the Ulysses x ring split of CP are sub-choices of one layout: the best
    is the candidate, near-equal ones its ``alternatives``."""
    return (s.tp, s.pp, s.cp, s.ep, s.etp, micro_batch_size, recompute)


# ---------------------------------------------------------------------------------------------
# Enumeration
# ---------------------------------------------------------------------------------------------
def _check_pin(name: str, value: Any) -> None:
    """A pin or bound of :func:`plan` is None, a whole number >= 1, or (pins) a non-empty
    collection of them; UsageError naming the argument otherwise."""
    if value is None:
        return
    values = [value] if isinstance(value, int) or not hasattr(value, "__iter__") else list(value)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise UsageError(
            f"{name}={value!r} must be a whole number >= 1"
            + ("" if name.startswith("max_") else " or a non-empty collection of them")
            + f", e.g. {name}=2"
        )


def _options(pin: Any, default: Iterable[int], upper: int | None = None) -> list[int]:
    """Allowed values of one degree: the pin (an int or a collection) or the defaults, bounded."""
    if pin is None:
        vals = list(default)
    elif isinstance(pin, int) and not isinstance(pin, bool):
        vals = [pin]
    else:
        vals = [int(v) for v in pin]
    if upper is not None:
        vals = [v for v in vals if v <= upper]
    return sorted(set(vals))


#: Split fields of a Strategy that place layers on pipeline stages (besides pp and vpp).
_SPLIT_FIELDS = (
    "first_stage_layers",
    "last_stage_layers",
    "account_for_embedding",
    "account_for_loss",
)
_VARIANTS: dict[tuple, tuple[dict[str, Any], ...]] = {}


def pipeline_variants(model: ModelSpec, pp: int, vpp: int = 1) -> tuple[dict[str, Any], ...]:
    """The ways to put ``model``'s layers on ``pp`` stages x ``vpp`` chunks, as Strategy
    keyword arguments (``first_stage_layers``, ``last_stage_layers``, ``account_for_*``).

    ``({},)`` when the even split works.  Otherwise Megatron's
    ``account_for_embedding/loss_in_pipeline_split`` (embedding and loss each take a layer's
    slot; both, else one of them), and without VPP also an uneven first/last split that gives
    the middle stages ``ceil(L / pp)`` layers and shares the rest between the two ends (which
    carry the embedding and the loss/MTP).  Variants that put the same layers on each stage are
    listed once; ``()`` when nothing works.  Legality is :func:`pipeline_split`'s
    (``Strategy.stage_layers``), never re-derived here.
    """
    key = (model.num_layers, model.mtp_num_layers, model, pp, vpp)
    hit = _VARIANTS.get(key)
    if hit is not None:
        return hit
    L = model.num_layers
    tries: list[dict[str, Any]] = [{}]
    if pp > 1 and (L % pp or (L // pp) % vpp):
        tries = [
            {"account_for_embedding": e, "account_for_loss": lo}
            for e, lo in ((True, True), (True, False), (False, True))
        ]
        if vpp == 1 and pp > 2:
            middle = -(-L // pp)
            rest = L - (pp - 2) * middle
            last = rest // 2
            if rest >= 2 and rest - last <= middle:
                tries.append({"first_stage_layers": rest - last, "last_stage_layers": last})
    legal: list[tuple[bool, dict[str, Any], tuple[int, ...]]] = []
    for kw in tries:
        try:
            split = pipeline_split(model, Strategy(pp=pp, vpp=vpp, **kw))
        except StrategyError:
            continue
        if min(split.stage_layers) >= 1:
            legal.append((split.how == "mtp-layout", kw, split.stage_layers))
    # splits Megatron takes as they are come before the MTP-layout approximation
    legal.sort(key=lambda item: item[0])
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, ...]] = set()
    for _, kw, layers in legal:
        if layers in seen:
            continue
        seen.add(layers)
        out.append(kw)
        if vpp > 1:
            break  # with VPP one accounted variant is enough (uneven needs vpp | every stage)
    _VARIANTS[key] = hit = tuple(out)
    return hit


def enumerate_strategies(
    model: ModelSpec,
    world: int,
    seq_len: int,
    global_batch_size: int,
    *,
    scale_up_domain: int = 8,
    tp: Any = None,
    pp: Any = None,
    vpp: Any = None,
    cp: Any = None,
    ep: Any = None,
    etp: Any = None,
    ulysses: Any = None,
    max_tp: int | None = None,
    max_pp: int | None = None,
    max_cp: int | None = None,
    max_ep: int | None = None,
    max_etp: int | None = None,
    max_vpp: int | None = None,
    min_cp_tokens: int = MIN_CP_TOKENS,
    prefilter: Callable[..., bool] | None = None,
) -> Iterator[Strategy]:
    """Every legal training strategy for ``world`` devices (world size set), cheapest rules
    first: divisibility prefilters, then :meth:`Strategy.check` on the survivors.

    ``prefilter(tp, pp, vpp, cp, ep, etp, split)`` (``split`` the pipeline-variant keyword
    arguments) may drop degrees before a Strategy is built (the planner's memory bound).
    """
    heads, groups = model.num_attention_heads, model.query_groups
    tp_default = [
        d
        for d in divisors(heads)
        if d <= (max_tp or scale_up_domain) and (groups % d == 0 or d % groups == 0)
    ]
    tps = [t for t in _options(tp, tp_default, max_tp) if world % t == 0]
    cps_default = [c for c in divisors(world) if seq_len % (2 * c) == 0 or c == 1]
    cps_default = [c for c in cps_default if c == 1 or seq_len // c >= min_cp_tokens]
    cps = _options(cp, cps_default, max_cp)
    experts = model.num_experts
    eps = _options(ep, divisors(experts) if experts else [1], max_ep)
    pps = _options(pp, [d for d in divisors(world) if d <= model.num_layers], max_pp)
    for t in tps:
        for c in cps:
            if world % (t * c):
                continue
            if c > 1 and seq_len % (2 * c):
                continue
            local_heads = heads // t if heads % t == 0 else 0
            u_opts = [u for u in divisors(c) if local_heads and local_heads % u == 0]
            u_opts = _options(ulysses, u_opts)
            for p in pps:
                if world % (t * c * p):
                    continue
                dp = world // (t * c * p)
                if global_batch_size % dp:
                    continue
                v_max = -(-model.num_layers // p) if p > 1 else 1
                for v in _options(vpp, range(1, v_max + 1), max_vpp):
                    if p == 1 and v > 1:
                        continue
                    variants = pipeline_variants(model, p, v)
                    for e in eps:
                        etps = [1] if e > 1 else [t]
                        if e > 1 and t > 1:
                            etps.append(t)
                        for et in _options(etp, etps, max_etp):
                            if world % (e * et * p):
                                continue
                            for u in u_opts:
                                for kw in variants:
                                    if prefilter is not None and not prefilter(
                                        t, p, v, c, e, et, kw
                                    ):
                                        continue
                                    s = _make(t, p, v, c, u, e, et, world, kw)
                                    if s is not None and not check_errors(
                                        model,
                                        s,
                                        world_size=world,
                                        seq_len=seq_len,
                                        global_batch_size=global_batch_size,
                                    ):
                                        yield s


def _make(
    t: int, p: int, v: int, c: int, u: int, e: int, et: int, world: int, split: dict[str, Any]
) -> Strategy | None:
    try:
        # the order is explicit: Ulysses > 1 alone would pick xDiT's inference order
        return Strategy(
            tp=t,
            pp=p,
            vpp=v,
            ulysses=u,
            ring=c // u,
            ep=e,
            etp=et,
            sp=t > 1,
            order=MEGATRON_ORDER,
            **split,
        ).with_world_size(world)
    except StrategyError:
        return None


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------
def static_lower_bound(
    model: ModelSpec,
    world: int,
    tp: int,
    pp: int,
    vpp: int,
    cp: int,
    ep: int,
    etp: int,
    split: dict[str, Any],
) -> float:
    """Bytes that weights, gradients and optimizer state need on the fullest stage at least
    (BF16 weight and gradient, FP32 master and Adam moments sharded by the distributed
    optimizer; no activations, embeddings or buffers), from the degrees alone."""
    dense, _ = layer_params(model, False, tp, ep, etp)
    dense_moe, expert = layer_params(model, True, tp, ep, etp) if model.is_moe else (0.0, 0.0)
    stages = _stage_shapes(model, pp, vpp, split)
    dp = world // (tp * cp * pp)
    edp = max(world // (ep * etp * pp), 1)
    dense_b = _STATIC_BYTES + _OPT_BYTES / (dp * cp)
    expert_b = _STATIC_BYTES + _OPT_BYTES / edp
    return max(
        ((n - k) * dense + k * dense_moe) * dense_b + k * expert * expert_b for n, k in stages
    )


_SHAPES: dict[tuple, tuple[tuple[int, int], ...]] = {}


def _stage_shapes(
    model: ModelSpec, pp: int, vpp: int, split: dict[str, Any]
) -> tuple[tuple[int, int], ...]:
    """Distinct (layers, MoE layers) pairs of the stages of one pipeline split (cached)."""
    key = (model, pp, vpp, tuple(sorted(split.items())))
    hit = _SHAPES.get(key)
    if hit is None:
        sp = pipeline_split(model, Strategy(pp=pp, vpp=vpp, **split))
        hit = _SHAPES[key] = tuple(sorted(set(zip(sp.stage_layers, sp.stage_moe))))
    return hit


def _fits(memory: MemoryReport, cluster: Cluster, headroom: float | None) -> bool:
    if headroom is None:
        return bool(memory.fits(cluster.accel))
    return bool(memory.fits(cluster.accel, headroom=headroom))


# ---------------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------------
def plan(
    model: ModelSpec | str,
    cluster: Cluster,
    *,
    seq_len: int,
    global_batch_size: int,
    precision: str = "bf16",
    top_k: int = 5,
    num_devices: int | str | None = None,
    tp: Any = None,
    pp: Any = None,
    vpp: Any = None,
    cp: Any = None,
    ep: Any = None,
    etp: Any = None,
    ulysses: Any = None,
    micro_batch_size: Any = None,
    recompute: str | Iterable[str] | None = None,
    max_tp: int | None = None,
    max_pp: int | None = None,
    max_cp: int | None = None,
    max_ep: int | None = None,
    max_etp: int | None = None,
    max_vpp: int | None = None,
    headroom: float | None = None,
    distributed_optimizer: bool = True,
    min_cp_tokens: int = MIN_CP_TOKENS,
    moe_dispatcher: str = "alltoall",
    moe_a2a_overlap: bool = False,
    moe_shared_expert_overlap: bool = False,
    cuda_graphs: Any = None,
    tp_comm_overlap: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    """Rank every legal strategy for ``model`` on ``cluster`` by predicted throughput.

    Pins (``tp=4``) or choices (``tp=(4, 8)``) fix degrees; ``max_*`` bound them.
    ``num_devices`` defaults to the cluster's count; ``"smallest"`` searches for the fewest
    devices (powers of two and multiples of a node, up to the cluster's count) on which
    something fits.  ``recompute`` restricts the modes tried (default all: none, selective,
    full).  ``headroom`` is passed to :meth:`MemoryReport.fits` (its default otherwise).
    ``moe_dispatcher`` / ``moe_a2a_overlap`` / ``moe_shared_expert_overlap`` price every
    candidate with those Megatron MoE switches (see :func:`parastrat.estimate_step`;
    combined 1F1B applies only where Megatron allows it); ``cuda_graphs`` (None: eager, as
    Megatron Core by default; True: the whole iteration; or scopes such as
    ``"attn,moe_router,moe_preprocess"``) prices every candidate's host launch cost with
    those blocks captured; ``tp_comm_overlap=False`` turns TP communication overlap off (None:
    on with SP inside the scale-up domain).
    ``top_k`` bounds ``Plan.candidates``; ``Plan.ranked`` keeps the wider ranking the search
    produced (at least :data:`KEEP_AT_LEAST` candidates).
    Raises :class:`UsageError` saying what would work when nothing is legal or fits.
    """
    from ..spec.models import get as get_model

    model = get_model(model)
    prec = canonical_precision(precision)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise UsageError(f"top_k={top_k!r} must be a whole number >= 1")
    for name, value in (("seq_len", seq_len), ("global_batch_size", global_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name}={value!r} must be a whole number >= 1")
    pins = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, ulysses=ulysses)
    pins.update(micro_batch_size=micro_batch_size, max_tp=max_tp, max_pp=max_pp)
    pins.update(max_cp=max_cp, max_ep=max_ep, max_etp=max_etp, max_vpp=max_vpp)
    for name, value in pins.items():
        _check_pin(name, value)
    kwargs = dict(
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        precision=prec,
        top_k=top_k,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep,
        etp=etp,
        ulysses=ulysses,
        micro_batch_size=micro_batch_size,
        recompute=recompute,
        max_tp=max_tp,
        max_pp=max_pp,
        max_cp=max_cp,
        max_ep=max_ep,
        max_etp=max_etp,
        max_vpp=max_vpp,
        headroom=headroom,
        distributed_optimizer=distributed_optimizer,
        min_cp_tokens=min_cp_tokens,
        progress=progress,
        moe_comm=moe_comm_options(moe_dispatcher, moe_a2a_overlap, moe_shared_expert_overlap),
        graphs=cuda_graph_scopes(cuda_graphs),
        tp_comm_overlap=tp_comm_overlap,
    )
    if num_devices == "smallest":
        return _plan_smallest(model, cluster, **kwargs)
    if num_devices is not None:
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
            raise UsageError(
                f"num_devices={num_devices!r} must be a whole number >= 1 or 'smallest'"
            )
        cluster = cluster.with_devices(num_devices)
    result = _plan_fixed(model, cluster, **kwargs)
    if not result.candidates:
        raise UsageError(_nothing_fits_message(model, cluster, result, **kwargs))
    return result


def _plan_smallest(model: ModelSpec, cluster: Cluster, **kwargs: Any) -> Plan:
    """Binary search over device counts for the fewest on which something fits."""
    top = cluster.num_devices
    node = cluster.devices_per_node
    counts = sorted(
        {2**i for i in range(0, top.bit_length()) if 2**i <= top}
        | {k * node for k in range(1, top // node + 1) if (k & (k - 1)) == 0}
        | {top}
    )
    lo, hi = 0, len(counts) - 1
    best: Plan | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        result = _plan_fixed(model, cluster.with_devices(counts[mid]), **kwargs)
        if result.candidates:
            best, hi = result, mid - 1
        else:
            lo = mid + 1
    if best is None:
        final = _plan_fixed(model, cluster, **kwargs)
        raise UsageError(_nothing_fits_message(model, cluster, final, **kwargs))
    return best


def _plan_fixed(
    model: ModelSpec,
    cluster: Cluster,
    *,
    seq_len: int,
    global_batch_size: int,
    precision: str,
    top_k: int,
    tp: Any,
    pp: Any,
    vpp: Any,
    cp: Any,
    ep: Any,
    etp: Any,
    ulysses: Any,
    micro_batch_size: Any,
    recompute: Any,
    max_tp: int | None,
    max_pp: int | None,
    max_cp: int | None,
    max_ep: int | None,
    max_etp: int | None,
    max_vpp: int | None,
    headroom: float | None,
    distributed_optimizer: bool,
    min_cp_tokens: int,
    progress: Callable[[int, int], None] | None,
    moe_comm: MoEComm = DEFAULT_MOE_COMM,
    graphs: frozenset[str] = frozenset(),
    tp_comm_overlap: bool | None = None,
) -> Plan:
    from ..estimate.memory import estimate_memory

    start = time.perf_counter()
    world = cluster.num_devices
    prec = precision
    modes = _modes(recompute)
    mbs_opts = _options(micro_batch_size, MICRO_BATCH_SIZES)
    capacity = cluster.memory_bytes
    keep = max(top_k, KEEP_AT_LEAST)

    pruned = [0]

    def fits_statically(
        t: int, p: int, v: int, c: int, e: int, et: int, kw: dict[str, Any]
    ) -> bool:
        """Weights + gradients + optimizer state alone fit (cheap, before any Strategy)."""
        if static_lower_bound(model, world, t, p, v, c, e, et, kw) <= capacity:
            return True
        pruned[0] += 1
        return False

    strategies = list(
        enumerate_strategies(
            model,
            world,
            seq_len,
            global_batch_size,
            scale_up_domain=cluster.scale_up_domain,
            tp=tp,
            pp=pp,
            vpp=vpp,
            cp=cp,
            ep=ep,
            etp=etp,
            ulysses=ulysses,
            max_tp=max_tp,
            max_pp=max_pp,
            max_cp=max_cp,
            max_ep=max_ep,
            max_etp=max_etp,
            max_vpp=max_vpp,
            min_cp_tokens=min_cp_tokens,
            prefilter=fits_statically,
        )
    )
    # 1. a compute-only lower bound of every (strategy, micro-batch) whose parameters can fit
    bounds: list[tuple[float, int, Strategy, int]] = []
    priced = 0
    memo: dict = {}
    total = len(strategies)
    for i, s in enumerate(strategies):
        if progress and i % 256 == 0:
            progress(i, total)
        for mbs in mbs_opts:
            dp = s.dp if s.dp is not None else 1
            if global_batch_size % (dp * mbs):
                continue
            lb = microbatch_lower_bound(
                model, s, cluster, seq_len, global_batch_size, mbs, prec, memo, moe_comm, graphs
            )
            bounds.append((lb, len(bounds), s, mbs))
    if progress:
        progress(total, total)
    len_bounds = len(bounds)
    heapq.heapify(bounds)
    # 2. visit by bound; price without recompute (a bound for every mode), then the cheapest
    #    mode that fits; stop once a bound is slower than the k-th best fitting candidate
    found: dict[tuple, Candidate] = {}  # best candidate per layout (VPP variants collapsed)
    checks = 0
    pending: list[tuple[float, int, Strategy, int]] = []
    cutoff = [float("inf")]

    def worst() -> float:
        return cutoff[0]

    def admit(cand: Candidate) -> None:
        key = cand.layout
        held = found.get(key)
        if held is None:
            found[key] = cand
        elif cand.step.step_time_s < held.step.step_time_s:
            cand.alternatives = [held, *held.alternatives]
            held.alternatives = []
            found[key] = cand
        else:
            held.alternatives.append(cand)
        if len(found) >= keep:
            times = sorted(c.step.step_time_s for c in found.values())
            cutoff[0] = times[keep - 1]
            for k in [k for k, c in found.items() if c.step.step_time_s > cutoff[0]]:
                del found[k]

    while bounds or pending:
        # move the next compute bound into the priced queue when it could still be earlier
        if bounds and (not pending or bounds[0][0] < pending[0][0]):
            lb, n, s, mbs = heapq.heappop(bounds)
            if lb > worst():
                bounds = []
                continue
            rep0 = _estimate(
                model,
                s,
                cluster,
                seq_len,
                global_batch_size,
                mbs,
                prec,
                modes[0],
                distributed_optimizer,
                memo=memo,
                moe_comm=moe_comm,
                graphs=graphs,
                tp_comm_overlap=tp_comm_overlap,
            )
            priced += 1
            heapq.heappush(pending, (rep0.step_time_s, n, s, mbs))
            continue
        t_lower, _, s, mbs = heapq.heappop(pending)
        if t_lower > worst():
            break
        for mode in modes:
            mem = estimate_memory(
                model,
                s,
                seq_len=seq_len,
                micro_batch_size=mbs,
                global_batch_size=global_batch_size,
                recompute=mode,
                distributed_optimizer=distributed_optimizer,
                precision=prec,
            )
            checks += 1
            if not _fits(mem, cluster, headroom):
                continue
            rep = _estimate(
                model,
                s,
                cluster,
                seq_len,
                global_batch_size,
                mbs,
                prec,
                mode,
                distributed_optimizer,
                memo=memo,
                moe_comm=moe_comm,
                graphs=graphs,
                tp_comm_overlap=tp_comm_overlap,
            )
            priced += 1
            admit(Candidate(s, mbs, mode, mem, rep, notes=rep.notes))
            break
    ranked = tie_ordered(sorted(found.values(), key=lambda c: c.step.step_time_s))
    for c in ranked:
        best_t = c.step.step_time_s
        c.alternatives = sorted(
            (a for a in c.alternatives if a.step.step_time_s <= best_t * (1 + VPP_TIE)),
            key=lambda a: a.step.step_time_s,
        )
    from .explain import annotate

    annotate(ranked, cluster)
    heur = seed_strategy(model, world, seq_len, cluster.devices_per_node)
    return Plan(
        model=model,
        cluster=cluster,
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        precision=prec,
        candidates=ranked[:top_k],
        ranked=ranked,
        heuristic=heur,
        enumerated=total,
        priced=priced,
        memory_checks=checks,
        bounded=len_bounds,
        memory_pruned=pruned[0],
        elapsed_s=time.perf_counter() - start,
        num_devices=world,
        step_options=dict(
            distributed_optimizer=distributed_optimizer,
            moe_dispatcher=moe_comm.dispatcher,
            moe_a2a_overlap=moe_comm.a2a_overlap,
            moe_shared_expert_overlap=moe_comm.shared_expert_overlap,
            cuda_graphs=sorted(graphs) or None,
            tp_comm_overlap=tp_comm_overlap,
        ),
    )


def exposure_class(c: Candidate, tie: float = RANK_TIE) -> int:
    """Exposed communication as a share of the step, in steps of ``tie``: shares that differ
    by less than the model's resolution fall in the same class."""
    return int(c.step.exposed_comm_s / c.step.step_time_s / tie)


def model_parallel_sizes(c: Candidate) -> tuple[int, int]:
    """(TP x CP x PP, EP x ETP) of a candidate: how far it splits the model rather than the
    batch."""
    s = c.strategy
    return (s.tp * s.cp * s.pp, s.ep * s.etp)


def tie_key(c: Candidate) -> tuple:
    """How tied candidates are ordered: least model parallelism (:func:`model_parallel_sizes`),
    then exposure class, then peak memory, then step time."""
    return (*model_parallel_sizes(c), exposure_class(c), c.memory.peak_bytes, c.step.step_time_s)


def tie_ordered(candidates: list[Candidate], tie: float = RANK_TIE) -> list[Candidate]:
    """``candidates`` (sorted by step time) re-ordered so that near-ties are decided by
    practice and robustness rather than by differences below the model's resolution.

    Repeatedly take, among the remaining candidates within ``tie`` of the fastest remaining
    one, the one that splits the model least (TP x CP x PP, then EP x ETP: the Megatron Core
    MoE report's first guideline, "keep TP, EP, PP and CP as small as possible while avoiding
    OOM; maximise data parallelism"), then the one with the smallest exposed-communication
    share of its step (in classes of ``RANK_TIE``: :func:`exposure_class`), then the lowest
    peak memory, then the shortest step.  No candidate is ever placed before one that is more
    than ``tie`` faster than it.
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


def _modes(recompute: Any) -> list[str]:
    if recompute is None:
        return list(RECOMPUTE_MODES)
    if isinstance(recompute, str):
        return [normalize_recompute(recompute)]
    modes = [normalize_recompute(r) for r in recompute]
    if not modes:
        raise UsageError(f"recompute={recompute!r} names no mode; use any of {RECOMPUTE_MODES}")
    return [m for m in RECOMPUTE_MODES if m in modes]


def _nothing_fits_message(model: ModelSpec, cluster: Cluster, result: Plan, **kwargs: Any) -> str:
    """Say why nothing came back and what would work instead."""
    world = cluster.num_devices
    gbs = kwargs["global_batch_size"]
    if result.enumerated == 0 and result.memory_pruned == 0:
        hints = []
        ok_worlds = [
            w
            for w in range(max(1, world - 64), world + 65)
            if (w != world and gbs % w == 0) or (w % 8 == 0 and gbs % 8 == 0 and w != world)
        ]
        near = sorted(ok_worlds, key=lambda w: abs(w - world))[:3]
        if near:
            hints.append(f"try {', '.join(map(str, sorted(near)))} devices")
        hints.append(
            f"or a global batch size divisible by the data-parallel degree "
            f"(e.g. {max(1, gbs // world) * world})"
        )
        return (
            f"no legal strategy for {model.name} on {world} devices with seq_len="
            f"{kwargs['seq_len']} and global_batch_size={gbs} (with the pins/bounds given): "
            + "; ".join(hints)
        )
    # legal strategies exist but none fits: look for a device count that would
    for factor in (2, 4, 8, 16):
        bigger = cluster.with_devices(world * factor)
        try:
            trial = _plan_fixed(model, bigger, **{**kwargs, "top_k": 1, "progress": None})
        except (StrategyError, SpecError, UsageError):
            continue
        if trial.candidates:
            c = trial.best
            return (
                f"no strategy for {model.name} fits in {cluster.accel.name} memory "
                f"({cluster.memory_bytes / GiB:.0f} GiB) on {world} devices at seq_len="
                f"{kwargs['seq_len']}, even with full recompute; {world * factor} devices "
                f"would fit, e.g. {c.strategy} mbs{c.micro_batch_size} {c.recompute} "
                f"(peak {c.memory.peak_bytes / GiB:.1f} GiB)"
            )
    return (
        f"no strategy for {model.name} fits in {cluster.accel.name} memory on {world} "
        f"devices, nor on up to {16 * world}; use a shorter sequence, an accelerator with "
        "more memory, or more devices"
    )
