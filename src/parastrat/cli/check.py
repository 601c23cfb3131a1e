"""``parastrat check``: validate a strategy for a model and a device count."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ._args import add_args, arg
from ._common import (
    add_model_args,
    add_strategy_flags,
    cli_words,
    console,
    device_count,
    load_model,
    positive_int,
    print_json,
    strategy_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``check`` subcommand (validate a strategy for a model and a device count)."""
    p = sub.add_parser(
        "check",
        help="validate a strategy for a model and a device count",
        description="Check every rule a strategy must satisfy and print the "
        "derived DP, expert DP and minimum world size, and every "
        "broken rule with its fix.  Exit 0 when valid, 2 otherwise.",
    )
    add_model_args(p, required=False)
    add_args(p, CHECK_ARGS)
    add_strategy_flags(p)
    p.set_defaults(func=run)


#: The world size, and the workload a strategy's splits are checked against, and the format.
CHECK_ARGS = (
    arg(
        "--gpus",
        "--devices",
        dest="gpus",
        type=device_count,
        required=True,
        help="number of devices (world size)",
    ),
    arg(
        "--seq-len",
        type=positive_int,
        default=None,
        help="sequence length in tokens (checks the CP and SP splits)",
    ),
    arg(
        "--global-batch-size",
        type=positive_int,
        default=None,
        help="global batch in sequences (checks it against micro-batch x DP)",
    ),
    arg(
        "--micro-batch-size",
        type=positive_int,
        default=None,
        help="micro-batch in sequences (default 1 when a global batch is given)",
    ),
    arg(
        "--devices-per-node",
        type=positive_int,
        default=None,
        help="devices per node / NVLink domain, for the soft topology rules",
    ),
    arg(
        "--format",
        choices=("table", "json"),
        default="table",
        help="a rich table, or one JSON document",
    ),
)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat check``: print the derived sizes and every broken rule with its fix (or one
    JSON document); return 0 when valid, 2 when a rule is broken."""
    model = load_model(args)
    strategy = strategy_from_args(args, training=model is not None, model=model)
    findings = strategy.check(
        model,
        world_size=args.gpus,
        seq_len=args.seq_len,
        global_batch_size=args.global_batch_size,
        micro_batch_size=args.micro_batch_size,
        devices_per_node=args.devices_per_node,
        verify_hints=True,
    )
    errors = [v for v in findings if v.severity == "error"]
    warnings = [v for v in findings if v.severity == "warning"]
    placed = None if errors else strategy.with_world_size(args.gpus)
    if args.format == "json":
        print_json(
            {
                "strategy": (placed or strategy).to_dict(),
                "valid": not errors,
                "model": getattr(model, "name", None),
                "world_size": args.gpus,
                "errors": [v.to_dict() for v in errors],
                "warnings": [v.to_dict() for v in warnings],
            }
        )
        return 2 if errors else 0
    console.print(_sizes_table(strategy, placed, args.gpus, model))
    return _print_findings(errors, warnings)


def _sizes_table(strategy, placed, world: int, model) -> Table:
    """The minimum world size and, for a strategy ``placed`` on ``world`` devices, its data
    parallel (and expert data parallel) sizes."""
    table = Table(
        title=f"{strategy} on {world} devices"
        + (f" for {model.name}" if model is not None else ""),
        show_header=False,
    )
    table.add_row(
        "minimum world size",
        f"{strategy.min_world_size}  (pp * lcm(tp*cp, ep*etp))"
        if not strategy.is_inference
        else f"{strategy.min_world_size}",
    )
    if placed is not None:
        table.add_row("data parallel (dp)", str(placed.dp))
        if not placed.is_inference:
            table.add_row("expert data parallel", str(placed.expert_dp))
    return table


def _print_findings(errors, warnings) -> int:
    """Print each broken rule with its fix and each warning with its suggestion, then the
    verdict; return 2 when a rule is broken, else 0."""
    for v in errors:
        console.print(
            f"[bold red]error[/] [red]{escape(v.rule)}[/]: {escape(v.message)}\n"
            f"      fix: {escape(cli_words(v.hint))}"
        )
    for v in warnings:
        console.print(
            f"[yellow]warning[/] {escape(v.rule)}: {escape(v.message)}\n"
            f"      consider: {escape(cli_words(v.hint))}"
        )
    if errors:
        console.print(f"[bold red]{len(errors)} rule(s) broken[/]")
        return 2
    console.print("[bold green]valid[/]")
    return 0
