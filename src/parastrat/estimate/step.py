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

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import StrategyError, UsageError
from ..graph_rules import GraphRun, graph_violations
from ..grid import expert_dp
from ..rules import hybrid_workload_violations
from ..spec.hardware import (
    QUANTISED,
    Accelerator,
    canonical_precision,
    require_dispatcher,
    require_precision,
)
from ..spec.model import ModelSpec
from ..spec.workload import CUDA_GRAPH_SCOPES as CUDA_GRAPH_SCOPES
from ..spec.workload import (
    TP_OVERLAP_OFF_VENDORS,
    Mechanisms,
    Switches,
    Workload,
    normalize_recompute,
    resolve,
)
from ..spec.workload import cuda_graph_scopes as cuda_graph_scopes
from ..spec.workload import moe_dispatcher as _moe_dispatcher
from . import comm, hybrid_cost, kernel_model, memo, moe_kernels  # kernels: shape, expert load
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
)
from .fsdp import ByteSizes, ShardGroups, Sharding, fsdp_layer_comm
from .layers import PipelineSplit as PipelineSplit
from .layers import (
    kind_record,
    layer_record,
    pipeline_split,
    stage_params,
)
from .mamba import HYBRID_KINDS
from .memo import per_model
from .offload_step import with_offload

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
#: the cast pass (2 + 1 + 1); NVFP4 one block-scaled pass at FP4 sizes (2 + 2 x 9/16).
FP8_CAST_BYTES = {"fp8": 6, "mxfp8": 4, "nvfp4": 3.125}
#: HBM bytes per attention-score element in an unfused forward: write the scores, the fused
#: scale-mask-softmax reads and writes them, dropout reads them and writes its output and
#: a 1-byte mask, A V reads them (2 + 4 + 5 + 2); the backward moves about twice as much.
SCORE_BYTES_FWD = 13
#: HBM bytes per logit element for the fused vocabulary-parallel cross-entropy, forward +
#: backward (``cross_entropy_loss_fusion``).
CE_BYTES_PER_LOGIT = 12
#: The same for Megatron Core's unfused ``_VocabParallelCrossEntropy``
#: (``tensor_parallel/cross_entropy.py``), op by op over FP32 logits: forward ``.float()``
#: (read 2, write 4), max (4), in-place subtract (8), in-place exp (8), sum (4), in-place
#: divide to the softmax it saves (8) = 38; backward the in-place multiply by the loss
#: gradient (8) and the cast back to BF16 for the output layer (6) = 14.
CE_UNFUSED_BYTES_PER_LOGIT = 52
#: Ring (P2P) context parallelism computes attention block by block and merges each new
#: block's partial output into an FP32 accumulator with its log-sum-exp (Transformer
#: Engine ``AttnFuncWithCPAndKVP2P``: ``flash_attn_fwd_out_correction`` per ring step; the
#: backward accumulates dQ in FP32 and adds each step's dK/dV into the travelling FP32
#: buffer).  HBM bytes per attention-output element per extra ring step: forward reads the
#: BF16 partial output and reads + writes the FP32 accumulator (2 + 4 + 4); backward reads +
#: writes the FP32 dQ accumulator (4 + 4), plus the same per K/V element for dK/dV.
CP_CORRECTION_BYTES_FWD = 10
CP_CORRECTION_BYTES_BWD = 8
#: Every kernel mechanism on (the default of the functions that take ``mech``).
ALL_MECHANISMS = Mechanisms()


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
#: Host operations per GEMM input, by quantisation recipe (see :data:`HOST_OPS`; the recipe
#: of :func:`.fp8.recipe_for`): per-tensor current scaling computes the amax, then casts (2);
#: delayed scaling casts with the previous step's scale and writes the amax from the same
#: kernel (1); blockwise and MXFP8 scale inside one fused quantise (1); NVFP4: amax (with the
#: Hadamard amax), row-wise cast, RHT column-wise cast = 3 (:mod:`.fp8`).
FP8_CAST_OPS = {"current": 2, "delayed": 1, "blockwise": 1, "mxfp8": 1, "nvfp4": 3}
#: Backward host operations per forward operation: autograd issues dgrad + wgrad for every
#: GEMM and one or two kernels per element-wise op.
HOST_BWD_RATIO = 2.0
#: Host operations of a Mamba-2 mixer forward beyond its norm, GEMMs and residual: ``scan``
#: the kernels ``mamba_split_conv1d_scan_combined`` launches (causal conv1d, chunk cumsum,
#: chunk state, state passing, C B^T, chunk scan: mamba-ssm ``ssd_combined.py``) and the
#: rearranges around it (two ``contiguous`` copies in ``MambaMixer._ssm_training``);
#: ``cp_a2a`` the all-to-alls of ``MambaContextParallel`` (six) with CP.
MAMBA_HOST_OPS = {"scan": 8, "cp_a2a": 6}


def host_ops(
    model: ModelSpec,
    moe: bool | str,
    s: Strategy,
    precision: str,
    graphs: frozenset[str] = frozenset(),
    mech: Mechanisms = ALL_MECHANISMS,
    fp8_recipe: str | None = None,
    after_sync: bool = False,
) -> tuple[float, int]:
    """(forward host operations, host-device syncs) of one layer and micro-batch; with
    ``after_sync``, only the operations the host issues after an MoE layer's token-count sync
    (the MoE block past the router and preprocessing; none in a layer without a sync).

    ``moe``: a GPT layer's MoE flag, or a hybrid layer's kind (its one block alone; a Mamba
    mixer: :data:`MAMBA_HOST_OPS`).  Counts :data:`HOST_OPS` over the blocks of the layer; a
    block inside a CUDA-graph scope counts as one graph launch.  The syncs: Megatron's
    dispatchers copy the tokens-per-expert counts to the host (all-to-all split sizes, TE
    GroupedLinear's ``m_splits``) once per MoE layer in the forward pass, unless the whole MoE
    block is graphed (``moe`` / ``full_iteration`` with padded expert shapes); a clamped
    activation copies its offset to the device, one more
    (:func:`~parastrat.estimate.moe_kernels.activation_syncs`).
    ``mech``: the kernel mechanisms (per-expert FP8 quantisation and padding launches, the
    expert-bias loop, the clamped activation); ``fp8_recipe``: the workload's
    (:data:`FP8_CAST_OPS`).  Memoised on everything it reads.
    """
    recipe = fp8_overheads.recipe_for(precision, True, fp8_recipe) if precision in QUANTISED else ""
    args = (s.tp, s.ep, s.etp, s.ring, s.ulysses, precision, graphs, mech, recipe)
    ops, syncs, block = _host_ops(model, moe, *args)
    return (block if syncs else 0.0) if after_sync else ops, syncs


@per_model
def _host_ops(
    model: ModelSpec,
    moe: bool | str,
    tp: int,
    ep: int,
    etp: int,
    ring: int,
    ulysses: int,
    precision: str,
    graphs: frozenset[str],
    mech: Mechanisms,
    recipe: str,
) -> tuple[float, int, float]:
    """(operations, syncs, operations after the sync) of :func:`host_ops`."""
    if "full_iteration" in graphs:
        return 0.0, 0, 0.0
    cast = FP8_CAST_OPS.get(recipe, 0)
    tp_coll = 2 * HOST_OPS["collective"] if tp > 1 else 0
    kind = moe if isinstance(moe, str) else None
    if kind == "mamba":
        return (1.0 if "mamba" in graphs else _mamba_ops(cast, tp_coll, ring * ulysses > 1)), 0, 0.0
    moe = kind == "moe" if kind is not None else bool(moe)
    attn = 1.0 if "attn" in graphs else _attention_ops(model, cast, tp_coll, ring, ulysses)
    if kind == "attention":
        return attn, 0, 0.0
    if kind is not None:  # a hybrid's MLP or MoE layer holds no attention
        attn = 0.0
    if not moe:
        mlp = 1.0 if "mlp" in graphs else _mlp_ops(model, cast, tp_coll, mech)
        return attn + mlp, 0, 0.0
    if "moe" in graphs:
        return attn + 1.0, 0, 0.0
    block = _moe_block_ops(model, precision, cast, tp_coll, (ep, etp), mech)
    router = 1.0 if "moe_router" in graphs else float(HOST_OPS["router"])
    pre: float = HOST_OPS["preprocess"] + (HOST_OPS["collective"] if ep > 1 else 0)
    if "moe_preprocess" in graphs:
        pre = 1.0
    # the token-count sync, and the clamped activation's offset copy (kernels: act_clamp)
    return attn + block + router + pre, 1 + moe_kernels.activation_syncs(model, mech), block


def _gemm_ops(mats: list[Matrix], cast: int) -> float:
    """Host operations of a block's GEMMs: each one, and its input's quantisation."""
    return len(mats) * (HOST_OPS["gemm"] + cast)


def _mamba_ops(cast: int, tp_coll: int, cp: bool) -> float:
    """A Mamba-2 mixer's host operations: norms, in/out projections, the scan kernels, the
    residual, TP collectives and ``MambaContextParallel``'s all-to-alls with CP."""
    ops = HOST_OPS
    a2a = MAMBA_HOST_OPS["cp_a2a"] * ops["collective"] if cp else 0
    in_out_proj = 2 * (ops["gemm"] + cast)
    mixer = 2 * ops["norm"] + in_out_proj + MAMBA_HOST_OPS["scan"]
    return mixer + ops["residual"] + tp_coll + a2a


def _attention_ops(model: ModelSpec, cast: int, tp_coll: int, ring: int, ulysses: int) -> float:
    """The attention block's host operations, with ring steps and Ulysses all-to-alls."""
    ops = HOST_OPS
    norms = 2 if (model.qk_layernorm or model.multi_latent_attention) else 0
    return (
        ops["norm"] * (1 + norms)
        + _gemm_ops(attention_matrices(model), cast)
        + ops["rope"]
        + ops["attention"]
        + ops["residual"]
        + tp_coll
        + ops["ring_step"] * max(ring - 1, 0)
        + (4 * ops["collective"] if ulysses > 1 else 0)
    )


def _mlp_ops(model: ModelSpec, cast: int, tp_coll: int, mech: Mechanisms) -> float:
    """A dense MLP's host operations (an eager activation's extra kernels included)."""
    ops = HOST_OPS
    act = ops["act"] + (EAGER_ACT_EXTRA_OPS if mech.eager_act and model.eager_activation else 0)
    return (
        ops["norm"] + _gemm_ops(mlp_matrices(model, False), cast) + act + ops["residual"] + tp_coll
    )


def _moe_block_ops(
    model: ModelSpec,
    precision: str,
    cast: int,
    tp_coll: int,
    degrees: tuple[int, int],
    mech: Mechanisms,
) -> float:
    """An MoE block's host operations beyond its router and preprocessing: per-expert GEMMs
    and quantisation, padding, the expert-bias loop, the clamped activation, permutation,
    shared experts, the EP / ETP collectives (``degrees`` = (EP, ETP))."""
    ops = HOST_OPS
    ep, etp = degrees
    local = max(model.num_experts // ep, 1)
    mlp_mats = mlp_matrices(model, True)
    experts = [m for m in mlp_mats if m.block == "expert"]
    shared = [m for m in mlp_mats if m.block == "shared"]
    block: float = (
        ops["norm"]
        + ops["residual"]
        + tp_coll
        # kernels: per-tensor scaling needs one amax + cast per expert's split (TE
        # GroupedLinear keeps a quantizer per expert); MXFP8 block scales need no amax;
        # FP8 padding / unpadding of the routed rows
        + len(experts)
        * (local * ops["gemm"] + moe_kernels.quantise_launches(precision, local, mech) * cast)
        + moe_kernels.padding_launches(precision, mech)
        # kernels: the expert-bias loop (TEGroupedMLP._apply_bias), one add per local expert
        + moe_kernels.expert_bias_launches(model, local, mech)
        + moe_kernels.clamp_launches(model, mech)  # kernels: the clamped activation
        + ops["act"]
        + ops["permute"]
    )
    if shared:
        block += _gemm_ops(shared, cast) + ops["act"]
    if ep > 1:
        block += 2 * ops["collective"] + ops["sort"]
    if etp > 1:
        block += 2 * ops["collective"]
    return block


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
    #: the slowest pipeline stage (which ``breakdown`` describes) and the parameters one of its
    #: ranks holds, dense and routed-expert (:mod:`parastrat.estimate.layers`' records, the
    #: same the memory estimate reads)
    stage: int = 0
    stage_params: float = 0.0
    stage_expert_params: float = 0.0
    #: the quantisation recipe priced (``Workload.fp8_recipe``: "current", "delayed",
    #: "blockwise", "mxfp8", "nvfp4"; None for BF16)
    fp8_recipe: str | None = None
    #: a hybrid model: compute seconds per step of the slowest stage's layers by kind
    #: ("mamba", "attention", "mlp", "moe"; "mamba_scan": the part of "mamba" that is the SSD
    #: scan and causal convolution); empty for a GPT
    kinds: dict[str, float] = field(default_factory=dict)

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
            "fp8_recipe": self.fp8_recipe,
            "recompute": self.recompute,
            "model_flops_per_token": self.model_flops_per_token,
            "flops_convention": "model FLOPs = 3 x forward (6 N_active per token + causal "
            "attention counted as half); recompute excluded",
            "notes": list(self.notes),
            "stage": self.stage,
            "stage_params": self.stage_params,
            "stage_expert_params": self.stage_expert_params,
            "kinds": dict(self.kinds),
        }


# ---------------------------------------------------------------------------------------------
# Per-layer costs (cached: the planner asks for the same shapes many times)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerShape:
    """One layer's work on one rank for one micro-batch: ``tokens`` = b s / cp of a
    ``seq_len``-token sequence, split by TP (with sequence parallelism or not), CP, EP and
    ETP."""

    tokens: float
    seq_len: int
    tp: int = 1
    cp: int = 1
    sp: bool = False
    ep: int = 1
    etp: int = 1


@dataclass(frozen=True)
class KernelSetup:
    """How a layer's kernels run: on ``accel``, the linear layers at ``precision`` with its
    quantisation recipe ``fp8_recipe`` (None: the precision's default), flash attention or
    not, with the kernel mechanisms ``mech``."""

    accel: Accelerator
    precision: str
    flash_attention: bool = True
    mech: Mechanisms = field(default_factory=Mechanisms)
    fp8_recipe: str | None = None


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
    #: forward seconds the "selective" recompute mode re-runs in backward
    #: (:attr:`~parastrat.spec.workload.Mechanisms.recompute_modules`, :func:`_selective_fwd`)
    selective: float = 0.0
    #: a hybrid's Mamba layer: seconds (forward + backward) of its SSD scan and causal
    #: convolution, part of ``attn_fwd`` / ``attn_bwd`` (the layer's core)
    scan: float = 0.0

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
    mech: Mechanisms = ALL_MECHANISMS,
    expert_m: float | None = None,
) -> tuple[float, float, float]:
    """(forward s, backward s, fp8-cast elements per micro-batch) of one matrix.

    ``expert_m``: tokens per local expert GEMM on the slowest EP rank (kernels: the
    imbalance mechanism, :func:`parastrat.estimate.moe_kernels.expert_load`)."""
    k_in: float = mat.in_dim
    n_out: float = mat.out_dim
    groups = 1
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
    # kernels: TE GroupedLinear runs one GEMM per local expert over its streams
    streams = kernel_model.GROUPED_STREAMS if (mech.shape and groups > 1) else 0
    # kernels: routed counts are random around their mean (the routed experts' GEMMs only;
    # attention, router and shared-expert GEMMs see every token of the micro-batch)
    rnd = expert_m is not None and mat.block == "expert"
    sh, f4 = mech.shape, mech.nvfp4
    fwd = gemm_time(accel, m, n_out, k_in, prec, groups, prof, streams, rnd, sh, f4)
    bwd = (
        gemm_time(accel, m, k_in, n_out, prec, groups, prof, streams, rnd, sh, f4)  # dgrad
        + gemm_time(accel, k_in, n_out, m, prec, groups, prof, streams, shape=sh, fp4_tile=f4)
    )  # wgrad
    if mech.fp8 and prec in ("fp8", "mxfp8"):  # kernels: Hopper's split accumulation
        bwd *= fp8_overheads.backward_gemm_slowdown(kernel_model.ARCH.get(accel.name, ""))
    cast = groups * m * (k_in + n_out) if prec in QUANTISED else 0.0
    return fwd, bwd, cast


def gemm_sums(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    mats: Iterable[Matrix],
    tokens: float,
    shape: tuple[int, bool, int, int],
    prec: str,
    mech: Mechanisms,
    expert_m: float | None,
    memo: dict[tuple, tuple[float, ...]],
) -> tuple[float, float, float, float, float, float, dict[str, float]]:
    """(forward s, backward s, FP8-cast elements, MLP-block forward s, MLP-block backward s,
    shared-expert s, forward s by matrix name) of ``mats`` for one micro-batch on a rank of
    ``shape`` = (TP, SP, EP, ETP); ``memo`` keeps the matrices outside the routed experts."""
    tp, sp, ep, etp = shape
    g_fwd = g_bwd = cast = 0.0
    mlp_f = mlp_b = shared = 0.0
    fwd_of: dict[str, float] = {}
    for mat in mats:
        key = (mat, tokens, tp, sp, expert_m is not None)  # what a non-expert matrix reads
        times = memo.get(key) if mat.block != "expert" else None
        if times is None:
            times = _matrix_times(
                accel, prof, mat, tokens, tp, sp, ep, etp, model.num_experts, prec, mech, expert_m
            )
            if mat.block != "expert":
                memo[key] = times
        f, b, c = times
        fwd_of[mat.name] = f
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
    return g_fwd, g_bwd, cast, mlp_f, mlp_b, shared, fwd_of


def gemm_precision(kernels: KernelSetup) -> tuple[bool, str]:
    """(whether the device runs the quantised precision, the precision its GEMMs run at):
    a precision the device lacks falls back to BF16."""
    fp8 = kernels.precision in QUANTISED and kernels.accel.supports(kernels.precision)
    return fp8, kernels.precision if fp8 else "bf16"


def routed_load(model: ModelSpec, shape: LayerShape, mech: Mechanisms, moe: bool) -> tuple:
    """(the slowest EP rank's routed tokens, :func:`~.moe_kernels.expert_load`; their count
    per expert for the expert GEMMs, under the ``imbalance`` mechanism) of an MoE layer;
    (None, None) for a layer without routed experts."""
    if not moe:
        return None, None
    load = moe_kernels.expert_load(
        model,
        shape.tokens,
        shape.tp,
        shape.ep,
        shape.etp,
        mech.balance,
        mech.capacity_factor,
        mech.imbalance,
    )
    return load, (load.per_expert if mech.imbalance else None)


def elementwise_times(
    kernels: KernelSetup,
    prof: KernelProfile,
    e_bytes: float,
    cast: tuple[float, str],
    extra_fwd: Iterable[float],
    extra_bwd: Iterable[float],
) -> tuple[float, float]:
    """(forward s, backward s) of a layer's memory-bound kernels: ``e_bytes`` of element-wise
    traffic forward (twice backward), the GEMM inputs' quantisation (``cast`` = (its
    element count, the GEMMs' precision)) and the ``extra`` bytes of each direction."""
    accel = kernels.accel
    cast_b = _cast_bytes(cast[0], cast[1], accel, kernels.mech, kernels.fp8_recipe)
    fwd, bwd = e_bytes + cast_b, 2 * e_bytes + cast_b
    for x in extra_fwd:
        fwd += x
    for x in extra_bwd:
        bwd += x
    return memory_time(accel, fwd, prof), memory_time(accel, bwd, prof)


def _gpt_elementwise(
    model: ModelSpec,
    kernels: KernelSetup,
    prof: KernelProfile,
    moe: bool,
    shape: LayerShape,
    h_local: float,
    load: Any,
    fp8: bool,
    cast: tuple[float, str],
) -> tuple[float, float]:
    """(forward s, backward s) of a GPT layer's memory-bound kernels (:func:`elementwise_times`):
    norms, residuals, RoPE (and QK norms) over ``h_local`` elements a token, the MLP's
    activation or, with routed experts (``load``), the MoE kernels of the slowest rank (``fp8``:
    whether the GEMMs run quantised), and the eager activations."""
    tokens, tp, mech = shape.tokens, shape.tp, kernels.mech
    a, g = model.num_attention_heads, model.query_groups
    elems = 10 * h_local + 2 * (a + g) * model.head_dim / tp  # norms, residuals, RoPE
    if getattr(model, "qk_layernorm", False):
        elems += 2 * (a + g) * model.head_dim / tp
    act = 3 if model.gated_linear_unit else 2
    moe_f = moe_b = 0.0
    if moe and load is not None:  # kernels: MoE memory-bound kernels on the slowest rank
        moe_f, moe_b = moe_kernels.layer_bytes(model, tokens, tp, shape.ep, load, mech, fp8)
    else:
        elems += act * model.ffn_hidden_size / tp
    eager_f, eager_b = _eager_act_bytes(model, moe, tokens, tp, mech)
    return elementwise_times(
        kernels, prof, tokens * elems * ELEM_BYTES, cast, (moe_f, eager_f), (moe_b, eager_b)
    )


def layer_cost(
    model: ModelSpec,
    kernels: KernelSetup,
    moe: bool | str,
    shape: LayerShape,
    matrices: dict[tuple, tuple[float, ...]] | None = None,
) -> LayerCost:
    """Compute time of one layer (dense or MoE) of ``shape`` run as ``kernels`` say
    (uncached: :class:`StepModel` memoises it per workload and switches).  ``matrices``: a
    memo of the times of matrices outside the routed experts, which read no expert degree,
    and of the attention core (only for this model and ``kernels``).  ``moe``: a GPT layer's
    MoE flag, or a hybrid layer's kind
    (:func:`~parastrat.estimate.hybrid_cost.hybrid_layer_cost`)."""
    if isinstance(moe, str):
        return hybrid_cost.hybrid_layer_cost(model, kernels, moe, shape, matrices)
    accel, mech, flash_attention = kernels.accel, kernels.mech, kernels.flash_attention
    tokens, seq_len = shape.tokens, shape.seq_len
    tp, cp, sp, ep, etp = shape.tp, shape.cp, shape.sp, shape.ep, shape.etp
    prof = kernel_profile(accel)
    fp8, prec = gemm_precision(kernels)
    load, expert_m = routed_load(model, shape, mech, moe)
    mats = attention_matrices(model) + mlp_matrices(model, moe)
    memo = {} if matrices is None else matrices
    g_fwd, g_bwd, cast, mlp_f, mlp_b, shared, fwd_of = gemm_sums(
        model, accel, prof, mats, tokens, (tp, sp, ep, etp), prec, mech, expert_m, memo
    )
    core = ("attention", tokens, seq_len, tp, cp, flash_attention)  # what the core reads
    attn = memo.get(core)
    if attn is None:
        attn = memo[core] = _attention_times(
            model, accel, prof, tokens, seq_len, tp, cp, flash_attention, mech.shape
        )
    a_fwd, a_bwd = attn
    h_local = model.hidden_size / tp if sp else model.hidden_size  # SP: norms on the shard
    e_fwd, e_bwd = _gpt_elementwise(
        model, kernels, prof, moe, shape, h_local, load, fp8, (cast, prec)
    )
    rec = layer_record(model, moe, tp, ep, etp)  # the one parameter accounting
    sel = _selective_fwd(model, accel, prof, moe, tokens, (tp, etp), h_local, load, mech, fwd_of)
    sel += a_fwd if "core_attn" in mech.recompute_modules else 0.0
    return LayerCost(
        g_fwd,
        g_bwd,
        a_fwd,
        a_bwd,
        e_fwd,
        e_bwd,
        rec.dense_params,
        rec.expert_params,
        mlp_f,
        mlp_b,
        shared,
        sel,
    )


#: Passes over FC1's output (one read or write of each element) of an eagerly run activation
#: beyond the fused bias-activation kernel's (forward 2, backward 4 in the element count
#: above), for :data:`~parastrat.spec.model.EAGER_ACTIVATIONS`: squared ReLU forward is
#: ``relu`` + ``pow`` (4 passes); backward ``pow_backward`` (``x.pow(1)`` copy, ``* 2``,
#: ``* grad``) and ``threshold_backward`` (10 passes).
EAGER_ACT_EXTRA_PASSES = (2.0, 6.0)
#: Extra host operations per layer forward of an eager activation (two kernels instead of one;
#: the backward follows through ``HOST_BWD_RATIO``).
EAGER_ACT_EXTRA_OPS = 1


def _eager_act_bytes(
    model: ModelSpec, moe: bool, tokens: float, tp: int, mech: Mechanisms
) -> tuple[float, float]:
    """(forward, backward) extra HBM bytes of a dense layer's eagerly run activation
    (mechanism ``eager_act``; MoE experts use Megatron's own grouped activation)."""
    if moe or not (mech.eager_act and model.eager_activation):
        return 0.0, 0.0
    per_pass = tokens * model.ffn_hidden_size / tp * ELEM_BYTES
    fwd, bwd = EAGER_ACT_EXTRA_PASSES
    return fwd * per_pass, bwd * per_pass


#: HBM bytes per element of one norm forward that the ``layernorm`` recompute module re-runs
#: (read the BF16 input, write the BF16 output).
NORM_BYTES = 2 * ELEM_BYTES


def _selective_fwd(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    moe: bool,
    tokens: float,
    tp_etp: tuple[int, int],
    h_norm: float,
    load: moe_kernels.ExpertLoad | None,
    mech: Mechanisms,
    fwd_of: dict[str, float],
) -> float:
    """Forward seconds of one layer and micro-batch that Megatron's selective recompute runs
    again in backward, module by module (``recompute_modules``, Megatron Core 0.16.1
    ``TransformerLayer.__init__`` / ``TEGroupedMLP`` / ``MLASelfAttention``):

    * ``core_attn``: the attention core (Megatron's default; added by the caller);
    * ``layernorm``: norms that are separate modules; Transformer Engine's layer spec fuses the
      input norm into the QKV projection and a dense layer's pre-MLP norm into FC1 (both
      ``IdentityOp``, not recomputed), so only an MoE layer's pre-MLP norm runs again;
    * ``mla_up_proj``: MLA's query and key/value up-projections (and RoPE, not counted);
    * ``mlp``: a dense layer's MLP (Megatron skips MoE layers: ``if not self.is_moe_layer``);
    * ``moe_act``: the routed experts' activation (TEGroupedMLP's output-discarding
      checkpoint), memory-bound, on the slowest EP rank's copies, with a clamped activation's
      eager clamp and concatenation (``act_clamp``).
    """
    mods, (tp, etp) = mech.recompute_modules, tp_etp
    t = 0.0
    if "layernorm" in mods and moe:
        t += memory_time(accel, tokens * h_norm * NORM_BYTES, prof)
    if "mla_up_proj" in mods and model.multi_latent_attention:
        t += fwd_of.get("q_up", 0.0) + fwd_of.get("kv_up", 0.0)
    act = 3 if model.gated_linear_unit else 2
    if "mlp" in mods and not moe:
        t += fwd_of.get("fc1", 0.0) + fwd_of.get("fc2", 0.0)
        t += memory_time(accel, tokens * act * model.ffn_hidden_size / tp * ELEM_BYTES, prof)
    if "moe_act" in mods and moe and load is not None:
        f = model.moe_ffn_hidden_size or model.ffn_hidden_size
        copies = load.slowest if mech.imbalance else load.mean
        clamp = moe_kernels.clamp_bytes(model)[0] if mech.act_clamp else 0.0  # kernels
        t += memory_time(accel, copies * (act * f * ELEM_BYTES + clamp) / etp, prof)
    return t


def _cast_bytes(
    cast: float, prec: str, accel: Accelerator, mech: Mechanisms, fp8_recipe: str | None = None
) -> float:
    """HBM bytes of one direction (half forward: inputs, half backward: output gradients) of
    the FP8 casts of ``cast`` GEMM operand elements (``fp8_recipe``: the workload's)."""
    if prec not in QUANTISED:
        return 0.0
    if mech.fp8:  # kernels: bytes per element of the recipe on this architecture
        per_elem = fp8_overheads.cast_bytes_per_element(
            fp8_overheads.recipe_for(prec, mech.nvfp4, fp8_recipe),
            kernel_model.ARCH.get(accel.name, ""),
        )
        return cast * per_elem / 2
    return cast * FP8_CAST_BYTES.get(prec, 0) / 2


def _attention_times(
    model: ModelSpec,
    accel: Accelerator,
    prof: KernelProfile,
    tokens: float,
    seq_len: int,
    tp: int,
    cp: int,
    flash_attention: bool,
    shape: bool = True,
) -> tuple[float, float]:
    """(forward s, backward s) of the attention core of one layer and micro-batch
    (``shape``: the kernel-shape mechanism, whole key blocks and the head dimension)."""
    # attention core: heads split by TP, keys halved by the causal mask
    core = mean_attention_core_flops_per_token(model, seq_len) * tokens / tp
    if flash_attention:
        d_attn: float = 128
        if shape:  # kernels: whole key blocks, head dimension vs the SFU
            core *= kernel_model.attention_block_ratio(model, seq_len)
            d_attn = kernel_model.attention_head_dim(model)
        return (
            attention_time(accel, core, prof, d_attn, shape=shape),
            attention_time(accel, ATTN_BWD_RATIO * core, prof, d_attn, True, shape),
        )
    # unfused: Q K^T and A V as batched GEMMs over every key (no causal skipping) and the
    # score matrix through HBM (scale-mask-softmax, dropout)
    heads = max(model.num_attention_heads // tp, 1)
    d = model.head_dim
    b_s = tokens / max(seq_len / cp, 1)  # sequences in the micro-batch
    q, keys = seq_len / cp, seq_len
    one = gemm_time(accel, q, keys, d, "bf16", int(heads * b_s), prof, shape=shape)
    a_fwd = 2 * one + memory_time(accel, heads * b_s * q * keys * SCORE_BYTES_FWD, prof)
    a_bwd = 4 * one + memory_time(accel, heads * b_s * q * keys * 2 * SCORE_BYTES_FWD, prof)
    return a_fwd, a_bwd


def head_cost(
    model: ModelSpec,
    accel: Accelerator,
    tokens: float,
    tp: int,
    shape: bool = True,
    fused_ce: bool = True,
) -> float:
    """Seconds (forward + backward) of the output layer and cross-entropy, one micro-batch
    (``shape``: the kernel-shape mechanism; ``fused_ce``: :data:`CE_BYTES_PER_LOGIT`, else
    :data:`CE_UNFUSED_BYTES_PER_LOGIT`)."""
    prof = kernel_profile(accel)
    mat = logits_matrix(model)
    n = mat.out_dim / tp
    t = (
        gemm_time(accel, tokens, n, mat.in_dim, "bf16", 1, prof, shape=shape)
        + gemm_time(accel, tokens, mat.in_dim, n, "bf16", 1, prof, shape=shape)
        + gemm_time(accel, mat.in_dim, n, tokens, "bf16", 1, prof, shape=shape)
    )
    ce = CE_BYTES_PER_LOGIT if fused_ce else CE_UNFUSED_BYTES_PER_LOGIT
    return t + memory_time(accel, tokens * n * ce, prof)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------
def _exposed(t_comm: float, window: float, overlap: bool) -> float:
    """Critical-path part of a collective of ``t_comm`` seconds overlapping ``window``."""
    if not overlap:
        return t_comm
    hidden = min(t_comm, window)
    return t_comm - hidden + OVERLAP_SLOWDOWN * hidden


#: Share of a layer's TP collectives that run asynchronously behind a wgrad GEMM when TP
#: comm overlap (userbuffers) is off: the dgrad reduce-scatter of the two column-parallel
#: matrices (QKV, FC1) with SP, 2 of the 8 per layer; their dgrad all-reduce without SP, 2 of 4
#: (Transformer Engine ``_Linear.backward``, "Overlap dgrad-RS/AR with wgrad").
TP_ASYNC_SHARE = {True: 0.25, False: 0.5}
#: Share of a layer's backward GEMM time that those async collectives hide behind: the wgrad
#: GEMMs (half of the backward) of the column-parallel matrices (about half of them).
TP_ASYNC_WINDOW = 0.25


def _tp_exposed(
    t_tp: float,
    c: LayerCost,
    overlap: bool,
    sp: bool,
    mech: Mechanisms,
    wgrad_delayed: bool = False,
) -> float:
    """Critical-path seconds of a layer's TP collectives (``t_tp``): behind the GEMMs with TP
    comm overlap; else all exposed but the async backward share (mechanism ``tp_async``),
    which has no wgrad GEMM to hide behind when the wgrad is delayed (``delay_wgrad_compute``:
    TE puts the GEMM in its wgrad store and waits for the collective at once)."""
    if overlap:
        return _exposed(t_tp, c.gemm, True)
    if not mech.tp_async or wgrad_delayed:
        return t_tp
    hidden = TP_ASYNC_SHARE[sp] * t_tp
    return t_tp - hidden + _exposed(hidden, TP_ASYNC_WINDOW * c.gemm_bwd, True)


#: Per-micro-batch terms of one layer (and of a stage, summed over its layers).
LAYER_TERMS = (
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


class StepModel:
    """The step-time model of one workload on one cluster with one set of switches.

    Built for one (cluster, :class:`~parastrat.spec.workload.Workload`,
    :class:`~parastrat.spec.workload.Switches`), which it keeps read-only; it owns the memo of
    every per-layer, head, data-parallel and lower-bound cost it prices, keyed by what varies
    inside it (the strategy's degrees and group strides, the micro-batch size, the recompute
    mode).  A cost priced for one model, sequence length, precision, cluster or switch can
    therefore never be reused for another: those belong to another ``StepModel``.

    :meth:`price` is :func:`estimate_step` without the checks (the planner calls it on legal
    candidates); :meth:`lower_bound` is the planner's compute-only bound.
    """

    def __init__(self, cluster: Cluster, workload: Workload, switches: Switches) -> None:
        require_precision(cluster.accel, workload.precision)  # as Transformer Engine checks
        if workload.model.num_moe_experts:  # a flex backend Bridge refuses on this device
            require_dispatcher(cluster.accel, switches.moe_dispatcher)
        self._cluster, self._workload, self._switches = cluster, workload, switches
        self._moe_comm = MoEComm(
            _moe_dispatcher(switches.moe_dispatcher),
            switches.moe_a2a_overlap,
            switches.moe_shared_expert_overlap,
        )
        self._layers: dict[tuple, LayerCost] = {}
        self._kernels = KernelSetup(
            cluster.accel,
            workload.precision,
            switches.flash_attention,
            switches.mechanisms,
            workload.fp8_recipe,
        )
        self._matrices: dict[tuple, tuple[float, ...]] = {}
        self._comm: dict[tuple, float] = {}
        self._heads: dict[tuple, float] = {}
        self._per: dict[tuple, tuple[dict[str, float], LayerCost]] = {}
        self._dp: dict[tuple, tuple[float, float, float]] = {}
        self._layer_bounds: dict[tuple, tuple[float, float]] = {}
        self._kind_bounds: dict[tuple, dict[str, float]] = {}
        self._splits: dict[tuple, tuple[PipelineSplit, tuple[Any, ...]]] = {}
        #: the same switches with TP overlap asked for (the default-off note compares the two)
        self._overlap_asked = replace(switches, tp_comm_overlap=True)

    @property
    def cluster(self) -> Cluster:
        """The cluster every price is for."""
        return self._cluster

    @property
    def workload(self) -> Workload:
        """The workload every price is for (its micro-batch size is the default of
        :meth:`price`)."""
        return self._workload

    @property
    def switches(self) -> Switches:
        """The switches every price is for (their recompute mode is :meth:`price`'s
        default)."""
        return self._switches

    @property
    def mechanisms(self) -> Mechanisms:
        """The kernel mechanisms every price is for (the switches' ``mechanisms``)."""
        return self._switches.mechanisms

    def split(self, s: Strategy) -> PipelineSplit:
        """:func:`pipeline_split` of this workload's model, memoised on the split's fields."""
        return self._split_shapes(s)[0]

    def _split_shapes(self, s: Strategy) -> tuple[PipelineSplit, tuple[Any, ...]]:
        """:meth:`split` and its distinct stage shapes (layers, MoE layers; a hybrid's
        ``(kind, layers)`` pairs), memoised."""
        key = (
            s.pp,
            s.vpp,
            s.first_stage_layers,
            s.last_stage_layers,
            s.account_for_embedding,
            s.account_for_loss,
            s.pipeline_layout,
        )
        hit = self._splits.get(key)
        if hit is None:
            model = self._workload.model
            split = pipeline_split(model, s)
            shapes: tuple[Any, ...]
            if model.is_hybrid:  # the distinct stages' layer counts by kind
                shapes = tuple(set(split.stage_kinds))
            else:
                shapes = tuple(sorted(set(zip(split.stage_layers, split.stage_moe))))
            hit = self._splits[key] = (split, shapes)
        return hit

    # ---- per layer --------------------------------------------------------------------------
    def layer_cost(self, moe: bool | str, tokens: float, s: Strategy) -> LayerCost:
        """:func:`layer_cost` of this workload's model, accelerator, precision and attention
        kernel, memoised on the shape (MoE or not, or a hybrid layer's kind; tokens, TP, CP,
        SP, EP, ETP)."""
        # a layer without routed experts has no expert grid
        ep, etp = (s.ep, s.etp) if moe is True or moe == "moe" else (1, s.tp)
        key = (moe, tokens, s.tp, s.cp, s.sp, ep, etp)
        hit = self._layers.get(key)
        if hit is None:
            wl = self._workload
            shape = LayerShape(tokens, wl.seq_len, s.tp, s.cp, s.sp, ep, etp)
            hit = self._layers[key] = layer_cost(
                wl.model, self._kernels, moe, shape, self._matrices
            )
        return hit

    def head_cost(self, tokens: float, tp: int) -> float:
        """:func:`head_cost` of this workload on this accelerator, memoised."""
        key = (tokens, tp)
        hit = self._heads.get(key)
        if hit is None:
            fused = self._switches.ce_fused(self._cluster.accel.vendor)
            hit = self._heads[key] = head_cost(
                self._workload.model, self._cluster.accel, tokens, tp, self.mechanisms.shape, fused
            )
        return hit

    def tp_overlap(self, s: Strategy, strides: dict[str, int]) -> bool:
        """Whether TP communication hides behind the GEMMs (:meth:`Switches.tp_overlap`)."""
        return self._switches.tp_overlap(
            tp=s.tp,
            sp=s.sp,
            intra=self._cluster.span(s.tp, strides["tp"]) == "intra",
            precision=self._workload.precision,
            vendor=self._cluster.accel.vendor,
        )

    def per_layer(
        self,
        s: Strategy,
        mbs: int,
        mode: str,
        strides: dict[str, int],
        tp_overlap: bool,
        moe_comm: MoEComm,
    ) -> dict[Any, dict[str, float]]:
        """Per-layer, per-micro-batch seconds (dense and MoE: keys False and True; a hybrid's
        layer kinds: keys "mamba", "attention", "mlp", "moe"): compute, recompute, each
        collective and its exposed part, and the host (CPU) time that the GPU waits for
        (:func:`_host_exposed`)."""
        per: dict[Any, dict[str, float]] = {}
        model = self._workload.model
        hybrid = model.is_hybrid
        for moe in _kinds(model) if hybrid else (False, True):
            if moe is True and not model.is_moe:
                continue
            key: tuple = (moe, mbs, s.tp, s.sp, s.ulysses, s.ring, mode, moe_comm, tp_overlap)
            key += (strides["tp"], strides["ulysses"], strides["ring"])
            if moe is True or (hybrid and moe == "moe"):  # only routed experts read EP / ETP
                key += (s.ep, s.etp, strides["ep"], strides["etp"])
            if hybrid and moe == "mamba":  # MambaContextParallel's a2a spans the CP group
                key += (strides["cp"],)
            hit = self._per.get(key)
            if hit is None:
                hit = self._per[key] = self._layer_terms(
                    s, moe, mbs, mode, strides, tp_overlap, moe_comm
                )
            per[moe] = hit[0]
        return per

    def _layer_terms(
        self,
        s: Strategy,
        moe: bool | str,
        mbs: int,
        mode: str,
        strides: dict[str, int],
        tp_overlap: bool,
        moe_comm: MoEComm,
    ) -> tuple[dict[str, float], LayerCost]:
        """One layer kind's terms for :meth:`per_layer` (unmemoised)."""
        model, cluster = self._workload.model, self._cluster
        accel = cluster.accel
        tokens = mbs * self._workload.seq_len / s.cp
        c = self.layer_cost(moe, tokens, s)
        t_tp = self._comm_time(comm.tp_layer(model, s, tokens, moe, strides, self._gather_bytes))
        kind = moe if isinstance(moe, str) else None
        ring, a2a = comm.cp_layer(model, s, tokens, strides, kind)
        t_ring, t_a2a = self._comm_time(ring), self._comm_time(a2a)
        moe = moe is True or moe == "moe"
        t_ep = self._ep_time(s, tokens, strides, moe_comm) if moe else 0.0
        t_ep, t_amax, c = self._kernel_terms(s, moe, tokens, strides, moe_comm, c, t_ep)
        t_tp += t_amax
        rec, rec_comm = _recompute_terms(mode, c, t_tp + t_a2a + t_ep)
        corr_f, corr_b = _cp_correction(model, s, tokens, accel, kind)
        if corr_f:
            c = replace(c, elem_fwd=c.elem_fwd + corr_f, elem_bwd=c.elem_bwd + corr_b)
        # Bridge's set_moe_a2a_overlap_overrides delays every TE wgrad with combined 1F1B
        delayed = moe_comm.a2a_overlap
        tp_exp = _tp_exposed(t_tp - t_amax, c, tp_overlap, s.sp, self.mechanisms, delayed)
        tp_exp += t_amax
        ep_exp = _ep_exposed(c, t_ep, moe_comm, mode) if moe else 0.0
        ring_exp = _exposed(t_ring, c.attn, True)
        host, host_exp = self._host(
            kind or moe, s, mode, c, tp_exp + ring_exp + t_a2a + ep_exp, rec + rec_comm, delayed
        )
        terms = {
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
        if kind == "mamba":
            terms["scan"] = c.scan
        return terms, c

    def _ep_time(
        self, s: Strategy, tokens: float, strides: dict[str, int], moe_comm: MoEComm
    ) -> float:
        """Seconds of an MoE layer's expert-parallel token exchange (:func:`comm.ep_layer`)."""
        model, domain = self._workload.model, self._cluster.scale_up_domain
        return self._comm_time(
            comm.ep_layer(model, s, tokens, strides, moe_comm.dispatcher, domain)
        )

    def _host(
        self,
        moe: bool | str,
        s: Strategy,
        mode: str,
        c: LayerCost,
        exposed_comm: float,
        recompute: float,
        paired: bool = False,
    ) -> tuple[float, float]:
        """:func:`_host_exposed` of one layer kind under this workload and these switches
        (``paired``: combined 1F1B runs this layer)."""
        wl = self._workload
        return _host_exposed(
            wl.model,
            moe,
            s,
            wl.precision,
            mode,
            self._switches.cuda_graphs,
            self._cluster.accel,
            c,
            exposed_comm,
            recompute,
            self.mechanisms,
            wl.fp8_recipe,
            paired,
        )

    @property
    def _gather_bytes(self) -> float:
        """Bytes per element of the TP all-gathers (the ``quantised_gather`` mechanism)."""
        prec = canonical_precision(self._workload.precision)
        if not self.mechanisms.quantised_gather or not self._cluster.accel.supports(prec):
            return comm.ACT_BYTES
        return fp8_overheads.gather_bytes(prec)

    def _comm_time(self, items: list[comm.Collective]) -> float:
        """:func:`comm.total_time` on this cluster, memoised on the collectives (frozen values:
        layers of many strategies share their TP and CP collectives)."""
        key = tuple(items)
        hit = self._comm.get(key)
        if hit is None:
            hit = self._comm[key] = comm.total_time(items, self._cluster)
        return hit

    def _kernel_terms(
        self,
        s: Strategy,
        moe: bool,
        tokens: float,
        strides: dict[str, int],
        moe_comm: MoEComm,
        c: LayerCost,
        t_ep: float,
    ) -> tuple[float, float, LayerCost]:
        """(EP seconds, TP amax all-reduce seconds, layer cost) after the kernel mechanisms of
        one layer: the slowest EP rank sets the all-to-all's pace (imbalance), FP8 current
        scaling's TP amax reductions with SP (fp8), the ``alltoall`` dispatcher's chunk sort
        (moe_kernels)."""
        mech, model, cluster = self.mechanisms, self._workload.model, self._cluster
        prec, accel = self._workload.precision, cluster.accel
        load = (
            moe_kernels.expert_load(
                model, tokens, s.tp, s.ep, s.etp, mech.balance, mech.capacity_factor
            )
            if moe
            else None
        )
        if load is not None and mech.imbalance:  # kernels: the slowest EP rank's pace
            t_ep *= load.factor
        t_amax = 0.0
        if mech.fp8 and accel.supports(prec):  # kernels: TP amax all-reduces (current scaling)
            n_amax = fp8_overheads.amax_reductions(
                self._workload.fp8_recipe or fp8_overheads.RECIPE_OF.get(prec, ""), s.tp, s.sp
            )
            if n_amax:
                t_amax = comm.Collective(
                    "tp", "all_reduce", fp8_overheads.AMAX_BYTES, s.tp, strides["tp"], n_amax
                ).time(cluster)
        sort = mech.moe_kernels and moe_comm.dispatcher == "alltoall" and s.ep > 1
        if load is not None and sort:  # kernels: the alltoall dispatcher's chunk sort / unsort
            copies = load.slowest if mech.imbalance else load.mean
            sort_t = memory_time(accel, copies * moe_kernels.sort_bytes(model))
            c = replace(c, elem_fwd=c.elem_fwd + sort_t, elem_bwd=c.elem_bwd + sort_t)
        return t_ep, t_amax, c

    # ---- the planner's bound -----------------------------------------------------------------
    def lower_bound(self, s: Strategy, micro_batch_size: int) -> float:
        """A lower bound of the step time under any recompute mode (no recompute, no
        PP/DP/optimizer terms): the fullest stage's layers, compute plus exposed TP/CP/EP
        communication and host time, times ``m + (p-1)/v``."""
        return self.lower_bounds(s, (micro_batch_size,))[0]

    def lower_bounds(self, s: Strategy, sizes: Iterable[int]) -> list[float]:
        """:meth:`lower_bound` of ``s`` at each micro-batch size of ``sizes`` (what they share
        is read once)."""
        moe_comm = _effective_moe_comm(s, "none", self._moe_comm, None)
        dp = _dp(s)
        gbs = self._workload.needs_global_batch("the step model")
        bubble = (s.pp - 1) / s.vpp
        # VPP variants and layer splits of one layout share the per-layer times (memoised on
        # the layout); the fullest of the split's distinct stage shapes sets the pace
        layout = (s.tp, s.sp, s.ulysses, s.ring, s.ep, s.etp, s.pp, dp, s.order)
        shapes = self._split_shapes(s)[1]
        out = []
        hybrid = self._workload.model.is_hybrid
        for mbs in sizes:
            key = (*layout, mbs, moe_comm)
            if hybrid:
                per = self._kind_bound(s, mbs, dp, moe_comm, key)
                worst = max(sum(n * per[k] for k, n in counts) for counts in shapes)
            else:
                dense_mb, moe_mb = self._layer_bound(s, mbs, dp, moe_comm, key)
                worst = max((c - n) * dense_mb + n * moe_mb for c, n in shapes)
            out.append(worst * (gbs // (dp * mbs) + bubble))
        return out

    def _kind_bound(
        self, s: Strategy, mbs: int, dp: int, moe_comm: MoEComm, key: tuple
    ) -> dict[str, float]:
        """:meth:`_layer_bound` of a hybrid model: the bound's seconds per layer kind."""
        hit = self._kind_bounds.get(key)
        if hit is None:
            strides = comm.group_strides(s, dp)
            per = self.per_layer(s, mbs, "none", strides, self.tp_overlap(s, strides), moe_comm)
            terms = ("compute", "tp_exposed", "cp_exposed", "ep_exposed", "host_exposed")
            hit = self._kind_bounds[key] = {k: sum(v[t] for t in terms) for k, v in per.items()}
        return hit

    def _layer_bound(
        self, s: Strategy, mbs: int, dp: int, moe_comm: MoEComm, key: tuple
    ) -> tuple[float, float]:
        """(dense, MoE) layer seconds per micro-batch of :meth:`lower_bound`: compute plus
        exposed TP/CP/EP communication and host time, memoised on ``key`` (the layout)."""
        hit = self._layer_bounds.get(key)
        if hit is None:
            strides = comm.group_strides(s, dp)
            per = self.per_layer(s, mbs, "none", strides, self.tp_overlap(s, strides), moe_comm)
            terms = ("compute", "tp_exposed", "cp_exposed", "ep_exposed", "host_exposed")
            dense_mb = sum(per[False][k] for k in terms)
            moe_mb = sum(per[True][k] for k in terms) if True in per else 0.0
            hit = self._layer_bounds[key] = (dense_mb, moe_mb)
        return hit

    # ---- one step ----------------------------------------------------------------------------
    def price(
        self, s: Strategy, *, micro_batch_size: int | None = None, recompute: str | None = None
    ) -> StepReport:
        """One step of strategy ``s`` (its world size set), at ``micro_batch_size`` and
        ``recompute`` (defaults: the workload's and the switches'), without checking the
        strategy against the rules."""
        wl = self._workload
        mbs = micro_batch_size or wl.mbs
        mode = normalize_recompute(recompute) if recompute is not None else self._switches.mode
        if wl.model.is_hybrid:  # what Megatron Core refuses for a hybrid (FP8, full recompute)
            bad = hybrid_workload_violations(wl.model, wl.precision, mode)
            if bad:
                raise StrategyError(bad)
        graphs = self._switches.cuda_graphs
        bad = graph_violations(graphs, graph_run(wl.model, self._switches, mode)) if graphs else []
        if bad:  # what Megatron Core refuses about the CUDA-graph scopes
            raise StrategyError(bad)
        gbs = wl.needs_global_batch("estimate_step")
        dp = _dp(s)
        world = s.world_size if s.world_size is not None else s.min_world_size * dp
        m = gbs // (dp * mbs)
        if m < 1 or gbs % (dp * mbs):
            raise UsageError(
                f"global_batch_size={gbs} is not a multiple of micro_batch_size*dp = {mbs}*{dp}"
            )
        strides = comm.group_strides(s, dp)
        notes: list[str] = []
        split = self.split(s)
        if split.note:
            notes.append(split.note)
        moe_comm = _effective_moe_comm(s, mode, self._moe_comm, notes)
        per = self.per_layer(s, mbs, mode, strides, self.tp_overlap(s, strides), moe_comm)
        stages = self._stages(s, split, per, mbs * wl.seq_len / s.cp)
        step, st, pp = self._slowest(s, m, stages, strides, mbs, moe_comm.a2a_overlap)
        if self._cluster.span(s.tp, strides["tp"]) == "inter" and s.tp > 1:
            notes.append(
                f"TP group of {s.tp} crosses the scale-up domain of "
                f"{self._cluster.scale_up_domain}: every layer's TP collectives use the "
                "scale-out link"
            )
        if self._default_turned_tp_overlap_off(s, strides):
            notes.append(self._tp_overlap_off_note())
        rep = self._report(step, st, _breakdown(m, st, pp), m, world, mode, notes)
        return with_offload(rep, wl, s, self._switches, self._cluster.accel, mbs)

    def _tp_overlap_off_note(self) -> str:
        """Why an unset ``tp_comm_overlap`` was priced off (:meth:`Switches.tp_overlap`)."""
        if self._cluster.accel.vendor in TP_OVERLAP_OFF_VENDORS:
            why = (
                "on Ascend, MindSpeed-LLM keeps its matmul-collective fusion (MC2, "
                "--use-ascend-mc2) off by default and Transformer Engine's userbuffers do not run"
            )
        else:
            why = (
                "Megatron Bridge's NVFP4 recipes set tp_comm_overlap=False (Transformer "
                "Engine's NVFP4 GEMM does not take it)"
            )
        return (
            f"TP communication priced without comm-GEMM overlap: {why}; "
            "Switches(tp_comm_overlap=True) prices it on"
        )

    def _default_turned_tp_overlap_off(self, s: Strategy, strides: dict[str, int]) -> bool:
        """Whether the unset switch's precision default alone prices TP without overlap for
        ``s`` (:meth:`Switches.tp_overlap` read twice: as set, and with the overlap asked for)."""
        sw = self._switches
        if sw.tp_comm_overlap is not None or s.tp == 1 or not s.sp:
            return False
        asked = self._overlap_asked
        intra = self._cluster.span(s.tp, strides["tp"]) == "intra"
        prec, vendor = self._workload.precision, self._cluster.accel.vendor

        def on(switches: Switches) -> bool:
            return switches.tp_overlap(tp=s.tp, sp=s.sp, intra=intra, precision=prec, vendor=vendor)

        return on(asked) and not on(sw)

    def _stages(
        self, s: Strategy, split: PipelineSplit, per: dict[Any, dict[str, float]], tokens: float
    ) -> list[tuple[dict[str, float], Any]]:
        """Per-micro-batch terms and parameter record of each distinct stage: stages that hold
        the same layers and neither end of the pipeline cost the same."""
        model = self._workload.model
        p = s.pp
        head_t = self.head_cost(tokens, s.tp)
        mtp = self._mtp_terms(per, tokens, s.tp, head_t)
        blocks = stage_params(
            model, s.tp, s.ep, s.etp, split.stage_layers, split.stage_moe, split.ends
        )
        signatures: dict[tuple[Any, Any, Any], int] = {}
        kinds = split.stage_kinds if model.is_hybrid else None
        for j in range(p):
            first: Any = kinds[j] if kinds is not None else split.stage_layers[j]
            sig = (first, split.stage_moe[j], split.ends[j])
            signatures.setdefault(sig, j)
        out = []
        n_mtp = model.mtp_num_layers or 1
        for (n_layers, n_moe, ends), j in signatures.items():
            if kinds is not None:  # a hybrid stage: its layers by kind
                st = _kind_terms(per, n_layers)
            else:
                n_dense = n_layers - n_moe
                st = {
                    k: n_dense * per[False][k] + (n_moe * per[True][k] if n_moe else 0.0)
                    for k in LAYER_TERMS
                }
            if ends.loss:
                st["compute"] += head_t
                st["fwd"] += head_t / 3
                st["bwd"] += 2 * head_t / 3
            for k, val in mtp.items():  # the MTP modules where the split puts them
                st[k] += val * ends.mtp / n_mtp
            st["mb"] = (
                st["compute"]
                + st["recompute"]
                + st["tp_exposed"]
                + st["cp_exposed"]
                + st["ep_exposed"]
                + st["host_exposed"]
            )
            st.update(stage=j, dense_params=blocks[j].dense_params)
            st["expert_params"] = blocks[j].expert_params
            out.append((st, blocks[j]))
        return out

    def _mtp_terms(
        self, per: dict[Any, dict[str, float]], tokens: float, tp: int, head_t: float
    ) -> dict[str, float]:
        """Per-micro-batch terms of all the model's MTP modules: one layer of the last
        layer's kind each, the ``[h; h] -> h`` projection and the shared output layer."""
        wl = self._workload
        model = wl.model
        if not model.mtp_num_layers:
            return {}
        last_moe = is_moe_layer(model, model.num_layers - 1)
        terms = {k: model.mtp_num_layers * val for k, val in per[last_moe].items()}
        h = model.hidden_size
        proj = gemm_time(
            self._cluster.accel, tokens, h / tp, 2 * h, wl.precision, shape=self.mechanisms.shape
        )
        terms["compute"] += model.mtp_num_layers * (3 * proj + head_t)
        return terms

    def _slowest(
        self,
        s: Strategy,
        m: int,
        stages: list[tuple[dict[str, float], Any]],
        strides: dict[str, int],
        mbs: int,
        combined: bool = False,
    ) -> tuple[float, dict[str, float], tuple[float, float, float]]:
        """(step seconds, the slowest stage's terms, (bubble, pp, pp exposed)): the pipeline,
        DP synchronisation and optimizer step of each stage; the slowest stage is the step.
        ``combined``: combined 1F1B hides the all-to-alls of paired micro-batches only
        (:func:`unpaired_share`, the ``a2a_pairing`` mechanism)."""
        p, v = s.pp, s.vpp
        tokens = mbs * self._workload.seq_len / s.cp
        p2p = comm.pp_microbatch(self._workload.model, s, tokens, strides)
        t_p2p = p2p.time(self._cluster) if p2p else 0.0
        t_max_mb = max(st["mb"] for st, _ in stages)
        bubble = (p - 1) / v * t_max_mb if p > 1 else 0.0
        pp_total = 2 * v * m * t_p2p
        pp_exposed = 0.0
        if p > 1:
            steady = (OVERLAP_SLOWDOWN if v > 1 else 1.0) * 2 * v * m * t_p2p
            fill = 2 * (p - 1) * t_p2p
            if self.mechanisms.interleave and v > 1:
                # kernels: the first micro-batch crosses every chunk boundary (p v - 1 sends
                # forward and as many backward), each with its host launch
                fill = 2 * (p * v - 1) * (t_p2p + host_op_time(self._cluster.accel))
            pp_exposed = fill + steady
        best: tuple[float, dict[str, float]] | None = None
        for st, block in stages:
            if combined and self.mechanisms.a2a_pairing:  # the warm-up / cool-down run alone
                alone = unpaired_share(p, v, m, int(st["stage"])) * (st["ep"] - st["ep_exposed"])
                st["ep_exposed"] += alone
                st["mb"] += alone
            self._dp_and_optimizer(s, st, block, strides, m)
            st["total"] = m * st["mb"] + bubble + pp_exposed + st["dp_exposed"] + st["optimizer"]
            if best is None or st["total"] > best[0]:
                best = (st["total"], st)
        assert best is not None
        return best[0], best[1], (bubble, pp_total, pp_exposed)

    def _dp_and_optimizer(
        self, s: Strategy, st: dict[str, float], block: Any, strides: dict[str, int], m: int = 1
    ) -> None:
        """Add a stage's DP gradient / parameter synchronisation (total and exposed) and its
        optimizer step to ``st``, from the stage's parameter record (FSDP strategies:
        :meth:`_fsdp`)."""
        dp = _dp(s)
        world = s.world_size if s.world_size is not None else s.min_world_size * dp
        edp = expert_dp(world, s.etp, s.ep, s.pp)
        sw = self._switches
        dense, expert = block.dense_params, block.expert_params
        if s.fsdp is not None:
            self._fsdp(s, st, block, strides, m, (dp, edp))
            return
        key = (dense, expert, dp, edp, s.cp, strides["dp-cp"], strides["edp"])
        hit = self._dp.get(key)
        if hit is None:
            items = comm.dp_step(
                s, dense, expert, dp, edp, strides, sw.distributed_optimizer,
                grad_bytes=comm.grad_wire_bytes(sw.grad_reduce_in_fp32),
            )  # fmt: skip
            hit = self._dp[key] = (
                sum(
                    c.time(self._cluster) for c in items if c.op in ("reduce_scatter", "all_reduce")
                ),
                sum(c.time(self._cluster) for c in items if c.op == "all_gather"),
                self._optimizer_step(dense, expert, dp * s.cp, edp),
            )
        t_rs, t_ag, opt = hit
        local = dense + expert
        if sw.overlap_grad_reduce:
            bucket_frac = min(1.0, max(BUCKET_PARAMS, 1e6 * dp) / local) if local > 0 else 0.0
            exposed = (
                _exposed(t_rs, st["bwd"], True)
                + _exposed(t_ag, st["fwd"], True)
                + bucket_frac * (t_rs + t_ag)
            )
        else:
            exposed = t_rs + t_ag
        st.update(dp=t_rs + t_ag, dp_exposed=exposed, optimizer=opt)

    def _optimizer_step(self, dense: float, expert: float, dense_shard: int, edp: int) -> float:
        """Seconds of a stage's optimizer step (Adam over the local shard, and the FP8 weight
        casts) for its ``dense`` and ``expert`` parameters (part of :meth:`_dp_and_optimizer`'s
        memo: it reads nothing else of the strategy)."""
        sw = self._switches
        local = dense + expert
        shard = dense / dense_shard + expert / max(edp, 1)
        if not sw.distributed_optimizer:
            shard = local
        accel = self._cluster.accel
        opt = memory_time(accel, shard * ADAM_BYTES_PER_PARAM + local * 2, kernel_profile(accel))
        prec = self._workload.precision
        if self.mechanisms.fp8 and prec in QUANTISED and accel.supports(prec):
            # kernels: each weight cast to FP8 once per step (TE caches it across micro-batches)
            opt += memory_time(
                accel,
                local
                * fp8_overheads.weight_cast_bytes_per_param(
                    fp8_overheads.recipe_for(
                        prec, self.mechanisms.nvfp4, self._workload.fp8_recipe
                    ),
                    kernel_model.ARCH.get(accel.name, ""),
                ),
            )
        return opt

    def _fsdp(
        self,
        s: Strategy,
        st: dict[str, float],
        block: Any,
        strides: dict[str, int],
        m: int,
        dps: tuple[int, int],
    ) -> None:
        """A stage's FSDP collectives (:func:`~parastrat.estimate.fsdp.fsdp_layer_comm` per unit
        kind: dense layer, MoE layer, the embedding/output rest; routed experts over the expert
        data-parallel group) and its optimizer step over the local shard.

        Each unit's compute window is the stage's per-layer share of forward and backward;
        ``dp`` is every collective's time, ``dp_exposed`` each unit's exposed share plus the
        largest pass-edge tail once."""
        dp, edp = dps
        sh = Sharding.from_strategy(s, distributed_optimizer=True)
        split = self.split(s)
        j = int(st["stage"])
        n_layers, n_moe = split.stage_layers[j], split.stage_moe[j]
        model, cl = self._workload.model, self._cluster
        sw = self._switches
        sizes = ByteSizes.megatron(
            self._workload.precision, sw.fp8_param_gather, sw.grad_reduce_in_fp32
        )
        dense_g = ShardGroups.of_strategy(s, dp)
        r = sh.dp_replicate
        expert_g = ShardGroups(max(1, edp // r), strides["edp"], r, strides["edp"] * (edp // r))
        kinds: Any = ((n_layers - n_moe, False), (n_moe, True))
        if model.is_hybrid:  # a hybrid stage's units: its layers by kind
            kinds = [(n, k) for k, n in split.stage_kinds[j]]
        units = _fsdp_units(model, s, block, kinds, (dense_g, expert_g))
        per = max(n_layers, 1)
        total = exposed = tail = 0.0
        for n, params, groups in units:
            if params <= 0:
                continue
            t = fsdp_layer_comm(
                params,
                sh,
                groups,
                cl,
                fwd_s=st["fwd"] / per,
                bwd_s=st["bwd"] / per,
                micro_batches=m,
                sizes=sizes,
            )
            total += n * t.total
            exposed += n * t.exposed
            tail = max(tail, t.tail)
        local = block.dense_params + block.expert_params
        shard = block.dense_params / dense_g.shard + block.expert_params / expert_g.shard
        written = shard if sh.shards_params else local  # the bf16 weights the step rewrites
        accel = cl.accel
        opt = memory_time(accel, shard * ADAM_BYTES_PER_PARAM + written * 2, kernel_profile(accel))
        st.update(dp=total, dp_exposed=exposed + tail, optimizer=opt, fsdp_tail=tail)

    def _report(
        self,
        step: float,
        st: dict[str, float],
        breakdown: dict[str, float],
        m: int,
        world: int,
        mode: str,
        notes: list[str],
    ) -> StepReport:
        wl = self._workload
        gbs = wl.needs_global_batch("estimate_step")
        tokens_step = gbs * wl.seq_len
        fpt = model_flops_per_token(wl.model, wl.seq_len)
        tflops = fpt * tokens_step / step / world / 1e12
        return StepReport(
            step_time_s=step,
            tokens_per_s_per_gpu=tokens_step / step / world,
            tflops_per_gpu=tflops,
            mfu=tflops * 1e12 / self._cluster.accel.peak(wl.precision),
            breakdown=breakdown,
            micro_batches=m,
            world_size=world,
            precision=wl.precision,
            fp8_recipe=wl.fp8_recipe,
            recompute=mode,
            model_flops_per_token=fpt,
            notes=tuple(notes),
            stage=int(st["stage"]),
            stage_params=st["dense_params"] + st["expert_params"],
            stage_expert_params=st["expert_params"],
            kinds={k[8:]: m * v for k, v in st.items() if k.startswith("compute:")},
        )


def _breakdown(m: int, st: dict[str, float], pp: tuple[float, float, float]) -> dict[str, float]:
    """Seconds per step of the slowest stage, term by term (see :class:`StepReport`)."""
    bubble, pp_total, pp_exposed = pp
    out = {k: m * st[k] for k in LAYER_TERMS[:10]}
    out.update(
        pp=pp_total,
        pp_exposed=pp_exposed,
        dp=st["dp"],
        dp_exposed=st["dp_exposed"],
        bubble=bubble,
        optimizer=st["optimizer"],
    )
    return out


def estimate_step(
    model: ModelSpec | Workload | str | None,
    strategy: Strategy,
    cluster: Cluster,
    switches: Switches | None = None,
    *,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    precision: str | None = None,
    recompute: str | None = None,
    distributed_optimizer: bool | None = None,
    flash_attention: bool | None = None,
    tp_comm_overlap: bool | None = None,
    overlap_grad_reduce: bool | None = None,
    moe_dispatcher: str | None = None,
    moe_a2a_overlap: bool | None = None,
    moe_shared_expert_overlap: bool | None = None,
    cuda_graphs: Any = None,
    grad_reduce_in_fp32: bool | None = None,
    cross_entropy_fusion: bool | None = None,
    cpu_offload_layers: int | None = None,
    validate: bool = True,
    workload: Workload | None = None,
) -> StepReport:
    """Predict one training step of ``model`` split by ``strategy`` on ``cluster``.

    Typed form: ``estimate_step(workload, strategy, cluster, switches)`` with a
    :class:`~parastrat.spec.workload.Workload` and :class:`~parastrat.spec.workload.Switches`;
    the keyword form (``model, strategy, cluster, seq_len=..., recompute=...``) builds them
    (an omitted keyword takes the default of its field).

    The world is ``cluster.num_devices``: ``strategy.dp`` may be unset (it follows), and a
    ``dp`` (or ``dp_shard x dp_replicate``) that spans another rank count is refused.  With
    ``validate`` (the default) the strategy is checked against the model, world size, sequence
    and batch first (StrategyError listing every broken rule).  The layer split is the
    strategy's own (:func:`pipeline_split`): set ``account_for_embedding``/``account_for_loss``,
    ``first_stage_layers``/``last_stage_layers`` or a ``pipeline_layout`` for layer counts that
    do not divide; the embedding, loss and MTP modules are priced where the split puts them.

    Implementation switches (defaults: today's Megatron Core / Bridge): ``flash_attention``
    (False prices the attention scores as batched GEMMs plus their softmax/dropout traffic),
    ``tp_comm_overlap`` (None: on with SP inside the scale-up domain), ``overlap_grad_reduce``
    (DP reduce-scatter/all-gather behind backward/forward), ``distributed_optimizer``, and the
    MoE switches of :class:`MoEComm`: ``moe_dispatcher`` ("alltoall" or "flex" for
    DeepEP/HybridEP), ``moe_a2a_overlap`` (``overlap_moe_expert_parallel_comm``, combined
    1F1B) and ``moe_shared_expert_overlap`` (all off by default, as in Megatron Core), and
    ``cuda_graphs`` (:func:`cuda_graph_scopes`: None = eager, Megatron Core's default; True =
    the whole iteration; or scopes such as ``"attn,moe_router,moe_preprocess"``), which
    removes the host launch cost of the captured blocks; ``cross_entropy_fusion`` (None: on,
    off on Ascend: :meth:`~parastrat.spec.workload.Switches.ce_fused`); ``cpu_offload_layers``
    (CPU activation offloading, :mod:`parastrat.estimate.offload`).
    """
    wl, sw = resolve(
        model,
        workload,
        switches,
        who="estimate_step",
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
        precision=precision,
        recompute=recompute,
        distributed_optimizer=distributed_optimizer,
        flash_attention=flash_attention,
        tp_comm_overlap=tp_comm_overlap,
        overlap_grad_reduce=overlap_grad_reduce,
        moe_dispatcher=moe_dispatcher,
        moe_a2a_overlap=moe_a2a_overlap,
        moe_shared_expert_overlap=moe_shared_expert_overlap,
        cuda_graphs=cuda_graphs,
        grad_reduce_in_fp32=grad_reduce_in_fp32,
        cross_entropy_fusion=cross_entropy_fusion,
        cpu_offload_layers=cpu_offload_layers,
    )
    gbs = wl.needs_global_batch("estimate_step")
    world = int(cluster.num_devices)  # a strategy's stated dp must fill it ("dp-world")
    if validate:
        validate_strategy(wl.model, strategy, world, wl.seq_len, gbs, wl.mbs)
    if strategy.dp is None:
        strategy = strategy.with_world_size(world)
    return StepModel(cluster, wl, sw).price(strategy)


def moe_comm_options(
    dispatcher: str = "alltoall", a2a_overlap: bool = False, shared_expert_overlap: bool = False
) -> MoEComm:
    """A :class:`MoEComm`, with UsageError naming the choices for an unknown dispatcher."""
    return MoEComm(_moe_dispatcher(dispatcher), bool(a2a_overlap), bool(shared_expert_overlap))


def check_errors(
    model: ModelSpec,
    strategy: Strategy,
    *,
    world_size: int,
    seq_len: int,
    global_batch_size: int,
    micro_batch_size: int | None = None,
    verify_hints: bool = False,
) -> list[Any]:
    """The hard rules ``strategy`` breaks (:meth:`Strategy.check`; ``verify_hints``: a
    pipeline-split rule's hint names only fixes that pass every rule, for a user's one strategy
    rather than the planner's many)."""
    errors = [
        v
        for v in strategy.check(
            model,
            world_size=world_size,
            seq_len=seq_len,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            verify_hints=verify_hints,
        )
        if v.severity == "error"
    ]
    return errors


def graph_run(model: ModelSpec, switches: Switches, recompute: str) -> GraphRun:
    """What :func:`parastrat.graph_rules.graph_violations` reads of a run: the model's MoE
    shape, ``recompute`` and the switches' recompute modules and MoE routing."""
    mech = switches.mechanisms
    return GraphRun(
        moe=model.is_moe,
        all_moe=model.is_moe and model.num_moe_layers == model.num_layers,
        recompute=recompute,
        recompute_modules=mech.recompute_modules,
        dispatcher=switches.moe_dispatcher,
        capacity_factor=mech.capacity_factor,
        router_padding=mech.router_padding,
    )


def validate_strategy(
    model: ModelSpec,
    strategy: Strategy,
    world: int,
    seq_len: int,
    global_batch_size: int,
    micro_batch_size: int,
) -> None:
    """Raise :class:`StrategyError` listing every hard rule ``strategy`` breaks for this
    model, world and batch (:func:`check_errors`)."""
    errors = check_errors(
        model,
        strategy,
        world_size=world,
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
        verify_hints=True,
    )
    if errors:
        raise StrategyError(errors)


def clear_caches() -> None:
    """Empty the per-model memos (:mod:`parastrat.estimate.memo`: host operations, layer
    records, pipeline splits, activations, model FLOPs, the planner's bounds and pipeline
    variants); a :class:`StepModel`'s own memo goes with the object."""
    memo.clear()


def _fsdp_units(
    model: ModelSpec,
    s: Strategy,
    block: Any,
    kinds: Iterable[tuple[int, bool | str]],
    groups: tuple[ShardGroups, ShardGroups],
) -> list[tuple[int, float, ShardGroups]]:
    """A stage's FSDP units as (count, parameters, shard groups): per layer kind of ``kinds``
    ((layers, MoE flag or hybrid kind)) its dense parameters over ``groups[0]`` and its routed
    experts over ``groups[1]``, then what else the stage's ``block`` holds (embedding, output)."""
    dense_g, expert_g = groups
    units: list[tuple[int, float, ShardGroups]] = []
    rest_dense, rest_expert = block.dense_params, block.expert_params
    for n, moe in kinds:
        if n <= 0:
            continue
        if isinstance(moe, str):
            rec = kind_record(model, moe, s.tp, s.ep, s.etp)
        else:
            rec = layer_record(model, moe, s.tp, s.ep, s.etp)
        units += [(n, rec.dense_params, dense_g), (n, rec.expert_params, expert_g)]
        rest_dense -= n * rec.dense_params
        rest_expert -= n * rec.expert_params
    return units + [(1, rest_dense, dense_g), (1, rest_expert, expert_g)]


def _recompute_terms(mode: str, c: LayerCost, fwd_comm: float) -> tuple[float, float]:
    """(recomputed compute s, recomputed collectives s) of one layer and micro-batch:
    ``selective`` re-runs the recipe's modules (``Mechanisms.recompute_modules``), ``full`` the
    whole forward and its collectives (half of ``fwd_comm``, the layer's TP, CP all-to-all and
    EP seconds of both passes)."""
    if mode == "selective":
        return c.selective, 0.0
    if mode == "full":
        return c.fwd, 0.5 * fwd_comm
    return 0.0, 0.0


def _host_exposed(
    model: ModelSpec,
    moe: bool | str,
    s: Strategy,
    prec: str,
    mode: str,
    graphs: frozenset[str],
    accel: Accelerator,
    c: LayerCost,
    exposed_comm: float,
    recompute: float,
    mech: Mechanisms = ALL_MECHANISMS,
    fp8_recipe: str | None = None,
    paired: bool = False,
) -> tuple[float, float]:
    """(host seconds, host seconds the GPU waits for) of one layer and micro-batch.

    The host issues :func:`host_ops` operations forward and :data:`HOST_BWD_RATIO` times as many
    backward (plus the forward again under full recompute, one launch per recomputed module
    under selective), each :func:`host_op_time`. Kernels run asynchronously, so without a sync a
    pass costs the longer of its host and GPU times (the GPU's being its compute, exposed
    communication and recompute; the forward gets a third of the exposed communication, the
    backward two thirds): the GPU waits ``max(0, host - gpu)``. The MoE token-count sync
    (:func:`host_ops`) empties the GPU's queue once per MoE layer forward (again in the
    recomputed forward under full recompute): the GPU then idles while the host issues the
    next operation (one more operation's host time), and the MoE block issued after the sync
    cannot hide its host time behind the layer's attention (:func:`_sync_drain`; ``paired``:
    combined 1F1B issues another micro-batch's backward in the same span).
    """
    fp8 = prec if prec in QUANTISED and accel.supports(prec) else "bf16"
    ops_f, sync = host_ops(model, moe, s, fp8, graphs, mech, fp8_recipe)
    if not ops_f and not sync:
        return 0.0, 0.0
    h_op = host_op_time(accel)
    # selective: about one launch per recomputed module (the core-attention kernel by default)
    n_sel = len(mech.recompute_modules) * HOST_OPS["attention"] if moe != "mamba" else 0
    rec_ops = ops_f if mode == "full" else (n_sel if mode == "selective" else 0.0)
    host_f = ops_f * h_op
    host_b = (HOST_BWD_RATIO * ops_f + rec_ops) * h_op
    gpu_f = c.fwd + exposed_comm / 3
    gpu_b = c.bwd + 2 * exposed_comm / 3 + recompute
    wait_f, wait_b = max(0.0, host_f - gpu_f), max(0.0, host_b - gpu_b)
    if sync and mech.sync_drain:  # kernels: the drained queue after the token-count sync
        post = host_ops(model, moe, s, fp8, graphs, mech, fp8_recipe, True)[0] * h_op
        drain = _sync_drain(post, c, exposed_comm, paired)
        wait_f = max(wait_f, drain)
        if mode == "full":  # the recomputed forward syncs again, inside the backward
            wait_b, sync = max(wait_b, drain), 2 * sync
    return host_f + host_b, wait_f + wait_b + h_op * sync


def _sync_drain(post_host: float, c: LayerCost, exposed_comm: float, paired: bool) -> float:
    """Seconds the GPU waits, per MoE layer forward, for the host to issue the MoE block after
    the token-count sync (mechanism ``sync_drain``).

    The sync returns only when the GPU has run everything queued, so the block after it
    (permutation, dispatch, the per-expert GEMMs and casts, combine: :func:`host_ops` with
    ``after_sync``; ``post_host`` seconds of host time) starts on an empty queue: the GPU
    runs each operation as the host issues it, and only the GPU work issued after the block
    (the next layer's attention) can hide the host's lead from then on.  Of a span "block,
    then attention" with host times ``hA, hB`` and GPU times ``gA, gB`` the GPU finishes no
    earlier than ``hA + gB``, besides ``hA + hB`` and ``gA + gB``: beyond what the
    layer-wide comparison of host and GPU time already charges, the GPU waits ``hA - gA``.
    ``gA`` is the MLP block's forward GEMMs and the forward third of the layer's exposed
    communication (the dispatch and combine); with combined 1F1B (``paired``) another
    micro-batch's layer backward is issued in the same span and adds its GPU time.
    """
    gpu = c.mlp_fwd + exposed_comm / 3 + (c.bwd if paired else 0.0)
    return max(0.0, post_host - gpu)


def _cp_correction(
    model: ModelSpec, s: Strategy, tokens: float, accel: Accelerator, kind: str | None = None
) -> tuple[float, float]:
    """(forward s, backward s) of ring attention's per-step output / gradient merging.

    With ``ring > 1`` every ring step after the first merges a partial attention result into
    FP32 accumulators (:data:`CP_CORRECTION_BYTES_FWD` / ``_BWD`` per element): the output
    has ``tokens * heads / tp * v_dim`` elements on a rank (the same with Ulysses, which
    trades heads for tokens), K/V ``tokens * kv_width``.  Memory-bound, at HBM speed.
    """
    if s.ring <= 1 or kind not in (None, "attention"):  # a hybrid's layers without attention
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
    if shared and moe_comm.dispatcher != "alltoall":
        shared = False
        if notes is not None:
            notes.append(
                "moe_shared_expert_overlap not applied: Megatron Core runs it with the "
                "alltoall dispatcher only"
            )
    if (a2a, shared) == (moe_comm.a2a_overlap, moe_comm.shared_expert_overlap):
        return moe_comm
    return MoEComm(moe_comm.dispatcher, a2a, shared)


def moe_a2a_overlap_ok(s: Strategy, recompute: str) -> bool:
    """Whether Megatron runs combined 1F1B for this strategy: EP > 1, PP = 1 or VPP > 1, and
    no full recompute (``overlap_moe_expert_parallel_comm``'s rules)."""
    return s.ep > 1 and (s.pp == 1 or s.vpp > 1) and recompute != "full"


def unpaired_share(pp: int, vpp: int, m: int, rank: int) -> float:
    """Share of a pipeline rank's chunk forwards (and as many backwards) that combined 1F1B
    cannot pair with another micro-batch's compute: the warm-up forwards of Megatron Core's
    interleaved schedule (0.16.1 ``get_pp_rank_microbatches``: ``2 (p - rank - 1) + (v - 1) p``
    chunk steps, "one extra micro-batch forward step" with ``overlap_moe_expert_parallel_comm``)
    and the cool-down backwards; without a pipeline
    (``combined_1f1b_schedule_for_no_pipelining``) the first forward and the last backward."""
    steps = m * vpp
    warmup = 1 if pp == 1 else 2 * (pp - rank - 1) + (vpp - 1) * pp + 1
    return min(1.0, warmup / steps) if steps else 0.0


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


def _kind_terms(
    per: dict[Any, dict[str, float]], counts: tuple[tuple[str, int], ...]
) -> dict[str, float]:
    """A hybrid stage's per-micro-batch terms: each kind's layer terms times its count, and
    each kind's compute (``compute:<kind>``; ``compute:mamba_scan``: the Mamba layers' SSD
    scan and convolution) for :attr:`StepReport.kinds`."""
    st = {k: sum(n * per[kind][k] for kind, n in counts) for k in LAYER_TERMS}
    for kind, n in counts:
        st["compute:" + kind] = n * per[kind]["compute"]
        if kind == "mamba":
            st["compute:mamba_scan"] = n * per[kind]["scan"]
    return st


def _kinds(model: ModelSpec) -> tuple[Any, ...]:
    """The layer kinds :meth:`StepModel.per_layer` prices: dense and MoE (False, True) for a
    GPT, the kinds a hybrid's pattern holds (:data:`~parastrat.estimate.mamba.HYBRID_KINDS`)."""
    if not model.is_hybrid:
        return (False, True)
    pattern = model.hybrid_override_pattern or ""
    return tuple(k for k, sym in zip(HYBRID_KINDS, "M*-E") if sym in pattern)


def _dp(s: Strategy) -> int:
    """The data-parallel degree of a strategy whose world size is set (1 if it is not)."""
    return s.dp if s.dp is not None else 1
