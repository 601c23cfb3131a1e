"""parastrat.adapters.megatron against the real Megatron Core TransformerConfig (CPU).

Expected field values are written from the mapping in the design (ring -> p2p, Ulysses ->
a2a, both -> a2a+p2p with [ulysses, ring]; ETP always explicit; bf16 pipeline_dtype with
PP), not read back from the adapter.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("megatron.core")
torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from megatron.core.transformer.transformer_config import TransformerConfig

import parastrat
from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg
from parastrat.strategy import MEGATRON_ORDER

# Megatron Core's own construction-time notes, not about the adapter.
pytestmark = [
    pytest.mark.filterwarnings("ignore:full scope is deprecated"),
    pytest.mark.filterwarnings("ignore:moe_ffn_hidden_size is not set"),
]


def dense(**kw) -> TransformerConfig:
    """16 layers, 16 heads, 4 query groups (GQA), dense."""
    args = {"num_layers": 16, "hidden_size": 512, "num_attention_heads": 16, "num_query_groups": 4}
    args.update(kw)
    return TransformerConfig(**args)


def moe(**kw) -> TransformerConfig:
    """The dense shape with 8 routed experts per layer, no linear biases (as MoE models)."""
    return dense(**{"num_moe_experts": 8, "add_bias_linear": False, **kw})


def snapshot(cfg) -> dict:
    """Every dataclass field by identity (a refused apply must not even rebind one)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def assert_untouched(cfg, before: dict) -> None:
    changed = [n for n, v in before.items() if getattr(cfg, n) is not v]
    assert changed == []


# ---------------------------------------------------------------------------------------------
# Fields written.
# ---------------------------------------------------------------------------------------------
def test_dense_tp_sp_writes_every_degree_and_explicit_etp():
    cfg = dense()
    out = mg.apply(cfg, Strategy(tp=4, sp=True))
    assert out is cfg
    assert cfg.tensor_model_parallel_size == 4
    assert cfg.pipeline_model_parallel_size == 1
    assert cfg.virtual_pipeline_model_parallel_size is None
    assert cfg.context_parallel_size == 1
    assert cfg.expert_model_parallel_size == 1
    # dense: etp defaults to tp, and is written explicitly
    assert cfg.expert_tensor_parallel_size == 4
    assert cfg.sequence_parallel is True
    assert cfg.cp_comm_type is None  # cp = 1: left as it was
    assert cfg.pipeline_dtype is None  # pp = 1: not needed


def test_moe_ep_with_etp_one():
    cfg = moe()
    mg.apply(cfg, Strategy(tp=2, ep=4, sp=True))
    assert (
        cfg.tensor_model_parallel_size,
        cfg.expert_model_parallel_size,
        cfg.expert_tensor_parallel_size,
    ) == (2, 4, 1)
    assert cfg.sequence_parallel is True


def test_moe_explicit_etp_replaces_megatron_default():
    # TransformerConfig.__post_init__ filled etp = tp = 1; the strategy says etp 2.
    cfg = moe()
    assert cfg.expert_tensor_parallel_size == 1
    mg.apply(cfg, Strategy(tp=2, ep=2, etp=2, sp=True))
    assert cfg.expert_tensor_parallel_size == 2


@pytest.mark.parametrize(
    "strategy, comm, sizes",
    [
        (Strategy(cp=4), "p2p", None),  # ring only
        (Strategy(ulysses=4, order=MEGATRON_ORDER), "a2a", None),  # Ulysses only
        (Strategy(ulysses=2, ring=4, order=MEGATRON_ORDER), "a2a+p2p", [2, 4]),  # hierarchical
    ],
)
def test_context_parallel_comm_type(strategy, comm, sizes):
    cfg = dense()
    mg.apply(cfg, strategy)
    assert cfg.context_parallel_size == strategy.ulysses * strategy.ring
    assert cfg.cp_comm_type == comm
    assert cfg.hierarchical_context_parallel_sizes == sizes


def test_leaving_hierarchical_cp_clears_the_sizes():
    cfg = dense()
    mg.apply(cfg, Strategy(ulysses=2, ring=2, order=MEGATRON_ORDER))
    mg.apply(cfg, Strategy(cp=2))
    assert (cfg.cp_comm_type, cfg.hierarchical_context_parallel_sizes) == ("p2p", None)


def test_vpp_and_pipeline_dtype():
    # 16 layers / pp 4 = 4 per stage, / vpp 2 = 2 per virtual chunk.
    cfg = dense()
    mg.apply(cfg, Strategy(pp=4, vpp=2))
    assert cfg.pipeline_model_parallel_size == 4
    assert cfg.virtual_pipeline_model_parallel_size == 2
    assert cfg.pipeline_dtype is torch.bfloat16


def test_pipeline_dtype_already_set_is_kept():
    cfg = dense()
    cfg.pipeline_dtype = torch.float16
    mg.apply(cfg, Strategy(pp=2))
    assert cfg.pipeline_dtype is torch.float16


def test_uneven_pipeline_split_and_back_to_even():
    # 14 layers, pp 4: first 2, last 4, middle two stages share 14-2-4 = 8 -> 4 each.
    cfg = dense(num_layers=14)
    s = Strategy(pp=4, first_stage_layers=2, last_stage_layers=4)
    mg.apply(cfg, s)
    assert cfg.num_layers_in_first_pipeline_stage == 2
    assert cfg.num_layers_in_last_pipeline_stage == 4
    assert s.stage_layers(14) == [2, 4, 4, 4]
    cfg.num_layers = 16
    mg.apply(cfg, Strategy(pp=4))
    assert cfg.num_layers_in_first_pipeline_stage is None
    assert cfg.num_layers_in_last_pipeline_stage is None


def test_report_lists_old_and_new():
    cfg = dense()
    _, changes = mg.apply(cfg, Strategy(tp=2, pp=2, sp=True), report=True)
    got = {c.path: (c.old, c.new) for c in changes}
    assert got["tensor_model_parallel_size"] == (1, 2)
    assert got["pipeline_model_parallel_size"] == (1, 2)
    assert got["expert_tensor_parallel_size"] == (1, 2)
    assert got["sequence_parallel"] == (False, True)
    assert got["pipeline_dtype"] == (None, torch.bfloat16)
    # unchanged fields are not reported
    assert "context_parallel_size" not in got
    assert str(changes[0]) == "tensor_model_parallel_size: 1 -> 2"
    # applying the same strategy again changes nothing
    assert mg.apply(cfg, Strategy(tp=2, pp=2, sp=True), report=True)[1] == []


def test_plan_changes_does_not_touch_the_config():
    cfg = dense()
    before = snapshot(cfg)
    changes = mg.plan_changes(cfg, Strategy(tp=4, sp=True))
    assert [c.path for c in changes] == [
        "tensor_model_parallel_size",
        "expert_tensor_parallel_size",
        "sequence_parallel",
    ]
    assert_untouched(cfg, before)


def test_top_level_apply_is_the_adapter():
    cfg = dense()
    parastrat.apply(cfg, Strategy(tp=2))
    assert cfg.tensor_model_parallel_size == 2


# ---------------------------------------------------------------------------------------------
# Refusals: every rule reported, nothing changed.
# ---------------------------------------------------------------------------------------------
def test_refusal_lists_every_rule_and_changes_nothing():
    cfg = dense(num_layers=15)
    before = snapshot(cfg)
    # tp 3 does not divide 16 heads; 15 layers do not split over pp 2.
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=3, pp=2))
    assert {"heads-tp", "layers-pp"} <= set(err.value.rules)
    assert_untouched(cfg, before)


def test_ep_on_a_dense_model_is_refused():
    cfg = dense()
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(ep=2))
    assert err.value.rules == ["ep-dense"]
    assert_untouched(cfg, before)


def test_world_size_checked_when_given():
    # world 6 is not a multiple of tp*cp*pp = 4
    with pytest.raises(StrategyError) as err:
        mg.apply(dense(), Strategy(tp=2, pp=2), world_size=6)
    assert "world-dense" in err.value.rules


def test_moe_bias_needs_etp_1():
    # Megatron Core: "Bias in Moe is only supported when ETP==1", a model rule of parastrat's
    cfg = moe(add_bias_linear=True)
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=2, ep=2, etp=2, sp=True))
    assert err.value.rules == ["moe-bias-etp"]
    assert_untouched(cfg, before)
    mg.apply(cfg, Strategy(tp=2, ep=2, etp=1, sp=True))  # the fix the message points to
    assert cfg.expert_tensor_parallel_size == 1


def test_megatron_own_checks_are_a_second_opinion():
    # Megatron Core: "Cannot defer embedding wgrad compute when pipeline model parallel is not
    # used" - a rule about the rest of the config; the copy re-running __post_init__ catches
    # it and the config stays as it was.
    import torch

    cfg = dense(
        pipeline_model_parallel_size=2,
        pipeline_dtype=torch.bfloat16,
        defer_embedding_wgrad_compute=True,
        gradient_accumulation_fusion=True,
    )
    before = snapshot(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=2, sp=True))
    assert err.value.rules == ["megatron-config"]
    assert "defer embedding wgrad" in str(err.value)
    assert_untouched(cfg, before)
    mg.apply(cfg, Strategy(tp=2, pp=4, sp=True))  # keeping a pipeline clears it
    assert cfg.pipeline_model_parallel_size == 4


def test_uneven_split_clears_the_configs_pipeline_accounting():
    # the strategy says how the pipeline is split: account_for_* are written (off) with it
    cfg = dense(num_layers=14)
    cfg.account_for_embedding_in_pipeline_split = True
    mg.apply(cfg, Strategy(pp=4, first_stage_layers=2, last_stage_layers=4))
    assert cfg.account_for_embedding_in_pipeline_split is False
    assert cfg.num_layers_in_first_pipeline_stage == 2


def test_pipeline_layout_written_and_read_back():
    # 16 layers, pp 4, vpp 2 from the layout: embedding with 1 layer, loss with 3
    cfg = dense(num_layers=16)
    s = Strategy(pp=4, pipeline_layout="Et|(tt|)*6tttL")
    assert s.vpp == 2
    mg.apply(cfg, s)
    assert cfg.pipeline_model_parallel_layout == "Et|(tt|)*6tttL"
    assert cfg.virtual_pipeline_model_parallel_size == 2
    assert mg.from_config(cfg) == s
    with pytest.raises(StrategyError) as err:  # 15 decoder layers for a 16-layer model
        mg.apply(dense(num_layers=16), Strategy(pp=4, pipeline_layout="Et|(tt|)*6ttL"))
    assert err.value.rules == ["pipeline-layout-layers"]


def test_inference_strategy_is_refused_with_the_fix():
    # an explicit inference order, or CFG parallelism, has no Megatron training form
    for s in (Strategy(ulysses=2, ring=2, order="tp-sp-pp-cfg-dp"), Strategy(ulysses=2, cfg=2)):
        cfg = dense()
        before = snapshot(cfg)
        with pytest.raises(StrategyError) as err:
            mg.apply(cfg, s)
        assert err.value.rules == ["megatron-inference-strategy"]
        assert MEGATRON_ORDER in err.value.violations[0].hint
        assert_untouched(cfg, before)


def test_default_inference_order_becomes_hierarchical_cp():
    # no order given: the training order applies where the target is a training framework
    cfg = dense()
    mg.apply(cfg, Strategy(tp=2, ulysses=2, ring=2, sp=True))
    assert (cfg.context_parallel_size, cfg.cp_comm_type) == (4, "a2a+p2p")
    assert cfg.hierarchical_context_parallel_sizes == [2, 2]


def test_not_a_config():
    with pytest.raises(TypeError, match="ConfigContainer"):
        mg.apply(object(), Strategy())


# ---------------------------------------------------------------------------------------------
# Round trip, including a property test over many strategies.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "s",
    [
        Strategy(tp=4, sp=True),
        Strategy(tp=2, pp=4, vpp=2, sp=True),
        Strategy(tp=2, ep=4, sp=True),
        Strategy(cp=4),
        Strategy(ulysses=4, order=MEGATRON_ORDER),
        Strategy(ulysses=2, ring=2, tp=2, sp=True, order=MEGATRON_ORDER),
        Strategy(pp=4, first_stage_layers=2, last_stage_layers=6),
    ],
)
def test_round_trip(s):
    cfg = moe()
    assert mg.from_config(mg.apply(cfg, s)) == s


def test_from_config_fills_dp_from_world_size():
    cfg = mg.apply(dense(), Strategy(tp=2, pp=2))
    s = mg.from_config(cfg, world_size=16)
    assert (s.dp, s.world_size) == (4, 16)  # 16 / (tp 2 * pp 2) = 4


def test_from_config_mixed_per_layer_cp_comm_type():
    cfg = dense(context_parallel_size=2, cp_comm_type=["p2p"] * 8 + ["a2a"] * 8)
    with pytest.raises(StrategyError) as err:
        mg.from_config(cfg)
    assert err.value.rules == ["cp-comm-type-mixed"]


DEGREES = st.sampled_from([1, 2, 4])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tp=DEGREES,
    pp=st.sampled_from([1, 2, 3, 4]),
    vpp=st.sampled_from([1, 2]),
    ulysses=DEGREES,
    ring=DEGREES,
    ep=st.sampled_from([1, 2, 4, 8, 3]),
    etp=st.sampled_from([None, 1, 2]),
    sp=st.booleans(),
)
def test_property_apply_round_trips_or_refuses_untouched(tp, pp, vpp, ulysses, ring, ep, etp, sp):
    try:
        s = Strategy(
            tp=tp,
            pp=pp,
            vpp=vpp,
            ulysses=ulysses,
            ring=ring,
            ep=ep,
            etp=etp,
            sp=sp,
            order=MEGATRON_ORDER,
        )
    except StrategyError:
        assume(False)
    cfg = moe()
    before = snapshot(cfg)
    try:
        mg.apply(cfg, s)
    except StrategyError as err:
        assert err.violations
        assert_untouched(cfg, before)
        # the refusal is the strategy's own rules' verdict (one source of truth) ...
        own = [v for v in s.check(mg.model_view(cfg)) if v.severity == "error"]
        # ... or megatron-core's second opinion when they pass
        assert own or err.rules == ["megatron-config"]
        return
    assert mg.from_config(cfg) == s
    assert not [v for v in s.check(mg.model_view(cfg)) if v.severity == "error"]


# ---------------------------------------------------------------------------------------------
# Overrides for run_recipe.py.
# ---------------------------------------------------------------------------------------------
def test_to_overrides_hierarchical_cp_with_vpp():
    s = Strategy(tp=4, pp=4, vpp=2, sp=True, ulysses=2, ring=2, order=MEGATRON_ORDER)
    assert mg.to_overrides(s, micro_batch_size=1, global_batch_size=64) == [
        "model.tensor_model_parallel_size=4",
        "model.pipeline_model_parallel_size=4",
        "model.virtual_pipeline_model_parallel_size=2",
        "model.microbatch_group_size_per_vp_stage=4",
        "model.context_parallel_size=4",
        "model.cp_comm_type=a2a+p2p",
        "model.hierarchical_context_parallel_sizes=[2,2]",
        "model.expert_model_parallel_size=1",
        "model.expert_tensor_parallel_size=4",
        "model.sequence_parallel=true",
        "model.num_layers_in_first_pipeline_stage=null",
        "model.num_layers_in_last_pipeline_stage=null",
        "model.account_for_embedding_in_pipeline_split=false",
        "model.account_for_loss_in_pipeline_split=false",
        "model.pipeline_model_parallel_layout=null",
        "dist.use_tp_pp_dp_mapping=false",
        "train.micro_batch_size=1",
        "train.global_batch_size=64",
    ]


def test_to_overrides_quotes_a_layout_string_for_hydra():
    s = Strategy(pp=8, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert "model.pipeline_model_parallel_layout='Et*4|(t*4|)*14tmL'" in mg.to_overrides(s)


def test_to_overrides_refuses_what_bridge_cannot_express():
    with pytest.raises(StrategyError) as err:
        mg.to_overrides(Strategy(ulysses=2, cfg=2))
    assert err.value.rules == ["megatron-inference-strategy"]


# ---------------------------------------------------------------------------------------------
# Laziness: importing the adapters imports no framework.
# ---------------------------------------------------------------------------------------------
def test_adapters_import_no_framework():
    code = textwrap.dedent("""
        import sys
        import parastrat
        import parastrat.adapters as a
        assert a.megatron.to_overrides and a.mindiesd.to_parallel_config
        assert a.diffusers.to_context_parallel_config and parastrat.adapters is a
        import parastrat.adapters.megatron, parastrat.adapters.mindiesd
        import parastrat.adapters.diffusers
        a.megatron.to_overrides(parastrat.Strategy(tp=2, pp=2))
        a.mindiesd.to_cli_args(parastrat.Strategy(ulysses=2))
        bad = [m for m in ("torch", "megatron.core", "diffusers", "torch_npu") if m in sys.modules]
        assert not bad, bad
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_apply_writes_pipeline_accounting_and_round_trips():
    # Qwen3-235B-style: 94 layers on PP 8, VPP 3, embedding and loss counted as layers.
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=94, hidden_size=512, num_attention_heads=8, pipeline_dtype=None
    )
    s = Strategy(pp=8, vpp=3, account_for_embedding=True, account_for_loss=True)
    mg.apply(cfg, s, framework_check=False)
    assert cfg.account_for_embedding_in_pipeline_split and cfg.account_for_loss_in_pipeline_split
    assert mg.from_config(cfg) == s


def test_launch_env_and_command():
    s = Strategy(tp=8, pp=4, vpp=5, sp=True)
    env = mg.launch_env(s, vendor="nvidia", scale_up_domain=8)
    # TP 8 with SP inside an 8-GPU NVLink domain: TP overlap needs ordered kernel issue.
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in env and "NCCL_P2P_NET_CHUNKSIZE=2097152" in env
    # TP across the domain: no TP overlap, so no CUDA_DEVICE_MAX_CONNECTIONS.
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in mg.launch_env(
        Strategy(tp=16, sp=True), scale_up_domain=8
    )
    # Megatron FSDP refuses a single connection, on GPUs and NPUs
    fsdp = Strategy(tp=2, sp=True, dp_shard=4, fsdp="optim_grads_params")
    for vendor in ("nvidia", "huawei"):
        assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in mg.launch_env(fsdp, vendor=vendor)
    argv = mg.launch_command(
        s, recipe="r", nproc_per_node=8, nnodes=4, recompute="full", rdzv_endpoint="host:29500"
    )
    assert argv[:5] == [
        "torchrun",
        "--nproc_per_node=8",
        "--nnodes=4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=host:29500",
    ]
    assert argv[5:8] == ["scripts/training/run_recipe.py", "--recipe", "r"]
    assert "model.recompute_granularity=full" in argv
    assert mg.default_recipe("llama3.1-405b") == "llama31_405b_pretrain_config"  # Bridge's name
    assert mg.default_recipe("my-model-7b") == "my_model_7b_pretrain_config"


def test_recompute_overrides_names_the_modes():
    from parastrat.adapters.megatron import recompute_overrides
    from parastrat.errors import UsageError

    assert recompute_overrides("Full")[0] == "model.recompute_granularity=full"
    assert recompute_overrides("off") == [
        "model.recompute_granularity=null",
        "model.recompute_method=null",
        "model.recompute_num_layers=null",
    ]
    assert recompute_overrides("selective") == [
        "model.recompute_granularity=selective",
        "model.recompute_method=null",
        "model.recompute_num_layers=null",
        "model.recompute_modules=[core_attn]",
    ]
    with pytest.raises(UsageError, match="selective"):
        recompute_overrides("ful")  # a typo must not silently turn recompute off


def test_candidate_on_a_bare_transformer_config_writes_the_model_rows():
    """A bare Megatron Core config has no train/comm_overlap section: the candidate's
    recompute and TP-overlap switch land on the model, the micro-batch nowhere."""
    plan = parastrat.plan(
        parastrat.models.get("llama3-70b"),
        parastrat.Cluster(accelerator="h100", num_devices=64),
        seq_len=4096,
        global_batch_size=256,
        top_k=1,
        recompute="full",
    )
    cfg = TransformerConfig(
        num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8
    )
    _, changes = mg.apply(cfg, plan, report=True)
    assert mg.from_config(cfg, world_size=64) == plan.best.strategy
    assert (cfg.recompute_granularity, cfg.recompute_method, cfg.recompute_num_layers) == (
        "full",
        "uniform",
        1,
    )
    s = plan.best.strategy
    assert cfg.tp_comm_overlap is (s.tp > 1 and s.sp and s.tp <= 8)
    assert not any(c.path.startswith(("train.", "comm_overlap.")) for c in changes)
    # the plain strategy leaves recompute as it is
    cfg.recompute_granularity = "selective"
    cfg.recompute_method = cfg.recompute_num_layers = None
    mg.apply(cfg, s)
    assert cfg.recompute_granularity == "selective"


def test_an_nvfp4_plan_writes_tp_comm_overlap_off():
    """The step model prices an NVFP4 plan's TP without userbuffers overlap (Bridge's NVFP4
    recipes set it off): ``apply`` writes what was priced, on a bare TransformerConfig."""
    plan = parastrat.plan(
        parastrat.models.get("llama3-70b"),
        parastrat.Cluster(accelerator="gb200", num_devices=64),
        seq_len=8192,
        global_batch_size=256,
        precision="nvfp4",
        top_k=1,
        search=parastrat.SearchSpace(tp=(2,), pp=(4,), vpp=(5,), cp=(1,)),
    )
    assert plan.best.strategy.tp == 2 and plan.best.strategy.sp
    cfg = TransformerConfig(
        num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8
    )
    mg.apply(cfg, plan)
    assert cfg.tp_comm_overlap is False
