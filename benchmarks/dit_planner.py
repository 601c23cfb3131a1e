"""Compare the DiT inference model and planner with the public measurements.

    python benchmarks/dit_planner.py [--short] [--json]

Prints (docs/accuracy-dit.md quotes this output):
1. xDiT's HunyuanVideo 1280x720x129, 50 steps on H100 (1/2/4/8 GPUs, Ulysses) against the
   model, with the all-to-all bandwidth the measured 8-GPU time would imply;
2. Ulysses against ring for the same layer on NVLink (yunchang issue #40);
3. CFG parallel against Ulysses 4 for Wan2.1 on 4 GPUs (xDiT issue #507);
4. which Ulysses degrees the planner allows for Wan2.1 1.3B / 14B on 8 devices;
5. MindIE-SD's advice for 2 and 4 cards and long sequences, as the planner places it.
``--short`` skips the bandwidth scan (CI runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import parastrat as ps
from parastrat.estimate.dit import estimate_dit
from parastrat.planner.dit import label, plan_dit
from parastrat.spec import dit
from parastrat.spec.vae import HUNYUAN_VAE_2024

X = "tp-sp-pp-cfg-dp"
#: (the official repository returns the decoded tensor; the video is written after the timed
#: call: no PIL conversion, as in dit_accuracy.py)
HY = dict(height=720, width=1280, frames=129, steps=50, guidance=False, output_type="pt")
#: xDiT docs/performance/hunyuanvideo.md, H100, Ulysses, seconds
XDIT_H100 = {1: 1904.08, 2: 925.04, 4: 514.08, 8: 337.58}
#: HunyuanVideo as xDiT measured it: the official repository of Dec 2024, whose VAE tiles and
#: builds its causal mask row by row (``vae.HUNYUAN_VAE_2024``; dit_accuracy.py prices the same)
HY_2024 = dataclasses.replace(dit.get("hunyuanvideo"), vae=HUNYUAN_VAE_2024)


def hunyuan(short: bool) -> dict:
    c = ps.Cluster("h100", num_devices=8)
    rows = {}
    for n, measured in XDIT_H100.items():
        s = ps.Strategy(ulysses=n) if n > 1 else ps.Strategy(order=X)
        rows[n] = (estimate_dit(HY_2024, s, c, **HY).latency_s, measured)
    out = {"rows": {n: {"predicted_s": p, "measured_s": m} for n, (p, m) in rows.items()}}
    pred = rows[1][0] / rows[8][0]
    meas = XDIT_H100[1] / XDIT_H100[8]
    out.update(predicted_speedup=pred, measured_speedup=meas, speedup_error=pred / meas - 1)
    print("1. HunyuanVideo 1280x720x129, 50 steps, H100 (xDiT, Ulysses)")
    print("   GPUs  predicted s  measured s  error")
    for n, (p, m) in rows.items():
        print(f"   {n:4d}  {p:11.1f}  {m:10.1f}  {100 * (p / m - 1):+5.1f} %")
    print(
        f"   speed-up 1 -> 8: predicted {pred:.2f}x, measured {meas:.2f}x "
        f"({100 * (pred / meas - 1):+.1f} %)"
    )
    if not short:
        # the all-to-all bus bandwidth at which the model's 8-GPU latency equals xDiT's
        lo, hi = 1e8, 1e12
        for _ in range(60):
            mid = (lo * hi) ** 0.5
            cal = {"ops": {"all_to_all": {"intra": {"alpha_s": 1e-5, "busbw_Bps": mid}}}}
            t = estimate_dit(HY_2024, ps.Strategy(ulysses=8), c.calibrate(cal), **HY).latency_s
            lo, hi = (mid, hi) if t > XDIT_H100[8] else (lo, mid)
        out["implied_all_to_all_GBps"] = lo / 1e9
        print(
            f"   xDiT's 8-GPU time implies an all-to-all bus bandwidth of {lo / 1e9:.1f} GB/s "
            f"per GPU (preset NVLink: {c.scale_up_bw_Bps / 1e9:.0f} GB/s)"
        )
    return out


def ulysses_vs_ring() -> dict:
    c = ps.Cluster("h100", num_devices=8)
    out = {}
    print(
        "2. Ulysses 8 vs ring 8, one step, H100 NVLink (yunchang #40: Ulysses ~60 ms, "
        "ring > 100 ms per layer)"
    )
    for model, kw in [
        ("hunyuanvideo", dict(height=720, width=1280, frames=129)),
        ("wan2.1-t2v-14b", dict(height=480, width=832, frames=81)),
        ("flux.1-dev", dict(height=1024, width=1024)),
    ]:
        layers = ps.spec.dit.get(model).num_layers
        u = estimate_dit(model, ps.Strategy(ulysses=8), c, steps=1, guidance=False, **kw)
        r = estimate_dit(model, ps.Strategy(ring=8, order=X), c, steps=1, guidance=False, **kw)
        u_ms, r_ms = 1e3 * u.per_step_s / layers, 1e3 * r.per_step_s / layers
        out[model] = {"ulysses_ms_per_layer": u_ms, "ring_ms_per_layer": r_ms}
        print(
            f"   {model:16s} Ulysses {u_ms:7.2f} ms/layer  ring {r_ms:7.2f} ms/layer  "
            f"({'Ulysses' if u_ms < r_ms else 'ring'} ahead by "
            f"{100 * abs(r_ms / u_ms - 1):.0f} %)"
        )
    return out


def cfg_wan() -> dict:
    p = plan_dit(
        "wan2.1-t2v-1.3b",
        ps.Cluster("h100", 4),
        height=480,
        width=832,
        frames=81,
        steps=50,
        top_k=100,
        framework="any",  # the cost model's comparison (xDiT's README now marks Wan's CFG ❎)
    )
    by = {label(c.strategy): c.latency_s for c in p.candidates}
    u4 = by["Ulysses4"]
    cfg = min((v, k) for k, v in by.items() if "CFG2" in k)
    print(
        "3. Wan2.1-1.3B 832x480x81, 50 steps, 4 x H100 (xDiT #507: CFG gave no gain over Ulysses 4)"
    )
    print(
        f"   Ulysses4 {u4:.2f} s; best CFG split {cfg[1]} {cfg[0]:.2f} s "
        f"({100 * (cfg[0] / u4 - 1):+.1f} %)"
    )
    return {"ulysses4_s": u4, "best_cfg": cfg[1], "best_cfg_s": cfg[0]}


def wan_heads() -> dict:
    out = {}
    print("4. Ulysses degrees allowed on 8 devices (heads must divide)")
    for model in ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b"):
        wan = dict(height=480, width=832, frames=81, steps=50, top_k=1000, framework="any")
        p = plan_dit(model, ps.Cluster("h100", 8), **wan)
        degrees = sorted({c.strategy.ulysses for c in p.candidates})
        out[model] = degrees
        heads = ps.spec.dit.get(model).num_attention_heads
        best = label(p.best.strategy)
        print(f"   {model:16s} {heads} heads -> Ulysses in {degrees}; best {best}")
    return out


def advice() -> dict:
    out = {}
    print("5. MindIE-SD's advice as the planner places it")
    cases = [
        ("flux.1-dev", "ascend-910b", 2, dict(height=1024, width=1024, steps=28)),
        ("wan2.1-t2v-14b", "ascend-910b", 4, dict(height=720, width=1280, frames=81, steps=50)),
        ("wan2.1-t2v-1.3b", "ascend-910b", 4, dict(height=480, width=832, frames=81, steps=50)),
        (
            "hunyuanvideo",
            "ascend-910b",
            16,
            dict(height=720, width=1280, frames=129, steps=50, guidance=False),
        ),
    ]
    for model, accel, n, kw in cases:
        p = plan_dit(model, ps.Cluster(accel, n), **kw)
        out[f"{model}/{n}"] = {"best": label(p.best.strategy), "advice": p.advice}
        print(
            f"   {model} on {n} x {accel}: best {label(p.best.strategy)} ({p.best.latency_s:.1f} s)"
        )
        for a in p.advice:
            print(f"      {a}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="skip the bandwidth scan (CI)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = {
        "hunyuanvideo": hunyuan(args.short),
        "ulysses_vs_ring": ulysses_vs_ring(),
        "cfg_wan": cfg_wan(),
        "wan_heads": wan_heads(),
        "advice": advice(),
    }
    print(f"(ran in {time.perf_counter() - t0:.2f} s)")
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
