"""Record or compare what ``parastrat.plan`` returns, to show a speed change changes nothing.

Plans: the cases of ``benchmarks/planner_speed.py`` (top 10) and every plan call that
``benchmarks/planner_accuracy.py`` makes for its published rows (``_rank``).  For each plan it
keeps the whole ranking (strategy, micro-batch, recompute, memory and step reports, reasons,
alternatives) and the counters (enumerated, bounded, priced, memory checks, memory pruned).

    python tools/plan_snapshot.py record /tmp/before.json
    python tools/plan_snapshot.py compare /tmp/before.json     # exit 1 on any difference

Numbers compare to 1e-9 relative; everything else exactly.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import parastrat as ps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import planner_accuracy  # noqa: E402
import planner_speed  # noqa: E402

COUNTERS = ("enumerated", "bounded", "priced", "memory_checks", "memory_pruned")


def _summary(plan: ps.Plan) -> dict[str, Any]:
    ranked = []
    for c in plan.ranked:
        d = c.to_dict()
        d["notes"] = list(c.notes)
        d["label"] = c.label()
        ranked.append(d)
    return {"counters": {k: getattr(plan, k) for k in COUNTERS}, "ranked": ranked}


class _Recorder:
    """``parastrat`` with ``plan`` recording each result (what ``planner_accuracy`` sees)."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out

    def __getattr__(self, name: str) -> Any:
        return getattr(ps, name)

    def plan(self, model: Any, cluster: Any, *args: Any, **kw: Any) -> ps.Plan:
        key = f"accuracy {model.name} {cluster.num_devices}x{cluster.accel.name} {kw}"
        t0 = time.perf_counter()
        try:
            result = ps.plan(model, cluster, *args, **kw)
        except ps.errors.UsageError as e:
            self.out[key] = {"error": str(e)}
            raise
        self.out[key] = _summary(result)
        print(f"{time.perf_counter() - t0:6.2f} s  {key}", flush=True)
        return result


def record() -> dict[str, Any]:
    """Every plan's summary, by a key naming the call."""
    out: dict[str, Any] = {}
    for name, accel, n, seq, gbs in planner_speed.CASES:
        t0 = time.perf_counter()
        result = ps.plan(
            ps.models.get(name),
            ps.Cluster(accel, n),
            seq_len=seq,
            global_batch_size=gbs,
            precision="fp8",
            top_k=10,
        )
        key = f"speed {name} {n}x{accel}"
        out[key] = _summary(result)
        print(f"{time.perf_counter() - t0:6.2f} s  {key}", flush=True)
    planner_accuracy.ps = _Recorder(out)  # type: ignore[assignment]
    rows = planner_accuracy.published_rows(short=False)
    out["accuracy rows"] = [
        {k: r[k] for k in ("name", "strategy", "predicted", "rank", "ratio")} for r in rows
    ]
    return out


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (floats to 1e-9 relative)."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if math.isnan(a) and math.isnan(b):
                return []
            if math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) or a == b:
                return []
        return [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in diff(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__)
        return 2
    t0 = time.perf_counter()
    now = json.loads(json.dumps(record()))
    print(f"{time.perf_counter() - t0:.1f} s in all")
    if argv[0] == "record":
        Path(argv[1]).write_text(json.dumps(now, indent=1))
        return 0
    diffs = diff(json.loads(Path(argv[1]).read_text()), now)
    for d in diffs[:50]:
        print(d)
    print(f"{len(diffs)} differences in {len(now)} plans")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
