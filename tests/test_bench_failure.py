"""A rank that dies in the middle of a sweep is an error within the timeout, never a hang."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("torch")

from parastrat.runtime.launch import RankFailure, spawn_local

pytestmark = pytest.mark.multiprocess

TIMEOUT_S = 60.0


def _die_after_first_row(row, done: int, total: int) -> None:
    if done == 1 and int(os.environ["RANK"]) == 2:
        os._exit(7)  # no exception, no goodbye: like an OOM kill or a segfault


def _sweep_with_a_dying_rank(rank: int, world: int) -> int:
    from parastrat.bench import run

    rows = run(
        ops=["all_reduce", "all_to_all"],
        sizes="4KB,64KB",
        iters=3,
        warmup=1,
        progress=_die_after_first_row,
    )
    return len(rows)


def test_a_rank_dying_mid_sweep_is_reported_quickly():
    start = time.monotonic()
    with pytest.raises(RankFailure) as info:
        spawn_local(_sweep_with_a_dying_rank, 4, timeout_s=TIMEOUT_S)
    elapsed = time.monotonic() - start
    assert info.value.rank == 2
    assert "exited with code 7" in info.value.reason
    assert elapsed < TIMEOUT_S  # the peers blocked in gloo did not keep us waiting


def test_cli_reports_a_failed_local_run_with_exit_status_1(capsys):
    from parastrat.cli import main

    # a timeout far below the ranks' start-up time (importing torch) forces the failure path
    status = main(
        [
            "bench",
            "--world",
            "2",
            "--ops",
            "all_reduce",
            "--sizes",
            "4KB",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--timeout",
            "0.5",
        ]
    )
    assert status == 1
    assert "benchmark failed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"iters": 0}, "iters >= 1"),
        ({"warmup": -1}, "warmup >= 0"),
        ({"dtype": "int8"}, "unknown dtype"),
        ({"ops": "allreduce"}, "unknown op"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_run_local_refuses_bad_arguments_before_any_rank_starts(kwargs, needle, monkeypatch):
    """What every spawned rank would refuse (one traceback each, as a RankFailure) is a
    UsageError in the caller, and no rank is started."""
    import parastrat.runtime.launch as launch
    from parastrat.bench import run_local
    from parastrat.errors import UsageError

    monkeypatch.setattr(launch, "spawn_local", lambda *a, **kw: pytest.fail("a rank started"))
    with pytest.raises(UsageError, match=needle):
        run_local(world=2, **kwargs)
