"""Step-time model: how long one training step of a strategy takes on a cluster, and why.

``estimate_step(model, strategy, cluster, seq_len=..., global_batch_size=...)`` prices one
optimizer step of Megatron-style training:

1. **Compute** per layer and micro-batch (:mod:`parastrat.estimate.layer_cost`): every GEMM
   at the achievable rate its TP/EP-split shape allows (:mod:`parastrat.estimate.efficiency`),
   fused attention at its own rate (always BF16), and the memory-bound kernels (norms,
   activations, residuals, RoPE, MoE permutation, FP8 casts, cross-entropy) at the achievable
   HBM bandwidth.  Backward = dgrad + wgrad GEMMs and 2.5x the attention forward
   (FlashAttention's backward recomputes the scores).  The host operations each layer issues
   when it runs eagerly: :mod:`parastrat.estimate.host_ops`.
2. **Communication** per layer (:mod:`parastrat.estimate.comm`), priced only by
   :meth:`parastrat.Cluster.collective_time`, and the part of it that stays on the critical
   path (:mod:`parastrat.estimate.overlap`): TP with SP overlaps its GEMMs (Megatron's
   ``tp_comm_overlap``) inside one scale-up domain, CP ring exchanges overlap block attention,
   EP all-to-all and Ulysses all-to-all are exposed, DP reduce-scatter / all-gather overlap the
   last backward / first forward micro-batch except the last bucket.  Overlapped communication
   still slows the concurrent kernels by :data:`~parastrat.estimate.overlap.OVERLAP_SLOWDOWN`
   of its duration (it occupies SMs and HBM bandwidth).
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
from ..grid import expert_dp
from ..rules import hybrid_workload_violations
from ..rules.graphs import GraphRun, graph_violations
from ..spec.cluster import require_cluster
from ..spec.hardware import (
    QUANTISED,
    Accelerator,
    canonical_precision,
    require_dispatcher,
    require_graphs,
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
from ..strategy import as_training, require_strategy
from . import comm, hybrid_cost, kernel_model, memo, moe_kernels  # kernels: shape, expert load
from . import fp8 as fp8_overheads  # kernels: FP8 recipe overheads
from .efficiency import gemm_time, host_op_source, host_op_time, memory_time
from .efficiency import profile as kernel_profile
from .flops import (
    is_moe_layer,
    model_flops_per_token,
)
from .fsdp import ByteSizes, ShardGroups, Sharding, fsdp_layer_comm
from .layer_cost import KernelSetup, LayerCost, LayerShape, gpt_layer_cost, head_cost
from .layers import PipelineSplit as PipelineSplit
from .layers import (
    kind_record,
    layer_record,
    pipeline_split,
    stage_params,
)
from .mamba import HYBRID_KINDS
from .offload_step import with_offload
from .overlap import (
    OVERLAP_SLOWDOWN,
    MoEComm,
    effective_moe_comm,
    ep_exposed,
    exposed_time,
    host_exposed,
    tp_exposed,
    unpaired_share,
)
from .train_time import TrainingTime, time_to_train

if TYPE_CHECKING:
    from ..spec.cluster import Cluster
    from ..strategy import Strategy

#: HBM bytes per parameter of one Adam step on the local shard: read fp32 master, grad, m, v
#: (16), write master, m, v (12), write the BF16 copy (2), plus the grad-norm read (4).
ADAM_BYTES_PER_PARAM = 34
#: Megatron DDP bucket size (parameters): max(40M, 1M x dp); the last bucket is not hidden.
BUCKET_PARAMS = 40e6
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
    bubble + optimizer + every *exposed`` equals ``step_time_s``.

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
            v for k, v in self.breakdown.items() if k.endswith("exposed") and k != "host_exposed"
        )

    def time_to_train(self, tokens: float | int | str) -> TrainingTime:
        """Steps, wall clock and device-hours of a run of ``tokens`` tokens (``15e12`` or
        ``"15T"``) at this step (:mod:`parastrat.estimate.train_time`)."""
        return time_to_train(self, tokens)

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
# The model
# ---------------------------------------------------------------------------------------------
def layer_cost(
    model: ModelSpec,
    kernels: KernelSetup,
    moe: bool | str,
    shape: LayerShape,
    matrices: dict[tuple, tuple[float, ...]] | None = None,
) -> LayerCost:
    """Compute time of one layer of ``shape`` run as ``kernels`` say: ``moe`` is a GPT
    layer's MoE flag (:func:`~parastrat.estimate.layer_cost.gpt_layer_cost`) or a hybrid
    layer's kind (:func:`~parastrat.estimate.hybrid_cost.hybrid_layer_cost`)."""
    if isinstance(moe, str):
        return hybrid_cost.hybrid_layer_cost(model, kernels, moe, shape, matrices)
    return gpt_layer_cost(model, kernels, moe, shape, matrices)


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
        require_graphs(cluster.accel, switches.cuda_graphs)
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
        (:func:`host_exposed`)."""
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
        mods = self.mechanisms.recompute_modules
        rec, rec_comm = _recompute_terms(mode, c, t_tp + t_a2a + t_ep, t_ep, mods)
        corr_f, corr_b = _cp_correction(model, s, tokens, accel, kind)
        if corr_f:
            c = replace(c, elem_fwd=c.elem_fwd + corr_f, elem_bwd=c.elem_bwd + corr_b)
        # Bridge's set_moe_a2a_overlap_overrides delays every TE wgrad with combined 1F1B
        delayed = moe_comm.a2a_overlap
        tp_exp = tp_exposed(t_tp - t_amax, c, tp_overlap, s.sp, self.mechanisms, delayed)
        tp_exp += t_amax
        ep_exp = ep_exposed(c, t_ep, moe_comm, mode) if moe else 0.0
        ring_exp = exposed_time(t_ring, c.attn, True)
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
        """:func:`host_exposed` of one layer kind under this workload and these switches
        (``paired``: combined 1F1B runs this layer)."""
        wl = self._workload
        return host_exposed(
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
        model = self._workload.model
        moe_comm = effective_moe_comm(
            s, "none", self._moe_comm, None, model.is_hybrid, model.mtp_num_layers
        )
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
        moe_comm = effective_moe_comm(
            s, mode, self._moe_comm, notes, wl.model.is_hybrid, wl.model.mtp_num_layers
        )
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
        notes += self._pp_crossing_notes(s, mbs * wl.seq_len / s.cp, strides)
        rep = self._report(step, st, _breakdown(m, st, pp), m, world, mode, notes)
        return with_offload(rep, wl, s, self._switches, self._cluster.accel, mbs)

    def _pp_crossing_notes(self, s: Strategy, tokens: float, strides: dict[str, int]) -> list[str]:
        """A note when a pipeline on a multi-node scale-up domain (NVL72) has hops that leave
        its segment (``p2p_hops``): how many, and what a transfer costs on each link."""
        c = self._cluster
        if not self.mechanisms.p2p_hops or c.scale_up_domain <= c.devices_per_node:
            return []
        hops = comm.pipeline_hops(self._workload.model, s, tokens, strides, c)
        if hops is None or not hops.crossing:
            return []
        return [
            f"pipeline: {hops.crossing} of {hops.hops} stage hops (stages {strides['pp']} ranks "
            f"apart) leave the {c.segment}-device NVLink segment and use the scale-out link: "
            f"{hops.inter_s * 1e3:.2f} ms a transfer instead of {hops.intra_s * 1e3:.2f} ms"
        ]

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
        t_p2p, t_hop = self._p2p_times(s, tokens, strides)
        t_max_mb = max(st["mb"] for st, _ in stages)
        bubble = (p - 1) / v * t_max_mb if p > 1 else 0.0
        pp_total = 2 * v * m * t_p2p
        pp_exposed = 0.0
        if p > 1:
            steady = (OVERLAP_SLOWDOWN if v > 1 else 1.0) * 2 * v * m * t_p2p
            fill = 2 * (p - 1) * t_hop
            if self.mechanisms.interleave and v > 1:
                # kernels: the first micro-batch crosses every chunk boundary (p v - 1 sends
                # forward and as many backward), each with its host launch
                fill = 2 * (p * v - 1) * (t_hop + host_op_time(self._cluster.accel))
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

    def _p2p_times(
        self, s: Strategy, tokens: float, strides: dict[str, int]
    ) -> tuple[float, float]:
        """(the slowest stage's, the mean hop's) seconds for one pipeline transfer.  With the
        ``p2p_hops`` mechanism the hops that leave a placement unit
        (:class:`~parastrat.estimate.comm.PipelineHops`) take the scale-out link and the
        others the scale-up link: the slowest stage's exchanges set the steady state, the fill
        crosses every hop in turn (off: every hop priced as a two-rank group ``stride`` apart)."""
        model, c = self._workload.model, self._cluster
        if not self.mechanisms.p2p_hops:
            p2p = comm.pp_microbatch(model, s, tokens, strides)
            t = p2p.time(c) if p2p else 0.0
            return t, t
        hops = comm.pipeline_hops(model, s, tokens, strides, c)
        return (hops.worst_s, hops.mean_s) if hops else (0.0, 0.0)

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
                exposed_time(t_rs, self._bwd_window(st), True)
                + exposed_time(t_ag, st["fwd"], True)
                + bucket_frac * (t_rs + t_ag)
            )
        else:
            exposed = t_rs + t_ag
        st.update(dp=t_rs + t_ag, dp_exposed=exposed, optimizer=opt)

    def _bwd_window(self, st: dict[str, float]) -> float:
        """Seconds of a stage's backward pass per micro-batch that data-parallel collectives
        can hide behind: its backward GEMMs and, with the ``recompute_window`` mechanism, the
        recomputed forward, which activation checkpointing runs inside the backward pass
        (Megatron Core ``CheckpointFunction.backward`` re-runs the layer's forward before its
        gradients; a gradient's reduce-scatter issued after one layer's backward runs under
        the next layer's recompute and backward)."""
        extra = st["recompute"] if self.mechanisms.recompute_window else 0.0
        return st["bwd"] + extra

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
                bwd_s=self._bwd_window(st) / per,
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
        if breakdown.get("host_exposed", 0.0) > HOST_NOTE_SHARE * step:
            notes = [*notes, _host_note(self._cluster.accel, breakdown["host_exposed"] / step)]
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


#: Share of the step the GPU must wait on the host before the report says which host time per
#: operation it assumed (the figure the most host-bound predictions hang on; see
#: docs/accuracy.md, "how much rides on the host constant").
HOST_NOTE_SHARE = 0.05


def _host_note(accel: Accelerator, share: float) -> str:
    """The note of a host-bound step: the wait's share, the host time per operation priced and
    where it comes from, and what would change it."""
    return (
        f"the GPU waits on the host for {share:.0%} of the step, priced at "
        f"{host_op_time(accel) * 1e6:.1f} us per eager operation ({host_op_source(accel)}); "
        "`parastrat bench --kernels` measures it on the machine (host_op_s); wider CUDA-graph "
        "scopes shrink the wait"
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
    cluster = require_cluster(cluster, "estimate_step()")
    world = int(cluster.num_devices)  # a strategy's stated dp must fill it ("dp-world")
    strategy = as_training(require_strategy(strategy, "estimate_step()"))
    if validate:
        validate_strategy(wl.model, strategy, world, wl.seq_len, gbs, wl.mbs)
    if strategy.dp is None:
        strategy = strategy.with_world_size(world)
    return StepModel(cluster, wl, sw).price(strategy)


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
        # Megatron reads moe_layer_freq alone: 1 on a hybrid (its pattern places the MoE
        # layers), so a hybrid MoE refuses an mlp graph whatever its dense layers
        all_moe=model.is_moe and (model.is_hybrid or model.num_moe_layers == model.num_layers),
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


def _recompute_terms(
    mode: str, c: LayerCost, fwd_comm: float, t_ep: float, modules: tuple[str, ...]
) -> tuple[float, float]:
    """(recomputed compute s, recomputed collectives s) of one layer and micro-batch:
    ``selective`` re-runs the recipe's modules (``Mechanisms.recompute_modules``; ``moe``
    also the MoE layer's forward dispatch and combine, half of ``t_ep``, its EP seconds of
    both passes, as Megatron Core's ``MoELayer`` checkpoint covers the token dispatcher),
    ``full`` the whole forward and its collectives (half of ``fwd_comm``, the layer's TP, CP
    all-to-all and EP seconds of both passes)."""
    if mode == "selective":
        return c.selective, (0.5 * t_ep if "moe" in modules else 0.0)
    if mode == "full":
        return c.fwd, 0.5 * fwd_comm
    return 0.0, 0.0


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
