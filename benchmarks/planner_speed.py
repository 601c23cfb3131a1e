"""Planner speed: candidates evaluated per second and the wall time of ``plan``.

Cases: DeepSeek-V3 on 1,024 H100 (seq 4096, global batch 8192, FP8) and Llama 3.1 405B on
16,384 H100 (seq 8192, global batch 2048, FP8), plus Llama 3 70B on 64 H100.  Each plan runs
``--repeat`` times in a fresh process state (caches cleared) and the best wall time is
reported.  Columns: legal strategies enumerated, (strategy, micro-batch) lower bounds computed,
full step-time pricings, memory checks; cand/s = (bounds + pricings + memory checks) / wall.

Then the sizing searches, each a chain of plans: ``parastrat size`` over the seven NVIDIA
presets (the fewest devices, up to 16,384, that train the budget by the deadline) and
``plan-dit --smallest --min-rps`` (the fewest devices that serve a request rate), with the
wall time and the answer.

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
    _sizing(repeat)
    return 0


#: (model, seq, global batch, precision, tokens, days) sized over :data:`SIZED_ON`.
SIZING = (
    ("llama3-70b", 8192, 2048, "bf16", "15T", 90),
    ("deepseek-v3", 4096, 8192, "fp8", "15T", 60),
)
SIZED_ON = ("a100", "h100", "h200", "b200", "gb200", "b300", "gb300")


def _sizing(repeat: int) -> None:
    """Wall time of the two sizing searches (best of ``repeat``, caches cleared)."""
    from parastrat.planner.dit_sizing import smallest_dit
    from parastrat.planner.sizing import size

    print(f"\n{'sizing search':<58} {'wall s':>7}  answer")
    for name, seq, gbs, precision, tokens, days in SIZING:
        wl = ps.Workload(model=name, seq_len=seq, global_batch_size=gbs, precision=precision)
        budget = ps.TrainingBudget(tokens, days=days)
        best_t, answers = _timed(
            repeat, lambda wl=wl, budget=budget: size(wl, SIZED_ON, budget, max_devices=16384)
        )
        met = [a for a in answers if a.devices]
        first = f"{met[0].accelerator} x {met[0].devices:,}" if met else "none"
        print(
            f"{f'size {name}, {budget}, {len(SIZED_ON)} accelerators':<58} {best_t:7.3f}  {first}"
        )
    cluster = ps.Cluster("h100", num_devices=16384)
    best_t, served = _timed(
        repeat,
        lambda: smallest_dit(
            "flux.1-dev",
            cluster,
            height=1024,
            width=1024,
            steps=28,
            min_requests_per_s=100,
            max_latency_s=3,
        ),
    )
    label = "plan-dit --smallest flux.1-dev, 100 req/s within 3 s, h100"
    print(f"{label:<58} {best_t:7.3f}  {served.devices:,} devices, {served.best.strategy}")


def _timed(repeat: int, run):
    """(best wall seconds of ``repeat`` runs with caches cleared, the last result)."""
    best_t, result = float("inf"), None
    for _ in range(repeat):
        clear_caches()
        t0 = time.perf_counter()
        result = run()
        best_t = min(best_t, time.perf_counter() - t0)
    return best_t, result


if __name__ == "__main__":
    sys.exit(main())
