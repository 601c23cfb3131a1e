"""NVFP4 (Transformer Engine's NVFP4BlockScaling) as a precision: spellings, Blackwell FP4
peaks, the refusal elsewhere, the recipe's quantisation bytes, the FP4 K tile, the cached FP4
weight copies, the ``nvfp4`` mechanism and the CLI."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import SpecError
from parastrat.estimate import fp8, kernel_model
from parastrat.estimate.efficiency import gemm_time
from parastrat.estimate.step import estimate_step
from parastrat.spec.hardware import canonical_precision, require_precision
from parastrat.spec.workload import Mechanisms, Switches, parse_ablation

GB200 = ps.hardware.get("gb200")
GB300 = ps.hardware.get("gb300")


@pytest.mark.parametrize("spelling", ["nvfp4", "NVFP4", "fp4", "nvfp4-bs", "NVFP4_BlockScaling"])
def test_spellings(spelling):
    assert canonical_precision(spelling) == "nvfp4"
    assert fp8.recipe(spelling) == "nvfp4"


def test_blackwell_fp4_peaks_from_the_datasheets():
    # dense FP4 per GPU: DGX/HGX B200 72 PF / 8, HGX B300 105 PF / 8, GB200 NVL72 720 PF / 72,
    # GB300 NVL72 1,080 PF / 72
    want = {"b200": 9.0e15, "b300": 13.125e15, "gb200": 10e15, "gb300": 15e15}
    for name, peak in want.items():
        acc = ps.hardware.get(name)
        assert acc.supports("nvfp4") and acc.peak("fp4") == peak
    # the paper's GEMM ratios over FP8: 2x on Blackwell, 3x on Blackwell Ultra (GB300)
    assert GB200.peak("nvfp4") / GB200.peak("fp8") == 2
    assert GB300.peak("nvfp4") / GB300.peak("fp8") == 3


@pytest.mark.parametrize("name", ["h100", "h200", "a100", "ascend-910b", "l40s"])
def test_refused_without_fp4_tensor_cores_with_a_fix_that_works(name):
    acc = ps.hardware.get(name)
    assert not acc.supports("nvfp4")
    with pytest.raises(SpecError, match=rf"nvfp4 .*{name} lacks.*gb300") as info:
        require_precision(acc, "fp4")
    fix = "fp8" if acc.supports("fp8") else "bf16"  # A100 and Ascend have no FP8 either
    assert f"--precision {fix} " in str(info.value)
    assert require_precision(acc, "bf16") == "bf16"
    m, s = ps.models.get("llama3-8b"), ps.Strategy().with_world_size(8)
    with pytest.raises(SpecError, match="FP4 tensor cores"):
        estimate_step(
            m,
            s,
            ps.Cluster(name, num_devices=8),
            seq_len=4096,
            global_batch_size=64,
            precision="nvfp4",
        )
    # the fix named in the message prices
    fixed = estimate_step(
        m, s, ps.Cluster(name, num_devices=8), seq_len=4096, global_batch_size=64, precision=fix
    )
    assert fixed.tokens_per_s_per_gpu > 0


def test_recipe_bytes_follow_the_paper_and_te():
    e = 0.5 + 1 / 16  # one E2M1 value + its share of an E4M3 scale per 16
    # amax pass (2) + row-wise cast (2 + e) + RHT column-wise cast (2 + e)
    assert fp8.cast_bytes_per_element("nvfp4", "blackwell") == pytest.approx(6 + 2 * e)
    # mechanism off: one flat block-scaled pass
    assert fp8.cast_bytes_per_element("nvfp4-flat", "blackwell") == pytest.approx(2 + 2 * e)
    # 2D 16x16 weight scales: amax + read + both orientations written once per step
    assert fp8.weight_cast_bytes_per_param("nvfp4", "blackwell") == pytest.approx(4 + 2 * e)
    assert fp8.recipe_for("nvfp4") == "nvfp4" and fp8.recipe_for("nvfp4", False) == "nvfp4-flat"
    assert fp8.recipe_for("mxfp8", False) == "mxfp8"
    # per-tensor amax all-reduced over TP with SP, like current scaling
    assert fp8.amax_reductions("nvfp4", 4, True) == fp8.AMAX_REDUCTIONS_PER_LAYER
    assert fp8.amax_reductions("nvfp4", 1, True) == 0


def test_fp4_k_tile_is_deeper():
    bw = kernel_model.TILINGS["blackwell"]
    assert bw.tile_k[0.5] == 2 * bw.tile_k[1] == 256
    # a shallow K: 2 FP4 iterations against 4 FP8 ones, the same 2-iteration fill/epilogue
    fp4 = kernel_model.gemm_shape_factor(bw, 148, 8192, 8192, 512, in_bytes=0.5)
    fp8_ = kernel_model.gemm_shape_factor(bw, 148, 8192, 8192, 512, in_bytes=1)
    assert fp4 / fp8_ == pytest.approx((2 / 4) / (4 / 6))


def test_gemm_rates_match_the_papers_fp4_over_fp8_ratios():
    # large GEMMs: the FP8 peak ratio (2x GB200, 3x GB300) less the deeper tile's fill cost
    for acc, ratio in ((GB200, 2.0), (GB300, 3.0)):
        t8 = gemm_time(acc, 16384, 16384, 16384, "mxfp8")
        t4 = gemm_time(acc, 16384, 16384, 16384, "nvfp4")
        assert 0.95 * ratio < t8 / t4 <= ratio
        # flat tile (mechanism off) keeps the FP8 K tile: exactly the peak ratio
        assert t8 / gemm_time(acc, 16384, 16384, 16384, "nvfp4", fp4_tile=False) == (
            pytest.approx(ratio)
        )


def _step(accel, precision, mech=None, n=64, strategy=None):
    s = (strategy or ps.Strategy(tp=1, pp=4, vpp=5)).with_world_size(n)
    sw = Switches(recompute="none", mechanisms=mech or Mechanisms())
    return estimate_step(
        ps.models.get("llama3-70b"),
        s,
        ps.Cluster(accel, num_devices=n),
        sw,
        seq_len=8192,
        global_batch_size=256,
        precision=precision,
    )


def test_step_speedup_over_mxfp8_is_amdahl_bounded():
    """The whole step gains less than the GEMMs (attention stays BF16, quantisation grows):
    between 1 and the FP4/FP8 GEMM ratio, and more on GB300 (3x) than on GB200 (2x)."""
    speed = {}
    for acc, ratio in (("gb200", 2.0), ("gb300", 3.0)):
        mx, f4 = _step(acc, "mxfp8"), _step(acc, "nvfp4")
        speed[acc] = f4.tokens_per_s_per_gpu / mx.tokens_per_s_per_gpu
        assert 1.1 < speed[acc] < ratio
        assert f4.mfu < mx.mfu  # MFU against the FP4 peak
    assert speed["gb300"] > speed["gb200"]


def test_nvfp4_mechanism_prices_the_extra_passes_and_leaves_fp8_alone():
    on, off = _step("gb300", "nvfp4"), _step("gb300", "nvfp4", parse_ablation("nvfp4"))
    assert on.step_time_s > 1.02 * off.step_time_s
    mx_on, mx_off = _step("gb300", "mxfp8"), _step("gb300", "mxfp8", parse_ablation("nvfp4"))
    assert mx_on.step_time_s == pytest.approx(mx_off.step_time_s)


def test_memory_keeps_bf16_weights_and_adds_two_fp4_copies():
    m = ps.models.get("llama3-8b")
    s = ps.Strategy().with_world_size(8)
    kw = dict(seq_len=4096, global_batch_size=64)
    bf = ps.estimate_memory(m, s, precision="bf16", **kw)
    f4 = ps.estimate_memory(m, s, precision="fp4", **kw)
    f8 = ps.estimate_memory(m, s, precision="fp8", **kw)
    f8_kept = ps.estimate_memory(m, s, precision="fp8", fp8_param_gather=False, **kw)
    extra = f4.stages[0].weights - bf.stages[0].weights
    # two FP4 copies with E4M3 scales (2 x 9/16 B) against FP8's two 1-byte copies
    assert extra / (f8_kept.stages[0].weights - bf.stages[0].weights) == pytest.approx(
        (0.5 + 1 / 16) / 1.0
    )
    # Bridge's NVFP4 recipe keeps the BF16 weight (fp8_param_gather False): more than FP8's
    assert f4.stages[0].weights > f8.stages[0].weights > 0
    assert extra > 0
    # the wgrad copy of each linear input is FP4 with block scales: fewer activation bytes
    assert f4.stages[0].activations < f8.stages[0].activations < bf.stages[0].activations
    gathered = ps.estimate_memory(m, s, precision="nvfp4", fp8_param_gather=True, **kw)
    assert gathered.stages[0].weights < f4.stages[0].weights


def test_cli_plan_explain_memory(capsys):
    base = ["--model", "llama3-8b", "--gpus", "8", "--accelerator", "gb300"]
    prec = ["--precision", "nvfp4", "--seq-len", "4096"]
    assert main(["plan", *base, *prec, "--top-k", "1", "--format", "json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["step"]["precision"] == "nvfp4"
    assert main(["explain", *base, *prec, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["memory", *base, *prec, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == "nvfp4"
    # a device without FP4 tensor cores: exit 2, a message with the fix, no traceback
    h100 = ["--model", "llama3-8b", "--gpus", "8", "--accelerator", "h100"]
    for cmd in ("plan", "explain", "memory"):
        assert main([cmd, *h100, *prec]) == 2
        err = capsys.readouterr().err
        assert "FP4 tensor cores" in err and "--precision fp8" in err and "Traceback" not in err


def _tp_run(switches: Switches | None = None, precision: str = "nvfp4"):
    return estimate_step(
        ps.models.get("llama3-70b"),
        ps.Strategy(tp=2, pp=4, vpp=5, sp=True).with_world_size(64),
        ps.Cluster("gb200", num_devices=64),
        switches or Switches(),
        seq_len=8192,
        global_batch_size=256,
        precision=precision,
    )


def test_tp_comm_overlap_defaults_off_at_nvfp4_as_bridges_recipes_run():
    """Bridge's NVFP4 recipes set tp_comm_overlap=False (TE's NVFP4 GEMM takes no userbuffers
    overlap): an unset switch prices it off at NVFP4, on at MXFP8; True restores it."""
    default = _tp_run()
    forced = _tp_run(Switches(tp_comm_overlap=True))
    off = _tp_run(Switches(tp_comm_overlap=False))
    assert default.step_time_s == pytest.approx(off.step_time_s)
    assert forced.step_time_s < default.step_time_s
    assert forced.breakdown["tp_exposed"] < 0.5 * default.breakdown["tp_exposed"]
    assert any("tp_comm_overlap=False" in n for n in default.notes)
    assert not any("tp_comm_overlap" in n for n in forced.notes + off.notes)
    mx = _tp_run(precision="mxfp8")
    mx_on = _tp_run(Switches(tp_comm_overlap=True), precision="mxfp8")
    assert mx.step_time_s == pytest.approx(mx_on.step_time_s)
    rule = Switches()
    assert not rule.tp_overlap(tp=2, sp=True, intra=True, precision="fp4")
    assert rule.tp_overlap(tp=2, sp=True, intra=True, precision="fp8-cs")
    assert not rule.tp_overlap(tp=2, sp=False, intra=True, precision="bf16")
    assert not Switches(tp_comm_overlap=True).tp_overlap(
        tp=8, sp=True, intra=False, precision="bf16"
    )


def test_tp_async_hides_the_column_parallel_dgrad_reduce_scatter():
    """Without TP overlap, TE still reduce-scatters the QKV / FC1 dgrad behind their wgrad
    GEMM (2 of a layer's 8 SP collectives): exposed TP time is up to a quarter lower with the
    ``tp_async`` mechanism than without, and never below what userbuffers hide."""
    off = Switches(tp_comm_overlap=False)
    with_async = _tp_run(off)
    sync = _tp_run(Switches(tp_comm_overlap=False, mechanisms=parse_ablation("tp_async")))
    total = with_async.breakdown["tp"]
    assert sync.breakdown["tp"] == pytest.approx(total)
    assert sync.breakdown["tp_exposed"] == pytest.approx(total)
    # a quarter hidden, less the slowdown of the GEMM it shares the SMs with (and the amax
    # all-reduces, which stay on the critical path)
    assert 0.75 * total < with_async.breakdown["tp_exposed"] < 0.9 * total
    assert (
        with_async.breakdown["tp_exposed"]
        > _tp_run(Switches(tp_comm_overlap=True)).breakdown["tp_exposed"]
    )


def test_cli_names_its_flag_for_the_nvfp4_tp_overlap(capsys):
    """On the command line the NVFP4 note names ``--tp-comm-overlap`` (not the Python
    argument), and the flag prices the overlap on."""
    base = [
        "explain", "--model", "llama3-70b", "--gpus", "64", "--accelerator", "gb200",
        "--seq-len", "8192", "--global-batch-size", "256", "--precision", "nvfp4",
        "--tp", "2", "--pp", "4", "--vpp", "5", "--sp",
    ]  # fmt: skip
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "--tp-comm-overlap prices it on" in text and "Switches(" not in text
    assert main([*base, "--tp-comm-overlap", "--format", "json"]) == 0
    on = json.loads(capsys.readouterr().out)["step"]
    assert main([*base, "--format", "json"]) == 0
    off = json.loads(capsys.readouterr().out)["step"]
    assert on["step_time_s"] < off["step_time_s"]
    assert not any("tp_comm_overlap" in n for n in on["notes"])


def test_tp_async_hides_nothing_when_combined_1f1b_delays_the_wgrad():
    """Combined 1F1B comes with ``delay_wgrad_compute`` in Bridge's recipes: TE stores the wgrad
    GEMM and waits for the dgrad collective at once, so ``tp_async`` hides nothing there."""

    def run(**kw):
        return estimate_step(
            ps.models.get("qwen3-30b-a3b"),
            ps.Strategy(tp=2, ep=8, sp=True).with_world_size(16),
            ps.Cluster("h100", num_devices=16),
            Switches(tp_comm_overlap=False, **kw),
            seq_len=4096,
            global_batch_size=64,
            precision="bf16",
        ).breakdown["tp_exposed"]

    sync = parse_ablation("tp_async")
    assert run(moe_a2a_overlap=True) == pytest.approx(run(moe_a2a_overlap=True, mechanisms=sync))
    assert run() < run(mechanisms=sync)


def test_ascend_prices_tp_without_comm_gemm_overlap_unless_asked():
    """On Ascend an unset ``tp_comm_overlap`` is off (MindSpeed-LLM's MC2 is off by default;
    no userbuffers): the TP collectives sit on the critical path, the note says why, and
    ``tp_comm_overlap=True`` prices the overlap back on; an NVIDIA part keeps it on."""
    kw = dict(seq_len=8192, global_batch_size=64, micro_batch_size=1)
    strategy = ps.Strategy(tp=8, sp=True)
    model = ps.models.get("llama3-8b")

    def run(accel: str, switches: Switches):
        return ps.estimate_step(model, strategy, ps.Cluster(accel, 8), switches, **kw)

    default = run("ascend-910b", Switches())
    forced = run("ascend-910b", Switches(tp_comm_overlap=True))
    assert forced.step_time_s < default.step_time_s
    assert default.breakdown["tp_exposed"] > 2 * forced.breakdown["tp_exposed"]
    assert any("MC2" in n and "--use-ascend-mc2" in n for n in default.notes)
    assert not any("MC2" in n for n in forced.notes)
    h100 = run("h100", Switches())
    assert h100.step_time_s == pytest.approx(
        run("h100", Switches(tp_comm_overlap=True)).step_time_s
    )
    rule = Switches()
    assert not rule.tp_overlap(tp=8, sp=True, intra=True, precision="bf16", vendor="huawei")
    assert rule.tp_overlap(tp=8, sp=True, intra=True, precision="bf16", vendor="nvidia")
