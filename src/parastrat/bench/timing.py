"""Timing a collective correctly on every backend.

Rules (the ones nccl-tests and careful hand-written loops follow):

- warm-up iterations run first and are not timed (connection set-up, lazy communicator
  creation, allocator growth);
- before each timed iteration the ranks meet at a barrier, and the device is synchronised, so
  every rank starts together and no earlier work leaks into the measurement;
- on an accelerator the iteration is bracketed by device events (``torch.cuda.Event`` /
  ``torch.npu.Event``) and read after synchronising; on the CPU (gloo) by ``perf_counter``
  around the blocking call;
- the per-iteration times of all ranks are reduced with MAX: a collective is done when its
  slowest rank is, so every rank reports the same numbers (``runner`` does this in the same
  all-reduce that shares the correctness verdict).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _device_module(torch: Any, device: Any) -> Any | None:
    """torch.cuda / torch.npu for an accelerator device, None for the CPU."""
    kind = torch.device(device).type
    if kind == "cpu":
        return None
    return getattr(torch, kind, None)


def synchronize(torch: Any, device: Any) -> None:
    """Wait until every kernel queued on ``device`` has finished (no-op on the CPU)."""
    mod = _device_module(torch, device)
    if mod is not None:
        mod.synchronize()


class Clock:
    """Times one call of a function on a device: events on accelerators, perf_counter on CPU."""

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = device
        self._mod = _device_module(torch, device)

    def time(self, fn: Callable[[], Any]) -> float:
        """Seconds ``fn()`` takes, the device's queued work included."""
        mod = self._mod
        if mod is None or not hasattr(mod, "Event"):
            start = time.perf_counter()
            fn()
            synchronize(self.torch, self.device)
            return time.perf_counter() - start
        begin, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3  # ms -> s


def measure(
    fn: Callable[[], Any],
    *,
    torch: Any,
    dist: Any,
    device: Any,
    iters: int,
    warmup: int,
    barrier_group: Any = None,
) -> list[float]:
    """This rank's seconds for each of ``iters`` timed calls of ``fn`` after ``warmup`` untimed.

    ``barrier_group`` is the group that meets before each call (the world for strategy runs,
    where every group of a kind runs at once, as in training); ``dist=None`` times a kernel of
    this process alone (no barrier).
    """
    clock = Clock(torch, device)
    times: list[float] = []
    for i in range(warmup + iters):
        synchronize(torch, device)
        if dist is not None:
            dist.barrier(group=barrier_group)
        elapsed = clock.time(fn)
        if i >= warmup:
            times.append(elapsed)
    return times
