"""Adapters: a :class:`~parastrat.Strategy` turned into the settings each framework takes.

* :mod:`parastrat.adapters.megatron` — Megatron Bridge ``ConfigContainer`` / Megatron Core
  ``TransformerConfig`` (``apply``, ``from_config``, ``to_overrides``);
* :mod:`parastrat.adapters.mindiesd` — MindIE-SD model-port settings and launch flags;
* :mod:`parastrat.adapters.diffusers` — diffusers ``ContextParallelConfig``;
* :mod:`parastrat.adapters.torchtitan` — the ``[parallelism]`` table of a torchtitan job config.

The submodules are loaded on first attribute access (``parastrat.adapters.megatron``), and
importing one imports no framework: torch, megatron, diffusers are imported only by the
functions that need them, which name the extra to install when one is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SUBMODULES = ("megatron", "mindiesd", "diffusers", "torchtitan")

__all__ = list(SUBMODULES)


def __getattr__(name: str) -> ModuleType:
    if name in SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(SUBMODULES))
