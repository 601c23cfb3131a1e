"""How much does parastrat.bench's wrapper add to a collective's measured time, on gloo?

In one run of N local ranks, for each op and message size, rounds alternate between

- the wrapper: ``parastrat.bench.run(ops=[op], sizes=[S], iters=I, warmup=W)``, whose row
  reports the median over iterations of the slowest rank's time; and
- a bare ``torch.distributed`` loop over the same buffers (the tensors the wrapper's op
  allocates, passed straight to ``dist.all_reduce`` & co.), timed with the same estimator:
  per iteration a barrier, ``perf_counter`` around the one raw call, MAX over ranks, median
  over iterations.

The printed ratio is the median over rounds of wrapper / bare (each round pairs the two under
the same machine load; the ratio of the fastest iterations is printed too): it isolates what the
wrapper itself adds (dispatch through the op object, reset and check, barrier placement); the
target is within 5 % (0.95-1.05) at 1 MB and above.  For reference the script also prints a
back-to-back loop (barrier, I calls, mean per call), the other estimator people write by hand:
it differs from both because ranks drift apart without a barrier per call, not because of the
wrapper.

    python benchmarks/bench_overhead.py            # 4 ranks, 1 MB and 4 MB, 60 rounds x 10
    python benchmarks/bench_overhead.py --short    # CI: 2 ranks, 1 MB, 30 rounds x 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

OPS = ("all_reduce", "all_gather", "all_to_all", "ring")


def _raw_call(coll: Any, op: str) -> Any:
    """The bare torch.distributed call of ``op`` on ``coll``'s buffers."""
    import torch.distributed as dist

    if op == "all_reduce":
        buf = coll.buf.zero_()  # zeros stay zeros: no overflow over many sums
        call = lambda: dist.all_reduce(buf)  # noqa: E731
    elif op == "all_gather":
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        call = lambda: fn(coll.out, coll.inp)  # noqa: E731
    elif op == "all_to_all":
        call = lambda: dist.all_to_all_single(coll.out, coll.inp)  # noqa: E731
    elif op == "ring":
        rank, n = dist.get_rank(), dist.get_world_size()

        def call() -> None:
            reqs = dist.batch_isend_irecv(
                [
                    dist.P2POp(dist.isend, coll.send, (rank + 1) % n),
                    dist.P2POp(dist.irecv, coll.recv, (rank - 1) % n),
                ]
            )
            for r in reqs:
                r.wait()
    else:
        raise ValueError(op)
    return call


def _slowest(values: list[float]) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _bare_loop(call: Any, iters: int, warmup: int) -> tuple[float, float]:
    """(median, min) over iterations of the slowest rank's time of one raw call, barrier
    before each."""
    import torch.distributed as dist

    times = []
    for i in range(warmup + iters):
        dist.barrier()
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    slowest = _slowest(times)
    return statistics.median(slowest), min(slowest)


def _back_to_back(call: Any, iters: int) -> float:
    """Barrier, ``iters`` calls in a row, mean per call; slowest rank."""
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return _slowest([(time.perf_counter() - start) / iters])[0]


def _rank_main(
    rank: int, world: int, sizes: list[int], rounds: int, iters: int, warmup: int
) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    from parastrat.bench import run
    from parastrat.bench.ops import Context, build

    ctx = Context(
        torch=torch, dist=dist, group=None, rank=rank, size=world, device="cpu", dtype=torch.float32
    )
    out = []
    for op in OPS:
        for size in sizes:
            wrapped, bare = [], []
            w_min, b_min = [], []
            call = _raw_call(build(op, ctx, size), op)
            for _ in range(rounds):
                row = run(ops=[op], sizes=[size], iters=iters, warmup=warmup)[0]
                wrapped.append(row.time_s)
                w_min.append(row.time_min_s)
                med, low = _bare_loop(call, iters, warmup)
                bare.append(med)
                b_min.append(low)
            b2b = [_back_to_back(call, iters) for _ in range(rounds)]
            out.append(
                {
                    "op": op,
                    "bytes": row.bytes,
                    "world": world,
                    "wrapper_s": statistics.median(wrapped),
                    "bare_s": statistics.median(bare),
                    # rounds are paired (same load on the machine): median of the ratios
                    "ratio": statistics.median(w / b for w, b in zip(wrapped, bare)),
                    "ratio_min": min(w_min) / min(b_min),
                    "back_to_back_s": statistics.median(b2b),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="the quick CI configuration")
    p.add_argument("--world", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    from parastrat.bench import format_bytes, parse_sizes
    from parastrat.runtime.launch import spawn_local

    world = args.world or (2 if args.short else 4)
    rounds = args.rounds or (30 if args.short else 60)
    iters = args.iters or 10
    sizes = parse_sizes("1MB" if args.short else "1MB,4MB")
    results = spawn_local(_rank_main, world, args=(sizes, rounds, iters, 1), timeout_s=900)[0]
    print(
        f"wrapper vs bare torch.distributed loop, gloo, {world} ranks, "
        f"{rounds} rounds x {iters} iterations"
    )
    print(
        f"{'op':12s} {'size':>6s} {'wrapper ms':>11s} {'bare ms':>9s} {'ratio':>6s} "
        f"{'ratio of minima':>16s} {'back-to-back ms':>16s}"
    )
    worst = 0.0
    for r in results:
        print(
            f"{r['op']:12s} {format_bytes(r['bytes']):>6s} {r['wrapper_s'] * 1e3:11.3f} "
            f"{r['bare_s'] * 1e3:9.3f} {r['ratio']:6.3f} {r['ratio_min']:16.3f} "
            f"{r['back_to_back_s'] * 1e3:16.3f}"
        )
        worst = max(worst, abs(r["ratio"] - 1))
    geo = statistics.geometric_mean(r["ratio"] for r in results)
    print(
        f"geometric mean of the ratios: {geo:.3f}; largest deviation from 1: {worst:.1%} "
        "(target <= 5 % at >= 1 MB)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
