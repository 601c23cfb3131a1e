"""Rank layouts: which ranks form each process group, computed once, in pure Python.

Every kind is a group of axes of one :class:`~parastrat.grid.RankGrid` (or of one of its
views) over ``range(world)`` whose axes follow the order string (first name varies fastest, as
in Megatron Core's ``RankGenerator``); a group of kind ``"tp-pp"`` is the set of ranks that
differ only along the tp and pp axes.  Training strategies read the dense grid (tp, cp, dp, pp)
and its expert (etp, ep, edp, pp), sequence (cp = Ulysses x ring, Ulysses innermost) and FSDP
(dp = dp_shard x dp_replicate, shard innermost) views, as Megatron and torchtitan build them.
Inference strategies use xDiT's grid (tp, sp, pp, cfg, dp).

The runtime builds its process groups from this module and the tests compare it with
Megatron Core and yunchang, so it is the one source of truth for rank lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import StrategyError
from .grid import RankGrid, strategy_grid
from .strategy import require_strategy

if TYPE_CHECKING:
    from .strategy import Strategy

#: Every key :func:`layout` returns.
KINDS = (
    "tp",
    "cp",
    "dp",
    "pp",
    "dp-cp",
    "tp-pp",
    "etp",
    "ep",
    "edp",
    "etp-ep",
    "ulysses",
    "ring",
    "sp",
    "cfg",
    "dp_shard",
    "dp_replicate",
    "dp_shard-cp",
)

#: Layout kind -> (grid view, axes) for a training strategy (``None``: the dense grid).
TRAINING_KINDS: dict[str, tuple[str | None, str]] = {
    "tp": (None, "tp"),
    "cp": (None, "cp"),
    "dp": (None, "dp"),
    "pp": (None, "pp"),
    "dp-cp": (None, "dp-cp"),
    "tp-pp": (None, "tp-pp"),
    "etp": ("expert", "etp"),
    "ep": ("expert", "ep"),
    "edp": ("expert", "edp"),
    "etp-ep": ("expert", "etp-ep"),
    "ulysses": ("sequence", "ulysses"),
    "ring": ("sequence", "ring"),
    "sp": (None, "cp"),
    "dp_shard": ("fsdp", "dp_shard"),
    "dp_replicate": ("fsdp", "dp_replicate"),
    "dp_shard-cp": ("fsdp", "dp_shard-cp"),
}

#: The same for an inference strategy on xDiT's grid (no experts, no FSDP: experts follow TP
#: and the whole dp axis replicates).
INFERENCE_KINDS: dict[str, tuple[str | None, str]] = {
    "tp": (None, "tp"),
    "cp": (None, "sp"),
    "dp": (None, "dp"),
    "pp": (None, "pp"),
    "dp-cp": (None, "sp-dp"),
    "tp-pp": (None, "tp-pp"),
    "etp": (None, "tp"),
    "edp": (None, "sp-cfg-dp"),
    "etp-ep": (None, "tp"),
    "ulysses": ("sequence", "ulysses"),
    "ring": ("sequence", "ring"),
    "sp": (None, "sp"),
    "cfg": (None, "cfg"),
    "dp_shard": (None, "dp"),
    "dp_shard-cp": (None, "sp-dp"),
}

Groups = list[list[int]]


def grid_groups(sizes: Sequence[int], mask: Sequence[bool]) -> Groups:
    """Groups of a dense grid: ranks that differ only along the masked axes.

    ``sizes`` lists the axis lengths, fastest-varying first.  Groups are listed by the unmasked
    coordinates (fastest first) and the ranks inside a group by the masked coordinates (fastest
    first) — Megatron's convention.  A shorthand for :meth:`RankGrid.groups`.
    """
    names = tuple(f"a{i}" for i in range(len(sizes)))
    return RankGrid(names, tuple(sizes)).groups([n for n, m in zip(names, mask) if m])


def layout(strategy: Strategy, world_size: int | None = None) -> dict[str, Groups]:
    """Every group of every kind for ``strategy`` on ``world_size`` ranks.

    Keys are :data:`KINDS`; a degree of 1 gives singleton groups, so every key is present.
    ``world_size`` defaults to the strategy's own (when its ``dp`` is set).  Raises
    StrategyError when the world does not fit the strategy.
    """
    strategy = require_strategy(strategy, "layout()")
    if world_size is None:
        world_size = strategy.world_size
        if world_size is None:
            raise StrategyError(
                "layout needs a world size: the strategy has no dp",
                hint="call layout(strategy, world_size) or strategy.with_world_size(n)",
                rule="world-size-missing",
            )
    s = strategy.with_world_size(world_size)
    grid = strategy_grid(s, world_size)
    table = INFERENCE_KINDS if s.is_inference else TRAINING_KINDS
    singletons = [[r] for r in range(world_size)]
    out: dict[str, Groups] = {}
    for kind in KINDS:
        if kind not in table:
            out[kind] = [list(g) for g in singletons]
            continue
        view, axes = table[kind]
        out[kind] = (grid if view is None else grid.view(view)).groups(axes)
    return out


#: The axes of a rank's coordinates (the group kinds that partition the world).
COORDINATE_KINDS = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "ulysses", "ring", "cfg")


def all_coordinates(strategy: Strategy, world_size: int) -> list[dict[str, int]]:
    """Every rank's position along each axis (:data:`COORDINATE_KINDS`) of the strategy's
    grids, indexed by rank: one :func:`layout`, read once (rank tables of any size)."""
    groups = layout(strategy, world_size)
    out: list[dict[str, int]] = [{} for _ in range(world_size)]
    for kind in COORDINATE_KINDS:
        for g in groups[kind]:
            for index, rank in enumerate(g):
                out[rank].setdefault(kind, index)
    return out


def coordinates(strategy: Strategy, world_size: int, rank: int) -> dict[str, int]:
    """A rank's position along each axis (tp, cp, dp, pp, ep, ... ) of the strategy's grids.

    Used for the rank tables ``parastrat verify`` and ``parastrat layout`` print.
    """
    return all_coordinates(strategy, world_size)[rank]
