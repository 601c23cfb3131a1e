"""The seed guides' starting point: what a recipe author would pick by hand.

Encodes the Megatron Bridge parallelism skill's sizing tables (``shared/reference/
sizing_heuristics.md``): dense bands by total size, MoE bands (and the named MoE rows) by
total/active size, TP inside one NVLink domain, SP from 2K tokens, CP from 8K.  ``plan.explain``
shows this beside the cost model's choice and says where and why they differ; nothing here is
used to rank candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.model import ModelSpec
from ..strategy import Strategy, divisors
from .variants import pipeline_variants

#: The skill's named MoE rows: preset name -> (TP, PP, EP).
MOE_TABLE: dict[str, tuple[int, int, int]] = {
    "olmoe-7b": (1, 1, 8),
    "moonlight-16b": (2, 1, 8),
    "deepseek-v2": (1, 4, 32),
    "glm-4.5-air": (1, 4, 8),
    "qwen3-30b-a3b": (4, 2, 4),
    "glm-4.5": (2, 8, 16),
    "qwen3-235b-a22b": (4, 16, 8),
    "deepseek-v3": (2, 16, 64),
    "kimi-k2": (2, 16, 32),
}


@dataclass(frozen=True)
class Heuristic:
    """The seed guide's starting point and the rules that produced it."""

    strategy: Strategy | None
    reasons: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        """The starting point and its reasons, for ``parastrat plan --format json``."""
        return {
            "strategy": self.strategy.to_dict() if self.strategy else None,
            "reasons": list(self.reasons),
        }


def _dense_start(billions: float) -> tuple[int, int, int, str]:
    """(TP, PP, CP, band) of the dense sizing table."""
    if billions < 1:
        return 1, 1, 1, "< 1B: DP only"
    if billions < 10:
        return (2 if billions < 5 else 4), 1, 1, "1-10B: TP 2-4 + DP"
    if billions < 70:
        return (
            (4 if billions < 30 else 8),
            (2 if billions < 40 else 4),
            1,
            "10-70B: TP 4-8 + PP 2-4 + DP",
        )
    if billions < 175:
        return 8, (4 if billions < 120 else 8), 1, "70-175B: TP 8 + PP 4-8 + DP"
    if billions <= 500:
        return 8, (8 if billions < 300 else 16), 2, "175-500B: TP 8 + PP 8-16 + CP 2 + DP"
    return 8, 16, 2, "> 500B (beyond the table): TP 8 + PP 16 + CP 2 + DP"


def _moe_start(model: ModelSpec, billions: float) -> tuple[int, int, int, str]:
    """(TP, PP, EP, band) of the MoE table (named rows first, then the bands)."""
    named = MOE_TABLE.get(model.name)
    if named:
        return (*named, f"{model.name}: the skill's MoE table row")
    e = model.num_experts
    if billions < 20:
        return 1, 1, min(8, e), "MoE < 20B: EP only"
    if billions < 100:
        return 2, 2, min(8, e), "MoE 20-100B: TP 1-2 + PP 2-4 + EP 8-16"
    if billions < 500:
        return 2, 8, min(16, e), "MoE 100-500B: TP 2-4 + PP 8-16 + EP 8-32"
    return 2, 16, min(64, e), "MoE 500B+: TP 2 + PP 16 + EP 32-64"


def _fit(value: int, allowed: list[int]) -> int:
    """The largest allowed value not above ``value`` (or the smallest allowed)."""
    below = [a for a in allowed if a <= value]
    return max(below) if below else min(allowed)


def _fit_degrees(
    model: ModelSpec,
    num_devices: int,
    tp: int,
    pp: int,
    cp: int,
    ep: int,
    reasons: list[str],
) -> tuple[int, int, int, int]:
    """(TP, PP, CP, EP) made to divide the heads, experts, device count and layers, as a
    careful reader of the guide would (PP shrinks first, then CP, EP, TP); each adjustment is
    added to ``reasons``."""
    tp_ok = [
        d
        for d in divisors(model.num_attention_heads)
        if model.query_groups % d == 0 or d % model.query_groups == 0
    ]
    if model.is_hybrid and "M" in (model.hybrid_override_pattern or ""):  # MambaMixer's asserts
        tp_ok = [d for d in tp_ok if model.mamba_heads % d == 0 and model.mamba_num_groups % d == 0]
    if tp not in tp_ok:
        tp = _fit(tp, tp_ok)
        reasons.append(f"TP -> {tp} to divide {model.num_attention_heads} heads")
    if model.is_moe and model.num_experts % ep:
        ep = _fit(ep, divisors(model.num_experts))
        reasons.append(f"EP -> {ep} to divide {model.num_experts} experts")
    # fit the device count: shrink PP, then CP, EP, TP
    while num_devices % (tp * cp * pp) or num_devices % (ep * pp):
        if pp > 1:
            pp //= 2
        elif cp > 1:
            cp //= 2
        elif ep > 1:
            ep //= 2
        elif tp > 1:
            tp //= 2
        else:
            break
    if pp > 1 and not pipeline_variants(model, pp, 1):
        ok = [d for d in divisors(model.num_layers) if d <= pp]
        new_pp = max(ok) if ok else 1
        reasons.append(f"PP {pp} -> {new_pp}: {model.num_layers} layers")
        pp = new_pp
    return tp, pp, cp, ep


def seed_strategy(
    model: ModelSpec, num_devices: int, seq_len: int, devices_per_node: int = 8
) -> Heuristic:
    """The seed guide's starting point for ``model`` on ``num_devices`` at ``seq_len``.

    Degrees are shrunk (PP first, then CP, EP, TP) until they fit the device count and divide
    the heads, layers and experts, as a careful reader of the guide would; each adjustment is
    recorded in ``reasons``.
    """
    reasons: list[str] = []
    billions = model.num_params / 1e9
    if model.is_moe:
        tp, pp, ep, band = _moe_start(model, billions)
        cp = 1
    else:
        tp, pp, cp, band = _dense_start(billions)
        ep = 1
    reasons.append(f"{billions:.1f}B {'MoE' if model.is_moe else 'dense'} -> {band}")
    if tp > devices_per_node:
        tp = devices_per_node
        reasons.append(f"TP kept inside one node of {devices_per_node}")
    if seq_len >= 32768:
        cp = max(cp, 4)
        reasons.append(f"seq {seq_len} >= 32K -> CP 4-8 (hierarchical a2a+p2p)")
    elif seq_len >= 8192:
        cp = max(cp, 2)
        reasons.append(f"seq {seq_len} in 8K-32K -> CP 2")
    elif cp > 1 and seq_len < 8192:
        reasons.append(f"the size band suggests CP 2; kept although seq {seq_len} < 8K")
    tp, pp, cp, ep = _fit_degrees(model, num_devices, tp, pp, cp, ep, reasons)
    reasons.append(f"fitted to {num_devices} devices")
    vpp = 1
    if pp > 2:
        for v in (4, 3, 2):
            if pipeline_variants(model, pp, v):
                vpp = v
                break
        if vpp > 1:
            reasons.append(f"PP {pp} without VPP has large bubbles -> VPP {vpp}")
    split = pipeline_variants(model, pp, vpp)[0] if pp > 1 else {}
    if split:
        how = ", ".join(f"{k}={v}" for k, v in split.items())
        reasons.append(
            f"{model.num_layers} layers on PP {pp} x VPP {vpp} need an uneven split: {how}"
        )
    sp = tp > 1 and (seq_len >= 2048 or model.is_moe)
    if sp:
        reasons.append("TP > 1 with seq >= 2K -> SP")
    try:
        strategy = Strategy(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, sp=sp, **split)
        strategy = strategy.with_world_size(num_devices)
    except Exception as exc:
        reasons.append(f"no legal strategy from the guide: {exc}")
        return Heuristic(None, tuple(reasons))
    return Heuristic(strategy, tuple(reasons))
