"""The ranking table says at a glance why each row is above the next; notes shared by rows are
printed once; the --plot legend covers no bar."""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat.cli import main


def test_each_row_says_why_it_is_above_the_next(capsys):
    assert main(["plan", "--model", "llama3-70b", "--gpus", "64"]) == 0
    out = capsys.readouterr().out
    assert "over next" in out
    # numbered rows (a long layout label may wrap a row onto a second line)
    rows = [ln for ln in out.splitlines() if ln.startswith("│ ") and ln[2].isdigit()]
    assert len(rows) >= 5
    assert all(("tie: " in r) or ("faster by" in r) for r in rows)
    # a dense model has no expert parallelism to compare (the planner's "why" text still says
    # EPxETP for dense models: planner/search.py, reported to its owner)
    assert not any("EPxETP" in r for r in rows)


def test_a_note_shared_by_every_row_is_printed_once(capsys):
    assert main(["plan", "--model", "deepseek-v3", "--gpus", "256"]) == 0
    out = capsys.readouterr().out
    notes = [ln for ln in out.splitlines() if ln.startswith("note (")]
    assert notes, "deepseek-v3 plans carry a note"
    bodies = [ln.split("): ", 1)[1] for ln in notes]
    assert len(bodies) == len(set(bodies))
    assert sum(out.count(b) for b in bodies) == len(bodies)


def test_plot_legend_covers_no_bar(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    from parastrat import viz

    figs = []
    monkeypatch.setattr(viz, "save_figure", lambda fig, path, dpi=120: figs.append(fig))
    result = ps.plan("llama3-70b", ps.Cluster("h100", 64), seq_len=4096, global_batch_size=256)
    viz.plot_plan(result, tmp_path / "p.png")
    fig = figs[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bars_ax = fig.axes[1]
    legend = bars_ax.get_legend().get_window_extent(renderer)
    for patch in bars_ax.patches:
        assert not legend.overlaps(patch.get_window_extent(renderer))
