"""The kernel-level mechanisms: shape model, attention by head dim, expert load, MoE kernels,
FP8 overheads, interleaving, and their switches."""

from __future__ import annotations

import math

import pytest

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.estimate import fp8, kernel_model, moe_kernels
from parastrat.estimate.step import estimate_step
from parastrat.spec.workload import Mechanisms, Switches, parse_ablation

H100 = ps.hardware.get("h100")
GB200 = ps.hardware.get("gb200")
GB300 = ps.hardware.get("gb300")


def test_ablation_names_are_checked_and_all_switches_everything_off():
    assert parse_ablation("shape, fp8") == Mechanisms(shape=False, fp8=False)
    off = parse_ablation("all")
    assert not any(getattr(off, n) for n in off.switches)
    with pytest.raises(UsageError, match="tiles"):
        parse_ablation("tiles")
    with pytest.raises(UsageError, match="balance"):
        Mechanisms(balance="perfect")
    with pytest.raises(UsageError, match="mechanisms"):
        Switches(mechanisms="shape")  # type: ignore[arg-type]
    # the estimate module re-exports the one definition (spec/ holds it)
    assert kernel_model.Mechanisms is Mechanisms


def test_gemm_shape_factor_tiles_waves_and_depth():
    hopper = kernel_model.TILINGS["hopper"]
    # 8192^3 BF16 on 132 SMs: 64 x 32 tiles of 128 x 256 = 2048 tiles in 16 waves of 132;
    # 128 K-iterations of 64 plus K_PIPE = 2
    big = kernel_model.gemm_shape_factor(hopper, 132, 8192, 8192, 8192)
    assert big == pytest.approx(2048 / (16 * 132) * 128 / 130)
    # FP8 runs 128-deep K tiles: fewer iterations, so the fill/epilogue weighs more
    fp8_big = kernel_model.gemm_shape_factor(hopper, 132, 8192, 8192, 8192, in_bytes=1)
    assert fp8_big == pytest.approx(2048 / (16 * 132) * 64 / 66)
    # four experts' GEMMs on four streams share waves: better than one at a time
    one = kernel_model.gemm_shape_factor(hopper, 132, 512, 1536, 2048, groups=8, streams=1)
    four = kernel_model.gemm_shape_factor(hopper, 132, 512, 1536, 2048, groups=8, streams=4)
    assert four > one
    # a routed token count is random: its last row tile is half empty on average
    exact = kernel_model.gemm_shape_factor(hopper, 132, 1024, 4096, 4096)
    rnd = kernel_model.gemm_shape_factor(hopper, 132, 1024, 4096, 4096, random_m=True)
    assert rnd == pytest.approx(exact * 1024 / (128 * 8.5))


def test_blackwell_two_sm_tiles_quantise_like_per_sm_tiles():
    """A 256 x 256 2-SM UMMA tile spans two SMs: per SM it is 128 x 256, not 256 x 256."""
    from parastrat.estimate.efficiency import profile, shape_factor

    bw = kernel_model.tiling(GB200)
    prof = profile(GB200)
    new = kernel_model.gemm_shape_factor(bw, prof.units, 384, 4096, 4096)
    old = shape_factor(prof, 384, 4096, 4096)  # 256-row tiles: 384 rows fill 75 %
    assert new > old


def test_attention_head_dim_against_the_sfu():
    # H100: exponentials take r = 64/d of the tensor-core time; cost = max(1, r) + r/2 (r<1)
    assert kernel_model.attention_head_factor(H100, 64) == pytest.approx(1.5 / 1.25)
    assert kernel_model.attention_head_factor(H100, 256) == pytest.approx(1.125 / 1.25)
    assert kernel_model.attention_head_factor(H100, 128) == 1.0
    # the backward's products are 2.5x longer: the SFU matters less there
    assert 1.0 < kernel_model.attention_head_factor(H100, 64, backward=True) < 1.2
    # Blackwell doubled the tensor cores but not the SFU; Blackwell Ultra doubled the SFU
    assert kernel_model.attention_head_factor(GB200, 64) > kernel_model.attention_head_factor(
        GB300, 64
    )


def test_attention_block_keys():
    # a 128-key window touches two 128-key blocks per 128-query block
    assert kernel_model.attention_block_keys(4096, 128) == 256
    assert kernel_model.attention_block_keys(4096) == 2048 + 64
    gpt_oss = ps.models.get("gpt-oss-120b")
    llama = ps.models.get("llama3-8b")
    assert kernel_model.attention_block_ratio(llama, 4096) == pytest.approx(2112 / 2048)
    assert kernel_model.attention_block_ratio(gpt_oss, 4096) > 1.05


def test_expert_load_statistics_balancers_and_capacity():
    qwen = ps.models.get("qwen3-30b-a3b")
    forced = moe_kernels.expert_load(qwen, 4096, 1, 16, 1, "forced")
    mean = 4096 * 8
    assert forced.mean == mean
    assert forced.factor == pytest.approx(1 + math.sqrt(2 * math.log(16) / mean))
    aux = moe_kernels.expert_load(qwen, 4096, 1, 16, 1, "aux_loss")
    free = moe_kernels.expert_load(qwen, 4096, 1, 16, 1, "loss_free")
    assert aux.factor > free.factor > forced.factor
    # 8 local experts: the per-expert max violation shrinks by sqrt(8) on a rank
    assert aux.factor == pytest.approx(
        1 + math.hypot(forced.factor - 1, moe_kernels.MAXVIO["aux_loss"] / math.sqrt(8))
    )
    assert moe_kernels.expert_load(qwen, 4096, 1, 16, 1, "aux_loss", 1.1).factor == 1.1
    assert moe_kernels.expert_load(qwen, 4096, 1, 1, 1, "aux_loss").factor == 1.0
    assert forced.per_expert == pytest.approx(forced.slowest / 8)


def test_moe_elementwise_bytes_counted_per_kernel():
    qwen = ps.models.get("qwen3-30b-a3b")
    h, f = 2048, 768
    a2a_f, a2a_b, tok_f, tok_b = moe_kernels.moe_elementwise_bytes(qwen, 16, "alltoall")
    flex_f, _, _, _ = moe_kernels.moe_elementwise_bytes(qwen, 16, "flex")
    # the alltoall dispatcher sorts the received chunks by local expert and back
    assert a2a_f - flex_f == 2 * 2 * h * 2
    # permute 4h + sort 8h + gated activation 6f + weighted unpermute
    assert a2a_f == pytest.approx(4 * h + 8 * h + 6 * f + 2 * h + 4 + 2 * h / 8)
    assert a2a_b > a2a_f and tok_f == 4 * 128 * 4 + 8 * 12 and tok_b == 3 * 128 * 4


def test_fp8_recipes_and_architectures():
    assert fp8.cast_bytes_per_element("current", "hopper") == 6
    assert fp8.cast_bytes_per_element("current", "blackwell") == 5
    assert fp8.cast_bytes_per_element("mxfp8", "blackwell") == pytest.approx(4 + 1 / 16)
    assert fp8.recipe("FP8-CS") == "current" and fp8.recipe("fp8-delayed") == "delayed"
    assert fp8.recipe("mxfp8") == "mxfp8" and fp8.recipe("fp8-blockwise") == "blockwise"
    assert fp8.backward_gemm_slowdown("hopper") == fp8.HOPPER_SPLIT_ACC
    assert fp8.backward_gemm_slowdown("blackwell") == 1.0
    assert fp8.weight_cast_bytes_per_param("current", "hopper") == 4
    assert fp8.weight_cast_bytes_per_param("current", "blackwell") == 3
    assert fp8.amax_reductions("current", 4, True) == 4
    assert fp8.amax_reductions("mxfp8", 4, True) == fp8.amax_reductions("current", 1, True) == 0


def _step(model, strategy, accel, n, mech=None, **kw):
    kw.setdefault("seq_len", 4096)
    sw = Switches(recompute="none", mechanisms=mech or Mechanisms())
    return estimate_step(
        ps.models.get(model),
        strategy.with_world_size(n),
        ps.Cluster(accel, num_devices=n),
        sw,
        **kw,
    )


def test_each_switch_moves_the_step_the_way_its_mechanism_says():
    dense = ps.Strategy(tp=4, pp=4, vpp=5, sp=True)
    kw = dict(global_batch_size=64, precision="fp8")
    on = _step("llama3-70b", dense, "h100", 64, **kw)
    no_fp8 = _step("llama3-70b", dense, "h100", 64, **kw, mech=parse_ablation("fp8"))
    no_il = _step("llama3-70b", dense, "h100", 64, **kw, mech=parse_ablation("interleave"))
    # Hopper's split accumulation, casts and amax reductions make FP8 slower
    assert on.step_time_s > 1.03 * no_fp8.step_time_s
    # the interleaved fill chain crosses p v - 1 boundaries instead of p - 1
    assert on.breakdown["pp_exposed"] > no_il.breakdown["pp_exposed"]
    # on Blackwell the split-accumulation penalty is absent
    gb_on = _step("llama3-70b", dense, "gb200", 64, **kw)
    gb_off = _step("llama3-70b", dense, "gb200", 64, **kw, mech=parse_ablation("fp8"))
    assert gb_on.step_time_s / gb_off.step_time_s < on.step_time_s / no_fp8.step_time_s
    # the slowest EP rank sets the all-to-all's pace
    moe = ps.Strategy(ep=16)
    kw = dict(global_batch_size=64, precision="fp8")
    aux = _step("qwen3-30b-a3b", moe, "h100", 16, **kw, mech=Mechanisms(balance="aux_loss"))
    flat = _step("qwen3-30b-a3b", moe, "h100", 16, **kw, mech=parse_ablation("imbalance"))
    assert aux.breakdown["ep"] > 1.1 * flat.breakdown["ep"]
    assert aux.breakdown["compute"] > flat.breakdown["compute"]


def test_capacity_factor_caps_the_slowest_rank():
    moe = ps.Strategy(ep=16)
    kw = dict(global_batch_size=64, precision="fp8")
    dropless = _step("qwen3-30b-a3b", moe, "h100", 16, **kw, mech=Mechanisms(balance="aux_loss"))
    capped = _step(
        "qwen3-30b-a3b",
        moe,
        "h100",
        16,
        **kw,
        mech=Mechanisms(balance="aux_loss", capacity_factor=1.0),
    )
    flat = _step("qwen3-30b-a3b", moe, "h100", 16, **kw, mech=parse_ablation("imbalance"))
    assert capped.breakdown["ep"] == pytest.approx(flat.breakdown["ep"])
    assert dropless.breakdown["ep"] > capped.breakdown["ep"]
    with pytest.raises(UsageError, match="capacity_factor"):
        Mechanisms(capacity_factor=0.5)


def test_step_model_memo_is_keyed_by_the_mechanisms():
    """Prices with other mechanisms never reuse a memo: one StepModel per Switches, and the
    module-level host-op memo takes the mechanisms as an argument."""
    moe = ps.Strategy(ep=16)
    kw = dict(global_batch_size=64, precision="fp8")
    on = _step("qwen3-30b-a3b", moe, "h100", 16, **kw)
    off = _step("qwen3-30b-a3b", moe, "h100", 16, mech=parse_ablation("moe_kernels"), **kw)
    again = _step("qwen3-30b-a3b", moe, "h100", 16, **kw)
    assert on.breakdown["host"] != off.breakdown["host"]
    assert again == on


def test_fp8_expert_padding_copies_unless_the_router_pads():
    qwen = ps.models.get("qwen3-30b-a3b")
    load = moe_kernels.expert_load(qwen, 4096, 1, 16, 1)
    bf16 = moe_kernels.layer_bytes(qwen, 4096, 1, 16, load, Mechanisms(), quantised=False)
    fp8_ = moe_kernels.layer_bytes(qwen, 4096, 1, 16, load, Mechanisms(), quantised=True)
    padded = moe_kernels.layer_bytes(
        qwen, 4096, 1, 16, load, Mechanisms(router_padding=True), quantised=True
    )
    copies = 4096 * 8 * load.factor
    assert fp8_[0] - bf16[0] == pytest.approx(copies * 4 * 2048 * 2)
    assert padded == bf16
    assert moe_kernels.padding_launches("fp8", Mechanisms()) == 2
    assert moe_kernels.padding_launches("bf16", Mechanisms()) == 0
    assert moe_kernels.padding_launches("mxfp8", Mechanisms(router_padding=True)) == 0
