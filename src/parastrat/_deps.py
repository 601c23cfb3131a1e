"""Lazy imports of optional frameworks, with an error that names the extra to install.

Only ``runtime/``, ``bench/`` and ``adapters/`` call :func:`require`; the planning core never
imports torch or megatron.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

#: Which extra brings which top-level module.
EXTRA_FOR = {
    "torch": "megatron",
    "megatron": "megatron",
    "megatron.core": "megatron",
    "torch_npu": "npu",
    "mindiesd": "mindiesd",
    "diffusers": "diffusers",
    "yunchang": "yunchang",
    "matplotlib": "plot",
}


def require(module: str, extra: str | None = None, why: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # includes ModuleNotFoundError
        top = module.split(".")[0]
        name = extra or EXTRA_FOR.get(module) or EXTRA_FOR.get(top) or top
        err = MissingExtraError(module, name, why or str(exc))
        raise err from exc
