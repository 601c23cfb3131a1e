"""What a prediction hangs on: each physical constant 10 % worse, the strategy priced again."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.planner.sensitivity import (
    KNOBS,
    WORSE,
    Sensitivity,
    sensitivity,
    sensitivity_lines,
)
from parastrat.spec.workload import resolve

CASES = [
    ("llama3-70b", "h100", 64, ps.Strategy(tp=4, pp=8, vpp=5, sp=True)),
    ("qwen3-30b-a3b", "h100", 16, ps.Strategy(ep=8)),
    ("llama3-8b", "gb200", 8, ps.Strategy()),
    ("mixtral-8x7b", "b200", 16, ps.Strategy(tp=2, ep=8, sp=True)),
]


def _run(preset, accel, n, strategy, cluster=None, **kw):
    wl, sw = resolve(preset, None, None, who="test", seq_len=4096, global_batch_size=128, **kw)
    return sensitivity(wl, strategy, cluster or ps.Cluster(accel, num_devices=n), sw)


@pytest.mark.parametrize("preset, accel, n, strategy", CASES)
def test_a_worse_constant_never_shortens_the_step_nor_more_than_its_own_share(
    preset, accel, n, strategy
):
    got = _run(preset, accel, n, strategy, micro_batch_size=1)
    assert {x.key for x in got} == {k.key for k in KNOBS}
    # a rate 10 % lower stretches at most the whole step by 1/0.9; a host time 10 % higher
    # at most by 1.1
    bound = 1 / (1 - WORSE) - 1 + 1e-9
    assert all(0 <= x.step_change <= bound for x in got), got
    assert [x.step_change for x in got] == sorted((x.step_change for x in got), reverse=True)


def test_a_dense_model_on_one_tp_pp_grid_hangs_on_its_gemms():
    got = _run(*CASES[0], micro_batch_size=1)
    assert got[0].key == "gemm_eff" and 0.05 < got[0].step_change < 0.111
    assert got[0].value == "0.68 of the bf16 peak"
    assert got[0].measure.startswith("parastrat bench --kernels --accelerator h100")


def test_a_one_node_job_does_not_hang_on_the_scale_out_link():
    got = {x.key: x for x in _run(*CASES[2], micro_batch_size=1)}
    assert got["inter_bw"].step_change == 0.0
    assert got["inter_bw"].measure.startswith("parastrat bench --span inter")


def test_an_expert_parallel_job_across_nodes_hangs_on_the_scale_out_link():
    got = {x.key: x for x in _run(*CASES[3], micro_batch_size=1)}
    assert got["inter_bw"].step_change > 0.005


def test_it_builds_on_a_calibration_the_cluster_already_has():
    cal = {
        "ops": {"all_to_all": {"intra": {"alpha_s": 5e-6, "busbw_Bps": 1e11}}},
        "kernels": {"gemm_eff": {"bf16": 0.5}},
    }
    cluster = ps.Cluster("h100", num_devices=16).calibrate(cal)
    got = {x.key: x for x in _run(*CASES[1][:3], CASES[1][3], cluster, micro_batch_size=1)}
    assert got["gemm_eff"].value == "0.50 of the bf16 peak"
    assert "100/370 GB/s" in got["intra_bw"].value  # the measured all-to-all and the links'
    assert got["gemm_eff"].measured and got["intra_bw"].measured
    assert not got["mem_eff"].measured and not got["inter_bw"].measured


def test_measure_first_names_the_first_constant_not_yet_measured():
    items = [
        Sensitivity("gemm_eff", "GEMM rate", "0.61", 0.09, "bench K", measured=True),
        Sensitivity("intra_bw", "scale-up link", "370 GB/s", 0.02, "bench L"),
    ]
    text = "\n".join(sensitivity_lines(items))
    assert "GEMM rate (0.61, measured) +9.0%" in text and "measure first: bench L" in text
    done = "\n".join(sensitivity_lines(items[:1]))
    assert "measure first" not in done and "every constant shown is from the calibration" in done


def test_lines_name_what_moves_the_step_and_what_to_measure_first():
    items = [
        Sensitivity("gemm_eff", "GEMM rate", "0.68 of the bf16 peak", 0.094, "bench A"),
        Sensitivity("attn_eff", "attention rate", "0.52", 0.01, "bench A"),
        Sensitivity("host_op_s", "host time", "13.5 us", 0.0001, "bench A"),
    ]
    text = "\n".join(sensitivity_lines(items))
    assert "GEMM rate (0.68 of the bf16 peak) +9.4%; attention rate (0.52) +1.0%" in text
    assert "the rest < 0.5%" in text and "host time" not in text
    assert "measure first: bench A" in text
    quiet = sensitivity_lines([items[2]])
    assert quiet == ["sensitivity: no constant 10% worse moves this step by 0.5% or more"]
    assert sensitivity_lines([]) == []  # a hand-built plan, no workload: nothing priced


def test_explain_and_plan_show_it(capsys):
    args = ["--model", "llama3-70b", "--gpus", "64", "--accelerator", "h100"]
    args += ["--seq-len", "4096", "--global-batch-size", "128"]
    flags = ["--tp", "4", "--pp", "8", "--vpp", "5", "--sp"]
    assert main(["explain", *args, *flags, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [x["key"] for x in doc["sensitivity"]][0] == "gemm_eff"
    assert main(["explain", *args, *flags]) == 0
    assert "sensitivity (each constant 10% worse, alone): GEMM rate" in capsys.readouterr().out
    assert main(["plan", *args, "--top-k", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["sensitivity"]) == len(KNOBS)
    assert len(doc["robustness"]["leads"]) == 2 * len(KNOBS)


def test_a_measured_attention_rate_reaches_the_dit_model():
    """A calibration's ``attn_eff`` scales the DiT forward-attention figure by its ratio to the
    preset's (it used to be read only by the training model)."""
    from parastrat.estimate.dit import estimate_dit
    from parastrat.estimate.efficiency import profile

    kw = dict(height=720, width=1280, frames=129, steps=50)
    s = ps.Strategy(ulysses=8)
    cluster = ps.Cluster("h100", num_devices=8)
    base = estimate_dit("hunyuanvideo", s, cluster, **kw).breakdown["attention"]
    slower = cluster.calibrate(
        {"ops": {}, "kernels": {"attn_eff": profile(cluster.accel).attn_eff * 0.9}}
    )
    got = estimate_dit("hunyuanvideo", s, slower, **kw).breakdown["attention"]
    assert got == pytest.approx(base / 0.9)


def test_plan_dit_names_what_its_best_latency_hangs_on():
    plan = ps.plan_dit(
        "hunyuanvideo",
        ps.Cluster("h100", num_devices=8),
        height=720,
        width=1280,
        frames=129,
        steps=50,
    )
    first = plan.sensitivity[0]
    assert first.key == "attn_eff" and first.value == "0.35 of the bf16 peak, forward"
    assert 0.05 < first.step_change < 0.111
    assert "sensitivity (each constant 10% worse, alone): attention rate" in plan.explain()
    assert [x["key"] for x in plan.to_dict()["sensitivity"]][0] == "attn_eff"


def test_a_host_time_at_the_calibration_limit_stays_a_calibration():
    """10 % more than the largest host time a calibration takes is capped, not refused."""
    cluster = ps.Cluster("h100", num_devices=16).calibrate(
        {"ops": {}, "kernels": {"host_op_s": 0.01}}
    )
    got = {x.key: x for x in _run(*CASES[1][:3], CASES[1][3], cluster, micro_batch_size=1)}
    assert got["host_op_s"].step_change == 0.0 and got["host_op_s"].value == "10000.0 us"


def test_a_measured_forward_attention_rate_is_what_the_dit_sensitivity_moves():
    cluster = ps.Cluster("h100", num_devices=8).calibrate(
        {"ops": {}, "kernels": {"attn_fwd_eff": 0.3}}
    )
    plan = ps.plan_dit("hunyuanvideo", cluster, height=720, width=1280, frames=129, steps=50)
    attn = {x.key: x for x in plan.sensitivity}["attn_eff"]
    assert attn.value == "0.30 of the bf16 peak, forward" and attn.step_change > 0.05


def test_a_ranking_check_says_whether_the_order_survives_the_constants():
    from parastrat.planner.sensitivity import RankingCheck

    holds = RankingCheck(0.10, (("GEMM rate", "worse", 0.08), ("scale-out link", "better", 0.12)))
    assert not holds.flips
    assert holds.summary("A", "B") == (
        "B is 10.0% slower than A as priced (+8.0% to +12.0% with any one constant 10% "
        "worse or better); it stays slower under every one"
    )
    flips = RankingCheck(-0.02, (("GEMM rate", "worse", -0.03), ("scale-out link", "worse", 0.01)))
    assert flips.flips == (("scale-out link", "worse", 0.01),)
    assert flips.summary().endswith("it turns slower with the scale-out link 10% worse")
    assert flips.to_dict()["order_holds"] is False


def test_compare_and_plan_check_their_order_against_the_constants(capsys):
    from parastrat.planner.explain import choice_robustness

    cmp = ps.compare(
        "TP1 PP1 CP1 EP8 ETP1 DP16",
        "TP1 PP1 CP1 EP16 ETP1 DP16",
        cluster=ps.Cluster("h100", num_devices=16),
        model="qwen3-30b-a3b",
        seq_len=4096,
        global_batch_size=1024,
        micro_batch_size=1,
    )
    assert cmp.ranking is not None and cmp.ranking.lead > 0.3 and not cmp.ranking.flips
    assert len(cmp.ranking.leads) == 2 * len(KNOBS)
    assert "robustness: B is" in cmp.summary() and cmp.to_dict()["ranking"]["order_holds"]
    plan = ps.plan(
        "llama3-70b",
        ps.Cluster("h100", num_devices=16),
        seq_len=4096,
        global_batch_size=64,
        top_k=2,
    )
    robust = choice_robustness(plan)
    assert robust is not None and robust.lead > 0.02  # #2 clearly slower: the line is shown
    assert f"robustness: {robust.summary('#1', '#2')}" in plan.explain()


def test_a_ranking_check_names_the_host_cost_that_reverses_it():
    from parastrat.planner.sensitivity import RankingCheck

    check = RankingCheck(-0.3, (("GEMM rate", "worse", -0.31),), 27e-6, 13.5e-6)
    assert check.summary("A", "B").endswith(
        "; it turns slower if a host operation costs 27 us or more (priced at 13.5 us; "
        "parastrat bench --kernels measures it)"
    )
    assert check.to_dict()["host_break_even_s"] == 27e-6
    assert "host operation" not in RankingCheck(-0.3, check.leads, None, 13.5e-6).summary()


def test_the_host_break_even_is_where_the_order_really_turns():
    """Qwen3-235B-A22B on 256 H100: intra-node EP 8 (16 local experts a GPU) priced ahead of
    the cross-node EP 32 the Model Zoo measured faster; the lead hangs on the host constant,
    and at the break-even it turns (benchmarks/moe_layouts.py)."""
    from parastrat.planner.sensitivity import _kernels, host_break_even, step_cost

    cluster = ps.Cluster("h100", num_devices=256)
    wl, sw = resolve(
        "qwen3-235b-a22b", None, None, who="test", seq_len=4096, global_batch_size=2048
    )
    wl = wl.with_micro_batch(1)
    emb = dict(account_for_embedding=True, account_for_loss=True)
    ep32 = ps.Strategy(tp=2, pp=8, vpp=4, ep=32, sp=True, **emb).with_world_size(256)
    ep8 = ps.Strategy(tp=4, pp=8, vpp=4, ep=8, sp=True, **emb).with_world_size(256)
    a, b = step_cost(wl, ep32, sw), step_cost(wl, ep8, sw)
    assert b(cluster) < a(cluster)  # EP 8 priced faster at the model's 13.5 us
    even = host_break_even(a, b, cluster)
    assert even is not None and 13.5e-6 < even < 8 * 13.5e-6

    def lead(host: float) -> float:
        c = cluster.calibrate(_kernels(cluster, host_op_s=host))
        return b(c) / a(c) - 1

    assert lead(0.97 * even) < 0 < lead(1.03 * even)


def test_an_order_the_host_cannot_move_has_no_break_even():
    from parastrat.planner.sensitivity import host_break_even, step_cost

    cluster = ps.Cluster("h100", num_devices=64)
    wl, sw = resolve("llama3-70b", None, None, who="test", seq_len=8192, global_batch_size=256)
    wl = wl.with_micro_batch(1)
    good = ps.Strategy(tp=4, pp=8, vpp=5, sp=True).with_world_size(64)
    bad = ps.Strategy(tp=8, pp=8, sp=True).with_world_size(64)  # no VPP: a large bubble
    assert host_break_even(step_cost(wl, good, sw), step_cost(wl, bad, sw), cluster) is None
