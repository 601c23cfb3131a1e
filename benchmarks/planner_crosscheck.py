"""Out-of-sample check: the step model against a release it was never compared with.

``benchmarks/data/mb_2511_summary.csv`` holds every row of the "25.11 NeMo Container" section
of Megatron Bridge's ``docs/performance-summary.md`` (DGX-GB300, DGX-GB200, DGX-B200, DGX-H100;
one row per precision where a cell gives two).  No constant or mechanism of the model was
chosen with these rows in view; the in-sample tables are ``published_configs.csv`` and the
2021 table (``benchmarks/planner_accuracy.py``).  The H100 Qwen3-235B-A22B row is left out:
its cells are shifted in the source (the global batch is missing).

Each row is priced as a user who knows only the table would price it: the published layout
(``FSDP = 1``: Megatron FSDP over the data-parallel ranks, ZeRO-3), precision (``FP8-CS`` is
FP8 current scaling, ``FP8-MX`` MXFP8), micro and global batch, default implementation switches
(``Switches()``), and the cheapest recompute mode that fits memory.  ``--recipe-offload``
adds the CPU activation offloading the rows' recipes set (``offload_rows.csv``).
``pub/best``: the published layout's predicted throughput over the best of
``plan()`` with the same switches (``--no-plans`` skips the plans).

    python benchmarks/planner_crosscheck.py
    python benchmarks/planner_crosscheck.py --no-plans --ablate sync_drain   # a mechanism off
    python benchmarks/planner_crosscheck.py --no-plans --host-op-us x86=37   # host sensitivity
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

from planner_accuracy import accelerator_for, add_model_options, model_options

import parastrat as ps
from parastrat.errors import SpecError, StrategyError
from parastrat.estimate.memory import estimate_memory
from parastrat.planner.search import pipeline_variants
from parastrat.spec.workload import Mechanisms

DATA = Path(__file__).resolve().parent / "data" / "mb_2511_summary.csv"
#: The table's precision spellings -> parastrat's.
PRECISION = {"BF16": "bf16", "FP8-CS": "fp8", "FP8-MX": "mxfp8"}
#: The recipes' ``cpu_offloading_num_layers`` by (preset, gpu, precision), read from the
#: offloading cross-check's table (``offload_rows.csv``, with the recipe file each comes from).
OFFLOAD_ROWS = DATA.parent / "offload_rows.csv"


def offload_layers() -> dict[tuple[str, str, str], int]:
    """Layers each row's recipe offloads (absent: none)."""
    with open(OFFLOAD_ROWS) as fh:
        return {
            (r["preset"], r["gpu"], r["precision"]): int(r["cpu_offload_layers"])
            for r in csv.DictReader(fh)
        }


MODES = ("none", "selective", "full")


def strategy_of(row: dict[str, str], model: ps.ModelSpec) -> ps.Strategy:
    """The published layout as a Strategy (the planner's first pipeline split for it)."""
    n, tp, cp = int(row["num_gpus"]), int(row["tp"]), int(row["cp"])
    pp, vpp = int(row["pp"]), int(row["vpp"] or 1)
    split = (pipeline_variants(model, pp, vpp) or ({},))[0] if pp > 1 else {}
    fsdp: dict = {}
    if row["fsdp"] == "1":
        fsdp = {"dp_shard": n // (tp * pp * cp), "fsdp": "optim_grads_params"}
    kw = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=int(row["ep"]), sp=tp > 1)
    return ps.Strategy(**kw, **split, **fsdp).with_world_size(n)


def switches_for(
    row: dict[str, str], offload: bool, mechanisms: Mechanisms | None = None
) -> ps.Switches:
    """Default switches, plus the recipe's CPU offloading when asked and priced, with the cost
    model's ``mechanisms`` (default: every one on)."""
    layers = offload_layers().get((row["preset"], row["gpu"], row["precision"]), 0)
    return ps.Switches(
        cpu_offload_layers=layers if offload else 0, mechanisms=mechanisms or Mechanisms()
    )


def best_ratio(model, cluster, switches, kw: dict, predicted: float) -> float:
    """The published layout's predicted throughput over the plan's best (same switches; the
    plan chooses CPU offloading itself)."""
    if getattr(switches, "cpu_offload_layers", 0):
        switches = replace(switches, cpu_offload_layers=0)
    plan = ps.plan(
        model,
        cluster,
        switches,
        seq_len=kw["seq_len"],
        global_batch_size=kw["global_batch_size"],
        precision=kw["precision"],
        top_k=1,
    )
    return predicted / plan.best.step.tokens_per_s_per_gpu


def price(
    row: dict[str, str],
    offload: bool,
    plans: bool,
    mechanisms: Mechanisms | None = None,
    host_op: dict[str, float] | None = None,
) -> dict:
    """One row: the published figure, the prediction and the recompute mode that fits
    (``host_op``: :func:`planner_accuracy.host_op_override`'s seconds per host operation)."""
    model = ps.models.get(row["preset"])
    accel = accelerator_for(row["gpu"], host_op)
    cluster = ps.Cluster(accelerator=accel, num_devices=int(row["num_gpus"]))
    strategy = strategy_of(row, model)
    base = switches_for(row, offload, mechanisms)
    kw = dict(
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["gbs"]),
        micro_batch_size=int(row["mbs"]),
        precision=PRECISION[row["precision"]],
    )
    modes = ("none",) if getattr(base, "cpu_offload_layers", 0) else MODES
    for mode in modes:
        sw = base.with_recompute(mode)
        fits = estimate_memory(model, strategy, sw, **kw).fits(cluster.accel)
        if fits or mode == modes[-1]:
            step = ps.estimate_step(model, strategy, cluster, sw, **kw)
            break
    pub = float(row["tokens_per_s_per_gpu"])
    pred = step.tokens_per_s_per_gpu
    ratio = best_ratio(model, cluster, base, kw, pred) if plans else float("nan")
    return {
        "ratio": ratio,
        "row": row,
        "strategy": str(strategy),
        "mode": mode,
        "fits": fits,
        "pub": pub,
        "pred": pred,
        "err": (pred - pub) / pub,
        "moe": model.is_moe,
    }


def mape(rows: list[dict]) -> float:
    return 100 * sum(abs(r["err"]) for r in rows) / max(len(rows), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--recipe-offload", action="store_true", help="price the recipes' CPU offloading"
    )
    ap.add_argument("--no-plans", action="store_true", help="skip the plans (faster)")
    add_model_options(ap)
    args = ap.parse_args(argv)
    mechanisms, host_op = model_options(ap, args)
    with open(DATA) as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for row in rows:
        try:
            out.append(price(row, args.recipe_offload, not args.no_plans, mechanisms, host_op))
        except (SpecError, StrategyError) as err:
            print(f"{row['id']} {row['model']} {row['gpu']}: not priced ({err})")
    print(
        f"{'id':4} {'model':16} {'gpu':6} {'n':>5} {'prec':6} {'strategy':52} {'recompute':9} "
        f"{'fit':>3} {'published':>9} {'predicted':>9} {'error':>7} {'pub/best':>8}"
    )
    for r in out:
        row = r["row"]
        print(
            f"{row['id']:4} {row['model']:16} {row['gpu']:6} {row['num_gpus']:>5} "
            f"{row['precision']:6} {r['strategy'][:52]:52} {r['mode']:9} "
            f"{'yes' if r['fits'] else 'no':>3} {r['pub']:9.0f} {r['pred']:9.0f} "
            f"{100 * r['err']:+6.1f}% {r['ratio']:8.2f}"
        )
    dense = [r for r in out if not r["moe"]]
    moe = [r for r in out if r["moe"]]
    print(
        f"\nout-of-sample tokens/s/GPU MAPE {mape(out):.1f} % over {len(out)} rows "
        f"(dense {mape(dense):.1f} % over {len(dense)}, MoE {mape(moe):.1f} % over {len(moe)})"
    )
    ranked = [r for r in out if r["ratio"] == r["ratio"]]
    if ranked:
        within = sum(r["ratio"] >= 0.9 for r in ranked) / len(ranked)
        print(f"published layout within 10 % of the plan's best: {within:.0%} of {len(ranked)}")
    for gpu in ("gb300", "gb200", "b200", "h100"):
        sub = [r for r in out if r["row"]["gpu"] == gpu]
        d = [r for r in sub if not r["moe"]]
        m = [r for r in sub if r["moe"]]
        print(
            f"  {gpu:6} MAPE {mape(sub):5.1f} % (dense {mape(d):5.1f} % over {len(d)}, "
            f"MoE {mape(m):5.1f} % over {len(m)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
