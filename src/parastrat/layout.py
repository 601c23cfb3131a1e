"""Rank layouts: which ranks form each process group, computed once, in pure Python.

The whole topology is a grid over ``range(world)`` whose axes follow the order string (first
name varies fastest, as in Megatron Core's ``RankGenerator``); a group of kind ``"tp-pp"`` is
the set of ranks that differ only along the tp and pp axes.  Training strategies get two grids
over the same ranks, as Megatron builds them: dense (tp, cp, dp, pp) and expert
(etp, ep, edp, pp).  Inference strategies use xDiT's grid (tp, sp, pp, cfg, dp).  Within every
sequence-parallel group the Ulysses factor is innermost (consecutive ranks) and ring is strided
over it, as Megatron's hierarchical CP and yunchang's ``use_ulysses_low=True`` do.

The runtime builds its process groups from this module and the tests compare it with
Megatron Core and yunchang, so it is the one source of truth for rank lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import StrategyError

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
)

Groups = list[list[int]]


def grid_groups(sizes: Sequence[int], mask: Sequence[bool]) -> Groups:
    """Groups of a dense grid: ranks that differ only along the masked axes.

    ``sizes`` lists the axis lengths, fastest-varying first; a rank's coordinates are its
    mixed-radix digits.  Groups are listed by the unmasked coordinates (fastest first) and the
    ranks inside a group by the masked coordinates (fastest first) — Megatron's convention.
    """
    strides = []
    acc = 1
    for n in sizes:
        strides.append(acc)
        acc *= n
    in_sizes = [n for n, m in zip(sizes, mask) if m]
    in_strides = [st for st, m in zip(strides, mask) if m]
    out_sizes = [n for n, m in zip(sizes, mask) if not m]
    out_strides = [st for st, m in zip(strides, mask) if not m]
    offsets = _offsets(in_sizes, in_strides)
    return [[base + off for off in offsets] for base in _offsets(out_sizes, out_strides)]


def _offsets(sizes: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Rank offsets of every point of a sub-grid, first axis fastest."""
    offs = [0]
    for n, st in zip(sizes, strides):
        offs = [o + k * st for k in range(n) for o in offs]
    return offs


def _groups(order: str, sizes: dict[str, int], token: str) -> Groups:
    names = order.split("-")
    wanted = set(token.split("-"))
    return grid_groups([sizes[n] for n in names], [n in wanted for n in names])


def split_sequence_groups(sp_groups: Groups, ulysses: int) -> tuple[Groups, Groups]:
    """Split each sequence-parallel group into Ulysses (inner) and ring (outer) groups."""
    uly: Groups = []
    ring: Groups = []
    for g in sp_groups:
        uly += [g[i : i + ulysses] for i in range(0, len(g), ulysses)]
        ring += [g[i::ulysses] for i in range(ulysses)]
    return uly, ring


def layout(strategy: Strategy, world_size: int | None = None) -> dict[str, Groups]:
    """Every group of every kind for ``strategy`` on ``world_size`` ranks.

    Keys are :data:`KINDS`; a degree of 1 gives singleton groups, so every key is present.
    ``world_size`` defaults to the strategy's own (when its ``dp`` is set).  Raises
    StrategyError when the world does not fit the strategy.
    """
    if world_size is None:
        world_size = strategy.world_size
        if world_size is None:
            raise StrategyError(
                "layout needs a world size: the strategy has no dp",
                hint="call layout(strategy, world_size) or strategy.with_world_size(n)",
                rule="world-size-missing",
            )
    s = strategy.with_world_size(world_size)
    dp = s.dp or 1  # with_world_size always fills it
    if s.is_inference:
        return _inference_layout(s, dp)
    return _training_layout(s, world_size, dp)


def _training_layout(s: Strategy, world: int, dp: int) -> dict[str, Groups]:
    dense = {"tp": s.tp, "cp": s.cp, "ep": 1, "dp": dp, "pp": s.pp}
    edp = world // (s.etp * s.ep * s.pp)
    expert = {"tp": s.etp, "cp": 1, "ep": s.ep, "dp": edp, "pp": s.pp}
    o = s.order
    cp_groups = _groups(o, dense, "cp")
    uly, ring = split_sequence_groups(cp_groups, s.ulysses)
    return {
        "tp": _groups(o, dense, "tp"),
        "cp": cp_groups,
        "dp": _groups(o, dense, "dp"),
        "pp": _groups(o, dense, "pp"),
        "dp-cp": _groups(o, dense, "dp-cp"),
        "tp-pp": _groups(o, dense, "tp-pp"),
        "etp": _groups(o, expert, "tp"),
        "ep": _groups(o, expert, "ep"),
        "edp": _groups(o, expert, "dp"),
        "etp-ep": _groups(o, expert, "tp-ep"),
        "ulysses": uly,
        "ring": ring,
        "sp": cp_groups,
        "cfg": [[r] for r in range(world)],
    }


def _inference_layout(s: Strategy, dp: int) -> dict[str, Groups]:
    sizes = {"tp": s.tp, "sp": s.cp, "pp": s.pp, "cfg": s.cfg, "dp": dp}
    o = s.order
    sp_groups = _groups(o, sizes, "sp")
    uly, ring = split_sequence_groups(sp_groups, s.ulysses)
    tp_groups = _groups(o, sizes, "tp")
    world = s.world_size or 0
    return {
        "tp": tp_groups,
        "cp": sp_groups,
        "dp": _groups(o, sizes, "dp"),
        "pp": _groups(o, sizes, "pp"),
        "dp-cp": _groups(o, sizes, "sp-dp"),
        "tp-pp": _groups(o, sizes, "tp-pp"),
        # No expert parallelism in the inference grid: experts follow TP.
        "etp": tp_groups,
        "ep": [[r] for r in range(world)],
        "edp": _groups(o, sizes, "sp-cfg-dp"),
        "etp-ep": tp_groups,
        "ulysses": uly,
        "ring": ring,
        "sp": sp_groups,
        "cfg": _groups(o, sizes, "cfg"),
    }


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
