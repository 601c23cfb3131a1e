"""Step-time model: how long one training step of a strategy takes on a cluster, and why.

``estimate_step(model, strategy, cluster, seq_len=..., global_batch_size=...)`` prices one
optimizer step of Megatron-style training:

1. **Compute** per layer and micro-batch from the matrices the model has
   (:mod:`parastrat.estimate.flops`): every GEMM at the achievable rate its TP/EP-split shape
   allows (:mod:`parastrat.estimate.efficiency`), fused attention at its own rate (always BF16),
   and the memory-bound kernels (norms, activations, residuals, RoPE, MoE permutation, FP8
   casts, cross-entropy) at the achievable HBM bandwidth.  Backward = dgrad + wgrad GEMMs and
   2.5x the attention forward (FlashAttention's backward recomputes the scores).
2. **Communication** per layer (:mod:`parastrat.estimate.comm`), priced only by
   :meth:`parastrat.Cluster.collective_time`, and the part of it that stays on the critical
   path: TP with SP overlaps its GEMMs (Megatron's ``tp_comm_overlap``) inside one scale-up
   domain, CP ring exchanges overlap block attention, EP all-to-all and Ulysses all-to-all are
   exposed, DP reduce-scatter / all-gather overlap the last backward / first forward
   micro-batch except the last bucket.  Overlapped communication still slows the concurrent
   kernels by :data:`OVERLAP_SLOWDOWN` of its duration (it occupies SMs and HBM bandwidth).
3. **Pipeline**: the slowest stage sets the pace; the bubble is ``(p - 1) / v`` of its
   micro-batch time (``(p-1)/(v m)`` of the ideal step), plus point-to-point transfers on the
   fill/drain path (and every transfer without interleaving, whose 1F1B exchanges block).
4. **Optimizer step**: Adam over the local shard of the distributed optimizer, memory-bound.

All constants are physical (efficiencies, bandwidths, latencies per accelerator and link) and
documented in ``docs/step-model.md``; none is fitted to a model or a published row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import StrategyError, UsageError
from ..spec.hardware import Accelerator, canonical_precision
from ..spec.model import ModelSpec
from . import comm, kernel_model, moe_kernels  # kernels: shape model, expert load, MoE kernels
from . import fp8 as fp8_overheads  # kernels: FP8 recipe overheads
from .efficiency import KernelProfile, attention_time, gemm_time, host_op_time, memory_time
from .efficiency import profile as kernel_profile
from .flops import (
    Matrix,
    attention_matrices,
    is_moe_layer,
    logits_matrix,
    mean_attention_core_flops_per_token,
    mlp_matrices,
    model_flops_per_token,
    normalize_recompute,
)

if TYPE_CHECKING:
    from ..spec.cluster import Cluster
    from ..strategy import Strategy

#: Rate of a grouped expert GEMM (TE GroupedLinear / CUTLASS grouped kernels) relative to one
#: dense GEMM of the same per-group shape: per-group tile scheduling and prologues, and token
#: counts per expert that differ from group to group (the dense-equivalent efficiency already
#: counts partial tiles and waves).  NVIDIA's grouped-GEMM figures put it 10-20 % below dense.
GROUPED_GEMM_EFF = 0.85
#: Fraction of an overlapped collective's duration by which it slows the kernels it overlaps
#: (NCCL / userbuffer kernels occupy ~16-24 of 132 SMs and share HBM bandwidth).
OVERLAP_SLOWDOWN = 0.15
#: FlashAttention backward FLOPs relative to its forward (5 GEMM-like products vs 2).
ATTN_BWD_RATIO = 2.5
#: HBM bytes per parameter of one Adam step on the local shard: read fp32 master, grad, m, v
#: (16), write master, m, v (12), write the BF16 copy (2), plus the grad-norm read (4).
ADAM_BYTES_PER_PARAM = 34
#: Megatron DDP bucket size (parameters): max(40M, 1M x dp); the last bucket is not hidden.
BUCKET_PARAMS = 40e6
#: Element-wise HBM traffic per element touched: read + write of BF16.
ELEM_BYTES = 2
#: Extra HBM bytes per GEMM activation operand element under FP8 (inputs forward, output
#: gradients backward): per-tensor current scaling reads the BF16 tensor twice (amax, cast)
#: and writes the FP8 copy and its transpose (2 + 2 + 1 + 1); MXFP8 finds its block scales in
#: the cast pass (2 + 1 + 1).
FP8_CAST_BYTES = {"fp8": 6, "mxfp8": 4}
#: HBM bytes per attention-score element in an unfused forward: write the scores, the fused
#: scale-mask-softmax reads and writes them, dropout reads them and writes its output and
#: a 1-byte mask, A V reads them (2 + 4 + 5 + 2); the backward moves about twice as much.
SCORE_BYTES_FWD = 13
#: HBM bytes per logit element for the vocabulary-parallel cross-entropy, forward + backward.
CE_BYTES_PER_LOGIT = 12
#: Ring (P2P) context parallelism computes attention block by block and merges each new
#: block's partial output into an FP32 accumulator with its log-sum-exp (Transformer
#: Engine ``AttnFuncWithCPAndKVP2P``: ``flash_attn_fwd_out_correction`` per ring step; the
#: backward accumulates dQ in FP32 and adds each step's dK/dV into the travelling FP32
#: buffer).  HBM bytes per attention-output element per extra ring step: forward reads the
#: BF16 partial output and reads + writes the FP32 accumulator (2 + 4 + 4); backward reads +
#: writes the FP32 dQ accumulator (4 + 4), plus the same per K/V element for dK/dV.
CP_CORRECTION_BYTES_FWD = 10
CP_CORRECTION_BYTES_BWD = 8


# ---------------------------------------------------------------------------------------------
# Host (CPU) side: eager kernel launches and the MoE token-count sync
# ---------------------------------------------------------------------------------------------
#: Host operations issued per layer and micro-batch in the *forward* pass, per op kind, in
#: Megatron Core's Transformer Engine layer spec run eagerly (no CUDA graphs).  One operation
#: = one framework dispatch + one kernel launch, priced at
#: :func:`parastrat.estimate.efficiency.host_op_time`.  A coarse, explicit count:
#:
#: * ``norm`` 1 (TE LayerNormLinear / RMSNorm), ``gemm`` 1 per weight matrix (one per local
#:   expert for a grouped expert GEMM: TE GroupedLinear issues one cuBLAS GEMM per expert),
#:   ``fp8_cast`` per GEMM input under FP8 (current scaling: amax + cast-transpose = 2; MXFP8:
#:   one fused quantize = 1), ``rope`` 2 (Q and K), ``attention`` 1 (fused),
#:   ``residual`` 1 (fused bias-dropout-add), ``act`` 1, ``collective`` 1 per NCCL launch
#:   (TP all-gather / reduce-scatter, EP dispatch / combine, CP ring step 3: send/recv,
#:   partial attention, output correction);
#: * ``router`` 3 (router GEMM, fused score + top-k of ``moe_router_fusion``, aux loss);
#:   ``preprocess`` 2 (tokens-per-expert histogram, permutation indices; +1 exchange of the
#:   counts with EP > 1); ``permute`` 2 (fused permute and unpermute), ``sort`` 2 (sort /
#:   unsort of the received chunks by local expert, EP > 1).
HOST_OPS = {
    "norm": 1,
    "gemm": 1,
    "rope": 2,
    "attention": 1,
    "residual": 1,
    "act": 1,
    "collective": 1,
    "ring_step": 3,
    "router": 3,
    "preprocess": 2,
    "permute": 2,
    "sort": 2,
}
#: Host operations per GEMM input under FP8 (see :data:`HOST_OPS`).
FP8_CAST_OPS = {"fp8": 2, "mxfp8": 1}
#: Backward host operations per forward operation: autograd issues dgrad + wgrad for every
#: GEMM and one or two kernels per element-wise op.
HOST_BWD_RATIO = 2.0
#: CUDA-graph capture scopes (Megatron Core ``cuda_graph_scope`` / ``--cuda-graph-modules``,
#: plus ``full_iteration``).  A captured block costs one graph launch instead of its
#: operations; ``moe`` and ``full_iteration`` also remove the MoE token-count sync (they need
#: static, padded expert shapes).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")


def cuda_graph_scopes(value: Any) -> frozenset[str]:
    """The CUDA-graph scopes of a ``cuda_graphs`` argument.

    None / False / "none": eager (Megatron Core's default); True / "full": the whole iteration
    (``full_iteration``); a comma-separated string or an iterable of
    :data:`CUDA_GRAPH_SCOPES` (e.g. ``"attn,moe_router,moe_preprocess"``).  UsageError names
    the scopes for anything else.
    """
    if value is None or value is False:
        return frozenset()
    if value is True:
        return frozenset({"full_iteration"})
    if not isinstance(value, str) and not hasattr(value, "__iter__"):
        raise UsageError(
            f"cuda_graphs={value!r}: use True/'full', None, or scopes such as "
            f"'attn,moe_router' from {', '.join(CUDA_GRAPH_SCOPES)}"
        )
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {str(v).strip().lower().replace("-", "_") for v in items}
    names.discard("")
    if names <= {"none"}:
        return frozenset()
    if names == {"full"}:
        return frozenset({"full_iteration"})
    bad = sorted(names - set(CUDA_GRAPH_SCOPES))
    if bad:
        raise UsageError(
            f"unknown CUDA-graph scope(s) {', '.join(bad)}; use True/'full' or "
            f"any of {', '.join(CUDA_GRAPH_SCOPES)}"
        )
    return frozenset(names)


def host_ops(
    model: ModelSpec, moe: bool, s: Strategy, precision: str, graphs: frozenset[str] = frozenset()
) -> tuple[float, bool]:
    """(forward host operations, MoE token-count sync) of one layer and micro-batch.

    Counts :data:`HOST_OPS` over the blocks of the layer; a block inside a CUDA-graph scope
    counts as one graph launch.  The sync: Megatron's dispatchers copy the tokens-per-expert
    counts to the host (all-to-all split sizes, TE GroupedLinear's ``m_splits``) once per MoE
    layer in the forward pass, unless the whole MoE block is graphed (``moe`` /
    ``full_iteration`` with padded expert shapes).  Memoised.
    """
    key = (
        ("host", model, moe, s.tp, s.ep, s.etp, s.ring, s.ulysses, precision, graphs),
        kernel_model.active(),  # kernels
    )
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _host_ops(model, moe, s, precision, graphs)
    return hit


def _host_ops(
    model: ModelSpec, moe: bool, s: Strategy, precision: str, graphs: frozenset[str]
) -> tuple[float, bool]:
    if "full_iteration" in graphs:
        return 0.0, False
    ops = HOST_OPS
    cast = FP8_CAST_OPS.get(precision, 0)
    tp_coll = 2 * ops["collective"] if s.tp > 1 else 0

    def gemms(mats: list[Matrix], per_matrix: int = 1) -> float:
        return len(mats) * per_matrix * (ops["gemm"] + cast)

    attn_mats = attention_matrices(model)
    norms = 2 if (model.qk_layernorm or model.multi_latent_attention) else 0
    attn = (
        ops["norm"] * (1 + norms)
        + gemms(attn_mats)
        + ops["rope"]
        + ops["attention"]
        + ops["residual"]
        + tp_coll
        + ops["ring_step"] * max(s.ring - 1, 0)
        + (4 * ops["collective"] if s.ulysses > 1 else 0)
    )
    if "attn" in graphs:
        attn = 1.0
    mlp_mats = mlp_matrices(model, moe)
    if not moe:
        mlp: float = ops["norm"] + gemms(mlp_mats) + ops["act"] + ops["residual"] + tp_coll
        if "mlp" in graphs:
            mlp = 1.0
        return attn + mlp, False
    local = max(model.num_experts // s.ep, 1)
    experts = [m for m in mlp_mats if m.block == "expert"]
    shared = [m for m in mlp_mats if m.block == "shared"]
    block: float = (
        ops["norm"]
        + ops["residual"]
        + tp_coll
        # kernels: per-tensor scaling needs one amax + cast per expert's split (TE
        # GroupedLinear keeps a quantizer per expert); MXFP8 block scales need no amax
        + len(experts)
        # kernels: per-expert quantisation under per-tensor FP8, FP8 padding / unpadding
        * (
            local * ops["gemm"]
            + moe_kernels.quantise_launches(precision, local, kernel_model.active()) * cast
        )
        + moe_kernels.padding_launches(precision, kernel_model.active())
        + ops["act"]
        + ops["permute"]
    )
    if shared:
        block += gemms(shared) + ops["act"]
    if s.ep > 1:
        block += 2 * ops["collective"] + ops["sort"]
    if s.etp > 1:
        block += 2 * ops["collective"]
    router = float(ops["router"])
    pre: float = ops["preprocess"] + (ops["collective"] if s.ep > 1 else 0)
    if "moe" in graphs:
        return attn + 1.0, False
    if "moe_router" in graphs:
        router = 1.0
    if "moe_preprocess" in graphs:
        pre = 1.0
    return attn + block + router + pre, True


@dataclass(frozen=True)
class MoEComm:
    """How a recipe runs the expert-parallel all-to-all (Megatron Core / Bridge switches).

    ``dispatcher``: "alltoall" (Megatron's default: one copy per routed expert) or "flex"
    (``moe_token_dispatcher_type="flex"`` with DeepEP/HybridEP: one copy per destination rank
    inside a scale-up domain and per destination domain across the scale-out link,
    :func:`parastrat.estimate.comm.dedup_scale`).
    ``a2a_overlap``: ``overlap_moe_expert_parallel_comm`` ("combined 1F1B"): the forward of one
    micro-batch runs beside the backward of another, each all-to-all phase under a compute
    phase of the other micro-batch (needs EP > 1, PP = 1 or VPP > 1, no full recompute).
    ``shared_expert_overlap``: ``moe_shared_expert_overlap``: the shared experts compute while
    the dispatch/combine run (Megatron refuses it together with ``a2a_overlap``).
    """

    dispatcher: str = "alltoall"
    a2a_overlap: bool = False
    shared_expert_overlap: bool = False


DEFAULT_MOE_COMM = MoEComm()


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepReport:
    """Predicted time of one training step and where it goes.

    ``breakdown`` holds seconds per step on the slowest pipeline stage: ``compute`` (GEMMs,
    attention and memory-bound kernels, forward + backward), ``recompute``, each communication
    kind's total (``tp``, ``cp``, ``ep``, ``pp``, ``dp``) and its exposed part (``tp_exposed``
    ...), the host (CPU) time of eager kernel launches (``host``) and the part of it the GPU
    waits for (``host_exposed``), ``bubble`` and ``optimizer``.  ``compute + recompute +
    bubble + optimizer + every *_exposed`` equals ``step_time_s``.

    ``tflops_per_gpu`` counts *model* FLOPs (``3 x forward``: 6 x active parameters x tokens
    plus causal attention counted as half; see :mod:`parastrat.estimate.flops`), so it excludes
    recomputation; ``mfu`` divides it by the dense peak at the linear layers' precision.
    """

    step_time_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    breakdown: dict[str, float]
    micro_batches: int
    world_size: int
    precision: str
    recompute: str
    model_flops_per_token: float
    notes: tuple[str, ...] = field(default=())

    @property
    def exposed_comm_s(self) -> float:
        """Communication left on the critical path, seconds per step (host time excluded)."""
        return sum(
            v for k, v in self.breakdown.items() if k.endswith("_exposed") and k != "host_exposed"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every figure and the breakdown as plain numbers, for JSON output."""
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "breakdown": dict(self.breakdown),
            "micro_batches": self.micro_batches,
            "world_size": self.world_size,
            "precision": self.precision,
            "recompute": self.recompute,
            "model_flops_per_token": self.model_flops_per_token,
            "flops_convention": "model FLOPs = 3 x forward (6 N_active per token + causal "
            "attention counted as half); recompute excluded",
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------
# Per-layer costs (cached: the planner asks for the same shapes many times)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerCost:
    """Seconds of one layer for one micro-batch on one rank."""

    gemm_fwd: float
    gemm_bwd: float
    attn_fwd: float
    attn_bwd: float
    elem_fwd: float
    elem_bwd: float
    dense_params: float  # local parameters (after TP / dup)
    expert_params: float  # local routed-expert parameters (after EP / ETP)
    #: GEMM seconds of the MLP block (router, routed and shared experts), forward / backward
    mlp_fwd: float = 0.0
    mlp_bwd: float = 0.0
    #: GEMM seconds of the shared experts alone, forward + backward
    shared: float = 0.0

    @property
    def fwd(self) -> float:
        """Forward seconds: GEMMs, attention and memory-bound kernels."""
        return self.gemm_fwd + self.attn_fwd + self.elem_fwd

    @property
    def bwd(self) -> float:
        """Backward seconds: GEMMs, attention and memory-bound kernels."""
        return self.gemm_bwd + self.attn_bwd + self.elem_bwd

    @property
    def gemm(self) -> float:
        """GEMM seconds, forward and backward."""
        return self.gemm_fwd + self.gemm_bwd

    @property
    def attn(self) -> float:
        """Attention seconds, forward and backward."""
        return self.attn_fwd + self.attn_bwd


def matrix_params(mat: Matrix, tp: int, ep: int, etp: int, num_experts: int) -> float:
    """Parameters of one weight matrix held by one rank (experts split by EP and ETP, the
    rest by TP unless replicated)."""
    if mat.block == "expert":
        return max(num_experts // ep, 1) * mat.in_dim * mat.out_dim / etp
    if mat.split == "dup":
        return float(mat.in_dim * mat.out_dim)
    return mat.in_dim * mat.out_dim / tp


def layer_params(model: ModelSpec, moe: bool, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, routed-expert) parameters of one layer on one rank, without its norms: what
    the planner's memory prefilter needs without pricing any GEMM.  Memoised."""
    key = ("params", model, moe, tp, ep, etp)
    hit = _CACHE.get(key)
    if hit is None:
        dense = expert = 0.0
        for mat in attention_matrices(model) + mlp_matrices(model, moe):
            n = matrix_params(mat, tp, ep, etp, model.num_experts)
            if mat.block == "expert":
                expert += n
            else:
                dense += n
        hit = _CACHE[key] = (dense, expert)
    return hit


def _matrix_times(
    accel: Accelerator,
    prof: KernelProfile,
    mat: Matrix,
    tokens: float,
    tp: int,
    sp: bool,
    ep: int,
    etp: int,
    num_experts: int,
    precision: str,
    expert_m: float | None = None,
) -> tuple[float, float, float, float]:
    """(forward s, backward s, local params, fp8-cast elements per micro-batch) of one matrix.

    ``expert_m``: tokens per local expert GEMM on the slowest EP rank (kernels: the
    imbalance mechanism, :func:`parastrat.estimate.moe_kernels.expert_load`)."""
    k_in: float = mat.in_dim
    n_out: float = mat.out_dim
    groups = 1
    params = matrix_params(mat, tp, ep, etp, num_experts)
    if mat.block == "expert":
        local = max(num_experts // ep, 1)
        groups = local
        m = tokens / tp * mat.per_token * etp / local
        if expert_m is not None:  # kernels: slowest rank's tokens per expert
            m = expert_m
        if mat.split == "col":
            n_out = n_out / etp
        else:
            k_in = k_in / etp
    elif mat.split == "dup":
        m = tokens / tp if sp else tokens
    else:
        m = tokens
        if mat.split == "col":
            n_out = n_out / tp
        else:
            k_in = k_in / tp
    prec = "bf16" if mat.block in ("router", "logits") else precision
    mech = kernel_model.active()
    # kernels: TE GroupedLinear runs one GEMM per local expert over its streams
    streams = kernel_model.GROUPED_STREAMS if (mech.shape and groups > 1) else 0
    rnd = expert_m is not None  # kernels: routed counts are random around their mean
    fwd = gemm_time(accel, m, n_out, k_in, prec, groups, prof, streams, rnd)
    bwd = (
        gemm_time(accel, m, k_in, n_out, prec, groups, prof, streams, rnd)  # dgrad
        + gemm_time(accel, k_in, n_out, m, prec, groups, prof, streams)
    )  # wgrad
    if mech.fp8 and prec in ("fp8", "mxfp8"):  # kernels: Hopper's split accumulation
        bwd *= fp8_overheads.backward_gemm_slowdown(kernel_model.ARCH.get(accel.name, ""))
    cast = groups * m * (k_in + n_out) if prec in ("fp8", "mxfp8") else 0.0
    return fwd, bwd, params, cast


_CACHE: dict[tuple, Any] = {}


def _accel_key(accel: Accelerator) -> tuple:
    """A hashable identity of an accelerator (its dict of peaks makes it unhashable)."""
    key = accel.__dict__.get("_step_key")
    if key is None:
        kern = tuple(
            (k, tuple(sorted(v.items())) if isinstance(v, dict) else v)
            for k, v in sorted(accel.kernels.items())
        )
        key = (
            accel.name,
            accel.mem_bandwidth_Bps,
            tuple(sorted(accel.peak_flops.items())),
            kern,
        )
        accel.__dict__["_step_key"] = key  # frozen dataclass: cache on the instance
    return key


def layer_cost(
    model: ModelSpec,
    accel: Accelerator,
    precision: str,
    moe: bool,
    tokens: float,
    seq_len: int,
    tp: int,
    cp: int,
    sp: bool,
    ep: int,
    etp: int,
    flash_attention: bool = True,
) -> LayerCost:
    """Compute time of one layer (dense or MoE) for one micro-batch of ``tokens`` = b s / cp.

    Memoised: the planner prices the same (TP, CP, EP, micro-batch) shapes for many PP/DP
    choices.
    """
    if not moe:
        ep, etp = 1, tp  # a dense layer does not see the expert grid: share one entry
    key = (
        "layer",
        model,
        _accel_key(accel),
        precision,
        moe,
        tokens,
        seq_len,
        tp,
        cp,
        sp,
        ep,
        etp,
        flash_attention,
        kernel_model.active(),  # kernels: mechanism switches
    )
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) > 50_000:
            _CACHE.clear()
        hit = _CACHE[key] = _layer_cost(
            model, accel, precision, moe, tokens, seq_len, tp, cp, sp, ep, etp, flash_attention
        )
    return hit


def _layer_cost(
    model: ModelSpec,
    accel: Accelerator,
    precision: str,
    moe: bool,
    tokens: float,
    seq_len: int,
    tp: int,
    cp: int,
    sp: bool,
    ep: int,
    etp: int,
    flash_attention: bool,
) -> LayerCost:
    prof = kernel_profile(accel)
    fp8 = precision in ("fp8", "mxfp8") and accel.supports(precision)
    prec = precision if fp8 else "bf16"
    mech = kernel_model.active()
    load = (
        moe_kernels.expert_load(
            model, tokens, tp, ep, etp, mech.balance, mech.capacity_factor, mech.imbalance
        )
        if moe
        else None
    )
    expert_m = load.per_expert if (load is not None and mech.imbalance) else None
    mats = attention_matrices(model) + mlp_matrices(model, moe)
    g_fwd = g_bwd = dense_p = expert_p = cast = 0.0
    mlp_f = mlp_b = shared = 0.0
    for mat in mats:
        f, b, p, c = _matrix_times(
            accel, prof, mat, tokens, tp, sp, ep, etp, model.num_experts, prec, expert_m
        )
        if mat.block == "expert" and not mech.shape:
            f, b = f / GROUPED_GEMM_EFF, b / GROUPED_GEMM_EFF
        g_fwd += f
        g_bwd += b
        cast += c
        if mat.block in ("router", "expert", "shared", "mlp"):
            mlp_f += f
            mlp_b += b
        if mat.block == "shared":
            shared += f + b
        if mat.block == "expert":
            expert_p += p
        else:
            dense_p += p
    h = model.hidden_size
    norms = 2 * h + (2 * model.head_dim if getattr(model, "qk_layernorm", False) else 0)
    dense_p += norms
    # attention core: heads split by TP, keys halved by the causal mask
    core = mean_attention_core_flops_per_token(model, seq_len) * tokens / tp
    if flash_attention:
        d_attn: float = 128
        if mech.shape:  # kernels: whole key blocks, head dimension vs the SFU
            core *= kernel_model.attention_block_ratio(model, seq_len)
            d_attn = kernel_model.attention_head_dim(model)
        a_fwd = attention_time(accel, core, prof, d_attn)
        a_bwd = attention_time(accel, ATTN_BWD_RATIO * core, prof, d_attn, backward=True)
    else:
        # unfused: Q K^T and A V as batched GEMMs over every key (no causal skipping) and the
        # score matrix through HBM (scale-mask-softmax, dropout)
        heads = max(model.num_attention_heads // tp, 1)
        d = model.head_dim
        b_s = tokens / max(seq_len / cp, 1)  # sequences in the micro-batch
        q, keys = seq_len / cp, seq_len
        one = gemm_time(accel, q, keys, d, "bf16", int(heads * b_s), prof)
        a_fwd = 2 * one + memory_time(accel, heads * b_s * q * keys * SCORE_BYTES_FWD, prof)
        a_bwd = 4 * one + memory_time(accel, heads * b_s * q * keys * 2 * SCORE_BYTES_FWD, prof)
    # memory-bound kernels: elements touched per token (forward)
    h_local = h / tp if sp else h
    a, g = model.num_attention_heads, model.query_groups
    elems = 10 * h_local + 2 * (a + g) * model.head_dim / tp  # norms, residuals, RoPE
    if getattr(model, "qk_layernorm", False):
        elems += 2 * (a + g) * model.head_dim / tp
    act = 3 if model.gated_linear_unit else 2
    moe_f = moe_b = 0.0
    if moe and load is not None:  # kernels: MoE memory-bound kernels on the slowest rank
        moe_f, moe_b = moe_kernels.layer_bytes(model, tokens, tp, ep, load, mech, fp8)
    else:
        elems += act * model.ffn_hidden_size / tp
    e_bytes = tokens * elems * ELEM_BYTES
    if mech.fp8:  # kernels: bytes per element of the recipe on this architecture
        per_elem = fp8_overheads.cast_bytes_per_element(
            fp8_overheads.RECIPE_OF.get(prec, "current"), kernel_model.ARCH.get(accel.name, "")
        )
        cast_b = cast * per_elem / 2 if prec in ("fp8", "mxfp8") else 0.0
    else:
        cast_b = cast * FP8_CAST_BYTES.get(prec, 0) / 2  # half forward (inputs), half backward
    e_fwd = memory_time(accel, e_bytes + cast_b + moe_f, prof)
    e_bwd = memory_time(accel, 2 * e_bytes + cast_b + moe_b, prof)
    return LayerCost(
        g_fwd, g_bwd, a_fwd, a_bwd, e_fwd, e_bwd, dense_p, expert_p, mlp_f, mlp_b, shared
    )


def _head_cost(
    model: ModelSpec,
    accel: Accelerator,
    tokens: float,
    tp: int,
) -> tuple[float, float]:
    """(seconds fwd+bwd, local params) of the output layer and cross-entropy, one micro-batch."""
    key = ("head", model, _accel_key(accel), tokens, tp, kernel_model.active())
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _head_cost_uncached(model, accel, tokens, tp)
    return hit


def _head_cost_uncached(
    model: ModelSpec,
    accel: Accelerator,
    tokens: float,
    tp: int,
) -> tuple[float, float]:
    prof = kernel_profile(accel)
    mat = logits_matrix(model)
    n = mat.out_dim / tp
    t = (
        gemm_time(accel, tokens, n, mat.in_dim, "bf16", 1, prof)
        + gemm_time(accel, tokens, mat.in_dim, n, "bf16", 1, prof)
        + gemm_time(accel, mat.in_dim, n, tokens, "bf16", 1, prof)
    )
    t += memory_time(accel, tokens * n * CE_BYTES_PER_LOGIT, prof)
    return t, mat.in_dim * mat.out_dim / tp


# ---------------------------------------------------------------------------------------------
# Pipeline stages
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelineSplit:
    """Where the transformer layers of a model sit in a strategy's pipeline.

    ``stage_layers[j]``: layers held by physical stage ``j`` (all its virtual chunks);
    ``stage_moe[j]``: how many of them carry routed experts; ``chunk_layers[c]``: layers of
    model chunk ``c`` (``pp * vpp`` chunks in Megatron's order, chunk ``c`` on stage
    ``c % pp``).  ``how`` is "even", "uneven" (first/last stage counts), "accounted"
    (``account_for_embedding/loss_in_pipeline_split``) or "mtp-layout" (the one approximation,
    see :func:`pipeline_split`); ``note`` says so in words (None for an even split).
    """

    stage_layers: tuple[int, ...]
    stage_moe: tuple[int, ...]
    chunk_layers: tuple[int, ...]
    how: str
    note: str | None = None


#: Rule ids that the MTP-layout approximation (and only it) stands in for.
MTP_LAYOUT_RULES = frozenset({"layers-accounted"})


def _mtp_slots(model: ModelSpec, strategy: Strategy) -> int | None:
    """Pipeline slots when the MTP modules count as slots of the last stage, or None."""
    s = strategy
    if (
        not model.mtp_num_layers
        or s.pp == 1
        or not s.account_for_loss
        or s.first_stage_layers is not None
        or s.last_stage_layers is not None
    ):
        return None
    total = model.num_layers + s.account_for_embedding + s.account_for_loss
    if total % (s.pp * s.vpp) == 0:
        return None  # Megatron's own accounted split works; no approximation needed
    slots = total + model.mtp_num_layers
    return slots if slots % (s.pp * s.vpp) == 0 else None


def pipeline_split(model: ModelSpec, strategy: Strategy) -> PipelineSplit:
    """Layers per stage and per model chunk, from :meth:`Strategy.stage_layers`.

    The strategy's own split is the one source of truth (even, first/last stage counts, or
    Megatron's ``account_for_embedding/loss_in_pipeline_split``); an impossible split raises
    the rules' :class:`StrategyError` with the fix.

    One documented approximation lives here and nowhere else: a model with MTP whose
    ``L + embedding + loss`` slots do not divide into ``pp * vpp`` chunks, but whose
    ``L + embedding + MTP + loss`` slots do (DeepSeek-V3: 61 + 1 + 1 + 1 = 64 on PP 8 x VPP 4
    or PP 4 x VPP 4), is split as Megatron Bridge's ``pipeline_model_parallel_layout`` does
    for those recipes (``"Et|(tt|)*30mL"``): every chunk holds the same number of slots, the
    first chunk gives one to the embedding and the last gives one to the MTP modules and one to
    the loss.  Megatron itself needs that layout string for it (``account_for_*`` alone is
    rejected), which the note says.
    """
    key = (
        "split",
        model,
        strategy.pp,
        strategy.vpp,
        strategy.first_stage_layers,
        strategy.last_stage_layers,
        strategy.account_for_embedding,
        strategy.account_for_loss,
    )
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _pipeline_split(model, strategy)
    return hit


def _pipeline_split(model: ModelSpec, s: Strategy) -> PipelineSplit:
    L, p, v = model.num_layers, s.pp, s.vpp
    n = p * v
    slots = _mtp_slots(model, s)
    if slots is not None:
        per = slots // n
        chunks = [per] * n
        chunks[0] -= int(s.account_for_embedding)
        chunks[-1] -= int(s.account_for_loss) + model.mtp_num_layers
        if min(chunks) < 0:
            s.stage_layers(L)  # raises the rules' error
        how = "mtp-layout"
        note = (
            f"{L} layers + embedding + {model.mtp_num_layers} MTP + loss = {slots} slots "
            f"over pp*vpp = {n} chunks: priced as Megatron Bridge's "
            "pipeline_model_parallel_layout places them (MTP in the last chunk); Megatron "
            "needs that layout string, account_for_*_in_pipeline_split alone is rejected"
        )
    else:
        per_stage = s.stage_layers(L)  # raises StrategyError with the fix when impossible
        chunks = [0] * n
        for st, layers in enumerate(per_stage):
            base, extra = divmod(layers, v)
            for j in range(v):
                # a short chunk sits where the embedding (first chunk of stage 0) or the loss
                # (last chunk of the last stage) takes a slot
                short_first = st == 0 and s.account_for_embedding
                bonus = (j >= v - extra) if short_first else (j < extra)
                chunks[j * p + st] = base + (1 if bonus else 0)
        if s.account_for_embedding or s.account_for_loss:
            how = "accounted"
            note = (
                "layers split with "
                + " and ".join(
                    name
                    for name, on in (
                        ("account_for_embedding_in_pipeline_split", s.account_for_embedding),
                        ("account_for_loss_in_pipeline_split", s.account_for_loss),
                    )
                    if on
                )
                + f": {list(per_stage)} layers per stage"
            )
        elif s.uneven:
            how, note = "uneven", f"uneven pipeline split: {list(per_stage)} layers per stage"
        else:
            how, note = "even", None
    stage = [0] * p
    moe = [0] * p
    start = 0
    for c, size in enumerate(chunks):
        stage[c % p] += size
        moe[c % p] += sum(1 for i in range(start, start + size) if is_moe_layer(model, i))
        start += size
    return PipelineSplit(tuple(stage), tuple(moe), tuple(chunks), how, note)


def split_waived_rules(model: ModelSpec, strategy: Strategy) -> frozenset[str]:
    """Rule ids the layer-split approximation of :func:`pipeline_split` stands in for."""
    return MTP_LAYOUT_RULES if _mtp_slots(model, strategy) is not None else frozenset()


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------
def _exposed(t_comm: float, window: float, overlap: bool) -> float:
    """Critical-path part of a collective of ``t_comm`` seconds overlapping ``window``."""
    if not overlap:
        return t_comm
    hidden = min(t_comm, window)
    return t_comm - hidden + OVERLAP_SLOWDOWN * hidden


def estimate_step(
    model: ModelSpec,
    strategy: Strategy,
    cluster: Cluster,
    *,
    seq_len: int,
    global_batch_size: int,
    micro_batch_size: int = 1,
    precision: str = "bf16",
    recompute: str = "selective",
    distributed_optimizer: bool = True,
    flash_attention: bool = True,
    tp_comm_overlap: bool | None = None,
    overlap_grad_reduce: bool = True,
    moe_dispatcher: str = "alltoall",
    moe_a2a_overlap: bool = False,
    moe_shared_expert_overlap: bool = False,
    cuda_graphs: Any = None,
    validate: bool = True,
) -> StepReport:
    """Predict one training step of ``model`` split by ``strategy`` on ``cluster``.

    ``strategy.dp`` may be unset: the world is then ``cluster.num_devices``.  With
    ``validate`` (the default) the strategy is checked against the model, world size, sequence
    and batch first (StrategyError listing every broken rule).  The layer split is the
    strategy's own (:func:`pipeline_split`): set ``account_for_embedding``/``account_for_loss``
    or ``first_stage_layers``/``last_stage_layers`` for layer counts that do not divide.

    Implementation switches (defaults: today's Megatron Core / Bridge): ``flash_attention``
    (False prices the attention scores as batched GEMMs plus their softmax/dropout traffic),
    ``tp_comm_overlap`` (None: on with SP inside the scale-up domain), ``overlap_grad_reduce``
    (DP reduce-scatter/all-gather behind backward/forward), ``distributed_optimizer``, and the
    MoE switches of :class:`MoEComm`: ``moe_dispatcher`` ("alltoall" or "flex" for
    DeepEP/HybridEP), ``moe_a2a_overlap`` (``overlap_moe_expert_parallel_comm``, combined
    1F1B) and ``moe_shared_expert_overlap`` (all off by default, as in Megatron Core), and
    ``cuda_graphs`` (:func:`cuda_graph_scopes`: None = eager, Megatron Core's default; True =
    the whole iteration; or scopes such as ``"attn,moe_router,moe_preprocess"``), which
    removes the host launch cost of the captured blocks.
    """
    from ..spec.models import get as get_model

    model = get_model(model)
    prec = canonical_precision(precision)
    mode = normalize_recompute(recompute)
    world = int(strategy.world_size or cluster.num_devices)
    if validate:
        _validate(model, strategy, world, seq_len, global_batch_size, micro_batch_size)
    if strategy.dp is None:
        strategy = strategy.with_world_size(world)
    moe_comm = moe_comm_options(moe_dispatcher, moe_a2a_overlap, moe_shared_expert_overlap)
    return _estimate(
        model,
        strategy,
        cluster,
        seq_len,
        global_batch_size,
        micro_batch_size,
        prec,
        mode,
        distributed_optimizer,
        flash_attention,
        tp_comm_overlap,
        overlap_grad_reduce,
        moe_comm=moe_comm,
        graphs=cuda_graph_scopes(cuda_graphs),
    )


def moe_comm_options(
    dispatcher: str = "alltoall", a2a_overlap: bool = False, shared_expert_overlap: bool = False
) -> MoEComm:
    """A :class:`MoEComm`, with UsageError naming the choices for an unknown dispatcher."""
    name = str(dispatcher).strip().lower()
    if name in comm.FLEX_BACKENDS:
        name = "flex"
    if name not in comm.DISPATCHERS:
        raise UsageError(
            f"unknown MoE dispatcher {dispatcher!r}; use one of "
            f"{', '.join(comm.DISPATCHERS)} (deepep/hybridep mean flex)"
        )
    return MoEComm(name, bool(a2a_overlap), bool(shared_expert_overlap))


def check_errors(
    model: ModelSpec,
    strategy: Strategy,
    *,
    world_size: int,
    seq_len: int,
    global_batch_size: int,
    micro_batch_size: int | None = None,
) -> list[Any]:
    """The hard rules ``strategy`` breaks (:meth:`Strategy.check`), less the layer-split rule
    that :func:`pipeline_split`'s MTP-layout approximation stands in for."""
    errors = [
        v
        for v in strategy.check(
            model,
            world_size=world_size,
            seq_len=seq_len,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
        )
        if v.severity == "error"
    ]
    if errors:
        waived = split_waived_rules(model, strategy)
        if waived:
            errors = [v for v in errors if v.rule not in waived]
    return errors


def _validate(
    model: ModelSpec,
    strategy: Strategy,
    world: int,
    seq_len: int,
    global_batch_size: int,
    micro_batch_size: int,
) -> None:
    errors = check_errors(
        model,
        strategy,
        world_size=world,
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
    )
    if errors:
        raise StrategyError(errors)


def _per_layer(
    model: ModelSpec,
    s: Strategy,
    cluster: Cluster,
    tokens: float,
    seq_len: int,
    prec: str,
    mode: str,
    strides: dict[str, int],
    tp_overlap: bool,
    flash_attention: bool,
    memo: dict | None,
    moe_comm: MoEComm = DEFAULT_MOE_COMM,
    graphs: frozenset[str] = frozenset(),
) -> tuple[dict[bool, dict[str, float]], dict[bool, LayerCost]]:
    """Per-layer, per-micro-batch seconds (dense and MoE): compute, recompute, each
    collective and its exposed part, and the host (CPU) time that the GPU waits for
    (:func:`_host_exposed`)."""
    accel = cluster.accel
    kinds: dict[bool, LayerCost] = {}
    per: dict[bool, dict[str, float]] = {}
    for moe in (False, True):
        if moe and not model.is_moe:
            continue
        mkey = None
        if memo is not None:
            mkey = (
                moe,
                tokens,
                s.tp,
                s.sp,
                s.ulysses,
                s.ring,
                s.ep,
                s.etp,
                strides["tp"],
                strides["ulysses"],
                strides["ring"],
                strides["ep"],
                strides["etp"],
                mode,
                moe_comm,
                flash_attention,
                tp_overlap,
                graphs,
            )
            hit = memo.get(mkey)
            if hit is not None:
                per[moe], kinds[moe] = hit
                continue
        c = layer_cost(
            model, accel, prec, moe, tokens, seq_len, s.tp, s.cp, s.sp, s.ep, s.etp, flash_attention
        )
        kinds[moe] = c
        t_tp = comm.total_time(comm.tp_layer(model, s, tokens, moe, strides), cluster)
        ring, a2a = comm.cp_layer(model, s, tokens, strides)
        t_ring, t_a2a = comm.total_time(ring, cluster), comm.total_time(a2a, cluster)
        t_ep = (
            comm.total_time(
                comm.ep_layer(
                    model, s, tokens, strides, moe_comm.dispatcher, cluster.scale_up_domain
                ),
                cluster,
            )
            if moe
            else 0.0
        )
        mech = kernel_model.active()
        t_amax = 0.0
        if moe and mech.imbalance:  # kernels: the slowest EP rank sets the all-to-all's pace
            t_ep *= moe_kernels.expert_load(
                model, tokens, s.tp, s.ep, s.etp, mech.balance, mech.capacity_factor
            ).factor
        if mech.fp8:  # kernels: TP amax all-reduces of FP8 current scaling with SP
            n_amax = fp8_overheads.amax_reductions(
                fp8_overheads.RECIPE_OF.get(prec, ""), s.tp, s.sp
            )
            if n_amax and accel.supports(prec):
                t_amax = comm.Collective(
                    "tp", "all_reduce", fp8_overheads.AMAX_BYTES, s.tp, strides["tp"], n_amax
                ).time(cluster)
                t_tp += t_amax
        if moe and mech.moe_kernels and moe_comm.dispatcher == "alltoall" and s.ep > 1:
            # kernels: the alltoall dispatcher's sort / unsort of received chunks by expert
            load = moe_kernels.expert_load(
                model, tokens, s.tp, s.ep, s.etp, mech.balance, mech.capacity_factor
            )
            copies = load.slowest if mech.imbalance else load.mean
            sort_t = memory_time(accel, copies * moe_kernels.sort_bytes(model))
            c = replace(c, elem_fwd=c.elem_fwd + sort_t, elem_bwd=c.elem_bwd + sort_t)
        rec = 0.0
        rec_comm = 0.0
        if mode == "selective":
            rec = c.attn_fwd
        elif mode == "full":
            rec = c.fwd
            rec_comm = 0.5 * (t_tp + t_a2a + t_ep)  # the forward's collectives run again
        corr_f, corr_b = _cp_correction(model, s, tokens, accel)
        if corr_f:
            c = replace(c, elem_fwd=c.elem_fwd + corr_f, elem_bwd=c.elem_bwd + corr_b)
        tp_exp = _exposed(t_tp - t_amax, c.gemm, tp_overlap) + t_amax
        ep_exp = _ep_exposed(c, t_ep, moe_comm, mode) if moe else 0.0
        ring_exp = _exposed(t_ring, c.attn, True)
        host, host_exp = _host_exposed(
            model,
            moe,
            s,
            prec,
            mode,
            graphs,
            accel,
            c,
            tp_exp + ring_exp + t_a2a + ep_exp,
            rec + rec_comm,
        )
        per[moe] = {
            "compute": c.fwd + c.bwd,
            "recompute": rec + rec_comm,
            "tp": t_tp,
            "tp_exposed": tp_exp,
            "cp": t_ring + t_a2a,
            "cp_exposed": ring_exp + t_a2a,
            "ep": t_ep,
            "ep_exposed": ep_exp,
            "host": host,
            "host_exposed": host_exp,
            "fwd": c.fwd,
            "bwd": c.bwd,
        }
        if mkey is not None and memo is not None:
            memo[mkey] = (per[moe], c)

    return per, kinds


def _host_exposed(
    model: ModelSpec,
    moe: bool,
    s: Strategy,
    prec: str,
    mode: str,
    graphs: frozenset[str],
    accel: Accelerator,
    c: LayerCost,
    exposed_comm: float,
    recompute: float,
) -> tuple[float, float]:
    """(host seconds, host seconds the GPU waits for) of one layer and micro-batch.

    The host issues :func:`host_ops` operations forward and :data:`HOST_BWD_RATIO` times as
    many backward (plus the forward again under full recompute, the attention core under
    selective), each :func:`host_op_time`.  Kernels run asynchronously, so without a sync a
    pass costs the longer of its host and GPU times (the GPU's being its compute, exposed
    communication and recompute; the forward gets a third of the exposed communication, the
    backward two thirds): the GPU waits ``max(0, host - gpu)``.  The MoE token-count sync
    (:func:`host_ops`) empties the GPU's queue once per MoE layer forward: the GPU then idles
    while the host issues the next operation (one more operation's host time).
    """
    fp8 = prec if prec in FP8_CAST_OPS and accel.supports(prec) else "bf16"
    ops_f, sync = host_ops(model, moe, s, fp8, graphs)
    if not ops_f and not sync:
        return 0.0, 0.0
    h_op = host_op_time(accel)
    rec_ops = ops_f if mode == "full" else (HOST_OPS["attention"] if mode == "selective" else 0.0)
    host_f = ops_f * h_op
    host_b = (HOST_BWD_RATIO * ops_f + rec_ops) * h_op
    gpu_f = c.fwd + exposed_comm / 3
    gpu_b = c.bwd + 2 * exposed_comm / 3 + recompute
    waited = max(0.0, host_f - gpu_f) + max(0.0, host_b - gpu_b) + (h_op if sync else 0.0)
    return host_f + host_b, waited


def _cp_correction(
    model: ModelSpec, s: Strategy, tokens: float, accel: Accelerator
) -> tuple[float, float]:
    """(forward s, backward s) of ring attention's per-step output / gradient merging.

    With ``ring > 1`` every ring step after the first merges a partial attention result into
    FP32 accumulators (:data:`CP_CORRECTION_BYTES_FWD` / ``_BWD`` per element): the output
    has ``tokens * heads / tp * v_dim`` elements on a rank (the same with Ulysses, which
    trades heads for tokens), K/V ``tokens * kv_width``.  Memory-bound, at HBM speed.
    """
    if s.ring <= 1:
        return 0.0, 0.0
    steps = s.ring - 1
    v_dim = model.v_head_dim if model.multi_latent_attention else model.head_dim
    out = tokens * model.num_attention_heads / s.tp * v_dim
    kv = tokens * comm.kv_width(model, s.tp)
    fwd = memory_time(accel, steps * out * CP_CORRECTION_BYTES_FWD)
    bwd = memory_time(accel, steps * (out + kv) * CP_CORRECTION_BYTES_BWD)
    return fwd, bwd


def _effective_moe_comm(
    s: Strategy, mode: str, moe_comm: MoEComm, notes: list[str] | None
) -> MoEComm:
    """``moe_comm`` less the switches Megatron would refuse for this strategy (noted)."""
    a2a, shared = moe_comm.a2a_overlap, moe_comm.shared_expert_overlap
    if a2a and not moe_a2a_overlap_ok(s, mode):
        a2a = False
        if notes is not None and s.ep > 1:
            notes.append(
                "moe_a2a_overlap (combined 1F1B) not applied: it needs PP = 1 or "
                "VPP > 1 and no full recompute"
            )
    if a2a and shared:
        shared = False
        if notes is not None:
            notes.append(
                "moe_shared_expert_overlap not applied: Megatron refuses it together "
                "with combined 1F1B"
            )
    if (a2a, shared) == (moe_comm.a2a_overlap, moe_comm.shared_expert_overlap):
        return moe_comm
    return MoEComm(moe_comm.dispatcher, a2a, shared)


def moe_a2a_overlap_ok(s: Strategy, recompute: str) -> bool:
    """Whether Megatron runs combined 1F1B for this strategy: EP > 1, PP = 1 or VPP > 1, and
    no full recompute (``overlap_moe_expert_parallel_comm``'s rules)."""
    return s.ep > 1 and (s.pp == 1 or s.vpp > 1) and recompute != "full"


def _ep_exposed(c: LayerCost, t_ep: float, moe_comm: MoEComm, mode: str) -> float:
    """Critical-path seconds of one MoE layer's four all-to-alls (one micro-batch, fwd + bwd).

    * combined 1F1B (``a2a_overlap``): Megatron pairs the forward of micro-batch i+1 with the
      backward of micro-batch i layer by layer, and runs each all-to-all phase under one
      compute phase of the other micro-batch: attention forward / combine backward, MLP
      backward / dispatch forward, MLP forward / dispatch backward, attention backward /
      combine forward.  A pair of phases costs the longer of the two, so what stays exposed is
      ``sum(max(compute_i, a2a/4)) - sum(compute_i)``; the hidden part still slows the compute
      by :data:`OVERLAP_SLOWDOWN`.
    * ``shared_expert_overlap``: the shared experts' forward and backward GEMMs run while the
      dispatch and combine are in flight: up to their duration is hidden.
    """
    if t_ep <= 0:
        return 0.0
    if moe_comm.a2a_overlap:
        a = t_ep / 4
        attn_f, attn_b = c.fwd - c.mlp_fwd, c.bwd - c.mlp_bwd
        phases = (attn_f, c.mlp_bwd, c.mlp_fwd, attn_b)
        exposed = sum(max(x, a) for x in phases) - sum(phases)
        return exposed + OVERLAP_SLOWDOWN * (t_ep - exposed)
    if moe_comm.shared_expert_overlap and c.shared > 0:
        return _exposed(t_ep, c.shared, True)
    return t_ep


def _dp(s: Strategy) -> int:
    """The data-parallel degree of a strategy whose world size is set (1 if it is not)."""
    return s.dp if s.dp is not None else 1


def microbatch_lower_bound(
    model: ModelSpec,
    s: Strategy,
    cluster: Cluster,
    seq_len: int,
    gbs: int,
    mbs: int,
    prec: str,
    memo: dict | None = None,
    moe_comm: MoEComm = DEFAULT_MOE_COMM,
    graphs: frozenset[str] = frozenset(),
) -> float:
    """A lower bound of the step time (no recompute, no PP/DP/optimizer terms): the fullest
    stage's layers, compute plus exposed TP/CP/EP communication, times ``m + (p-1)/v``."""
    moe_comm = _effective_moe_comm(s, "none", moe_comm, None)
    dp = _dp(s)
    m = gbs // (dp * mbs)
    split = pipeline_split(model, s)
    # VPP variants of one layout share everything but the bubble factor: memoise the fullest
    # stage's per-micro-batch time on the layout and the stage shapes
    wkey = None
    if memo is not None:
        wkey = (
            "lb",
            s.tp,
            s.sp,
            s.ulysses,
            s.ring,
            s.ep,
            s.etp,
            s.pp,
            dp,
            s.order,
            mbs,
            moe_comm,
            graphs,
            split.stage_layers,
            split.stage_moe,
        )
        hit = memo.get(wkey)
        if hit is not None:
            return hit * (m + (s.pp - 1) / s.vpp)
    edp = s.tp * s.cp * s.pp * dp // (s.etp * s.ep * s.pp)  # training grid: world / (etp ep pp)
    tokens = mbs * seq_len / s.cp
    strides = comm.group_strides(s, dp, edp)
    tp_overlap = s.sp and s.tp > 1 and cluster.span(s.tp, strides["tp"]) == "intra"
    per, _ = _per_layer(
        model,
        s,
        cluster,
        tokens,
        seq_len,
        prec,
        "none",
        strides,
        tp_overlap,
        True,
        memo,
        moe_comm,
        graphs,
    )
    counts, moe_counts = split.stage_layers, split.stage_moe

    def mb(key: bool) -> float:
        d = per[key]
        return (
            d["compute"] + d["tp_exposed"] + d["cp_exposed"] + d["ep_exposed"] + d["host_exposed"]
        )

    dense_mb = mb(False)
    moe_mb = mb(True) if model.is_moe else 0.0
    worst = max((c - n) * dense_mb + n * moe_mb for c, n in zip(counts, moe_counts))
    if wkey is not None and memo is not None:
        memo[wkey] = worst
    return worst * (m + (s.pp - 1) / s.vpp)


def _estimate(
    model: ModelSpec,
    s: Strategy,
    cluster: Cluster,
    seq_len: int,
    gbs: int,
    mbs: int,
    prec: str,
    mode: str,
    distributed_optimizer: bool = True,
    flash_attention: bool = True,
    tp_comm_overlap: bool | None = None,
    overlap_grad_reduce: bool = True,
    memo: dict | None = None,
    moe_comm: MoEComm = DEFAULT_MOE_COMM,
    graphs: frozenset[str] = frozenset(),
) -> StepReport:
    """The model itself, without validation (the planner calls this on legal candidates).

    ``memo`` (a dict owned by the caller, for one model, cluster, sequence and precision)
    caches per-layer costs across strategies that share TP/CP/EP shapes.
    """
    accel = cluster.accel
    dp = _dp(s)
    world = s.world_size if s.world_size is not None else s.min_world_size * dp
    edp = world // (s.etp * s.ep * s.pp)
    m = gbs // (dp * mbs)
    if m < 1 or gbs % (dp * mbs):
        raise UsageError(
            f"global_batch_size={gbs} is not a multiple of micro_batch_size*dp = {mbs}*{dp}"
        )
    p, v = s.pp, s.vpp
    tokens = mbs * seq_len / s.cp
    strides = comm.group_strides(s, dp, edp)
    notes: list[str] = []

    # ---- per-layer costs, dense and MoE -------------------------------------------------
    split = pipeline_split(model, s)
    counts, moe_counts = split.stage_layers, split.stage_moe
    if split.note:
        notes.append(split.note)
    tp_intra = cluster.span(s.tp, strides["tp"]) == "intra"
    tp_overlap = s.sp and s.tp > 1 and tp_intra
    if tp_comm_overlap is not None:
        tp_overlap = tp_overlap and tp_comm_overlap

    moe_comm = _effective_moe_comm(s, mode, moe_comm, notes)
    per, kinds = _per_layer(
        model,
        s,
        cluster,
        tokens,
        seq_len,
        prec,
        mode,
        strides,
        tp_overlap,
        flash_attention,
        memo,
        moe_comm,
        graphs,
    )

    head_t, head_p = _head_cost(model, accel, tokens, s.tp)
    emb_p = model.vocab_size * model.hidden_size / s.tp
    mtp_terms: dict[str, float] = {}
    if model.mtp_num_layers:
        last_moe = is_moe_layer(model, model.num_layers - 1)
        mtp_terms = {k: model.mtp_num_layers * val for k, val in per[last_moe].items()}
        proj = gemm_time(accel, tokens, model.hidden_size / s.tp, 2 * model.hidden_size, prec)
        mtp_terms["compute"] += model.mtp_num_layers * (3 * proj + head_t)

    # ---- stages ---------------------------------------------------------------------------
    keys = (
        "compute",
        "recompute",
        "tp",
        "tp_exposed",
        "cp",
        "cp_exposed",
        "ep",
        "ep_exposed",
        "host",
        "host_exposed",
        "fwd",
        "bwd",
    )
    stages: list[dict[str, float]] = []
    # stages that hold the same layers and neither end of the pipeline cost the same
    signatures: dict[tuple[int, int, bool, bool], int] = {}
    for j in range(p):
        signatures.setdefault((counts[j], moe_counts[j], j == 0, j == p - 1), j)
    for n_layers, n_moe, first, last in signatures:
        n_dense = n_layers - n_moe
        st = {k: n_dense * per[False][k] + (n_moe * per[True][k] if n_moe else 0.0) for k in keys}
        dense_p = n_dense * kinds[False].dense_params if n_dense else 0.0
        exp_p = 0.0
        if n_moe:
            dense_p += n_moe * kinds[True].dense_params
            exp_p += n_moe * kinds[True].expert_params
        if first:
            dense_p += emb_p
        if last:
            st["compute"] += head_t
            st["fwd"] += head_t / 3
            st["bwd"] += 2 * head_t / 3
            if p > 1 or not model.tied_embeddings:
                dense_p += head_p
            for k, val in mtp_terms.items():
                st[k] += val
            if mtp_terms:
                last_moe = is_moe_layer(model, model.num_layers - 1)
                kc = kinds[last_moe]
                dense_p += model.mtp_num_layers * (
                    kc.dense_params + 2 * model.hidden_size**2 / s.tp
                )
                exp_p += model.mtp_num_layers * kc.expert_params
        st["mb"] = (
            st["compute"]
            + st["recompute"]
            + st["tp_exposed"]
            + st["cp_exposed"]
            + st["ep_exposed"]
            + st["host_exposed"]
        )
        st["dense_params"] = dense_p
        st["expert_params"] = exp_p
        stages.append(st)

    # ---- pipeline, DP, optimizer per stage; the slowest stage is the step ------------------
    p2p = comm.pp_microbatch(model, s, tokens, strides)
    t_p2p = p2p.time(cluster) if p2p else 0.0
    best: tuple[float, dict[str, float]] | None = None
    t_max_mb = max(st["mb"] for st in stages)
    bubble = (p - 1) / v * t_max_mb if p > 1 else 0.0
    pp_total = 2 * v * m * t_p2p
    mech = kernel_model.active()
    if p > 1:
        fill = 2 * (p - 1) * t_p2p
        if mech.interleave and v > 1:
            # kernels: the first micro-batch crosses every chunk boundary (p v - 1 sends
            # forward and as many backward), each with its host launch
            fill = 2 * (p * v - 1) * (t_p2p + host_op_time(accel))
        steady = (OVERLAP_SLOWDOWN if v > 1 else 1.0) * 2 * v * m * t_p2p
        pp_exposed = fill + steady
    else:
        pp_exposed = 0.0
    for st in stages:
        dkey = (
            "dp",
            st["dense_params"],
            st["expert_params"],
            dp,
            edp,
            s.cp,
            strides["dp-cp"],
            strides["edp"],
            distributed_optimizer,
        )
        hit = memo.get(dkey) if memo is not None else None
        if hit is None:
            dp_items = comm.dp_step(
                s, st["dense_params"], st["expert_params"], dp, edp, strides, distributed_optimizer
            )
            hit = (
                sum(c.time(cluster) for c in dp_items if c.op in ("reduce_scatter", "all_reduce")),
                sum(c.time(cluster) for c in dp_items if c.op == "all_gather"),
            )
            if memo is not None:
                memo[dkey] = hit
        t_rs, t_ag = hit
        bucket_frac = 0.0
        local_params = st["dense_params"] + st["expert_params"]
        if local_params > 0:
            bucket_frac = min(1.0, max(BUCKET_PARAMS, 1e6 * dp) / local_params)
        if overlap_grad_reduce:
            dp_exposed = (
                _exposed(t_rs, st["bwd"], True)
                + _exposed(t_ag, st["fwd"], True)
                + bucket_frac * (t_rs + t_ag)
            )
        else:
            dp_exposed = t_rs + t_ag
        shard = st["dense_params"] / (dp * s.cp) + st["expert_params"] / max(edp, 1)
        if not distributed_optimizer:
            shard = local_params
        opt = memory_time(
            accel, shard * ADAM_BYTES_PER_PARAM + local_params * 2, kernel_profile(accel)
        )
        if mech.fp8 and prec in ("fp8", "mxfp8") and accel.supports(prec):
            # kernels: each weight cast to FP8 once per step (TE caches it across micro-batches)
            opt += memory_time(
                accel,
                local_params
                * fp8_overheads.weight_cast_bytes_per_param(
                    fp8_overheads.RECIPE_OF[prec], kernel_model.ARCH.get(accel.name, "")
                ),
            )
        total = m * st["mb"] + bubble + pp_exposed + dp_exposed + opt
        st.update(dp=t_rs + t_ag, dp_exposed=dp_exposed, optimizer=opt, total=total)
        if best is None or total > best[0]:
            best = (total, st)
    assert best is not None
    step, st = best

    breakdown = {
        "compute": m * st["compute"],
        "recompute": m * st["recompute"],
        "tp": m * st["tp"],
        "tp_exposed": m * st["tp_exposed"],
        "cp": m * st["cp"],
        "cp_exposed": m * st["cp_exposed"],
        "ep": m * st["ep"],
        "ep_exposed": m * st["ep_exposed"],
        "host": m * st["host"],
        "host_exposed": m * st["host_exposed"],
        "pp": pp_total,
        "pp_exposed": pp_exposed,
        "dp": st["dp"],
        "dp_exposed": st["dp_exposed"],
        "bubble": bubble,
        "optimizer": st["optimizer"],
    }
    if cluster.span(s.tp, strides["tp"]) == "inter" and s.tp > 1:
        notes.append(
            f"TP group of {s.tp} crosses the scale-up domain of "
            f"{cluster.scale_up_domain}: every layer's TP collectives use the "
            "scale-out link"
        )
    tokens_step = gbs * seq_len
    fpt = model_flops_per_token(model, seq_len)
    tflops = fpt * tokens_step / step / world / 1e12
    peak = accel.peak(prec)
    return StepReport(
        step_time_s=step,
        tokens_per_s_per_gpu=tokens_step / step / world,
        tflops_per_gpu=tflops,
        mfu=tflops * 1e12 / peak,
        breakdown=breakdown,
        micro_batches=m,
        world_size=world,
        precision=prec,
        recompute=mode,
        model_flops_per_token=fpt,
        notes=tuple(notes),
    )
