"""The hybrid (Mamba) presets against the real Megatron Bridge 0.3.1 (CPU, no TE).

Each preset has the shape of Bridge's real provider (``NemotronHModelProvider*``,
``NemotronNanoModelProvider9Bv2``, ``Nemotron3NanoProvider``); ``apply`` writes strategies
into the containers of Bridge's real Nemotron recipes (the ones ``plan --format torchrun``
names), which then pass Bridge's ``ConfigContainer.validate()``; strategies Megatron Core's
``MambaModel`` refuses to build are refused by ``apply`` with the container untouched.
"""

from __future__ import annotations

import types

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg
from tests.test_adapter_bridge import identities, unchanged, validate

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

#: preset -> Megatron Bridge 0.3.1 provider class (``megatron.bridge.models.nemotronh``)
PROVIDERS = {
    "nemotron-h-8b": "NemotronHModelProvider8B",
    "nemotron-h-47b": "NemotronHModelProvider47B",
    "nemotron-h-56b": "NemotronHModelProvider56B",
    "nemotron-nano-9b-v2": "NemotronNanoModelProvider9Bv2",
    "nemotron-3-nano": "Nemotron3NanoProvider",
}
#: ModelSpec attribute -> the provider's attribute of the same meaning
SHAPE = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_query_groups",
    "ffn_hidden_size": "ffn_hidden_size",
    "hybrid_override_pattern": "hybrid_override_pattern",
    "mamba_num_heads": "mamba_num_heads",
    "mamba_head_dim": "mamba_head_dim",
    "mamba_num_groups": "mamba_num_groups",
    "mamba_state_dim": "mamba_state_dim",
    "num_moe_experts": "num_moe_experts",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "make_vocab_size_divisible_by": "make_vocab_size_divisible_by",
    "add_bias_linear": "add_bias_linear",
    "gated_linear_unit": "gated_linear_unit",
    "position_embedding_type": "position_embedding_type",
}


def provider(name: str):
    from megatron.bridge.models import nemotronh

    return getattr(nemotronh, PROVIDERS[name])()


def recipe(name: str, monkeypatch=None):
    """The real Bridge recipe ``plan --format torchrun`` names for the preset (looked up as
    ``run_recipe.py`` does), made CPU-runnable: no TE fusions; the model's sequence length
    the dataset's (Bridge's Nano v2 recipe keeps the provider's 131,072 against a dataset of
    8,192, which its own validate() refuses); Bridge's DeepEP check answered as an H100."""
    import megatron.bridge.recipes as recipes

    cfg = getattr(recipes, mg.default_recipe(name))()
    cfg.model.apply_rope_fusion = False
    cfg.model.moe_permute_fusion = False  # its TE kernel; Nemotron providers set it even dense
    cfg.model.seq_length = cfg.dataset.seq_length
    if monkeypatch is not None:
        import torch

        h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: h100)
    return cfg


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_preset_shape_is_the_providers(bridge, name):
    from megatron.core.activations import squared_relu

    spec, p = ps.models.get(name), provider(name)
    for ours, theirs in SHAPE.items():
        assert (getattr(spec, ours) or 0) == (getattr(p, theirs) or 0), ours
    assert spec.head_dim == (p.kv_channels or p.hidden_size // p.num_attention_heads)
    assert spec.tied_embeddings == p.share_embeddings_and_output_weights
    assert (spec.normalization, p.normalization) == ("rmsnorm", "RMSNorm")
    assert spec.activation == "squared_relu" and p.activation_func is squared_relu
    if spec.is_moe:
        assert spec.moe_router_topk == p.moe_router_topk
        # one group of all experts, picked from (Bridge: 1 / 1) is no group limit (None)
        assert (spec.moe_router_num_groups or 1) == p.moe_router_num_groups
        assert (spec.moe_router_group_topk or 1) == p.moe_router_group_topk


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_recipe_container_reads_back_as_the_preset(bridge, name):
    """The rules see a recipe container's model as the preset: the view of the provider has
    the preset's hybrid shape, and a recipe's own strategy reads back."""
    view, spec = mg.model_view(recipe(name)), ps.models.get(name)
    for f in ("hybrid_override_pattern", "mamba_heads", "mamba_num_groups", "num_layers"):
        assert getattr(view, f) == getattr(spec, f), f
    assert view.is_hybrid and view.mamba_in_proj_width == spec.mamba_in_proj_width


def test_recipe_names_are_bridges_exports(bridge):
    import megatron.bridge.recipes as recipes

    for name in PROVIDERS:
        assert callable(getattr(recipes, mg.default_recipe(name))), name
    assert mg.default_recipe("nemotron-h-56b") == "nemotronh_56b_pretrain_config"
    assert mg.default_recipe("nemotron-3-nano") == "nemotron_3_nano_pretrain_config"


CASES = [
    ("nemotron-h-8b", Strategy(), 8),
    ("nemotron-h-8b", Strategy(tp=2, sp=True), 8),
    ("nemotron-h-8b", Strategy(tp=4, sp=True), 32),
    ("nemotron-h-8b", Strategy(tp=8, sp=True), 64),
    ("nemotron-h-8b", Strategy(tp=8, cp=2, sp=True), 64),
    ("nemotron-h-56b", Strategy(tp=8, pp=2, sp=True), 64),
    ("nemotron-h-56b", Strategy(tp=4, pp=2, first_stage_layers=58, sp=True), 64),
    ("nemotron-h-47b", Strategy(tp=8, pp=2, sp=True), 64),
    ("nemotron-nano-9b-v2", Strategy(tp=4, sp=True), 8),
    ("nemotron-3-nano", Strategy(tp=4, ep=8, sp=True), 32),
    ("nemotron-3-nano", Strategy(tp=1, ep=8), 8),
]


@pytest.mark.parametrize(("name", "s", "world"), CASES)
def test_apply_then_bridge_validate(bridge, monkeypatch, name, s, world):
    cfg = recipe(name, monkeypatch)
    mg.apply(cfg, s, world_size=world, global_batch_size=2 * world, micro_batch_size=1)
    validate(cfg, world, monkeypatch)  # Bridge's and Megatron Core's own checks pass
    assert mg.from_config(cfg, world_size=world) == s.with_world_size(world)
    assert cfg.train.global_batch_size == 2 * world and cfg.train.micro_batch_size == 1


@pytest.mark.parametrize(
    ("name", "s", "world", "rules", "words"),
    [
        # MambaStack asserts no virtual pipeline (26 layers a stage split into 2 chunks)
        ("nemotron-h-8b", Strategy(tp=2, pp=2, vpp=2, sp=True), 8, {"hybrid-vpp"}, "virtual"),
        # MambaMixer: 8 B/C groups cannot split over 16 TP ranks
        ("nemotron-h-56b", Strategy(tp=16, sp=True), 16, {"mamba-groups-tp"}, "ngroups"),
        # MambaStack places layers by num_layers // pp and ignores the layout
        (
            "nemotron-h-8b",
            Strategy(tp=2, pp=2, sp=True, pipeline_layout="Et*26|t*26L"),
            8,
            {"hybrid-pipeline-layout"},
            "layout",
        ),
        (
            "nemotron-nano-9b-v2",
            Strategy(tp=2, pp=2, sp=True, account_for_embedding=True, account_for_loss=True),
            8,
            {"hybrid-pipeline-accounting"},
            "account_for",
        ),
        # MambaContextParallel: 16 heads per TP rank do not split over 32 CP ranks
        ("nemotron-h-8b", Strategy(tp=8, cp=32, sp=True), 256, {"mamba-cp"}, "cp_size"),
    ],
)
def test_what_mamba_refuses_is_refused_untouched(bridge, monkeypatch, name, s, world, rules, words):
    """Refused by parastrat's hybrid rules where they exist, else by apply's start-up second
    opinion (rule megatron-config: Megatron Core's own hybrid build checks, run on a copy);
    either way the container is exactly as it was, and the fix given applies and validates."""
    cfg = recipe(name, monkeypatch)
    before = identities(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, s, world_size=world)
    assert set(err.value.rules) <= rules | {"megatron-config"}, err.value.rules
    assert words in str(err.value).replace("-", "_") or words in str(err.value)
    assert unchanged(cfg, before) == []


def test_start_up_fix_applies(bridge, monkeypatch):
    """The second opinion's fix names degrees Megatron builds: its largest TP passes."""
    cfg = recipe("nemotron-h-56b", monkeypatch)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=16, sp=True), world_size=16)
    hint = err.value.violations[0].hint
    if err.value.rules == ["megatron-config"]:
        assert "tp in {1, 2, 4, 8}" in hint
    mg.apply(cfg, Strategy(tp=8, sp=True), world_size=16)
    validate(cfg, 16, monkeypatch)


def test_uneven_stack_split_is_caught(bridge):
    """MambaStack slices num_layers // pp layers per stage: 118 layers over pp=4 would build
    116 and drop two silently; Megatron Core's own placement code, run for each stage, shows
    it."""
    from parastrat.adapters.megatron_hybrid import HybridBuildError, hybrid_build_check

    p = provider("nemotron-h-56b")
    p.pipeline_model_parallel_size = 4
    with pytest.raises(HybridBuildError, match="builds 116 layers"):
        hybrid_build_check(p)
    p.num_layers_in_first_pipeline_stage = p.num_layers_in_last_pipeline_stage = 31
    hybrid_build_check(p)  # 31 + 28 + 28 + 31


def test_bad_head_dimension_is_a_message_not_a_crash(bridge):
    """A provider whose mixer head dimension is 0 gets Megatron's refusal with a fix, not a
    ZeroDivisionError from the head count."""
    from parastrat.adapters.megatron_hybrid import HybridBuildError, hybrid_build_check

    p = provider("nemotron-h-8b")
    p.mamba_head_dim = 0
    with pytest.raises(HybridBuildError, match="mamba_head_dim=0") as err:
        hybrid_build_check(p)
    assert "64" in err.value.hint


def test_overrides_start_the_real_recipe(bridge, monkeypatch):
    """What ``plan --format torchrun`` prints for a hybrid, parsed by Bridge's own override
    parser onto its Nemotron-H recipe (as ``run_recipe.py`` does), validates."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    s = Strategy(tp=8, pp=2, sp=True)
    cfg = recipe("nemotron-h-56b", monkeypatch)
    overrides = mg.to_overrides(s, micro_batch_size=1, global_batch_size=64)
    cfg = process_config_with_overrides(cfg, cli_overrides=overrides) or cfg
    validate(cfg, 64, monkeypatch)
    assert mg.from_config(cfg) == s
