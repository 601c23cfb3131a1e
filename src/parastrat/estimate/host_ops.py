"""Host (CPU) side of an eager training step: operations issued per layer, and syncs.

Without CUDA graphs every framework operation costs the host one dispatch and one kernel
launch (:func:`parastrat.estimate.efficiency.host_op_time`); when a layer's kernels are short
the GPU waits for the host.  :func:`host_ops` counts the operations one layer issues in its
forward pass (:data:`HOST_OPS` by kind; the backward follows through :data:`HOST_BWD_RATIO`)
and the host-device synchronisations among them (the MoE dispatcher's token counts), as
Megatron Core's Transformer Engine layer spec runs them, with the blocks inside a CUDA-graph
scope counted as one graph launch each.  The step model (:mod:`parastrat.estimate.step`)
prices them and decides how much of them the GPU's own work hides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spec.hardware import QUANTISED
from ..spec.model import ModelSpec
from ..spec.workload import ALL_MECHANISMS, Mechanisms
from . import fp8 as fp8_overheads
from . import moe_kernels
from .flops import Matrix, attention_matrices, mlp_matrices
from .memo import per_model

if TYPE_CHECKING:
    from ..strategy import Strategy

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


#: Extra host operations per layer forward of an eager activation (two kernels instead of one;
#: the backward follows through ``HOST_BWD_RATIO``).
EAGER_ACT_EXTRA_OPS = 1
