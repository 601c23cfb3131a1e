"""``parastrat models``: the model presets with their sizes (language models for ``plan`` /
``explain`` / ``memory``, diffusion transformers for ``plan-dit``), one preset in full with
``parastrat models NAME``, and how to use a model of your own."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from ._common import console, print_json

#: Where a model that is not a preset comes from (printed under the tables).
OWN_MODEL = (
    "Your own model: pass its Hugging Face config with --hf-config PATH (the config.json file, "
    "or the folder that holds it, e.g. a downloaded checkpoint; nothing is downloaded); a "
    "diffusion transformer's diffusers config with plan-dit --config PATH."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` subcommand (list the model presets, or show one) to ``sub``."""
    p = sub.add_parser(
        "models",
        help="list the model presets (--model NAME) with their sizes; NAME: one in full",
        description="List the model presets that --model takes (language models for plan, "
        "explain and memory; diffusion transformers for plan-dit), with their shape and "
        "parameter counts; with NAME, every field of that preset.  A model of your own goes "
        "in with --hf-config PATH (plan-dit: --config PATH).",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="show this preset in full")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


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

    llms = []
    for m in (models.get_llm(n) for n in models.names()):
        llms.append(
            {
                "name": m.name,
                "kind": "llm",
                "num_layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "num_attention_heads": m.num_attention_heads,
                "num_experts": m.num_experts,
                "params": m.num_params,
                "active_params": m.num_active_params,
            }
        )
    dits = []
    for d in (dit.get(n) for n in dit.names()):
        dits.append(
            {
                "name": d.name,
                "kind": "dit",
                "num_layers": d.num_layers,
                "hidden_size": d.hidden_size,
                "num_attention_heads": d.num_attention_heads,
                "num_experts": 0,
                "params": d.num_params,
                "active_params": d.num_params,
                "diffusers_class": d.diffusers_class,
                "guidance_distilled": d.guidance_distilled,
            }
        )
    return llms, dits


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    """Name, layers, hidden, heads, experts and parameters of ``rows`` (DiTs: their diffusers
    class in place of the experts)."""
    dit = bool(rows) and rows[0]["kind"] == "dit"
    table = Table(title=title)
    cols = ("name", "layers", "hidden", "heads", "class" if dit else "experts", "params")
    for col in (*cols, *(() if dit else ("active",))):
        table.add_column(col, justify="left" if col in ("name", "class") else "right")
    for r in rows:
        cells = [r["name"], str(r["num_layers"]), f"{r['hidden_size']:,}"]
        cells.append(str(r["num_attention_heads"]))
        if dit:
            cells.append(r["diffusers_class"] + (" (distilled)" if r["guidance_distilled"] else ""))
        else:
            cells.append(str(r["num_experts"]) if r["num_experts"] else "-")
        cells.append(f"{r['params'] / 1e9:,.1f} B")
        if not dit:
            cells.append(f"{r['active_params'] / 1e9:,.1f} B")
        table.add_row(*(Text(c) for c in cells))
    return table


def _show_one(name: str, fmt: str) -> int:
    """Every field of the preset ``name`` (a language model's or a DiT's), with its derived
    sizes."""
    from ..spec import models
    from ..spec.dit import DiTSpec

    spec = models.get(name)
    if isinstance(spec, DiTSpec):
        data = {"kind": "dit", **spec.to_dict()}
    else:
        data = {
            "kind": "llm",
            **spec.to_dict(),
            "num_params": spec.num_params,
            "num_active_params": spec.num_active_params,
        }
    if fmt == "json":
        print_json(data)
        return 0
    use = "plan-dit" if data["kind"] == "dit" else "plan, explain, memory"
    table = Table(title=Text(f"{spec.name} ({use} --model {spec.name})"))
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        table.add_row(key, Text(_cell(value)))
    console.print(table)
    return 0


def _cell(value: Any) -> str:
    """A field's value as a table cell (large counts with thousands separators)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e6:
        return f"{value:,.0f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)
