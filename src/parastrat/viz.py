"""Pictures of a strategy's rank grid (matplotlib, imported only when a picture is asked for)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._deps import require
from ._io import is_special, write_bytes
from .errors import UsageError
from .layout import all_coordinates

if TYPE_CHECKING:
    from .strategy import Strategy


#: Picture formats a path may end with; a path without one gets ``.png``.
FIGURE_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def figure_path(path: str | Path) -> Path:
    """The file a picture asked for at ``path`` is written to: ``path`` itself when it ends
    with a picture format, else ``path`` + ``.png`` (so the path reported is the path written)."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(
            f"{out} is a folder; give a file name for the picture, e.g. {out}/plot.png"
        )
    if out.suffix.lower().lstrip(".") in FIGURE_FORMATS or is_special(out):
        return out  # a device or pipe (/dev/null) takes the picture as named
    return out.with_name(out.name + ".png")


def _format_of(out: Path) -> str:
    """The picture format of ``out``'s suffix (png for a device or pipe without one)."""
    suffix = out.suffix.lower().lstrip(".")
    return suffix if suffix in FIGURE_FORMATS else "png"


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Write a matplotlib figure to :func:`figure_path` (``path``) whole or not at all and close
    it; returns the path written.  UsageError (not a traceback) when the file cannot be written
    (a missing folder, no permission, a full disk); a previous file stays as it was."""
    import io

    out = figure_path(path)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format=_format_of(out))
    finally:
        require("matplotlib.pyplot", "plot").close(fig)
    return write_bytes(out, buf.getvalue(), what="picture")


def layout_grid(
    strategy: Strategy, world_size: int
) -> tuple[list[str], list[str], list[list[int]]]:
    """The rank grid as rows x columns of rank numbers, with row and column labels.

    Training: one row per (pipeline stage, data-parallel replica), one column per
    (context-parallel rank, tensor-parallel rank).  Inference: rows (cfg, dp, pp), columns
    (ring, ulysses, tp).  Every rank appears exactly once.
    """
    s = strategy.with_world_size(world_size)
    coords = all_coordinates(s, world_size)
    row_axes: tuple[str, ...]
    col_axes: tuple[str, ...]
    if s.is_inference:
        row_axes, col_axes = ("cfg", "dp", "pp"), ("ring", "ulysses", "tp")
        sizes = {
            "cfg": s.cfg,
            "dp": s.dp or 1,
            "pp": s.pp,
            "ring": s.ring,
            "ulysses": s.ulysses,
            "tp": s.tp,
        }
    else:
        row_axes, col_axes = ("pp", "dp"), ("cp", "tp")
        sizes = {"pp": s.pp, "dp": s.dp or 1, "cp": s.cp, "tp": s.tp}

    def index(c: dict[str, int], axes: tuple[str, ...]) -> int:
        i = 0
        for a in axes:
            i = i * sizes[a] + c.get(a, 0)
        return i

    def label(i: int, axes: tuple[str, ...]) -> str:
        parts = []
        for a in reversed(axes):
            parts.append(f"{a}{i % sizes[a]}")
            i //= sizes[a]
        return " ".join(reversed(parts))

    n_rows = 1
    for a in row_axes:
        n_rows *= sizes[a]
    n_cols = world_size // n_rows
    grid = [[-1] * n_cols for _ in range(n_rows)]
    for r, c in enumerate(coords):
        grid[index(c, row_axes)][index(c, col_axes)] = r
    return (
        [label(i, row_axes) for i in range(n_rows)],
        [label(j, col_axes) for j in range(n_cols)],
        grid,
    )


#: Most tick labels drawn per axis of the rank grid: thousands of labels are unreadable and
#: took minutes to lay out (16,384 ranks: over 2 minutes).
MAX_TICKS = 64


def _ticks(n: int) -> range:
    """Every position of an axis of ``n`` up to :data:`MAX_TICKS`, else every k-th."""
    return range(0, n, max(1, -(-n // MAX_TICKS)))


def plot_layout(
    strategy: Strategy, world_size: int, path: str | Path, *, devices_per_node: int = 8
) -> Path:
    """Draw the rank grid to ``path`` (PNG/SVG/PDF): each cell a rank, coloured by node."""
    require("matplotlib", "plot", "needed for --plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols, grid = layout_grid(strategy, world_size)
    nodes = [[r // devices_per_node for r in row] for row in grid]
    fig_w = min(2 + 0.55 * len(cols), 40)
    fig_h = min(1.5 + 0.4 * len(rows), 40)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    ax.imshow(nodes, cmap="tab20", aspect="auto", interpolation="nearest")
    if len(cols) * len(rows) <= 1024:
        for i, row in enumerate(grid):
            for j, rank in enumerate(row):
                ax.text(j, i, str(rank), ha="center", va="center", fontsize=7)
    xs, ys = _ticks(len(cols)), _ticks(len(rows))  # at most MAX_TICKS labels per axis
    ax.set_xticks(xs, [cols[i] for i in xs], rotation=90, fontsize=7)
    ax.set_yticks(ys, [rows[i] for i in ys], fontsize=7)
    ax.set_title(
        f"{strategy.with_world_size(world_size)}: ranks (colour = node of {devices_per_node})",
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


#: Step-time terms drawn for the top candidates (the breakdown keys of StepReport).
PLAN_TERMS = (
    "compute",
    "recompute",
    "bubble",
    "optimizer",
    "tp_exposed",
    "cp_exposed",
    "ep_exposed",
    "pp_exposed",
    "dp_exposed",
    "host_exposed",
)


def plot_plan(plan: Any, path: str | Path, *, device_bytes: float | None = None) -> Path:
    """Draw a training plan to ``path``.

    Left: every ranked candidate's predicted tokens/s/GPU against its peak memory per GPU, the
    chosen one marked, the device memory as a line.  Right: the top candidates' step time,
    term by term (compute, bubble, exposed communication, ...).
    """
    require("matplotlib", "plot", "needed for --plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = list(getattr(plan, "ranked", None) or plan.candidates)
    top = list(plan.candidates)
    if not ranked:
        raise UsageError("the plan has no candidates to plot")
    gib = 2**30
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 0.45 * len(top) + 4))
    ax.scatter(
        [c.memory.peak_bytes / gib for c in ranked],
        [c.step.tokens_per_s_per_gpu for c in ranked],
        s=18,
        alpha=0.6,
        label="candidates",
    )
    best = plan.best
    ax.scatter(
        [best.memory.peak_bytes / gib],
        [best.step.tokens_per_s_per_gpu],
        marker="*",
        s=260,
        color="red",
        label=f"choice: {best.strategy}",
    )
    if device_bytes:
        ax.axvline(device_bytes / gib, color="grey", linestyle="--", label="device memory")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("predicted tokens/s/GPU")
    ax.legend(fontsize=7, loc="lower left")
    labels = [f"#{i + 1} {c.strategy} mbs{c.micro_batch_size}" for i, c in enumerate(top)]
    left = [0.0] * len(top)
    for term in PLAN_TERMS:
        vals = [c.step.breakdown.get(term, 0.0) for c in top]
        if any(vals):
            bx.barh(labels, vals, left=left, label=term)
            left = [a + b for a, b in zip(left, vals)]
    bx.invert_yaxis()
    bx.tick_params(axis="y", labelsize=7)
    bx.set_xlabel("seconds per step")
    # below the axes, never over a bar
    bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, frameon=False)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
