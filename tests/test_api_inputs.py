"""Wrong kinds of input to the Python API: each gets parastrat's error naming the argument
and a call that works, never an AttributeError from deep inside."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.errors import SpecError, UsageError

LLAMA = ps.models.get("llama3-8b")


@pytest.mark.parametrize(
    "call",
    [
        lambda: ps.estimate_step(
            LLAMA, ps.Strategy(tp=2), "h100", seq_len=4096, global_batch_size=64
        ),
        lambda: ps.compare(
            ps.Strategy(tp=2),
            "TP4",
            cluster="h100",
            model=LLAMA,
            seq_len=4096,
            global_batch_size=64,
        ),
        lambda: ps.plan(LLAMA, "h100", seq_len=4096, global_batch_size=64),
        lambda: ps.plan_dit("flux.1-dev", "h100", height=1024, width=1024, steps=28),
    ],
)
def test_an_accelerator_name_where_a_cluster_goes_names_the_cluster_to_build(call):
    with pytest.raises(UsageError) as err:
        call()
    assert "takes cluster=parastrat.Cluster, got str 'h100'" in str(err.value)
    assert "parastrat.Cluster('h100', num_devices=64)" in str(err.value)


@pytest.mark.parametrize(
    "option, value",
    [
        ("other_bytes", float("nan")),
        ("other_bytes", -1e12),
        ("fragmentation", -1),
        ("fragmentation", float("inf")),
        ("fragmentation", "0.1"),
    ],
)
def test_memory_allowances_must_be_finite_and_not_negative(option, value):
    s = ps.Strategy(tp=2).with_world_size(8)
    with pytest.raises(UsageError, match=f"{option} must be"):
        ps.estimate_memory(LLAMA, s, seq_len=4096, global_batch_size=64, **{option: value})
    fine = ps.estimate_memory(LLAMA, s, seq_len=4096, global_batch_size=64, **{option: 0})
    assert fine.peak_bytes > 0


def test_a_calibration_backend_that_is_not_a_name_is_refused(tmp_path):
    bad = {"ops": {}, "backend": ["nccl"]}  # was a TypeError: unhashable type: 'list'
    with pytest.raises(SpecError, match="'backend' must be one of gloo, hccl, nccl"):
        ps.Cluster("h100", 8).calibrate(bad)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(SpecError, match="'backend' must be one of gloo, hccl, nccl"):
        ps.Cluster.from_calibration_file(path, accelerator="h100", num_devices=8)
    assert ps.Cluster("h100", 8).calibrate({"ops": {}, "backend": "nccl"}).calibration


def test_records_and_published_runs_take_names_or_specs():
    by_name = ps.track_record("llama3-70b", "h100")
    assert by_name is not None and by_name == ps.track_record(ps.models.get("llama3-70b"), "h100")
    assert ps.track_record("flux.1-dev", "h100") is not None  # a DiT preset by name
    runs = ps.published_runs("llama3-8b")
    assert runs and ps.published_runs(LLAMA) == runs
    assert ps.published_runs(accelerator=ps.hardware.get("h100")) == ps.published_runs(
        accelerator="h100"
    )
    with pytest.raises(SpecError, match="model must be a preset name"):
        ps.published_runs(3)  # type: ignore[arg-type]
