"""What the planner picks for Llama 3.1 8B, 70B and 405B on H100 with and without FSDP.

For each model and device count, :func:`parastrat.plan` at sequence 8192 (BF16, global batch
``4 x devices`` sequences, the CLI's default) twice: FSDP off (today's search: TP, PP, VPP, CP,
micro-batch, recompute, with the distributed optimizer) and ``fsdp="auto"`` (each of those also
as FSDP and HSDP at ``optim_grads`` and ``optim_grads_params``).  Prints the chosen strategy, its
predicted throughput and peak memory per GPU, and :func:`~parastrat.planner.explain.fsdp_verdict`
(why the FSDP choice wins or loses), as a Markdown table (``docs/fsdp.md`` holds its output).

    python benchmarks/fsdp_plans.py            # 8B, 70B, 405B on 8, 64, 128, 512 H100
    python benchmarks/fsdp_plans.py --short    # CI subset: 8B on 8, 70B on 64
"""

from __future__ import annotations

import argparse
import time

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.planner.explain import fsdp_verdict
from parastrat.spec.hardware import GiB

MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b")
DEVICES = (8, 64, 128, 512)
SHORT = (("llama3.1-8b", 8), ("llama3.1-70b", 64))
SEQ = 8192


def row(model: str, n: int, fsdp: str | None) -> tuple[str, str]:
    """(table cells, verdict) of one plan."""
    cluster = ps.Cluster("h100", n)
    try:
        p = ps.plan(ps.models.get(model), cluster, seq_len=SEQ, global_batch_size=4 * n, fsdp=fsdp)
    except UsageError:
        return "nothing fits | - | -", ""
    b = p.best
    cells = (
        f"{b.strategy} mbs{b.micro_batch_size} {b.recompute} | "
        f"{b.step.tokens_per_s_per_gpu:,.0f} | {b.memory.peak_bytes / GiB:.1f}"
    )
    return cells, fsdp_verdict(p) if fsdp else ""


def main() -> None:
    """Print the table (and each FSDP verdict under it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="a subset for CI")
    args = ap.parse_args()
    cases = SHORT if args.short else tuple((m, n) for m in MODELS for n in DEVICES)
    print(
        "| model | H100 | FSDP | chosen strategy | tokens/s/GPU | peak GiB |\n"
        "|---|---|---|---|---|---|"
    )
    verdicts = []
    start = time.perf_counter()
    for model, n in cases:
        for fsdp in (None, "auto"):
            cells, verdict = row(model, n, fsdp)
            print(f"| {model} | {n} | {'auto' if fsdp else 'off'} | {cells} |", flush=True)
            if verdict:
                verdicts.append(f"- {model} on {n}: {verdict}")
    print()
    print("\n".join(verdicts))
    print(f"\n{len(cases) * 2} plans in {time.perf_counter() - start:.0f} s (seq {SEQ}, bf16)")


if __name__ == "__main__":
    main()
