"""Megatron launch lines for a strategy, a plan candidate or a plan: Megatron Bridge overrides
(``scripts/training/run_recipe.py``), Megatron-LM / MindSpeed-LLM arguments
(``pretrain_gpt.py``), the environment a strategy wants, whole ``torchrun`` commands and the
Bridge recipe a preset trains with.  Every line comes from the one field table
(:mod:`parastrat.adapters.megatron_fields`) that :func:`parastrat.adapters.megatron.apply`
writes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import StrategyError
from ..strategy import Strategy, as_training
from .bridge_overrides import hydra, override_lines, shape_of
from .megatron_config import Target, adapter_violations
from .megatron_fields import (
    CONTAINER_SECTIONS,
    FIELDS,
    Applied,
    RunSettings,
    planned,
    run_of,
)

#: Sections ``to_overrides`` assumes a Bridge recipe's container has.
_OVERRIDE_SECTIONS = {"model": True, **dict.fromkeys(CONTAINER_SECTIONS, True)}


def _applied_to_recipe(s: Any, mbs: int | None, gbs: int | None) -> Applied:
    """What a launch line carries for a Strategy, candidate or plan on a recipe's container
    (every section present; MoE switches when the strategy has EP or the plan's model has
    experts); explicit batch sizes replace the candidate's."""
    strategy, run = run_of(s)
    strategy = as_training(strategy)
    problems = adapter_violations(Target(None, dict(_OVERRIDE_SECTIONS), True), strategy)
    if problems:
        raise StrategyError(problems)
    run = run or RunSettings()
    if mbs is not None:
        run = replace(run, micro_batch_size=mbs)
    if gbs is not None:
        run = replace(run, global_batch_size=gbs)
    return Applied(strategy, run, moe=strategy.ep > 1 or bool(run.moe_model))


def to_overrides(
    s: Any,
    *,
    recipe: Any = None,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
) -> list[str]:
    """Hydra-style overrides for Megatron Bridge's ``scripts/training/run_recipe.py``: the
    same field table as :func:`apply` on a recipe's container, for a Strategy, a plan
    candidate or a plan.

    ``["model.tensor_model_parallel_size=4", ..., "dist.use_tp_pp_dp_mapping=false"]`` —
    every degree explicitly (ETP too), so a recipe's own values cannot leak through.
    ``pipeline_dtype`` is not among them: Bridge's ``finalize()`` sets it from
    ``params_dtype`` when pp > 1, and a string override on an unset field would stay a string.
    A candidate adds what it was priced with (micro-batch, recompute, switches, precision):
    one the planner returned, the same lines as its plan with only it; explicit batch sizes
    are added (or replace the candidate's).

    ``recipe``: the recipe the lines go onto — its ``ConfigContainer`` or its name as
    ``run_recipe.py --recipe`` takes it.  Bridge's parser refuses a line written for the
    other shape of the ``comm_overlap`` and ``mixed_precision`` sections, so they are placed
    as that recipe holds them (:mod:`parastrat.adapters.bridge_overrides`); with None, both
    sections are taken to be config objects.
    """
    a = _applied_to_recipe(s, micro_batch_size, global_batch_size)
    writes = [
        (f.sections, f.name, f.value(a)) for f in FIELDS if f.when(a) and f.name != "pipeline_dtype"
    ]
    return override_lines(writes, shape_of(recipe))


def megatron_lm_args(
    s: Any, *, micro_batch_size: int | None = None, global_batch_size: int | None = None
) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` arguments (MindSpeed-LLM takes the same) for a
    Strategy, a plan candidate or a plan: the field table's ``arg`` column.

    ``["--tensor-model-parallel-size", "4", ..., "--sequence-parallel"]`` as an argv list: a
    flag appears when on, a list gives one word per item, a layout is written in the string
    syntax.  The virtual pipeline size is ``--num-virtual-stages-per-pipeline-rank`` (it
    also holds with an uneven split), and is left out with a layout, which sets it.  Names
    checked against Megatron-LM's ``megatron/training/arguments.py`` (tests/data).
    """
    a = _applied_to_recipe(s, micro_batch_size, global_batch_size)
    strategy = a.s
    argv: list[str] = []
    for f in FIELDS:
        if f.arg is None or not f.when(a):
            continue
        if f.name == "virtual_pipeline_model_parallel_size" and strategy.pipeline_layout:
            continue
        value = f.value(a)
        if f.arg_value is not None and value is not None:
            value = f.arg_value(value)
        argv += _arg_words(f.arg, value)
    if _on_ascend(s):
        argv = _mindspeed_args(s, strategy, argv)
    if a.run is not None and a.run.precision is not None:
        # every precision the step model prices keeps BF16 parameters and activations;
        # Megatron-LM's validate_args leaves params_dtype float32 without --bf16 (Bridge's
        # mixed-precision recipes set it themselves, so this is an argument only)
        argv.append("--bf16")
    return argv


def _on_ascend(what: Any) -> bool:
    """Whether ``what`` is a plan (or a planner's candidate) for an Ascend (huawei) cluster
    (MindSpeed-LLM runs it)."""
    accel = getattr(getattr(planned(what), "cluster", None), "accel", None)
    return getattr(accel, "vendor", None) == "huawei"


def _mindspeed_args(plan: Any, s: Strategy, argv: list[str]) -> list[str]:
    """``argv`` as MindSpeed-LLM spells what an Ascend plan priced: TP overlap is MindSpeed's
    MC2 (``--use-ascend-mc2``; Megatron's ``--tp-comm-overlap`` is Transformer Engine's
    userbuffers, which do not run on NPUs), fused attention ``--use-flash-attn`` (MindSpeed
    runs unfused attention without it; every MindSpeed-LLM pretraining script in
    ``benchmarks/data/npu_models.csv`` passes it), and the context-parallel algorithm."""
    out = ["--use-ascend-mc2" if word == "--tp-comm-overlap" else word for word in argv]
    options = getattr(planned(plan), "step_options", None) or {}
    if options.get("flash_attention", True) is not False:
        out.append("--use-flash-attn")
    if s.cp > 1:
        out += _mindspeed_cp_args(s)
    return out


def _mindspeed_cp_args(s: Strategy) -> list[str]:
    """MindSpeed's context-parallel algorithm for ``s``'s Ulysses x ring split: MindSpeed
    chooses it from ``--context-parallel-algo`` (``ulysses_cp_algo``, ``megatron_cp_algo`` for
    ring attention, ``hybrid_cp_algo`` with ``--ulysses-degree-in-cp``), not from Megatron's
    ``--cp-comm-type`` (MindSpeed ``arguments.py``, "cp parallel" group)."""
    if s.ulysses > 1 and s.ring > 1:
        return [
            "--context-parallel-algo",
            "hybrid_cp_algo",
            "--ulysses-degree-in-cp",
            str(s.ulysses),
        ]
    return ["--context-parallel-algo", "ulysses_cp_algo" if s.ulysses > 1 else "megatron_cp_algo"]


def _arg_words(arg: str, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [arg]
    if isinstance(value, (list, tuple)):
        return [arg, *map(str, value)]
    return [arg, str(value)]


def recompute_overrides(mode: str) -> list[str]:
    """Megatron Bridge overrides for a recompute mode ("none", "selective" or "full"; UsageError
    naming them for anything else): the recompute rows of the field table."""
    from ..estimate.flops import normalize_recompute

    run = RunSettings(recompute=normalize_recompute(mode))
    a = Applied(Strategy(), run, moe=False)
    return [
        f"{f.sections[0]}.{f.name}={hydra(f.value(a))}"
        for f in FIELDS
        if f.name.startswith("recompute_") and f.when(a)
    ]


#: HCCL's connection set-up timeout (s) MindSpeed-LLM's pretrain scripts export (1200-3600
#: in its examples; HCCL's default of 120 s is short for thousands of ranks).
HCCL_CONNECT_TIMEOUT_S = 1200


def launch_env(s: Strategy, *, vendor: str = "nvidia", scale_up_domain: int = 8) -> list[str]:
    """Environment variables the strategy wants at launch (``NAME=value`` strings).

    NVIDIA (NCCL): ``CUDA_DEVICE_MAX_CONNECTIONS=1`` when TP (with SP) stays in the NVLink
    domain, where Megatron overlaps TP communication with GEMMs and needs kernels issued in
    order; ``NCCL_P2P_NET_CHUNKSIZE`` larger for pipeline and context-parallel p2p across
    nodes; ``NCCL_NVLS_ENABLE=0`` (NVLink SHARP buffers cost memory Megatron does not use).
    Ascend (``vendor="huawei"``, HCCL): no NCCL variable; ``HCCL_CONNECT_TIMEOUT`` as
    MindSpeed-LLM's scripts set it, and ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with SP, which those
    scripts also export only to pass Megatron's own argument check (no effect on an NPU).
    Never ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with Megatron FSDP, which refuses it.
    """
    # Megatron FSDP needs more than one connection (Megatron-LM's validate_args asserts
    # "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
    fsdp = s.fsdp is not None
    if vendor == "huawei":
        env = [f"HCCL_CONNECT_TIMEOUT={HCCL_CONNECT_TIMEOUT_S}"]
        if s.tp > 1 and s.sp and not fsdp:
            env.append("CUDA_DEVICE_MAX_CONNECTIONS=1")
        return env
    env = []
    if vendor == "nvidia" and s.tp > 1 and s.sp and s.tp <= scale_up_domain and not fsdp:
        env.append("CUDA_DEVICE_MAX_CONNECTIONS=1")
    env += ["NCCL_IB_SL=1", "TORCH_NCCL_AVOID_RECORD_STREAMS=1"]
    if vendor == "nvidia":
        env.append("NCCL_NVLS_ENABLE=0")
    if s.pp > 1 or s.cp > 1:
        env.append("NCCL_P2P_NET_CHUNKSIZE=2097152")
    return env


def launch_command(
    s: Any,
    *,
    recipe: str,
    nproc_per_node: int,
    nnodes: int = 1,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
    recompute: str | None = None,
    rdzv_endpoint: str | None = None,
    script: str = "scripts/training/run_recipe.py",
) -> list[str]:
    """``torchrun ... run_recipe.py --recipe NAME <overrides>`` as an argv list.

    ``s``: a Strategy, a plan candidate or a plan; its :func:`to_overrides` for ``recipe``
    (placed as that recipe holds its sections), so a plan's switches and precision are part
    of the line.  ``recompute`` adds its overrides; an override given twice keeps its last
    value.  With ``rdzv_endpoint`` (e.g. ``"$MASTER_ADDR:29500"``) the c10d rendezvous flags a
    multi-node launch needs are added.
    """
    argv = ["torchrun", f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        argv.append(f"--nnodes={nnodes}")
    if rdzv_endpoint:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    lines = to_overrides(
        s,
        recipe=recipe,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
    )
    if recompute is not None:
        lines += recompute_overrides(recompute)
    by_key = {line.split("=", 1)[0]: line for line in lines}  # first place, last value
    return [*argv, script, "--recipe", recipe, *by_key.values()]


def megatron_lm_command(
    s: Any,
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    global_batch_size: int | None = None,
    rdzv_endpoint: str | None = None,
    script: str | None = None,
) -> list[str]:
    """``torchrun ... pretrain_gpt.py <Megatron-LM arguments>`` as an argv list: Megatron-LM's
    own launcher, which MindSpeed-LLM keeps on Ascend NPUs (no Transformer Engine, no CUDA).
    ``script`` defaults to the plan's model's: ``pretrain_mamba.py`` for a hybrid (Mamba)
    stack, which ``pretrain_gpt.py`` cannot build (a GPTModel has no Mamba layers),
    ``pretrain_gpt.py`` otherwise.  The model, data and optimizer arguments are the user's to
    add."""
    if script is None:
        hybrid = getattr(getattr(planned(s), "model", None), "is_hybrid", False)
        script = "pretrain_mamba.py" if hybrid else "pretrain_gpt.py"
    argv = ["torchrun", f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        argv.append(f"--nnodes={nnodes}")
    if rdzv_endpoint:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    return [*argv, script, *megatron_lm_args(s, global_batch_size=global_batch_size)]


#: Presets whose Megatron Bridge recipe is not named by the rule below: Bridge 0.3.1 drops the
#: dot of a Llama version (``megatron.bridge.recipes.llama31_405b_pretrain_config``,
#: ``llama32_1b_pretrain_config``) and the hyphen of Nemotron-H (``nemotronh_56b_...``), and
#: ``run_recipe.py`` finds a recipe only by its exact name
#: in ``megatron.bridge.recipes``.
RECIPE_NAMES = {
    "llama3.1-405b": "llama31_405b_pretrain_config",
    "llama3.2-1b": "llama32_1b_pretrain_config",
    # Bridge spells the Nemotron-H family without the hyphen (recipes/nemotronh/nemotronh.py);
    # nemotron-nano-9b-v2 and nemotron-3-nano follow the rule
    "nemotron-h-8b": "nemotronh_8b_pretrain_config",
    "nemotron-h-47b": "nemotronh_47b_pretrain_config",
    "nemotron-h-56b": "nemotronh_56b_pretrain_config",
}
#: Presets for which Megatron Bridge 0.3.1 exports no pretrain recipe from
#: ``megatron.bridge.recipes`` (so ``run_recipe.py --recipe`` cannot find one): GPT-3 175B's
#: and Kimi K2's live in modules the package does not export (``recipes/gpt/gpt3_175b.py``;
#: ``recipes/kimi`` has no ``__init__``), Mixtral, Nemotron-4 and Llama 4 have none.
NO_EXPORTED_RECIPE = frozenset(
    {
        "gpt3-175b",
        "kimi-k2",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "nemotron4-15b",
        "nemotron4-340b",
        "llama4-scout",
        "llama4-maverick",
    }
)


def default_recipe(model_name: str) -> str | None:
    """The Bridge recipe ``run_recipe.py`` would run for a preset: the name Bridge gives it
    (:data:`RECIPE_NAMES`), None where Bridge exports none (:data:`NO_EXPORTED_RECIPE`: the
    caller must name one), else the name the model's follows Bridge's rule
    (``llama3-70b`` -> ``llama3_70b_pretrain_config``)."""
    if model_name in NO_EXPORTED_RECIPE:
        return None
    return RECIPE_NAMES.get(model_name) or (
        model_name.replace(".", "_").replace("-", "_") + "_pretrain_config"
    )
