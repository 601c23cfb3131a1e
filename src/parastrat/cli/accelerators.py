"""``parastrat accelerators``: the device presets that ``--accelerator`` takes, with the rates,
memory and links the cost models price them with; ``parastrat accelerators NAME`` prints one
in full, with its sources."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from rich.table import Table
from rich.text import Text

from ._common import console, print_json
from ._presets import add_listing, runs_table, show_fields

#: Precision keys shown as columns, in this order (dense peak PFLOP/s).
PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")
#: How to measure a device instead of trusting its preset (printed under the table).
MEASURE = (
    "Rates are datasheet peaks and achievable bus bandwidths (sources: parastrat accelerators "
    "NAME).  Measured kernels: parastrat bench --kernels --fit cal.json on the device; "
    "measured links: parastrat bench --fit cal.json; then --calibration cal.json."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``accelerators`` subcommand (list the device presets, or show one) to ``sub``."""
    add_listing(
        sub,
        "accelerators",
        "list the device presets (--accelerator NAME); NAME: one in full with sources",
        "List the device presets that --accelerator takes, with memory, dense peak rates per "
        "precision, HBM bandwidth and the scale-up / scale-out links the cost models use; with "
        "NAME, every field of that preset and where each figure comes from.",
        run,
    )


def run(args: argparse.Namespace) -> int:
    """Print every device preset, or ``args.name``'s fields; return 0 (an unknown name raises
    the registry's SpecError)."""
    from ..spec import hardware

    if args.name is not None:
        return _show_one(hardware.get(args.name), args.format)
    devices = [hardware.get(n) for n in hardware.names()]
    if args.format == "json":
        print_json([a.to_dict() for a in devices])
        return 0
    console.print(_summary(devices))
    console.print(MEASURE, markup=False)
    return 0


def _summary(devices: list[Any]) -> Table:
    """One row per device: memory, peak PFLOP/s per precision, HBM and link bandwidths."""
    table = Table(title="accelerator presets (--accelerator NAME)")
    heads = ("name", "memory GiB", *(f"{p} PF/s" for p in PRECISIONS), "HBM TB/s")
    heads += ("scale-up", "up GB/s", "out GB/s", "per node")
    for head in heads:
        table.add_column(head, justify="left" if head == "name" else "right")
    for a in devices:
        usable = a.usable_memory_bytes or a.memory_bytes
        peaks = [f"{a.peak_flops[p] / 1e15:.2f}" if p in a.peak_flops else "-" for p in PRECISIONS]
        cells = [a.name, f"{usable / 2**30:.1f}", *peaks, f"{a.mem_bandwidth_Bps / 1e12:.2f}"]
        cells += [str(a.scale_up_domain), f"{a.scale_up_bw_Bps / 1e9:.0f}"]
        cells += [f"{a.scale_out_bw_Bps / 1e9:.0f}", str(a.devices_per_node)]
        table.add_row(*(Text(c) for c in cells))
    return table


def _show_one(accel: Any, fmt: str) -> int:
    """Every field of ``accel`` with its sources, and the runs published on it: the training
    runs in a table, the DiT generations counted by model."""
    from ..estimate.published_runs import published_dit_runs, published_runs

    runs, dit_runs = published_runs(accelerator=accel.name), published_dit_runs(None, accel.name)
    data = with_usable_memory(accel, accel.to_dict(), as_text=fmt == "table")
    if fmt == "json":
        data["published_runs"] = [r.to_dict() for r in runs]
        data["published_dit_runs"] = [r.to_dict() for r in dit_runs]
    code = show_fields(f"{accel.name} (--accelerator {accel.name})", data, fmt)
    if fmt == "table" and runs:
        console.print(runs_table(f"published training runs on {accel.name}", runs, True))
    if fmt == "table" and dit_runs:
        counts = Counter(r.model for r in dit_runs)
        by_model = ", ".join(f"{m} {n}" for m, n in sorted(counts.items()))
        console.print(
            f"published DiT generations on {accel.name}: {len(dit_runs)} ({by_model}); "
            "parastrat models NAME lists a model's",
            markup=False,
        )
    return code


def with_usable_memory(accel: Any, data: dict[str, Any], *, as_text: bool) -> dict[str, Any]:
    """``data`` (``accel.to_dict()``) with ``usable_memory_bytes`` after ``memory_bytes``: the
    memory a Cluster plans against (``usable_memory_bytes`` where measured, else nominal);
    ``as_text``: both also in GiB, as plan's and memory's lines print them."""
    from ..spec.cluster import Cluster

    usable = Cluster(accel, num_devices=1).accel.memory_bytes  # what plan, memory use
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "usable_memory_bytes":
            continue  # shown after memory_bytes, as planned against
        text = as_text and key == "memory_bytes"
        out[key] = f"{value:,} ({value / 2**30:.1f} GiB)" if text else value
        if key == "memory_bytes":
            shown = f"{usable:,} ({usable / 2**30:.1f} GiB, what the estimates plan against)"
            out["usable_memory_bytes"] = shown if as_text else usable
    return out
