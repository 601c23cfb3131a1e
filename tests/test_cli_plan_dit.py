"""``parastrat plan-dit``: formats and exit status."""

from __future__ import annotations

import json

import pytest

from parastrat.cli import main

BASE = [
    "plan-dit",
    "--model",
    "hunyuanvideo",
    "--devices",
    "8",
    "--accelerator",
    "h100",
    "--height",
    "720",
    "--width",
    "1280",
    "--frames",
    "129",
    "--steps",
    "50",
    "--no-guidance",
]


def test_json_is_one_document(capsys):
    assert main(BASE + ["--format", "json", "--top-k", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["candidates"]) == 2
    assert doc["best"]["strategy"]["ulysses"] == 8


def test_mindiesd_flags(capsys):
    assert main(BASE + ["--format", "mindiesd"]) == 0
    assert (
        capsys.readouterr().out.strip() == "--ulysses_size 8 --ring_size 1 --cfg_size 1 --tp_size 1"
    )


def test_table(capsys):
    assert main(BASE) == 0
    out = capsys.readouterr().out
    # GPUs: xDiT's flags by default (xfuser/config/args.py), MindIE-SD's when asked
    assert "Ulysses8" in out and "launch (xDiT): --ulysses_degree 8 --ring_degree 1" in out
    assert main([*BASE, "--framework", "mindiesd"]) == 0
    assert "launch (MindIE-SD): --ulysses_size 8" in capsys.readouterr().out
    assert main([*BASE, "--format", "launch"]) == 0
    assert capsys.readouterr().out.strip() == "--ulysses_degree 8 --ring_degree 1"
    assert main([*BASE, "--format", "mindiesd", "--framework", "xdit"]) == 2
    assert "--format launch for that framework's flags" in capsys.readouterr().err
    assert main([*BASE, "--format", "launch", "--framework", "any"]) == 2
    got = capsys.readouterr()
    assert not got.out and "pick --framework mindiesd, xdit or diffusers" in got.err


def test_user_errors_exit_2(capsys):
    bad_frames = [a if a != "129" else "128" for a in BASE]
    assert main(bad_frames) == 2
    assert "4k+1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # --steps takes whole numbers >= 1 (argparse)
        main([a if a != "50" else "0" for a in BASE])
    assert stop.value.code == 2
    assert main([a if a != "hunyuanvideo" else "nope" for a in BASE]) == 2
    assert "flux.1-dev" in capsys.readouterr().err


def test_calibration_prices_the_host(capsys, tmp_path):
    """A measured host (``kernels.host_op_s`` from ``bench --kernels``) reaches plan-dit: a
    slower host makes eager FLUX.1-dev on 4 H100 slower; a missing file is a usage error."""
    flux = ["plan-dit", "--model", "flux.1-dev", "--devices", "4", "--accelerator", "h100"]
    flux += ["--height", "1024", "--width", "1024", "--steps", "28", "--format", "json"]
    assert main(flux) == 0
    base = json.loads(capsys.readouterr().out)["best"]["latency_s"]
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"kernels": {"host_op_s": 3e-5}, "source": "test"}))
    assert main(flux + ["--calibration", str(cal)]) == 0
    slow = json.loads(capsys.readouterr().out)["best"]["latency_s"]
    assert slow > base
    assert main(flux + ["--calibration", str(tmp_path / "missing.json")]) == 2
    assert "Traceback" not in capsys.readouterr().err


FLUX_16 = ["plan-dit", "--model", "flux.1-dev", "--devices", "16", "--accelerator", "h100"]
FLUX_16 += ["--height", "1024", "--width", "1024", "--steps", "28"]


def test_replicas_show_their_rate_and_launch_per_replica(capsys):
    """With --data-parallel the table ranks by requests per second and shows it; the launch
    flags are each replica's, and the line says how many replicas run them."""
    assert main([*FLUX_16, "--data-parallel"]) == 0
    out = capsys.readouterr().out
    assert "req/s" in out
    launch = next(line for line in out.splitlines() if line.startswith("launch (xDiT):"))
    assert "replicas of" in launch and "--ulysses_degree" in launch
    assert main([*FLUX_16, "--data-parallel", "--format", "mindiesd"]) == 0
    got = capsys.readouterr()
    assert got.out.startswith("--ulysses_size") and "replicas of" in got.err


def test_json_names_cli_flags(capsys):
    assert main([*FLUX_16[:4], "4", *FLUX_16[5:], "--guidance", "--format", "json"]) == 0
    text = capsys.readouterr().out
    assert "--guidance" in text and "guidance=True" not in text and "guidance=None" not in text


def test_no_legal_split_names_each_rule_and_only_flags_not_given(capsys):
    many = [*FLUX_16[:4], "100000", *FLUX_16[5:], "--allow-cross-node", "--framework", "any"]
    assert main(many) == 2
    err = capsys.readouterr().err
    assert "sp-exceeds-tokens" in err and "heads-tp" in err and "--data-parallel" in err
    assert err.count("--allow-cross-node") == 0
