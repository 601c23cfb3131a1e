"""compare(): term-by-term differences and the cause."""

import pytest

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.planner.compare import compare, parse_strategy

H100 = ps.Cluster("h100", num_devices=64)


def test_parse_strategy():
    s = parse_strategy("tp=4,pp=2,vpp=5,sp")
    assert (s.tp, s.pp, s.vpp, s.sp) == (4, 2, 5, True)
    with pytest.raises(UsageError):
        parse_strategy("tq=4")


def test_compare_deltas_and_cause():
    c = compare("tp=4,pp=8,vpp=5,sp", "tp=8,pp=4,sp", model="llama3-70b", cluster=H100,
                seq_len=8192, global_batch_size=256, precision="fp8")
    assert c.changed["tp"] == (4, 8) and c.changed["pp"] == (8, 4)
    d = c.step_delta
    assert d["step_time_s"] == pytest.approx(c.step[1].step_time_s - c.step[0].step_time_s)
    assert d["tp"] > 0  # TP8 moves more bytes per layer than TP4 (same bytes, more hops)
    assert "TP" in c.cause or "bubble" in c.cause or "compute" in c.cause
    assert "cause:" in c.summary()
    assert c.to_dict()["changed"]["tp"] == [4, 8]


def test_compare_names_oom():
    c = compare("tp=8,pp=4,sp", "tp=1,pp=1", model="llama3-70b", cluster=H100, seq_len=4096,
                global_batch_size=64, recompute="full")
    assert "runs out of memory" in c.cause
