"""How many plan candidates the real Megatron Bridge accepts (issue 14's closing figure, widened).

For each model below (its parastrat preset planned, its real Megatron Bridge 0.3.1 provider
run), on H100 (NVLink-8) and GB200 (NVL72) clusters, at BF16, FP8 (current scaling) and, on
GB200, MXFP8, at 4,096 tokens and at 32,768 (where plans use context parallelism, ring or
Ulysses), and once more at 4,096 tokens on each cluster with the switches Bridge's performance
recipes turn on (TE-scoped CUDA graphs; combined 1F1B and flex on MoE models): every candidate
``parastrat.plan`` returns (top 5) is applied with ``parastrat.adapters.megatron.apply`` to a
real Bridge ``ConfigContainer`` (GPT-3 175B's recipe holding the model's provider, at the
plan's sequence length and global batch, with Bridge's own mixed-precision recipe for the
plan's precision), then goes through what
Bridge's ``pretrain()`` does with it before any GPU work (:func:`start_up`): Bridge's
``runtime_config_update`` (mixed precision and comm-overlap set-up, then
``ConfigContainer.validate()``), Megatron Core's micro-batch calculator and its
``initialize_model_parallel`` at the plan's world size (a torch fake process group).  Every
preset for which Bridge 0.3.1 exports a recipe (16: Llama 3.2 1B, Llama 3 8B / 70B, Llama
3.1 405B, Qwen3 8B / 32B / 30B-A3B / 235B-A22B, DeepSeek-V2 / V3, GPT-OSS 20B / 120B, OLMoE,
and the Nemotron hybrids) also runs on that recipe (the one ``parastrat plan --format
torchrun`` names, found as ``run_recipe.py`` finds it, its Hugging Face config served from
tests/data/hf), where each candidate goes a second way too: its ``to_overrides`` through
Bridge's override parser, as ``run_recipe.py`` takes them, then the same start-up.  What this
CPU machine lacks is switched off on every recipe (``without_cpu_missing_kernels``: TE's
fused RoPE and permute, and the FusedAdam OLMoE's precision-aware optimizer needs).  The
hybrid (Mamba) presets
(Nemotron-H 8B/47B/56B, Nemotron Nano 9B v2, Nemotron 3 Nano) run on GPT-3's recipe holding
their real ``NemotronH*`` provider and on their own Nemotron recipes, once ``parastrat.plan``
prices a hybrid's layers by kind (:func:`hybrid_pricing`); until then their rows are skipped
with the reason printed.

Prints, per model x recipe x cluster x precision x sequence length: candidates, refused by
``apply``, accepted by the start-up, how many of those use context parallelism, how many
started through the overrides (own-recipe rows), and the reason for every refusal; then the
totals and the ``cp_comm_type`` of the CP candidates.  Before that, any shape field where the
parastrat preset and Bridge's provider disagree (the plan is priced on the preset, the
container runs the provider).  Exit status 1 unless every candidate is accepted both ways.

Needs megatron-bridge (README test command); imports it the way the test suite does
(tests/conftest.py: a Transformer Engine stand-in visible only during the import, and the TE
version Bridge 0.3.1 declares as its floor for Megatron Core's version gates, which FP8 with
experts reaches).
Run: ``python benchmarks/bridge_acceptance.py`` (every case, a few minutes on two cores),
``python benchmarks/bridge_acceptance.py --short`` (three cases, CI) or ``--models
nemotron-h-8b,nemotron-3-nano`` (those presets only).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import logging
import os
import shlex
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)  # Bridge logs every fusion it turns off without TE

import parastrat as ps  # noqa: E402
from parastrat.adapters import megatron as mg  # noqa: E402
from parastrat.planner.advice import GRAPH_SCOPES  # noqa: E402
from parastrat.spec.models import get  # noqa: E402
from tests.conftest import (  # noqa: E402
    declare_te_version,
    import_bridge,
    without_cpu_missing_kernels,
)

MODELS = "megatron.bridge.models"
HF = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"
#: Mixtral as Bridge 0.3.1 builds it: it has no Mixtral provider, so its Mistral provider
#: with Mixtral's experts (mistralai/Mixtral-8x7B-v0.1 / 8x22B-v0.1 config.json).
MIXTRAL = {"num_moe_experts": 8, "moe_router_topk": 2, "moe_grouped_gemm": True}


@dataclass(frozen=True)
class Recipe:
    """The Hugging Face model a model's own Bridge recipe loads with
    ``AutoBridge.from_hf_pretrained``, served from an offline cache holding that model's
    config.json from tests/data/hf (no download); None for a recipe that builds its provider
    directly (the Nemotron ones).  The recipe is the one ``parastrat plan --format torchrun``
    names (``default_recipe``), looked up as Bridge's ``run_recipe.py`` does: an attribute of
    ``megatron.bridge.recipes``."""

    hf_id: str | None = None
    hf_file: str | None = None


@dataclass(frozen=True)
class Case:
    """A parastrat preset, its Bridge provider and the cluster sizes it is planned on.

    ``provider``: a class in ``megatron.bridge.models`` built with ``kw``, or ``hf:FILE``: the
    provider Bridge's ``AutoBridge.from_hf_config`` converts from the Hugging Face config in
    tests/data/hf (what Bridge's own DeepSeek recipes do: its ``DeepSeekV2/V3ModelProvider``
    classes are deprecated and carry no attention heads or MLA switch), then ``kw`` set on it.
    """

    model: str
    provider: str
    h100: tuple[int, ...]
    gb200: tuple[int, ...]
    kw: dict = field(default_factory=dict)
    recipe: Recipe | None = None


CASES = (
    Case(
        "llama3.2-1b",
        "Llama32ModelProvider1B",
        (8, 64),
        (72,),
        recipe=Recipe("meta-llama/Llama-3.2-1B", "llama3.2-1b.json"),
    ),
    Case(
        "llama3-8b",
        "Llama3ModelProvider8B",
        (8, 64),
        (72,),
        recipe=Recipe("meta-llama/Meta-Llama-3-8B", "llama3-8b.json"),
    ),
    Case(
        "llama3-70b",
        "Llama3ModelProvider70B",
        (64, 256),
        (144,),
        recipe=Recipe("meta-llama/Meta-Llama-3-70B", "llama3-70b.json"),
    ),
    Case(
        "llama3.1-405b",
        "Llama31ModelProvider405B",
        (128, 512),
        (576,),
        recipe=Recipe("meta-llama/Meta-Llama-3.1-405B", "llama3.1-405b.json"),
    ),
    Case(
        "qwen3-8b",
        "Qwen3ModelProvider8B",
        (16, 64),
        (64,),
        recipe=Recipe("Qwen/Qwen3-8B", "qwen3-8b.json"),
    ),
    Case(
        "qwen3-32b",
        "Qwen3ModelProvider32B",
        (32, 128),
        (144,),
        recipe=Recipe("Qwen/Qwen3-32B", "qwen3-32b.json"),
    ),
    Case(
        "qwen3-30b-a3b",
        "Qwen3MoEModelProvider30B_A3B",
        (16, 64),
        (72,),
        recipe=Recipe("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b.json"),
    ),
    Case(
        "qwen3-235b-a22b",
        "Qwen3MoEModelProvider235B_A22B",
        (128, 512),
        (288,),
        recipe=Recipe("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b.json"),
    ),
    Case(
        "deepseek-v2",
        "hf:deepseek-v2.json",
        (128, 256),
        (288,),
        recipe=Recipe("deepseek-ai/DeepSeek-V2", "deepseek-v2.json"),
    ),
    # MTP as Bridge's deepseek_v3_pretrain_config sets it (the preset prices one MTP layer)
    Case(
        "deepseek-v3",
        "hf:deepseek-v3.json",
        (256, 1024),
        (576,),
        {"mtp_num_layers": 1},
        recipe=Recipe("deepseek-ai/DeepSeek-V3", "deepseek-v3.json"),
    ),
    Case("kimi-k2", "kimi.KimiK2Provider", (256, 1024), (1152,)),
    Case(
        "mixtral-8x7b",
        "MistralModelProvider",
        (32, 128),
        (72,),
        {**MIXTRAL, "moe_ffn_hidden_size": 14336, "vocab_size": 32000},
    ),
    Case(
        "mixtral-8x22b",
        "MistralModelProvider",
        (64, 256),
        (144,),
        {
            **MIXTRAL,
            "num_layers": 56,
            "hidden_size": 6144,
            "num_attention_heads": 48,
            "ffn_hidden_size": 16384,
            "moe_ffn_hidden_size": 16384,
            "vocab_size": 32000,
        },
    ),
    Case(
        "gpt-oss-120b",
        "GPTOSSProvider120B",
        (64, 256),
        (144,),
        recipe=Recipe("openai/gpt-oss-120b", "gpt-oss-120b.json"),
    ),
    Case(
        "gpt-oss-20b",
        "GPTOSSProvider20B",
        (8, 32),
        (72,),
        recipe=Recipe("openai/gpt-oss-20b", "gpt-oss-20b.json"),
    ),
    Case("llama4-scout", "Llama4Experts16ModelProvider", (64, 128), (144,)),
    Case("llama4-maverick", "Llama4Experts128ModelProvider", (128, 256), (288,)),
    Case("nemotron4-15b", "Nemotron4ModelProvider15B", (16, 64), (72,)),
    Case("nemotron4-340b", "Nemotron4ModelProvider340B", (256, 1024), (576,)),
    Case("olmoe-7b", "OlMoEModelProvider", (8, 32), (72,), recipe=Recipe()),
    # hybrid (Mamba) models: Megatron Core's MambaModel, as Bridge's Nemotron providers and
    # recipes build it
    Case("nemotron-h-8b", "nemotronh.NemotronHModelProvider8B", (8, 64), (72,), recipe=Recipe()),
    Case(
        "nemotron-h-47b",
        "nemotronh.NemotronHModelProvider47B",
        (64, 128),
        (144,),
        recipe=Recipe(),
    ),
    Case(
        "nemotron-h-56b",
        "nemotronh.NemotronHModelProvider56B",
        (64, 256),
        (144,),
        recipe=Recipe(),
    ),
    Case(
        "nemotron-nano-9b-v2",
        "nemotronh.NemotronNanoModelProvider9Bv2",
        (8, 64),
        (72,),
        recipe=Recipe(),
    ),
    Case("nemotron-3-nano", "nemotronh.Nemotron3NanoProvider", (32, 64), (72,), recipe=Recipe()),
)


@dataclass(frozen=True)
class Setting:
    """Accelerator, precision and sequence length of one plan, and its implementation
    switches (:data:`SWITCH_SETS`)."""

    accelerator: str
    precision: str
    seq: int
    switches: str = "default"


#: The switches a plan is asked for: Megatron Core's defaults, or what Megatron Bridge's
#: performance recipes turn on (:func:`recipe_switches`: Transformer Engine-scoped CUDA graphs,
#: combined 1F1B and the flex dispatcher on MoE models), so that the switches ``apply``
#: writes go through the same start-up.
SWITCH_SETS = ("default", "recipe")


def recipe_switches(model, name: str) -> dict:
    """The plan keywords of switch set ``name`` for ``model``: the recipes' TE-scoped graphs
    (``attn``, ``moe_router``, ``moe_preprocess`` on MoE models, ``attn``, ``mlp`` on dense
    ones) and, on MoE models, combined 1F1B and the flex dispatcher (DeepEP; written as
    HybridEP on GB200, where Bridge refuses DeepEP)."""
    if name not in SWITCH_SETS:
        raise ValueError(f"unknown switch set {name!r}; use one of {', '.join(SWITCH_SETS)}")
    if name == "default":
        return {}
    graphs = GRAPH_SCOPES[model.is_moe]  # the scopes `explain` advises, from one table
    if model.is_moe:
        return {"cuda_graphs": graphs, "moe_a2a_overlap": True, "moe_dispatcher": "flex"}
    return {"cuda_graphs": graphs}


SETTINGS = (
    Setting("h100", "bf16", 4096),
    Setting("h100", "fp8", 4096),
    Setting("h100", "bf16", 32768),
    Setting("gb200", "bf16", 4096),
    Setting("gb200", "mxfp8", 4096),
    Setting("gb200", "fp8", 32768),
    Setting("h100", "bf16", 4096, "recipe"),
    Setting("gb200", "mxfp8", 4096, "recipe"),
)
#: --short: one dense, one MoE and one MLA model, each in one setting that exercises a new
#: dimension (GB200 with MXFP8, FP8 on H100, 32k tokens with CP); the MLA one on its own
#: recipe.
SHORT = (
    ("llama3-8b", Setting("h100", "bf16", 32768), False),
    ("qwen3-30b-a3b", Setting("gb200", "mxfp8", 4096), False),
    ("deepseek-v2", Setting("h100", "fp8", 4096), True),
    ("qwen3-30b-a3b", Setting("h100", "bf16", 4096, "recipe"), False),
)

#: Bridge's own mixed-precision recipe for each parastrat precision
#: (``megatron/bridge/training/mixed_precision.py``): FP8 is current scaling (FP8-CS), as
#: parastrat prices it (``parastrat.estimate.fp8.RECIPE_OF``).
RECIPES = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_current_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
#: Shape fields compared between the preset (the plan) and the provider (the container).
SHAPE = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "num_moe_experts",
    "moe_router_topk",
)


def provider(case: Case, seq: int):
    """The case's real Bridge provider at ``seq`` tokens (no TE: rope and permute fusions
    off)."""
    if case.provider.startswith("hf:"):
        from megatron.bridge.models.conversion.auto_bridge import AutoBridge
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(HF / case.provider[3:])
        model = AutoBridge.from_hf_config(hf).to_megatron_provider(load_weights=False)
        for name, value in {**case.kw, "seq_length": seq, "apply_rope_fusion": False}.items():
            setattr(model, name, value)
    else:
        module, _, cls = f"{MODELS}.{case.provider}".rpartition(".")
        make = getattr(importlib.import_module(module), cls)
        model = make(seq_length=seq, apply_rope_fusion=False, **case.kw)
    model.moe_permute_fusion = False  # a TE kernel; Nemotron providers set it even dense
    return model


def container(case: Case, setting: Setting, global_batch_size: int, own: bool):
    """A real Bridge container at the setting's sequence length, the plan's global batch (a
    candidate carries its micro-batch only) and Bridge's mixed-precision recipe for its
    precision: the model's own recipe (``own``), else GPT-3 175B's recipe holding the case's
    provider."""
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    if own:
        import megatron.bridge.recipes as recipes

        cfg = getattr(recipes, mg.default_recipe(case.model))()  # as run_recipe.py finds it
        cfg = without_cpu_missing_kernels(cfg)  # no TE here
        cfg.model.seq_length = setting.seq
    else:
        from megatron.bridge.recipes.gpt.gpt3_175b import gpt3_175b_pretrain_config

        cfg = gpt3_175b_pretrain_config()
        # GPT-3 175B's recipe defers the embedding's wgrad GEMMs into its PP8 pipeline
        # flush: Megatron refuses that at pp = 1 (apply says so: rule megatron-config) and,
        # on this CPU, without the fused wgrad accumulation it needs; a setting of that
        # recipe, not of the model planned
        cfg.comm_overlap.defer_embedding_wgrad_compute = False
        cfg.model = provider(case, setting.seq)
    cfg.dataset.sequence_length = setting.seq
    cfg.train.global_batch_size = global_batch_size
    cfg.mixed_precision = get_mixed_precision_config(RECIPES[setting.precision])
    return cfg


def offline_hf_cache() -> tempfile.TemporaryDirectory:
    """An offline Hugging Face cache holding the config.json of every recipe's model (from
    tests/data/hf), so that the recipes' ``AutoBridge.from_hf_pretrained`` loads them
    without a download; HF_HOME and HF_HUB_OFFLINE point at it (set before transformers is
    imported)."""
    tmp = tempfile.TemporaryDirectory(prefix="parastrat-hf-")
    for case in CASES:
        if case.recipe is None or case.recipe.hf_id is None or case.recipe.hf_file is None:
            continue
        repo = Path(tmp.name) / "hub" / ("models--" + case.recipe.hf_id.replace("/", "--"))
        (repo / "snapshots" / "local").mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("local")
        shutil.copy(HF / case.recipe.hf_file, repo / "snapshots" / "local" / "config.json")
    os.environ["HF_HOME"] = tmp.name
    os.environ["HF_HUB_OFFLINE"] = "1"
    return tmp


def start_up(cfg, world: int) -> None:
    """What Bridge's ``pretrain()`` does with the container before any GPU work, at ``world``
    ranks; an exception names the step that refused:

    1. ``runtime_config_update``: the mixed-precision recipe onto the model / optimizer /
       DDP configs, the data-parallel size, the comm-overlap settings
       (``CommOverlapConfig.setup``, with its MoE-overlap assertions) and
       ``ConfigContainer.validate()`` (Megatron Core's ``TransformerConfig`` checks);
    2. ``initialize.py``: Megatron Core's micro-batch calculator (gbs % (mbs * dp)) and
       ``parallel_state.initialize_model_parallel`` with the arguments Bridge passes it
       (``initialize.py`` ``_initialize_distributed``), as rank 0 of a ``world``-rank torch
       fake process group: every rank group is built.
    """
    from megatron.bridge.training.config import runtime_config_update

    os.environ["WORLD_SIZE"] = str(world)
    answer_device_query(cfg)
    with contextlib.redirect_stdout(io.StringIO()):  # Bridge prints its fusion fallbacks
        runtime_config_update(cfg)
    microbatches(cfg)
    process_groups(cfg, world)


#: What ``torch.cuda.get_device_properties`` answers on each planned device (data sheets'
#: compute capabilities), for Bridge's flex-dispatcher check (``validate_flex_dispatcher_
#: backend``), which asks the GPU: Nemotron 3 Nano's recipe selects DeepEP itself.
DEVICES = {"h100": ("NVIDIA H100 80GB HBM3", 9), "gb200": ("NVIDIA GB200", 10)}
_ACCELERATOR: list[str] = ["h100"]  # the row being run (set by :func:`run`)


def answer_device_query(cfg) -> None:
    """Make ``torch.cuda.get_device_properties`` answer as the row's accelerator (this machine
    has no GPU), only for a container with the flex dispatcher."""
    import types

    import torch

    if getattr(cfg.model, "moe_token_dispatcher_type", None) == "flex":
        name, major = DEVICES[_ACCELERATOR[0]]
        props = types.SimpleNamespace(name=name, major=major, minor=0)
        torch.cuda.get_device_properties = lambda index=0: props


def microbatches(cfg) -> None:
    """Megatron Core's micro-batch calculator as Bridge's ``initialize.py`` sets it up."""
    from megatron.core import num_microbatches_calculator as nmc

    t = cfg.train
    nmc.init_num_microbatches_calculator(
        0,
        t.rampup_batch_size,
        t.global_batch_size,
        t.micro_batch_size,
        cfg.data_parallel_size,
        t.decrease_batch_size_if_needed,
    )
    nmc.destroy_num_microbatches_calculator()


def process_groups(cfg, world: int) -> None:
    """Megatron Core's rank groups at ``world`` ranks, built with the arguments Bridge's
    ``_initialize_distributed`` passes (CUDA-only ones left out), as rank 0 of a fake group."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    m = cfg.model
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=m.tensor_model_parallel_size,
            pipeline_model_parallel_size=m.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=m.virtual_pipeline_model_parallel_size,
            pipeline_model_parallel_comm_backend=m.pipeline_model_parallel_comm_backend,
            context_parallel_size=m.context_parallel_size,
            hierarchical_context_parallel_sizes=m.hierarchical_context_parallel_sizes,
            expert_model_parallel_size=m.expert_model_parallel_size,
            num_distributed_optimizer_instances=cfg.ddp.num_distributed_optimizer_instances,
            expert_tensor_parallel_size=m.expert_tensor_parallel_size,
            order="tp-cp-ep-pp-dp" if cfg.dist.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp",
            create_gloo_process_groups=False,
        )
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def shape_differences(case: Case) -> list[str]:
    """Shape fields where the preset and the provider disagree."""
    spec, model = get(case.model), provider(case, 4096)
    out = []
    for name in SHAPE:
        want, got = getattr(spec, name), getattr(model, name)
        if name == "num_query_groups":
            want = want or spec.num_attention_heads
            got = got or model.num_attention_heads
        if name == "moe_router_topk" and not spec.num_moe_experts:
            continue
        if (want or None) != (got or None):
            out.append(f"{name}: preset {want}, provider {got}")
    return out


@dataclass
class Count:
    """Candidates of one row, refused by apply, accepted by the start-up, and the reasons."""

    candidates: int = 0
    refused: int = 0
    accepted: int = 0
    failures: list[str] = field(default_factory=list)
    #: accepted candidates with context parallelism, by the cp_comm_type written
    cp: Counter = field(default_factory=Counter)
    #: own-recipe rows: candidates whose ``to_overrides`` through Bridge's override parser
    #: (what ``run_recipe.py`` does) also passed the start-up
    overrides: int = 0

    def add(self, other: Count) -> None:
        self.candidates += other.candidates
        self.refused += other.refused
        self.accepted += other.accepted
        self.cp.update(other.cp)
        self.overrides += other.overrides


@dataclass(frozen=True)
class Row:
    """One printed row: a case in a setting on some cluster sizes, on the model's own recipe
    (``own``) or on GPT-3 175B's recipe holding its provider."""

    case: Case
    setting: Setting
    sizes: tuple[int, ...]
    own: bool = False


def run(row: Row, gpus: int) -> Count:
    """Plan the row's model on ``gpus`` devices; apply and start up every candidate."""
    case, setting = row.case, row.setting
    _ACCELERATOR[0] = setting.accelerator
    model = get(case.model)
    plan = ps.plan(
        model,
        ps.Cluster(accelerator=setting.accelerator, num_devices=gpus),
        seq_len=setting.seq,
        global_batch_size=4 * gpus if setting.seq <= 4096 else gpus,
        precision=setting.precision,
        top_k=5,
        **recipe_switches(model, setting.switches),
    )
    count = Count()
    for cand in plan.candidates:
        count.candidates += 1
        cfg = container(case, setting, plan.global_batch_size, row.own)
        try:
            mg.apply(cfg, cand, world_size=gpus)  # applied as its plan priced it
        except ps.StrategyError as err:
            count.refused += 1
            v = err.violations[0]
            count.failures.append(f"{gpus}: {cand.label()}: apply [{v.rule}]: {v.message[:160]}")
            continue
        try:
            start_up(cfg, gpus)
            count.accepted += 1
            if cfg.model.context_parallel_size > 1:
                count.cp[cfg.model.cp_comm_type] += 1
        except Exception as exc:  # Bridge's or Megatron Core's refusal
            why = f"{type(exc).__name__}: {str(exc)[:160]}"
            count.failures.append(f"{gpus}: {cand.label()}: start-up: {why}")
        if row.own:
            count.overrides += via_overrides(row, plan, cand, gpus, count)
    return count


def via_overrides(row: Row, plan, cand, gpus: int, count: Count) -> int:
    """1 when the overrides of the candidate's torchrun line (:func:`torchrun_overrides`),
    parsed by Bridge's own ``process_config_with_overrides`` onto a fresh copy of the recipe
    (what ``run_recipe.py --recipe ... <overrides>`` does), pass the start-up; else 0 with the
    reason recorded."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = container(row.case, row.setting, plan.global_batch_size, own=True)
    try:
        overrides = torchrun_overrides(plan, cand, mg.default_recipe(row.case.model))
        cfg = process_config_with_overrides(cfg, cli_overrides=overrides) or cfg
        start_up(cfg, gpus)
        return 1
    except Exception as exc:
        why = f"{type(exc).__name__}: {str(exc)[:160]}"
        count.failures.append(f"{gpus}: {cand.label()}: overrides: {why}")
        return 0


def hybrid_pricing(model) -> str | None:
    """None when parastrat's cost model prices a hybrid's layers by kind (its weight matrices
    for a Mamba layer are the Mamba-2 mixer's, within 5 %), else why its rows are skipped:
    a plan priced as if every layer were attention + MLP is not a plan for this model."""
    if not model.is_hybrid or "M" not in model.hybrid_override_pattern:
        return None
    from parastrat.estimate.flops import layer_matrices

    i = model.hybrid_override_pattern.index("M")
    priced = sum(m.in_dim * m.out_dim for m in layer_matrices(model, i))
    mixer = model.kind_params("mamba")
    if abs(priced - mixer) <= 0.05 * mixer:
        return None
    return (
        f"parastrat's cost model prices Mamba layer {i} of {model.name} as "
        f"{[m.name for m in layer_matrices(model, i)]} ({priced / 1e6:.0f}M weights), not "
        f"the Mamba-2 mixer ({mixer / 1e6:.0f}M): no hybrid pricing in this build"
    )


def torchrun_overrides(plan, cand, recipe: str) -> list[str]:
    """The overrides ``parastrat plan --format torchrun`` prints for the candidate (its
    ``torchrun_line``, the words after ``--recipe NAME``)."""
    from parastrat.cli.plan import torchrun_line

    line = torchrun_line(cand, plan.cluster, plan.global_batch_size, recipe)
    words = shlex.split(line.split("\\\n", 1)[1])
    return words[words.index("--recipe") + 2 :]


def matrix(short: bool) -> list[Row]:
    """The rows to run: every case in every setting on GPT-3's recipe, then the cases with a
    recipe of their own in every setting on the first cluster size (--short: :data:`SHORT`)."""
    by_name = {c.model: c for c in CASES}
    if short:
        return [
            Row(by_name[m], s, getattr(by_name[m], s.accelerator)[:1], own) for m, s, own in SHORT
        ]
    rows = [Row(c, s, getattr(c, s.accelerator)) for c in CASES for s in SETTINGS]
    rows += [
        Row(c, s, getattr(c, s.accelerator)[:1], own=True)
        for c in CASES
        if c.recipe is not None
        for s in SETTINGS
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="three cases (CI)")
    ap.add_argument("--models", help="comma-separated presets to run (default: every case)")
    args = ap.parse_args(argv)
    cache = offline_hf_cache()  # before transformers is imported
    bridge = import_bridge()
    if isinstance(bridge, str):
        print(bridge)
        return 2
    declare_te_version()
    rows = matrix(args.short)
    if args.models:
        rows = [r for r in rows if r.case.model in args.models.split(",")]
    skipped = {}
    for case in {r.case.model: r.case for r in rows}.values():
        why = hybrid_pricing(get(case.model))
        if why:
            skipped[case.model] = why
            print(f"skipped {case.model}: {why}")
    rows = [r for r in rows if r.case.model not in skipped]
    for case in {r.case.model: r.case for r in rows}.values():
        for diff in shape_differences(case):
            print(f"shape {case.model} ({case.provider}): {diff}")
    print(
        f"{'model':16s} {'recipe':6s} {'cluster':6s} {'prec':5s} {'seq':>6s} {'switch':7s} "
        f"{'gpus':>10s}  cand  refused  accepted  with CP  overrides"
    )
    total = Count()
    own = 0  # candidates on their model's own recipe
    for row in rows:
        count = Count()
        for gpus in row.sizes:
            one = run(row, gpus)
            count.add(one)
            count.failures += one.failures
        total.add(count)
        own += count.candidates if row.own else 0
        st = row.setting
        print(
            f"{row.case.model:16s} {'own' if row.own else 'gpt3':6s} {st.accelerator:6s} "
            f"{st.precision:5s} {st.seq:6d} {st.switches:7s} {'/'.join(map(str, row.sizes)):>10s}  "
            f"{count.candidates:4d}  {count.refused:7d}  {count.accepted:8d}  "
            f"{sum(count.cp.values()):7d}  {count.overrides if row.own else '-':>9}"
        )
        for f in count.failures:
            print("    ", f)
    print(
        f"{'all':16s} {len(rows):3d} rows{'':35s}  {total.candidates:4d}  {total.refused:7d}  "
        f"{total.accepted:8d}  {sum(total.cp.values()):7d}  {total.overrides:9d}"
    )
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(total.cp.items()))
    print(f"accepted candidates with CP, by cp_comm_type: {kinds or 'none'}")
    cache.cleanup()
    print(
        f"candidates on their model's own recipe: {own}; also started through Bridge's "
        f"override parser (run_recipe.py): {total.overrides}"
    )
    return 0 if total.accepted == total.candidates and total.overrides == own else 1


if __name__ == "__main__":
    raise SystemExit(main())
