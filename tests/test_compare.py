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
    c = compare(
        "tp=4,pp=8,vpp=5,sp",
        "tp=8,pp=4,sp",
        model="llama3-70b",
        cluster=H100,
        seq_len=8192,
        global_batch_size=256,
        precision="fp8",
    )
    assert c.changed["tp"] == (4, 8) and c.changed["pp"] == (8, 4)
    d = c.step_delta
    assert d["step_time_s"] == pytest.approx(c.step[1].step_time_s - c.step[0].step_time_s)
    assert d["tp"] > 0  # TP8 moves more bytes per layer than TP4 (same bytes, more hops)
    assert "TP" in c.cause or "bubble" in c.cause or "compute" in c.cause
    assert "cause:" in c.summary()
    assert c.to_dict()["changed"]["tp"] == [4, 8]


def test_compare_names_oom():
    c = compare(
        "tp=8,pp=4,sp",
        "tp=1,pp=1",
        model="llama3-70b",
        cluster=H100,
        seq_len=4096,
        global_batch_size=64,
        recompute="full",
    )
    assert "runs out of memory" in c.cause


def test_compare_different_pp_shows_each_pipeline():
    # A: PP 8 (10 layers per stage), B: PP 4 (20 layers per stage) on 64 H100s
    c = compare(
        "tp=4,pp=8,vpp=5,sp",
        "tp=4,pp=4,sp",
        model="llama3-70b",
        cluster=H100,
        seq_len=8192,
        global_batch_size=256,
        precision="fp8",
    )
    ma, mb = c.memory
    assert [st.layers for st in ma.stages] == [10] * 8
    assert [st.layers for st in mb.stages] == [20] * 4
    text = c.summary()
    # each side lists its own stages: 8 rows for A, 4 for B, no padded repeats
    assert "memory per stage of A (8 stages" in text and "memory per stage of B (4 stages" in text
    b_rows = text.split("memory per stage of B")[1].split("step:")[0].strip().splitlines()[1:]
    assert len(b_rows) == 4
    # the delta compares the two peak stages, named
    (row,) = c.memory_delta
    assert row["stage_a"] == ma.peak_stage.stage and row["stage_b"] == mb.peak_stage.stage
    assert row["total"] == pytest.approx(mb.peak_bytes - ma.peak_bytes)


def test_parse_strategy_split_flags():
    s = parse_strategy("tp=8,pp=8,vpp=8,sp,account_for_embedding,account_for_loss")
    assert s.account_for_embedding and s.account_for_loss
    assert s.stage_layers(126) == [15] + [16] * 6 + [15]  # (126 + 2) / 8 = 16 slots a stage


def test_parse_strategy_takes_layouts_and_fsdp_as_text():
    """A recipe's layout and an FSDP level can be compared from the command line: the
    DeepSeek-V3 H100 recipe's layout reaches the strategy whole (its placement is priced)."""
    s = parse_strategy("tp=2,pp=8,vpp=4,ep=64,sp,pipeline_layout=Et|(t*2|)*30mL")
    assert s.pipeline_layout == "Et|(t*2|)*30mL" and (s.pp, s.vpp, s.ep) == (8, 4, 64)
    assert parse_strategy("tp=2,dp_shard=4,fsdp=optim_grads_params").fsdp == "optim_grads_params"
    with pytest.raises(UsageError, match="whole number"):
        parse_strategy("tp=two")


def test_compare_prices_memory_with_the_step_switches():
    """A switch both models read (distributed optimizer off: full optimizer state on every
    rank) must change the memory compare reports, not only the step."""
    kw = dict(model="llama3-70b", cluster=H100, seq_len=8192, global_batch_size=256)
    on = compare("tp=4,pp=8,vpp=5,sp", "tp=8,pp=4,sp", **kw)
    off = compare("tp=4,pp=8,vpp=5,sp", "tp=8,pp=4,sp", distributed_optimizer=False, **kw)
    assert off.memory[0].peak_bytes > on.memory[0].peak_bytes
    with pytest.raises(UsageError, match="pair"):
        compare("tp=4,pp=8,sp", "tp=8,pp=4,sp", micro_batch_size=(1,), **kw)


def test_a_broken_side_is_named():
    """A rule broken by one of the two strategies says which one."""
    a = ps.Strategy(tp=8, pp=4, vpp=5, sp=True)
    with pytest.raises(ps.StrategyError, match=r"strategy b \(tp=3\)"):
        compare(
            a, "tp=3", cluster=ps.Cluster("h100", 64), model="llama3-70b", seq_len=4096,
            global_batch_size=128,
        )  # fmt: skip
