"""How many plan candidates the real Megatron Bridge accepts (issue 14's closing figure).

For DeepSeek-V3, Kimi K2, Qwen3-235B-A22B, Llama 3.1 405B, Llama 3 70B and GPT-OSS 120B on
a few H100 cluster sizes: every candidate ``parastrat.plan`` returns (top 5) is applied to a
real Bridge ``ConfigContainer`` (GPT-3 175B's recipe holding the model's real provider, at the
plan's sequence length), then Bridge's ``ConfigContainer.validate()`` runs at that world size.
Prints, per model, candidates applied / refused by ``apply`` / accepted by ``validate()``.

Needs megatron-bridge (README test command); imports it the way the test suite does
(tests/conftest.py: a Transformer Engine stand-in visible only during the import).
Run: ``python benchmarks/bridge_acceptance.py``
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")

import parastrat as ps  # noqa: E402
from parastrat.adapters import megatron as mg  # noqa: E402
from parastrat.spec.models import get  # noqa: E402
from tests.conftest import import_bridge  # noqa: E402

CASES = {
    "deepseek-v3": (
        "megatron.bridge.models.DeepSeekV3ModelProvider",
        {"mtp_num_layers": 1, "add_bias_linear": False},
        (256, 1024),
    ),
    "kimi-k2": ("megatron.bridge.models.kimi.KimiK2Provider", {}, (256, 1024)),
    "qwen3-235b-a22b": ("megatron.bridge.models.Qwen3MoEModelProvider235B_A22B", {}, (128, 512)),
    "llama3.1-405b": ("megatron.bridge.models.Llama31ModelProvider405B", {}, (128, 512)),
    "llama3-70b": ("megatron.bridge.models.Llama3ModelProvider70B", {}, (64, 256)),
    "gpt-oss-120b": ("megatron.bridge.models.GPTOSSProvider120B", {}, (64, 256)),
}
SEQ = 4096


def container(provider: str, kw: dict):
    import importlib

    from megatron.bridge.recipes.gpt.gpt3_175b import gpt3_175b_pretrain_config

    cfg = gpt3_175b_pretrain_config()
    cfg.dataset.sequence_length = SEQ
    module, _, cls = provider.rpartition(".")
    make = getattr(importlib.import_module(module), cls)
    cfg.model = make(seq_length=SEQ, apply_rope_fusion=False, **kw)
    if cfg.model.num_moe_experts:
        cfg.model.moe_permute_fusion = False
    return cfg


def main() -> int:
    bridge = import_bridge()
    if isinstance(bridge, str):
        print(bridge)
        return 2
    total = [0, 0, 0]
    for name, (provider, kw, sizes) in CASES.items():
        counts = [0, 0, 0]
        failures = []
        for gpus in sizes:
            plan = ps.plan(
                get(name),
                ps.Cluster(accelerator="h100", num_devices=gpus),
                seq_len=SEQ,
                global_batch_size=4 * gpus,
                top_k=5,
            )
            for cand in plan.candidates:
                counts[0] += 1
                cfg = container(provider, kw)
                try:
                    mg.apply(cfg, cand, world_size=gpus)
                except ps.StrategyError as err:
                    counts[1] += 1
                    failures.append(
                        f"{gpus}: {cand.label()}: apply: {err.violations[0].message[:160]}"
                    )
                    continue
                os.environ["WORLD_SIZE"] = str(gpus)
                try:
                    cfg.validate()
                    counts[2] += 1
                except Exception as exc:  # Bridge's or Megatron Core's refusal
                    failures.append(f"{gpus}: {cand.label()}: validate: {str(exc)[:120]}")
        total = [a + b for a, b in zip(total, counts)]
        print(
            f"{name:16s} applied {counts[0]:3d}  refused by apply {counts[1]:3d}  "
            f"validate() accepted {counts[2]:3d}"
        )
        for f in failures:
            print("    ", f)
    print(
        f"{'all':16s} applied {total[0]:3d}  refused by apply {total[1]:3d}  "
        f"validate() accepted {total[2]:3d}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
