"""Hybrid (Mamba) models: what Megatron Core 0.16.1's MambaModel asserts or ignores."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set
from ..errors import Violation
from .violations import err

if TYPE_CHECKING:
    from ..strategy import Strategy


def hybrid_violations(s: Strategy, model: Any) -> list[Violation]:
    """A hybrid model's Mamba mixer and stack against the degrees: ``MambaMixer.__init__``
    asserts ``nheads % tp == 0`` and ``ngroups % tp == 0`` (``megatron/core/ssm/
    mamba_mixer.py``); ``MambaContextParallel.__init__`` asserts the CP splits of heads and
    groups (``mamba_context_parallel.py``); ``MambaStack._select_layers_for_pipeline_parallel``
    asserts no virtual pipeline and places layers by the even split or the first/last stage
    counts alone (``mamba_block.py``), so a pipeline layout or ``account_for_*`` would be
    ignored by the Mamba stack while its attention layers honour them; ``MambaModel`` builds no
    multi-token prediction."""
    name = getattr(model, "name", "the model")
    out = _mamba_tp_cp_violations(s, model, name)
    if s.vpp > 1:
        out.append(
            err(
                "hybrid-vpp",
                f"vpp={s.vpp} on hybrid {name}: Megatron Core's MambaStack asserts "
                "'does not currently support virtual/interleaved pipeline parallelism'",
                "use vpp=1",
            )
        )
    if s.pipeline_layout is not None:
        out.append(
            err(
                "hybrid-pipeline-layout",
                f"pipeline_layout on hybrid {name}: MambaStack splits its pattern by the even "
                "split or first/last stage counts only and ignores the layout",
                "drop pipeline_layout; use first_stage_layers/last_stage_layers",
            )
        )
    if s.account_for_embedding or s.account_for_loss:
        out.append(
            err(
                "hybrid-pipeline-accounting",
                f"account_for_embedding/loss_in_pipeline_split on hybrid {name}: MambaStack "
                "ignores them (it slices num_layers // pp layers per stage)",
                "drop account_for_embedding/loss; use first_stage_layers/last_stage_layers",
            )
        )
    if getattr(model, "mtp_num_layers", 0):
        out.append(
            err(
                "hybrid-mtp",
                f"mtp_num_layers={model.mtp_num_layers} on hybrid {name}: Megatron Core "
                "0.16.1's MambaModel builds no multi-token prediction block",
                "set mtp_num_layers=0",
            )
        )
    return out


def _mamba_tp_cp_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """``MambaMixer``'s TP asserts and ``MambaContextParallel``'s CP asserts."""
    if "M" not in (getattr(model, "hybrid_override_pattern", None) or ""):
        return []
    heads, groups, out = model.mamba_heads, model.mamba_num_groups, []
    if heads % s.tp:
        out.append(
            err(
                "mamba-heads-tp",
                f"tp={s.tp} does not divide the {heads} Mamba heads of {name} (MambaMixer "
                "asserts 'nheads must be evenly divisble by tp_size')",
                f"use tp in {fmt_set(divisors(math.gcd(heads, groups)))}",
            )
        )
    if groups % s.tp:
        out.append(
            err(
                "mamba-groups-tp",
                f"tp={s.tp} does not divide the {groups} Mamba groups of {name} (MambaMixer "
                "asserts 'ngroups must be evenly divisible by tp_size')",
                f"use tp in {fmt_set(divisors(math.gcd(heads, groups)))}",
            )
        )
    if out or s.cp == 1:
        return out
    local_heads, local_groups = heads // s.tp, groups // s.tp
    ok = [
        c
        for c in divisors(local_heads)
        if local_groups % c == 0 or (local_groups < c and c % local_groups == 0)
    ]
    if local_heads % s.cp:
        why = f"the {local_heads} Mamba heads per TP rank ('nheads must be evenly divisible by "
        why += "tp_size * cp_size')"
    elif local_groups >= s.cp and local_groups % s.cp:
        why = f"the {local_groups} Mamba groups per TP rank ('ngroups must be evenly divisible "
        why += "by tp_size * cp_size')"
    elif local_groups < s.cp and s.cp % local_groups:
        why = f"a multiple of the {local_groups} Mamba groups per TP rank ('cp_size must be "
        why += "evenly divisible by ngroups/tp_size')"
    else:
        return out
    out.append(
        err(
            "mamba-cp",
            f"cp={s.cp} on {name} is not {why}: MambaContextParallel asserts it",
            f"use cp in {fmt_set(ok)}",
        )
    )
    return out


#: Recompute modes ``MambaStack`` runs: it has no checkpointed forward (``mamba_block.py``
#: has no ``recompute_granularity`` path), so "full" would silently recompute nothing.
HYBRID_RECOMPUTE = ("none", "selective")


def hybrid_workload_violations(model: Any, precision: str, recompute: str) -> list[Violation]:
    """A hybrid model's workload against Megatron Core: FP8 / MXFP8 (``config.fp8``) need the
    mixer's in_proj output width ``2 d_inner + 2 G N + H`` to be a multiple of 16
    (``MambaMixer`` asserts it); full recompute is not implemented by ``MambaStack``."""
    if not getattr(model, "is_hybrid", False):
        return []
    name, out = getattr(model, "name", "the model"), []
    width = model.mamba_in_proj_width
    if precision in ("fp8", "mxfp8") and "M" in model.hybrid_override_pattern and width % 16:
        out.append(
            err(
                "mamba-fp8-in-proj",
                f"precision={precision} on {name}: the Mamba in_proj output width {width} "
                "(2 d_inner + 2 groups x state + heads) is not a multiple of 16 (MambaMixer "
                "asserts it under FP8)",
                "use precision='bf16'",
            )
        )
    if recompute not in HYBRID_RECOMPUTE:
        out.append(
            err(
                "hybrid-full-recompute",
                f"recompute={recompute!r} on hybrid {name}: Megatron Core's MambaStack has no "
                "full-layer recompute (it would run without recomputing anything)",
                "use recompute='selective' or 'none'",
            )
        )
    return out
