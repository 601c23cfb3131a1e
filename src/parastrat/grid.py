"""The rank grid: one hyper-rectangle over ``range(world)`` with named axes and views.

A :class:`RankGrid` names its axes fastest-varying first (the order string convention of
Megatron Core's ``RankGenerator`` and ``HyperCommGrid``).  A group of axes ``"tp-pp"`` is the
set of ranks that differ only along those axes; the *stride* of an axis is how many ranks apart
its neighbours are.  A grid carries *views*: other grids over the same ranks, as Megatron
Core's ``HyperCommGrid`` registers several shapes over one world:

* ``"expert"``: the MoE grid (etp, ep, edp, pp) Megatron builds beside the dense one
  (tp, cp, dp, pp), with the same order string (tp read as etp, cp as 1, dp as edp);
* ``"sequence"``: the dense grid with cp split into Ulysses (inner) x ring (outer), as
  Megatron's hierarchical CP and yunchang's ``use_ulysses_low=True`` do;
* ``"fsdp"``: the dense grid with dp split into dp_shard (inner) x dp_replicate (outer), as
  torchtitan's device mesh and Megatron's ``num_distributed_optimizer_instances`` do.

:func:`strategy_grid` builds the grid of a strategy; :mod:`parastrat.layout` lists its groups,
:mod:`parastrat.rules` checks that the views agree on pipeline stages and
:mod:`parastrat.estimate.comm` reads the strides.  This module imports nothing of parastrat at
run time, so every layer can use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .strategy import Strategy

Groups = list[list[int]]


class RankGrid:
    """Named axes over ``range(world)``, first axis fastest, plus named views of the same ranks.

    An immutable value (equal and hashable by ``names``, ``sizes`` and ``views``); slotted and
    built without a dataclass's per-field machinery, because the planner builds a few grids for
    each of thousands of candidates.
    """

    __slots__ = ("_positions", "_stride_table", "names", "sizes", "views")
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    views: tuple[tuple[str, RankGrid], ...]
    _positions: dict[str, int]
    _stride_table: tuple[int, ...]

    def __init__(
        self,
        names: tuple[str, ...],
        sizes: tuple[int, ...],
        views: tuple[tuple[str, RankGrid], ...] = (),
    ) -> None:
        names, sizes = tuple(names), tuple(sizes)
        positions = {n: i for i, n in enumerate(names)}
        if len(names) != len(sizes) or len(positions) != len(names):
            raise ValueError(f"grid axes {names} and sizes {sizes} do not match")
        strides, acc = [], 1
        for n in sizes:
            strides.append(acc)
            acc *= n
        set_ = object.__setattr__
        set_(self, "names", names)
        set_(self, "sizes", sizes)
        set_(self, "views", tuple(views))
        set_(self, "_stride_table", tuple(strides))
        set_(self, "_positions", positions)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("RankGrid is immutable")

    def __reduce__(self) -> tuple[type[RankGrid], tuple]:
        return (RankGrid, (self.names, self.sizes, self.views))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RankGrid):
            return NotImplemented
        return (self.names, self.sizes, self.views) == (other.names, other.sizes, other.views)

    def __hash__(self) -> int:
        return hash((self.names, self.sizes, self.views))

    def __repr__(self) -> str:
        axes = ", ".join(f"{n}={k}" for n, k in zip(self.names, self.sizes))
        views = f", views={[k for k, _ in self.views]}" if self.views else ""
        return f"RankGrid({axes}{views})"

    @classmethod
    def from_order(
        cls, order: str, sizes: Mapping[str, int], rename: Mapping[str, str] | None = None
    ) -> RankGrid:
        """The grid of an order string (``"tp-cp-ep-dp-pp"``) with each axis's size;
        ``rename`` gives axes another name (the expert view reads tp as etp)."""
        names = order.split("-")
        rename = rename or {}
        return cls(tuple(rename.get(n, n) for n in names), tuple(sizes[n] for n in names))

    # ---- shape ---------------------------------------------------------------------------
    @property
    def world(self) -> int:
        """Ranks the grid spans: the product of its axis sizes."""
        out = 1
        for n in self.sizes:
            out *= n
        return out

    def size(self, axis: str) -> int:
        """Length of one axis."""
        return self.sizes[self._index(axis)]

    def stride(self, axes: str | Sequence[str]) -> int:
        """Rank distance between neighbours of a group: for one axis, the product of the faster
        axes' sizes; for several (``"dp-cp"``), the smallest stride among those longer than 1
        (the first named axis's when all have length 1)."""
        if isinstance(axes, str) and "-" not in axes:
            return self._strides()[self._index(axes)]
        wanted = _axis_list(axes)
        strides = self._strides()
        longer = [strides[self._index(a)] for a in wanted if self.size(a) > 1]
        return min(longer) if longer else strides[self._index(wanted[0])]

    def groups(self, axes: str | Sequence[str]) -> Groups:
        """Every group of ranks that differ only along ``axes`` (``"tp-pp"`` or a list).

        Groups are listed by the other axes' coordinates and the ranks inside a group by the
        named axes' coordinates, fastest first: Megatron's ``RankGenerator`` convention.
        """
        wanted = set(_axis_list(axes))
        for a in wanted:
            self._index(a)
        cached = _cached_groups(self.sizes, tuple(n in wanted for n in self.names))
        return [list(g) for g in cached]

    # ---- views ---------------------------------------------------------------------------
    def register_view(self, name: str, grid: RankGrid) -> RankGrid:
        """A copy of this grid that also carries ``grid`` as view ``name`` (same world)."""
        if grid.world != self.world:
            raise ValueError(f"view {name!r} spans {grid.world} ranks, the grid {self.world}")
        kept = tuple((k, v) for k, v in self.views if k != name)
        return RankGrid(self.names, self.sizes, (*kept, (name, grid)))

    def view(self, name: str) -> RankGrid:
        """The view registered as ``name``."""
        for k, v in self.views:
            if k == name:
                return v
        raise KeyError(f"no view {name!r}; views: {[k for k, _ in self.views]}")

    def split(self, axis: str, parts: Sequence[tuple[str, int]]) -> RankGrid:
        """This grid (without views) with ``axis`` split into named sub-axes, first fastest."""
        i = self._index(axis)
        product = 1
        for _, n in parts:
            product *= n
        if product != self.sizes[i]:
            raise ValueError(f"parts {list(parts)} do not multiply to {axis}={self.sizes[i]}")
        names = self.names[:i] + tuple(p for p, _ in parts) + self.names[i + 1 :]
        sizes = self.sizes[:i] + tuple(n for _, n in parts) + self.sizes[i + 1 :]
        return RankGrid(names, sizes)

    # ---- helpers -------------------------------------------------------------------------
    def _index(self, axis: str) -> int:
        try:
            return self._positions[axis]
        except KeyError:
            raise ValueError(f"no axis {axis!r} in grid {'-'.join(self.names)}") from None

    def _strides(self) -> tuple[int, ...]:
        return self._stride_table


def _axis_list(axes: str | Sequence[str]) -> list[str]:
    return axes.split("-") if isinstance(axes, str) else list(axes)


@lru_cache(maxsize=1024)
def _cached_groups(sizes: tuple[int, ...], mask: tuple[bool, ...]) -> tuple[tuple[int, ...], ...]:
    strides, acc = [], 1
    for n in sizes:
        strides.append(acc)
        acc *= n
    inner = _offsets([n for n, m in zip(sizes, mask) if m], [s for s, m in zip(strides, mask) if m])
    outer = _offsets(
        [n for n, m in zip(sizes, mask) if not m], [s for s, m in zip(strides, mask) if not m]
    )
    return tuple(tuple(base + off for off in inner) for base in outer)


def _offsets(sizes: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Rank offsets of every point of a sub-grid, first axis fastest."""
    offs = [0]
    for n, st in zip(sizes, strides):
        offs = [o + k * st for k in range(n) for o in offs]
    return offs


# ---------------------------------------------------------------------------------------------
# The grids of a strategy.
# ---------------------------------------------------------------------------------------------
def expert_dp(world: int, etp: int, ep: int, pp: int) -> int:
    """Expert data-parallel degree ``world / (etp * ep * pp)`` (CP folds into it): the one
    place this formula lives."""
    return world // (etp * ep * pp)


@lru_cache(maxsize=1 << 16)
def training_grid(
    order: str,
    tp: int,
    cp: int,
    ep: int,
    etp: int,
    pp: int,
    world: int,
    ulysses: int = 1,
    dp_replicate: int = 1,
) -> RankGrid:
    """Megatron's dense grid (tp, cp, dp, pp; ep = 1) with its expert, sequence and FSDP views.

    ``world`` must be a multiple of ``tp*cp*pp`` and of ``etp*ep*pp`` (the rules check that
    first); memoised on the degrees, as the planner asks for thousands of candidates that share
    a few grids.
    """
    dp = world // (tp * cp * pp)
    dense = RankGrid.from_order(order, {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp})
    expert = RankGrid.from_order(
        order,
        {"tp": etp, "cp": 1, "ep": ep, "dp": expert_dp(world, etp, ep, pp), "pp": pp},
        rename={"tp": "etp", "dp": "edp"},
    )
    sequence = dense.split("cp", (("ulysses", ulysses), ("ring", cp // ulysses)))
    fsdp = dense.split("dp", (("dp_shard", dp // dp_replicate), ("dp_replicate", dp_replicate)))
    return RankGrid(
        dense.names, dense.sizes, (("expert", expert), ("sequence", sequence), ("fsdp", fsdp))
    )


@lru_cache(maxsize=1024)
def inference_grid(
    order: str, tp: int, ulysses: int, ring: int, pp: int, cfg: int, dp: int
) -> RankGrid:
    """xDiT's grid (tp, sp, pp, cfg, dp) with its sequence view (sp = Ulysses x ring)."""
    grid = RankGrid.from_order(
        order, {"tp": tp, "sp": ulysses * ring, "pp": pp, "cfg": cfg, "dp": dp}
    )
    return grid.register_view("sequence", grid.split("sp", (("ulysses", ulysses), ("ring", ring))))


def strategy_grid(s: Strategy, world: int) -> RankGrid:
    """The grid of ``s`` on ``world`` ranks (which must fit it: see ``rules.world_violations``)."""
    if s.is_inference:
        dp = world // (s.tp * s.cp * s.pp * s.cfg)
        return inference_grid(s.order, s.tp, s.ulysses, s.ring, s.pp, s.cfg, dp)
    return training_grid(s.order, s.tp, s.cp, s.ep, s.etp, s.pp, world, s.ulysses, s.dp_replicate)
