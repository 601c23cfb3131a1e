"""The ways the planner tries to put a model's layers on a pipeline."""

from __future__ import annotations

from typing import Any

from ..estimate.layers import try_split
from ..estimate.memo import per_model
from ..spec.model import ModelSpec


@per_model
def pipeline_variants(model: ModelSpec, pp: int, vpp: int = 1) -> tuple[dict[str, Any], ...]:
    """The ways to put ``model``'s layers on ``pp`` stages x ``vpp`` chunks, as Strategy
    keyword arguments (``first_stage_layers``, ``last_stage_layers``, ``account_for_*``).

    ``({},)`` when the even split works.  Otherwise Megatron's
    ``account_for_embedding/loss_in_pipeline_split`` (embedding and loss each take a layer's
    slot; both, else one of them), and without VPP also an uneven first/last split that gives
    the middle stages ``ceil(L / pp)`` layers and shares the rest between the two ends (which
    carry the embedding and the loss/MTP).  Variants that put the same layers on each stage are
    listed once; ``()`` when nothing works.  Legality is :func:`pipeline_split`'s
    (``Strategy.stage_layers``), never re-derived here.
    """
    L = model.num_layers
    tries: list[dict[str, Any]] = [{}]
    if pp > 1 and (L % pp or (L // pp) % vpp):
        tries = [
            {"account_for_embedding": e, "account_for_loss": lo}
            for e, lo in ((True, True), (True, False), (False, True))
        ]
        if vpp == 1 and pp > 2:
            middle = -(-L // pp)
            rest = L - (pp - 2) * middle
            last = rest // 2
            if rest >= 2 and rest - last <= middle:
                tries.append({"first_stage_layers": rest - last, "last_stage_layers": last})
    legal: list[tuple[bool, dict[str, Any], tuple[int, ...]]] = []
    for kw in tries:
        split = try_split(model, pp, vpp, tuple(sorted(kw.items())))
        if split is not None and min(split.stage_layers) >= 1:
            legal.append((split.how == "mtp-layout", kw, split.stage_layers))
    # splits Megatron takes as they are come before the MTP-layout approximation
    legal.sort(key=lambda item: item[0])
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, ...]] = set()
    for _, kw, layers in legal:
        if layers in seen:
            continue
        seen.add(layers)
        out.append(kw)
        if vpp > 1:
            break  # with VPP one accounted variant is enough (uneven needs vpp | every stage)
    return tuple(out)
