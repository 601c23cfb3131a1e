"""Hypothesis strategies that draw random *valid* parastrat strategies with a world size."""

from __future__ import annotations

from hypothesis import strategies as st

from parastrat import Strategy, StrategyError

DEG = st.sampled_from([1, 1, 2, 2, 3, 4, 8])


@st.composite
def training_strategies(draw, max_world: int = 512, hierarchical: bool = False):
    """(Strategy, world_size) pairs for Megatron-style training, both order strings.

    ``hierarchical`` draws Ulysses and ring both > 1 (Megatron's a2a+p2p CP).
    """
    tp, pp, ep, dp_mult = draw(DEG), draw(DEG), draw(DEG), draw(st.sampled_from([1, 2, 3, 4]))
    low = 2 if hierarchical else 1
    ulysses = draw(st.sampled_from([low, 1 if not hierarchical else 2, 2, 4]))
    ring = draw(st.sampled_from([low, 1 if not hierarchical else 2, 2, 4]))
    etp = draw(st.sampled_from([None, 1, tp, 2]))
    order = draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]))
    try:
        s = Strategy(
            tp=tp, pp=pp, ep=ep, etp=etp, ulysses=ulysses, ring=ring, order=order, sp=tp > 1
        )
        world = s.min_world_size * dp_mult
        if world > max_world:
            return None
        s.with_world_size(world)
    except StrategyError:
        return None
    return s, world


@st.composite
def inference_strategies(draw, max_world: int = 256):
    """(Strategy, world_size) pairs in xDiT's order."""
    tp = draw(st.sampled_from([1, 1, 2, 4]))
    ulysses, ring = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4]))
    cfg, pp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 1, 2]))
    dp = draw(st.sampled_from([1, 2, 3]))
    s = Strategy(tp=tp, ulysses=ulysses, ring=ring, cfg=cfg, pp=pp, order="tp-sp-pp-cfg-dp")
    world = s.min_world_size * dp
    if world > max_world:
        return None
    return s, world
