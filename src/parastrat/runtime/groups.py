"""Process groups for a strategy: Megatron Core's for training, xDiT/MindIE-SD's for inference.

``initialize(strategy)`` starts ``torch.distributed`` from the launcher's environment when it
is not started (see :mod:`parastrat.runtime.backend`), checks the strategy against the real
world size *before* any group exists, then builds the groups:

- training strategies go through ``megatron.core.parallel_state.initialize_model_parallel``
  (so Megatron's getters work for model code), called with the strategy's degrees and order,
  expert tensor parallelism always explicit, and the keyword arguments the installed
  megatron-core accepts (read from its signature, 0.13 through the newest);
- inference strategies get plain ``torch.distributed.new_group`` groups laid out by
  :func:`parastrat.layout` (xDiT's ``tp-sp-pp-cfg-dp`` order by default), every rank creating
  every group in the same order as torch requires, and yunchang's
  ``PROCESS_GROUP.ULYSSES_PG``/``RING_PG`` are pointed at the Ulysses and ring groups.

The returned :class:`Groups` maps every layout kind to this rank's process group, and its
membership equals ``parastrat.layout(strategy, world)`` (checked as it is built).
``destroy()`` undoes all of it and leaves the process ready for another ``initialize``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..errors import RankTimeoutError, UsageError
from ..layout import KINDS, coordinates, layout
from ..strategy import Strategy, require_strategy
from .backend import Started, as_timedelta, device_for, init_distributed

#: layout kind -> (Megatron getter, its keyword arguments).  Kinds not listed here (and the
#: Ulysses/ring split unless Megatron built hierarchical CP groups) are made with new_group.
MEGATRON_GETTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "tp": ("get_tensor_model_parallel_group", {}),
    "cp": ("get_context_parallel_group", {}),
    "dp": ("get_data_parallel_group", {"with_context_parallel": False}),
    "dp-cp": ("get_data_parallel_group", {"with_context_parallel": True}),
    "pp": ("get_pipeline_model_parallel_group", {}),
    "tp-pp": ("get_model_parallel_group", {}),
    "etp": ("get_expert_tensor_parallel_group", {}),
    "ep": ("get_expert_model_parallel_group", {}),
    "edp": ("get_expert_data_parallel_group", {}),
    "etp-ep": ("get_expert_tensor_and_model_parallel_group", {}),
}


@dataclass(eq=False)
class Groups(Mapping):
    """This rank's process groups for a strategy, one per layout kind.

    ``groups["tp"]`` is a ``torch.distributed.ProcessGroup`` usable wherever a group is taken
    (``all_reduce(t, group=groups["tp"])``, ``yunchang.LongContextAttention(ulysses_pg=...,
    ring_pg=...)``, ``mindiesd.fused_moe(tp_group=groups["tp"], ep_group=groups["ep"])``,
    ``usp_attention(ulysses_group=groups["ulysses"], kv_gather_group=groups["ring"])``).
    ``ranks[kind]`` lists the global ranks of this rank's group of that kind; ``layout`` holds
    every group of every kind; ``coords`` this rank's index along each axis.
    """

    strategy: Strategy
    rank: int
    world_size: int
    backend: str
    device: str
    layout: dict[str, list[list[int]]]
    ranks: dict[str, list[int]]
    coords: dict[str, int]
    megatron: bool
    _pgs: dict[str, Any] = field(repr=False)
    _created: list[Any] = field(repr=False, default_factory=list)
    _started_dist: bool = field(repr=False, default=False)
    _set_yunchang: bool = field(repr=False, default=False)
    alive: bool = True

    def __repr__(self) -> str:
        """One line: the strategy, this rank and the backend (every group is in
        :attr:`layout`, this rank's in :attr:`ranks`)."""
        return (
            f"Groups({self.strategy}, rank {self.rank} of {self.world_size}, {self.backend} on "
            f"{self.device}, {len(self.layout)} kinds{', megatron' if self.megatron else ''})"
        )

    def __getitem__(self, kind: str) -> Any:
        if not self.alive:
            raise UsageError("these process groups were destroyed; call initialize() again")
        try:
            return self._pgs[kind]
        except KeyError:
            raise KeyError(f"no group kind {kind!r}; kinds are {', '.join(KINDS)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._pgs)

    def __len__(self) -> int:
        return len(self._pgs)

    def size(self, kind: str) -> int:
        """Number of ranks in this rank's group of ``kind``."""
        return len(self.ranks[kind])

    def destroy(self) -> None:
        """Tear these groups down (same as :func:`parastrat.destroy` for the active handle)."""
        _teardown(self)


#: The handle the last initialize() returned, for the argument-less destroy().
_active: Groups | None = None


def initialize(
    strategy: Strategy,
    backend: str = "auto",
    *,
    timeout: timedelta | float | None = None,
    megatron_kwargs: Mapping[str, Any] | None = None,
) -> Groups:
    """Start torch.distributed if needed and build ``strategy``'s process groups on this rank.

    ``backend``: ``"auto"`` (nccl on CUDA, hccl on Ascend NPU, gloo on CPU) or a name.
    ``timeout``: a timedelta or seconds, for the default group and every group made here
    (Megatron takes whole minutes: rounded up).  ``megatron_kwargs``: extra keyword arguments
    for ``initialize_model_parallel`` (e.g. ``num_distributed_optimizer_instances``).

    Raises StrategyError, before any group is created, when the strategy does not fit the
    world; UsageError when groups are already initialized or the installed megatron-core
    cannot express the strategy.
    """
    global _active
    require_strategy(strategy, "initialize()")
    if _active is not None and _active.alive:
        raise UsageError(
            "parastrat process groups are already initialized in this process; "
            "call parastrat.destroy() before initializing another strategy"
        )
    from .._deps import require

    dist = require("torch.distributed")
    td = as_timedelta(timeout)
    # the check comes first: a strategy that does not fit must not leave half-made groups
    _check_fits(strategy, dist, td, megatron_kwargs)
    _refuse_foreign_megatron(strategy)  # before anything starts: the cleanup must not reach it
    started = init_distributed(backend, timeout=td)
    before = _live_groups()
    rank, begun = dist.get_rank(), time.monotonic()
    try:
        handle = _build(strategy, dist, started, td, megatron_kwargs)
    except BaseException as exc:
        _cleanup_after_failure(started.started)
        lost = _peer_lost(exc, strategy, rank, time.monotonic() - begun)
        if lost is None:
            raise
        raise lost from exc
    # every group this call made, Megatron's too: destroy() frees them all under a default
    # group the caller started (destroy_model_parallel only drops Megatron's references)
    made = [pg for pg in _live_groups() if pg not in before]
    handle._created.extend(pg for pg in made if pg not in handle._created)
    _active = handle
    return handle


#: initialize() calls so far in this process: names the store keys of each call's exchange
#: (every rank of a job calls initialize the same number of times).
_calls = 0


def _same_strategy_everywhere(dist: Any, s: Strategy, rank: int, world: int) -> None:
    """UsageError, before any group is built, when the ranks were started with different
    strategies (each would build other groups, and all would wait on each other until a raw
    store timeout): every rank posts its strategy on the default group's store and reads the
    others'.  A rank that never posts is a RankTimeoutError naming it (see
    :func:`_posted_strategy`)."""
    global _calls
    _calls += 1
    if world == 1:
        return
    store = getattr(dist.distributed_c10d, "_get_default_store", None)
    if store is None:
        return
    store = store()
    mine = str(s).encode()
    key = f"parastrat/initialize/{_calls}/"
    try:
        store.set(key + str(rank), mine)
    except RuntimeError:  # a store that carries no keys (torch's fake process group)
        return
    for other in range(world):
        if other == rank:
            continue
        theirs = _posted_strategy(store, key + str(other), s, rank, other)
        if theirs != mine:
            raise UsageError(
                f"rank {rank} was started with {s}, rank {other} with {theirs.decode()}: "
                "every rank must build the same strategy (same flags or --strategy on every "
                "rank)"
            )


def _posted_strategy(store: Any, key: str, s: Strategy, rank: int, other: int) -> bytes:
    """What rank ``other`` posted under ``key``.  RankTimeoutError when it posted nothing
    within the store's timeout: that rank hung or died before initialize, or stopped earlier
    in it (a strategy that does not fit its world fails before posting); a rank that posts
    another strategy is told apart by its caller, positively."""
    t0 = time.monotonic()
    try:
        return bytes(store.get(key))
    except Exception as exc:  # the store's own timeout (or a lost store): no answer
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise RankTimeoutError(
            f"rank {rank}: rank {other} did not arrive at initialize({s}) within the timeout "
            f"(waited {time.monotonic() - t0:.0f} s; torch: {type(exc).__name__}: "
            f"{first[:160]}): rank {other} hung or died before building the groups, or it was "
            "started with another strategy and stopped before posting it; read that rank's "
            "log, and start every rank with the same strategy"
        ) from None


def _live_groups() -> list[Any]:
    """The process groups torch.distributed holds now (its registry; [] where it has none)."""
    import torch.distributed as dist

    world = getattr(dist.distributed_c10d, "_world", None)
    return list(getattr(world, "pg_map", {}) or {}) if dist.is_initialized() else []


def _check_fits(
    strategy: Strategy, dist: Any, td: timedelta | None, megatron_kwargs: Mapping[str, Any] | None
) -> None:
    """Before torch.distributed starts: the strategy against the world the launcher gives
    (StrategyError), a single process without a launcher, and what the installed
    megatron-core cannot express (UsageError)."""
    world = dist.get_world_size() if dist.is_initialized() else _env_world()
    if world == 1 and not dist.is_initialized() and strategy.min_world_size > 1:
        from .backend import LAUNCH_HINT

        launched = _env_world_given()
        raise UsageError(
            f"{strategy} needs at least {strategy.min_world_size} ranks, but "
            + (
                "the launched world has 1 rank (WORLD_SIZE=1): start "
                f"{strategy.min_world_size} or more (torchrun --nproc-per-node "
                f"{strategy.min_world_size} ...)"
                if launched
                else f"this is one process started without a launcher (no RANK/WORLD_SIZE): "
                f"{LAUNCH_HINT}"
            )
        )
    sized = strategy.with_world_size(world)
    if not sized.is_inference:
        _megatron_init_kwargs(sized, td, megatron_kwargs)  # version problems surface here too


def _build(
    strategy: Strategy,
    dist: Any,
    started: Started,
    td: timedelta | None,
    megatron_kwargs: Mapping[str, Any] | None,
) -> Groups:
    """This rank's groups of ``strategy`` over the started world, checked against the
    layout (Megatron's for training, new groups and yunchang's globals for inference)."""
    rank = dist.get_rank()
    world = dist.get_world_size()
    sized = strategy.with_world_size(world)
    _same_strategy_everywhere(dist, sized, rank, world)
    grid = layout(sized, world)
    if sized.is_inference:
        pgs, created = _build_inference(grid, rank, td)
    else:
        pgs, created = _build_training(sized, grid, rank, td, megatron_kwargs)
    mine = {kind: _my_group(grid[kind], rank) for kind in KINDS}
    _check_membership(pgs, mine, rank)
    handle = Groups(
        strategy=sized,
        rank=rank,
        world_size=world,
        backend=started.backend,
        device=device_for(started.backend),
        layout=grid,
        ranks=mine,
        coords=coordinates(sized, world, rank),
        megatron=not sized.is_inference,
        _pgs=pgs,
        _created=created,
        _started_dist=started.started,
    )
    if sized.is_inference:
        handle._set_yunchang = _point_yunchang(pgs["ulysses"], pgs["ring"])
    return handle


def destroy() -> None:
    """Tear down what :func:`initialize` made; a no-op when nothing is initialized.

    Clears Megatron's parallel state, destroys the groups made here, resets yunchang's
    globals, and destroys the default process group when initialize() started it.
    """
    if _active is not None:
        _teardown(_active)


def current() -> Groups | None:
    """The live handle from the last :func:`initialize`, or None."""
    return _active if _active is not None and _active.alive else None


# ---- helpers --------------------------------------------------------------------------------


def _env_world() -> int:
    from .backend import detect_env

    return detect_env().world_size


def _env_world_given() -> bool:
    """True when a launcher set the world (torchrun, Slurm, ...), not the single-process
    default."""
    from .backend import detect_env

    return detect_env().source != "single"


def _my_group(groups: list[list[int]], rank: int) -> list[int]:
    for g in groups:
        if rank in g:
            return list(g)
    raise RuntimeError(f"rank {rank} is in no group of the layout")  # layout covers every rank


def new_groups(
    all_groups: Sequence[Sequence[int]],
    rank: int,
    td: timedelta | None = None,
    created: list[Any] | None = None,
) -> Any:
    """Create every group of one kind and return this rank's.

    ``torch.distributed.new_group`` is collective: every rank must create every group, in the
    same order, even the ones it is not in.  The groups this rank joins are appended to
    ``created`` (for teardown) when given.
    """
    import torch.distributed as dist

    mine = None
    for g in all_groups:
        pg = dist.new_group(ranks=list(g), timeout=td)
        if rank in g:
            mine = pg
            if created is not None:
                created.append(pg)
    return mine


def _fill_by_new_group(
    grid: dict[str, list[list[int]]],
    pgs: dict[str, Any],
    rank: int,
    td: timedelta | None,
    created: list[Any],
) -> None:
    """Give every kind not yet in ``pgs`` a group: reuse a kind with the same partition of the
    ranks (decided from the full layout, so identically on every rank), else new_group."""
    by_partition: dict[tuple, str] = {_partition(grid[k]): k for k in pgs}
    for kind in KINDS:
        if kind in pgs:
            continue
        part = _partition(grid[kind])
        if part in by_partition:
            pgs[kind] = pgs[by_partition[part]]
        else:
            pgs[kind] = new_groups(grid[kind], rank, td, created)
            by_partition[part] = kind


def _partition(groups: list[list[int]]) -> tuple:
    return tuple(sorted(tuple(g) for g in groups))


def _build_inference(
    grid: dict[str, list[list[int]]], rank: int, td: timedelta | None
) -> tuple[dict[str, Any], list[Any]]:
    pgs: dict[str, Any] = {}
    created: list[Any] = []
    _fill_by_new_group(grid, pgs, rank, td, created)
    return pgs, created


def _build_training(
    s: Strategy,
    grid: dict[str, list[list[int]]],
    rank: int,
    td: timedelta | None,
    extra: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[Any]]:
    ps = _parallel_state()
    if ps.model_parallel_is_initialized():
        raise UsageError(
            "megatron.core.parallel_state is already initialized in this process; "
            "call parallel_state.destroy_model_parallel() (or parastrat.destroy()) "
            "first"
        )
    ps.initialize_model_parallel(**_megatron_init_kwargs(s, td, extra))
    pgs: dict[str, Any] = {}
    for kind, (getter, kwargs) in MEGATRON_GETTERS.items():
        fn = getattr(ps, getter, None)
        if fn is not None:
            pgs[kind] = fn(**kwargs)
    if s.ulysses > 1 and s.ring > 1:
        hier = ps.get_hierarchical_context_parallel_groups()
        pgs["ulysses"], pgs["ring"] = hier[0], hier[1]
    created: list[Any] = []
    _fill_by_new_group(grid, pgs, rank, td, created)
    return pgs, created


def _parallel_state():
    from .._deps import require

    return require(
        "megatron.core.parallel_state",
        "megatron",
        why="training strategies build their groups through Megatron Core",
    )


def _megatron_init_kwargs(
    s: Strategy, td: timedelta | None, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Arguments for the installed ``initialize_model_parallel``, adapted to its signature.

    Raises UsageError when the strategy needs an argument this megatron-core lacks.
    """
    ps = _parallel_state()
    accepted = set(inspect.signature(ps.initialize_model_parallel).parameters)
    want: dict[str, Any] = {
        "tensor_model_parallel_size": s.tp,
        "pipeline_model_parallel_size": s.pp,
        "virtual_pipeline_model_parallel_size": s.vpp if s.vpp > 1 else None,
        "context_parallel_size": s.cp,
        "expert_model_parallel_size": s.ep,
        "expert_tensor_parallel_size": s.etp,
        "order": s.order,
    }
    if s.ulysses > 1 and s.ring > 1:
        want["hierarchical_context_parallel_sizes"] = [s.ulysses, s.ring]
    if s.dp_replicate > 1:  # HSDP: Megatron's distributed-optimizer instances are the replicas
        want["num_distributed_optimizer_instances"] = s.dp_replicate
    if td is not None:
        want["distributed_timeout_minutes"] = max(1, math.ceil(td.total_seconds() / 60))
    if _on_fake_backend():  # torch's fake process group builds no gloo sub-groups
        want["create_gloo_process_groups"] = False
    # what each argument means when the installed version lacks it: None = harmless to drop
    needed_unless = {
        "context_parallel_size": s.cp == 1,
        "expert_model_parallel_size": s.ep == 1,
        "expert_tensor_parallel_size": s.etp == s.tp,  # old versions: etp follows tp
        "hierarchical_context_parallel_sizes": False,
        "order": s.order == "tp-cp-ep-dp-pp",  # the default of versions without the argument
        "virtual_pipeline_model_parallel_size": s.vpp == 1,
        "num_distributed_optimizer_instances": False,
    }
    version = _megatron_version()
    out: dict[str, Any] = {}
    problems = []
    for key, value in want.items():
        if key in accepted:
            out[key] = value
        elif not needed_unless.get(key, True):
            problems.append(f"{key}={value!r}")
    if problems:
        raise UsageError(
            f"the installed megatron-core {version} has no "
            f"{', '.join(problems)} in initialize_model_parallel; upgrade with "
            "pip install -U megatron-core (>= 0.13) or change the strategy"
        )
    for key, value in (extra or {}).items():
        if key not in accepted:
            raise UsageError(
                f"megatron-core {version}'s initialize_model_parallel has no argument {key!r}"
            )
        out[key] = value
    return out


def _on_fake_backend() -> bool:
    """Whether torch.distributed runs on torch's fake process group (one process standing
    for a whole world: Megatron's gloo sub-groups cannot be made over it)."""
    import torch.distributed as dist

    return dist.is_initialized() and str(dist.get_backend()) == "fake"


def _megatron_version() -> str:
    try:
        from importlib.metadata import version

        return version("megatron-core")
    except Exception:
        return "(unknown version)"


def _check_membership(pgs: Mapping[str, Any], mine: Mapping[str, list[int]], rank: int) -> None:
    """Every group's members must equal the layout's; a disagreement is a bug to report."""
    import torch.distributed as dist

    for kind in KINDS:
        got = sorted(dist.get_process_group_ranks(pgs[kind]))
        if got != sorted(mine[kind]):
            raise RuntimeError(
                f"rank {rank}: the {kind} group holds ranks {got} but "
                f"parastrat.layout says {mine[kind]}; please report this "
                "(layout and the framework disagree)"
            )


def _point_yunchang(ulysses_pg: Any, ring_pg: Any) -> bool:
    """Point yunchang's global Ulysses/ring groups at ours; False when yunchang is absent."""
    import importlib.util

    if importlib.util.find_spec("yunchang") is None:
        return False
    from yunchang.globals import PROCESS_GROUP

    PROCESS_GROUP.ULYSSES_PG = ulysses_pg
    PROCESS_GROUP.RING_PG = ring_pg
    return True


def _reset_yunchang() -> None:
    from yunchang.globals import PROCESS_GROUP

    PROCESS_GROUP.ULYSSES_PG = None
    PROCESS_GROUP.RING_PG = None


def _teardown(handle: Groups) -> None:
    global _active
    if not handle.alive:
        return
    handle.alive = False
    if _active is handle:
        _active = None
    import torch.distributed as dist

    if handle._set_yunchang:
        _reset_yunchang()
    if handle.megatron:
        _parallel_state().destroy_model_parallel()
    if not dist.is_initialized():
        return
    if handle._started_dist:
        dist.destroy_process_group()  # destroys every subgroup with it
        return
    for pg in handle._created:
        with contextlib.suppress(Exception):  # already gone with its backend
            dist.destroy_process_group(pg)


def _refuse_foreign_megatron(strategy: Strategy) -> None:
    """UsageError when Megatron's ``parallel_state`` is already initialized by someone else: a
    training strategy's groups are Megatron's, and building them would replace (and a failed
    attempt's cleanup destroy) the caller's."""
    import sys

    ps = sys.modules.get("megatron.core.parallel_state")
    if strategy.is_inference or ps is None or not ps.model_parallel_is_initialized():
        return
    raise UsageError(
        "megatron.core.parallel_state is already initialized in this process (not by "
        "parastrat); call parallel_state.destroy_model_parallel() first, or use the groups "
        "it built"
    )


def _peer_lost(exc: BaseException, s: Strategy, rank: int, waited_s: float) -> Exception | None:
    """A :class:`RankTimeoutError` for torch's store timeout or broken connection while the
    groups were built (``dist.new_group`` waits on the store for every member: a peer that
    stopped or hung there leaves this rank waiting out the timeout, or its connection
    closed); None for any other failure, which is re-raised as it is."""
    import torch.distributed as dist

    kinds = tuple(
        k
        for k in (getattr(dist, "DistStoreError", None), getattr(dist, "DistNetworkError", None))
        if k is not None
    )
    if not (kinds and isinstance(exc, kinds)):
        return None
    what = "timed out waiting for" if "timeout" in str(exc).lower() else "lost"
    first = str(exc).splitlines()[0] if str(exc) else ""
    minutes = (
        ""
        if s.is_inference
        else (" (Megatron Core's groups wait whole minutes: a timeout under 60 s waits 60)")
    )
    return RankTimeoutError(
        f"rank {rank}: building the process groups of {s} {what} another rank after "
        f"{waited_s:.0f} s (torch: {type(exc).__name__}: {first[:160]}); a rank stopped or "
        "hung while the groups were being built: the first rank to fail in the job's logs is "
        f"the cause{minutes}"
    )


def _cleanup_after_failure(started_dist: bool) -> None:
    """Undo a half-finished initialize so the process can try again."""
    import sys

    import torch.distributed as dist

    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is not None and ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    if started_dist and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["MEGATRON_GETTERS", "Groups", "current", "destroy", "initialize"]
