"""Hypothesis fuzzing of every file reader: whatever the bytes or the JSON, a reader returns a
valid object or raises a user error (SpecError/UsageError/StrategyError) naming the problem,
never anything else.  Budget: a few seconds per reader (``max_examples`` below; the
``PARASTRAT_THOROUGH=1`` profile of conftest.py runs far more).

Readers covered: Hugging Face config.json (``spec/hf.py``), calibrations
(``spec/cluster.py``, ``bench/calibrate.py``), benchmark rows (``bench/rows.py``), and the plan's
JSON/YAML (strategies read back with ``Strategy.from_dict``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat import Strategy
from parastrat.bench import fit
from parastrat.bench.calibrate import load as load_cal_file
from parastrat.bench.rows import Row, load_rows
from parastrat.errors import SpecError, StrategyError, UsageError
from parastrat.spec.cluster import Calibration, load_calibration

USER = (SpecError, UsageError, StrategyError)
HF = Path(__file__).parent / "data" / "hf"
CONFIGS = {p.stem: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))}
FAST = settings(
    max_examples=3000 if os.environ.get("PARASTRAT_THOROUGH") else 60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: JSON scalars a hostile or careless file holds: huge, negative, non-finite, mistyped.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**31, 10**9, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1e3", "32", "", "\x1b[31m", "nan", "llama", "rope", "\u0668"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "ops", "intra", "rows"]), inner, max_size=3),
    ),
    max_leaves=6,
)


def _dumps(obj) -> str:
    return json.dumps(obj, allow_nan=True)


@FAST
@given(
    base=st.sampled_from(sorted(CONFIGS)),
    changes=st.dictionaries(
        st.sampled_from(sorted({k for c in CONFIGS.values() for k in c}) + ["text_config"]),
        JSON,
        max_size=4,
    ),
)
def test_hf_config_reader(tmp_path_factory, base, changes):
    cfg = {**CONFIGS[base], **changes}
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(_dumps(cfg))
    try:
        spec = ps.ModelSpec.from_hf_config(path)
    except USER:
        return
    assert spec.num_params > 0 and spec.num_layers >= 1
    assert "\x1b" not in spec.name


@FAST
@given(data=st.binary(max_size=256))
def test_every_reader_on_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "input.json"
    path.write_bytes(data)
    for read in (ps.ModelSpec.from_hf_config, load_calibration, load_cal_file, load_rows):
        try:
            read(path)
        except USER as exc:
            assert "input.json" in str(exc) or "config" in str(exc)


CAL_VALUES = st.one_of(SCALARS, st.floats(1e-9, 1e-3), st.floats(1e8, 1e13))


@FAST
@given(
    ops=st.dictionaries(
        st.sampled_from(["all_reduce", "all_gather", "ring", "bogus"]),
        st.dictionaries(
            st.sampled_from(["intra", "inter", "x"]),
            st.one_of(
                JSON,
                st.fixed_dictionaries({"alpha_s": CAL_VALUES, "busbw_Bps": CAL_VALUES}),
            ),
            max_size=2,
        ),
        max_size=3,
    ),
    kernels=st.one_of(st.none(), JSON),
)
def test_calibration_reader(tmp_path_factory, ops, kernels):
    doc = {"ops": ops, **({"kernels": kernels} if kernels is not None else {})}
    path = tmp_path_factory.mktemp("cal") / "cal.json"
    path.write_text(_dumps(doc))
    try:
        cal = load_calibration(path)
    except USER:
        return
    for spans in cal.ops.values():
        for alpha, bw in spans.values():
            assert math.isfinite(alpha) and alpha >= 0
            assert math.isfinite(bw) and bw > 0
    cluster = ps.Cluster("h100", 16, calibration=cal)
    for op in cal.ops:
        t = cluster.collective_time(op, 2**20, 16)
        assert math.isfinite(t) and t >= 0


ROW = {
    "op": "all_reduce",
    "bytes": 1024,
    "world": 2,
    "time_s": 1e-5,
    "time_min_s": 1e-5,
    "time_max_s": 1e-5,
    "algbw_gbps": 0.1,
    "busbw_gbps": 0.1,
    "iters": 1,
    "backend": "gloo",
    "dtype": "float32",
}


@FAST
@given(
    rows=st.lists(
        st.one_of(
            JSON,
            st.dictionaries(st.sampled_from(sorted(ROW)), JSON, max_size=3).map(
                lambda ch: {**ROW, **ch}
            ),
        ),
        max_size=4,
    ),
    wrap=st.booleans(),
)
def test_bench_rows_reader_and_fit(tmp_path_factory, rows, wrap):
    path = tmp_path_factory.mktemp("rows") / "rows.json"
    path.write_text(_dumps({"rows": rows} if wrap else rows))
    try:
        table = load_rows(path)
    except USER:
        return
    for r in table:
        assert isinstance(r, Row) and isinstance(r.world, int) and r.bytes >= 1
        assert math.isfinite(r.time_s)
    try:
        cal = fit(table)
    except USER:
        return
    Calibration.from_dict(cal)


@FAST
@given(
    doc=st.one_of(
        JSON,
        st.dictionaries(
            st.sampled_from(
                [
                    "tp",
                    "pp",
                    "vpp",
                    "cp",
                    "ep",
                    "etp",
                    "sp",
                    "ulysses",
                    "ring",
                    "cfg",
                    "order",
                    "dp",
                ]
            ),
            SCALARS,
            max_size=5,
        ),
    )
)
def test_strategy_reader(doc):
    try:
        s = Strategy.from_dict(doc)
    except USER:
        return
    assert Strategy.from_dict(s.to_dict()) == s


def test_plan_json_and_yaml_read_back(capsys):
    """The plan's JSON and YAML say the same, and each candidate's strategy reads back."""
    from parastrat.cli import main

    argv = ["plan", "--model", "mixtral-8x7b", "--gpus", "32", "--top-k", "3"]
    assert main([*argv, "--format", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*argv, "--format", "yaml"]) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    assert as_json == as_yaml
    for c in as_json["candidates"]:
        s = Strategy.from_dict(c["strategy"])
        assert s.to_dict() == c["strategy"] or Strategy.from_dict(s.to_dict()) == s
