"""The world size: the degrees against the number of devices, and the pipeline groups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import MAX_DEVICES, divisors, fmt_set
from ..errors import Violation
from ..grid import expert_dp, training_grid
from .fsdp import fsdp_world_violations
from .violations import err

if TYPE_CHECKING:
    from ..strategy import Strategy


def _fitting_worlds(s: Strategy, world: int) -> str:
    """``use W devices``: the world sizes nearest ``world`` that fit, within the device bound
    (:data:`~parastrat.checks.MAX_DEVICES`); smaller degrees when none does."""
    step = s.world_step
    lower = (world // step) * step
    options = [w for w in (lower, lower + step) if 0 < w <= MAX_DEVICES]
    if not options:  # no cluster parastrat takes is that large
        return f"use smaller degrees (no world of at most {MAX_DEVICES:,} devices fits)"
    return "use " + " or ".join(str(w) for w in options) + " devices"


def world_violations(s: Strategy, world: int) -> list[Violation]:
    """Does the world size fit the grids (dense and expert, or the inference grid)?"""
    if s.is_inference:
        out = _inference_world_violations(s, world)
    else:
        out = _training_world_violations(s, world)
    # a dp that dp_shard x dp_replicate set is the dp-shard-world refusal already, once
    sharded = any(v.rule == "dp-shard-world" for v in out)
    if s.dp is not None and s.world_size != world and not sharded:
        out.append(
            err(
                "dp-world",
                f"dp={s.dp} gives {s.world_size} ranks, not the world size {world}",
                f"drop dp (it follows from the world size) or use {s.world_size} devices",
            )
        )
    return out


def _inference_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world against the xDiT grid's model-parallel unit."""
    unit = s.tp * s.ulysses * s.ring * s.cfg * s.pp
    if world % unit == 0:
        return []
    return [
        err(
            "world-inference",
            f"world size {world} is not a multiple of tp*ulysses*ring*cfg*pp = "
            f"{s.tp}*{s.ulysses}*{s.ring}*{s.cfg}*{s.pp} = {unit}",
            f"{_fitting_worlds(s, world)}, or degrees whose product divides {world}",
        )
    ]


def _training_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world against the dense and expert grids; when both fit, the sharding degrees and
    the pipeline groups of the two grids."""
    out = _grid_world_violations(s, world)
    if not out:
        dp, edp = world // (s.tp * s.cp * s.pp), expert_dp(world, s.etp, s.ep, s.pp)
        out = fsdp_world_violations(s, dp, edp)
    if not out:
        out = _pp_groups_violations(s, world)
    return out


def _grid_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world a multiple of tp*cp*pp (dense grid) and of etp*ep*pp (expert grid)."""
    out: list[Violation] = []
    dense = s.tp * s.cp * s.pp
    expert = s.etp * s.ep * s.pp
    if world % dense:
        alt = ""
        if world % (s.tp * s.cp) == 0:
            alt = (
                f", or pp in {fmt_set(divisors(world // (s.tp * s.cp)))} with tp*cp = {s.tp * s.cp}"
            )
        out.append(
            err(
                "world-dense",
                f"world size {world} is not a multiple of tp*cp*pp = {s.tp}*{s.cp}*{s.pp} = "
                f"{dense}",
                f"{_fitting_worlds(s, world)} (multiples of pp*lcm(tp*cp, ep*etp) "
                f"= {s.min_world_size}){alt}",
            )
        )
    if world % expert and expert != dense:
        out.append(
            err(
                "world-expert",
                f"world size {world} is not a multiple of etp*ep*pp = {s.etp}*{s.ep}*{s.pp} = "
                f"{expert} (the expert grid)",
                f"{_fitting_worlds(s, world)}, or ep*etp*pp dividing {world}",
            )
        )
    return out


def _pp_groups_violations(s: Strategy, world: int) -> list[Violation]:
    """With pp not last in the order, the dense and expert grids must give the same pipeline
    groups (with pp last both give it stride world/pp: nothing to compare)."""
    if s.pp <= 1 or s.order.endswith("-pp"):
        return []
    grid = training_grid(s.order, s.tp, s.cp, s.ep, s.etp, s.pp, world, s.ulysses, s.dp_replicate)
    dp, edp = world // (s.tp * s.cp * s.pp), expert_dp(world, s.etp, s.ep, s.pp)
    # megatron-core 0.16 initialize_model_parallel asserts equal DP sizes whenever pp is not
    # last ("the data parallel size of the attention and moe layers must be the same"), which
    # equal pipeline strides alone do not imply
    if grid.stride("pp") == grid.view("expert").stride("pp") and dp == edp:
        return []
    return [
        err(
            "pp-groups-differ",
            f"with order {s.order!r} (pp not last) Megatron Core needs the dense and expert "
            f"grids to agree (same data-parallel size, same pipeline ranks): dp={dp} but "
            f"expert dp={edp} (tp*cp={s.tp * s.cp}, ep*etp={s.ep * s.etp})",
            "use order 'tp-cp-ep-dp-pp' (pp last), or make tp*cp == ep*etp",
        )
    ]
