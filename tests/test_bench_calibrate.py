"""Calibration: fitting latency and bandwidth to rows, and feeding them to the cost model.

The measured round trip (real gloo rows -> fit -> Cluster.calibrate) is in test_bench_cli.py,
which already spawns ranks; here the rows are synthesised from known parameters so the fit
can be checked exactly.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parastrat.bench import Row, fit, load, save
from parastrat.errors import SpecError, UsageError
from parastrat.spec.cluster import Cluster, bus_factor, latency_steps


def _row(op: str, nbytes: int, n: int, t: float, span: str = "intra", backend: str = "nccl") -> Row:
    """A measured row, as a sweep on an H100 cluster (NCCL) would give it."""
    return Row.from_times(op, nbytes, n, [t], backend=backend, dtype="float32", span=span)


def _model_time(op: str, nbytes: int, n: int, alpha: float, busbw: float) -> float:
    return alpha * latency_steps(op, n) + nbytes * bus_factor(op, n) / busbw


def test_fit_recovers_known_latency_and_bandwidth():
    # all_gather on 4 ranks, alpha 10 us, busbw 2 GB/s: e.g. S = 1 MiB takes
    # 3 * 10e-6 + 1048576 * 0.75 / 2e9 = 3e-5 + 3.93216e-4 = 4.23216e-4 s
    sizes = [4096, 1 << 20, 16 << 20]
    rows = [_row("all_gather", s, 4, _model_time("all_gather", s, 4, 10e-6, 2e9)) for s in sizes]
    assert rows[1].time_s == pytest.approx(4.23216e-4)
    cal = fit(rows)
    got = cal["ops"]["all_gather"]["intra"]
    assert got["alpha_s"] == pytest.approx(10e-6, rel=1e-6)
    assert got["busbw_Bps"] == pytest.approx(2e9, rel=1e-6)
    assert cal["fit"]["all_gather"]["intra"]["points"] == 3
    assert cal["fit"]["all_gather"]["intra"]["rel_rmse"] < 1e-9


@given(
    alpha=st.floats(1e-7, 1e-3),
    busbw=st.floats(1e8, 1e12),
    op=st.sampled_from(["all_reduce", "all_to_all", "ring", "broadcast"]),
    worlds=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3),
)
def test_fit_is_exact_on_noise_free_rows_of_any_group_sizes(alpha, busbw, op, worlds):
    rows = [
        _row(op, s, n, _model_time(op, s, n, alpha, busbw))
        for n in worlds
        for s in (1 << 12, 1 << 18, 1 << 24)
    ]
    got = fit(rows)["ops"][op]["intra"]
    assert got["alpha_s"] == pytest.approx(alpha, rel=1e-5, abs=1e-12)
    assert got["busbw_Bps"] == pytest.approx(busbw, rel=1e-5)


def test_link_classes_are_fitted_separately():
    rows = []
    for span, (alpha, bw) in {"intra": (2e-6, 300e9), "inter": (20e-6, 40e9)}.items():
        rows += [
            _row("all_reduce", s, 8, _model_time("all_reduce", s, 8, alpha, bw), span)
            for s in (1 << 16, 1 << 22, 1 << 26)
        ]
    ops = fit(rows)["ops"]["all_reduce"]
    assert ops["intra"]["busbw_Bps"] == pytest.approx(300e9, rel=1e-6)
    assert ops["inter"]["busbw_Bps"] == pytest.approx(40e9, rel=1e-6)
    assert ops["inter"]["alpha_s"] == pytest.approx(20e-6, rel=1e-6)


def test_negative_latency_is_clamped_to_zero():
    # time grows faster than linearly at the small end: the free fit would give alpha < 0
    rows = [
        _row("ring", 1000, 2, 1e-7),
        _row("ring", 1_000_000, 2, 1e-3),
        _row("ring", 2_000_000, 2, 2e-3),
    ]
    got = fit(rows)["ops"]["ring"]["intra"]
    assert got["alpha_s"] == 0.0
    # alpha = 0, weights 1/t^2: 1/busbw = sum(r) / sum(r^2) with r = S/t = 1e10, 1e9, 1e9,
    # so busbw = (1e20 + 2e18) / (1.2e10) = 8.5e9 B/s
    assert got["busbw_Bps"] == pytest.approx(8.5e9)


def test_a_class_with_one_size_is_skipped_and_nothing_fittable_is_an_error():
    rows = [
        _row("broadcast", 4096, 4, 1e-4),
        _row("broadcast", 4096, 4, 2e-4),
        _row("all_to_all", 4096, 4, 1e-4),
        _row("all_to_all", 8192, 4, 1.5e-4),
    ]
    cal = fit(rows)
    assert "broadcast" not in cal["ops"] and "all_to_all" in cal["ops"]
    assert any("broadcast" in s for s in cal["skipped"])
    with pytest.raises(UsageError, match="two message sizes"):
        fit(rows[:2])


def test_single_rank_collectives_carry_no_information():
    rows = [_row("all_reduce", s, 1, 1e-6) for s in (1024, 4096)]
    with pytest.raises(UsageError):
        fit(rows)


def test_fit_takes_json_dicts_and_survives_save_and_load(tmp_path):
    rows = [
        _row("reduce_scatter", s, 2, _model_time("reduce_scatter", s, 2, 5e-6, 1e10)).to_dict()
        for s in (1 << 10, 1 << 20)
    ]
    cal = fit(rows, source="unit test")
    path = save(cal, tmp_path / "cal.json")
    assert load(path) == cal
    with pytest.raises(UsageError):
        load(tmp_path / "missing.json")


def test_calibration_changes_the_cost_models_collective_time(tmp_path):
    sizes = (1 << 12, 1 << 20, 1 << 24)
    rows = [_row("all_gather", s, 4, _model_time("all_gather", s, 4, 10e-6, 2e9)) for s in sizes]
    cal = fit(rows)
    base = Cluster("h100", num_devices=8)
    tuned = base.calibrate(cal)
    # fitted: 3 steps * 10 us + 16e6 B * 3/4 / 2e9 B/s = 3e-5 + 6e-3 = 6.03e-3 s
    assert tuned.collective_time("all_gather", 16e6, 4, "intra") == pytest.approx(6.03e-3)
    assert base.collective_time("all_gather", 16e6, 4, "intra") < 1e-3  # NVLink datasheet
    # ops and spans the calibration lacks keep the datasheet values
    assert tuned.collective_time("all_reduce", 16e6, 4, "intra") == base.collective_time(
        "all_reduce", 16e6, 4, "intra"
    )
    from_file = Cluster.from_calibration_file(
        save(cal, tmp_path / "c.json"), accelerator="h100", num_devices=8
    )
    assert from_file.collective_time("all_gather", 16e6, 4, "intra") == pytest.approx(6.03e-3)


def test_collectives_measured_with_another_backend_are_refused():
    """A gloo sweep (host TCP, e.g. on a laptop) priced as an H100 cluster's NVLink, or an NCCL
    one as Ascend's HCCS, would be off by orders of magnitude: the cluster refuses it, naming
    the run that measures the right thing; the fit records its backend."""
    sizes = (1 << 12, 1 << 20, 1 << 24)
    t = [_model_time("all_gather", s, 4, 10e-6, 2e9) for s in sizes]
    gloo = fit([_row("all_gather", s, 4, x, backend="gloo") for s, x in zip(sizes, t)])
    assert gloo["backend"] == "gloo"
    with pytest.raises(SpecError, match=r"measured with gloo.*h100.*nccl.*-m parastrat bench"):
        Cluster("h100", num_devices=8).calibrate(gloo)
    nccl = fit([_row("all_gather", s, 4, x) for s, x in zip(sizes, t)])
    with pytest.raises(SpecError, match="ascend-910b devices talk through hccl"):
        Cluster("ascend-910b", num_devices=8, calibration=nccl)
    assert Cluster("h100", num_devices=8, calibration=nccl).calibration.backend == "nccl"
    # a calibration without the key (written by hand, or before it was recorded) is taken
    unnamed = {k: v for k, v in gloo.items() if k != "backend"}
    assert Cluster("h100", num_devices=8).calibrate(unnamed).calibration.backend is None
    with pytest.raises(SpecError, match="'backend' must be one of"):
        Cluster("h100", num_devices=8).calibrate({**nccl, "backend": "mpi"})
    # rows of two backends would fit one blended line with no backend to check: refused
    mixed = [_row("all_gather", s, 4, x, backend="gloo") for s, x in zip(sizes, t)]
    mixed[0] = _row("all_gather", sizes[0], 4, t[0], backend="nccl")
    with pytest.raises(UsageError, match=r"2 backends \(gloo, nccl\).*each backend"):
        fit(mixed)


def _slow_inter_rows() -> list[Row]:
    """What a sweep across nodes with a poor network would measure: every op crossing nodes
    pays 1 ms per step and gets 0.1 GB/s of bus bandwidth (datasheet H100: 50 GB/s)."""
    rows = []
    for op in (
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "ring",
        "send_recv",
        "broadcast",
    ):
        rows += [
            _row(op, s, 16, _model_time(op, s, 16, 1e-3, 1e8), span="inter")
            for s in (1 << 16, 1 << 22, 1 << 26)
        ]
    return rows


def test_a_plan_changes_when_measured_inter_node_links_are_slow(tmp_path):
    from parastrat import plan
    from parastrat.cli import main

    cal = fit(_slow_inter_rows(), source="slow inter-node network")
    assert cal["ops"]["all_reduce"]["inter"]["busbw_Bps"] == pytest.approx(1e8, rel=1e-6)
    cluster = Cluster("h100", num_devices=32)  # 4 nodes of 8
    kwargs = dict(seq_len=4096, global_batch_size=256, top_k=1)
    default = plan("llama3-8b", cluster, **kwargs).best
    slow = plan("llama3-8b", cluster.calibrate(cal), **kwargs).best
    assert slow.strategy != default.strategy
    # gradients cross nodes once per step over DP: the planner shrinks DP when that is slow
    assert slow.strategy.dp < default.strategy.dp
    assert slow.step.step_time_s > default.step.step_time_s
    # and the saved file drives `parastrat plan --calibration` the same way
    path = save(cal, tmp_path / "slow.json")
    argv = [
        "plan",
        "--model",
        "llama3-8b",
        "--gpus",
        "32",
        "--accelerator",
        "h100",
        "--seq-len",
        "4096",
        "--global-batch-size",
        "256",
        "--top-k",
        "1",
        "--format",
        "json",
    ]
    outs = []
    for extra in ([], ["--calibration", str(path)]):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv + extra) == 0
        outs.append(json.loads(buf.getvalue())["candidates"][0]["strategy"])
    assert outs[0]["dp"] == default.strategy.dp and outs[1]["dp"] == slow.strategy.dp


@pytest.mark.parametrize(
    ("alpha", "busbw"), [(1e308, 1e9), (1e-5, 1e-300), (1e-5, 1e20), (2.0, 1e9)]
)
def test_unphysical_collective_values_are_refused(alpha, busbw):
    """Finite but absurd values priced steps at inf / NaN (plan crashed, JSON printed
    Infinity): a calibration is bounded to what links can do, and the error names the field."""
    cal = {"ops": {"all_reduce": {"intra": {"alpha_s": alpha, "busbw_Bps": busbw}}}}
    with pytest.raises(SpecError, match=r"ops\.all_reduce\.intra: alpha_s must be in"):
        Cluster("h100", num_devices=8).calibrate(cal)


def test_json_output_never_carries_infinity(capsys):
    from parastrat.cli._common import print_json

    with pytest.raises(UsageError, match="JSON cannot carry"):
        print_json({"step_time_s": float("inf")})
    assert capsys.readouterr().out == ""


def test_rows_faster_than_a_nanosecond_are_left_out_of_the_fit():
    """A hand-edited row with time_s 1e-300 made the fit divide by zero (1/t^2 underflows)."""
    sizes = (1 << 12, 1 << 20, 1 << 24)
    rows = [_row("all_gather", s, 4, _model_time("all_gather", s, 4, 10e-6, 2e9)) for s in sizes]
    rows.append(_row("all_gather", 1 << 22, 4, 1e-300))
    cal = fit(rows)
    assert cal["fit"]["all_gather"]["intra"]["points"] == 3
