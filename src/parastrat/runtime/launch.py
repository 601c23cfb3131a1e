"""Run a function on N local processes, the way torchrun would launch them, and never hang.

:func:`spawn_local` is what ``parastrat verify --world N``, ``parastrat bench --world N`` and the
multi-process tests use to stand up a small gloo (or nccl) world on one machine.  Each child
gets the environment torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), so code written for ``torchrun`` runs unchanged.

A rank that raises, dies (``os._exit``, a signal, an OOM kill) or outlives the timeout turns
into a :class:`RankFailure` naming the rank and the reason, and every child is killed: a broken
rank is an error message, not a hung terminal.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

#: Seconds to keep collecting failures after the first one, so the root cause (often a rank
#: that died) is reported rather than a peer that merely lost its connection to it.
_GRACE_S = 1.0


class RankFailure(RuntimeError):
    """One or more ranks of a local run failed: raised, died, or ran past the timeout.

    ``rank`` is the rank blamed first (a rank that died without reporting is preferred over
    peers that then saw a broken connection), ``reason`` says what happened to it, and
    ``failures`` maps every failed rank to its reason.
    """

    def __init__(self, rank: int, reason: str, failures: dict[int, str] | None = None):
        self.rank = rank
        self.reason = reason
        self.failures: dict[int, str] = dict(failures or {rank: reason})
        others = sorted(r for r in self.failures if r != rank)
        msg = f"rank {rank} failed: {reason}"
        if others:
            msg += f"\n(also failed: {', '.join(f'rank {r}' for r in others)})"
        super().__init__(msg)

    def __reduce__(self):  # picklable, so it can cross a process boundary intact
        return (RankFailure, (self.rank, self.reason, self.failures))


@dataclass(frozen=True)
class _Outcome:
    """What a child reports back through its pipe."""

    ok: bool
    value: Any = None  # the function's return value when ok
    error: str = ""  # "ExcType: message" when not ok
    traceback: str = ""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_seconds(name: str, value: Any) -> None:
    """UsageError, before anything starts, unless ``value`` is a finite number of seconds
    above 0: a run bounded by 0 s (or a negative, NaN or infinite bound) would time out at once
    or never."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"{name} must be a finite number of seconds > 0, got {value!r} (e.g. {name}=60)"
        )


def spawn_local(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    backend: str | None = "gloo",
    timeout_s: float = 60.0,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` fresh local processes.

    Each child starts with torchrun's environment variables set (``MASTER_ADDR=127.0.0.1`` and
    a free ``MASTER_PORT``).  With ``backend`` set (default ``"gloo"``), the child also starts
    the default ``torch.distributed`` process group on that backend before calling ``fn``
    (``"auto"`` picks it from the device, see :mod:`parastrat.runtime.backend`) and destroys it
    afterwards; with ``backend=None`` the child only gets the environment and ``fn`` starts
    torch.distributed itself (e.g. through ``strategy.initialize()``).

    ``fn`` must be picklable (a module-level function) and so must its return value.
    Returns the per-rank return values in rank order.  Raises :class:`RankFailure` when a rank
    raises, exits or is killed, or when the run exceeds ``timeout_s`` seconds; every child is
    killed before it is raised.  UsageError, before anything starts, for a world size below 1
    or a ``timeout_s`` that is not a finite number above 0.  The ranks ignore Ctrl-C (SIGINT):
    the parent gets it and terminates them, so only the parent reports it.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise UsageError(f"world_size must be a positive integer, got {world_size!r}")
    check_seconds("timeout_s", timeout_s)
    try:
        payload = pickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise TypeError(
            f"spawn_local needs a picklable, module-level function and arguments: {exc}"
        ) from exc

    from .._deps import require

    mp = require("torch.multiprocessing", why="spawn_local starts torch processes")
    ctx = mp.get_context("spawn")
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        with _sigint_blocked():  # a Ctrl-C meanwhile lands after every child is recorded
            _start_ranks(ctx, payload, world_size, backend, timeout_s, procs, conns)
        return _collect(procs, conns, timeout_s)
    finally:
        _kill_all(procs)
        for c in conns:
            c.close()


def _start_ranks(
    ctx: Any,
    payload: bytes,
    world_size: int,
    backend: str | None,
    timeout_s: float,
    procs: list[Any],
    conns: list[Any],
) -> None:
    """Start one process per rank with torchrun's environment (one free port for all),
    appending each process and the parent's end of its pipe to ``procs`` and ``conns``."""
    port = free_port()
    for rank in range(world_size):
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_child_main,
            args=(child_end, payload, rank, world_size, env, backend, timeout_s, os.getpid()),
            name=f"parastrat-rank{rank}",
            daemon=True,
        )
        conns.append(parent_end)
        p.start()
        procs.append(p)
        child_end.close()


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while the children start.  They inherit the mask, so a
    Ctrl-C during their start (interpreter, spawn's imports) stays pending there until
    :func:`_quiet_on_sigint` drops it, instead of printing a KeyboardInterrupt traceback; here
    it is delivered when the block ends, and the parent stops the run as usual.

    multiprocessing's resource tracker is started first: its own start unblocks SIGINT in
    this thread (``resource_tracker.ensure_running``), which would lift the block for the
    first child."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _quiet_on_sigint() -> None:
    """Make this rank deaf to SIGINT.  A Ctrl-C reaches every process of the terminal's
    process group, the ranks with their parent; the parent handles it (it terminates every
    rank), so a rank that raised KeyboardInterrupt too would only print its traceback.  A
    do-nothing handler rather than SIG_IGN: exec resets it, so processes a rank starts keep
    the default.  A SIGINT pending since the start (see :func:`_sigint_blocked`) is dropped."""
    import signal

    signal.signal(signal.SIGINT, _ignore_signal)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _ignore_signal(signum: int, frame: Any) -> None:
    """A signal handler that does nothing (see :func:`_quiet_on_sigint`)."""


def _collect(procs: list, conns: list, timeout_s: float) -> list[Any]:
    """Wait for every child's outcome; raise RankFailure on the first failure or at the deadline."""
    from multiprocessing.connection import wait

    world = len(procs)
    results: dict[int, Any] = {}
    failures: dict[int, str] = {}
    died: set[int] = set()  # ranks that exited without reporting: the likely root cause
    deadline = time.monotonic() + timeout_s
    fail_deadline: float | None = None
    pending = set(range(world))
    while pending:
        now = time.monotonic()
        limit = deadline if fail_deadline is None else min(deadline, fail_deadline)
        if now >= limit:
            break
        waitables = {}
        for r in pending:
            waitables[conns[r]] = r
            waitables[procs[r].sentinel] = r
        ready = wait(list(waitables), timeout=limit - now)
        for obj in ready:
            r = waitables[obj]
            if r not in pending:
                continue
            outcome = _read(conns[r])
            if outcome is None and obj is conns[r]:
                # EOF on the pipe: the child is exiting; its sentinel tells us how
                procs[r].join(1.0)
            if outcome is None:
                if procs[r].is_alive():
                    continue
                failures[r] = _exit_reason(procs[r].exitcode)
                died.add(r)
            elif outcome.ok:
                results[r] = outcome.value
            else:
                failures[r] = f"{outcome.error}\n{outcome.traceback}".rstrip()
            pending.discard(r)
        if failures and fail_deadline is None:
            fail_deadline = time.monotonic() + _GRACE_S
    if failures:
        silent = _silent_culprits(procs, pending, failures) if not died else {}
        failures.update(silent)
        first = min(died) if died else min(silent) if silent else _root_cause(failures)
        raise RankFailure(first, failures[first], failures)
    if pending:
        reason = f"timed out after {timeout_s:g} s (ranks still running: {sorted(pending)})"
        raise RankFailure(
            min(pending), reason, {r: f"timed out after {timeout_s:g} s" for r in pending}
        )
    return [results[r] for r in range(world)]


#: What a rank reports when a peer went away (gloo, NCCL, the TCP store): a consequence.
_PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote worker crash",
    "socket closed",
    "connection refused",
)


def _root_cause(failures: dict[int, str]) -> int:
    """The rank to blame among ranks that all reported: the lowest whose failure is its own
    (not a peer's connection going away), else the lowest."""
    own = [r for r, why in failures.items() if not any(w in why.lower() for w in _PEER_LOST)]
    return min(own or failures)


def _process_state(pid: int | None) -> str:
    """The one-letter state of a process from /proc (Linux): "T" stopped, "Z" zombie, ...;
    "" where it cannot be read."""
    if pid is None:
        return ""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return ""


def _silent_culprits(procs: list, pending: set[int], failures: dict[int, str]) -> dict[int, str]:
    """Ranks to blame among those that never answered, when the ranks that did answer only
    report waiting on them: a stopped process (SIGSTOP, Ctrl-Z) always; a silent live one when
    every reported failure is a timeout.  {rank: reason}."""
    stopped = {r for r in pending if _process_state(procs[r].pid) in ("T", "t")}
    if stopped:
        return {
            r: "the process is stopped (SIGSTOP or Ctrl-Z) and did not answer; its peers "
            "timed out waiting for it"
            for r in stopped
        }
    timeouts = all(
        any(w in reason.lower() for w in ("timed out", "timeout", "clients joined"))
        for reason in failures.values()
    )
    if pending and timeouts:
        return {
            r: "did not answer: its peers timed out waiting for it (hung, or blocked outside "
            "the collectives)"
            for r in pending
        }
    return {}


def _read(conn) -> _Outcome | None:
    """The outcome waiting on ``conn``, or None when there is none (yet, or ever)."""
    try:
        if conn.poll():
            return conn.recv()
    except (EOFError, OSError):
        return None
    except Exception as exc:
        return _Outcome(ok=False, error=f"could not read the rank's result: {exc!r}")
    return None


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"process was killed by {name} without reporting a result"
    return f"process exited with code {code} without reporting a result"


def _kill_all(procs: list) -> None:
    """Terminate every child still alive, escalating to SIGKILL; reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(2.0)


#: Seconds between the orphan watchdog's checks that the parent is still there.
_WATCH_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when ``parent_pid`` (the process that spawned it) ends, however it
    ends (SIGTERM, SIGKILL, SIGHUP, a crash): no rank outlives ``bench`` or ``verify``.

    On Linux the kernel does it: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)).  Everywhere
    a daemon thread also checks every :data:`_WATCH_S` seconds that the parent is still the
    parent (a re-parented orphan sees another ``getppid()``) and exits the process if not.
    """
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still works
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(_WATCH_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parastrat-orphan-watchdog", daemon=True).start()


def _child_main(
    conn,
    payload: bytes,
    rank: int,
    world_size: int,
    env: dict[str, str],
    backend: str | None,
    timeout_s: float,
    parent_pid: int,
) -> None:
    """Entry point of one spawned rank: set the environment, run ``fn``, report the outcome."""
    _quiet_on_sigint()
    die_with_parent(parent_pid)
    os.environ.update(env)
    # torchrun's default: one intra-op thread per rank, so N ranks do not oversubscribe the CPU
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = False
    try:
        fn, args = pickle.loads(payload)
        if backend is not None:
            from .backend import init_distributed

            started = init_distributed(backend, timeout=timeout_s).started
        value = fn(rank, world_size, *args)
        outcome = _Outcome(ok=True, value=value)
    except BaseException as exc:
        from .backend import torch_message

        outcome = _Outcome(
            ok=False,
            error=f"{type(exc).__name__}: {torch_message(exc)}",
            traceback=traceback.format_exc(),
        )
    try:
        conn.send(outcome)
    except Exception as exc:
        conn.send(_Outcome(ok=False, error=f"the return value could not be sent back: {exc!r}"))
    finally:
        conn.close()
    if started:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
