"""Strategy's data-parallel sharding fields: torchtitan's degree names, Megatron's levels, the
rules each framework enforces (reported all at once, with fixes that work)."""

from __future__ import annotations

import pytest

from parastrat import Strategy, StrategyError, layout
from parastrat.rules import FSDP_LEVELS


def test_degrees_multiply_to_dp_and_minus_one_takes_the_rest():
    s = Strategy(tp=2, dp_shard=4, dp_replicate=2, fsdp="optim_grads_params")
    assert (s.dp, s.world_size, s.dp_shard_degree) == (8, 16, 4)
    t = Strategy(tp=2, dp_shard=-1, dp_replicate=2).with_world_size(16)
    assert (t.dp_shard, t.dp_shard_degree, t.dp_replicate) == (None, 4, 2)
    assert Strategy().dp_replicate == 1  # unset means 1


def test_round_trip_and_str_carry_the_sharding():
    s = Strategy(tp=2, dp_replicate=2, fsdp="optim").with_world_size(16)
    d = s.to_dict()
    assert (d["dp_shard"], d["dp_replicate"], d["fsdp"]) == (None, 2, "optim")
    assert Strategy.from_dict(d) == s
    assert "S4xR2" in str(s) and "FSDP:optim" in str(s)
    assert str(Strategy(tp=2)) == "TP2 PP1 CP1"  # unchanged without sharding


@pytest.mark.parametrize("level", [None, *FSDP_LEVELS])
def test_every_megatron_level_is_accepted(level):
    assert Strategy(fsdp=level).fsdp == (None if level == "no_shard" else level)


def test_every_broken_rule_at_once_with_a_working_fix():
    with pytest.raises(StrategyError) as e:
        Strategy(fsdp="zero3", dp_shard=0, dp_replicate=True)
    assert e.value.rules == ["dp_shard-positive", "dp_replicate-type", "fsdp-unknown"]
    with pytest.raises(StrategyError, match="use fsdp='optim_grads_params'"):
        Strategy(fsdp="ZeRO-3")  # an alias: the error names Megatron's level


def test_bridge_refuses_megatron_fsdp_with_tp_pp_dp_mapping():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=2, pp=2, fsdp="optim", order="tp-cp-ep-pp-dp")
    assert e.value.rules == ["fsdp-order"]
    Strategy(tp=2, pp=2, fsdp="optim")  # the fix: the default order


def test_inference_has_no_sharding():
    with pytest.raises(StrategyError) as e:
        Strategy(ulysses=2, dp_replicate=2)
    assert e.value.rules == ["fsdp-inference"]


def test_shard_times_replicate_must_be_dp_and_fixes_work():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=2, dp_shard=3, dp_replicate=2).with_world_size(16)
    assert "dp-shard-world" in e.value.rules
    assert "use dp_shard=4" in str(e.value)
    Strategy(tp=2, dp_shard=4, dp_replicate=2).with_world_size(16)
    with pytest.raises(StrategyError) as e:
        Strategy(dp_replicate=3).with_world_size(8)
    assert e.value.rules == ["dp-replicate-world"]
    Strategy(dp_replicate=4).with_world_size(8)


def test_replicas_must_divide_the_expert_data_parallel_group():
    # tp 2 -> dp 8; ep 8 etp 1 -> expert dp 2: four optimizer instances cannot split it
    with pytest.raises(StrategyError) as e:
        Strategy(tp=2, ep=8, dp_replicate=4).with_world_size(16)
    assert e.value.rules == ["dp-replicate-expert"]
    assert "{1, 2}" in str(e.value)
    Strategy(tp=2, ep=8, dp_replicate=2).with_world_size(16)


def test_fsdp_over_one_rank_is_a_warning():
    s = Strategy(tp=8, fsdp="optim_grads_params")
    assert [v.rule for v in s.warnings(world_size=8)] == ["fsdp-nothing-to-shard", "tp-without-sp"]
    assert not [v for v in Strategy(tp=8, sp=True, fsdp="optim").warnings(world_size=16)]


def test_layout_without_sharding_keeps_todays_groups():
    g = layout(Strategy(tp=2, cp=2), 16)
    assert g["dp_shard"] == g["dp"] and g["dp_shard-cp"] == g["dp-cp"]
    assert g["dp_replicate"] == [[r] for r in range(16)]
