"""Fit the cost model's latency and bandwidth to measured rows.

The cost model (:meth:`parastrat.Cluster.collective_time`) prices one collective as::

    t = alpha * latency_steps(op, n) + S * bus_factor(op, n) / busbw

which is linear in the two unknowns ``alpha`` and ``1 / busbw``.  :func:`fit` solves that
least-squares problem once per (op, link class), weighting every point by ``1 / t`` so that
the error minimised is the *relative* one: otherwise the largest messages alone would decide
the fit and the latency of small ones would come out as noise.  ``alpha`` is kept >= 0 (when
the unconstrained solution is negative the bandwidth is refitted with ``alpha = 0``).

The result is the JSON form :class:`~parastrat.spec.cluster.Calibration` reads
(``{"ops": {op: {span: {"alpha_s", "busbw_Bps"}}}, "source": ...}``) plus a ``"fit"`` section
with the points used and the relative RMS error of each fitted pair.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._io import read_json, write_text
from ..errors import SpecError, UsageError
from ..spec.cluster import Calibration, bus_factor, latency_steps
from .rows import Row, rows_from_json

#: Shortest time a measured collective can take (seconds): a row below it (0, or 1e-300 in a
#: hand-edited file) is no measurement and is left out of the fit.
MIN_TIME_S = 1e-9


def _solve(points: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(alpha, beta) minimising sum(((alpha x + beta y) - t) / t)^2 with alpha >= 0, beta > 0.

    ``points`` are (x = latency steps, y = S * bus factor, t = seconds).  None when the data
    cannot separate a positive bandwidth term (e.g. every message the same size).
    """
    sxx = sxy = syy = sxt = syt = 0.0
    for x, y, t in points:
        w = 1.0 / (t * t)
        sxx += w * x * x
        sxy += w * x * y
        syy += w * y * y
        sxt += w * x * t
        syt += w * y * t
    det = sxx * syy - sxy * sxy
    if det > 1e-12 * max(sxx * syy, 1e-300):
        alpha = (sxt * syy - syt * sxy) / det
        beta = (sxx * syt - sxy * sxt) / det
        if alpha >= 0 and beta > 0:
            return alpha, beta
    if syy <= 0:
        return None
    beta = syt / syy  # alpha = 0: bandwidth only
    return (0.0, beta) if beta > 0 else None


def fit(rows: Iterable[Row | dict[str, Any]], *, source: str | None = None) -> dict[str, Any]:
    """Latency and bus bandwidth per (op, link class) from benchmark rows.

    ``rows`` are :class:`Row` s or their dicts (JSON output of ``parastrat bench``).  Every
    (op, span) with at least two distinct message sizes is fitted; collectives on a single rank
    carry no information and are ignored.  Raises :class:`UsageError` when nothing can be fitted.
    The returned dict is what ``Cluster.calibrate`` and ``parastrat plan --calibration`` take.
    """
    table = rows_from_json(list(rows))
    ran_on = {r.backend for r in table}
    if len(ran_on) > 1:  # one fit would blend them and could carry no backend to check
        raise UsageError(
            f"the rows were measured with {len(ran_on)} backends ({', '.join(sorted(ran_on))}); "
            "a calibration describes one: fit each backend's rows on their own"
        )
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in table:
        if r.world <= 1 and bus_factor(r.op, r.world) == 0:
            continue
        groups[(r.op, r.span)].append(r)
    ops: dict[str, dict[str, dict[str, float]]] = {}
    quality: dict[str, dict[str, dict[str, Any]]] = {}
    skipped: list[str] = []
    for (op, span), pts in sorted(groups.items()):
        data = [
            (float(latency_steps(op, r.world)), r.bytes * bus_factor(op, r.world), r.time_s)
            for r in pts
            if r.time_s >= MIN_TIME_S
        ]
        if len({r.bytes for r in pts}) < 2 or len(data) < 2:
            skipped.append(f"{op}/{span}: needs at least two message sizes")
            continue
        solved = _solve(data)
        if solved is None:
            skipped.append(f"{op}/{span}: time does not grow with message size")
            continue
        alpha, beta = solved
        rel = [((alpha * x + beta * y) - t) / t for x, y, t in data]
        ops.setdefault(op, {})[span] = {"alpha_s": alpha, "busbw_Bps": 1.0 / beta}
        quality.setdefault(op, {})[span] = {
            "points": len(data),
            "rel_rmse": math.sqrt(sum(e * e for e in rel) / len(rel)),
            "min_bytes": min(r.bytes for r in pts),
            "max_bytes": max(r.bytes for r in pts),
            "worlds": sorted({r.world for r in pts}),
        }
    if not ops:
        why = "; ".join(skipped) or "no rows"
        raise UsageError(
            f"cannot fit a calibration ({why}); sweep at least two message sizes, "
            "e.g. --sizes 64KB:64MB:x4"
        )
    if source is None:
        backends = sorted({r.backend for r in table})
        worlds = sorted({r.world for r in table})
        source = (
            f"parastrat bench ({'/'.join(backends)}, group sizes "
            f"{', '.join(map(str, worlds))}, {len(table)} rows)"
        )
    out: dict[str, Any] = {"ops": ops, "source": source, "fit": quality}
    if ran_on:  # what the collectives ran on; a cluster of another refuses it
        out["backend"] = ran_on.pop()
    if skipped:
        out["skipped"] = skipped
    Calibration.from_dict(out)  # the cost model must accept what we write
    return out


def save(calibration: dict[str, Any], path: str | Path) -> Path:
    """Write a calibration (from :func:`fit`) as JSON, whole or not at all (a previous file
    stays intact on any failure); returns the path written."""
    Calibration.from_dict(calibration)
    text = json.dumps(calibration, indent=2, allow_nan=False) + "\n"
    return write_text(path, text, what="calibration")


def load(path: str | Path) -> dict[str, Any]:
    """Read a calibration JSON file written by :func:`save` (validated by the cost model)."""
    data = read_json(path, what="calibration file")
    try:
        Calibration.from_dict(data)
    except SpecError as exc:
        raise UsageError(f"calibration file {Path(path)}: {exc}") from None
    return data
