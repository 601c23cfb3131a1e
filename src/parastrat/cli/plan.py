"""``parastrat plan``: rank every legal training strategy for a model on a cluster."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..rules import FSDP_LEVELS
from ..spec.workload import RECOMPUTE_MODES
from ._args import add_args, arg, store_true
from ._common import (
    HEADROOM_HELP,
    add_model_args,
    add_switch_args,
    cli_words,
    console,
    deadline_days,
    device_count,
    err_console,
    headroom_fraction,
    load_model,
    positive_int,
    print_json,
    require_writable,
    search_from_args,
    seq_len,
    switch_flags,
    switches_from_args,
    train_tokens,
    workload_from_args,
)

FORMATS = ("table", "json", "yaml", "overrides", "megatron-args", "torchrun")


#: The devices, the accelerator, the workload and the calibration (after the model).
TARGET_ARGS = (
    arg(
        "--gpus",
        "--devices",
        dest="gpus",
        type=device_count,
        required=True,
        help="number of devices",
    ),
    arg(
        "--devices-per-node",
        type=device_count,
        default=None,
        help="devices per node (default: the accelerator preset's, e.g. 8 for h100)",
    ),
    arg(
        "--accelerator",
        default="h100",
        help="accelerator preset (h100, h200, b200, gb200, a100, ascend-910b, ...; "
        "`parastrat accelerators` lists them)",
    ),
    arg("--seq-len", type=seq_len, default=4096),
    arg(
        "--global-batch-size",
        type=positive_int,
        default=None,
        help="sequences per step (default: 4 x the number of devices)",
    ),
    arg(
        "--precision",
        default="bf16",
        help="bf16, fp8 (current scaling, Bridge's FP8-CS; fp8-ds / fp8-delayed and "
        "fp8-blockwise price those recipes), mxfp8 or nvfp4 (fp4; Blackwell only)",
    ),
    arg(
        "--calibration",
        default=None,
        help="calibration JSON from `parastrat bench` (collective alpha/busbw)",
    ),
    arg(
        "--train-tokens",
        type=train_tokens,
        default=None,
        metavar="TOKENS",
        help="also print how long a run of this many tokens takes at the predicted step "
        "(e.g. 15T, 300B, 1.5e12): steps, days and device-hours",
    ),
)


def add_target_args(p: argparse.ArgumentParser) -> None:
    """Model, device count, accelerator, workload and calibration arguments (plan, explain)."""
    add_model_args(p)
    add_args(p, TARGET_ARGS)


def build_target(args: argparse.Namespace):
    """(model, cluster, global batch) from :func:`add_target_args`' arguments."""
    from ..spec.cluster import Cluster, load_calibration

    model = load_model(args)
    cal = load_calibration(args.calibration) if args.calibration else None
    cluster = Cluster(
        accelerator=args.accelerator,
        num_devices=args.gpus,
        devices_per_node=args.devices_per_node,
        calibration=cal,
    )
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
    add_args(p, OUTPUT_ARGS)
    add_args(p.add_argument_group("pins and bounds"), PIN_ARGS)
    add_switch_args(p)
    p.set_defaults(func=run)


#: How many candidates to show, in which format, and where else to put them.
OUTPUT_ARGS = (
    arg("--top-k", type=positive_int, default=5),
    arg(
        "--format",
        choices=FORMATS,
        default="table",
        help="table; json/yaml (the candidates and the switch_advice of the choice); "
        "overrides (Megatron Bridge's run_recipe.py); megatron-args (Megatron-LM / "
        "MindSpeed-LLM pretrain_gpt.py arguments); torchrun (the launch command and its "
        "environment; Megatron-LM's launcher with HCCL settings on Ascend)",
    ),
    arg(
        "--recipe",
        default=None,
        help="Megatron Bridge recipe for --format torchrun and overrides (default: "
        "<model>_pretrain_config)",
    ),
    arg(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="draw every ranked candidate's throughput against its peak memory (the choice "
        "marked) and the top candidates' step-time terms",
    ),
    store_true(
        "--smallest",
        "find the fewest devices (up to --gpus) on which something fits (with --deadline-days, "
        "and trains --train-tokens in time); needs --global-batch-size, since the default "
        "batch would move with the --gpus bound",
    ),
    arg(
        "--deadline-days",
        type=deadline_days,
        default=None,
        metavar="DAYS",
        help="with --train-tokens: the run must finish within DAYS of wall clock; --smallest "
        "then finds the fewest devices that train it in time",
    ),
)

#: The search space: a pin and a bound per degree, then the batch, memory and sharding choices.
PIN_ARGS = (
    *(
        a
        for name in ("tp", "pp", "vpp", "cp", "ep", "etp")
        for a in (
            arg(f"--{name}", type=positive_int, default=None, help=f"pin {name}"),
            arg(f"--max-{name}", type=positive_int, default=None, help=f"bound {name}"),
        )
    ),
    arg("--ulysses", type=positive_int, default=None, help="pin the Ulysses part of CP"),
    arg("--micro-batch-size", type=positive_int, default=None),
    arg("--headroom", type=headroom_fraction, default=None, help=HEADROOM_HELP),
    arg("--recompute", choices=RECOMPUTE_MODES, default=None),
    arg(
        "--min-cp-tokens",
        type=positive_int,
        default=None,
        help="fewest tokens per CP rank worth splitting a sequence for (default 1024)",
    ),
    arg(
        "--fsdp",
        choices=("auto", "off", *FSDP_LEVELS[1:]),
        default=None,
        help="data-parallel sharding to search beside PP/TP/CP/EP: auto (no sharding, "
        "optim_grads and optim_grads_params, each as FSDP and HSDP), off (default) or one level",
    ),
)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat plan``: rank the strategies and print them; 0, or 2 when nothing fits."""
    from ..viz import figure_path

    _require_smallest_batch(args)
    if args.plot:
        require_writable(figure_path(args.plot), "plot")  # before the search
    model, cluster, gbs = build_target(args)
    budget = _budget(args)
    result = _search(args, model, cluster, gbs, budget)
    top = result.candidates[: args.top_k]
    if args.plot:
        from ..viz import plot_plan

        written = plot_plan(result, args.plot, device_bytes=cluster.accel.memory_bytes)
        err_console.print(f"wrote the plot to {written}", markup=False)
    if args.format in ("json", "yaml"):
        _print_candidates(result, top, args.format, args.train_tokens, budget)
    elif args.format in ("overrides", "megatron-args", "torchrun"):
        console.print(_launch_text(args, result, model, cluster, gbs), markup=False)
    else:
        print_table(result, top)
        if args.train_tokens is not None and top:
            line = _training_line(top[0].step, args.train_tokens, budget, result)
            if budget is not None and not budget.met_by(top[0].step):
                line += _smallest_hint(args, top[0].step, budget, result)
            console.print(line, markup=False)
    return 0


def _require_smallest_batch(args: argparse.Namespace) -> None:
    """UsageError for ``--smallest`` without ``--global-batch-size``: the default batch (4 x
    --gpus) scales with the bound, so the fewest devices would too (``size`` requires it)."""
    from ..errors import UsageError

    if args.smallest and args.global_batch_size is None:
        raise UsageError(
            "--smallest needs --global-batch-size: the fewest devices depend on the batch, and "
            f"the default (4 x --gpus) would move the answer with the --gpus bound; add e.g. "
            f"--global-batch-size {4 * args.gpus}, the batch of the same search without "
            "--smallest (as `parastrat size` takes it)"
        )


def _budget(args: argparse.Namespace):
    """The :class:`~parastrat.estimate.train_time.TrainingBudget` of ``--train-tokens`` and
    ``--deadline-days`` (None without a deadline)."""
    from ..errors import UsageError
    from ..estimate.train_time import TrainingBudget

    if args.deadline_days is None:
        return None
    if args.train_tokens is None:
        raise UsageError("--deadline-days needs --train-tokens (e.g. --train-tokens 15T)")
    return TrainingBudget(args.train_tokens, args.deadline_days)


def _training_line(step, tokens: float, budget, result) -> str:
    """How long ``tokens`` take with the choice (and on the model's record for this class),
    and whether that meets ``budget``."""
    from ..estimate.train_time import record_note

    training = step.time_to_train(tokens)
    line = f"time to train #1: {training.summary(result.cluster.accel.name)}"
    line += record_note(training, result.track_record)
    if budget is not None and not budget.met_by(step):
        line += f"; misses the {budget.days:g}-day deadline"
    return line


def _smallest_hint(args: argparse.Namespace, step, budget, result) -> str:
    """The command that finds the fewest devices meeting ``budget`` at the batch planned
    here: this one with ``--smallest``, ``--global-batch-size`` pinned and as bound the power
    of two at or above twice the devices perfect scaling would need (the smallest search
    bisects over powers of two up to its bound)."""
    import math

    from ..spec.cluster import MAX_DEVICES

    days = step.time_to_train(budget.tokens).days
    need = max(result.num_devices + 1, math.ceil(2 * result.num_devices * days / budget.days))
    bound = min(MAX_DEVICES, 2 ** math.ceil(math.log2(need)))
    gbs = result.global_batch_size
    return (
        f"; the fewest devices that meet it, at this global batch ({gbs}): "
        f"{_command_with(args, bound, gbs)}"
    )


#: Words of ``plan``'s command line that ``_command_with`` replaces (each takes one value).
_REPLACED = ("--gpus", "--devices", "--global-batch-size")


def _command_with(args: argparse.Namespace, gpus: int, gbs: int) -> str:
    """This run's command line with ``--smallest --gpus GPUS --global-batch-size GBS`` in
    place of its own device count and batch, shell-quoted."""
    words, given = [], list(getattr(args, "argv", None) or ["plan", "..."])
    skip = False
    for word in given:
        if skip:
            skip = False
        elif word in _REPLACED:
            skip = True
        elif word != "--smallest" and not word.startswith(tuple(f"{r}=" for r in _REPLACED)):
            words.append(word)
    tail = ["--smallest", "--gpus", str(gpus), "--global-batch-size", str(gbs)]
    return "parastrat " + shell_join([*words, *tail])


def _search(args: argparse.Namespace, model, cluster, gbs: int, budget=None):
    """The plan of the flags, with a progress bar on stderr for the table format."""
    from ..planner.search import plan

    workload = workload_from_args(args, model, gbs, searched=True)
    switches = switches_from_args(args, searched=True)
    space = search_from_args(args)
    with Progress(
        TextColumn("planning"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} strategies"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=args.format != "table",
    ) as bar:
        task = bar.add_task("plan", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return _diagnosed(
            plan,
            workload,
            cluster,
            switches,
            space,
            top_k=args.top_k,
            num_devices="smallest" if args.smallest else None,
            progress=progress,
            budget=budget if args.smallest else None,
        )


def _print_candidates(result, top, fmt: str, tokens: float | None = None, budget=None) -> None:
    """The shown candidates, the switches that would shorten the choice's step
    (``switch_advice``), what the choice's step hangs on (``sensitivity``), whether its order
    over the second candidate survives the constants being off (``robustness``) and the
    model's track record on runs of this class (and with ``tokens``, how long a run of that
    many tokens takes with the choice, and whether it meets ``budget``), as one JSON
    (``fmt='json'``) or YAML document."""
    from ..planner.explain import choice_advice, choice_robustness, choice_sensitivity

    record = result.track_record
    robust = choice_robustness(result)
    doc = {
        "candidates": [c.to_dict() for c in top],
        "switch_advice": [a.to_dict() for a in choice_advice(result)],
        "sensitivity": [x.to_dict() for x in choice_sensitivity(result)],
        "robustness": robust.to_dict() if robust is not None else None,
        "track_record": record.to_dict() if record is not None else None,
        "published": [b.to_dict() for b in result.published()],
    }
    if tokens is not None and top:
        timing = top[0].step.time_to_train(tokens).to_dict(record)
        if budget is not None:
            timing.update(deadline_days=budget.days, meets_deadline=budget.met_by(top[0].step))
        doc["time_to_train"] = timing
    if fmt == "json":
        print_json(doc)
        return
    import yaml

    console.print(yaml.safe_dump(doc, sort_keys=False), end="", markup=False)


def _launch_text(args: argparse.Namespace, result, model, cluster, gbs: int) -> str:
    """The plan as Bridge overrides, Megatron-LM arguments or a torchrun line (``--format``)."""

    if args.format in ("overrides", "torchrun"):
        if args.recipe is not None:
            _note_recipe_name(args.recipe, model)
            _check_recipe_model(args.recipe, model)
        _note_recipe_precision(result, _recipe(args, model))

    if args.format == "overrides":
        from ..adapters.megatron import to_overrides

        # the plan: its best, batch, recompute, switches and precision, placed as the recipe
        # holds its sections
        return shell_join(to_overrides(result, recipe=_recipe(args, model)))
    if args.format == "megatron-args":
        from ..adapters.megatron import megatron_lm_args

        return shell_join(megatron_lm_args(result))  # the plan: its best, batch and switches
    _require_whole_nodes(cluster)
    if cluster.accel.vendor == "huawei":
        return ascend_torchrun_line(result, cluster)
    recipe = _recipe(args, model)
    if recipe is None:
        from ..errors import UsageError

        raise UsageError(
            f"Megatron Bridge 0.3.1 exports no pretrain recipe known for {model.name} "
            "(run_recipe.py finds a recipe by its name in megatron.bridge.recipes); pass "
            "--recipe NAME of the recipe you train with, or use --format overrides and "
            "apply them to your own ConfigContainer"
        )
    return torchrun_line(result, cluster, gbs, recipe)


def _recipe(args: argparse.Namespace, model) -> str | None:
    """``--recipe``, else the Bridge recipe of a preset (:func:`default_recipe`); None for a
    model read from a config file (its folder name is no recipe name)."""
    return args.recipe if args.recipe is not None else _own_recipe(model)


def _own_recipe(model) -> str | None:
    """The Bridge recipe of a preset (:func:`default_recipe`); None for a model read from a
    config file or one Bridge exports no recipe for."""
    from ..adapters.megatron import default_recipe
    from ..spec.models import names

    return default_recipe(model.name) if model.name in names() else None


def _note_recipe_name(recipe: str, model) -> None:
    """Refuse a ``--recipe`` that is no Python name; say so when Bridge 0.3.1 exports no
    recipe of that name (:func:`~parastrat.adapters.bridge_overrides.recipe_note`), naming the
    planned model's own recipe where it has one."""
    from ..adapters.bridge_overrides import recipe_note

    note = recipe_note(recipe)
    if note:
        own = _own_recipe(model)
        mine = f"; {model.name}'s own recipe is {own} (leave --recipe out)" if own else ""
        err_console.print(f"note: {note}{mine}", markup=False)


def _check_recipe_model(recipe: str, model) -> None:
    """A ``--recipe`` of another preset (:func:`~parastrat.adapters.bridge_overrides.
    recipe_model`): refused when that model's shape differs from the planned one's, as
    ``apply`` refuses a plan on another model's config (run_recipe.py would train the
    recipe's model with a layout priced for this one); a note when the shapes agree."""
    from ..adapters.bridge_overrides import recipe_model
    from ..adapters.megatron import PLAN_SHAPE_FIELDS
    from ..errors import UsageError
    from ..spec.models import get_llm

    owner = recipe_model(recipe)
    if owner is None or owner == model.name:
        return
    theirs = get_llm(owner)
    differ = [
        f"{f} {getattr(theirs, f, None) or '-'} vs {getattr(model, f, None) or '-'}"
        for f in PLAN_SHAPE_FIELDS
        if (getattr(theirs, f, None) or None) != (getattr(model, f, None) or None)
    ]
    own = _own_recipe(model)
    instead = (
        f"use {model.name}'s recipe {own} (leave --recipe out)"
        if own
        else f"pass the recipe that builds {model.name}"
    )
    if differ:
        raise UsageError(
            f"--recipe {recipe} builds {owner}, not {model.name} ({'; '.join(differ)}): "
            f"run_recipe.py would train {owner} with a layout priced for {model.name}; "
            f"{instead}, or plan --model {owner} for that recipe"
        )
    err_console.print(
        f"note: recipe {recipe} is {owner}'s, whose shape {model.name} shares; {instead} to "
        "launch the planned model's own recipe",
        markup=False,
    )


def _note_recipe_precision(result, recipe: str | None) -> None:
    """Say so when the launch lines keep a quantised recipe precision for a BF16 plan
    (:func:`~parastrat.adapters.bridge_overrides.kept_quantisation`)."""
    from ..adapters.bridge_overrides import kept_quantisation

    named = kept_quantisation(recipe, result.precision)
    if named:
        err_console.print(
            f"note: recipe {recipe} trains with its own mixed precision {named!r}, which these "
            "lines keep; this plan was priced at bf16: plan with --precision fp8 (or the "
            "recipe's format) to price what it runs",
            markup=False,
        )


def _require_whole_nodes(cluster) -> None:
    """torchrun starts ``--nproc_per_node`` ranks on each of ``--nnodes`` nodes: refuse a
    device count that is not a whole number of nodes (the line would start another world)."""
    from ..errors import UsageError

    n, per = cluster.num_devices, cluster.devices_per_node
    if n <= per or n % per == 0:
        return
    lower, upper = n // per * per, (n // per + 1) * per
    divisors = [d for d in range(2, per) if n % d == 0]
    alt = f", or --devices-per-node {divisors[-1]}" if divisors else ""
    raise UsageError(
        f"{n} devices are not a whole number of {per}-device nodes: torchrun would start "
        f"{upper} ranks ({cluster.num_nodes} nodes x {per}); plan for --gpus {lower} or "
        f"{upper}{alt}"
    )


def _diagnosed(plan_fn, workload, cluster, switches, space, **kwargs: Any):
    """``plan_fn(workload, cluster, switches, space, ...)``; when nothing is legal because a pin
    breaks a rule on every device count (tp=3 with 64 heads), the StrategyError naming that rule
    instead of the device-count suggestions (:mod:`parastrat.planner.diagnose`)."""
    from ..errors import StrategyError, UsageError
    from ..planner.diagnose import PIN_NAMES, pinned_violations

    try:
        return plan_fn(workload, cluster, switches, space, **kwargs)
    except UsageError:
        pins = {}
        for k in PIN_NAMES:
            v = getattr(space, k)
            pins[k] = v[0] if v is not None and len(v) == 1 else None
        found = pinned_violations(workload.model, pins, seq_len=workload.seq_len)
        if found:
            raise StrategyError(found) from None
        raise


def torchrun_line(result, cluster, gbs: int, recipe: str) -> str:
    """Environment and a torchrun command that launch the chosen strategy with Bridge.

    ``result``: a plan (its best, with the switches the plan priced) or a candidate.  After the
    strategy, batch and recompute words come the other overrides the plan was priced with
    (:func:`~parastrat.adapters.megatron.to_overrides` for ``recipe``: the MoE dispatcher and
    its overlaps, CUDA graphs, CPU offloading, TP overlap, precision), so a recipe's own choice
    cannot run instead (e.g. Nemotron 3 Nano's recipe selects DeepEP, which Bridge refuses on
    GB200; an FP8 plan on a BF16 recipe would run BF16)."""
    from ..adapters.megatron import launch_command, launch_env

    c = getattr(result, "best", result)
    s = c.strategy
    env = launch_env(s, vendor=cluster.accel.vendor, scale_up_domain=cluster.scale_up_domain)
    argv = launch_command(
        result,
        recipe=recipe,
        nproc_per_node=min(cluster.devices_per_node, cluster.num_devices),
        nnodes=cluster.num_nodes,
        micro_batch_size=c.micro_batch_size,
        global_batch_size=gbs,
        recompute=c.recompute,
        rdzv_endpoint=RDZV_ENDPOINT if cluster.num_nodes > 1 else None,
    )
    return " ".join(env_words(env)) + " \\\n  " + shell_join(argv)


#: The rendezvous endpoint a multi-node torchrun line uses: the one shell expansion parastrat
#: prints on purpose (every other word is quoted).
RDZV_ENDPOINT = "$MASTER_ADDR:29500"


def shell_word(word: str) -> str:
    """``word`` as one shell word that the shell reads back unchanged (``shlex.quote``), except
    the ``--rdzv-endpoint`` value parastrat itself writes, which expands ``$MASTER_ADDR``
    inside double quotes and nothing else.  A recipe or model name like ``r$(id>x)`` is quoted,
    so pasting the printed line never runs it."""
    ours = f"--rdzv-endpoint={RDZV_ENDPOINT}"
    if word == ours:
        return f'--rdzv-endpoint="{RDZV_ENDPOINT}"'
    return shlex.quote(word)


def shell_join(words: list[str]) -> str:
    """Words joined for a shell, each through :func:`shell_word`."""
    return " ".join(shell_word(w) for w in words)


def env_words(env: list[str]) -> list[str]:
    """``NAME=value`` assignments with the value quoted (the name is checked to be a variable
    name, so ``NAME=`` stays an assignment for the shell)."""
    out = []
    for item in env:
        name, _, value = item.partition("=")
        if not name.isidentifier():
            raise ValueError(f"not an environment variable assignment: {item!r}")
        out.append(f"{name}={shlex.quote(value)}")
    return out


def ranking_reason(c, nxt) -> str:
    """Why ``c`` is ranked above ``nxt``, by the criterion the planner used: a shorter step
    beyond the model's resolution, else the tie-break that decided
    (:func:`parastrat.planner.ranking.tie_criterion`)."""
    from ..planner.ranking import RANK_TIE, model_parallel_sizes, tie_criterion

    a, b = c.step.step_time_s, nxt.step.step_time_s
    if b > a * (1 + RANK_TIE):
        return f"faster by {b / a - 1:.1%}"
    (mp_a, ep_a), (mp_b, ep_b) = model_parallel_sizes(c), model_parallel_sizes(nxt)
    return {
        "offload": "tie: no offload",
        "model": f"tie: TPxCPxPP {mp_a} < {mp_b}",
        "experts": f"tie: EPxETP {ep_a} < {ep_b}",
        "exposure": "tie: less exposed comm",
        "memory": "tie: less memory",
        "step": "tie: shorter step",
        None: "tie: set by those ahead",
    }[tie_criterion(c, nxt)]


def shared_notes(top) -> list[tuple[str, str]]:
    """Each distinct note of the shown candidates once, with the rows it applies to
    (``"#1-#5"``, ``"#2, #4"``), in first-seen order."""
    rows: dict[str, list[int]] = {}
    for i, c in enumerate(top, 1):
        for n in c.notes:
            rows.setdefault(n, [])
            if i not in rows[n]:
                rows[n].append(i)

    def span(idx: list[int]) -> str:
        if len(idx) > 1 and idx == list(range(idx[0], idx[-1] + 1)):
            return f"#{idx[0]}-#{idx[-1]}"
        return ", ".join(f"#{i}" for i in idx)

    return [(cli_words(n), span(idx)) for n, idx in rows.items()]


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


#: The columns of the plan table.
PLAN_COLUMNS = (
    "#",
    "strategy",
    "mbs",
    "recompute",
    "tok/s/GPU",
    "TFLOP/s",
    "MFU",
    "step s",
    "peak GiB",
    "over next",
)


def print_table(result, top) -> None:
    """Print the top candidates of a plan as a rich table, one row per layout."""
    # escape user text: a model name like "[my-model]" would otherwise be read as markup
    t = Table(
        title=escape(
            f"{result.model.name} on {result.num_devices} x "
            f"{result.cluster.accel.name}, seq {result.seq_len}, global batch "
            f"{result.global_batch_size}, {result.precision}"
        )
    )
    for col in PLAN_COLUMNS:
        t.add_column(col, overflow="fold")
    ranked = list(getattr(result, "ranked", None) or top)
    for i, c in enumerate(top, 1):
        nxt = ranked[i] if i < len(ranked) else None
        t.add_row(*_candidate_cells(i, c, nxt))
    console.print(t)
    _print_footer(result, top)


def _candidate_cells(i: int, c, nxt) -> tuple[str, ...]:
    """The cells of candidate ``c`` ranked ``i``, ``nxt`` the one ranked after it (or None)."""
    from ..spec.hardware import GiB

    st = c.step
    return (
        str(i),
        escape(str(c.strategy)),
        str(c.micro_batch_size),
        c.recompute + (f" + offload {c.cpu_offload_layers}" if c.cpu_offload_layers else ""),
        f"{st.tokens_per_s_per_gpu:,.0f}",
        f"{st.tflops_per_gpu:.0f}",
        f"{st.mfu:.1%}",
        f"{st.step_time_s:.2f}",
        f"{c.memory.peak_bytes / GiB:.1f}",
        escape(ranking_reason(c, nxt)) if nxt is not None else "",
    )


def _print_footer(result, top) -> None:
    """Under the plan table: each candidate's reason, the shared notes, the search's counts and
    the explanation of the choice."""
    for i, c in enumerate(top, 1):
        console.print(f"#{i}: {c.why}", markup=False)
    for note, rows in shared_notes(top):
        console.print(f"note ({rows}): {note}", markup=False)
    console.print(
        f"{result.enumerated} legal strategies, {result.bounded} bounded, "
        f"{result.priced} priced, {result.memory_checks} memory checks in "
        f"{result.elapsed_s:.2f} s; model FLOPs = 3 x forward (6 N_active + causal "
        "attention / 2), recompute excluded"
    )
    console.print(result.explain(render=switch_flags), markup=False)
