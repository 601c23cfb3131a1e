"""The expert-bias loop and the selective-recompute modules, checked against Megatron Core's
own code (``TEGroupedMLP._apply_bias`` run on the CPU under a dispatch counter;
``TransformerConfig``'s module validation)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.estimate import moe_kernels
from parastrat.estimate.host_ops import host_ops
from parastrat.estimate.layer_cost import KernelSetup, LayerShape
from parastrat.estimate.memory import estimate_memory
from parastrat.estimate.step import layer_cost
from parastrat.spec.workload import (
    ALL_MECHANISMS,
    RECOMPUTE_MODULES,
    Mechanisms,
    parse_ablation,
)

GPT_OSS = ps.models.get("gpt-oss-120b")
QWEN = ps.models.get("qwen3-30b-a3b")
DSV3 = ps.models.get("deepseek-v3")
H100 = ps.hardware.get("h100")


def _count_aten(fn) -> Counter:
    """aten ops (by base name) that ``fn`` dispatches, forward and backward together."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: Counter = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return seen


def test_apply_bias_issues_one_multiply_and_add_per_local_expert():
    """Megatron's loop: per local expert ``t + b * p`` (a mul and an add), one cat forward;
    backward two products and two reductions per expert (bias and probability gradients).
    That is the launch count and the 6 h elements each way that moe_kernels prices."""
    torch = pytest.importorskip("torch")
    experts = pytest.importorskip("megatron.core.transformer.moe.experts")
    local, h = 4, 16
    counts = [3, 5, 2, 6]
    out = torch.randn(sum(counts), h, dtype=torch.bfloat16)
    probs = torch.rand(sum(counts), 1, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in range(local)]

    fwd = _count_aten(lambda: experts.TEGroupedMLP._apply_bias(out, biases, counts, probs))
    assert (fwd["mul"], fwd["add"], fwd["cat"]) == (local, local, 1)
    assert 2 * local + 1 == moe_kernels.expert_bias_launches(GPT_OSS, local, ALL_MECHANISMS)

    y = experts.TEGroupedMLP._apply_bias(out, biases, counts, probs)
    bwd = _count_aten(lambda: y.sum().backward())
    assert bwd["mul"] >= 2 * local  # grad * p and grad * b per expert
    assert bwd["sum"] >= 2 * local  # their reductions: bias grad, probability grad


def test_expert_bias_bytes_only_for_biased_experts():
    """6 h BF16 elements per routed copy each way for GPT-OSS; nothing without biases."""
    assert moe_kernels.expert_bias_bytes(GPT_OSS) == 6 * GPT_OSS.hidden_size * 2
    assert moe_kernels.expert_bias_bytes(QWEN) == 0.0
    assert moe_kernels.expert_bias_launches(QWEN, 16, ALL_MECHANISMS) == 0
    off = parse_ablation("expert_bias")
    assert moe_kernels.expert_bias_launches(GPT_OSS, 16, off) == 0


@pytest.mark.parametrize("model", [GPT_OSS, QWEN])
def test_expert_bias_mechanism_moves_the_layer_by_its_bytes(model):
    """Switching ``expert_bias`` off removes exactly copies x bytes from each direction of
    the MoE layer's memory-bound kernels, and 2L + 1 host launches forward."""
    tokens, tp, ep = 4096.0, 1, 8
    load = moe_kernels.expert_load(model, tokens, tp, ep, 1)
    on = moe_kernels.layer_bytes(model, tokens, tp, ep, load, ALL_MECHANISMS)
    off = moe_kernels.layer_bytes(model, tokens, tp, ep, load, parse_ablation("expert_bias"))
    extra = load.slowest * moe_kernels.expert_bias_bytes(model)
    assert on[0] - off[0] == pytest.approx(extra)
    assert on[1] - off[1] == pytest.approx(extra)
    s = ps.Strategy(tp=1, pp=4, ep=ep, etp=1)
    ops_on, _ = host_ops(model, True, s, "bf16")
    ops_off, _ = host_ops(model, True, s, "bf16", mech=parse_ablation("expert_bias"))
    local = model.num_experts // ep
    assert ops_on - ops_off == moe_kernels.expert_bias_launches(model, local, ALL_MECHANISMS)


def test_recompute_modules_are_megatrons():
    """Every module the step model prices is one Megatron Core accepts for selective
    recompute (its TransformerConfig validates the list; mla_up_proj needs an MLA config)."""
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    common = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=4)
    common |= dict(moe_grouped_gemm=True, moe_ffn_hidden_size=32)
    plain = [m for m in RECOMPUTE_MODULES if m != "mla_up_proj"]
    cfg = tc.TransformerConfig(
        **common, recompute_granularity="selective", recompute_modules=list(plain)
    )
    assert set(cfg.recompute_modules) == set(plain)
    mla = tc.MLATransformerConfig(
        **common, recompute_granularity="selective", recompute_modules=["mla_up_proj"]
    )
    assert mla.recompute_modules == ["mla_up_proj"]
    assert Mechanisms().recompute_modules == ("core_attn",)  # Megatron's default


def test_recompute_modules_refused_and_normalised():
    with pytest.raises(UsageError, match="unknown or unpriced recompute module"):
        Mechanisms(recompute_modules=("moe_layer",))  # the deprecated flag's name
    with pytest.raises(UsageError, match="collection of module names"):
        Mechanisms(recompute_modules="mlp")  # type: ignore[arg-type]
    m = Mechanisms(recompute_modules=["moe_act", "layernorm"])  # type: ignore[arg-type]
    assert m.recompute_modules == ("moe_act", "layernorm")
    assert hash(m) == hash(Mechanisms(recompute_modules=("layernorm", "moe_act")))


def _selective(model, moe, mods, tp=1, ep=8, precision="bf16"):
    mech = replace(ALL_MECHANISMS, recompute_modules=mods)
    kernels = KernelSetup(H100, precision, mech=mech)
    return layer_cost(model, kernels, moe, LayerShape(4096.0, 4096, tp, 1, tp > 1, ep, 1))


def test_selective_modules_priced_where_megatron_runs_them():
    """core_attn = the attention forward (the default, unchanged); "mlp" re-runs a dense MLP
    but not an MoE layer (Megatron Core skips MoE layers); "moe_act" and "layernorm" only on
    MoE layers; "mla_up_proj" the MLA up-projections' forward GEMMs."""
    default = _selective(GPT_OSS, True, ("core_attn",))
    assert default.selective == pytest.approx(default.attn_fwd)
    assert _selective(GPT_OSS, True, ("mlp",)).selective == 0.0
    dense = _selective(DSV3, False, ("mlp",), tp=2)
    assert 0 < dense.selective < dense.fwd
    assert _selective(GPT_OSS, True, ("moe_act",)).selective > 0
    assert _selective(GPT_OSS, False, ("moe_act", "layernorm")).selective == 0.0
    up = _selective(DSV3, True, ("mla_up_proj",), tp=2, ep=64, precision="fp8")
    assert 0 < up.selective < up.gemm_fwd - up.mlp_fwd  # part of the attention GEMMs
    assert _selective(GPT_OSS, True, ("mla_up_proj",)).selective == 0.0  # no MLA


def test_recipe_recompute_slows_the_step_by_the_modules():
    """estimate_step with selective recompute and the recipe's modules is slower than with
    none, and the clamped activation's eager passes make GPT-OSS's moe_act recompute dearer."""
    s = ps.Strategy(tp=1, pp=4, ep=8, etp=1).with_world_size(64)
    cluster = ps.Cluster("h100", num_devices=64)

    def step(mode, mech):
        sw = ps.Switches(mechanisms=mech, recompute=mode)
        return ps.estimate_step(
            GPT_OSS, s, cluster, sw, seq_len=4096, global_batch_size=1280, micro_batch_size=1
        )

    mods = Mechanisms(recompute_modules=("layernorm", "moe_act"))
    none, recipe = step("none", mods), step("selective", mods)
    assert none.step_time_s < recipe.step_time_s
    assert recipe.breakdown["recompute"] > 0
    plain = step("selective", replace(mods, act_clamp=False))
    assert plain.breakdown["recompute"] < recipe.breakdown["recompute"]


def test_the_moe_module_recomputes_the_whole_block():
    """ "moe" checkpoints Megatron's MoELayer: its forward (router, expert and shared GEMMs, the
    MoE kernels) runs again, covering "moe_act"; "shared_experts" re-runs the shared experts'
    GEMMs alone; a dense layer has neither."""
    block = _selective(DSV3, True, ("moe",), ep=64)
    assert block.selective > block.mlp_fwd > 0  # the GEMMs and the MoE kernels
    assert block.selective == pytest.approx(
        _selective(DSV3, True, ("moe", "moe_act"), ep=64).selective
    )
    shared = _selective(DSV3, True, ("shared_experts",), ep=64)
    assert 0 < shared.selective < block.mlp_fwd
    assert _selective(QWEN, True, ("shared_experts",)).selective == 0.0  # no shared experts
    assert _selective(DSV3, False, ("moe", "shared_experts"), tp=2).selective == 0.0


def test_recomputing_the_moe_block_trades_memory_for_its_forward_and_collectives():
    """Against the recipe's layernorm + moe_act: peak memory falls (only the block's input
    stays), the recompute term grows by the block's forward and its dispatch and combine, and
    the host issues the block (and its token-count sync) again."""
    model = ps.models.get("qwen3-235b-a22b")
    s = ps.Strategy(tp=2, pp=8, vpp=4, ep=32, sp=True, account_for_embedding=True)
    s = replace(s, account_for_loss=True).with_world_size(256)
    cluster = ps.Cluster("h100", num_devices=256)
    kw = dict(seq_len=4096, global_batch_size=2048, micro_batch_size=1)

    def run(mods):
        sw = ps.Switches(moe_dispatcher="flex", mechanisms=Mechanisms(recompute_modules=mods))
        sw = sw.with_recompute("selective")
        return ps.estimate_step(model, s, cluster, sw, **kw), estimate_memory(model, s, sw, **kw)

    (recipe, recipe_mem), (block, block_mem) = run(("layernorm", "moe_act")), run(("moe",))
    assert block_mem.peak_bytes < 0.7 * recipe_mem.peak_bytes
    assert block.breakdown["recompute"] > 10 * recipe.breakdown["recompute"]
    assert block.breakdown["host"] > recipe.breakdown["host"]
    assert block.step_time_s > recipe.step_time_s


def test_clamped_activation_bytes_and_sync():
    """GPT-OSS's clamp outside the compiled activation: 8 f / 10 f BF16 elements per routed
    copy and one more host-device sync per MoE layer forward; nothing for unclamped models."""
    f = GPT_OSS.moe_ffn_hidden_size
    assert moe_kernels.clamp_bytes(GPT_OSS) == (16 * f, 20 * f)
    assert moe_kernels.clamp_bytes(QWEN) == (0.0, 0.0)
    s = ps.Strategy(tp=1, pp=4, ep=8, etp=1)
    assert host_ops(GPT_OSS, True, s, "bf16")[1] == 2
    assert host_ops(GPT_OSS, True, s, "bf16", mech=parse_ablation("act_clamp"))[1] == 1
    assert host_ops(QWEN, True, s, "bf16")[1] == 1


def test_gpt_oss_clamp_read_from_its_config():
    """The preset's clamp is the one GPT-OSS's config.json states (``swiglu_limit``)."""
    from pathlib import Path

    data = Path(__file__).parent / "data" / "hf" / "gpt-oss-120b.json"
    assert ps.ModelSpec.from_hf_config(data).activation_clamp == GPT_OSS.activation_clamp == 7.0
    qwen = Path(__file__).parent / "data" / "hf" / "qwen3-30b-a3b.json"
    assert ps.ModelSpec.from_hf_config(qwen).activation_clamp is None


def test_recompute_modules_free_the_memory_megatron_frees():
    """Selective recompute with the recipes' modules keeps less than Megatron's default
    (moe_act drops FC2's input, layernorm the pre-MLP norm output, mla_up_proj MLA's Q/K/V);
    "mlp" leaves MoE layers alone; other modes ignore the modules."""
    from parastrat.estimate.memory import activations

    def acts(model, mods, recompute="selective", tp=1):
        return activations(model, tp, tp > 1, 1, 1, 1, 4096, "bf16", recompute, True, mods)

    base, recipe = acts(GPT_OSS, ("core_attn",)), acts(GPT_OSS, ("layernorm", "moe_act"))
    assert recipe.moe < base.moe and recipe.dense == base.dense
    f, k = GPT_OSS.moe_ffn_hidden_size, GPT_OSS.moe_router_topk
    assert base.moe - recipe.moe == pytest.approx(4096 * (k * 2 * f + 2 * GPT_OSS.hidden_size))
    assert acts(GPT_OSS, ("mlp",)).moe == base.moe  # Megatron skips MoE layers for "mlp"
    assert acts(GPT_OSS, ("layernorm", "moe_act"), "none").moe == acts(GPT_OSS, (), "none").moe
    dsv3 = acts(DSV3, ("core_attn",), tp=2)
    up = acts(DSV3, ("mla_up_proj", "mlp"), tp=2)
    assert up.moe < dsv3.moe and up.dense < dsv3.dense
