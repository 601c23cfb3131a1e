"""Planner speed: candidates evaluated per second and the wall time of ``plan``.

Cases: DeepSeek-V3 on 1,024 H100 (seq 4096, global batch 8192, FP8) and Llama 3.1 405B on
16,384 H100 (seq 8192, global batch 2048, FP8), plus Llama 3 70B on 64 H100.  Each plan runs
``--repeat`` times in a fresh process state (caches cleared) and the best wall time is
reported.  Columns: legal strategies enumerated, (strategy, micro-batch) lower bounds computed,
full step-time pricings, memory checks; cand/s = (bounds + pricings + memory checks) / wall.

    python benchmarks/planner_speed.py            # all cases, 3 repeats
    python benchmarks/planner_speed.py --short    # CI: one repeat
"""

from __future__ import annotations

import argparse
import sys
import time

import parastrat as ps
from parastrat.planner.search import clear_caches, plan

CASES = (
    ("deepseek-v3", "h100", 1024, 4096, 8192),
    ("llama3.1-405b", "h100", 16384, 8192, 2048),
    ("llama3-70b", "h100", 64, 8192, 256),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="one repeat (CI)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    repeat = 1 if args.short else args.repeat
    print(
        f"{'case':<34} {'legal':>6} {'bounds':>7} {'priced':>7} {'mem':>6} {'wall s':>7} "
        f"{'cand/s':>8}  best"
    )
    for name, accel, n, seq, gbs in CASES:
        model = ps.models.get(name)
        cluster = ps.Cluster(accelerator=accel, num_devices=n)
        best_t, result = float("inf"), None
        for _ in range(repeat):
            clear_caches()
            t0 = time.perf_counter()
            result = plan(
                model, cluster, seq_len=seq, global_batch_size=gbs, precision="fp8", top_k=5
            )
            best_t = min(best_t, time.perf_counter() - t0)
        assert result is not None
        evaluated = result.evaluations
        print(
            f"{name + f' on {n} x {accel}':<34} {result.enumerated:>6} {result.bounded:>7} "
            f"{result.priced:>7} {result.memory_checks:>6} {best_t:7.3f} "
            f"{evaluated / best_t:8.0f}  "
            f"{result.best.label()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
