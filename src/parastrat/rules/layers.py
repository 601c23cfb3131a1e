"""Layers over pipeline stages: even, accounted and uneven splits, and the layout fields that
exclude one another."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set
from ..errors import Violation
from .violations import err

if TYPE_CHECKING:
    from ..strategy import Strategy


def layout_conflict_violations(s: Strategy) -> list[Violation]:
    """A pipeline layout excludes the other split settings (as Megatron Core refuses)."""
    if s.pipeline_layout is None or not s.uneven:
        return []
    return [
        err(
            "pipeline-layout-conflict",
            f"pipeline_layout {s.layout_parsed} with first/last stage layer counts or "
            "account_for_embedding/loss: Megatron Core refuses both",
            "keep the layout and drop first_stage_layers, last_stage_layers and "
            "account_for_embedding/loss (the layout places embedding and loss itself)",
        )
    ]


def layer_split_violations(
    s: Strategy, num_layers: int, mtp_num_layers: int | None = None
) -> list[Violation]:
    """Can ``num_layers`` be split over pp stages (and vpp chunks per stage)?  With a
    pipeline layout: Megatron's layout checks (decoder and MTP counts, placement)."""
    first, last = s.first_stage_layers, s.last_stage_layers
    emb, loss, layout = s.account_for_embedding, s.account_for_loss, s.pipeline_layout
    split = (s.pp, s.vpp, first, last, emb, loss, s.uneven, layout)
    return list(_split_violations(*split, num_layers, mtp_num_layers))


@lru_cache(maxsize=1 << 12)
def _split_violations(
    p: int,
    v: int,
    first: int | None,
    last: int | None,
    emb: bool,
    loss: bool,
    uneven: bool,
    layout_value: Any,
    num_layers: int,
    mtp_num_layers: int | None,
) -> tuple[Violation, ...]:
    """:func:`layer_split_violations` of the strategy's split fields (memoised: the planner
    checks thousands of strategies that share a few splits)."""
    if layout_value is not None:
        from ..pipeline_layout import PipelineLayout, layout_violations

        return tuple(layout_violations(PipelineLayout(layout_value, p), num_layers, mtp_num_layers))
    if p == 1:
        return ()
    if not uneven:
        return tuple(_even_split_violations(p, v, num_layers))
    if emb or loss:
        return tuple(_accounted_split_violations(p, v, emb, loss, num_layers))
    return tuple(_uneven_split_violations(p, v, first, last, num_layers))


def _even_split_violations(p: int, v: int, num_layers: int) -> list[Violation]:
    """``num_layers`` split evenly over ``p`` stages, each stage's share over ``v`` chunks."""
    if num_layers % p:
        return [
            err(
                "layers-pp",
                f"{num_layers} layers do not split evenly over pp={p} stages",
                f"use pp in {fmt_set([d for d in divisors(num_layers) if d > 1])}, or set "
                f"first_stage_layers/last_stage_layers for an uneven split",
            )
        ]
    per = num_layers // p
    if per % v == 0:
        return []
    return [
        err(
            "layers-vpp",
            f"{per} layers per stage (={num_layers}/pp {p}) do not split into vpp={v} "
            f"virtual chunks",
            f"use vpp in {fmt_set(divisors(per))}",
        )
    ]


def _accounted_split_violations(
    p: int, v: int, emb: bool, loss: bool, num_layers: int
) -> list[Violation]:
    """The layers plus the embedding and loss slots split evenly over ``p * v`` chunks."""
    total = num_layers + emb + loss
    if total % (p * v) == 0:
        return []
    return [
        err(
            "layers-accounted",
            f"{num_layers} layers + {int(emb)} embedding + {int(loss)} loss = {total} "
            f"is not a multiple of pp*vpp = {p * v}",
            f"use pp*vpp in {fmt_set([d for d in divisors(total) if d > 1])}, or "
            "first_stage_layers/last_stage_layers",
        )
    ]


def _uneven_split_violations(
    p: int, v: int, first: int | None, last: int | None, num_layers: int
) -> list[Violation]:
    """First/last stage counts leave an even split for the middle stages, every stage's
    count a multiple of ``v``."""
    middle = p - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest <= 0 or rest % middle)):
        return [
            err(
                "layers-uneven",
                f"{num_layers} layers with first_stage_layers={first}, last_stage_layers={last} "
                f"leave {rest} layers for {middle} middle stage(s), which does not split evenly",
                "choose first/last so that (layers - first - last) is a positive multiple of the "
                "middle stages",
            )
        ]
    counts = [c for c in (first, last, rest // middle if middle else None) if c is not None]
    if v > 1 and any(c % v for c in counts):
        return [
            err(
                "layers-vpp",
                f"stage layer counts {counts} do not all divide into vpp={v} virtual chunks",
                "make every stage's layer count a multiple of vpp",
            )
        ]
    return []


def clear_caches() -> None:
    """Empty the rules' memo of pipeline-split checks (for timing a plan from a cold start)."""
    _split_violations.cache_clear()
