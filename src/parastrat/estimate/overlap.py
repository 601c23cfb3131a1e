"""What part of each communication, and of the host's time, stays on a layer's critical path.

The step model (:mod:`parastrat.estimate.step`) prices every collective of a layer
(:mod:`parastrat.estimate.comm`) and its compute (:mod:`parastrat.estimate.layer_cost`); this
module decides how much of each the other hides:

* a collective overlapping a window of compute leaves ``t - min(t, window)`` exposed and slows
  the compute it hides behind by :data:`OVERLAP_SLOWDOWN` of the hidden part (:func:`exposed_time`);
* TP collectives hide behind the GEMMs with TP comm overlap, else only the asynchronous dgrad
  share behind the wgrad GEMMs (:func:`tp_exposed`);
* the expert-parallel all-to-alls hide under combined 1F1B phase by phase, or behind the
  shared experts (:func:`ep_exposed`; :class:`MoEComm` holds the recipe's switches and
  :func:`effective_moe_comm` drops those Megatron would refuse);
* the host's eager launches hide behind the GPU's work unless a sync empties the queue
  (:func:`host_exposed`, :func:`sync_drain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..spec.hardware import QUANTISED, Accelerator
from ..spec.model import ModelSpec
from ..spec.workload import ALL_MECHANISMS, Mechanisms
from .efficiency import host_op_time
from .host_ops import HOST_BWD_RATIO, HOST_OPS, host_ops
from .layer_cost import LayerCost

if TYPE_CHECKING:
    from ..strategy import Strategy

#: Fraction of an overlapped collective's duration by which it slows the kernels it overlaps
#: (NCCL / userbuffer kernels occupy ~16-24 of 132 SMs and share HBM bandwidth).
OVERLAP_SLOWDOWN = 0.15


@dataclass(frozen=True)
class MoEComm:
    """How a recipe runs the expert-parallel all-to-all (Megatron Core / Bridge switches).

    ``dispatcher``: "alltoall" (Megatron's default: one copy per routed expert) or "flex"
    (``moe_token_dispatcher_type="flex"`` with DeepEP/HybridEP: one copy per destination rank
    inside a scale-up domain and per destination domain across the scale-out link,
    :func:`parastrat.estimate.comm.dedup_scale`).
    ``a2a_overlap``: ``overlap_moe_expert_parallel_comm`` ("combined 1F1B"): the forward of one
    micro-batch runs beside the backward of another, each all-to-all phase under a compute
    phase of the other micro-batch (needs EP > 1, PP = 1 or VPP > 1, no full recompute).
    ``shared_expert_overlap``: ``moe_shared_expert_overlap``: the shared experts compute while
    the dispatch/combine run (Megatron refuses it together with ``a2a_overlap``).
    """

    dispatcher: str = "alltoall"
    a2a_overlap: bool = False
    shared_expert_overlap: bool = False


def exposed_time(t_comm: float, window: float, overlap: bool) -> float:
    """Critical-path part of a collective of ``t_comm`` seconds overlapping ``window``."""
    if not overlap:
        return t_comm
    hidden = min(t_comm, window)
    return t_comm - hidden + OVERLAP_SLOWDOWN * hidden


#: Share of a layer's TP collectives that run asynchronously behind a wgrad GEMM when TP
#: comm overlap (userbuffers) is off: the dgrad reduce-scatter of the two column-parallel
#: matrices (QKV, FC1) with SP, 2 of the 8 per layer; their dgrad all-reduce without SP, 2 of 4
#: (Transformer Engine ``_Linear.backward``, "Overlap dgrad-RS/AR with wgrad").
TP_ASYNC_SHARE = {True: 0.25, False: 0.5}
#: Share of a layer's backward GEMM time that those async collectives hide behind: the wgrad
#: GEMMs (half of the backward) of the column-parallel matrices (about half of them).
TP_ASYNC_WINDOW = 0.25


def tp_exposed(
    t_tp: float,
    c: LayerCost,
    overlap: bool,
    sp: bool,
    mech: Mechanisms,
    wgrad_delayed: bool = False,
) -> float:
    """Critical-path seconds of a layer's TP collectives (``t_tp``): behind the GEMMs with TP
    comm overlap; else all exposed but the async backward share (mechanism ``tp_async``),
    which has no wgrad GEMM to hide behind when the wgrad is delayed (``delay_wgrad_compute``:
    TE puts the GEMM in its wgrad store and waits for the collective at once)."""
    if overlap:
        return exposed_time(t_tp, c.gemm, True)
    if not mech.tp_async or wgrad_delayed:
        return t_tp
    hidden = TP_ASYNC_SHARE[sp] * t_tp
    return t_tp - hidden + exposed_time(hidden, TP_ASYNC_WINDOW * c.gemm_bwd, True)


def host_exposed(
    model: ModelSpec,
    moe: bool | str,
    s: Strategy,
    prec: str,
    mode: str,
    graphs: frozenset[str],
    accel: Accelerator,
    c: LayerCost,
    exposed_comm: float,
    recompute: float,
    mech: Mechanisms = ALL_MECHANISMS,
    fp8_recipe: str | None = None,
    paired: bool = False,
) -> tuple[float, float]:
    """(host seconds, host seconds the GPU waits for) of one layer and micro-batch.

    The host issues :func:`host_ops` operations forward and :data:`HOST_BWD_RATIO` times as many
    backward (plus the forward again under full recompute, one launch per recomputed module
    under selective), each :func:`host_op_time`. Kernels run asynchronously, so without a sync a
    pass costs the longer of its host and GPU times (the GPU's being its compute, exposed
    communication and recompute; the forward gets a third of the exposed communication, the
    backward two thirds): the GPU waits ``max(0, host - gpu)``. The MoE token-count sync
    (:func:`host_ops`) empties the GPU's queue once per MoE layer forward (again in the
    recomputed forward under full recompute): the GPU then idles while the host issues the
    next operation (one more operation's host time), and the MoE block issued after the sync
    cannot hide its host time behind the layer's attention (:func:`sync_drain`; ``paired``:
    combined 1F1B issues another micro-batch's backward in the same span).
    """
    fp8 = prec if prec in QUANTISED and accel.supports(prec) else "bf16"
    ops_f, sync = host_ops(model, moe, s, fp8, graphs, mech, fp8_recipe)
    if not ops_f and not sync:
        return 0.0, 0.0
    h_op = host_op_time(accel)
    # selective: about one launch per recomputed module (the core-attention kernel by default);
    # the "moe" module issues the MoE block again, with its token-count sync
    n_sel = len(mech.recompute_modules) * HOST_OPS["attention"] if moe != "mamba" else 0
    rec_ops = ops_f if mode == "full" else (n_sel if mode == "selective" else 0.0)
    moe_again = bool(sync) and mode == "selective" and "moe" in mech.recompute_modules
    post_ops = host_ops(model, moe, s, fp8, graphs, mech, fp8_recipe, True)[0] if sync else 0.0
    if moe_again:
        rec_ops += post_ops
    host_f = ops_f * h_op
    host_b = (HOST_BWD_RATIO * ops_f + rec_ops) * h_op
    gpu_f = c.fwd + exposed_comm / 3
    gpu_b = c.bwd + 2 * exposed_comm / 3 + recompute
    wait_f, wait_b = max(0.0, host_f - gpu_f), max(0.0, host_b - gpu_b)
    if sync and mech.sync_drain:  # kernels: the drained queue after the token-count sync
        drain = sync_drain(post_ops * h_op, c, exposed_comm, paired)
        wait_f = max(wait_f, drain)
        if mode == "full" or moe_again:  # the recomputed forward syncs again, in backward
            wait_b, sync = max(wait_b, drain), 2 * sync
    return host_f + host_b, wait_f + wait_b + h_op * sync


def sync_drain(post_host: float, c: LayerCost, exposed_comm: float, paired: bool) -> float:
    """Seconds the GPU waits, per MoE layer forward, for the host to issue the MoE block after
    the token-count sync (mechanism ``sync_drain``).

    The sync returns only when the GPU has run everything queued, so the block after it
    (permutation, dispatch, the per-expert GEMMs and casts, combine: :func:`host_ops` with
    ``after_sync``; ``post_host`` seconds of host time) starts on an empty queue: the GPU
    runs each operation as the host issues it, and only the GPU work issued after the block
    (the next layer's attention) can hide the host's lead from then on.  Of a span "block,
    then attention" with host times ``hA, hB`` and GPU times ``gA, gB`` the GPU finishes no
    earlier than ``hA + gB``, besides ``hA + hB`` and ``gA + gB``: beyond what the
    layer-wide comparison of host and GPU time already charges, the GPU waits ``hA - gA``.
    ``gA`` is the MLP block's forward GEMMs and the forward third of the layer's exposed
    communication (the dispatch and combine); with combined 1F1B (``paired``) another
    micro-batch's layer backward is issued in the same span and adds its GPU time.
    """
    gpu = c.mlp_fwd + exposed_comm / 3 + (c.bwd if paired else 0.0)
    return max(0.0, post_host - gpu)


def effective_moe_comm(
    s: Strategy,
    mode: str,
    moe_comm: MoEComm,
    notes: list[str] | None,
    hybrid: bool = False,
    mtp_layers: int = 0,
) -> MoEComm:
    """``moe_comm`` less the switches Megatron would refuse for this strategy (noted);
    ``hybrid``: the model is a hybrid (Mamba) stack, on which combined 1F1B does not run;
    ``mtp_layers``: its multi-token-prediction layers (:func:`a2a_overlap_refusal`)."""
    a2a, shared = moe_comm.a2a_overlap, moe_comm.shared_expert_overlap
    why = a2a_overlap_refusal(s, mode, hybrid, mtp_layers) if a2a else None
    if why is not None:
        a2a = False
        if notes is not None and s.ep > 1:
            notes.append(f"moe_a2a_overlap (combined 1F1B) not applied: {why}")
    if a2a and shared:
        shared = False
        if notes is not None:
            notes.append(
                "moe_shared_expert_overlap not applied: Megatron refuses it together "
                "with combined 1F1B"
            )
    if shared and moe_comm.dispatcher != "alltoall":
        shared = False
        if notes is not None:
            notes.append(
                "moe_shared_expert_overlap not applied: Megatron Core runs it with the "
                "alltoall dispatcher only"
            )
    if (a2a, shared) == (moe_comm.a2a_overlap, moe_comm.shared_expert_overlap):
        return moe_comm
    return MoEComm(moe_comm.dispatcher, a2a, shared)


def moe_a2a_overlap_ok(
    s: Strategy, recompute: str, hybrid: bool = False, mtp_layers: int = 0
) -> bool:
    """Whether Megatron runs combined 1F1B for this strategy (:func:`a2a_overlap_refusal`)."""
    return a2a_overlap_refusal(s, recompute, hybrid, mtp_layers) is None


def a2a_overlap_refusal(
    s: Strategy, recompute: str, hybrid: bool = False, mtp_layers: int = 0
) -> str | None:
    """Why Megatron Core does not run combined 1F1B (``overlap_moe_expert_parallel_comm``) for
    this strategy, None where it does: EP > 1, PP = 1 or VPP > 1, no full recompute, at most
    one MTP layer and then PP > 1 (megatron-core 0.16.1 ``TransformerConfig.__post_init__``:
    "MTP layernum only supports 1", "Pipeline model parallel size must be larger than 1 when
    enabling overlap_moe_expert_parallel_comm with MTP layer"), and a GPT model, not a hybrid
    (``pipeline_parallel/combined_1f1b.py`` asserts "The final unwrapped model must be a
    GPTModel instance", and a hybrid stack is a ``MambaModel``)."""
    if s.ep <= 1:
        return "it needs EP > 1"
    if hybrid:
        return "Megatron Core runs it on a GPTModel only (a hybrid MambaModel asserts)"
    if (s.pp > 1 and s.vpp == 1) or recompute == "full":
        return "it needs PP = 1 or VPP > 1 and no full recompute"
    if mtp_layers > 1:
        return f"Megatron Core runs it with one MTP layer at most (this model has {mtp_layers})"
    if mtp_layers == 1 and s.pp == 1:
        return "with an MTP layer Megatron Core needs PP > 1"
    return None


def unpaired_share(pp: int, vpp: int, m: int, rank: int) -> float:
    """Share of a pipeline rank's chunk forwards (and as many backwards) that combined 1F1B
    cannot pair with another micro-batch's compute: the warm-up forwards of Megatron Core's
    interleaved schedule (0.16.1 ``get_pp_rank_microbatches``: ``2 (p - rank - 1) + (v - 1) p``
    chunk steps, "one extra micro-batch forward step" with ``overlap_moe_expert_parallel_comm``)
    and the cool-down backwards; without a pipeline
    (``combined_1f1b_schedule_for_no_pipelining``) the first forward and the last backward."""
    steps = m * vpp
    warmup = 1 if pp == 1 else 2 * (pp - rank - 1) + (vpp - 1) * pp + 1
    return min(1.0, warmup / steps) if steps else 0.0


def ep_exposed(c: LayerCost, t_ep: float, moe_comm: MoEComm, mode: str) -> float:
    """Critical-path seconds of one MoE layer's four all-to-alls (one micro-batch, fwd + bwd).

    * combined 1F1B (``a2a_overlap``): Megatron pairs the forward of micro-batch i+1 with the
      backward of micro-batch i layer by layer, and runs each all-to-all phase under one
      compute phase of the other micro-batch: attention forward / combine backward, MLP
      backward / dispatch forward, MLP forward / dispatch backward, attention backward /
      combine forward.  A pair of phases costs the longer of the two, so what stays exposed is
      ``sum(max(compute_i, a2a/4)) - sum(compute_i)``; the hidden part still slows the compute
      by :data:`OVERLAP_SLOWDOWN`.
    * ``shared_expert_overlap``: the shared experts' forward and backward GEMMs run while the
      dispatch and combine are in flight: up to their duration is hidden.
    """
    if t_ep <= 0:
        return 0.0
    if moe_comm.a2a_overlap:
        a = t_ep / 4
        attn_f, attn_b = c.fwd - c.mlp_fwd, c.bwd - c.mlp_bwd
        phases = (attn_f, c.mlp_bwd, c.mlp_fwd, attn_b)
        exposed = sum(max(x, a) for x in phases) - sum(phases)
        return exposed + OVERLAP_SLOWDOWN * (t_ep - exposed)
    if moe_comm.shared_expert_overlap and c.shared > 0:
        return exposed_time(t_ep, c.shared, True)
    return t_ep
