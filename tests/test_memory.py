"""estimate_memory against hand-computed cases (Megatron's and Korthikanti's accounting)."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError, StrategyError, UsageError
from parastrat.estimate.memory import FRAGMENTATION, OTHER_FIXED_BYTES

GiB = 1024**3


def gpt(**kw):
    """A plain GPT: MHA, 4h GELU MLP, dropout 0.1, learned positions, tied, vocab 1024."""
    base = dict(
        name="gpt-test",
        num_layers=8,
        hidden_size=1024,
        num_attention_heads=16,
        ffn_hidden_size=4096,
        vocab_size=1024,
        max_position_embeddings=2048,
    )
    base.update(kw)
    return ps.ModelSpec(**base)


def static(stage):
    return stage.weights + stage.gradients + stage.optimizer


# ---- weights, gradients, optimizer -----------------------------------------------------------
@pytest.mark.parametrize("fp32_grads, per_param", [(True, 18), (False, 16)])
def test_18_bytes_per_param_without_distributed_optimizer(fp32_grads, per_param):
    """2 (bf16 weight) + 4 or 2 (main gradient: FP32 with grad_reduce_in_fp32, else BF16)
    + 12 (fp32 master, Adam m and v): 18 bytes per parameter, or ZeRO's 16."""
    m = gpt()
    s = ps.Strategy().with_world_size(4)
    r = ps.estimate_memory(
        m, s, seq_len=1024, distributed_optimizer=False, grad_reduce_in_fp32=fp32_grads
    )
    # pp=1, tp=1, tied: the rank holds every parameter once; vocab 1024 needs no padding.
    assert r.stages[0].params == m.num_params
    assert static(r.stages[0]) == pytest.approx(per_param * m.num_params)


@pytest.mark.parametrize("world, cp, shard", [(4, 1, 4), (8, 2, 8), (8, 4, 8)])
def test_4_plus_12_over_dp_cp_with_distributed_optimizer(world, cp, shard):
    m = gpt()
    s = ps.Strategy(cp=cp).with_world_size(world)
    r = ps.estimate_memory(m, s, seq_len=1024)
    # 2 (bf16) + 2 (bf16 grad) + 12 / (dp * cp); dp * cp = world here (tp = pp = 1)
    assert s.dp * s.cp == shard
    assert static(r.stages[0]) == pytest.approx((4 + 12 / shard) * m.num_params)


def test_tied_embedding_copy_on_last_stage_and_padding():
    m = gpt(vocab_size=1000)  # padded to 1024 (128 * tp=2 = 256 -> 1024)
    s = ps.Strategy(tp=2, pp=2, sp=True).with_world_size(4)
    r = ps.estimate_memory(m, s, seq_len=1024)
    h = 1024
    per_layer_sharded = (4 * h * h + 2 * h * 4096) / 2
    norms = 2 * 2 * h  # two layernorms with bias, replicated
    first = 4 * (per_layer_sharded + norms) + 1024 * h / 2 + 2048 * h
    last = 4 * (per_layer_sharded + norms) + 2 * h + 1024 * h / 2
    assert r.stages[0].params == pytest.approx(first)
    assert r.stages[1].params == pytest.approx(last)
    untied = ps.estimate_memory(
        gpt(vocab_size=1000, tied_embeddings=False),
        ps.Strategy(tp=2, sp=True).with_world_size(2),
        seq_len=1024,
    )
    # pp=1 untied: embedding, output, positions all on the one stage
    assert untied.stages[0].params == pytest.approx(
        8 * (per_layer_sharded + norms) + 2 * h + 2 * 1024 * h / 2 + 2048 * h
    )


# ---- Korthikanti et al. 2022, Table 2 --------------------------------------------------------
S, BATCH, H, A, T, L, P = 2048, 2, 1024, 16, 4, 8, 4


def _mid_stage(recompute, sp=True, flash=False):
    m = gpt()
    s = ps.Strategy(tp=T, pp=P, sp=sp).with_world_size(T * P)
    r = ps.estimate_memory(
        m, s, seq_len=S, micro_batch_size=BATCH, recompute=recompute, flash_attention=flash
    )
    return r, r.stages[1]  # stage 1 of 4: no embedding, no output layer


def test_tp_sp_selective_is_34sbh_over_t_per_layer():
    r, st1 = _mid_stage("selective")
    per_layer = 34 * S * BATCH * H / T
    # stage 1 of 4 holds p - 1 = 3 micro-batches of L/p = 2 layers
    assert st1.in_flight == 3
    assert st1.activations == pytest.approx(3 * 2 * per_layer)
    # first stage: p micro-batches of L/p layers = L layers' worth, plus the embedding's
    # dropout mask (1 B, sequence-parallel) and int64 input ids for each of the p micro-batches
    emb = P * S * BATCH * (8 + H / T)
    assert r.stages[0].activations == pytest.approx(L * per_layer + emb)


def test_tp_sp_no_recompute_adds_attention_matrix():
    _, st1 = _mid_stage("none")
    per_layer = S * BATCH * H / T * (34 + 5 * A * S / H)
    assert st1.activations == pytest.approx(3 * 2 * per_layer)


def test_tp_without_sp_selective():
    _, st1 = _mid_stage("selective", sp=False)
    per_layer = S * BATCH * H * (10 + 24 / T)
    assert st1.activations == pytest.approx(3 * 2 * per_layer)


def test_full_recompute_keeps_layer_inputs_plus_one_layer():
    _, st1 = _mid_stage("full")
    # 3 micro-batches x 2 layers x 2sbh/t, plus one layer being recomputed, which without
    # flash attention materialises its scores: (sbh/t)(34 + 5as/h)
    expect = 3 * 2 * 2 * S * BATCH * H / T + S * BATCH * H / T * (34 + 5 * A * S / H)
    assert st1.activations == pytest.approx(expect)


def test_flash_attention_keeps_only_logsumexp():
    _, flash = _mid_stage("none", flash=True)
    _, sel = _mid_stage("selective")
    # + fp32 log-sum-exp per head and token, split over TP
    assert flash.activations == pytest.approx(sel.activations + 3 * 2 * 4 * A * S * BATCH / T)


def test_fewer_microbatches_than_stages():
    m = gpt()
    s = ps.Strategy(tp=T, pp=P, sp=True).with_world_size(T * P)
    # dp = 1, mbs 2, gbs 4 -> m = 2 micro-batches < 4 stages
    r = ps.estimate_memory(
        m, s, seq_len=S, micro_batch_size=2, global_batch_size=4, flash_attention=False
    )
    assert r.num_microbatches == 2
    assert [st.in_flight for st in r.stages] == [2, 2, 2, 1]
    per_layer = 34 * S * BATCH * H / T
    assert r.stages[0].activations == pytest.approx(2 * 2 * per_layer + 2 * S * BATCH * (8 + H / T))


def test_context_parallel_divides_sequence():
    m = gpt()
    one = ps.estimate_memory(
        m, ps.Strategy(tp=2, pp=4, sp=True).with_world_size(8), seq_len=4096, flash_attention=False
    )
    two = ps.estimate_memory(
        m,
        ps.Strategy(tp=2, pp=4, cp=2, sp=True).with_world_size(16),
        seq_len=4096,
        flash_attention=False,
    )
    assert two.stages[1].activations == pytest.approx(one.stages[1].activations / 2)


# ---- Llama 3 70B with interleaved pipeline --------------------------------------------------
def test_llama3_70b_vpp_by_hand():
    m = ps.models.get("llama3-70b")
    s = ps.Strategy(tp=4, pp=8, vpp=5, sp=True).with_world_size(64)  # dp = 2
    r = ps.estimate_memory(m, s, seq_len=8192, micro_batch_size=1, global_batch_size=256)
    h, a, g, d, f, t = 8192, 64, 8, 128, 28672, 4
    # per token per rank (bytes): norm inputs + linear inputs of attention and MLP are
    # sequence-parallel (2h + 2h each), Q/K/V (GQA) + attention output + fp32 LSE and SwiGLU's
    # 2f-wide input + f-wide output are TP-split.
    seq_sharded = (2 * h + 2 * h) * 2
    tp_split = 2 * (a * d + 2 * g * d) + 2 * a * d + 4 * a + (4 + 2) * f
    per_token = seq_sharded / t + tp_split / t
    assert per_token == 68672
    # interleaved 1F1B: first stage holds v p + p - 1 = 47 chunks of 80/40 = 2 layers,
    # i.e. 80 * (1 + 7/40) = 94 layers' worth; plus int64 ids of p = 8 micro-batches
    assert r.stages[0].in_flight == 47
    assert r.stages[0].activations == pytest.approx(94 * per_token * 8192 + 8 * 8 * 8192)
    # static: 10 layers per stage; 2 + 2 (BF16 main grad) + 12/(dp*cp = 2) = 10 bytes per param
    layer = (h * a * d + 2 * h * g * d + a * d * h + 3 * h * f) / t + 2 * h
    vocab_pad = 128512  # 128256 rounded up to 128 * tp = 512
    assert r.stages[3].params == pytest.approx(10 * layer)
    assert static(r.stages[3]) == pytest.approx(10 * 10 * layer)
    assert r.stages[0].params == pytest.approx(10 * layer + vocab_pad * h / t)
    assert r.stages[7].params == pytest.approx(10 * layer + vocab_pad * h / t + h)
    # the last stage also keeps the fp32 logits (4 V / t per token) and the output layer's
    # inputs for one micro-batch
    assert r.peak_stage.stage == 0
    # the published run (published_configs.csv id 5) used FP8, whose 1-byte copies of
    # linear-layer inputs make it fit an 80 GiB H100; in bf16 with FP32 gradients (Bridge's
    # bf16_mixed) it does not, with the BF16 gradients of the performance recipes it does
    fp8 = ps.estimate_memory(m, s, seq_len=8192, global_batch_size=256, precision="fp8")
    fp32_grads = ps.estimate_memory(
        m, s, seq_len=8192, global_batch_size=256, grad_reduce_in_fp32=True
    )
    assert fp8.fits("h100") and r.fits("h100") and not fp32_grads.fits("h100")


# ---- MoE with EP and ETP ---------------------------------------------------------------------
def moe(**kw):
    base = dict(
        name="moe-test",
        num_layers=4,
        hidden_size=1024,
        num_attention_heads=8,
        num_query_groups=2,
        ffn_hidden_size=4096,
        vocab_size=2048,
        gated_linear_unit=True,
        tied_embeddings=False,
        position_embedding_type="rope",
        normalization="rmsnorm",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=512,
        moe_shared_expert_intermediate_size=512,
    )
    base.update(kw)
    return ps.ModelSpec(**base)


def test_moe_ep_etp_sharding_by_hand():
    m = moe()
    s = ps.Strategy(tp=2, ep=4, etp=2, sp=True).with_world_size(16)
    assert (s.dp, s.expert_dp) == (8, 2)  # 16/(tp 2); 16/(etp 2 * ep 4)
    r = ps.estimate_memory(m, s, seq_len=1024)
    st0 = r.stages[0]
    h, t = 1024, 2
    expert = 3 * h * 512
    # 8 experts / ep 4 = 2 local experts, each split over etp = 2
    assert st0.expert_params == pytest.approx(4 * 2 * expert / 2)
    attn = (h * 8 * 128 + 2 * h * 2 * 128 + 8 * 128 * h) / t
    dense = 4 * (attn + 2 * h + 3 * h * 512 / t + h * 8) + 2 * 2048 * h / t + h
    assert st0.params - st0.expert_params == pytest.approx(dense)
    # routed experts shard their optimizer over expert DP (2), the rest over dp*cp (8)
    assert st0.optimizer == pytest.approx(12 * (dense / 8 + st0.expert_params / 2))
    assert st0.gradients == pytest.approx(2 * st0.params)  # BF16 main gradients

    # activations per token, per MoE layer, on one rank (bf16):
    a_rep = (2 * h + 2 * h) / t  # norm in, QKV in (SP)
    a_tp = (2 * (8 * 128 + 2 * 2 * 128) + 2 * 8 * 128 + 4 * 8) / t
    m_rep = (2 * h + 2 * h + 6 * 8) / t  # norm in, dispatch in, router
    shared = (4 + 2) * 512 / t  # SwiGLU in/out of shared expert
    # routed: each rank routes s/t tokens x top-2, gathered over etp=2 -> 2x, width 512/etp
    routed = 2 * 2 * (2 * h + (4 + 2) * 512 / 2 + 4) / t
    per_token = a_rep + a_tp + m_rep + shared + routed
    logits = 4 * 2048 / t
    final = (2 * h + 2 * h) / t + logits
    assert st0.activations == pytest.approx(1024 * (4 * per_token + final) + 1024 * 8)


def test_moe_without_dist_opt_and_active_fraction():
    m = moe()
    s = ps.Strategy(ep=8).with_world_size(8)
    r = ps.estimate_memory(m, s, seq_len=512, distributed_optimizer=False)
    assert static(r.stages[0]) == pytest.approx(16 * r.stages[0].params)
    # each rank holds 1 of 8 experts per layer
    assert r.stages[0].expert_params == pytest.approx(4 * 3 * 1024 * 512)


# ---- precision, uneven splits, MTP -----------------------------------------------------------
def test_fp8_extra_weight_copies():
    m = gpt(hidden_dropout=0.0, attention_dropout=0.0)
    s = ps.Strategy().with_world_size(1)
    bf = ps.estimate_memory(m, s, seq_len=512, precision="bf16")
    fp8 = ps.estimate_memory(m, s, seq_len=512, precision="fp8", fp8_param_gather=False)
    gathered = ps.estimate_memory(m, s, seq_len=512, precision="fp8", fp8_param_gather=True)
    lin = 8 * (4 * 1024 * 1024 + 2 * 1024 * 4096)  # linear weights of 8 layers
    assert fp8.stages[0].weights - bf.stages[0].weights == pytest.approx(2 * lin)
    assert gathered.stages[0].weights == pytest.approx(bf.stages[0].weights)
    # TE keeps 1-byte copies of linear-layer inputs: activations shrink
    assert fp8.stages[0].activations < bf.stages[0].activations
    assert gathered.stages[0].optimizer == bf.stages[0].optimizer


def test_uneven_split_from_strategy_and_published_style_split():
    m = gpt(num_layers=10)
    s = ps.Strategy(pp=4, first_stage_layers=1, last_stage_layers=3).with_world_size(4)
    r = ps.estimate_memory(m, s, seq_len=512)
    assert [st.layers for st in r.stages] == [1, 3, 3, 3]
    # 126 layers over pp 8 x vpp 8 = 64 chunks: (126 + 2) / 64 = 2 with the embedding and loss
    # taking one slot each (Megatron account_for_*_in_pipeline_split)
    big = ps.models.get("llama3.1-405b")
    s2 = ps.Strategy(
        tp=8, pp=8, vpp=8, cp=2, sp=True, account_for_embedding=True, account_for_loss=True
    )
    r2 = ps.estimate_memory(big, s2.with_world_size(1024), seq_len=8192)
    assert [st.layers for st in r2.stages] == [15, 16, 16, 16, 16, 16, 16, 15]
    assert any("account_for_embedding" in n for n in r2.notes)


def test_mtp_lives_on_last_stage():
    ds = ps.models.get("deepseek-v3")
    # 61 layers on PP 8 as 7 + 6 x 8 + 6 (a split that holds with and without MTP)
    s = ps.Strategy(
        tp=2, pp=8, ep=64, sp=True, first_stage_layers=7, last_stage_layers=6
    ).with_world_size(1024)
    r = ps.estimate_memory(ds, s, seq_len=4096, global_batch_size=8192)
    no_mtp = ps.estimate_memory(ds.with_(mtp_num_layers=0), s, seq_len=4096, global_batch_size=8192)
    assert r.stages[-1].params > no_mtp.stages[-1].params
    assert r.stages[0].params == no_mtp.stages[0].params


# ---- report, allowance, errors ---------------------------------------------------------------
def test_report_fits_other_and_json():
    r = ps.estimate_memory(gpt(), ps.Strategy().with_world_size(1), seq_len=512)
    st0 = r.stages[0]
    assert st0.other == pytest.approx(OTHER_FIXED_BYTES + FRAGMENTATION * st0.activations)
    assert r.peak_bytes == st0.total
    assert r.fits(ps.hardware.get("a100")) and not r.fits(1 * GiB)
    assert not r.fits(r.peak_bytes, headroom=0.1) and r.fits(r.peak_bytes)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["stages"][0]["total"] == pytest.approx(st0.total)
    assert "peak" in r.breakdown()
    r0 = ps.estimate_memory(
        gpt(), ps.Strategy().with_world_size(1), seq_len=512, other_bytes=0, fragmentation=0
    )
    assert r0.stages[0].other == 0


def test_dp_unset_assumes_min_world():
    r = ps.estimate_memory(moe(), ps.Strategy(ep=4), seq_len=256)
    assert any("dp not set" in n for n in r.notes)


def test_user_errors():
    s = ps.Strategy(tp=2).with_world_size(4)
    with pytest.raises(UsageError, match="recompute"):
        ps.estimate_memory(gpt(), s, seq_len=512, recompute="partial")
    with pytest.raises(UsageError, match="seq_len"):
        ps.estimate_memory(gpt(), s, seq_len=0)
    with pytest.raises(StrategyError) as info:
        ps.estimate_memory(gpt(), s, seq_len=512, micro_batch_size=2, global_batch_size=6)
    assert info.value.rules == ["batch-divisible"]
    with pytest.raises(SpecError, match="precision"):
        ps.estimate_memory(gpt(), s, seq_len=512, precision="int4")


# ---- properties --------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    seq=st.sampled_from([1024, 4096]),
    mode=st.sampled_from(["none", "selective", "full"]),
)
def test_more_parallelism_never_needs_more_memory(tp, pp, cp, seq, mode):
    m = ps.models.get("llama3-8b")
    base = ps.Strategy(tp=tp, pp=pp, cp=cp, sp=tp > 1)
    world = tp * pp * cp * 2
    r = ps.estimate_memory(m, base.with_world_size(world), seq_len=seq, recompute=mode)
    assert all(math.isfinite(x.total) and x.total > 0 for x in r.stages)
    if tp < 8:
        r2 = ps.estimate_memory(
            m,
            base.replace(tp=tp * 2, sp=True).with_world_size(world * 2),
            seq_len=seq,
            recompute=mode,
        )
        assert r2.peak_bytes <= r.peak_bytes
    full = ps.estimate_memory(m, base.with_world_size(world), seq_len=seq, recompute="full")
    assert full.peak_bytes <= r.peak_bytes + 1
