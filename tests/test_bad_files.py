"""Every file reader turns a bad file into a usage error (exit 2) naming the file and the
problem: undecodable bytes, UTF-16, binary, deep nesting, non-finite or mistyped numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parastrat.cli import main

HF = Path(__file__).parent / "data" / "hf" / "llama3-8b.json"
GOOD_CAL = {"ops": {"all_reduce": {"intra": {"alpha_s": 5e-6, "busbw_Bps": 3.6e11}}}}
ROW = {
    "op": "ring",
    "bytes": 1024,
    "world": 2,
    "time_s": 1e-5,
    "time_min_s": 1e-5,
    "time_max_s": 1e-5,
    "algbw_gbps": 0.1,
    "busbw_gbps": 0.1,
    "iters": 1,
    "backend": "gloo",
    "dtype": "float32",
}


def _commands(path: Path) -> dict[str, list[str]]:
    """One command line per file reader, reading ``path``."""
    return {
        "hf": ["plan", "--hf-config", str(path), "--gpus", "8"],
        "calibration": ["plan", "--model", "llama3-8b", "--gpus", "8", "--calibration", str(path)],
        "rows": ["bench", "--load", str(path)],
    }


BAD_BYTES = {
    "latin-1": '{"name": "caf\xe9"}'.encode("latin-1"),
    "utf-16": json.dumps({"a": 1}).encode("utf-16"),
    "binary": bytes(range(256)) * 4,
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "deep-objects": b'{"a":' * 200 + b"1" + b"}" * 200,
    "nan": b'{"x": NaN}',
    "huge-float": b'{"x": 1e400}',
    "huge-int": b'{"x": ' + b"9" * 5000 + b"}",
    "empty": b"",
}


@pytest.mark.parametrize("reader", ["hf", "calibration", "rows"])
@pytest.mark.parametrize("kind", sorted(BAD_BYTES))
def test_undecodable_and_deep_files_are_usage_errors(tmp_path, capsys, reader, kind):
    path = tmp_path / f"{kind}.json"
    path.write_bytes(BAD_BYTES[kind])
    assert main(_commands(path)[reader]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert path.name in err.replace("\n", "")


NOT_NUMBERS = ["NaN", "Infinity", "-Infinity", '"1e3"', "true", "1e400", "-5", "null", "[1]"]


@pytest.mark.parametrize(
    "key, value",
    [("alpha_s", v) for v in NOT_NUMBERS] + [("busbw_Bps", v) for v in [*NOT_NUMBERS, "0"]],
)
def test_calibration_numbers_must_be_finite_json_numbers(tmp_path, capsys, key, value):
    entry = {"alpha_s": 5e-6, "busbw_Bps": 3.6e11}
    text = json.dumps({"ops": {"all_reduce": {"intra": entry}}}).replace(
        json.dumps(entry[key]), value, 1
    )
    path = tmp_path / "cal.json"
    path.write_text(text)
    assert main(_commands(path)["calibration"]) == 2
    err = capsys.readouterr().err
    assert "cal.json" in err.replace("\n", "") and "internal error" not in err


@pytest.mark.parametrize(
    "change",
    [
        {"world": "2"},
        {"world": True},
        {"bytes": -1024},
        {"bytes": 1.5},
        {"time_s": "0.1"},
        {"iters": 0},
        {"busbw_gbps": None},
        {"op": "allreduce"},
        {"span": "far"},
        {"dtype": 3},
    ],
)
def test_mistyped_bench_rows_are_usage_errors(tmp_path, capsys, change):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([ROW, {**ROW, "bytes": 4096, **change}]))
    for extra in ([], ["--plot", str(tmp_path / "p.png")], ["--fit", str(tmp_path / "c.json")]):
        assert main(["bench", "--load", str(path), *extra]) == 2
        err = capsys.readouterr().err
        assert "rows.json" in err.replace("\n", "") and repr(next(iter(change))) in err
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "c.json").exists()


def test_good_files_still_read(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(GOOD_CAL))
    assert main(_commands(cal)["calibration"] + ["--top-k", "1"]) == 0
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([ROW]))
    assert main(["bench", "--load", str(rows)]) == 0
    assert main(["plan", "--hf-config", str(HF), "--gpus", "8", "--top-k", "1"]) == 0


def test_a_json_object_that_is_no_calibration_is_refused(tmp_path, capsys):
    """``{}`` or a plan's JSON passed as --calibration was read as an empty calibration and
    silently ignored."""
    for body in ("{}", '{"candidates": []}'):
        path = tmp_path / "not_cal.json"
        path.write_text(body)
        argv = ["plan", "--model", "llama3-8b", "--gpus", "8", "--calibration", str(path)]
        assert main(argv) == 2
        assert "not a calibration" in capsys.readouterr().err


def test_a_folder_as_the_picture_path_is_refused(tmp_path):
    """``--plot /tmp`` wrote ``/tmp.png`` beside the folder; the folder is refused by name."""
    from parastrat.errors import UsageError
    from parastrat.viz import figure_path

    with pytest.raises(UsageError, match="is a folder"):
        figure_path(tmp_path)
    assert figure_path(tmp_path / "plan") == tmp_path / "plan.png"
