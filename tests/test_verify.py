"""parastrat verify: numeric checks of every group on spawned gloo ranks, and clear failures."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("torch")

from parastrat import Strategy, StrategyError
from parastrat.cli import main
from parastrat.runtime.verify import verify_local


@pytest.mark.multiprocess
def test_cli_verify_passes_on_8_local_ranks(capsys):
    pytest.importorskip("megatron.core")
    rc = main(
        [
            "verify",
            "--world",
            "8",
            "--tp",
            "2",
            "--pp",
            "2",
            "--sp",
            "--format",
            "json",
            "--timeout",
            "60",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["ok"] and doc["error"] is None
    assert doc["world_size"] == 8 and doc["degrees"]["dp"] == 2  # 8 / (tp 2 * pp 2)
    by_rank: dict[int, set] = {}
    for c in doc["checks"]:
        assert c["ok"], c
        by_rank.setdefault(c["rank"], set()).add((c["name"], c["kind"]))
    assert sorted(by_rank) == list(range(8))
    # every rank multiplied over TP, passed the PP chain and averaged over DP
    for checks in by_rank.values():
        assert {("tp-matmul", "tp"), ("pp-chain", "pp"), ("all-reduce", "dp")} <= checks
    # rank 5 = tp 1 + 2 * dp 0 + 4 * pp 1 in Megatron's tp-cp-ep-dp-pp order
    assert doc["coords"]["5"]["tp"] == 1 and doc["coords"]["5"]["dp"] == 0
    assert doc["coords"]["5"]["pp"] == 1


@pytest.mark.multiprocess
def test_cli_verify_inference_prints_the_rank_table(capsys):
    rc = main(["verify", "--world", "4", "--ulysses", "2", "--ring", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "verify passed" in out and "ulysses" in out and "ring" in out
    # one table row per rank, each with all its checks passing:
    # ulysses all-to-all, cp ring, ring-group ring -> 3 (the edp group {0..3} is the cp
    # group again, already exercised by the ring pass, so it is not summed twice)
    rows = [line for line in out.splitlines() if "3/3" in line]
    assert len(rows) == 4


def _kill_rank_2_in_ring(step: str, rank: int) -> None:
    if rank == 2 and step == "ring":
        os._exit(7)


@pytest.mark.multiprocess
def test_a_rank_killed_mid_run_fails_clearly_without_hanging():
    t0 = time.monotonic()
    report = verify_local(
        Strategy(ulysses=2, ring=2), 4, timeout_s=10, on_step=_kill_rank_2_in_ring
    )
    elapsed = time.monotonic() - t0
    assert not report.ok and report.failed_rank == 2
    assert "exited with code 7" in report.error
    assert "rank 2" in report.summary()
    assert elapsed < 180 + 4 * 10  # verify_local's own bound; in practice a few seconds


def test_wrong_world_is_exit_2_before_spawning(capsys):
    t0 = time.monotonic()
    assert main(["verify", "--world", "6", "--tp", "4"]) == 2
    assert "world" in capsys.readouterr().err
    assert time.monotonic() - t0 < 5  # nothing was spawned
    with pytest.raises(StrategyError):
        verify_local(Strategy(tp=4), 6)


def test_no_world_outside_torchrun_is_a_usage_error(monkeypatch, capsys):
    for key in ("WORLD_SIZE", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    assert main(["verify", "--tp", "2"]) == 2
    assert "--world" in capsys.readouterr().err
