"""Memory and time of fully sharded data parallelism (Megatron FSDP, PyTorch FSDP2/HSDP).

Pure functions over plain numbers: parameters a rank holds for one layer (after TP/EP/PP), the
sharding level, the shard group, a :class:`~parastrat.Cluster` for prices.  What each level
keeps follows megatron-core 0.16.1 ``megatron/core/distributed/fsdp/src/megatron_fsdp``
(``param_and_grad_buffer.py``: ``_init_each_parameter_group_buffers``):

========================  ============  ============  =====================  ==============
level                     bf16 weight   main grad     fp32 master + Adam     working set
========================  ============  ============  =====================  ==============
``no_shard``              full          full          full                   none
``optim``                 full          full          ``/shard``             none
``optim_grads``           full          ``/shard``    ``/shard``             grads of units
``optim_grads_params``    ``/shard``    ``/shard``    ``/shard``             weights + grads
========================  ============  ============  =====================  ==============

``shard`` is the group one parameter is split over: ``dp_shard * cp`` for dense parameters
(Megatron shards over its DP x CP group, ``mcore_fsdp_adapter._init_dist_index``; torchtitan
flattens ``dp_shard`` and ``cp`` into one FSDP mesh dimension), the expert data-parallel group
for routed experts.  HSDP (``dp_replicate > 1``) keeps whole copies across the replicate group:
nothing is divided by ``dp_replicate``.

The working set is the unsharded copy of the FSDP units (transformer layers) being gathered
or reduce-scattered: the unit in use plus ``prefetch`` more.  Megatron FSDP's double buffer
(``fsdp_double_buffer``, recommended by its user guide and forced by ``nccl_ub``) holds
exactly two units of weights and two of gradients (``FixedPoolAllocator(size=2)``); without it
the all-gather prefetches up to ``max(5e8, unit)`` elements ahead
(:func:`megatron_prefetch_depth`).  FSDP2 prefetches one unit implicitly (PyTorch "FSDP
Notes": the next all-gather overlaps the current compute).

Time per layer and step (``docs/fsdp-model.md`` has the derivation): the collectives a level
issues (all-gather of parameters forward and again backward for ``optim_grads_params``;
reduce-scatter of gradients every micro-batch for ``optim_grads`` and up, once per step for
``optim``; one all-reduce per step for ``no_shard``; HSDP's all-reduce of the gradient shard
across the replicate group on the last micro-batch), each priced by
:meth:`parastrat.estimate.comm.Collective.time` on the group's placement, overlapped with the
layer's compute window; the first all-gather and the last reduce-scatter of each pass are
exposed (the stage adds them once, :attr:`LayerTime.tail`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..rules import FSDP_ALIASES, FSDP_LEVELS
from ..spec.hardware import canonical_precision
from . import comm
from .layers import FP8_EXTRA_BYTES, GRAD_BYTES, MAIN_GRAD_BYTES, OPTIM_BYTES, WEIGHT_BYTES
from .overlap import OVERLAP_SLOWDOWN

if TYPE_CHECKING:
    from ..spec.cluster import Cluster

#: Megatron's names for what is sharded, least first, and their ZeRO/FSDP aliases: defined once
#: in the core (:mod:`parastrat.rules`), which also checks ``Strategy.fsdp``.
LEVELS = FSDP_LEVELS
LEVEL_ALIASES = FSDP_ALIASES
#: Megatron FSDP's all-gather prefetch budget without the double buffer, in elements:
#: ``suggested_communication_unit_size = max(1e9, 2 * mean unit)`` and the prefetch size is half
#: of it (``megatron_fsdp.py``, ``_init_fsdp_param_and_grad_buffer``).
MEGATRON_AG_PREFETCH_ELEMENTS = 500_000_000


def normalize_level(level: str | None) -> str:
    """The Megatron name of a sharding level; ``None`` is ``"no_shard"`` (today's behaviour).

    Raises :class:`UsageError` naming the levels (and the Megatron name of a ZeRO alias)."""
    if level is None:
        return "no_shard"
    if isinstance(level, str) and level in LEVELS:
        return level
    alias = LEVEL_ALIASES.get(str(level).strip().lower()) if isinstance(level, str) else None
    fix = f"use fsdp={alias!r}" if alias else "use one of " + ", ".join(map(repr, LEVELS))
    raise UsageError(
        f"fsdp sharding level {level!r} is not one of {', '.join(LEVELS)} (or None); {fix}"
    )


def _whole(name: str, value: Any, low: int, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{name} must be a whole number >= {low}, got {value!r}; {fix}")


@dataclass(frozen=True)
class Sharding:
    """How data parallelism shards a model: level, shard and replicate degrees, prefetch.

    ``level``: Megatron's ``data_parallel_sharding_strategy`` (``None`` means ``"no_shard"``).
    ``dp_shard`` / ``dp_replicate``: torchtitan's degree names; their product is ``dp``.
    ``prefetch``: FSDP units gathered ahead of the one in use (1: Megatron's double buffer,
    FSDP2's implicit prefetch).  ``reshard_after_forward=False`` keeps the gathered parameters
    from forward to backward (torchtitan's default under PP): no second all-gather, but the
    stage's whole layers stay unsharded; it only applies to ``"optim_grads_params"``.
    """

    level: str | None = "no_shard"
    dp_shard: int = 1
    dp_replicate: int = 1
    prefetch: int = 1
    reshard_after_forward: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", normalize_level(self.level))
        _whole("dp_shard", self.dp_shard, 1, "use dp_shard=1 for no sharding")
        _whole("dp_replicate", self.dp_replicate, 1, "use dp_replicate=1 for plain FSDP")
        _whole("prefetch", self.prefetch, 0, "use prefetch=1 (one unit ahead) or 0 (none)")
        if not isinstance(self.reshard_after_forward, bool):
            raise UsageError(
                f"reshard_after_forward must be True or False, got {self.reshard_after_forward!r}"
            )
        if not self.reshard_after_forward and self.level != "optim_grads_params":
            raise UsageError(
                f"reshard_after_forward=False only changes optim_grads_params (parameters "
                f"sharded), not {self.level!r}; drop it or use level='optim_grads_params'"
            )

    @property
    def dp(self) -> int:
        """Data-parallel degree: ``dp_shard * dp_replicate``."""
        return self.dp_shard * self.dp_replicate

    @property
    def rank(self) -> int:
        """Position of the level in :data:`LEVELS` (0 = no sharding)."""
        return LEVELS.index(str(self.level))

    @property
    def shards_optimizer(self) -> bool:
        """True from ``"optim"`` up: fp32 master weights and Adam moments are sharded."""
        return self.rank >= 1

    @property
    def shards_grads(self) -> bool:
        """True from ``"optim_grads"`` up: main gradients are sharded (reduce-scatter each
        micro-batch)."""
        return self.rank >= 2

    @property
    def shards_params(self) -> bool:
        """True for ``"optim_grads_params"``: the weights are sharded, gathered per layer."""
        return self.rank >= 3

    @property
    def hybrid(self) -> bool:
        """HSDP: a sharding level with whole copies across ``dp_replicate > 1`` groups."""
        return self.dp_replicate > 1 and self.rank >= 1

    def gathered_units(self, layers: int) -> int:
        """FSDP units whose unsharded copy a rank holds at once, out of ``layers``."""
        if layers <= 0:
            return 0
        if not self.reshard_after_forward:
            return layers
        return min(layers, 1 + self.prefetch)

    @classmethod
    def from_strategy(
        cls, strategy: Any, *, distributed_optimizer: bool = False, prefetch: int = 1
    ) -> Sharding:
        """The sharding a strategy asks for: its ``fsdp``, ``dp_shard``, ``dp_replicate``
        (torchtitan names).  A strategy without ``fsdp`` keeps today's accounting: the
        distributed optimizer is ``"optim"`` over the whole ``dp``, without it ``"no_shard"``."""
        dp = getattr(strategy, "dp", None) or 1
        replicate = getattr(strategy, "dp_replicate", None) or 1
        shard = getattr(strategy, "dp_shard", None) or max(1, dp // replicate)
        level = getattr(strategy, "fsdp", None)
        if level is None:
            level = "optim" if distributed_optimizer else "no_shard"
        return cls(level, shard, replicate, prefetch)


def megatron_prefetch_depth(unit_params: float, double_buffer: bool = True) -> int:
    """Units Megatron FSDP all-gathers ahead of the one in use.

    ``unit_params``: elements of one FSDP unit (a transformer layer) on this rank, unsharded.
    With ``fsdp_double_buffer`` at most two units share the fixed buffers: 1 ahead.  Without it
    ``AllGatherPipeline.all_gather_params`` keeps adding the next unit while fewer than
    :data:`MEGATRON_AG_PREFETCH_ELEMENTS` (or one unit, if larger) are prefetched.
    """
    if double_buffer or unit_params <= 0:
        return 1
    budget = max(MEGATRON_AG_PREFETCH_ELEMENTS, unit_params)
    return max(1, math.ceil(budget / unit_params))


def torchtitan_reshard_after_forward(policy: str, pp: int) -> bool:
    """torchtitan's ``fsdp_reshard_after_forward`` policy resolved for a PP degree:
    ``"default"`` reshards unless pipeline parallelism is on (it would gather per micro-batch)."""
    if policy == "always":
        return True
    if policy == "never":
        return False
    if policy == "default":
        return pp <= 1
    raise UsageError(
        f"fsdp_reshard_after_forward {policy!r} is not 'default', 'always' or 'never'; "
        "use 'default'"
    )


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ByteSizes:
    """Bytes per parameter of each copy: kept (``weight``, ``grad``, ``optim``), FP8 extra copies
    per *linear* parameter, and on the wire / in the unsharded working set (``gather`` for
    weights, ``reduce`` for gradients).

    The defaults are the project's Megatron accounting (:mod:`parastrat.estimate.memory`:
    bf16 weight 2, bf16 main grad 2, fp32 master + Adam 12) and its wire sizes
    (:mod:`parastrat.estimate.comm`: BF16 all-gather and reduce-scatter).
    """

    weight: float = WEIGHT_BYTES
    grad: float = GRAD_BYTES
    optim: float = OPTIM_BYTES
    fp8_extra: float = 0.0
    gather: float = float(comm.PARAM_BYTES)
    reduce: float = float(comm.GRAD_BYTES)

    @classmethod
    def megatron(
        cls,
        precision: str = "bf16",
        fp8_param_gather: bool | None = None,
        grad_reduce_in_fp32: bool = False,
    ) -> ByteSizes:
        """Megatron's bytes at ``precision`` ("bf16", "fp8", "mxfp8"), as
        :func:`~parastrat.estimate_memory` counts them: FP8 adds row- and column-wise copies of
        linear weights unless ``fp8_param_gather`` (default: on, as Bridge's FP8 recipes) makes
        the primary weight FP8, which is then gathered in FP8 (1 byte).  The gradient buffer
        and its reduce-scatter are FP32 with ``grad_reduce_in_fp32``, else BF16."""
        prec = canonical_precision(precision)
        extra = FP8_EXTRA_BYTES[prec]
        gather = float(comm.PARAM_BYTES)
        if fp8_param_gather is None:  # Bridge's recipes: on for FP8 / MXFP8, off for NVFP4
            fp8_param_gather = prec != "nvfp4"
        if prec != "bf16" and fp8_param_gather:
            extra -= 2.0
            gather = 1.0
        grad = MAIN_GRAD_BYTES[bool(grad_reduce_in_fp32)]
        return cls(grad=grad, fp8_extra=extra, gather=gather, reduce=grad)

    @classmethod
    def torchtitan(cls) -> ByteSizes:
        """FSDP2 as torchtitan runs it: fp32 sharded parameters (they are the master copy),
        fp32 gradients, Adam m and v (8), gathered in bf16 (``mixed_precision_param``) and
        reduced in fp32 (``mixed_precision_reduce``)."""
        return cls(weight=4.0, grad=4.0, optim=8.0, gather=2.0, reduce=4.0)


@dataclass(frozen=True)
class LayerMemory:
    """Bytes one rank keeps for one layer's parameters between steps."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        """weights + gradients + optimizer."""
        return self.weights + self.gradients + self.optimizer


@dataclass(frozen=True)
class WorkingSet:
    """Unsharded bytes of the FSDP units in flight: gathered weights, gradients waiting for
    their reduce-scatter."""

    weights: float
    gradients: float

    @property
    def total(self) -> float:
        """weights + gradients."""
        return self.weights + self.gradients


@lru_cache(maxsize=65536)
def fsdp_layer_memory(
    params: float,
    level: str | None,
    shard: int,
    *,
    linear_params: float = 0.0,
    sizes: ByteSizes | None = None,
) -> LayerMemory:
    """Bytes a rank keeps for a layer of ``params`` parameters (held after TP/EP/PP), sharded
    at ``level`` over ``shard`` ranks (``dp_shard * cp`` for dense, expert DP for experts).

    ``no_shard`` equals :func:`~parastrat.estimate_memory` without the distributed optimizer,
    ``optim`` with it.  ``linear_params``: the part of ``params`` in linear layers (what FP8
    copies); its extra bytes are sharded with the weights under ``optim_grads_params``.
    """
    b = sizes or ByteSizes()
    lvl = LEVELS.index(normalize_level(level))
    _whole("shard", shard, 1, "pass the shard group size (dp_shard * cp)")
    n = float(shard)
    weights = b.weight * params + b.fp8_extra * linear_params
    return LayerMemory(
        weights=weights / n if lvl >= 3 else weights,
        gradients=b.grad * params / (n if lvl >= 2 else 1.0),
        optimizer=b.optim * params / (n if lvl >= 1 else 1.0),
    )


def fsdp_working_set(
    unit_params: float,
    sharding: Sharding,
    *,
    layers: int = 1,
    shard: int | None = None,
    linear_params: float = 0.0,
    sizes: ByteSizes | None = None,
) -> WorkingSet:
    """Unsharded bytes of the units in flight on a stage of ``layers`` units of at most
    ``unit_params`` parameters each (``linear_params`` of them in linear layers).

    ``optim_grads_params``: :meth:`Sharding.gathered_units` units of gathered weights (in the
    gather dtype, plus FP8 copies); ``optim_grads`` and up: as many units of gradients (in the
    reduce dtype) being accumulated or reduce-scattered.  Nothing when the shard group is one
    rank (Megatron does not distribute a buffer over a group of one).
    """
    b = sizes or ByteSizes()
    n = sharding.dp_shard if shard is None else shard
    if n <= 1 or sharding.rank < 2:
        return WorkingSet(0.0, 0.0)
    units = sharding.gathered_units(layers)
    grads = min(units, 1 + sharding.prefetch) * b.reduce * unit_params
    weights = 0.0
    if sharding.shards_params:
        weights = units * (b.gather * unit_params + b.fp8_extra * linear_params)
    return WorkingSet(weights, grads)


@dataclass(frozen=True)
class ShardedStage:
    """Per-rank bytes of one pipeline stage's layers under a sharding: kept state + working set."""

    weights: float
    gradients: float
    optimizer: float
    working: WorkingSet

    @property
    def total(self) -> float:
        """Everything: weights + gradients + optimizer + working set."""
        return self.weights + self.gradients + self.optimizer + self.working.total


def fsdp_stage_memory(
    layer_params: Sequence[float],
    sharding: Sharding,
    *,
    shard: int | None = None,
    linear_params: Sequence[float] | None = None,
    sizes: ByteSizes | None = None,
) -> ShardedStage:
    """Sum :func:`fsdp_layer_memory` over a stage's layers and add the working set of its largest
    layer.  ``shard`` defaults to ``sharding.dp_shard`` (pass ``dp_shard * cp`` with CP)."""
    n = sharding.dp_shard if shard is None else shard
    lins = list(linear_params) if linear_params is not None else [0.0] * len(layer_params)
    if len(lins) != len(layer_params):
        raise UsageError(
            f"linear_params has {len(lins)} entries for {len(layer_params)} layers; "
            "give one per layer or none"
        )
    parts = [
        fsdp_layer_memory(p, sharding.level, n, linear_params=lp, sizes=sizes)
        for p, lp in zip(layer_params, lins)
    ]
    unit, unit_lin = max(zip(layer_params, lins), default=(0.0, 0.0))
    working = fsdp_working_set(
        unit, sharding, layers=len(parts), shard=n, linear_params=unit_lin, sizes=sizes
    )
    return ShardedStage(
        weights=sum(p.weights for p in parts),
        gradients=sum(p.gradients for p in parts),
        optimizer=sum(p.optimizer for p in parts),
        working=working,
    )


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardGroups:
    """Where the shard and replicate groups sit in the rank grid: sizes and rank strides.

    ``shard``: ranks one parameter is split over; ``shard_stride``: rank distance between its
    members; ``replicate`` / ``replicate_stride``: the HSDP replicate group.
    """

    shard: int
    shard_stride: int = 1
    replicate: int = 1
    replicate_stride: int = 1

    def __post_init__(self) -> None:
        for name in ("shard", "shard_stride", "replicate", "replicate_stride"):
            _whole(name, getattr(self, name), 1, "group sizes and strides are >= 1")

    @classmethod
    def dense(cls, sharding: Sharding, *, tp: int = 1, cp: int = 1) -> ShardGroups:
        """Groups of dense parameters in both frameworks' order: TP fastest, then CP with
        ``dp_shard`` (one shard group of ``dp_shard * cp`` ranks, stride ``tp``), then
        ``dp_replicate`` (Megatron's ``tp-cp-ep-dp-pp`` with the DP x CP group split into
        contiguous distributed-optimizer instances; torchtitan's mesh
        ``[pp, dp_replicate, dp_shard, cp, tp]``)."""
        shard = sharding.dp_shard * cp
        return cls(shard, tp, sharding.dp_replicate, tp * shard)

    @classmethod
    def of_strategy(cls, strategy: Any, dp: int) -> ShardGroups:
        """The groups of a training strategy on ``dp`` data-parallel ranks, read from its rank
        grid (:mod:`parastrat.grid`'s FSDP view, any order): ``dp_shard * cp`` ranks at the
        grid's ``dp_shard-cp`` stride, ``dp_replicate`` at its ``dp_replicate`` stride."""
        strides = comm.group_strides(strategy, dp)
        replicate = strategy.dp_replicate
        return cls(
            dp // replicate * strategy.cp,
            strides["dp_shard-cp"],
            replicate,
            strides["dp_replicate"],
        )


@dataclass(frozen=True)
class LayerComm:
    """Seconds of one occurrence of each FSDP collective of one layer.

    ``gather``: all-gather of its parameters over the shard group; ``reduce``: reduce-scatter of
    its gradients (all-reduce over the whole DP group for ``no_shard``); ``outer``: HSDP's
    all-reduce of the gradient shard over the replicate group.  ``*_span`` say which link each
    uses ("intra": inside the scale-up domain, "inter": across).
    """

    gather: float
    reduce: float
    outer: float
    shard_span: str
    outer_span: str


def layer_collectives(
    params: float, sharding: Sharding, groups: ShardGroups, sizes: ByteSizes | None = None
) -> list[comm.Collective]:
    """The collectives of one layer, one occurrence each, as :class:`comm.Collective` s:
    ``[gather, reduce, outer]`` (a size-1 group prices at 0)."""
    b = sizes or ByteSizes()
    n, r = groups.shard, groups.replicate
    if sharding.rank == 0:  # DDP: one all-reduce over the whole DP group
        reduce = comm.Collective("dp", "all_reduce", params * b.reduce, n * r, groups.shard_stride)
        gather = comm.Collective("dp", "all_gather", 0.0, 1)
        outer = comm.Collective("dp", "all_reduce", 0.0, 1)
    else:
        reduce = comm.Collective("dp", "reduce_scatter", params * b.reduce, n, groups.shard_stride)
        gather = comm.Collective("dp", "all_gather", params * b.gather, n, groups.shard_stride)
        outer = comm.Collective(
            "dp", "all_reduce", params * b.reduce / n, r, groups.replicate_stride
        )
    return [gather, reduce, outer]


def fsdp_layer_collectives(
    params: float,
    sharding: Sharding,
    groups: ShardGroups,
    cluster: Cluster,
    sizes: ByteSizes | None = None,
) -> LayerComm:
    """:func:`layer_collectives` priced on ``cluster`` (its alpha-beta collective model)."""
    gather, reduce, outer = layer_collectives(params, sharding, groups, sizes)
    return LayerComm(
        gather=gather.time(cluster),
        reduce=reduce.time(cluster),
        outer=outer.time(cluster),
        shard_span=cluster.span(reduce.group_size, reduce.stride),
        outer_span=cluster.span(outer.group_size, outer.stride),
    )


@dataclass(frozen=True)
class LayerTime:
    """FSDP communication of one layer in one step, in seconds.

    ``total``: every collective's duration; ``exposed``: the layer's share of the critical
    path in steady state (the part its compute window cannot hide, plus the contention slowdown
    of the hidden part); ``tail``: what the pass edges add once per stage (the first all-gather
    and the last reduce-scatter of each pass, which have no compute to hide behind).
    """

    total: float
    exposed: float
    tail: float


def _passes(
    c: LayerComm, sharding: Sharding, fwd_s: float, bwd_s: float, m: int
) -> list[tuple[dict[str, float], float, int]]:
    """(seconds per link, compute window, repetitions) of each pass of one step."""
    g = c.gather if sharding.shards_params else 0.0
    g_bwd = g if sharding.reshard_after_forward else 0.0
    rs = c.reduce if sharding.shards_grads else 0.0
    once_ag = c.gather if sharding.rank in (1, 2) else 0.0  # updated weights after the step
    last = c.reduce if sharding.rank in (0, 1) else 0.0  # reduced on the last micro-batch
    outer = c.outer if sharding.hybrid else 0.0
    s, o = c.shard_span, c.outer_span

    def links(shard_s: float, outer_s: float = 0.0) -> dict[str, float]:
        out = {s: shard_s}
        out[o] = out.get(o, 0.0) + outer_s
        return out

    return [
        (links(g + once_ag), fwd_s, 1),
        (links(g), fwd_s, m - 1),
        (links(g_bwd + rs), bwd_s, m - 1),
        (links(g_bwd + rs + last, outer), bwd_s, 1),
    ]


def fsdp_layer_comm(
    params: float,
    sharding: Sharding,
    groups: ShardGroups,
    cluster: Cluster,
    *,
    fwd_s: float,
    bwd_s: float,
    micro_batches: int = 1,
    sizes: ByteSizes | None = None,
) -> LayerTime:
    """Seconds of one layer's FSDP collectives in one step, and how many of them show.

    ``fwd_s`` / ``bwd_s``: the layer's compute per micro-batch (the window a collective of the
    neighbouring layer hides behind).  Per pass over the stage, a collective of ``c`` seconds
    in a window ``w`` costs ``max(0, c - w) + slowdown * min(c, w)`` on the critical path;
    collectives on different links (NVLink vs network) run side by side, on one link one after
    another.  ``micro_batches``: per-micro-batch collectives repeat, per-step ones do not.
    """
    _whole("micro_batches", micro_batches, 1, "pass the micro-batches per step (>= 1)")
    c = fsdp_layer_collectives(params, sharding, groups, cluster, sizes)
    slow = OVERLAP_SLOWDOWN
    total = exposed = tail = 0.0
    for per_link, window, reps in _passes(c, sharding, fwd_s, bwd_s, micro_batches):
        busy = max(per_link.values())
        if reps <= 0 or busy <= 0.0:
            continue
        total += reps * sum(per_link.values())
        hidden = min(busy, window)
        exposed += reps * (busy - hidden + slow * hidden)
        tail += reps * (1.0 - slow) * hidden
    return LayerTime(total, exposed, tail)


@dataclass(frozen=True)
class LayerWork:
    """One layer of a stage for :func:`fsdp_stage_comm`: parameters held by the rank and
    compute seconds per micro-batch, forward and backward."""

    params: float
    fwd_s: float
    bwd_s: float


def fsdp_stage_comm(
    layers: Sequence[LayerWork],
    sharding: Sharding,
    groups: ShardGroups,
    cluster: Cluster,
    *,
    micro_batches: int = 1,
    sizes: ByteSizes | None = None,
) -> LayerTime:
    """A stage's FSDP communication: the layers' totals and exposed shares, plus the pass-edge
    tail once (of the largest layer; exact for uniform layers)."""
    times = [
        fsdp_layer_comm(
            w.params,
            sharding,
            groups,
            cluster,
            fwd_s=w.fwd_s,
            bwd_s=w.bwd_s,
            micro_batches=micro_batches,
            sizes=sizes,
        )
        for w in layers
    ]
    tail = max((t.tail for t in times), default=0.0)
    return LayerTime(
        total=sum(t.total for t in times),
        exposed=sum(t.exposed for t in times) + tail,
        tail=tail,
    )
