"""The ``parastrat`` command line: a thin layer of argument parsing and printing.

Each subcommand lives in its own module here and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (called with the parsed namespace, returning an exit status).
Exit status: 0 success; 2 a user error or a broken rule (message with the fix, no traceback);
1 anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import sys
from typing import NoReturn

from rich.markup import escape

from .._version import __version__
from ..errors import RankTimeoutError
from ._common import USER_ERRORS, err_console, error_document, print_json, report_user_error

#: Subcommand modules, in the order ``--help`` lists them.  A module that is absent is skipped.
SUBCOMMANDS = (
    "models",
    "accelerators",
    "check",
    "layout",
    "memory",
    "plan",
    "size",
    "explain",
    "plan_dit",
    "record",
    "bench",
    "verify",
)


class _ArgumentExit(SystemExit):
    """argparse's exit 2 on a bad command line, carrying its message (for --format json)."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line message (its default) and never a traceback."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise _ArgumentExit(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``parastrat`` argument parser with every subcommand of :data:`SUBCOMMANDS` that exists
    registered (``tools/gen_cli_docs.py`` renders docs/cli.md from it)."""
    parser = _Parser(
        prog="parastrat",
        description="Choose, check, apply and run distributed parallelism strategies.",
    )
    parser.add_argument("--version", action="version", version=f"parastrat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        module.register(sub)
    return parser


def _file_size_limit_is_an_error() -> None:
    """Under ``ulimit -f`` a write past the limit raises SIGXFSZ, whose default action kills
    the process; ignored, the write fails with EFBIG instead and becomes a clean UsageError
    (the atomic writer leaves the previous file intact either way)."""
    import signal
    import threading

    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit status.  With ``--format json`` a failure also prints one
    JSON error document on stdout (:func:`~._common.error_document`); the text stays on stderr."""
    _file_size_limit_is_an_error()
    _unencodable_characters_are_replaced()
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(words)
    except _ArgumentExit as exc:
        if _asks_json(words):
            print_json({"error": {"kind": "arguments", "message": exc.message, "violations": []}})
        raise
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.argv = tuple(words)  # the command as typed, for hints that print a command to run
    as_json = getattr(args, "format", None) == "json"
    try:
        _refuse_empty_values(args)
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        return report_user_error(exc, as_json=as_json)
    except RankTimeoutError as exc:  # a peer stopped or hung: the job's, not the request's
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        if as_json:
            print_json(error_document(exc))
        return 1
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("PARASTRAT_DEBUG"):
            raise
        err_console.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: "
            f"{escape(str(exc))}\n"
            "(set PARASTRAT_DEBUG=1 for the traceback; please report it)"
        )
        if as_json:
            print_json(error_document(exc))
        return 1


def _unencodable_characters_are_replaced() -> None:
    """On a terminal or pipe whose encoding lacks a character the output uses (an ellipsis
    under ``PYTHONIOENCODING=ascii``), print a replacement instead of failing mid-table."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
            with contextlib.suppress(OSError, ValueError):
                reconfigure(errors="replace")


def _asks_json(words: list[str]) -> bool:
    """Whether a command line that argparse refused asked for ``--format json``."""
    pairs = itertools.pairwise(words)
    return "--format=json" in words or any(a == "--format" and b == "json" for a, b in pairs)


#: Options that take a name, a path or a text: an empty value is a mistake (a shell variable
#: that was not set), not "not given".
NAMED_VALUES = (
    "model",
    "hf_config",
    "config",
    "accelerator",
    "strategy",
    "compare",
    "calibration",
    "recipe",
    "plot",
    "output",
    "fit",
    "load",
    "pipeline_layout",
    "order",
    "sizes",
    "ops",
    "precisions",
)


def _refuse_empty_values(args: argparse.Namespace) -> None:
    """UsageError for an option given an empty (or blank) value, naming it."""
    from ..errors import UsageError

    for name in NAMED_VALUES:
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} was given an empty value; give it one, or leave it out")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
