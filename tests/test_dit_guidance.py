"""Classifier-free guidance follows the model unless overridden (issue 16 item 1)."""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import SpecError, StrategyError
from parastrat.estimate.dit import estimate_dit, resolve_guidance
from parastrat.planner.dit import plan_dit
from parastrat.spec.dit import get

FLUX = dict(height=1024, width=1024, steps=28)


def test_distilled_models_default_to_one_branch():
    assert resolve_guidance(get("flux.1-dev"), None) is False
    assert resolve_guidance(get("hunyuanvideo"), None) is False
    assert resolve_guidance(get("wan2.1-t2v-14b"), None) is True
    assert resolve_guidance(get("flux.1-dev"), True) is True
    with pytest.raises(SpecError, match="True, False or None"):
        resolve_guidance(get("flux.1-dev"), "yes")  # type: ignore[arg-type]


def test_plan_proposes_no_cfg_for_a_distilled_model_by_default():
    p = plan_dit("flux.1-dev", ps.Cluster("ascend-910b", 4), top_k=1000, **FLUX)
    assert p.workload["guidance"] is False and p.workload["guidance_from"] == "model"
    assert all(c.strategy.cfg == 1 for c in p.candidates)
    forced = plan_dit("flux.1-dev", ps.Cluster("ascend-910b", 4), guidance=True, **FLUX)
    assert forced.workload["guidance_from"] == "argument"
    assert any(c.strategy.cfg == 2 for c in forced.candidates)
    # one branch per step is half the work of true CFG
    assert p.best.latency_s < 0.7 * forced.best.latency_s


def test_guided_model_keeps_cfg_by_default():
    wan = dict(height=480, width=832, frames=81, steps=50, top_k=1000)
    p = plan_dit("wan2.1-t2v-1.3b", ps.Cluster("ascend-910b", 2), **wan)
    assert p.workload["guidance"] is True and p.framework == "mindiesd"
    assert any(c.strategy.cfg == 2 for c in p.candidates)
    # xDiT (the GPU default) runs Wan's branches as one batch: guidance on, no CFG split
    gpu = plan_dit("wan2.1-t2v-1.3b", ps.Cluster("h100", 2), **wan)
    assert gpu.workload["guidance"] is True and gpu.framework == "xdit"
    assert not any(c.strategy.cfg == 2 for c in gpu.candidates)
    assert gpu.rejected.get("xdit-cfg")


def test_cfg_on_a_distilled_model_names_the_python_argument():
    with pytest.raises(StrategyError, match="guidance=True") as exc:
        estimate_dit("flux.1-dev", ps.Strategy(cfg=2), ps.Cluster("h100", 2), **FLUX)
    assert "guidance-distilled" in str(exc.value)


def test_cli_default_follows_the_model_and_names_flags(capsys):
    base = ["plan-dit", "--model", "flux.1-dev", "--devices", "4", "--accelerator"]
    base += ["ascend-910b", "--height", "1024", "--width", "1024", "--steps", "28"]
    assert main(base + ["--format", "mindiesd"]) == 0
    assert "--cfg_size 1" in capsys.readouterr().out
    assert main(base + ["--guidance"]) == 0
    out = capsys.readouterr().out
    assert "--guidance prices true CFG" in out and "guidance=" not in out
    with pytest.raises(SystemExit) as stop:  # mutually exclusive: argparse exits 2
        main(base + ["--guidance", "--no-guidance"])
    assert stop.value.code == 2
