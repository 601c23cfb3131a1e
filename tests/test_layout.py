"""parastrat.layout against the real oracles: Megatron Core's RankGenerator (and its
hierarchical CP groups) and yunchang's Ulysses/ring groups.

By default each property draws up to 1,500 random valid strategies (fewer for the slower
ones); ``PARASTRAT_THOROUGH=1 pytest tests/test_layout.py --hypothesis-show-statistics``
checks ten times as many and prints how many passed.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given, settings

from parastrat import Strategy, StrategyError, layout
from parastrat.layout import KINDS, coordinates, grid_groups

from .strategies import inference_strategies, training_strategies

#: Random strategies per property test; PARASTRAT_THOROUGH=1 checks ten times more.
N_EXAMPLES = int(
    os.environ.get(
        "PARASTRAT_LAYOUT_EXAMPLES", "15000" if os.environ.get("PARASTRAT_THOROUGH") else "1500"
    )
)

parallel_state = pytest.importorskip("megatron.core.parallel_state")


def megatron_groups(s: Strategy, world: int) -> dict[str, list[list[int]]]:
    """The groups initialize_model_parallel would build, from Megatron's own code."""
    RankGenerator = parallel_state.RankGenerator
    dp = world // (s.tp * s.cp * s.pp)
    edp = world // (s.etp * s.ep * s.pp)
    dense = RankGenerator(tp=s.tp, ep=1, dp=dp, pp=s.pp, cp=s.cp, order=s.order)
    expert = RankGenerator(tp=s.etp, ep=s.ep, dp=edp, pp=s.pp, cp=1, order=s.order)
    out = {
        "tp": dense.get_ranks("tp"),
        "cp": dense.get_ranks("cp"),
        "dp": dense.get_ranks("dp"),
        "pp": dense.get_ranks("pp"),
        "dp-cp": dense.get_ranks("dp-cp"),
        "tp-pp": dense.get_ranks("tp-pp"),
        "etp": expert.get_ranks("tp"),
        "ep": expert.get_ranks("ep"),
        "edp": expert.get_ranks("dp"),
        "etp-ep": expert.get_ranks("tp-ep"),
    }
    assert dense.get_ranks("pp") == expert.get_ranks("pp")  # Megatron's own assertion
    return out


def megatron_hierarchical_cp(s: Strategy, world: int, monkeypatch) -> tuple[list, list]:
    """Ulysses (level 0) and ring (level 1) groups from create_hierarchical_groups."""
    made: list[list[int]] = []
    monkeypatch.setattr(
        parallel_state, "create_group", lambda ranks, **kw: made.append(list(ranks)) or list(ranks)
    )
    levels: list[list[list[int]]] = [[], []]
    for cp_ranks in megatron_groups(s, world)["cp"]:
        made.clear()
        parallel_state.create_hierarchical_groups(cp_ranks[0], cp_ranks, [s.ulysses, s.ring])
        n_uly = s.ring  # level 0 makes cp/ulysses groups of size ulysses
        levels[0] += made[:n_uly]
        levels[1] += made[n_uly:]
    return levels[0], levels[1]


@settings(max_examples=N_EXAMPLES)
@given(training_strategies())
def test_training_layout_equals_megatron_rank_generator(case):
    assume(case is not None)
    s, world = case
    ours = layout(s, world)
    theirs = megatron_groups(s, world)
    for kind, groups in theirs.items():
        assert ours[kind] == groups, kind
    assert ours["sp"] == ours["cp"]


@settings(max_examples=N_EXAMPLES // 7)
@given(training_strategies(max_world=256, hierarchical=True))
def test_ulysses_ring_split_equals_megatron_hierarchical_cp(case):
    assume(case is not None)
    s, world = case
    with pytest.MonkeyPatch.context() as mp:
        uly, ring = megatron_hierarchical_cp(s, world, mp)
    ours = layout(s, world)
    assert sorted(ours["ulysses"]) == sorted(uly)
    assert sorted(ours["ring"]) == sorted(ring)


def yunchang_groups(ulysses: int, ring: int, world: int, monkeypatch) -> tuple[list, list]:
    """The rank lists yunchang passes to torch.distributed.new_group (no process group)."""
    import torch.distributed as dist
    from yunchang import globals as yglobals

    made: list[list[int]] = []
    monkeypatch.setattr(dist, "new_group", lambda ranks, *a, **k: made.append(list(ranks)) or 0)
    yglobals.set_seq_parallel_pg(ulysses, ring, 0, world, use_ulysses_low=True)
    uly = [g for g in made if len(g) == ulysses]
    rng = [g for g in made if len(g) == ring]
    if ulysses == ring:  # yunchang makes them alternately: ulysses first per dp replica
        uly, rng = [], []
        per = ring + ulysses
        for i in range(0, len(made), per):
            uly += made[i : i + ring]
            rng += made[i + ring : i + per]
    return uly, rng


@settings(max_examples=N_EXAMPLES // 3)
@given(inference_strategies())
def test_inference_layout_equals_yunchang(case):
    pytest.importorskip("yunchang")
    assume(case is not None)
    s, world = case
    assume(s.tp == 1)  # yunchang alone knows no TP axis: sp must be innermost
    with pytest.MonkeyPatch.context() as mp:
        uly, ring = yunchang_groups(s.ulysses, s.ring, world, mp)
    ours = layout(s, world)
    assert sorted(ours["ulysses"]) == sorted(uly)
    assert sorted(ours["ring"]) == sorted(ring)


@settings(max_examples=N_EXAMPLES // 5)
@given(inference_strategies())
def test_inference_groups_partition_the_world(case):
    assume(case is not None)
    s, world = case
    groups = layout(s, world)
    assert set(groups) == set(KINDS)
    sizes = {
        "tp": s.tp,
        "ulysses": s.ulysses,
        "ring": s.ring,
        "sp": s.cp,
        "cfg": s.cfg,
        "pp": s.pp,
        "dp": world // s.min_world_size,
    }
    for kind, size in sizes.items():
        flat = sorted(r for g in groups[kind] for r in g)
        assert flat == list(range(world)), kind
        assert all(len(g) == size for g in groups[kind]), kind
    # xDiT order tp-sp-pp-cfg-dp: TP innermost (consecutive ranks), then the sequence split.
    assert groups["tp"][0] == list(range(s.tp))
    assert groups["sp"][0] == [s.tp * i for i in range(s.cp)]


def test_xdit_example_layout_by_hand():
    # 8 ranks, ulysses 2 x ring 2 x cfg 2: sp = 4 consecutive ranks, cfg pairs 4 apart.
    g = layout(Strategy(ulysses=2, ring=2, cfg=2), 8)
    assert g["ulysses"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["ring"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["cfg"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["ep"] == [[r] for r in range(8)]


def test_megatron_example_layout_by_hand():
    # TP2 PP2 on 8 ranks, order tp-cp-ep-dp-pp: dp stride 2, pp stride 4.
    g = layout(Strategy(tp=2, pp=2, sp=True), 8)
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["tp-pp"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    # With Bridge's tp-pp-dp mapping, pp comes before dp: pp stride 2.
    g = layout(Strategy(tp=2, pp=2, sp=True, order="tp-cp-ep-pp-dp"), 8)
    assert g["pp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_every_key_present_with_singletons():
    g = layout(Strategy(), 4)
    assert set(g) == set(KINDS)
    assert g["tp"] == [[0], [1], [2], [3]] and g["dp"] == [[0, 1, 2, 3]]


def test_grid_groups_small():
    # 2x3 grid, group along the second axis: ranks {0,2,4} and {1,3,5}.
    assert grid_groups([2, 3], [False, True]) == [[0, 2, 4], [1, 3, 5]]


def test_layout_refuses_a_world_that_does_not_fit():
    with pytest.raises(StrategyError) as e:
        layout(Strategy(tp=4, pp=2), 12)
    assert e.value.violations[0].rule == "world-dense"
    with pytest.raises(StrategyError):
        layout(Strategy(tp=2))  # no world size at all


def test_coordinates():
    s = Strategy(tp=2, pp=2, sp=True)
    assert coordinates(s, 8, 5) == {
        "tp": 1,
        "cp": 0,
        "dp": 0,
        "pp": 1,
        "ep": 0,
        "etp": 1,
        "edp": 0,
        "ulysses": 0,
        "ring": 0,
        "cfg": 0,
    }
    # the whole table in one pass: rank 5 of TP2 PP2 DP2 is tp 1, dp 0, pp 1 (ranks 4-7 are
    # the second pipeline stage: tp pairs (4, 5), (6, 7)); every rank has every axis
    from parastrat.layout import COORDINATE_KINDS, all_coordinates

    table = all_coordinates(s, 8)
    assert table[5] == coordinates(s, 8, 5)
    assert all(set(c) == set(COORDINATE_KINDS) for c in table)
    assert [c["pp"] for c in table] == [0, 0, 0, 0, 1, 1, 1, 1]
