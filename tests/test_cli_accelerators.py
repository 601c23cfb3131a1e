"""``parastrat accelerators``: the device presets with the figures the cost models price them
with, one preset in full, and "did you mean" on a misspelt device name."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import SpecError


def test_lists_every_device_with_its_rates(capsys):
    assert main(["accelerators", "--format", "json"]) == 0
    listed = {a["name"]: a for a in json.loads(capsys.readouterr().out)}
    assert set(listed) == set(ps.hardware.names())
    h100 = ps.hardware.get("h100")
    assert listed["h100"]["peak_flops"] == h100.peak_flops
    assert listed["h100"]["scale_out_bw_Bps"] == h100.scale_out_bw_Bps
    assert main(["accelerators"]) == 0
    out = capsys.readouterr().out
    assert "gb300" in out and "ascend-910b" in out and "bench --kernels" in out
    # GB300's NVFP4 rate is shown (15 PF/s dense), an H100 has none ("-")
    row = next(line for line in out.splitlines() if "gb300" in line)
    assert f"{ps.hardware.get('gb300').peak_flops['nvfp4'] / 1e15:.2f}" in row


def test_one_device_in_full_names_its_source(capsys):
    assert main(["accelerators", "H100-SXM", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    runs, dit_runs = shown.pop("published_runs"), shown.pop("published_dit_runs")
    # beside the nominal memory, the memory the estimates plan against (79.6 GiB on an H100)
    assert shown["usable_memory_bytes"] == ps.Cluster("h100", 1).accel.memory_bytes
    assert shown == ps.hardware.get("h100").to_dict()
    assert len(runs) == len(ps.published_runs(accelerator="h100")) > 0 and dit_runs
    assert main(["accelerators", "gb200"]) == 0
    out = capsys.readouterr().out
    assert "gb200 (--accelerator gb200)" in out and "source" in out


@pytest.mark.parametrize(("typo", "meant"), [("h1000", "h100"), ("gb-300", "gb300")])
def test_a_misspelt_device_gets_did_you_mean(capsys, typo, meant):
    assert main(["accelerators", typo]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {meant}" in err and "Traceback" not in err
    with pytest.raises(SpecError, match=f"did you mean {meant}"):
        ps.hardware.get(typo)
