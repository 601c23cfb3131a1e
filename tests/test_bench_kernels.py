"""Measured kernel constants: the calibration's ``kernels`` section, the bench that writes it,
and the step model that reads it."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.errors import SpecError, UsageError
from parastrat.estimate import efficiency
from parastrat.estimate.step import estimate_step
from parastrat.spec.cluster import Calibration

torch = pytest.importorskip("torch")


def test_kernel_section_validated_with_the_key_named():
    cal = Calibration.from_dict({"kernels": {"gemm_eff": {"FP8-CS": 0.6}, "host_op_s": 2e-5}})
    # precision spellings are canonicalised; ops may be absent
    assert cal.kernels == {"gemm_eff": {"fp8": 0.6}, "host_op_s": 2e-5} and not cal.ops
    for bad, named in (
        ({"gemm_eff": {"bf16": 1.2}}, "gemm_eff.bf16"),
        ({"gemm_eff": {}}, "gemm_eff"),
        ({"attn_eff": 0}, "attn_eff"),
        ({"host_op_s": 1.0}, "host_op_s"),
        ({"tflops": 500}, "tflops"),
        ({"gemm_eff": {"fp4": 0.5}}, "fp4"),
    ):
        with pytest.raises(SpecError, match=named):
            Calibration.from_dict({"kernels": bad})


def test_calibrated_kernels_replace_the_defaults():
    base = ps.Cluster("h100", num_devices=8)
    cal = base.calibrate({"kernels": {"gemm_eff": {"bf16": 0.34}, "host_op_s": 2.7e-5}})
    assert efficiency.profile(base.accel).gemm_fraction("bf16") == 0.68
    assert efficiency.profile(cal.accel).gemm_fraction("bf16") == 0.34
    # precisions the calibration does not name keep their default
    assert efficiency.profile(cal.accel).gemm_fraction("fp8") == 0.62
    assert efficiency.host_op_time(cal.accel) == 2.7e-5
    assert efficiency.host_op_time(base.accel) == 13.5e-6
    # a compute-bound GEMM (8192^3, every tile full) takes exactly twice as long at half the
    # efficiency
    t0 = efficiency.gemm_time(base.accel, 8192, 8192, 8192, "bf16")
    t1 = efficiency.gemm_time(cal.accel, 8192, 8192, 8192, "bf16")
    assert t1 == pytest.approx(2 * t0)
    # the step model sees it (and its caches keep the two devices apart)
    m = ps.models.get("llama3-8b")
    s = ps.Strategy().with_world_size(8)
    kw = dict(seq_len=4096, global_batch_size=32, precision="bf16", recompute="none")
    fast = estimate_step(m, s, base, **kw)
    slow = estimate_step(m, s, cal, **kw)
    assert slow.breakdown["compute"] > 1.5 * fast.breakdown["compute"]
    assert estimate_step(m, s, base, **kw).step_time_s == fast.step_time_s
    # the calibration survives the cluster's dict round trip
    assert ps.Cluster(**cal.to_dict()).accel.kernels == cal.accel.kernels


def test_kernel_calibration_divides_by_the_preset_peaks():
    from parastrat.bench.kernels import kernel_calibration

    # 500 TFLOP/s BF16 on an H100 (989 dense) and 2.68 TB/s copy of 3.35 TB/s
    cal = kernel_calibration("h100", {"bf16": 500e12}, 2.68e12, source="test")
    assert cal["kernels"]["gemm_eff"]["bf16"] == pytest.approx(500 / 989)
    assert cal["kernels"]["mem_eff"] == pytest.approx(0.8)
    with pytest.raises(UsageError, match="h100"):
        kernel_calibration("h100", {"bf16": 2000e12})  # above the dense peak: wrong preset
    with pytest.raises(UsageError, match="nothing measured"):
        kernel_calibration("h100", {})
    with pytest.raises(UsageError, match="bf16"):
        kernel_calibration("h100", {"bf16": "fast"})


def test_cpu_measurements_run_and_fp8_is_refused_on_cpu():
    from parastrat.bench.kernels import measure_copy, measure_gemm

    flops = measure_gemm("bf16", size=64, device="cpu", iters=2, warmup=1)
    assert flops > 0
    assert measure_copy(nbytes=1 << 16, device="cpu", iters=2, warmup=1) > 0
    with pytest.raises(UsageError, match="fp8"):
        measure_gemm("fp8", size=64, device="cpu", iters=1, warmup=0)


def test_cli_kernels_merge_into_a_calibration_and_plan_reads_it(tmp_path, capsys):
    from parastrat.cli import main

    path = tmp_path / "cal.json"
    ops = {"all_reduce": {"intra": {"alpha_s": 5e-6, "busbw_Bps": 3e11}}}
    path.write_text(json.dumps({"ops": ops, "source": "earlier sweep"}))
    args = ["bench", "--kernels", "--accelerator", "a100", "--gemm-size", "64", "--iters", "2"]
    assert main([*args, "--fit", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["ops"] == ops  # the collective section is kept
    assert 0 < data["kernels"]["gemm_eff"]["bf16"] <= 1
    assert "earlier sweep" in data["source"]
    capsys.readouterr()
    plan = ["plan", "--model", "llama3-8b", "--gpus", "8", "--accelerator", "a100"]
    plan += ["--seq-len", "2048", "--format", "json", "--top-k", "1"]
    assert main(plan) == 0
    default = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["step_time_s"]
    assert main([*plan, "--calibration", str(path)]) == 0
    measured = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["step_time_s"]
    assert measured > default  # this CPU is far slower than an A100's tensor cores
    # no accelerator: a clear usage error, not a traceback
    assert main(["bench", "--kernels"]) == 2
    assert "--accelerator" in capsys.readouterr().err
