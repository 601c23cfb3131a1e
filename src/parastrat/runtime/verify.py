"""Numeric smoke test of a strategy's process groups: does every group really work?

:func:`verify` runs on every rank of a started world (under torchrun, or inside
:func:`verify_local`'s spawned ranks), initializes the strategy and checks, group by group:

- ``tp-matmul``: a column-then-row split matrix multiply over TP (and expert TP) equals the
  unsplit product (Megatron's ColumnParallelLinear -> RowParallelLinear pattern);
- ``all-to-all``: an all-to-all over EP and Ulysses delivers block ``j`` of rank ``i`` to the
  ``j``-th member and nothing else;
- ``ring``: passing blocks around CP and ring groups returns every member's block;
- ``pp-chain``: a send/recv chain over PP reaches the last stage with every stage's addend;
- ``all-reduce``: a sum over every other group (DP, DP x CP, expert DP, CFG, ...) averages right.

Every collective waits at most ``timeout_s`` seconds, so a broken link is an error naming the
check, the group kind, its ranks and this rank, not a hang.  Values are small integers, so
the comparisons are exact.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from .._deps import require
from ..layout import KINDS
from ..strategy import Strategy

#: Called as ``on_step(step_name, rank)`` before each step (progress display, fault injection).
StepHook = Callable[[str, int], None]

#: The last step of every run: the ranks' checks gathered over the world.
_GATHER = "gather"

#: Columns of the rank table, training and inference.
TRAINING_AXES = ("tp", "pp", "dp", "cp", "ep", "etp", "edp")
INFERENCE_AXES = ("tp", "ulysses", "ring", "cfg", "pp", "dp")


@dataclass
class Check:
    """One check on one rank: which group it exercised and whether the numbers came out right."""

    name: str
    kind: str
    rank: int
    group: list[int]
    ok: bool
    detail: str = ""
    seconds: float = 0.0

    def __str__(self) -> str:
        state = "ok" if self.ok else "FAILED"
        text = f"{self.name} over the {self.kind} group {self.group} on rank {self.rank}: {state}"
        return text + (f" ({self.detail})" if self.detail else "")


@dataclass
class VerifyReport:
    """The outcome of :func:`verify` over the whole world.

    ``checks`` holds every rank's checks; ``coords`` maps rank -> its index along each axis;
    ``error`` is set when the run itself broke (a rank died, a collective timed out) and
    ``failed_rank`` then names the rank blamed.
    """

    strategy: Strategy
    world_size: int
    backend: str = ""
    checks: list[Check] = field(default_factory=list)
    coords: dict[int, dict[str, int]] = field(default_factory=dict)
    error: str | None = None
    failed_rank: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the run finished without error, ran at least one check, and all passed."""
        return self.error is None and all(c.ok for c in self.checks) and bool(self.checks)

    @property
    def failures(self) -> list[Check]:
        """The checks whose numbers came out wrong."""
        return [c for c in self.checks if not c.ok]

    @property
    def axes(self) -> tuple[str, ...]:
        """The rank-table columns: the inference axes for an xDiT-style grid, else the training
        ones."""
        return INFERENCE_AXES if self.strategy.is_inference else TRAINING_AXES

    def summary(self) -> str:
        """One line (or a few) saying what passed or what failed where."""
        if self.error is not None:
            return f"verify FAILED on rank {self.failed_rank}: {self.error}"
        if not self.checks:
            return (
                f"verify checked nothing: every group of {self.strategy} on {self.world_size} "
                "rank(s) has a single rank; verify a world of 2 or more ranks"
            )
        if self.failures:
            return "verify FAILED:\n" + "\n".join(f"  {c}" for c in self.failures)
        names = sorted({c.name for c in self.checks})
        return (
            f"verify passed: {len(self.checks)} checks ({', '.join(names)}) over "
            f"{self.world_size} ranks on {self.backend} in {self.seconds:.1f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """The outcome as a JSON-ready dict (every check, every rank's coordinates): what
        ``parastrat verify --format json`` prints."""
        return {
            "ok": self.ok,
            "strategy": str(self.strategy),
            "degrees": self.strategy.to_dict(),
            "world_size": self.world_size,
            "backend": self.backend,
            "error": self.error,
            "failed_rank": self.failed_rank,
            "seconds": round(self.seconds, 3),
            "coords": {str(r): c for r, c in sorted(self.coords.items())},
            "checks": [asdict(c) for c in self.checks],
        }


def verify(
    strategy: Strategy,
    *,
    backend: str = "auto",
    timeout_s: float = 30.0,
    on_step: StepHook | None = None,
    groups: Any = None,
) -> VerifyReport:
    """Check every process group of ``strategy`` numerically; call on every rank.

    Uses ``groups`` (a :class:`~parastrat.runtime.groups.Groups`) when given, else initializes
    the strategy (and destroys it afterwards).  Each collective waits at most ``timeout_s``
    seconds; a broken or stuck link raises RuntimeError naming the check, the group and the
    rank.  Returns the whole world's report on every rank.
    """
    dist = require("torch.distributed", why="verifying process groups")

    from .groups import initialize

    t0 = time.monotonic()
    own = groups is None
    if own:
        groups = initialize(strategy, backend=backend, timeout=timeout_s)
    try:
        runner = _Runner(groups, timeout_s, on_step)
        runner.run_all()
        gathered = runner.gather(dist)
    finally:
        if own:
            groups.destroy()
    report = VerifyReport(
        strategy=groups.strategy,
        world_size=groups.world_size,
        backend=groups.backend,
        seconds=time.monotonic() - t0,
    )
    for rank, coords, checks in sorted(gathered, key=lambda x: x[0]):
        report.coords[rank] = coords
        report.checks += [Check(**c) for c in checks]
    return report


def verify_local(
    strategy: Strategy,
    world_size: int,
    timeout_s: float = 30.0,
    *,
    startup_s: float = 180.0,
    on_step: StepHook | None = None,
) -> VerifyReport:
    """Run :func:`verify` on ``world_size`` freshly spawned local gloo ranks.

    The strategy is checked against the world first (StrategyError, nothing spawned).  The
    whole run is bounded by ``startup_s + 4 * timeout_s`` seconds (process start and
    framework imports, then the steps); a rank that dies or hangs turns into a report with
    ``error`` set and ``failed_rank`` naming it, never a hang; when that rank cannot say
    where it stopped, ``error`` names the check, group kind and ranks its peers saw it fail
    in.  ``on_step`` must be a module-level function (it crosses a process boundary).
    UsageError for a ``timeout_s`` or ``startup_s`` that is not a finite number above 0.
    """
    from .launch import RankFailure, check_seconds, spawn_local

    check_seconds("timeout_s", timeout_s)
    check_seconds("startup_s", startup_s)
    sized = strategy.with_world_size(world_size)
    t0 = time.monotonic()
    try:
        results = spawn_local(
            _verify_rank,
            world_size,
            args=(strategy.to_dict(), float(timeout_s), on_step),
            backend=None,
            timeout_s=startup_s + 4 * timeout_s,
        )
    except RankFailure as exc:
        return VerifyReport(
            strategy=sized,
            world_size=world_size,
            backend="gloo",
            error=failure_text(exc.rank, exc.reason, exc.failures),
            failed_rank=exc.rank,
            seconds=time.monotonic() - t0,
        )
    report = results[0]
    report.seconds = time.monotonic() - t0
    return report


#: How :meth:`_Runner._step` names a failed step: "<check> over the <kind> group [ranks]
#: failed on rank <r>" (parsed back by :func:`failure_text`).
_STEP_RE = re.compile(
    r"(?P<check>[\w-]+) over the (?P<kind>[\w-]+) group \[(?P<ranks>[\d, ]*)\] "
    r"failed on rank (?P<rank>\d+)"
)


def failure_text(blamed: int, reason: str, failures: dict[int, str]) -> str:
    """The report's error for a failed local run: the blamed rank's reason (first line) and,
    when that does not name a check (a rank that hung or died cannot say where), the checks,
    group kinds and ranks its peers were running when they saw it fail."""
    lines = reason.strip().splitlines()
    first = lines[0] if lines else "failed without a reason"
    if _STEP_RE.search(first):
        return first
    seen = _peer_steps(blamed, failures)
    return f"{first}; where its peers saw it fail: {seen}" if seen else first


def _peer_steps(blamed: int, failures: dict[int, str]) -> str:
    """The distinct steps the other failed ranks name, each as "<check> over the <kind> group
    [ranks] (seen by rank r, ...)": those whose group holds ``blamed`` when there are any (the
    others waited on a rank that waited on it), and checks before the final gather."""
    steps: dict[tuple[str, str, str], list[int]] = {}
    for rank, why in sorted(failures.items()):
        found = _STEP_RE.search(why) if rank != blamed else None
        if found:
            key = (found["check"], found["kind"], found["ranks"])
            steps.setdefault(key, []).append(rank)

    def holds_blamed(key: tuple[str, str, str]) -> bool:
        return str(blamed) in key[2].replace(" ", "").split(",")

    best = [k for k in steps if k[0] != _GATHER and holds_blamed(k)]
    keys = best or [k for k in steps if k[0] != _GATHER] or list(steps)
    return "; ".join(
        f"{check} over the {kind} group [{ranks}] (seen by rank"
        f"{'s' if len(steps[(check, kind, ranks)]) > 1 else ''} "
        f"{', '.join(map(str, steps[(check, kind, ranks)]))})"
        for check, kind, ranks in keys
    )


def print_step(name: str, rank: int) -> None:
    """A :data:`StepHook` for progress: rank 0 writes one line per check to stderr (plain
    lines, so logs keep them when stderr is not a terminal)."""
    if rank == 0:
        import sys

        sys.stderr.write(f"verify: {name} ...\n")
        sys.stderr.flush()


def _verify_rank(
    rank: int, world: int, strategy_dict: dict, timeout_s: float, on_step: StepHook | None
) -> VerifyReport:
    """One spawned rank of :func:`verify_local` (gloo on CPU).

    The groups are destroyed only after a run that finished: after a failed step a collective
    may still be pending on them (a peer hung), and destroying them would wait for it, so this
    rank would report too late to be heard; the process ends (or is killed) right after."""
    import warnings

    from .groups import initialize

    warnings.filterwarnings("ignore")  # megatron without Transformer Engine is noisy
    strategy = Strategy.from_dict(strategy_dict)
    groups = initialize(strategy, backend="gloo", timeout=timeout_s)
    report = verify(strategy, timeout_s=timeout_s, on_step=on_step, groups=groups)
    groups.destroy()
    return report


class _Runner:
    """The checks of one rank, each collective bounded by the timeout."""

    def __init__(self, groups: Any, timeout_s: float, on_step: StepHook | None):
        self.torch = require("torch", why="verifying process groups")
        self.g = groups
        self.rank = groups.rank
        self.device = groups.device
        self.timeout = timedelta(seconds=timeout_s)
        self.on_step = on_step
        self.checks: list[Check] = []

    # -- plumbing -------------------------------------------------------------------------
    def _wait(self, work: Any) -> None:
        if work is not None:
            work.wait(timeout=self.timeout)

    def _step(self, name: str, kind: str, fn: Callable[[list[int], Any], str | None]) -> None:
        ranks = self.g.ranks[kind]
        if self.on_step is not None:
            self.on_step(name, self.rank)
        t0 = time.monotonic()
        try:
            problem = fn(ranks, self.g[kind])
        except Exception as exc:
            raise RuntimeError(
                f"{name} over the {kind} group {ranks} failed on rank "
                f"{self.rank}: {type(exc).__name__}: {exc}"
            ) from exc
        self.checks.append(
            Check(
                name=name,
                kind=kind,
                rank=self.rank,
                group=list(ranks),
                ok=problem is None,
                detail=problem or "",
                seconds=round(time.monotonic() - t0, 4),
            )
        )

    def gather(self, dist: Any) -> list[Any]:
        """Every rank's (rank, coords, checks), gathered over the whole world; a failure names
        the step as a check's does ("gather over the world group [...] failed on rank r")."""
        world = list(range(self.g.world_size))
        gathered: list[Any] = [None] * self.g.world_size
        mine = (self.rank, self.g.coords, [asdict(c) for c in self.checks])
        try:
            dist.all_gather_object(gathered, mine)
        except Exception as exc:
            raise RuntimeError(
                f"{_GATHER} over the world group {world} failed on rank {self.rank} (after its "
                f"checks): {type(exc).__name__}: {exc}"
            ) from exc
        return gathered

    def _distinct(self, kinds: tuple[str, ...], seen: set) -> list[str]:
        """Kinds whose groups have more than one rank and a partition not yet exercised."""
        out = []
        for kind in kinds:
            part = tuple(sorted(tuple(g) for g in self.g.layout[kind]))
            if len(self.g.ranks[kind]) > 1 and part not in seen:
                seen.add(part)
                out.append(kind)
        return out

    def run_all(self) -> None:
        seen_mm: set = set()
        for kind in self._distinct(("tp", "etp"), seen_mm):
            self._step("tp-matmul", kind, self.split_matmul)
        seen_a2a: set = set()
        for kind in self._distinct(("ep", "ulysses"), seen_a2a):
            self._step("all-to-all", kind, self.all_to_all)
        seen_ring: set = set()
        for kind in self._distinct(("cp", "ring"), seen_ring):
            self._step("ring", kind, self.ring_pass)
        if len(self.g.ranks["pp"]) > 1:
            self._step("pp-chain", "pp", self.pp_chain)
        seen_ar = seen_mm | seen_a2a | seen_ring
        seen_ar.add(tuple(sorted(tuple(g) for g in self.g.layout["pp"])))
        for kind in self._distinct(tuple(k for k in KINDS), seen_ar):
            self._step("all-reduce", kind, self.all_reduce_mean)

    # -- the checks -----------------------------------------------------------------------
    def split_matmul(self, ranks: list[int], pg: Any) -> str | None:
        """Column-split A, row-split B: sum over the group of X A_i B_i == X A B."""
        torch = self.torch
        n, i = len(ranks), ranks.index(self.rank)
        gen = torch.Generator().manual_seed(1000 + ranks[0])
        f = 4 * n
        x = torch.randint(-3, 4, (4, 8), generator=gen).float()
        a = torch.randint(-3, 4, (8, f), generator=gen).float()
        b = torch.randint(-3, 4, (f, 8), generator=gen).float()
        cols = slice(i * f // n, (i + 1) * f // n)
        partial = ((x @ a[:, cols]) @ b[cols, :]).to(self.device)
        self._wait(self.torch.distributed.all_reduce(partial, group=pg, async_op=True))
        want = (x @ a @ b).to(self.device)
        if not torch.equal(partial, want):
            diff = (partial - want).abs().max().item()
            return f"split product differs from the unsplit one by up to {diff:g}"
        return None

    def all_to_all(self, ranks: list[int], pg: Any) -> str | None:
        """Block j of every member goes to member j: rank r sends 1000*r + j to member j."""
        torch = self.torch
        n, i, k = len(ranks), ranks.index(self.rank), 4
        send = torch.cat([torch.full((k,), 1000.0 * self.rank + j) for j in range(n)])
        send = send.to(self.device)
        recv = torch.empty_like(send)
        self._wait(torch.distributed.all_to_all_single(recv, send, group=pg, async_op=True))
        want = torch.cat([torch.full((k,), 1000.0 * src + i) for src in ranks]).to(self.device)
        if not torch.equal(recv, want):
            got = sorted({int(v) for v in recv.cpu().tolist()})
            return f"received blocks {got}, expected 1000*source + {i} from sources {ranks}"
        return None

    def ring_pass(self, ranks: list[int], pg: Any) -> str | None:
        """Pass blocks to the next member n-1 times; every member's block must come by."""
        torch, dist = self.torch, self.torch.distributed
        n, i = len(ranks), ranks.index(self.rank)
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        block = torch.full((4,), float(self.rank + 1), device=self.device)
        seen = [int(block[0].item())]
        for _ in range(n - 1):
            incoming = torch.empty_like(block)
            ops = [
                dist.P2POp(dist.isend, block, nxt, group=pg),
                dist.P2POp(dist.irecv, incoming, prv, group=pg),
            ]
            for work in dist.batch_isend_irecv(ops):
                self._wait(work)
            block = incoming
            seen.append(int(block[0].item()))
        want = sorted(r + 1 for r in ranks)
        if sorted(seen) != want:
            return f"blocks seen {sorted(seen)}, expected {want}"
        return None

    def pp_chain(self, ranks: list[int], pg: Any) -> str | None:
        """Stage s receives the sum of (rank+1) over stages < s, adds its own, passes it on."""
        torch, dist = self.torch, self.torch.distributed
        n, i = len(ranks), ranks.index(self.rank)
        value = torch.zeros(1, device=self.device)
        if i > 0:
            self._wait(dist.irecv(value, src=ranks[i - 1], group=pg))
        value += self.rank + 1
        if i < n - 1:
            self._wait(dist.isend(value, dst=ranks[i + 1], group=pg))
        want = float(sum(r + 1 for r in ranks[: i + 1]))
        if value.item() != want:
            return f"stage {i} holds {value.item():g}, expected {want:g}"
        return None

    def all_reduce_mean(self, ranks: list[int], pg: Any) -> str | None:
        """All-reduce of each member's rank, divided by the group size, is the ranks' mean."""
        torch = self.torch
        t = torch.tensor([float(self.rank)], device=self.device)
        self._wait(torch.distributed.all_reduce(t, group=pg, async_op=True))
        mean = t.item() / len(ranks)
        want = sum(ranks) / len(ranks)
        if mean != want:
            return f"mean {mean:g}, expected {want:g}"
        return None
