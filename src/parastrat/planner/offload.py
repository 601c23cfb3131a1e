"""CPU activation offloading as one more way for a candidate to fit (next to recompute).

When a strategy does not fit without recompute, :func:`try_offload` looks for the smallest
number of offloaded layers that makes it fit (Megatron Bridge's performance recipes pick the
count the same way: Llama 3 70B offloads 20 layers on GB300 and 40 on GB200, whose HBM is
smaller) and admits that candidate, priced by :func:`parastrat.estimate.offload_step.with_offload`
(the step model's own pricing), with the switch on the candidate so ``apply`` writes it.
Offloading is only tried where Megatron allows it and it can be priced: ``pp = 1``, no CUDA
graphs, a device with a sourced host link, activations that fit the host's share.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import StrategyError, UsageError
from ..estimate.memory import memory_of
from ..estimate.offload_step import with_offload
from .result import Candidate

if TYPE_CHECKING:
    from ..estimate.memory import MemoryReport
    from ..estimate.step import StepReport
    from ..spec.workload import Switches
    from ..strategy import Strategy
    from .search import Search


def refuse_offload_pin(switches: Switches) -> None:
    """UsageError for a plan asked to price every candidate with a fixed offloaded layer
    count: most candidates could not run it (pp > 1, recompute), and the search already picks
    the fewest layers that fit for every candidate that can."""
    k = switches.cpu_offload_layers
    if k:
        raise UsageError(
            f"plan: cpu_offload_layers={k} given, but the plan chooses CPU activation "
            "offloading itself (the fewest layers that fit, for pp=1 candidates that do not "
            "fit without recompute); drop cpu_offload_layers, or price one strategy with it "
            "(parastrat explain / estimate_step)"
        )


def offload_possible(search: Search, s: Strategy) -> bool:
    """Whether Megatron allows offloading here and parastrat can price it."""
    sw, model = search.switches, search.workload.model
    return (
        s.pp == 1
        and "none" in search.space.modes
        and not sw.cuda_graphs
        and search.cluster.accel.host_link_Bps is not None
        and model.num_layers > 1
    )


def smallest_fitting(search: Search, s: Strategy, mbs: int) -> tuple[Switches, MemoryReport] | None:
    """(switches, memory) with the fewest offloaded layers that fit, or None when even
    ``num_layers - 1`` does not (the peak falls as layers are added: a binary search)."""
    wl = search.workload.with_micro_batch(mbs)
    base = search.switches.with_recompute("none")

    def at(k: int) -> tuple[Switches, MemoryReport]:
        sw = replace(base, cpu_offload_layers=k)
        search.memory_checks += 1
        return sw, memory_of(wl, s, sw)

    lo, hi = 1, search.workload.model.num_layers - 1
    best = at(hi)
    if not search._fits(best[1]):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        got = at(mid)
        if search._fits(got[1]):
            hi, best = mid, got
        else:
            lo = mid + 1
    return best


def try_offload(
    search: Search, s: Strategy, mbs: int, first: StepReport | None = None
) -> Candidate | None:
    """Admit ``s`` at ``mbs`` with the fewest offloaded layers that fit, when that is possible
    (``first``: ``s`` already priced at ``mbs`` without recompute)."""
    if not offload_possible(search, s):
        return None
    found = smallest_fitting(search, s, mbs)
    if found is None:
        return None
    sw, mem = found
    base = first
    if base is None or base.recompute != "none":
        base = search.steps.price(s, micro_batch_size=mbs, recompute="none")
    try:
        rep = with_offload(base, search.workload, s, sw, search.cluster.accel, mbs)
    except StrategyError:  # the host's memory share cannot hold the layers
        return None
    search.priced += 1
    cand = Candidate(s, mbs, "none", mem, rep, notes=rep.notes, switches=sw)
    search.admit(cand)
    return cand
