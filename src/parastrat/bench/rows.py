"""Benchmark results as plain rows, message-size parsing, and bandwidth arithmetic.

A :class:`Row` is one (op, message size, group) measurement with nccl-tests' bandwidth
definitions (``doc/PERFORMANCE.md`` in NVIDIA/nccl-tests):

- ``bytes`` is the *full array* size S as nccl-tests counts it: the all-reduce buffer, the
  all-gather output, the reduce-scatter input, each rank's all-to-all send buffer, the
  broadcast buffer and the message of a point-to-point transfer;
- ``algbw = S / t`` and ``busbw = algbw * bus_factor(op, n)``, with GB = 1e9 bytes.

Nothing here imports torch: rows can be read, written, plotted and fitted on a laptop.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import UsageError
from ..spec.cluster import OPS as _COST_MODEL_OPS
from ..spec.cluster import bus_factor

#: The collectives parastrat benchmarks, in the order a full sweep runs them: exactly the ones
#: the cost model prices (``spec/cluster.py``), so every measurement can calibrate it.
OPS: tuple[str, ...] = tuple(_COST_MODEL_OPS)

#: Most message sizes one sweep takes (nccl-tests' 1 B to 16 GiB by x2 is 35), and the largest
#: message (1 TiB, above any device's memory): ``--sizes 1:1GB:x1.00001`` (two million sizes)
#: is refused instead of running for days (docs/troubleshooting.md, "Bounds").
MAX_SIZES = 64
MAX_MESSAGE_BYTES = 2**40

#: Point-to-point ops: they need at least two ranks.
P2P_OPS = frozenset({"ring", "send_recv"})

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
}


@dataclass(frozen=True)
class Row:
    """One measurement: ``op`` on a group of ``world`` ranks with a message of ``bytes`` bytes.

    ``time_s`` is the median over ``iters`` timed iterations of the slowest rank's time
    (``time_min_s``/``time_max_s`` the extremes); ``group`` names the strategy group the op ran
    on (``"world"`` for a plain sweep) and ``span`` the link class it crossed (``"intra"``
    inside one scale-up domain / host, ``"inter"`` across), which is what :func:`fit` keys on.
    """

    op: str
    bytes: int
    world: int
    time_s: float
    time_min_s: float
    time_max_s: float
    algbw_gbps: float
    busbw_gbps: float
    iters: int
    backend: str
    dtype: str
    group: str = "world"
    span: str = "intra"

    @classmethod
    def from_times(
        cls,
        op: str,
        nbytes: int,
        world: int,
        times_s: Sequence[float],
        *,
        backend: str,
        dtype: str,
        group: str = "world",
        span: str = "intra",
    ) -> Row:
        """Build a row from per-iteration times (seconds), computing median and bandwidths."""
        if not times_s:
            raise UsageError(f"no timed iterations for {op} at {nbytes} bytes; use --iters >= 1")
        med, lo, hi = summarize(times_s)
        algbw = nbytes / med / 1e9 if med > 0 else math.inf
        return cls(
            op=op,
            bytes=int(nbytes),
            world=int(world),
            time_s=med,
            time_min_s=lo,
            time_max_s=hi,
            algbw_gbps=algbw,
            busbw_gbps=algbw * bus_factor(op, world),
            iters=len(times_s),
            backend=backend,
            dtype=dtype,
            group=group,
            span=span,
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain dict: one JSON object of :func:`rows_to_json` or one line of
        :func:`rows_to_csv`, read back by :meth:`from_dict`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """Read a row back from its dict (unknown keys ignored, missing optional ones default)."""
        if not isinstance(data, dict):
            raise UsageError(
                f"a benchmark row is a JSON object, got {type(data).__name__}: {data!r}"
            )
        names = {f.name for f in fields(cls)}
        missing = [
            f.name for f in fields(cls) if f.name not in data and f.name not in ("group", "span")
        ]
        if missing:
            raise UsageError(f"benchmark row lacks field(s) {', '.join(missing)}: {data!r}")
        values = {k: v for k, v in data.items() if k in names}
        for f in fields(cls):
            if f.name in values:
                _check_field(f.name, values[f.name], data)
        return cls(**values)


#: Row fields that are whole numbers >= 1, finite numbers >= 0, and text.
_WHOLE = ("bytes", "world", "iters")
_TEXT = ("op", "backend", "dtype", "group", "span")


def _check_field(name: str, value: Any, row: Any) -> None:
    """UsageError naming the field when a row's value has the wrong type or range (a string
    ``"2"`` for ``world``, a negative size, NaN times): rows must be what bench wrote."""
    if name in _TEXT:
        ok = isinstance(value, str) and bool(value)
        if ok and name == "op":
            ok = value in OPS
            want = f"one of {', '.join(OPS)}"
        elif ok and name == "span":
            ok = value in ("intra", "inter")
            want = "intra or inter"
        else:
            want = "a non-empty string"
    elif name in _WHOLE:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        want = "a whole number >= 1"
        if ok and name == "bytes" and value > MAX_MESSAGE_BYTES:
            ok, want = False, f"at most {MAX_MESSAGE_BYTES} bytes"
    else:
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        )
        want = "a finite number >= 0"
    if not ok:
        raise UsageError(f"benchmark row field {name!r} must be {want}, got {value!r}: {row!r}")


def summarize(times_s: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of a list of times."""
    ordered = sorted(float(t) for t in times_s)
    k = len(ordered)
    mid = k // 2
    median = ordered[mid] if k % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    return median, ordered[0], ordered[-1]


def parse_size(text: str) -> int:
    """Bytes in ``"4KB"``, ``"1.5MB"``, ``"64M"``, ``"4096"`` (K/M/G are powers of 1024, as in
    nccl-tests' ``-b``/``-e`` flags; bandwidths use GB = 1e9)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise UsageError(f"cannot read the message size {text!r}; write e.g. 4096, 4KB, 1MB, 1.5GB")
    value = float(m.group(1)) * _UNITS[unit]
    if value < 1:
        raise UsageError(f"message size {text!r} is below one byte")
    if value > MAX_MESSAGE_BYTES:
        raise UsageError(
            f"message size {text!r} is above {format_bytes(MAX_MESSAGE_BYTES)}, more than any "
            "device holds"
        )
    return int(value)


def parse_sizes(spec: str | int | Iterable[str | int]) -> list[int]:
    """Message sizes from a list (``"4KB,1MB,64MB"``) or a range ``"LO:HI[:xF]"`` (geometric,
    factor F, default 2: ``"1KB:64MB:x4"`` is 1 KiB, 4 KiB, ... up to 64 MiB) or a mix of both.
    Returns sorted unique byte counts."""
    if isinstance(spec, int):
        return [parse_size(str(spec))]
    tokens: list[str | int] = (
        [t for t in str(spec).split(",") if t.strip()] if isinstance(spec, str) else list(spec)
    )
    if not tokens:
        raise UsageError("no message sizes given; write e.g. --sizes 4KB,1MB or 1KB:64MB:x4")
    out: set[int] = set()
    for tok in tokens:
        if isinstance(tok, int):
            out.add(parse_size(str(tok)))
            continue
        parts = tok.split(":")
        if len(parts) == 1:
            out.add(parse_size(parts[0]))
            continue
        if len(parts) not in (2, 3):
            raise UsageError(f"cannot read the size range {tok!r}; write LO:HI or LO:HI:xFACTOR")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        factor_txt = parts[2].strip().lower().lstrip("x") if len(parts) == 3 else "2"
        try:
            factor = float(factor_txt)
        except ValueError:
            factor = 0.0
        if not 1 < factor < math.inf:
            raise UsageError(f"the step of size range {tok!r} must be a factor above 1, e.g. x2")
        if hi < lo:
            raise UsageError(f"size range {tok!r} ends below its start")
        count = int(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
        if count + len(out) > MAX_SIZES:
            raise UsageError(
                f"size range {tok!r} holds {count:,} sizes; a sweep takes at most {MAX_SIZES} "
                "(use a larger step, e.g. x2)"
            )
        size = float(lo)
        while size <= hi * (1 + 1e-9):
            out.add(int(size))
            size *= factor
    if len(out) > MAX_SIZES:
        raise UsageError(f"{len(out)} message sizes given; a sweep takes at most {MAX_SIZES}")
    return sorted(out)


def format_bytes(n: int) -> str:
    """``1048576`` -> ``"1MB"``, ``1536`` -> ``"1.5KB"`` (powers of 1024, like the size flags)."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{n}B"


def rows_to_json(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Rows as a JSON-ready list of dicts."""
    return [r.to_dict() for r in rows]


def rows_from_json(data: Any) -> list[Row]:
    """Rows from a JSON document: a list of row dicts or ``{"rows": [...]}``."""
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    if not isinstance(data, list):
        raise UsageError('benchmark JSON must be a list of rows or {"rows": [...]}')
    return [r if isinstance(r, Row) else Row.from_dict(r) for r in data]


def load_rows(path: str) -> list[Row]:
    """Rows from a file ``parastrat bench --output FILE`` wrote: JSON, or CSV for a ``.csv``
    name (what ``--format csv`` writes), checked field by field either way."""
    from .._io import read_json, read_text

    if str(path).lower().endswith(".csv"):
        data: Any = [_csv_row(r) for r in csv.DictReader(io.StringIO(read_text(path)))]
    else:
        data = read_json(path, what="benchmark file")
    try:
        return rows_from_json(data)
    except UsageError as exc:
        raise UsageError(f"benchmark file {path}: {exc}") from None


def _csv_row(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row's text as the JSON row's types; a value that does not read stays text, which
    :meth:`Row.from_dict` refuses naming its field."""
    out: dict[str, Any] = {}
    for name, text in row.items():
        if name is None or text is None:
            continue
        if name in _WHOLE and text.strip().isdigit():
            out[name] = int(text)
        elif name not in _TEXT:
            try:
                out[name] = float(text)
            except ValueError:
                out[name] = text
        else:
            out[name] = text
    return out


def rows_to_csv(rows: Iterable[Row]) -> str:
    """Rows as CSV text with a header line."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.name for f in fields(Row)], lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow(r.to_dict())
    return buf.getvalue()
