"""ModelSpec.from_hf_config on the hybrid (Mamba) Nemotron-H family's config.json files
(tests/data/hf/README.md says where each comes from): the presets' shapes, and refusals that
name the field."""

import json
from pathlib import Path

import pytest

import parastrat as ps
from parastrat.errors import SpecError

DATA = Path(__file__).parent / "data" / "hf"

#: config file -> the preset with the same architecture
SAME_AS_PRESET = {
    "nemotron-h-8b.json": "nemotron-h-8b",
    "nemotron-h-56b.json": "nemotron-h-56b",
    "nemotron-nano-9b-v2.json": "nemotron-nano-9b-v2",
    "nemotron-3-nano.json": "nemotron-3-nano",
}
FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "query_groups",
    "head_dim",
    "ffn_hidden_size",
    "vocab_size",
    "gated_linear_unit",
    "activation",
    "tied_embeddings",
    "normalization",
    "position_embedding_type",
    "max_position_embeddings",
    "hybrid_override_pattern",
    "mamba_heads",
    "mamba_head_dim",
    "mamba_num_groups",
    "mamba_state_dim",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_router_num_groups",
)


@pytest.mark.parametrize(("fname", "preset"), sorted(SAME_AS_PRESET.items()))
def test_config_matches_preset(fname, preset):
    m, p = ps.ModelSpec.from_hf_config(DATA / fname), ps.models.get(preset)
    for f in FIELDS:
        assert getattr(m, f) == getattr(p, f), f
    assert m.num_params == p.num_params
    assert m.num_active_params == p.num_active_params
    assert [m.layer_kind(i) for i in range(m.num_layers)] == [
        p.layer_kind(i) for i in range(p.num_layers)
    ]


def test_published_expand_that_disagrees_is_noted_not_used():
    """Nemotron 3 Nano publishes expand=2 with 64 heads x 64 (4096, not 2 x 2688): the mixer
    is sized from the heads, as Hugging Face and Megatron build it, and the spec says so."""
    m = ps.ModelSpec.from_hf_config(DATA / "nemotron-3-nano.json")
    assert m.mamba_d_inner == 4096
    (note,) = m.extra["notes"]
    assert "expand=2 ignored" in note and "5376" in note
    assert "notes" not in ps.ModelSpec.from_hf_config(DATA / "nemotron-h-8b.json").extra


def test_heads_from_expand_when_not_given():
    raw = json.loads((DATA / "nemotron-h-8b.json").read_text())
    del raw["mamba_num_heads"]
    m = ps.ModelSpec.from_hf_config(raw)
    assert m.mamba_heads == 2 * 4096 // 64 == 128


def test_list_form_of_the_pattern():
    """Newer configs name each layer (``layers_block_type``) instead of a pattern string."""
    raw = json.loads((DATA / "nemotron-3-nano.json").read_text())
    pattern = raw.pop("hybrid_override_pattern")
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    raw["layers_block_type"] = [kinds[c] for c in pattern]
    assert ps.ModelSpec.from_hf_config(raw).hybrid_override_pattern == pattern


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"conv_kernel": 3}, ["conv_kernel", "3", "4-wide"]),
        ({"hybrid_override_pattern": "M-M*"}, ["hybrid_override_pattern", "4 symbols", "52"]),
        ({"hybrid_override_pattern": "M" * 51 + "X"}, ["hybrid_override_pattern", "'X'"]),
        ({"hybrid_override_pattern": None}, ["hybrid_override_pattern", "missing"]),
        ({"hybrid_override_pattern": 7}, ["hybrid_override_pattern"]),
        ({"n_groups": 3}, ["n_groups", "3", "128"]),
        ({"mamba_num_heads": 0}, ["mamba_num_heads", ">= 1"]),
        ({"mamba_head_dim": "64"}, ["mamba_head_dim"]),
        ({"ssm_state_size": -1}, ["ssm_state_size"]),
        ({"use_bias": True}, ["use_bias", "MambaMixer"]),
        ({"mamba_proj_bias": True}, ["mamba_proj_bias"]),
        ({"mamba_num_heads": None, "expand": 0}, ["expand"]),
        ({"mamba_num_heads": None, "mamba_head_dim": 60}, ["mamba_head_dim", "60"]),
    ],
)
def test_nonsense_is_refused_naming_the_field(tmp_path, change, words):
    raw = {**json.loads((DATA / "nemotron-h-8b.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(SpecError) as err:
        ps.ModelSpec.from_hf_config(path)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert "config.json" in str(err.value)


def test_moe_layers_need_experts():
    raw = json.loads((DATA / "nemotron-3-nano.json").read_text())
    raw["n_routed_experts"] = 0
    with pytest.raises(SpecError, match="MoE layers"):
        ps.ModelSpec.from_hf_config(raw)


@pytest.mark.parametrize(("act", "want"), [("relu2", "squared_relu"), ("silu", "silu")])
def test_mlp_activation(act, want):
    """``mlp_hidden_act`` names the ungated MLP's activation (Nemotron-H: relu2, squared
    ReLU); ``hidden_act`` is only the fallback."""
    raw = json.loads((DATA / "nemotron-h-8b.json").read_text())
    raw.update(mlp_hidden_act=act, hidden_act="gelu")
    m = ps.ModelSpec.from_hf_config(raw)
    assert (m.activation, m.gated_linear_unit) == (want, False)
