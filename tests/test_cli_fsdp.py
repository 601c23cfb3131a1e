"""The CLI's sharding flags: --dp-shard, --dp-replicate, --fsdp on check and layout."""

from __future__ import annotations

import json

from parastrat import Strategy, layout
from parastrat.cli import main


def test_check_reports_sharding_rules_with_fixes(capsys):
    assert main(["check", "--gpus", "16", "--tp", "2", "--sp", "--dp-replicate", "3"]) == 2
    out = capsys.readouterr().out
    assert "dp-replicate-world" in out and "{1, 2, 4, 8}" in out
    args = ["check", "--gpus", "16", "--tp", "2", "--sp", "--dp-replicate", "2"]
    assert main([*args, "--fsdp", "optim", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["strategy"]["dp_replicate"], doc["strategy"]["fsdp"]) == (2, "optim")


def test_layout_lists_the_fsdp_groups(capsys):
    args = ["layout", "--gpus", "16", "--tp", "2", "--cp", "2", "--dp-replicate", "2"]
    assert main([*args, "--kinds", "dp_shard-cp,dp_replicate", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    want = layout(Strategy(tp=2, cp=2, dp_replicate=2), 16)
    assert doc["groups"]["dp_shard-cp"] == want["dp_shard-cp"]
    assert doc["groups"]["dp_replicate"] == want["dp_replicate"]


def test_dp_shard_minus_one_means_the_rest(capsys):
    assert main(["check", "--gpus", "8", "--dp-shard", "-1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"]["dp_shard"] is None


def test_a_dp_shard_that_misses_the_world_is_one_refusal_whose_fix_runs(capsys):
    """dp_shard sets dp: a wrong dp_shard was refused twice (dp-shard-world, then dp-world
    with a "use world 16" no flag spells); once now, and its fix runs."""
    line = ["explain", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--sp"]
    assert main([*line, "--dp-shard", "4", "--fsdp", "optim_grads_params"]) == 2
    err = capsys.readouterr().err
    assert "dp-shard-world" in err and "dp-world" not in err and "1 rule(s)" in err
    assert main([*line, "--dp-shard", "16", "--fsdp", "optim_grads_params"]) == 0


def test_a_bad_dp_shard_names_the_minus_one_it_takes(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_:
        main(["check", "--gpus", "8", "--dp-shard", "-2"])
    assert exit_.value.code == 2
    assert "or -1 for the rest of dp" in capsys.readouterr().err
