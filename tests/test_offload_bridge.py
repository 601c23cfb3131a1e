"""A plan priced with CPU activation offloading runs with it: ``apply``, ``to_overrides`` and
``--format megatron-args`` on the real Megatron Bridge 0.3.1 / megatron-core (CPU, no TE).

The applied container carries ``cpu_offloading`` with the priced layer count (and
``cpu_offloading_weights=False``, as Bridge's performance scripts set it) and validates; Bridge's
own override parser builds the same container; Megatron-LM's argument names parse; a candidate
Megatron would refuse (offloading with a pipeline) is refused with parastrat's rule ids and the
container is left untouched.  The ``bridge`` fixture skips these tests with the reason when
Bridge is not installed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import parastrat as ps
from parastrat import StrategyError
from parastrat.adapters import megatron as mg

from .test_adapter_bridge import differences, snapshot, validate, with_provider
from .test_adapter_megatron_lm import megatron_lm_parser

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


@pytest.fixture(scope="module")
def offload_plan():
    """Llama 3 70B, 64 GB300s, FP8, MBS 2, TP1 PP1 with FSDP: the best candidate offloads."""
    plan = ps.plan(
        ps.models.get("llama3-70b"),
        ps.Cluster(accelerator="gb300", num_devices=64),
        seq_len=8192,
        global_batch_size=256,
        precision="fp8",
        top_k=3,
        tp=1,
        pp=1,
        cp=1,
        fsdp="optim_grads_params",
        micro_batch_size=2,
    )
    assert plan.best.switches is not None and plan.best.switches.cpu_offload_layers > 0
    return plan


def test_apply_writes_the_offloading_priced_and_bridge_validates(bridge, monkeypatch, offload_plan):
    k = offload_plan.best.switches.cpu_offload_layers
    cfg = with_provider("Llama3ModelProvider70B", seq=offload_plan.seq_len)
    cfg.model.recompute_granularity = "full"  # the recipe's recompute is replaced, not kept
    cfg.model.recompute_method, cfg.model.recompute_num_layers = "uniform", 1
    mg.apply(cfg, offload_plan, world_size=64)
    m = cfg.model
    assert (m.cpu_offloading, m.cpu_offloading_num_layers) == (True, k)
    assert (m.cpu_offloading_activations, m.cpu_offloading_weights) == (True, False)
    assert m.recompute_granularity is None and m.pipeline_model_parallel_size == 1
    validate(cfg, 64, monkeypatch)  # Bridge finalises the model config: Megatron's checks run


def test_a_plan_without_offloading_turns_it_off(bridge, monkeypatch, offload_plan):
    """Applying a candidate priced without offloading (full recompute) to a container that
    offloads writes it off, as Megatron refuses offloading with recompute."""
    full = next(c for c in offload_plan.ranked if c.recompute == "full")
    cfg = with_provider("Llama3ModelProvider70B", seq=offload_plan.seq_len)
    cfg.model.cpu_offloading, cfg.model.cpu_offloading_num_layers = True, 20
    plan = replace(offload_plan, candidates=[full])
    mg.apply(cfg, plan, world_size=64)
    assert (cfg.model.cpu_offloading, cfg.model.cpu_offloading_num_layers) == (False, 0)
    assert cfg.model.recompute_granularity == "full"
    validate(cfg, 64, monkeypatch)


def test_overrides_through_bridges_parser_equal_apply(bridge, offload_plan):
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    applied = mg.apply(
        with_provider("Llama3ModelProvider70B", seq=offload_plan.seq_len),
        offload_plan,
        world_size=64,
    )
    parsed = with_provider("Llama3ModelProvider70B", seq=offload_plan.seq_len)
    overrides = mg.to_overrides(offload_plan)
    k = offload_plan.best.switches.cpu_offload_layers
    assert f"model.cpu_offloading_num_layers={k}" in overrides
    parsed = process_config_with_overrides(parsed, cli_overrides=overrides) or parsed
    assert [d for d in differences(snapshot(applied), snapshot(parsed))] == []


def test_megatron_lm_args_name_the_layer_count(offload_plan):
    """Megatron-LM declares ``--cpu-offloading-num-layers`` (its validate_args turns
    cpu_offloading on from it); the FSDP arguments are someone else's (parse_known_args)."""
    argv = mg.megatron_lm_args(offload_plan)
    args, _ = megatron_lm_parser().parse_known_args(argv)
    assert args.cpu_offloading_num_layers == offload_plan.best.switches.cpu_offload_layers
    without = replace(offload_plan.best, switches=None)
    assert "--cpu-offloading-num-layers" not in mg.megatron_lm_args(without)


def test_refused_offload_candidate_leaves_the_container_untouched(bridge, offload_plan):
    """A candidate offloading with a pipeline: parastrat refuses it with the rule Megatron
    Core's TransformerConfig raises for, before anything is written."""
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    best = offload_plan.best
    bad = replace(best, strategy=ps.Strategy(tp=1, pp=2).with_world_size(64))
    cfg = with_provider("Llama3ModelProvider70B", seq=offload_plan.seq_len)
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, bad, world_size=64)
    assert "cpu-offload-pp" in {v.rule for v in err.value.violations}
    assert differences(before, snapshot(cfg)) == []
    import torch

    with pytest.raises(ValueError, match="Pipeline parallelism with CPU offloading"):
        tc.TransformerConfig(
            num_layers=80,
            hidden_size=8192,
            num_attention_heads=64,
            pipeline_model_parallel_size=2,
            pipeline_dtype=torch.bfloat16,
            cpu_offloading=True,
            cpu_offloading_num_layers=best.switches.cpu_offload_layers,
        )
