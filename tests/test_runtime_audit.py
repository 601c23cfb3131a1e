"""Audit findings on the runtime: what a hung rank's verify report says, a peer that never
reaches initialize, Ctrl-C in local runs, and the bounds spawn_local accepts."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("torch")

from parastrat import Strategy
from parastrat.errors import UsageError
from parastrat.runtime.launch import spawn_local
from parastrat.runtime.verify import failure_text, verify_local

ROOT = Path(__file__).resolve().parent.parent

# ---- module-level workers and hooks (the spawned ranks import them) -------------------------


def hang_rank_1_at_tp_matmul(step: str, rank: int) -> None:
    """A verify hook: rank 1 hangs (sleeps past every bound) before its TP matmul."""
    if rank == 1 and step == "tp-matmul":
        time.sleep(600)


def rank_1_never_reaches_initialize(rank: int, world: int) -> str:
    """Both ranks start the default group (5 s timeout); rank 1 then waits, never calling
    initialize, until rank 0 says it is done; rank 0 initializes Ulysses 2 and returns its
    error as ``"Type: message"``."""
    import torch.distributed as dist

    from parastrat.runtime.backend import init_distributed

    init_distributed("gloo", timeout=5)  # the store's timeout: what initialize waits
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        store.wait(["audit/done"], timedelta(seconds=60))
        return "waited"
    try:
        Strategy(ulysses=2).initialize(backend="gloo", timeout=5)
        result = "ok"
    except Exception as exc:
        result = f"{type(exc).__name__}: {exc}"
    store.set("audit/done", "1")
    return result


def interrupt_myself(rank: int, world: int) -> str:
    """Send this rank a SIGINT, as a Ctrl-C in the terminal does, and report that it lived."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # let the signal be handled before returning
    return f"rank {rank} still running"


def report_sigint_blocked(conn) -> None:
    """Send back whether SIGINT is blocked in this freshly started process."""
    conn.send(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    conn.close()


def record_pid_then_sleep(rank: int, world: int, folder: str) -> None:
    """Write ``folder/rank<r>.pid``, then sleep far longer than the test."""
    (Path(folder) / f"rank{rank}.pid").write_text(str(os.getpid()))
    time.sleep(300)


# ---- finding 1: the hung rank's report names the check, the group kind and its ranks --------


@pytest.mark.multiprocess
def test_a_hung_rank_is_reported_with_the_check_and_group_its_peer_saw():
    report = verify_local(Strategy(tp=2), 2, timeout_s=5, on_step=hang_rank_1_at_tp_matmul)
    assert not report.ok and report.failed_rank == 1, report.summary()
    assert "did not answer" in report.error
    assert "tp-matmul over the tp group [0, 1] (seen by rank 0)" in report.error


def test_failure_text_takes_the_peers_check_whose_group_holds_the_hung_rank():
    """The audit's 4-rank case: rank 1 hangs before its DP all-reduce; rank 3 times out in that
    all-reduce, ranks 0 and 2 (already through their checks) in the final gather."""
    gather = "RuntimeError: gather over the world group [0, 1, 2, 3] failed on rank {} (after"
    failures = {
        0: gather.format(0) + " its checks): RuntimeError: Timed out",
        1: "did not answer: its peers timed out waiting for it",
        2: gather.format(2) + " its checks): RuntimeError: Timed out",
        3: "RuntimeError: all-reduce over the dp group [1, 3] failed on rank 3: timed out\n"
        "Traceback (most recent call last): ...",
    }
    text = failure_text(1, failures[1], failures)
    assert text == (
        "did not answer: its peers timed out waiting for it; where its peers saw it fail: "
        "all-reduce over the dp group [1, 3] (seen by rank 3)"
    )
    only_gather = {r: why for r, why in failures.items() if r != 3}
    assert "gather over the world group [0, 1, 2, 3] (seen by ranks 0, 2)" in failure_text(
        1, failures[1], only_gather
    )


def test_failure_text_keeps_a_reason_that_names_its_own_check():
    own = "RuntimeError: ring over the cp group [0, 1] failed on rank 0: closed\nTraceback ..."
    assert failure_text(0, own, {0: own}) == own.splitlines()[0]
    died = "process exited with code 7 without reporting a result"
    assert failure_text(2, died, {2: died}) == died


# ---- finding 2: a peer that never reaches initialize is a rank timeout, not a mismatch ------


@pytest.mark.multiprocess
def test_a_peer_that_never_reaches_initialize_is_a_rank_timeout():
    said = spawn_local(rank_1_never_reaches_initialize, 2, backend=None, timeout_s=120)
    assert said[1] == "waited"
    assert said[0].startswith("RankTimeoutError: rank 0: rank 1 did not arrive at "), said[0]
    assert "initialize(TP1 U2" in said[0]
    assert "hung or died" in said[0] and "another strategy" in said[0]


# ---- finding 3: Ctrl-C reaches the ranks quietly ----------------------------------------------


@pytest.mark.multiprocess
def test_a_rank_sent_sigint_keeps_running():
    assert spawn_local(interrupt_myself, 2, backend=None, timeout_s=120) == [
        "rank 0 still running",
        "rank 1 still running",
    ]


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks")
def test_a_child_started_under_the_block_starts_with_sigint_blocked():
    """The window before a rank's entry point (interpreter start, spawn's imports): a child
    started inside _sigint_blocked inherits the block, so a Ctrl-C then waits for the entry
    point to drop it; the parent's own mask is restored afterwards."""
    import multiprocessing as mp

    from parastrat.runtime.launch import _sigint_blocked

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    with _sigint_blocked():
        child = ctx.Process(target=report_sigint_blocked, args=(there,))
        child.start()
    there.close()
    try:
        assert here.poll(60) and here.recv() is True
    finally:
        child.join(10)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.multiprocess
def test_ctrl_c_on_a_local_run_prints_no_rank_traceback(tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) once the ranks run:
    the parent says it was interrupted, and no rank prints a KeyboardInterrupt traceback."""
    parent = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from parastrat.runtime.launch import spawn_local
        from tests.test_runtime_audit import record_pid_then_sleep
        try:
            spawn_local(record_pid_then_sleep, 2, args=({str(tmp_path)!r},), backend=None,
                        timeout_s=300)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_files(tmp_path, 2)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "interrupted", err


def _wait_for_files(folder: Path, count: int) -> None:
    """Until ``count`` non-empty rank*.pid files exist in ``folder`` (at most 90 s)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        files = list(folder.glob("rank*.pid"))
        if len(files) == count and all(f.read_text() for f in files):
            return
        time.sleep(0.1)
    raise AssertionError(f"the ranks did not start: {sorted(folder.iterdir())}")


# ---- finding 4: the bounds of a local run are checked before anything starts ----------------


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "60", True])
def test_spawn_local_refuses_a_timeout_that_is_not_a_positive_number(bad):
    with pytest.raises(UsageError, match="timeout_s must be a finite number of seconds > 0"):
        spawn_local(interrupt_myself, 2, timeout_s=bad)


@pytest.mark.parametrize("field", ["timeout_s", "startup_s"])
def test_verify_local_refuses_a_zero_bound_before_spawning(field):
    with pytest.raises(UsageError, match=f"{field} must be a finite number of seconds > 0"):
        verify_local(Strategy(tp=2), 2, **{field: 0})
