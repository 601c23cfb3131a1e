"""The step model's collective prices against published measurements.

Reads ``shared/reference/collectives_measured.csv`` and prints, with the percentage error of
the model (``Cluster.collective_time``, the one price of every collective the step model
uses):

* the NCCL all-reduce size sweep on one DGX H100 (8 GPUs over NVLink; nccl-tests sample in
  NVIDIA's dgxc-benchmarking README, rows C001-C032): model time against measured time per
  message size, and the MAPE in the latency regime (< 1 MiB) and the bandwidth regime;
* the other H100 NVLink peaks of the file (all-gather, and the ring / non-all-reduce busbw);
* DeepEP's dispatch / combine bandwidths (normal kernels, H800 NVLink and 400 Gb/s RDMA;
  V2 on Blackwell NVLink): the model's per-GPU all-to-all rate on the same link (H100's
  achievable fraction of its NVLink peak applied to the H800's 200 GB/s, the NIC line rate,
  B200's preset) against the measured "bottleneck bandwidth".

    python benchmarks/comm_accuracy.py
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import parastrat as ps

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = next(
    (
        p
        for p in (ROOT / "shared" / "reference", ROOT.parent / "shared" / "reference")
        if p.exists()
    ),
    ROOT / "shared" / "reference",
)
MiB = 1 << 20


def _rows() -> list[dict[str, str]]:
    with open(REFERENCE / "collectives_measured.csv") as fh:
        return list(csv.DictReader(fh))


def allreduce_sweep(rows: list[dict[str, str]]) -> tuple[float, float]:
    """Print the H100 all-reduce sweep against the model; (MAPE < 1 MiB, MAPE >= 1 MiB)."""
    h100 = ps.Cluster("h100", num_devices=8)
    small: list[float] = []
    large: list[float] = []
    print("NCCL all_reduce, 8 x H100 NVLink (nccl-tests, out-of-place)")
    print(f"{'bytes':>12} {'measured us':>12} {'model us':>10} {'error':>8}")
    for r in rows:
        if not r["collective"].startswith("all_reduce (float sum)") or r["num_nodes"] != "1":
            continue
        if not r["msg_size_bytes"].isdigit() or not r["time_us"]:
            continue
        size = int(r["msg_size_bytes"])
        measured = float(r["time_us"])
        model = h100.collective_time("all_reduce", size, 8, "intra") * 1e6
        err = (model - measured) / measured
        (small if size < MiB else large).append(abs(err))
        print(f"{size:>12} {measured:>12.1f} {model:>10.1f} {err:>+8.1%}")
    ms, ml = sum(small) / len(small), sum(large) / len(large)
    print(f"MAPE below 1 MiB (latency regime): {ms:.1%} over {len(small)} sizes")
    print(f"MAPE from 1 MiB (bandwidth regime): {ml:.1%} over {len(large)} sizes")
    return ms, ml


def _number(text: str) -> float | None:
    m = re.search(r"[\d.]+", text or "")
    return float(m.group()) if m else None


def nvlink_peaks(rows: list[dict[str, str]]) -> None:
    """Print the model's H100 NVLink bus bandwidth against the file's other peak figures."""
    h100 = ps.Cluster("h100", num_devices=8)
    _, model_bw = h100.link("intra")
    print()
    print("H100 NVLink bus bandwidth, model vs measured peaks (GB/s)")
    for r in rows:
        if r["gpu_type"].startswith("H100") and r["num_nodes"] == "1":
            bus = _number(r["busbw_GBps"])
            if bus is None or not r["collective"].startswith(("all_gather", "broadcast", "non")):
                continue
            err = (model_bw / 1e9 - bus) / bus
            print(
                f"{r['row_id']} {r['collective'][:40]:<40} {bus:>7.0f} model {model_bw / 1e9:.0f} "
                f"({err:+.0%})"
            )


def deepep(rows: list[dict[str, str]]) -> list[float]:
    """Print DeepEP's measured bottleneck bandwidths against the model's all-to-all rates."""
    h100 = ps.hardware.get("h100")
    b200 = ps.hardware.get("b200")
    # the model's achievable share of an NVLink peak (H100: 370 of 450 GB/s)
    share = h100.scale_up_bw_Bps / h100.scale_up_peak_Bps
    errors = []
    print()
    print("DeepEP dispatch / combine bottleneck bandwidth (GB/s per GPU)")
    print(f"{'row':<5} {'kernel':<32} {'link':<7} {'measured':>9} {'model':>6} {'error':>7}")
    for r in rows:
        if not r["collective"].startswith("MoE all-to-all dispatch/combine"):
            continue
        text = r["other_metric"]
        for kind in ("dispatch", "combine"):
            m = re.search(kind + r"[^\d]*([\d.]+) \((NVLink|RDMA)\)", text)
            if m is None:
                continue
            measured, link = float(m.group(1)), m.group(2)
            if link == "RDMA":
                model = h100.scale_out_bw_Bps / 1e9  # 400 Gb/s NIC line rate
            elif "SM100" in r["gpu_type"]:
                model = b200.scale_up_bw_Bps / 1e9
            else:
                model = share * 200  # H800: NVLink 400 GB/s bidirectional
            err = (model - measured) / measured
            errors.append(abs(err))
            label = f"{r['library'][:10]} {r['num_gpus']} GPUs {kind}"
            print(
                f"{r['row_id']:<5} {label:<32} {link:<7} {measured:>9.0f} {model:>6.0f} "
                f"{err:>+7.0%}"
            )
    print(f"MAPE over {len(errors)} DeepEP figures: {sum(errors) / len(errors):.1%}")
    return errors


def main() -> int:
    rows = _rows()
    allreduce_sweep(rows)
    nvlink_peaks(rows)
    deepep(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
