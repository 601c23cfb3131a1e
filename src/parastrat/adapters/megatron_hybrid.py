"""What Megatron Core 0.16.1 refuses, or silently changes, when it builds a hybrid (Mamba)
model: the start-up second opinion :func:`parastrat.adapters.megatron.apply` runs on a copy of
a config carrying ``hybrid_override_pattern`` (Megatron Bridge's ``MambaModelProvider``).

A ``MambaModel`` is checked when it is built, not when its config is: ``finalize()`` passes a
config whose model would stop at the first forward's construction.  What runs here is Megatron
Core's own code where it can run without a GPU, and a transcription of its assertions where it
cannot:

* ``allocate_layers`` (``megatron/core/ssm/mamba_hybrid_layer_allocation.py``): the pattern
  against ``num_layers`` (real code);
* ``MambaStack._select_layers_for_pipeline_parallel`` (``ssm/mamba_block.py``): for every
  pipeline rank, which layers that stage builds (real code, on a stand-in process group); it
  asserts no virtual pipeline, and its slices must cover every layer once (an uneven
  ``num_layers // pp`` split drops layers silently); it places layers by the even split or the
  first/last stage counts only, so ``pipeline_model_parallel_layout`` and
  ``account_for_*_in_pipeline_split`` would be ignored by the Mamba stack;
* ``MambaContextParallel.__init__`` (``ssm/mamba_context_parallel.py``): the CP split of the
  heads and groups per TP rank (real code, on a stand-in process group);
* ``MambaMixer.__init__`` (``ssm/mamba_mixer.py``): heads and groups divisible by TP, heads by
  groups, and under FP8 an input projection width that is a multiple of 16 (transcribed: the
  mixer cannot be constructed without the ``mamba_ssm`` package, which needs CUDA).

Each refusal is a :class:`HybridBuildError` carrying Megatron's own message and a fix with the
degrees Megatron builds this model with, which ``apply`` reports as rule ``megatron-config``
and leaves the config untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from .._deps import require
from ..spec.model import mamba_heads, mamba_in_proj_width


@dataclass(frozen=True)
class _Group:
    """A stand-in process group: the rank and size Megatron's code asks for."""

    rank_: int
    size_: int

    def rank(self) -> int:
        return self.rank_

    def size(self) -> int:
        return self.size_


class HybridBuildError(ValueError):
    """Megatron Core refuses to build this hybrid; ``hint`` is a fix that it builds."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def pattern_of(model: Any) -> str | None:
    """The hybrid pattern of a Megatron config (None: not a hybrid)."""
    pattern = getattr(model, "hybrid_override_pattern", None)
    return pattern if isinstance(pattern, str) and pattern else None


def hybrid_build_check(model: Any) -> None:
    """Raise what Megatron Core raises while building the hybrid ``model`` describes (module
    docstring); nothing for a config without a hybrid pattern."""
    pattern = pattern_of(model)
    if pattern is None:
        return
    head_dim = getattr(model, "mamba_head_dim", None)
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise HybridBuildError(
            f"Megatron Core's MambaModel: mamba_head_dim={head_dim!r} must be a whole number >= 1",
            "set mamba_head_dim to the mixer's head dimension (Nemotron-H: 64)",
        )
    try:
        _build(model, pattern)
    except (AssertionError, ValueError) as exc:
        raise HybridBuildError(f"Megatron Core's MambaModel: {exc}", _fix(model)) from None


def _fix(model: Any) -> str:
    """The degrees Megatron Core builds this hybrid with."""
    heads = mamba_heads(model.hidden_size, model.mamba_head_dim, model.mamba_num_heads)
    gcd = math.gcd(heads, model.mamba_num_groups)
    tps = [t for t in range(1, gcd + 1) if gcd % t == 0]
    layers = model.num_layers
    pps = [p for p in range(1, min(layers, 64) + 1) if layers % p == 0]
    return (
        f"Megatron builds this hybrid with tp in {{{', '.join(map(str, tps))}}} (dividing the "
        f"{heads} Mamba heads and {model.mamba_num_groups} groups), vpp=1, pp in "
        f"{{{', '.join(map(str, pps))}}} (or num_layers_in_first/last_pipeline_stage), and no "
        "pipeline layout or account_for_*_in_pipeline_split"
    )


def _build(model: Any, pattern: str) -> None:
    alloc = require(
        "megatron.core.ssm.mamba_hybrid_layer_allocation", "megatron", "hybrid layer allocation"
    )
    kinds = alloc.allocate_layers(
        model.num_layers,
        getattr(model, "hybrid_attention_ratio", 0.0) or 0.0,
        getattr(model, "hybrid_mlp_ratio", 0.0) or 0.0,
        pattern,
    )
    _stage_split(model, kinds)
    if "M" in pattern:
        _mixer(model)


def _stage_split(model: Any, kinds: list) -> None:
    """``MambaStack``'s layer placement on every pipeline stage must build each layer once."""
    block = require("megatron.core.ssm.mamba_block", "megatron", "the Mamba stack")
    pp = int(getattr(model, "pipeline_model_parallel_size", 1) or 1)
    if pp > 1 and getattr(model, "pipeline_model_parallel_layout", None) is not None:
        raise ValueError(
            "MambaStack places a hybrid's layers by num_layers // pp (or the first/last stage "
            "counts) and ignores pipeline_model_parallel_layout"
        )
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if pp > 1 and getattr(model, name, False):
            raise ValueError(f"MambaStack ignores {name}: it slices num_layers // pp per stage")
    built: list[int] = []
    for rank in range(pp):
        stack = SimpleNamespace(config=model, pp_group=_Group(rank, pp))
        offset, chosen = block.MambaStack._select_layers_for_pipeline_parallel(stack, kinds)
        built += range(offset, offset + len(chosen))
    if sorted(built) != list(range(len(kinds))):
        missing = sorted(set(range(len(kinds))) - set(built))
        raise ValueError(
            f"MambaStack's split of {len(kinds)} layers over pp={pp} stages builds "
            f"{len(built)} layers (missing {missing[:8]}{'...' if len(missing) > 8 else ''}): "
            "num_layers // pp per stage drops the remainder; set "
            "num_layers_in_first/last_pipeline_stage or another pp"
        )


def _mixer(model: Any) -> None:
    """``MambaMixer.__init__``'s assertions (transcribed), then ``MambaContextParallel``'s
    (run)."""
    hidden, head_dim = model.hidden_size, model.mamba_head_dim
    if not model.mamba_num_heads:  # d_inner = expand * d_model, expand 2 as Megatron builds it
        assert (2 * hidden) % head_dim == 0, "d_inner must be evenly divisible by headdim"
    heads = mamba_heads(hidden, head_dim, model.mamba_num_heads)
    groups, state = model.mamba_num_groups, model.mamba_state_dim
    tp = int(getattr(model, "tensor_model_parallel_size", 1) or 1)
    if getattr(model, "fp8", None):
        width = mamba_in_proj_width(heads, head_dim, groups, state)
        assert width % 16 == 0, (
            "For FP8, the innermost dimension of the Mamba layer input projection output "
            f"tensor must be a multiple of 16 (it is {width})."
        )
    assert heads % tp == 0, f"nheads must be evenly divisble by tp_size ({heads} heads, tp={tp})"
    assert groups % tp == 0, (
        f"ngroups must be evenly divisible by tp_size ({groups} groups, tp={tp})"
    )
    assert heads % groups == 0, "nheads must be evenly divisible by ngroups"
    cp = int(getattr(model, "context_parallel_size", 1) or 1)
    if cp > 1:
        mcp = require("megatron.core.ssm.mamba_context_parallel", "megatron", "Mamba CP")
        mcp.MambaContextParallel(
            cp_group=_Group(0, cp),
            d_inner_local_tp=heads * head_dim // tp,
            nheads_local_tp=heads // tp,
            ngroups_local_tp=groups // tp,
            d_state=state,
            conv1d_cp1=None,
            dt_bias_cp1=None,
            A_log_cp1=None,
            D_cp1=None,
            D_has_hdim=False,
        )
