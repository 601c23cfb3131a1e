"""A training-script skeleton: plan -> apply -> initialize -> one step.

Runs on CPUs with gloo (no GPU needed)::

    torchrun --nproc-per-node 4 examples/torchrun_training.py
    python examples/torchrun_training.py --local 4          # same, spawned by parastrat

and unchanged on a GPU or Ascend node (the backend follows the device: nccl / hccl).

1. plan: ask ``parastrat.plan`` for the best strategy of a tiny model on this many devices
   (pins such as ``--tp 2`` narrow the search); if the planner is unavailable or finds
   nothing, fall back to a fixed strategy;
2. apply: write the strategy into a Megatron Core ``TransformerConfig`` (validated);
3. initialize: ``strategy.initialize()`` starts torch.distributed from torchrun's environment
   and builds Megatron's process groups; ``groups["tp"]`` etc. are this rank's groups;
4. step: on CUDA, a tiny Megatron ``GPTModel`` forward/backward; on CPU (Megatron's model code
   needs CUDA) the same column-then-row tensor-parallel MLP by hand, with gradients averaged
   over data parallel ranks.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import parastrat as ps

HIDDEN, HEADS, LAYERS, VOCAB, SEQ = 64, 4, 4, 128, 32


def tiny_model() -> ps.ModelSpec:
    """The model the planner sizes (matches the config below)."""
    return ps.ModelSpec(
        name="tiny-gpt",
        num_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        ffn_hidden_size=4 * HIDDEN,
        vocab_size=VOCAB,
    )


def choose_strategy(world: int, pins: dict) -> ps.Strategy:
    """The planner's best strategy for ``world`` devices, or a fixed one when it cannot say."""
    try:
        cluster = ps.Cluster(accelerator="h100", num_devices=world)
        result = ps.plan(
            tiny_model(), cluster, seq_len=SEQ, global_batch_size=8 * world, top_k=1, **pins
        )
        return result.best.strategy.with_world_size(world)
    except (ImportError, AttributeError, ValueError) as exc:  # planner absent / nothing fits
        print(f"planner unavailable ({type(exc).__name__}: {exc}); using a fixed strategy")
        tp = pins.get("tp") or (2 if world % 2 == 0 else 1)
        return ps.Strategy(tp=tp, pp=pins.get("pp") or 1, sp=tp > 1).with_world_size(world)


def megatron_config(strategy: ps.Strategy):
    """A Megatron Core TransformerConfig with the strategy written in by parastrat.apply."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
    )
    return ps.apply(cfg, strategy, world_size=strategy.world_size)


def gpt_step(cfg, groups) -> float:
    """One forward/backward of a tiny Megatron GPTModel (CUDA; pipeline stage 0 of 1)."""
    import torch
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    model_parallel_cuda_manual_seed(1234)
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
    ).to(groups.device)
    gen = torch.Generator().manual_seed(groups.coords.get("dp", 0))
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=gen).to(groups.device)
    position = torch.arange(SEQ, device=groups.device).unsqueeze(0).expand(2, -1)
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, device=groups.device), diagonal=1).bool()
    loss = model(tokens, position, mask, labels=tokens).mean()
    loss.backward()
    return float(loss.item())


def tp_mlp_step(groups) -> float:
    """A Megatron-style MLP by hand: column-split W1, row-split W2, all-reduce over TP;
    gradients averaged over the data-parallel (x context-parallel) group."""
    import torch
    import torch.distributed as dist

    tp, i = groups.size("tp"), groups.coords["tp"]
    ffn = 4 * HIDDEN
    init = torch.Generator().manual_seed(0)  # same full weights on every rank
    w1 = torch.randn(HIDDEN, ffn, generator=init) / HIDDEN**0.5
    w2 = torch.randn(ffn, HIDDEN, generator=init) / ffn**0.5
    cols = slice(i * ffn // tp, (i + 1) * ffn // tp)
    w1 = w1[:, cols].clone().requires_grad_()
    w2 = w2[cols, :].clone().requires_grad_()
    data = torch.Generator().manual_seed(100 + groups.coords["dp"])  # a batch per DP rank
    x = torch.randn(8, HIDDEN, generator=data)
    partial = torch.nn.functional.gelu(x @ w1) @ w2
    out = partial.clone()
    dist.all_reduce(out, group=groups["tp"])  # RowParallelLinear's reduction
    out = partial + (out - partial).detach()  # gradient flows to local shard
    loss = (out - x).pow(2).mean()
    loss.backward()
    for p in (w1, w2):  # DP gradient averaging
        dist.all_reduce(p.grad, group=groups["dp-cp"])
        p.grad /= groups.size("dp-cp")
    return float(loss.item())


def main_rank(rank: int = 0, world: int = 1, pins: dict | None = None) -> dict:
    """Everything one rank does; under torchrun rank/world come from the environment."""
    warnings.filterwarnings("ignore")  # megatron without Transformer Engine is verbose
    import torch.distributed as dist

    from parastrat.runtime.backend import detect_env

    world = detect_env().world_size
    strategy = choose_strategy(world, pins or {})
    cfg = megatron_config(strategy)
    groups = strategy.initialize()
    try:
        if groups.backend == "nccl" and strategy.pp == 1:
            loss = gpt_step(cfg, groups)
        else:
            loss = tp_mlp_step(groups)
        losses = [None] * world
        dist.all_gather_object(losses, loss)
        if groups.rank == 0:
            print(
                f"strategy {groups.strategy} on {world} ranks ({groups.backend}); "
                f"losses per rank: {[round(v, 4) for v in losses]}"
            )
        return {
            "rank": groups.rank,
            "strategy": str(groups.strategy),
            "loss": loss,
            "tp_group": groups.ranks["tp"],
        }
    finally:
        ps.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--local",
        type=int,
        default=None,
        metavar="N",
        help="spawn N local gloo ranks instead of running under torchrun",
    )
    parser.add_argument("--tp", type=int, default=None, help="pin the tensor parallel degree")
    parser.add_argument("--pp", type=int, default=None, help="pin the pipeline degree")
    args = parser.parse_args()
    pins = {k: v for k, v in (("tp", args.tp), ("pp", args.pp)) if v}
    from parastrat.runtime.backend import LAUNCH_HINT
    from parastrat.runtime.launch import RankFailure

    try:
        check_pins(pins, args.local)
        if args.local:
            from parastrat.runtime import spawn_local

            spawn_local(main_rank, args.local, args=(pins,), backend=None, timeout_s=300)
        else:
            main_rank(pins=pins)
    except (ps.StrategyError, ps.errors.UsageError, ps.errors.SpecError) as exc:
        alone = not args.local and "world size 1 " in str(exc)
        print(
            f"error: {exc}" + (f"\n(one process: {LAUNCH_HINT})" if alone else ""), file=sys.stderr
        )
        sys.exit(2)
    except RankFailure as exc:
        print(f"error: rank {exc.rank} failed: {exc.reason.splitlines()[0]}", file=sys.stderr)
        sys.exit(1)


def check_pins(pins: dict, local: int | None) -> None:
    """The pinned degrees against the tiny model and the world, before any rank starts: a
    clear error (which rule, which fix) instead of a traceback on every rank."""
    from parastrat.runtime.backend import detect_env

    world = local or detect_env().world_size
    strategy = ps.Strategy(tp=pins.get("tp", 1), pp=pins.get("pp", 1))
    broken = [v for v in strategy.check(tiny_model(), world_size=world) if v.severity == "error"]
    if broken:
        raise ps.StrategyError(broken)


if __name__ == "__main__":
    main()
