"""What a training run is and how it runs, as three typed values.

* :class:`Workload`: the model, the sequence length, the global and micro batch and the
  precision of the linear layers: what is trained.
* :class:`Switches`: the implementation switches of Megatron Core / Bridge that change what
  a step costs (recompute, flash attention, TP / DP overlap, the distributed optimizer, the
  MoE dispatcher and its overlaps, CUDA graphs, FP8 parameter gathering): how it is trained.
* :class:`SearchSpace`: the planner's pins, choices and bounds of every degree, micro-batch
  and recompute mode, and its memory headroom: where the planner may look.

``estimate_memory``, ``estimate_step``, ``plan``, ``compare``, ``explain`` and the CLI take
these same values (their keyword arguments are conveniences that build them), so a switch the
step model knows is a switch every entry point knows.  All three are frozen, keyword-only
dataclasses (torchtitan's ``ParallelismConfig`` style) checked at construction: a bad value
raises :class:`~parastrat.errors.UsageError` (or :class:`~parastrat.errors.SpecError` for an
unknown model or precision) naming the field and a value that works.

The parsers of the switch vocabularies live here, once: :func:`normalize_recompute`,
:func:`cuda_graph_scopes` and :func:`moe_dispatcher`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePath
from typing import Any

from ..checks import is_count
from ..errors import SpecError, UsageError
from ..rules import FSDP_LEVELS, fsdp_value_violations
from .hardware import FP8_RECIPES, canonical_precision, precision_recipe
from .model import ModelSpec
from .models import get_llm as get_model
from .models import is_preset

#: Activation recompute modes: none, Megatron's selective (core attention) and full (every
#: layer, uniform, one layer per checkpoint).
RECOMPUTE_MODES = ("none", "selective", "full")
#: CUDA-graph capture scopes (Megatron Core ``cuda_graph_scope`` / ``--cuda-graph-modules``,
#: plus ``full_iteration``).  A captured block costs one graph launch instead of its
#: operations; ``moe`` and ``full_iteration`` also remove the MoE token-count sync (they need
#: static, padded expert shapes).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")
#: MoE token dispatchers: Megatron's ``alltoall`` permutes a token into one row per routed
#: expert before the all-to-all, so it sends one copy per expert; ``flex`` (DeepEP / HybridEP)
#: sends it once per destination rank inside a scale-up domain (DeepEP's dispatch layout marks
#: ``is_token_in_rank``; the receiver permutes to its local experts) and once per destination
#: scale-up domain across the scale-out link (RDMA to one rank there, then NVLink forwarding).
DISPATCHERS = ("alltoall", "flex")
#: Backends of the flex dispatcher, accepted as its names (Megatron's
#: ``moe_flex_dispatcher_backend``).
FLEX_BACKENDS = ("deepep", "hybridep")
#: Micro-batch sizes the planner tries unless told otherwise.
MICRO_BATCH_SIZES = (1, 2, 4, 8)
#: Fewest tokens per CP rank worth splitting a sequence for.
MIN_CP_TOKENS = 1024


#: A typical value for each count :func:`whole` checks, for its error's example (else 1).
TYPICAL_COUNTS = {"seq_len": 4096, "global_batch_size": 256, "top_k": 5, "num_devices": 64}


def whole(name: str, value: Any, *, optional: bool = False) -> Any:
    """``value`` when it is a whole number >= 1 (or None with ``optional``); UsageError
    naming ``name`` and a typical value (:data:`TYPICAL_COUNTS`) otherwise
    (:func:`parastrat.checks.is_count`)."""
    if value is None and optional:
        return None
    if not is_count(value):
        example = TYPICAL_COUNTS.get(name, 1)
        raise UsageError(
            f"{name} must be a whole number >= 1, got {value!r} (e.g. {name}={example})"
        )
    return value


def normalize_recompute(recompute: str | None) -> str:
    """ "none" / "selective" / "full" (None, False and "off" mean none; any case); UsageError
    naming the modes otherwise.  The one parser of a recompute mode."""
    mode = "none" if recompute in (None, False) else str(recompute).strip().lower()
    if mode in ("off", "false", "no", ""):
        mode = "none"
    if mode not in RECOMPUTE_MODES:
        raise UsageError(
            f"unknown recompute mode {recompute!r}; use one of {', '.join(RECOMPUTE_MODES)}"
        )
    return mode


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


def moe_dispatcher(name: Any) -> str:
    """ "alltoall" or "flex" (DeepEP / HybridEP name the flex dispatcher); UsageError naming
    the choices otherwise."""
    key = moe_dispatcher_name(name)
    return "flex" if key in FLEX_BACKENDS else key


def moe_dispatcher_name(name: Any) -> str:
    """The dispatcher as named, lower-case: "alltoall", "flex", or a flex backend ("deepep",
    "hybridep": what apply writes as ``moe_flex_dispatcher_backend``); UsageError naming the
    choices otherwise."""
    key = str(name).strip().lower()
    if key not in DISPATCHERS and key not in FLEX_BACKENDS:
        raise UsageError(
            f"unknown MoE dispatcher {name!r}; use one of "
            f"{', '.join(DISPATCHERS)} (deepep/hybridep mean flex)"
        )
    return key


def _flag(name: str, value: Any, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, got {value!r} (e.g. {name}=False)")
    return value


# ---------------------------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------------------------
def language_model(model: Any) -> ModelSpec:
    """``model`` as the ModelSpec a training workload prices: a preset name resolved, a
    Hugging Face ``config.json`` (its path, its folder or the parsed dict) read with
    :meth:`ModelSpec.from_hf_config`; SpecError for anything else, naming ``plan_dit`` for a
    diffusion transformer."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Mapping):
        return ModelSpec.from_hf_config(dict(model))
    if isinstance(model, PurePath):
        return ModelSpec.from_hf_config(str(model))
    if isinstance(model, str) and not is_preset(model):
        if Path(model).exists():
            return ModelSpec.from_hf_config(model)
        if "/" in model or model.endswith(".json"):
            raise SpecError(
                f"{model!r} is no preset and no local file or folder: parastrat reads a Hugging "
                "Face config.json from disk (it never downloads); pass the path of one"
            )
    if isinstance(model, str):
        return get_model(model)
    dit = type(model).__name__ == "DiTSpec"
    raise SpecError(
        f"a workload needs a ModelSpec or a preset name, got {type(model).__name__} "
        + (
            f"{model.name!r}: a diffusion transformer is planned with "
            "parastrat.plan_dit (parastrat plan-dit)"
            if dit
            else "(use parastrat.models.get(name) with a language model's name)"
        )
    )


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What one training step processes.

    ``model``: a :class:`ModelSpec` or a preset name (resolved at construction).
    ``seq_len``: tokens per sequence.  ``global_batch_size``: sequences per optimizer step
    (None: unknown, which only the memory estimate accepts: it then assumes a full pipeline).
    ``micro_batch_size``: sequences per micro-batch (None: 1 when estimating, searched when
    planning).  ``precision``: of the linear layers, "bf16", "fp8", "mxfp8" or "nvfp4" (recipe
    spellings such as "fp8-cs" or "fp4" are accepted and canonicalised).  ``fp8_recipe``: the
    quantisation recipe the step model prices (:data:`~parastrat.spec.hardware.FP8_RECIPES`
    for FP8: "current", Megatron Bridge's FP8-CS, by default; "delayed" for ``fp8-ds`` /
    ``fp8-delayed``; "blockwise"); None: read from the precision's spelling.
    """

    model: ModelSpec
    seq_len: int
    global_batch_size: int | None = None
    micro_batch_size: int | None = None
    precision: str = "bf16"
    fp8_recipe: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", language_model(self.model))
        whole("seq_len", self.seq_len)
        whole("global_batch_size", self.global_batch_size, optional=True)
        whole("micro_batch_size", self.micro_batch_size, optional=True)
        spelled = precision_recipe(self.precision)
        object.__setattr__(self, "precision", canonical_precision(self.precision))
        recipe = self.fp8_recipe if self.fp8_recipe is not None else spelled
        if self.precision == "fp8" and recipe not in FP8_RECIPES:
            raise SpecError(
                f"fp8_recipe={self.fp8_recipe!r} is not an FP8 scaling recipe; use one of "
                f"{', '.join(FP8_RECIPES)} (or a spelling such as precision='fp8-delayed')"
            )
        if self.precision != "fp8" and recipe != spelled:
            raise SpecError(
                f"fp8_recipe={self.fp8_recipe!r} does not apply to precision "
                f"{self.precision!r} (it has {'no' if spelled is None else 'its own'} scaling "
                f"recipe); drop fp8_recipe, or use precision='fp8' with one of "
                f"{', '.join(FP8_RECIPES)}"
            )
        object.__setattr__(self, "fp8_recipe", recipe)

    @property
    def mbs(self) -> int:
        """The micro-batch size an estimate uses (1 when unset)."""
        return self.micro_batch_size or 1

    def with_micro_batch(self, micro_batch_size: int) -> Workload:
        """The same workload at another micro-batch size."""
        return replace(self, micro_batch_size=micro_batch_size)

    def needs_global_batch(self, who: str) -> int:
        """The global batch size, or UsageError saying ``who`` needs one."""
        if self.global_batch_size is None:
            raise UsageError(f"{who} needs global_batch_size (sequences per step), e.g. 1024")
        return self.global_batch_size


# ---------------------------------------------------------------------------------------------
# Switches
# ---------------------------------------------------------------------------------------------
#: Routing regimes the expert load-imbalance mechanism knows (:class:`Mechanisms`).
BALANCE_MODES = ("forced", "aux_loss", "loss_free")
#: Megatron Core's ``recompute_modules`` (``TransformerConfig``, 0.16: its whole allowed set)
#: that the step model prices under the "selective" recompute mode
#: (:attr:`Mechanisms.recompute_modules`): "moe" checkpoints the whole MoE layer (router,
#: dispatch, experts, combine: ``MoELayer.forward``'s ``tensor_parallel.checkpoint``),
#: "shared_experts" the shared experts alone.
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)


@dataclass(frozen=True, kw_only=True)
class Mechanisms:
    """Which kernel-level mechanisms the step model prices (all on by default), and the MoE
    routing options they read.  A field of :class:`Switches`, so every memo of the step model
    (built per ``Switches``) is keyed by it.

    * ``shape``: per-architecture CTA tiles, FP8 K tiles, grouped GEMMs per expert on
      streams, attention by head dimension and block granularity (off: one 128 x 256 tile per
      device, grouped GEMMs at a flat 0.85 of dense, attention at its ``d = 128`` rate);
    * ``imbalance``: the slowest expert-parallel rank's routed tokens set the pace of the
      expert GEMMs, the MoE element-wise kernels and the dispatch/combine;
    * ``moe_kernels``: the memory-bound MoE kernels counted one by one (router score and
      top-k in FP32, permute/unpermute, chunk sort, probability scaling, and their backward)
      instead of a lumped element count;
    * ``fp8``: FP8 casts per recipe (current-scaling amax pass, transposes on Hopper, weight
      casts once per step, MXFP8 scale bytes) and the TP amax reductions;
    * ``nvfp4``: the NVFP4 recipe's own quantisation passes (per-tensor amax pass, a separate
      random-Hadamard column-wise cast for wgrad, 2D weight scales) and FP4 GEMMs at their
      deeper K tile (off: NVFP4 operands cost one flat block-scaled pass and the FP8 K tile;
      :mod:`parastrat.estimate.fp8`);
    * ``interleave``: deep pipeline interleaving lengthens the fill/drain chain by one P2P
      transfer (and its host launches) per chunk boundary;
    * ``p2p_hops``: a pipeline group is not a block of consecutive ranks, so the hops between
      consecutive stages that leave an NVLink node / NVL72 segment take the scale-out link
      while the rest stay on NVLink (:meth:`~parastrat.spec.cluster.Cluster.hop_crossings`):
      the slowest stage's two exchanges (with its next and previous stage, each on its
      hop's link) pace the steady state, the fill crosses each hop once per chunk
      (off: every hop priced alike, as a two-rank group ``stride`` ranks apart);
    * ``recompute_window``: activation checkpointing re-runs a layer's forward inside its
      backward pass, so the data-parallel gradient reduce-scatters (and FSDP's backward
      all-gathers) overlap the recompute as well as the backward GEMMs (off: the backward
      GEMMs alone are the window);
    * ``expert_bias``: routed experts with biases (``add_bias_linear``, GPT-OSS) add their
      FC2 bias outside the grouped GEMM, one probability-weighted add per local expert
      (Megatron Core ``TEGroupedMLP._apply_bias``): its HBM traffic forward and backward and
      its host launches (:mod:`parastrat.estimate.moe_kernels`);
    * ``act_clamp``: a clamped gated activation (GPT-OSS) clamps and re-concatenates FC1's
      output outside the compiled activation kernel and copies its offset to the device,
      a host-device synchronisation (Megatron Core ``weighted_bias_quick_geglu_impl``);
    * ``tp_async``: without TP comm overlap (userbuffers off), Transformer Engine's linear
      backward still launches the column-parallel dgrad's reduce-scatter (SP) or all-reduce
      asynchronously behind the layer's wgrad GEMM (``_Linear.backward``: "Overlap dgrad-RS/AR
      with wgrad"; Megatron Core's ``LinearWithGradAccumulationAndAsyncCommunication`` does
      the same): that share of the TP collectives is hidden (off: every TP collective is
      exposed when TP overlap is off).  Not with combined 1F1B (``moe_a2a_overlap``): Megatron
      Bridge's ``set_moe_a2a_overlap_overrides`` sets ``delay_wgrad_compute`` with it, and TE
      then stores the wgrad GEMM for later and waits for the collective at once;
    * ``eager_act``: an MLP activation Megatron Core cannot fuse (Nemotron-4's squared ReLU,
      ``ModelSpec.eager_activation``) runs as eager PyTorch kernels: ``relu`` and ``pow``
      forward, autograd's ``pow_backward`` (copy, scale, multiply) and ``threshold_backward``
      backward, each a full pass over FC1's output, and their host launches (off: priced as
      the fused bias-activation kernel);
    * ``quantised_gather``: under FP8, MXFP8 or NVFP4 with sequence parallelism, Transformer
      Engine quantises a column-parallel linear's input *before* its all-gather
      (``_Linear`` / ``_LayerNormLinear`` forward: ``gather_along_first_dim(..., quantizer=``
      ``input_quantizer)``) and a row-parallel linear's output gradient before its backward
      all-gather (``grad_output_preprocess``, "FP8 with all-gather"), so the TP all-gathers
      move the quantised bytes (:data:`parastrat.estimate.fp8.OPERAND_BYTES`: 1 B per element,
      MXFP8 + 1/32 B of scales, NVFP4 0.5 + 1/16 B); the reduce-scatters stay BF16 (off: every
      TP collective at 2 B per element);
    * ``a2a_pairing``: combined 1F1B (``moe_a2a_overlap``) hides a micro-batch's all-to-alls
      only under another micro-batch's compute, so the chunk forwards of the pipeline's
      warm-up and the backwards of its cool-down, which run alone, expose theirs (Megatron
      Core's interleaved schedule: ``2 (p - rank - 1) + (v - 1) p + 1`` warm-up steps per
      rank with the overlap; without a pipeline, the first forward and the last backward;
      off: every micro-batch is paired);
    * ``sync_drain``: the host-device synchronisation of an MoE layer's forward (the
      dispatcher copies the tokens-per-expert counts to the host for the all-to-all splits
      and TE GroupedLinear's ``m_splits``) returns once the GPU's queue is empty, so the MoE
      block issued after it runs at the host's pace until the host is ahead again: its host
      time beyond its own GPU time is exposed, whatever the rest of the layer's GPU time
      (off: only the layer's host time as a whole against its GPU time, and one launch per
      sync).

    ``balance`` is the routing regime the imbalance assumes (:data:`BALANCE_MODES`):
    "forced" (``moe_router_force_load_balancing``: random routing, what Megatron Bridge's
    performance recipes set), "aux_loss" or "loss_free" (measured max-violation of the
    balancers, :mod:`parastrat.estimate.moe_kernels`); ``capacity_factor`` (Megatron's
    ``moe_expert_capacity_factor``, token drop) caps the slowest rank at that multiple of
    the mean (None: dropless).  ``router_padding``: Megatron's
    ``moe_router_padding_for_quantization`` (the routing map is padded so expert token counts
    are FP8-aligned; no padding copies), off by default as in Megatron Core.
    ``recompute_modules``: Megatron's ``recompute_modules``, what the "selective" recompute
    mode re-runs in backward (:data:`RECOMPUTE_MODULES`; default Megatron's
    ``["core_attn"]``).  A recipe fact the step and memory models read (like
    ``router_padding``): the time of each module's forward again, and the tensors it frees.
    """

    shape: bool = True
    imbalance: bool = True
    moe_kernels: bool = True
    fp8: bool = True
    nvfp4: bool = True
    interleave: bool = True
    p2p_hops: bool = True
    recompute_window: bool = True
    balance: str = "forced"
    capacity_factor: float | None = None
    router_padding: bool = False
    expert_bias: bool = True
    act_clamp: bool = True
    tp_async: bool = True
    eager_act: bool = True
    a2a_pairing: bool = True
    quantised_gather: bool = True
    sync_drain: bool = True
    recompute_modules: tuple[str, ...] = ("core_attn",)

    def __post_init__(self) -> None:
        for name in (*self.switches, "router_padding"):
            _flag(name, getattr(self, name))
        mods = self.recompute_modules
        if isinstance(mods, str) or not isinstance(mods, Iterable):
            raise UsageError(
                f"recompute_modules must be a collection of module names, got {mods!r} "
                "(e.g. ('core_attn',))"
            )
        bad = sorted(set(mods) - set(RECOMPUTE_MODULES))
        if bad:
            raise UsageError(
                f"unknown or unpriced recompute module(s) {', '.join(map(str, bad))}; use any "
                f"of {', '.join(RECOMPUTE_MODULES)}"
            )
        ordered = tuple(m for m in RECOMPUTE_MODULES if m in set(mods))
        object.__setattr__(self, "recompute_modules", ordered)
        if self.balance not in BALANCE_MODES:
            raise UsageError(
                f"unknown balance {self.balance!r}; use one of {', '.join(BALANCE_MODES)}"
            )
        cf = self.capacity_factor
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float))):
            raise UsageError(f"capacity_factor must be a number >= 1 or None, got {cf!r}")
        if cf is not None and not cf >= 1.0:
            raise UsageError(f"capacity_factor must be >= 1 (or None for dropless), got {cf!r}")

    @property
    def switches(self) -> tuple[str, ...]:
        """Names of the mechanism switches (what ``--ablate`` accepts)."""
        return MECHANISM_SWITCHES

    def ablate(self, text: str | None) -> Mechanisms:
        """These mechanisms with the comma-separated ones of ``text`` switched off (e.g.
        ``"shape,fp8"``; "" or None: unchanged; "all": every switch off); UsageError naming
        the switches for an unknown name."""
        if not text:
            return self
        names = {t.strip().lower().replace("-", "_") for t in text.split(",") if t.strip()}
        if names == {"all"}:
            names = set(MECHANISM_SWITCHES)
        bad = sorted(names - set(MECHANISM_SWITCHES))
        if bad:
            raise UsageError(
                f"unknown mechanism(s) {', '.join(bad)} to ablate; use any of "
                f"{', '.join(MECHANISM_SWITCHES)} or 'all'"
            )
        return replace(self, **{n: False for n in names})  # type: ignore[arg-type]


#: The mechanism switches of :class:`Mechanisms` (each can be ablated).
MECHANISM_SWITCHES = (
    "shape",
    "imbalance",
    "moe_kernels",
    "fp8",
    "nvfp4",
    "interleave",
    "p2p_hops",
    "recompute_window",
    "expert_bias",
    "act_clamp",
    "tp_async",
    "eager_act",
    "a2a_pairing",
    "quantised_gather",
    "sync_drain",
)


#: Every kernel mechanism on (the default of the cost functions that take ``mech``).
ALL_MECHANISMS = Mechanisms()


def parse_ablation(text: str | None, base: Mechanisms | None = None) -> Mechanisms:
    """``base`` (default: everything on) with the mechanisms named in ``text`` switched off
    (:meth:`Mechanisms.ablate`)."""
    return (base or Mechanisms()).ablate(text)


#: Precisions at which an unset ``tp_comm_overlap`` means off.  NVFP4: every Megatron Bridge
#: NVFP4 performance recipe sets ``comm_overlap.tp_comm_overlap = False`` (Llama 3 / 3.1 on
#: B200, B300, GB200, GB300: ``scripts/performance/configs/llama/llama3_llm_pretrain.py`` and
#: ``llama31_llm_pretrain.py``, ``False if precision == "nvfp4"``; Qwen3 NVFP4 presets,
#: Megatron Bridge PR #4632), because Transformer Engine's NVFP4 forward GEMM does not take
#: the userbuffers comm-GEMM overlap (it asserts ``ub is None``; same PR).
TP_OVERLAP_OFF_BY_DEFAULT = frozenset({"nvfp4"})
#: Accelerator vendors on which an unset ``tp_comm_overlap`` means off.  Huawei: Megatron's
#: ``--tp-comm-overlap`` is Transformer Engine's userbuffers (CUDA only), and the Ascend
#: replacement, MC2 (matmul fused with the all-gather / reduce-scatter, ``--use-ascend-mc2``),
#: is off by default in MindSpeed-LLM ("MindSpeed-LLM 中 MC2 功能默认关闭": its
#: ``validate_args_decorator`` sets ``args.use_ascend_mc2 = False``;
#: ``docs/zh/pytorch/features/mcore/mc2.md``) and not supported for MoE layers' MLPs.  The
#: backward's asynchronous input-gradient collective behind the weight-gradient GEMM
#: (Megatron's own linear layers) is priced either way (the ``tp_async`` mechanism).
TP_OVERLAP_OFF_VENDORS = frozenset({"huawei"})
#: Accelerator vendors on which an unset ``cross_entropy_fusion`` means off.  Megatron Bridge's
#: ``GPTModelProvider`` defaults ``cross_entropy_loss_fusion`` to True (and its pretraining
#: recipes set it); Megatron Core's ``TransformerConfig`` and Megatron-LM's
#: ``--cross-entropy-loss-fusion`` default to off, and MindSpeed-LLM, which takes Megatron-LM's
#: arguments, leaves it off in its example scripts (e.g. ``pretrain_qwen15_0point5b_ptd.sh``).
CE_FUSION_OFF_VENDORS = frozenset({"huawei"})


@dataclass(frozen=True, kw_only=True)
class Switches:
    """The implementation switches that change a step's memory or time (Megatron Core / Bridge
    defaults).

    ``recompute``: "none", "selective" (Megatron's core-attention recompute) or "full" (None:
    selective when estimating, every mode when planning).  ``flash_attention``: fused
    attention (False: scores through HBM, batched GEMMs).  ``tp_comm_overlap``: TP
    collectives behind the GEMMs (None: on with SP inside the scale-up domain, off at NVFP4:
    :meth:`tp_overlap`).
    ``overlap_grad_reduce``: DP reduce-scatter / all-gather behind backward / forward.
    ``distributed_optimizer``: optimizer state sharded over data parallelism.
    ``moe_dispatcher``: "alltoall", "flex", or the flex backend by name ("deepep",
    "hybridep", kept as given; the step model prices both as flex).  ``moe_a2a_overlap``:
    ``overlap_moe_expert_parallel_comm`` (combined 1F1B).  ``moe_shared_expert_overlap``: shared
    experts during dispatch / combine.  ``cuda_graphs``: captured scopes
    (:func:`cuda_graph_scopes`; None = eager).  ``fp8_param_gather``: primary linear weights
    kept in FP8 (None: Megatron Bridge's FP8 recipes, which set it).  ``grad_reduce_in_fp32``:
    the data-parallel gradient buffer, and its reduce-scatter, in FP32 instead of BF16
    (Megatron Core's ``DistributedDataParallelConfig`` default False, as Megatron-LM's
    ``--accumulate-allreduce-grads-in-fp32`` and every Megatron Bridge performance recipe
    (``set_llama31_common_configs``, ``set_deepseek_v3_common_configs``, ...); Bridge's
    ``bf16_mixed`` and its standard recipes set True; ``apply`` writes the value priced).
    ``cross_entropy_fusion``: the vocabulary-parallel cross-entropy as one fused pass
    (Megatron's ``cross_entropy_loss_fusion``; None: :meth:`ce_fused`).
    ``cpu_offload_layers``: Megatron's CPU activation offloading (``cpu_offloading`` with
    ``cpu_offloading_num_layers``): the saved activations of that many transformer layers go to
    host memory in forward and come back in backward (0 = off; it needs pp = 1 and no
    recompute, so an unset ``recompute`` means "none" with it:
    :mod:`parastrat.estimate.offload`).  ``mechanisms``: the
    cost model's kernel-level mechanisms and MoE routing options (:class:`Mechanisms`; a
    typed value only, not a keyword of the conveniences).
    """

    recompute: str | None = None
    flash_attention: bool = True
    tp_comm_overlap: bool | None = None
    overlap_grad_reduce: bool = True
    distributed_optimizer: bool = True
    moe_dispatcher: str = "alltoall"
    moe_a2a_overlap: bool = False
    moe_shared_expert_overlap: bool = False
    cuda_graphs: frozenset[str] = field(default_factory=frozenset)
    fp8_param_gather: bool | None = None
    grad_reduce_in_fp32: bool = False
    cross_entropy_fusion: bool | None = None
    mechanisms: Mechanisms = field(default_factory=Mechanisms)
    cpu_offload_layers: int = 0

    def __post_init__(self) -> None:
        if self.recompute is not None:
            object.__setattr__(self, "recompute", normalize_recompute(self.recompute))
        for name in (
            "flash_attention",
            "overlap_grad_reduce",
            "distributed_optimizer",
            "moe_a2a_overlap",
            "moe_shared_expert_overlap",
            "grad_reduce_in_fp32",
        ):
            _flag(name, getattr(self, name))
        _flag("tp_comm_overlap", self.tp_comm_overlap, optional=True)
        _flag("fp8_param_gather", self.fp8_param_gather, optional=True)
        _flag("cross_entropy_fusion", self.cross_entropy_fusion, optional=True)
        n = self.cpu_offload_layers
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UsageError(
                f"cpu_offload_layers must be a whole number of layers >= 0, got {n!r} "
                "(e.g. cpu_offload_layers=20; 0 turns CPU activation offloading off)"
            )
        # the backend's name is kept (apply writes the backend priced); the step model reads
        # the dispatcher through moe_dispatcher(), to which both backends are "flex"
        object.__setattr__(self, "moe_dispatcher", moe_dispatcher_name(self.moe_dispatcher))
        object.__setattr__(self, "cuda_graphs", cuda_graph_scopes(self.cuda_graphs))
        if not isinstance(self.mechanisms, Mechanisms):
            raise UsageError(
                f"mechanisms must be a Mechanisms, got {type(self.mechanisms).__name__} "
                "(e.g. Mechanisms(shape=False) or parse_ablation('shape'))"
            )

    def tp_overlap(
        self, *, tp: int, sp: bool, intra: bool, precision: str, vendor: str = "nvidia"
    ) -> bool:
        """Whether TP communication runs behind the GEMMs: ``tp_comm_overlap`` as set, or when
        unset (None) on with SP for a TP group inside the scale-up domain, except at the
        precisions of :data:`TP_OVERLAP_OFF_BY_DEFAULT` and on the accelerator vendors of
        :data:`TP_OVERLAP_OFF_VENDORS` (the step model prices it and ``apply`` writes it from
        this one rule)."""
        on = sp and tp > 1 and intra
        if self.tp_comm_overlap is None:
            return (
                on
                and canonical_precision(precision) not in TP_OVERLAP_OFF_BY_DEFAULT
                and vendor not in TP_OVERLAP_OFF_VENDORS
            )
        return on and self.tp_comm_overlap

    def ce_fused(self, vendor: str = "nvidia") -> bool:
        """Whether the loss runs Megatron's fused vocabulary-parallel cross-entropy:
        ``cross_entropy_fusion`` as set, or when unset on, except on the accelerator vendors
        of :data:`CE_FUSION_OFF_VENDORS`."""
        if self.cross_entropy_fusion is None:
            return vendor not in CE_FUSION_OFF_VENDORS
        return self.cross_entropy_fusion

    @property
    def mode(self) -> str:
        """The recompute mode an estimate uses (selective when unset; "none" when unset with
        CPU activation offloading, which Megatron refuses with any recompute)."""
        if self.recompute is None and self.cpu_offload_layers:
            return "none"
        return self.recompute or "selective"

    def with_recompute(self, recompute: str) -> Switches:
        """The same switches with another recompute mode."""
        return replace(self, recompute=recompute)

    def to_kwargs(self) -> dict[str, Any]:
        """Every switch as an ``estimate_step`` keyword argument (JSON-ready; the cost
        model's :class:`Mechanisms` are not a keyword and are left out)."""
        out = {name: getattr(self, name) for name in SWITCH_FIELDS}
        out["cuda_graphs"] = sorted(self.cuda_graphs) or None
        return out


#: Fields of :class:`Switches` that are keyword names every entry point accepts (all but
#: ``mechanisms``: the cost model's own switches, for its ablation, set through a
#: ``Switches`` value).
SWITCH_FIELDS = tuple(f.name for f in fields(Switches) if f.name != "mechanisms")
#: Fields of :class:`Workload`.
WORKLOAD_FIELDS = tuple(f.name for f in fields(Workload))


# ---------------------------------------------------------------------------------------------
# Search space
# ---------------------------------------------------------------------------------------------
#: Degrees the planner enumerates (each may be pinned, given as choices, or bounded).
DEGREES = ("tp", "pp", "vpp", "cp", "ep", "etp")


def _choices(name: str, value: Any) -> tuple[int, ...] | None:
    """None, or a pin / collection of whole numbers as a sorted tuple."""
    if value is None:
        return None
    values = [value] if isinstance(value, int) or not hasattr(value, "__iter__") else list(value)
    if not values or not all(is_count(v) for v in values):
        raise UsageError(
            f"{name}={value!r} must be a whole number >= 1 or a non-empty collection of "
            f"them, e.g. {name}=2"
        )
    return tuple(sorted(set(values)))


def _modes(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    modes = {normalize_recompute(r) for r in items}
    if not modes:
        raise UsageError(f"recompute={value!r} names no mode; use any of {RECOMPUTE_MODES}")
    return tuple(m for m in RECOMPUTE_MODES if m in modes)


#: What ``fsdp="auto"`` searches: no sharding beside gradient and full sharding (``no_shard``
#: is today's DDP and ``optim`` the distributed optimizer, which every candidate already has).
FSDP_AUTO = (None, "optim_grads", "optim_grads_params")


def _fsdp_levels(value: Any) -> tuple[str | None, ...] | None:
    """None (FSDP off), or the sharding levels to try: ``"auto"``, ``"off"``, one level or a
    collection of levels (``None`` / ``"no_shard"`` in it: also the unsharded strategies)."""
    if value is None or value == "off":
        return None
    if value == "auto":
        return FSDP_AUTO
    items = [value] if isinstance(value, str) else list(value)
    levels = {None if v in (None, "no_shard", "off") else v for v in items}
    for v in levels:
        for bad in fsdp_value_violations(v):
            raise UsageError(f"fsdp: {bad.message}; {bad.hint}, 'auto' or 'off'")
    if levels <= {None}:
        return None
    return tuple(lv for lv in (None, *FSDP_LEVELS[1:]) if lv in levels)


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """Where the planner looks: pins or choices, bounds, and the memory headroom.

    ``tp`` ... ``etp``, ``ulysses``, ``micro_batch_size``: a pin (``tp=4``) or choices
    (``tp=(4, 8)``), stored as sorted tuples (None: the planner's defaults).  ``recompute``:
    the modes tried (None: all of :data:`RECOMPUTE_MODES`).  ``max_*``: upper bounds.
    ``headroom``: the memory margin passed to :meth:`MemoryReport.fits` (None: its default).
    ``min_cp_tokens``: fewest tokens per CP rank worth splitting a sequence for.
    ``fsdp``: the data-parallel sharding levels tried beside PP/TP/CP/EP (None, the default:
    off, today's strategies only; ``"auto"``: :data:`FSDP_AUTO`; a level or levels, with None
    meaning the unsharded strategies too), each as plain FSDP and as HSDP (``docs/fsdp.md``).
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    ulysses: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_vpp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    max_etp: int | None = None
    headroom: float | None = None
    min_cp_tokens: int = MIN_CP_TOKENS
    fsdp: tuple[str | None, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsdp", _fsdp_levels(self.fsdp))
        for name in (*DEGREES, "ulysses", "micro_batch_size"):
            object.__setattr__(self, name, _choices(name, getattr(self, name)))
        for name in DEGREES:
            whole(f"max_{name}", getattr(self, f"max_{name}"), optional=True)
            pins, upper = getattr(self, name), getattr(self, f"max_{name}")
            if pins is not None and upper is not None and min(pins) > upper:
                raise UsageError(
                    f"{name}={'/'.join(map(str, pins))} is above max_{name}={upper}: no "
                    f"strategy can have both; drop one, or pin {name} <= {upper}"
                )
        object.__setattr__(self, "recompute", _modes(self.recompute))
        h = self.headroom
        if h is not None and (isinstance(h, bool) or not isinstance(h, (int, float))):
            raise UsageError(f"headroom must be a fraction in [0, 1), got {h!r}, e.g. 0.1")
        if h is not None and not 0 <= h < 1:
            raise UsageError(f"headroom must be a fraction in [0, 1), got {h!r}, e.g. 0.1")
        whole("min_cp_tokens", self.min_cp_tokens)

    def options(self, name: str, default: Iterable[int]) -> list[int]:
        """Allowed values of one degree: the pin / choices or ``default``, below its bound."""
        pin = getattr(self, name)
        vals = list(default) if pin is None else list(pin)
        upper = getattr(self, f"max_{name}", None)
        if upper is not None:
            vals = [v for v in vals if v <= upper]
        return sorted(set(vals))

    @property
    def modes(self) -> list[str]:
        """Recompute modes to try, cheapest in memory last (none, selective, full)."""
        return list(self.recompute or RECOMPUTE_MODES)

    @property
    def micro_batch_sizes(self) -> list[int]:
        """Micro-batch sizes to try."""
        return list(self.micro_batch_size or MICRO_BATCH_SIZES)


#: Fields of :class:`SearchSpace`.
SEARCH_FIELDS = tuple(f.name for f in fields(SearchSpace))


def split_options(
    workload: Workload | None,
    switches: Switches | None,
    options: dict[str, Any],
    *,
    who: str,
    model: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(workload keywords, switch keywords) from a keyword-convenience call's ``options``
    (None values dropped), refusing a keyword that repeats a typed value also passed."""
    given = {k: v for k, v in options.items() if v is not None}
    wl = {k: given.pop(k) for k in WORKLOAD_FIELDS if k in given}
    sw = {k: given.pop(k) for k in SWITCH_FIELDS if k in given}
    if given:
        raise UsageError(f"{who}: unknown argument(s) {', '.join(sorted(given))}")
    if workload is not None and (wl or model is not None):
        raise UsageError(
            f"{who}: give the workload either as a Workload or as keywords, not both "
            f"({', '.join(sorted(wl)) or 'model'} given with workload=)"
        )
    if switches is not None and sw:
        raise UsageError(
            f"{who}: give the switches either as Switches or as keywords, not both "
            f"({', '.join(sorted(sw))} given with switches=)"
        )
    return wl, sw


def resolve(
    model: Any,
    workload: Workload | None,
    switches: Switches | None,
    *,
    who: str,
    **options: Any,
) -> tuple[Workload, Switches]:
    """The typed values of a keyword-convenience call: ``workload`` / ``switches`` as given,
    or built from ``model`` and the keyword ``options`` (None means "not given")."""
    if isinstance(model, Workload):
        model, workload = None, _only_one(workload, model, who)
    wl, sw = split_options(workload, switches, options, who=who, model=model)
    if workload is None:
        if model is not None:
            language_model(model)  # a DiT is told where it belongs before anything else
        if "seq_len" not in wl:
            raise UsageError(f"{who} needs seq_len (tokens per sequence), e.g. seq_len=4096")
        workload = Workload(model=model, **wl)
    return workload, switches if switches is not None else _switches(sw)


#: Switches built from keywords, by their values (frozen, so one instance serves every call).
_SWITCHES: dict[tuple, Switches] = {}


def _switches(given: dict[str, Any]) -> Switches:
    """``Switches(**given)``, shared between calls with the same (hashable) values."""
    try:
        # the type too: 0 == False would otherwise find a False's instance and skip the check
        key = tuple((k, type(v), v) for k, v in sorted(given.items()))
        hit = _SWITCHES.get(key)
    except TypeError:  # an unhashable value (a list of CUDA-graph scopes): build it
        return Switches(**given)
    if hit is None:
        if len(_SWITCHES) > 1024:
            _SWITCHES.clear()
        hit = _SWITCHES[key] = Switches(**given)
    return hit


def _only_one(a: Workload | None, b: Workload, who: str) -> Workload:
    if a is not None and a != b:
        raise UsageError(f"{who}: two different workloads given; pass one")
    return b
