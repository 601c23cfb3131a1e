"""The benchmarked collectives: buffers, the call itself, and a check of the result.

Each op is a small class built for one message size on one process group.  ``reset()``
fills the buffers with their initial values (in-place reductions and broadcast need fresh
inputs before the call that is checked), ``__call__()`` issues exactly the collective being
timed, and ``check()`` raises :class:`BenchCorrectnessError` when the result of a call made
right after ``reset()`` is wrong, so a broken collective is an error and never a bandwidth.

Inputs are filled with small integers that identify the sending rank and the destination
chunk, so a wrong sum, a missing rank or a chunk delivered to the wrong place all show up.
Sizes follow nccl-tests (``bytes`` is the full array S: all-reduce buffer, all-gather output,
reduce-scatter input, each rank's all-to-all send buffer, broadcast buffer, p2p message); the
element count is rounded down to a multiple of the group size where the op splits the buffer.

torch is imported lazily: this module is only loaded by :func:`parastrat.bench.run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError


class BenchCorrectnessError(RuntimeError):
    """A collective returned a wrong result (the benchmark stops rather than report a speed)."""


@dataclass(frozen=True)
class Context:
    """Where an op runs: torch modules, the process group, this rank's place in it, the device."""

    torch: Any
    dist: Any
    group: Any  # a ProcessGroup, or None for the default (world) group
    rank: int  # this rank's index inside ``group``
    size: int  # ranks in ``group``
    device: Any
    dtype: Any  # a torch.dtype

    def global_rank(self, group_rank: int) -> int:
        """The world rank of ``group_rank`` in this group (p2p calls take world ranks)."""
        if self.group is None:
            return group_rank
        return int(self.dist.get_global_rank(self.group, group_rank))

    def full(self, count: int, value: float) -> Any:
        """A 1-D tensor of ``count`` elements equal to ``value`` in this context's dtype and device:
        the ops' buffers and the results :meth:`expect` compares against."""
        return self.torch.full((count,), float(value), dtype=self.dtype, device=self.device)

    def expect(self, name: str, got: Any, want: Any, *, reduction: bool = False) -> None:
        """Raise :class:`BenchCorrectnessError` unless ``got`` matches ``want``.

        Moved data must match bit for bit.  Sums of the small integers the ops use are exact
        too while they stay below ``2 / eps`` of the dtype (256 in bf16, 2048 in fp16, 2**24 in
        fp32); only larger sums may be off by the rounding of ``size`` additions.
        """
        t = self.torch
        want = want.to(dtype=got.dtype, device=got.device)
        eps = t.finfo(got.dtype).eps
        if not reduction or float(want.abs().max()) <= 2 / eps:
            ok = bool(t.equal(got, want))
        else:
            ok = bool(t.allclose(got.float(), want.float(), rtol=eps * self.size, atol=0.0))
        if not ok:
            bad = (got.float() - want.float()).abs().flatten()
            idx = int(bad.argmax())
            raise BenchCorrectnessError(
                f"{name} on {self.size} ranks returned a wrong result on rank {self.rank}: "
                f"element {idx} is {got.flatten()[idx].item()!r}, expected "
                f"{want.flatten()[idx].item()!r} ({int((bad > 0).sum())} of {bad.numel()} "
                "elements differ)"
            )


def _elements(ctx: Context, nbytes: int, multiple: int) -> int:
    """Elements of ``ctx.dtype`` in ``nbytes``, rounded down to a multiple (at least one)."""
    itemsize = ctx.torch.empty((), dtype=ctx.dtype).element_size()
    count = (int(nbytes) // itemsize) // multiple * multiple
    return max(count, multiple)


def _split_op(dist: Any, new: str, old: str) -> Any:
    """torch >= 2.13 renames the *_into_tensor/_tensor collectives to *_single."""
    return getattr(dist, new, None) or getattr(dist, old)


class Collective:
    """Base of the ops: ``nbytes`` is the S of nccl-tests after rounding to whole chunks."""

    name = ""
    min_ranks = 1

    def __init__(self, ctx: Context, nbytes: int):
        self.ctx = ctx
        self.nbytes = 0

    def reset(self) -> None:
        """Fill the buffers with the initial values :meth:`check` expects to start from
        (by default: the output back to the sentinel -1, so a call that delivers nothing shows)."""
        self.result.fill_(-1)

    def __call__(self) -> None:  # pragma: no cover - abstract
        """Issue the collective being timed, once, on the op's buffers (each op implements it)."""
        raise NotImplementedError

    def check(self) -> None:  # pragma: no cover - abstract
        """Raise :class:`BenchCorrectnessError` unless a call made right after :meth:`reset` left
        the expected values in :attr:`result` (each op implements it)."""
        raise NotImplementedError

    @property
    def result(self) -> Any:
        """The tensor :meth:`check` reads (this rank's output)."""
        raise NotImplementedError  # pragma: no cover - abstract


class AllReduce(Collective):
    """In-place sum over the group; rank r contributes r + 1, so every element ends n(n+1)/2."""

    name = "all_reduce"

    @property
    def result(self) -> Any:
        """The buffer the all-reduce sums in place."""
        return self.buf

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        count = _elements(ctx, nbytes, 1)
        self.buf = ctx.full(count, 0)
        self.nbytes = count * self.buf.element_size()

    def reset(self) -> None:
        """Refill the buffer with rank + 1 (the sum overwrites it, so a checked call needs fresh
        inputs)."""
        self.buf.fill_(self.ctx.rank + 1)

    def __call__(self) -> None:
        """Sum the buffer in place over the group."""
        self.ctx.dist.all_reduce(self.buf, group=self.ctx.group)

    def check(self) -> None:
        """Check that every element is n(n+1)/2, the sum of rank + 1 over the group's n ranks."""
        n = self.ctx.size
        self.ctx.expect(
            self.name, self.buf, self.ctx.full(self.buf.numel(), n * (n + 1) / 2), reduction=True
        )


class AllGather(Collective):
    """Each rank contributes S/n elements of value rank + 1; the output chunk i must be i + 1."""

    name = "all_gather"

    @property
    def result(self) -> Any:
        """The gathered output: n chunks, chunk i from group rank i."""
        return self.out

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        count = _elements(ctx, nbytes, ctx.size)
        self.inp = ctx.full(count // ctx.size, ctx.rank + 1)
        self.out = ctx.full(count, -1)
        self.nbytes = count * self.out.element_size()
        self._fn = _split_op(ctx.dist, "all_gather_single", "all_gather_into_tensor")

    def __call__(self) -> None:
        """Gather every rank's input chunk into the output, in group-rank order."""
        self._fn(self.out, self.inp, group=self.ctx.group)

    def check(self) -> None:
        """Check that output chunk i holds i + 1 throughout, i.e. group rank i's input landed in
        place i."""
        t, n = self.ctx.torch, self.ctx.size
        want = (t.arange(n, dtype=t.float32) + 1).repeat_interleave(self.inp.numel())
        self.ctx.expect(self.name, self.out, want)


class ReduceScatter(Collective):
    """Input chunk j is j + 1 on every rank; rank r must end with n * (r + 1)."""

    name = "reduce_scatter"

    @property
    def result(self) -> Any:
        """This rank's chunk of the reduced input."""
        return self.out

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        t, n = ctx.torch, ctx.size
        count = _elements(ctx, nbytes, n)
        chunk = count // n
        self.inp = (
            (t.arange(n, dtype=t.float32) + 1)
            .repeat_interleave(chunk)
            .to(dtype=ctx.dtype, device=ctx.device)
        )
        self.out = ctx.full(chunk, -1)
        self.nbytes = count * self.inp.element_size()
        self._fn = _split_op(ctx.dist, "reduce_scatter_single", "reduce_scatter_tensor")

    def __call__(self) -> None:
        """Sum the input over the group and leave chunk r of the sum on group rank r."""
        self._fn(self.out, self.inp, group=self.ctx.group)

    def check(self) -> None:
        """Check that this rank's chunk is n * (r + 1): input chunk r (value r + 1) summed over the
        n ranks."""
        n = self.ctx.size
        want = self.ctx.full(self.out.numel(), n * (self.ctx.rank + 1))
        self.ctx.expect(self.name, self.out, want, reduction=True)


class AllToAll(Collective):
    """Rank r sends chunk j (value r * n + j + 1) to rank j; it receives s * n + r + 1 from s."""

    name = "all_to_all"

    @property
    def result(self) -> Any:
        """The receive buffer: chunk s comes from group rank s."""
        return self.out

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        t, n, r = ctx.torch, ctx.size, ctx.rank
        count = _elements(ctx, nbytes, n)
        chunk = count // n
        self.inp = (
            (t.arange(n, dtype=t.float32) + r * n + 1)
            .repeat_interleave(chunk)
            .to(dtype=ctx.dtype, device=ctx.device)
        )
        self.out = ctx.full(count, -1)
        self.nbytes = count * self.inp.element_size()

    def __call__(self) -> None:
        """Send input chunk j to group rank j and receive one equal chunk from every rank."""
        self.ctx.dist.all_to_all_single(self.out, self.inp, group=self.ctx.group)

    def check(self) -> None:
        """Check that output chunk s is s * n + r + 1 on rank r: the chunk rank s addressed to this
        rank, in place s."""
        t, n, r = self.ctx.torch, self.ctx.size, self.ctx.rank
        want = (t.arange(n, dtype=t.float32) * n + r + 1).repeat_interleave(self.out.numel() // n)
        self.ctx.expect(self.name, self.out, want.to(self.ctx.dtype))


class Broadcast(Collective):
    """Group rank 0 sends value n + 1; every other rank's buffer starts at 0."""

    name = "broadcast"

    @property
    def result(self) -> Any:
        """The buffer group rank 0 sends from and every other rank receives into."""
        return self.buf

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        count = _elements(ctx, nbytes, 1)
        self.buf = ctx.full(count, ctx.size + 1 if ctx.rank == 0 else 0)
        self.nbytes = count * self.buf.element_size()
        self._src = ctx.global_rank(0)

    def reset(self) -> None:
        """Give group rank 0 the value n + 1 again and zero every other rank's buffer, so a
        broadcast that delivers nothing shows."""
        self.buf.fill_(self.ctx.size + 1 if self.ctx.rank == 0 else 0)

    def __call__(self) -> None:
        """Broadcast group rank 0's buffer to every rank of the group."""
        self.ctx.dist.broadcast(self.buf, src=self._src, group=self.ctx.group)

    def check(self) -> None:
        """Check that every rank's buffer holds n + 1, the value group rank 0 sent."""
        self.ctx.expect(self.name, self.buf, self.ctx.full(self.buf.numel(), self.ctx.size + 1))


class _P2P(Collective):
    """Shared buffers of the point-to-point ops: send value rank + 1, receive into ``recv``."""

    min_ranks = 2

    @property
    def result(self) -> Any:
        return self.recv

    def __init__(self, ctx: Context, nbytes: int):
        super().__init__(ctx, nbytes)
        if ctx.size < self.min_ranks:
            raise UsageError(f"{self.name} needs a group of at least 2 ranks, got {ctx.size}")
        count = _elements(ctx, nbytes, 1)
        self.send = ctx.full(count, ctx.rank + 1)
        self.recv = ctx.full(count, -1)
        self.nbytes = count * self.send.element_size()
        self._ops = self._p2p_ops()

    def _p2p_ops(self) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self) -> None:
        for work in self.ctx.dist.batch_isend_irecv(self._ops):
            work.wait()


class Ring(_P2P):
    """Every rank sends to the next and receives from the previous in one batched isend/irecv,
    the exchange context parallelism and ring attention do per K/V block (wraps around)."""

    name = "ring"

    def _p2p_ops(self) -> list[Any]:
        c, d = self.ctx, self.ctx.dist
        nxt, prv = c.global_rank((c.rank + 1) % c.size), c.global_rank((c.rank - 1) % c.size)
        return [
            d.P2POp(d.isend, self.send, nxt, c.group),
            d.P2POp(d.irecv, self.recv, prv, c.group),
        ]

    def check(self) -> None:
        """Check that the receive buffer holds the previous rank's value, ((r - 1) mod n) + 1."""
        c = self.ctx
        prev = (c.rank - 1) % c.size
        c.expect(self.name, self.recv, c.full(self.recv.numel(), prev + 1))


class SendRecv(_P2P):
    """Pipeline neighbours: rank i sends to i + 1 and receives from i - 1, no wrap-around
    (the first stage only sends, the last only receives)."""

    name = "send_recv"

    def _p2p_ops(self) -> list[Any]:
        c, d = self.ctx, self.ctx.dist
        ops = []
        if c.rank + 1 < c.size:
            ops.append(d.P2POp(d.isend, self.send, c.global_rank(c.rank + 1), c.group))
        if c.rank > 0:
            ops.append(d.P2POp(d.irecv, self.recv, c.global_rank(c.rank - 1), c.group))
        return ops

    def check(self) -> None:
        """Check that every rank but the first received the value of rank r - 1, which is r (the
        first stage receives nothing)."""
        c = self.ctx
        if c.rank > 0:  # rank 0 receives nothing
            c.expect(self.name, self.recv, c.full(self.recv.numel(), c.rank))


#: op name -> class, in the sweep order of :data:`parastrat.bench.OPS`.
REGISTRY: dict[str, type[Collective]] = {
    cls.name: cls
    for cls in (AllReduce, AllGather, ReduceScatter, AllToAll, Ring, SendRecv, Broadcast)
}


def build(op: str, ctx: Context, nbytes: int) -> Collective:
    """The op ``op`` with buffers for a message of ``nbytes`` on ``ctx``'s group."""
    try:
        cls = REGISTRY[op]
    except KeyError:
        raise UsageError(f"unknown collective {op!r}; choose from {', '.join(REGISTRY)}") from None
    return cls(ctx, nbytes)
