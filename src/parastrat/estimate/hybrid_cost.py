"""Compute time of one layer of a hybrid (Mamba) model: :func:`hybrid_layer_cost`.

A hybrid's layer is one pre-normed block (``megatron/core/ssm/mamba_block.py`` builds a
``MambaLayer``, or a ``TransformerLayer`` holding only attention, only an MLP or only an MoE),
so each kind is priced from its own matrices (:func:`~parastrat.estimate.flops.kind_matrices`,
through the same shape-aware GEMM model as a GPT layer's), its core (the attention kernel, or
the Mamba-2 SSD scan: :func:`scan_times`), and one block's memory-bound kernels (one norm, one
residual add: half of a GPT layer's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spec.hardware import Accelerator
from ..spec.workload import Mechanisms
from . import layer_cost as _layer
from . import mamba, moe_kernels
from .efficiency import KernelProfile, gemm_time, memory_time
from .efficiency import profile as kernel_profile
from .flops import kind_matrices
from .layers import kind_record

if TYPE_CHECKING:
    from ..spec.model import ModelSpec

#: Elements per token a single block's memory-bound kernels touch (forward): its norm (read
#: input, write output), the bias-dropout-add of the residual (read two, write one), i.e. half
#: of the ``10 h`` a GPT layer's two blocks touch
#: (:func:`parastrat.estimate.layer_cost.gpt_layer_cost`).
BLOCK_ELEMS = 5


def scan_times(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    tokens: float,
    seq_len: int,
    tp: int,
    cp: int,
    shape: bool = True,
) -> tuple[float, float]:
    """(forward s, backward s) of one Mamba-2 mixer's SSD scan and causal convolution for one
    micro-batch on a rank: the four batched products of
    :func:`~parastrat.estimate.mamba.scan_products` at the shape-aware GEMM rate (BF16, one
    batched kernel each, as the Triton SSD kernels run them), plus the memory-bound traffic of
    :func:`~parastrat.estimate.mamba.scan_bytes` at the achievable HBM bandwidth; the backward
    runs :data:`~parastrat.estimate.mamba.SCAN_BWD_RATIO` times the products."""
    prods = mamba.scan_products(model, tokens, seq_len, tp, cp)
    g = sum(
        gemm_time(accel, m, n, k, "bf16", max(1, round(b)), prof, shape=shape)
        for m, n, k, b in prods
    )
    b_fwd, b_bwd = mamba.scan_bytes(model, tokens, tp, cp)
    fwd = g + memory_time(accel, b_fwd, prof)
    bwd = mamba.SCAN_BWD_RATIO * g + memory_time(accel, b_bwd, prof)
    return fwd, bwd


def _core(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    kind: str,
    tokens: float,
    seq_len: int,
    tp_cp: tuple[int, int],
    flash_attention: bool,
    mech: Mechanisms,
    memo: dict[tuple, tuple[float, ...]],
) -> tuple[float, float]:
    """(forward s, backward s) of the layer's core: attention or the SSD scan (memoised)."""
    tp, cp = tp_cp
    if kind == "attention":
        key: tuple = ("attention", tokens, seq_len, tp, cp, flash_attention)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _layer._attention_times(
                model, accel, prof, tokens, seq_len, tp, cp, flash_attention, mech.shape
            )
        return hit[0], hit[1]
    if kind == "mamba":
        key = ("mamba", tokens, seq_len, tp, cp)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = scan_times(model, accel, prof, tokens, seq_len, tp, cp, mech.shape)
        return hit[0], hit[1]
    return 0.0, 0.0


def hybrid_layer_cost(
    model: ModelSpec,
    kernels: _layer.KernelSetup,
    kind: str,
    shape: _layer.LayerShape,
    matrices: dict[tuple, tuple[float, ...]] | None = None,
) -> _layer.LayerCost:
    """Compute time (:class:`~parastrat.estimate.layer_cost.LayerCost`) of a hybrid layer of
    ``kind`` ("mamba", "attention", "mlp", "moe") of ``shape``, run as ``kernels`` say."""
    accel, mech, flash_attention = kernels.accel, kernels.mech, kernels.flash_attention
    tokens, seq_len = shape.tokens, shape.seq_len
    tp, cp, sp, ep, etp = shape.tp, shape.cp, shape.sp, shape.ep, shape.etp
    prof = kernel_profile(accel)
    fp8, prec = _layer.gemm_precision(kernels)
    moe = kind == "moe"
    load, expert_m = _layer.routed_load(model, shape, mech, moe)
    memo = {} if matrices is None else matrices
    mats = kind_matrices(model, kind)
    g_fwd, g_bwd, cast, mlp_f, mlp_b, shared, fwd_of = _layer.gemm_sums(
        model, accel, prof, mats, tokens, (tp, sp, ep, etp), prec, mech, expert_m, memo
    )
    c_fwd, c_bwd = _core(
        model, accel, prof, kind, tokens, seq_len, (tp, cp), flash_attention, mech, memo
    )
    h = model.hidden_size
    h_local = h / tp if sp else h
    elems = BLOCK_ELEMS * h_local
    extra_f = extra_b = 0.0
    if kind == "attention":
        qk = 2 * (model.num_attention_heads + model.query_groups) * model.head_dim / tp
        elems += qk * (2 if model.qk_layernorm else 1)  # RoPE (and the QK norms)
    elif kind == "mlp":
        elems += (3 if model.gated_linear_unit else 2) * model.ffn_hidden_size / tp
        extra_f, extra_b = _layer._eager_act_bytes(model, False, tokens, tp, mech)
    elif moe and load is not None:
        extra_f, extra_b = moe_kernels.layer_bytes(model, tokens, tp, ep, load, mech, fp8)
    e_fwd, e_bwd = _layer.elementwise_times(
        kernels, prof, tokens * elems * _layer.ELEM_BYTES, (cast, prec), (extra_f,), (extra_b,)
    )
    rec = kind_record(model, kind, tp, ep, etp)
    sel = _selective(model, accel, prof, kind, tokens, (tp, etp), h_local, load, mech, fwd_of)
    if kind == "attention" and "core_attn" in mech.recompute_modules:
        sel += c_fwd
    scan = c_fwd + c_bwd if kind == "mamba" else 0.0
    return _layer.LayerCost(
        g_fwd, g_bwd, c_fwd, c_bwd, e_fwd, e_bwd, rec.dense_params, rec.expert_params,
        mlp_f, mlp_b, shared, sel, scan,
    )  # fmt: skip


def _selective(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    kind: str,
    tokens: float,
    tp_etp: tuple[int, int],
    h_norm: float,
    load: moe_kernels.ExpertLoad | None,
    mech: Mechanisms,
    fwd_of: dict[str, float],
) -> float:
    """Forward seconds selective recompute re-runs in one hybrid layer: the attention
    layers' and MLP / MoE layers' modules as a ``TransformerLayer`` recomputes them
    (:func:`parastrat.estimate.layer_cost._selective_fwd`); a ``MambaLayer`` recomputes nothing
    (it has no ``recompute_modules`` path)."""
    if kind == "mamba":
        return 0.0
    if kind == "attention":
        mla = "mla_up_proj" in mech.recompute_modules and model.multi_latent_attention
        return fwd_of.get("q_up", 0.0) + fwd_of.get("kv_up", 0.0) if mla else 0.0
    return _layer._selective_fwd(
        model, accel, prof, kind == "moe", tokens, tp_etp, h_norm, load, mech, fwd_of
    )
