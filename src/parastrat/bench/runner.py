"""Sweeps: every op over every message size on one process group, timed and checked.

:func:`run` is called on every rank of a started ``torch.distributed`` world (torchrun, or the
local ranks :func:`run_local` spawns) and returns the same rows on every rank.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from typing import Any

from .._deps import require
from ..errors import UsageError
from .rows import OPS, P2P_OPS, Row, parse_sizes

#: Sizes of a default sweep: 4 KiB to 64 MiB, x4.
DEFAULT_SIZES = "4KB:64MB:x4"

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}

#: Called after each row with (row, rows done, rows in the sweep).
ProgressFn = Callable[[Row, int, int], Any]


def resolve_dtype(dtype: Any) -> tuple[Any, str]:
    """(torch dtype, canonical name) for ``"bf16"``, ``"float32"``, a torch dtype..."""
    torch = require("torch")
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
        if name not in _DTYPES.values():
            raise UsageError(f"dtype {name} is not benchmarked; use float32, bfloat16 or float16")
        return dtype, name
    canonical = dtype_name(dtype)
    return getattr(torch, canonical), canonical


def dtype_name(dtype: Any, flag: str = "dtype") -> str:
    """The canonical name of a benchmarked dtype spelled ``dtype`` ("bf16", "float32", ...);
    UsageError naming ``flag`` and the choices otherwise (no torch needed: checked before any
    rank starts)."""
    canonical = _DTYPES.get(str(dtype).lower())
    if canonical is None:
        raise UsageError(f"unknown {flag} {dtype!r}; use float32, bfloat16 or float16")
    return canonical


def check_counts(iters: Any, warmup: Any) -> None:
    """UsageError unless ``iters`` >= 1 timed and ``warmup`` >= 0 untimed iterations (whole
    numbers)."""
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (iters, warmup))
    if not whole or iters < 1 or warmup < 0:
        raise UsageError(f"need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")


def resolve_ops(ops: str | Iterable[str] | None, group_size: int) -> list[str]:
    """Op names to run: validated, in the order given (``None``: every op that fits the group;
    point-to-point ops need two ranks)."""
    if ops is None:
        return [op for op in OPS if group_size >= 2 or op not in P2P_OPS]
    names = [o.strip() for o in (ops.split(",") if isinstance(ops, str) else ops) if o.strip()]
    unknown = [o for o in names if o not in OPS]
    if unknown:
        raise UsageError(f"unknown op(s) {', '.join(unknown)}; choose from {', '.join(OPS)}")
    if not names:
        raise UsageError(f"no ops given; choose from {', '.join(OPS)}")
    if group_size < 2:
        p2p = [o for o in names if o in P2P_OPS]
        if p2p:
            raise UsageError(
                f"{', '.join(p2p)} need a group of at least 2 ranks; this group has "
                f"{group_size} (use --world 2 or more)"
            )
    return names


def device_of(backend: str) -> Any:
    """The device this rank computes on under ``backend`` (``"cpu"`` for gloo)."""
    from ..runtime.backend import device_for

    name = str(backend).lower()
    if "nccl" in name:
        return device_for("nccl")
    if "hccl" in name:
        return device_for("hccl")
    return "cpu"


def detect_span(group: Any = None) -> str:
    """``"intra"`` when every rank of ``group`` runs on this host, else ``"inter"``.

    A host is a stand-in for a scale-up domain; pass ``span=`` to :func:`run` where the two
    differ (GB200 NVL72 spans hosts).
    """
    dist = require("torch.distributed")
    hosts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    return "intra" if len(set(hosts)) == 1 else "inter"


def run(
    ops: str | Iterable[str] | None = None,
    sizes: Any = DEFAULT_SIZES,
    group: Any = None,
    *,
    iters: int = 20,
    warmup: int = 5,
    dtype: Any = "float32",
    check: bool = True,
    span: str | None = None,
    group_name: str = "world",
    barrier_group: Any = None,
    progress: ProgressFn | None = None,
) -> list[Row]:
    """Benchmark ``ops`` for each message size on ``group`` (default: the whole world).

    Must be called on every rank of ``group`` (and of ``barrier_group``) with the same
    arguments; returns identical rows on every rank, one per (op, size), sweeping sizes within
    each op.  ``sizes`` is anything :func:`parse_sizes` reads; ``iters`` timed iterations follow
    ``warmup`` untimed ones; after them one more untimed call from freshly filled inputs is
    checked on every rank (as nccl-tests' ``-c`` pass does) and a wrong result raises
    :class:`~parastrat.bench.ops.BenchCorrectnessError` on all of them.  Timed iterations do not
    refill the buffers: on the CPU, touching a megabyte just before the barrier slows the next
    collective by ~10 % (measured with benchmarks/bench_overhead.py), and bandwidth does not
    depend on the values (sums of values >= 1 may grow, never into denormals).
    ``barrier_group`` (default ``group``) is where ranks meet before each iteration and over which
    times are reduced with MAX.
    """
    torch = require("torch")
    dist = require("torch.distributed")
    if not dist.is_available() or not dist.is_initialized():
        raise UsageError(
            "torch.distributed is not started; run under torchrun, call "
            "parastrat.bench.run_local(world=N, ...), or use "
            "`parastrat bench --world N`"
        )
    check_counts(iters, warmup)
    from .ops import Context, build
    from .timing import measure

    size_list = parse_sizes(sizes)
    n = dist.get_world_size(group)
    op_list = resolve_ops(ops, n)
    tdtype, dtype_name = resolve_dtype(dtype)
    backend = str(dist.get_backend(group))
    device = device_of(backend)
    if span is None:
        span = detect_span(group)
    elif span not in ("intra", "inter"):
        raise UsageError(f"span must be 'intra' or 'inter', got {span!r}")
    sync = group if barrier_group is None else barrier_group
    ctx = Context(
        torch=torch,
        dist=dist,
        group=group,
        rank=dist.get_rank(group),
        size=n,
        device=device,
        dtype=tdtype,
    )
    rows: list[Row] = []
    total = len(op_list) * len(size_list)
    meta = {"backend": backend, "dtype": dtype_name, "group": group_name, "span": span}
    for op in op_list:
        for nbytes in size_list:
            rows.append(
                _measured_row(
                    build(op, ctx, nbytes), op, ctx, sync, iters, warmup, check, measure, meta
                )
            )
            if progress is not None:
                progress(rows[-1], len(rows), total)
    return rows


def _measured_row(
    coll: Any,
    op: str,
    ctx: Any,
    sync: Any,
    iters: int,
    warmup: int,
    check: bool,
    measure: Any,
    meta: dict[str, str],
) -> Row:
    """One (op, size) row: ``iters`` timed calls after ``warmup``, then (``check``) one more
    untimed call from fresh inputs whose result is checked; times reduced with MAX over
    ``sync`` (a failed check raises on every rank)."""
    torch, dist, device = ctx.torch, ctx.dist, ctx.device
    coll.reset()
    times = measure(
        coll, torch=torch, dist=dist, device=device, iters=iters, warmup=warmup, barrier_group=sync
    )
    error = None
    if check:  # one more, untimed call from fresh inputs, then the result is checked
        coll.reset()
        coll()
        try:
            coll.check()
        except Exception as exc:
            error = exc
    times = _reduce(
        times, error, torch=torch, dist=dist, device=device, group=sync, op=op, nbytes=coll.nbytes
    )
    return Row.from_times(op, coll.nbytes, ctx.size, times, **meta)


def _reduce(
    times: list[float],
    error: BaseException | None,
    *,
    torch: Any,
    dist: Any,
    device: Any,
    group: Any,
    op: str,
    nbytes: int,
) -> list[float]:
    """Slowest rank's time per iteration, plus a collective verdict on correctness.

    Every rank learns whether any rank's check failed (so none waits for a peer that gave up);
    the failing rank raises its own error, the others name it.
    """
    from .ops import BenchCorrectnessError

    me = dist.get_rank()
    buf = torch.tensor(
        [*times, float(me + 1) if error else 0.0], dtype=torch.float32, device=device
    )
    dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
    values = [float(x) for x in buf.tolist()]
    failed = int(values.pop())
    if error is not None:
        raise error
    if failed:
        raise BenchCorrectnessError(
            f"{op} at {nbytes} bytes returned a wrong result on rank "
            f"{failed - 1} (see that rank's error)"
        )
    return values


# ---- local runs ------------------------------------------------------------------------------


def run_local(
    world: int = 2, *, timeout_s: float = 120.0, show_progress: bool = False, **kwargs: Any
) -> list[Row]:
    """Run :func:`run` on ``world`` fresh local gloo ranks and return rank 0's rows.

    ``kwargs`` go to :func:`run` (ops, sizes, iters, warmup, dtype, check, span); a rank that
    fails or a run longer than ``timeout_s`` raises
    :class:`~parastrat.runtime.launch.RankFailure` with every rank killed.
    """
    from ..runtime.launch import spawn_local

    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise UsageError(f"world must be a whole number >= 1, got {world!r}")
    _check_before_spawn(world, timeout_s, kwargs)
    if "sizes" in kwargs:  # parse here, so a typo fails before any process starts
        kwargs["sizes"] = parse_sizes(kwargs["sizes"])
    results = spawn_local(
        _local_worker, world, args=(kwargs, show_progress), backend="gloo", timeout_s=timeout_s
    )
    return results[0]


def _check_before_spawn(world: int, timeout_s: Any, kwargs: dict[str, Any]) -> None:
    """UsageError for what :func:`run` would refuse inside every spawned rank (a traceback per
    rank): the timeout (:func:`~parastrat.runtime.launch.check_seconds`, as ``spawn_local``
    checks it), iterations, warm-up, a dtype given by name and the ops."""
    from ..runtime.launch import check_seconds

    check_seconds("timeout_s", timeout_s)
    check_counts(kwargs.get("iters", 20), kwargs.get("warmup", 5))
    dtype = kwargs.get("dtype", "float32")
    if isinstance(dtype, str):
        dtype_name(dtype)
    resolve_ops(kwargs.get("ops"), world)


def _local_worker(rank: int, world: int, kwargs: dict[str, Any], show_progress: bool) -> list[Row]:
    """One spawned rank of :func:`run_local`: rank 0 may draw the progress bar."""
    if show_progress and rank == 0:
        with progress_bar() as progress:
            return run(progress=progress, **kwargs)
    return run(**kwargs)


class progress_bar:
    """A rich progress bar on stderr, usable as a :data:`ProgressFn` (stdout stays JSON-clean).

    When stderr is not a terminal (a pipe, a log file, a batch job) a bar would draw nothing, so
    one plain line per measured row is written instead: logs keep the progress."""

    def __init__(self, description: str = "benchmarking"):
        import sys
        import time

        self._lines = not sys.stderr.isatty()
        self._t0 = time.monotonic()
        self._description = description
        if self._lines:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task(description, total=None)

    def __enter__(self) -> progress_bar:
        if not self._lines:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._lines:
            self._progress.stop()

    def __call__(self, row: Row, done: int, total: int) -> None:
        """Move the bar to ``done`` of ``total`` and show the row just measured (its group, op and
        size): the :data:`ProgressFn` call."""
        from .rows import format_bytes

        if self._lines:
            import sys
            import time

            sys.stderr.write(
                f"{self._description}: {done}/{total} {row.group}/{row.op} "
                f"{format_bytes(row.bytes)} ({time.monotonic() - self._t0:.1f} s)\n"
            )
            sys.stderr.flush()
            return
        self._progress.update(
            self._task,
            completed=done,
            total=total,
            description=f"{row.group}/{row.op} {format_bytes(row.bytes)}",
        )
