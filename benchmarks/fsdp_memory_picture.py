"""Per-stage memory of one model under each FSDP sharding level, as a table and a picture.

For a fixed strategy (default: Llama 3.1 70B on 64 H100, TP4 PP4 DP4 with SP, sequence 8192,
global batch 128, selective recompute), every pipeline stage's weights, gradients and optimizer
state come from :mod:`parastrat.estimate.fsdp` at each of Megatron FSDP's levels (sharded over
``dp_shard = dp``, prefetch one layer: the double buffer), plus the unsharded working set of the
layers in flight; activations and the allowance for context/buffers/fragmentation are
:func:`parastrat.estimate_memory`'s for the same strategy (they do not depend on the level).
The table and picture are :func:`parastrat.estimate_memory` itself with ``Strategy.fsdp`` set
(the wired model: its per-block parameter records, the working set of each stage's largest
unit); ``--time`` and ``--ablation`` split the stage into equal transformer layers and the
embedding / output layer on the end stages.

    python benchmarks/fsdp_memory_picture.py                 # table + docs/img/fsdp_memory.png
    python benchmarks/fsdp_memory_picture.py --no-plot       # table only
    python benchmarks/fsdp_memory_picture.py --model llama3-8b --gpus 8 --tp 1 --pp 1

``--time`` also prints each level's FSDP communication per step on the stage with the most
parameters (every collective, and the part on the critical path), with each layer's compute
window from :func:`parastrat.estimate_step` (its per-layer compute, one third forward, two
thirds backward), next to the step model's own DP figures for the same strategy.
``--ablation`` prints, for full sharding on that stage, what each mechanism changes: Megatron's
prefetch budget without the double buffer, keeping gathered weights for the backward
(torchtitan under PP), HSDP with the shard group inside one scale-up domain, and no overlap.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import parastrat as ps
from parastrat.estimate.fsdp import (
    LEVELS,
    LayerWork,
    ShardGroups,
    Sharding,
    fsdp_stage_comm,
    fsdp_stage_memory,
    megatron_prefetch_depth,
)
from parastrat.estimate.memory import StageMemory
from parastrat.spec.hardware import get as get_accelerator

ROOT = Path(__file__).resolve().parents[1]
GiB = 1024**3
PARTS = ("weights", "gradients", "optimizer", "working set", "activations + other")


def layer_params(model: ps.ModelSpec, report, tp: int) -> list[list[float]]:
    """Parameters of each FSDP unit per stage: equal transformer layers (from the model's
    per-layer breakdown, split by TP as the memory model splits it), and on the end stages one
    more unit holding what the memory model adds there (embedding; output layer, final norm)."""
    p = model.param_breakdown
    unit = (p["attention"] - p["attention_replicated"]) / tp + p["attention_replicated"]
    unit += p["layer_norms"] + p["dense_mlp"] / tp
    out = []
    for st in report.stages:
        units = [unit] * st.layers
        extra = st.params - unit * st.layers
        if extra < -1e-6 * st.params:
            raise SystemExit(f"stage {st.stage}: layers exceed the stage's parameters")
        if extra > 1e-6 * st.params:
            # one stage with an untied input embedding and output layer: two equal units
            both = st.has_embedding and st.has_output and not model.tied_embeddings
            units += [extra / 2, extra / 2] if both else [extra]
        out.append(units)
    return out


def stage_rows(args) -> tuple[ps.MemoryReport, dict[str, list[StageMemory]]]:
    """The memory estimate of the strategy at each level (``Strategy.fsdp``, sharded over
    ``dp_shard = dp``): ``no_shard`` is the estimate without the distributed optimizer."""
    model = ps.models.get(args.model)
    strategy = ps.Strategy(tp=args.tp, pp=args.pp, sp=args.tp > 1).with_world_size(args.gpus)
    report = ps.estimate_memory(
        model, strategy, seq_len=args.seq_len, global_batch_size=args.global_batch_size
    )
    rows = {}
    for level in LEVELS:
        sharded = strategy.replace(fsdp=None if level == "no_shard" else level)
        rows[level] = ps.estimate_memory(
            model,
            sharded.with_world_size(args.gpus),
            seq_len=args.seq_len,
            global_batch_size=args.global_batch_size,
            distributed_optimizer=level != "no_shard",
        ).stages
    return report, rows


def print_table(report: ps.MemoryReport, rows: dict[str, list[StageMemory]]) -> None:
    print(f"{report.model} | {report.strategy} | seq {report.seq_len} | {report.recompute}")
    print(
        f"{'level':<19} {'stage':>5} {'weights':>8} {'grads':>8} {'optim':>8} "
        f"{'working':>8} {'act+oth':>8} {'total':>8}  (GiB)"
    )
    for level, stages in rows.items():
        for st in stages:
            rest = st.activations + st.other
            print(
                f"{level:<19} {st.stage:>5} {st.weights / GiB:8.2f} {st.gradients / GiB:8.2f} "
                f"{st.optimizer / GiB:8.2f} {st.working / GiB:8.2f} {rest / GiB:8.2f} "
                f"{st.total / GiB:8.2f}"
            )


def print_time(args, report: ps.MemoryReport) -> None:
    strategy, cluster, step, big, work = _stage_work(args, report)
    m = step.micro_batches
    layer_s = work[0].fwd_s * 3
    print(
        f"\nFSDP communication per step, stage {big} ({len(work)} units, {m} micro-batches, "
        f"layer compute {layer_s * 1e3:.1f} ms per micro-batch) on {args.gpus} {args.device}"
    )
    print(
        f"{'level':<19} {'span':>6} {'total s':>8} {'exposed s':>10}   step model: "
        f"{'dp s':>7} {'exposed s':>9} {'step s':>7}"
    )
    model = ps.models.get(args.model)
    for level in LEVELS:
        sh = Sharding(level, dp_shard=strategy.dp or 1)
        groups = ShardGroups.dense(sh, tp=args.tp)
        t = fsdp_stage_comm(work, sh, groups, cluster, micro_batches=m)
        span = cluster.span(groups.shard, groups.shard_stride)
        wired = ps.estimate_step(
            model,
            strategy.replace(fsdp=None if level == "no_shard" else level).with_world_size(
                args.gpus
            ),
            cluster,
            seq_len=args.seq_len,
            global_batch_size=args.global_batch_size,
            distributed_optimizer=level != "no_shard",
        )
        b = wired.breakdown
        print(
            f"{level:<19} {span:>6} {t.total:8.3f} {t.exposed:10.3f}   {'':12}"
            f"{b['dp']:7.3f} {b['dp_exposed']:9.3f} {wired.step_time_s:7.2f}"
        )
    print(
        "(left: this stage's units alone; right: the step model on its slowest stage, "
        "no_shard without the distributed optimizer)"
    )


def _stage_work(args, report):
    model = ps.models.get(args.model)
    strategy = ps.Strategy(tp=args.tp, pp=args.pp, sp=args.tp > 1).with_world_size(args.gpus)
    cluster = ps.Cluster(args.device, args.gpus)
    step = ps.estimate_step(
        model, strategy, cluster, seq_len=args.seq_len, global_batch_size=args.global_batch_size
    )
    units = layer_params(model, report, args.tp)
    big = max(range(len(units)), key=lambda i: sum(units[i]))
    layer_s = step.breakdown["compute"] / step.micro_batches / report.stages[big].layers
    work = [LayerWork(p, layer_s / 3, 2 * layer_s / 3) for p in units[big]]
    return strategy, cluster, step, big, work


def print_ablation(args, report: ps.MemoryReport) -> None:
    strategy, cluster, step, big, work = _stage_work(args, report)
    dp, m = strategy.dp or 1, step.micro_batches
    unit = sorted(w.params for w in work)[len(work) // 2]  # a transformer layer
    rest = report.stages[big].activations + report.stages[big].other
    inside = max(1, cluster.scale_up_domain // (args.tp * strategy.cp))
    variants = [
        ("FSDP, double buffer (prefetch 1)", Sharding(LEVELS[-1], dp), True),
        (
            "FSDP, Megatron prefetch budget",
            Sharding(LEVELS[-1], dp, prefetch=megatron_prefetch_depth(unit, False)),
            True,
        ),
        (
            "FSDP, keep gathered for backward",
            Sharding(LEVELS[-1], dp, reshard_after_forward=False),
            True,
        ),
        ("FSDP, no overlap", Sharding(LEVELS[-1], dp), False),
    ]
    if 1 < inside < dp and dp % inside == 0:
        variants.insert(
            1, (f"HSDP {inside} x {dp // inside}", Sharding(LEVELS[-1], inside, dp // inside), True)
        )
    print(f"\nablation, stage {big}, optim_grads_params, {m} micro-batches")
    print(f"{'variant':<36} {'span':>6} {'GiB':>7} {'total s':>8} {'exposed s':>10}")
    for name, sh, overlap in variants:
        mem = fsdp_stage_memory([w.params for w in work], sh)
        groups = ShardGroups.dense(sh, tp=args.tp)
        ws = work if overlap else [LayerWork(w.params, 0.0, 0.0) for w in work]
        t = fsdp_stage_comm(ws, sh, groups, cluster, micro_batches=m)
        span = cluster.span(groups.shard, groups.shard_stride)
        gib = (mem.total + rest) / GiB
        print(f"{name:<36} {span:>6} {gib:7.2f} {t.total:8.3f} {t.exposed:10.3f}")


def plot(report, rows, device: str, out: Path) -> None:
    from parastrat._deps import require

    mpl = require("matplotlib", "plot", "needed for the picture")
    mpl.use("Agg")
    plt = require("matplotlib.pyplot", "plot")
    from parastrat.viz import save_figure

    fig, axes = plt.subplots(1, len(rows), figsize=(12, 4.6), sharey=True)
    cap = get_accelerator(device).memory_bytes / GiB
    colors = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8c8c8c")
    for ax, (level, stages) in zip(axes, rows.items()):
        xs = [st.stage for st in report.stages]
        parts = [
            [m.weights / GiB for m in stages],
            [m.gradients / GiB for m in stages],
            [m.optimizer / GiB for m in stages],
            [m.working / GiB for m in stages],
            [(st.activations + st.other) / GiB for st in stages],
        ]
        bottom = [0.0] * len(xs)
        for name, vals, color in zip(PARTS, parts, colors):
            ax.bar(xs, vals, bottom=bottom, label=name, color=color)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.axhline(cap, color="red", linestyle="--", linewidth=1, label=f"{device} {cap:.0f} GiB")
        ax.set_title(level, fontsize=10)
        ax.set_xticks(xs)
        ax.set_xlabel("pipeline stage")
    axes[0].set_ylabel("GiB per rank")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(
        f"{report.model}  {report.strategy}  seq {report.seq_len}, recompute "
        f"{report.recompute}: sharded over dp_shard, prefetch 1 layer",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".fsdp_memory.", suffix=".png")
    os.close(fd)
    try:
        save_figure(fig, tmp, dpi=110)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--global-batch-size", type=int, default=128)
    ap.add_argument("--device", default="h100")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "fsdp_memory.png")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--time", action="store_true", help="also print FSDP communication times")
    ap.add_argument("--ablation", action="store_true", help="also print the mechanism ablation")
    args = ap.parse_args(argv)
    report, rows = stage_rows(args)
    print_table(report, rows)
    if args.time:
        print_time(args, report)
    if args.ablation:
        print_ablation(args, report)
    if not args.no_plot:
        plot(report, rows, args.device, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
