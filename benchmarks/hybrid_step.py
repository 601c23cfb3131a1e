"""Hybrid (Mamba) models: where a step goes, layer kind by layer kind.

For Nemotron-H 56B on 64 H100 and Nemotron-H 8B on 8 H100 (seq 8192, BF16), the plan's best
strategy and the per-kind compute of its slowest stage (Mamba layers, of which the SSD scan
and causal convolution, attention, MLP, MoE), the exposed communication, and each kind's
activation bytes per layer and micro-batch.  Then one ablation: the 56B model with CP 2
(MambaContextParallel's all-to-alls around every scan) against CP 1 at the same TP and PP.

    python benchmarks/hybrid_step.py

The models are Megatron Bridge 0.3.1's ``NemotronHModelProvider56B`` / ``8B`` (the presets
``nemotron-h-56b`` / ``nemotron-h-8b`` when parastrat has them, else the same fields here).
"""

from __future__ import annotations

import parastrat as ps
from parastrat import ModelSpec, Strategy
from parastrat.estimate.memory import activations

CASES = (("nemotron-h-56b", 64, 768), ("nemotron-h-8b", 8, 64))
SEQ = 8192


def model(name: str) -> ModelSpec:
    """The preset (equal to Bridge's provider field by field)."""
    return ps.models.get(name)


def breakdown(spec: ModelSpec, devices: int, gbs: int) -> Strategy:
    """Print the plan's best strategy and its per-kind figures; return the strategy."""
    cl = ps.Cluster("h100", num_devices=devices)
    result = ps.plan(spec, cl, seq_len=SEQ, global_batch_size=gbs)
    best = result.best
    r = best.step
    print(f"\n{spec.name} ({spec.num_params / 1e9:.1f}B) on {devices} x h100, seq {SEQ}, gbs {gbs}")
    print(f"  plan: {best.label()}")
    print(
        f"  step {r.step_time_s:.2f} s, {r.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
        f"{r.tflops_per_gpu:.0f} TFLOP/s/GPU (Bridge's hybrid FLOPs), MFU {r.mfu:.1%}"
    )
    compute = r.breakdown["compute"]
    print(f"  {'kind':<12}{'compute s':>10}{'share':>8}")
    for kind, sec in r.kinds.items():
        print(f"  {kind:<12}{sec:>10.2f}{sec / compute:>8.1%}")
    exposed = {k: v for k, v in r.breakdown.items() if k.endswith("_exposed") and v > 0}
    print("  exposed: " + ", ".join(f"{k[:-8]} {v:.2f} s" for k, v in exposed.items()))
    s = best.strategy
    acts = activations(
        spec, s.tp, s.sp, s.cp, s.etp, best.micro_batch_size, SEQ, "bf16", best.recompute, True
    )
    per = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in acts.kinds)
    print(f"  activations per layer and micro-batch: {per}")
    return s


def cp_ablation(spec: ModelSpec) -> None:
    """CP 2 against CP 1 for the 56B model at TP 8, PP 2: Mamba's all-to-alls priced."""
    cl = ps.Cluster("h100", num_devices=64)
    print(f"\nablation: {spec.name}, TP 8 PP 2, CP 1 vs CP 2 (MambaContextParallel)")
    for cp in (1, 2):
        s = Strategy(tp=8, pp=2, ring=cp, sp=True)
        r = ps.estimate_step(spec, s, cl, seq_len=SEQ, global_batch_size=768, micro_batch_size=1)
        b = r.breakdown
        print(
            f"  CP {cp}: step {r.step_time_s:6.2f} s  cp comm {b['cp']:5.2f} s "
            f"(exposed {b['cp_exposed']:5.2f})  mamba {r.kinds['mamba']:5.2f} s  "
            f"scan {r.kinds['mamba_scan']:5.2f} s"
        )


def main() -> int:
    for name, devices, gbs in CASES:
        breakdown(model(name), devices, gbs)
    cp_ablation(model("nemotron-h-56b"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
