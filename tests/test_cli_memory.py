"""``parastrat memory`` end to end through the real CLI entry point."""

import json
from pathlib import Path

import pytest

from parastrat.cli import main

DATA = Path(__file__).parent / "data" / "hf"
ARGS = [
    "memory",
    "--model",
    "llama3-70b",
    "--gpus",
    "64",
    "--tp",
    "4",
    "--pp",
    "8",
    "--vpp",
    "5",
    "--sp",
    "--seq-len",
    "8192",
    "--global-batch-size",
    "256",
]


def test_table(capsys):
    assert main(ARGS + ["--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "TP4 PP8(VP5)" in out and "fits" in out and "h100" in out


def test_json_is_one_document(capsys):
    # FP32 gradients (Bridge's bf16_mixed) push the bf16 run past an A100's 80 GiB
    assert main(ARGS + ["--format", "json", "--accelerator", "a100", "--grad-reduce-in-fp32"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["accelerator"] == "a100" and doc["fits"] is False
    assert len(doc["stages"]) == 8 and doc["num_microbatches"] == 128
    assert doc["peak_bytes"] == max(s["total"] for s in doc["stages"])


def test_hf_config_and_plot(tmp_path, capsys):
    png = tmp_path / "mem.png"
    assert (
        main(
            [
                "memory",
                "--hf-config",
                str(DATA / "mixtral-8x7b.json"),
                "--gpus",
                "8",
                "--ep",
                "8",
                "--seq-len",
                "4096",
                "--plot",
                str(png),
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "mixtral-8x7b" and png.stat().st_size > 1000
    # a picture path in a folder that does not exist: a usage error, no traceback
    missing = str(tmp_path / "no-such-folder" / "mem.png")
    argv = ["memory", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]
    assert main([*argv, "--plot", missing]) == 2
    assert "cannot write the plot" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, text",
    [
        (["memory", "--model", "nope", "--gpus", "8", "--seq-len", "1024"], "known"),
        (
            ["memory", "--model", "llama3-8b", "--gpus", "6", "--tp", "4", "--seq-len", "1024"],
            "world",
        ),
        (
            [
                "memory",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--seq-len",
                "1024",
                "--precision",
                "int4",
            ],
            "precision",
        ),
        (
            [
                "memory",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--seq-len",
                "1024",
                "--micro-batch-size",
                "3",
                "--global-batch-size",
                "16",
            ],
            "batch",
        ),
    ],
)
def test_user_errors_exit_2_without_traceback(argv, text, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
