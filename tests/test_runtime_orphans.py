"""Ranks die with their parent: SIGTERM, SIGKILL or SIGHUP to the process that spawned them
(``bench``/``verify`` through ``spawn_local``) leaves no rank running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (dead, not yet reaped by init) counts as gone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
    except OSError:
        return True
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_ranks_die_with_their_parent(tmp_path, sig):
    world = 2
    parent = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from parastrat.runtime.launch import spawn_local
        from tests._workers import sleep_and_record_pid
        spawn_local(sleep_and_record_pid, {world}, args=({str(tmp_path)!r},),
                    backend=None, timeout_s=300)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        files = []
        while time.monotonic() < deadline:
            files = sorted(tmp_path.glob("rank*.pid"))
            if len(files) == world and all(f.read_text() for f in files):
                break
            time.sleep(0.1)
        assert len(files) == world, "the ranks did not start"
        pids = [int(f.read_text()) for f in files]
        assert all(_alive(p) for p in pids)
        proc.send_signal(sig)
        proc.wait(timeout=10)
        gone_by = time.monotonic() + 5
        while time.monotonic() < gone_by and any(_alive(p) for p in pids):
            time.sleep(0.1)
        survivors = [p for p in pids if _alive(p)]
        assert not survivors, f"ranks {survivors} outlived their parent ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()
