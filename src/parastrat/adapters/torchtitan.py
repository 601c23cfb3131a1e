"""torchtitan adapter: a Strategy as the ``[parallelism]`` table of a torchtitan job config.

torchtitan (0.3.0) keeps its parallel settings in ``torchtitan.config.configs.ParallelismConfig``
and checks them in ``torchtitan.distributed.parallel_dims.ParallelDims``: FSDP2 / HSDP over
``data_parallel_shard_degree`` x ``data_parallel_replicate_degree`` (``-1`` takes the ranks the
other degrees leave), then context, tensor and pipeline parallelism, with expert parallelism
borrowing ``ep`` ranks from ``dp_shard * cp * tp``.  Its device mesh orders the axes
``pp, dp_replicate, dp_shard, cp, tp`` (last fastest), which is Megatron's default order
``tp-cp-ep-dp-pp`` with dp split into shard (inner) and replicate (outer): the groups
:func:`parastrat.layout` lists are the ones it builds (``tests/test_layout_fsdp.py``).

:data:`FIELDS` is the one table from Strategy fields to torchtitan's names; :func:`to_parallelism`
and :func:`from_parallelism` both read it, and a test checks every name against the installed
``ParallelismConfig``.  What torchtitan cannot express is refused with every reason at once
(rule ids ``torchtitan-*`` in ``docs/troubleshooting.md``): another rank order, Ulysses (its
CP is ring attention), expert tensor parallelism other than torchtitan's, Megatron's optimizer-
only sharding, uneven first/last stage counts, inference strategies.

Sharding levels: torchtitan's FSDP2 always shards parameters, gradients and optimizer state
over ``dp_shard * cp`` when that is more than one rank.  ``fsdp="optim_grads_params"`` writes
``fsdp_reshard_after_forward = "always"`` (parameters gathered in forward and again in
backward); ``fsdp="optim_grads"`` writes ``"never"`` (gathered once in forward and kept until
backward: the unsharded working set of Megatron's ``optim_grads`` during the step).

Nothing here imports torch or torchtitan.  :func:`write_toml` writes the table into a TOML file
(replacing an existing ``[parallelism]`` table and keeping every other line) atomically.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .._deps import require
from .._io import write_text
from ..checks import is_int
from ..errors import StrategyError, UsageError, Violation
from ..strategy import MEGATRON_ORDER, Strategy, require_strategy

#: Strategy field -> torchtitan ``ParallelismConfig`` field (the degrees that map one to one).
FIELDS: tuple[tuple[str, str], ...] = (
    ("tp", "tensor_parallel_degree"),
    ("pp", "pipeline_parallel_degree"),
    ("cp", "context_parallel_degree"),
    ("ep", "expert_parallel_degree"),
    ("dp_replicate", "data_parallel_replicate_degree"),
    ("dp_shard", "data_parallel_shard_degree"),
    ("sp", "enable_sequence_parallel"),
)
#: The other ``ParallelismConfig`` fields this adapter writes (pipeline split and FSDP policy).
EXTRA_FIELDS = (
    "pipeline_parallel_schedule",
    "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers",
    "fsdp_reshard_after_forward",
)
#: Megatron FSDP level -> torchtitan ``fsdp_reshard_after_forward`` policy.
RESHARD = {"optim_grads_params": "always", "optim_grads": "never"}
#: torchtitan / torch.distributed.pipelining schedules that run one stage per rank.
SINGLE_STAGE_SCHEDULES = frozenset({"1f1b", "gpipe"})
#: The looped schedule written for ``vpp > 1``.
LOOPED_SCHEDULE = "Interleaved1F1B"
#: Degrees with which torchtitan 0.3.0 refuses its CUDA graphs, on by default
#: (``Trainer.Config._validate_cuda_graphs`` in ``trainer.py``: "CUDA graphs do not support
#: pipeline parallelism yet", and expert parallelism only with a dispatcher that never waits on
#: the host, HybridEP with ``non_blocking_capacity_factor`` or MinimalAsyncEP).
GRAPHS_REFUSED_BY = ("pp", "ep")


def _shard_ranks(s: Strategy, world_size: int | None) -> int | None:
    """Ranks of the data-parallel shard axis (None: not known without the world)."""
    if s.dp_shard is not None:
        return s.dp_shard
    if s.dp is None and isinstance(world_size, int):
        try:
            s = s.with_world_size(world_size)
        except StrategyError:
            return None
    return s.dp_shard_degree


def violations(s: Strategy, world_size: int | None = None) -> list[Violation]:
    """Every reason torchtitan cannot run ``s`` (on ``world_size`` ranks when given)."""
    out: list[Violation] = []
    if s.is_inference:
        return [
            Violation(
                "torchtitan-inference", f"{s} is an inference strategy", "use a training strategy"
            )
        ]
    if s.order != MEGATRON_ORDER:
        out.append(
            Violation(
                "torchtitan-order",
                f"order {s.order!r}: torchtitan's mesh is pp, dp_replicate, dp_shard, cp, tp",
                f"use order={MEGATRON_ORDER!r}",
            )
        )
    if s.fsdp is not None and s.cp == 1 and _shard_ranks(s, world_size) == 1:
        out.append(
            Violation(
                "torchtitan-fsdp-one-shard",
                f"fsdp={s.fsdp!r} with one shard rank (dp_shard 1, cp 1): torchtitan then runs "
                "plain data parallelism, so the table would not read back as FSDP",
                "drop fsdp, or use dp_shard > 1",
            )
        )
    if s.ulysses > 1:
        out.append(
            Violation(
                "torchtitan-ulysses",
                f"ulysses={s.ulysses}: torchtitan's context parallelism is ring attention",
                f"use ring={s.cp} (cp={s.cp}) without Ulysses",
            )
        )
    if s.etp != (1 if s.ep > 1 else s.tp):
        out.append(
            Violation(
                "torchtitan-etp",
                f"etp={s.etp}: torchtitan has no expert tensor parallel degree (experts use "
                "no TP with EP, and the dense TP without)",
                f"use etp={1 if s.ep > 1 else s.tp} (the default)",
            )
        )
    if s.fsdp == "optim":
        out.append(
            Violation(
                "torchtitan-fsdp-level",
                "fsdp='optim': torchtitan's FSDP2 shards parameters and gradients too",
                "use fsdp='optim_grads' or 'optim_grads_params'",
            )
        )
    if s.first_stage_layers is not None or s.last_stage_layers is not None:
        out.append(
            Violation(
                "torchtitan-uneven",
                "first/last stage layer counts: torchtitan balances stages with "
                "first/last_stage_less_layers",
                "use account_for_embedding/account_for_loss instead",
            )
        )
    return out + _world_violations(s, world_size)


def _world_violations(s: Strategy, world_size: int | None) -> list[Violation]:
    """FSDP2 where the strategy asks for none.  (torchtitan's expert constraint, ``ep`` dividing
    ``dp_shard * cp * tp``, is the Strategy's own ``dp-replicate-expert`` / ``world-expert``
    with ``etp = 1``, so it is checked before this.)"""
    out: list[Violation] = []
    world = world_size if world_size is not None else s.world_size
    if world is None:
        return out
    placed = s.with_world_size(world)
    shard = (placed.dp_shard_degree or 1) * s.cp
    if s.fsdp is None and shard > 1:
        out.append(
            Violation(
                "torchtitan-needs-fsdp",
                f"dp_shard*cp = {shard}: torchtitan shards parameters, gradients and optimizer "
                "state over it (FSDP2), which fsdp=None does not describe",
                "set fsdp='optim_grads_params'"
                + ("" if s.cp > 1 else ", or dp_shard=1 with dp_replicate=dp for DDP"),
            )
        )
    return out


def to_parallelism(
    s: Strategy, world_size: int | None = None, *, num_layers: int | None = None
) -> dict[str, Any]:
    """The ``[parallelism]`` table for ``s``: torchtitan field names, TOML-ready values.

    ``num_layers`` (the model's transformer layers) is needed only for ``vpp > 2``, which
    torchtitan expresses as ``pipeline_parallel_layers_per_stage``.  Raises StrategyError with
    every reason torchtitan cannot run the strategy.
    """
    s = require_strategy(s, "torchtitan.to_parallelism()")
    problems = violations(s, world_size)
    table: dict[str, Any] = {}
    for ours, theirs in FIELDS:
        table[theirs] = getattr(s, ours)
    if s.dp_shard is None:
        table["data_parallel_shard_degree"] = -1  # torchtitan: the ranks the others leave
    if s.fsdp in RESHARD:
        table["fsdp_reshard_after_forward"] = RESHARD[s.fsdp]
    if s.pp > 1:
        table["pipeline_parallel_schedule"] = LOOPED_SCHEDULE if s.vpp > 1 else "1F1B"
        table["pipeline_parallel_first_stage_less_layers"] = int(s.account_for_embedding)
        table["pipeline_parallel_last_stage_less_layers"] = int(s.account_for_loss)
        if s.vpp > 2:
            per_stage = _layers_per_stage(s, num_layers, problems)
            if per_stage is not None:
                table["pipeline_parallel_layers_per_stage"] = per_stage
    if problems:
        raise StrategyError(problems)
    return table


def _layers_per_stage(s: Strategy, num_layers: int | None, problems: list[Violation]) -> int | None:
    """torchtitan's layers per virtual stage for ``vpp`` stages per rank (``None`` + a
    violation when the layers are unknown or do not split)."""
    if num_layers is None:
        problems.append(
            Violation(
                "torchtitan-vpp-layers",
                f"vpp={s.vpp}: torchtitan needs pipeline_parallel_layers_per_stage, which "
                "follows from the model's layer count",
                "pass num_layers=<the model's transformer layers>",
            )
        )
        return None
    total = num_layers + s.account_for_embedding + s.account_for_loss
    stages = s.pp * s.vpp
    if total % stages:
        problems.append(
            Violation(
                "torchtitan-vpp-layers",
                f"{total} layers (with embedding/loss accounting) do not split into "
                f"pp*vpp = {stages} virtual stages",
                "choose pp and vpp whose product divides the layers",
            )
        )
        return None
    return total // stages


def from_parallelism(
    table: Mapping[str, Any], *, world_size: int | None = None, num_layers: int | None = None
) -> Strategy:
    """The Strategy a ``[parallelism]`` table describes (torchtitan's defaults for missing
    keys; ``num_layers`` to read ``pipeline_parallel_layers_per_stage`` back into vpp).

    ``fsdp`` follows ``fsdp_reshard_after_forward`` where torchtitan shards (``dp_shard * cp >
    1``); with ``data_parallel_shard_degree = -1`` that needs ``world_size``, else an explicit
    policy key is taken as the sign that the table was written for FSDP.
    """
    if not isinstance(table, Mapping):
        raise UsageError(f"a [parallelism] table is a mapping, got {type(table).__name__}")
    unknown = sorted(set(table) - {t for _, t in FIELDS} - set(EXTRA_FIELDS) - _OTHER_FIELDS)
    unknown = [k for k in unknown if k not in _SPLIT_OVERRIDES]
    if unknown:
        raise UsageError(f"unknown [parallelism] keys {unknown}: not torchtitan fields")
    explicit = sorted(k for k in _SPLIT_OVERRIDES if table.get(k))
    if explicit:
        raise UsageError(
            f"[parallelism] {', '.join(explicit)} sets the pipeline split and schedule "
            "explicitly, in place of the degree and schedule fields parastrat reads; remove "
            "it to read the table (write_toml drops it when it writes a strategy)"
        )
    get = table.get
    kwargs: dict[str, Any] = {ours: get(theirs, _DEFAULTS[theirs]) for ours, theirs in FIELDS}
    bad = [t for o, t in FIELDS if o != "sp" and not is_int(kwargs[o])]
    bad += [t for t in EXTRA_FIELDS if t.endswith("layers") and not is_int(get(t, 0))]
    if bad or not isinstance(kwargs["sp"], bool):
        raise UsageError(
            f"[parallelism] {', '.join(bad) or 'enable_sequence_parallel'}: torchtitan takes "
            "whole numbers for degrees and layer counts, true/false for flags"
        )
    kwargs["sp"] = bool(kwargs["sp"]) and kwargs["tp"] > 1
    pp = kwargs["pp"]
    kwargs["account_for_embedding"] = pp > 1 and bool(
        get("pipeline_parallel_first_stage_less_layers", 1)
    )
    kwargs["account_for_loss"] = pp > 1 and bool(get("pipeline_parallel_last_stage_less_layers", 1))
    kwargs["vpp"] = _read_vpp(table, kwargs, num_layers)
    policy = get("fsdp_reshard_after_forward", "default")
    if policy == "default":
        policy = "always" if pp == 1 else "never"  # torchtitan's own default
    shard = kwargs["dp_shard"]
    if shard == -1 and is_int(world_size):
        shard = world_size // (kwargs["dp_replicate"] * kwargs["cp"] * kwargs["tp"] * pp)
    if shard == -1:
        sharded = "fsdp_reshard_after_forward" in table or kwargs["cp"] > 1
    else:
        sharded = shard > 1 or kwargs["cp"] > 1
    kwargs["fsdp"] = {v: k for k, v in RESHARD.items()}.get(policy) if sharded else None
    return Strategy(**kwargs)


def _read_vpp(table: Mapping[str, Any], kw: dict[str, Any], num_layers: int | None) -> int:
    if kw["pp"] <= 1:
        return 1
    schedule = str(table.get("pipeline_parallel_schedule", "1F1B")).lower()
    if schedule in SINGLE_STAGE_SCHEDULES:
        return 1
    per_stage = table.get("pipeline_parallel_layers_per_stage")
    if per_stage is None:
        return 2  # torchtitan: two stages per rank for a looped schedule
    if num_layers is None:
        raise UsageError(
            "pipeline_parallel_layers_per_stage needs the model's layer count to give vpp: "
            "pass num_layers"
        )
    total = num_layers + kw["account_for_embedding"] + kw["account_for_loss"]
    return -(-total // per_stage) // kw["pp"]


# ---------------------------------------------------------------------------------------------
# TOML files.
# ---------------------------------------------------------------------------------------------
def _tomllib() -> ModuleType:
    """The standard library's TOML reader (``tomli``, the same code, before Python 3.11)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return require("tomli", "torchtitan", "reading TOML before Python 3.11")
    return tomllib


def read_toml(
    path: str | Path, *, world_size: int | None = None, num_layers: int | None = None
) -> Strategy:
    """The Strategy of a torchtitan job config's ``[parallelism]`` table (see
    :func:`from_parallelism` for ``world_size`` and ``num_layers``)."""
    tomllib = _tomllib()
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    return from_parallelism(
        doc.get("parallelism", {}), world_size=world_size, num_layers=num_layers
    )


def write_toml(
    path: str | Path,
    s: Strategy,
    world_size: int | None = None,
    *,
    num_layers: int | None = None,
) -> Path:
    """Write ``s`` as the ``[parallelism]`` table of the TOML file ``path``.

    An existing file keeps every other table and line; its ``[parallelism]`` table is
    replaced (keys this adapter does not own, such as ``spmd_backend``, are kept).  The file
    is written to a temporary neighbour and renamed over the target, so it is never
    half-written; a refused strategy leaves it untouched.
    """
    table = to_parallelism(s, world_size, num_layers=num_layers)
    tomllib = _tomllib()
    target = Path(path)
    raw = target.read_bytes().decode("utf-8") if target.exists() else ""
    crlf = "\r\n" in raw  # the file's line endings are kept (Windows editors write CRLF)
    text = raw.replace("\r\n", "\n")
    try:
        old = tomllib.loads(text).get("parallelism", {})
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{target} is not valid TOML: {exc}") from None
    owned = {t for _, t in FIELDS} | set(EXTRA_FIELDS) | _SPLIT_OVERRIDES
    kept = {k: v for k, v in old.items() if k not in owned}  # a stale explicit split dropped
    section = "[parallelism]\n" + "".join(
        f"{k} = {_toml_value(v)}\n" for k, v in {**table, **kept}.items()
    )
    new = _replace_table(text, "parallelism", section)
    try:
        parsed = tomllib.loads(new)  # what we write must parse, and hold the table written
    except tomllib.TOMLDecodeError:
        parsed = None
    if parsed is None or parsed.get("parallelism", {}) != {**table, **kept}:
        raise UsageError(
            f"{target} declares its parallelism table in a form this line editor does not "
            'rewrite (a quoted ["parallelism"] header, dotted parallelism.* keys, or a '
            "header inside a multi-line string); the file is unchanged. Replace the table by "
            f"hand with:\n{section}"
        )
    if crlf:
        new = new.replace("\n", "\r\n")
    write_text(target, new, what="torchtitan config")  # whole or not at all, mode kept
    return target


def to_cli_args(
    s: Strategy, world_size: int | None = None, *, num_layers: int | None = None
) -> list[str]:
    """``s`` as torchtitan's command-line overrides (``--parallelism.<field> <value>``, flags
    as ``--parallelism.<flag>`` / ``--parallelism.no_<flag>``): torchtitan 0.3.0 builds its
    config from ``--module/--config`` plus these (``config/manager.py``, tyro); it reads no
    TOML.  The same table as :func:`to_parallelism`, plus ``--training.disable_cuda_graphs``
    where torchtitan refuses its default CUDA graphs (:data:`GRAPHS_REFUSED_BY`)."""
    out: list[str] = []
    for key, value in to_parallelism(s, world_size, num_layers=num_layers).items():
        if isinstance(value, bool):
            out.append(f"--parallelism.{key}" if value else f"--parallelism.no_{key}")
        else:
            out += [f"--parallelism.{key}", str(value)]
    if any(getattr(s, degree) > 1 for degree in GRAPHS_REFUSED_BY):
        out.append("--training.disable_cuda_graphs")
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise UsageError(f"cannot write {v!r} ({type(v).__name__}) into the [parallelism] table")


_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?\s*(#.*)?$")


def _replace_table(text: str, name: str, section: str) -> str:
    """``text`` with table ``[name]`` (up to the next table header) replaced by ``section``,
    or ``section`` appended when there is none."""
    lines = text.splitlines(keepends=True)
    start = end = None
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if not m:
            continue
        if start is not None:
            end = i
            break
        if m.group(1) == name:
            start = i
    if start is None:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return text + sep + section
    end = len(lines) if end is None else end
    return "".join(lines[:start]) + section + "\n" + "".join(lines[end:]).lstrip("\n")


#: torchtitan's defaults for the degree fields (``ParallelismConfig``).
_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_degree": 1,
    "pipeline_parallel_degree": 1,
    "context_parallel_degree": 1,
    "expert_parallel_degree": 1,
    "data_parallel_replicate_degree": 1,
    "data_parallel_shard_degree": -1,
    "enable_sequence_parallel": True,
}
#: ``ParallelismConfig`` fields that override the pipeline the degree and schedule fields give
#: (torchtitan 0.3.0 ``distributed/pipeline_parallel.py`` uses a non-empty
#: ``module_fqns_per_model_part`` as the split, a CSV schedule as the schedule): ``write_toml``
#: drops them, ``from_parallelism`` refuses a table that sets them.
_SPLIT_OVERRIDES = frozenset({"module_fqns_per_model_part", "pipeline_parallel_schedule_csv"})
#: ``ParallelismConfig`` fields this adapter reads past (they do not change the strategy).
_OTHER_FIELDS = frozenset(
    {
        "enable_fsdp_symm_mem",
        "spmd_backend",
        "pipeline_parallel_microbatch_size",
        "context_parallel_load_balancer",
        "context_parallel_ptrr_mask_key",
    }
)
