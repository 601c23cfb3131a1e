"""CPU activation offloading against Megatron Bridge's published throughput.

For every row of ``benchmarks/data/offload_rows.csv`` (the Megatron Bridge 25.11 performance
summary's rows whose recipes offload activations: Llama 3 70B FP8-CS on 64 GB300 / GB200 with
Megatron FSDP, TP1 PP1, MBS 2, the recipe's offloaded layer count) it prints:

* the measured tokens/s/GPU and parastrat's prediction with the recipe's offloading
  (``Switches(cpu_offload_layers=N)``), its error, the peak memory per GPU and whether it fits;
* the ablation: offloading off, i.e. what parastrat had to predict before (full recompute,
  the only mode that fits) and, ignoring memory, no recompute at all;
* the offloading terms: the offloaded bytes per micro-batch, the host-link time, the part
  exposed, and the exposed part again with the host link at half its datasheet share (the
  link figure is a datasheet share, not a measured rate: docs/step-model.md);
* the fewest offloaded layers that fit, as ``plan`` chooses them.

    python benchmarks/offload_crosscheck.py
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import parastrat as ps
from parastrat.estimate.offload_step import offload_acts
from parastrat.spec.workload import Switches, Workload

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "benchmarks" / "data" / "offload_rows.csv"
GB, GiB = 1e9, 2**30


def rows() -> list[dict[str, str]]:
    """The CSV's rows."""
    with ROWS.open() as f:
        return list(csv.DictReader(f))


def setting(row: dict[str, str]) -> tuple[Workload, ps.Strategy, ps.Cluster]:
    """The row's workload, strategy and cluster."""
    n = int(row["num_gpus"])
    wl = Workload(
        model=ps.models.get(row["preset"]),
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["gbs"]),
        micro_batch_size=int(row["mbs"]),
        precision=row["precision"],
    )
    s = ps.Strategy(
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        cp=int(row["cp"]),
        dp_shard=n // (int(row["tp"]) * int(row["pp"]) * int(row["cp"])),
        fsdp=row["fsdp"] or None,
    ).with_world_size(n)
    return wl, s, ps.Cluster(accelerator=row["gpu"], num_devices=n)


def fewest_fitting(wl: Workload, s: ps.Strategy, cluster: ps.Cluster) -> int | None:
    """The fewest offloaded layers that fit (what ``plan`` proposes), None if none does."""
    for k in range(1, wl.model.num_layers):
        if ps.estimate_memory(wl, s, Switches(cpu_offload_layers=k)).fits(cluster.accel):
            return k
    return None


def err(pred: float, measured: float) -> str:
    return f"{100 * (pred - measured) / measured:+6.1f} %"


def report(row: dict[str, str]) -> list[str]:
    """The lines printed for one row."""
    wl, s, cluster = setting(row)
    measured, k = float(row["tokens_per_s_per_gpu"]), int(row["cpu_offload_layers"])
    cap = cluster.accel
    out = [f"{row['id']} {row['model']} {row['num_gpus']}x {row['gpu']} {row['precision']} {s}"]
    out.append(f"   measured                     {measured:8,.0f} tokens/s/GPU")
    for label, sw in (
        (f"offload {k} layers (recipe)", Switches(cpu_offload_layers=k)),
        ("ablation: full recompute", Switches(recompute="full")),
        ("ablation: no recompute", Switches(recompute="none")),
    ):
        step = ps.estimate_step(wl, s, cluster, sw)
        mem = ps.estimate_memory(wl, s, sw)
        fits = "fits" if mem.fits(cap) else "does NOT fit"
        tok = step.tokens_per_s_per_gpu
        out.append(
            f"   {label:<28} {tok:8,.0f}  {err(tok, measured)}"
            f"   peak {mem.peak_bytes / GiB:6.1f} GiB of {cap.memory_bytes / GiB:.0f} ({fits})"
        )
    rep = ps.estimate_step(wl, s, cluster, Switches(cpu_offload_layers=k))
    layer = offload_acts(wl, s, Switches()).dense
    half = dataclasses.replace(cap, host_link_Bps=cap.host_link_Bps / 2)
    slow_cluster = ps.Cluster(accelerator=half, num_devices=cluster.num_devices)
    slow = ps.estimate_step(wl, s, slow_cluster, Switches(cpu_offload_layers=k))
    m = rep.micro_batches
    out.append(
        f"   per micro-batch: {k} x {layer / GB:.2f} GB = {k * layer / GB:.1f} GB each way over "
        f"{cap.host_link_Bps / GB:.0f} GB/s: {rep.breakdown['offload'] / m:.3f} s of copies, "
        f"{rep.breakdown['offload_exposed'] / m * 1e3:.1f} ms exposed "
        f"(at half the link: {slow.breakdown['offload_exposed'] / m * 1e3:.1f} ms, "
        f"{slow.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)"
    )
    out.append(f"   fewest layers that fit (plan's choice): {fewest_fitting(wl, s, cluster)}")
    return out


def main() -> None:
    """Print every row's comparison and the mean absolute errors."""
    errs: dict[str, list[float]] = {"offload": [], "full": []}
    for row in rows():
        print("\n".join(report(row)))
        wl, s, cluster = setting(row)
        measured = float(row["tokens_per_s_per_gpu"])
        for key, sw in (
            ("offload", Switches(cpu_offload_layers=int(row["cpu_offload_layers"]))),
            ("full", Switches(recompute="full")),
        ):
            t = ps.estimate_step(wl, s, cluster, sw).tokens_per_s_per_gpu
            errs[key].append(abs(t - measured) / measured)
    mape = {key: 100 * sum(v) / len(v) for key, v in errs.items()}
    print(
        f"MAPE with the recipe's offloading {mape['offload']:.1f} %; "
        f"offloading off (full recompute) {mape['full']:.1f} %"
    )


if __name__ == "__main__":
    main()
