"""Write docs/cli.md from the argparse definitions (run after changing a command's flags).

``python tools/gen_cli_docs.py`` rewrites the file; ``--check`` exits 1 when it is stale (the
test suite runs the check so the reference never drifts from the code).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parastrat.cli import build_parser
from parastrat.cli._common import STRATEGY_FLAGS

OUT = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
STRATEGY_GROUP = "strategy"

HEADER = """# Command-line reference

`parastrat COMMAND ...` (also `python -m parastrat COMMAND ...`).  Exit status: 0 success;
2 a user error or a broken rule (a message with the fix, never a traceback); 1 anything else.
`--format json` prints exactly one JSON document on stdout, a failure too: `{"error": {"kind":
..., "message": ..., "violations": [{"rule", "message", "hint", "severity"}]}}` (`kind`:
`strategy`, `spec`, `usage`, `missing-extra`, `arguments`, `rank-timeout` or `internal`), with
the same text on stderr and the same exit status.

This page is generated from the commands' own definitions by `tools/gen_cli_docs.py`.
"""


def _row(a: argparse.Action) -> str:
    opts = ", ".join(f"`{o}`" for o in a.option_strings)
    if a.choices:
        opts += " {" + ", ".join(map(str, a.choices)) + "}"
    text = (a.help or "").replace("|", "\\|").replace("%%", "%")
    if a.default not in (None, False, argparse.SUPPRESS, [], ()) and "default" not in text:
        text += f" (default {a.default})"
    if a.required:
        text += " **(required)**"
    return f"| {opts} | {text.strip()} |"


def render() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [HEADER]
    strategy_rows: list[str] = []
    for name, sp in sub.choices.items():
        lines += [
            f"## `parastrat {name}`",
            "",
            (sp.description or "").strip(),
            "",
            "| option | meaning |",
            "|---|---|",
        ]
        has_strategy = False
        for group in sp._action_groups:
            for a in group._group_actions:
                if not a.option_strings or a.dest == "help":
                    continue
                if group.title == STRATEGY_GROUP:
                    has_strategy = True
                    if not strategy_rows or len(strategy_rows) < len(group._group_actions):
                        strategy_rows = [_row(x) for x in group._group_actions]
                    continue
                lines.append(_row(a))
        if has_strategy:
            lines.append("| strategy flags | see [below](#strategy-flags) |")
        lines.append("")
    lines += [
        "## Strategy flags",
        "",
        f"Shared by the commands that take a strategy ({', '.join(STRATEGY_FLAGS)}, "
        "`--sp`, `--order`, uneven pipeline splits).",
        "",
        "| option | meaning |",
        "|---|---|",
        *strategy_rows,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python tools/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
