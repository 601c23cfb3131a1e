"""The step-time model: invariants and hand-checked pieces."""

import pytest
from hypothesis import given, settings, strategies as st

import parastrat as ps
from parastrat.errors import StrategyError
from parastrat.estimate import efficiency
from parastrat.estimate.step import estimate_step, stage_layer_counts

LLAMA70 = ps.models.get("llama3-70b")
H100 = ps.Cluster("h100", num_devices=64)
EXPOSED = ("tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed", "dp_exposed")


def step(strategy, **kw):
    kw.setdefault("seq_len", 8192)
    kw.setdefault("global_batch_size", 256)
    return estimate_step(LLAMA70, strategy, H100, **kw)


def test_breakdown_sums_to_step_time():
    rep = step(ps.Strategy(tp=4, pp=8, vpp=5, sp=True), precision="fp8")
    b = rep.breakdown
    parts = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + sum(
        b[k] for k in EXPOSED)
    assert parts == pytest.approx(rep.step_time_s, rel=1e-9)
    for k in ("tp", "pp", "dp"):
        assert 0 <= b[f"{k}_exposed"] <= b[k] + 1e-12
    d = rep.to_dict()
    assert d["step_time_s"] == rep.step_time_s and "flops_convention" in d


def test_throughput_identities():
    rep = step(ps.Strategy(tp=8, pp=2, sp=True))
    # tokens/s/GPU = gbs * seq / step / world ; TFLOP/s = flops/token * tokens/s / 1e12
    assert rep.tokens_per_s_per_gpu == pytest.approx(256 * 8192 / rep.step_time_s / 64)
    assert rep.tflops_per_gpu == pytest.approx(
        rep.model_flops_per_token * rep.tokens_per_s_per_gpu / 1e12)
    assert rep.mfu == pytest.approx(rep.tflops_per_gpu * 1e12 / 989e12)
    assert rep.micro_batches == 256 // 4


def test_bubble_is_p_minus_1_over_v_of_a_microbatch():
    a = step(ps.Strategy(tp=8, pp=4, sp=True), recompute="full")
    b = step(ps.Strategy(tp=8, pp=4, vpp=2, sp=True), recompute="full")
    # bubble = (p-1)/v micro-batch times; per-micro-batch time is the same for both
    mb_a = a.breakdown["bubble"] / 3
    mb_b = b.breakdown["bubble"] * 2 / 3
    assert mb_a == pytest.approx(mb_b, rel=1e-9)
    assert b.breakdown["bubble"] == pytest.approx(a.breakdown["bubble"] / 2)


def test_recompute_orders_time():
    s = ps.Strategy(tp=8, pp=4, sp=True)
    t = [step(s, recompute=m).step_time_s for m in ("none", "selective", "full")]
    assert t[0] < t[1] < t[2]
    # full recompute adds about one forward: 20-40 % more compute time
    assert 1.15 < t[2] / t[0] < 1.45


def test_tp_across_nodes_is_slower_and_noted():
    intra = step(ps.Strategy(tp=8, pp=2, sp=True))
    inter = step(ps.Strategy(tp=16, pp=1, sp=True))
    assert inter.breakdown["tp_exposed"] > 5 * intra.breakdown["tp_exposed"]
    assert any("scale-out" in n for n in inter.notes)


def test_fp8_faster_than_bf16_on_h100_not_on_a100():
    s = ps.Strategy(tp=8, pp=4, sp=True)
    assert step(s, precision="FP8-CS").step_time_s < step(s, precision="BF16").step_time_s
    a100 = ps.Cluster("a100", num_devices=64)
    x = estimate_step(LLAMA70, s, a100, seq_len=4096, global_batch_size=64, precision="fp8")
    y = estimate_step(LLAMA70, s, a100, seq_len=4096, global_batch_size=64, precision="bf16")
    assert x.step_time_s == pytest.approx(y.step_time_s)


def test_invalid_strategy_raises_with_every_rule():
    with pytest.raises(StrategyError) as exc:
        step(ps.Strategy(tp=3, pp=7))
    assert {"heads-tp", "layers-pp"} <= set(exc.value.rules)


def test_account_for_embedding_split():
    m = ps.models.get("llama3.1-405b")
    counts, how = stage_layer_counts(m, ps.Strategy(tp=8, pp=8, vpp=8, sp=True))
    # (126 + 2) / 8 = 16 per stage; first and last give one slot to embedding / loss
    assert how == "account-for-embedding-and-loss" and counts == [15] + [16] * 6 + [15]


def test_gemm_efficiency_shapes():
    h100 = ps.hardware.get("h100")
    big = efficiency.gemm_time(h100, 8192, 8192, 8192, "bf16")
    # 2*8192^3 / (989e12 * 0.68 * shape) with shape = 1 * (64*32=2048 tiles /132 -> 16 waves:
    # 2048/2112) * 8192/(8192+64)
    shape = (2048 / (16 * 132)) * (8192 / 8256)
    assert big == pytest.approx(2 * 8192**3 / (989e12 * 0.68 * shape))
    # a skinny GEMM is memory bound: 16 x 8192 x 8192 bf16 streams the 128 MiB weight
    thin = efficiency.gemm_time(h100, 16, 8192, 8192, "bf16")
    assert thin == pytest.approx((16 * 8192 * 2 + 8192 * 8192 * 2 + 16 * 8192 * 2)
                                 / (3350e9 * 0.8))


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]),
       mbs=st.sampled_from([1, 2]), rec=st.sampled_from(["none", "selective", "full"]))
def test_property_positive_and_consistent(tp, pp, mbs, rec):
    s = ps.Strategy(tp=tp, pp=pp, sp=tp > 1)
    rep = step(s, micro_batch_size=mbs, recompute=rec, seq_len=4096)
    assert rep.step_time_s > 0 and 0 < rep.mfu < 1
    assert all(v >= 0 for v in rep.breakdown.values())
