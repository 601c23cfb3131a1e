"""The Llama 4 and GPT-OSS 20B presets have the shape of Megatron Bridge's real providers, and
plan candidates for them launch on the real Bridge (apply, then ``ConfigContainer.validate()``)."""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat.adapters import megatron as mg
from tests.test_adapter_bridge import gpt3_recipe, validate

#: preset -> Megatron Bridge 0.3.1 provider class (``megatron.bridge.models``)
PROVIDERS = {
    "llama4-scout": "Llama4Experts16ModelProvider",
    "llama4-maverick": "Llama4Experts128ModelProvider",
    "gpt-oss-20b": "GPTOSSProvider20B",
}
#: ModelSpec field -> the provider's attribute of the same meaning
SHAPE = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_query_groups",
    "head_dim": "kv_channels",
    "num_moe_experts": "num_moe_experts",
    "moe_router_topk": "moe_router_topk",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "vocab_size": "vocab_size",
    "add_bias_linear": "add_bias_linear",
    "attention_chunk_size": "attention_chunk_size",
}


def provider(name: str, **kw):
    import megatron.bridge.models as models

    kw.setdefault("seq_length", 4096)
    return getattr(models, PROVIDERS[name])(apply_rope_fusion=False, **kw)


def moe_pattern(p) -> list[bool]:
    """Which layers carry experts in a provider (Megatron's ``moe_layer_freq``: an int k means
    every k-th layer from the first, a list names each layer)."""
    freq = p.moe_layer_freq
    if isinstance(freq, int):
        return [i % freq == 0 for i in range(p.num_layers)]
    return [bool(x) for x in freq]


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_preset_shape_is_the_providers(bridge, name):
    spec, p = ps.models.get(name), provider(name)
    p.kv_channels = p.kv_channels or p.hidden_size // p.num_attention_heads
    for ours, theirs in SHAPE.items():
        # None on either side: the feature is off (no shared expert, no chunking)
        assert (getattr(spec, ours) or 0) == (getattr(p, theirs, None) or 0), ours
    assert [spec.is_moe_layer(i) for i in range(spec.num_layers)] == moe_pattern(p)
    dense = [i for i in range(spec.num_layers) if not spec.is_moe_layer(i)]
    if dense:  # Maverick's dense layers use the provider's ffn_hidden_size
        assert spec.ffn_hidden_size == p.ffn_hidden_size


@pytest.mark.parametrize(("name", "gpus"), [("llama4-scout", 64), ("llama4-maverick", 128)])
def test_plan_candidates_launch_on_the_real_bridge(bridge, monkeypatch, name, gpus):
    model = ps.models.get(name)
    plan = ps.plan(
        model,
        ps.Cluster(accelerator="h100", num_devices=gpus),
        seq_len=4096,
        global_batch_size=4 * gpus,
        top_k=3,
    )
    assert plan.candidates
    for cand in plan.candidates:
        cfg = gpt3_recipe()
        cfg.comm_overlap.defer_embedding_wgrad_compute = False  # GPT-3 PP 8 only
        cfg.dataset.sequence_length = 4096
        cfg.model = provider(name)
        cfg.model.moe_permute_fusion = False
        mg.apply(cfg, cand, world_size=gpus)
        validate(cfg, gpus, monkeypatch)
        assert mg.from_config(cfg, world_size=gpus) == cand.strategy


def test_cp_must_keep_attention_chunks_whole(bridge, monkeypatch):
    """Bridge's Llama 4 attention asserts that each CP rank's two sequence pieces hold whole
    8192-token chunks; parastrat refuses the CP that would stop the first forward, before
    writing, and its fix applies and validates."""
    from parastrat.errors import StrategyError
    from tests.test_adapter_bridge import identities, unchanged

    cfg = gpt3_recipe()
    cfg.comm_overlap.defer_embedding_wgrad_compute = False  # GPT-3 PP 8 only
    cfg.dataset.sequence_length = 32768
    cfg.model = provider("llama4-scout", seq_length=32768)
    cfg.model.moe_permute_fusion = False
    before = identities(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, ps.Strategy(cp=4, ep=16), world_size=64)
    assert err.value.rules == ["cp-attention-chunk"]
    assert "use cp in {2}" in err.value.violations[0].hint
    assert unchanged(cfg, before) == []
    mg.apply(cfg, ps.Strategy(cp=2, ep=16), world_size=64)
    validate(cfg, 64, monkeypatch)


def test_chunked_attention_is_priced_within_its_chunk():
    from parastrat.estimate.flops import attention_core_flops_per_token

    scout = ps.models.get("llama4-scout")
    whole = scout.with_(attention_chunk_size=None)
    # up to one chunk nothing changes; beyond it each query sees at most its chunk
    assert attention_core_flops_per_token(scout, 8192) == attention_core_flops_per_token(
        whole, 8192
    )
    chunked, full = (attention_core_flops_per_token(m, 65536) for m in (scout, whole))
    assert chunked == attention_core_flops_per_token(whole, 8192) and full == 8 * chunked
