"""Model presets and ModelSpec: shapes, parameter counts against published figures, checks."""

import pickle

import pytest

import parastrat as ps
from parastrat.errors import SpecError
from parastrat.spec.models import PUBLISHED_PARAMS

B = 1e9

#: name -> (published total, published active or None for dense); sources in the comments
#: of parastrat.spec.models.PUBLISHED_PARAMS (papers and model cards, not computed values).
PUBLISHED = PUBLISHED_PARAMS
ISSUE_PRESETS = {
    "llama3.2-1b",
    "llama3-8b",
    "llama3-70b",
    "llama3.1-405b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v2",
    "deepseek-v3",
    "kimi-k2",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "gpt-oss-120b",
    "nemotron4-15b",
    "nemotron4-340b",
    "gpt3-175b",
    "olmoe-7b",
}


def test_every_issue_preset_exists():
    assert set(ps.models.names()) >= ISSUE_PRESETS and set(PUBLISHED) >= ISSUE_PRESETS
    # a few published figures written out independently of the table
    assert PUBLISHED["deepseek-v3"] == (671e9, 37e9)
    assert PUBLISHED["mixtral-8x7b"] == (46.7e9, 12.9e9)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_counts_match_published_within_3_percent(name):
    m = ps.models.get(name)
    total, active = PUBLISHED[name]
    assert m.num_params == pytest.approx(total, rel=0.03)
    if active is None:
        assert not m.is_moe and m.num_active_params == m.num_params
    else:
        assert m.is_moe
        assert m.num_active_params == pytest.approx(active, rel=0.03)
    assert m.source


def test_llama3_8b_by_hand():
    # embedding 128256*4096 and an untied output layer of the same size
    emb = 128256 * 4096
    # attention: q 4096x4096, k,v 4096x1024 each, o 4096x4096
    attn = 4096 * 4096 * 2 + 4096 * 1024 * 2
    mlp = 3 * 4096 * 14336  # SwiGLU: gate, up, down
    norms = 2 * 4096
    expect = 2 * emb + 32 * (attn + mlp + norms) + 4096
    assert ps.models.get("llama3-8b").num_params == expect == 8_030_261_248


def test_mixtral_active_by_hand():
    m = ps.models.get("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    # 6 of the 8 experts are idle for a token in each of the 32 layers
    assert m.num_params - m.num_active_params == 32 * 6 * expert


def test_deepseek_v3_layers():
    m = ps.models.get("deepseek-v3")
    assert m.num_moe_layers == 58 and not m.is_moe_layer(2) and m.is_moe_layer(3)
    assert m.mtp_num_layers == 1 and 11 * B < m.num_mtp_params < 14 * B


def test_lookup_is_case_insensitive_and_unknown_lists_names():
    assert ps.models.get("LLAMA3-70B") is ps.models.get("llama3-70b")
    with pytest.raises(SpecError) as info:
        ps.models.get("llama5-9000b")
    assert "llama3-70b" in str(info.value) and "olmoe-7b" in str(info.value)


def test_register_own_model():
    spec = ps.ModelSpec(
        name="tiny-test-gpt",
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=256,
        vocab_size=1000,
    )
    assert ps.models.register(spec) is spec
    assert ps.models.get("tiny-test-gpt") is spec
    with pytest.raises(SpecError):
        ps.models.register({"name": "x"})


def test_direct_construction_defaults_to_plain_gpt():
    m = ps.ModelSpec(
        name="gpt",
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=256,
        vocab_size=1000,
    )
    assert (m.query_groups, m.head_dim, m.is_moe, m.tied_embeddings) == (4, 16, False, True)
    # 12 h^2 per layer (+ biases? no: add_bias_linear=False) + 2 layernorms (w+b) + positions
    h = 64
    per_layer = 4 * h * h + 2 * h * 256 + 2 * 2 * h
    assert m.num_params == 1000 * h + 4096 * h + 2 * per_layer + 2 * h
    assert m.padded_vocab_size(tp=1) == 1024 and m.padded_vocab_size(tp=4) == 1024
    assert pickle.loads(pickle.dumps(m)) == m


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(num_layers=0), "num_layers"),
        (dict(hidden_size=100, num_attention_heads=3), "hidden_size"),
        (dict(num_query_groups=3), "num_query_groups"),
        (dict(vocab_size=-5), "vocab_size"),
        (dict(normalization="batchnorm"), "normalization"),
        (dict(num_moe_experts=4, moe_router_topk=8), "moe_router_topk"),
        (dict(num_moe_experts=4, moe_first_dense_layers=2), "moe_first_dense_layers"),
        (dict(position_embedding_type="alibi"), "position_embedding_type"),
        (dict(num_moe_experts=8, moe_router_num_groups=3, moe_router_group_topk=1), "groups"),
        (dict(num_moe_experts=8, moe_router_num_groups=4, moe_router_group_topk=5), "group_topk"),
        (dict(num_moe_experts=8, moe_router_num_groups=4), "go together"),
        # top-2 from at most 1 of 8 groups of 1 expert: impossible
        (
            dict(num_moe_experts=8, moe_router_num_groups=8, moe_router_group_topk=1),
            "moe_router_topk",
        ),
    ],
)
def test_nonsense_raises_spec_error_naming_field(changes, field):
    base = dict(
        name="gpt",
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=256,
        vocab_size=1000,
    )
    base.update(changes)
    with pytest.raises(SpecError, match=field):
        ps.ModelSpec(**base)


def test_kv_channels_allows_indivisible_hidden():
    m = ps.ModelSpec(
        name="odd",
        num_layers=2,
        hidden_size=100,
        num_attention_heads=3,
        kv_channels=32,
        ffn_hidden_size=256,
        vocab_size=1000,
    )
    assert m.head_dim == 32
