"""CPU activation offloading: what it saves on the device, what it moves, what it costs.

The mechanism (Megatron Core ``cpu_offloading`` / ``cpu_offloading_num_layers``): the
``TransformerBlock`` wraps every layer's forward in Transformer Engine's CPU-offload context
(``megatron/core/transformer/transformer_block.py``: ``get_cpu_offload_context(...)`` and
``group_prefetch_offload_commit_async`` after each layer).  Transformer Engine
(``transformer_engine/pytorch/cpu_offload.py``, ``OffloadSynchronizer``,
``_default_offload_sync_init``) then, with ``L`` layers of which ``k`` are offloaded:

* offloads layers ``0 .. k-1``: every tensor autograd saves in them (at least 2^20 elements;
  weights are never offloaded) is copied to pinned host memory on one side stream as soon as
  the layer's forward ends;
* the copy of layer ``i`` must be finished before the forward of layer ``L - k + i`` starts
  (the compute stream waits for it there, and its device copy is freed);
* its reload starts at the backward of layer ``L - 1 - k + i`` and must be finished before the
  backward of layer ``i`` (the compute stream waits for it there).

TE's docstring states what this buys: "peak memory usage of saving activations is
(num_layers - num_offloaded_layers) * T".  The device copies of offloaded layers live until
their deadline, which falls when as many later layers have been computed as were released,
and reloads start only as earlier backwards have freed theirs: those are the in-flight buffers,
and they never push the peak above ``L - k`` layers.  So the device keeps the activations of
every layer but the first ``k`` (:func:`saved_bytes`), one micro-batch at a time (``pp = 1``:
each micro-batch's backward ends before the next forward).  ``cpu_offloading_weights`` and
``cpu_offloading_double_buffering`` are deprecated no-ops in Transformer Engine 2.x ("Offloading
weights is deprecated ... does not have any effect"), so neither is priced; Megatron Core's
``fine_grained_activation_offloading`` (per-module, ``offload_modules``) is a different
mechanism, mutually exclusive with this one, and is not priced.

Time (:func:`exposed_time`): the side stream moves each offloaded layer's bytes over the host
link (``Accelerator.host_link_Bps``, one direction: D2H in forward, H2D in backward) one layer
after another, behind the compute of later layers; :func:`exposed_time` replays TE's schedule
with each layer's forward and backward time and returns how long the compute stream waits.  A
link fast enough to move a layer in less than the ``L - k - 1`` layers' compute of its window
hides everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StrategyError
from ..rules.offload import host_violations, offload_violations
from ..spec.model import ModelSpec


@dataclass(frozen=True)
class OffloadTime:
    """One micro-batch's offloading: ``transfer_s`` the side stream's busy time (D2H + H2D),
    ``exposed_s`` how long the compute stream waits for it."""

    transfer_s: float
    exposed_s: float


def layer_bytes(model: ModelSpec, layers: int, acts: Any) -> tuple[float, ...]:
    """Activation bytes of one micro-batch in each of the first ``layers`` transformer layers
    (the ones Transformer Engine offloads), read from the memory model's per-layer records
    (``acts``: :class:`parastrat.estimate.memory.Activations` at recompute "none")."""
    return tuple(acts.moe if model.is_moe_layer(i) else acts.dense for i in range(layers))


def require_offload(model: ModelSpec, strategy: Any, switches: Any, recompute: str) -> int:
    """The layers ``switches`` offloads (0: off), or StrategyError naming every Megatron rule
    the combination breaks (:func:`parastrat.offload_rules.offload_violations`)."""
    k = int(switches.cpu_offload_layers)
    errors = offload_violations(
        model.num_layers, strategy, k, recompute, switches.cuda_graphs, hybrid=model.is_hybrid
    )
    if errors:
        raise StrategyError(errors)
    return k


def saved_bytes(model: ModelSpec, strategy: Any, switches: Any, acts: Any) -> float:
    """Device activation bytes that offloading removes from a rank's peak: the first
    ``cpu_offload_layers`` layers' activations of the one micro-batch in flight (0 when off;
    StrategyError when Megatron would refuse the combination)."""
    k = require_offload(model, strategy, switches, switches.mode)
    return sum(layer_bytes(model, k, acts)) if k else 0.0


def fitting_layers(model: ModelSpec, acts: Any, host_bytes: float | None) -> int:
    """The most layers whose activations fit in ``host_bytes`` (all but one when unchecked)."""
    most = model.num_layers - 1
    if host_bytes is None:
        return most
    total, n = 0.0, 0
    for b in layer_bytes(model, most, acts):
        if total + b > host_bytes:
            break
        total, n = total + b, n + 1
    return n


def require_host(accel: Any, model: ModelSpec, layers: int, acts: Any) -> tuple[float, ...]:
    """Each offloaded layer's bytes, or StrategyError when the device has no priced host link
    or the host share cannot hold them (:func:`parastrat.offload_rules.host_violations`)."""
    per = layer_bytes(model, layers, acts)
    fit = fitting_layers(model, acts, accel.host_memory_bytes)
    errors = host_violations(accel, layers, sum(per), fit)
    if errors:
        raise StrategyError(errors)
    return per


def exposed_time(
    per_layer: Sequence[float], num_layers: int, t_fwd: float, t_bwd: float, link_Bps: float
) -> OffloadTime:
    """Replay Transformer Engine's default offload schedule for one micro-batch (module
    docstring) and return the side stream's busy time and the compute stream's waits.

    ``per_layer``: bytes of each offloaded layer (layers ``0 .. k-1``); ``t_fwd`` / ``t_bwd``:
    one layer's forward / backward seconds; ``link_Bps``: one direction of the host link.  The
    copies run in order on one stream, a copy starting when both its data and the stream are
    ready."""
    k, n = len(per_layer), num_layers
    if not k:
        return OffloadTime(0.0, 0.0)
    move = [b / link_Bps for b in per_layer]
    t = stream = 0.0
    done: dict[int, float] = {}
    for j in range(n):  # forward
        i = j - (n - k)  # the offload that must be finished before layer j's forward
        if 0 <= i < k:
            t = max(t, done[i])
        t += t_fwd
        if j < k:
            stream = max(t, stream) + move[j]
            done[j] = stream
    ready: dict[int, float] = {}
    for j in range(n - 1, -1, -1):  # backward
        i = j - (n - 1 - k)  # the reload that starts at layer j's backward
        if 0 <= i < k:
            stream = max(t, stream) + move[i]
            ready[i] = stream
        if j < k:
            t = max(t, ready[j])
        t += t_bwd
    return OffloadTime(2 * sum(move), max(0.0, t - n * (t_fwd + t_bwd)))


def host_traffic(per_layer: Sequence[float]) -> float:
    """Bytes one micro-batch moves over the host link, both directions together."""
    return 2 * sum(per_layer)
