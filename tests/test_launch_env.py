"""The launch environment and launch arguments are checked before anything spawns: a missing or
contradicting variable names both; a rendezvous that fails is a usage error without C++
frames; a stopped rank is named as the rank that did not answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from parastrat.errors import UsageError
from parastrat.runtime.backend import detect_env, torch_message


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"WORLD_SIZE": "4"}, "WORLD_SIZE=4 is set but RANK is not"),
        ({"RANK": "1"}, "RANK=1 is set but WORLD_SIZE is not"),
        ({"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK=3 contradicts WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
        ({"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK='-1' is not a whole"),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "99999"}, "MASTER_PORT=99999"),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "0"}, "MASTER_PORT=0"),
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "h",
                "LOCAL_RANK": "2",
                "LOCAL_WORLD_SIZE": "2",
            },
            "LOCAL_RANK=2 contradicts LOCAL_WORLD_SIZE=2",
        ),
        ({"SLURM_NTASKS": "4"}, "SLURM_NTASKS=4 is set but SLURM_PROCID is not"),
        ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, "SLURM_PROCID=2 contradicts SLURM_NTASKS=2"),
    ],
)
def test_contradicting_launch_variables_are_named(env, needle):
    with pytest.raises(UsageError) as err:
        detect_env(env)
    assert needle in str(err.value)


def test_slurm_and_torchrun_worlds_are_read():
    slurm = detect_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NODELIST": "n[07-08]"})
    assert (slurm.source, slurm.rank, slurm.world_size, slurm.master_addr) == ("slurm", 1, 2, "n07")
    tr = detect_env({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "29400"})
    assert (tr.source, tr.rank, tr.world_size, tr.master_port) == ("torchrun", 1, 2, 29400)
    assert detect_env({}).source == "single"


def test_torch_messages_lose_their_cpp_frames():
    exc = RuntimeError(
        "Timed out after 4 seconds waiting for clients. 1/2 clients joined.\n"
        "Exception raised from waitForWorkers at /pytorch/torch/csrc/TCPStore.cpp:123 "
        "(most recent call first):\nframe #0: c10::Error::Error(...) + 0x9a"
    )
    assert (
        torch_message(exc) == "Timed out after 4 seconds waiting for clients. 1/2 clients joined."
    )


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables from the environment the tests run in."""
    for key in list(os.environ):
        if key.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "SLURM", "MASTER_")):
            monkeypatch.delenv(key)
    return monkeypatch


def exit_code(argv: list[str]) -> int:
    """The CLI's exit status, whether argparse exits or ``main`` returns."""
    from parastrat.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _cli(argv, env=None, timeout=120):
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "SLURM"))
    }
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "parastrat", *argv],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["verify", "--world", "1"], "no process group to check"),
        (["verify", "--world", "2", "--timeout", "nan"], "finite number of seconds"),
        (["verify", "--world", "2", "--timeout", "inf"], "finite number of seconds"),
        (["bench", "--timeout", "0"], "finite number of seconds"),
        (["bench", "--timeout", "-1"], "finite number of seconds"),
        (["bench", "--dtype", "int3"], "unknown --dtype 'int3'"),
        (["bench", "--warmup", "-1"], "digits 0-9"),
    ],
)
def test_bad_launch_arguments_exit_2_before_spawning(argv, needle, capsys, clean_env):
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"WORLD_SIZE": "4"}, "WORLD_SIZE=4 is set but RANK is not"),
        ({"SLURM_NTASKS": "4"}, "SLURM_NTASKS=4 is set but SLURM_PROCID is not"),
        ({"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, "RANK=3 contradicts"),
    ],
)
@pytest.mark.parametrize("cmd", [["verify", "--tp", "2"], ["bench"]])
def test_bad_launch_environment_exits_2(cmd, env, needle, capsys, clean_env):
    for key, value in env.items():
        clean_env.setenv(key, value)
    assert exit_code(cmd) == 2
    assert needle in capsys.readouterr().err


def test_a_missing_peer_is_a_usage_error_after_the_timeout():
    port = _free_port()
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    done = _cli(["bench", "--timeout", "2"], env)
    assert done.returncode == 2, done.stderr
    assert "did not join" in done.stderr and "frame #" not in done.stderr


def test_slurm_is_not_ignored():
    port = _free_port()
    env = {
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    done = _cli(["bench", "--timeout", "2"], env)
    assert done.returncode == 2, done.stderr
    assert "rank 1" in done.stderr and "2-rank world" in done.stderr


def test_a_port_in_use_is_named():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        done = _cli(["bench", "--timeout", "2"], env)
    assert done.returncode == 2, done.stderr
    assert f"MASTER_PORT {port} is already in use" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stopped_rank_is_named():
    from parastrat import Strategy
    from parastrat.runtime.verify import verify_local
    from tests._workers import stop_rank_one

    report = verify_local(Strategy(tp=2), 2, timeout_s=3, on_step=stop_rank_one)
    assert not report.ok
    assert report.failed_rank == 1, report.summary()
    assert "stopped" in report.error
    assert "frame #" not in report.summary()


def test_progress_goes_to_stderr_as_lines_when_piped():
    done = _cli(
        [
            "bench",
            "--world",
            "2",
            "--ops",
            "all_reduce",
            "--sizes",
            "4KB,8KB",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--format",
            "json",
        ]
    )
    assert done.returncode == 0, done.stderr
    assert "benchmarking: 1/2 world/all_reduce 4KB" in done.stderr
    assert "benchmarking: 2/2 world/all_reduce 8KB" in done.stderr
