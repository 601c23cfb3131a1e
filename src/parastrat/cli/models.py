"""``parastrat models``: the model presets with their sizes (language models for ``plan`` /
``explain`` / ``memory``, diffusion transformers for ``plan-dit``), one preset in full with
``parastrat models NAME``, and how to use a model of your own."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from ._common import console, print_json
from ._presets import add_listing, runs_table, show_fields

#: Where a model that is not a preset comes from (printed under the tables).
OWN_MODEL = (
    "Your own model: pass its Hugging Face config with --hf-config PATH (the config.json file, "
    "or the folder that holds it, e.g. a downloaded checkpoint; nothing is downloaded); a "
    "diffusion transformer's diffusers config with plan-dit --config PATH."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` subcommand (list the model presets, or show one) to ``sub``."""
    add_listing(
        sub,
        "models",
        "list the model presets (--model NAME) with their sizes; NAME: one in full",
        "List the model presets that --model takes (language models for plan, explain and "
        "memory; diffusion transformers for plan-dit), with their shape and parameter counts; "
        "with NAME, every field of that preset.  A model of your own goes in with "
        "--hf-config PATH (plan-dit: --config PATH).",
        run,
    )


def run(args: argparse.Namespace) -> int:
    """Print every preset, or ``args.name``'s fields; return 0 (an unknown name raises the
    registry's SpecError, with its did-you-mean)."""
    if args.name is not None:
        return _show_one(args.name, args.format)
    llms, dits = _summaries()
    if args.format == "json":
        print_json(llms + dits)
        return 0
    console.print(_table("language-model presets (plan/explain/memory --model NAME)", llms))
    console.print(_table("diffusion-transformer presets (plan-dit --model NAME)", dits))
    console.print(OWN_MODEL, markup=False)
    return 0


def _summaries() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One summary dict per language-model preset and per DiT preset (``kind`` tells which)."""
    from ..spec import dit, models

    llms = [
        _summary(m, "llm", m.num_experts, m.num_params, m.num_active_params)
        for m in (models.get_llm(n) for n in models.names())
    ]
    dits = [
        _summary(
            d,
            "dit",
            d.experts,
            d.total_params,
            d.num_params,
            diffusers_class=d.diffusers_class,
            guidance_distilled=d.guidance_distilled,
        )
        for d in (dit.get(n) for n in dit.names())
    ]
    return llms, dits


def _summary(
    spec: Any, kind: str, experts: int, params: float, active: float, **extra: Any
) -> dict[str, Any]:
    """The listing's fields of one preset (a ModelSpec or a DiTSpec): ``params`` all that is
    kept (every expert), ``active`` what one token (an LLM) or one denoising step (a DiT:
    one of its expert transformers) runs."""
    return {
        "name": spec.name,
        "kind": kind,
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_experts": experts,
        "params": params,
        "active_params": active,
        **extra,
    }


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    """Name, layers, hidden, heads, experts, parameters kept and active of ``rows`` (DiTs:
    their diffusers class too; "-" for one expert transformer, as for a dense LLM)."""
    dit = bool(rows) and rows[0]["kind"] == "dit"
    table = Table(title=title)
    cols = ("name", "layers", "hidden", "heads", *(("class",) if dit else ()), "experts")
    for col in (*cols, "params", "active"):
        table.add_column(col, justify="left" if col in ("name", "class") else "right")
    for r in rows:
        cells = [r["name"], str(r["num_layers"]), f"{r['hidden_size']:,}"]
        cells.append(str(r["num_attention_heads"]))
        if dit:
            cells.append(r["diffusers_class"] + (" (distilled)" if r["guidance_distilled"] else ""))
        cells.append(str(r["num_experts"]) if r["num_experts"] > int(dit) else "-")
        cells += [f"{r[k] / 1e9:,.1f} B" for k in ("params", "active_params")]
        table.add_row(*(Text(c) for c in cells))
    return table


def _show_one(name: str, fmt: str) -> int:
    """Every field of the preset ``name`` (a language model's or a DiT's), with its derived
    sizes, and the runs published for it (measured, and as the cost model predicts them)."""
    from ..estimate.published_runs import published_dit_runs, published_runs
    from ..spec import models
    from ..spec.dit import DiTSpec

    spec = models.get(name)
    if isinstance(spec, DiTSpec):
        return _show_dit(spec, published_dit_runs(spec.name), fmt)
    data = {
        "kind": "llm",
        **spec.to_dict(),
        "num_params": spec.num_params,
        "num_active_params": spec.num_active_params,
    }
    runs = published_runs(spec.name)
    if fmt == "json":
        data["published_runs"] = [r.to_dict() for r in runs]
    code = show_fields(f"{spec.name} (plan, explain, memory --model {spec.name})", data, fmt)
    if fmt == "table" and runs:
        console.print(runs_table(f"{spec.name}: published runs", runs))
    return code


def _show_dit(spec: Any, runs: Any, fmt: str) -> int:
    """A DiT preset's fields, and its published generations one line each."""
    data = {"kind": "dit", **spec.to_dict()}
    if fmt == "json":
        data["published_runs"] = [r.to_dict() for r in runs]
    code = show_fields(f"{spec.name} (plan-dit --model {spec.name})", data, fmt)
    if fmt == "table" and runs:
        lines = [f"{spec.name}: published generations (measured; predicted by the DiT model):"]
        console.print("\n".join([*lines, *(f"  {r.summary()}" for r in runs)]), markup=False)
    return code
