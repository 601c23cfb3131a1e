"""The model's shape against the degrees: attention heads and query groups, experts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set
from ..errors import SpecError, Violation
from .hybrid import hybrid_violations
from .layers import layer_split_violations
from .violations import err, warn

if TYPE_CHECKING:
    from ..strategy import Strategy


def resolve_model(model: Any) -> Any:
    """``model`` as the rules read it: a preset name becomes its spec (a language model's or
    a DiT's, as ``parastrat.plan`` and ``parastrat.plan_dit`` take names); a number is refused
    (SpecError), since no rule could be checked against it; anything else passes (a spec, or
    an object with the same fields, such as Megatron's ``TransformerConfig``)."""
    if isinstance(model, str):
        from ..spec import dit, models

        key = model.strip().lower()
        return dit.get(key) if key in dit.names() else models.get_llm(model)
    if isinstance(model, (bool, int, float)):
        raise SpecError(
            f"model={model!r} must be a ModelSpec, a DiTSpec or a preset name "
            "(e.g. 'llama3-70b', 'flux.1-dev')"
        )
    return model


def model_violations(s: Strategy, model: Any) -> list[Violation]:
    """Heads, query groups, layers and experts against the degrees."""
    heads = getattr(model, "num_attention_heads", None)
    name = getattr(model, "name", "the model")
    out: list[Violation] = []
    if heads:
        groups = getattr(model, "num_query_groups", None) or heads
        out += _head_violations(s, heads, groups, name)
    if s.ring > 1 and not s.is_inference:
        out += ring_attention_violations(s, model, name)
    if getattr(model, "is_hybrid", False):
        out += hybrid_violations(s, model)
    layers = getattr(model, "num_layers", None)
    if layers:
        out += layer_split_violations(s, layers, getattr(model, "mtp_num_layers", None))
    return out + _expert_violations(s, model, name)


def _head_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """Attention heads and query groups against TP and Ulysses."""
    out = _head_tp_violations(s, heads, groups, name)
    if s.ulysses == 1 or heads % s.tp:
        return out
    return out + _head_ulysses_violations(s, heads, groups, name)


def _head_tp_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """Attention heads and query groups (KV heads) against TP."""
    out: list[Violation] = []
    if heads % s.tp:
        out.append(
            err(
                "heads-tp",
                f"tp={s.tp} does not divide {heads} attention heads of {name}",
                f"use tp in {fmt_set(divisors(heads))}",
            )
        )
    elif groups % s.tp and s.tp % groups:
        ok = sorted({d for d in divisors(heads) if groups % d == 0 or d % groups == 0})
        out.append(
            err(
                "query-groups-tp",
                f"tp={s.tp} and {groups} query groups (KV heads) of {name}: neither divides "
                f"the other",
                f"use tp in {fmt_set(ok)}",
            )
        )
    elif groups % s.tp:
        out.append(
            warn(
                "query-groups-tp-replicated",
                f"tp={s.tp} > {groups} query groups: KV heads are replicated "
                f"{s.tp // groups}x (accepted by megatron-core >= 0.16 only)",
                "use megatron-core >= 0.16, or tp <= the number of query groups",
            )
        )
    return out


def _head_ulysses_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """The attention heads and the KV heads per TP rank against Ulysses (MindIE-SD's USP at
    inference, Transformer Engine's all-to-all CP in training)."""
    out: list[Violation] = []
    local = heads // s.tp
    if local % s.ulysses:
        out.append(
            err(
                "heads-ulysses",
                f"ulysses={s.ulysses} does not divide the {local} attention heads per TP "
                f"rank ({heads} heads / tp {s.tp}) of {name}",
                f"use ulysses in {fmt_set(divisors(local))}, and cover the rest of the "
                f"sequence split with ring",
            )
        )
    if groups != heads:
        local_kv = groups // s.tp if groups % s.tp == 0 else groups
        who = (
            "MindIE-SD's USP raises USPTopologyError"
            if s.is_inference
            # AttnFuncWithCPAndQKVOA2A asserts q and k heads % cp_size == 0; Megatron Core does
            # not replicate KV heads for context parallelism
            else "Transformer Engine's all-to-all context parallelism asserts it"
        )
        if local_kv % s.ulysses:
            out.append(
                err(
                    "kv-heads-ulysses",
                    f"ulysses={s.ulysses} does not divide the {local_kv} KV heads per TP "
                    f"rank of {name} ({who})",
                    f"use ulysses in {fmt_set(divisors(local_kv))} and add ring",
                )
            )
    return out


def _expert_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """Experts against EP and ETP (and EP / ETP on a dense model)."""
    experts = getattr(model, "num_moe_experts", None) or 0
    out: list[Violation] = []
    if experts and getattr(model, "add_bias_linear", False) and s.etp != 1:
        out.append(
            err(
                "moe-bias-etp",
                f"etp={s.etp} on {name}, whose expert linear layers carry a bias "
                "(add_bias_linear): Megatron Core supports bias in MoE only with etp=1",
                "use etp=1 (experts split by ep alone)",
            )
        )
    if s.ep > 1 and not experts:
        out.append(
            err(
                "ep-dense",
                f"ep={s.ep} on {name}, which has no experts",
                "use ep=1 for a dense model (give the devices to dp, tp or cp)",
            )
        )
    elif s.ep > 1 and experts % s.ep:
        out.append(
            err(
                "experts-ep",
                f"ep={s.ep} does not divide the {experts} experts of {name}",
                f"use ep in {fmt_set(divisors(experts))}",
            )
        )
    elif s.ep == 1 and not experts and s.etp != s.tp and not s.is_inference:
        out.append(
            warn(
                "etp-dense",
                f"etp={s.etp} differs from tp={s.tp} on dense {name}; it has no effect",
                "drop etp",
            )
        )
    return out


def ring_attention_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """Ring context parallelism (``cp_comm_type`` p2p or a2a+p2p) against the attention
    variants Transformer Engine's context-parallel attention refuses it for: a sliding window
    and attention sinks ("No support for SWA with cp_comm_type={p2p, a2a+p2p}" and "only
    supports cp_comm_type=a2a for non-vanilla softmax types", TE
    ``tests/pytorch/attention/test_attention_with_cp.py``; Megatron Bridge's GPT-OSS recipe:
    "only a2a cp is supported for sink attention")."""
    window = getattr(model, "sliding_window", None)
    softmax = getattr(model, "softmax_type", "vanilla")
    if not window and softmax == "vanilla":
        return []
    what = f"a {window}-token sliding window" if window else f"attention sinks ({softmax} softmax)"
    heads = getattr(model, "num_attention_heads", None) or 0
    groups = getattr(model, "num_query_groups", None) or heads
    local = heads // s.tp if heads and heads % s.tp == 0 else 0
    local_kv = groups // s.tp if groups and groups % s.tp == 0 else groups
    if local and local_kv:  # Ulysses splits the query and the KV heads of each TP rank
        local = math.gcd(local, local_kv)
    fix = f"use ulysses={s.cp} (cp_comm_type='a2a')"
    if local and local % s.cp:
        fix = f"use cp in {fmt_set(divisors(local))} as ulysses (cp_comm_type='a2a'), or cp=1"
        if local == 1:
            fix = "use cp=1, or a smaller tp so that each TP rank holds several KV heads"
    return [
        err(
            "cp-ring-attention",
            f"cp={s.cp} with ring={s.ring} (cp_comm_type={s.cp_comm_type!r}) on {name}, whose "
            f"attention has {what}: Transformer Engine's context-parallel attention supports it "
            "only with cp_comm_type='a2a'",
            fix,
        )
    ]
