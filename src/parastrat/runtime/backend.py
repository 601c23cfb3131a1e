"""Where am I, and which communication backend fits this device?

Reads the launcher's environment (torchrun's ``env://`` variables, or Slurm's when torchrun's
are absent), picks the backend from the device (CUDA -> ``nccl``, Ascend NPU -> ``hccl``,
otherwise ``gloo``) and starts the default ``torch.distributed`` process group, binding the
device first as NCCL and HCCL want (``torch.cuda.set_device(LOCAL_RANK)``;
``torch.npu.set_device(LOCAL_RANK)`` before ``init_process_group("hccl")``, the order MindIE-SD's
model ports use).  torch and torch_npu are imported only when needed.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from ..errors import UsageError

#: How to start a multi-rank world: what a user sees when a strategy needs more ranks than the
#: one process that was started without a launcher.
LAUNCH_HINT = (
    "launch one process per rank with torchrun (e.g. torchrun --nproc-per-node 8 "
    "train.py) or srun, or try it on local CPU ranks first: parastrat verify --world N "
    "[strategy flags]"
)

#: Backends this module knows how to prepare a device for.
BACKENDS = ("nccl", "hccl", "gloo")

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class LaunchEnv:
    """The process's place in the job, as the launcher described it.

    ``source`` is ``"torchrun"`` (RANK/WORLD_SIZE set), ``"slurm"`` (SLURM_PROCID/SLURM_NTASKS)
    or ``"single"`` (neither: a one-process world on this machine).
    """

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str
    #: MASTER_ADDR and MASTER_PORT are both in the environment (torchrun sets them, and its
    #: agent's store is reached only through ``env://``)
    env_rendezvous: bool = False

    @property
    def init_method(self) -> str:
        """The ``init_process_group`` URL: ``env://`` under torchrun (when its MASTER_ADDR and
        MASTER_PORT are set), else ``tcp://addr:port`` with the defaults filled in."""
        if self.source == "torchrun" and self.env_rendezvous:
            return "env://"
        return f"tcp://{self.master_addr}:{self.master_port}"


@dataclass(frozen=True)
class Started:
    """Result of :func:`init_distributed`: the backend in use and whether this call started it."""

    backend: str
    started: bool
    env: LaunchEnv | None = None


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm nodelist such as ``"gpu[01-03,07],login1"`` into host names.

    Handles the common forms (comma-separated hosts, one bracketed range list per host with
    zero padding kept) without calling ``scontrol``.
    """
    hosts: list[str] = []
    for part in _split_top_level(nodelist.strip()):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", part)
        if not m:
            if "[" in part or "]" in part:
                raise UsageError(
                    f"cannot parse the Slurm nodelist entry {part!r}; "
                    "set MASTER_ADDR to the first node's address"
                )
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise UsageError(
                    f"cannot parse the range {item!r} in Slurm nodelist {nodelist!r}; "
                    "set MASTER_ADDR to the first node's address"
                )
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{width}d}{suffix}")
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def detect_env(environ: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read rank, world size, local rank and master address from the launcher's variables.

    torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) win; otherwise Slurm's
    (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) with the first host of SLURM_NODELIST (or
    SLURM_JOB_NODELIST) as master unless MASTER_ADDR is set; otherwise a one-process world.
    """
    env = os.environ if environ is None else environ
    port = _int(env, "MASTER_PORT", DEFAULT_PORT)
    if not 1 <= port <= 65535:
        raise UsageError(f"MASTER_PORT={port} is not a TCP port; use one in 1-65535, e.g. 29500")
    if "RANK" in env or "WORLD_SIZE" in env:
        launched = _launched(env, "RANK", "WORLD_SIZE", "torchrun")
        local_rank = _int(env, "LOCAL_RANK", 0)
        local_world = env.get("LOCAL_WORLD_SIZE")
        if local_world and local_rank >= _int(env, "LOCAL_WORLD_SIZE"):
            raise UsageError(
                f"LOCAL_RANK={local_rank} contradicts LOCAL_WORLD_SIZE={local_world}: a local "
                "rank counts from 0 to LOCAL_WORLD_SIZE - 1"
            )
        if launched[1] > 1 and not env.get("MASTER_ADDR"):
            raise UsageError(
                f"RANK and WORLD_SIZE={launched[1]} are set but MASTER_ADDR is not: every rank "
                "needs the address of rank 0 (torchrun sets it; by hand, export MASTER_ADDR and "
                "MASTER_PORT)"
            )
        return LaunchEnv(
            rank=launched[0],
            world_size=launched[1],
            local_rank=local_rank,
            master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
            master_port=port,
            source="torchrun",
            env_rendezvous=bool(env.get("MASTER_ADDR")) and bool(env.get("MASTER_PORT")),
        )
    if "SLURM_PROCID" in env or "SLURM_NTASKS" in env:
        _launched(env, "SLURM_PROCID", "SLURM_NTASKS", "srun")
        addr = env.get("MASTER_ADDR")
        if not addr:
            nodelist = env.get("SLURM_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
            hosts = expand_nodelist(nodelist) if nodelist else []
            addr = hosts[0] if hosts else "127.0.0.1"
        return LaunchEnv(
            rank=_int(env, "SLURM_PROCID"),
            world_size=_int(env, "SLURM_NTASKS"),
            local_rank=_int(env, "SLURM_LOCALID", 0),
            master_addr=addr,
            master_port=port,
            source="slurm",
        )
    return LaunchEnv(
        rank=0,
        world_size=1,
        local_rank=0,
        master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=port,
        source="single",
    )


def _launched(env: Mapping[str, str], rank_key: str, world_key: str, how: str) -> tuple[int, int]:
    """(rank, world size) from a launcher's pair of variables, both set and consistent; a
    UsageError says which variable is missing or contradicts which."""
    for have, lack in ((rank_key, world_key), (world_key, rank_key)):
        if have in env and lack not in env:
            raise UsageError(
                f"{have}={env[have]} is set but {lack} is not: a launcher sets both (run under "
                f"{how}, or unset {have} to run as one process)"
            )
    rank, world = _int(env, rank_key), _int(env, world_key)
    if world < 1:
        raise UsageError(f"{world_key}={world} must be at least 1")
    if rank >= world:
        raise UsageError(
            f"{rank_key}={rank} contradicts {world_key}={world}: ranks count from 0 to "
            f"{world_key} - 1"
        )
    return rank, world


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        if default is None:
            raise UsageError(f"environment variable {key} is not set")
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise UsageError(f"environment variable {key}={raw!r} is not a whole number (0-9 digits)")
    return int(raw)


def npu_available() -> bool:
    """True when torch_npu is installed and an Ascend NPU is visible (imports torch_npu)."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch
        import torch_npu  # noqa: F401 - registers torch.npu

        return bool(torch.npu.is_available())  # type: ignore[attr-defined]
    except Exception:
        return False


def pick_backend(backend: str = "auto") -> str:
    """The backend to use: ``backend`` itself unless ``"auto"``, else from the device."""
    if backend != "auto":
        if backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; use one of auto, {', '.join(BACKENDS)}")
        return backend
    from .._deps import require

    torch = require("torch")
    if torch.cuda.is_available():
        return "nccl"
    if npu_available():
        return "hccl"
    return "gloo"


def bind_device(backend: str, local_rank: int) -> str:
    """Make ``local_rank``'s accelerator current, as NCCL/HCCL need before the process group.

    Returns the device string this rank computes on (``"cuda:0"``, ``"npu:3"``, ``"cpu"``).
    """
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(
                "the nccl backend needs CUDA, and this torch sees no CUDA device; use "
                "backend='gloo' (--backend gloo) on CPUs, or 'auto' to pick by device"
            )
        if local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"local rank {local_rank} has no CUDA device: this node has "
                f"{torch.cuda.device_count()}; start at most that many ranks per node"
            )
        torch.cuda.set_device(local_rank)
        return f"cuda:{local_rank}"
    if backend == "hccl":
        from .._deps import require

        require("torch_npu", "npu", why="the hccl backend needs Ascend's torch_npu")
        import torch

        torch.npu.set_device(local_rank)  # type: ignore[attr-defined]
        return f"npu:{local_rank}"
    return "cpu"


def device_for(backend: str) -> str:
    """The device string of this rank for a started backend (after :func:`bind_device`)."""
    import torch

    if backend == "nccl":
        return f"cuda:{torch.cuda.current_device()}"
    if backend == "hccl":
        return f"npu:{torch.npu.current_device()}"  # type: ignore[attr-defined]
    return "cpu"


def as_timedelta(timeout: timedelta | float | int | None) -> timedelta | None:
    """Accept a timedelta or a number of seconds (UsageError unless positive and finite)."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise UsageError(f"timeout={timeout!r} must be a positive number of seconds or timedelta")
    return timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(seconds))


def init_distributed(
    backend: str = "auto",
    *,
    timeout: timedelta | float | None = None,
    environ: Mapping[str, str] | None = None,
) -> Started:
    """Start the default process group from the launcher's environment unless already started.

    Binds the device first (nccl/hccl), then calls ``init_process_group``.  Returns which
    backend is in use and whether this call started it (so a matching teardown knows whether
    to destroy it).
    """
    from .._deps import require

    dist = require("torch.distributed")
    if dist.is_initialized():
        return Started(backend=str(dist.get_backend()), started=False)
    env = detect_env(environ)
    name = pick_backend(backend)
    bind_device(name, env.local_rank)
    kwargs = {}
    td = as_timedelta(timeout)
    if td is not None:
        kwargs["timeout"] = td
    if env.source == "single":
        from .launch import free_port

        url = f"tcp://127.0.0.1:{free_port()}"
    else:
        url = env.init_method
    try:
        store = _prefixed_store(url, env, td)
        dist.init_process_group(
            backend=name, store=store, rank=env.rank, world_size=env.world_size, **kwargs
        )
    except (RuntimeError, ValueError) as exc:  # torch's DistStoreError / DistNetworkError,
        raise _rendezvous_error(exc, env, td) from None  # and env:// rendezvous ValueErrors
    return Started(backend=name, started=True, env=env)


def torch_message(exc: BaseException) -> str:
    """The first meaningful line of a torch error, without the C++ frames and "Exception
    raised from ..." trailer torch appends (users see the message, not c10 internals)."""
    text = str(exc)
    for marker in ("\nException raised from", "Exception raised from ", "\nframe #"):
        text = text.split(marker, 1)[0]
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _rendezvous_error(exc: BaseException, env: LaunchEnv, td: timedelta | None) -> UsageError:
    """A UsageError that says what went wrong meeting the other ranks, and what to check."""
    msg = torch_message(exc)
    where = f"{env.master_addr}:{env.master_port}"
    low = msg.lower()
    if "address already in use" in low or "eaddrinuse" in low:
        return UsageError(
            f"rank {env.rank}: MASTER_PORT {env.master_port} is already in use on "
            f"{env.master_addr} ({msg}); choose a free port (export MASTER_PORT=...)"
        )
    if "timeout" in low or "timed out" in low:
        waited = f" after {td.total_seconds():g} s" if td is not None else ""
        return UsageError(
            f"rank {env.rank}: the other ranks of the {env.world_size}-rank world did not join at "
            f"{where}{waited} ({msg}); start every rank (torchrun starts them for you) with "
            "the same MASTER_ADDR/MASTER_PORT, or lower --timeout to fail sooner"
        )
    return UsageError(
        f"rank {env.rank}: could not meet the other ranks at {where} ({msg}); check "
        "MASTER_ADDR/MASTER_PORT and that every rank was started"
    )


#: Rendezvous stores kept for the life of the process, one per (url, rank, world), and how
#: many process groups each has seen.
_STORES: dict[tuple[str, int, int], list] = {}


def _prefixed_store(url: str, env: LaunchEnv, td: timedelta | None):
    """The rendezvous store for ``url``, under a fresh key prefix for each start.

    Starting, destroying and starting the default group again on the same MASTER_PORT would
    otherwise race: a fast rank could reach the previous incarnation's store server and read
    its stale keys.  Keeping one store per process and a new prefix per start (every rank
    starts the same number of times, so the prefixes agree) avoids that.
    """
    import torch.distributed as dist

    key = (url, env.rank, env.world_size)
    if key not in _STORES:
        kwargs = {"timeout": td} if td is not None else {}
        store, _, _ = next(dist.rendezvous(url, env.rank, env.world_size, **kwargs))
        _STORES[key] = [store, 0]
    entry = _STORES[key]
    entry[1] += 1
    return dist.PrefixStore(f"parastrat/{entry[1]}", entry[0])
