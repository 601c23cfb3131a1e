"""Megatron FSDP through parastrat.adapters.megatron, against the real Megatron Bridge 0.3.1.

The FSDP rows of the field table (``dist``/``ddp.use_megatron_fsdp``,
``ddp.data_parallel_sharding_strategy``, ``ddp.num_distributed_optimizer_instances``, the
distributed optimizer in ``ddp`` and ``optimizer``, ``checkpoint.ckpt_format``) written into a
real recipe's ``ConfigContainer`` with a real model provider, then Bridge's own ``validate()``
(which also runs Megatron Core's ``TransformerConfig`` checks) and its override parser.
"""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg
from parastrat.spec.models import get

from .test_adapter_bridge import differences, snapshot, validate, with_provider

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

FSDP_STRATEGIES = [
    (Strategy(tp=8, fsdp="optim_grads_params"), 64),
    (Strategy(tp=4, cp=2, dp_replicate=2, fsdp="optim_grads", sp=True), 64),
    (Strategy(tp=8, pp=2, fsdp="optim"), 64),
]


@pytest.mark.parametrize(("s", "world"), FSDP_STRATEGIES, ids=str)
def test_fsdp_strategy_applies_and_bridge_validates(bridge, monkeypatch, s, world):
    cfg = with_provider("Llama3ModelProvider70B")
    cfg.checkpoint.save = "/tmp/parastrat-fsdp-ckpt"  # validate() then checks ckpt_format
    mg.apply(cfg, s, world_size=world)
    assert cfg.ddp.use_megatron_fsdp and cfg.dist.use_megatron_fsdp
    assert cfg.ddp.data_parallel_sharding_strategy == s.fsdp
    assert cfg.ddp.num_distributed_optimizer_instances == s.dp_replicate
    assert cfg.ddp.use_distributed_optimizer and cfg.optimizer.use_distributed_optimizer
    assert cfg.checkpoint.ckpt_format == "fsdp_dtensor"
    validate(cfg, world, monkeypatch)  # Bridge's own checks accept it
    assert mg.from_config(cfg, world_size=world) == s.with_world_size(world)


def test_fsdp_overrides_through_bridge_parser_equal_apply(bridge):
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    s = Strategy(tp=4, dp_replicate=2, fsdp="optim_grads_params", sp=True)
    lines = mg.to_overrides(s)
    assert "ddp.data_parallel_sharding_strategy=optim_grads_params" in lines
    applied = mg.apply(with_provider("Llama3ModelProvider70B"), s)
    parsed = with_provider("Llama3ModelProvider70B")
    parsed = process_config_with_overrides(parsed, cli_overrides=lines) or parsed
    assert [d for d in differences(snapshot(applied), snapshot(parsed))] == []


def test_strategy_without_fsdp_leaves_fsdp_fields_alone(bridge):
    cfg = with_provider("Llama3ModelProvider70B")
    before = snapshot(cfg)
    mg.apply(cfg, Strategy(tp=8, pp=2), world_size=64)
    changed = differences(before, snapshot(cfg))
    assert not [k for k in changed if k.split(".")[0] in ("ddp", "optimizer", "checkpoint")]
    assert cfg.ddp.use_megatron_fsdp is False


def test_fsdp_with_tp_pp_dp_order_is_refused_and_config_untouched(bridge):
    cfg = with_provider("Llama3ModelProvider70B")
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=8, order="tp-cp-ep-pp-dp", fsdp="optim_grads"), world_size=64)
    assert "fsdp-order" in str(err.value)
    assert differences(before, snapshot(cfg)) == []


def test_planned_fsdp_candidate_applies_and_validates(bridge, monkeypatch):
    """A plan searched with FSDP: its best FSDP candidate goes through apply and validate()."""
    plan = ps.plan(
        get("llama3-8b"),
        ps.Cluster(accelerator="h100", num_devices=8),
        seq_len=8192,
        global_batch_size=32,
        fsdp="optim_grads_params",
        top_k=3,
    )
    cand = next(c for c in plan.ranked if c.strategy.fsdp is not None)
    # at the plan's length: a candidate is applied as its plan would be (plan-seq-len)
    cfg = with_provider("Llama3ModelProvider8B", seq=plan.seq_len)
    mg.apply(cfg, cand, world_size=8)
    assert cfg.ddp.data_parallel_sharding_strategy == "optim_grads_params"
    assert cfg.train.micro_batch_size == cand.micro_batch_size
    validate(cfg, 8, monkeypatch)
