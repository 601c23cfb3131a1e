"""Override lines go where a recipe holds each section, so Bridge's own parser takes them.

Bridge 0.3.1's recipes differ in two sections: ``comm_overlap`` is None in some (Llama 3 8B,
Qwen3, GPT-OSS) and ``mixed_precision`` is a recipe name in most.  A line written for the
other shape is refused by ``run_recipe.py``'s parser ("Could not override"): before this,
every plan's ``--format overrides`` output was refused on every recipe that names its
precision.  Here the lines are parsed by the real Bridge onto the real recipes (their Hugging
Face configs served from tests/data/hf), they pass Bridge's start-up, and the container they
build equals the one ``apply`` builds; the recorded shapes (``RECIPE_SHAPES``) are checked
against every recipe parastrat names.
"""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest

import parastrat as ps
from parastrat.adapters import bridge_overrides as bo
from parastrat.adapters import megatron as mg
from parastrat.errors import UsageError

from .conftest import without_cpu_missing_kernels
from .test_adapter_bridge import differences, snapshot
from .test_bridge_acceptance_start_up import start_up

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

HF = Path(__file__).parent / "data" / "hf"
#: The Hugging Face config served for a repo id a recipe loads (first match of a lower-case
#: fragment): the model's own where tests/data/hf has it, else its family's.  The sections
#: checked here do not depend on the model's sizes.
FAMILY = (
    ("deepseek-v2-lite", "deepseek-v2"),
    ("qwen3-235b", "qwen3-235b-a22b"),
    ("qwen3-30b", "qwen3-30b-a3b"),
    ("qwen3-32b", "qwen3-32b"),
    ("qwen3", "qwen3-8b"),
    ("llama-3.2-1b", "llama3.2-1b"),
    ("meta-llama-3-70b", "llama3-70b"),
    ("meta-llama-3.1-405b", "llama3.1-405b"),
    ("llama", "llama3-8b"),
    ("deepseek-v3", "deepseek-v3"),
    ("moonlight", "deepseek-v3"),  # Moonlight-16B-A3B is a DeepSeek-V3-class model
    ("deepseek-v2", "deepseek-v2"),
    ("gpt-oss-20b", "gpt-oss-20b"),
    ("gpt-oss", "gpt-oss-120b"),
    ("olmoe", "olmoe-1b-7b"),
)


@pytest.fixture
def recipes(bridge, monkeypatch):
    """``megatron.bridge.recipes`` with Hugging Face configs read from tests/data/hf (no
    download) and an H100 answering the device query of the MoE recipes."""
    import torch
    from transformers import AutoConfig

    def from_pretrained(repo, *args, **kwargs):
        for fragment, name in FAMILY:
            if fragment in str(repo).lower():
                return AutoConfig.for_model(**json.loads((HF / f"{name}.json").read_text()))
        raise OSError(f"no config for {repo} in tests/data/hf")

    monkeypatch.setattr(AutoConfig, "from_pretrained", from_pretrained)
    h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: h100)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    from megatron.core import utils
    from packaging.version import Version

    from .conftest import BRIDGE_TE_FLOOR

    # Megatron Core's FP8 gates ask for the TE version this machine lacks: Bridge's floor
    monkeypatch.setattr(utils, "_te_version", Version(BRIDGE_TE_FLOOR))
    import megatron.bridge.recipes as r

    return r


def built(recipes, name: str):
    """Recipe ``name``'s container as ``run_recipe.py`` builds it, without the fusions this
    CPU machine lacks (Transformer Engine's RoPE and permute kernels, its FusedAdam for the
    precision-aware optimizer OLMoE's recipe turns on)."""
    return without_cpu_missing_kernels(getattr(recipes, name)())


def test_recorded_shapes_are_the_recipes(recipes):
    """Every recipe ``default_recipe`` names and every recorded one has the shape
    ``shape_of(name)`` gives it (a recorded one, or the base shape), and a named precision's
    recorded fields are what Bridge's named recipe sets."""
    from parastrat.spec.models import names

    named = {mg.default_recipe(n) for n in names()} - {None}
    for name in sorted(named | set(bo.RECIPE_SHAPES)):
        got = bo.shape_of(built(recipes, name))
        want = bo.shape_of(name)
        assert (got.comm_overlap, got.mixed_precision, got.dataset_seq) == (
            want.comm_overlap,
            want.mixed_precision,
            want.dataset_seq,
        ), name
        if want.mixed_precision is not None:  # read from Bridge: the fields off their default
            assert got.precision_base() == _off_default(want.precision_base()), name
    # not recorded: the base, with a fine-tuning dataset's key, as the built recipe has it
    sft = bo.shape_of("llama3_8b_sft_config")
    assert sft == dataclasses.replace(bo.BASE_SHAPE, dataset_seq="seq_length")
    assert bo.shape_of(built(recipes, "llama3_8b_sft_config")).dataset_seq == sft.dataset_seq


def test_recorded_recipe_names_are_the_ones_bridge_exports(recipes):
    """``bridge_recipes.json`` (what ``plan --recipe`` is checked against) lists exactly the
    recipe functions the installed Bridge exports, where ``run_recipe.py`` finds them."""
    exported = {n for n in dir(recipes) if n.endswith("_config") and callable(getattr(recipes, n))}
    assert bo.exported_recipes() == exported
    assert bo.recipe_note("qwen3_30b_a3b_pretrain_config") is None
    assert "did you mean qwen3_30b_a3b_pretrain_config" in bo.recipe_note("qwen3_30b_a3b_pretrain")
    assert "did you mean llama3_70b_pretrain_config" in bo.recipe_note("llama3_70b_pretrain_confg")
    # sharing only the "_config" suffix is no likeness: no unrelated recipe is offered
    assert "did you mean" not in bo.recipe_note("nope_config")


def _off_default(fields: dict) -> dict:
    from megatron.bridge.training.mixed_precision import MixedPrecisionConfig

    default = MixedPrecisionConfig()
    return {k: v for k, v in fields.items() if v != getattr(default, k)}


def _plan(model: str, gpus: int, precision: str):
    return ps.plan(
        ps.models.get(model),
        ps.Cluster("h100", gpus),
        seq_len=4096,
        global_batch_size=4 * gpus,
        precision=precision,
        top_k=1,
    )


# (recipe's preset, devices, precision): one recipe of each shape
SHAPES = [
    ("llama3-8b", 8, "fp8"),  # no comm_overlap, named bf16_mixed
    ("deepseek-v2", 64, "fp8"),  # comm_overlap, named bf16_mixed, MoE switches
    ("olmoe-7b", 8, "bf16"),  # comm_overlap, a MixedPrecisionConfig
    ("nemotron-h-56b", 64, "bf16"),  # named FP8 recipe kept by a BF16 plan, as apply keeps it
]


def at_seq(cfg, seq_len: int):
    """``cfg`` with its model and dataset at ``seq_len`` tokens."""
    cfg.model.seq_length = seq_len
    cfg.dataset.seq_length = seq_len
    return cfg


@pytest.mark.parametrize("model,gpus,precision", SHAPES)
def test_overrides_parse_start_and_equal_apply(recipes, monkeypatch, model, gpus, precision):
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    plan = _plan(model, gpus, precision)
    name = mg.default_recipe(model)
    # apply refuses a plan priced at another length than the config's; the overrides carry it
    applied = mg.apply(at_seq(built(recipes, name), plan.seq_len), plan, world_size=gpus)
    lines = mg.to_overrides(plan, recipe=name)
    parsed = built(recipes, name)
    parsed = process_config_with_overrides(parsed, cli_overrides=lines) or parsed
    # apply also sets pipeline_dtype where the model leaves it unset (finalize() does the
    # same); a layer spec is a function each recipe build makes anew
    a, b = snapshot(applied), snapshot(parsed)
    assert [d for d in differences(a, b) if "pipeline_dtype" not in d and not callable(a[d])] == []
    mp = parsed.mixed_precision
    assert mp.grad_reduce_in_fp32 is False  # as priced, not bf16_mixed's fp32 reduction
    if precision == "fp8":
        assert (mp.fp8, mp.fp8_recipe, mp.fp8_param_gather) == ("hybrid", "tensorwise", True)
    start_up(parsed, gpus, monkeypatch)
    assert parsed.model.tensor_model_parallel_size == plan.best.strategy.tp
    assert parsed.model.fp8 == ("hybrid" if precision == "fp8" or "nemotron" in model else None)


def test_torchrun_line_carries_the_priced_precision(recipes, monkeypatch):
    """An FP8 plan's torchrun line on a BF16 recipe runs FP8 (it ran the recipe's BF16)."""
    import shlex

    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    from parastrat.cli.plan import torchrun_line

    plan = _plan("llama3-8b", 8, "fp8")
    line = torchrun_line(plan, plan.cluster, plan.global_batch_size, "llama3_8b_pretrain_config")
    words = shlex.split(line.split("\\\n", 1)[1])
    cfg = built(recipes, "llama3_8b_pretrain_config")
    cfg = process_config_with_overrides(cfg, cli_overrides=words[words.index("--recipe") + 2 :])
    start_up(cfg, 8, monkeypatch)
    assert cfg.model.fp8 == "hybrid" and cfg.ddp.grad_reduce_in_fp32 is False


def test_comm_overlap_fields_go_to_the_model_where_the_recipe_has_no_section():
    writes = [
        (("model",), "tensor_model_parallel_size", 2),
        (("comm_overlap", "model"), "tp_comm_overlap", True),
        (("mixed_precision",), "grad_reduce_in_fp32", False),
        (("mixed_precision", "model"), "fp8", "hybrid"),
    ]
    without = bo.override_lines(writes, bo.shape_of("llama3_8b_pretrain_config"))
    assert without[:2] == ["model.tensor_model_parallel_size=2", "model.tp_comm_overlap=true"]
    assert len(without) == 3 and without[2].startswith("++mixed_precision={_target_:")
    assert "grad_reduce_in_fp32:false" in without[2] and "fp8:hybrid" in without[2]
    assert "params_dtype:{_target_:torch.bfloat16,_call_:false}" in without[2]
    with_objects = bo.override_lines(writes, bo.shape_of("llama3_70b_pretrain_config"))
    assert with_objects == [
        "model.tensor_model_parallel_size=2",
        "comm_overlap.tp_comm_overlap=true",
        "mixed_precision.grad_reduce_in_fp32=false",
        "mixed_precision.fp8=hybrid",
    ]
    assert bo.shape_of(None) == bo.UNKNOWN_SHAPE  # a container built in Python: objects
    assert bo.shape_of("my_own_recipe") == bo.BASE_SHAPE  # what every Bridge recipe starts from


def test_a_container_without_mixed_precision_gets_model_fields_as_apply_writes_them(
    recipes, monkeypatch
):
    """``mixed_precision=None`` (ConfigContainer's default): the quantisation fields go to
    the model, the section's own (gradient dtype) are left out -- as ``apply`` does -- and
    Bridge's parser takes the lines."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    plan = _plan("llama3-8b", 8, "fp8")
    bare = built(recipes, "llama3_8b_pretrain_config")
    bare.mixed_precision = None
    lines = mg.to_overrides(plan, recipe=bare)
    assert "model.fp8=hybrid" in lines
    assert not any(w.startswith(("mixed_precision", "++mixed_precision")) for w in lines)
    parsed = process_config_with_overrides(bare, cli_overrides=lines) or bare
    assert parsed.model.fp8 == "hybrid" and parsed.model.fp8_recipe == "tensorwise"


def test_a_recipe_that_is_neither_a_name_nor_a_container_is_refused():
    plan = _plan("llama3-8b", 8, "bf16")
    with pytest.raises(UsageError, match=r"recipe's name .* or its ConfigContainer"):
        mg.to_overrides(plan, recipe=42)


def test_an_unknown_named_precision_asks_for_the_container():
    shape = bo.RecipeShape(comm_overlap=True, mixed_precision="my_fp8_mixed")
    with pytest.raises(UsageError, match="pass the recipe's container"):
        bo.override_lines([(("mixed_precision",), "fp8", "hybrid")], shape)


def test_launch_command_takes_a_plan_and_keeps_an_override_once():
    """``launch_command(plan, recipe=...)`` carries the plan's precision placed for the recipe;
    a recompute mode given again replaces the plan's (one word per key, the last value)."""
    plan = _plan("llama3-8b", 8, "fp8")
    argv = mg.launch_command(
        plan, recipe="llama3_8b_pretrain_config", nproc_per_node=8, recompute="full"
    )
    keys = [w.split("=", 1)[0] for w in argv if "=" in w and not w.startswith("--")]
    assert len(keys) == len(set(keys))
    assert "model.recompute_granularity=full" in argv
    precision = [w for w in argv if w.startswith("++mixed_precision=")]
    assert len(precision) == 1 and "fp8:hybrid" in precision[0]
    assert not any(w.startswith("comm_overlap.") for w in argv)  # the recipe has none
