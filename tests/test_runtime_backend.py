"""Launcher-environment detection, Slurm nodelists and backend choice (no processes spawned)."""

from __future__ import annotations

import pytest

from parastrat.errors import UsageError
from parastrat.runtime.backend import (
    as_timedelta,
    detect_env,
    expand_nodelist,
    init_distributed,
    pick_backend,
)


def test_torchrun_variables_win_over_slurm():
    env = {
        "RANK": "5",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": "1234",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
    }
    e = detect_env(env)
    assert (e.rank, e.world_size, e.local_rank, e.master_addr, e.master_port, e.source) == (
        5,
        16,
        1,
        "10.0.0.7",
        1234,
        "torchrun",
    )
    assert e.init_method == "env://"


def test_slurm_uses_first_node_of_the_nodelist_as_master():
    env = {
        "SLURM_PROCID": "9",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "1",
        "SLURM_NODELIST": "gpu[007-008,010],login2",
    }
    e = detect_env(env)
    assert (e.rank, e.world_size, e.local_rank, e.source) == (9, 16, 1, "slurm")
    assert e.master_addr == "gpu007" and e.master_port == 29500
    assert e.init_method == "tcp://gpu007:29500"


def test_slurm_master_addr_and_port_can_be_overridden():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "n1",
        "MASTER_ADDR": "head",
        "MASTER_PORT": "4000",
    }
    e = detect_env(env)
    assert (e.master_addr, e.master_port, e.local_rank) == ("head", 4000, 0)


def test_no_launcher_means_a_single_process_world():
    e = detect_env({})
    assert (e.rank, e.world_size, e.source) == (0, 1, "single")


@pytest.mark.parametrize(
    "nodelist,hosts",
    [
        ("node1", ["node1"]),
        ("a[1-3]", ["a1", "a2", "a3"]),
        ("gpu[08-10,12]", ["gpu08", "gpu09", "gpu10", "gpu12"]),
        ("x[1-2]-ib,y7", ["x1-ib", "x2-ib", "y7"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


def test_bad_nodelist_and_bad_env_are_user_errors():
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        expand_nodelist("a[1-x]")
    with pytest.raises(UsageError, match="RANK"):
        detect_env({"RANK": "zero", "WORLD_SIZE": "2"})


def test_backend_override_and_cpu_default():
    pytest.importorskip("torch")
    import torch

    assert pick_backend("gloo") == "gloo"
    assert pick_backend("hccl") == "hccl"  # an override is taken as given
    if not torch.cuda.is_available():
        assert pick_backend("auto") in ("gloo", "hccl")
    else:
        assert pick_backend("auto") == "nccl"
    with pytest.raises(UsageError, match="nccl"):
        pick_backend("mpi2")


def test_hccl_without_torch_npu_names_the_extra(monkeypatch):
    pytest.importorskip("torch")
    import importlib.util

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    from parastrat.errors import MissingExtraError
    from parastrat.runtime.backend import bind_device

    with pytest.raises(MissingExtraError, match=r"parastrat\[npu\]"):
        bind_device("hccl", 0)


def test_single_process_world_starts_and_reports_whether_it_started(monkeypatch):
    pytest.importorskip("torch")
    import torch.distributed as dist

    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    first = init_distributed("gloo", timeout=30)
    try:
        assert first.started and first.backend == "gloo" and dist.get_world_size() == 1
        again = init_distributed("gloo")
        assert not again.started and again.backend == "gloo"
    finally:
        dist.destroy_process_group()


def test_timeout_accepts_seconds():
    from datetime import timedelta

    assert as_timedelta(90) == timedelta(seconds=90)
    assert as_timedelta(timedelta(minutes=2)) == timedelta(seconds=120)
    assert as_timedelta(None) is None


def test_nccl_without_cuda_and_bad_timeouts_are_usage_errors():
    """The nccl backend on a machine whose torch has no CUDA names gloo instead of failing
    inside torch; a timeout that is not positive is refused before anything starts."""
    import torch

    from parastrat.errors import UsageError
    from parastrat.runtime.backend import as_timedelta, bind_device

    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="gloo"):
            bind_device("nccl", 0)
    for bad in (-1, 0, float("nan"), "5", True):
        with pytest.raises(UsageError, match="positive"):
            as_timedelta(bad)
    assert as_timedelta(2).total_seconds() == 2
