"""The docs cannot drift from the code: every rule id is explained in
docs/troubleshooting.md, and docs/cli.md is what tools/gen_cli_docs.py writes.

Rule ids are found with ``ast``: the first argument of every ``Violation(...)``, ``_err(...)``
or ``_warn(...)`` call that is a string constant (f-strings such as ``f"{name}-type"`` are
documented by their pattern, ``<name>-type``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS = {"Violation", "_err", "_warn"}


def rule_ids() -> set[str]:
    ids: set[str] = set()
    for path in (ROOT / "src" / "parastrat").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in CALLS:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                ids.add(first.value)
            elif isinstance(first, ast.JoinedStr):
                ids.add(
                    "".join(
                        v.value if isinstance(v, ast.Constant) else "<name>" for v in first.values
                    )
                )
    return ids


def test_every_rule_id_is_documented():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    ids = rule_ids()
    assert len(ids) > 30
    missing = sorted(i for i in ids if f"`{i}`" not in text)
    assert not missing, f"document these rule ids in docs/troubleshooting.md: {missing}"


def test_cli_reference_is_current():
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_command_outputs_the_docs_show_are_current():
    """docs/snippets/*.txt hold what their commands print now (tools/gen_snippets.py), and
    every snippet file is one the tool writes and a page includes."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_snippets.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for snippet in (ROOT / "docs" / "snippets").glob("*.txt"):
        assert f'--8<-- "docs/snippets/{snippet.name}"' in pages, snippet.name
