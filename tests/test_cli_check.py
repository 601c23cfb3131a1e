"""`parastrat check` / `parastrat layout`: exit codes, messages, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parastrat.cli import main


def test_valid_strategy_exit_0(capsys):
    assert main(["check", "--gpus", "16", "--tp", "2", "--ep", "8", "--sp"]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "expert data parallel" in out


def test_broken_rule_exit_2_with_fix(capsys):
    assert main(["check", "--gpus", "64", "--tp", "3", "--pp", "5"]) == 2
    out = capsys.readouterr().out
    assert "world-dense" in out and "use 60 or 75 devices" in out


def test_json_is_one_document(capsys):
    assert main(["check", "--gpus", "8", "--tp", "2", "--pp", "2", "--sp", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] and doc["strategy"]["dp"] == 2


def test_bad_flag_values_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--gpus", "8", "--tp", "zero"])
    assert e.value.code == 2


def test_bad_strategy_at_construction_exit_2(capsys):
    assert main(["check", "--gpus", "8", "--sp"]) == 2
    assert "sp-needs-tp" in capsys.readouterr().err


def test_layout_command(capsys):
    assert (
        main(["layout", "--gpus", "8", "--tp", "2", "--pp", "2", "--sp", "--format", "json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["groups"]["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_ulysses_beside_training_degrees_reads_as_the_strategy_text(capsys):
    """``--cp 4 --ulysses 4`` (and EP beside it) is Megatron's Ulysses CP, the grid the text
    "CP4(U)" names, not an xDiT inference grid with another rank order (or an inference-ep
    refusal), with or without a model."""
    docs = []
    for how in (["--pp", "2", "--cp", "4", "--ulysses", "4"], ["--strategy", "PP2 CP4(U)"]):
        assert main(["layout", "--gpus", "16", *how, "--format", "json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["groups"] == docs[1]["groups"]
    assert docs[0]["strategy"]["order"] == docs[1]["strategy"]["order"]
    ep = ["--gpus", "64", "--cp", "4", "--ulysses", "4", "--ep", "8"]
    assert main(["check", *ep]) == 0
    assert main(["layout", *ep, "--format", "json"]) == 0


def test_python_m_entry_point_no_traceback():
    r = subprocess.run(
        [sys.executable, "-m", "parastrat", "check", "--gpus", "6", "--tp", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout


def test_cp_flag_alone_means_ring(capsys):
    assert main(["check", "--gpus", "8", "--tp", "2", "--cp", "4", "--sp", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["strategy"]["cp"], doc["strategy"]["ring"], doc["strategy"]["ulysses"]) == (4, 4, 1)


def test_layout_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "grid.png"
    assert (
        main(["layout", "--gpus", "16", "--tp", "4", "--pp", "2", "--sp", "--plot", str(out)]) == 0
    )
    assert out.stat().st_size > 1000


def test_layout_grid_places_every_rank_once():
    from parastrat import Strategy
    from parastrat.viz import layout_grid

    rows, cols, grid = layout_grid(Strategy(tp=2, pp=2, cp=2, sp=True), 16)
    assert len(rows) == 2 * 2 and len(cols) == 2 * 2  # pp*dp rows, cp*tp columns
    assert sorted(r for row in grid for r in row) == list(range(16))
    # TP is the fastest axis: each row's first two cells are one TP group.
    assert grid[0][:2] == [0, 1] and cols[:2] == ["cp0 tp0", "cp0 tp1"]


def test_messages_keep_their_brackets(capsys):
    # rich would read "[megatron]" as markup and drop it from 'pip install "parastrat[megatron]"'.
    from parastrat.cli._common import report_user_error
    from parastrat.errors import MissingExtraError

    assert report_user_error(MissingExtraError("torch", "megatron")) == 2
    assert 'pip install "parastrat[megatron]"' in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [["--ulysses", "2", "--cfg", "2"], ["--order", "tp-sp-pp-cfg-dp"], ["--compare", "cfg=2"]],
)
def test_training_commands_refuse_an_inference_grid_with_the_rule(capsys, flags):
    """explain / memory price a training step: an xDiT inference order (or cfg 2) is refused
    with the rule and its fix, not an internal error; --ulysses alone is Megatron's a2a CP."""
    argv = ["explain", "--model", "llama3-8b", "--gpus", "8", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "megatron-inference-strategy" in err and "internal error" not in err
    if flags[0] != "--compare":
        memory = ["memory", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", *flags]
        assert main(memory) == 2
        assert "megatron-inference-strategy" in capsys.readouterr().err
    assert main(["explain", "--model", "llama3-8b", "--gpus", "8", "--ulysses", "2"]) == 0


def test_split_hints_say_which_flag_to_drop_and_keep_the_layout_mend(capsys):
    """A reset in a split hint reads as a flag to leave out (not ``--pipeline-layout None``,
    which the parser refuses), and a layout one layer off keeps its own hint first."""
    base = ["check", "--model", "llama3-8b", "--gpus", "8"]
    assert main([*base, "--pp", "2", "--pipeline-layout", "Et*17|t*16L"]) == 2
    err = _said(capsys)
    assert "give the stages 32 t in total (remove 1)" in err and "drop --pipeline-layout" in err
    assert "None" not in err
    assert main([*base, "--pp", "4", "--first-stage-layers", "7"]) == 2
    assert "drop --first-stage-layers" in _said(capsys)
    assert main([*base, "--pp", "4", "--account-for-embedding"]) == 2
    err = _said(capsys)
    assert "drop --account-for-embedding" in err and "=False" not in err
    # the fix named works: pp 2 without the flag
    assert main([*base, "--pp", "2"]) == 0


def _said(capsys) -> str:
    got = capsys.readouterr()
    return got.out + got.err


def test_a_large_grid_plot_labels_a_readable_number_of_rows():
    """4,096 ranks at TP8 PP4 are 512 rows: every 8th is labelled (at most 64 per axis), which
    keeps the picture readable and its layout fast (16,384 ranks took over 2 minutes)."""
    from parastrat.viz import MAX_TICKS, _ticks

    assert list(_ticks(8)) == list(range(8))
    assert len(_ticks(512)) <= MAX_TICKS and _ticks(512).step == 8
    assert len(_ticks(65536)) <= MAX_TICKS
