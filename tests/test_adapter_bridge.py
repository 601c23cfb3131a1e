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
import warnings
from pathlib import Path

import pytest

import parastrat as ps
from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg
from parastrat.spec.models import get

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


def real_provider(name: str, seq_length: int, **kw):
    """A real Bridge model provider (no TE: rope fusion off): a class of
    ``megatron.bridge.models`` or of one of its modules (``kimi.KimiK2Provider``), or
    ``hf:FILE``, the provider Bridge's ``AutoBridge.from_hf_config`` converts from a config in
    tests/data/hf (what Bridge's own DeepSeek recipes do: 0.3.1's ``DeepSeekV3ModelProvider``
    class is deprecated and carries no attention heads and no MLA)."""
    import importlib

    if name.startswith("hf:"):
        from megatron.bridge.models.conversion.auto_bridge import AutoBridge
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(Path(__file__).parent / "data" / "hf" / name[3:])
        provider = AutoBridge.from_hf_config(hf).to_megatron_provider(load_weights=False)
        for field_name, value in {**kw, "seq_length": seq_length}.items():
            setattr(provider, field_name, value)
        provider.apply_rope_fusion = False
        return provider
    module, _, cls = f"megatron.bridge.models.{name}".rpartition(".")
    make = getattr(importlib.import_module(module), cls)
    return make(seq_length=seq_length, apply_rope_fusion=False, **kw)


def with_provider(name: str, seq: int | None = None, **kw):
    """GPT-3 175B's recipe container holding a real Bridge model provider
    (:func:`real_provider`; permute fusion off; the sequence length of the recipe's
    dataset, or ``seq`` for both)."""
    cfg = gpt3_recipe()
    # GPT-3's recipe defers the embedding wgrad into its PP 8 flush, which Megatron refuses at
    # pp = 1: for another model's plans, the container a user would build turns it off
    cfg.comm_overlap.defer_embedding_wgrad_compute = False
    if seq is not None:
        cfg.dataset.sequence_length = seq
    provider = real_provider(name, cfg.dataset.sequence_length, **kw)
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
        "hf:deepseek-v3.json",
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


# ---------------------------------------------------------------------------------------------
# Candidates and plans: what they were priced with is written too.
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_plan():
    """A real plan for Llama 3 70B on 64 H100 at the GPT-3 recipe's sequence and batch."""
    return ps.plan(
        get("llama3-70b"),
        ps.Cluster(accelerator="h100", num_devices=64),
        seq_len=2048,
        global_batch_size=2048,
        top_k=3,
    )


def test_apply_plan_writes_strategy_and_what_it_was_priced_with(bridge, monkeypatch, llama_plan):
    best = llama_plan.best
    cfg = with_provider("Llama3ModelProvider70B")
    _, changes = mg.apply(cfg, llama_plan, world_size=64, report=True)
    assert mg.from_config(cfg, world_size=64) == best.strategy
    assert cfg.train.micro_batch_size == best.micro_batch_size
    assert cfg.train.global_batch_size == 2048
    granularity = {"none": None, "selective": "selective", "full": "full"}[best.recompute]
    assert cfg.model.recompute_granularity == granularity
    # TP overlap as priced (on with SP inside the NVLink domain), in Bridge's comm_overlap
    s = best.strategy
    assert cfg.comm_overlap.tp_comm_overlap is (s.tp > 1 and s.sp and s.tp <= 8)
    sections = {"model", "train", "comm_overlap", "dist", "ddp", "mixed_precision"}
    assert {c.path.split(".")[0] for c in changes} <= sections
    validate(cfg, 64, monkeypatch)


def test_a_plan_for_another_model_or_length_is_refused_untouched(bridge, llama_plan):
    """A plan carries its model and sequence length: applied to a config of another model or
    length it would write another run's micro-batch and recompute, so it is refused with the
    fix, and the config is left exactly as it was; its strategy alone still applies."""
    other = with_provider("Llama3ModelProvider8B")
    before = snapshot(other)
    with pytest.raises(StrategyError) as err:
        mg.apply(other, llama_plan, world_size=64)
    assert "plan-model" in {v.rule for v in err.value.violations}
    assert snapshot(other) == before
    longer = with_provider("Llama3ModelProvider70B", seq=8192)
    with pytest.raises(StrategyError, match="plan at seq_len 8192"):
        mg.apply(longer, llama_plan, world_size=64)
    mg.apply(longer, llama_plan.best.strategy, world_size=64)
    assert mg.from_config(longer, world_size=64) == llama_plan.best.strategy


def test_candidate_and_its_overrides_give_the_same_config(bridge, llama_plan):
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    for cand in llama_plan.candidates:
        applied = mg.apply(with_provider("Llama3ModelProvider70B"), cand, world_size=64)
        parsed = with_provider("Llama3ModelProvider70B")
        parsed = (
            process_config_with_overrides(parsed, cli_overrides=mg.to_overrides(cand)) or parsed
        )
        diff = differences(snapshot(applied), snapshot(parsed))
        assert [d for d in diff if d != "model.pipeline_dtype"] == [], cand.label()
        assert applied.train.micro_batch_size == cand.micro_batch_size


def test_bare_strategy_changes_nothing_else(bridge, llama_plan):
    cfg = with_provider("Llama3ModelProvider70B")
    cfg.model.recompute_granularity = "full"
    cfg.model.recompute_method = "block"
    cfg.model.recompute_num_layers = 2
    before = snapshot(cfg)
    _, changes = mg.apply(cfg, llama_plan.best.strategy, world_size=64, report=True)
    table = {f.name for f in mg.STRATEGY_FIELDS}
    assert {c.path.split(".", 1)[1] for c in changes} <= table
    after = snapshot(cfg)
    assert [k for k in differences(before, after) if k.split(".", 1)[1] not in table] == []


def test_candidate_switches_are_written_for_moe(bridge):
    """DeepSeek-V3 priced with the flex dispatcher (DeepEP) and MoE overlap."""
    plan = ps.plan(
        get("deepseek-v3"),
        ps.Cluster(accelerator="h100", num_devices=256),
        seq_len=4096,
        global_batch_size=1024,
        top_k=1,
        moe_dispatcher="deepep",
        moe_a2a_overlap=True,
    )
    lines = mg.to_overrides(plan)
    assert "model.moe_token_dispatcher_type=flex" in lines
    assert "model.moe_flex_dispatcher_backend=deepep" in lines
    assert "comm_overlap.overlap_moe_expert_parallel_comm=true" in lines
    assert f"train.micro_batch_size={plan.best.micro_batch_size}" in lines


# ---------------------------------------------------------------------------------------------
# Refusals leave the real container untouched.
# ---------------------------------------------------------------------------------------------
def identities(cfg) -> dict:
    return {
        f"{sec}.{f.name}": getattr(getattr(cfg, sec), f.name)
        for sec in SECTIONS
        if dataclasses.is_dataclass(getattr(cfg, sec, None))
        for f in dataclasses.fields(getattr(cfg, sec))
    }


def unchanged(cfg, before: dict) -> list[str]:
    return [k for k, v in identities(cfg).items() if v is not before[k]]


@pytest.mark.parametrize(
    ("s", "world", "rules"),
    [
        (Strategy(tp=5), 10, {"heads-tp"}),  # 96 heads
        (Strategy(tp=4, pp=5), 20, {"layers-pp"}),
        (Strategy(tp=4, cp=2, order="tp-cp-ep-pp-dp"), 8, {"bridge-tp-pp-dp-mapping"}),
        (Strategy(tp=4, ep=2), 8, {"ep-dense"}),
        (Strategy(tp=4, pp=8), 40, {"world-dense"}),
        (Strategy(tp=2, ulysses=2, ring=2, order="tp-sp-pp-cfg-dp"), 8, None),
    ],
)
def test_refused_apply_leaves_the_real_container_unchanged(bridge, s, world, rules):
    cfg = gpt3_recipe()
    before = identities(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, s, world_size=world)
    if rules is not None:
        assert rules <= set(err.value.rules)
    assert unchanged(cfg, before) == []


def test_explicit_inference_order_is_refused_with_the_fix(bridge):
    with pytest.raises(StrategyError) as err:
        mg.apply(gpt3_recipe(), Strategy(tp=2, ulysses=2, ring=2, order="tp-sp-pp-cfg-dp"))
    assert err.value.rules == ["megatron-inference-strategy"]
    assert "order='tp-cp-ep-dp-pp'" in err.value.violations[0].hint


def test_default_order_ulysses_ring_is_hierarchical_cp(bridge, monkeypatch):
    cfg = gpt3_recipe()
    # the recipe defers the embedding wgrad into its pipeline flush, which a GPU build refuses
    # at pp = 1 (apply's second opinion says so: tests/test_bridge_acceptance_start_up.py)
    cfg.comm_overlap.defer_embedding_wgrad_compute = False
    mg.apply(cfg, Strategy(tp=2, ulysses=2, ring=2, sp=True), world_size=64)
    m = cfg.model
    assert (m.context_parallel_size, m.cp_comm_type) == (4, "a2a+p2p")
    assert m.hierarchical_context_parallel_sizes == [2, 2]
    validate(cfg, 64, monkeypatch)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_interrupted_write_is_rolled_back(bridge, monkeypatch, error, llama_plan):
    """Whatever stops the write half-way (Ctrl-C too), the container is as it was."""
    cfg = with_provider("Llama3ModelProvider70B")
    before = identities(cfg)
    real_put, calls = mg._put, []

    def put(obj, values, plain):
        calls.append(obj)
        if len(calls) == 2:  # the model section written, then the next one fails
            raise error("stop")
        real_put(obj, values, plain)

    monkeypatch.setattr(mg, "_put", put)
    with pytest.raises(error):
        mg.apply(cfg, llama_plan, world_size=64)
    assert len(calls) >= 2
    assert unchanged(cfg, before) == []


# ---------------------------------------------------------------------------------------------
# Batch, sequence and order rules read from the real container.
# ---------------------------------------------------------------------------------------------
def test_batch_and_sequence_rules_read_from_the_container(bridge):
    cfg = gpt3_recipe()  # gbs 2048, mbs 2, seq 2048
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=4, pp=8, sp=True), world_size=32 * 3)  # dp 3: 2048 % 6
    assert err.value.rules == ["batch-divisible"]
    cfg.dataset.sequence_length = cfg.model.seq_length = 2052
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(cp=8))  # 2052 % (2 * 8)
    assert err.value.rules == ["seq-cp"]


def test_order_switch_round_trip(bridge):
    cfg = gpt3_recipe()
    s = Strategy(tp=4, pp=8, sp=True, order="tp-cp-ep-pp-dp")
    mg.apply(cfg, s)
    assert cfg.dist.use_tp_pp_dp_mapping is True
    assert mg.from_config(cfg) == s
    mg.apply(cfg, Strategy(tp=4, pp=8, sp=True))
    assert cfg.dist.use_tp_pp_dp_mapping is False


def test_every_table_field_exists_on_the_real_recipe(bridge):
    """A rename upstream fails here, not in a user's training job."""
    cfg = kimi_recipe()
    for f in mg.FIELDS:
        obj = getattr(cfg, f.sections[0])
        assert hasattr(obj, f.name), f"{f.sections[0]}.{f.name}"


# ---------------------------------------------------------------------------------------------
# Plan candidates for five models: every one validates, applies and passes Bridge's validate().
# ---------------------------------------------------------------------------------------------
PROVIDERS = {
    # as Bridge's DeepSeek-V3 recipe builds it: converted from its config.json (MLA, 128
    # heads, no linear biases), one MTP layer
    "deepseek-v3": ("hf:deepseek-v3.json", {"mtp_num_layers": 1}),
    "kimi-k2": ("kimi.KimiK2Provider", {}),
    "qwen3-235b-a22b": ("Qwen3MoEModelProvider235B_A22B", {}),
    "llama3.1-405b": ("Llama31ModelProvider405B", {}),
    "llama3-70b": ("Llama3ModelProvider70B", {}),
    "gpt-oss-120b": ("GPTOSSProvider120B", {}),
}
FIVE = [
    ("deepseek-v3", 256),
    ("deepseek-v3", 1024),
    ("kimi-k2", 256),
    ("kimi-k2", 1024),
    ("qwen3-235b-a22b", 128),
    ("qwen3-235b-a22b", 512),
    ("llama3.1-405b", 128),
    ("llama3.1-405b", 512),
    ("llama3-70b", 64),
    ("llama3-70b", 256),
    ("gpt-oss-120b", 64),
]


@pytest.mark.parametrize(("name", "gpus"), FIVE, ids=[f"{n}-{g}" for n, g in FIVE])
def test_every_plan_candidate_runs_on_the_real_bridge(bridge, monkeypatch, name, gpus):
    """Every candidate plan() returns (top 5) passes parastrat's own validation, applies to a
    real container holding the model's real provider, passes Bridge's validate() there, and
    reads back as the same strategy and micro-batch."""
    provider, kw = PROVIDERS[name]
    model, gbs = get(name), 4 * gpus
    plan = ps.plan(
        model,
        ps.Cluster(accelerator="h100", num_devices=gpus),
        seq_len=4096,
        global_batch_size=gbs,
        top_k=5,
    )
    assert plan.candidates
    for cand in plan.candidates:
        cand.strategy.validate(
            model,
            world_size=gpus,
            seq_len=4096,
            global_batch_size=gbs,
            micro_batch_size=cand.micro_batch_size,
        )
        cfg = gpt3_recipe()
        cfg.comm_overlap.defer_embedding_wgrad_compute = False  # GPT-3 PP 8 only
        cfg.dataset.sequence_length = 4096
        cfg.model = real_provider(provider, 4096, **kw)
        if cfg.model.num_moe_experts:
            cfg.model.moe_permute_fusion = False
        mg.apply(cfg, cand, world_size=gpus)
        validate(cfg, gpus, monkeypatch)
        assert mg.from_config(cfg, world_size=gpus) == cand.strategy
        assert cfg.train.micro_batch_size == cand.micro_batch_size


def test_moe_bias_needs_etp_1_as_megatron_says(bridge):
    """A provider whose experts carry a bias (the DeepSeek-V3 provider's class default) refuses
    ETP 2 through the project's rule, before Megatron's assertion, and leaves the container
    untouched."""
    from megatron.bridge.models import DeepSeekV3ModelProvider

    cfg = gpt3_recipe()
    cfg.model = DeepSeekV3ModelProvider(mtp_num_layers=1, apply_rope_fusion=False)
    assert cfg.model.add_bias_linear
    before = identities(cfg)
    s = Strategy(tp=2, pp=16, ep=4, etp=2, sp=True, pipeline_layout="Et*4|(t*4|)*14tmL")
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, s, world_size=1024)
    assert "moe-bias-etp" in err.value.rules
    assert unchanged(cfg, before) == []
    mg.apply(cfg, s.replace(etp=1), world_size=1024)
    assert cfg.model.expert_tensor_parallel_size == 1


# ---------------------------------------------------------------------------------------------
# The flex backend priced is the one written.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_flex_backend_priced_is_written(bridge, monkeypatch, backend):
    """A plan priced with a named flex backend keeps its name (the step model only needs to
    know it is flex): its step options give it back, the overrides and a real Kimi K2 recipe
    container get it as ``moe_flex_dispatcher_backend``, and Bridge's validate() passes."""
    plan = ps.plan(
        get("kimi-k2"),
        ps.Cluster(accelerator="h100", num_devices=256),
        seq_len=4096,
        global_batch_size=1024,
        top_k=1,
        moe_dispatcher=backend,
    )
    assert plan.switches.moe_dispatcher == backend
    assert plan.step_options["moe_dispatcher"] == backend
    overrides = mg.to_overrides(plan)
    assert "model.moe_token_dispatcher_type=flex" in overrides
    assert f"model.moe_flex_dispatcher_backend={backend}" in overrides
    cfg = kimi_recipe()
    cfg.model.moe_permute_fusion = False  # its Transformer Engine kernels are not on CPU
    mg.apply(cfg, plan, world_size=256)
    assert cfg.model.moe_token_dispatcher_type == "flex"
    assert cfg.model.moe_flex_dispatcher_backend == backend
    # Bridge checks the backend against the GPU (torch.cuda.get_device_properties(0)); this
    # CPU machine has none, so the query answers as the H100 the plan was made for would
    import types

    import torch

    h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: h100)
    validate(cfg, 256, monkeypatch)
    # the same switches priced again through the keyword form give the same step
    again = ps.estimate_step(
        get("kimi-k2"),
        plan.best.strategy,
        plan.cluster,
        seq_len=4096,
        global_batch_size=1024,
        micro_batch_size=plan.best.micro_batch_size,
        recompute=plan.best.recompute,
        **{k: v for k, v in plan.step_options.items() if k != "micro_batch_size"},
    )
    assert again.step_time_s == pytest.approx(plan.best.step.step_time_s)


def test_flex_backend_name_is_kept_and_priced_as_flex():
    from parastrat.errors import UsageError
    from parastrat.spec.workload import Switches, moe_dispatcher

    assert Switches(moe_dispatcher="HybridEP").moe_dispatcher == "hybridep"
    assert moe_dispatcher("hybridep") == moe_dispatcher("deepep") == "flex"
    # the step model prices a backend as flex: both names give the same step
    w = dict(seq_len=4096, global_batch_size=512, micro_batch_size=1)
    s = Strategy(tp=2, pp=8, ep=8, sp=True, pipeline_layout="Et*4|(t*4|)*14tL")
    s = s.with_world_size(128)
    cl = ps.Cluster(accelerator="h100", num_devices=128)
    steps = {
        d: ps.estimate_step(get("kimi-k2"), s, cl, **w, moe_dispatcher=d).step_time_s
        for d in ("flex", "deepep", "hybridep")
    }
    assert len(set(steps.values())) == 1
    with pytest.raises(UsageError, match="deepep/hybridep"):
        Switches(moe_dispatcher="nccl")


# ---------------------------------------------------------------------------------------------
# The flex backend must start on the device: Bridge's own start-up check, run for real.
# ---------------------------------------------------------------------------------------------
#: How each NVIDIA preset answers torch.cuda.get_device_properties (name, major): the data
#: sheets' compute capabilities (Ampere 8.0, Ada 8.9, Hopper 9.0, Blackwell 10.0 / 10.3).
CUDA_PROPS = {
    "a100": ("NVIDIA A100-SXM4-80GB", 8),
    "a800": ("NVIDIA A800-SXM4-80GB", 8),
    "l40": ("NVIDIA L40", 8),
    "l40s": ("NVIDIA L40S", 8),
    "l20": ("NVIDIA L20", 8),
    "rtx-4090": ("NVIDIA GeForce RTX 4090", 8),
    "h100": ("NVIDIA H100 80GB HBM3", 9),
    "h200": ("NVIDIA H200", 9),
    "h20": ("NVIDIA H20", 9),
    "h800": ("NVIDIA H800", 9),
    "b200": ("NVIDIA B200", 10),
    "b300": ("NVIDIA B300", 10),
    "gb200": ("NVIDIA GB200", 10),
    "gb300": ("NVIDIA GB300", 10),
}


@pytest.mark.parametrize("accel", sorted(CUDA_PROPS))
@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_flex_backend_refusals_match_bridge(bridge, monkeypatch, accel, backend):
    """parastrat refuses a flex backend on a device exactly when Megatron Bridge's real
    ``validate_flex_dispatcher_backend`` would stop the run at start-up."""
    import types

    import torch
    from megatron.bridge.training.flex_dispatcher_backend import validate_flex_dispatcher_backend

    from parastrat.errors import SpecError
    from parastrat.spec.hardware import get as get_accel
    from parastrat.spec.hardware import require_dispatcher

    name, major = CUDA_PROPS[accel]
    props = types.SimpleNamespace(name=name, major=major, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
    model = types.SimpleNamespace(
        moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend=backend
    )
    try:
        validate_flex_dispatcher_backend(model)
        bridge_ok = True
    except ValueError:
        bridge_ok = False
    try:
        require_dispatcher(get_accel(accel), backend)
        ours_ok = True
    except SpecError:
        ours_ok = False
    assert ours_ok == bridge_ok


def test_flex_on_grace_blackwell_writes_hybridep(bridge, monkeypatch):
    """``flex`` planned on GB200 is written as HybridEP (DeepEP does not start there), the
    real Kimi K2 container takes it and Bridge's validate() and its start-up backend check
    pass; asking for DeepEP there is refused before any pricing, naming the fix."""
    import types

    import torch
    from megatron.bridge.training.flex_dispatcher_backend import validate_flex_dispatcher_backend

    from parastrat.errors import SpecError

    cluster = ps.Cluster(accelerator="gb200", num_devices=256)
    plan = ps.plan(
        get("kimi-k2"), cluster, seq_len=4096, global_batch_size=1024, top_k=1,
        moe_dispatcher="flex",
    )  # fmt: skip
    assert "model.moe_flex_dispatcher_backend=hybridep" in mg.to_overrides(plan)
    cfg = kimi_recipe()
    cfg.model.moe_permute_fusion = False  # its Transformer Engine kernels are not on CPU
    mg.apply(cfg, plan, world_size=256)
    assert cfg.model.moe_flex_dispatcher_backend == "hybridep"
    gb200 = types.SimpleNamespace(name="NVIDIA GB200", major=10, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: gb200)
    validate(cfg, 256, monkeypatch)
    validate_flex_dispatcher_backend(cfg.model)
    with pytest.raises(SpecError, match="use --moe-dispatcher hybridep"):
        ps.plan(
            get("kimi-k2"), cluster, seq_len=4096, global_batch_size=1024, moe_dispatcher="deepep"
        )


# ---------------------------------------------------------------------------------------------
# The gradient buffer's dtype priced is the one the run gets.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fp32", [False, True])
def test_gradient_dtype_priced_is_run(bridge, monkeypatch, fp32):
    """A plan priced with BF16 (or FP32) gradients writes ``grad_reduce_in_fp32`` on both the
    mixed-precision and DDP sections, so Bridge's own start-up step (the first step of
    ``runtime_config_update``, run here: ``MixedPrecisionConfig.setup`` copies its value onto
    the DDP config; the whole start-up runs in tests/test_bridge_acceptance_start_up.py)
    leaves the DDP gradient buffer in the dtype
    the memory estimate counted; a container whose mixed precision is a recipe name gets the
    resolved recipe."""
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    plan = ps.plan(
        get("gpt3-175b"),
        ps.Cluster(accelerator="h100", num_devices=512),
        seq_len=2048,
        global_batch_size=2048,
        top_k=1,
        grad_reduce_in_fp32=fp32,
    )
    assert plan.step_options["grad_reduce_in_fp32"] is fp32
    overrides = mg.to_overrides(plan)
    assert f"ddp.grad_reduce_in_fp32={str(fp32).lower()}" in overrides
    assert f"mixed_precision.grad_reduce_in_fp32={str(fp32).lower()}" in overrides
    assert ("--accumulate-allreduce-grads-in-fp32" in mg.megatron_lm_args(plan)) is fp32
    for named in (False, True):
        cfg = gpt3_recipe()
        if named:
            cfg.mixed_precision = "bf16_mixed"  # FP32 gradients in that recipe
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            _, changes = mg.apply(cfg, plan, world_size=512, report=True)
        assert cfg.ddp.grad_reduce_in_fp32 is fp32
        moved = [c for c in changes if c.path.endswith("grad_reduce_in_fp32")]
        numerics = [w for w in said if "changed the run's numerics" in str(w.message)]
        assert len(numerics) == (1 if moved else 0)  # a numerics change is said aloud
        assert all(str(c) in str(numerics[0].message) for c in moved)
        if isinstance(cfg.mixed_precision, str):  # the named recipe already had the value
            assert named and fp32
            cfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision)
        assert cfg.mixed_precision.grad_reduce_in_fp32 is fp32
        cfg.mixed_precision.finalize()
        cfg.mixed_precision.setup(cfg.model, cfg.optimizer, cfg.ddp)
        assert cfg.ddp.grad_reduce_in_fp32 is fp32
        validate(cfg, 512, monkeypatch)
    # a recipe name Bridge does not know: refused with the rule, the container untouched
    cfg = gpt3_recipe()
    cfg.mixed_precision = "no_such_recipe"
    before = snapshot(cfg)
    with pytest.raises(StrategyError, match="mixed-precision-unknown"):
        mg.apply(cfg, plan, world_size=512)
    assert snapshot(cfg) == before and cfg.mixed_precision == "no_such_recipe"
    # the estimate counted that buffer: 2 or 4 bytes per parameter of the stage
    st = plan.best.memory.stages[0]
    assert st.gradients == pytest.approx((4 if fp32 else 2) * st.params)


def test_nvfp4_plan_writes_tp_overlap_off_as_bridges_nvfp4_recipes(bridge, monkeypatch):
    """An NVFP4 plan was priced without TP comm overlap (Bridge's NVFP4 performance recipes
    turn it off: TE's NVFP4 GEMM takes no userbuffers overlap): ``apply`` writes
    ``comm_overlap.tp_comm_overlap=False`` into a real recipe whose mixed precision is Bridge's
    own ``bf16_with_nvfp4_mixed``, and the container still validates."""
    from megatron.bridge.training.mixed_precision import bf16_with_nvfp4_mixed

    plan = ps.plan(
        get("llama3-70b"),
        ps.Cluster(accelerator="gb200", num_devices=64),
        seq_len=2048,
        global_batch_size=256,
        precision="nvfp4",
        top_k=1,
        search=ps.SearchSpace(tp=(2,), pp=(4,), cp=(1,)),
    )
    s = plan.best.strategy
    assert s.tp == 2 and s.sp
    cfg = with_provider("Llama3ModelProvider70B")
    cfg.mixed_precision = bf16_with_nvfp4_mixed()
    cfg.comm_overlap.tp_comm_overlap = True
    mg.apply(cfg, plan, world_size=64)
    assert cfg.comm_overlap.tp_comm_overlap is False
    assert "comm_overlap.tp_comm_overlap=false" in mg.to_overrides(plan)
    validate(cfg, 64, monkeypatch)


def test_sink_and_window_attention_refuse_ring_cp_as_transformer_engine_does(bridge, monkeypatch):
    """GPT-OSS (a 128-token window and learnable sinks, read from Bridge's real provider):
    ring CP is refused by the project's rule with the container untouched (Transformer Engine
    has no p2p context-parallel attention for either); the Ulysses fix the message names
    applies as ``cp_comm_type='a2a'`` and passes Bridge's validate()."""
    import megatron.bridge.models as models

    from parastrat.strategy import MEGATRON_ORDER

    cfg = gpt3_recipe()
    cfg.dataset.sequence_length = 4096
    cfg.model = models.GPTOSSProvider120B(seq_length=4096, apply_rope_fusion=False)
    cfg.model.moe_permute_fusion = False
    before = identities(cfg)
    ring = Strategy(pp=4, cp=2, ep=8, order=MEGATRON_ORDER)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, ring, world_size=64)
    assert err.value.rules == ["cp-ring-attention"]
    assert "ulysses=2" in err.value.violations[0].hint
    assert unchanged(cfg, before) == []
    mg.apply(cfg, ring.replace(ulysses=2, ring=1), world_size=64)
    assert (cfg.model.context_parallel_size, cfg.model.cp_comm_type) == (2, "a2a")
    validate(cfg, 64, monkeypatch)


def test_gemma_providers_cp_limits_are_seen(bridge):
    """Bridge's Gemma 2 attention asserts context_parallel_size == 1 at build (provider-cp);
    Gemma 3 keeps its window as a plain int, read as a sliding window so ring CP is refused
    (cp-ring-attention), Ulysses is not."""
    from megatron.bridge.models.gemma.gemma2_provider import Gemma2ModelProvider9B
    from megatron.bridge.models.gemma.gemma3_provider import Gemma3ModelProvider1B

    gemma2 = Gemma2ModelProvider9B()
    with pytest.raises(StrategyError) as err:
        mg.apply(gemma2, Strategy(ulysses=2, order="tp-cp-ep-dp-pp"), world_size=4)
    assert "provider-cp" in err.value.rules
    gemma3 = Gemma3ModelProvider1B()
    assert mg.model_view(gemma3).sliding_window == gemma3.window_size + 1
    with pytest.raises(StrategyError) as err:
        mg.apply(gemma3, Strategy(cp=2), world_size=4)
    assert err.value.rules == ["cp-ring-attention"]
    # its one KV head cannot be split by Ulysses either (TE's all-to-all CP asserts it)
    with pytest.raises(StrategyError) as err:
        mg.apply(gemma3, Strategy(ulysses=2, order="tp-cp-ep-dp-pp"), world_size=4)
    assert err.value.rules == ["kv-heads-ulysses"]
