"""Strategy-aware benchmarks: which collective runs on which group, at which message size.

``measurements`` is pure Python and pinned here with hand arithmetic; one small spawn checks
that ``run_strategy`` really runs each op on the strategy's groups (group sizes in the rows).
"""

from __future__ import annotations

import pytest

from parastrat import ModelSpec, Strategy
from parastrat.bench.strategy_bench import measurements
from parastrat.errors import UsageError

# hidden 1024, 16 heads of 64, 4 KV groups -> K/V width 4 * 64 = 256
DENSE = ModelSpec(
    name="bench-dense",
    num_layers=8,
    hidden_size=1024,
    num_attention_heads=16,
    num_query_groups=4,
    ffn_hidden_size=4096,
    vocab_size=32000,
)
MOE = DENSE.with_(name="bench-moe", num_moe_experts=8, moe_router_topk=2)


def _by_label(ms):
    return {m.label: m.sizes for m in ms}


def test_training_strategy_sizes_from_the_model():
    s = Strategy(tp=2, pp=2, cp=2, sp=True)  # world 16 -> dp 2
    got = _by_label(measurements(s, 16, model=DENSE, seq_len=2048))
    # local tokens s/cp * b = 2048 / 2 = 1024; activation = 1024 * 1024 h * 2 B = 2,097,152
    act = 1024 * 1024 * 2
    assert got["tp/all_gather"] == got["tp/reduce_scatter"] == (act,)
    assert "tp/all_reduce" not in got  # SP on: no TP all-reduce
    # one ring hop: K and V of 1024 tokens * 256 wide * 2 B / tp 2 = 524,288
    assert got["ring/ring"] == (2 * 1024 * 256 * 2 // 2,) == (524_288,)
    assert got["pp/send_recv"] == (act // 2,)  # SP shards the sent activation
    # gradients reduce over dp * cp = 4 ranks: a 40e6-parameter fp32 bucket, unless one rank
    # (1/(tp*pp) of the model) holds fewer parameters
    assert got["dp-cp/reduce_scatter"] == (int(min(40e6, DENSE.num_params / 4)) * 4,)
    assert set(got) == {
        "tp/all_gather",
        "tp/reduce_scatter",
        "ring/ring",
        "pp/send_recv",
        "dp-cp/reduce_scatter",
    }


def test_expert_parallel_all_to_all_carries_topk_copies():
    got = _by_label(measurements(Strategy(ep=4), 4, model=MOE, seq_len=2048))
    # 2048 tokens * 1024 * 2 B = 4,194,304 per copy, top-2 routing -> 8,388,608 per rank
    assert got["ep/all_to_all"] == (8_388_608,)
    assert "dp/reduce_scatter" in got and "tp/all_gather" not in got


def test_inference_ulysses_and_ring():
    got = _by_label(measurements(Strategy(ulysses=2, ring=2), 8, model=DENSE, seq_len=2048))
    # local tokens 2048 / (2 * 2) = 512: Ulysses sends 512 * 1024 * 2 B = 1,048,576 per rank,
    # a ring hop K + V = 2 * 512 * 256 * 2 B = 524,288
    assert got["ulysses/all_to_all"] == (1_048_576,)
    assert got["ring/ring"] == (524_288,)


def test_without_a_model_every_op_sweeps_the_given_sizes_and_degree_one_groups_are_skipped():
    ms = measurements(Strategy(tp=2), 4, sizes="4KB,64KB")
    assert {m.label for m in ms} == {
        "tp/all_gather",
        "tp/reduce_scatter",
        "tp/all_reduce",
        "dp/reduce_scatter",
    }
    assert all(m.sizes == (4096, 65536) for m in ms)


def test_user_errors():
    with pytest.raises(UsageError, match="seq-len"):
        measurements(Strategy(tp=2), 2, model=DENSE)
    with pytest.raises(UsageError, match="nothing to time"):
        measurements(Strategy(), 1)


@pytest.mark.multiprocess
def test_run_strategy_times_each_op_on_the_strategys_groups():
    pytest.importorskip("torch")
    from parastrat.bench.strategy_bench import run_strategy_local

    rows = run_strategy_local(
        Strategy(tp=2, pp=2), 4, sizes="4KB", iters=2, warmup=1, timeout_s=120
    )
    # TP groups of 2: all_gather, reduce_scatter, all_reduce; PP pairs: send_recv; dp = 1
    assert [(r.group, r.op, r.world) for r in rows] == [
        ("tp", "all_gather", 2),
        ("tp", "reduce_scatter", 2),
        ("tp", "all_reduce", 2),
        ("pp", "send_recv", 2),
    ]
    assert all(r.dtype == "bfloat16" and r.time_s > 0 for r in rows)


def test_a_strategy_with_its_own_dp_must_match_the_world():
    from parastrat.errors import UsageError

    # TP2 DP2 spans 4 ranks: measuring it on 8 would build groups the strategy does not have
    with pytest.raises(UsageError, match="4 ranks"):
        measurements(Strategy(tp=2, dp=2), 8)
    assert measurements(Strategy(tp=2, dp=2), 4)
