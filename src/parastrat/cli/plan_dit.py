"""``parastrat plan-dit``: rank Ulysses/ring/CFG/TP splits for diffusion-transformer inference.

``--format table`` (default) prints the ranking with reasons; ``json`` one JSON document;
``mindiesd`` the best split as the launch flags MindIE-SD's examples take
(``--ulysses_size U --ring_size R --cfg_size C --tp_size T`` and the memory switches the plan
was priced with: ``--vae_parallel --dit_fsdp --t5_fsdp --offload_model True``); ``launch``
the same for ``--framework`` (a switch the framework cannot spell is a warning on stderr).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..errors import SpecError, StrategyError, UsageError
from ..spec.dit_frameworks import FRAMEWORKS, get_framework
from ..spec.hardware import GiB
from ..strategy import Strategy
from ._args import Arg, add_args, arg, store_true
from ._common import (
    console,
    err_console,
    latency_seconds,
    positive_int,
    print_json,
    requests_per_s,
)


def register(subparsers) -> None:
    """Add the ``plan-dit`` subcommand (rank Ulysses/ring/CFG/TP splits for DiT inference) to
    ``subparsers``."""
    p = subparsers.add_parser(
        "plan-dit",
        help="choose Ulysses/ring/CFG/TP for DiT inference (MindIE-SD, xDiT)",
        description="Rank every legal split of the devices into Ulysses, ring, CFG and TP "
        "degrees for one diffusion-transformer generation.",
    )
    add_args(p.add_mutually_exclusive_group(required=True), SOURCE_ARGS)
    add_args(p, WORKLOAD_ARGS)
    add_args(p.add_mutually_exclusive_group(), GUIDANCE_ARGS)
    add_args(p, PLACEMENT_ARGS)
    add_args(p, memory_args())
    p.set_defaults(func=run)


#: Where the transformer comes from: a preset or a diffusers config (one of the two).
SOURCE_ARGS = (
    arg(
        "--model",
        help="DiT preset (flux.1-dev, flux.1-schnell, sd3-medium, sd3.5-large, wan2.1-t2v-1.3b, "
        "wan2.1-t2v-14b, wan2.2-t2v-a14b, wan2.2-ti2v-5b, hunyuanvideo, cogvideox-2b, "
        "cogvideox-5b, cogvideox1.5-5b, mochi-1, qwen-image)",
    ),
    arg(
        "--config",
        metavar="PATH",
        help="a diffusers transformer config.json (or its folder) instead of a preset: Flux, "
        "SD3, Wan, HunyuanVideo, CogVideoX, Qwen-Image, Mochi transformer classes",
    ),
)

#: The devices and the generation: output size, calibration and denoising steps.
WORKLOAD_ARGS = (
    arg("--devices", "--gpus", type=positive_int, required=True, help="devices to use"),
    arg("--accelerator", required=True, help="e.g. h100, ascend-910b"),
    arg("--height", type=positive_int, required=True, help="output height, pixels"),
    arg("--width", type=positive_int, required=True, help="output width, pixels"),
    arg("--frames", type=positive_int, default=1, help="output frames (video)"),
    arg(
        "--calibration",
        default=None,
        help="calibration JSON from `parastrat bench` (collectives; with --kernels also the "
        "GEMM/HBM fractions and the host's seconds per eager op)",
    ),
    arg("--steps", type=positive_int, required=True, help="denoising steps"),
)

#: Classifier-free guidance on or off (one of the two; neither: the model's default).
GUIDANCE_ARGS = (
    arg(
        "--guidance",
        dest="guidance",
        action="store_const",
        const=True,
        help="classifier-free guidance: two branches per step (CFG parallelism possible); "
        "default: follow the model (guidance-distilled FLUX.1/HunyuanVideo run one branch)",
    ),
    arg(
        "--no-guidance",
        dest="guidance",
        action="store_const",
        const=False,
        help="one branch per step (guidance scale 1); default: follow the model",
    ),
)

#: What the search may try and where the models sit.
PLACEMENT_ARGS = (
    arg("--top-k", type=positive_int, default=5, help="candidates to show"),
    store_true(
        "--data-parallel", "also try replicas serving separate requests (rank by throughput)"
    ),
    arg(
        "--max-latency",
        type=latency_seconds,
        default=None,
        metavar="S",
        help="a latency bound per request (a serving SLO): slower splits are dropped; with "
        "--data-parallel, the most requests per second within it",
    ),
    store_true(
        "--smallest",
        "find the fewest devices (up to --devices) on which a split fits, or with --min-rps, "
        "that serve that many requests per second",
    ),
    arg(
        "--min-rps",
        type=requests_per_s,
        default=None,
        metavar="R",
        help="with --smallest: the requests per second the devices must serve (replicas "
        "allowed, within --max-latency if given)",
    ),
    store_true("--allow-cross-node", "let TP and Ulysses leave one NVLink node / HCCS island"),
    store_true(
        "--vae-parallel",
        "the VAE decode is split over the devices (MindIE-SD --vae_parallel, xDiT "
        "--use_parallel_vae; diffusers has none)",
    ),
    store_true("--offload-text-encoder", "do not count the text encoder in device memory"),
    store_true(
        "--vae-tiling",
        "decode in tiles (diffusers' enable_tiling) even where the VAE's pipeline does not "
        "by default: less decode memory, some overlap recomputed",
    ),
)


def memory_args() -> tuple[Arg, ...]:
    """Sharding, offloading and precision of the models' weights, then the run's execution
    (sequential CFG, torch.compile) and the output format."""
    from ..estimate.dit_memory import DTYPE_BYTES

    return (
        store_true(
            "--dit-fsdp",
            "shard the transformer's parameters over the split's ranks, one block gathered at "
            "a time (FSDP FULL_SHARD, as Wan's --dit_fsdp)",
        ),
        store_true("--encoder-fsdp", "shard the text encoder the same way (Wan's --t5_fsdp)"),
        store_true(
            "--offload-model",
            "text encoder on the device only for the prompts, transformer moved to the host "
            "before the VAE decode (Wan's --offload_model True)",
        ),
        arg(
            "--weight-precision",
            choices=tuple(DTYPE_BYTES),
            default=None,
            help="dtype the transformer's parameters are stored in (default: the run's bf16; "
            "Wan2.1's own generate.py keeps its fp32 checkpoint)",
        ),
        store_true(
            "--sequential-cfg",
            "the two guidance branches run one after the other (Wan's generate.py), not as "
            "one batch: one branch's activations in memory",
        ),
        store_true(
            "--compile",
            "the transformer runs under torch.compile (fused element-wise kernels, fewer launches)",
        ),
        arg(
            "--framework",
            choices=tuple(FRAMEWORKS),
            default=None,
            help="the serving framework: only the splits it runs for this model, launched as it "
            "takes them (default: mindiesd on Ascend, xdit on GPUs; any: every split the model "
            "prices)",
        ),
        arg(
            "--format",
            choices=("table", "json", "launch", "mindiesd"),
            default="table",
            help="launch: the best split as the framework's launch flags (mindiesd: the same, "
            "with --framework mindiesd)",
        ),
    )


#: Python argument spellings in library messages -> the flag that sets them here.
CLI_TERMS = {
    "leave guidance=None": "omit --guidance",
    "guidance=None": "no --guidance/--no-guidance flag",
    "guidance=True": "--guidance",
    "guidance=False": "--no-guidance",
    "vae_parallel=True": "--vae-parallel",
    "vae_tiling=True": "--vae-tiling",
    "text_encoder_on_device=False": "--offload-text-encoder",
    "allow_cross_node=True": "--allow-cross-node",
    "data_parallel=True": "--data-parallel",
    "max_latency_s": "--max-latency",
    "compiled=True": "--compile",
    "compiled=False": "no --compile",
    "framework='any'": "--framework any",
    "framework='xdit'": "--framework xdit",
    "framework='mindiesd'": "--framework mindiesd",
    "memory=DiTMemoryOptions(encoder_fsdp=True)": "--encoder-fsdp",
    "DiTMemoryOptions(dit_fsdp=True)": "--dit-fsdp",
    "DiTMemoryOptions(encoder_fsdp=True)": "--encoder-fsdp",
    "DiTMemoryOptions(offload=True)": "--offload-model",
    "offload=True with FSDP sharding": "--offload-model with --dit-fsdp/--encoder-fsdp",
    "use offload=True alone": "use --offload-model alone",
    "or dit_fsdp/encoder_fsdp without offload": "or --dit-fsdp/--encoder-fsdp without it",
}


def cli_terms(message: str) -> str:
    """``message`` with the Python argument names it mentions replaced by this command's flags."""
    for spelling, cli_flag in CLI_TERMS.items():
        message = message.replace(spelling, cli_flag)
    return message


def _cli_strings(value: Any) -> Any:
    """A JSON-ready value with :func:`cli_terms` applied to every string in it (keys kept)."""
    if isinstance(value, str):
        return cli_terms(value)
    if isinstance(value, dict):
        return {k: _cli_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cli_strings(v) for v in value]
    return value


def _plan(args: argparse.Namespace):
    from ..errors import UsageError
    from ..estimate.dit_memory import DiTMemoryOptions
    from ..estimate.dit_options import DiTRequest, DiTSearch, DiTSwitches
    from ..planner.dit import plan_dit
    from ..planner.dit_sizing import smallest_dit
    from ..spec.cluster import Cluster, load_calibration
    from ..spec.dit import DiTSpec

    cal = load_calibration(args.calibration) if args.calibration else None
    cluster = Cluster(accelerator=args.accelerator, num_devices=args.devices, calibration=cal)
    model = DiTSpec.from_diffusers_config(args.config) if args.config else args.model
    memory = DiTMemoryOptions(
        dit_fsdp=args.dit_fsdp,
        encoder_fsdp=args.encoder_fsdp,
        offload=args.offload_model,
        weight_precision=args.weight_precision,
        cfg_batched=not args.sequential_cfg,
    )
    if args.min_rps is not None and not args.smallest:
        raise UsageError("--min-rps sizes the service: give it with --smallest")
    request = DiTRequest(
        height=args.height,
        width=args.width,
        frames=args.frames,
        steps=args.steps,
        guidance=args.guidance,
    )
    switches = DiTSwitches(
        vae_parallel=args.vae_parallel,
        vae_tiling=True if args.vae_tiling else None,
        text_encoder_on_device=not args.offload_text_encoder,
        compiled=args.compile,
        memory=memory,
        framework=_framework(args),
    )
    search = DiTSearch(
        top_k=args.top_k,
        data_parallel=args.data_parallel,
        allow_cross_node=args.allow_cross_node,
        max_latency_s=args.max_latency,
    )
    plan = functools.partial(smallest_dit, min_requests_per_s=args.min_rps)
    return (plan if args.smallest else plan_dit)(
        model, cluster, request=request, switches=switches, search=search
    )


def _framework(args: argparse.Namespace) -> str | None:
    """``--framework``; ``--format mindiesd`` asks for MindIE-SD's flags, so its limits too;
    ``--format launch`` needs a framework that has a launch."""
    if args.format == "launch" and args.framework == "any":
        raise UsageError(
            "--framework any has no launch flags (it is a what-if over every split); pick "
            "--framework mindiesd, xdit or diffusers"
        )
    if args.format != "mindiesd":
        return args.framework
    if args.framework not in (None, "mindiesd"):
        raise UsageError(
            f"--format mindiesd prints MindIE-SD's flags, but --framework is {args.framework}; "
            "use --format launch for that framework's flags"
        )
    return "mindiesd"


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat plan-dit``: rank the splits for the workload and print the ranking with
    reasons, one JSON document, or the best split's MindIE-SD flags; return 0.  Messages name
    this command's flags (``--no-guidance``), not the Python arguments."""
    from ..planner.dit import label
    from ..planner.sensitivity import sensitivity_lines

    try:
        plan = _plan(args)
    except (SpecError, StrategyError, UsageError) as exc:
        raise UsageError(cli_terms(str(exc))) from None
    if args.format == "json":
        print_json(_cli_strings(plan.to_dict()))
        return 0
    if args.format in ("launch", "mindiesd"):
        if _replicas(plan.best.strategy) > 1:
            err_console.print(f"# {_replica_note(plan.best.strategy, plan.devices)}")
        for line in _launch_notes(plan):
            err_console.print(f"# {line}", markup=False)
        console.print(plan.launch(), markup=False)
        return 0
    w = plan.workload
    table = Table(
        title=f"{plan.model} on {plan.devices} x {plan.accelerator}: "
        f"{w['width']}x{w['height']}x{w['frames']}, {w['steps']} steps, "
        f"guidance {'on' if w['guidance'] else 'off'}"
        f"{' (model default)' if w.get('guidance_from') == 'model' else ''} "
        f"({w['video_tokens']} + {w['text_tokens']} tokens)"
    )
    rate = plan.objective == "throughput"  # replicas tried: ranked by requests per second
    numeric = ("#", "req/s", "latency s", "s/step", "GiB/dev")
    for col in ("#", *(("req/s",) if rate else ()), "strategy", "latency s", "s/step"):
        table.add_column(col, justify="right" if col in numeric else "left")
    table.add_column("GiB/dev", justify="right")
    table.add_column("why")
    for i, c in enumerate(plan.candidates, 1):
        table.add_row(
            str(i),
            *((f"{c.requests_per_s:.3g}",) if rate else ()),
            label(c.strategy),
            f"{c.latency_s:.3g}",
            f"{c.per_step_s:.3g}",
            f"{c.memory.total / GiB:.1f}",
            escape(cli_terms("\n".join(c.reasons))),
        )
    console.print(table)
    if plan.track_record is not None:
        console.print(f"record: {plan.track_record.summary()}", markup=False)
    for beside in plan.published:
        console.print(beside.summary(), markup=False)
    for line in sensitivity_lines(list(plan.sensitivity)):
        console.print(line, markup=False)
    for a in plan.advice:
        console.print(f"MindIE-SD advice -- {escape(cli_terms(a))}")
    for wmsg in plan.best.report.warnings:
        console.print(f"[yellow]warning:[/] {escape(cli_terms(wmsg))}")
    note = _replica_note(plan.best.strategy, plan.devices)
    title = get_framework(plan.framework).title
    for line in plan.launch_warnings():
        console.print(f"[yellow]warning:[/] {escape(cli_terms(line))}")
    if plan.launch():
        console.print(
            f"launch ({title}): {note + ', each with ' if note else ''}{plan.launch()}",
            markup=False,
        )
    elif plan.framework != "any":
        console.print(f"launch ({title}): {_NO_LAUNCH}", markup=False)
    return 0


#: What an empty launch means for a framework that has one (diffusers on one device).
_NO_LAUNCH = "one device per generation: no ContextParallelConfig (no enable_parallelism)"


def _launch_notes(plan: Any) -> list[str]:
    """What the launch line leaves out: the priced switches the framework cannot carry, and
    why it is empty where the framework has a launch."""
    notes = [cli_terms(w) for w in plan.launch_warnings()]
    if not plan.launch() and plan.framework != "any":
        notes.append(_NO_LAUNCH)
    return notes


def _replicas(s: Strategy) -> int:
    """Data-parallel replicas of a split (1 without)."""
    return s.dp or 1


def _replica_note(s: Strategy, devices: int) -> str:
    """How the devices divide into replicas that each run the launch flags ('' for one)."""
    dp = _replicas(s)
    if dp == 1:
        return ""
    per = devices // dp
    return f"{dp} replicas of {per} device{'s' if per > 1 else ''} serving separate requests"
