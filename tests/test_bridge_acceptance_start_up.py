"""``apply`` sees what Megatron Bridge's start-up sets on the model (the real Bridge 0.3.1).

Bridge's ``runtime_config_update`` (the first thing ``pretrain()`` runs) sets the container's
``mixed_precision`` recipe and ``comm_overlap`` settings onto the model before its checks run.
A strategy that clears ``apply``'s checks on the model section alone can still be refused
there; ``apply``'s second opinion runs that step on a copy, so it refuses first, with the
container untouched (found by ``benchmarks/bridge_acceptance.py``).
"""

from __future__ import annotations

import copy

import pytest

from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg

from .test_adapter_bridge import gpt3_recipe, snapshot, with_provider

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def start_up(cfg, world: int, monkeypatch) -> None:
    """Bridge's own ``runtime_config_update`` at ``world`` ranks (mixed precision, data
    parallel size, comm overlap, ``validate()``)."""
    from megatron.bridge.training.config import runtime_config_update

    monkeypatch.setenv("WORLD_SIZE", str(world))
    runtime_config_update(cfg)


def gpu_build_recipe():
    """GPT-3 175B's real recipe (TP4 PP8 VPP6, ``comm_overlap.defer_embedding_wgrad_compute``
    on) with the fused wgrad accumulation a GPU build has: the provider's field default
    (``fusions.can_enable_gradient_accumulation_fusion``) finds apex's
    ``fused_weight_gradient_mlp_cuda`` there, not on this CPU, and Megatron refuses the
    deferral without it."""
    cfg = gpt3_recipe()
    cfg.model.gradient_accumulation_fusion = True
    return cfg


def test_recipe_deferral_at_pp1_is_refused_by_apply_not_at_start_up(bridge, monkeypatch):
    """GPT-3's recipe defers the embedding wgrad into its pipeline flush (a comm_overlap
    field Bridge copies onto the model at start-up); Megatron Core refuses that at pp = 1.
    Written without the check, the strategy is refused by Bridge's start-up; ``apply``
    refuses it first, names the field and leaves the container as it was; the fix named
    applies and starts."""
    s = Strategy(tp=8, sp=True)
    unchecked = gpu_build_recipe()
    mg.apply(unchecked, s, world_size=64, framework_check=False)
    with pytest.raises(ValueError, match="defer embedding wgrad compute"):
        start_up(unchecked, 64, monkeypatch)

    cfg = gpu_build_recipe()
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, s, world_size=64)
    assert err.value.rules == ["megatron-config"]
    assert "defer embedding wgrad compute" in str(err.value)
    assert "comm_overlap" in str(err.value)
    assert snapshot(cfg) == before and cfg.comm_overlap.defer_embedding_wgrad_compute is True

    cfg.comm_overlap.defer_embedding_wgrad_compute = False
    mg.apply(cfg, s, world_size=64)
    start_up(cfg, 64, monkeypatch)
    assert cfg.model.tensor_model_parallel_size == 8 and cfg.data_parallel_size == 8


def test_recipe_deferral_with_a_pipeline_is_kept_and_starts(bridge, monkeypatch):
    """With a pipeline the recipe's deferral stays and Bridge's start-up accepts it."""
    cfg = gpu_build_recipe()
    mg.apply(cfg, Strategy(tp=4, pp=4, vpp=4, sp=True), world_size=128)
    assert cfg.comm_overlap.defer_embedding_wgrad_compute is True
    start_up(cfg, 128, monkeypatch)
    assert cfg.model.defer_embedding_wgrad_compute is True


def test_moe_overlap_needs_vpp_with_a_pipeline_as_bridges_start_up_asserts(bridge, monkeypatch):
    """``comm_overlap.overlap_moe_expert_parallel_comm`` with pp > 1 needs a virtual pipeline
    (an assertion in Bridge's ``CommOverlapConfig.setup``, not in Megatron Core's checks):
    ``apply`` refuses pp 2 without vpp (container untouched) and takes pp 2 with vpp 2, which
    then starts."""
    cfg = with_provider("Qwen3MoEModelProvider30B_A3B")
    cfg.comm_overlap.defer_embedding_wgrad_compute = False
    mg.apply(cfg, Strategy(ep=8), world_size=16)
    cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
    start_up(copy.deepcopy(cfg), 16, monkeypatch)  # the unchanged container starts

    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(pp=2, ep=8), world_size=16)
    assert err.value.rules == ["megatron-config"]
    assert "virtual_pipeline_model_parallel_size must be specified" in str(err.value)
    assert snapshot(cfg) == before

    mg.apply(cfg, Strategy(pp=2, vpp=2, ep=8), world_size=16)
    start_up(cfg, 16, monkeypatch)
    assert cfg.model.overlap_moe_expert_parallel_comm is True


def test_explicit_batch_sizes_are_written_as_checked(bridge, monkeypatch):
    """``apply(cfg, candidate, global_batch_size=...)`` checks the strategy against that
    batch and writes it, so Megatron's micro-batch calculator (what Bridge's ``initialize``
    sets up next) gets the batch checked, not the recipe's 2,048 (not a multiple of
    mbs x dp = 4 x 72); an explicit micro-batch replaces the candidate's likewise."""
    from megatron.core import num_microbatches_calculator as nmc

    import parastrat as ps
    from parastrat.spec.models import get

    plan = ps.plan(
        get("qwen3-30b-a3b"),
        ps.Cluster(accelerator="gb200", num_devices=72),
        seq_len=2048,  # the recipe's
        global_batch_size=288,
        top_k=1,
        search=ps.SearchSpace(tp=(1,), pp=(1,), cp=(1,)),
    )
    cand = plan.best
    assert 2048 % (cand.micro_batch_size * cand.strategy.dp)
    for mbs in (None, 1):
        cfg = with_provider("Qwen3MoEModelProvider30B_A3B")
        cfg.comm_overlap.defer_embedding_wgrad_compute = False
        mg.apply(cfg, cand, world_size=72, global_batch_size=288, micro_batch_size=mbs)
        assert cfg.train.global_batch_size == 288
        assert cfg.train.micro_batch_size == (mbs or cand.micro_batch_size)
        start_up(cfg, 72, monkeypatch)
        t = cfg.train
        nmc.init_num_microbatches_calculator(
            0, None, t.global_batch_size, t.micro_batch_size, cfg.data_parallel_size
        )
        try:
            assert nmc.get_num_microbatches() == 288 // (t.micro_batch_size * 72)
        finally:
            nmc.destroy_num_microbatches_calculator()


@pytest.mark.parametrize(
    ("accelerator", "precision", "recipe", "fp8_recipe"),
    [
        ("h100", "fp8", "bf16_with_fp8_current_scaling_mixed", "tensorwise"),
        ("gb200", "mxfp8", "bf16_with_mxfp8_mixed", "mxfp8"),
    ],
)
def test_fp8_plans_start_with_bridges_fp8_recipes(
    bridge, monkeypatch, accelerator, precision, recipe, fp8_recipe
):
    """An FP8 (current scaling) or MXFP8 plan for an MoE model, applied to a container whose
    mixed precision is Bridge's recipe for that precision, passes Bridge's start-up with the
    FP8 settings on the model.  ``apply`` writes no precision field: the recipe is the
    user's choice (docs/adapters.md).  Megatron Core's MoE + FP8 check asks for the TE
    version, which this machine lacks: it is answered with the floor Bridge 0.3.1 declares."""
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config
    from megatron.core import utils
    from packaging.version import Version

    import parastrat as ps
    from parastrat.spec.models import get

    from .conftest import BRIDGE_TE_FLOOR

    monkeypatch.setattr(utils, "_te_version", Version(BRIDGE_TE_FLOOR))
    world = 64
    plan = ps.plan(
        get("qwen3-30b-a3b"),
        ps.Cluster(accelerator=accelerator, num_devices=world),
        seq_len=2048,  # the recipe's
        global_batch_size=256,
        precision=precision,
        top_k=2,
    )
    for cand in plan.candidates:
        cfg = with_provider("Qwen3MoEModelProvider30B_A3B")
        cfg.comm_overlap.defer_embedding_wgrad_compute = False
        cfg.mixed_precision = get_mixed_precision_config(recipe)
        mg.apply(cfg, cand, world_size=world, global_batch_size=256)
        start_up(cfg, world, monkeypatch)
        assert cfg.model.fp8 is not None and cfg.model.fp8_recipe == fp8_recipe
        assert cfg.model.fp8_param and cfg.model.num_moe_experts == 128


def test_default_recipes_are_the_ones_run_recipe_finds(bridge):
    """``parastrat plan --format torchrun`` names ``default_recipe(model)`` for Bridge's
    ``scripts/training/run_recipe.py``, which finds a recipe only as an attribute of
    ``megatron.bridge.recipes``: every preset's name is one the installed Bridge exports,
    except the models it has no exported pretrain recipe for (``--recipe`` needed)."""
    import megatron.bridge.recipes as recipes

    from parastrat.spec.models import names

    named = {n: mg.default_recipe(n) for n in names()}
    # every name given is one run_recipe.py finds; None exactly where Bridge exports none
    assert all(hasattr(recipes, r) for r in named.values() if r is not None)
    guessed = {n: n.replace(".", "_").replace("-", "_") + "_pretrain_config" for n in names()}
    assert {n for n, r in named.items() if r is None} == mg.NO_EXPORTED_RECIPE
    assert not any(hasattr(recipes, guessed[n]) for n in mg.NO_EXPORTED_RECIPE)
    assert mg.default_recipe("llama3.1-405b") in dir(recipes)
    assert mg.default_recipe("llama3.2-1b") in dir(recipes)


@pytest.mark.parametrize(("vpp", "written"), [(1, False), (None, True)])
def test_combined_1f1b_is_written_as_priced_and_starts(bridge, monkeypatch, vpp, written):
    """A plan asked for combined 1F1B (``moe_a2a_overlap``) on PP 8: with VPP 1 Bridge's
    start-up refuses it (above), the step model prices it off ("not applied"), and ``apply``
    writes it off, so the plan's choice applies and starts; with VPP it is on and starts."""
    import parastrat as ps
    from parastrat.spec.models import get

    cluster = ps.Cluster(accelerator="h100", num_devices=128)
    pins = {"pp": (8,), "vpp": (1,) if vpp == 1 else None}
    kw = dict(seq_len=4096, global_batch_size=512, top_k=1, moe_a2a_overlap=True, **pins)
    plan = ps.plan(get("qwen3-235b-a22b"), cluster, **kw)
    assert (plan.best.strategy.vpp > 1) is written
    cfg = _started(plan, "Qwen3MoEModelProvider235B_A22B", monkeypatch)
    assert cfg.comm_overlap.overlap_moe_expert_parallel_comm is written


def test_combined_1f1b_with_an_mtp_layer_needs_a_pipeline(bridge, monkeypatch):
    """Megatron Core refuses combined 1F1B with an MTP layer at PP 1 ("Pipeline model parallel
    size must be larger than 1 when enabling overlap_moe_expert_parallel_comm with MTP
    layer"): DeepSeek-V3's plan pinned to PP 1 prices it off with that note, ``apply`` writes
    it off, and the choice starts."""
    import parastrat as ps
    from parastrat.spec.models import get

    cluster = ps.Cluster(accelerator="gb200", num_devices=128)
    kw = dict(seq_len=4096, global_batch_size=512, top_k=1, moe_a2a_overlap=True, pp=(1,))
    plan = ps.plan(get("deepseek-v3"), cluster, **kw)
    assert plan.best.strategy.ep > 1
    assert any("with an MTP layer Megatron Core needs PP > 1" in n for n in plan.best.step.notes)
    cfg = _started(plan, "hf:deepseek-v3.json", monkeypatch)
    assert cfg.comm_overlap.overlap_moe_expert_parallel_comm is False


def test_graphs_megatron_refuses_beside_combined_1f1b_are_refused_before_writing(bridge):
    """Megatron Core 0.16 refuses combined 1F1B beside whole-iteration (or moe / mlp) CUDA
    graphs: ``apply`` and the override lines refuse such a plan with the rule and a fix,
    leaving the config untouched, and the fix's Transformer Engine scopes are written with
    the overlap on."""
    import parastrat as ps
    from parastrat.spec.models import get

    cluster = ps.Cluster(accelerator="gb200", num_devices=128)
    kw = dict(seq_len=4096, global_batch_size=512, top_k=1, moe_a2a_overlap=True, pp=(2,))
    refused = ps.plan(get("qwen3-30b-a3b"), cluster, cuda_graphs=True, ep=(8,), **kw)
    cfg = with_provider("hf:qwen3-30b-a3b.json")
    before = snapshot(cfg)
    with pytest.raises(StrategyError, match="attn,moe_router,moe_preprocess") as err:
        mg.apply(cfg, refused, world_size=128)
    assert err.value.rules == ["megatron-graphs-a2a"] and snapshot(cfg) == before
    with pytest.raises(StrategyError, match="megatron-graphs-a2a"):
        mg.to_overrides(refused)
    fixed = ps.plan(
        get("qwen3-30b-a3b"), cluster, cuda_graphs="attn,moe_router,moe_preprocess", ep=(8,), **kw
    )
    lines = mg.to_overrides(fixed)
    assert "comm_overlap.overlap_moe_expert_parallel_comm=true" in lines
    assert "model.cuda_graph_impl=transformer_engine" in lines


def test_shared_expert_overlap_is_written_only_with_alltoall(bridge, monkeypatch):
    """Megatron Core runs the shared-expert overlap with the alltoall dispatcher only ("only
    works with alltoall token dispatcher"): a plan asked for it with the flex dispatcher on
    DeepSeek-V2 (shared experts) prices it off with a note, ``apply`` writes it off, and the
    choice starts; with alltoall it is priced, written and starts."""
    import types

    import torch

    import parastrat as ps
    from parastrat.spec.models import get

    # Bridge's flex-backend check asks the device: answer as an H100 would (no GPU here)
    h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: h100)
    cluster = ps.Cluster(accelerator="h100", num_devices=128)
    for dispatcher, written in (("flex", False), ("alltoall", True)):
        kw = dict(seq_len=4096, global_batch_size=512, top_k=1, moe_dispatcher=dispatcher)
        plan = ps.plan(get("deepseek-v2"), cluster, moe_shared_expert_overlap=True, **kw)
        noted = any("alltoall dispatcher only" in n for n in plan.best.step.notes)
        assert noted is not written
        cfg = _started(plan, "hf:deepseek-v2.json", monkeypatch)
        assert cfg.model.moe_shared_expert_overlap is written


def _started(plan, provider: str, monkeypatch):
    """``plan`` applied to GPT-3's recipe holding the real ``provider`` at 4,096 tokens on
    128 ranks, after Bridge's start-up (which raises on a refusal)."""
    cfg = with_provider(provider)
    cfg.dataset.sequence_length = cfg.model.seq_length = 4096
    cfg.comm_overlap.defer_embedding_wgrad_compute = False
    mg.apply(cfg, plan, world_size=128)
    start_up(cfg, 128, monkeypatch)
    return cfg


def test_a_swapped_model_does_not_hide_the_strategys_refusal(bridge, monkeypatch):
    """GPT-3's recipe holding Llama 3 8B's provider, the recipe's wgrad deferral kept: the
    unchanged config was refused already, which used to switch the second opinion off, and a
    pp = 1 strategy was accepted, then refused at start-up (on a GPU build).  A config that
    would not start is refused now, whatever the unchanged one did."""
    cfg = with_provider("Llama3ModelProvider8B")
    cfg.comm_overlap.defer_embedding_wgrad_compute = True  # as GPT-3's recipe has it
    before = snapshot(cfg)
    with pytest.raises(StrategyError, match="defer embedding wgrad compute") as err:
        mg.apply(cfg, Strategy(tp=8, sp=True), world_size=64)
    assert err.value.rules == ["megatron-config"] and snapshot(cfg) == before
    mg.apply(cfg, Strategy(tp=4, pp=2, sp=True), world_size=64)  # a pipeline keeps it
    assert cfg.comm_overlap.defer_embedding_wgrad_compute is True


def test_full_iteration_graphs_turn_the_nan_check_off_and_start(bridge, monkeypatch):
    """Bridge's validate() asserts check_for_nan_in_loss is off with full-iteration CUDA graphs:
    a plan priced with them writes it off (apply and the override line) and starts."""
    import parastrat as ps

    wl = ps.Workload(model="llama3-8b", seq_len=4096, global_batch_size=64)
    plan = ps.plan(wl, ps.Cluster("h100", 16), ps.Switches(cuda_graphs="full_iteration"))
    assert "rerun_state_machine.check_for_nan_in_loss=false" in mg.to_overrides(plan)
    cfg = with_provider("Llama3ModelProvider8B", seq=4096)
    mg.apply(cfg, plan, world_size=16)
    assert cfg.rerun_state_machine.check_for_nan_in_loss is False
    start_up(cfg, 16, monkeypatch)


def test_reapplying_after_start_up_resets_the_interleaved_group(bridge, monkeypatch):
    """Start-up fills microbatch_group_size_per_vp_stage with the recipe's pp; a later apply
    with another pp writes Megatron's default (the new pp), as a fresh container gets it."""
    cfg = with_provider("Llama3ModelProvider70B")
    mg.apply(cfg, Strategy(tp=4, pp=4, vpp=5, sp=True), world_size=64)
    start_up(cfg, 64, monkeypatch)
    assert cfg.model.microbatch_group_size_per_vp_stage == 4
    mg.apply(cfg, Strategy(tp=4, pp=8, vpp=2, sp=True), world_size=64)
    start_up(cfg, 64, monkeypatch)
    assert cfg.model.microbatch_group_size_per_vp_stage == 8
