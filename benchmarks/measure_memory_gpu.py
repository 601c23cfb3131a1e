"""Measure real activation peaks with Megatron Core's GPTModel on one GPU; compare with
``estimate_memory``.

A GPT (local layer spec: Megatron's own, unfused DotProductAttention, which materialises the
attention scores; dropout 0.1 as in the Korthikanti paper) is built at TP1/PP1 in bf16; for each
sequence length, micro-batch size and recompute mode the script runs one warm-up step (so weights
and gradients are allocated), then measures ``torch.cuda.max_memory_allocated`` over a forward +
backward and subtracts what was allocated before the forward.  That is the activation peak, which
is compared with ``estimate_memory(..., flash_attention=False).stages[0].activations``.

Needs a CUDA GPU, torch and megatron-core; no GPU was available when this was written, so the
results table in ``docs/memory-model.md`` says "not yet measured".

    python benchmarks/measure_memory_gpu.py                   # full sweep, writes JSON + table
    python benchmarks/measure_memory_gpu.py --short           # 3 points
    python benchmarks/measure_memory_gpu.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import parastrat as ps
from parastrat.estimate.memory import estimate_memory

GiB = 1024**3
SHAPE = dict(
    num_layers=4, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192, vocab_size=32768
)


def _build(torch, seq: int, recompute: str):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw: dict = {}
    if recompute == "selective":
        kw = dict(recompute_granularity="selective")
    elif recompute == "full":
        kw = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    config = TransformerConfig(
        num_layers=SHAPE["num_layers"],
        hidden_size=SHAPE["hidden_size"],
        num_attention_heads=SHAPE["num_attention_heads"],
        ffn_hidden_size=SHAPE["ffn_hidden_size"],
        hidden_dropout=0.1,
        attention_dropout=0.1,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        add_bias_linear=False,
        **kw,
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=SHAPE["vocab_size"],
        max_sequence_length=seq,
        position_embedding_type="learned_absolute",
        share_embeddings_and_output_weights=True,
    )
    return model.cuda()


def _step(torch, model, seq: int, mbs: int) -> None:
    ids = torch.randint(0, SHAPE["vocab_size"], (mbs, seq), device="cuda")
    pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, -1)
    mask = torch.triu(torch.ones(seq, seq, device="cuda", dtype=torch.bool), 1)[None, None]
    loss = model(ids, pos, mask, labels=ids)
    loss.float().mean().backward()


def measure(seq: int, mbs: int, recompute: str) -> dict:
    import torch

    model = _build(torch, seq, recompute)
    _step(torch, model, seq, mbs)  # allocates gradients
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    _step(torch, model, seq, mbs)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - base
    del model
    torch.cuda.empty_cache()

    spec = ps.ModelSpec(name="gpt-measure", max_position_embeddings=seq, **SHAPE)
    rep = estimate_memory(
        spec,
        ps.Strategy().with_world_size(1),
        seq_len=seq,
        micro_batch_size=mbs,
        recompute=recompute,
        flash_attention=False,
    )
    predicted = rep.stages[0].activations
    return {
        "seq_len": seq,
        "micro_batch_size": mbs,
        "recompute": recompute,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "error": predicted / measured - 1 if measured else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--out", default="memory_measured.json")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA GPU here; nothing measured (docs say 'not yet measured')", file=sys.stderr)
        return 2
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)

    points = (
        [(1024, 1, "none"), (2048, 1, "selective"), (2048, 2, "full")]
        if args.short
        else [
            (s, b, r)
            for s in (1024, 2048, 4096)
            for b in (1, 2)
            for r in ("none", "selective", "full")
        ]
    )
    rows = []
    print("| seq | mbs | recompute | predicted GiB | measured GiB | error |")
    print("|---:|---:|---|---:|---:|---:|")
    for seq, mbs, mode in points:
        r = measure(seq, mbs, mode)
        rows.append(r)
        print(
            f"| {seq} | {mbs} | {mode} | {r['predicted_bytes'] / GiB:.3f} | "
            f"{r['measured_bytes'] / GiB:.3f} | {r['error']:+.1%} |",
            flush=True,
        )
    with open(args.out, "w") as fh:
        json.dump(
            {"shape": SHAPE, "gpu": torch.cuda.get_device_name(0), "rows": rows}, fh, indent=2
        )
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
