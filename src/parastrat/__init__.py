"""parastrat: choose, check, apply and run distributed parallelism strategies.

The core (``Strategy``, ``layout``, specs, estimates, planner) is pure Python and imports
neither torch nor megatron.  Framework edges (``initialize``, ``apply``, ``bench``) load their
frameworks only when called, and name the extra to install when one is missing.

Public names are resolved lazily (PEP 562), so ``import parastrat`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .errors import (
    MissingExtraError,
    RankTimeoutError,
    SpecError,
    StrategyError,
    StrategyTypeError,
    UsageError,
    Violation,
)
from .layout import layout
from .strategy import Strategy

#: public name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    # specs
    "ModelSpec": ("parastrat.spec.model", "ModelSpec"),
    "models": ("parastrat.spec.models", None),
    "hardware": ("parastrat.spec.hardware", None),
    "Accelerator": ("parastrat.spec.hardware", "Accelerator"),
    "Cluster": ("parastrat.spec.cluster", "Cluster"),
    "DiTSpec": ("parastrat.spec.dit", "DiTSpec"),
    "Workload": ("parastrat.spec.workload", "Workload"),
    "Switches": ("parastrat.spec.workload", "Switches"),
    "SearchSpace": ("parastrat.spec.workload", "SearchSpace"),
    # estimates
    "estimate_memory": ("parastrat.estimate.memory", "estimate_memory"),
    "MemoryReport": ("parastrat.estimate.memory", "MemoryReport"),
    "estimate_step": ("parastrat.estimate.step", "estimate_step"),
    "StepReport": ("parastrat.estimate.step", "StepReport"),
    "track_record": ("parastrat.estimate.track_record", "track_record"),
    "TrackRecord": ("parastrat.estimate.track_record", "TrackRecord"),
    "published_runs": ("parastrat.estimate.published_runs", "published_runs"),
    "PublishedRun": ("parastrat.estimate.published_runs", "PublishedRun"),
    "estimate_dit": ("parastrat.estimate.dit", "estimate_dit"),
    "DiTMemoryOptions": ("parastrat.estimate.dit_memory", "DiTMemoryOptions"),
    "DiTRequest": ("parastrat.estimate.dit_options", "DiTRequest"),
    "DiTSwitches": ("parastrat.estimate.dit_options", "DiTSwitches"),
    "DiTSearch": ("parastrat.estimate.dit_options", "DiTSearch"),
    "TrainingBudget": ("parastrat.estimate.train_time", "TrainingBudget"),
    # planning
    "plan": ("parastrat.planner.search", "plan"),
    "Plan": ("parastrat.planner.search", "Plan"),
    "compare": ("parastrat.planner.compare", "compare"),
    "sensitivity": ("parastrat.planner.sensitivity", "sensitivity"),
    "plan_dit": ("parastrat.planner.dit", "plan_dit"),
    # edges (frameworks imported lazily inside)
    "initialize": ("parastrat.runtime.groups", "initialize"),
    "destroy": ("parastrat.runtime.groups", "destroy"),
    "verify": ("parastrat.runtime.verify", "verify"),
    "apply": ("parastrat.adapters.megatron", "apply"),
    "adapters": ("parastrat.adapters", None),
    "bench": ("parastrat.bench", None),
}

__all__ = [
    "__version__",
    "Strategy",
    "StrategyError",
    "SpecError",
    "StrategyTypeError",
    "UsageError",
    "Violation",
    "MissingExtraError",
    "RankTimeoutError",
    "layout",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'parastrat' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


#: Names this module's own code imports, not part of the package's surface.
_INTERNAL = frozenset({"annotations", "importlib", "Any"})


def __dir__() -> list[str]:
    return sorted((set(globals()) - _INTERNAL) | set(_LAZY))
