"""The command line under hostile input (ninth audit): no traceback, one JSON document, and
the documented exit status, whatever the user types or the environment holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parastrat.cli import main
from parastrat.runtime.backend import detect_env

PLAN_JSON = ("plan", "--model", "llama3-8b", "--gpus", "8", "--format", "json")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(
    *argv: str, env: dict[str, str] | None = None, pipe: str = ""
) -> subprocess.CompletedProcess:
    """``python -m parastrat argv`` in a child (optionally piped into ``pipe``)."""
    environ = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), **(env or {})}
    cmd = [sys.executable, "-m", "parastrat", *argv]
    if pipe:
        line = " ".join(map(repr, cmd)) + f" | {pipe}; exit ${{PIPESTATUS[0]}}"
        return subprocess.run(["bash", "-c", line], env=environ, capture_output=True, text=True)
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("tokens", ["1e400", "1e300T"])
def test_a_token_count_beyond_a_float_is_a_usage_error(tokens, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*PLAN_JSON, "--train-tokens", tokens])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert "more tokens than a float holds" in json.loads(out)["error"]["message"]
    assert "Traceback" not in err


def test_a_non_ascii_digit_is_no_token_count(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--train-tokens", "\u0668"])
    assert "cannot read" in capsys.readouterr().err


def test_launch_variables_without_a_port_rendezvous_on_the_default_one():
    env = detect_env({"RANK": "0", "WORLD_SIZE": "1"})
    assert env.init_method.startswith("tcp://127.0.0.1:")  # env:// would need MASTER_PORT
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    assert detect_env(torchrun).init_method == "env://"  # torchrun's agent store


def test_a_one_rank_launch_without_master_port_runs():
    pytest.importorskip("torch.distributed")
    done = _run(
        "bench", "--sizes", "1KB", "--iters", "1", "--format", "json",
        env={"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "", "MASTER_PORT": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["world"] == 1


def test_a_table_piped_into_head_exits_as_its_json_does():
    for argv in (("layout", "--gpus", "4096", "--tp", "8"), ("models",)):
        done = _run(*argv, pipe="head -1")
        assert done.returncode == 0 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["bench", "--world", "2", "--sizes", ""], "--sizes was given an empty value"),
        (["bench", "--world", "2", "--grid", "--precisions", "fp8"], "act only with --kernels"),
        (["bench", "--world", "2", "--gemm-size", "7"], "act only with --kernels"),
        (["layout", "--gpus", "8", "--kinds", ",,,"], "names no group kind"),
        (["layout", "--gpus", "8", "--plot", "/no/such/folder/x.png"], "mkdir -p"),
        (
            ["memory", "--model", "llama3-8b", "--gpus", "8", "--plot", "/no/such/folder/x.png"],
            "mkdir -p",
        ),
    ],
)
def test_ignored_or_empty_flags_are_refused_before_any_work(argv, said, capsys):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_layout_lists_a_repeated_kind_once(capsys):
    assert main(["layout", "--gpus", "8", "--tp", "2", "--kinds", "tp,tp"]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("tp") for line in out.splitlines()) == 1


def test_an_ascii_only_terminal_gets_replacements_not_an_internal_error():
    done = _run("accelerators", "h100", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "internal error" not in done.stderr
