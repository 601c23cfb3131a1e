"""Write the command outputs the docs show (``docs/snippets/*.txt``) by running the commands.

A page includes a snippet with ``--8<-- "docs/snippets/NAME.txt"``; the output is the
command's own, at a fixed terminal width, so a change to the planner or the cost model that
moves what a documented command prints shows up as a stale snippet instead of a page that
silently disagrees with the tool.

    python tools/gen_snippets.py           # rewrite every snippet
    python tools/gen_snippets.py --check   # exit 1 and show the difference when one is stale

The test suite runs ``--check``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "docs" / "snippets"
#: The terminal width the snippets are printed at (rich wraps tables to it).
COLUMNS = 120

#: Snippet file -> the ``parastrat`` arguments whose output it holds.
COMMANDS = {
    "quickstart-plan.txt": (
        "plan --model llama3-70b --gpus 64 --accelerator h100 --seq-len 8192 "
        "--global-batch-size 256"
    ),
    "training-size.txt": (
        "size --model llama3-70b --seq-len 8192 --global-batch-size 2048 --train-tokens 15T "
        "--deadline-days 90"
    ),
}


def output(args: str) -> str:
    """What ``parastrat ARGS`` prints (stdout and stderr, as a terminal shows them) at
    :data:`COLUMNS` columns, leading and trailing blank lines removed; raises when the
    command fails."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "parastrat", *shlex.split(args)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"parastrat {args} exited {done.returncode}: {done.stderr[-400:]}")
    return (done.stdout + done.stderr).strip("\n") + "\n"


#: What differs from run to run in an unchanged output: the search's wall time ("... memory
#: checks in 0.14 s").
VOLATILE = re.compile(r"\bin \d+(\.\d+)? s\b")


def comparable(text: str) -> list[str]:
    """``text``'s lines with :data:`VOLATILE` parts masked."""
    return [VOLATILE.sub("in ? s", line) for line in text.splitlines()]


def stale(name: str, text: str) -> list[str]:
    """The unified difference between snippet ``name`` on disk and ``text``, ignoring
    :data:`VOLATILE` parts (empty: current)."""
    path = SNIPPETS / name
    old = comparable(path.read_text() if path.exists() else "")
    return list(difflib.unified_diff(old, comparable(text), name, "now", lineterm=""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a snippet is stale")
    ap.add_argument("names", nargs="*", help="snippets to do (default: every one)")
    args = ap.parse_args(argv)
    status = 0
    for name in args.names or COMMANDS:
        text = output(COMMANDS[name])
        diff = stale(name, text)
        if args.check and diff:
            print(f"docs/snippets/{name} is stale (python tools/gen_snippets.py {name}):")
            print("\n".join(diff[:60]))
            status = 1
        elif not args.check and diff:
            tmp = SNIPPETS / f".{name}.tmp"
            tmp.write_text(text)
            tmp.replace(SNIPPETS / name)  # never half-written
            print(f"docs/snippets/{name}: rewritten")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
