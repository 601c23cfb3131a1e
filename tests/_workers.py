"""Module-level functions for spawned-rank tests (they must be importable by the children)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def sleep_and_record_pid(rank: int, world: int, folder: str) -> None:
    """Write this rank's pid to ``folder/rank<r>.pid``, then sleep far longer than any test."""
    (Path(folder) / f"rank{rank}.pid").write_text(str(os.getpid()))
    time.sleep(300)


def stop_rank_one(name: str, rank: int) -> None:
    """A verify step hook that stops rank 1 (SIGSTOP) at its first check, as a user's Ctrl-Z
    or a debugger would."""
    import signal

    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)


def initialize_by_rank(rank: int, world: int, texts: list) -> str:
    """``initialize`` the strategy ``texts[rank]`` on a gloo world (ranks may disagree);
    returns the UsageError's message, or "ok"."""
    import parastrat as ps
    from parastrat.errors import UsageError

    try:
        ps.Strategy.parse(texts[rank]).initialize(backend="gloo", timeout=30)
    except UsageError as exc:
        return str(exc)
    ps.destroy()
    return "ok"


def stall_in_group_build(rank: int, world: int, stall_s: float) -> str:
    """``initialize`` Ulysses2 with a 5 s timeout while rank 1 stalls ``stall_s`` seconds in its
    first ``new_group``; returns each rank's error as ``"Type: message"``, or "ok"."""
    import time

    import torch.distributed as dist

    import parastrat as ps

    if rank == 1:
        real, state = dist.new_group, {"first": True}

        def stalled(*args, **kwargs):
            if state.pop("first", False):
                time.sleep(stall_s)
            return real(*args, **kwargs)

        dist.new_group = stalled
    try:
        ps.Strategy(ulysses=2).initialize(backend="gloo", timeout=5)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    ps.destroy()
    return "ok"
