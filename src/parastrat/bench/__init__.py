"""Collective benchmarks on the groups a strategy builds, and calibration of the cost model.

``parastrat.bench.run(...)`` times all-reduce, all-gather, reduce-scatter, all-to-all, ring
exchange, pipeline send/recv and broadcast on a started ``torch.distributed`` group, checks
each result, and returns :class:`Row` s with nccl-tests' bandwidth definitions;
``run_local(world=N, ...)`` does the same on N spawned local gloo ranks;
``run_strategy(strategy, ...)`` times each collective on the group of the strategy that uses it;
``fit(rows)`` turns measurements into the calibration ``Cluster.calibrate`` accepts.

Importing this package does not import torch; ``run`` does.
"""

from __future__ import annotations

from typing import Any

from .calibrate import fit, load, save
from .rows import OPS, Row, format_bytes, load_rows, parse_sizes, rows_from_json, rows_to_csv
from .rows import rows_to_json
from .runner import DEFAULT_SIZES, run, run_local

__all__ = ["OPS", "Row", "DEFAULT_SIZES", "run", "run_local", "run_strategy", "fit", "save",
           "load", "parse_sizes", "format_bytes", "load_rows", "rows_to_json", "rows_from_json",
           "rows_to_csv", "plot"]


def run_strategy(*args: Any, **kwargs: Any):
    """Time each collective on the groups of a strategy (see :mod:`.strategy_bench`)."""
    from .strategy_bench import run_strategy as _run_strategy

    return _run_strategy(*args, **kwargs)


def plot(rows: Any, path: Any = None, **kwargs: Any):
    """Bus bandwidth against message size, one line per op (see :mod:`.plot`)."""
    from .plot import plot_busbw

    return plot_busbw(rows, path, **kwargs)
