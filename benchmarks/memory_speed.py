"""How many memory estimates per second (the planner calls estimate_memory ~10^5 times).

Times ``estimate_memory`` over a mix of dense and MoE presets and strategies (PP 1-16, VPP,
EP) with the per-model constants warm, as in a planner's search, and prints estimates/s and
microseconds per estimate.

    python benchmarks/memory_speed.py           # 20,000 estimates
    python benchmarks/memory_speed.py --short   # CI: 2,000 estimates
"""

from __future__ import annotations

import argparse
import sys
import time

import parastrat as ps
from parastrat.estimate.memory import estimate_memory
from parastrat.planner.search import pipeline_variants

CASES = [
    ("llama3-8b", dict(tp=1), 8, 8192),
    ("llama3-70b", dict(tp=4, pp=8, vpp=5, sp=True), 64, 8192),
    ("llama3.1-405b", dict(tp=8, pp=16, vpp=4, cp=2, sp=True), 1024, 8192),
    ("qwen3-30b-a3b", dict(ep=16), 16, 4096),
    ("deepseek-v3", dict(tp=2, pp=8, vpp=4, ep=64, sp=True), 1024, 4096),
    ("mixtral-8x22b", dict(tp=2, pp=4, ep=8, sp=True), 64, 4096),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="fewer estimates (CI)")
    ap.add_argument("-n", type=int, default=None, help="number of estimates")
    args = ap.parse_args(argv)
    n = args.n or (2_000 if args.short else 20_000)
    prepared = []
    for m, kw, w, seq in CASES:
        model = ps.models.get(m)
        split = (pipeline_variants(model, kw.get("pp", 1), kw.get("vpp", 1)) or ({},))[0]
        prepared.append((model, ps.Strategy(**kw, **split).with_world_size(w), seq))
    for model, strategy, seq in prepared:  # warm the per-model constants
        estimate_memory(model, strategy, seq_len=seq, global_batch_size=None)
    per_case = max(1, n // len(prepared))
    total = 0
    start = time.perf_counter()
    for model, strategy, seq in prepared:
        for i in range(per_case):
            estimate_memory(model, strategy, seq_len=seq, recompute=("selective", "full")[i & 1])
        total += per_case
    elapsed = time.perf_counter() - start
    print(
        f"{total} estimates in {elapsed:.3f} s: {total / elapsed:,.0f} estimates/s, "
        f"{elapsed / total * 1e6:.1f} us per estimate"
    )
    for model, strategy, seq in prepared:
        t0 = time.perf_counter()
        k = max(1, per_case // 4)
        for _ in range(k):
            estimate_memory(model, strategy, seq_len=seq)
        us = (time.perf_counter() - t0) / k * 1e6
        print(f"  {model.name:16} {strategy!s:40} {us:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
