"""Write the step model's track record (``parastrat/estimate/track_record.json``) from the
accuracy benchmarks' own output: every published run they price, grouped by kind (dense / MoE)
and platform (x86- or Grace-hosted NVIDIA, Ascend); and the NVIDIA training runs one by one,
with their layouts and sources (``parastrat/estimate/published_runs.json``).

    python tools/gen_track_record.py           # rewrite the table, print it
    python tools/gen_track_record.py --check   # exit 1 when a file is stale

Run it after any change to the cost model; CI and the tests run ``--check``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import parastrat as ps
from parastrat.estimate.published_runs import RUNS_FILE, PublishedDiTRun, PublishedRun
from parastrat.estimate.track_record import RECORDS_FILE, TrackRecord, kind_of, platform_of
from parastrat.spec.workload import Mechanisms

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import dit_accuracy  # noqa: E402
import moe_layouts  # noqa: E402
import npu_training_accuracy  # noqa: E402
import planner_accuracy  # noqa: E402
import planner_crosscheck  # noqa: E402

TARGET = ROOT / "src" / "parastrat" / "estimate" / RECORDS_FILE
#: The published runs one by one (:mod:`parastrat.estimate.published_runs`).
RUNS_TARGET = TARGET.with_name(RUNS_FILE)
#: A published layout is "near the plan's best" at this share of its throughput or more.
NEAR_BEST = planner_accuracy.NEAR_BEST
#: Decimal places kept: enough to tell the table changed, few enough to read.
DIGITS = 4


def runs() -> list[dict[str, Any]]:
    """Every published run the three benchmarks price: its table, name, model, accelerator,
    signed tokens/s/GPU error and (NVIDIA runs) its predicted throughput over the plan's best
    with the same switches (``ratio``)."""
    out = []
    for r in planner_accuracy.published_rows(short=False, plans=True):
        err = (r["predicted"] - r["published"]) / r["published"]
        spec = ps.models.get(r["preset"])
        run = dict(table="published_configs", name=r["name"], gpu=r["gpu"], err=err, spec=spec)
        detail = PublishedRun(
            model=r["preset"],
            accelerator=r["gpu"],
            devices=r["devices"],
            **r["workload"],
            precision=r["precision"].lower(),
            strategy=r["layout"],
            recompute=r["recompute"],
            measured=r["published"],
            predicted=round(r["predicted"], 1),
            table="published_configs",
            source=_source(r["source"]),
        )
        out.append(run | dict(ratio=r["ratio"], detail=detail))
    with open(planner_crosscheck.DATA) as fh:
        for row in csv.DictReader(fh):
            r = planner_crosscheck.price(row, offload=False, plans=True)
            name = f"{row['model']} {row['num_gpus']}x{row['gpu']} {row['precision']}"
            spec = ps.models.get(row["preset"])
            run = dict(table="mb_2511_summary", name=name, gpu=row["gpu"], err=r["err"], spec=spec)
            detail = _row_run(
                row,
                "mb_2511_summary",
                precision=planner_crosscheck.PRECISION[row["precision"]],
                strategy=r["strategy"],
                recompute=r["mode"],
                measured=r["pub"],
                predicted=round(r["pred"], 1),
                source=_source(row["source"]),
            )
            out.append(run | dict(ratio=r["ratio"], detail=detail))
    out += zoo_runs()
    models = npu_training_accuracy.load_models()
    for r in npu_training_accuracy.price_all(short=False):
        if "skip" not in r:
            name = f"{r['model']} ({r['id']})"
            spec = models[r["model"]].spec
            gpu = npu_training_accuracy.ACCELERATOR
            out.append(
                dict(table="npu_training_measured", name=name, gpu=gpu, err=r["error"], spec=spec)
            )
    return out


def _row_run(row: dict[str, str], table: str, **priced: Any) -> PublishedRun:
    """A published run from a benchmark CSV row of ``table`` (its ``preset``, ``gpu``,
    ``num_gpus``, ``seq_len``, ``gbs``, ``mbs``) and what the benchmark priced."""
    return PublishedRun(
        model=row["preset"],
        accelerator=row["gpu"],
        devices=int(row["num_gpus"]),
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["gbs"]),
        micro_batch_size=int(row["mbs"]),
        table=table,
        **priced,
    )


def zoo_runs() -> list[dict[str, Any]]:
    """The Megatron MoE Model Zoo's layouts (``benchmarks/moe_layouts.py``), each with its
    signed error (model TFLOP/s, the table's unit; the step model counts Megatron's FLOPs) and
    its predicted throughput over the plan's best with the row's switches."""
    out = []
    with open(moe_layouts.DATA) as fh:
        for row in csv.DictReader(fh):
            r = moe_layouts.price(row, Mechanisms(), {}, plans=True)
            spec = ps.models.get(row["preset"])
            name = f"{row['model']} {row['num_gpus']}x{row['gpu']} ({row['id']})"
            measured, predicted = r["tokens"]
            via = "" if row["step_s"] else "; tokens/s/GPU from its TFLOP/s"
            detail = _row_run(
                row,
                "moe_zoo_layouts",
                precision=row["precision"],
                strategy=r["strategy"],
                recompute=r["recompute"],
                measured=round(measured, 1),
                predicted=round(predicted, 1),
                source=f"{_source(row['source'])}, row {row['id']}{via}",
            )
            run = dict(table="moe_zoo_layouts", name=name, gpu=row["gpu"], err=r["err"], spec=spec)
            out.append(run | dict(ratio=r["ratio"], detail=detail))
    return out


#: The publications behind the short ``source`` labels of ``published_configs.csv``
#: (``benchmarks/data/README.md``).
SOURCE_NAMES = {
    "MB archive": "Megatron Bridge performance archive",
    "MB summary": "Megatron Bridge docs/performance-summary.md",
    "NVIDIA-NeMo/Megatron-Bridge docs": "Megatron Bridge docs",
}


#: Where xDiT's FLUX.1-dev H100 table is published (``dit_accuracy.FLUX_DEV_H100_TABLE``).
FLUX_DEV_SOURCE = "github.com/xdit-project/xDiT @175e0bf : docs/performance/flux.md"


def _source(label: str) -> str:
    """A run's source as a reader can find it (the table's short labels spelled out, a commit
    shortened to its first seven digits)."""
    label = re.sub(r"@ ?([0-9a-f]{7})[0-9a-f]{33}", r"@\1", label)
    label = re.sub(r"\b([0-9a-f]{7})[0-9a-f]{33}\b", r"\1", label)
    for short, long in SOURCE_NAMES.items():
        if label.startswith(short):
            return long + label[len(short) :]
    return label


def dit_runs() -> list[dict[str, Any]]:
    """Every measured DiT inference run ``benchmarks/dit_accuracy.py`` prices, with its signed
    latency error: the rows of ``dit_measured.csv`` and its two cross-checks from xDiT's pages
    (HunyuanVideo on H100 / H20, FLUX.1-dev on H100)."""
    out = []
    for e in dit_accuracy.evaluate()["rows"]:
        name = f"{e['model']} {e['gpus']}x{e['device']} {e['split']} ({e['row']})"
        run = dict(table="dit_measured", name=name, gpu=e["device"], err=e["error"])
        out.append(run | dict(dit_detail=_dit_run(e)))
    for device, table in dit_accuracy.hunyuan().items():
        for n, row in table["rows"].items():
            err = row["predicted"] / row["measured"] - 1
            name = f"hunyuanvideo {n}x{device} U{n}"
            out.append(dict(table="xdit_hunyuanvideo", name=name, gpu=device, err=err))
    degrees = [d for d in dit_accuracy.FLUX_DEV_H100_TABLE for _ in (False, True)]
    flux = dit_accuracy.flux_dev_h100()
    for (u, r), (split, compiled, measured, predicted) in zip(degrees, flux, strict=True):
        name = f"flux.1-dev {split} {'compiled' if compiled else 'eager'}"
        detail = PublishedDiTRun(
            model="flux.1-dev",
            accelerator="h100",
            devices=u * r,
            height=1024,
            width=1024,
            frames=1,
            steps=28,
            ulysses=u,
            ring=r,
            cfg=1,
            compiled=compiled,
            scope="latency",
            measured_s=measured,
            predicted_s=round(predicted, 4),
            row="xDiT FLUX.1-dev H100 table",
            source=FLUX_DEV_SOURCE,
        )
        run = dict(table="xdit_flux_dev_h100", name=name, gpu="h100", err=predicted / measured - 1)
        out.append(run | dict(dit_detail=detail))
    return out


def _dit_run(e: dict[str, Any]) -> PublishedDiTRun:
    """One priced row of ``dit_accuracy.evaluate()`` as a published DiT run."""
    u, ring, cfg = e["degrees"]
    return PublishedDiTRun(
        model=e["model"],
        accelerator=e["device"],
        devices=e["gpus"],
        **e["workload"],
        ulysses=u,
        ring=ring,
        cfg=cfg,
        compiled=e["compiled"],
        scope="per step" if e["per_step"] else "latency",
        measured_s=e["measured"],
        predicted_s=round(e["predicted"], 4),
        row=e["row"],
        source=_source(e["source"].split(";")[0].strip()),
    )


@functools.cache
def priced() -> tuple[dict[str, Any], ...]:
    """:func:`runs` and :func:`dit_runs`, priced once per process."""
    return (*runs(), *dit_runs())


def _key(run: dict[str, Any]) -> tuple[str, str] | None:
    """A run's (kind, platform): DiT runs by accelerator, training runs by model kind and
    platform; None for a model of no class."""
    if "spec" not in run:
        return ("dit", run["gpu"])
    kind = kind_of(run["spec"])
    return None if kind is None else (kind, platform_of(ps.hardware.get(run["gpu"])))


def records(priced: Iterable[dict[str, Any]]) -> list[TrackRecord]:
    """The runs grouped by (kind, platform), one :class:`TrackRecord` per group."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in priced:
        key = _key(run)
        if key is not None:
            groups[key].append(run)
    out = []
    order = {"dense": 0, "moe": 1, "dit": 2}
    for (kind, platform), rows in sorted(
        groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])
    ):
        worst = max(rows, key=lambda r: abs(r["err"]))
        ratios = [r["ratio"] for r in rows if r.get("ratio", math.nan) == r.get("ratio", math.nan)]
        out.append(
            TrackRecord(
                kind=kind,
                platform=platform,
                runs=len(rows),
                mape=round(statistics.fmean(abs(r["err"]) for r in rows), DIGITS),
                bias=round(statistics.fmean(r["err"] for r in rows), DIGITS),
                worst=round(worst["err"], DIGITS),
                worst_run=worst["name"],
                accelerators=tuple(sorted({r["gpu"] for r in rows})),
                tables=tuple(sorted({r["table"] for r in rows})),
                metric="latency" if kind == "dit" else "tokens/s/GPU",
                planned=len(ratios),
                near_best=sum(x >= NEAR_BEST for x in ratios),
            )
        )
    return out


def render(recs: list[TrackRecord]) -> str:
    """The file's text: the records and how they were made."""
    doc = {
        "written_by": "tools/gen_track_record.py (do not edit by hand)",
        "error": "(predicted - published) / published of each record's metric",
        "records": [r.to_dict() for r in recs],
    }
    return json.dumps(doc, indent=1) + "\n"


def render_runs(priced: Iterable[dict[str, Any]]) -> str:
    """The published runs' file: every NVIDIA training run with its layout, and every measured
    DiT generation with its split, one by one."""
    doc = {
        "written_by": "tools/gen_track_record.py (do not edit by hand)",
        "predicted": "tokens/s/GPU of the layout priced with its recipe's switches",
        "runs": [run["detail"].to_dict() for run in priced if "detail" in run],
        "predicted_s": "seconds of the split priced as the DiT accuracy benchmark prices it",
        "dit_runs": [run["dit_detail"].to_dict() for run in priced if "dit_detail" in run],
    }
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = ap.parse_args(argv)
    recs = records(priced())
    for rec in recs:
        print(rec.summary())
    stale = 0
    for target, new in ((TARGET, render(recs)), (RUNS_TARGET, render_runs(priced()))):
        text = target.read_text() if target.exists() else ""
        if new == text:
            continue
        if args.check:
            print(f"{target.relative_to(ROOT)} is stale: run python tools/gen_track_record.py")
            stale = 1
            continue
        tmp = target.with_suffix(".tmp")
        tmp.write_text(new)
        tmp.replace(target)
    return stale


if __name__ == "__main__":
    sys.exit(main())
