"""``parastrat size``: what a training job needs on each accelerator, the fewest devices that
train the token budget before the deadline (:func:`parastrat.planner.sizing.size`)."""

from __future__ import annotations

import argparse

from rich.table import Table
from rich.text import Text

from ._args import add_args, arg
from ._common import (
    add_model_args,
    add_switch_args,
    console,
    deadline_days,
    device_count,
    err_console,
    load_model,
    positive_int,
    print_json,
    seq_len,
    switches_from_args,
    train_tokens,
    workload_from_args,
)

#: The accelerators sized when none are named: the NVIDIA training parts.
DEFAULT_ACCELERATORS = "a100,h100,h200,b200,gb200,b300,gb300"

SIZE_ARGS = (
    arg("--seq-len", type=seq_len, default=4096),
    arg("--global-batch-size", type=positive_int, required=True, help="sequences per step"),
    arg("--precision", default="bf16", help="bf16, fp8, mxfp8 or nvfp4 (as plan takes)"),
    arg(
        "--train-tokens",
        type=train_tokens,
        required=True,
        metavar="TOKENS",
        help="tokens to train (e.g. 15T, 300B, 1.5e12)",
    ),
    arg(
        "--deadline-days",
        type=deadline_days,
        required=True,
        metavar="DAYS",
        help="the run must finish within DAYS of wall clock",
    ),
    arg(
        "--accelerators",
        default=DEFAULT_ACCELERATORS,
        metavar="A,B,...",
        help=f"accelerator presets to size, comma-separated (default: {DEFAULT_ACCELERATORS}; "
        "`parastrat accelerators` lists them)",
    ),
    arg(
        "--max-gpus",
        "--max-devices",
        dest="max_gpus",
        type=device_count,
        default=16_384,
        help="the most devices to consider on each accelerator (default 16,384)",
    ),
    arg(
        "--objective",
        choices=("device-hours", "devices"),
        default="device-hours",
        help="what to minimise per accelerator: device-hours (default: the cheapest count that "
        "meets the deadline, among the fewest and up to twice as many) or devices (the fewest)",
    ),
    arg("--format", choices=("table", "json"), default="table"),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``size`` subcommand (the fewest devices per accelerator for a deadline)."""
    p = sub.add_parser(
        "size",
        help="the devices, per accelerator, that train a token budget by a deadline",
        description="For each accelerator, the devices (up to --max-gpus) whose best strategy "
        "trains --train-tokens within --deadline-days in the fewest device-hours (or, with "
        "--objective devices, the fewest devices), with that strategy, the days, the "
        "device-hours and the days on the model's record; cheapest first.",
    )
    add_model_args(p)
    add_args(p, SIZE_ARGS)
    add_switch_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Size the job on each accelerator and print the answers; 0 when one meets the budget,
    2 when none does."""
    from ..estimate.train_time import TrainingBudget
    from ..planner.sizing import size

    workload = workload_from_args(args, load_model(args), args.global_batch_size, searched=True)
    budget = TrainingBudget(args.train_tokens, args.deadline_days)
    names = [a.strip() for a in args.accelerators.split(",") if a.strip()]
    with err_console.status("sizing", spinner="dots") as status:
        answers = size(
            workload,
            names,
            budget,
            max_devices=args.max_gpus,
            switches=switches_from_args(args, searched=True),
            progress=lambda name: status.update(f"sizing on {name}"),
            objective=args.objective,
        )
    if args.format == "json":
        print_json({"budget": str(budget), "answers": [a.to_dict() for a in answers]})
    else:
        if any(a.plan is not None for a in answers):
            console.print(_table(answers, budget, workload.model.name))
        for a in answers:
            if a.plan is None:
                console.print(Text(f"{a.accelerator}: {a.reason}"))
            elif a.fewest is not None:
                console.print(
                    Text(
                        f"{a.accelerator}: {a.fewest:,} devices also meet it, in more "
                        "device-hours (--objective devices shows them)"
                    )
                )
    return 0 if any(a.plan is not None for a in answers) else 2


def _table(answers, budget, model: str) -> Table:
    """One row per accelerator that meets the budget."""
    table = Table(title=Text(f"{model}: {budget}"))
    cols = ("accelerator", "devices", "strategy", "mbs", "recompute", "days", "device-hours")
    for col in (*cols, "on record"):
        left = col in ("accelerator", "strategy", "recompute")
        table.add_column(col, justify="left" if left else "right")
    for a in answers:
        if a.plan is None or a.training is None:
            continue
        best, t = a.plan.best, a.training
        record = a.plan.track_record
        span = "-"
        if record is not None:
            low, high = t.days_on_record(record)
            span = f"{low:,.1f}-{high:,.1f} days"
        cells = [a.accelerator, f"{a.devices:,}", str(best.strategy), str(best.micro_batch_size)]
        offload = f", offload {best.cpu_offload_layers}" if best.cpu_offload_layers else ""
        cells += [best.recompute + offload, f"{t.days:,.1f}", f"{t.device_hours:,.0f}", span]
        table.add_row(*(Text(c) for c in cells))
    return table
