"""Every fix a message suggests works when tried: the planner's "no legal strategy" advice,
the world-aware fixes of the rules raised while a Strategy is built (cp-ulysses-ring,
pipeline-layout-pp, vpp-needs-pp under a layout), tp-across-nodes' TP, and the device memory
the planner's texts state."""

from __future__ import annotations

import re

import pytest

import parastrat as ps
from parastrat import rules
from parastrat.cli import main
from parastrat.errors import StrategyError, UsageError
from parastrat.spec.hardware import GiB
from parastrat.strategy import MEGATRON_ORDER

LAYOUT_31 = "Et|(t*2|)*29mL"  # DeepSeek-V3's layer count over 31 stages: no multiple of pp=8


def _plan_error(model: str, world: int, gbs: int, **pins: int) -> str:
    with pytest.raises(UsageError) as err:
        ps.plan(
            model,
            ps.Cluster("h100", num_devices=world),
            seq_len=4096,
            global_batch_size=gbs,
            **pins,
        )
    return str(err.value)


def _set(text: str, name: str) -> list[int]:
    found = re.search(rf"{name} in \{{([\d, ]+)\}}", text)
    assert found, text
    return [int(x) for x in found.group(1).split(", ")]


def _errors(s: ps.Strategy, model: str, world: int) -> list[str]:
    return [v.rule for v in s.check(model, world_size=world, seq_len=4096) if v.severity == "error"]


# ---- 1. no legal strategy: name the pinned rule, or device counts that plan --------------------
@pytest.mark.parametrize("world", [8, 64, 128])
def test_pp_beyond_the_layers_names_layers_pp_and_its_pp_plans(world):
    """32 layers cannot fill pp=64 on any device count: no "try 128 devices" (at 128 it said
    "try 64, 192", a loop); the rule and its fix, and every pp it names plans here."""
    msg = _plan_error("llama3-8b", world, 4 * world, pp=64)
    assert "[layers-pp]" in msg and "try" not in msg
    for pp in _set(msg, "pp"):
        cluster = ps.Cluster("h100", num_devices=world)
        assert ps.plan("llama3-8b", cluster, seq_len=4096, global_batch_size=4 * world, pp=pp)


def test_tp_that_no_device_count_takes_names_heads_tp():
    msg = _plan_error("llama3-8b", 8, 32, tp=3)
    assert "[heads-tp]" in msg and "32 attention heads" in msg
    assert "devices" not in msg.split("[heads-tp]")[0].split("(with the pins/bounds given)")[1]
    assert 8 in _set(msg, "tp")
    ps.plan(
        "llama3-8b", ps.Cluster("h100", num_devices=8), seq_len=4096, global_batch_size=32, tp=8
    )


def test_cli_plan_names_the_layer_rule_not_device_counts(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--pp", "64"]) == 2
    err = capsys.readouterr().err
    assert "layers-pp" in err and "try" not in err


def test_every_suggested_device_count_and_batch_plans():
    """TP8 x PP4 on 60 devices: each device count named (and a batch size, when one is) gives
    a plan when tried; 96 (dp 3 does not split 256) is not named."""
    msg = _plan_error("llama3-70b", 60, 256, tp=8, pp=4)
    tried = re.search(r"try ([\d, ]+) devices", msg)
    assert tried, msg
    worlds = [int(w) for w in tried.group(1).split(", ")]
    assert 96 not in worlds
    for w in worlds:
        c = ps.Cluster("h100", num_devices=w)
        assert ps.plan("llama3-70b", c, seq_len=4096, global_batch_size=256, tp=8, pp=4)
    batch = re.search(r"e\.g\. (\d+)\)", msg)
    if batch:
        c = ps.Cluster("h100", num_devices=60)
        ps.plan("llama3-70b", c, seq_len=4096, global_batch_size=int(batch.group(1)), tp=8, pp=4)


# ---- 2. cp-ulysses-ring on a known world --------------------------------------------------------
def _built_errors(fields: dict, world: int, model: str) -> list[ps.Violation]:
    with pytest.raises(StrategyError) as err:
        ps.Strategy(**fields)
    return rules.world_fixes(err.value.violations, fields, world, model, seq_len=4096)


def test_cp_ulysses_fix_names_only_cp_the_world_takes():
    fields = {"cp": 4, "ulysses": 8, "order": MEGATRON_ORDER}
    (v,) = _built_errors(fields, 8, "llama3-8b")
    assert v.rule == "cp-ulysses-ring" and "16" not in v.hint
    assert _set(v.hint, "cp") == [8]
    for cp in _set(v.hint, "cp"):
        assert not _errors(ps.Strategy(**{**fields, "cp": cp}), "llama3-8b", 8)
    for u in _set(v.hint, "ulysses"):
        assert not _errors(ps.Strategy(**{**fields, "ulysses": u}), "llama3-8b", 8)


def test_cp_ulysses_fix_says_when_no_multiple_fits_and_offers_a_lower_ulysses():
    fields = {"cp": 4, "ulysses": 8, "tp": 2, "order": MEGATRON_ORDER}
    (v,) = _built_errors(fields, 8, "llama3-8b")
    assert "no multiple of ulysses=8 fits 8 devices" in v.hint
    lower = _set(v.hint, "ulysses")
    assert lower
    for u in lower:
        assert not _errors(ps.Strategy(**{**fields, "ulysses": u}), "llama3-8b", 8)


# ---- 3. a layout's stages against pp ------------------------------------------------------------
DSV3 = {"tp": 2, "ep": 64, "sp": True, "pipeline_layout": LAYOUT_31}


def _suggested_layout(hint: str) -> tuple[int | None, str]:
    found = re.search(r"(?:pp=(\d+) with )?pipeline_layout='([^']+)'", hint)
    assert found, hint
    return (int(found.group(1)) if found.group(1) else None), found.group(2)


@pytest.mark.parametrize("pp", [8, 1])
def test_layout_fix_never_sends_to_pp_1_and_its_layout_checks(pp):
    """pp=8 with 31 stages said "or use pp in {1, 31}"; pp=1 then said "or --vpp 1", which a
    layout ignores.  On 1024 devices the fix is a layout whose stages suit a pp > 1."""
    fields = {**DSV3, "pp": pp}
    (v,) = _built_errors(fields, 1024, "deepseek-v3")
    assert v.rule == ("pipeline-layout-pp" if pp == 8 else "vpp-needs-pp")
    assert "pp in {1" not in v.hint and "vpp=1" not in v.hint
    new_pp, layout = _suggested_layout(v.hint)
    s = ps.Strategy(**{**fields, "pp": new_pp or pp, "pipeline_layout": layout})
    assert s.pp > 1 and not _errors(s, "deepseek-v3", 1024)


def test_vpp_needs_pp_under_a_layout_suggests_pp_that_divides_its_stages():
    """Without a world: pp values > 1 that divide the layout's stages (each builds), and no
    --vpp 1, which a layout overrides."""
    with pytest.raises(StrategyError) as err:
        ps.Strategy(pp=1, pipeline_layout=LAYOUT_31)
    (v,) = err.value.violations
    assert v.rule == "vpp-needs-pp" and "vpp=1" not in v.hint
    for pp in _set(v.hint, "pp"):
        assert pp > 1 and ps.Strategy(pp=pp, pipeline_layout=LAYOUT_31).pp == pp
    with pytest.raises(StrategyError, match="vpp=1"):
        ps.Strategy(pp=1, vpp=2)  # without a layout vpp=1 is still a fix


# ---- 4. tp-across-nodes names a TP the model allows -------------------------------------------
@pytest.mark.parametrize(
    ("model", "world", "tp", "node", "want"),
    [
        ("llama3-70b", 32, 8, 6, 4),  # 64 heads, 8 query groups: 6 breaks heads-tp
        ("llama3-8b", 12, 4, 3, 2),  # 3 divides 12 but not 32 heads
    ],
)
def test_tp_across_nodes_names_the_largest_tp_that_passes(model, world, tp, node, want):
    s = ps.Strategy(tp=tp, sp=True)
    found = s.check(model, world_size=world, seq_len=4096, devices_per_node=node, verify_hints=True)
    (v,) = [v for v in found if v.rule == "tp-across-nodes"]
    assert f"use tp={want} " in v.hint and f"tp <= {node}" in v.hint
    assert not _errors(s.replace(tp=want), model, world)
    for bigger in range(want + 1, node + 1):
        assert _errors(s.replace(tp=bigger), model, world)


def test_cli_check_tp_across_nodes_fix(capsys):
    argv = ["check", "--model", "llama3-70b", "--gpus", "32", "--tp", "8", "--sp"]
    assert main([*argv, "--devices-per-node", "6"]) == 0
    out = capsys.readouterr().out
    assert "keep tp <= 6" not in out and re.search(r"tp[= ]4", out)


# ---- 5. the planner states the usable memory its fit check and percentages use -----------------
def test_plan_reasons_state_the_usable_memory():
    cluster = ps.Cluster("h100", num_devices=8)
    assert f"{cluster.memory_bytes / GiB:.1f}" == "79.6"
    p = ps.plan("llama3-8b", cluster, seq_len=4096, global_batch_size=32)
    for c in p.ranked:
        assert "of 79.6 GiB" in c.why and "of 80 GiB" not in c.why
    assert "of 79.6 GiB" in p.explain()


def test_nothing_fits_states_the_usable_memory():
    msg = _plan_error("llama3-70b", 1, 8)
    assert "h100 memory (79.6 GiB)" in msg
