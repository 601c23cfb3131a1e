"""The rules of CUDA-graph scopes, written once (Megatron Core's own checks).

Megatron Core's ``TransformerConfig.__post_init__`` (megatron-core 0.16.1,
``megatron/core/transformer/transformer_config.py``, the ``cuda_graph_impl != "none"`` block)
refuses, for the scopes ``cuda_graph_scope`` names (parastrat's ``Switches.cuda_graphs``; the
whole iteration, ``full_iteration``, runs with ``cuda_graph_impl="local"``, every other scope
with ``"transformer_engine"``):

* full recompute with any scope but the whole iteration ("full recompute is only supported
  with full iteration CUDA graph.");
* ``moe`` together with ``moe_router``; ``moe_preprocess`` without ``moe_router``;
* ``moe`` or ``moe_router`` on a dense model ("moe cuda graph is only supported for MoE.");
  ``mlp`` on an MoE model whose ``moe_layer_freq`` marks no dense layer, every layer MoE or
  a hybrid (1 there) ("mlp cuda graph is only supported for dense layers");
* ``moe`` without drop-padding (``moe_expert_capacity_factor`` and
  ``moe_pad_expert_input_to_capacity``; parastrat prices dropless MoE or a capacity factor
  without padding, so ``moe`` always needs the capacity factor);
* ``moe_preprocess`` with the ``alltoall`` dispatcher and a capacity factor or FP8 routing-map
  padding ("DtoH copies and synchronizations in the preprocess step");
* with selective recompute of the ``moe`` module, a Transformer Engine ``moe_router`` graph.

Not checked here: the dropout rules of graphed recomputation (they read the model's dropout,
zero in Megatron Bridge's pretraining recipes).  Each function returns
:class:`~parastrat.errors.Violation` s (never raises), as :mod:`parastrat.rules` does; the ids
are documented in ``docs/troubleshooting.md``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..errors import Violation
from .violations import err

#: The scope captured with ``cuda_graph_impl="local"`` (every other one: Transformer Engine).
WHOLE_ITERATION = "full_iteration"
#: Scopes Megatron Core 0.16 refuses beside combined 1F1B (``moe_a2a_overlap``): the whole
#: iteration (``cuda_graph_impl="local"``) and Transformer Engine graphs of the ``moe`` or
#: ``mlp`` block (``TransformerConfig.__post_init__``: "CUDA graph scope on moe and mlp is not
#: supported with overlap_moe_expert_parallel_comm", asserted for any implementation but
#: ``transformer_engine``).  The adapters refuse the pair before writing a config; the step
#: model prices it (later Megatron Core releases run it).
GRAPHS_REFUSED_WITH_A2A = frozenset({WHOLE_ITERATION, "moe", "mlp"})


@dataclass(frozen=True)
class GraphRun:
    """What the rules read of a run: the model's MoE shape, the recompute priced and the MoE
    routing options (parastrat's ``Mechanisms`` and ``Switches.moe_dispatcher``)."""

    moe: bool
    all_moe: bool
    recompute: str
    recompute_modules: Collection[str] = ("core_attn",)
    dispatcher: str = "alltoall"
    capacity_factor: float | None = None
    router_padding: bool = False


def graph_violations(scopes: Collection[str], run: GraphRun) -> list[Violation]:
    """What Megatron Core refuses about capturing ``scopes`` (empty: eager) in ``run``."""
    if not scopes:
        return []
    return _recompute_violations(set(scopes), run) + _moe_violations(set(scopes), run)


def _recompute_violations(scopes: set[str], run: GraphRun) -> list[Violation]:
    """Full recompute needs the whole iteration; a graphed router refuses recomputed MoE."""
    out = []
    if run.recompute == "full" and scopes != {WHOLE_ITERATION}:
        out.append(
            err(
                "cuda-graph-full-recompute",
                f"CUDA graphs of {_names(scopes)} with full recompute: Megatron Core supports "
                "full recompute only with the whole-iteration graph",
                "use recompute='selective' or 'none' with these scopes, or "
                "cuda_graphs='full_iteration'",
            )
        )
    te = WHOLE_ITERATION not in scopes
    recomputed_moe = run.recompute == "selective" and "moe" in run.recompute_modules
    if recomputed_moe and te and "moe_router" in scopes:
        out.append(
            err(
                "cuda-graph-moe-recompute",
                "a Transformer Engine moe_router CUDA graph with the 'moe' module recomputed: "
                "Megatron Core refuses a recompute module that covers a graphed scope",
                "drop 'moe' from the recompute modules, or moe_router from cuda_graphs",
            )
        )
    return out


def _moe_violations(scopes: set[str], run: GraphRun) -> list[Violation]:
    """The MoE scopes: which model, which pairs, which routing they need."""
    out = []
    moe_scopes = scopes & {"moe", "moe_router", "moe_preprocess"}
    if moe_scopes and not run.moe:
        out.append(_rule("cuda-graph-moe-dense", f"{_names(moe_scopes)} on a dense model"))
    if "mlp" in scopes and run.all_moe:
        out.append(
            _rule(
                "cuda-graph-mlp-moe",
                "mlp on an MoE model whose moe_layer_freq marks no dense layer (every layer "
                "MoE, or a hybrid, whose pattern places its layers)",
            )
        )
    if {"moe", "moe_router"} <= scopes:
        out.append(_rule("cuda-graph-moe-router", "moe together with moe_router"))
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        out.append(_rule("cuda-graph-preprocess", "moe_preprocess without moe_router"))
    if run.moe and "moe" in scopes and run.capacity_factor is None:
        out.append(
            _rule("cuda-graph-moe-dropless", "moe with dropless routing (no capacity factor)")
        )
    syncs = run.capacity_factor is not None or run.router_padding
    if run.moe and "moe_preprocess" in scopes and run.dispatcher == "alltoall" and syncs:
        out.append(
            _rule(
                "cuda-graph-preprocess-sync",
                "moe_preprocess with the alltoall dispatcher and a capacity factor or FP8 "
                "routing-map padding (host copies in the preprocessing)",
            )
        )
    return out


#: The fix of each MoE-scope rule.
_FIXES = {
    "cuda-graph-moe-dense": "capture attn and mlp on a dense model",
    "cuda-graph-mlp-moe": "capture attn, moe_router and moe_preprocess on an MoE model",
    "cuda-graph-moe-router": "capture either moe (the whole block) or moe_router, not both",
    "cuda-graph-preprocess": "add moe_router to cuda_graphs, or drop moe_preprocess",
    "cuda-graph-moe-dropless": "capture moe_router and moe_preprocess instead of moe, or set "
    "a capacity factor (token drop) with padding",
    "cuda-graph-preprocess-sync": "drop moe_preprocess from cuda_graphs, or use the flex "
    "dispatcher",
}


def _rule(rule_id: str, what: str) -> Violation:
    """One MoE-scope violation: ``what`` Megatron Core refuses, and the rule's fix."""
    return err(rule_id, f"CUDA graph scope {what}: Megatron Core refuses it", _FIXES[rule_id])


def _names(scopes: Collection[str]) -> str:
    """``"attn, mlp"``: the scopes, sorted."""
    return ", ".join(sorted(scopes))
