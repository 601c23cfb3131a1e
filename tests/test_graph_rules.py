"""CUDA-graph scopes: parastrat refuses exactly what Megatron Core's ``TransformerConfig``
refuses (checked against the installed megatron-core), the step model and the planner apply
the rules, and the CLI names the fix as flags."""

from __future__ import annotations

import warnings

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import StrategyError
from parastrat.rules.graphs import GraphRun, graph_violations
from parastrat.spec.workload import Mechanisms, Switches

LLAMA70 = ps.models.get("llama3-70b")

#: (scopes, recompute, MoE, recompute modules, capacity factor, routing-map padding)
CASES = [
    (("attn", "mlp"), "none", False, ("core_attn",), None, False),
    (("attn", "mlp"), "selective", False, ("core_attn",), None, False),
    (("attn", "mlp"), "full", False, ("core_attn",), None, False),
    (("full_iteration",), "full", False, ("core_attn",), None, False),
    (("attn", "moe_router", "moe_preprocess"), "selective", True, ("core_attn",), None, False),
    (("attn", "moe_router", "moe_preprocess"), "selective", True, ("moe",), None, False),
    (("attn", "moe_router", "moe_preprocess"), "none", True, ("core_attn",), 1.0, False),
    (("attn", "moe_router", "moe_preprocess"), "none", True, ("core_attn",), None, True),
    (("moe_preprocess",), "none", True, ("core_attn",), None, False),
    (("moe", "moe_router"), "none", True, ("core_attn",), None, False),
    (("moe",), "none", True, ("core_attn",), None, False),
    (("mlp",), "none", True, ("core_attn",), None, False),
    (("moe_router",), "none", False, ("core_attn",), None, False),
    (("attn",), "full", True, ("core_attn",), None, False),
]


def _megatron_accepts(scopes, recompute, moe, modules, capacity, padding) -> bool:
    """Whether megatron-core's TransformerConfig takes these settings (dropout off, as
    Megatron Bridge's pretraining recipes)."""
    config = pytest.importorskip("megatron.core.transformer.transformer_config")
    kw: dict = dict(
        num_layers=4,
        hidden_size=64,
        num_attention_heads=4,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        cuda_graph_impl="local" if scopes == ("full_iteration",) else "transformer_engine",
        cuda_graph_scope=list(scopes),
    )
    if moe:
        kw.update(num_moe_experts=8, moe_ffn_hidden_size=64, moe_expert_capacity_factor=capacity)
        kw.update(moe_token_dispatcher_type="alltoall")  # parastrat's default dispatcher
        kw.update(moe_router_padding_for_fp8=padding)
    if recompute == "full":
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif recompute == "selective":
        kw.update(recompute_granularity="selective", recompute_modules=list(modules))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config.TransformerConfig(**kw)
    except (AssertionError, ValueError):
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'+'.join(c[0])}-{c[1]}")
def test_refuses_what_megatron_core_refuses(case):
    scopes, recompute, moe, modules, capacity, padding = case
    run = GraphRun(moe, moe, recompute, modules, capacity_factor=capacity, router_padding=padding)
    refused = bool(graph_violations(scopes, run))
    assert refused == (not _megatron_accepts(*case))


def test_step_model_refuses_full_recompute_with_scoped_graphs():
    cluster = ps.Cluster(accelerator="h100", num_devices=16)
    s = ps.Strategy(tp=8, pp=2).with_world_size(16)
    kw = dict(seq_len=8192, global_batch_size=64, micro_batch_size=1, precision="fp8")
    with pytest.raises(StrategyError) as err:
        ps.estimate_step(LLAMA70, s, cluster, Switches(recompute="full", cuda_graphs="attn"), **kw)
    assert [v.rule for v in err.value.violations] == ["cuda-graph-full-recompute"]
    # the whole iteration takes full recompute
    graphed = Switches(recompute="full", cuda_graphs="full_iteration")
    assert ps.estimate_step(LLAMA70, s, cluster, graphed, **kw).recompute == "full"
    # a capacity factor on the alltoall dispatcher syncs in the preprocessing
    qwen = ps.models.get("qwen3-30b-a3b")
    sw = Switches(
        recompute="none",
        cuda_graphs="attn,moe_router,moe_preprocess",
        mechanisms=Mechanisms(capacity_factor=1.0),
    )
    with pytest.raises(StrategyError, match="cuda-graph-preprocess-sync"):
        ps.estimate_step(qwen, ps.Strategy(ep=8).with_world_size(16), cluster, sw, **kw)
    flex = Switches(
        recompute="none",
        cuda_graphs="attn,moe_router,moe_preprocess",
        moe_dispatcher="flex",
        mechanisms=Mechanisms(capacity_factor=1.0),
    )
    ps.estimate_step(qwen, ps.Strategy(ep=8).with_world_size(16), cluster, flex, **kw)


def test_plan_keeps_to_the_modes_the_scopes_allow(capsys):
    cluster = ps.Cluster(accelerator="h100", num_devices=32)
    kw = dict(seq_len=8192, global_batch_size=64, precision="fp8", top_k=20)
    plan = ps.plan(LLAMA70, cluster, Switches(cuda_graphs="attn,mlp"), **kw)
    assert plan.candidates and all(c.recompute != "full" for c in plan.candidates)
    # on 16 devices only full recompute would fit: the error says why it was not tried
    argv = "plan --model llama3-70b --gpus 16 --seq-len 8192 --global-batch-size 64"
    assert main([*argv.split(), "--cuda-graphs", "attn,mlp"]) == 2
    assert "cuda-graph-full-recompute" in capsys.readouterr().err


def test_cli_fix_is_written_as_flags(capsys):
    argv = "explain --model llama3-70b --gpus 16 --tp 8 --pp 2 --seq-len 8192"
    argv += " --global-batch-size 64 --cuda-graphs attn,mlp --recompute full"
    assert main(argv.split()) == 2
    err = capsys.readouterr().err
    assert "--recompute 'selective'" in err and "--cuda-graphs 'full_iteration'" in err
