"""Load a repository script (a benchmark, a tool) as a module, for tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str) -> ModuleType:
    """The module of ``ROOT / relpath``, registered under its file stem (dataclasses in it
    resolve their module by that name)."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod
