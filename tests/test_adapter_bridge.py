"""parastrat.adapters.megatron against the real Megatron Bridge 0.3.1 (CPU, no TE).

Real recipes (``gpt3_175b_pretrain_config``, ``kimi_k2_pretrain_config``), real model
providers in a recipe's container, Bridge's own ``ConfigContainer.validate()`` (which runs
Megatron Core's ``TransformerConfig`` checks through ``finalize()``) and Bridge's own override
parser ``process_config_with_overrides``.  The ``bridge`` fixture (tests/conftest.py) imports
Bridge with a Transformer Engine stand-in visible only during the import; it skips these tests
with the reason when Bridge is not installed.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from parastrat import Strategy
from parastrat.adapters import megatron as mg

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

SECTIONS = ("model", "train", "dist", "comm_overlap", "optimizer", "ddp", "dataset", "scheduler")


def gpt3_recipe():
    from megatron.bridge.recipes.gpt.gpt3_175b import gpt3_175b_pretrain_config

    return gpt3_175b_pretrain_config()


def kimi_recipe():
    from megatron.bridge.recipes.kimi.kimi_k2 import kimi_k2_pretrain_config

    return kimi_k2_pretrain_config()


def with_provider(name: str, **kw):
    """GPT-3 175B's recipe container holding a real Bridge model provider (no TE: the rope and
    permute fusions off; the sequence length of the recipe's dataset)."""
    import megatron.bridge.models as models

    cfg = gpt3_recipe()
    provider = getattr(models, name)(
        seq_length=cfg.dataset.sequence_length, apply_rope_fusion=False, **kw
    )
    if provider.num_moe_experts:
        provider.moe_permute_fusion = False
    cfg.model = provider
    return cfg


def validate(cfg, world: int, monkeypatch) -> None:
    """Bridge's ConfigContainer.validate() at ``world`` ranks (it reads WORLD_SIZE)."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    cfg.validate()


def snapshot(cfg) -> dict:
    """Every dataclass field of every section, by value."""
    out = {}
    for sec in SECTIONS:
        obj = getattr(cfg, sec, None)
        if obj is not None and dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                out[f"{sec}.{f.name}"] = copy.copy(getattr(obj, f.name))
    return out


def differences(a: dict, b: dict) -> list[str]:
    return [k for k in a if not mg._same(a[k], b.get(k))]


# Real providers and a strategy recipe authors would run each with (world in ranks).
PROVIDER_CASES = [
    ("Llama3ModelProvider70B", {}, Strategy(tp=8, pp=4, vpp=5, sp=True), 64),
    (
        "Llama31ModelProvider405B",
        {},
        Strategy(tp=8, pp=8, vpp=2, sp=True, account_for_embedding=True, account_for_loss=True),
        128,
    ),
    (
        "DeepSeekV3ModelProvider",
        {"mtp_num_layers": 1},
        Strategy(tp=2, pp=8, ep=8, sp=True, pipeline_layout="Et*4|(t*4|)*14tmL"),
        64,
    ),
    (
        "Qwen3MoEModelProvider235B_A22B",
        {},
        Strategy(
            tp=4, pp=8, vpp=3, ep=8, sp=True, account_for_embedding=True, account_for_loss=True
        ),
        64,
    ),
]


@pytest.mark.parametrize(("provider", "kw", "s", "world"), PROVIDER_CASES)
def test_real_provider_apply_then_bridge_validate(bridge, monkeypatch, provider, kw, s, world):
    cfg = with_provider(provider, **kw)
    mg.apply(cfg, s, world_size=world)
    validate(cfg, world, monkeypatch)  # Bridge's and Megatron Core's own checks pass
    assert mg.from_config(cfg) == s


def test_recipes_read_back_layouts_included(bridge):
    # gpt3_175b: TP4 PP8 VPP6 SP (bridge_on_cpu.md); kimi_k2: TP2 PP16 EP32 with a list layout
    assert mg.from_config(gpt3_recipe()) == Strategy(tp=4, pp=8, vpp=6, sp=True)
    kimi = kimi_recipe()
    s = mg.from_config(kimi)
    assert (s.tp, s.pp, s.vpp, s.ep, s.etp) == (2, 16, 1, 32, 1)
    assert s.to_dict()["pipeline_layout"] == kimi.model.pipeline_model_parallel_layout
    assert str(s.layout_parsed) == "Et*4|(t*4|)*14tL"
    assert s.stage_layers(61) == [4] * 15 + [1]
    # ... and the layout read back applies to the recipe and passes Bridge's validate()
    mg.apply(kimi, s, world_size=512)


def test_kimi_recipe_validates_after_its_own_strategy(bridge, monkeypatch):
    cfg = kimi_recipe()
    cfg.model.moe_permute_fusion = False
    cfg.model.apply_rope_fusion = False
    mg.apply(cfg, mg.from_config(cfg), world_size=512)
    validate(cfg, 512, monkeypatch)


@pytest.mark.parametrize(
    "s",
    [
        Strategy(tp=2, pp=4, sp=True, ulysses=2, ring=2),  # hierarchical CP, default order
        Strategy(tp=4, pp=8, vpp=6, sp=True),
        Strategy(tp=8, pp=4, sp=True, first_stage_layers=10, last_stage_layers=12),
        Strategy(tp=4, pp=7, vpp=2, sp=True, account_for_embedding=True, account_for_loss=True),
        Strategy(
            tp=4,
            pp=4,
            sp=True,
            pipeline_layout=[["embedding"] + ["decoder"] * 24]
            + [["decoder"] * 24] * 2
            + [["decoder"] * 24 + ["loss"]],
        ),
        Strategy(tp=4, pp=8, sp=True, pipeline_layout="Et*11|(t*12|)*6t*13L"),
    ],
)
def test_overrides_through_bridge_parser_equal_apply(bridge, s):
    """to_overrides fed to Bridge's own process_config_with_overrides gives the very config
    apply writes (pipeline_dtype aside: Bridge's finalize() derives it)."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    applied = mg.apply(gpt3_recipe(), s)
    parsed = gpt3_recipe()
    parsed = process_config_with_overrides(parsed, cli_overrides=mg.to_overrides(s)) or parsed
    diff = differences(snapshot(applied), snapshot(parsed))
    assert [d for d in diff if d != "model.pipeline_dtype"] == []
    assert mg.from_config(parsed) == mg.as_training(s)
