"""Every data file the package reads ships in its wheel: a file under ``src/parastrat`` that is
not Python must be listed in ``[tool.setuptools.package-data]``, else ``pip install .`` (the
README's first command) installs a package that fails when it reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "parastrat"


def test_every_data_file_is_package_data():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
            "parastrat"
        ]
    )
    present = {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    assert present, "no data file found: the test looks in the wrong place"
    assert present <= listed, f"not in package-data: {sorted(present - listed)}"
    assert listed <= present, f"package-data names missing files: {sorted(listed - present)}"
