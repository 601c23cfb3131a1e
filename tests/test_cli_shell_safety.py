"""What parastrat prints for a shell is quoted: pasting it runs nothing from a config or a flag;
names printed in tables carry no terminal escape sequences."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from parastrat.cli import main

HF = Path(__file__).parent / "data" / "hf" / "llama3-8b.json"


def _config(tmp_path: Path, name: str) -> Path:
    cfg = json.loads(HF.read_text())
    cfg["_name_or_path"] = name
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _paste(line: str, cwd: Path) -> list[str]:
    """Run a printed torchrun/overrides line in bash with torchrun as a function that prints
    its arguments one per line (what the real torchrun would receive)."""
    script = "torchrun() { printf '%s\\n' \"$@\"; }\nMASTER_ADDR=node0\n" + line
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    "extra",
    [
        [],  # no recipe: a config's folder name is no recipe name, so none is invented
        ["--recipe", "r$(touch PWNED_BY_FLAG)`touch PWNED2`;touch PWNED3"],  # no Python name
    ],
)
def test_a_hostile_recipe_name_is_refused_before_anything_is_printed(tmp_path, capsys, extra):
    cfg = _config(tmp_path, "org/llama$(touch PWNED_BY_CONFIG)")
    argv = ["plan", "--hf-config", str(cfg), "--gpus", "16", "--format", "torchrun", *extra]
    assert main(argv) == 2
    got = capsys.readouterr()
    assert not got.out and ("is not a Python name" in got.err or "pass --recipe NAME" in got.err)
    assert not list(tmp_path.glob("PWNED*"))


def test_torchrun_line_runs_nothing_when_pasted(tmp_path, capsys):
    cfg = _config(tmp_path, "org/llama$(touch PWNED_BY_CONFIG)")
    argv = ["plan", "--hf-config", str(cfg), "--gpus", "16", "--format", "torchrun"]
    assert main([*argv, "--recipe", "llama3_8b_pretrain_config"]) == 0
    line = capsys.readouterr().out
    args = _paste(line, tmp_path)
    assert not list(tmp_path.glob("PWNED*"))
    assert args[args.index("--recipe") + 1] == "llama3_8b_pretrain_config"
    # the one expansion parastrat means: the rendezvous host
    assert "--rdzv-endpoint=node0:29500" in args


def test_overrides_line_is_shell_words(tmp_path, capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--format", "overrides"]) == 0
    line = capsys.readouterr().out.strip()
    args = _paste("torchrun " + line, tmp_path)
    assert args[0].startswith("model.tensor_model_parallel_size=")
    assert all("=" in a for a in args) and "train.global_batch_size=32" in args


def test_terminal_escapes_in_a_config_name_are_not_printed(tmp_path, capsys):
    cfg = _config(tmp_path, "org/\x1b[2J\x1b]0;owned\x07evil\x9b31m-model")
    assert main(["plan", "--hf-config", str(cfg), "--gpus", "8", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "evil-model" in out
