"""Every rule a strategy must satisfy, written once (``shared/reference/constraints.md``).

Each function returns a list of :class:`~parastrat.errors.Violation` — never raises — so the
caller can report *all* broken rules together.  Hard rules have severity "error" (the frameworks
would refuse or crash); soft rules are "warning" (heuristics the planner may break, and says
why).  Rule ids are stable and documented in ``docs/troubleshooting.md``.

``model`` is duck-typed: anything with the Megatron-named attributes ``num_attention_heads``,
``num_query_groups`` (None means MHA), ``num_layers`` and ``num_moe_experts`` works (a
:class:`~parastrat.spec.model.ModelSpec`, a DiT spec, a view of a Megatron config).

One module per subject:

* :mod:`.structure` — the strategy alone (orders, dependent degrees, inference vs training);
* :mod:`.fsdp` — data-parallel sharding levels and their worlds;
* :mod:`.world` — the degrees against the device count;
* :mod:`.layers` — layers over pipeline stages;
* :mod:`.model` — heads, query groups, experts, ring attention variants;
* :mod:`.hybrid` — Mamba hybrids;
* :mod:`.batch` — sequence and batch;
* :mod:`.soft` — the heuristics (warnings);
* :mod:`.check` — all of them together (:func:`check`), with :mod:`.hints`' verified fixes;
* :mod:`.orders` — the rank orders' axis names and the frameworks' orders;
* :mod:`.offload` and :mod:`.graphs` — CPU activation offloading and CUDA-graph scopes,
  which the step model and the Megatron adapter check against a run's switches.
"""

from __future__ import annotations

from .batch import batch_violations, chunk_violations, interleave_fits, sequence_violations
from .check import check, world_fixes
from .fsdp import (
    FSDP_ALIASES,
    FSDP_LEVELS,
    fsdp_soft_violations,
    fsdp_structural_violations,
    fsdp_value_violations,
    fsdp_world_violations,
)
from .hints import SPLIT_RULES, verified_split_hints
from .hybrid import HYBRID_RECOMPUTE, hybrid_violations, hybrid_workload_violations
from .layers import clear_caches, layer_split_violations, layout_conflict_violations
from .model import model_violations, resolve_model, ring_attention_violations
from .orders import (
    INFERENCE_ORDER_NAMES,
    MEGATRON_ORDER,
    MEGATRON_TP_PP_DP_ORDER,
    TRAINING_ORDER_NAMES,
    XDIT_ORDER,
)
from .soft import soft_violations
from .structure import structural_violations
from .world import world_violations

__all__ = [
    "FSDP_ALIASES",
    "FSDP_LEVELS",
    "HYBRID_RECOMPUTE",
    "INFERENCE_ORDER_NAMES",
    "MEGATRON_ORDER",
    "MEGATRON_TP_PP_DP_ORDER",
    "SPLIT_RULES",
    "TRAINING_ORDER_NAMES",
    "XDIT_ORDER",
    "batch_violations",
    "check",
    "chunk_violations",
    "clear_caches",
    "fsdp_soft_violations",
    "fsdp_structural_violations",
    "fsdp_value_violations",
    "fsdp_world_violations",
    "hybrid_violations",
    "hybrid_workload_violations",
    "interleave_fits",
    "layer_split_violations",
    "layout_conflict_violations",
    "model_violations",
    "resolve_model",
    "ring_attention_violations",
    "sequence_violations",
    "soft_violations",
    "structural_violations",
    "verified_split_hints",
    "world_fixes",
    "world_violations",
]
