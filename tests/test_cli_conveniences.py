"""Everyday conveniences and first-run errors: ``parastrat models``, ``--devices-per-node``,
the torchrun example's pins, and Strategy.initialize() outside a launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parastrat.cli import main
from parastrat.spec import dit, models
from parastrat.spec.dit import DiTSpec

ROOT = Path(__file__).resolve().parent.parent


def test_models_lists_every_preset_with_sizes(capsys):
    assert main(["models", "--format", "json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {n for n, m in listed.items() if m["kind"] == "llm"} == set(models.names())
    assert {n for n, m in listed.items() if m["kind"] == "dit"} == set(dit.names())
    dsv3 = listed["deepseek-v3"]
    assert dsv3["num_experts"] == 256 and 660e9 < dsv3["params"] < 690e9
    flux = listed["flux.1-dev"]
    assert flux["diffusers_class"] == "FluxTransformer2DModel" and flux["guidance_distilled"]
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "llama3-70b" in out and "--hf-config" in out
    assert "wan2.1-t2v-14b" in out and "plan-dit --model NAME" in out


@pytest.mark.parametrize("name", ["gpt-oss-120b", "hunyuanvideo"])
def test_models_name_prints_every_field_of_one_preset(capsys, name):
    spec = models.get(name)
    assert main(["models", name.upper(), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == spec.name and shown["hidden_size"] == spec.hidden_size
    assert shown["kind"] == ("dit" if isinstance(spec, DiTSpec) else "llm")
    if isinstance(spec, DiTSpec):
        assert shown["guidance_distilled"] is True and shown["num_layers"] == spec.num_layers
    else:
        assert shown["activation_clamp"] == spec.activation_clamp
        assert shown["num_active_params"] == spec.num_active_params
    assert main(["models", name]) == 0
    out = capsys.readouterr().out
    assert f"{name} (" in out and "hidden_size" in out


def test_models_name_with_a_typo_says_what_was_meant(capsys):
    assert main(["models", "deepsek-v3"]) == 2
    captured = capsys.readouterr()
    assert "did you mean deepseek-v3" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_devices_per_node_reaches_the_launch_line(capsys):
    argv = ["plan", "--model", "llama3-8b", "--gpus", "16", "--format", "torchrun"]
    assert main([*argv, "--devices-per-node", "4"]) == 0
    assert "--nproc_per_node=4 --nnodes=4" in capsys.readouterr().out


def test_example_with_an_impossible_pin_says_why(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torchrun_training.py"), "--tp", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert "heads-tp" in done.stderr and "torchrun" in done.stderr
    assert "Traceback" not in done.stderr


def test_initialize_outside_a_launcher_says_how_to_launch(monkeypatch):
    pytest.importorskip("torch")
    import parastrat as ps
    from parastrat.errors import UsageError

    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(UsageError, match="torchrun") as err:
        ps.Strategy(tp=2).initialize()
    assert "parastrat verify --world" in str(err.value)


def test_one_recompute_default_across_plan_explain_and_memory(capsys):
    """plan prices a strategy whose activations fit without recompute; explain and memory,
    given that strategy, price the same mode by default (none, Megatron Core's default)."""
    base = ["--model", "llama3-8b", "--gpus", "8"]
    assert main(["plan", *base, "--tp", "2", "--top-k", "1", "--format", "json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["recompute"] == "none"
    flags = ["--tp", "2", "--sp", "--micro-batch-size", str(best["micro_batch_size"])]
    assert main(["explain", *base, *flags, "--format", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["memory"]["recompute"] == "none"
    assert main(["memory", *base, "--seq-len", "4096", *flags, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["recompute"] == "none"


def test_plans_fit_what_the_device_exposes_and_headroom_is_kept(capsys):
    usable = 81_559 * 2**20  # nvidia-smi's total on an H100 80GB
    base = ["plan", "--model", "llama3-70b", "--gpus", "64", "--top-k", "5", "--format", "json"]
    assert main(base) == 0
    peaks = [c["memory"]["peak_bytes"] for c in json.loads(capsys.readouterr().out)["candidates"]]
    assert max(peaks) <= usable
    assert main([*base, "--headroom", "0.3"]) == 0
    peaks = [c["memory"]["peak_bytes"] for c in json.loads(capsys.readouterr().out)["candidates"]]
    assert max(peaks) <= 0.7 * usable
    with pytest.raises(SystemExit, match="2"):
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--headroom", "nan"])


def test_memory_headroom_turns_a_tight_fit_into_no(capsys):
    argv = [
        "memory",
        "--model",
        "llama3-70b",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--seq-len",
        "4096",
        "--format",
        "json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fits"] and doc["device_memory_bytes"] == 81_559 * 2**20
    share = doc["peak_bytes"] / doc["device_memory_bytes"]
    assert main([*argv, "--headroom", f"{1 - share + 0.01:.3f}"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is False


#: Every subcommand that takes a device count, with the rest of a valid command line.
DEVICE_COMMANDS = {
    "plan": ["plan", "--model", "llama3-8b", "--accelerator", "h100", "--format", "json"],
    "check": ["check", "--model", "llama3-8b", "--tp", "2"],
    "explain": ["explain", "--model", "llama3-8b", "--tp", "2", "--format", "json"],
    "memory": ["memory", "--model", "llama3-8b", "--tp", "2", "--format", "json"],
    "layout": ["layout", "--tp", "2", "--format", "json"],
    "plan-dit": [
        "plan-dit", "--model", "flux.1-dev", "--accelerator", "h100", "--height", "1024",
        "--width", "1024", "--steps", "28", "--format", "json",
    ],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(DEVICE_COMMANDS))
def test_every_command_takes_the_device_count_as_devices_or_gpus(capsys, command):
    """One spelling works everywhere: a user moving from ``plan --devices 8`` to ``memory``
    or ``layout`` need not learn that those said ``--gpus`` only (and plan-dit ``--devices``
    only); both spellings give the same answer."""
    outs = []
    for flag in ("--devices", "--gpus"):
        code = main([*DEVICE_COMMANDS[command], flag, "8"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        outs.append(json.loads(captured.out) if command != "check" else captured.out)
    assert outs[0] == outs[1]
