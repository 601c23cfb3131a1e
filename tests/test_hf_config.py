"""ModelSpec.from_hf_config on hand-written copies of real config.json files (no network)."""

import json
from pathlib import Path

import pytest

import parastrat as ps
from parastrat.errors import SpecError

DATA = Path(__file__).parent / "data" / "hf"

#: config file -> the preset with the same architecture
SAME_AS_PRESET = {
    "llama3-8b.json": "llama3-8b",
    "qwen3-8b.json": "qwen3-8b",
    "qwen3-30b-a3b.json": "qwen3-30b-a3b",
    "mixtral-8x7b.json": "mixtral-8x7b",
    "deepseek-v3.json": "deepseek-v3",
    "gpt-oss-120b.json": "gpt-oss-120b",
    "olmoe-1b-7b.json": "olmoe-7b",
    "llama4-scout.json": "llama4-scout",
    "llama4-maverick.json": "llama4-maverick",
}

SHAPE_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "query_groups",
    "head_dim",
    "ffn_hidden_size",
    "vocab_size",
    "gated_linear_unit",
    "tied_embeddings",
    "num_experts",
    "moe_router_topk",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "sliding_window",
    "window_attn_skip_freq",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_first_dense_layers",
    "moe_layer_freq",
    "qk_layernorm",
    "attention_chunk_size",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "mtp_num_layers",
)


@pytest.mark.parametrize("fname, preset", sorted(SAME_AS_PRESET.items()))
def test_config_matches_preset(fname, preset):
    m = ps.ModelSpec.from_hf_config(DATA / fname)
    p = ps.models.get(preset)
    for f in SHAPE_FIELDS:
        if f in ("query_groups", "head_dim") and p.multi_latent_attention:
            continue
        if f == "moe_ffn_hidden_size":  # None means "same as ffn_hidden_size"
            assert (m.moe_ffn_hidden_size or m.ffn_hidden_size) == (
                p.moe_ffn_hidden_size or p.ffn_hidden_size
            )
            continue
        assert getattr(m, f) == getattr(p, f), f
    assert m.num_params == p.num_params
    assert m.num_active_params == p.num_active_params


def test_qwen2_has_qkv_bias_and_published_size():
    m = ps.ModelSpec.from_hf_config(DATA / "qwen2-7b.json")
    assert m.add_qkv_bias and not m.add_bias_linear and m.query_groups == 4
    # Qwen2 technical report Table 1: 6.53B non-embedding parameters; the checkpoint (HF model
    # size) holds 7.62B because input embedding and output layer (152064 x 3584) are untied.
    emb = 152064 * 3584
    assert m.num_params - 2 * emb == pytest.approx(6.53e9, rel=0.01)
    assert m.num_params == pytest.approx(7.62e9, rel=0.01)


def test_details_of_moe_and_mla_fields():
    ds = ps.ModelSpec.from_hf_config(DATA / "deepseek-v3.json")
    # n_shared_experts (1) x moe_intermediate_size (2048); num_key_value_heads ignored under MLA
    assert ds.moe_shared_expert_intermediate_size == 2048
    assert ds.num_query_groups is None and ds.qk_pos_emb_head_dim == 64
    # n_group 8 / topk_group 4: node-limited routing
    assert (ds.moe_router_num_groups, ds.moe_router_group_topk) == (8, 4)
    oss = ps.ModelSpec.from_hf_config(DATA / "gpt-oss-120b.json")
    assert oss.add_bias_linear and oss.moe_ffn_hidden_size == 2880 and oss.moe_router_topk == 4
    # GPT-OSS's attention sinks have no config field: the model type says so
    assert oss.softmax_type == "learnable" == ps.models.get("gpt-oss-120b").softmax_type
    assert ps.ModelSpec.from_hf_config(DATA / "qwen3-8b.json").softmax_type == "vanilla"
    assert ps.ModelSpec.from_hf_config(DATA / "qwen3-8b.json").qk_layernorm
    # GPT-OSS: 128-token window on the layers layer_types marks "sliding_attention", which
    # alternate starting with the first (full attention on every 2nd layer)
    assert (oss.sliding_window, oss.window_attn_skip_freq, oss.num_window_layers) == (128, 2, 18)
    # Qwen3 has a sliding_window field with use_sliding_window false: no window
    assert ps.ModelSpec.from_hf_config(DATA / "qwen3-8b.json").sliding_window is None


def test_irregular_layer_types_named():
    d = json.loads((DATA / "gpt-oss-120b.json").read_text())
    d["layer_types"][4] = "full_attention"  # breaks the every-2nd-layer pattern
    with pytest.raises(SpecError, match="layer_types"):
        ps.ModelSpec.from_hf_config(d)
    d["layer_types"] = d["layer_types"][:3]
    with pytest.raises(SpecError, match="layer_types"):
        ps.ModelSpec.from_hf_config(d)


def test_folder_dict_and_name(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "llama3-8b.json").read_text())
    assert ps.ModelSpec.from_hf_config(folder).name == "my-llama"
    d = json.loads((DATA / "llama3-8b.json").read_text())
    assert ps.ModelSpec.from_hf_config(d, name="x").name == "x"
    d["text_config"] = dict(d)  # multimodal wrapper
    assert ps.ModelSpec.from_hf_config(d).num_layers == 32


@pytest.mark.parametrize(
    "drop, field",
    [
        ("num_hidden_layers", "num_hidden_layers"),
        ("vocab_size", "vocab_size"),
        ("num_experts_per_tok", "num_experts_per_tok"),
    ],
)
def test_missing_field_named(drop, field):
    d = json.loads((DATA / "mixtral-8x7b.json").read_text())
    del d[drop]
    with pytest.raises(SpecError, match=field):
        ps.ModelSpec.from_hf_config(d)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"hidden_size": 4000, "num_attention_heads": 48}, "hidden_size"),
        ({"num_experts_per_tok": 16}, "moe_router_topk"),
        ({"vocab_size": "many"}, "vocab_size"),
        ({"hidden_dropout": "x"}, "hidden_dropout"),
        ({"num_hidden_layers": float("nan")}, "num_hidden_layers"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
        ({"mlp_only_layers": 1}, "mlp_only_layers"),
        ({"mlp_only_layers": ["a"]}, "mlp_only_layers"),
        ({"mlp_only_layers": [-1]}, "mlp_only_layers"),
        ({"mlp_only_layers": [100]}, "mlp_only_layers"),
        ({"mlp_only_layers": [0, 2, 4]}, "not a leading run"),
        ({"mlp_only_layers": [31]}, "not a leading run"),
    ],
)
def test_nonsense_field_named(change, field):
    d = json.loads((DATA / "mixtral-8x7b.json").read_text())
    d.update(change)
    with pytest.raises(SpecError, match=field):
        ps.ModelSpec.from_hf_config(d)


def test_a_leading_run_of_dense_layers_is_read():
    d = json.loads((DATA / "mixtral-8x7b.json").read_text())
    d.update(mlp_only_layers=[1, 0])
    assert ps.ModelSpec.from_hf_config(d).moe_first_dense_layers == 2


def test_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        ps.ModelSpec.from_hf_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(SpecError, match="not valid JSON"):
        ps.ModelSpec.from_hf_config(bad)


def test_nemotron_relu2_reads_as_an_eager_squared_relu():
    """HF Nemotron configs name ``hidden_act: relu2`` (squared ReLU), which Megatron Core runs
    eagerly; a SwiGLU model leaves the activation unset (the fused default)."""
    nemotron = {
        "model_type": "nemotron",
        "num_hidden_layers": 32,
        "hidden_size": 6144,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "intermediate_size": 24576,
        "vocab_size": 256000,
        "hidden_act": "relu2",
    }
    m = ps.ModelSpec.from_hf_config(nemotron)
    assert m.activation == "squared_relu" and m.eager_activation and not m.gated_linear_unit
    unnamed = ps.ModelSpec.from_hf_config({k: v for k, v in nemotron.items() if k != "hidden_act"})
    assert unnamed.activation == "squared_relu"
    llama = ps.ModelSpec.from_hf_config(DATA / "llama3-8b.json")
    assert llama.activation is None and not llama.eager_activation
    odd = ps.ModelSpec.from_hf_config({**nemotron, "model_type": "llama", "hidden_act": 7})
    assert odd.activation is None
    with pytest.raises(SpecError, match="activation 'tanh' is not one of"):
        ps.ModelSpec(
            name="x",
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            ffn_hidden_size=256,
            vocab_size=1000,
            activation="tanh",
        )
