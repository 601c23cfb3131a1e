"""Data-parallel sharding: Megatron FSDP in Bridge, FSDP2 / HSDP in torchtitan."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set
from ..errors import Violation
from .orders import MEGATRON_TP_PP_DP_ORDER
from .violations import err, warn

if TYPE_CHECKING:
    from ..strategy import Strategy

#: Megatron FSDP's sharding levels (``ddp.data_parallel_sharding_strategy``), least first:
#: DDP, ZeRO-1, -2, -3.  A Strategy stores ``"no_shard"`` as ``None`` (today's behaviour: DDP or
#: the distributed optimizer).
FSDP_LEVELS = ("no_shard", "optim", "optim_grads", "optim_grads_params")
#: Other names for the levels (ZeRO stages, FSDP wording), so an error can name the Megatron one.
FSDP_ALIASES = {
    "none": "no_shard",
    "ddp": "no_shard",
    "zero1": "optim",
    "zero-1": "optim",
    "zero2": "optim_grads",
    "zero-2": "optim_grads",
    "zero3": "optim_grads_params",
    "zero-3": "optim_grads_params",
    "full": "optim_grads_params",
    "fsdp": "optim_grads_params",
    "full_shard": "optim_grads_params",
}


def fsdp_value_violations(fsdp: Any) -> list[Violation]:
    """Is ``fsdp`` one of Megatron's sharding levels (or None)?"""
    if fsdp is None or (isinstance(fsdp, str) and fsdp in FSDP_LEVELS):
        return []
    alias = FSDP_ALIASES.get(fsdp.strip().lower()) if isinstance(fsdp, str) else None
    return [
        err(
            "fsdp-unknown",
            f"fsdp={fsdp!r} is not a Megatron FSDP sharding level",
            f"use fsdp={alias!r}"
            if alias
            else "use fsdp=None (no sharding) or one of "
            + ", ".join(repr(x) for x in FSDP_LEVELS[1:]),
        )
    ]


def fsdp_structural_violations(s: Strategy) -> list[Violation]:
    """Sharding rules that need only the strategy: inference has none, and Megatron FSDP
    refuses Bridge's ``use_tp_pp_dp_mapping`` order (``ConfigContainer.validate``)."""
    out: list[Violation] = []
    sharded = s.fsdp is not None or s.dp_shard is not None or s.dp_replicate > 1
    if not sharded:
        return out
    if s.is_inference:
        out.append(
            err(
                "fsdp-inference",
                "dp_shard/dp_replicate/fsdp describe training data parallelism; the inference "
                f"order {s.order!r} replicates the model over dp",
                "drop dp_shard, dp_replicate and fsdp for inference",
            )
        )
    if s.fsdp is not None and s.order == MEGATRON_TP_PP_DP_ORDER:  # Bridge refuses the pair
        out.append(
            err(
                "fsdp-order",
                f"fsdp={s.fsdp!r} with order {s.order!r}: Megatron Bridge refuses "
                "use_tp_pp_dp_mapping with Megatron FSDP",
                "use the default order 'tp-cp-ep-dp-pp' with FSDP",
            )
        )
    return out


def fsdp_world_violations(s: Strategy, dp: int, edp: int) -> list[Violation]:
    """dp_shard x dp_replicate against dp (torchtitan's ParallelDims: their product times
    cp*tp*pp is the world) and dp_replicate against the expert data-parallel group (Megatron
    builds one optimizer instance per replica: ``num_distributed_optimizer_instances`` must
    divide dp*cp and the expert dp)."""
    out: list[Violation] = []
    r = s.dp_replicate
    if s.dp_shard is not None and s.dp_shard * r != dp:
        out.append(
            err(
                "dp-shard-world",
                f"dp_shard={s.dp_shard} x dp_replicate={r} = {s.dp_shard * r} but the world "
                f"leaves dp={dp}",
                f"use dp_shard={dp // r} (or -1, the rest of dp)"
                if dp % r == 0
                else f"use dp_replicate in {fmt_set(divisors(dp))} and dp_shard=-1",
            )
        )
    elif dp % r:
        out.append(
            err(
                "dp-replicate-world",
                f"dp_replicate={r} does not divide dp={dp}",
                f"use dp_replicate in {fmt_set(divisors(dp))}",
            )
        )
    if r > 1 and dp % r == 0 and edp % r:
        out.append(
            err(
                "dp-replicate-expert",
                f"dp_replicate={r} does not divide the expert data-parallel size {edp} "
                "(Megatron's num_distributed_optimizer_instances must divide it)",
                f"use dp_replicate in {fmt_set(divisors(math.gcd(dp, edp)))}",
            )
        )
    return out


def fsdp_soft_violations(s: Strategy, dp: int) -> list[Violation]:
    """FSDP that has nothing to shard over (a shard group of one rank)."""
    shard = dp // s.dp_replicate * s.cp
    if s.fsdp is None or shard > 1:
        return []
    return [
        warn(
            "fsdp-nothing-to-shard",
            f"fsdp={s.fsdp!r} but the shard group dp_shard*cp = {shard} rank: nothing is "
            "sharded, only gathered",
            "use fsdp=None, or give the shard axis more ranks (dp_shard > 1)",
        )
    ]
