"""spawn_local: real local processes with torchrun's environment, and failures that never hang."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("torch")

from parastrat.runtime.launch import RankFailure, free_port, spawn_local


def _env_and_sum(rank: int, world: int, scale: int) -> dict:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1) * scale])
    dist.all_reduce(t)
    return {
        "rank": int(os.environ["RANK"]),
        "world": int(os.environ["WORLD_SIZE"]),
        "local": int(os.environ["LOCAL_RANK"]),
        "addr": os.environ["MASTER_ADDR"],
        "pg_rank": dist.get_rank(),
        "backend": dist.get_backend(),
        "sum": t.item(),
        "arg_rank": rank,
        "arg_world": world,
    }


@pytest.mark.multiprocess
def test_spawn_local_sets_env_starts_gloo_and_returns_in_rank_order():
    out = spawn_local(_env_and_sum, 4, args=(10,), timeout_s=60)
    assert [o["rank"] for o in out] == [0, 1, 2, 3]
    for r, o in enumerate(out):
        got = (o["arg_rank"], o["arg_world"], o["world"], o["local"], o["pg_rank"])
        assert got == (r, 4, 4, r, r)
        assert o["addr"] == "127.0.0.1" and o["backend"] == "gloo"
        # (1 + 2 + 3 + 4) * 10 = 100
        assert o["sum"] == 100.0


def _raise_on_rank_1(rank: int, world: int) -> int:
    if rank == 1:
        raise ValueError("bad shard on purpose")
    return rank


def _die_in_collective(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    if rank == 2:
        os._exit(3)
    dist.all_reduce(torch.ones(1))  # peers block here until the dead rank is noticed


def _sleep_forever(rank: int, world: int) -> None:
    if rank == 0:
        time.sleep(3600)


@pytest.mark.multiprocess
def test_a_raising_rank_is_named_with_its_exception():
    with pytest.raises(RankFailure) as info:
        spawn_local(_raise_on_rank_1, 2, backend=None, timeout_s=60)
    assert info.value.rank == 1
    assert "ValueError: bad shard on purpose" in str(info.value)


@pytest.mark.multiprocess
def test_a_dead_rank_fails_fast_and_blames_the_dead_rank():
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        spawn_local(_die_in_collective, 4, timeout_s=30)
    assert info.value.rank == 2
    assert "exited with code 3" in info.value.reason
    assert time.monotonic() - t0 < 30


@pytest.mark.multiprocess
def test_a_hung_rank_times_out_and_is_killed():
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        spawn_local(_sleep_forever, 2, backend=None, timeout_s=5)
    assert info.value.rank == 0 and "timed out after 5 s" in info.value.reason
    assert time.monotonic() - t0 < 5 + 6  # the deadline plus the time to kill the children


def test_unpicklable_function_is_refused_before_any_process_starts():
    with pytest.raises(TypeError, match="picklable"):
        spawn_local(lambda r, w: r, 2)


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert 0 < port < 65536
