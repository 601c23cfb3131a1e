"""Recipe author's flow: plan a strategy, apply it to a Megatron Bridge recipe, print the launch.

    python examples/megatron_bridge_recipe.py [--model gpt3-175b] [--gpus 128]
        [--recipe gpt3_175b_pretrain_config]

(GPT-3 175B's recipe builds without downloading a Hugging Face config; recipes of
Hugging Face models such as ``llama3_8b_pretrain_config`` fetch theirs first.)

1. ``parastrat.plan`` chooses the strategy, micro-batch and recompute (pure Python, seconds on
   a CPU), for the recipe's own sequence length and global batch when the recipe loads.
2. With Megatron Bridge importable (it needs Transformer Engine), the real recipe's
   ``ConfigContainer`` is built and ``parastrat.apply(cfg, plan)`` writes what the plan priced
   into it; a refused strategy leaves it untouched.  Without Bridge, the example says why and
   prints the same settings as the overrides ``run_recipe.py`` takes (one field table behind
   both, so they are what ``apply`` would write).
3. The ``torchrun ... run_recipe.py`` command line.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shlex
import warnings
from typing import Any

import parastrat as ps
from parastrat.adapters import megatron as mg


def find_recipe(name: str) -> Any:
    """Bridge's recipe function ``name``: exported by ``megatron.bridge.recipes``, or defined
    in the recipe module named after it (``gpt3_175b_pretrain_config`` in ``gpt.gpt3_175b``)."""
    recipes = importlib.import_module("megatron.bridge.recipes")
    if hasattr(recipes, name):
        return getattr(recipes, name)
    for info in pkgutil.walk_packages(recipes.__path__, "megatron.bridge.recipes."):
        if name.startswith(info.name.rsplit(".", 1)[-1] + "_"):
            module = importlib.import_module(info.name)
            if hasattr(module, name):
                return getattr(module, name)
    raise LookupError(f"no Megatron Bridge recipe named {name!r}")


def load_recipe(name: str) -> tuple[Any, str | None]:
    """(the recipe's ConfigContainer, None), or (None, why it cannot be built here)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return find_recipe(name)(), None
    except Exception as exc:  # not installed, Transformer Engine missing, no such recipe
        return None, f"{type(exc).__name__}: {exc}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--recipe", default="gpt3_175b_pretrain_config")
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--accelerator", default="h100")
    ap.add_argument("--seq-len", type=int, default=2048, help="without the recipe")
    ap.add_argument("--global-batch-size", type=int, default=2048, help="without the recipe")
    args = ap.parse_args()

    cfg, why = load_recipe(args.recipe)
    seq, gbs = args.seq_len, args.global_batch_size
    if cfg is not None:  # plan for what the recipe trains
        seq, gbs = cfg.model.seq_length, cfg.train.global_batch_size
    spec = ps.models.get(args.model)
    plan = ps.plan(
        spec,
        ps.Cluster(accelerator=args.accelerator, num_devices=args.gpus),
        seq_len=seq,
        global_batch_size=gbs,
        top_k=1,
    )
    best = plan.best
    print(f"1. plan: {spec.name} on {args.gpus} x {args.accelerator}, seq {seq}, batch {gbs}")
    print(f"     {best.label()}")

    if cfg is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # megatron-core's notes about unrelated defaults
            _, changes = ps.apply(cfg, plan, world_size=args.gpus, report=True)
        print(f"2. apply to the real recipe {args.recipe}(): validated, then set")
        for c in changes:
            print(f"     {c}")
        bad = best.strategy.replace(tp=best.strategy.tp * 3, dp=None)
        try:
            ps.apply(cfg, bad, world_size=args.gpus)
        except ps.StrategyError as err:
            print(f"   (a refused one, {bad}, leaves the config as it was:)")
            for v in err.violations:
                print(f"     {v}")
    else:
        print(f"2. Megatron Bridge cannot build {args.recipe}() here ({why}).")
        print("   Install megatron-bridge with Transformer Engine to apply to the recipe;")
        print("   parastrat.apply(cfg, plan) would write these (as run_recipe.py overrides):")
        for line in mg.to_overrides(plan, recipe=args.recipe):
            print(f"     {line}")

    argv = mg.launch_command(
        plan,  # its best, with the switches and precision it was priced with
        recipe=args.recipe,
        nproc_per_node=min(args.gpus, 8),
        nnodes=max(1, args.gpus // 8),
        micro_batch_size=best.micro_batch_size,
        global_batch_size=gbs,
        recompute=best.recompute,
    )
    print("3. launch (Megatron Bridge scripts/training/run_recipe.py):")
    print("     " + shlex.join(argv))
    if cfg is not None and not hasattr(
        importlib.import_module("megatron.bridge.recipes"), args.recipe
    ):
        print("   note: run_recipe.py finds recipes exported by megatron.bridge.recipes, and this")
        print(f"   Bridge does not export {args.recipe}: run these overrides from a script of")
        print("   your own that builds the recipe and calls megatron.bridge.training.pretrain.")


if __name__ == "__main__":
    main()
