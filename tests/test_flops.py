"""FLOP counting pinned on hand-checked cases (arithmetic in the comments)."""

import pytest

from parastrat.errors import UsageError
from parastrat.estimate import flops
from parastrat.spec.model import ModelSpec


def gpt(h=1024, a=16, L=2, V=1000, **kw):
    return ModelSpec(
        name="t",
        num_layers=L,
        hidden_size=h,
        num_attention_heads=a,
        ffn_hidden_size=4 * h,
        vocab_size=V,
        **kw,
    )


def test_dense_gpt_layer_matches_12h2():
    m = gpt()
    # qkv 2*h*3h + proj 2*h*h + fc1 2*h*4h + fc2 2*4h*h = 24 h^2 per token (= 2 x 12 h^2)
    mats = sum(x.flops_per_token for x in flops.layer_matrices(m, 0))
    assert mats == 24 * 1024**2


def test_causal_attention_counted_half():
    m = gpt()
    # Q K^T + A V: 2 * a * (d + d) * s / 2 = 2 * 16 * 128 * 2048 / 2 ... with d = 64:
    # 2 * 16 * (64 + 64) * 2048 / 2 = 4,194,304
    assert flops.attention_core_flops_per_token(m, 2048) == 4_194_304
    assert flops.attention_core_flops_per_token(m, 2048, causal=False) == 2 * 4_194_304


def test_sliding_window_caps_the_keys():
    # window 128 over 4096 causal positions: the first 128 queries see 1..128 keys, the rest
    # 128: mean = 128 - 128^2 / (2 * 4096) = 126 (dropping the +-1/2 terms, as s/2 does)
    assert flops.causal_keys(4096, 128) == 126
    assert flops.causal_keys(4096, None) == flops.causal_keys(4096, 8192) == 2048
    # alternating windowed / full layers (GPT-OSS style, Megatron's window_attn_skip_freq=2:
    # 1-based layer numbers divisible by 2 are full): layer 0 windowed, layer 1 full
    m = gpt(L=4, sliding_window=128, window_attn_skip_freq=2)
    assert [m.is_window_layer(i) for i in range(4)] == [True, False, True, False]
    assert m.num_window_layers == 2
    full = flops.attention_core_flops_per_token(m, 4096)  # 2 * 16 * 128 * 2048
    win = 2.0 * 16 * 128 * 126
    assert full == 2 * 16 * 128 * 2048
    assert flops.layer_attention_core_flops_per_token(m, 0, 4096) == win
    assert flops.mean_attention_core_flops_per_token(m, 4096) == (full + win) / 2
    # selective recompute repeats each layer's own attention core
    assert flops.recompute_flops_per_token(m, 4096, "selective") == 2 * full + 2 * win
    # no skip frequency: every layer is windowed
    assert gpt(L=3, sliding_window=64).num_window_layers == 3


def test_model_flops_is_three_forward_and_matches_megatron_formula():
    m = gpt(h=1024, a=16, L=2, V=1000)
    s = 2048
    # Narayanan 2021 (without recompute, full attention): 72 B s L h^2 (1 + s/(6h) + V/(16Lh))
    # per sequence.  Ours halves the attention: 72 L h^2 (1 + s/(12h)) + 6 h V per token.
    h, L, V = 1024, 2, 1000
    expected = 72 * L * h * h * (1 + s / (12 * h)) + 6 * h * V
    assert flops.model_flops_per_token(m, s) == pytest.approx(expected, rel=1e-12)


def test_gqa_swiglu_counts_real_matrices():
    m = ModelSpec(
        name="g",
        num_layers=1,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=10,
        gated_linear_unit=True,
    )
    # qkv: 2*4096*(32+16)*128 = 50,331,648 ; proj 2*4096*4096 = 33,554,432
    # MLP: 2*4096*2*14336 + 2*14336*4096 = 352,321,536
    mats = sum(x.flops_per_token for x in flops.layer_matrices(m, 0))
    assert mats == 50_331_648 + 33_554_432 + 352_321_536


def test_moe_counts_topk_and_shared_experts():
    m = ModelSpec(
        name="moe",
        num_layers=2,
        hidden_size=512,
        num_attention_heads=8,
        ffn_hidden_size=2048,
        vocab_size=10,
        gated_linear_unit=True,
        num_moe_experts=16,
        moe_router_topk=2,
        moe_ffn_hidden_size=256,
        moe_shared_expert_intermediate_size=256,
        moe_first_dense_layers=1,
    )
    dense = {x.name: x for x in flops.layer_matrices(m, 0)}
    moe = {x.name: x for x in flops.layer_matrices(m, 1)}
    assert "router" not in dense and "router" in moe
    # router 2*512*16 = 16,384; routed: 2 experts * (2*512*512 + 2*256*512) = 1,572,864;
    # shared: 2*512*512 + 2*256*512 = 786,432
    assert moe["router"].flops_per_token == 16_384
    routed = moe["expert_fc1"].flops_per_token + moe["expert_fc2"].flops_per_token
    shared = moe["shared_fc1"].flops_per_token + moe["shared_fc2"].flops_per_token
    assert routed == 1_572_864 and shared == 786_432


def test_mla_projections():
    m = ModelSpec(
        name="mla",
        num_layers=1,
        hidden_size=1024,
        num_attention_heads=8,
        ffn_hidden_size=10,
        vocab_size=10,
        multi_latent_attention=True,
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_head_dim=64,
        qk_pos_emb_head_dim=32,
        v_head_dim=64,
    )
    names = {x.name: (x.in_dim, x.out_dim, x.split) for x in flops.attention_matrices(m)}
    assert names["q_down"] == (1024, 256, "dup")
    assert names["q_up"] == (256, 8 * 96, "col")
    assert names["kv_down"] == (1024, 128 + 32, "dup")
    assert names["kv_up"] == (128, 8 * (64 + 64), "col")
    assert names["proj"] == (8 * 64, 1024, "row")
    # core: 2 * 8 * (96 + 64) * 1024 / 2 = 1,310,720
    assert flops.attention_core_flops_per_token(m, 1024) == 1_310_720


def test_recompute_extra_flops():
    m = gpt()
    assert flops.recompute_flops_per_token(m, 2048, "none") == 0
    assert flops.recompute_flops_per_token(m, 2048, "selective") == 2 * 4_194_304
    full = flops.recompute_flops_per_token(m, 2048, "full")
    assert full == 2 * (24 * 1024**2 + 4_194_304)
    with pytest.raises(UsageError):
        flops.recompute_flops_per_token(m, 2048, "sometimes")


def test_llama3_8b_matches_published_tflops_ratio():
    from parastrat.spec import models

    m = models.get("llama3-8b")
    # published row: 31,508 tok/s/GPU <-> 1,622 TFLOP/s, i.e. 51.5 GFLOP per token
    assert flops.model_flops_per_token(m, 8192) == pytest.approx(1622e12 / 31508, rel=0.01)
