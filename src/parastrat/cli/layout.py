"""``parastrat layout``: which rank sits where in a strategy's grid."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ..layout import KINDS, all_coordinates, layout
from ._common import (
    add_strategy_flags,
    console,
    err_console,
    positive_int,
    print_json,
    require_writable,
    strategy_from_args,
    whole_number,
)

#: Largest world ``layout`` lists rank by rank (about 2 s as JSON); a bigger listing is no
#: use to read, and a million ranks took minutes and gigabytes.
MAX_LAYOUT_RANKS = 65_536

#: Ranks the table shows; the rest are counted (``--format json`` lists every one).
TABLE_RANKS = 1024


def _layout_world(text: str) -> int:
    note = (
        " (layout lists every rank; check a bigger world with `parastrat check`, which does "
        "not list them)"
    )
    return whole_number(text, 1, MAX_LAYOUT_RANKS, note)


#: Group kinds the table lists when --kinds is not given.
DEFAULT_KINDS = "tp,cp,dp,pp,ep"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``layout`` subcommand (print the rank grid of a strategy) to ``sub``."""
    p = sub.add_parser(
        "layout",
        help="print the rank grid of a strategy",
        description="Print every rank's coordinates (tp/cp/dp/pp/ep/...) and "
        "the groups of each kind, as Megatron Core / xDiT build them.",
    )
    p.add_argument(
        "--gpus",
        "--devices",
        "--world",
        dest="gpus",
        type=_layout_world,
        required=True,
        help="world size",
    )
    p.add_argument(
        "--kinds",
        default=None,
        help=f"group kinds to list (comma separated, from {','.join(KINDS)}; default "
        f"{DEFAULT_KINDS} in the table, every kind in JSON)",
    )
    p.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="a rich table, or one JSON document",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="also draw the rank grid (rows pp x dp, columns cp x tp), coloured by node",
    )
    p.add_argument(
        "--devices-per-node", type=positive_int, default=8, help="node size used to colour the plot"
    )
    add_strategy_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat layout``: print every rank's coordinates and the groups of the requested
    kinds (or one JSON document), drawing the grid with ``--plot``; return 0."""
    strategy = strategy_from_args(args).with_world_size(args.gpus)
    groups = layout(strategy, args.gpus)
    kinds = _kinds(args.kinds or DEFAULT_KINDS, groups)  # checked before anything is printed
    if args.plot:
        from ..viz import figure_path, plot_layout

        require_writable(figure_path(args.plot), "plot")

        written = plot_layout(
            strategy, args.gpus, args.plot, devices_per_node=args.devices_per_node
        )
        err_console.print(f"wrote the plot to {written}", markup=False)
    if args.format == "json":
        shown = {k: groups[k] for k in kinds} if args.kinds else groups
        print_json({"strategy": strategy.to_dict(), "groups": shown})
        return 0
    axes = (
        ["tp", "ulysses", "ring", "cfg", "pp", "dp"]
        if strategy.is_inference
        else ["tp", "cp", "dp", "pp", "ep", "etp", "edp"]
    )
    table = Table(title=f"{strategy}: rank coordinates")
    table.add_column("rank", justify="right")
    for a in axes:
        table.add_column(a, justify="right")
    coords = all_coordinates(strategy, args.gpus)
    for rank, c in enumerate(coords[:TABLE_RANKS]):
        table.add_row(str(rank), *(str(c.get(a, 0)) for a in axes))
    console.print(table)
    if len(coords) > TABLE_RANKS:
        console.print(
            f"... {len(coords) - TABLE_RANKS:,} more ranks (--format json lists every one)"
        )
    for kind in kinds:
        console.print(f"[bold]{kind}[/]: {escape(str(groups[kind]))}")
    return 0


def _kinds(text: str, groups: dict[str, list[list[int]]]) -> list[str]:
    """The group kinds ``--kinds`` names, each one the layout has (UsageError otherwise)."""
    from ..errors import UsageError

    kinds = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))  # once each
    if not kinds:
        raise UsageError(f"--kinds {text!r} names no group kind; choose from {', '.join(KINDS)}")
    for kind in kinds:
        if kind not in groups:
            raise UsageError(f"unknown group kind {kind!r}; choose from {', '.join(KINDS)}")
    return kinds
