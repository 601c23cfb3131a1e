"""The training planner: every legal strategy for a model on a cluster, priced and ranked.

``plan(model, cluster, seq_len=..., global_batch_size=...)`` enumerates TP, PP, VPP, CP (with
its Ulysses x ring split), EP, ETP, micro-batch size and recompute mode for the device count,
keeps what the rules allow (:meth:`Strategy.check`, the one source of truth) and what fits in
memory with headroom (:func:`parastrat.estimate_memory`), and ranks by predicted throughput
(:func:`parastrat.estimate_step`).  The typed form is
``plan(workload, cluster, switches, search)`` (:mod:`parastrat.spec.workload`).

It is fast because it is a branch-and-bound, not because it skips legal strategies; the
:class:`Search` object holds one plan's state and runs its four steps:

1. **enumerate**: cheap divisibility prefilters (heads, experts, layers, world, batch) build the
   candidate degrees, and a parameter-only memory bound (the layer records' weights, gradients
   and optimizer state) drops degrees whose parameters alone cannot fit; each surviving
   strategy is checked once by the rules;
2. **bound**: each (strategy, micro-batch) is priced with no recomputation, a lower bound of
   its step time under any recompute mode;
3. **price**: candidates are visited fastest bound first, priced without recompute (a bound for
   every mode), then with the cheapest recompute mode that fits memory; the search stops when
   the next bound is slower than the ``k``-th best fitting candidate;
4. **rank**: near-ties ordered by :func:`tie_ordered`, VPP variants collapsed, reasons written.

Enumeration limits (documented in ``docs/step-model.md``): TP up to the scale-up domain unless
``max_tp`` says otherwise, CP only while each rank keeps >= ``min_cp_tokens`` tokens, ETP in
{1, TP}, micro-batch sizes {1, 2, 4, 8}, SP on whenever TP > 1 (same traffic, less memory).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import rules
from ..errors import StrategyError, UsageError
from ..estimate.fsdp import fsdp_layer_memory
from ..estimate.layers import stage_params, try_split
from ..estimate.memo import per_model
from ..estimate.memory import MemoryReport, memory_of
from ..estimate.step import StepModel, StepReport, check_errors, graph_run
from ..estimate.step import clear_caches as clear_step_caches
from ..estimate.train_time import TrainingBudget
from ..grid import expert_dp
from ..pipeline_layout import parse_string
from ..rules.graphs import graph_violations
from ..spec.cluster import Cluster, require_cluster
from ..spec.model import ModelSpec
from ..spec.workload import MICRO_BATCH_SIZES as MICRO_BATCH_SIZES
from ..spec.workload import MIN_CP_TOKENS as MIN_CP_TOKENS
from ..spec.workload import (
    SEARCH_FIELDS,
    SearchSpace,
    Switches,
    Workload,
    resolve,
    whole,
)
from ..strategy import MEGATRON_ORDER, Strategy, divisors
from .explain import annotate
from .fewest import first_accepted, sizing_counts, whole_nodes_between
from .heuristics import seed_strategy
from .no_plan import Run, nothing_fits_message, over_budget_message
from .offload import refuse_offload_pin, try_offload
from .ranking import KEEP_AT_LEAST, VPP_TIE, plainest_variant, tie_ordered
from .ranking import RANK_TIE as RANK_TIE
from .ranking import exposure_class as exposure_class
from .ranking import layout_key as layout_key
from .ranking import model_parallel_sizes as model_parallel_sizes
from .ranking import tie_key as tie_key
from .result import Candidate, Plan
from .variants import pipeline_variants

if TYPE_CHECKING:
    from ..spec.cluster import Cluster

__all__ = [
    "KEEP_AT_LEAST",
    "MICRO_BATCH_SIZES",
    "MIN_CP_TOKENS",
    "RANK_TIE",
    "VPP_TIE",
    "Candidate",
    "Plan",
    "Search",
    "clear_caches",
    "enumerate_strategies",
    "legal_strategies",
    "pipeline_variants",
    "plan",
    "static_lower_bound",
    "tie_ordered",
]

#: A prefilter of :func:`legal_strategies`: (tp, pp, vpp, cp, ep, etp, split) -> keep?
Prefilter = Callable[[int, int, int, int, int, int, dict[str, Any]], bool]


# ---------------------------------------------------------------------------------------------
# Enumeration
# ---------------------------------------------------------------------------------------------
def enumerate_strategies(
    model: ModelSpec,
    world: int,
    seq_len: int,
    global_batch_size: int,
    *,
    scale_up_domain: int = 8,
    prefilter: Prefilter | None = None,
    search: SearchSpace | None = None,
    **pins: Any,
) -> Iterator[Strategy]:
    """Every legal training strategy for ``world`` devices (world size set), cheapest rules
    first: divisibility prefilters, then :meth:`Strategy.check` on the survivors.

    ``search`` (or its fields as keywords: ``tp=8``, ``max_etp=1``, ...) restricts the
    degrees.  ``prefilter(tp, pp, vpp, cp, ep, etp, split)`` (``split`` the pipeline-variant
    keyword arguments) may drop degrees before a Strategy is built (the planner's memory
    bound).
    """
    space = search if search is not None else SearchSpace(**pins)
    if search is not None and pins:
        raise UsageError("enumerate_strategies: give search= or pin keywords, not both")
    return legal_strategies(
        model, world, seq_len, global_batch_size, scale_up_domain, space, prefilter
    )


def _degree_options(
    model: ModelSpec, world: int, seq_len: int, scale_up_domain: int, space: SearchSpace
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(TP, CP, EP, PP) values worth trying: divisors of heads / world / experts / layers,
    within the search space."""
    heads, groups = model.num_attention_heads, model.query_groups
    tp_default = [
        d
        for d in divisors(heads)
        if d <= (space.max_tp or scale_up_domain) and (groups % d == 0 or d % groups == 0)
    ]
    if model.is_hybrid and "M" in (model.hybrid_override_pattern or ""):  # MambaMixer's asserts
        m_heads, m_groups = model.mamba_heads, model.mamba_num_groups
        tp_default = [d for d in tp_default if m_heads % d == 0 and m_groups % d == 0]
    tps = [t for t in space.options("tp", tp_default) if world % t == 0]
    cps_default = [c for c in divisors(world) if seq_len % (2 * c) == 0 or c == 1]
    cps_default = [c for c in cps_default if c == 1 or seq_len // c >= space.min_cp_tokens]
    experts = model.num_experts
    eps = space.options("ep", divisors(experts) if experts else [1])
    pps = space.options("pp", [d for d in divisors(world) if d <= model.num_layers])
    return tps, space.options("cp", cps_default), eps, pps


def legal_strategies(
    model: ModelSpec,
    world: int,
    seq_len: int,
    global_batch_size: int,
    scale_up_domain: int,
    space: SearchSpace,
    prefilter: Prefilter | None = None,
) -> Iterator[Strategy]:
    """:func:`enumerate_strategies` with a typed search space."""
    tps, cps, eps, pps = _degree_options(model, world, seq_len, scale_up_domain, space)
    heads = model.num_attention_heads
    for t in tps:
        for c in cps:
            if world % (t * c) or (c > 1 and seq_len % (2 * c)):
                continue
            local_heads = heads // t if heads % t == 0 else 0
            u_opts = [u for u in divisors(c) if local_heads and local_heads % u == 0]
            u_opts = space.options("ulysses", u_opts)
            for p in pps:
                if world % (t * c * p) or global_batch_size % (world // (t * c * p)):
                    continue
                v_max = -(-model.num_layers // p) if p > 1 and not model.is_hybrid else 1
                for v in space.options("vpp", range(1, v_max + 1)):
                    if p == 1 and v > 1:
                        continue
                    for e, et, u, kw in _inner(model, world, space, t, c, p, v, eps, u_opts):
                        if prefilter is not None and not prefilter(t, p, v, c, e, et, kw):
                            continue
                        s = _make(t, p, v, c, u, e, et, world, kw)
                        if s is None:
                            continue
                        for f in _sharding_variants(s, space, scale_up_domain):
                            if not check_errors(
                                model,
                                f,
                                world_size=world,
                                seq_len=seq_len,
                                global_batch_size=global_batch_size,
                            ):
                                yield f


def hsdp_shard(s: Strategy, scale_up_domain: int) -> int:
    """HSDP's shard degree for ``s``: the largest divisor of its dp whose shard group
    (``dp_shard * cp``, with each rank's TP group) stays inside one scale-up domain and whose
    replica count ``dp / dp_shard`` divides the expert data-parallel size (rule
    ``dp-replicate-expert``: Megatron's distributed-optimizer instances split the expert
    gradients too); dp itself (no HSDP) when no divisor does."""
    dp = s.dp or 1
    edp = s.expert_dp or dp
    fits = [
        d
        for d in divisors(dp)
        if (d == 1 or d * s.cp * s.tp <= scale_up_domain) and edp % (dp // d) == 0
    ]
    return max(fits) if fits else dp


def _sharding_variants(s: Strategy, space: SearchSpace, scale_up_domain: int) -> Iterator[Strategy]:
    """``s`` under each sharding level the search space tries: plain FSDP over the whole dp
    (``dp_shard = dp``) and HSDP (:func:`hsdp_shard` ranks inside the scale-up domain, whole
    copies across); ``no_shard`` is dominated by ``optim`` (the distributed optimizer every
    candidate has), so None stands for both."""
    levels = space.fsdp or (None,)
    dp, world = s.dp or 1, s.world_size or 1
    for level in levels:
        if level is None:
            yield s
            continue
        if dp * s.cp <= 1:
            continue  # nothing to shard over
        yield s.replace(fsdp=level, dp_shard=dp).with_world_size(world)
        shard = hsdp_shard(s, scale_up_domain)
        inside = shard * s.cp * s.tp <= scale_up_domain
        if inside and shard < dp and shard * s.cp > 1:
            yield s.replace(fsdp=level, dp_shard=shard, dp_replicate=dp // shard).with_world_size(
                world
            )


def _inner(
    model: ModelSpec,
    world: int,
    space: SearchSpace,
    t: int,
    c: int,
    p: int,
    v: int,
    eps: list[int],
    u_opts: list[int],
) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(EP, ETP, Ulysses, split) combinations of one (TP, CP, PP, VPP): ETP in {1, TP} with
    EP, TP without."""
    variants = pipeline_variants(model, p, v)
    for e in eps:
        etps = [1] if e > 1 else [t]
        if e > 1 and t > 1:
            etps.append(t)
        for et in space.options("etp", etps):
            if world % (e * et * p):
                continue
            for u in u_opts:
                for kw in variants:
                    yield e, et, u, kw


def _make(
    t: int, p: int, v: int, c: int, u: int, e: int, et: int, world: int, split: dict[str, Any]
) -> Strategy | None:
    try:
        # the order is explicit: Ulysses > 1 alone would pick xDiT's inference order; dp fills
        # the world (the caller checked that tp * cp * pp divides it), checked like
        # with_world_size(world) checks it
        return Strategy(
            tp=t,
            pp=p,
            vpp=v,
            ulysses=u,
            ring=c // u,
            ep=e,
            etp=et,
            dp=world // (t * c * p),
            sp=t > 1,
            order=MEGATRON_ORDER,
            **split,
        )
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
    distributed_optimizer: bool = True,
    fsdp: str | None = None,
) -> float:
    """Bytes that weights, gradients and optimizer state need on the fullest stage at least,
    from the degrees alone: the stages' parameter records
    (:func:`parastrat.estimate.layers.stage_params`, what the memory estimate reads) at their
    BF16 weight, FP32 gradient and sharded optimizer bytes, with no FP8 weight copies, no
    activations and no allowance for buffers.  ``fsdp``: the most sharded level the search
    tries, over the whole ``dp * cp`` (plain FSDP, the least any of its variants needs)."""
    key = tuple(sorted(split.items()))
    level = fsdp or ("optim" if distributed_optimizer else "no_shard")
    dense_shard = world // (tp * cp * pp) * cp  # dp * cp: CP enters only through it
    return _static_bound(model, world, tp, pp, vpp, dense_shard, ep, etp, key, level)


@per_model
def _static_bound(
    model: ModelSpec,
    world: int,
    tp: int,
    pp: int,
    vpp: int,
    dense_shard: int,
    ep: int,
    etp: int,
    split: tuple[tuple[str, Any], ...],
    level: str,
) -> float:
    sp = try_split(model, pp, vpp, split)
    if sp is None:
        return 0.0  # an impossible split: the rules say why later
    edp = max(expert_dp(world, etp, ep, pp), 1)
    blocks = stage_params(model, tp, ep, etp, sp.stage_layers, sp.stage_moe, sp.ends)
    return max(
        fsdp_layer_memory(dense, level, dense_shard).total
        + fsdp_layer_memory(expert, level, edp).total
        for dense, expert in {(b.dense_params, b.expert_params) for b in blocks}
    )


def clear_caches() -> None:
    """Empty every memo the planner and the estimates keep between plans (for timing a plan
    from a cold start)."""
    clear_step_caches()
    fsdp_layer_memory.cache_clear()
    parse_string.cache_clear()
    rules.clear_caches()


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------
def _batch_ok(s: Strategy, dp: int, gbs: int, mbs: int) -> bool:
    """Whether the global batch splits into micro-batches of ``mbs`` over ``dp`` replicas as
    Megatron runs them (no error of :func:`rules.batch_violations`: divisible, and a multiple
    of ``pp`` micro-batches for an interleaved schedule)."""
    if gbs % (dp * mbs):
        return False
    return rules.interleave_fits(s, gbs // (dp * mbs))


class Search:
    """One plan's branch-and-bound on one cluster: :meth:`enumerate`, :meth:`bound`,
    :meth:`price`, :meth:`rank` (:meth:`run` does all four).

    ``workload`` gives the model, sequence, global batch and precision (its micro-batch size is
    searched); ``switches`` price every candidate (its recompute mode is searched);
    ``space`` says where to look.  The search owns one :class:`StepModel`, whose memo is for
    this workload, cluster and switches only, and its counters.
    """

    def __init__(
        self,
        cluster: Cluster,
        workload: Workload,
        switches: Switches,
        space: SearchSpace,
        *,
        top_k: int = 5,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.cluster, self.workload, self.switches, self.space = cluster, workload, switches, space
        self.top_k, self.keep, self.progress = top_k, max(top_k, KEEP_AT_LEAST), progress
        self.steps = StepModel(cluster, workload, switches)
        self._workloads = {b: workload.with_micro_batch(b) for b in space.micro_batch_sizes}
        self._switches = {m: switches.with_recompute(m) for m in space.modes}
        self.found: dict[tuple, Candidate] = {}  # best candidate per layout (VPP collapsed)
        self.cutoff = float("inf")  # the keep-th best step time so far
        self.enumerated = self.bounded = self.priced = self.memory_checks = 0
        self.memory_pruned = 0

    # ---- 1. enumerate ---------------------------------------------------------------------
    def fits_statically(
        self, t: int, p: int, v: int, c: int, e: int, et: int, kw: dict[str, Any]
    ) -> bool:
        """Weights + gradients + optimizer state alone fit (cheap, before any Strategy)."""
        world = self.cluster.num_devices
        dist = self.switches.distributed_optimizer
        most = (self.space.fsdp or (None,))[-1]  # levels are ordered, most sharded last
        need = static_lower_bound(self.workload.model, world, t, p, v, c, e, et, kw, dist, most)
        if need <= self.cluster.memory_bytes:
            return True
        self.memory_pruned += 1
        return False

    def enumerate(self) -> list[Strategy]:
        """Every legal strategy whose parameters can fit."""
        wl = self.workload
        out = list(
            legal_strategies(
                wl.model,
                self.cluster.num_devices,
                wl.seq_len,
                wl.needs_global_batch("plan"),
                self.cluster.scale_up_domain,
                self.space,
                self.fits_statically,
            )
        )
        self.enumerated = len(out)
        return out

    # ---- 2. bound ---------------------------------------------------------------------------
    def bound(self, strategies: list[Strategy]) -> list[tuple[float, int, Strategy, int]]:
        """A heap of (compute-only lower bound, order, strategy, micro-batch) of every
        (strategy, micro-batch) whose batch divides."""
        gbs = self.workload.needs_global_batch("plan")
        heap: list[tuple[float, int, Strategy, int]] = []
        total = len(strategies)
        for i, s in enumerate(strategies):
            if self.progress and i % 256 == 0:
                self.progress(i, total)
            dp = s.dp if s.dp is not None else 1
            sizes = [b for b in self.space.micro_batch_sizes if _batch_ok(s, dp, gbs, b)]
            for mbs, lb in zip(sizes, self.steps.lower_bounds(s, sizes)):
                heap.append((lb, len(heap), s, mbs))
        if self.progress:
            self.progress(total, total)
        self.bounded = len(heap)
        heapq.heapify(heap)
        return heap

    # ---- 3. price ---------------------------------------------------------------------------
    def price(self, bounds: list[tuple[float, int, Strategy, int]]) -> None:
        """Visit by bound; price without recompute (a bound for every mode), then the
        cheapest mode that fits; stop once a bound is slower than the k-th best candidate."""
        first = self.space.modes[0]
        pending: list[tuple[float, int, Strategy, int, StepReport]] = []
        while bounds or pending:
            # move the next compute bound into the priced queue when it could still be earlier
            if bounds and (not pending or bounds[0][0] < pending[0][0]):
                lb, n, s, mbs = heapq.heappop(bounds)
                if lb > self.cutoff:
                    bounds = []
                    continue
                rep0 = self.steps.price(s, micro_batch_size=mbs, recompute=first)
                self.priced += 1
                heapq.heappush(pending, (rep0.step_time_s, n, s, mbs, rep0))
                continue
            t_lower, _, s, mbs, rep0 = heapq.heappop(pending)
            if t_lower > self.cutoff:
                break
            self.price_fitting(s, mbs, rep0)

    def price_fitting(
        self, s: Strategy, mbs: int, first: StepReport | None = None
    ) -> Candidate | None:
        """Price ``s`` at ``mbs`` with the cheapest recompute mode that fits, and admit it.
        ``first``: ``s`` already priced at ``mbs`` in the search space's first mode (the same
        report :meth:`StepModel.price` would give again; still counted as a pricing)."""
        for i, mode in enumerate(self.space.modes):
            mem = memory_of(self._workloads[mbs], s, self._switches[mode])
            self.memory_checks += 1
            if not self._fits(mem):
                if mode == "none":  # CPU activation offloading: another way to fit
                    try_offload(self, s, mbs, first if i == 0 else None)
                continue
            if i == 0 and first is not None:
                rep = first
            else:
                rep = self.steps.price(s, micro_batch_size=mbs, recompute=mode)
            self.priced += 1
            cand = Candidate(s, mbs, mode, mem, rep, notes=rep.notes)
            self.admit(cand)
            return cand
        return None

    def _fits(self, memory: MemoryReport) -> bool:
        if self.space.headroom is None:
            return bool(memory.fits(self.cluster.accel))
        return bool(memory.fits(self.cluster.accel, headroom=self.space.headroom))

    def admit(self, cand: Candidate) -> None:
        """Keep ``cand`` as its layout's best (or an alternative), and tighten the cutoff."""
        found, key = self.found, cand.layout
        held = found.get(key)
        if held is None:
            found[key] = cand
        elif cand.step.step_time_s < held.step.step_time_s:
            cand.alternatives = [held, *held.alternatives]
            held.alternatives = []
            found[key] = cand
        else:
            held.alternatives.append(cand)
        if len(found) >= self.keep:
            times = sorted(c.step.step_time_s for c in found.values())
            self.cutoff = times[self.keep - 1]
            for k in [k for k, c in found.items() if c.step.step_time_s > self.cutoff]:
                del found[k]

    # ---- 4. rank ----------------------------------------------------------------------------
    def rank(self) -> list[Candidate]:
        """The kept candidates, each layout shown by its plainest near-equal variant
        (:func:`plainest_variant`, the others its alternatives), near-ties ordered, each with
        its reasons."""
        shown = sorted(
            (plainest_variant(c) for c in self.found.values()), key=lambda c: c.step.step_time_s
        )
        ranked = tie_ordered(shown)
        annotate(ranked, self.cluster)
        return ranked

    def run(self) -> Plan:
        """Enumerate, bound, price and rank: the plan (possibly without candidates), its
        context on every candidate (:class:`~parastrat.planner.result.PlanContext`)."""
        start = time.perf_counter()
        self.price(self.bound(self.enumerate()))
        ranked = self.rank()
        wl, world = self.workload, self.cluster.num_devices
        return Plan(
            model=wl.model,
            cluster=self.cluster,
            seq_len=wl.seq_len,
            global_batch_size=wl.needs_global_batch("plan"),
            precision=wl.precision,
            candidates=ranked[: self.top_k],
            ranked=ranked,
            heuristic=seed_strategy(wl.model, world, wl.seq_len, self.cluster.devices_per_node),
            enumerated=self.enumerated,
            priced=self.priced,
            memory_checks=self.memory_checks,
            bounded=self.bounded,
            memory_pruned=self.memory_pruned,
            elapsed_s=time.perf_counter() - start,
            num_devices=world,
            workload=wl,
            switches=self.switches,
            search=self.space,
        ).with_context()  # each candidate applies as this plan with only it would


# ---------------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------------
def plan(
    model: Any,
    cluster: Cluster,
    switches: Switches | None = None,
    search: SearchSpace | None = None,
    *,
    top_k: int = 5,
    num_devices: int | str | None = None,
    progress: Callable[[int, int], None] | None = None,
    workload: Workload | None = None,
    budget: TrainingBudget | None = None,
    **options: Any,
) -> Plan:
    """Rank every legal strategy for ``model`` on ``cluster`` by predicted throughput.

    Typed form: ``plan(workload, cluster, switches, search)``
    (:class:`~parastrat.spec.workload.Workload`, ``Switches``, ``SearchSpace``).  Keyword
    form: ``plan(model, cluster, seq_len=..., global_batch_size=..., precision=...)`` plus any
    field of ``SearchSpace`` (pins ``tp=4`` or choices ``tp=(4, 8)``, bounds ``max_pp=8``,
    ``micro_batch_size``, ``recompute``, ``headroom``, ``min_cp_tokens``) and of ``Switches``
    (``flash_attention``, ``tp_comm_overlap``, ``overlap_grad_reduce``,
    ``distributed_optimizer``, ``moe_dispatcher``, ``moe_a2a_overlap``,
    ``moe_shared_expert_overlap``, ``cuda_graphs``, ``fp8_param_gather``; see
    :func:`parastrat.estimate_step`).  Every candidate is priced with those switches
    (combined 1F1B only where Megatron allows it).
    ``num_devices`` defaults to the cluster's count; ``"smallest"`` searches for the fewest
    devices (powers of two and multiples of a node, up to the cluster's count) on which
    something fits; with a :class:`~parastrat.estimate.train_time.TrainingBudget` ``budget``
    (``TrainingBudget("15T", days=90)``), on which the best strategy also trains that many
    tokens in time.  ``top_k`` bounds ``Plan.candidates``; ``Plan.ranked`` keeps the wider
    ranking the search produced (at least :data:`KEEP_AT_LEAST` candidates).
    Raises :class:`UsageError` saying what would work when nothing is legal or fits.
    """
    whole("top_k", top_k)
    cluster = require_cluster(cluster, "plan()")
    wl, sw, space = plan_values(model, workload, switches, search, options)
    if budget is not None and not isinstance(budget, TrainingBudget):
        raise UsageError(
            f"budget must be a TrainingBudget, got {type(budget).__name__}; e.g. "
            "TrainingBudget('15T', days=90)"
        )
    if budget is not None and num_devices != "smallest":
        raise UsageError("budget= sizes the cluster: give it with num_devices='smallest'")
    if num_devices == "smallest":
        return _plan_smallest(cluster, wl, sw, space, top_k, progress, budget)
    if num_devices is not None:
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
            raise UsageError(
                f"num_devices={num_devices!r} must be a whole number >= 1 or 'smallest'"
            )
        cluster = cluster.with_devices(num_devices)
    result = Search(cluster, wl, sw, space, top_k=top_k, progress=progress).run()
    if not result.candidates:
        raise UsageError(nothing_fits_message(cluster, wl, sw, space, result, _run(sw, space)))
    return result


def plan_values(
    model: Any,
    workload: Workload | None,
    switches: Switches | None,
    search: SearchSpace | None,
    options: dict[str, Any],
) -> tuple[Workload, Switches, SearchSpace]:
    """The typed values of a :func:`plan` call.  The micro-batch size and recompute mode are
    searched: a workload's micro-batch size or the switches' recompute mode, when set, pins
    the search (UsageError when the search space says otherwise)."""
    space_kw = {k: options.pop(k) for k in SEARCH_FIELDS if k in options}
    if search is not None and any(v is not None for v in space_kw.values()):
        raise UsageError(
            "plan: give the search space either as SearchSpace or as keywords, not both "
            f"({', '.join(sorted(space_kw))} given with search=)"
        )
    space = search if search is not None else SearchSpace(**space_kw)
    wl, sw = resolve(model, workload, switches, who="plan", **options)
    wl.needs_global_batch("plan")
    refuse_offload_pin(sw)  # the search chooses CPU offloading itself (planner/offload.py)
    pins: tuple[tuple[str, Any, Any], ...] = (
        ("micro_batch_size", space.micro_batch_size, wl.micro_batch_size),
        ("recompute", space.recompute, sw.recompute),
    )
    for name, have, pin in pins:
        if pin is not None and have is not None and have != (pin,):
            raise UsageError(
                f"plan: {name}={pin!r} in the workload/switches but {have!r} in the search "
                "space; give it once"
            )
        if pin is not None:
            changes: dict[str, Any] = {name: (pin,)}
            space = replace(space, **changes)
    wl = replace(wl, micro_batch_size=None) if wl.micro_batch_size is not None else wl
    sw = replace(sw, recompute=None) if sw.recompute is not None else sw
    if wl.model.is_hybrid:
        space = _hybrid_space(wl, space)
    if sw.cuda_graphs:
        space = _graph_space(wl, sw, space)
    return wl, sw, space


def _graph_space(wl: Workload, sw: Switches, space: SearchSpace) -> SearchSpace:
    """The recompute modes Megatron Core runs with the CUDA-graph scopes of ``sw`` (full
    recompute only with the whole iteration); StrategyError with the rule when it runs none
    (:func:`~parastrat.graph_rules.graph_violations`)."""
    ok = [
        m for m in space.modes if not graph_violations(sw.cuda_graphs, graph_run(wl.model, sw, m))
    ]
    if not ok:
        first = graph_run(wl.model, sw, space.modes[0])
        raise StrategyError(graph_violations(sw.cuda_graphs, first))
    return replace(space, recompute=tuple(ok)) if len(ok) < len(space.modes) else space


def _hybrid_space(wl: Workload, space: SearchSpace) -> SearchSpace:
    """A hybrid model's search space: only the recompute modes Megatron Core's MambaStack
    runs (:data:`~parastrat.rules.HYBRID_RECOMPUTE`); StrategyError with the rule when the
    precision or every asked-for mode is refused
    (:func:`~parastrat.rules.hybrid_workload_violations`)."""
    asked = space.recompute or rules.HYBRID_RECOMPUTE
    modes = tuple(m for m in asked if m in rules.HYBRID_RECOMPUTE)
    bad = rules.hybrid_workload_violations(wl.model, wl.precision, modes[0] if modes else asked[0])
    if bad:
        raise StrategyError(bad)
    return replace(space, recompute=modes)


def _run(sw: Switches, space: SearchSpace) -> Run:
    """How :mod:`.no_plan` tries a device count or batch before naming it: a top-1 search
    with these switches and this space."""
    return lambda cluster, wl: Search(cluster, wl, sw, space, top_k=1).run()


def _plan_smallest(
    cluster: Cluster,
    wl: Workload,
    sw: Switches,
    space: SearchSpace,
    top_k: int,
    progress: Callable[[int, int], None] | None,
    budget: TrainingBudget | None = None,
) -> Plan:
    """The fewest devices on which something fits (and, with ``budget``, whose best strategy
    meets it): bisection over powers of two and power-of-two node counts, then over the
    whole-node counts between the answer and the count below it."""
    node = cluster.devices_per_node
    counts = sizing_counts(cluster.num_devices, node)

    def probe(n: int) -> Plan | None:
        result = Search(cluster.with_devices(n), wl, sw, space, top_k=top_k, progress=progress)
        found = result.run()
        met = found.candidates and (budget is None or budget.met_by(found.best.step))
        return found if met else None

    best = first_accepted(counts, probe)
    if best is not None:  # refine: the whole-node counts below it, down to the count before
        below = max((n for n in counts if n < best.num_devices), default=0)
        best = first_accepted(whole_nodes_between(below, best.num_devices, node), probe) or best
    if best is None:
        final = Search(cluster, wl, sw, space, top_k=top_k).run()
        if final.candidates and budget is not None:
            raise UsageError(over_budget_message(final, budget))
        raise UsageError(nothing_fits_message(cluster, wl, sw, space, final, _run(sw, space)))
    return best
