"""Bus bandwidth against message size, one line per op (per group in strategy runs).

matplotlib is imported only when a plot is drawn (the ``plot`` extra), with the non-interactive
Agg backend when writing a file, so it works on headless machines and in CI.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._deps import require
from .rows import Row, format_bytes, rows_from_json


def plot_busbw(
    rows: Iterable[Row | dict[str, Any]],
    path: str | Path | None = None,
    *,
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Draw busbw (GB/s) against message size (log x); save to ``path`` when given.

    One line per op, or per ``group/op`` when rows come from several strategy groups.  Returns
    the matplotlib Figure.
    """
    table = rows_from_json(list(rows))
    mpl = require("matplotlib", "plot", why="plotting benchmark results")
    if path is not None and ax is None and "matplotlib.pyplot" not in sys.modules:
        mpl.use("Agg")  # headless: nobody chose a backend yet and we only write a file
    plt = require("matplotlib.pyplot", "plot")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.2))
    else:
        fig = ax.figure
    several_groups = len({r.group for r in table}) > 1
    lines: dict[str, list[Row]] = defaultdict(list)
    for r in table:
        lines[f"{r.group}/{r.op}" if several_groups else r.op].append(r)
    for label, pts in lines.items():
        pts.sort(key=lambda r: r.bytes)
        ax.plot([r.bytes for r in pts], [r.busbw_gbps for r in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ticks = sorted({r.bytes for r in table})
    if ticks and len(ticks) <= 16:
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_bytes(b) for b in ticks], rotation=45, ha="right")
    ax.set_xlabel("message size S (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s, 1e9)")
    if title is None and table:
        backends = "/".join(sorted({r.backend for r in table}))
        worlds = ", ".join(str(w) for w in sorted({r.world for r in table}))
        title = f"busbw on {backends}, group size {worlds}, {table[0].dtype}"
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        import io

        from .._io import write_bytes
        from ..viz import figure_path

        out = figure_path(path)
        buf = io.BytesIO()
        fig.savefig(buf, dpi=120, format=out.suffix.lower().lstrip("."))
        write_bytes(out, buf.getvalue(), what="plot")
    return fig
