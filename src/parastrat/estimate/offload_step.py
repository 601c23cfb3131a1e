"""CPU activation offloading on a priced step: the host-link transfers and what they expose.

:func:`with_offload` takes a step priced without recompute and adds what
:mod:`parastrat.estimate.offload` says the offloading of ``Switches.cpu_offload_layers`` layers
costs: ``breakdown["offload"]`` (seconds per step the side stream spends moving activations,
D2H in forward and H2D in backward) and ``breakdown["offload_exposed"]`` (the compute stream's
waits for it, added to the step time, so ``compute + recompute + bubble + optimizer + every
*_exposed == step_time_s`` still holds).  The step model and the planner both call it: one
price for one mechanism.

A layer's forward and backward seconds are the priced micro-batch's busy time (compute, and
the communication it leaves exposed) spread evenly over the layers, one third forward and two
thirds backward (the FLOP ratio of a transformer layer without recompute).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..spec.workload import Switches, Workload
from . import offload
from .memory import activations

if TYPE_CHECKING:
    from ..strategy import Strategy
    from .step import StepReport

#: Per-micro-batch terms of a step's breakdown that keep the compute stream busy.
BUSY_TERMS = ("compute", "recompute", "tp_exposed", "cp_exposed", "ep_exposed", "host_exposed")
GB = 1e9


def offload_acts(workload: Workload, s: Strategy, switches: Switches) -> Any:
    """The memory model's per-layer activation record (recompute "none") for this workload and
    strategy: what the offloaded layers move (:func:`parastrat.estimate.memory.activations`)."""
    return activations(
        workload.model,
        s.tp,
        s.sp,
        s.cp,
        s.etp,
        workload.mbs,
        workload.seq_len,
        workload.precision,
        "none",
        switches.flash_attention,
        switches.mechanisms.recompute_modules,
    )


def with_offload(
    report: StepReport,
    workload: Workload,
    s: Strategy,
    switches: Switches,
    accel: Any,
    micro_batch_size: int | None = None,
) -> StepReport:
    """``report`` (one step priced with recompute "none") with the offloading of
    ``switches.cpu_offload_layers`` layers added (unchanged when 0).  StrategyError when
    Megatron refuses the combination or the device cannot hold or move the bytes."""
    model = workload.model
    k = offload.require_offload(model, s, switches, report.recompute)
    if not k:
        return report
    if micro_batch_size is not None:
        workload = workload.with_micro_batch(micro_batch_size)
    per = offload.require_host(accel, model, k, offload_acts(workload, s, switches))
    m = report.micro_batches
    busy = sum(report.breakdown.get(key, 0.0) for key in BUSY_TERMS) / m
    layer_s = busy / model.num_layers
    cost = offload.exposed_time(
        per, model.num_layers, layer_s / 3, 2 * layer_s / 3, accel.host_link_Bps
    )
    breakdown = dict(
        report.breakdown, offload=m * cost.transfer_s, offload_exposed=m * cost.exposed_s
    )
    step = report.step_time_s + m * cost.exposed_s
    scale = report.step_time_s / step
    note = (
        f"CPU activation offloading: {k} of {model.num_layers} layers, "
        f"{offload.host_traffic(per) / GB:.1f} GB per micro-batch over the "
        f"{accel.host_link_Bps / GB:.0f} GB/s host link, {cost.exposed_s * 1e3:.1f} ms exposed "
        "per micro-batch"
    )
    return replace(
        report,
        step_time_s=step,
        tokens_per_s_per_gpu=report.tokens_per_s_per_gpu * scale,
        tflops_per_gpu=report.tflops_per_gpu * scale,
        mfu=report.mfu * scale,
        breakdown=breakdown,
        notes=(*report.notes, note),
    )
