"""When no DiT split fits memory, the error names remedies it has tried (planner/dit_remedies.py),
and the remedy it names makes the plan fit when the user runs it as written."""

from __future__ import annotations

import json
import re

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.planner.dit import label
from parastrat.planner.dit_remedies import REMEDIES, working_remedy

#: The Python spelling of each remedy -> the keyword arguments of plan_dit that set it.
KEYWORDS = {
    "vae_parallel=True": {"vae_parallel": True},
    "vae_tiling=True": {"vae_tiling": True},
    "text_encoder_on_device=False": {"text_encoder_on_device": False},
    "DiTMemoryOptions(offload=True)": {"offload": True},
    "DiTMemoryOptions(dit_fsdp=True)": {"dit_fsdp": True},
    "DiTMemoryOptions(encoder_fsdp=True)": {"encoder_fsdp": True},
}
#: Too big for its devices as asked; (model, accelerator, devices, height, width, frames).
TOO_BIG = [
    ("cogvideox-5b", "rtx-4090", 2, 480, 720, 49),  # a parallel VAE alone is not enough
    ("hunyuanvideo", "rtx-4090", 16, 1280, 720, 129),  # the weights, not the decode
    ("wan2.1-t2v-14b", "l40", 8, 720, 1280, 81),
]


def _plan(name, accel, n, h, w, f, **kw):
    memory = {k: kw.pop(k) for k in ("offload", "dit_fsdp", "encoder_fsdp") if k in kw}
    return ps.plan_dit(
        name,
        ps.Cluster(accel, num_devices=n),
        height=h,
        width=w,
        frames=f,
        steps=20,
        memory=ps.DiTMemoryOptions(**memory) if memory else None,
        **kw,
    )


def test_every_remedy_has_a_cli_flag_and_a_keyword():
    from parastrat.cli.plan_dit import cli_terms

    for r in REMEDIES:
        assert r.spelling in KEYWORDS
        assert cli_terms(r.spelling).startswith("--"), r.spelling


@pytest.mark.parametrize("case", TOO_BIG, ids=[c[0] for c in TOO_BIG])
def test_the_named_remedy_makes_the_plan_fit(case):
    with pytest.raises(UsageError) as err:
        _plan(*case)
    msg = str(err.value)
    found = re.search(r"Tried: with (.+?), (.+?) fits at ([\d.]+) GiB", msg)
    assert found, msg
    names, split, gib = found.group(1).split(" and "), found.group(2), float(found.group(3))
    kw: dict = {}
    for name in names:
        kw.update(KEYWORDS[name])
    plan = _plan(*case, **kw)  # runs as written: no error
    fitting = {label(c.strategy): c for c in plan.candidates}
    assert split in fitting
    cand = fitting[split]
    assert cand.report.memory.fits()
    assert cand.report.memory.total / 2**30 == pytest.approx(gib, abs=0.05)


def test_no_sentence_when_no_remedy_is_enough():
    with pytest.raises(UsageError) as err:
        _plan("flux.1-dev", "h100", 4, 99984, 99984, 1)
    assert "needs" in str(err.value) and "Tried" not in str(err.value)


def test_the_cli_names_the_flags(capsys):
    argv = ["plan-dit", "--model", "cogvideox-5b", "--devices", "2", "--accelerator"]
    argv += ["rtx-4090", "--height", "480", "--width", "720", "--frames", "49", "--steps", "20"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Tried: with --offload-model, CFG2 fits" in err and "Traceback" not in err
    assert main([*argv, "--offload-model"]) == 0


def test_working_remedy_is_none_without_reports():
    assert working_remedy(ps.DiTSwitches(), [], lambda rep, sw: rep) is None


def test_a_split_near_the_memory_limit_says_so_in_the_callers_terms(capsys):
    """Wan2.1-T2V-14B 832x480x33 on 2 L40: the splits fit at 96.9 % of device memory (the VAE
    decode); their reasons say the headroom is small and how to get more, with Python
    spellings in Python and flags on the CLI (table and JSON)."""
    from parastrat.planner.explain import TIGHT_MEMORY

    case = ("wan2.1-t2v-14b", "l40", 2, 480, 832, 33)
    plan = _plan(*case, framework="any")  # xDiT's Wan examples decode on one device
    for c in plan.candidates:
        tight = c.report.memory.total > TIGHT_MEMORY * c.report.memory.capacity
        assert ("little headroom" in c.why) == tight
    assert "little headroom" in plan.best.why and "vae_parallel=True" in plan.best.why
    argv = ["plan-dit", "--model", case[0], "--devices", "2", "--accelerator", "l40"]
    argv += ["--height", "480", "--width", "832", "--frames", "33", "--steps", "20"]
    argv += ["--framework", "any"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "little headroom" in table and "vae_parallel=True" not in table
    assert main([*argv, "--format", "json"]) == 0
    why = json.loads(capsys.readouterr().out)["candidates"][0]["why"]
    assert "(--vae-parallel)" in why and "(--offload-model)" in why
