"""Benchmark rows: size parsing, nccl-tests' bandwidth definitions, JSON/CSV round trips.

Pure Python: no process is started here.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from parastrat.bench import OPS, Row, parse_sizes, rows_from_json, rows_to_csv, rows_to_json
from parastrat.bench.rows import MAX_MESSAGE_BYTES, format_bytes, parse_size, summarize
from parastrat.errors import UsageError
from parastrat.spec.cluster import bus_factor


def test_importing_bench_does_not_import_torch():
    code = (
        "import sys, parastrat.bench as b; b.parse_sizes('1MB'); "
        "sys.exit(1 if 'torch' in sys.modules or 'matplotlib' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_ops_are_the_cost_models_ops():
    assert set(OPS) == {
        "all_to_all",
        "ring",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "send_recv",
    }


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4KB,1MB,64MB", [4 * 1024, 1024**2, 64 * 1024**2]),
        ("1KB:64KB:x4", [1024, 4096, 16384, 65536]),  # 1K * 4^k up to 64K
        ("1KB:8KB", [1024, 2048, 4096, 8192]),  # default factor 2
        ("512, 1.5KB ,2g", [512, 1536, 2 * 1024**3]),  # plain bytes, decimals, lower case
        ("8K:8K:x2", [8192]),
        ("1MB,1MB,4KB", [4096, 1048576]),  # sorted, unique
    ],
)
def test_parse_sizes(text, expected):
    assert parse_sizes(text) == expected


@pytest.mark.parametrize("bad", ["", "4XB", "1KB:64KB:x1", "64KB:1KB", "1:2:3:4", "abc", "0.1"])
def test_parse_sizes_rejects_bad_input_with_a_usage_error(bad):
    with pytest.raises(UsageError):
        parse_sizes(bad)


@given(lo=st.integers(1, 1 << 20), span=st.integers(0, 12), factor=st.sampled_from([2, 3, 4, 8]))
def test_size_range_is_geometric_and_stays_inside(lo, span, factor):
    hi = lo * factor**span
    assume(hi <= MAX_MESSAGE_BYTES)  # larger messages are refused (test_bounds.py)
    sizes = parse_sizes(f"{lo}:{hi}:x{factor}")
    assert sizes[0] == lo and sizes[-1] <= hi
    assert len(sizes) == span + 1
    for a, b in itertools.pairwise(sizes):
        assert b == a * factor


@pytest.mark.parametrize(
    "op, n, factor",
    [
        ("all_reduce", 8, 1.75),  # 2 (n - 1) / n = 14 / 8
        ("all_reduce", 2, 1.0),  # 2 * 1 / 2
        ("all_gather", 8, 0.875),  # (n - 1) / n = 7 / 8
        ("reduce_scatter", 2, 0.5),  # 1 / 2
        ("all_to_all", 4, 0.75),  # 3 / 4
        ("broadcast", 16, 1.0),
        ("ring", 4, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factor_is_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_row_bandwidths_follow_nccl_tests_definitions():
    # all_reduce of S = 8e6 bytes on 4 ranks; times 4, 2, 3 ms -> median 3 ms
    # algbw = 8e6 B / 3e-3 s = 2.667e9 B/s = 2.667 GB/s; busbw = algbw * 2*3/4 = 4.0 GB/s
    r = Row.from_times(
        "all_reduce", 8_000_000, 4, [0.004, 0.002, 0.003], backend="gloo", dtype="float32"
    )
    assert (r.time_s, r.time_min_s, r.time_max_s) == (0.003, 0.002, 0.004)
    assert r.algbw_gbps == pytest.approx(8 / 3)
    assert r.busbw_gbps == pytest.approx(4.0)
    assert r.iters == 3
    # all_gather, 8 ranks, S = 8e6 B in 1 ms: algbw 8 GB/s, busbw 8 * 7/8 = 7 GB/s
    g = Row.from_times("all_gather", 8_000_000, 8, [0.001, 0.001], backend="nccl", dtype="bfloat16")
    assert (g.algbw_gbps, g.busbw_gbps) == (pytest.approx(8.0), pytest.approx(7.0))
    # send_recv: busbw == algbw (factor 1); 1e6 B in 0.5 ms -> 2 GB/s
    p = Row.from_times("send_recv", 1_000_000, 2, [0.0005], backend="gloo", dtype="float32")
    assert p.busbw_gbps == pytest.approx(p.algbw_gbps) == pytest.approx(2.0)


def test_summarize_median_of_even_count_is_the_mean_of_the_middle_two():
    assert summarize([4.0, 1.0, 3.0, 2.0]) == (2.5, 1.0, 4.0)


def test_row_needs_timed_iterations():
    with pytest.raises(UsageError):
        Row.from_times("ring", 1024, 2, [], backend="gloo", dtype="float32")


def _rows():
    return [
        Row.from_times(op, 4096 * (i + 1), 4, [1e-4 * (i + 1)], backend="gloo", dtype="float32")
        for i, op in enumerate(OPS)
    ]


def test_json_round_trip_as_list_and_as_rows_object():
    rows = _rows()
    as_list = json.loads(json.dumps(rows_to_json(rows)))
    assert rows_from_json(as_list) == rows
    assert rows_from_json({"rows": as_list}) == rows
    with pytest.raises(UsageError):
        rows_from_json({"not rows": 1})
    with pytest.raises(UsageError):
        rows_from_json([{"op": "ring"}])  # the message names the missing fields


def test_csv_has_a_header_and_one_line_per_row():
    text = rows_to_csv(_rows())
    lines = text.strip().splitlines()
    assert lines[0].split(",")[:4] == ["op", "bytes", "world", "time_s"]
    assert len(lines) == 1 + len(OPS)


def test_format_bytes():
    assert [format_bytes(b) for b in (512, 1024, 1536, 1048576, 3 * 1024**3)] == [
        "512B",
        "1KB",
        "1.5KB",
        "1MB",
        "3GB",
    ]
    assert parse_size(format_bytes(64 * 1024**2)) == 64 * 1024**2


def test_bad_sizes_rows_and_files_are_usage_errors(tmp_path):
    from parastrat.bench.rows import Row, load_rows, parse_sizes
    from parastrat.errors import UsageError

    assert parse_sizes(4096) == [4096]
    for bad in (0, -5):
        with pytest.raises(UsageError, match="size"):
            parse_sizes(bad)
    with pytest.raises(UsageError, match="cannot read"):
        load_rows(str(tmp_path))  # a folder, not a file
    with pytest.raises(UsageError, match="JSON object"):
        Row.from_dict([1])  # type: ignore[arg-type]


def test_csv_rows_load_back_as_written(tmp_path):
    """``--output rows.csv`` (CSV) reads back with ``--load`` as the same rows; a value that
    does not read is refused naming its field, as in JSON."""
    from parastrat.bench.rows import load_rows

    rows = [
        Row.from_times("all_reduce", 4096, 4, [1e-4, 2e-4, 3e-4], backend="gloo", dtype="float32"),
        Row.from_times("ring", 1 << 20, 2, [5e-3], backend="gloo", dtype="float32", span="inter"),
    ]
    path = tmp_path / "rows.csv"
    path.write_text(rows_to_csv(rows))
    assert load_rows(str(path)) == rows
    path.write_text(rows_to_csv(rows).replace(",4,", ",four,", 1))
    with pytest.raises(UsageError, match="world"):
        load_rows(str(path))
