"""Every benchmarked op on 4 real gloo ranks: the result check passes on a correct result,
catches a corrupted one, and a wrong result on one rank stops ``run`` on all ranks (no hang).

One spawn of 4 local ranks runs all the checks; the parent asserts on what each rank saw.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from parastrat.runtime.launch import spawn_local

pytestmark = pytest.mark.multiprocess

WORLD = 4


def _make_broken_all_reduce():
    from parastrat.bench.ops import AllReduce

    class OffByOneOnRank1(AllReduce):
        """An all-reduce whose result is wrong on group rank 1 (a stand-in for a bad link)."""

        def __call__(self) -> None:
            super().__call__()
            if self.ctx.rank == 1:
                self.buf[0] += 1

    return OffByOneOnRank1


def _every_op(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    from parastrat.bench import ops, run
    from parastrat.bench.ops import BenchCorrectnessError, Context, build

    report: dict = {"bytes": {}, "caught": {}, "clean": {}, "skipped": set()}
    for dtype in (torch.float32, torch.bfloat16):
        ctx = Context(
            torch=torch, dist=dist, group=None, rank=rank, size=world, device="cpu", dtype=dtype
        )
        for name in ops.REGISTRY:
            coll = build(name, ctx, 1000)
            coll.reset()
            coll()
            coll.check()  # a correct result passes
            report["clean"][(name, str(dtype))] = True
            report["bytes"][(name, str(dtype))] = coll.nbytes
            if name == "send_recv" and rank == 0:
                continue  # the first pipeline stage receives nothing
            coll.result.view(-1)[-1] += 3  # corrupt one element of this rank's output
            try:
                coll.check()
            except BenchCorrectnessError as exc:
                report["caught"][(name, str(dtype))] = str(exc)
            coll.reset()  # fresh inputs, but the collective is never called
            try:
                coll.check()
            except BenchCorrectnessError:
                report["skipped"].add((name, str(dtype)))
    # timing: warm-up calls run but are not timed; a 20 ms call measures at least 20 ms
    from parastrat.bench.timing import measure

    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.02)

    report["timed"] = measure(slow, torch=torch, dist=dist, device="cpu", iters=3, warmup=2)
    report["calls"] = len(calls)
    # a wrong result on one rank must stop every rank with an error, not a bandwidth
    ops.REGISTRY["all_reduce"] = _make_broken_all_reduce()
    try:
        run(ops=["all_reduce"], sizes="4KB", iters=2, warmup=1)
        report["run"] = "no error"
    except BenchCorrectnessError as exc:
        report["run"] = str(exc)
    return report


@pytest.fixture(scope="module")
def reports():
    return spawn_local(_every_op, WORLD, timeout_s=120)


def test_every_op_passes_its_check_on_a_correct_result(reports):
    from parastrat.bench import OPS

    for rep in reports:
        assert {name for name, _ in rep["clean"]} == set(OPS)


def test_every_op_check_catches_a_corrupted_element(reports):
    from parastrat.bench import OPS

    for rank, rep in enumerate(reports):
        expected = {
            (op, dt)
            for op in OPS
            for dt in ("torch.float32", "torch.bfloat16")
            if not (op == "send_recv" and rank == 0)
        }
        assert set(rep["caught"]) == expected
        for msg in rep["caught"].values():
            assert f"rank {rank}" in msg and "expected" in msg


def test_a_collective_that_was_not_called_fails_its_check(reports):
    from parastrat.bench import OPS

    for rank, rep in enumerate(reports):
        # the broadcast root holds the data whether or not it was sent
        expected = {
            (op, dt)
            for op in OPS
            for dt in ("torch.float32", "torch.bfloat16")
            if not (op in ("send_recv", "broadcast") and rank == 0)
        }
        assert rep["skipped"] == expected


def test_warm_up_is_not_timed_and_the_clock_reads_real_time(reports):
    for rep in reports:
        assert rep["calls"] == 5 and len(rep["timed"]) == 3
        assert all(0.02 <= t < 1.0 for t in rep["timed"])


def test_message_sizes_are_rounded_to_whole_chunks_as_nccl_tests_does(reports):
    sizes = {op: b for (op, dt), b in reports[0]["bytes"].items() if dt == "torch.float32"}
    # 1000 B = 250 float32; ops that split the buffer over 4 ranks keep 248 = 62 * 4 -> 992 B
    assert sizes == {
        "all_reduce": 1000,
        "all_gather": 992,
        "reduce_scatter": 992,
        "all_to_all": 992,
        "broadcast": 1000,
        "ring": 1000,
        "send_recv": 1000,
    }
    bf16 = {op: b for (op, dt), b in reports[0]["bytes"].items() if dt == "torch.bfloat16"}
    # 1000 B = 500 bf16; 500 is a multiple of 4, so nothing is dropped
    assert set(bf16.values()) == {1000}


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16", "float32"])
def test_a_sum_missing_one_rank_is_caught_in_every_dtype(dtype_name):
    import torch

    from parastrat.bench.ops import BenchCorrectnessError, Context

    dtype = getattr(torch, dtype_name)
    ctx = Context(torch=torch, dist=None, group=None, rank=0, size=8, device="cpu", dtype=dtype)
    # all_reduce on 8 ranks sums 1 + 2 + ... + 8 = 36; without rank 0's 1 it is 35, a 2.8 %
    # difference that bf16's 0.8 % epsilon could hide if sums were compared loosely
    ctx.expect("all_reduce", ctx.full(4, 36), ctx.full(4, 36), reduction=True)
    with pytest.raises(BenchCorrectnessError, match="element 0 is 35"):
        ctx.expect("all_reduce", ctx.full(4, 35), ctx.full(4, 36), reduction=True)
    # beyond 2/eps (256 in bf16) sums may round: allow size * eps relative, no more
    big = 4096.0
    ctx.expect("all_reduce", ctx.full(4, big), ctx.full(4, big), reduction=True)


def test_a_wrong_result_on_one_rank_is_an_error_on_every_rank(reports):
    assert "wrong result on rank 1" in reports[1]["run"]  # the rank that saw it, in detail
    for rank in (0, 2, 3):
        assert "returned a wrong result on rank 1" in reports[rank]["run"]
