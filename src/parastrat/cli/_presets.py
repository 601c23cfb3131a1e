"""What ``parastrat models`` and ``parastrat accelerators`` share: the subcommand with an
optional NAME, and one preset shown field by field."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ._common import console, print_json


def add_listing(
    sub: argparse._SubParsersAction,
    name: str,
    help_text: str,
    description: str,
    run: Callable[[argparse.Namespace], int],
) -> None:
    """Add the subcommand ``name [NAME] [--format table|json]`` running ``run``."""
    p = sub.add_parser(name, help=help_text, description=description)
    p.add_argument("name", nargs="?", metavar="NAME", help="show this preset in full")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def show_fields(title: str, data: Mapping[str, Any], fmt: str) -> int:
    """One preset's ``data`` as JSON, or as a field/value table titled ``title``; 0."""
    if fmt == "json":
        print_json(dict(data))
        return 0
    table = Table(title=Text(title))
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        table.add_row(key, Text(cell(value)))
    console.print(table)
    return 0


def cell(value: Any) -> str:
    """A field's value as a table cell: counts, sizes and rates of 10,000 and up with
    thousands separators, a mapping as ``key: value`` pairs."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {cell(v)}" for k, v in value.items())
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 10_000:
        return f"{value:,.0f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def runs_table(title: str, runs: Sequence[Any], model_column: bool = False) -> Table:
    """Published training runs (:class:`~parastrat.estimate.published_runs.PublishedRun`):
    job, layout, measured and predicted tokens/s/GPU, and where each was published; with
    ``model_column``, the model preset first (runs of several models)."""
    table = Table(title=Text(f"{title} (tokens/s/GPU measured; predicted by the step model)"))
    heads = ("model",) * model_column + ("accelerator", "devices", "seq", "batch", "precision")
    for col in (*heads, "layout"):
        table.add_column(col, justify="right" if col in ("devices", "seq", "batch") else "left")
    for col in ("measured", "predicted", "error", "source"):
        table.add_column(col, justify="left" if col == "source" else "right", overflow="fold")
    for r in runs:
        cells = [r.model] * model_column + [r.accelerator, str(r.devices), str(r.seq_len)]
        cells += [str(r.global_batch_size), r.precision]
        cells += [f"{r.strategy} mbs{r.micro_batch_size} {r.recompute}"]
        cells += [f"{r.measured:,.0f}", f"{r.predicted:,.0f}", f"{r.error:+.1%}", r.source]
        table.add_row(*(Text(c) for c in cells))
    return table
