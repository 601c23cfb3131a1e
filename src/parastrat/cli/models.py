"""``parastrat models``: the model presets with their sizes, and how to use your own config."""

from __future__ import annotations

import argparse

from rich.table import Table

from ._common import console, print_json

#: Where a model that is not a preset comes from (printed under the table).
OWN_MODEL = (
    "Your own model: pass its Hugging Face config with --hf-config PATH (the config.json file, "
    "or the folder that holds it, e.g. a downloaded checkpoint; nothing is downloaded)."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` subcommand (list the model presets) to ``sub``."""
    p = sub.add_parser(
        "models",
        help="list the model presets (--model NAME) with their sizes",
        description="List the model presets that --model takes, with their shape and "
        "parameter counts; a model of your own goes in with --hf-config PATH.",
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print every preset (name, layers, hidden, heads, experts, parameters); return 0."""
    from ..spec import models

    specs = [models.get_llm(n) for n in models.names()]
    if args.format == "json":
        print_json(
            [
                {
                    "name": m.name,
                    "num_layers": m.num_layers,
                    "hidden_size": m.hidden_size,
                    "num_attention_heads": m.num_attention_heads,
                    "num_experts": m.num_experts,
                    "params": m.num_params,
                    "active_params": m.num_active_params,
                }
                for m in specs
            ]
        )
        return 0
    table = Table(title="model presets (--model NAME)")
    for col in ("name", "layers", "hidden", "heads", "experts", "params", "active"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for m in specs:
        table.add_row(
            m.name,
            str(m.num_layers),
            f"{m.hidden_size:,}",
            str(m.num_attention_heads),
            str(m.num_experts) if m.is_moe else "-",
            f"{m.num_params / 1e9:,.1f} B",
            f"{m.num_active_params / 1e9:,.1f} B",
        )
    console.print(table)
    console.print(OWN_MODEL, markup=False)
    return 0
