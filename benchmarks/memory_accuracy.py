"""Memory estimator against configurations that ran in production.

Every row of ``benchmarks/data/published_configs.csv`` (Megatron Bridge / NeMo performance
recipes on H100 and GB200) trained without running out of memory, so each must be predicted to
fit its device.  The recipes' recompute settings are not in the table: each row is estimated
with "selective" (Megatron's default) and the script also prints "none" and "full".  FP8 rows
use ``fp8_param_gather=True`` as Bridge's FP8/MXFP8 mixed-precision recipes set it.  Sequence
parallelism is on whenever TP > 1 (the recipes' setting, and required with EP).

The rows of ``megatron_2021_table1.csv`` (Narayanan et al. 2021, A100 80 GB, full recompute,
no distributed optimizer) are checked the same way.

    python benchmarks/memory_accuracy.py           # all rows
    python benchmarks/memory_accuracy.py --short   # CI: the same rows (it is fast), terse
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import parastrat as ps
from parastrat.estimate.memory import estimate_memory
from parastrat.planner.search import pipeline_variants
from parastrat.spec.models import PUBLISHED_PARAMS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "data"  # published tables, sources in its README.md
GiB = 1024**3


def _int(row: dict, key: str, default: int | None = 1) -> int | None:
    return int(row[key]) if row.get(key) else default


def published_rows() -> list[dict]:
    """Estimate each published config; returns one result dict per row."""
    out = []
    with open(REFERENCE / "published_configs.csv") as fh:
        for row in csv.DictReader(fh):
            model = ps.models.get(row["preset"])
            accel = ps.hardware.get(row["gpu"])
            tp, pp, vpp = _int(row, "tp"), _int(row, "pp"), _int(row, "vpp")
            # Layers that do not split evenly are placed as the planner would place them
            # (Megatron's account_for_embedding/loss or an uneven first/last split).
            split = (pipeline_variants(model, pp, vpp) or ({},))[0]
            strategy = ps.Strategy(
                tp=tp,
                pp=pp,
                vpp=vpp,
                cp=_int(row, "cp"),
                ep=_int(row, "ep"),
                etp=_int(row, "etp", None),
                sp=tp > 1,
                **split,
            )
            strategy = strategy.with_world_size(int(row["num_gpus"]))
            peaks = {}
            notes: list[str] = []
            for mode in ("none", "selective", "full"):
                rep = estimate_memory(
                    model,
                    strategy,
                    seq_len=int(row["seq_len"]),
                    micro_batch_size=_int(row, "mbs"),
                    global_batch_size=int(row["gbs"]),
                    recompute=mode,
                    precision=row["precision"],
                )
                peaks[mode] = rep.peak_bytes
                notes = [n for n in rep.notes if "account_for" in n or "uneven" in n]
            out.append(
                {
                    "id": row["id"],
                    "model": row["preset"],
                    "gpu": accel.name,
                    "strategy": str(strategy),
                    "precision": row["precision"],
                    "seq": int(row["seq_len"]),
                    "mbs": _int(row, "mbs"),
                    "capacity": accel.memory_bytes,
                    "peaks": peaks,
                    "fits": peaks["selective"] <= accel.memory_bytes,
                    "notes": notes,
                }
            )
    return out


def table1_rows() -> list[dict]:
    """Narayanan et al. 2021 Table 1 (GPT, A100 80 GB, full recompute, fp16, no dist-opt)."""
    out = []
    accel = ps.hardware.get("a100")
    with open(REFERENCE / "megatron_2021_table1.csv") as fh:
        for row in csv.DictReader(fh):
            h, layers = int(row["hidden"]), int(row["layers"])
            model = ps.ModelSpec(
                name=f"gpt-{row['params_billion']}b",
                num_layers=layers,
                hidden_size=h,
                num_attention_heads=int(row["heads"]),
                ffn_hidden_size=4 * h,
                vocab_size=int(row["vocab"]),
                max_position_embeddings=int(row["seq_len"]),
            )
            tp, pp = int(row["tp"]), int(row["pp"])
            strategy = ps.Strategy(tp=tp, pp=pp).with_world_size(int(row["num_gpus"]))
            rep = estimate_memory(
                model,
                strategy,
                seq_len=int(row["seq_len"]),
                micro_batch_size=1,
                global_batch_size=int(row["global_batch"]),
                recompute="full",
                distributed_optimizer=False,
            )
            out.append(
                {
                    "id": f"2021-{row['params_billion']}B",
                    "model": model.name,
                    "gpu": "a100",
                    "strategy": str(strategy),
                    "precision": "fp16",
                    "seq": int(row["seq_len"]),
                    "mbs": 1,
                    "capacity": accel.memory_bytes,
                    "peaks": {"full": rep.peak_bytes},
                    "fits": rep.fits(accel),
                    "params_error": model.num_params / (float(row["params_billion"]) * 1e9) - 1,
                    "notes": [],
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="terse output for CI")
    args = ap.parse_args(argv)

    print("Parameter counts from the shapes vs the published totals / active counts:")
    worst = 0.0
    for name, (total, active) in PUBLISHED_PARAMS.items():
        m = ps.models.get(name)
        e_total = m.num_params / total - 1
        e_active = (m.num_active_params / active - 1) if active else None
        worst = max(worst, abs(e_total), abs(e_active or 0.0))
        act = f"active {m.num_active_params / 1e9:8.2f}B ({e_active:+.1%})" if active else "dense"
        print(f"  {name:16} total {m.num_params / 1e9:8.2f}B ({e_total:+.1%})  {act}")
    print(f"largest parameter-count error: {worst:.1%}\n")

    rows = published_rows()
    print("Published production configs (peak GiB per rank; fits uses 'selective'):")
    print(
        f"{'id':>3} {'model':16} {'gpu':6} {'strategy':36} {'prec':6} "
        f"{'none':>6} {'select':>6} {'full':>6} {'device':>6}  fits"
    )
    for r in rows:
        p = r["peaks"]
        print(
            f"{r['id']:>3} {r['model']:16} {r['gpu']:6} {r['strategy']:36} "
            f"{r['precision']:6} {p['none'] / GiB:6.1f} {p['selective'] / GiB:6.1f} "
            f"{p['full'] / GiB:6.1f} {r['capacity'] / GiB:6.0f}  "
            f"{'yes' if r['fits'] else 'NO'}"
        )
        if not args.short:
            for n in r["notes"]:
                print(f"      note: {n}")
    fit = sum(r["fits"] for r in rows)
    print(f"published configs predicted to fit: {fit}/{len(rows)}")
    misses = [r for r in rows if not r["fits"]]
    for r in misses:
        print(f"  does not fit: id {r['id']} {r['model']} {r['strategy']}")

    t1 = table1_rows()
    print("\nNarayanan et al. 2021 Table 1 (A100 80 GB, full recompute, no distributed optimizer):")
    for r in t1:
        print(
            f"  {r['id']:>10} {r['strategy']:28} peak {r['peaks']['full'] / GiB:6.1f} GiB  "
            f"params {r['params_error']:+.1%}  {'fits' if r['fits'] else 'NO'}"
        )
    fit1 = sum(r["fits"] for r in t1)
    print(f"2021 configs predicted to fit: {fit1}/{len(t1)}")
    return 0 if not misses and fit1 == len(t1) else 1


if __name__ == "__main__":
    sys.exit(main())
