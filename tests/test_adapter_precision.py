"""The precision a plan was priced at is the precision ``apply`` sets up, on the real Megatron
Bridge 0.3.1 and megatron-core (CPU, no TE).

A plan priced at FP8, MXFP8 or NVFP4 writes the quantisation fields of Bridge's own named
mixed-precision recipe for that format (``megatron/bridge/training/mixed_precision.py``), so the
container that validates is the one that runs at the priced speed; before, an FP8 plan applied
to a BF16 recipe ran BF16.  The ``bridge`` fixture (tests/conftest.py) skips these tests with the
reason when Bridge is not installed.
"""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat import StrategyError
from parastrat.adapters import megatron as mg
from parastrat.spec.models import get

from .conftest import declare_te_version
from .test_adapter_bridge import differences, snapshot, validate, with_provider
from .test_adapter_megatron_lm import parse

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

#: parastrat precision spelling -> (device that has it, Bridge's named recipe for it)
PRECISIONS = {
    "bf16": ("h100", "bf16_mixed"),
    "fp8": ("h100", "bf16_with_fp8_current_scaling_mixed"),
    "fp8-delayed": ("h100", "bf16_with_fp8_delayed_scaling_mixed"),
    "fp8-blockwise": ("h100", "bf16_with_fp8_subchannel_scaling_mixed"),
    "mxfp8": ("gb200", "bf16_with_mxfp8_mixed"),
    "nvfp4": ("gb200", "bf16_with_nvfp4_mixed"),
}
#: the quantisation fields Bridge's named recipes set, which ``apply`` writes
QUANT_FIELDS = ("fp8", "fp8_recipe", "fp4", "fp4_recipe", "fp8_param_gather")


def plan_at(precision: str):
    accel, _ = PRECISIONS[precision]
    return ps.plan(
        get("llama3-70b"),
        ps.Cluster(accelerator=accel, num_devices=64),
        seq_len=2048,
        global_batch_size=256,
        precision=precision,
        top_k=1,
    )


def quant(section) -> dict:
    """The quantisation settings that decide the GEMMs' format (the recipe field only matters
    when its format is on)."""
    out = {"fp8": section.fp8, "fp4": section.fp4, "gather": section.fp8_param_gather}
    out["fp8_recipe"] = section.fp8_recipe if section.fp8 else None
    out["fp4_recipe"] = section.fp4_recipe if section.fp4 else None
    return out


@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p != "bf16"])
def test_applied_plan_runs_at_the_precision_it_was_priced_at(bridge, monkeypatch, precision):
    """Applied to a BF16 recipe container (and to one already at another format), a quantised
    plan's quantisation fields equal Bridge's named recipe for its precision; after Bridge's
    own start-up step (``MixedPrecisionConfig.finalize`` + ``setup``) the model config carries
    them, and the container validates."""
    from megatron.bridge.training.mixed_precision import (
        bf16_with_fp8_delayed_scaling_mixed,
        get_mixed_precision_config,
    )

    declare_te_version()  # Bridge's FP4 gate asks for TE >= 2.7, which a Bridge install has
    plan = plan_at(precision)
    want = quant(get_mixed_precision_config(PRECISIONS[precision][1]))
    for start in (None, bf16_with_fp8_delayed_scaling_mixed):
        cfg = with_provider("Llama3ModelProvider70B")
        if start is not None:
            cfg.mixed_precision = start()
        mg.apply(cfg, plan, world_size=64)
        assert quant(cfg.mixed_precision) == want
        cfg.mixed_precision.finalize()
        cfg.mixed_precision.setup(cfg.model, cfg.optimizer, cfg.ddp)
        assert (cfg.model.fp8, cfg.model.fp4) == (want["fp8"], want["fp4"])
        validate(cfg, 64, monkeypatch)


@pytest.mark.parametrize("precision", ["fp8", "mxfp8", "nvfp4"])
def test_overrides_and_megatron_lm_args_carry_the_precision(bridge, precision):
    """Bridge's own override parser, given ``to_overrides(plan)``, builds the same container as
    ``apply``; Megatron-LM's arguments name the same format and recipe."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    plan = plan_at(precision)
    applied = mg.apply(with_provider("Llama3ModelProvider70B"), plan, world_size=64)
    parsed = with_provider("Llama3ModelProvider70B")
    parsed = process_config_with_overrides(parsed, cli_overrides=mg.to_overrides(plan)) or parsed
    diff = differences(snapshot(applied), snapshot(parsed))
    assert [d for d in diff if d != "model.pipeline_dtype"] == []
    assert quant(parsed.mixed_precision) == quant(applied.mixed_precision)
    args = parse(mg.megatron_lm_args(plan))
    section = applied.mixed_precision
    assert (args.fp8_format, args.fp4_format) == (section.fp8, section.fp4)
    if section.fp8:
        assert args.fp8_recipe == section.fp8_recipe
    assert args.fp8_param_gather is section.fp8_param_gather


def test_named_recipe_container_gets_every_field_on_one_resolved_recipe(bridge, monkeypatch):
    """A container whose ``mixed_precision`` is a recipe name: every field the plan sets lands
    on the same resolved recipe (the gradient dtype and the FP8 fields together)."""
    plan = plan_at("fp8")
    cfg = with_provider("Llama3ModelProvider70B")
    cfg.mixed_precision = "bf16_mixed"
    mg.apply(cfg, plan, world_size=64)
    mp = cfg.mixed_precision
    assert not isinstance(mp, str)
    assert (mp.fp8, mp.fp8_recipe, mp.fp8_param_gather) == ("hybrid", "tensorwise", True)
    assert mp.grad_reduce_in_fp32 is plan.step_options["grad_reduce_in_fp32"]
    validate(cfg, 64, monkeypatch)


def test_bf16_plan_leaves_a_quantised_recipe_alone(bridge, monkeypatch):
    """BF16 is the planner's default: a plan made without ``precision`` does not turn a
    recipe's MXFP8 off (it would slow the run); nothing precision-related is written."""
    from megatron.bridge.training.mixed_precision import bf16_with_mxfp8_mixed

    cfg = with_provider("Llama3ModelProvider70B")
    cfg.mixed_precision = bf16_with_mxfp8_mixed()
    plan = plan_at("bf16")
    with pytest.warns(UserWarning, match="priced at bf16.*keeps its quantised"):
        _, changes = mg.apply(cfg, plan, world_size=64, report=True)  # said, not silent
    assert (cfg.mixed_precision.fp8, cfg.mixed_precision.fp8_recipe) == ("e4m3", "mxfp8")
    assert not {c.path for c in changes} & {f"mixed_precision.{f}" for f in QUANT_FIELDS}
    assert not [o for o in mg.to_overrides(plan) if o.split("=")[0].endswith(QUANT_FIELDS)]
    validate(cfg, 64, monkeypatch)


def test_bare_strategy_keeps_the_container_precision(bridge):
    from megatron.bridge.training.mixed_precision import bf16_with_mxfp8_mixed

    cfg = with_provider("Llama3ModelProvider70B")
    cfg.mixed_precision = bf16_with_mxfp8_mixed()
    mg.apply(cfg, plan_at("bf16").best.strategy, world_size=64)
    assert (cfg.mixed_precision.fp8, cfg.mixed_precision.fp8_recipe) == ("e4m3", "mxfp8")


def test_megatron_core_config_holds_the_precision_itself():
    """A bare Megatron Core ``TransformerConfig`` has the quantisation fields on itself."""
    core = pytest.importorskip("megatron.core.transformer.transformer_config")
    cfg = core.TransformerConfig(
        num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8
    )
    cand = plan_at("fp8-delayed").best
    mg.apply(cfg, cand, world_size=64)
    assert (cfg.fp8, cfg.fp8_recipe, cfg.fp4) == ("hybrid", "delayed", None)
    mg.apply(cfg, plan_at("nvfp4").best, world_size=64)
    assert (cfg.fp8, cfg.fp4, cfg.fp4_recipe) == (None, "e2m1", "nvfp4")


def test_refused_precision_leaves_the_container_untouched(bridge):
    """A plan whose precision the installed megatron-core cannot hold is refused whole."""
    cfg = with_provider("Llama3ModelProvider70B")
    cfg.mixed_precision = "no_such_recipe"
    before = snapshot(cfg)
    with pytest.raises(StrategyError, match="mixed-precision-unknown"):
        mg.apply(cfg, plan_at("fp8"), world_size=64)
    assert snapshot(cfg) == before
