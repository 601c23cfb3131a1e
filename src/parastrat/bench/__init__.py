"""Collective benchmarks on the groups a strategy builds, and calibration of the cost model.

``parastrat.bench.run(...)`` times all-reduce, all-gather, reduce-scatter, all-to-all, ring
exchange, pipeline send/recv and broadcast on a started ``torch.distributed`` group, checks
each result, and returns :class:`Row` s with nccl-tests' bandwidth definitions;
``run_local(world=N, ...)`` does the same on N spawned local gloo ranks;
``run_strategy(strategy, ...)`` (``run_strategy_local`` on spawned ranks) times each
collective on the group of the strategy that uses it; ``plot(rows, "busbw.png")`` draws busbw
against message size;
``fit(rows)`` turns measurements into the calibration ``Cluster.calibrate`` accepts;
``measure_gemm`` / ``measure_copy`` time a large GEMM and an HBM copy on one device and
``kernel_calibration`` turns them into that calibration's ``kernels`` section.

Importing this package imports neither torch nor matplotlib; running and plotting do.
"""

from __future__ import annotations

from .calibrate import fit, load, save
from .kernels import kernel_calibration, measure_copy, measure_gemm, measure_host_op
from .plot import plot_busbw as plot
from .rows import (
    OPS,
    Row,
    format_bytes,
    load_rows,
    parse_sizes,
    rows_from_json,
    rows_to_csv,
    rows_to_json,
)
from .runner import DEFAULT_SIZES, run, run_local
from .strategy_bench import measurements, run_strategy, run_strategy_local

__all__ = [
    "DEFAULT_SIZES",
    "OPS",
    "Row",
    "fit",
    "format_bytes",
    "kernel_calibration",
    "load",
    "load_rows",
    "measure_copy",
    "measure_gemm",
    "measure_host_op",
    "measurements",
    "parse_sizes",
    "plot",
    "rows_from_json",
    "rows_to_csv",
    "rows_to_json",
    "run",
    "run_local",
    "run_strategy",
    "run_strategy_local",
    "save",
]
