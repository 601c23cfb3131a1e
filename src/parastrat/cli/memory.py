"""``parastrat memory``: what each rank of each pipeline stage holds, against device memory."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..spec.workload import RECOMPUTE_MODES
from ._common import (
    DEFAULT_RECOMPUTE,
    HEADROOM_HELP,
    RECOMPUTE_HELP,
    add_model_args,
    add_strategy_flags,
    add_switch_args,
    console,
    device_count,
    headroom_fraction,
    load_model,
    positive_int,
    print_json,
    require_writable,
    seq_len,
    strategy_from_args,
    switches_from_args,
    workload_from_args,
)

GiB = 1024**3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``memory`` subcommand (per-rank memory of every pipeline stage against device memory)
    to ``subparsers``."""
    p = subparsers.add_parser(
        "memory",
        help="per-rank memory per pipeline stage (will it fit?)",
        description="Estimate weights, gradients, optimizer state, activations and the "
        "allowance for context/buffers per rank of every pipeline stage.",
    )
    add_model_args(p)
    p.add_argument(
        "--gpus", "--devices", dest="gpus", type=device_count, required=True, help="world size"
    )
    add_strategy_flags(p)
    p.add_argument("--seq-len", type=seq_len, default=4096, help="sequence length")
    p.add_argument("--micro-batch-size", type=positive_int, default=1)
    p.add_argument(
        "--global-batch-size",
        type=positive_int,
        default=None,
        help="gives the number of micro-batches (default: pipeline full)",
    )
    p.add_argument(
        "--recompute",
        choices=RECOMPUTE_MODES,
        default=DEFAULT_RECOMPUTE,
        help=RECOMPUTE_HELP,
    )
    p.add_argument("--precision", default="bf16", help="bf16, fp8, mxfp8 or nvfp4 (fp4)")
    add_switch_args(p, step=False)
    p.add_argument("--accelerator", default="h100", help="device for the memory line")
    p.add_argument("--headroom", type=headroom_fraction, default=None, help=HEADROOM_HELP)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="save a stacked bar per stage against device memory",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat memory``: estimate what one rank of each pipeline stage holds and print it
    against the accelerator's memory (table or JSON, a bar chart with ``--plot``); return 0 whether
    or not it fits."""
    from ..estimate.memory import estimate_memory
    from ..spec.cluster import Cluster
    from ..spec.hardware import require_precision

    model = load_model(args)
    # the memory the device exposes (Cluster: usable_memory_bytes where measured), as plan uses
    accel = Cluster(args.accelerator, num_devices=args.gpus).accel
    strategy = strategy_from_args(args, training=True, model=model).with_world_size(args.gpus)
    workload = workload_from_args(args, model, args.global_batch_size)
    require_precision(accel, workload.precision)  # a format the device has (as TE checks)
    # the rules explain and plan apply: memory is not priced for a strategy Megatron refuses
    strategy.validate(
        model,
        world_size=args.gpus,
        seq_len=workload.seq_len,
        global_batch_size=workload.global_batch_size,
        micro_batch_size=workload.micro_batch_size,
    )
    report = estimate_memory(workload, strategy, switches_from_args(args))
    fits = report.fits(accel, headroom=args.headroom or 0.0)
    plot_path = None
    if args.plot:
        from ..viz import figure_path

        require_writable(figure_path(args.plot), "plot")

        report.plot(args.plot, accel)
        plot_path = str(figure_path(args.plot))
    if args.format == "json":
        doc = report.to_dict()
        doc.update(
            accelerator=accel.name,
            device_memory_bytes=accel.memory_bytes,
            fits=fits,
            plot=plot_path,
        )
        print_json(doc)
        return 0
    _print_table(report, accel, fits)
    if plot_path:
        console.print(f"plot written to {plot_path}", markup=False)
    return 0


def _print_table(report, accel, fits: bool) -> None:
    from rich.table import Table

    table = Table(
        title=f"{report.model}  {report.strategy}  seq {report.seq_len} x mbs "
        f"{report.micro_batch_size}  recompute {report.recompute}  "
        f"{report.precision}  (GiB per rank; mb/chunks = in flight)",
        title_justify="left",
    )
    for col in (
        "stage",
        "layers",
        "chunks" if report.vpp > 1 else "mb",
        "weights",
        "grads",
        "optim",
        "activ",
        "other",
        "total",
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for st in report.stages:
        table.add_row(
            str(st.stage),
            str(st.layers),
            str(st.in_flight),
            *(
                f"{x / GiB:.2f}"
                for x in (
                    st.weights,
                    st.gradients,
                    st.optimizer,
                    st.activations,
                    st.other,
                    st.total,
                )
            ),
        )
    console.print(table)
    cap = accel.memory_bytes / GiB
    verdict = "[green]fits[/]" if fits else "[red]does not fit[/]"
    console.print(
        f"peak {report.peak_bytes / GiB:.2f} GiB (stage {report.peak_stage.stage}) "
        f"of {cap:.1f} GiB on {accel.name}: {verdict}  (GiB; 'other' = context, "
        f"communication buffers and fragmentation allowance)"
    )
    for note in report.notes:
        console.print(f"note: {escape(note)}")
