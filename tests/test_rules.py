"""Validation rules: model shape, sequence, batch, soft rules, and agreement with Megatron
Core's own TransformerConfig checks."""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError
from parastrat.errors import SpecError
from parastrat.spec.model import ModelSpec

LLAMA70 = ModelSpec(
    name="llama3-70b",
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_query_groups=8,
    ffn_hidden_size=28672,
    vocab_size=128256,
)
MOE = ModelSpec(
    name="toy-moe",
    num_layers=16,
    hidden_size=2048,
    num_attention_heads=16,
    ffn_hidden_size=8192,
    vocab_size=32000,
    num_moe_experts=64,
    moe_router_topk=8,
)
WAN14B_LIKE = ModelSpec(
    name="wan2.1-14b",
    num_layers=40,
    hidden_size=5120,
    num_attention_heads=40,
    ffn_hidden_size=13824,
    vocab_size=1,
)


def rules(s: Strategy, **kw) -> list[str]:
    return [v.rule for v in s.check(**kw) if v.severity == "error"]


def test_heads_tp_hint_lists_divisors():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=3).validate(
            ModelSpec(
                name="m",
                num_layers=4,
                hidden_size=4096,
                num_attention_heads=64,
                ffn_hidden_size=1,
                vocab_size=1,
            )
        )
    v = e.value.violations[0]
    assert v.rule == "heads-tp"
    assert "tp=3 does not divide 64 attention heads" in v.message
    assert "{1, 2, 4, 8, 16, 32, 64}" in v.hint


def test_query_groups():
    # 8 KV groups: tp 16 replicates KV heads (accepted by megatron-core >= 0.16) -> a warning.
    found = Strategy(tp=16, sp=True).check(LLAMA70)
    assert [v.rule for v in found if v.severity == "warning"][0] == "query-groups-tp-replicated"
    # 12 heads, 3 groups: tp 2 neither divides 3 nor is divided by it.
    m = LLAMA70.with_(num_attention_heads=12, num_query_groups=3, hidden_size=12 * 128)
    assert rules(Strategy(tp=2, sp=True), model=m) == ["query-groups-tp"]


def test_several_rules_reported_together():
    s = Strategy(tp=3, pp=3, cp=2, ep=4, sp=True)
    with pytest.raises(StrategyError) as e:
        s.validate(LLAMA70, world_size=100, seq_len=1002, global_batch_size=7)
    got = set(e.value.rules)
    assert {"world-dense", "heads-tp", "layers-pp", "ep-dense", "seq-cp"} <= got
    assert all(v.hint for v in e.value.violations)


def test_experts_and_ep():
    assert rules(Strategy(ep=3), model=MOE) == ["experts-ep"]
    assert rules(Strategy(ep=8), model=MOE, world_size=8) == []
    assert rules(Strategy(ep=8), model=LLAMA70) == ["ep-dense"]


def test_sequence_rules():
    # CP 4: 2*cp = 8 must divide the sequence; 8190 does not.
    assert rules(Strategy(cp=4), seq_len=8190) == ["seq-cp"]
    assert rules(Strategy(cp=4), seq_len=8192) == []
    # SP with TP 8: the sequence must split over tp*cp = 8 ranks.
    assert rules(Strategy(tp=8, sp=True), seq_len=4100) == ["seq-sp"]
    assert rules(Strategy(tp=8, sp=True), seq_len=4096) == []


def test_batch_rules():
    s = Strategy(tp=2, pp=2, sp=True)
    # 8 GPUs: dp 2; gbs 8 with mbs 1 -> 4 micro-batches per DP rank
    assert rules(s, world_size=8, global_batch_size=8, micro_batch_size=1) == []
    # gbs 10 with mbs 4 on dp 2: 10 % 8 != 0
    found = s.check(world_size=8, global_batch_size=10, micro_batch_size=4)
    bad = [v for v in found if v.rule == "batch-divisible"][0]
    assert "micro_batch_size*dp = 4*2 = 8" in bad.message and "8 or 16" in bad.hint
    # pipeline with fewer micro-batches than stages: a warning, not an error
    warn = Strategy(pp=4).check(world_size=4, global_batch_size=2)
    assert "pp-few-microbatches" in [v.rule for v in warn if v.severity == "warning"]


def test_ulysses_heads():
    # Wan2.1 1.3B has 12 heads: Ulysses 8 does not divide them (12 = 2*2*3); 4 does.
    wan13 = WAN14B_LIKE.with_(name="wan2.1-1.3b", hidden_size=1536, num_attention_heads=12)
    v = [x for x in Strategy(ulysses=8).check(wan13, world_size=8)][0]
    assert v.rule == "heads-ulysses" and "{1, 2, 3, 4, 6, 12}" in v.hint
    assert rules(Strategy(ulysses=4, ring=2), model=wan13, world_size=8) == []
    # Wan2.1 14B has 40 heads: 40 / 8 = 5, so Ulysses 8 is legal; 16 is not.
    assert rules(Strategy(ulysses=8), model=WAN14B_LIKE, world_size=8) == []
    assert rules(Strategy(ulysses=16), model=WAN14B_LIKE, world_size=16) == ["heads-ulysses"]
    # With TP 2 the Ulysses split applies to the 20 heads per TP rank.
    assert rules(Strategy(tp=2, ulysses=8), model=WAN14B_LIKE) == ["heads-ulysses"]


def test_kv_heads_ulysses_inference():
    m = WAN14B_LIKE.with_(num_attention_heads=32, num_query_groups=2)
    assert rules(Strategy(ulysses=4), model=m) == ["kv-heads-ulysses"]


def test_soft_rules_are_warnings():
    found = Strategy(tp=16, pp=4, sp=False).check(devices_per_node=8)
    warn = {v.rule for v in found if v.severity == "warning"}
    assert {"tp-across-nodes", "pp-without-vpp", "tp-without-sp"} <= warn
    assert all(v.severity == "warning" for v in found)
    Strategy(tp=16, pp=4).validate()  # warnings never raise


def test_bad_check_inputs():
    assert rules(Strategy(), world_size=0) == ["world-size-positive"]
    assert rules(Strategy(), seq_len=-1) == ["seq-len-positive"]
    assert rules(Strategy(), world_size=4, global_batch_size=0) == ["global-batch-size-positive"]


# --- agreement with Megatron Core's own TransformerConfig checks -------------------------
transformer_config = pytest.importorskip("megatron.core.transformer.transformer_config")


def megatron_accepts(**kw) -> bool:
    try:
        transformer_config.TransformerConfig(**kw)
    except (ValueError, AssertionError):
        return False
    return True


@pytest.mark.parametrize(
    "heads,groups,tp",
    [
        (64, 8, 1),
        (64, 8, 3),
        (64, 8, 8),
        (64, 8, 16),
        (40, 40, 8),
        (12, 3, 2),
        (12, 3, 6),
        (32, 4, 8),
        (32, 32, 5),
        (48, 48, 16),
    ],
)
def test_heads_and_groups_agree_with_megatron(heads, groups, tp):
    ours = Strategy(tp=tp, sp=tp > 1).check(
        ModelSpec(
            name="m",
            num_layers=2,
            hidden_size=heads * 64,
            num_attention_heads=heads,
            num_query_groups=groups,
            ffn_hidden_size=256,
            vocab_size=128,
        )
    )
    ours_ok = not [v for v in ours if v.severity == "error"]
    theirs_ok = megatron_accepts(
        num_layers=2,
        hidden_size=heads * 64,
        num_attention_heads=heads,
        num_query_groups=groups,
        tensor_model_parallel_size=tp,
        sequence_parallel=tp > 1,
    )
    assert ours_ok == theirs_ok


@pytest.mark.parametrize("tp,ep,sp", [(2, 2, False), (2, 2, True), (1, 4, False), (4, 1, False)])
def test_moe_sp_rule_agrees_with_megatron(tp, ep, sp):
    # megatron-core 0.16 warns (no longer raises) for EP + TP without SP: so do we.
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert megatron_accepts(
            num_layers=2,
            hidden_size=256,
            num_attention_heads=8,
            tensor_model_parallel_size=tp,
            expert_model_parallel_size=ep,
            num_moe_experts=8,
            sequence_parallel=sp,
            add_bias_linear=False,
        )
    theirs_warn = any("sequence parallelism must be used" in str(w.message) for w in caught)
    ours = [v.rule for v in Strategy(tp=tp, ep=ep, sp=sp).check()]
    assert ("ep-tp-without-sp" in ours) == theirs_warn


def test_sp_without_tp_megatron_view():
    # Megatron silently turns SP off with TP 1 in some versions; parastrat refuses it with a
    # fix, as the seed guide lists SP without TP as pitfall 3.
    with pytest.raises(StrategyError) as e:
        Strategy(tp=1, sp=True)
    assert e.value.rules == ["sp-needs-tp"]


@pytest.mark.parametrize(
    ("extra", "what"),
    [({"sliding_window": 4096}, "sliding window"), ({"softmax_type": "learnable"}, "sinks")],
)
def test_ring_cp_refused_for_window_and_sink_attention(extra, what):
    """Transformer Engine's context-parallel attention takes a sliding window or attention
    sinks only with cp_comm_type='a2a': ring (p2p) and hierarchical (a2a+p2p) CP are refused,
    Ulysses is not, and the hint's Ulysses degree divides the heads per TP rank."""
    import dataclasses

    from parastrat.strategy import MEGATRON_ORDER

    model = dataclasses.replace(LLAMA70, name="windowed", **extra)
    ring = Strategy(tp=4, cp=2, sp=True)
    found = ring.check(model)
    assert [v.rule for v in found] == ["cp-ring-attention"] and what in found[0].message
    assert "ulysses=2" in found[0].hint
    assert rules(Strategy(tp=4, ulysses=2, ring=2, sp=True, order=MEGATRON_ORDER), model=model) == [
        "cp-ring-attention"
    ]
    assert rules(Strategy(tp=4, cp=2, ulysses=2, sp=True, order=MEGATRON_ORDER), model=model) == []
    assert rules(ring, model=LLAMA70) == []  # full softmax attention: ring is fine
    # 8 KV heads / tp 4 = 2 per rank: cp 16 cannot be Ulysses, the hint says which can
    hint = Strategy(tp=4, cp=16, sp=True).check(model)[0].hint
    assert "{1, 2}" in hint
    # at tp 8 each rank holds one KV head: no Ulysses at all, the hint says so
    assert "smaller tp" in Strategy(tp=8, cp=2, sp=True).check(model)[0].hint


def test_training_ulysses_must_divide_the_kv_heads_per_tp_rank():
    """Transformer Engine's all-to-all CP asserts q and k heads % cp_size == 0, and Megatron
    Core does not replicate KV heads for CP: Llama 3 70B (8 KV heads) at tp 4 takes Ulysses 2,
    not 4."""
    from parastrat.strategy import MEGATRON_ORDER

    assert "kv-heads-ulysses" in rules(
        Strategy(tp=4, ulysses=4, sp=True, order=MEGATRON_ORDER), model=LLAMA70
    )
    assert rules(Strategy(tp=4, ulysses=2, sp=True, order=MEGATRON_ORDER), model=LLAMA70) == []


def test_softmax_type_is_checked():
    import dataclasses

    from parastrat.errors import SpecError

    with pytest.raises(SpecError, match="softmax_type"):
        dataclasses.replace(LLAMA70, softmax_type="sink")


def test_check_resolves_preset_names_and_refuses_numbers():
    """A preset name is checked as its spec (LLM or DiT), never silently skipped; a number is
    refused."""
    dit_rules = {v.rule for v in ps.Strategy(tp=5, ulysses=7).check("flux.1-dev")}
    assert "heads-tp" in dit_rules
    assert {v.rule for v in ps.Strategy(tp=3).check("llama3-8b")} >= {"heads-tp"}
    with pytest.raises(SpecError, match="preset name"):
        ps.Strategy(tp=2).check(12345)
    with pytest.raises(SpecError, match="did you mean"):
        ps.Strategy(tp=2).check("llama3-8bb")


def test_pp_not_last_needs_equal_dense_and_expert_dp():
    """megatron-core 0.16's initialize_model_parallel asserts, whenever pp is not last in the
    order, that the dense and expert data-parallel sizes are equal; equal pipeline strides
    alone passed the rule and the ranks then died at start-up."""
    s = Strategy(tp=1, pp=2, ep=2, etp=1, order="tp-pp-cp-ep-dp")
    assert "pp-groups-differ" in {v.rule for v in s.check(world_size=4)}
    same = Strategy(tp=1, pp=2, cp=2, ep=2, etp=1, order="tp-pp-cp-ep-dp")
    assert "pp-groups-differ" not in {v.rule for v in same.check(world_size=8)}


def test_world_hints_stay_within_the_device_bound():
    """``--tp 2147483647`` on 8 devices used to say "use 2147483647 devices", which --gpus
    (at most 2^20) refuses."""
    import parastrat as ps
    from parastrat.checks import MAX_DEVICES

    s = ps.Strategy(tp=2**31 - 1)
    hint = next(v.hint for v in s.check(world_size=8) if v.rule == "world-dense")
    assert "use smaller degrees" in hint and str(2**31 - 1) + " devices" not in hint
    assert f"{MAX_DEVICES:,}" in hint
    # without a world: the next multiple of ulysses, and the ulysses that divide cp
    with pytest.raises(ps.StrategyError, match=r"e\.g\. cp=4\) .* or ulysses in \{1\}"):
        ps.Strategy(cp=3, ulysses=2)
