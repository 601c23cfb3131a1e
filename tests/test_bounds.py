"""Absurd inputs are refused at the edge with the documented bound, not after minutes of work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parastrat as ps
from parastrat.bench.rows import MAX_SIZES, parse_sizes
from parastrat.cli import main
from parastrat.errors import SpecError, UsageError
from parastrat.spec.cluster import MAX_DEVICES
from parastrat.spec.model import MODEL_BOUNDS

HF = Path(__file__).parent / "data" / "hf" / "llama3-8b.json"


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["plan", "--model", "llama3-8b", "--gpus", "1000000000000000000"], "<= 1,048,576"),
        (["explain", "--model", "llama3-8b", "--gpus", str(MAX_DEVICES + 1)], "bound on devices"),
        (["layout", "--gpus", "1000000"], "layout lists every rank"),
        (["check", "--gpus", "1_000"], "digits 0-9"),
        (["plan", "--model", "llama3-8b", "--gpus", "٨"], "digits 0-9"),
        (["plan", "--model", "llama3-8b", "--gpus", "+8"], "digits 0-9"),
        (["plan", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "2147483647"], "sequence"),
        (["bench", "--world", "100000"], "local ranks"),
        (["bench", "--sizes", "1:1GB:x1.00001"], "at most 64"),
    ],
)
def test_cli_refuses_absurd_numbers(argv, needle, capsys):
    assert exit_code(argv) == 2
    assert needle in capsys.readouterr().err


def exit_code(argv: list[str]) -> int:
    """The CLI's exit status, whether argparse exits or ``main`` returns."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_bench_sizes_bound_is_a_usage_error():
    assert len(parse_sizes("1:16GB:x2")) == 35  # nccl-tests' full sweep fits
    with pytest.raises(UsageError, match=f"at most {MAX_SIZES}"):
        parse_sizes("1:1GB:x1.00001")
    with pytest.raises(UsageError, match="more than any device holds"):
        parse_sizes("4KB:4096GB")


@pytest.mark.parametrize("layers", [10**6, 10**9])
def test_config_with_absurd_layers_is_refused_by_every_command(tmp_path, capsys, layers):
    cfg = json.loads(HF.read_text())
    cfg["num_hidden_layers"] = layers
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    for cmd in (
        ["plan", "--gpus", "8"],
        ["explain", "--gpus", "8", "--tp", "8"],
        ["memory", "--gpus", "8", "--seq-len", "4096"],
    ):
        assert main([*cmd, "--hf-config", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{layers:,}" in err and "4,096" in err


def test_bounds_sit_above_every_preset():
    for name in ps.models.names():
        m = ps.models.get(name)
        for field, top in MODEL_BOUNDS.items():
            value = getattr(m, field)
            assert value is None or value <= top // 4, (name, field, value)
    with pytest.raises(SpecError, match="bound on devices"):
        ps.Cluster("h100", MAX_DEVICES + 1)
    assert ps.Cluster("h100", MAX_DEVICES).num_devices == MAX_DEVICES
