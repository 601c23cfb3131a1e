"""Shared test settings: hypothesis profiles (CI runs the default, PARASTRAT_THOROUGH=1 more)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# fixtures for checks on torch's fake process group and torchtitan's source
from .torchtitan_source import fake_world, parallel_dims  # noqa: F401

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=20000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.load_profile("thorough" if os.environ.get("PARASTRAT_THOROUGH") else "default")


# ---------------------------------------------------------------------------------------------
# The real Megatron Bridge without Transformer Engine (how and why: docs/adapters.md).
# ---------------------------------------------------------------------------------------------
#: Megatron Core modules that probe for Transformer Engine at import: imported before the
#: stand-in exists, so that they see the truth (no TE) and never ask for its version.
CORE_FIRST = (
    "megatron.core",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.models.gpt.heterogeneous.heterogeneous_layer_specs",
    "megatron.core.models.gpt.experimental_attention_variant_module_specs",
    "megatron.core.models.multimodal.llava_model",
    "megatron.core.post_training.modelopt.layers",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.heterogeneous.linear_replacements",
    "megatron.core.transformer.moe.experts",
    "megatron.core.transformer.multi_token_prediction",
    "megatron.core.transformer.transformer_block",
)
#: Bridge modules imported while the stand-in is visible.
BRIDGE_MODULES = (
    "megatron.bridge.training.config",
    "megatron.bridge.training.utils.omegaconf_utils",
    "megatron.bridge.models",
    "megatron.bridge.recipes",
)
_TE_NAMES = ("transformer_engine", "transformer_engine.pytorch", "transformer_engine.pytorch.ops")


def _te_stand_in() -> dict:
    """The two attributes Bridge 0.3.1 touches at import (peft/lora_layers.py)."""
    import types

    import torch

    te = types.ModuleType("transformer_engine")
    te_pt = types.ModuleType("transformer_engine.pytorch")
    ops = types.ModuleType("transformer_engine.pytorch.ops")
    te_pt.Linear = type("Linear", (torch.nn.Linear,), {})
    ops.Sequential = type("Sequential", (torch.nn.Sequential,), {})
    te_pt.ops = ops
    te.pytorch = te_pt
    return dict(zip(_TE_NAMES, (te, te_pt, ops)))


def import_bridge():
    """Import the real megatron.bridge on a machine without Transformer Engine, or return the
    reason it cannot be imported.  The stand-in lives in sys.modules only during the import;
    afterwards the Bridge modules that looked for TE are told the truth (HAVE_TE = False)."""
    import importlib
    import importlib.util
    import sys
    import warnings

    if "megatron.bridge.training.config" in sys.modules:
        return sys.modules["megatron.bridge"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in CORE_FIRST:
                importlib.import_module(name)
            if importlib.util.find_spec("transformer_engine") is not None:
                return importlib.import_module("megatron.bridge")
            saved = {n: sys.modules.get(n) for n in _TE_NAMES}
            sys.modules.update(_te_stand_in())
            try:
                for name in BRIDGE_MODULES:
                    importlib.import_module(name)
            finally:
                for n, mod in saved.items():
                    if mod is None:
                        sys.modules.pop(n, None)
                    else:
                        sys.modules[n] = mod
    except Exception as exc:  # not installed, or an import it needs is missing
        return f"megatron.bridge is not importable here ({type(exc).__name__}: {exc})"
    for name, mod in list(sys.modules.items()):
        if name.startswith("megatron.bridge") and getattr(mod, "HAVE_TE", False):
            mod.HAVE_TE = False
    return sys.modules["megatron.bridge"]


#: The lowest Transformer Engine Megatron Bridge 0.3.1 declares (its wheel's Requires-Dist:
#: ``transformer-engine[core_cu13,pytorch]<2.13.0,>=2.10.0a0``).
BRIDGE_TE_FLOOR = "2.10.0"


def declare_te_version(version: str = BRIDGE_TE_FLOOR) -> None:
    """Have Megatron Core's TE version gates (``is_te_min_version``: FP8 with experts, FP8
    recompute, FP4) answer for ``version``, the TE a Bridge install has, instead of failing on
    ``None`` where TE is missing.  Only the version number is declared: every module that
    imports TE still sees it missing.  No-op where TE is installed."""
    import importlib.util

    from megatron.core import utils
    from packaging.version import Version

    if importlib.util.find_spec("transformer_engine") is None:
        utils._te_version = Version(version)


def without_cpu_missing_kernels(cfg):
    """A Bridge recipe's container without the Transformer Engine kernels this CPU machine
    lacks: its fused RoPE and permute, and the FusedAdam the precision-aware optimizer needs
    (OLMoE's recipe turns it on; Megatron Core refuses it without TE), with the float32
    gradient and Adam-state dtypes Adam keeps without it.  Returns ``cfg``."""
    cfg.model.apply_rope_fusion = False
    cfg.model.moe_permute_fusion = False
    if cfg.optimizer.use_precision_aware_optimizer:
        import torch

        cfg.optimizer.use_precision_aware_optimizer = False
        for dtype in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            setattr(cfg.optimizer, dtype, torch.float32)
    return cfg


@pytest.fixture(scope="session")
def bridge():
    """The real megatron.bridge package (skips the test with the reason when not importable:
    pip install --no-deps "megatron-bridge==0.3.1" and the README's test extra)."""
    got = import_bridge()
    if isinstance(got, str):
        pytest.skip(got)
    return got
