"""``parastrat verify``: stand up a strategy's process groups and check each one numerically.

Locally (``--world N``: N spawned gloo ranks on this machine) or under torchrun / Slurm on a
real cluster (no ``--world``: the launched world, backend from the device).  Prints the rank
table (rank -> coordinates on every axis) and exits 0, or names the failing check, group and
rank and exits 1.  A strategy that does not fit the world exits 2 with the fix.
"""

from __future__ import annotations

import argparse

from rich.markup import escape

from ._common import (
    add_strategy_flags,
    console,
    err_console,
    finite_seconds,
    local_world,
    print_json,
    strategy_from_args,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand (check a strategy's process groups numerically) to
    ``subparsers``."""
    p = subparsers.add_parser(
        "verify",
        help="check a strategy's process groups numerically (local ranks or torchrun)",
        description="Initialize the strategy's process groups and check each numerically: "
        "split matmul over TP, all-to-all over EP/Ulysses, ring over CP/ring, "
        "send/recv chain over PP, all-reduce over DP.  Without --world, runs in "
        "the world torchrun (or Slurm) launched.",
    )
    p.add_argument(
        "--world",
        "--gpus",
        "--devices",
        dest="world",
        type=local_world,
        default=None,
        help="spawn this many local gloo ranks, the world size (omit under torchrun)",
    )
    add_strategy_flags(p)
    p.add_argument(
        "--timeout",
        type=finite_seconds,
        default=30.0,
        metavar="S",
        help="seconds each collective may take before it counts as broken (30)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "nccl", "hccl", "gloo"),
        help="under torchrun: communication backend (default: from the device)",
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat verify`` on ``--world`` local gloo ranks, or in the world torchrun / Slurm
    launched; return 0 when every check passes, 1 when one fails (a strategy that does not fit the
    world raises before anything starts: exit 2)."""
    from ..errors import UsageError
    from ..runtime.backend import detect_env

    strategy = strategy_from_args(args)
    if args.world is None:
        env = detect_env()  # a missing or contradicting launcher variable: exit 2 here
        if env.source == "single":
            raise UsageError(HOW_TO_LAUNCH)
        _need_two(env.world_size, f"{env.source} launched")
        return _run_launched(strategy, args)
    _need_two(args.world, "--world")
    if args.backend not in (None, "auto", "gloo"):
        raise UsageError(
            f"--backend {args.backend} takes effect under torchrun; --world spawns local ranks "
            "on gloo (leave --backend out, or launch with torchrun for the device's backend)"
        )
    strategy.with_world_size(args.world)  # a wrong world is exit 2 before anything starts
    if args.format == "table":
        err_console.print(f"verifying {strategy} on {args.world} local gloo ranks ...")
    from ..runtime.verify import print_step, verify_local

    report = verify_local(strategy, args.world, args.timeout, on_step=print_step)
    return _show(report, args.format)


#: How to run verify (and anything that starts process groups): what a user sees when no
#: launcher environment is present.
HOW_TO_LAUNCH = (
    "give --world N to spawn N local ranks, or launch under torchrun "
    "(e.g. torchrun --nproc-per-node 8 -m parastrat verify --tp 2) or srun"
)  # the library's form of this hint: parastrat.runtime.backend.LAUNCH_HINT


def _need_two(world: int, where: str) -> None:
    from ..errors import UsageError

    if world < 2:
        raise UsageError(
            f"a world of {world} rank ({where}) has no process group to check; "
            "verify needs 2 or more ranks (e.g. --world 2)"
        )


def _run_launched(strategy, args: argparse.Namespace) -> int:
    """Every launched rank runs the checks; rank 0 prints."""
    from ..runtime.backend import detect_env
    from ..runtime.verify import verify

    env = detect_env()
    strategy.with_world_size(env.world_size)  # exit 2 on every rank, before any group
    try:
        report = verify(strategy, backend=args.backend, timeout_s=args.timeout)
    except RuntimeError as exc:
        err_console.print(f"[bold red]rank {env.rank}:[/] {escape(str(exc))}")
        return 1
    if env.rank != 0:
        return 0 if report.ok else 1
    return _show(report, args.format)


def _show(report, fmt: str) -> int:
    if fmt == "json":
        print_json(report.to_dict())
        return 0 if report.ok else 1
    if report.coords:
        console.print(_rank_table(report))
    if report.ok:
        console.print(f"[green]{escape(report.summary())}[/]")
        return 0
    err_console.print(f"[bold red]{escape(report.summary())}[/]")
    return 1


def _rank_table(report):
    from rich.table import Table

    axes = report.axes
    table = Table(title=f"{report.strategy} on {report.world_size} ranks ({report.backend})")
    table.add_column("rank", justify="right")
    for axis in axes:
        table.add_column(axis, justify="right")
    table.add_column("checks", justify="right")
    for rank, coords in sorted(report.coords.items()):
        mine = [c for c in report.checks if c.rank == rank]
        good = sum(c.ok for c in mine)
        mark = f"{good}/{len(mine)}" if good == len(mine) else f"[red]{good}/{len(mine)}[/]"
        table.add_row(str(rank), *(str(coords.get(a, 0)) for a in axes), mark)
    return table
