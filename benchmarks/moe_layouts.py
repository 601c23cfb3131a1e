"""Out-of-sample ranking check: does the step model order MoE layouts of one job as measured?

``benchmarks/data/moe_zoo_layouts.csv`` holds the Qwen3-235B-A22B measurements of the
Megatron MoE Model Zoo (``yanring/Megatron-MoE-ModelZoo``, ``best_practice/Qwen3`` and
``best_practice/qwen3``): five layouts of one job on 256 H100 (BF16, sequence 4,096, global
batch 2,048: cross-node EP 32 with and without combined-1F1B overlap, and three intra-node
EP 8 layouts), the same model on 256 H100 at 16k-128k tokens with forced and with real
(dropless, auxiliary-loss) routing, and three GB200 / GB300 runs.  None of these rows was used
to choose a constant or a mechanism.  The accuracy tables (``planner_accuracy.py``,
``planner_crosscheck.py``) compare one published layout per job; this table asks the question
a planner must get right first: of two layouts of the same job, which is faster?

Each row is priced as the Model Zoo ran it (``sbatch_benchmarking.sh`` and the model's YAML
at the same repository): Megatron-LM with the distributed optimizer and DP overlap, BF16 with
``--tp-comm-overlap`` and gradients accumulated and reduced in FP32 (Megatron-LM sets
``accumulate_allreduce_grads_in_fp32`` for BF16), MXFP8 without TP overlap, the dispatcher of
the row (``deepep`` / ``hybridep``: Megatron's flex dispatcher; ``alltoall``), the combined
1F1B overlap where the row has it, the recompute modules of the row's command
(``layernorm+moe_act``, ``layernorm+moe``; ``full``; ``none``), TE CUDA graphs of the scopes
the command names, the row's routing (``balance``: ``forced`` for the commands'
``--moe-router-force-load-balancing``, ``aux_loss`` for the dropless runs), and embedding /
loss counted in the pipeline split (the YAML's
``--account-for-*-in-pipeline-split``).  Measured and predicted throughput are compared in
model TFLOP/s per GPU (the table's unit; the step model's FLOP count matches Megatron's to
within 1 % on these rows: 148.3 GFLOP per token against 245 TFLOP/s x 19.7 s / 8,192 tokens
per GPU = 147.3).

Left out, with the reason: the GB200 MXFP8 row (fine-grained activation offloading of
``expert_fc1`` / ``moe_act``, not modelled).  The H100 4k rows ran two code revisions
(``code``): rows of one revision are the sharper ranking test, and the script counts them
apart.  Forced and dropless rows of one layout are compared as what real routing costs.

    python benchmarks/moe_layouts.py
    python benchmarks/moe_layouts.py --host-op-us x86=37   # host-constant sensitivity
    python benchmarks/moe_layouts.py --ablate imbalance     # a mechanism off
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace
from itertools import combinations
from math import nan
from pathlib import Path

from planner_accuracy import accelerator_for, add_model_options, model_options
from planner_crosscheck import best_ratio, strategy_of

import parastrat as ps
from parastrat.estimate.efficiency import host_op_time
from parastrat.estimate.memory import estimate_memory
from parastrat.planner.sensitivity import host_break_even, host_clause, step_cost
from parastrat.spec.workload import Mechanisms

DATA = Path(__file__).resolve().parent / "data" / "moe_zoo_layouts.csv"


def switches_of(row: dict[str, str], mechanisms: Mechanisms) -> ps.Switches:
    """The implementation switches of the row's command (see the module docstring)."""
    recompute = row["recompute"]
    mode = recompute
    if recompute not in ("none", "full"):  # selective: the modules the command names
        mechanisms = replace(mechanisms, recompute_modules=tuple(recompute.split("+")))
        mode = "selective"
    mechanisms = replace(mechanisms, balance=row["balance"])
    bf16 = row["precision"] == "bf16"
    return ps.Switches(
        recompute=mode,
        tp_comm_overlap=bf16 and int(row["tp"]) > 1,
        grad_reduce_in_fp32=True,
        moe_dispatcher=row["dispatcher"],
        moe_a2a_overlap=row["a2a_overlap"] == "1",
        cuda_graphs=row["cuda_graphs"].replace("+", ",") or None,
        mechanisms=mechanisms,
    )


def measured_tokens(row: dict[str, str], flops_per_token: float) -> float:
    """The row's measured tokens/s/GPU: from its step time where the table gives one, else
    from its TFLOP/s at ``flops_per_token`` (the step model's count, Megatron's to within 1 %
    on the rows with both figures)."""
    if row["step_s"]:
        return int(row["gbs"]) * int(row["seq_len"]) / (float(row["step_s"]) * int(row["num_gpus"]))
    return float(row["tflops_per_gpu"]) * 1e12 / flops_per_token


def price(
    row: dict[str, str], mechanisms: Mechanisms, host_op: dict[str, float], plans: bool = False
) -> dict:
    """One row: measured and predicted TFLOP/s per GPU (and step seconds, tokens/s/GPU), fit,
    and with ``plans`` the predicted throughput over the plan's best (``ratio``)."""
    model = ps.models.get(row["preset"])
    cluster = ps.Cluster(
        accelerator=accelerator_for(row["gpu"], host_op), num_devices=int(row["num_gpus"])
    )
    strategy = strategy_of(row, model)
    sw = switches_of(row, mechanisms)
    kw = dict(
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["gbs"]),
        micro_batch_size=int(row["mbs"]),
        precision=row["precision"],
    )
    step = ps.estimate_step(model, strategy, cluster, sw, **kw)
    fits = estimate_memory(model, strategy, sw, **kw).fits(cluster.accel)
    measured = float(row["tflops_per_gpu"])
    tokens = step.tokens_per_s_per_gpu
    cost = step_cost(ps.Workload(model=model, **kw), strategy, sw)
    ratio = best_ratio(model, cluster, replace(sw, recompute=None), kw, tokens) if plans else nan
    return {
        "row": row,
        "strategy": str(strategy),
        "fits": fits,
        "measured": measured,
        "predicted": step.tflops_per_gpu,
        "step": step.step_time_s,
        "err": (step.tflops_per_gpu - measured) / measured,
        "recompute": step.recompute,
        "tokens": (measured_tokens(row, step.model_flops_per_token), tokens),
        "ratio": ratio,
        "cost": cost,
        "cluster": cluster,
    }


def pairs(priced: list[dict]) -> list[tuple[dict, dict, bool]]:
    """Every pair of rows of one job with different measurements, faster-measured first, and
    whether the model orders them the same way."""
    out = []
    for a, b in combinations(priced, 2):
        if a["row"]["job"] != b["row"]["job"] or a["measured"] == b["measured"]:
            continue
        fast, slow = (a, b) if a["measured"] > b["measured"] else (b, a)
        out.append((fast, slow, fast["predicted"] > slow["predicted"]))
    return out


def routing_pairs(priced: list[dict]) -> list[tuple[dict, dict]]:
    """(forced, dropless) rows of one layout and job that differ only in routing: what the
    real router's imbalance costs, measured and as the ``imbalance`` mechanism prices it."""

    def key(p: dict) -> tuple:
        r = p["row"]
        return (r["gpu"], r["num_gpus"], r["seq_len"], r["gbs"], r["mbs"], p["strategy"])

    forced = {key(p): p for p in priced if p["row"]["balance"] == "forced"}
    return [
        (forced[key(p)], p) for p in priced if p["row"]["balance"] != "forced" and key(p) in forced
    ]


def _turn(fast: dict, slow: dict, ok: bool) -> str:
    """Where the host constant turns the model's order of a pair
    (:func:`~parastrat.planner.sensitivity.host_break_even`), in words."""
    even = host_break_even(fast["cost"], slow["cost"], fast["cluster"])
    if even is None:
        return ""
    word = "reversed" if ok else "as measured"
    return f"; {word} {host_clause(even, host_op_time(fast['cluster'].accel))}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-plans", action="store_true", help="skip the plans (faster)")
    add_model_options(ap)
    args = ap.parse_args(argv)
    mechanisms, host_op = model_options(ap, args)
    with open(DATA) as fh:
        priced = [price(r, mechanisms, host_op, not args.no_plans) for r in csv.DictReader(fh)]
    print(
        f"{'id':4} {'gpu':6} {'strategy':44} {'dispatch':8} {'ovl':3} {'recompute':17} "
        f"{'fit':3} {'meas TF':>7} {'pred TF':>7} {'error':>7} {'meas s':>6} {'pred s':>6} "
        f"{'pub/best':>8}"
    )
    for p in priced:
        r = p["row"]
        print(
            f"{r['id']:4} {r['gpu']:6} {p['strategy'][:44]:44} {r['dispatcher']:8} "
            f"{r['a2a_overlap']:>3} {r['recompute']:17} {'yes' if p['fits'] else 'no':3} "
            f"{p['measured']:7.0f} {p['predicted']:7.0f} {100 * p['err']:+6.1f}% "
            f"{r['step_s'] or '-':>6} {p['step']:6.1f} {p['ratio']:8.2f}"
        )
    mape = 100 * sum(abs(p["err"]) for p in priced) / len(priced)
    print(f"\nTFLOP/s per GPU MAPE {mape:.1f} % over {len(priced)} rows")
    every = pairs(priced)
    same = [t for t in every if t[0]["row"]["code"] == t[1]["row"]["code"]]
    print("pairs of layouts of one job (measured faster first):")
    for fast, slow, ok in every:
        print(
            f"  [{'agrees' if ok else 'REVERSED'}] {fast['row']['id']} "
            f"{fast['measured']:.0f} > {slow['row']['id']} {slow['measured']:.0f} TF measured; "
            f"predicted {fast['predicted']:.0f} vs {slow['predicted']:.0f}{_turn(fast, slow, ok)}"
        )
    print(
        f"ordered as measured: {sum(t[2] for t in every)} of {len(every)} pairs; "
        f"of one code revision: {sum(t[2] for t in same)} of {len(same)}"
    )
    print("dropless routing against forced balance, one layout (throughput lost):")
    for forced, real in routing_pairs(priced):
        lost = 1 - real["measured"] / forced["measured"]
        priced_lost = 1 - real["predicted"] / forced["predicted"]
        print(
            f"  {real['row']['id']} vs {forced['row']['id']} (seq {real['row']['seq_len']}, "
            f"{real['row']['balance']}): measured {lost:.1%}, priced {priced_lost:.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
