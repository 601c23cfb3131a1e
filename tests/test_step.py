"""The step-time model: invariants and hand-checked pieces."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError, StrategyError
from parastrat.estimate import efficiency, kernel_model
from parastrat.estimate.layers import embedding_record, layer_record, mtp_record
from parastrat.estimate.step import estimate_step, pipeline_split
from parastrat.strategy import MEGATRON_TP_PP_DP_ORDER

LLAMA70 = ps.models.get("llama3-70b")
H100 = ps.Cluster("h100", num_devices=64)
EXPOSED = ("tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed", "dp_exposed", "host_exposed")


def step(strategy, **kw):
    kw.setdefault("seq_len", 8192)
    kw.setdefault("global_batch_size", 256)
    return estimate_step(LLAMA70, strategy, H100, **kw)


def test_breakdown_sums_to_step_time():
    rep = step(ps.Strategy(tp=4, pp=8, vpp=5, sp=True), precision="fp8")
    b = rep.breakdown
    parts = (
        b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + sum(b[k] for k in EXPOSED)
    )
    assert parts == pytest.approx(rep.step_time_s, rel=1e-9)
    for k in ("tp", "pp", "dp"):
        assert 0 <= b[f"{k}_exposed"] <= b[k] + 1e-12
    d = rep.to_dict()
    assert d["step_time_s"] == rep.step_time_s and "flops_convention" in d


def test_throughput_identities():
    rep = step(ps.Strategy(tp=8, pp=2, sp=True))
    # tokens/s/GPU = gbs * seq / step / world ; TFLOP/s = flops/token * tokens/s / 1e12
    assert rep.tokens_per_s_per_gpu == pytest.approx(256 * 8192 / rep.step_time_s / 64)
    assert rep.tflops_per_gpu == pytest.approx(
        rep.model_flops_per_token * rep.tokens_per_s_per_gpu / 1e12
    )
    assert rep.mfu == pytest.approx(rep.tflops_per_gpu * 1e12 / 989e12)
    assert rep.micro_batches == 256 // 4


def test_bubble_is_p_minus_1_over_v_of_a_microbatch():
    a = step(ps.Strategy(tp=8, pp=4, sp=True), recompute="full")
    b = step(ps.Strategy(tp=8, pp=4, vpp=2, sp=True), recompute="full")
    # bubble = (p-1)/v micro-batch times; per-micro-batch time is the same for both
    mb_a = a.breakdown["bubble"] / 3
    mb_b = b.breakdown["bubble"] * 2 / 3
    assert mb_a == pytest.approx(mb_b, rel=1e-9)
    assert b.breakdown["bubble"] == pytest.approx(a.breakdown["bubble"] / 2)


def test_recompute_orders_time():
    s = ps.Strategy(tp=8, pp=4, sp=True)
    t = [step(s, recompute=m).step_time_s for m in ("none", "selective", "full")]
    assert t[0] < t[1] < t[2]
    # full recompute adds about one forward: 20-40 % more compute time
    assert 1.15 < t[2] / t[0] < 1.45


def test_tp_across_nodes_is_slower_and_noted():
    intra = step(ps.Strategy(tp=8, pp=2, sp=True))
    inter = step(ps.Strategy(tp=16, pp=1, sp=True))
    assert inter.breakdown["tp_exposed"] > 5 * intra.breakdown["tp_exposed"]
    assert any("scale-out" in n for n in inter.notes)


def test_fp8_faster_than_bf16_on_h100_refused_on_a100():
    s = ps.Strategy(tp=8, pp=4, sp=True)
    assert step(s, precision="FP8-CS").step_time_s < step(s, precision="BF16").step_time_s
    # Transformer Engine stops FP8 below compute capability 8.9 and MXFP8 / NVFP4 below 10.0;
    # each refusal names a precision that runs on that device, and that one prices
    a100 = ps.Cluster("a100", num_devices=64)
    for precision, device, need, fix in (
        ("fp8", a100, "needs FP8 tensor cores", "bf16"),
        ("mxfp8", H100, "needs MXFP8", "fp8"),
        ("nvfp4", H100, "needs FP4", "fp8"),
    ):
        kw = dict(seq_len=4096, global_batch_size=64)
        with pytest.raises(SpecError) as exc:
            estimate_step(LLAMA70, s, device, precision=precision, **kw)
        assert need in str(exc.value) and f"use --precision {fix} " in str(exc.value)
        assert estimate_step(LLAMA70, s, device, precision=fix, **kw).step_time_s > 0


def test_invalid_strategy_raises_with_every_rule():
    with pytest.raises(StrategyError) as exc:
        step(ps.Strategy(tp=3, pp=7))
    assert {"heads-tp", "layers-pp"} <= set(exc.value.rules)


def test_strategy_spanning_another_world_is_refused(capsys):
    """A stated dp (or dp_shard) fixes the rank count; pricing it on a cluster of another size
    must refuse (it once priced 32 ranks while reporting the cluster's 64 devices)."""
    with pytest.raises(StrategyError) as exc:
        step(ps.Strategy(tp=8, dp=4))  # 32 ranks on 64 devices
    assert "dp-world" in exc.value.rules
    fsdp = ps.Strategy(tp=8, dp_shard=4, fsdp="optim")
    with pytest.raises(StrategyError) as exc:
        step(fsdp)
    assert exc.value.rules == ["dp-shard-world"]  # the dp it sets is refused once
    assert step(ps.Strategy(tp=8, dp=8)).world_size == 64  # the same strategy at its world
    from parastrat.cli import main

    argv = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--dp-shard", "4"]
    assert main([*argv, "--fsdp", "optim"]) == 2
    assert "dp-shard-world" in capsys.readouterr().err


def test_account_for_embedding_split():
    m = ps.models.get("llama3.1-405b")
    s = ps.Strategy(tp=8, pp=8, vpp=8, sp=True, account_for_embedding=True, account_for_loss=True)
    split = pipeline_split(m, s)
    # (126 + 2) / 8 = 16 slots per stage; first and last give one slot to embedding / loss
    assert split.how == "accounted"
    assert list(split.stage_layers) == [15] + [16] * 6 + [15] == s.stage_layers(126)
    # 64 chunks of 2 slots: chunk 0 holds the embedding + 1 layer, chunk 63 1 layer + the loss
    assert split.chunk_layers == (1,) + (2,) * 62 + (1,)
    # without the flags the split is illegal and says how to fix it
    with pytest.raises(StrategyError) as exc:
        pipeline_split(m, ps.Strategy(tp=8, pp=8, vpp=8, sp=True))
    assert "layers-pp" in exc.value.rules


def test_layout_prices_the_exact_placement():
    ds = ps.models.get("deepseek-v3")
    flags = ps.Strategy(
        tp=2, pp=8, vpp=4, ep=64, sp=True, account_for_embedding=True, account_for_loss=True
    )
    # Megatron's own rule: 61 + 1 + 1 = 63 slots do not divide into 8 * 4 = 32 chunks, and
    # the estimate refuses what Megatron refuses (no approximation stands in for it)
    assert "layers-accounted" in {v.rule for v in flags.check(ds)}
    with pytest.raises(StrategyError):
        pipeline_split(ds, flags)
    # the layout Megatron Bridge's recipes write for it: 2 slots per chunk, the embedding in
    # the first chunk, MTP and the loss alone in the last
    s = ps.Strategy(tp=2, pp=8, ep=64, sp=True, pipeline_layout="Et|(tt|)*30mL")
    assert s.vpp == 4 and not [v for v in s.check(ds) if v.severity == "error"]
    split = pipeline_split(ds, s)
    assert split.how == "layout" and "Et|(tt|)*30mL" in split.note
    # stage 0 = 4 chunks * 2 - emb = 7, stage 7 = 3 chunks * 2 (the last holds no decoder)
    assert list(split.stage_layers) == [7, 8, 8, 8, 8, 8, 8, 6]
    assert split.chunk_layers[0] == 1 and split.chunk_layers[-1] == 0
    # layers follow chunk order, chunk c on stage c % 8: chunk 0 (stage 0) holds layer 0,
    # chunk 1 (stage 1) layers 1-2; DeepSeek-V3's first 3 layers are dense, so stage 0 has
    # 7 - 1 = 6 MoE layers, stage 1 8 - 2 = 6, stage 2 all 8
    assert split.stage_moe[:3] == (6, 6, 8)
    first, last = split.ends[0], split.ends[-1]
    assert first.embedding and not first.loss and not first.mtp
    # the last stage: output layer, loss, the MTP module and its embedding copy
    assert last.loss and last.mtp == 1 and last.embedding_copies == 1 and last.output_weights
    assert not any(e.embedding or e.loss or e.mtp for e in split.ends[1:-1])
    rep = estimate_step(
        ds,
        s.with_world_size(1024),
        ps.Cluster("h100", num_devices=1024),
        seq_len=4096,
        global_batch_size=8192,
        precision="fp8",
    )
    assert any("pipeline layout" in n for n in rep.notes)


def test_layout_moves_the_ends():
    """A layout that puts the MTP module on another rank prices it there: that rank gains the
    MTP parameters and an embedding copy, the last rank holds only its layers and the loss."""
    ds = ps.models.get("deepseek-v3")
    # pp 4 x vpp 2: the MTP module ends chunk 1 of rank 2, the loss is alone on rank 3's
    moved = ps.Strategy(tp=2, pp=4, ep=64, sp=True, pipeline_layout="E(t*9|)*6t*7m|L")
    assert not [v for v in moved.check(ds) if v.severity == "error"]
    split = pipeline_split(ds, moved)
    assert split.stage_layers == (18, 18, 16, 9)
    assert split.ends[2].mtp == 1 and split.ends[2].embedding_copies == 1
    assert split.ends[3].loss and not split.ends[3].mtp and not split.ends[3].embedding_copies
    mem = ps.estimate_memory(ds, moved.with_world_size(512), seq_len=4096, micro_batch_size=1)
    # stage 2 holds two layers fewer than stage 1, and the MTP module with its embedding
    assert split.stage_moe[1] == split.stage_moe[2] + 2
    extra = mem.stages[2].params - mem.stages[1].params + 2 * layer_record(ds, True, 2, 64).params
    mtp = mtp_record(ds, 2, 64, 1).params + embedding_record(ds, 2).params
    assert extra == pytest.approx(mtp)
    assert mem.stages[0].has_embedding and mem.stages[3].has_output
    assert not mem.stages[2].has_output


def test_gemm_efficiency_shapes():
    h100 = ps.hardware.get("h100")
    big = efficiency.gemm_time(h100, 8192, 8192, 8192, "bf16")
    # 2*8192^3 / (989e12 * 0.68 * shape) with shape = 1 * (64*32=2048 tiles /132 -> 16 waves:
    # 2048/2112) * 128 K-iterations of 64 / (128 + K_PIPE = 2)
    shape = (2048 / (16 * 132)) * (128 / 130)
    assert big == pytest.approx(2 * 8192**3 / (989e12 * 0.68 * shape))
    # the previous shape model (one profile tile, K_HALF = 64) with the mechanism off
    old = efficiency.gemm_time(h100, 8192, 8192, 8192, "bf16", shape=False)
    assert old == pytest.approx(2 * 8192**3 / (989e12 * 0.68 * (2048 / 2112) * (8192 / 8256)))
    # a skinny GEMM is memory bound: 16 x 8192 x 8192 bf16 streams the 128 MiB weight
    thin = efficiency.gemm_time(h100, 16, 8192, 8192, "bf16")
    assert thin == pytest.approx((16 * 8192 * 2 + 8192 * 8192 * 2 + 16 * 8192 * 2) / (3350e9 * 0.8))


@settings(max_examples=25, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4, 8]),
    mbs=st.sampled_from([1, 2]),
    rec=st.sampled_from(["none", "selective", "full"]),
)
def test_property_positive_and_consistent(tp, pp, mbs, rec):
    s = ps.Strategy(tp=tp, pp=pp, sp=tp > 1)
    rep = step(s, micro_batch_size=mbs, recompute=rec, seq_len=4096)
    assert rep.step_time_s > 0 and 0 < rep.mfu < 1
    assert all(v >= 0 for v in rep.breakdown.values())


def test_ring_cp_pays_output_correction_traffic():
    from parastrat.estimate.efficiency import profile
    from parastrat.estimate.step import (
        CP_CORRECTION_BYTES_BWD,
        CP_CORRECTION_BYTES_FWD,
        _cp_correction,
    )

    accel = H100.accel
    s = ps.Strategy(tp=4, cp=2, sp=True).with_world_size(64)
    # Llama 3 70B: 64 heads x 128 over TP4 -> 16 x 128 = 2048 output elements per token;
    # K+V: 8 groups / 4 x 128 x 2 = 512 per token.  One extra ring step (cp 2), 4096 tokens:
    # fwd 4096 * 2048 * 10 B = 83.9 MB; bwd 4096 * (2048 + 512) * 8 B = 83.9 MB,
    # at 3.35 TB/s * 0.80 HBM efficiency.
    f, b = _cp_correction(LLAMA70, s, 4096, accel)
    hbm = 3350e9 * profile(accel).mem_eff
    assert (CP_CORRECTION_BYTES_FWD, CP_CORRECTION_BYTES_BWD) == (10, 8)
    assert f == pytest.approx(4096 * 2048 * 10 / hbm)
    assert b == pytest.approx(4096 * 2560 * 8 / hbm)
    assert _cp_correction(LLAMA70, ps.Strategy(tp=4, sp=True).with_world_size(64), 4096, accel) == (
        0.0,
        0.0,
    )
    # Ulysses alone has no ring steps to merge
    u = ps.Strategy(tp=4, ulysses=2, sp=True, order="tp-cp-ep-dp-pp").with_world_size(64)
    assert _cp_correction(LLAMA70, u, 4096, accel) == (0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# Host (CPU) launch term
# ---------------------------------------------------------------------------------------------
QWEN30 = ps.models.get("qwen3-30b-a3b")


def test_host_ops_dense_layer_counts():
    from parastrat.estimate.host_ops import host_ops

    s = ps.Strategy().with_world_size(8)
    # attention: norm 1 + 2 GEMMs (qkv, proj) + rope 2 + fused attention 1 + residual 1 = 7;
    # MLP: norm 1 + 2 GEMMs (fc1, fc2) + act 1 + residual 1 = 5  -> 12, no sync
    assert host_ops(LLAMA70, False, s, "bf16") == (12, False)
    # FP8 current scaling: + 2 (amax, cast-transpose) per GEMM input x 4 GEMMs = 20
    assert host_ops(LLAMA70, False, s, "fp8") == (20, False)
    # MXFP8: one fused quantize per GEMM input: 12 + 4 = 16
    assert host_ops(LLAMA70, False, s, "mxfp8") == (16, False)
    # delayed scaling casts with last step's scale and writes the amax in the same kernel,
    # blockwise scales inside its quantise: one launch per GEMM input, as MXFP8
    assert host_ops(LLAMA70, False, s, "fp8", fp8_recipe="delayed") == (16, False)
    assert host_ops(LLAMA70, False, s, "fp8", fp8_recipe="blockwise") == (16, False)
    assert host_ops(LLAMA70, False, s, "fp8", fp8_recipe="current") == (20, False)
    # TP 2 with SP: all-gather + reduce-scatter around attention and around the MLP: 12 + 4
    s2 = ps.Strategy(tp=2, sp=True).with_world_size(8)
    assert host_ops(LLAMA70, False, s2, "bf16") == (16, False)


def test_host_ops_moe_layer_counts_and_graph_scopes():
    from parastrat.estimate.host_ops import host_ops

    s = ps.Strategy(ep=16).with_world_size(16)
    # Qwen3-30B-A3B, FP8, EP 16 (128 / 16 = 8 local experts):
    # attention: norms 1 + 2 (QK-norm) + 2 GEMMs x (1 + 2 casts) + rope 2 + attn 1 + residual 1
    #   = 3 + 6 + 4 = 13
    # MoE block: norm 1 + residual 1 + 2 grouped matrices x 8 experts x (1 GEMM + 2 casts:
    #   per-tensor scaling quantises each expert's split) + act 1 + permute/unpermute 2
    #   + EP dispatch/combine 2 + sort/unsort 2 + FP8 padding/unpadding 2 = 59
    # router 3 + preprocess 2 + counts exchange 1 = 6                         -> 78, synced
    assert host_ops(QWEN30, True, s, "fp8") == (78, True)
    # the previous count (one cast per grouped matrix) with the moe_kernels mechanism off
    no_kernels = kernel_model.parse_ablation("moe_kernels")
    assert host_ops(QWEN30, True, s, "fp8", frozenset(), no_kernels) == (48, True)
    # graphed router and preprocessing: one launch each instead of 3 and 3 -> 74, still synced
    assert host_ops(QWEN30, True, s, "fp8", frozenset({"moe_router", "moe_preprocess"})) == (
        74,
        True,
    )
    # graphed attention: 13 -> 1
    assert host_ops(QWEN30, True, s, "fp8", frozenset({"attn"})) == (66, True)
    # MXFP8 (one quantise op per GEMM input, block scales need no per-expert amax): attention
    # 3 + 2 x (1 + 1) + 4 = 11; MoE block 2 + 2 x (8 GEMMs + 1 fused quantise) + 7 + padding
    # 2 = 29; router and preprocessing 6 -> 46
    assert host_ops(QWEN30, True, s, "mxfp8") == (46, True)
    # the whole MoE block graphed (padded shapes): no sync, attention 13 + one launch
    assert host_ops(QWEN30, True, s, "fp8", frozenset({"moe"})) == (14, False)
    assert host_ops(QWEN30, True, s, "fp8", frozenset({"full_iteration"})) == (0, False)


def test_cuda_graph_scopes_parse():
    from parastrat.errors import UsageError
    from parastrat.estimate.step import cuda_graph_scopes

    assert cuda_graph_scopes(None) == frozenset() == cuda_graph_scopes("none")
    assert cuda_graph_scopes(True) == {"full_iteration"} == cuda_graph_scopes("full")
    assert cuda_graph_scopes("attn, moe-router") == {"attn", "moe_router"}
    assert cuda_graph_scopes(("moe_preprocess",)) == {"moe_preprocess"}
    with pytest.raises(UsageError, match="moe_router"):
        cuda_graph_scopes("router")


def test_host_op_time_by_host_cpu():
    # TE issue #2053: torch.nn.Linear forward CPU time, 13.48 us (DGX H100, x86) vs 37.08 us
    # (GB200, Grace)
    assert efficiency.host_op_time(ps.hardware.get("h100")) == pytest.approx(13.5e-6)
    assert efficiency.host_op_time(ps.hardware.get("gb200")) == pytest.approx(37e-6)


def test_host_exposed_hand_checked():
    from parastrat.estimate.layer_cost import LayerCost
    from parastrat.estimate.overlap import host_exposed

    s = ps.Strategy().with_world_size(8)
    accel = H100.accel
    # a dense BF16 layer (12 host ops, see above) whose GPU work is 100 us forward, 200 us
    # backward: host forward 12 x 13.5 = 162 us, backward 2 x 12 x 13.5 = 324 us; the GPU
    # waits (162 - 100) + (324 - 200) = 186 us
    c = LayerCost(1e-4, 2e-4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    host, waited = host_exposed(LLAMA70, False, s, "bf16", "none", frozenset(), accel, c, 0.0, 0.0)
    assert host == pytest.approx(486e-6)
    assert waited == pytest.approx(186e-6)
    # with 10x the GPU work the host runs ahead: nothing waits
    c10 = LayerCost(1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert (
        host_exposed(LLAMA70, False, s, "bf16", "none", frozenset(), accel, c10, 0.0, 0.0)[1] == 0.0
    )
    # an MoE layer pays one more operation after its token-count sync (GPU queue empty)...
    s16 = ps.Strategy(ep=16).with_world_size(16)
    big = LayerCost(1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, mlp_fwd=0.5)
    assert host_exposed(QWEN30, True, s16, "fp8", "none", frozenset(), accel, big, 0.0, 0.0)[
        1
    ] == pytest.approx(13.5e-6)
    # ... and, when the MoE block after the sync has less GPU work than host work (59 ops,
    # 796.5 us, against 0.5 ms of expert GEMMs), the rest of its host time: the attention's
    # GPU time comes after it and cannot hide it (mechanism sync_drain)
    thin = LayerCost(1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, mlp_fwd=0.5e-3)
    waited = host_exposed(QWEN30, True, s16, "fp8", "none", frozenset(), accel, thin, 0.0, 0.0)
    assert waited[1] == pytest.approx(59 * 13.5e-6 - 0.5e-3 + 13.5e-6)


def test_cuda_graphs_never_slower_and_remove_host_time():
    cluster = ps.Cluster("gb200", num_devices=8)
    s = ps.Strategy(ep=8).with_world_size(8)
    kw = dict(
        seq_len=4096,
        global_batch_size=64,
        precision="mxfp8",
        recompute="none",
        moe_dispatcher="flex",
    )
    eager = estimate_step(QWEN30, s, cluster, **kw)
    scoped = estimate_step(QWEN30, s, cluster, cuda_graphs="moe_router,moe_preprocess", **kw)
    full = estimate_step(QWEN30, s, cluster, cuda_graphs=True, **kw)
    assert full.breakdown["host"] == 0 and full.breakdown["host_exposed"] == 0
    assert eager.breakdown["host"] > scoped.breakdown["host"] > 0
    assert full.step_time_s <= scoped.step_time_s <= eager.step_time_s
    # host waiting is not communication: the exposure share used for ranking excludes it
    assert eager.exposed_comm_s == pytest.approx(
        sum(v for k, v in eager.breakdown.items() if k.endswith("_exposed") and k != "host_exposed")
    )


def test_small_micro_batches_are_host_bound_on_grace():
    """Same layout, micro-batch 1 vs 4 on GB200 (37 us per host op): the host launch time per
    micro-batch does not shrink with fewer tokens, so micro-batch 1 waits on the host."""
    cluster = ps.Cluster("gb200", num_devices=8)
    s = ps.Strategy(ep=8).with_world_size(8)
    kw = dict(
        seq_len=4096,
        global_batch_size=64,
        precision="mxfp8",
        recompute="none",
        moe_dispatcher="flex",
    )
    one = estimate_step(QWEN30, s, cluster, micro_batch_size=1, **kw)
    four = estimate_step(QWEN30, s, cluster, micro_batch_size=4, **kw)
    assert one.breakdown["host"] == pytest.approx(4 * four.breakdown["host"])
    assert one.breakdown["host_exposed"] > four.breakdown["host_exposed"]


def _nemotron_step(model: ps.ModelSpec, off: str = ""):
    from parastrat.spec.workload import Switches, parse_ablation

    return estimate_step(
        model,
        ps.Strategy(tp=1).with_world_size(64),
        ps.Cluster("gb200", num_devices=64),
        Switches(mechanisms=parse_ablation(off)),
        seq_len=4096,
        global_batch_size=256,
        micro_batch_size=2,
        precision="fp8",
    )


def test_eager_squared_relu_costs_its_extra_passes():
    """Nemotron-4's squared ReLU runs as relu + pow forward and four autograd kernels backward
    (8 extra passes over FC1's output per layer and micro-batch): the ``eager_act``
    mechanism adds exactly that traffic; the same shape with a fused activation does not pay."""
    from dataclasses import replace

    from parastrat.estimate.layer_cost import EAGER_ACT_EXTRA_PASSES

    nemo = ps.models.get("nemotron4-15b")
    fused = replace(nemo, activation=None)
    on, off = _nemotron_step(nemo), _nemotron_step(nemo, "eager_act")
    assert _nemotron_step(fused).step_time_s == pytest.approx(off.step_time_s)
    extra = on.breakdown["compute"] - off.breakdown["compute"]
    # bytes: tokens x ffn x 2 B x passes, per layer and micro-batch (2 micro-batches per rank)
    passes = sum(EAGER_ACT_EXTRA_PASSES)
    bytes_ = 2 * nemo.num_layers * 8192 * nemo.ffn_hidden_size * 2 * passes
    hbm = ps.hardware.get("gb200").mem_bandwidth_Bps
    assert bytes_ / hbm < extra < 2 * bytes_ / hbm  # at the achievable fraction of HBM


@pytest.mark.parametrize(("pp", "vpp", "m"), [(8, 4, 128), (4, 4, 64), (8, 3, 256), (4, 2, 4)])
def test_unpaired_share_is_megatron_cores_warmup(pp, vpp, m):
    """The chunk forwards combined 1F1B cannot pair are Megatron Core's own warm-up count with
    ``overlap_moe_expert_parallel_comm`` (``get_pp_rank_microbatches`` run for every rank)."""
    pytest.importorskip("megatron.core")
    from types import SimpleNamespace

    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches

    from parastrat.estimate.overlap import unpaired_share

    for rank in range(pp):
        group = SimpleNamespace(size=lambda: pp, rank=lambda r=rank: r)
        comm = SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=vpp)
        total, _, warmup, _ = get_pp_rank_microbatches(
            m, vpp, pp, overlap_moe_expert_parallel_comm=True, p2p_communicator=comm
        )
        assert unpaired_share(pp, vpp, m, rank) * total == pytest.approx(warmup)
    assert unpaired_share(1, 1, 16, 0) == pytest.approx(1 / 16)  # first fwd, last bwd


def test_combined_1f1b_exposes_the_warmup_all_to_alls():
    """With combined 1F1B the all-to-alls of the warm-up / cool-down chunks run alone: fewer
    micro-batches expose a larger share (the ``a2a_pairing`` mechanism); without the overlap
    nothing changes."""
    from parastrat.spec.workload import Switches, parse_ablation

    model = ps.models.get("qwen3-30b-a3b")
    s = ps.Strategy(pp=4, vpp=3, ep=8)
    cluster = ps.Cluster("h100", 64)

    def ep_exposed(gbs: int, **kw) -> float:
        rep = ps.estimate_step(
            model, s, cluster, Switches(**kw), seq_len=4096, global_batch_size=gbs,
            micro_batch_size=1, precision="fp8",
        )  # fmt: skip
        return rep.breakdown["ep_exposed"] / rep.micro_batches

    flat = parse_ablation("a2a_pairing")
    for gbs in (64, 1024):
        assert ep_exposed(gbs, moe_a2a_overlap=True) > ep_exposed(
            gbs, moe_a2a_overlap=True, mechanisms=flat
        )
        assert ep_exposed(gbs) == pytest.approx(ep_exposed(gbs, mechanisms=flat))
    extra = [
        ep_exposed(g, moe_a2a_overlap=True) - ep_exposed(g, moe_a2a_overlap=True, mechanisms=flat)
        for g in (64, 1024)
    ]
    assert extra[0] > 4 * extra[1]  # 4 vs 64 micro-batches: the warm-up weighs more


def test_cross_entropy_fusion_default_follows_the_framework():
    """Megatron Bridge's models fuse the vocabulary-parallel cross-entropy, MindSpeed-LLM's
    scripts (Megatron-LM's ``--cross-entropy-loss-fusion`` off) do not: on Ascend an unset
    switch prices the unfused op-by-op passes over FP32 logits, and setting it restores the
    fused price; a large-vocabulary small model feels it most."""
    from parastrat.estimate.layer_cost import (
        CE_BYTES_PER_LOGIT,
        CE_UNFUSED_BYTES_PER_LOGIT,
        head_cost,
    )
    from parastrat.spec.workload import Switches

    qwen = ps.models.get("qwen3-8b")
    kw = dict(seq_len=8192, global_batch_size=64, micro_batch_size=1)
    s = ps.Strategy()

    def step(accel: str, **sw) -> float:
        cluster = ps.Cluster(accel, 8)
        return ps.estimate_step(qwen, s, cluster, Switches(**sw), **kw).step_time_s

    assert step("ascend-910b") > step("ascend-910b", cross_entropy_fusion=True)
    assert step("ascend-910b") == pytest.approx(step("ascend-910b", cross_entropy_fusion=False))
    assert step("h100") == pytest.approx(step("h100", cross_entropy_fusion=True))
    assert step("h100", cross_entropy_fusion=False) > step("h100")
    accel = ps.hardware.get("ascend-910b")
    fused, unfused = (head_cost(qwen, accel, 8192, 1, fused_ce=f) for f in (True, False))
    logits = 8192 * qwen.vocab_size
    extra = (CE_UNFUSED_BYTES_PER_LOGIT - CE_BYTES_PER_LOGIT) * logits
    assert unfused - fused == pytest.approx(extra / (accel.mem_bandwidth_Bps * 0.70), rel=0.01)


def test_random_token_counts_round_only_the_routed_experts_gemms():
    """The imbalance mechanism's random routed counts (half an empty row tile on average)
    apply to the routed experts' GEMMs; an MoE layer's attention, router and shared-expert
    GEMMs see every token and are timed as in a dense layer."""
    from parastrat.estimate.efficiency import profile
    from parastrat.estimate.flops import attention_matrices, mlp_matrices
    from parastrat.estimate.layer_cost import _matrix_times

    model = ps.models.get("deepseek-v3")
    accel = ps.hardware.get("h100")
    prof = profile(accel)
    args = (4096, 2, True, 8, 1, model.num_experts, "fp8")
    for mat in attention_matrices(model) + mlp_matrices(model, True):
        plain = _matrix_times(accel, prof, mat, *args)
        routed = _matrix_times(accel, prof, mat, *args, expert_m=4096 * 8 / 256)
        if mat.block == "expert":
            assert routed != plain
        else:
            assert routed == plain, mat


def test_host_bound_step_says_which_host_constant_it_priced():
    """A step that waits on the host for more than HOST_NOTE_SHARE of its time names the
    host time per operation it assumed and where it comes from (the figure the prediction
    hangs on); a calibration's measured value is named as measured; a GPU-bound step says
    nothing of it."""
    from dataclasses import replace

    from parastrat.estimate.step import HOST_NOTE_SHARE

    qwen = ps.models.get("qwen3-30b-a3b")
    s = ps.Strategy(ep=8).with_world_size(8)
    kw = dict(seq_len=4096, global_batch_size=512, micro_batch_size=1, precision="mxfp8")
    b200 = ps.Cluster("b200", num_devices=8)
    rep = estimate_step(qwen, s, b200, **kw)
    assert rep.breakdown["host_exposed"] > HOST_NOTE_SHARE * rep.step_time_s
    (note,) = [n for n in rep.notes if "waits on the host" in n]
    assert "13.5 us per eager operation" in note and "x86 hosts" in note
    assert "bench --kernels" in note

    measured = replace(b200.accel, kernels={"host_op_s": 40e-6})
    rep40 = estimate_step(qwen, s, ps.Cluster(measured, num_devices=8), **kw)
    (note40,) = [n for n in rep40.notes if "waits on the host" in n]
    assert "40.0 us" in note40 and "measured by this calibration" in note40
    assert rep40.step_time_s > rep.step_time_s  # the slower host is priced, not only named

    graphed = estimate_step(qwen, s, b200, cuda_graphs=("full_iteration",), **kw)
    assert graphed.breakdown["host_exposed"] == 0.0
    assert not [n for n in graphed.notes if "waits on the host" in n]


def test_pipeline_hops_across_segments_pay_the_scale_out_link():
    """Nemotron-4 340B on 128 GB200 as NeMo ran it (TP8 PP4 VP12, stride 32 over two 64-GPU
    segments): with ``p2p_hops`` the crossing hops take InfiniBand, so the pipeline's exposed
    transfer time grows; on 64 GB200 (one segment) the mechanism changes nothing."""
    from parastrat.spec.workload import Switches, parse_ablation

    model = ps.models.get("nemotron4-340b")

    def step(n: int, off: str = "", order: str | None = None):
        return estimate_step(
            model,
            ps.Strategy(tp=8, pp=4, vpp=12, sp=True, order=order).with_world_size(n),
            ps.Cluster("gb200", num_devices=n),
            Switches(mechanisms=parse_ablation(off)),
            seq_len=4096,
            global_batch_size=8 * n // 32,
            micro_batch_size=1,
            precision="fp8",
        )

    on, off = step(128), step(128, "p2p_hops")
    assert on.breakdown["pp_exposed"] > 2 * off.breakdown["pp_exposed"]
    assert on.step_time_s > off.step_time_s
    assert step(64).step_time_s == pytest.approx(step(64, "p2p_hops").step_time_s)
    # the report says so: hop 1 -> 2 and the interleaved wrap 3 -> 0 cross
    (note,) = [n for n in on.notes if n.startswith("pipeline:")]
    assert "2 of 4 stage hops" in note and "64-device NVLink segment" in note
    assert not [n for n in step(64).notes + off.notes if n.startswith("pipeline:")]
    # Bridge's tp-pp-dp mapping puts the pipeline inside one segment (stride tp*cp = 8)
    mapped = step(128, order=MEGATRON_TP_PP_DP_ORDER)
    assert not [n for n in mapped.notes if n.startswith("pipeline:")]
    unmapped_off = step(128, "p2p_hops", order=MEGATRON_TP_PP_DP_ORDER)
    assert mapped.breakdown["pp_exposed"] == pytest.approx(unmapped_off.breakdown["pp_exposed"])


def test_recomputed_forward_widens_the_window_dp_collectives_hide_behind():
    """Activation checkpointing re-runs a layer's forward inside its backward pass, so a
    gradient reduce-scatter (here Megatron FSDP's, over 128 ranks across nodes, as the MoE Model
    Zoo ran Qwen3-235B-A22B) overlaps the recompute too: with ``recompute_window`` less of it
    is exposed; without recompute the mechanism changes nothing."""
    from parastrat.spec.workload import Switches, parse_ablation

    model = ps.models.get("qwen3-235b-a22b")
    s = ps.Strategy(tp=2, ep=8, sp=True, fsdp="optim_grads_params").with_world_size(256)
    cluster = ps.Cluster("h100", num_devices=256)

    def step(recompute: str, off: str = ""):
        return estimate_step(
            model,
            s,
            cluster,
            Switches(recompute=recompute, mechanisms=parse_ablation(off)),
            seq_len=4096,
            global_batch_size=2048,
            micro_batch_size=4,
        )

    on, off = step("full"), step("full", "recompute_window")
    assert on.breakdown["dp"] == pytest.approx(off.breakdown["dp"])
    assert on.breakdown["dp_exposed"] < off.breakdown["dp_exposed"]
    assert step("none").step_time_s == pytest.approx(step("none", "recompute_window").step_time_s)
