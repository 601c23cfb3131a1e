"""The ways the planner tries to put a model's layers on a pipeline."""

from __future__ import annotations

from typing import Any

from ..estimate.layers import try_split
from ..estimate.memo import per_model
from ..pipeline_layout import recipe_layouts
from ..spec.model import ModelSpec

#: Recipe-style layouts kept per (pp, vpp) beside the other splits (most balanced first,
#: placements another variant already gives skipped).
MAX_LAYOUTS = 1


@per_model
def pipeline_variants(model: ModelSpec, pp: int, vpp: int = 1) -> tuple[dict[str, Any], ...]:
    """The ways to put ``model``'s layers on ``pp`` stages x ``vpp`` chunks, as Strategy
    keyword arguments (``first_stage_layers``, ``last_stage_layers``, ``account_for_*``,
    ``pipeline_layout``).

    ``({},)`` when the even split works.  Otherwise Megatron's
    ``account_for_embedding/loss_in_pipeline_split`` (embedding and loss each take a layer's
    slot; both, else one of them); without VPP an uneven first/last split that gives the
    middle stages ``ceil(L / pp)`` layers and shares the rest between the two ends (which
    carry the embedding and the loss/MTP); and the layouts recipe authors write
    (:func:`parastrat.pipeline_layout.recipe_layouts`: the embedding and the loss/MTP given a
    slot, balanced middle stages), the :data:`MAX_LAYOUTS` most balanced that place the
    layers differently from the variants before them.  Variants that put
    the same decoder layers on each chunk with the same ends are listed once; ``()`` when
    nothing works.  A hybrid model gets what ``MambaStack`` builds: the even split, or the
    first/last one (two halves on two stages), never VPP.  Legality is
    :func:`pipeline_split`'s (``Strategy.placements``, the same rules ``validate`` applies),
    never re-derived here.
    """
    L = model.num_layers
    mtp = model.mtp_num_layers or 0
    tries: list[dict[str, Any]] = [{}]
    if model.is_hybrid:  # MambaStack: no VPP, and only the even or first/last split
        if vpp > 1:
            return ()
        tries += _first_last(L, pp, halves=True) if pp > 1 and L % pp else []
    elif pp > 1 and (L % pp or (L // pp) % vpp):
        tries = [
            {"account_for_embedding": e, "account_for_loss": lo}
            for e, lo in ((True, True), (True, False), (False, True))
        ]
        if vpp == 1:
            tries += _first_last(L, pp)
        tries += [{"pipeline_layout": text} for text in recipe_layouts(L, pp, vpp, mtp)]
    out: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    layouts = 0
    for kw in tries:
        if "pipeline_layout" in kw and layouts == MAX_LAYOUTS:
            break
        split = try_split(model, pp, vpp, tuple(sorted(kw.items())))
        if split is None or min(split.stage_layers) < 1:
            continue
        shape = (split.chunk_layers, split.ends)
        if shape in seen:
            continue  # the same placement spelled another way
        seen.add(shape)
        out.append(kw)
        layouts += "pipeline_layout" in kw
    return tuple(out)


def _first_last(layers: int, pp: int, halves: bool = False) -> list[dict[str, Any]]:
    """The uneven first/last split that gives the middle stages ``ceil(L / pp)`` layers and
    shares the rest between the two ends, or none; ``halves``: on two stages, the two
    halves (a hybrid, whose MambaStack has no other way to split an odd count)."""
    if pp == 2 and halves:
        return [{"first_stage_layers": layers - layers // 2, "last_stage_layers": layers // 2}]
    if pp <= 2:
        return []
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    last = rest // 2
    if rest >= 2 and rest - last <= middle:
        return [{"first_stage_layers": rest - last, "last_stage_layers": last}]
    return []
