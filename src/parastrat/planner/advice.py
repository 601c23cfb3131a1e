"""What the implementation switches would buy a given strategy, each priced by the same model.

``plan`` searches the parallel degrees; the switches (CUDA graphs, TP comm overlap, the MoE
dispatcher, combined 1F1B, DP overlap) are the user's.  :func:`switch_advice` prices the
strategy again with each switch a Megatron Bridge performance recipe would turn on, one at a
time, and keeps those that shorten the step by more than the model's resolution
(:data:`~parastrat.planner.ranking.RANK_TIE`) without breaking the memory fit.  The switches
offered, and when:

* ``cuda_graphs``: eager runs whose step waits on the host; Transformer Engine-scoped graphs
  of the scopes Megatron Bridge's recipes capture (``attn``, ``moe_router``,
  ``moe_preprocess`` for MoE models; ``attn``, ``mlp`` for dense ones).  The whole iteration
  (``full_iteration``) needs static expert shapes and is not offered;
* ``tp_comm_overlap``: TP > 1 with sequence parallelism and the overlap not asked for; not at
  NVFP4 (Transformer Engine's NVFP4 GEMM takes no userbuffers overlap);
* ``moe_dispatcher="flex"`` (DeepEP / HybridEP) and ``moe_a2a_overlap`` (combined 1F1B): EP > 1;
* ``overlap_grad_reduce``: when switched off.

NVIDIA accelerators only: these are CUDA / Transformer Engine features (Ascend's counterparts,
MC2 and MindSpeed's own overlaps, are other switches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import StrategyError
from ..estimate.step import StepReport
from ..rules.graphs import GRAPHS_REFUSED_WITH_A2A
from ..spec.workload import TP_OVERLAP_OFF_BY_DEFAULT, Switches, Workload, canonical_precision
from ..strategy import Strategy
from .price import price
from .ranking import RANK_TIE

if TYPE_CHECKING:
    from ..spec.cluster import Cluster

#: CUDA-graph scopes offered, by model kind (Megatron Bridge's TE-scoped recipe choices).
GRAPH_SCOPES = {
    True: frozenset({"attn", "moe_router", "moe_preprocess"}),
    False: frozenset({"attn", "mlp"}),
}


@dataclass(frozen=True)
class SwitchAdvice:
    """One switch change and what it buys: ``change`` the :class:`Switches` fields it sets,
    ``step`` the strategy priced with it, ``gain`` the share of the current step it saves."""

    change: dict[str, Any]
    step: StepReport
    gain: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields set (scopes as a sorted list), the step time and the gain."""
        change = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in self.change.items()}
        return {
            "set": change,
            "step_time_s": self.step.step_time_s,
            "tokens_per_s_per_gpu": self.step.tokens_per_s_per_gpu,
            "gain": self.gain,
        }


def candidate_changes(
    workload: Workload, s: Strategy, switches: Switches, current: StepReport
) -> list[dict[str, Any]]:
    """The switch changes worth pricing for ``s`` (module docstring), each a dict of
    :class:`Switches` fields."""
    out: list[dict[str, Any]] = []
    if not switches.cuda_graphs and current.breakdown.get("host_exposed", 0.0) > 0:
        out.append({"cuda_graphs": GRAPH_SCOPES[workload.model.is_moe]})
    # TE's NVFP4 GEMM takes no userbuffers: the precisions whose unset overlap means off
    no_ub = canonical_precision(workload.precision) in TP_OVERLAP_OFF_BY_DEFAULT
    if s.tp > 1 and s.sp and switches.tp_comm_overlap is not True and not no_ub:
        out.append({"tp_comm_overlap": True})
    if s.ep > 1 and switches.moe_dispatcher == "alltoall":
        out.append({"moe_dispatcher": "flex"})
    # the adapters refuse combined 1F1B beside these graphs: not advised there
    a2a_runs = not switches.cuda_graphs & GRAPHS_REFUSED_WITH_A2A
    if s.ep > 1 and not switches.moe_a2a_overlap and not workload.model.is_hybrid and a2a_runs:
        # Megatron refuses the shared-expert overlap together with combined 1F1B
        shared = {"moe_shared_expert_overlap": False} if switches.moe_shared_expert_overlap else {}
        out.append({"moe_a2a_overlap": True, **shared})
    if not switches.overlap_grad_reduce:
        out.append({"overlap_grad_reduce": True})
    return out


def switch_advice(
    workload: Workload, strategy: Strategy, cluster: Cluster, switches: Switches
) -> list[SwitchAdvice]:
    """The switch changes of :func:`candidate_changes` that shorten ``strategy``'s step by more
    than :data:`RANK_TIE` and keep it within memory (if it fits now), fastest first; none on
    accelerators other than NVIDIA's."""
    if cluster.accel.vendor != "nvidia":
        return []
    s, current, mem = price(workload, strategy, cluster, switches)
    fits = mem.fits(cluster.accel)
    out = []
    for change in candidate_changes(workload, s, switches, current):
        try:
            _, step, new_mem = price(workload, s, cluster, replace(switches, **change))
        except StrategyError:  # a combination Megatron refuses for this strategy
            continue
        gain = 1.0 - step.step_time_s / current.step_time_s
        if gain > RANK_TIE and (new_mem.fits(cluster.accel) or not fits):
            out.append(SwitchAdvice(change, step, gain))
    return sorted(out, key=lambda a: -a.gain)
