"""Helpers shared by the CLI subcommands: strategy flags, output, and user-error handling.

Subcommands stay thin: they parse, call the library, and print.  Every user mistake surfaces
as one of the typed errors below and becomes exit status 2 with a message, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..errors import MissingExtraError, SpecError, StrategyError, UsageError
from ._args import Arg, add_args, arg, store_true

#: Errors that are the user's to fix: printed with their hint, exit status 2.
USER_ERRORS = (StrategyError, SpecError, UsageError, MissingExtraError)


def _width(stream) -> int | None:
    """Terminal width when interactive; otherwise $COLUMNS or 140, so that tables written to a
    pipe or a file keep one row per line instead of rich's 80-column default."""
    if stream.isatty():
        return None
    try:
        return int(os.environ.get("COLUMNS", "140"))
    except ValueError:
        return 140


class _Console(Console):
    """rich's Console, but a closed pipe (``parastrat layout ... | head -1``) raises
    BrokenPipeError for :func:`parastrat.cli.main` to end with, as a JSON print does, instead
    of rich's own ``SystemExit(1)`` (the status of an internal error)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # nothing more reaches the reader; the interpreter's final flush stays quiet
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.file.fileno())
        raise BrokenPipeError


console = _Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err_console = _Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))

#: The recompute mode explain and memory price when --recompute is not given: none, Megatron
#: Core's default (``recompute_granularity=None``) and what ``plan`` shows for a strategy whose
#: activations fit; ``plan`` itself searches every mode unless --recompute pins one.
DEFAULT_RECOMPUTE = "none"
RECOMPUTE_HELP = (
    "activation recompute: none (default, as Megatron Core and as plan shows a strategy whose "
    "activations fit), selective (attention core) or full"
)

STRATEGY_FLAGS = ("tp", "pp", "vpp", "cp", "ep", "etp", "ulysses", "ring", "cfg")


#: Largest whole number a flag takes (the int32 range every framework's config fields share).
MAX_FLAG_INT = 2**31 - 1


def whole_number(
    text: str, minimum: int = 0, maximum: int = MAX_FLAG_INT, bound_note: str = ""
) -> int:
    """A whole number written in ASCII digits only, in ``[minimum, maximum]``: ``int()`` alone
    would also take ``'1_000'``, ``' 8 '``, ``'+8'`` and other scripts' digits (``'٨'``)."""
    if not (isinstance(text, str) and text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(
            f"expected a whole number in digits 0-9, got {text!r}"
        ) from None
    if len(text) > 12 or int(text) > maximum:
        raise argparse.ArgumentTypeError(
            f"expected a number <= {maximum:,}, got {text}{bound_note}"
        )
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (ASCII digits, at most :data:`MAX_FLAG_INT`)."""
    return whole_number(text, 1)


def nonnegative_int(text: str) -> int:
    """argparse type: a whole number >= 0 (ASCII digits, at most :data:`MAX_FLAG_INT`)."""
    return whole_number(text, 0)


def shard_degree(text: str) -> int:
    """argparse type: ``-1`` (torchtitan's "the rest of dp") or a whole number >= 1."""
    if text == "-1":
        return -1
    try:
        return whole_number(text, 1)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; or -1 for the rest of dp") from None


def device_count(text: str) -> int:
    """argparse type: a device count, 1 to :data:`~parastrat.spec.cluster.MAX_DEVICES`."""
    from ..spec.cluster import MAX_DEVICES

    note = " (parastrat's bound on devices, above any cluster built so far; see 'Bounds' in "
    return whole_number(text, 1, MAX_DEVICES, note + "docs/troubleshooting.md)")


#: Longest sequence a flag takes: 2^27 tokens (128 Mi), beyond the longest context trained so
#: far (10 Mi tokens).
MAX_SEQ_LEN = 2**27


def seq_len(text: str) -> int:
    """argparse type: a sequence length, 1 to :data:`MAX_SEQ_LEN` tokens."""
    note = " (parastrat's bound on sequence length; see 'Bounds' in docs/troubleshooting.md)"
    return whole_number(text, 1, MAX_SEQ_LEN, note)


def headroom_fraction(text: str) -> float:
    """argparse type: a memory headroom, a fraction of device memory in [0, 0.5)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction, e.g. 0.05, got {text!r}") from None
    if not math.isfinite(value) or not 0 <= value < 0.5:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 0.5), got {text!r}")
    return value


def train_tokens(text: str) -> float:
    """argparse type: a number of training tokens (``15T``, ``300B``, ``1.5e12``)."""
    from ..estimate.train_time import token_count

    try:
        return token_count(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_number(text: str, flag: str, unit: str, example: str, maximum: float) -> float:
    """argparse form of :func:`parastrat.checks.require_positive`: ``text`` as a finite number
    of ``unit`` in ``(0, maximum]``, else an argparse error naming ``flag`` and ``example``."""
    from ..checks import require_positive

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of {unit}, e.g. {example}, got {text!r}"
        ) from None
    try:
        return require_positive(flag, value, example, maximum)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def deadline_days(text: str) -> float:
    """argparse type: a deadline in days, a positive number up to a century."""
    from ..estimate.train_time import MAX_DAYS

    return positive_number(text, "--deadline-days", "days", "90", MAX_DAYS)


def requests_per_s(text: str) -> float:
    """argparse type: a request rate, positive, up to a million per second."""
    return positive_number(text, "--min-rps", "requests per second", "2.5", 1e6)


def latency_seconds(text: str) -> float:
    """argparse type: a latency bound in seconds, positive, up to a day."""
    return positive_number(text, "--max-latency", "seconds", "5", 86_400)


HEADROOM_HELP = (
    "keep this fraction of device memory free on top of the estimate's allowance for the CUDA "
    "context, communicator buffers and fragmentation (e.g. 0.05; default 0)"
)

#: Most ranks ``--world N`` spawns on this machine (each is a Python process with torch).
MAX_LOCAL_RANKS = 256


def local_world(text: str) -> int:
    """argparse type: how many local ranks to spawn, 1 to :data:`MAX_LOCAL_RANKS`."""
    note = " (local ranks on this machine; beyond that launch with torchrun on several hosts)"
    return whole_number(text, 1, MAX_LOCAL_RANKS, note)


def finite_seconds(text: str) -> float:
    """argparse type: a timeout in seconds, a finite number > 0 (not nan, inf, 0 or -1)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, e.g. 600, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"{text} s is beyond what a wait can take ({MAX_TIMEOUT_S:,} s, about 24 days); "
            f"give {MAX_TIMEOUT_S} or less"
        )
    return value


#: Longest timeout a wait takes: ``threading`` / ``multiprocessing`` waits refuse more than
#: about 2**31 ms ("OverflowError: timeout is too large"), so a day count stays well inside.
MAX_TIMEOUT_S = 2_000_000


#: The strategy flags, in ``--help`` order (the data-parallel sharding flags follow them).
STRATEGY_ARGS = (
    arg(
        "--strategy",
        default=None,
        metavar="TEXT",
        help='the whole strategy as a plan prints it ("TP2 PP8(VP4)[Et|(t*2|)*30mL] CP1 EP64 '
        'ETP1 DP64 SP") or as "tp=2,pp=8,vpp=4,ep=64,sp"; instead of the degree flags',
    ),
    arg("--tp", type=positive_int, default=1, help="tensor parallel degree"),
    arg("--pp", type=positive_int, default=1, help="pipeline parallel degree"),
    arg("--vpp", type=positive_int, default=1, help="virtual pipeline stages per rank"),
    arg(
        "--cp",
        type=positive_int,
        default=None,
        help="context parallel degree (= ulysses * ring; alone it means ring)",
    ),
    arg("--ep", type=positive_int, default=1, help="expert parallel degree"),
    arg(
        "--etp",
        type=positive_int,
        default=None,
        help="expert tensor parallel degree (default 1 with EP, else TP)",
    ),
    store_true("--sp", "sequence parallelism (needs TP > 1)"),
    arg(
        "--ulysses",
        type=positive_int,
        default=1,
        help="Ulysses (all-to-all) degree; for a language model Megatron's cp_comm_type=a2a",
    ),
    arg(
        "--ring",
        type=positive_int,
        default=None,
        help="ring attention degree (default: cp / ulysses)",
    ),
    arg("--cfg", type=positive_int, default=1, help="CFG parallel degree (1 or 2)"),
    arg(
        "--order",
        default=None,
        help="rank order, e.g. tp-cp-ep-dp-pp (Megatron) or tp-sp-pp-cfg-dp (xDiT)",
    ),
    arg(
        "--first-stage-layers",
        type=positive_int,
        default=None,
        help="layers on the first pipeline stage (uneven split)",
    ),
    arg(
        "--last-stage-layers",
        type=positive_int,
        default=None,
        help="layers on the last pipeline stage (uneven split)",
    ),
    store_true(
        "--account-for-embedding",
        "count the input embedding as a layer of the first pipeline stage",
    ),
    store_true(
        "--account-for-loss",
        "count the output layer and loss as a layer of the last pipeline stage",
    ),
    arg(
        "--pipeline-layout",
        default=None,
        metavar="LAYOUT",
        help="Megatron pipeline_model_parallel_layout, as a plan prints it in brackets, e.g. "
        "'Et|(t*2|)*30mL' (E embedding, t decoder layer, m MTP layer, L loss, | next virtual "
        "stage); sets the layers of every stage and the vpp",
    ),
)


def add_strategy_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--strategy`` (the whole strategy as text) and the degree flags ``--tp --pp --vpp
    --cp --ep --etp --sp --ulysses --ring --cfg --order``, the pipeline split and layout, and
    the data-parallel sharding."""
    g = parser.add_argument_group("strategy")
    add_args(g, STRATEGY_ARGS)
    add_sharding_flags(g)


def add_sharding_flags(g: Any) -> None:
    """Add ``--dp-shard --dp-replicate --fsdp`` (data-parallel sharding, docs/fsdp.md)."""
    add_args(g, sharding_args())


def sharding_args() -> tuple[Arg, ...]:
    """The data-parallel sharding flags (built on call: the FSDP levels come from the rules)."""
    from ..rules import FSDP_LEVELS

    return (
        arg(
            "--dp-shard",
            type=shard_degree,
            default=None,
            help="ranks on the data-parallel shard axis (default or -1: the rest of dp)",
        ),
        arg(
            "--dp-replicate",
            type=positive_int,
            default=None,
            help="data-parallel replicas of the sharded state (HSDP; default 1)",
        ),
        arg(
            "--fsdp",
            choices=FSDP_LEVELS,
            default=None,
            help="what the shard axis shards (Megatron FSDP level; default: no sharding)",
        ),
    )


def add_model_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add ``--model NAME | --hf-config PATH``, the two ways to name a training model."""
    src = parser.add_mutually_exclusive_group(required=required)
    src.add_argument("--model", help="model preset name (e.g. llama3-70b, deepseek-v3)")
    src.add_argument("--hf-config", help="path to a local Hugging Face config.json")


def load_model(args: argparse.Namespace):
    """The model named by ``--model`` or ``--hf-config`` (None when neither was given)."""
    if getattr(args, "hf_config", None):
        from ..spec.model import ModelSpec

        return ModelSpec.from_hf_config(args.hf_config)  # a diffusers one: says plan-dit
    if getattr(args, "model", None):
        from ..spec import models

        return models.get_llm(args.model)
    return None


def parse_strategy_text(text: str, training: bool = False):
    """The :class:`~parastrat.Strategy` a strategy text names (``--strategy``, ``--compare``):
    ``training`` (the target is a language model): read as a training strategy, so that
    "Ulysses4" is Megatron's CP4 with ``cp_comm_type='a2a'``, not an xDiT inference grid."""
    from ..strategy import Strategy, as_training

    parsed = Strategy.parse(text)  # plan-dit's "Ulysses4 x TP2" reads too
    return as_training(parsed) if training else parsed


def strategy_from_args(args: argparse.Namespace, training: bool = False, model: Any = None):
    """Build the :class:`~parastrat.Strategy` the strategy flags describe.  ``training`` (the
    target is a language model): ``--ulysses`` without ``--order`` or ``--cfg`` is Megatron's
    Ulysses context parallelism (``cp_comm_type='a2a'``) on the training order, not an
    xDiT-style inference grid.  A refusal raised while building it (before any world is
    known) gets its fixes worked out for the command's device count
    (:func:`parastrat.rules.world_fixes`, with ``model`` where given)."""
    from .. import rules
    from ..strategy import Strategy

    if getattr(args, "strategy", None):
        _refuse_degree_flags(args)
        return parse_strategy_text(args.strategy, training)
    fields = strategy_fields(args, training)
    try:
        return Strategy(**fields)
    except StrategyError as exc:
        world = getattr(args, "gpus", None) or getattr(args, "world", None)
        if not isinstance(world, int) or world < 1:
            raise
        seq = {"seq_len": args.seq_len} if getattr(args, "seq_len", None) else {}
        fixed = rules.world_fixes(exc.violations, fields, world, model, **seq)
        raise StrategyError(fixed) from None


def strategy_fields(args: argparse.Namespace, training: bool = False) -> dict[str, Any]:
    """The :class:`~parastrat.Strategy` keyword arguments the strategy flags give (without
    ``--strategy``): Megatron's order for a training ``--ulysses`` (:func:`strategy_from_args`;
    training too when ``--cp``, ``--ep`` or ``--etp`` is given)."""
    from ..strategy import MEGATRON_ORDER

    order = args.order
    # --cp, --ep and --etp are training degrees: Ulysses beside them is Megatron's, whether or
    # not the command names a model
    training = training or (args.cp or 1) > 1 or (args.ep or 1) > 1 or args.etp is not None
    if training and order is None and args.ulysses > 1 and args.cfg == 1:
        order = MEGATRON_ORDER
    return dict(
        tp=args.tp,
        pp=args.pp,
        vpp=args.vpp,
        cp=args.cp,
        ep=args.ep,
        etp=args.etp,
        sp=args.sp,
        ulysses=args.ulysses,
        ring=args.ring,
        cfg=args.cfg,
        order=order,
        first_stage_layers=args.first_stage_layers,
        last_stage_layers=args.last_stage_layers,
        account_for_embedding=args.account_for_embedding,
        account_for_loss=args.account_for_loss,
        pipeline_layout=getattr(args, "pipeline_layout", None),
        dp_shard=getattr(args, "dp_shard", None),
        dp_replicate=getattr(args, "dp_replicate", None),
        fsdp=getattr(args, "fsdp", None),
    )


def _refuse_degree_flags(args: argparse.Namespace) -> None:
    """UsageError when ``--strategy`` comes with a strategy or sharding flag set away from its
    default (the two would disagree on which degrees run)."""
    given = [
        row.names[0]
        for row in (*STRATEGY_ARGS, *sharding_args())
        if row.names[0] != "--strategy"
        and getattr(args, row.names[0].lstrip("-").replace("-", "_"), None)
        not in (row.options.get("default"), None, False)
    ]
    if given:
        raise UsageError(
            f"--strategy gives every degree; drop {', '.join(given)} or write it into the "
            "strategy text"
        )


# ---- the typed values a command runs with ------------------------------------------------------
#: Title of the implementation switches' argument group.
SWITCHES_TITLE = (
    "implementation switches (Megatron Core / Bridge defaults: flash attention, TP "
    "overlap (off at NVFP4, as Bridge's NVFP4 recipes), DP overlap, distributed optimizer "
    "on; CUDA graphs and MoE overlaps off)"
)


def _off(name: str, dest: str, text: str) -> Arg:
    """A ``--no-X`` flag that sets the switch ``dest`` to False (unset: the field's default)."""
    return arg(name, dest=dest, action="store_const", const=False, default=None, help=text)


def _on(name: str, dest: str, text: str) -> Arg:
    """A flag that sets the switch ``dest`` to True (unset: the field's default)."""
    return arg(name, dest=dest, action="store_const", const=True, default=None, help=text)


def _either(name: str, dest: str, text: str) -> Arg:
    """A ``--X / --no-X`` pair for the switch ``dest`` (unset: the field's default)."""
    return arg(name, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text)


#: The switches the memory estimate reads.
MEMORY_SWITCH_ARGS = (
    _off("--no-flash-attention", "flash_attention", "unfused attention: scores through HBM"),
    _off("--no-distributed-optimizer", "distributed_optimizer", "full optimizer state per rank"),
    _either(
        "--fp8-param-gather",
        "fp8_param_gather",
        "FP8 primary weights (default: as Bridge's FP8 recipes, on)",
    ),
    _on(
        "--grad-reduce-in-fp32",
        "grad_reduce_in_fp32",
        "FP32 gradient buffer and reduce-scatter (Bridge's bf16_mixed; default BF16, as "
        "Megatron Core and Bridge's performance recipes)",
    ),
    arg(
        "--cpu-offload-layers",
        dest="cpu_offload_layers",
        type=nonnegative_int,
        default=None,
        metavar="N",
        help="CPU activation offloading of N layers (Megatron's cpu_offloading_num_layers; "
        "needs pp=1 and no recompute; default 0, off)",
    ),
)


#: The switches only the step-time estimate reads: TP and DP overlap, the fused loss.
OVERLAP_SWITCH_ARGS = (
    _either(
        "--cross-entropy-fusion",
        "cross_entropy_fusion",
        "fused vocabulary-parallel cross-entropy (Megatron's cross_entropy_loss_fusion; "
        "default: on as Megatron Bridge's models, off on Ascend as MindSpeed-LLM's scripts)",
    ),
    _either(
        "--tp-comm-overlap",
        "tp_comm_overlap",
        "TP communication behind the GEMMs (userbuffers; default: on with SP inside the "
        "scale-up domain, off at NVFP4 as Bridge's NVFP4 recipes and on Ascend, where "
        "MindSpeed-LLM keeps MC2 off)",
    ),
    _off("--no-overlap-grad-reduce", "overlap_grad_reduce", "DP gradient sync after the backward"),
)

#: The MoE overlaps (after the dispatcher).
MOE_OVERLAP_ARGS = (
    _on(
        "--moe-a2a-overlap",
        "moe_a2a_overlap",
        "overlap_moe_expert_parallel_comm (combined 1F1B)",
    ),
    _on(
        "--moe-shared-expert-overlap",
        "moe_shared_expert_overlap",
        "moe_shared_expert_overlap: shared experts run during dispatch/combine",
    ),
)


def step_switch_args() -> tuple[Arg, ...]:
    """The switches only the step-time estimate reads (after :data:`MEMORY_SWITCH_ARGS`):
    overlaps, CUDA graphs and the MoE token dispatcher."""
    from ..spec.workload import CUDA_GRAPH_SCOPES, DISPATCHERS, FLEX_BACKENDS

    graphs = arg(
        "--cuda-graphs",
        nargs="?",
        const="full_iteration",
        default=None,
        metavar="SCOPES",
        help="price CUDA graphs: no value = the whole iteration, or comma-separated scopes ("
        + ", ".join(CUDA_GRAPH_SCOPES)
        + "); captured blocks cost no host launch time",
    )
    dispatcher = arg(
        "--moe-dispatcher",
        choices=(*DISPATCHERS, *FLEX_BACKENDS),
        default=None,
        help="token dispatcher: alltoall (default: one copy per routed expert) or flex "
        "(DeepEP/HybridEP: one copy per destination rank inside a scale-up domain, per "
        "destination domain across the scale-out link)",
    )
    return (*OVERLAP_SWITCH_ARGS, graphs, dispatcher, *MOE_OVERLAP_ARGS)


def add_switch_args(parser: argparse.ArgumentParser, *, step: bool = True) -> None:
    """Every implementation switch (:class:`~parastrat.spec.workload.Switches`) as a flag whose
    destination is the field's name; unset flags keep the field's default.  ``step=False``:
    only the switches the memory estimate reads (flash attention, distributed optimizer, FP8
    parameter gather)."""
    g = parser.add_argument_group(SWITCHES_TITLE)
    add_args(g, MEMORY_SWITCH_ARGS)
    if step:
        add_args(g, step_switch_args())


def switches_from_args(args: argparse.Namespace, *, searched: bool = False):
    """The :class:`~parastrat.spec.workload.Switches` of the parsed flags (``searched``: the
    recompute mode is the planner's to choose, not a switch)."""
    from ..spec.workload import SWITCH_FIELDS, Switches

    given = {k: getattr(args, k, None) for k in SWITCH_FIELDS}
    if searched:
        given.pop("recompute")
    return Switches(**{k: v for k, v in given.items() if v is not None})


def switch_flags(change: Mapping[str, Any]) -> str:
    """The flags that set ``change`` (:class:`~parastrat.spec.workload.Switches` fields to
    values), read from the switch tables: ``--cuda-graphs attn,mlp``, ``--tp-comm-overlap``,
    ``--moe-dispatcher flex``; a field only a ``--no-X`` flag sets reads "without --no-X", and
    a field no flag sets keeps its Python spelling (``name=value``)."""
    rows = {
        row.options.get("dest", row.names[0].lstrip("-").replace("-", "_")): row
        for row in (*MEMORY_SWITCH_ARGS, *step_switch_args())
    }
    return " ".join(
        _flag_words(rows[field], value) if field in rows else f"{field}={value!r}"
        for field, value in change.items()
    )


def _flag_words(row: Arg, value: Any) -> str:
    """The words of one switch table row that set ``value``."""
    name, options = row.names[0], row.options
    if isinstance(value, (frozenset, set, tuple, list)):
        return f"{name} {','.join(sorted(value))}"
    if not isinstance(value, bool):
        return f"{name} {value}"
    if options.get("action") is argparse.BooleanOptionalAction:
        return name if value else "--no-" + name.removeprefix("--")
    return name if options.get("const") is value else f"without {name}"


def workload_from_args(
    args: argparse.Namespace, model, global_batch_size: int | None, *, searched: bool = False
):
    """The :class:`~parastrat.spec.workload.Workload` of the parsed flags (``searched``: the
    micro-batch size is the planner's to choose)."""
    from ..spec.workload import Workload

    return Workload(
        model=model,
        seq_len=args.seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=None if searched else getattr(args, "micro_batch_size", None),
        precision=args.precision,
    )


def search_from_args(args: argparse.Namespace):
    """The planner's :class:`~parastrat.spec.workload.SearchSpace` of the parsed flags."""
    from ..spec.workload import SEARCH_FIELDS, SearchSpace

    given = {k: getattr(args, k, None) for k in SEARCH_FIELDS}
    return SearchSpace(**{k: v for k, v in given.items() if v is not None})


def require_writable(path: str | os.PathLike[str], what: str) -> None:
    """UsageError, before any work, when the ``what`` cannot be written to ``path``: it is a
    folder, its folder is missing, or that folder is not writable (a device or pipe such as
    /dev/null is taken as is).  The write itself stays whole-or-nothing (``_io.write_bytes``)."""
    from pathlib import Path

    from .._io import is_special

    target = Path(path)
    if is_special(target):
        return
    if target.is_dir():
        raise UsageError(f"cannot write the {what} to {target}: it is a folder; give a file name")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(
            f"cannot write the {what} to {target}: the folder {folder} does not exist; create "
            f"it first (mkdir -p {shlex.quote(str(folder))}) or give a path in an existing folder"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write the {what} to {target}: the folder {folder} is not writable; give "
            "a path in a folder you can write to"
        )


def print_json(obj: Any) -> None:
    """Print one JSON document on stdout (nothing else may be printed with --format json)."""
    try:  # JSON has no Infinity / NaN: a document that needs them is refused, not printed
        text = json.dumps(obj, indent=2, default=_json_default, allow_nan=False)
    except ValueError as exc:
        raise UsageError(
            f"the result holds a number JSON cannot carry ({exc}); check the inputs (a "
            "calibration's values, the batch and step counts) or use --format table"
        ) from None
    sys.stdout.write(text + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


#: The ``kind`` of a JSON error document, by the error's type (first match).
ERROR_KINDS = (
    (StrategyError, "strategy"),
    (SpecError, "spec"),
    (UsageError, "usage"),
    (MissingExtraError, "missing-extra"),
)


def error_document(exc: BaseException) -> dict[str, Any]:
    """The one JSON document ``--format json`` prints on stdout for a failure: ``{"error":
    {"kind", "message", "violations"}}``, ``kind`` one of strategy, spec, usage, missing-extra
    (a user's mistake: exit 2), rank-timeout or internal (exit 1; ``bench`` writes its own
    rank-failure document); ``violations`` lists each broken rule as ``check --format json``
    does (rule, message, hint, severity), the hint in this CLI's flags."""
    from ..errors import RankTimeoutError

    kind = next((k for t, k in ERROR_KINDS if isinstance(exc, t)), None)
    if kind is None:
        kind = "rank-timeout" if isinstance(exc, RankTimeoutError) else "internal"
    found = getattr(exc, "violations", []) if isinstance(exc, StrategyError) else []
    violations = [{**v.to_dict(), "hint": cli_words(v.hint)} for v in found]
    message = f"{len(found)} rule(s) broken" if found else cli_words(str(exc))
    if kind == "internal":
        message = f"{type(exc).__name__}: {exc}"
    return {"error": {"kind": kind, "message": message, "violations": violations}}


def report_user_error(exc: BaseException, *, as_json: bool = False) -> int:
    """Print a user error (with every violation and hint) on stderr, and with ``as_json`` its
    :func:`error_document` on stdout; return exit status 2.  Under a launcher only rank 0
    prints the document (ranks that reach the same mistake would put N JSON documents on one
    stdout); every rank keeps its text on stderr (a missing peer is one rank's own error)."""
    if as_json and _first_rank():
        print_json(error_document(exc))
    if isinstance(exc, StrategyError):
        err_console.print(f"[bold red]error:[/] {len(exc.violations)} rule(s) broken")
        for v in exc.violations:
            err_console.print(f"  [red]{escape(v.rule)}[/]: {escape(v.message)}")
            err_console.print(f"      fix: {escape(cli_words(v.hint))}")
    else:
        # escape: messages hold brackets ('pip install "parastrat[megatron]"', '[2, 2]')
        # that rich would otherwise read as markup and drop.
        err_console.print(f"[bold red]error:[/] {escape(cli_words(str(exc)))}")
    return 2


def _first_rank() -> bool:
    """False in a launched process other than rank 0 (the launcher's variables as
    :func:`~parastrat.runtime.backend.detect_env` reads them); True outside a launcher, or
    where those variables contradict each other (that error is this rank's own)."""
    from ..runtime.backend import detect_env

    try:
        return detect_env().rank == 0
    except UsageError:
        return True


#: Python spellings in library messages -> the flag that does the same on the command line.
PY_TO_CLI = {
    "Switches(tp_comm_overlap=True)": "--tp-comm-overlap",
    "account_for_embedding=True": "--account-for-embedding",
    "account_for_loss=True": "--account-for-loss",
    "or sp=False": "or drop --sp",
    "set sp=True": "add --sp",
    "or vpp=1": "or --vpp 1",
    "use True/'full'": "use full (or --cuda-graphs alone)",
    "ModelSpec.from_hf_config(path)": "--hf-config PATH",
    "cpu_offload_layers": "--cpu-offload-layers",
}
#: Strategy fields and switches a hint sets as ``name=value`` (``first_stage_layers=6``,
#: ``pipeline_layout='Et*7|...'``): on the command line ``--name value``.
_VALUE_FIELD = re.compile(
    r"\b(first_stage_layers|last_stage_layers|pipeline_layout|dp_shard|dp_replicate"
    r"|cuda_graphs|recompute)="
    r"('[^']*'|[^\s,;]+)"
)


#: A field reset to its default in a hint (``pipeline_layout=None``,
#: ``account_for_embedding=False``): on the command line, leaving its flag out.
_RESET_FIELD = re.compile(
    r"\b(first_stage_layers|last_stage_layers|pipeline_layout|dp_shard|cuda_graphs)=None"
    r"|\b(account_for_embedding|account_for_loss|moe_a2a_overlap)=False"
)


def cli_words(text: str) -> str:
    """``text`` with the Python arguments it names replaced by this CLI's flags."""
    for py, flag in PY_TO_CLI.items():
        text = text.replace(py, flag)
    text = _RESET_FIELD.sub(
        lambda m: f"drop --{(m.group(1) or m.group(2)).replace('_', '-')}", text
    )
    return _VALUE_FIELD.sub(lambda m: f"--{m.group(1).replace('_', '-')} {m.group(2)}", text)
