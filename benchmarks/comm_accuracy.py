"""The step model's collective prices against published measurements.

Reads ``benchmarks/data/collectives_measured.csv`` and prints, with the percentage error of
the model (``Cluster.collective_time``, the one price of every collective the step model
uses):

* the NCCL all-reduce size sweep on one DGX H100 (8 GPUs over NVLink; nccl-tests sample in
  NVIDIA's dgxc-benchmarking README, rows C001-C032): model time against measured time per
  message size, and the MAPE in the latency regime (< 1 MiB) and the bandwidth regime;
* the other H100 NVLink peaks of the file (all-gather, and the ring / non-all-reduce busbw);
* DeepEP's dispatch / combine bandwidths (normal kernels, H800 NVLink and 400 Gb/s RDMA;
  V2 on Blackwell NVLink): the model's per-GPU all-to-all rate on the same link (H100's
  achievable fraction of its NVLink peak applied to the H800's 200 GB/s, the NIC line rate,
  B200's preset) against the measured "bottleneck bandwidth";
* the ring x Ulysses split of context-parallel attention on 8 A100 (``usp_attention_measured
  .csv``, yunchang's forward benchmark, zigzag ring = balanced causal): the model's forward
  time (attention at the A100 rate + the Ulysses all-to-alls + the ring hops that attention
  does not hide + ring-attention merging) relative to the pure-Ulysses split of the same
  shape, against the measured ratio, so the attention efficiency cancels and what is
  compared is the communication model.

    python benchmarks/comm_accuracy.py
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import parastrat as ps

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "data"  # published tables, sources in its README.md
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


def _usp_forward_s(seq: int, heads: int, head_size: int, ulysses: int, batch: int) -> float:
    """Model seconds of one causal attention forward over 8 A100 split Ulysses x ring."""
    from parastrat.estimate import comm
    from parastrat.estimate.efficiency import attention_time, memory_time
    from parastrat.estimate.flops import attention_core_flops_per_token
    from parastrat.estimate.step import CP_CORRECTION_BYTES_FWD

    cluster = ps.Cluster("a100", num_devices=8)
    model = ps.ModelSpec(
        name="usp",
        num_layers=1,
        hidden_size=heads * head_size,
        num_attention_heads=heads,
        ffn_hidden_size=4 * heads * head_size,
        vocab_size=1024,
        max_position_embeddings=seq,
    )
    s = ps.Strategy(cp=8, ulysses=ulysses, order="tp-cp-ep-dp-pp").with_world_size(8)
    tokens = batch * seq / 8
    strides = comm.group_strides(s, 1, 1)
    attn = attention_time(
        cluster.accel, attention_core_flops_per_token(model, seq) * tokens, head_dim=head_size
    )
    ring, a2a = comm.cp_layer(model, s, tokens, strides)
    t_ring = comm.total_time(ring, cluster) / 3  # forward: one of the three passes of K/V
    t_a2a = comm.total_time(a2a, cluster) / 2  # forward: Q, K, V in and O out
    merge = 0.0
    if s.ring > 1:
        merge = memory_time(
            cluster.accel,
            (s.ring - 1) * tokens * heads / ulysses * head_size * ulysses * CP_CORRECTION_BYTES_FWD,
        )
    return attn + t_a2a + max(0.0, t_ring - attn) + merge


def usp(path: Path) -> list[float]:
    """Print the ring x Ulysses forward-time ratios, model vs measured (zigzag ring)."""
    with open(path) as fh:
        rows = [r for r in csv.DictReader(fh) if r["group_num"] == "1"]
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r["seqlen"], r["head_num"], r["head_size"]), []).append(r)
    errors = []
    print()
    print("Ulysses x ring attention forward on 8 A100, time relative to the most-Ulysses split")
    print(
        f"{'row':<5} {'seq':>5} {'heads':>5} {'d':>4} {'U x R':>6} {'measured':>9} {'model':>6} "
        f"{'error':>7}"
    )
    for (seq, heads, d), grp in groups.items():
        ok = [r for r in grp if _number(r["zigzag_no_packed"])]
        if len(ok) < 2:
            continue
        ok.sort(key=lambda r: -int(r["ulysses_degree"]))
        n = int(float(seq.rstrip("K")) * (1024 if seq.endswith("K") else 1))
        base = ok[0]
        t0 = _usp_forward_s(n, int(heads), int(d), int(base["ulysses_degree"]), 2)
        r0 = float(base["zigzag_no_packed"])
        for r in ok[1:]:
            u = int(r["ulysses_degree"])
            model = _usp_forward_s(n, int(heads), int(d), u, 2) / t0
            measured = r0 / float(r["zigzag_no_packed"])
            err = (model - measured) / measured
            errors.append(abs(err))
            print(
                f"{r['row_id']:<5} {seq:>5} {heads:>5} {d:>4} {u:>2} x {8 // u:<2} "
                f"{measured:>9.2f} {model:>6.2f} {err:>+7.0%}"
            )
    print(f"MAPE over {len(errors)} ratios: {sum(errors) / len(errors):.1%}")
    return errors


def main() -> int:
    rows = _rows()
    allreduce_sweep(rows)
    nvlink_peaks(rows)
    deepep(rows)
    usp(REFERENCE / "usp_attention_measured.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
