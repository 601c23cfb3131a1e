"""The one table of Megatron fields: what ``apply`` writes, ``from_config`` reads and
``to_overrides`` prints (:mod:`parastrat.adapters.megatron`).

Each :class:`Field` names its section (``model``, ``train``, ``dist``, ``comm_overlap``; a bare
Megatron Core config is the ``model`` section), the value it takes from what is applied
(:class:`Applied`: the strategy, and for a plan candidate what it was priced with), the value
that means "off" (a field the installed version lacks is fine while the value is off), and
how it reads back into :class:`~parastrat.Strategy` keywords.

What a plan candidate was priced with (:class:`RunSettings`) is read defensively from a
``Candidate`` or a ``Plan`` (:func:`run_of`): a switch the object does not carry is left as
the config has it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..strategy import MEGATRON_TP_PP_DP_ORDER, Strategy

#: Sections only a Megatron Bridge ``ConfigContainer`` has (a bare Megatron Core config has none:
#: their fields are skipped there).
CONTAINER_SECTIONS = (
    "train",
    "comm_overlap",
    "dist",
    "ddp",
    "optimizer",
    "checkpoint",
    "mixed_precision",
    "dataset",
    "rerun_state_machine",
)

#: Megatron's ``cp_comm_type`` values and how they read back as Ulysses x ring.
CP_COMM_RING = ("p2p", "all_gather")
CP_COMM_ULYSSES = "a2a"
CP_COMM_HIERARCHICAL = "a2a+p2p"

#: Megatron Core's recompute settings per parastrat mode: (granularity, method, num_layers).
RECOMPUTE = {
    "none": (None, None, None),
    "selective": ("selective", None, None),
    "full": ("full", "uniform", 1),
}
#: The modules Megatron's selective recompute defaults to (what parastrat prices).
SELECTIVE_MODULES = ["core_attn"]


@dataclass(frozen=True)
class RunSettings:
    """What a plan candidate was priced with; None = not known, the config keeps its value."""

    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    recompute: str | None = None
    moe_dispatcher: str | None = None
    moe_a2a_overlap: bool | None = None
    moe_shared_expert_overlap: bool | None = None
    tp_comm_overlap: bool | None = None
    cuda_graphs: Any = None
    cuda_graphs_known: bool = False
    grad_reduce_in_fp32: bool | None = None
    cross_entropy_fusion: bool | None = None
    moe_model: bool | None = None  # the priced model has experts (known from a plan)
    #: the linear layers' precision priced ("bf16", "fp8", "mxfp8", "nvfp4") and its
    #: quantisation recipe (``StepReport.fp8_recipe``: "current", "delayed", "blockwise", ...)
    precision: str | None = None
    fp8_recipe: str | None = None
    fp8_param_gather: bool | None = None  # None: what Bridge's recipe for the precision sets
    #: CPU activation offloading priced (Switches.cpu_offload_layers; 0 = off)
    cpu_offload_layers: int | None = None
    #: the sequence length a plan was priced at (a plan's; None for a candidate or strategy)
    seq_len: int | None = None
    #: the data-parallel switches priced (Switches.distributed_optimizer, .overlap_grad_reduce)
    distributed_optimizer: bool | None = None
    overlap_grad_reduce: bool | None = None


@dataclass(frozen=True)
class Applied:
    """What one ``apply`` writes: a strategy, the run settings (None for a bare Strategy), and
    whether the target model has experts (MoE switches are written only then)."""

    s: Strategy
    run: RunSettings | None
    moe: bool
    pipeline_dtype: Any = None  # set when pp > 1 and the config leaves it unset


def _always(a: Applied) -> bool:
    return True


@dataclass(frozen=True)
class Field:
    """One Megatron config field.

    ``sections``: where it lives, first match wins (``("comm_overlap", "model")``: Bridge's
    ``comm_overlap`` section when the container has one, else the model).  ``value``: the new
    value; ``when``: written only when true; ``neutral``: the "off" value; ``read``: Strategy
    keywords from the config's value (None: read by a combined reader or not at all);
    ``arg``: the Megatron-LM command-line argument (``arg_value`` maps the value to it);
    ``optional``: a section without the field skips it instead of refusing the write.
    """

    name: str
    value: Callable[[Applied], Any]
    neutral: Any = None
    when: Callable[[Applied], bool] = _always
    read: Callable[[Any], dict[str, Any]] | None = None
    sections: tuple[str, ...] = ("model",)
    #: Megatron-LM's ``pretrain_gpt.py`` argument (None: none), and the value it takes
    arg: str | None = None
    arg_value: Callable[[Any], Any] | None = None
    #: skipped, not refused, where the section lacks the field
    optional: bool = False


#: Megatron's quantisation settings per priced (precision, recipe), as Megatron Bridge's named
#: mixed-precision recipes set them (``megatron/bridge/training/mixed_precision.py``:
#: ``bf16_mixed``, ``bf16_with_fp8_current_scaling_mixed`` (tensorwise),
#: ``bf16_with_fp8_delayed_scaling_mixed``, ``bf16_with_fp8_subchannel_scaling_mixed``
#: (blockwise), ``bf16_with_mxfp8_mixed``, ``bf16_with_nvfp4_mixed``): (``fp8`` format,
#: ``fp8_recipe``, ``fp4`` format, ``fp8_param_gather``).
Quantisation = tuple[str | None, str | None, str | None, bool]
PRECISION_SETTINGS: dict[tuple[str, str | None], Quantisation] = {
    ("fp8", "current"): ("hybrid", "tensorwise", None, True),
    ("fp8", "delayed"): ("hybrid", "delayed", None, True),
    ("fp8", "blockwise"): ("hybrid", "blockwise", None, False),
    ("mxfp8", "mxfp8"): ("e4m3", "mxfp8", None, True),
    ("nvfp4", "nvfp4"): (None, None, "e2m1", False),
}


def _precision(a: Applied) -> Quantisation | None:
    """The quantisation settings of the priced precision (None: not known, or BF16 — the
    planner's default, so a BF16 plan leaves a quantised recipe's precision as it is rather
    than silently turning its FP8 off)."""
    run = a.run
    if run is None or run.precision in (None, "bf16"):
        return None
    recipe = run.fp8_recipe
    if run.precision == "fp8" and recipe is None:
        recipe = "current"
    fp8, fp8_recipe, fp4, gather = PRECISION_SETTINGS[(run.precision, recipe)]
    if run.fp8_param_gather is not None and run.precision in ("fp8", "mxfp8"):
        gather = run.fp8_param_gather
    return fp8, fp8_recipe, fp4, gather


def _precision_is(test: Callable[[tuple[Any, ...]], bool]) -> Callable[[Applied], bool]:
    return lambda a: (p := _precision(a)) is not None and test(p)


def _quant(i: int) -> Callable[[Applied], Any]:
    """Item ``i`` of the priced quantisation settings (the field's ``when`` ensures one)."""
    return lambda a: (_precision(a) or (None, None, None, False))[i]


def _run(a: Applied, name: str) -> Any:
    return getattr(a.run, name) if a.run is not None else None


def _knows(name: str) -> Callable[[Applied], bool]:
    return lambda a: _run(a, name) is not None


def _moe_knows(name: str) -> Callable[[Applied], bool]:
    return lambda a: a.moe and _run(a, name) is not None


def _recompute(i: int) -> Callable[[Applied], Any]:
    return lambda a: RECOMPUTE[a.run.recompute][i] if a.run and a.run.recompute else None


def _layout_value(a: Applied) -> Any:
    parsed = a.s.layout_parsed
    return None if parsed is None else parsed.to_megatron()


def _read_layout(value: Any) -> dict[str, Any]:
    value = getattr(value, "input_data", value)  # a parsed PipelineParallelLayerLayout
    return {"pipeline_layout": value}


def _deepep_flag(backend: str) -> bool:
    """Megatron-LM (arguments.py at the recorded commit) selects DeepEP with a flag and has no
    HybridEP switch."""
    if backend != "deepep":
        from ..errors import UsageError
        from ..spec.hardware import DEEPEP_REFUSED

        raise UsageError(
            f"the flex dispatcher's {backend} backend has no Megatron-LM argument "
            "(arguments.py has --moe-enable-deepep only): use --format overrides for Megatron "
            "Bridge, or --moe-dispatcher alltoall; --moe-dispatcher deepep runs on other "
            f"accelerators than {', '.join(DEEPEP_REFUSED)}"
        )
    return True


def _layout_text(value: Any) -> str | None:
    """The layout in Megatron-LM's string syntax (its argument takes a string only)."""
    if value is None or isinstance(value, str):
        return value
    from ..pipeline_layout import compact, normalize

    return compact(normalize(value))


def _dispatcher(a: Applied) -> str:
    d = a.run.moe_dispatcher if a.run else None
    return "alltoall" if d == "alltoall" else "flex"


def _flex_backend(a: Applied) -> str:
    d = a.run.moe_dispatcher if a.run else None
    return "hybridep" if d == "hybridep" else "deepep"


def _grad_fp32(a: Applied) -> bool:
    return bool(_run(a, "grad_reduce_in_fp32"))


def _graph_impl(a: Applied) -> str:
    scopes = _graph_scopes(a)
    if not scopes:
        return "none"
    return "local" if "full_iteration" in scopes else "transformer_engine"


def _graph_scopes(a: Applied) -> list[str]:
    from ..estimate.step import cuda_graph_scopes  # the one parser of the switch

    return sorted(cuda_graph_scopes(a.run.cuda_graphs if a.run else None))


def _int_or_one(v: Any) -> int:
    return int(v) if v else 1


def _fsdp_on(a: Applied) -> bool:
    return a.s.fsdp is not None


def _dist_opt_known(a: Applied) -> bool:
    """The distributed optimizer was priced, and no FSDP field writes it (:data:`FSDP_FIELDS`)."""
    return _run(a, "distributed_optimizer") is not None and not _fsdp_on(a)


def _param_gather(a: Applied) -> bool:
    """The parameter all-gather overlapped: with the gradient overlap and a sharded optimizer
    (Megatron asserts ``overlap_param_gather`` needs ``use_distributed_optimizer``)."""
    dist_opt = bool(_run(a, "distributed_optimizer")) or _fsdp_on(a)
    return bool(_run(a, "overlap_grad_reduce")) and dist_opt


def _dist_fields() -> tuple[Field, ...]:
    """The distributed-optimizer and DP-overlap rows of the field table."""
    dist_opt = lambda a: bool(_run(a, "distributed_optimizer"))  # noqa: E731
    overlap = lambda a: bool(_run(a, "overlap_grad_reduce"))  # noqa: E731
    off_in_bridge = lambda a: _run(a, "overlap_grad_reduce") is False  # noqa: E731
    return (
        Field("use_distributed_optimizer", dist_opt, False, _dist_opt_known, None, ("ddp",),
              arg="--use-distributed-optimizer"),
        Field("use_distributed_optimizer", dist_opt, False, _dist_opt_known, None,
              ("optimizer",)),
        Field("overlap_grad_reduce", overlap, False, _knows("overlap_grad_reduce"), None,
              ("ddp",), arg="--overlap-grad-reduce"),
        Field("overlap_param_gather", _param_gather, False, _knows("overlap_grad_reduce"), None,
              ("ddp",), arg="--overlap-param-gather"),
        Field("overlap_grad_reduce", overlap, None, off_in_bridge, None, ("comm_overlap",)),
        Field("overlap_param_gather", _param_gather, None, off_in_bridge, None,
              ("comm_overlap",)),
    )  # fmt: skip


def _read_sharding(value: Any) -> dict[str, Any]:
    return {"fsdp": None if value in (None, "no_shard") else value}


#: Megatron FSDP (Bridge 0.3.1 ``ConfigContainer.validate()``: ``dist.use_megatron_fsdp`` and
#: ``ddp.use_megatron_fsdp`` are set together, ``use_tp_pp_dp_mapping`` is refused, saving or
#: loading needs ``ckpt_format="fsdp_dtensor"``; ``ddp.use_distributed_optimizer`` and
#: ``optimizer.use_distributed_optimizer`` are synced to True when either is: megatron-core
#: builds FSDP's sharded optimizer through its ``DistributedOptimizer``).  HSDP's replicas are
#: Megatron's distributed-optimizer instances.  Written only for an FSDP strategy, so a
#: strategy without ``fsdp`` leaves every one of them as the config has it.
FSDP_FIELDS: tuple[Field, ...] = (
    Field("use_megatron_fsdp", lambda a: True, False, _fsdp_on, None, ("dist",)),
    Field(
        "use_megatron_fsdp",
        lambda a: True,
        False,
        _fsdp_on,
        None,
        ("ddp",),
        arg="--use-megatron-fsdp",
    ),
    Field(
        "data_parallel_sharding_strategy",
        lambda a: a.s.fsdp,
        "no_shard",
        _fsdp_on,
        _read_sharding,
        ("ddp",),
        arg="--data-parallel-sharding-strategy",
    ),
    Field(
        "num_distributed_optimizer_instances",
        lambda a: a.s.dp_replicate,
        1,
        # also without FSDP: replicas of the distributed optimizer, as the memory is priced
        lambda a: _fsdp_on(a) or a.s.dp_replicate > 1,
        lambda v: {"dp_replicate": _int_or_one(v)},
        ("ddp",),
        arg="--num-distributed-optimizer-instances",
    ),
    Field(
        "use_distributed_optimizer",
        lambda a: True,
        False,
        _fsdp_on,
        None,
        ("ddp",),
        arg="--use-distributed-optimizer",
    ),
    Field("use_distributed_optimizer", lambda a: True, False, _fsdp_on, None, ("optimizer",)),
    Field(
        "ckpt_format",
        lambda a: "fsdp_dtensor",
        None,
        _fsdp_on,
        None,
        ("checkpoint",),
        arg="--ckpt-format",
    ),
)

#: The strategy's own fields, in the order they are written.
STRATEGY_FIELDS: tuple[Field, ...] = (
    Field(
        "tensor_model_parallel_size",
        lambda a: a.s.tp,
        1,
        read=lambda v: {"tp": v},
        arg="--tensor-model-parallel-size",
    ),
    Field(
        "pipeline_model_parallel_size",
        lambda a: a.s.pp,
        1,
        read=lambda v: {"pp": v},
        arg="--pipeline-model-parallel-size",
    ),
    Field(
        "virtual_pipeline_model_parallel_size",
        lambda a: a.s.vpp if a.s.vpp > 1 else None,
        read=lambda v: {"vpp": _int_or_one(v)},
        arg="--num-virtual-stages-per-pipeline-rank",
    ),
    # Megatron Core fills it with pp only when it is None (ModelParallelConfig.__post_init__):
    # a container that already went through start-up keeps the old pp, and the interleaved
    # schedule refuses the new one at the first step; written as Megatron's default, pp
    Field(
        "microbatch_group_size_per_vp_stage",
        lambda a: a.s.pp,
        when=lambda a: a.s.vpp > 1,
        optional=True,
    ),
    Field(
        "context_parallel_size", lambda a: a.s.cp, 1, arg="--context-parallel-size"
    ),  # read with cp_comm_type
    Field(
        "cp_comm_type",
        lambda a: a.s.cp_comm_type,
        "p2p",
        when=lambda a: a.s.cp > 1,
        arg="--cp-comm-type",
    ),
    Field(
        "hierarchical_context_parallel_sizes",
        lambda a: [a.s.ulysses, a.s.ring] if a.s.ulysses > 1 and a.s.ring > 1 else None,
        arg="--hierarchical-context-parallel-sizes",
    ),
    Field(
        "expert_model_parallel_size",
        lambda a: a.s.ep,
        1,
        read=lambda v: {"ep": v or 1},
        arg="--expert-model-parallel-size",
    ),
    Field(
        "expert_tensor_parallel_size",
        lambda a: a.s.etp,
        read=lambda v: {"etp": v},
        arg="--expert-tensor-parallel-size",
    ),
    Field(
        "sequence_parallel",
        lambda a: a.s.sp,
        False,
        read=lambda v: {"sp": bool(v)},
        arg="--sequence-parallel",
    ),
    Field(
        "pipeline_dtype", lambda a: a.pipeline_dtype, when=lambda a: a.pipeline_dtype is not None
    ),
    Field(
        "num_layers_in_first_pipeline_stage",
        lambda a: a.s.first_stage_layers,
        read=lambda v: {"first_stage_layers": v},
        arg="--decoder-first-pipeline-num-layers",
    ),
    Field(
        "num_layers_in_last_pipeline_stage",
        lambda a: a.s.last_stage_layers,
        read=lambda v: {"last_stage_layers": v},
        arg="--decoder-last-pipeline-num-layers",
    ),
    Field(
        "account_for_embedding_in_pipeline_split",
        lambda a: a.s.account_for_embedding,
        False,
        read=lambda v: {"account_for_embedding": bool(v)},
        arg="--account-for-embedding-in-pipeline-split",
    ),
    Field(
        "account_for_loss_in_pipeline_split",
        lambda a: a.s.account_for_loss,
        False,
        read=lambda v: {"account_for_loss": bool(v)},
        arg="--account-for-loss-in-pipeline-split",
    ),
    Field(
        "pipeline_model_parallel_layout",
        _layout_value,
        read=_read_layout,
        arg="--pipeline-model-parallel-layout",
        arg_value=_layout_text,
    ),
    Field(
        "use_tp_pp_dp_mapping",
        lambda a: a.s.order == MEGATRON_TP_PP_DP_ORDER,
        False,
        sections=("dist",),
        arg="--use-tp-pp-dp-mapping",
    ),
    *FSDP_FIELDS,
)

#: What a plan candidate was priced with (written only for a candidate or a plan).
RUN_FIELDS: tuple[Field, ...] = (
    Field(
        "micro_batch_size",
        lambda a: a.run.micro_batch_size if a.run else None,
        when=_knows("micro_batch_size"),
        sections=("train",),
        arg="--micro-batch-size",
    ),
    Field(
        "global_batch_size",
        lambda a: a.run.global_batch_size if a.run else None,
        when=_knows("global_batch_size"),
        sections=("train",),
        arg="--global-batch-size",
    ),
    Field(
        "recompute_granularity",
        _recompute(0),
        when=_knows("recompute"),
        arg="--recompute-granularity",
    ),
    Field("recompute_method", _recompute(1), when=_knows("recompute"), arg="--recompute-method"),
    Field(
        "recompute_num_layers",
        _recompute(2),
        when=_knows("recompute"),
        arg="--recompute-num-layers",
    ),
    Field(
        "recompute_modules",
        lambda a: list(SELECTIVE_MODULES),
        when=lambda a: _run(a, "recompute") == "selective",
        arg="--recompute-modules",
    ),
    Field(
        "moe_token_dispatcher_type",
        _dispatcher,
        when=_moe_knows("moe_dispatcher"),
        arg="--moe-token-dispatcher-type",
    ),
    Field(
        "moe_flex_dispatcher_backend",
        _flex_backend,
        when=lambda a: a.moe and _run(a, "moe_dispatcher") not in (None, "alltoall"),
        arg="--moe-enable-deepep",
        arg_value=_deepep_flag,
    ),
    Field(
        "overlap_moe_expert_parallel_comm",
        lambda a: bool(_run(a, "moe_a2a_overlap")),
        False,
        when=_moe_knows("moe_a2a_overlap"),
        sections=("comm_overlap", "model"),
        arg="--overlap-moe-expert-parallel-comm",
    ),
    Field(
        "moe_shared_expert_overlap",
        lambda a: bool(_run(a, "moe_shared_expert_overlap")),
        False,
        when=_moe_knows("moe_shared_expert_overlap"),
        arg="--moe-shared-expert-overlap",
    ),
    Field(
        "tp_comm_overlap",
        lambda a: bool(_run(a, "tp_comm_overlap")),
        False,
        when=_knows("tp_comm_overlap"),
        sections=("comm_overlap", "model"),
        arg="--tp-comm-overlap",
    ),
    Field(
        "cuda_graph_impl",
        _graph_impl,
        "none",
        when=lambda a: bool(a.run and a.run.cuda_graphs_known),
        arg="--cuda-graph-impl",
        arg_value=lambda v: None if v == "none" else v,
    ),
    Field(
        "cuda_graph_scope",
        _graph_scopes,
        when=lambda a: bool(a.run and _graph_scopes(a)),
        arg="--cuda-graph-scope",
    ),
    # Bridge's validate() asserts "check_for_nan_in_loss must be disabled when using
    # full_iteration CUDA graph" (the check syncs the host inside the captured iteration)
    Field(
        "check_for_nan_in_loss",
        lambda a: False,
        when=lambda a: bool(a.run) and "full_iteration" in _graph_scopes(a),
        sections=("rerun_state_machine",),
        optional=True,
    ),
    # the gradient buffer's dtype priced: Bridge's MixedPrecisionConfig.setup() copies its
    # value onto the DDP config at start-up, so both are written
    Field(
        "grad_reduce_in_fp32",
        _grad_fp32,
        when=_knows("grad_reduce_in_fp32"),
        sections=("mixed_precision",),
    ),
    Field(
        "grad_reduce_in_fp32",
        _grad_fp32,
        when=_knows("grad_reduce_in_fp32"),
        sections=("ddp",),
        arg="--accumulate-allreduce-grads-in-fp32",
    ),
    # the precision priced, as Bridge's named recipe for it sets the quantisation fields
    # (Bridge's MixedPrecisionConfig.setup() copies them onto the model at start-up; a bare
    # Megatron Core config holds them itself); other recipe knobs stay the config's
    Field(
        "fp8",
        _quant(0),
        None,
        when=_precision_is(lambda p: True),
        sections=("mixed_precision", "model"),
        arg="--fp8-format",
    ),
    Field(
        "fp8_recipe",
        _quant(1),
        when=_precision_is(lambda p: p[0] is not None),
        sections=("mixed_precision", "model"),
        arg="--fp8-recipe",
    ),
    Field(
        "fp4",
        _quant(2),
        None,
        when=_precision_is(lambda p: True),
        sections=("mixed_precision", "model"),
        arg="--fp4-format",
    ),
    Field(
        "fp4_recipe",
        lambda a: "nvfp4",
        when=_precision_is(lambda p: p[2] is not None),
        sections=("mixed_precision", "model"),
        arg="--fp4-recipe",
    ),
    Field(
        "fp8_param_gather",
        _quant(3),
        False,
        when=_precision_is(lambda p: True),
        sections=("mixed_precision",),
        arg="--fp8-param-gather",
    ),
    # Bridge's finalize() asserts it with MXFP8 parameter gather (bf16_with_mxfp8_mixed sets it)
    Field(
        "reuse_grad_buf_for_mxfp8_param_ag",
        lambda a: True,
        False,
        when=_precision_is(lambda p: p[1] == "mxfp8" and p[3]),
        sections=("mixed_precision",),
    ),
    # the loss priced: fused only when the switch was set (None keeps the config's value)
    Field(
        "cross_entropy_loss_fusion",
        lambda a: bool(_run(a, "cross_entropy_fusion")),
        when=_knows("cross_entropy_fusion"),
        arg="--cross-entropy-loss-fusion",
    ),
    # the distributed optimizer and the DP overlaps priced: Megatron-LM defaults both off, so
    # pasted arguments must say them; Bridge syncs ddp/optimizer's use_distributed_optimizer
    # and, with it, sets the DDP overlaps from comm_overlap (None there: on with DP > 1), so an
    # overlap priced off is written there as well as on the DDP config
    *_dist_fields(),
    # the sequence length a plan was priced at: a launch line runs it, not the recipe's own
    # (apply refuses a plan whose length differs from the config's: priced_for_violations);
    # Bridge's validate() asserts the model's and the dataset's lengths equal
    Field(
        "seq_length",
        lambda a: _run(a, "seq_len"),
        when=_knows("seq_len"),
        arg="--seq-length",
        optional=True,  # a bare Megatron Core TransformerConfig holds no sequence length
    ),
    Field(
        "sequence_length",  # GPTDatasetConfig's field (seq_length is a property alias there)
        lambda a: _run(a, "seq_len"),
        when=_knows("seq_len"),
        sections=("dataset",),
        optional=True,
    ),
    # CPU activation offloading priced (estimate/offload.py), as Megatron Bridge's performance
    # scripts set it (cpu_offloading, cpu_offloading_weights=False, the layer count);
    # Megatron-LM has one argument, and its validate_args turns cpu_offloading on from it
    Field(
        "cpu_offloading",
        lambda a: bool(_run(a, "cpu_offload_layers")),
        False,
        when=_knows("cpu_offload_layers"),
    ),
    Field(
        "cpu_offloading_num_layers",
        lambda a: _run(a, "cpu_offload_layers"),
        0,
        when=_knows("cpu_offload_layers"),
        arg="--cpu-offloading-num-layers",
        arg_value=lambda v: v or None,
    ),
    Field(
        "cpu_offloading_activations",
        lambda a: True,
        when=lambda a: bool(_run(a, "cpu_offload_layers")),
    ),
    Field(
        "cpu_offloading_weights",
        lambda a: False,
        False,
        when=lambda a: bool(_run(a, "cpu_offload_layers")),
    ),
    # Megatron Core asserts it off with cpu_offloading (the module-level mechanism)
    Field(
        "fine_grained_activation_offloading",
        lambda a: False,
        False,
        when=lambda a: bool(_run(a, "cpu_offload_layers")),
    ),
)

FIELDS: tuple[Field, ...] = STRATEGY_FIELDS + RUN_FIELDS


# ---------------------------------------------------------------------------------------------
# What a candidate or a plan was priced with, read defensively.
# ---------------------------------------------------------------------------------------------
#: Attribute names a candidate may carry its implementation switches under.
_SWITCH_ATTRS = ("switches", "step_options", "options", "run")


def _switches_of(obj: Any) -> dict[str, Any] | None:
    for name in _SWITCH_ATTRS:
        value = getattr(obj, name, None)
        if isinstance(value, dict):
            return value
        if value is not None and hasattr(value, "__dataclass_fields__"):
            return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return None


def planned(obj: Any) -> Any:
    """A plan candidate that carries its plan's context (``Candidate.as_plan``: every one the
    planner returns) as that plan with only it, so it is checked and written as the plan would
    be; anything else (a Strategy, a plan, a hand-built candidate) as given."""
    as_plan = getattr(obj, "as_plan", None)
    plan = as_plan() if callable(as_plan) else None
    return obj if plan is None else plan


def run_of(obj: Any) -> tuple[Strategy, RunSettings | None]:
    """(strategy, run settings) of a Strategy, a plan ``Candidate`` or a ``Plan`` (its best).

    A Strategy carries no run settings.  A candidate gives its micro-batch and recompute mode,
    and its implementation switches when it carries them; a plan adds its global batch,
    sequence length and ``step_options``, and so does a candidate the planner returned
    (:func:`planned`: it carries its plan's).  ``tp_comm_overlap=None`` (on with SP inside the
    scale-up domain, off at NVFP4, as the step model prices it) is resolved here.
    """
    if isinstance(obj, Strategy):
        return obj, None
    obj, plan = planned(obj), None
    if hasattr(obj, "candidates") and hasattr(obj, "best"):
        plan, obj = obj, obj.best
    s = getattr(obj, "strategy", None)
    if not isinstance(s, Strategy):
        raise TypeError(
            f"expected a parastrat.Strategy, a plan candidate or a Plan, got {type(obj).__name__}"
            "; build one with parastrat.Strategy(tp=..., pp=...) or parastrat.plan(...)"
        )
    switches = _switches_of(obj) or (_switches_of(plan) if plan is not None else None) or {}
    tp_overlap = switches.get("tp_comm_overlap", None) if switches else None
    if switches and tp_overlap is None:
        tp_overlap = _tp_overlap_default(s, plan)
    mode = getattr(obj, "recompute", None)
    model = getattr(plan, "model", None)
    shape = (bool(getattr(model, "is_hybrid", False)), int(getattr(model, "mtp_num_layers", 0)))
    a2a, shared = _moe_overlaps(s, _mode(mode), switches, shape)
    if a2a:
        _refuse_graphs_with_a2a(switches.get("cuda_graphs"))
    return s, RunSettings(
        micro_batch_size=getattr(obj, "micro_batch_size", None),
        global_batch_size=getattr(plan, "global_batch_size", None),
        seq_len=getattr(plan, "seq_len", None),
        recompute=_mode(mode),
        moe_dispatcher=_dispatcher_on(switches.get("moe_dispatcher"), plan),
        moe_a2a_overlap=a2a,
        moe_shared_expert_overlap=shared,
        tp_comm_overlap=tp_overlap,
        cuda_graphs=switches.get("cuda_graphs"),
        cuda_graphs_known="cuda_graphs" in switches,
        grad_reduce_in_fp32=switches.get("grad_reduce_in_fp32"),
        cross_entropy_fusion=_ce_fusion(switches, plan),
        distributed_optimizer=switches.get("distributed_optimizer"),
        overlap_grad_reduce=switches.get("overlap_grad_reduce"),
        cpu_offload_layers=switches.get(
            "cpu_offload_layers", getattr(obj, "cpu_offload_layers", None)
        ),
        moe_model=bool(getattr(getattr(plan, "model", None), "num_moe_experts", 0)) or None,
        **_priced_precision(obj, plan, switches),
    )


def _refuse_graphs_with_a2a(cuda_graphs: Any) -> None:
    """StrategyError, before anything is written, when a run priced with combined 1F1B also
    captures scopes Megatron Core 0.16 (the version Megatron Bridge 0.3.1 runs) refuses beside
    it (:data:`GRAPHS_REFUSED_WITH_A2A`)."""
    from ..errors import StrategyError
    from ..estimate.step import cuda_graph_scopes
    from ..rules.graphs import GRAPHS_REFUSED_WITH_A2A
    from ..rules.violations import err

    clash = sorted(cuda_graph_scopes(cuda_graphs) & GRAPHS_REFUSED_WITH_A2A)
    if clash:
        raise StrategyError(
            [
                err(
                    "megatron-graphs-a2a",
                    f"CUDA graphs of {', '.join(clash)} with moe_a2a_overlap (combined 1F1B): "
                    "Megatron Core 0.16 refuses them together (it takes Transformer Engine "
                    "graphs without the moe and mlp scopes beside the overlap)",
                    "capture cuda_graphs='attn,moe_router,moe_preprocess' instead, or "
                    "moe_a2a_overlap=False",
                )
            ]
        )


def _ce_fusion(switches: dict[str, Any], plan: Any) -> bool | None:
    """The loss fusion as the plan priced it: an unset switch resolved on the plan's
    accelerator (:meth:`~parastrat.spec.workload.Switches.ce_fusion`: on, off on Ascend), so
    Megatron-LM, whose ``--cross-entropy-loss-fusion`` defaults to off, runs what was priced;
    None without a plan (the config keeps its value)."""
    value = switches.get("cross_entropy_fusion")
    accel = getattr(getattr(plan, "cluster", None), "accel", None)
    if value is not None or accel is None:
        return value
    from ..spec.workload import CE_FUSION_OFF_VENDORS

    return accel.vendor not in CE_FUSION_OFF_VENDORS


def _moe_overlaps(
    s: Strategy, mode: str | None, switches: dict[str, Any], shape: tuple[bool, int] = (False, 0)
) -> tuple[bool | None, bool | None]:
    """(combined 1F1B, shared-expert overlap) as the step model priced them: combined 1F1B
    only where Megatron runs it (EP > 1, PP 1 or VPP > 1, no full recompute, the model's
    ``shape`` (hybrid, MTP layers) allowing it:
    :func:`~parastrat.estimate.overlap.moe_a2a_overlap_ok`), and then without the shared-expert
    overlap, which Megatron refuses beside it; the shared-expert overlap only with the
    alltoall dispatcher ("moe_shared_expert_overlap only works with alltoall token
    dispatcher").  None: not asked, the config keeps its value."""
    a2a, shared = switches.get("moe_a2a_overlap"), switches.get("moe_shared_expert_overlap")
    if shared and switches.get("moe_dispatcher", "alltoall") != "alltoall":
        shared = False
    if not a2a:
        return a2a, shared
    from ..estimate.overlap import moe_a2a_overlap_ok

    if not moe_a2a_overlap_ok(s, mode or "none", *shape):
        return False, shared
    return True, False if shared else shared


def _priced_precision(obj: Any, plan: Any, switches: dict[str, Any]) -> dict[str, Any]:
    """The precision a candidate's step was priced at (its ``StepReport``), else the plan's;
    nothing when neither says."""
    step = getattr(obj, "step", None)
    precision = getattr(step, "precision", None) or getattr(plan, "precision", None)
    if not isinstance(precision, str):
        return {}
    from ..spec.hardware import canonical_precision, precision_recipe

    canon = canonical_precision(precision)
    recipe = getattr(step, "fp8_recipe", None) or precision_recipe(precision)
    return {
        "precision": canon,
        "fp8_recipe": recipe if isinstance(recipe, str) else None,
        "fp8_param_gather": switches.get("fp8_param_gather"),
    }


def _tp_overlap_default(s: Strategy, plan: Any) -> bool:
    """The step model's reading of an unset ``tp_comm_overlap`` for the plan's cluster and
    precision (:meth:`~parastrat.spec.workload.Switches.tp_overlap`: off at NVFP4 and on
    Ascend)."""
    from ..spec.workload import Switches

    cluster = getattr(plan, "cluster", None)
    intra = cluster.span(s.tp, 1) == "intra" if cluster is not None else True
    precision = getattr(plan, "precision", None) or "bf16"
    vendor = cluster.accel.vendor if cluster is not None else "nvidia"
    return Switches().tp_overlap(tp=s.tp, sp=s.sp, intra=intra, precision=precision, vendor=vendor)


def _dispatcher_on(dispatcher: Any, plan: Any) -> Any:
    """``flex`` made concrete for the plan's device: HybridEP where Bridge refuses DeepEP
    (GB200 / GB300), so what is written starts there; other names as given."""
    accel = getattr(getattr(plan, "cluster", None), "accel", None)
    if dispatcher != "flex" or accel is None:
        return dispatcher
    from ..spec.hardware import flex_backend

    return flex_backend(accel)


def _mode(mode: Any) -> str | None:
    if mode is None:
        return None
    from ..estimate.flops import normalize_recompute

    return normalize_recompute(getattr(mode, "value", mode))
