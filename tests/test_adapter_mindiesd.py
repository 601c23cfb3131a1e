"""parastrat.adapters.mindiesd: MindIE-SD model-port settings from a Strategy.

The ports cannot be imported here (torch_npu + CANN); their ``ParallelConfig`` signature is
``(tp_degree=1, sp_degree=1, ulysses_degree=1, ring_degree=1, use_cfg_parallel=False,
world_size=1)`` (Wan2.1/Wan2.2 ``wan/distributed/parallel_mgr.py``), used below as a stand-in.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import parastrat
from parastrat import ModelSpec, Strategy, StrategyError
from parastrat.adapters import mindiesd as md
from parastrat.adapters.mindiesd import MindIEParallelConfig
from parastrat.errors import MissingExtraError
from parastrat.spec import dit

#: Wan2.1-14B-like DiT: 40 heads.  (vocab/ffn are irrelevant to the rules checked here.)
WAN = ModelSpec(
    name="wan2.1-14b-like",
    num_layers=40,
    hidden_size=5120,
    num_attention_heads=40,
    ffn_hidden_size=13824,
    vocab_size=1,
)
#: A GQA DiT: 40 query heads, 10 KV heads.
GQA = WAN.with_(name="gqa-dit", num_query_groups=10)


@dataclass
class PortParallelConfig:
    """Stand-in with the ports' ParallelConfig signature."""

    tp_degree: int = 1
    sp_degree: int = 1
    ulysses_degree: int = 1
    ring_degree: int = 1
    use_cfg_parallel: bool = False
    world_size: int = 1


def test_ulysses_with_cfg():
    # world = cfg 2 * sp (ulysses 4 * ring 1) * tp 1 = 8
    got = md.to_parallel_config(Strategy(ulysses=4, cfg=2))
    assert got == MindIEParallelConfig(
        tp_degree=1,
        sp_degree=4,
        ulysses_degree=4,
        ring_degree=1,
        use_cfg_parallel=True,
        world_size=8,
    )
    assert got.cfg_degree == 2


def test_every_degree_and_cli_args():
    # world = cfg 2 * ulysses 2 * ring 2 = 8
    s = Strategy(ulysses=2, ring=2, cfg=2)
    got = md.to_parallel_config(s)
    assert got.to_dict() == {
        "tp_degree": 1,
        "sp_degree": 4,
        "ulysses_degree": 2,
        "ring_degree": 2,
        "use_cfg_parallel": True,
        "world_size": 8,
    }
    assert md.to_cli_args(s) == [
        "--ulysses_size",
        "2",
        "--ring_size",
        "2",
        "--cfg_size",
        "2",
        "--tp_size",
        "1",
    ]
    assert md.to_cli_args(s, vae_parallel=True)[-1] == "--vae_parallel"
    assert md.to_cli_args(Strategy(tp=4, cfg=2))[-2:] == ["--tp_size", "4"]


def test_tp_with_sequence_parallelism_is_refused_as_the_ports_do():
    """The Wan2.1 port asserts ulysses_size == ring_size == 1 when tp_size > 1 (its yunchang
    groups would land on the TP pairs); the Wan2.2 port has no TP at all."""
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(Strategy(tp=2, ulysses=2, cfg=2))
    assert err.value.rules == ["mindiesd-tp-sp"]
    assert "ulysses = ring = 1 and tp = 4" in err.value.violations[0].hint
    wan22 = dit.get("wan2.2-t2v-a14b")
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(Strategy(tp=2, cfg=2), wan22)
    assert err.value.rules == ["mindiesd-tp"]
    assert md.to_parallel_config(Strategy(tp=2, cfg=2), dit.get("wan2.1-t2v-14b")).tp_degree == 2


def test_ring_only_strategy_in_training_order_is_expressible():
    # Strategy(ring=4) has Megatron's order (tp fastest, then cp): the same as tp-sp-cfg.
    got = md.to_parallel_config(Strategy(ring=4))
    assert (got.sp_degree, got.ring_degree, got.ulysses_degree, got.world_size) == (4, 4, 1, 4)


def test_world_size_from_a_strategy_with_dp():
    # with_world_size(8) on a 8-device grid gives dp 1: accepted.
    s = Strategy(ulysses=4, cfg=2).with_world_size(8)
    assert md.to_parallel_config(s).world_size == 8


def test_head_divisibility_reuses_the_strategy_rules():
    # 40 heads: 40 % 8 = 0 -> ulysses 8 fits; 40 % 16 = 8 -> ulysses 16 is refused, and the
    # hint lists the divisors of 40.
    assert md.to_parallel_config(Strategy(ulysses=8), WAN).ulysses_degree == 8
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(Strategy(ulysses=16), WAN)
    assert err.value.rules == ["heads-ulysses"]
    assert "{1, 2, 4, 5, 8, 10, 20, 40}" in err.value.violations[0].hint


def test_gqa_kv_heads_must_divide_by_ulysses():
    # 40 query heads % ulysses 4 = 0, but 10 KV heads % 4 = 2 -> MindIE-SD's USP raises.
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(Strategy(ulysses=4), GQA)
    assert err.value.rules == ["kv-heads-ulysses"]
    # ulysses 2 with ring 2 covers the same 4 devices: 10 % 2 = 0.
    assert md.to_parallel_config(Strategy(ulysses=2, ring=2), GQA).sp_degree == 4


def test_refusals_listed_together():
    # pp 2 and world 32 for a grid of cfg 2 * ulysses 2 * tp 2 = 8 per replica
    s = Strategy(tp=2, ulysses=2, cfg=2, pp=2)
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(s, world_size=32)
    assert set(err.value.rules) == {"mindiesd-pp", "mindiesd-world", "mindiesd-tp-sp"}


@pytest.mark.parametrize(
    "s, rule",
    [
        (Strategy(ep=2), "mindiesd-ep"),
        (Strategy(tp=2, sp=True), "mindiesd-megatron-sp"),
        (Strategy(ulysses=4, cfg=2).with_world_size(16), "mindiesd-world"),  # dp 2
        (Strategy(ulysses=2, cfg=2, order="sp-cfg-tp-pp-dp"), "mindiesd-order"),
    ],
)
def test_what_the_ports_cannot_express(s, rule):
    with pytest.raises(StrategyError) as err:
        md.to_parallel_config(s)
    assert err.value.rules == [rule]


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2]),
    ulysses=st.sampled_from([1, 2, 4]),
    ring=st.sampled_from([1, 2]),
    cfg=st.sampled_from([1, 2]),
)
def test_settings_agree_with_the_rank_layout(tp, ulysses, ring, cfg):
    """The ports place rank = t + tp*(sp index) + tp*sp*(cfg index): parastrat's layout of
    the same strategy must give the same groups (TP with sequence parallelism is refused
    above: the ports' yunchang groups would not be these)."""
    assume(tp == 1 or ulysses * ring == 1)
    s = Strategy(tp=tp, ulysses=ulysses, ring=ring, cfg=cfg)
    got = md.to_parallel_config(s)
    world = got.world_size
    assert world == tp * ulysses * ring * cfg == s.min_world_size
    groups = parastrat.layout(s, world)
    sp = got.sp_degree
    expect_tp = [
        [c * tp * sp + k * tp + t for t in range(tp)]
        for c in range(got.cfg_degree)
        for k in range(sp)
    ]
    expect_cfg = [
        [c * tp * sp + k * tp + t for c in range(got.cfg_degree)]
        for k in range(sp)
        for t in range(tp)
    ]
    assert sorted(groups["tp"]) == sorted(expect_tp)
    assert sorted(groups["cfg"]) == sorted(expect_cfg)
    assert all(len(g) == sp for g in groups["sp"])


def test_port_config_built_with_the_ports_class():
    port = md.to_port_config(Strategy(ulysses=2, ring=2, cfg=2), cls=PortParallelConfig)
    assert port == PortParallelConfig(
        tp_degree=1,
        sp_degree=4,
        ulysses_degree=2,
        ring_degree=2,
        use_cfg_parallel=True,
        world_size=8,
    )


def test_port_without_a_needed_field_is_refused():
    @dataclass
    class NoRing:
        tp_degree: int = 1
        sp_degree: int = 1
        ulysses_degree: int = 1
        use_cfg_parallel: bool = False
        world_size: int = 1

    assert md.to_port_config(Strategy(ulysses=4), cls=NoRing).ulysses_degree == 4
    with pytest.raises(StrategyError) as err:
        md.to_port_config(Strategy(ulysses=2, ring=2), cls=NoRing)
    assert err.value.rules == ["mindiesd-port-field"]


@pytest.mark.skipif(
    importlib.util.find_spec("wan") is not None, reason="a MindIE-SD port is importable here"
)
def test_port_class_missing_says_where_the_port_comes_from():
    """The port's ParallelConfig is the port's own code, not the mindiesd wheel's: the error
    says so instead of suggesting an install that would not provide it."""
    with pytest.raises(MissingExtraError) as err:
        md.to_port_config(Strategy(ulysses=2))
    assert err.value.extra == "mindiesd"
    text = str(err.value)
    assert "torch_npu" in text and "not part of the mindiesd wheel" in text
    assert "on sys.path" in text and "cls=" in text
    assert "Install it with" not in text


def test_a_replicated_split_is_refused_with_the_per_replica_call_that_works():
    """A DiT plan with data-parallel replicas (DiTSearch(data_parallel=True)) launches one
    service per replica; the refusal names that call, and the call works."""
    s = Strategy(ulysses=4, cfg=2).with_world_size(16)  # two replicas of 8
    with pytest.raises(StrategyError) as err:
        md.to_cli_args(s, WAN)
    assert "run 2 replicas (one service each) of 8 devices" in str(err.value)
    assert "to_cli_args(s, world_size=8)" in str(err.value)
    assert md.to_cli_args(s, WAN, world_size=8)[:2] == ["--ulysses_size", "4"]


def test_cli_args_carry_the_memory_switches_as_plan_dit_prints_them():
    """The adapter's flags equal the plan's MindIE-SD launch line, memory switches included
    (a split that fits only with FSDP must be launched with it)."""
    import parastrat as ps
    from parastrat.spec.dit_frameworks import LaunchSwitches

    s = Strategy(cfg=2)
    on = LaunchSwitches(dit_fsdp=True, encoder_fsdp=True, offload=True)
    args = md.to_cli_args(s, WAN, switches=on)
    assert args[8:] == ["--dit_fsdp", "--t5_fsdp", "--offload_model", "True"]
    line = ps.spec.dit_frameworks.FRAMEWORKS["mindiesd"].launch(s, on)
    assert " ".join(args) == line
    assert md.to_cli_args(s, WAN, vae_parallel=True)[-1] == "--vae_parallel"
