"""The CLI's argument tables: rows register in order, stay read-only, and keep their groups."""

from __future__ import annotations

import argparse

import pytest

from parastrat.cli import build_parser, main
from parastrat.cli._args import add_args, arg, store_true


def test_rows_register_in_table_order_with_their_options():
    p = argparse.ArgumentParser(prog="t")
    add_args(p, (arg("--b", type=int, default=3, help="b"), store_true("--a", "a")))
    names = [a.option_strings for a in p._actions[1:]]
    assert names == [["--b"], ["--a"]]
    assert p.parse_args([]) == argparse.Namespace(b=3, a=False)
    assert p.parse_args(["--a", "--b", "7"]) == argparse.Namespace(b=7, a=True)


def test_a_row_cannot_be_changed_after_it_is_written():
    row = arg("--x", default=1)
    with pytest.raises(TypeError):
        row.options["default"] = 2  # type: ignore[index]
    with pytest.raises(AttributeError):
        row.names = ("--y",)  # type: ignore[misc]


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize(
    ("command", "title", "first", "last"),
    [
        ("plan", "pins and bounds", "--tp", "--fsdp"),
        ("check", "strategy", "--strategy", "--fsdp"),
        ("bench", "strategy-aware run", "--model", "--micro-batch-size"),
    ],
)
def test_tables_land_in_their_argument_groups(command, title, first, last):
    group = next(g for g in _subparser(command)._action_groups if g.title == title)
    flags = [a.option_strings[0] for a in group._group_actions]
    assert (flags[0], flags[-1]) == (first, last)


def test_mutually_exclusive_tables_still_exclude(capsys):
    base = [
        "plan-dit",
        "--model",
        "flux.1-dev",
        "--devices",
        "2",
        "--accelerator",
        "h100",
        "--height",
        "512",
        "--width",
        "512",
        "--steps",
        "4",
    ]
    with pytest.raises(SystemExit) as exc:
        main([*base, "--guidance", "--no-guidance"])
    assert exc.value.code == 2
    assert "not allowed with argument --guidance" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*base, "--config", "x"])
    assert exc.value.code == 2
    assert "not allowed with argument --model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--model", "", "--gpus", "8"],
        ["check", "--hf-config", " ", "--gpus", "8"],
        ["plan", "--model", "llama3-8b", "--gpus", "8", "--plot", ""],
        ["layout", "--gpus", "8", "--strategy", ""],
    ],
)
def test_an_empty_value_is_an_error_not_a_missing_option(capsys, argv):
    """``--model "$MODEL"`` with MODEL unset checked without any model and exited 0."""
    assert main(argv) == 2
    assert "was given an empty value" in capsys.readouterr().err
