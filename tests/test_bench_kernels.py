"""Measured kernel constants: the calibration's ``kernels`` section, the bench that writes it,
and the step model that reads it."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.errors import SpecError, UsageError
from parastrat.estimate import efficiency
from parastrat.estimate.step import estimate_step
from parastrat.spec.cluster import Calibration, Cluster

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
        ({"gemm_eff": {"int4": 0.5}}, "int4"),
    ):
        with pytest.raises(SpecError, match=named):
            Calibration.from_dict({"kernels": bad})
    # a device name no preset knows is the calibration's fault, and the error says so
    other = {"kernels": {"gemm_eff": {"bf16": 0.6}}, "accelerator": "tpu-v5"}
    with pytest.raises(SpecError, match="the calibration's 'accelerator' 'tpu-v5': unknown"):
        Cluster("h100", num_devices=8).calibrate(other)


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
    # an FP8 _scaled_mm is never written down as an NVFP4 rate
    with pytest.raises(UsageError, match="NVFP4"):
        measure_gemm("nvfp4", size=64, device="cpu", iters=1, warmup=0)


def test_host_op_time_is_measured_and_kept_as_measured():
    """The host's seconds per eager op (the step model's HOST_OP_S, by measurement) go into
    the calibration as measured and replace the preset's figure in the cost model."""
    from parastrat.bench.kernels import kernel_calibration, measure_host_op
    from parastrat.estimate.efficiency import host_op_time

    host = measure_host_op(device="cpu", ops=20, iters=3, warmup=1)
    assert 0 < host < 0.01
    cal = kernel_calibration("h100", {"bf16": 500e12}, host_op_s=host, source="test")
    assert cal["kernels"]["host_op_s"] == host
    cluster = ps.Cluster("h100", 8).calibrate(cal)
    assert host_op_time(cluster.accel) == host
    with pytest.raises(SpecError, match="host_op_s"):
        kernel_calibration("h100", {"bf16": 500e12}, host_op_s=1.0)  # one second per op
    with pytest.raises(UsageError):
        measure_host_op(device="cpu", ops=0)


def test_cli_kernels_refuse_a_cpu_labelled_as_a_gpu(capsys, monkeypatch):
    from parastrat.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # no CUDA here: the CPU's rates must not be written as an H100's (exit 2, no file)
    for accel in ("h100", "a100"):
        code = main(["bench", "--kernels", "--accelerator", accel, "--gemm-size", "64"])
        assert code == 2
        err = capsys.readouterr().err
        assert "cuda" in err and accel in err and "Traceback" not in err
    assert main(["bench", "--kernels", "--grid", "--accelerator", "gb200"]) == 2
    # no accelerator: a clear usage error, not a traceback
    assert main(["bench", "--kernels"]) == 2
    assert "--accelerator" in capsys.readouterr().err


def test_cli_kernels_json_is_one_document(capsys, monkeypatch):
    """``--format json`` prints the calibration alone on stdout (the rates table goes to
    stderr), as every other command's JSON output; measured here on the CPU with the device
    check bypassed (the path a GPU takes after it)."""
    import parastrat.bench.kernels as kernels
    from parastrat.cli import main

    monkeypatch.setattr(kernels, "check_device", lambda *a, **kw: "cpu")
    line = ["bench", "--kernels", "--accelerator", "h100", "--gemm-size", "64"]
    assert main([*line, "--precisions", "bf16", "--iters", "1", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["kernels"]["gemm_eff"]["bf16"] > 0
    assert "kernel rates" in out.err


def test_grid_fit_is_written_merged_and_read_by_plan(tmp_path, capsys):
    """The GPU path's writer and reader, run on the CPU at the function level: a measured grid
    becomes a calibration whose gemm_eff the step model reads."""
    from parastrat.bench.kernels import GemmShape, fit_grid, gemm_grid, measure_grid
    from parastrat.cli import main
    from parastrat.cli.bench import _merge_kernels

    # shapes large enough that the A100 shape model is near its large-GEMM rate: at 64^3 it
    # prices a tensor-core GEMM so slowly that a fast CPU core reaches a tenth of it
    shapes = [
        GemmShape(1024, 1024, 1024, 1, "square 1024"),
        GemmShape(512, 768, 1024, 3, "grouped"),
    ]
    rows = measure_grid(shapes, ["bf16"], device="cpu", iters=2, warmup=1)
    assert [r["groups"] for r in rows] == [1, 3] and all(r["flops_per_s"] > 0 for r in rows)
    cal = fit_grid("a100", rows, 1e9, source="cpu test")
    eff = cal["kernels"]["gemm_eff"]["bf16"]
    assert 0 < eff < 0.05  # a CPU is far below an A100's tensor cores
    assert len(cal["kernel_grid"]) == 2 and all(
        "model_flops_per_s" in r for r in cal["kernel_grid"]
    )
    path = tmp_path / "cal.json"
    ops = {"all_reduce": {"intra": {"alpha_s": 5e-6, "busbw_Bps": 3e11}}}
    path.write_text(json.dumps({"ops": ops, "source": "earlier sweep"}))
    _merge_kernels(path, cal)
    data = json.loads(path.read_text())
    assert data["ops"] == ops and data["kernels"]["gemm_eff"]["bf16"] == eff
    assert data["kernel_grid"] and "earlier sweep" in data["source"]
    capsys.readouterr()
    plan = ["plan", "--model", "llama3-8b", "--gpus", "8", "--accelerator", "a100"]
    plan += ["--seq-len", "2048", "--format", "json", "--top-k", "1"]
    assert main(plan) == 0
    default = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["step_time_s"]
    assert main([*plan, "--calibration", str(path)]) == 0
    measured = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["step_time_s"]
    assert measured > 5 * default
    # the grid names the MoE presets' grouped expert GEMMs at their per-expert tokens
    grid = {g.label: g for g in gemm_grid(8192)}
    qwen = grid["qwen3-30b-a3b EP8 fc1 x8"]
    assert (qwen.m, qwen.n, qwen.k) == (4096 * 8 // 16, 2 * 768, 2048)


def test_grid_fit_recovers_the_efficiency_of_a_device_that_follows_the_model():
    """Rows made by the shape model itself at a known efficiency fit back to it, and a rate
    above the peak names the wrong preset."""
    from parastrat.bench.kernels import fit_grid, gemm_grid, model_fraction

    accel = ps.hardware.get("h100")
    rows = []
    for sh in gemm_grid(8192):
        row = {"label": sh.label, "m": sh.m, "n": sh.n, "k": sh.k, "groups": sh.groups}
        row["precision"] = "bf16"
        row["flops_per_s"] = 989e12 * 0.6 * model_fraction(accel, row)
        rows.append(row)
    cal = fit_grid("h100", rows)
    assert cal["kernels"]["gemm_eff"]["bf16"] == pytest.approx(0.6)
    rows[0]["flops_per_s"] = 2e15
    with pytest.raises(UsageError, match="h100"):
        fit_grid("h100", rows)


def test_attention_is_measured_in_the_step_models_flops_and_written_as_fractions():
    """The attention path of ``bench --kernels`` on the CPU: both rates, the kernel named, the
    two fractions of the BF16 peak, and a rate above the peak refused."""
    from parastrat.bench.kernels import (
        AttentionRates,
        attention_flops,
        kernel_calibration,
        measure_attention,
    )
    from parastrat.estimate.kernel_model import attention_block_keys

    # causal, whole 128-key blocks: s/2 + 64 keys per query
    assert attention_flops(1024, 2) == 4 * 2 * 1024 * attention_block_keys(1024) * 128
    rates = measure_attention(seq=256, heads=2, device="cpu", iters=2, warmup=1)
    assert rates.train_flops > 0 and rates.forward_flops > 0
    assert rates.backend == "torch scaled_dot_product_attention"
    cal = kernel_calibration("a100", {}, 1e9, attention=rates)
    peak = ps.hardware.get("a100").peak("bf16")
    assert cal["kernels"]["attn_eff"] == pytest.approx(rates.train_flops / peak)
    assert cal["kernels"]["attn_fwd_eff"] == pytest.approx(rates.forward_flops / peak)
    assert "scaled_dot_product_attention" in cal["source"]
    too_fast = AttentionRates(2 * peak, 1e12, "x")
    with pytest.raises(ps.UsageError, match=r"attention rate .* is --accelerator"):
        kernel_calibration("a100", {}, 1e9, attention=too_fast)


def test_a_measured_forward_attention_rate_prices_dit_inference():
    from parastrat.estimate.dit_step import attention_efficiency

    cluster = ps.Cluster("h100", num_devices=1).calibrate(
        {"ops": {}, "kernels": {"attn_fwd_eff": 0.2}}
    )
    assert attention_efficiency(cluster.accel, 128) == pytest.approx(0.2)
    assert attention_efficiency(ps.hardware.get("h100"), 128) == pytest.approx(0.35)  # the table
