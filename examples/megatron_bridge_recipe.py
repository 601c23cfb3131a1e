"""Recipe author's flow: plan a strategy, apply it to a Bridge config, print the launch command.

    python examples/megatron_bridge_recipe.py [--model llama3-8b] [--gpus 16] [--seq-len 8192]

Runs on a CPU in seconds: the planner is pure Python, and the config is a Megatron Bridge
``ConfigContainer``-shaped object whose ``model`` is a real megatron-core ``TransformerConfig``
(Bridge itself needs Transformer Engine to import).  With Bridge installed the same two lines
work on a real recipe::

    from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
    cfg = llama3_8b_pretrain_config()
    ps.apply(cfg, best, world_size=16)
"""

from __future__ import annotations

import argparse
import shlex
import warnings
from dataclasses import dataclass, field

import parastrat as ps
from parastrat.adapters import megatron as mg


@dataclass
class TrainConfig:
    """The part of Bridge's ``TrainingConfig`` the adapter reads."""

    global_batch_size: int
    micro_batch_size: int = 1


@dataclass
class DistConfig:
    """The part of Bridge's ``DistributedInitConfig`` the adapter writes."""

    use_tp_pp_dp_mapping: bool = False


@dataclass
class RecipeConfig:
    """Shaped like Bridge's ``ConfigContainer``: ``model``, ``train``, ``dist``."""

    model: object
    train: TrainConfig
    dist: DistConfig = field(default_factory=DistConfig)


def bridge_like_config(spec: ps.ModelSpec, seq_len: int, global_batch_size: int) -> RecipeConfig:
    """A recipe config for ``spec``: a real TransformerConfig with Bridge's ``seq_length``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
        from megatron.core.transformer.transformer_config import TransformerConfig

    @dataclass
    class ModelProvider(TransformerConfig):  # like Bridge's GPTModelProvider
        seq_length: int = 4096

    model = ModelProvider(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_query_groups=spec.num_query_groups,
        ffn_hidden_size=spec.ffn_hidden_size,
        num_moe_experts=spec.num_moe_experts,
        add_bias_linear=False,
        seq_length=seq_len,
    )
    return RecipeConfig(model=model, train=TrainConfig(global_batch_size=global_batch_size))


def choose(
    spec: ps.ModelSpec, gpus: int, accelerator: str, seq_len: int, global_batch_size: int
) -> tuple[ps.Strategy, int]:
    """The planner's best strategy and micro-batch size."""
    plan = ps.plan(
        spec,
        ps.Cluster(accelerator=accelerator, num_devices=gpus),
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        top_k=1,
    )
    best = plan.best
    return best.strategy.with_world_size(gpus), best.micro_batch_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--accelerator", default="h100")
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--global-batch-size", type=int, default=128)
    ap.add_argument("--recipe", default="llama3_8b_pretrain_config")
    args = ap.parse_args()

    spec = ps.models.get(args.model)
    s, mbs = choose(spec, args.gpus, args.accelerator, args.seq_len, args.global_batch_size)
    print(f"1. plan: {spec.name} on {args.gpus} x {args.accelerator} -> {s}, micro-batch {mbs}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # megatron-core's notes about unrelated defaults
        cfg = bridge_like_config(spec, args.seq_len, args.global_batch_size)
        cfg.train.micro_batch_size = mbs
        _, changes = ps.apply(cfg, s, world_size=args.gpus, report=True)
    print("2. apply: validated against the config, then set")
    for c in changes:
        print(f"     {c}")

    # A strategy the config refuses changes nothing and says why.
    bad = s.replace(tp=s.tp * 3, dp=None)
    try:
        ps.apply(cfg, bad, world_size=args.gpus)
    except ps.StrategyError as err:
        print(f"   (a refused one, {bad}, leaves the config as it was:)")
        for v in err.violations:
            print(f"     {v}")

    nodes = max(1, args.gpus // 8)
    argv = mg.launch_command(
        s,
        recipe=args.recipe,
        nproc_per_node=min(args.gpus, 8),
        nnodes=nodes,
        micro_batch_size=mbs,
        global_batch_size=args.global_batch_size,
    )
    print("3. launch (Megatron Bridge scripts/training/run_recipe.py):")
    print("     " + shlex.join(argv))


if __name__ == "__main__":
    main()
