"""Soft rules (heuristics the planner may break, and says why): nodes, interleaving,
sequence parallelism."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Violation
from .violations import warn

if TYPE_CHECKING:
    from ..strategy import Strategy


def soft_violations(s: Strategy, devices_per_node: int | None) -> list[Violation]:
    """Heuristics from the seed guides: TP inside a node, VPP with PP, SP with TP."""
    out = _node_violations(s, devices_per_node) if devices_per_node else []
    if not s.is_inference:
        out += _interleave_violations(s) + _sequence_parallel_violations(s)
    return out


def _node_violations(s: Strategy, devices_per_node: int) -> list[Violation]:
    """TP (and, for inference, TP x Ulysses) inside one node of ``devices_per_node``."""
    out: list[Violation] = []
    if s.tp > devices_per_node:
        out.append(
            warn(
                "tp-across-nodes",
                f"tp={s.tp} spans more than one node of {devices_per_node} "
                "devices: every layer's TP collectives cross the slow link",
                f"keep tp <= {devices_per_node}; use pp (or cp) across nodes",
            )
        )
    if s.is_inference and s.tp * s.ulysses > devices_per_node:
        out.append(
            warn(
                "ulysses-across-nodes",
                f"tp*ulysses = {s.tp * s.ulysses} spans more than one node/island "
                f"of {devices_per_node}",
                "keep Ulysses inside a node and use ring across nodes",
            )
        )
    return out


def _interleave_violations(s: Strategy) -> list[Violation]:
    """Virtual pipeline stages where they pay (pp > 2) and where they need extra care."""
    out: list[Violation] = []
    if s.pp > 2 and s.vpp == 1:
        out.append(
            warn(
                "pp-without-vpp",
                f"pp={s.pp} without virtual stages: bubble (p-1)/m is vpp times "
                "larger than with interleaving",
                "set vpp >= 2 when layers per stage allow",
            )
        )
    if s.vpp > 1 and s.pp == 2:
        out.append(
            warn(
                "vpp-pp2",
                "vpp with pp=2 needs overlap_p2p_comm in Megatron-LM's training arguments",
                "use pp >= 3 or enable overlap_p2p_comm",
            )
        )
    return out


def _sequence_parallel_violations(s: Strategy) -> list[Violation]:
    """Sequence parallelism with TP (Megatron Core requires it with EP)."""
    if s.sp or s.tp <= 1:
        return []
    if s.ep > 1:
        return [
            warn(
                "ep-tp-without-sp",
                f"ep={s.ep} with tp={s.tp} without sequence parallelism: Megatron "
                "Core says SP 'must be used' (a ValueError before 0.10, a warning "
                "in 0.16)",
                "set sp=True",
            )
        ]
    return [
        warn(
            "tp-without-sp",
            f"tp={s.tp} without sequence parallelism "
            "replicates LayerNorm/dropout activations on every TP rank",
            "set sp=True (same communication volume, less memory)",
        )
    ]
