"""Strategy-aware benchmarks: each collective on the group of the strategy that uses it.

A strategy's communication is not "an all-reduce on N GPUs": it is TP's all-gather and
reduce-scatter inside a TP group, Ulysses' and EP's all-to-all inside theirs, the ring
exchange of context parallelism, pipeline send/recv between neighbouring stages and the data
parallel gradient reduce-scatter.  :func:`measurements` lists those (group kind, op, message
sizes) for a strategy, pure Python; :func:`run_strategy` builds the groups from
:func:`parastrat.layout` (the same grid the runtime uses) and times each op on them, every
group of a kind at once, as in training.

Message sizes, when a model and sequence length are given (bytes of 16-bit activations; the
formulas are in ``shared/reference/formulas.md``, "Communication per layer"), with
``s' = seq_len / cp`` the local sequence and ``b`` the micro-batch:

- TP: all-gather and reduce-scatter of ``s' b h`` (the full gathered activation), plus the
  all-reduce of ``s' b h`` when sequence parallelism is off (what Megatron does then);
- EP: all-to-all dispatch of ``s' b h topk / tp`` per rank;
- Ulysses: all-to-all of ``s' b h / tp`` per rank (one of q, k, v, out);
- ring (CP): one hop of a K and V block, ``s' b kv_width(tp)`` (``comm.kv_width``: GQA groups
  or MLA dimensions per TP rank);
- PP: send/recv of ``s' b h`` (divided by tp with SP);
- DP: reduce-scatter of one FP32 gradient bucket (:data:`BUCKET_GRAD_BYTES`): Megatron's
  default bucket of ``max(40e6, 1e6 * dp)`` parameters (``estimate.step.BUCKET_PARAMS``),
  capped at the parameters one rank holds.

The activation, routed-token, K/V and pipeline byte counts are the step model's own
(:mod:`parastrat.estimate.comm`), so a benchmark times the messages the cost model prices.

Without a model, every (group, op) sweeps the given sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .rows import Row, parse_sizes

#: Bytes per gradient element of the swept DP bucket: FP32, Megatron's main-gradient buffer
#: reduced with ``grad_reduce_in_fp32`` (Bridge's ``bf16_mixed`` default).  The step model
#: prices the dtype its ``Switches.grad_reduce_in_fp32`` names (BF16 by default, as the
#: performance recipes set); a sweep of the larger message bounds both.
BUCKET_GRAD_BYTES = 4


@dataclass(frozen=True)
class Measurement:
    """One op to time on every group of one layout kind, at these message sizes (bytes)."""

    kind: str  # layout key: "tp", "ep", "ulysses", "ring", "pp", "dp" or "dp-cp"
    op: str
    sizes: tuple[int, ...]
    why: str  # what this collective is in the strategy

    @property
    def label(self) -> str:
        """``kind/op`` (e.g. ``tp/all_reduce``): the measurement's short name, as the progress bar
        shows its rows."""
        return f"{self.kind}/{self.op}"


def _model_sizes(strategy: Any, model: Any, seq_len: int, micro_batch_size: int) -> dict[str, int]:
    """Message bytes per role, from the model shape: the volumes the step model prices
    (:mod:`parastrat.estimate.comm`, one source of truth; see the module docstring)."""
    from ..estimate import comm
    from ..estimate.step import BUCKET_PARAMS

    s = strategy
    if seq_len % s.cp:
        raise UsageError(
            f"seq_len={seq_len} is not divisible by cp={s.cp}; use a multiple of {s.cp}"
        )
    tokens = seq_len // s.cp * micro_batch_size
    one = {"tp": 1, "etp": 1, "ep": 1, "ring": 1, "ulysses": 1, "pp": 1}  # sizes only
    act = tokens * model.hidden_size * comm.ACT_BYTES
    ep = comm.ep_layer(model, s, tokens, one) if model.is_moe else []
    ring = tokens * comm.kv_width(model, s.tp) * comm.ACT_BYTES
    pp = comm.pp_microbatch(model, s, tokens, one)
    params_per_rank = model.num_params / (s.tp * s.pp)
    bucket = min(max(BUCKET_PARAMS, 1e6 * (s.dp or 1) * s.cp), params_per_rank)
    return {
        "tp": act,
        "ep": int(ep[0].nbytes) if ep else act // s.tp,
        "ulysses": act // s.tp,
        "ring": int(ring),
        "pp": int(pp.nbytes) if pp is not None else act,
        "dp": int(bucket) * BUCKET_GRAD_BYTES,
    }


def measurements(
    strategy: Any,
    world_size: int,
    *,
    model: Any = None,
    seq_len: int | None = None,
    micro_batch_size: int = 1,
    sizes: Any = None,
) -> list[Measurement]:
    """What :func:`run_strategy` times for ``strategy`` on ``world_size`` ranks (pure Python).

    Groups of size 1 are skipped.  With ``model`` (a ModelSpec or preset name) and ``seq_len``
    the sizes come from the model (one size per op unless ``sizes`` is also given, which then
    wins); otherwise ``sizes`` (default ``"64KB:4MB:x4"``) applies to every op.
    """
    from ..spec.models import get_llm as get_model

    if strategy.dp is not None and strategy.world_size != world_size:
        raise UsageError(
            f"{strategy} spans {strategy.world_size} ranks, not world_size={world_size}; drop "
            f"dp or run on {strategy.world_size} ranks"
        )
    s = strategy.with_world_size(world_size) if strategy.dp is None else strategy
    if model is not None:
        model = get_model(model)
        if seq_len is None:
            raise UsageError(
                "a model needs a sequence length to size the messages; "
                "add --seq-len, e.g. --seq-len 4096"
            )
        s.validate(model, world_size=world_size, seq_len=seq_len)
    derived = None
    if model is not None and seq_len is not None:
        derived = _model_sizes(s, model, seq_len, micro_batch_size)
    swept = tuple(parse_sizes(sizes if sizes is not None else "64KB:4MB:x4"))
    dp_kind = "dp-cp" if s.cp > 1 else "dp"
    plan: list[tuple[str, int, str, str, str]] = [
        # (layout kind, degree, op, size role, why)
        ("tp", s.tp, "all_gather", "tp", "TP/SP all-gather of the layer input"),
        ("tp", s.tp, "reduce_scatter", "tp", "TP/SP reduce-scatter of the layer output"),
    ]
    if not s.sp:
        plan.append(("tp", s.tp, "all_reduce", "tp", "TP all-reduce (no sequence parallelism)"))
    plan += [
        ("ep", s.ep, "all_to_all", "ep", "EP token dispatch / combine"),
        ("ulysses", s.ulysses, "all_to_all", "ulysses", "Ulysses all-to-all of q, k, v, out"),
        ("ring", s.ring, "ring", "ring", "CP ring hop of a K/V block"),
        ("pp", s.pp, "send_recv", "pp", "pipeline activations to the next stage"),
        (dp_kind, (s.dp or 1) * s.cp, "reduce_scatter", "dp", "DP gradient bucket reduce-scatter"),
    ]
    out = []
    for kind, degree, op, role, why in plan:
        if degree <= 1:
            continue
        if derived is not None and sizes is None:
            chosen: tuple[int, ...] = (max(1, int(derived[role])),)
        else:
            chosen = swept
        out.append(Measurement(kind=kind, op=op, sizes=chosen, why=why))
    if not out:
        raise UsageError(
            f"{s} has no group larger than one rank on {world_size} ranks, so there "
            "is nothing to time; set a degree above 1 (e.g. --tp 2) or use a "
            "larger --world"
        )
    return out


def run_strategy(
    strategy: Any,
    *,
    model: Any = None,
    seq_len: int | None = None,
    micro_batch_size: int = 1,
    sizes: Any = None,
    iters: int = 10,
    warmup: int = 3,
    dtype: Any = "bfloat16",
    check: bool = True,
    progress: Any = None,
) -> list[Row]:
    """Time each collective of ``strategy`` on its own groups; call on every rank of the world.

    The world (``torch.distributed`` already started) must fit the strategy.  Every group of a
    kind runs at once; ranks meet at a world barrier before each iteration and the slowest
    rank's time is reported.  Rows carry ``group`` = the layout kind (``"tp"``, ``"ep"``...).
    """
    from .._deps import require
    from ..layout import layout
    from ..runtime.groups import new_groups
    from .runner import run

    dist = require("torch.distributed")
    if not dist.is_available() or not dist.is_initialized():
        raise UsageError(
            "torch.distributed is not started; run under torchrun or use "
            "`parastrat bench --world N` with strategy flags"
        )
    world = dist.get_world_size()
    rank = dist.get_rank()
    s = strategy.with_world_size(world)
    todo = measurements(
        s, world, model=model, seq_len=seq_len, micro_batch_size=micro_batch_size, sizes=sizes
    )
    grid = layout(s, world)
    groups: dict[str, Any] = {}
    for m in todo:
        if m.kind not in groups:
            groups[m.kind] = new_groups(grid[m.kind], rank)
    total = sum(len(m.sizes) for m in todo)
    rows: list[Row] = []
    for m in todo:
        offset = len(rows)

        def report(row: Row, done: int, _total: int, _offset: int = offset) -> None:
            if progress is not None:
                progress(row, _offset + done, total)

        rows += run(
            ops=[m.op],
            sizes=list(m.sizes),
            group=groups[m.kind],
            iters=iters,
            warmup=warmup,
            dtype=dtype,
            check=check,
            group_name=m.kind,
            barrier_group=dist.group.WORLD,
            progress=report,
        )
    return rows


def run_strategy_local(
    strategy: Any,
    world: int,
    *,
    timeout_s: float = 120.0,
    show_progress: bool = False,
    **kwargs: Any,
) -> list[Row]:
    """:func:`run_strategy` on ``world`` spawned local gloo ranks; rank 0's rows."""
    from ..runtime.launch import spawn_local

    measurements(
        strategy,
        world,
        **{k: kwargs[k] for k in ("model", "seq_len", "micro_batch_size", "sizes") if k in kwargs},
    )  # fail fast, before spawning
    return spawn_local(
        _local_worker,
        world,
        args=(strategy.to_dict(), kwargs, show_progress),
        backend="gloo",
        timeout_s=timeout_s,
    )[0]


def _local_worker(
    rank: int,
    world: int,
    strategy_dict: dict[str, Any],
    kwargs: dict[str, Any],
    show_progress: bool,
) -> list[Row]:
    from ..strategy import Strategy
    from .runner import progress_bar

    strategy = Strategy.from_dict(strategy_dict)
    if show_progress and rank == 0:
        with progress_bar("strategy") as bar:
            return run_strategy(strategy, progress=bar, **kwargs)
    return run_strategy(strategy, **kwargs)
