"""Third DiT audit: the model list's DiT sizes are the single view's and what plan-dit loads,
``--smallest --min-rps`` gives the fewest devices (not the fewest whole nodes), and a
candidate's reason names the parts that moved both ways, its advice the plan's framework."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.estimate.dit import estimate_dit
from parastrat.planner import dit_sizing
from parastrat.planner.dit_sizing import device_counts, smallest_dit
from parastrat.spec import dit
from parastrat.strategy import Strategy

HUNYUAN = dict(height=720, width=1280, frames=129, steps=50)
SD3 = dict(height=1024, width=1024, steps=28)


def _json(capsys: pytest.CaptureFixture[str], argv: str) -> Any:
    assert main(shlex.split(argv)) == 0
    return json.loads(capsys.readouterr().out)


# ---- 1. the model list's DiT sizes -----------------------------------------------------------
def test_the_list_agrees_with_the_single_view_for_every_dit_preset(capsys):
    listed = {d["name"]: d for d in _json(capsys, "models --format json") if d["kind"] == "dit"}
    assert set(listed) == set(dit.names())
    for name, row in listed.items():
        one = _json(capsys, f"models {name} --format json")
        assert row["num_experts"] == one["experts"]
        assert row["params"] == one["total_params"]
        assert row["active_params"] == one["num_params"]


def test_wan22_a14b_lists_two_experts_and_the_weights_plan_dit_loads(capsys):
    rows = {d["name"]: d for d in _json(capsys, "models --format json")}
    a14b, wan21 = rows["wan2.2-t2v-a14b"], rows["wan2.1-t2v-14b"]
    assert a14b["num_experts"] == 2
    assert a14b["params"] == 2 * a14b["active_params"] == 2 * wan21["params"]
    request = ps.DiTRequest(height=480, width=832, frames=81, steps=40)
    report = estimate_dit("wan2.2-t2v-a14b", Strategy(), ps.Cluster("h100", 1), request)
    assert report.memory.weights == pytest.approx(2 * a14b["params"])  # bf16 weights


# ---- 2. --smallest --min-rps: the fewest devices ---------------------------------------------
def test_smallest_rate_answer_is_not_rounded_up_to_whole_nodes(monkeypatch):
    calls: list[int] = []
    real = dit_sizing.plan_dit

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append((kw["search"].devices, kw["search"].data_parallel))
        return real(*args, **kw)

    monkeypatch.setattr(dit_sizing, "plan_dit", counting)
    cluster = ps.Cluster("h100", num_devices=32)
    sized = smallest_dit(
        "hunyuanvideo", cluster, min_requests_per_s=0.01, max_latency_s=600, **HUNYUAN
    )
    assert sized.devices == 20 and sized.best.requests_per_s >= 0.01
    one_fewer = real(
        "hunyuanvideo",
        cluster,
        devices=sized.devices - 1,
        data_parallel=True,
        max_latency_s=600,
        **HUNYUAN,
    )
    assert one_fewer.best.requests_per_s < 0.01
    # bounded: the first counts, a bisection of whole nodes, under a node's worth more, then
    # one single-replica plan per replica size below the answer and the counts they name
    assert len(calls) == len(set(calls))
    assert len(calls) < 2 * (len(device_counts(cluster)) + 2 + cluster.devices_per_node)


def test_smallest_rate_is_the_fewest_even_where_a_larger_count_serves_less():
    """36 H100 serve FLUX.1-dev at 4 requests/s within 3 s (12 replicas of Ulysses 3) while
    40 do not (no replica size dividing 40 is as good): the search bisected to 42 and, asked
    for at most 40, said no count served; the answer is now the fewest, checked against every
    smaller count."""
    cluster = ps.Cluster("h100", num_devices=64)
    request = {"height": 1024, "width": 1024, "steps": 28, "max_latency_s": 3}
    sized = smallest_dit("flux.1-dev", cluster, min_requests_per_s=4, **request)
    assert sized.devices == 36 and sized.best.requests_per_s >= 4

    def rate(n: int) -> float:
        try:
            found = ps.plan_dit("flux.1-dev", cluster, devices=n, data_parallel=True, **request)
        except ps.UsageError:
            return 0.0
        return found.best.requests_per_s

    assert all(rate(n) < 4 for n in range(1, 36)) and rate(40) < 4
    capped = smallest_dit("flux.1-dev", ps.Cluster("h100", 40), min_requests_per_s=4, **request)
    assert capped.devices == 36


def test_cli_smallest_rate_prints_the_fewest_devices(capsys):
    argv = (
        "plan-dit --model hunyuanvideo --accelerator h100 --height 720 --width 1280 "
        "--frames 129 --steps 50 --devices 32 --smallest --data-parallel --min-rps 0.01 "
        "--max-latency 600 --format json"
    )
    doc = _json(capsys, argv)
    assert doc["devices"] == 20 and doc["best"]["requests_per_s"] >= 0.01


# ---- 3. reasons name savings and costs; advice names the plan's framework --------------------
def test_a_faster_candidate_names_its_savings_first():
    plan = ps.plan_dit("sd3-medium", ps.Cluster("h100", 12), data_parallel=True, **SD3)
    faster = [c for c in plan.candidates[1:] if c.latency_s < plan.best.latency_s]
    assert faster
    for c in faster:
        line = next(r for r in c.reasons if "latency vs best" in r)
        parts = line.split(": ", 1)[1]
        assert parts.split(", ")[0].split()[-2].startswith("-")  # a saving comes first
    cfg = next(c for c in plan.candidates if c.strategy.cfg == 2)
    line = next(r for r in cfg.reasons if "latency vs best" in r)
    assert "attention -" in line and "host launch overhead +" in line
    assert line.index("attention -") < line.index("host launch overhead +")


def test_a_slower_candidate_names_its_costs_first():
    plan = ps.plan_dit("hunyuanvideo", ps.Cluster("h100", 16), top_k=5, **HUNYUAN)
    for c in plan.candidates[1:]:
        line = next((r for r in c.reasons if "latency vs best" in r), None)
        if line and c.latency_s > plan.best.latency_s:
            assert line.split(": ", 1)[1].split(", ")[0].split()[-2].startswith("+")


@pytest.mark.parametrize(("framework", "title"), [("xdit", "xDiT"), ("mindiesd", "MindIE-SD")])
def test_advice_names_the_framework_the_plan_is_for(framework, title):
    cluster = ps.Cluster("h100" if framework == "xdit" else "ascend-910b", 16)
    plan = ps.plan_dit("hunyuanvideo", cluster, framework=framework, **HUNYUAN)
    assert plan.advice
    assert all(f"under {title}" in a for a in plan.advice)


def test_no_legal_split_names_only_fixes_that_apply():
    """sd3-medium on 8 H100 under diffusers: every split is refused by the framework (no TP,
    no context parallelism for SD3), none by the heads: the error names the framework and
    replicas, not a device count "whose factors divide the heads"."""
    import parastrat as ps
    from parastrat.errors import UsageError

    with pytest.raises(UsageError) as err:
        ps.plan_dit(
            "sd3-medium",
            ps.Cluster("h100", 8),
            height=1024,
            width=1024,
            steps=28,
            framework="diffusers",
        )
    text = str(err.value)
    assert "diffusers-tp" in text and "divide the heads" not in text
    assert "framework='any'" in text and "data_parallel=True" in text
