"""A pin no device count can satisfy is diagnosed by the rule it breaks, not by suggesting other
device counts (planner/diagnose.py and its hook in ``parastrat plan``)."""

from __future__ import annotations

import parastrat as ps
from parastrat.cli import main
from parastrat.planner.diagnose import pinned_violations


def test_tp_that_does_not_divide_the_heads_is_named(capsys):
    assert main(["plan", "--model", "llama3-70b", "--gpus", "64", "--tp", "3"]) == 2
    err = capsys.readouterr().err
    assert "heads-tp" in err and "64 attention heads" in err
    assert "devices" not in err.split("heads-tp")[0]  # no "try 48, 56, 72 devices" lead


def test_cp_that_cannot_split_the_sequence_is_named(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--cp", "3"]) == 2
    assert "seq-cp" in capsys.readouterr().err


def test_an_uneven_pipeline_pin_is_not_blamed():
    """80 layers over pp=3 break layers-pp evenly, but the planner splits them unevenly
    (account_for_loss), so the pin alone is not the problem."""
    m = ps.models.get("llama3-70b")
    assert pinned_violations(m, {"pp": 3}, seq_len=4096) == []
    assert main(["plan", "--model", "llama3-70b", "--gpus", "48", "--pp", "3", "--top-k", "1"]) == 0


def test_world_problems_keep_the_device_count_advice(capsys):
    assert main(["plan", "--model", "llama3-70b", "--gpus", "64", "--pp", "3"]) == 2
    assert "devices" in capsys.readouterr().err
    assert pinned_violations(ps.models.get("llama3-70b"), {}, seq_len=4096) == []
