"""``parastrat bench`` on 4 local gloo ranks, and the measured calibration round trip."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from parastrat.bench import load_rows
from parastrat.cli import main
from parastrat.errors import SpecError
from parastrat.spec.cluster import Cluster, bus_factor

OPS = "all_reduce,all_gather,reduce_scatter,all_to_all,ring,send_recv,broadcast"
FIELDS = {
    "op",
    "bytes",
    "world",
    "time_s",
    "time_min_s",
    "time_max_s",
    "algbw_gbps",
    "busbw_gbps",
    "iters",
    "backend",
    "dtype",
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One real 4-rank sweep through the CLI: JSON on stdout, rows, plot and calibration files."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("bench")
    files = {"rows": out / "rows.json", "plot": out / "busbw.png", "fit": out / "cal.json"}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(
            [
                "bench",
                "--world",
                "4",
                "--ops",
                OPS,
                "--sizes",
                "4KB:256KB:x8",
                "--iters",
                "3",
                "--warmup",
                "1",
                "--format",
                "json",
                "--output",
                str(files["rows"]),
                "--plot",
                str(files["plot"]),
                "--fit",
                str(files["fit"]),
                "--timeout",
                "120",
            ]
        )
    return status, buf.getvalue(), files


@pytest.mark.multiprocess
def test_cli_json_rows_have_every_field_and_nccl_tests_bandwidths(sweep):
    status, stdout, _ = sweep
    assert status == 0
    rows = json.loads(stdout)  # exactly one JSON document on stdout
    assert {(r["op"], r["bytes"]) for r in rows} == {
        (op, s) for op in OPS.split(",") for s in (4096, 32768, 262144)
    }
    for r in rows:
        assert set(r) >= FIELDS
        assert (r["world"], r["iters"], r["backend"], r["dtype"]) == (4, 3, "gloo", "float32")
        assert r["time_min_s"] <= r["time_s"] <= r["time_max_s"]
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor(r["op"], 4))


@pytest.mark.multiprocess
def test_cli_writes_rows_plot_and_a_calibration_the_cost_model_takes(sweep):
    _, stdout, files = sweep
    assert [r.to_dict() for r in load_rows(files["rows"])] == json.loads(stdout)
    assert files["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cal = json.loads(files["fit"].read_text())
    assert set(cal["ops"]) == set(OPS.split(","))
    # a gloo sweep is no measurement of an H100 cluster's NCCL: refused, naming the run that is
    assert cal["backend"] == "gloo"
    with pytest.raises(SpecError, match="measured with gloo"):
        Cluster.from_calibration_file(files["fit"], accelerator="h100", num_devices=8)
    # without the key (a what-if): the cluster's collective time follows the measurement
    base = Cluster("h100", num_devices=8)
    tuned = base.calibrate({k: v for k, v in cal.items() if k != "backend"})
    for op in OPS.split(","):
        alpha, busbw = cal["ops"][op]["intra"]["alpha_s"], cal["ops"][op]["intra"]["busbw_Bps"]
        assert tuned.collective_params(op, "intra") == (alpha, busbw)
        assert tuned.collective_time(op, 1 << 20, 4, "intra") != base.collective_time(
            op, 1 << 20, 4, "intra"
        )
    # gloo on a shared CPU is orders of magnitude below NVLink's datasheet bandwidth
    assert tuned.collective_params("all_reduce", "intra")[1] < base.link("intra")[1] / 10


@pytest.mark.multiprocess
def test_cli_strategy_run_on_local_ranks(capsys):
    pytest.importorskip("torch")
    status = main(
        [
            "bench",
            "--world",
            "2",
            "--tp",
            "2",
            "--sp",
            "--sizes",
            "4KB",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--format",
            "csv",
        ]
    )
    assert status == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines[0].split(",")
    got = [dict(zip(header, line.split(","))) for line in lines[1:]]
    assert [(g["group"], g["op"], g["world"]) for g in got] == [
        ("tp", "all_gather", "2"),
        ("tp", "reduce_scatter", "2"),
    ]


def _cli_as_torchrun_rank(rank: int, world: int) -> tuple[int, str]:
    """One rank of a torchrun-style launch: WORLD_SIZE is set, --world is not."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(
            [
                "bench",
                "--ops",
                "all_reduce,send_recv",
                "--sizes",
                "4KB",
                "--iters",
                "2",
                "--warmup",
                "1",
                "--format",
                "json",
            ]
        )
    return status, buf.getvalue()


@pytest.mark.multiprocess
def test_cli_under_torchrun_uses_the_launched_world_and_only_rank_0_prints():
    pytest.importorskip("torch")
    from parastrat.runtime.launch import spawn_local

    # backend=None: the ranks only get torchrun's environment; the CLI starts the group itself
    (s0, out0), (s1, out1) = spawn_local(_cli_as_torchrun_rank, 2, backend=None, timeout_s=120)
    assert (s0, s1) == (0, 0) and out1 == ""
    rows = json.loads(out0)
    assert [(r["op"], r["world"], r["backend"]) for r in rows] == [
        ("all_reduce", 2, "gloo"),
        ("send_recv", 2, "gloo"),
    ]


def test_cli_reads_earlier_rows_to_print_plot_and_fit(tmp_path, capsys):
    rows = [
        {
            "op": "ring",
            "bytes": b,
            "world": 2,
            "time_s": t,
            "time_min_s": t,
            "time_max_s": t,
            "algbw_gbps": b / t / 1e9,
            "busbw_gbps": b / t / 1e9,
            "iters": 1,
            "backend": "nccl",
            "dtype": "bfloat16",
            "span": "inter",
        }
        # alpha 10 us, 25 GB/s: 10e-6 + S / 25e9
        for b, t in ((1 << 10, 10e-6 + 1024 / 25e9), (1 << 26, 10e-6 + (1 << 26) / 25e9))
    ]
    src = tmp_path / "rows.json"
    src.write_text(json.dumps({"rows": rows}))
    assert main(["bench", "--load", str(src), "--fit", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr()
    assert "ring" in out.out and "busbw" in out.out
    cal = json.loads((tmp_path / "c.json").read_text())
    assert cal["ops"]["ring"]["inter"]["busbw_Bps"] == pytest.approx(25e9)
    assert cal["ops"]["ring"]["inter"]["alpha_s"] == pytest.approx(10e-6)

    # a collective fit into a file holding measured kernel constants keeps them
    from parastrat.bench.kernels import kernel_calibration

    both = tmp_path / "both.json"
    both.write_text(json.dumps(kernel_calibration("h100", {"bf16": 600e12}, host_op_s=1.4e-5)))
    assert main(["bench", "--load", str(src), "--fit", str(both)]) == 0
    kept = json.loads(both.read_text())
    assert kept["kernels"]["host_op_s"] == pytest.approx(1.4e-5)
    assert kept["ops"]["ring"]["inter"]["busbw_Bps"] == pytest.approx(25e9)

    # --ops picks loaded rows (names checked); flags that shape a sweep are refused
    assert main(["bench", "--load", str(src), "--ops", "nope"]) == 2
    assert main(["bench", "--load", str(src), "--ops", "all_reduce"]) == 2  # none of them
    assert main(["bench", "--load", str(src), "--ops", "ring", "--format", "json"]) == 0
    capsys.readouterr()
    for flags in (["--world", "2"], ["--tp", "2"], ["--model", "llama3-8b"]):
        assert main(["bench", "--load", str(src), *flags]) == 2
        assert "--load reads rows already measured" in capsys.readouterr().err
    # two outputs on one file, or an output over the rows it reads: refused, nothing written
    same = tmp_path / "same.json"
    assert main(["bench", "--load", str(src), "--fit", str(same), "--output", str(same)]) == 2
    assert not same.exists() and "name the same file" in capsys.readouterr().err
    before = src.read_text()
    assert main(["bench", "--load", str(src), "--output", str(src), "--format", "csv"]) == 2
    assert src.read_text() == before


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--sizes", "4XB"], "message size"),
        (["--ops", "all_reduce,allreduce"], "unknown op"),
        (["--world", "1", "--ops", "ring"], "at least 2 ranks"),
        (["--tp", "3", "--world", "4"], "tp"),
        # an op the strategy's run does not time: named with the ones it does, not a silent
        # exit 1 after the whole sweep
        (["--tp", "2", "--world", "2", "--ops", "all_to_all"], "times all_gather, all_reduce"),
    ],
)
def test_cli_user_errors_exit_2_before_spawning(argv, needle, capsys):
    assert main(["bench", *argv]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, needle",
    [
        # one message size (or the model's one size per op) cannot be fitted: said before
        # the sweep, not after it
        (["--world", "2", "--ops", "all_reduce", "--sizes", "4KB", "--fit", "c.json"], "gives one"),
        (["--tp", "2", "--model", "llama3-8b", "--seq-len", "4096", "--fit", "c.json"], "--sizes"),
        # --kernels measures kernels: the collective sweep's flags are refused, not ignored
        (["--kernels", "--accelerator", "h100", "--world", "4", "--ops", "ring"], "--ops, --world"),
        (["--kernels", "--accelerator", "h100", "--output", "r.json"], "--output"),
    ],
)
def test_what_would_fail_after_the_measurement_is_refused_before_it(
    argv, needle, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_kernels_refuse_a_corrupt_calibration_to_merge_into_before_measuring(
    capsys, tmp_path, monkeypatch
):
    import parastrat.bench.kernels as kernels

    measured = []
    monkeypatch.setattr(kernels, "check_device", lambda *a, **kw: measured.append(1) or "cpu")
    bad = tmp_path / "cal.json"
    bad.write_text('{"ops": ')
    line = ["bench", "--kernels", "--accelerator", "h100", "--gemm-size", "64", "--fit", str(bad)]
    assert main(line) == 2
    assert "not valid JSON" in capsys.readouterr().err and not measured
    assert bad.read_text() == '{"ops": '


def test_a_failed_local_sweep_prints_one_json_error_document(capsys):
    """A rank that fails (here: the whole sweep past a 1 s timeout) exits 1 with one JSON
    error document on stdout under ``--format json``, the reason on stderr."""
    line = ["bench", "--world", "2", "--ops", "all_reduce", "--sizes", "64MB", "--iters", "50"]
    assert main([*line, "--timeout", "1", "--format", "json"]) == 1
    out = capsys.readouterr()
    error = json.loads(out.out)["error"]
    assert error["kind"] == "rank-failure" and "timed out" in error["message"]
    assert "benchmark failed" in out.err


def test_load_refuses_flags_that_only_shape_a_sweep(tmp_path, capsys):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps({"rows": []}))
    assert main(["bench", "--load", str(rows), "--span", "inter"]) == 2
    assert "--span" in capsys.readouterr().err


def test_seq_len_without_a_model_is_refused(capsys):
    assert main(["bench", "--world", "2", "--tp", "2", "--seq-len", "100"]) == 2
    assert "--model" in capsys.readouterr().err
