"""Inference flow: plan a DiT split, start its groups, hand MindIE-SD its settings.

    python examples/mindiesd_dit.py                      # plan + settings (CPU, seconds)
    torchrun --nproc_per_node=8 examples/mindiesd_dit.py # also builds the process groups
                                                         # (hccl on Ascend, gloo on CPU)

1. ``plan_dit`` ranks every Ulysses x ring x CFG x TP split of the devices for one request;
2. ``strategy.initialize()`` (under a launcher) builds the groups MindIE-SD's kernels take
   (``usp_attention(ulysses_group=g["ulysses"], kv_gather_group=g["ring"])``,
   ``fused_moe(tp_group=g["tp"])``);
3. the MindIE-SD model ports take the same strategy as ``ParallelConfig`` settings or as the
   service example's launch flags.
"""

from __future__ import annotations

import argparse
import os
import shlex

import parastrat as ps
from parastrat.adapters import mindiesd as md
from parastrat.errors import MissingExtraError
from parastrat.spec import dit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="wan2.1-t2v-14b", help=", ".join(dit.names()))
    ap.add_argument("--accelerator", default="ascend-910b")
    ap.add_argument("--devices", type=int, default=int(os.environ.get("WORLD_SIZE", "8")))
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    rank0 = int(os.environ.get("RANK", "0")) == 0

    model = dit.get(args.model)
    plan = ps.plan_dit(
        model,
        ps.Cluster(accelerator=args.accelerator, num_devices=args.devices),
        height=args.height,
        width=args.width,
        frames=args.frames,
        steps=args.steps,
        top_k=3,
    )
    best = plan.best
    s = best.strategy
    if rank0:
        print(
            f"1. plan_dit: {model.name} {args.width}x{args.height}x{args.frames}, "
            f"{args.steps} steps on {args.devices} x {args.accelerator}"
        )
        for i, c in enumerate(plan.candidates, 1):
            print(f"     {i}. {c.strategy}: {c.latency_s:.1f} s")

    if "WORLD_SIZE" in os.environ:
        groups = s.initialize()  # hccl on Ascend, nccl on CUDA, gloo on CPU
        print(
            f"2. rank {groups.rank}: ulysses group {groups.ranks['ulysses']}, ring group "
            f"{groups.ranks['ring']}, cfg group {groups.ranks['cfg']}"
        )
        ps.destroy()
    elif rank0:
        print("2. initialize: run under a launcher to build the groups, e.g.")
        print(f"     torchrun --nproc_per_node={args.devices} {shlex.quote(__file__)}")

    if not rank0:
        return
    settings = md.to_parallel_config(s, model)  # checks heads against Ulysses again
    print("3. MindIE-SD port settings:", settings.to_dict())
    print("   service example flags:  ", shlex.join(settings.to_cli_args()))
    try:
        port = settings.to_port_config()
        print("   port ParallelConfig:    ", port)
    except MissingExtraError as err:
        print(
            f"   (the port's own ParallelConfig is not importable here: {err.extra} extra, "
            "torch_npu and the port's code needed)"
        )

    # The same strategy for a GPU peer: diffusers has no CFG axis, and says so.
    from parastrat.adapters import diffusers as dd

    try:
        cp = dd.to_context_parallel_config(s, model)
        print(
            f"   diffusers: ContextParallelConfig(ulysses_degree={cp.ulysses_degree}, "
            f"ring_degree={cp.ring_degree})"
        )
    except ps.StrategyError as err:
        print("   diffusers cannot take it as is:")
        for v in err.violations:
            print(f"     {v}")
    except MissingExtraError as err:
        print(f"   (diffusers not installed: {err})")


if __name__ == "__main__":
    main()
