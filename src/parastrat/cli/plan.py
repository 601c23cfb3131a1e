"""``parastrat plan``: rank every legal training strategy for a model on a cluster."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..estimate.comm import DISPATCHERS, FLEX_BACKENDS
from ..estimate.flops import RECOMPUTE_MODES
from ._common import add_model_args, console, err_console, load_model, positive_int, print_json

FORMATS = ("table", "json", "yaml", "overrides", "megatron-args", "torchrun")


def add_target_args(p: argparse.ArgumentParser) -> None:
    """Model, device count, accelerator, workload and calibration arguments (plan, explain)."""
    add_model_args(p)
    p.add_argument(
        "--gpus",
        "--devices",
        dest="gpus",
        type=positive_int,
        required=True,
        help="number of devices",
    )
    p.add_argument(
        "--accelerator",
        default="h100",
        help="accelerator preset (h100, h200, b200, gb200, a100, ascend-910b, ...)",
    )
    p.add_argument("--seq-len", type=positive_int, default=4096)
    p.add_argument(
        "--global-batch-size",
        type=positive_int,
        default=None,
        help="sequences per step (default: 4 x the number of devices)",
    )
    p.add_argument("--precision", default="bf16", help="bf16, fp8 (fp8-cs, ...) or mxfp8")
    p.add_argument(
        "--calibration",
        default=None,
        help="calibration JSON from `parastrat bench` (collective alpha/busbw)",
    )


def build_target(args: argparse.Namespace):
    """(model, cluster, global batch) from :func:`add_target_args`' arguments."""
    from ..spec.cluster import Cluster, load_calibration

    model = load_model(args)
    cal = load_calibration(args.calibration) if args.calibration else None
    cluster = Cluster(accelerator=args.accelerator, num_devices=args.gpus, calibration=cal)
    gbs = args.global_batch_size or 4 * args.gpus
    return model, cluster, gbs


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``parastrat plan`` subcommand (model, cluster, workload, pins and output)."""
    p = sub.add_parser(
        "plan",
        help="rank every legal training strategy for a model",
        description="Enumerate TP, PP, VPP, CP, EP, ETP, micro-batch and "
        "recompute for the device count, drop what breaks a rule "
        "or does not fit memory, and rank by predicted "
        "tokens/s/GPU.",
    )
    add_target_args(p)
    p.add_argument("--top-k", type=positive_int, default=5)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table; json/yaml (the candidates); overrides (Megatron Bridge's run_recipe.py); "
        "megatron-args (Megatron-LM / MindSpeed-LLM pretrain_gpt.py arguments); torchrun (the "
        "launch command and its environment; Megatron-LM's launcher with HCCL settings on Ascend)",
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="Megatron Bridge recipe for --format torchrun (default: <model>_pretrain_config)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="draw every ranked candidate's throughput against its peak memory (the choice "
        "marked) and the top candidates' step-time terms",
    )
    p.add_argument(
        "--smallest",
        action="store_true",
        help="find the fewest devices (up to --gpus) on which something fits",
    )
    g = p.add_argument_group("pins and bounds")
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp"):
        g.add_argument(f"--{name}", type=positive_int, default=None, help=f"pin {name}")
        g.add_argument(f"--max-{name}", type=positive_int, default=None, help=f"bound {name}")
    g.add_argument("--micro-batch-size", type=positive_int, default=None)
    g.add_argument("--recompute", choices=RECOMPUTE_MODES, default=None)
    add_moe_args(p)
    add_runtime_args(p)
    p.set_defaults(func=run)


def add_moe_args(p: argparse.ArgumentParser) -> None:
    """MoE communication switches (Megatron Core's, off by default)."""
    m = p.add_argument_group("MoE communication (Megatron Core switches, off by default)")
    m.add_argument(
        "--moe-dispatcher",
        choices=(*DISPATCHERS, *FLEX_BACKENDS),
        default="alltoall",
        help="token dispatcher: alltoall (default: one copy per routed expert) or flex "
        "(DeepEP/HybridEP: one copy per destination rank inside a scale-up domain, per "
        "destination domain across the scale-out link)",
    )
    m.add_argument(
        "--moe-a2a-overlap",
        action="store_true",
        help="overlap_moe_expert_parallel_comm (combined 1F1B)",
    )
    m.add_argument(
        "--moe-shared-expert-overlap",
        action="store_true",
        help="moe_shared_expert_overlap: shared experts run during dispatch/combine",
    )


def step_switches(args: argparse.Namespace) -> dict:
    """The implementation switches of ``args`` as ``estimate_step`` / ``plan`` keywords."""
    return {
        "moe_dispatcher": args.moe_dispatcher,
        "moe_a2a_overlap": args.moe_a2a_overlap,
        "moe_shared_expert_overlap": args.moe_shared_expert_overlap,
        "cuda_graphs": args.cuda_graphs,
        "tp_comm_overlap": args.tp_comm_overlap,
    }


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """CUDA-graph and TP-overlap switches (Megatron Core defaults: eager, TP overlap on)."""
    r = p.add_argument_group("runtime switches (Megatron Core defaults: eager, TP overlap on)")
    r.add_argument(
        "--cuda-graphs",
        nargs="?",
        const="full_iteration",
        default=None,
        metavar="SCOPES",
        help="price CUDA graphs: no value = the whole iteration, or comma-separated "
        "scopes (attn, mlp, moe, moe_router, moe_preprocess, full_iteration); "
        "captured blocks cost no host launch time",
    )
    r.add_argument(
        "--no-tp-comm-overlap",
        dest="tp_comm_overlap",
        action="store_const",
        const=False,
        default=None,
        help="TP communication not overlapped with GEMMs (tp_comm_overlap=False)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat plan``: rank the strategies and print them; 0, or 2 when nothing fits."""
    from ..planner.search import plan

    model, cluster, gbs = build_target(args)
    pins: dict[str, Any] = {k: getattr(args, k) for k in ("tp", "pp", "vpp", "cp", "ep", "etp")}
    bounds = {f"max_{k}": getattr(args, f"max_{k}") for k in ("tp", "pp", "vpp", "cp", "ep", "etp")}
    show = args.format == "table"
    with Progress(
        TextColumn("planning"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} strategies"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not show,
    ) as bar:
        task = bar.add_task("plan", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = plan(
            model,
            cluster,
            seq_len=args.seq_len,
            global_batch_size=gbs,
            precision=args.precision,
            top_k=args.top_k,
            num_devices="smallest" if args.smallest else None,
            micro_batch_size=args.micro_batch_size,
            recompute=args.recompute,
            progress=progress,
            **step_switches(args),
            **pins,
            **bounds,
        )
    top = result.candidates[: args.top_k]
    if args.plot:
        from ..viz import plot_plan

        plot_plan(result, args.plot, device_bytes=cluster.accel.memory_bytes)
    if args.format == "json":
        print_json({"candidates": [c.to_dict() for c in top]})
    elif args.format == "yaml":
        import yaml

        console.print(
            yaml.safe_dump({"candidates": [c.to_dict() for c in top]}, sort_keys=False),
            end="",
            markup=False,
        )
    elif args.format == "overrides":
        from ..adapters.megatron import to_overrides

        lines = to_overrides(result)  # the plan: its best, batch, recompute and switches
        console.print(" ".join(lines), markup=False)
    elif args.format == "megatron-args":
        from ..adapters.megatron import megatron_lm_args

        argv = megatron_lm_args(result)  # the plan: its best, batch and switches
        console.print(" ".join(shlex.quote(a) for a in argv), markup=False)
    elif args.format == "torchrun" and cluster.accel.vendor == "huawei":
        console.print(ascend_torchrun_line(result, cluster), markup=False)
    elif args.format == "torchrun":
        from ..adapters.megatron import default_recipe

        recipe = args.recipe or default_recipe(model.name)
        console.print(torchrun_line(result.best, cluster, gbs, recipe), markup=False)
    else:
        print_table(result, top)
    return 0


def torchrun_line(c, cluster, gbs: int, recipe: str) -> str:
    """Environment and a torchrun command that launch the chosen strategy with Bridge."""
    from ..adapters.megatron import launch_command, launch_env

    s = c.strategy
    env = launch_env(s, vendor=cluster.accel.vendor, scale_up_domain=cluster.scale_up_domain)
    argv = launch_command(
        s,
        recipe=recipe,
        nproc_per_node=min(cluster.devices_per_node, cluster.num_devices),
        nnodes=cluster.num_nodes,
        micro_batch_size=c.micro_batch_size,
        global_batch_size=gbs,
        recompute=c.recompute,
        rdzv_endpoint="$MASTER_ADDR:29500" if cluster.num_nodes > 1 else None,
    )
    cmd = " ".join(x if "$" in x else shlex.quote(x) for x in argv)
    return " ".join(env) + " \\\n  " + cmd


def ascend_torchrun_line(result, cluster) -> str:
    """HCCL environment and Megatron-LM's own launcher (MindSpeed-LLM on Ascend NPUs), every
    word shell-quoted (``$MASTER_ADDR`` left for the shell to expand)."""
    from ..adapters.megatron import launch_env, megatron_lm_command

    env = launch_env(result.best.strategy, vendor=cluster.accel.vendor)
    argv = megatron_lm_command(
        result,
        nproc_per_node=min(cluster.devices_per_node, cluster.num_devices),
        nnodes=cluster.num_nodes,
        rdzv_endpoint="$MASTER_ADDR:29500" if cluster.num_nodes > 1 else None,
    )
    words = [w if w.startswith("--rdzv-endpoint=$") else shlex.quote(w) for w in argv]
    return " ".join(shlex.quote(e) for e in env) + " \\\n  " + " ".join(words)


def print_table(result, top) -> None:
    """Print the top candidates of a plan as a rich table, one row per layout."""
    from ..spec.hardware import GiB

    # escape user text: a model name like "[my-model]" would otherwise be read as markup
    t = Table(
        title=escape(
            f"{result.model.name} on {result.num_devices} x "
            f"{result.cluster.accel.name}, seq {result.seq_len}, global batch "
            f"{result.global_batch_size}, {result.precision}"
        )
    )
    for col in (
        "#",
        "strategy",
        "mbs",
        "recompute",
        "tok/s/GPU",
        "TFLOP/s",
        "MFU",
        "step s",
        "peak GiB",
    ):
        t.add_column(col, overflow="fold")
    for i, c in enumerate(top, 1):
        st = c.step
        t.add_row(
            str(i),
            escape(str(c.strategy)),
            str(c.micro_batch_size),
            c.recompute,
            f"{st.tokens_per_s_per_gpu:,.0f}",
            f"{st.tflops_per_gpu:.0f}",
            f"{st.mfu:.1%}",
            f"{st.step_time_s:.2f}",
            f"{c.memory.peak_bytes / GiB:.1f}",
        )
    console.print(t)
    for i, c in enumerate(top, 1):
        console.print(f"#{i}: {c.why}" + "".join(f"\n    note: {n}" for n in c.notes), markup=False)
    console.print(
        f"{result.enumerated} legal strategies, {result.bounded} bounded, "
        f"{result.priced} priced, {result.memory_checks} memory checks in "
        f"{result.elapsed_s:.2f} s; model FLOPs = 3 x forward (6 N_active + causal "
        "attention / 2), recompute excluded"
    )
    console.print(result.explain(), markup=False)
