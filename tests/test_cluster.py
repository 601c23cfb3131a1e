"""Cluster: defaults from the accelerator, spans, and THE collective price."""

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError
from parastrat.spec.cluster import Calibration, bus_factor, latency_steps, load_calibration


def test_defaults_come_from_the_preset():
    c = ps.Cluster(accelerator="h100", num_devices=64)
    preset = ps.hardware.get("h100")
    # the preset, planned against the memory the device exposes (81,559 MiB, not 80 GiB)
    assert c.accel == dataclasses.replace(preset, memory_bytes=preset.usable_memory_bytes)
    assert c.memory_bytes == 81_559 * 2**20
    assert (c.devices_per_node, c.scale_up_domain, c.num_nodes) == (8, 8, 8)
    assert c.scale_out_bw_Bps == 50e9
    gb = ps.Cluster(accelerator="GB200", num_devices=144)
    assert gb.accelerator == "gb200" and gb.devices_per_node == 4 and gb.num_nodes == 36
    assert gb.scale_up_domain == 72


def test_overrides():
    c = ps.Cluster("ascend-910b", 32, scale_up_domain=4, scale_out_bw_Bps=12.5e9)
    assert c.scale_up_domain == 4 and c.span(8) == "inter" and c.span(4) == "intra"
    assert c.link("inter")[1] == 12.5e9


def test_span():
    c = ps.Cluster("h100", 64)
    assert c.span(8) == "intra"
    assert c.span(2, stride=4) == "intra"  # ranks 0 and 4: same node
    assert c.span(2, stride=8) == "inter"  # ranks 0 and 8: next node
    # 144 GB200 = 36 nodes: Bridge's launcher places them in 18-node (72-GPU) segments, so a
    # 64-rank block at rank 64 straddles two racks; 128 GPUs sit in 64-GPU segments
    assert ps.Cluster("gb200", 144).span(64) == "inter"
    assert ps.Cluster("gb200", 128).span(64) == "intra"


def test_bus_factors_match_nccl_tests():
    # nccl-tests doc/PERFORMANCE.md
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert bus_factor("all_to_all", 2) == pytest.approx(1 / 2)
    assert bus_factor("broadcast", 8) == bus_factor("send_recv", 2) == bus_factor("ring", 8) == 1
    with pytest.raises(SpecError, match="unknown collective"):
        bus_factor("allreduce", 8)


def test_collective_time_hand_computed():
    c = ps.Cluster("h100", 64)
    alpha, bw = c.accel.intra_latency_s, c.accel.scale_up_bw_Bps
    # all-reduce of 1 GB on 8 GPUs: alpha * 2*log2(8) + 1e9 * 2*7/8 / 370e9
    expect = alpha * 6 + 1e9 * 1.75 / bw
    assert c.collective_time("all_reduce", 1e9, 8) == pytest.approx(expect)
    assert bw == 370e9
    # across nodes: 16 ranks contiguous -> inter; all-gather n-1 steps
    a2, bw2 = c.link("inter")
    assert c.collective_time("all_gather", 2e9, 16) == pytest.approx(a2 * 15 + 2e9 * 15 / 16 / bw2)
    assert c.collective_time("all_reduce", 1e9, 1) == 0.0


def test_calibration_overrides_and_round_trips(tmp_path):
    cal = {
        "ops": {"all_to_all": {"inter": {"alpha_s": 2e-5, "busbw_Bps": 2e10}}},
        "source": "unit test",
    }
    c = ps.Cluster("h100", 64).calibrate(cal)
    assert c.collective_params("all_to_all", "inter") == (2e-5, 2e10)
    # others still come from the link
    assert c.collective_params("all_reduce", "inter") == c.link("inter")
    assert c.collective_time("all_to_all", 1e9, 16, "inter") == pytest.approx(
        2e-5 * 15 + 1e9 * 15 / 16 / 2e10
    )
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(Calibration.from_dict(cal).to_dict()))
    assert load_calibration(path).ops["all_to_all"]["inter"] == (2e-5, 2e10)
    c2 = ps.Cluster.from_calibration_file(path, accelerator="h100", num_devices=16)
    assert c2.calibration.source == "unit test" and c2.num_devices == 16


def test_bad_inputs_raise_spec_error(tmp_path):
    with pytest.raises(SpecError):
        ps.Cluster("h100", 0)
    with pytest.raises(SpecError, match="known"):
        ps.Cluster("v100", 8)
    with pytest.raises(SpecError, match="busbw_Bps"):
        Calibration.from_dict({"ops": {"all_reduce": {"intra": {"alpha_s": 1}}}})
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_calibration(bad)


@given(
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
    n=st.integers(2, 4096),
    nbytes=st.floats(1, 1e12),
)
def test_time_grows_with_bytes_and_factor_below_two(op, n, nbytes):
    c = ps.Cluster("b200", 4096)
    assert 0 < bus_factor(op, n) < 2
    assert latency_steps(op, n) >= 1
    t1 = c.collective_time(op, nbytes, n)
    t2 = c.collective_time(op, 2 * nbytes, n)
    assert t2 > t1 > 0 and math.isfinite(t2)


@pytest.mark.parametrize(
    "gpus, segment",
    [(64, 64), (72, 72), (128, 64), (256, 64), (144, 72), (80, 40), (8, 8), (36, 36)],
)
def test_nvl72_segments_follow_bridges_launcher(gpus, segment):
    """GB200 NVL72 jobs are placed in Slurm segments of the largest divisor of the node count
    up to 18 nodes (Megatron Bridge's performance launcher): 16 nodes for 32 / 64 nodes."""
    c = ps.Cluster("gb200", gpus)
    assert c.segment == segment
    nodes = gpus // 4
    assert segment // 4 == (
        nodes if nodes <= 18 else max(k for k in range(1, 19) if nodes % k == 0)
    )


def test_span_prices_groups_that_straddle_two_racks():
    """A block of ``size x stride`` consecutive ranks that does not divide the segment puts
    some group across two NVL72 racks: priced over the scale-out link.  64-GPU segments keep
    every power-of-two group of up to 64 ranks inside; 72-GPU segments (36 nodes) do not."""
    by64, by72 = ps.Cluster("gb200", 256), ps.Cluster("gb200", 144)
    for size, stride in ((8, 1), (16, 1), (64, 1), (8, 8), (4, 16)):
        assert by64.span(size, stride) == "intra"
    assert by72.span(8, 1) == "intra" and by72.span(72, 1) == "intra"
    assert by72.span(16, 1) == by72.span(64, 1) == by72.span(8, 8) == "inter"
    assert by64.span(72, 1) == "inter"  # wider than a segment
    # single-node domains keep the size rule (the block's alignment inside a node not priced)
    assert ps.Cluster("h100", 24).span(3, 1) == "intra"
    assert ps.Cluster("h100", 24).span(16, 1) == "inter"
    # the EP all-to-all of a 144-GPU job with EP 16 is priced across the racks
    from parastrat.estimate import comm

    a2a = comm.Collective("ep", "all_to_all", 64e6, 16, 1)
    assert a2a.time(by72) > a2a.time(ps.Cluster("gb200", 128))


def test_kernel_constants_measured_as_another_accelerator_are_refused():
    """A kernel calibration holds fractions of the measured preset's peaks: on a cluster of
    another accelerator it would price that one with them, so the cluster refuses it."""
    from parastrat.bench.kernels import kernel_calibration
    from parastrat.errors import SpecError

    cal = kernel_calibration("h100", {"bf16": 600e12}, host_op_s=1.4e-5)
    assert ps.Cluster("h100", 8, calibration=cal).accel.kernels["host_op_s"] == 1.4e-5
    with pytest.raises(SpecError, match=r"measured as h100.*--accelerator ascend-910b"):
        ps.Cluster("ascend-910b", 8, calibration=cal)
    with pytest.raises(SpecError, match="measured as h100"):
        ps.Cluster("a100", 8).calibrate(cal)


def test_pipeline_hops_that_leave_a_segment():
    """A pipeline group's stages sit ``stride`` ranks apart, not in an aligned block: on 128
    GB200 (two 64-GPU segments) PP4 with stride 32 puts stages 0-1 in one segment and 2-3 in
    the other, so hop 1 -> 2 (and the interleaved wrap 3 -> 0) crosses; the two-rank group
    ``span`` alone calls every hop intra."""
    c = ps.Cluster("gb200", 128)
    assert c.span(2, stride=32) == "intra"
    # (hops crossing in the worst group, crossing exchanges of the worst stage)
    assert c.hop_crossings(4, 32) == (1, 1)  # stages 1 and 2 each have one crossing side
    assert c.hop_crossings(4, 32, wrap=True) == (2, 1)
    assert c.hop_crossings(4, 16) == (0, 0)  # the whole group in one segment
    assert c.hop_crossings(2, 64) == (1, 2)  # an end stage makes both exchanges on its hop
    h100 = ps.Cluster("h100", 64)
    assert h100.hop_crossings(8, 8) == (7, 2)  # every stage on its own node
    assert h100.hop_crossings(4, 4, wrap=True) == (2, 1)  # 0-4 | 8-12: one hop each way


@given(
    stages=st.integers(2, 16),
    stride=st.integers(1, 64),
    wrap=st.booleans(),
    accel=st.sampled_from(["h100", "gb200", "ascend-910b"]),
)
def test_hop_crossings_bounds(stages, stride, wrap, accel):
    c = ps.Cluster(accel, stages * stride)
    hops = stages - 1 + wrap
    crossing, at_stage = c.hop_crossings(stages, stride, wrap)
    assert 0 <= crossing <= hops and 0 <= at_stage <= 2
    assert (crossing == 0) == (at_stage == 0)
    # a group whose every member shares one unit has no crossing; with a stage per unit,
    # every hop and both exchanges of every stage cross
    unit = c.segment if c.scale_up_domain > c.devices_per_node else c.scale_up_domain
    if stages * stride <= unit and unit % (stages * stride) == 0:
        assert crossing == 0
    if stride >= unit:
        assert (crossing, at_stage) == (hops, 2)
