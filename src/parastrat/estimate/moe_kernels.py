"""MoE-specific kernels: the expert load imbalance and the memory-bound routing kernels.

Pure functions of the model's MoE shape, the strategy's degrees and the routing regime; the
step model (:mod:`parastrat.estimate.step`) reads them as its switches'
:class:`~parastrat.spec.workload.Mechanisms` say.

**Load imbalance.**  Expert parallelism waits for its slowest rank: the dispatch and combine
all-to-alls end when the fullest receiver has its tokens, and its grouped expert GEMMs and
element-wise kernels run on more tokens than the mean.  Two sources, added in quadrature:

* *Statistical*: with routing that is balanced on average (Megatron's
  ``moe_router_force_load_balancing``, which draws random router logits and which every
  Megatron Bridge performance recipe sets), a rank's routed copies are a sum of independent
  draws, spread ``sqrt(mean)``; the expected maximum over ``G`` ranks of a Gaussian load is
  ``mean + sd sqrt(2 ln G)`` (:func:`.kernel_model.expected_max_factor`).
* *Balancer residual*: a trained router under an auxiliary loss or the bias-based
  (auxiliary-loss-free) balancer leaves a measured max-violation ``MaxVio = max load / mean
  load - 1`` per expert: Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for
  Mixture-of-Experts" (arXiv 2408.15664), Table 1, global-batch MaxVio of the 1B/3B models:
  auxiliary loss 0.72 / 0.52, loss-free 0.04 / 0.04.  We use the 3B figures
  (:data:`MAXVIO`).  A rank holds ``L`` experts whose deviations partly cancel: its
  violation is taken as ``MaxVio / sqrt(L)`` (independent expert deviations).
* A capacity factor ``c`` (token drop) caps the slowest rank at ``c`` times the mean.

**Memory-bound kernels** (:func:`moe_elementwise_bytes`), per routed copy of a token
(``h`` hidden, ``f`` expert FFN width) and per token (``E`` experts), BF16 activations and
FP32 router scores (Megatron's ``moe_router_dtype="fp32"`` in the recipes):

* router: score function (softmax / sigmoid) reads and writes ``E`` FP32 scores, the top-k
  reads them and writes ``k`` probabilities and indices, the auxiliary loss / bias update
  reads them once more: ``16 E`` bytes forward, ``12 E`` backward (score gradients);
* permute (gather each copy: read + write ``2 h`` bytes each) and, with Megatron's
  ``alltoall`` dispatcher and EP > 1, the sort of received chunks by local expert and its
  inverse after the experts (``sort_chunks_by_idxs``: read + write again);
* the activation (gated: read ``2 f``, write ``f``; backward reads the gradient and the
  input, writes the input gradient);
* unpermute with probability scaling (read ``k`` copies and the probabilities, write one
  row); backward: scatter the gradient to ``k`` copies and the probability gradient's dot
  product (read copy and gradient).

**Expert biases** (:func:`expert_bias_bytes`, the ``expert_bias`` mechanism).  With
``add_bias_linear`` (GPT-OSS) Megatron Core's ``TEGroupedMLP`` (0.16.1,
``transformer/moe/experts.py``) builds FC1 with ``skip_bias_add=False`` (the bias rides in
the grouped GEMM's epilogue) but FC2 with ``skip_bias_add=True``, and adds FC2's bias in
``TEGroupedMLP._apply_bias``: a Python loop over the local experts of
``t + b * p`` on ``torch.split`` views of the output and of the routed probabilities, then
``torch.cat`` and ``.to(dtype)``.  Per routed row, BF16 (the probabilities are in the router's
dtype, BF16 unless ``moe_router_dtype`` is set, as in the GPT-OSS recipe): ``b * p`` writes a
row, the add reads two and writes one, the concatenation reads and writes one: ``6 h``
elements forward.  Autograd of ``b * p`` (the add and the concatenation pass views):
``grad * p`` written and reduced over the rows for the bias gradient, ``grad * b`` written and
reduced over the hidden dimension for the probability gradient: ``6 h`` elements backward.
Host: a multiply and an add per local expert and one concatenation forward
(:func:`expert_bias_launches`).

**Clamped activation** (:func:`clamp_bytes`, the ``act_clamp`` mechanism).  A model with a
clamped gated activation (GPT-OSS, ``activation_func_clamp_value=7.0``) runs Megatron Core's
``weighted_bias_quick_geglu_impl`` (0.16.1, ``fusions/fused_bias_geglu.py``), which clamps
outside the compiled kernel: ``chunk`` of FC1's output, ``clamp`` of each half (read and
write ``f`` each) and ``torch.cat`` back (read and write ``2 f``): ``8 f`` elements per routed
copy forward; autograd: each clamp's backward reads the gradient and its input and writes
the masked gradient (``3 f`` each), and the chunk's backward concatenates the two halves
(``4 f``): ``10 f`` backward.  The same function then builds
``torch.tensor(linear_offset, device=input.device)``: a pageable host-to-device copy, which
PyTorch performs with ``memcpy_and_sync`` (``aten/src/ATen/native/cuda/Copy.cu``,
``copy_kernel_cuda`` with ``non_blocking=False``): a second host-device synchronisation per
MoE layer forward, besides the dispatcher's token counts (:func:`activation_syncs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import sqrt

from ..spec.hardware import QUANTISED
from ..spec.model import ModelSpec
from ..spec.workload import Mechanisms
from .kernel_model import expected_max_factor

#: Per-expert max violation of a trained router by balancer (Wang et al. 2024, Table 1,
#: 3B model, global batch); "forced" = random routing, no residual.
MAXVIO = {"forced": 0.0, "aux_loss": 0.52, "loss_free": 0.04}
#: Bytes per BF16 element and per FP32 router score.
BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class ExpertLoad:
    """Routed token copies on the slowest expert-parallel rank, one micro-batch.

    ``mean``: routed copies a rank receives on average (``tokens/tp * topk``, times ETP for
    the tokens its ETP peers gather); ``factor``: slowest rank over the mean; ``per_expert``:
    tokens each local expert GEMM sees on the slowest rank.
    """

    mean: float
    factor: float
    per_expert: float

    @property
    def slowest(self) -> float:
        """Routed copies on the slowest rank."""
        return self.mean * self.factor


def expert_load(
    model: ModelSpec,
    tokens: float,
    tp: int,
    ep: int,
    etp: int,
    balance: str = "forced",
    capacity_factor: float | None = None,
    imbalance: bool = True,
) -> ExpertLoad:
    """:class:`ExpertLoad` of one MoE layer for a micro-batch of ``tokens`` (``b s / cp``)."""
    k = model.moe_router_topk
    local = max(model.num_experts // max(ep, 1), 1)
    mean = tokens / tp * k * etp
    factor = 1.0
    if imbalance and ep > 1:
        stat = expected_max_factor(mean, ep) - 1.0
        resid = MAXVIO.get(balance, 0.0) / sqrt(local)
        factor = 1.0 + sqrt(stat * stat + resid * resid)
        if capacity_factor:
            factor = min(factor, capacity_factor)
    return ExpertLoad(mean, factor, mean * factor / local)


def moe_elementwise_bytes(
    model: ModelSpec, ep: int, dispatcher: str = "alltoall"
) -> tuple[float, float, float, float]:
    """(forward bytes per routed copy, backward bytes per routed copy, forward bytes per
    token, backward bytes per token) of the memory-bound MoE kernels (module docstring)."""
    h = model.hidden_size
    f = model.moe_ffn_hidden_size or model.ffn_hidden_size
    k = max(model.moe_router_topk, 1)
    E = model.num_experts
    gated = model.gated_linear_unit
    permute = 2 * h * BF16  # read + write one row
    sort = sort_bytes(model) if (dispatcher == "alltoall" and ep > 1) else 0.0
    act_f = (3 * f if gated else 2 * f) * BF16
    act_b = (5 * f if gated else 3 * f) * BF16
    unpermute_f = h * BF16 + FP32 + h * BF16 / k  # read a copy and its prob; 1/k of the row
    unpermute_b = h * BF16 + h * BF16 / k + 2 * h * BF16  # scatter + prob-gradient dot
    per_copy_f = permute + sort + act_f + unpermute_f
    per_copy_b = permute + sort + act_b + unpermute_b
    # shared experts' activation (per token, not routed)
    shared = model.moe_shared_expert_intermediate_size
    shared_f = (3 * shared if gated else 2 * shared) * BF16
    shared_b = (5 * shared if gated else 3 * shared) * BF16
    router_f = 4 * E * FP32 + k * (FP32 + 8)
    router_b = 3 * E * FP32
    return per_copy_f, per_copy_b, router_f + shared_f, router_b + shared_b


def has_expert_bias(model: ModelSpec) -> bool:
    """Whether the routed experts carry biases that Megatron adds outside the grouped GEMM."""
    return bool(model.is_moe and model.add_bias_linear)


def expert_bias_bytes(model: ModelSpec) -> float:
    """HBM bytes per routed copy, one direction (the forward and the backward each move this
    much), of ``TEGroupedMLP._apply_bias`` (module docstring): ``6 h`` BF16 elements."""
    return 6 * model.hidden_size * BF16 if has_expert_bias(model) else 0.0


def expert_bias_launches(model: ModelSpec, local: int, mech: Mechanisms) -> int:
    """Host launches of the expert-bias loop per MoE layer forward: a multiply and an add per
    local expert and one concatenation; 0 without expert biases or with the ``expert_bias``
    mechanism off."""
    return 2 * local + 1 if (mech.expert_bias and has_expert_bias(model)) else 0


def clamp_bytes(model: ModelSpec) -> tuple[float, float]:
    """(forward, backward) HBM bytes per routed copy of the clamped activation's eager clamp
    and concatenation (module docstring): ``8 f`` and ``10 f`` BF16 elements; 0 without a
    clamp."""
    if not (model.is_moe and model.activation_clamp is not None and model.gated_linear_unit):
        return 0.0, 0.0
    f = model.moe_ffn_hidden_size or model.ffn_hidden_size
    return 8 * f * BF16, 10 * f * BF16


def activation_syncs(model: ModelSpec, mech: Mechanisms) -> int:
    """Host-device synchronisations per MoE layer forward in the clamped activation (the
    ``torch.tensor(linear_offset, device=...)`` copy): 1 with a clamp and the ``act_clamp``
    mechanism on, else 0."""
    return 1 if (mech.act_clamp and clamp_bytes(model)[0] > 0) else 0


def clamp_launches(model: ModelSpec, mech: Mechanisms) -> int:
    """Host launches of the clamped activation per MoE layer forward: two clamps, the
    concatenation and the offset's copy (4); 0 without a clamp or with ``act_clamp`` off."""
    return 4 * activation_syncs(model, mech)


def sort_bytes(model: ModelSpec) -> float:
    """HBM bytes per routed copy of the ``alltoall`` dispatcher's chunk sort by local expert
    and its inverse (one direction: forward or backward)."""
    return 2 * 2 * model.hidden_size * BF16


def padding_bytes(model: ModelSpec) -> float:
    """HBM bytes per routed copy, one direction, of the FP8/FP4 quantisation padding.

    Megatron Core's ``TEGroupedMLP`` (0.16) pads each expert's tokens to a multiple of 16
    (32 for MXFP8) with TE's ``Fp8Padding`` before FC1 and strips it from FC2's output with
    ``Fp8Unpadding``: each a copy of the routed rows (read + write ``h`` BF16 elements), and
    their backward the inverse copies.  Routed counts are almost never all aligned, so the
    copies run every step, unless ``moe_router_padding_for_quantization`` pads the routing map
    itself (:attr:`Mechanisms.router_padding`)."""
    return 2 * 2 * model.hidden_size * BF16


def lumped_moe_bytes(model: ModelSpec) -> tuple[float, float]:
    """(forward, backward) bytes per token of the MoE element-wise work as the model counted
    it before :func:`moe_elementwise_bytes` (``4 k h + act k f + 4 E`` BF16 elements,
    backward twice): what ``--ablate moe_kernels`` prices."""
    h = model.hidden_size
    f = model.moe_ffn_hidden_size or model.ffn_hidden_size
    k = model.moe_router_topk
    act = 3 if model.gated_linear_unit else 2
    elems = 4 * k * h + act * k * f + 4 * model.num_experts
    elems += act * model.moe_shared_expert_intermediate_size
    return elems * BF16, 2 * elems * BF16


def layer_bytes(
    model: ModelSpec,
    tokens: float,
    tp: int,
    ep: int,
    load: ExpertLoad,
    mech: Mechanisms,
    quantised: bool = False,
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one MoE layer's memory-bound kernels on the slowest
    EP rank for a micro-batch of ``tokens``: counted kernel by kernel (``moe_kernels``
    mechanism; without the ``alltoall`` dispatcher's chunk sort, :func:`sort_bytes`, which the
    step model adds for that dispatcher; with the quantisation padding of FP8 / MXFP8
    experts, :func:`padding_bytes`, when ``quantised``) or lumped (mechanism off); plus the
    expert-bias loop (:func:`expert_bias_bytes`, ``expert_bias`` mechanism) and the clamped
    activation's eager passes (:func:`clamp_bytes`, ``act_clamp`` mechanism)."""
    factor = load.factor if mech.imbalance else 1.0
    local_tokens = tokens / tp
    copies = local_tokens * model.moe_router_topk * factor
    bias = expert_bias_bytes(model) if mech.expert_bias else 0.0  # the per-expert bias loop
    clamp_f, clamp_b = clamp_bytes(model) if mech.act_clamp else (0.0, 0.0)  # eager clamp
    fwd, bwd = _elementwise_bytes(model, local_tokens, ep, factor, mech, quantised)
    return fwd + copies * (bias + clamp_f), bwd + copies * (bias + clamp_b)


def _elementwise_bytes(
    model: ModelSpec,
    local_tokens: float,
    ep: int,
    factor: float,
    mech: Mechanisms,
    quantised: bool,
) -> tuple[float, float]:
    """(forward, backward) bytes of :func:`layer_bytes` without the expert biases."""
    if mech.moe_kernels:
        pc_f, pc_b, pt_f, pt_b = moe_elementwise_bytes(model, ep, "flex")
        if quantised and not mech.router_padding:
            pc_f += padding_bytes(model)
            pc_b += padding_bytes(model)
        copies = local_tokens * model.moe_router_topk * factor
        return copies * pc_f + local_tokens * pt_f, copies * pc_b + local_tokens * pt_b
    lump_f, lump_b = lumped_moe_bytes(model)
    return local_tokens * lump_f * factor, local_tokens * lump_b * factor


def quantise_launches(precision: str, local: int, mech: Mechanisms) -> int:
    """Quantisation launches per grouped expert matrix: one per local expert under per-tensor
    FP8 scaling (TE GroupedLinear keeps a quantizer, hence a scale and an amax, per expert's
    split), one fused pass under MXFP8 (block scales need no amax); 1 with the
    ``moe_kernels`` mechanism off (the previous count)."""
    return local if (mech.moe_kernels and precision == "fp8") else 1


def padding_launches(precision: str, mech: Mechanisms) -> int:
    """Host launches of the FP8 quantisation padding per MoE layer forward (pad before FC1,
    unpad after FC2: :func:`padding_bytes`); 0 without FP8, with router padding, or with the
    ``moe_kernels`` mechanism off."""
    quantised = precision in QUANTISED
    return 2 if (quantised and mech.moe_kernels and not mech.router_padding) else 0
