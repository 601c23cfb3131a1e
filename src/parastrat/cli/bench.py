"""``parastrat bench``: time collectives on local ranks, under torchrun, or on a strategy's groups.

``--world N`` spawns N local gloo ranks (the embedded default: 2 ranks when neither --world nor
a torchrun environment is given); under torchrun (WORLD_SIZE set, no --world) every launched
rank runs the sweep on the device's backend and rank 0 prints.  Strategy flags (or --model)
switch to a strategy-aware run: each collective on the group of the strategy that uses it.
``--load FILE`` re-reads rows written earlier, to print, plot or fit them without running.
``--kernels --accelerator NAME`` measures GEMM rates, causal attention (training and inference)
and HBM copy bandwidth on this process's device instead, as fractions of the preset's peaks,
and the host's seconds per eager operation (the ``kernels`` section of a calibration).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from .. import _io
from ._args import add_args, arg, store_true
from ._common import (
    add_strategy_flags,
    console,
    err_console,
    finite_seconds,
    local_world,
    nonnegative_int,
    positive_int,
    print_json,
    require_writable,
    strategy_from_args,
)


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand (collective benchmarks and the cost-model calibration fit) to
    ``subparsers``."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark collectives (nccl-tests bandwidths) and calibrate the cost model",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_args(p, SWEEP_ARGS)
    add_args(p, OUTPUT_ARGS)
    add_args(p.add_argument_group(KERNELS_TITLE), KERNEL_ARGS)
    add_args(p.add_argument_group("strategy-aware run"), STRATEGY_RUN_ARGS)
    add_strategy_flags(p)
    p.set_defaults(func=run)


#: The collective sweep: ranks, ops, sizes, iterations, dtype and link class.
SWEEP_ARGS = (
    arg(
        "--world",
        "--gpus",
        "--devices",
        dest="world",
        type=local_world,
        default=None,
        help="spawn this many local gloo ranks, the world size (default 2, or the torchrun world)",
    ),
    arg(
        "--ops",
        default=None,
        help="comma-separated ops (default: all): all_reduce, all_gather, "
        "reduce_scatter, all_to_all, ring, send_recv, broadcast",
    ),
    arg(
        "--sizes",
        default=None,
        help="message sizes: a list 4KB,1MB,64MB or a range 1KB:64MB:x4 "
        "(K/M/G = 1024^n; default 4KB:64MB:x4, or from --model)",
    ),
    arg("--iters", type=positive_int, default=20, help="timed iterations per size"),
    arg("--warmup", type=nonnegative_int, default=5, help="untimed iterations first (default 5)"),
    arg(
        "--dtype",
        default=None,
        help="float32, bfloat16 or float16 (default float32; bfloat16 with a strategy)",
    ),
    arg(
        "--span",
        choices=("intra", "inter"),
        default=None,
        help="link class to record (default: same host -> intra, else inter)",
    ),
)

#: What becomes of the rows: printed, written, plotted, fitted, or read back; the ranks' timeout.
OUTPUT_ARGS = (
    arg("--format", choices=("table", "json", "csv"), default="table"),
    arg(
        "--output",
        default=None,
        help="also write the rows to FILE (JSON unless --format csv or a .csv name)",
    ),
    arg("--plot", default=None, help="write busbw vs message size to FILE.png"),
    arg(
        "--fit",
        default=None,
        metavar="FILE.json",
        help="fit latency and bandwidth per op and link class; write the calibration "
        "that `parastrat plan --calibration` reads",
    ),
    arg(
        "--load",
        default=None,
        metavar="FILE.json",
        help="use rows from an earlier --output (JSON, or CSV for a .csv name) instead of running",
    ),
    arg(
        "--timeout",
        type=finite_seconds,
        default=600.0,
        help="seconds before local ranks are killed (default 600)",
    ),
)

#: The kernel-rate flags (instead of collectives), under this group title.
KERNELS_TITLE = (
    "kernel rates (instead of collectives): GEMM FLOP/s per precision and HBM copy "
    "bandwidth on this process's device, as fractions of an accelerator preset"
)
KERNEL_ARGS = (
    store_true(
        "--kernels", "measure kernel rates; with --fit FILE.json add them to that calibration"
    ),
    arg(
        "--accelerator",
        default=None,
        help="the preset whose peaks the rates are divided by (required with --kernels)",
    ),
    arg(
        "--precisions",
        default=None,
        help="GEMM precisions to measure, comma-separated: bf16, fp8 (default bf16)",
    ),
    store_true(
        "--grid",
        "measure the GEMM shape grid (square, skinny and the MoE presets' grouped expert "
        "GEMMs) and fit the shape model's GEMM efficiency to it (kernel_grid in --fit FILE)",
    ),
    arg("--gemm-size", type=positive_int, default=None, help="GEMM size M = N = K (default 8192)"),
)

#: A strategy-aware run's model and batch (the strategy flags follow).
STRATEGY_RUN_ARGS = (
    arg("--model", default=None, help="model preset: message sizes from its shape"),
    arg("--seq-len", type=positive_int, default=None, help="sequence length (with --model)"),
    arg("--micro-batch-size", type=positive_int, default=1),
)


def _strategy_requested(args: argparse.Namespace) -> bool:
    degrees = (args.tp, args.pp, args.ep, args.ulysses, args.ring, args.cfg, args.cp)
    return (
        any((d or 1) > 1 for d in degrees)
        or args.sp
        or args.model is not None
        or bool(getattr(args, "strategy", None))
    )


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat bench``: measure the rows (or ``--load`` them), write, plot or fit them as
    asked, and print them as a table, JSON or CSV; return the exit status (1 when a rank failed)."""
    from .._io import write_text
    from ..bench import fit, load_rows, plot, rows_to_csv, rows_to_json, save
    from ..errors import UsageError
    from ..viz import figure_path

    _refuse_unwritable_outputs(args)  # before a sweep that may take minutes
    if args.kernels:
        _refuse_collective_flags(args)
        return _run_kernels(args)
    _refuse_kernel_flags(args)
    _refuse_shared_outputs(args)
    _refuse_late_failures(args)
    if args.load:
        _refuse_sweep_flags(args)
        rows = load_rows(args.load)
        if not rows:
            raise UsageError(f"{args.load} holds no benchmark rows; write some with --output")
        if args.ops:  # --ops picks the loaded rows to use (names checked as for a sweep)
            from ..bench.runner import resolve_ops

            rows = _filter_ops(rows, ",".join(resolve_ops(args.ops, 2)))
            if not rows:
                raise UsageError(f"{args.load} holds no rows of {args.ops}")
    else:
        if args.warmup < 0:
            raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
        measured = _measure(args)
        if measured is None:  # a torchrun rank other than 0: rank 0 prints
            return 0
        if not measured:  # a rank failed; the reason is printed
            return 1
        rows = measured
    if args.output:
        as_csv = args.format == "csv" or (
            args.format == "table" and Path(args.output).suffix.lower() == ".csv"
        )
        text = rows_to_csv(rows) if as_csv else _json_text(rows_to_json(rows))
        out = write_text(args.output, text, what="benchmark rows")
        err_console.print(f"wrote {len(rows)} rows to {escape(str(out))}")
    if args.plot:
        from .._deps import require

        require("matplotlib.pyplot", "plot").close(plot(rows, args.plot))
        err_console.print(f"wrote the plot to {escape(str(figure_path(args.plot)))}")
    if args.fit:
        cal = _with_kernels_of(Path(args.fit), fit(rows))
        _print_fit(cal, str(save(cal, args.fit)))
    if args.format == "json":
        print_json(rows_to_json(rows))
    elif args.format == "csv":
        sys.stdout.write(rows_to_csv(rows))
    else:
        _print_table(rows)
    return 0


@dataclass(frozen=True)
class KernelRun:
    """What ``bench --kernels`` measures with: the accelerator preset whose peaks the rates
    are divided by, the GEMM precisions and size, the iterations, and the bytes one copy moves."""

    accel: Any
    precisions: list[str]
    size: int
    iters: int
    warmup: int
    copy_bytes: int
    #: sequence length of the attention measurement
    attn_seq: int


def _kernel_run(args: argparse.Namespace) -> KernelRun:
    """The :class:`KernelRun` of the flags; refuses a missing preset and a device that is not
    the preset's kind."""
    from ..bench.kernels import ATTN_SEQ, COPY_BYTES, GEMM_SIZE, check_device
    from ..errors import UsageError
    from ..spec.hardware import get as get_accelerator

    if not args.accelerator:
        raise UsageError("--kernels needs --accelerator NAME (the preset whose peaks to divide by)")
    accel = get_accelerator(args.accelerator)
    check_device(accel)  # a CPU's rates are never written under a GPU's name
    size = args.gemm_size or GEMM_SIZE
    # the 1 GiB copy, or one the size of a GEMM operand pair when a small GEMM is asked for
    copy_bytes = COPY_BYTES if args.gemm_size is None else min(COPY_BYTES, 4 * size * size)
    return KernelRun(
        accel=accel,
        precisions=[p.strip() for p in (args.precisions or "bf16").split(",") if p.strip()],
        size=size,
        iters=args.iters,
        warmup=max(args.warmup, 0),
        copy_bytes=copy_bytes,
        # the long sequence, or one of the asked GEMM size for a small (test) run
        attn_seq=ATTN_SEQ if args.gemm_size is None else min(ATTN_SEQ, size),
    )


def _run_kernels(args: argparse.Namespace) -> int:
    """``parastrat bench --kernels``: measure GEMM rates and copy bandwidth on this device (or,
    with ``--grid``, the GEMM shape grid and its fit), print them against the preset's peaks,
    and merge them into ``--fit FILE`` if given."""
    kr = _kernel_run(args)
    cal, table = _kernel_grid(kr) if args.grid else _kernel_rates(kr)
    if args.format == "json":  # one JSON document on stdout; the table goes to stderr
        err_console.print(table)
        print_json(cal)
    else:
        console.print(table)
    if args.fit:
        _merge_kernels(Path(args.fit), cal)
    return 0


def _kernel_rates(kr: KernelRun) -> tuple[dict[str, Any], Any]:
    """The kernel calibration of one GEMM size per precision, the copy and the host's eager
    op, and its table against the preset's peaks."""
    from rich.table import Table

    from ..bench import format_bytes
    from ..bench.kernels import (
        kernel_calibration,
        measure_attention,
        measure_copy,
        measure_gemm,
        measure_host_op,
    )

    timing = {"iters": kr.iters, "warmup": kr.warmup}
    gemm = {p: measure_gemm(p, size=kr.size, **timing) for p in kr.precisions}
    copy = measure_copy(nbytes=kr.copy_bytes, **timing)
    host = measure_host_op(**timing)
    attn = measure_attention(seq=kr.attn_seq, **timing)
    cal = kernel_calibration(kr.accel.name, gemm, copy, host_op_s=host, attention=attn)
    table = Table(title=f"kernel rates against {kr.accel.name}'s peaks")
    for col in ("kernel", "measured", "peak", "fraction"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for p, flops in gemm.items():
        peak = kr.accel.peak(p)
        table.add_row(
            f"GEMM {kr.size}^3 {p}",
            f"{flops / 1e12:.1f} TFLOP/s",
            f"{peak / 1e12:.0f} TFLOP/s",
            f"{flops / peak:.3f}",
        )
    hbm = kr.accel.mem_bandwidth_Bps
    table.add_row(
        f"copy {format_bytes(kr.copy_bytes)}",
        f"{copy / 1e9:.0f} GB/s",
        f"{hbm / 1e9:.0f} GB/s",
        f"{copy / hbm:.3f}",
    )
    table.add_row("host: one eager op", f"{host * 1e6:.1f} us", "-", "-")
    _attention_rows(table, kr, attn)
    return cal, table


def _attention_rows(table: Any, kr: KernelRun, attn: Any) -> None:
    """The attention measurement's two rows (training, inference) of the kernel table."""
    peak = kr.accel.peak("bf16")
    for what, flops in (("fwd+bwd", attn.train_flops), ("fwd", attn.forward_flops)):
        table.add_row(
            f"attention causal s={kr.attn_seq} d=128 {what}",
            f"{flops / 1e12:.1f} TFLOP/s",
            f"{peak / 1e12:.0f} TFLOP/s",
            f"{flops / peak:.3f}",
        )


def _kernel_grid(kr: KernelRun) -> tuple[dict[str, Any], Any]:
    """``bench --kernels --grid``: the calibration fitted to the GEMM shape grid, and its table
    of measured against modelled rates."""
    from rich.table import Table

    from ..bench.kernels import (
        fit_grid,
        gemm_grid,
        measure_attention,
        measure_copy,
        measure_grid,
        measure_host_op,
    )

    timing = {"iters": kr.iters, "warmup": kr.warmup}
    rows = measure_grid(gemm_grid(kr.size), kr.precisions, **timing)
    copy = measure_copy(nbytes=kr.copy_bytes, **timing)
    attn = measure_attention(seq=kr.attn_seq, **timing)
    cal = fit_grid(kr.accel, rows, copy, host_op_s=measure_host_op(**timing), attention=attn)
    table = Table(title=f"GEMM grid on {kr.accel.name}: measured vs the fitted shape model")
    for col in ("shape", "precision", "measured TFLOP/s", "model TFLOP/s"):
        table.add_column(col, justify="left" if col == "shape" else "right")
    for row in cal["kernel_grid"]:
        table.add_row(
            row["label"],
            row["precision"],
            f"{row['flops_per_s'] / 1e12:.1f}",
            f"{row['model_flops_per_s'] / 1e12:.1f}",
        )
    return cal, table


def _with_kernels_of(path: Path, cal: dict[str, Any]) -> dict[str, Any]:
    """The collective fit ``cal`` keeping the kernel constants (and grid) that the calibration
    already at ``path`` holds: the two are measured apart (``bench --kernels --fit`` merges
    the other way), and a collective sweep into the same file must not lose them."""
    from .._io import read_json
    from ..errors import UsageError

    if not path.is_file():
        return cal
    try:
        old = read_json(path, what="calibration file")
    except UsageError:
        return cal  # not a calibration: replaced, as before
    if not isinstance(old, dict) or not old.get("kernels"):
        return cal
    kept = {k: old[k] for k in ("kernels", "kernel_grid", "accelerator") if k in old}
    source = "; ".join(x for x in (cal.get("source"), old.get("source")) if x)
    return {**cal, **kept, "source": source}


def _merge_target(path: Path) -> dict[str, Any]:
    """The calibration file kernel rates are added to, read (UsageError when it is no JSON
    object: checked before measuring, and again when merging)."""
    from .._io import read_json
    from ..errors import UsageError

    merged = read_json(path, what="calibration file (to add the kernel rates to)")
    if not isinstance(merged, dict):
        raise UsageError(f"{path} is not a calibration (a JSON object); give another file")
    return merged


def _merge_kernels(path: Path, cal: dict[str, Any]) -> None:
    """Merge a kernel calibration (and its grid) into the calibration file at ``path``, whole
    or not at all."""
    from ..bench import save

    merged = _merge_target(path) if path.exists() else {}
    merged["kernels"] = cal["kernels"]
    merged["accelerator"] = cal.get("accelerator")
    if "kernel_grid" in cal:
        merged["kernel_grid"] = cal["kernel_grid"]
    merged["source"] = "; ".join(x for x in (merged.get("source"), cal["source"]) if x)
    written = save(merged, path)
    err_console.print(f"wrote the kernel constants to {escape(str(written))}")


def _measure(args: argparse.Namespace) -> list[Any] | None:
    """Run the sweep where the arguments say; None on torchrun ranks other than 0, [] when a
    local rank failed (the reason is printed)."""
    strategy = strategy_from_args(args) if _strategy_requested(args) else None
    if args.seq_len is not None and args.model is None:
        from ..errors import UsageError

        raise UsageError(
            "--seq-len sizes the messages of a model's layers and needs --model NAME; "
            "a plain sweep takes --sizes"
        )
    kwargs = _sweep_kwargs(args, strategic=strategy is not None)
    from ..runtime.backend import detect_env

    _check_dtype(args.dtype)
    # a missing or contradicting launcher variable is exit 2 here, before anything starts
    if args.world is None and detect_env().source != "single":
        return _measure_launched(args, strategy, kwargs)
    return _measure_local(args, strategy, kwargs)


def _refuse_unwritable_outputs(args: argparse.Namespace) -> None:
    """UsageError when ``--output``, ``--fit`` or ``--plot`` names a file that cannot be
    written (missing or read-only folder), checked before anything is measured."""
    from ..viz import figure_path

    if args.output:
        require_writable(args.output, "benchmark rows")
    if args.fit:
        require_writable(args.fit, "calibration")
    if args.plot:
        require_writable(figure_path(args.plot), "plot")


def _refuse_shared_outputs(args: argparse.Namespace) -> None:
    """UsageError when two outputs (``--output``, ``--fit``, ``--plot``) name one file, or an
    output is the ``--load`` file it would be read from: one would silently replace the other."""
    from ..errors import UsageError
    from ..viz import figure_path

    named = {"--output": args.output, "--fit": args.fit, "--load": args.load}
    if args.plot:
        named["--plot"] = str(figure_path(args.plot))
    seen: dict[Path, str] = {}
    for flag, value in named.items():
        if not value:
            continue
        key = Path(value).resolve()
        if key in seen and not _io.is_special(key):
            raise UsageError(
                f"{seen[key]} and {flag} name the same file {value}: one would replace the "
                "other; give each its own path"
            )
        seen[key] = flag


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The flags among ``names`` (argparse dests) the command line set, spelled as typed."""
    return [f"--{k.replace('_', '-')}" for k in names if getattr(args, k, None)]


def _refuse_collective_flags(args: argparse.Namespace) -> None:
    """``--kernels`` measures this device's kernels, not collectives: a flag that shapes or
    stores a collective sweep would be silently ignored, so it is refused (and a ``--fit``
    file to merge into is read before measuring)."""
    from ..errors import UsageError

    names = ("output", "plot", "load", "world", "ops", "sizes", "span", "dtype", "model")
    given = _given(args, names)
    if _strategy_requested(args):
        given.append("the strategy flags")
    if given:
        raise UsageError(
            f"{', '.join(sorted(set(given)))}: collective-sweep flags, and --kernels measures "
            "this device's kernel rates (written with --fit FILE.json); drop them, or run the "
            "collective sweep as its own command"
        )
    if args.fit and Path(args.fit).exists():
        _merge_target(Path(args.fit))


def _refuse_kernel_flags(args: argparse.Namespace) -> None:
    """A collective sweep (or ``--load``) ignores the kernel flags: given without
    ``--kernels`` they are refused rather than silently dropped."""
    from ..errors import UsageError

    given = _given(args, ("accelerator", "precisions", "grid", "gemm_size"))
    if given:
        raise UsageError(
            f"{', '.join(given)}: kernel-rate flags, which act only with --kernels; add "
            "--kernels (a kernel measurement, not a collective sweep), or drop them"
        )


def _refuse_late_failures(args: argparse.Namespace) -> None:
    """What would fail only after a sweep (minutes of device time), checked before it: a plot
    without matplotlib, and a fit of runs that sweep one message size per op."""
    from ..errors import UsageError

    if args.plot:
        from .._deps import require

        require("matplotlib.pyplot", "plot")
    if not args.fit or args.load:
        return
    if args.model is not None and args.sizes is None:
        raise UsageError(
            "--fit needs at least two message sizes per op, and --model sizes each op's "
            "messages once; add --sizes, e.g. --sizes 64KB:64MB:x4 (the model's sizes are "
            "then not used), or drop --fit"
        )
    from ..bench import DEFAULT_SIZES, parse_sizes

    if len(parse_sizes(args.sizes or DEFAULT_SIZES)) < 2:
        raise UsageError(
            f"--fit needs at least two message sizes, and --sizes {args.sizes} gives one; "
            "sweep a range, e.g. --sizes 64KB:64MB:x4"
        )


def _refuse_sweep_flags(args: argparse.Namespace) -> None:
    """``--load`` reads rows already measured: a flag that only shapes a sweep would be
    silently ignored, so it is refused."""
    from ..errors import UsageError

    names = ("span", "sizes", "dtype", "world", "model", "seq_len")
    given = _given(args, names)
    if _strategy_requested(args) and args.model is None:
        given.append("the strategy flags")
    if given:
        raise UsageError(
            f"{', '.join(given)} shape(s) a sweep, and --load reads rows already measured (each "
            "row keeps its own); drop them, or measure again without --load"
        )


def _sweep_kwargs(args: argparse.Namespace, *, strategic: bool) -> dict[str, Any]:
    """The keyword arguments of the sweep: iterations, then a strategy run's model and batch,
    or a plain sweep's sizes, dtype and link class."""
    from ..bench import DEFAULT_SIZES

    kwargs: dict[str, Any] = {"iters": args.iters, "warmup": args.warmup}
    if strategic:
        kwargs.update(
            model=args.model,
            seq_len=args.seq_len,
            micro_batch_size=args.micro_batch_size,
            sizes=args.sizes,
            dtype=args.dtype or "bfloat16",
        )
    else:
        kwargs.update(
            sizes=args.sizes or DEFAULT_SIZES, dtype=args.dtype or "float32", span=args.span
        )
    return kwargs


def _measure_launched(
    args: argparse.Namespace, strategy: Any, kwargs: dict[str, Any]
) -> list[Any] | None:
    """The sweep on every rank torchrun launched (``strategy``: on its groups); the rows on
    rank 0, None elsewhere."""
    from ..bench.runner import progress_bar, resolve_ops
    from ..bench.runner import run as run_sweep
    from ..runtime.backend import init_distributed

    init_distributed("auto", timeout=args.timeout)
    import torch.distributed as dist

    rank = dist.get_rank()
    try:
        if strategy is not None:
            from ..bench.strategy_bench import run_strategy

            _check_strategy_ops(args.ops, strategy, dist.get_world_size(), kwargs)
            with _maybe_bar(rank == 0, progress_bar) as bar:
                rows = _filter_ops(run_strategy(strategy, progress=bar, **kwargs), args.ops)
        else:
            resolve_ops(args.ops, dist.get_world_size())  # validate before any collective
            with _maybe_bar(rank == 0, progress_bar) as bar:
                rows = run_sweep(ops=args.ops, progress=bar, **kwargs)
        dist.barrier()  # every rank done with the groups before any leaves them
    finally:
        # a process torn down with its groups alive may abort in the backend's destructor
        # after printing ("terminate called without an active exception"), and torchrun
        # then reports the run FAILED
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return rows if rank == 0 else None


def _measure_local(args: argparse.Namespace, strategy: Any, kwargs: dict[str, Any]) -> list[Any]:
    """The sweep on ``--world`` local gloo ranks (default 2; ``strategy``: on its groups); []
    when a rank failed (the reason is printed)."""
    from ..bench import run_local
    from ..bench.runner import resolve_ops
    from ..runtime.launch import RankFailure

    world = args.world or 2
    try:
        if strategy is not None:
            from ..bench.strategy_bench import run_strategy_local

            _check_strategy_ops(args.ops, strategy, world, kwargs)  # fail before spawning
            rows = run_strategy_local(
                strategy, world, timeout_s=args.timeout, show_progress=True, **kwargs
            )
            return _filter_ops(rows, args.ops)
        resolve_ops(args.ops, world)  # fail before spawning
        return run_local(world, ops=args.ops, timeout_s=args.timeout, show_progress=True, **kwargs)
    except RankFailure as exc:
        reason = f"rank {exc.rank}: {exc.reason.splitlines()[0]}"
        err_console.print(f"[bold red]benchmark failed:[/] {escape(reason)}")
        if args.format == "json":  # one error document on stdout, as every JSON failure
            print_json({"error": {"kind": "rank-failure", "message": reason, "violations": []}})
        return []


def _check_dtype(dtype: str | None) -> None:
    """``--dtype`` must name a benchmarked dtype: checked before any rank starts."""
    from ..bench.runner import dtype_name

    if dtype is not None:
        dtype_name(dtype, "--dtype")


def _check_strategy_ops(ops: str | None, strategy: Any, world: int, kwargs: dict) -> None:
    """UsageError, before any rank starts, when ``--ops`` names an op the strategy's run does
    not time (:func:`~parastrat.bench.strategy_bench.measurements`), naming the ones it does."""
    from ..bench.strategy_bench import measurements
    from ..errors import UsageError

    if not ops:
        return
    shape = dict(model=kwargs.get("model"), seq_len=kwargs.get("seq_len"))
    mbs = int(kwargs.get("micro_batch_size") or 1)
    timed = {
        m.op
        for m in measurements(
            strategy, world, micro_batch_size=mbs, sizes=kwargs.get("sizes"), **shape
        )
    }
    asked = {o.strip() for o in ops.split(",") if o.strip()}
    if not asked or asked - timed:
        raise UsageError(
            f"--ops {ops}: {strategy} on {world} ranks times {', '.join(sorted(timed))}; "
            "pick among those, or leave --ops out"
        )


def _filter_ops(rows: list[Any], ops: str | None) -> list[Any]:
    if not ops:
        return rows
    wanted = {o.strip() for o in ops.split(",")}
    return [r for r in rows if r.op in wanted]


class _maybe_bar:
    """The progress bar on rank 0, nothing elsewhere."""

    def __init__(self, show: bool, factory: Any):
        self._bar = factory() if show else None

    def __enter__(self) -> Any:
        return self._bar.__enter__() if self._bar else None

    def __exit__(self, *exc: Any) -> None:
        if self._bar:
            self._bar.__exit__(*exc)


def _json_text(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2) + "\n"


def _fmt_time(seconds: float) -> str:
    """``0.0072`` -> ``"7.20ms"``, ``7.9e-4`` -> ``"790us"`` (narrow enough for 80 columns)."""
    if seconds >= 1:
        return f"{seconds:.2f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds * 1e6:.0f}us"


def _print_table(rows: list[Any]) -> None:
    from rich.table import Table

    from ..bench import format_bytes

    several = len({r.group for r in rows}) > 1 or rows[0].group != "world"
    t = Table(
        title=f"collectives on {rows[0].backend} ({rows[0].dtype}, median of "
        f"{rows[0].iters} iterations, GB = 1e9 bytes)"
    )
    if several:
        t.add_column("group", no_wrap=True)
    t.add_column("op", no_wrap=True)
    for name in ("size", "ranks", "time", "min", "max", "algbw GB/s", "busbw GB/s"):
        t.add_column(name, justify="right", no_wrap=name not in ("algbw GB/s", "busbw GB/s"))
    for r in rows:
        cells = [
            r.op,
            format_bytes(r.bytes),
            str(r.world),
            _fmt_time(r.time_s),
            _fmt_time(r.time_min_s),
            _fmt_time(r.time_max_s),
            f"{r.algbw_gbps:.3f}",
            f"{r.busbw_gbps:.3f}",
        ]
        t.add_row(*([r.group] if several else []), *cells)
    console.print(t)


def _print_fit(cal: dict[str, Any], path: str) -> None:
    err_console.print(f"calibration written to {escape(path)} ({escape(cal['source'])}):")
    for op, spans in cal["ops"].items():
        for span, vals in spans.items():
            q = cal.get("fit", {}).get(op, {}).get(span, {})
            err_console.print(
                f"  {op:15s} {span:5s} alpha {vals['alpha_s'] * 1e6:9.2f} us  "
                f"busbw {vals['busbw_Bps'] / 1e9:8.3f} GB/s  "
                f"(rel. RMS error {q.get('rel_rmse', float('nan')):.1%})"
            )
