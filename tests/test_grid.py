"""parastrat.grid: one rank grid with dense, expert, sequence and FSDP views.

The groups it lists are checked against Megatron Core in test_layout.py; here: the grid's own
algebra, and that the strides the communication model prices are the real distances between
neighbours in the groups the layout lists (one grid, read two ways).
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import assume, given, settings

from parastrat import Strategy, layout
from parastrat.estimate import comm
from parastrat.grid import RankGrid, expert_dp, strategy_grid, training_grid

from .strategies import training_strategies


def test_groups_and_strides_of_a_small_grid():
    g = RankGrid.from_order("tp-cp-dp", {"tp": 2, "cp": 3, "dp": 2})
    assert g.world == 12
    assert (g.stride("tp"), g.stride("cp"), g.stride("dp")) == (1, 2, 6)
    assert g.groups("cp")[:2] == [[0, 2, 4], [1, 3, 5]]
    assert g.groups("tp-dp")[0] == [0, 1, 6, 7]
    # several axes: the smallest stride among the axes longer than 1
    assert g.stride("dp-cp") == 2
    assert RankGrid.from_order("tp-cp", {"tp": 2, "cp": 1}).stride("cp-tp") == 1


def test_views_share_the_world_and_refuse_another():
    g = RankGrid.from_order("tp-dp", {"tp": 2, "dp": 4})
    v = g.split("dp", (("shard", 2), ("rep", 2)))
    g2 = g.register_view("fsdp", v)
    assert g2.view("fsdp").groups("shard") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g2.view("fsdp").groups("rep") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g.views == ()  # register_view returns a copy
    with pytest.raises(ValueError, match="spans"):
        g.register_view("bad", RankGrid(("x",), (3,)))
    with pytest.raises(ValueError, match="multiply"):
        g.split("dp", (("a", 3),))
    with pytest.raises(KeyError):
        g.view("expert")
    with pytest.raises(ValueError, match="no axis"):
        g.groups("pp")


def test_expert_view_reads_tp_as_etp():
    g = training_grid("tp-cp-ep-dp-pp", 2, 1, 4, 1, 2, 32)
    e = g.view("expert")
    assert e.names == ("etp", "cp", "ep", "edp", "pp")
    assert e.sizes == (1, 1, 4, expert_dp(32, 1, 4, 2), 2)
    assert e.stride("pp") == g.stride("pp") == 16


@settings(max_examples=400)
@given(training_strategies(max_world=256))
def test_priced_strides_are_the_layout_neighbour_distances(case):
    assume(case is not None)
    s, world = case
    placed = s.with_world_size(world)
    strides = comm.group_strides(placed, placed.dp or 1)
    groups = layout(s, world)
    for kind, stride in strides.items():
        first = groups[kind][0]
        if len(first) > 1:
            assert stride == min(b - a for a, b in pairwise(first)), kind


def test_strategy_grid_matches_strategy_degrees():
    s = Strategy(tp=2, cp=2, pp=2, ep=4)
    g = strategy_grid(s, 32)
    assert g.world == 32
    assert g.size("dp") == 4
    assert g.view("expert").size("edp") == s.with_world_size(32).expert_dp == 4


@pytest.mark.parametrize(
    ("kwargs", "world"),
    [
        (dict(tp=2, cp=2, dp_replicate=2), 16),
        (dict(tp=4, pp=2, dp_replicate=4), 64),
        (dict(tp=8, dp_shard=4), 32),
        (dict(tp=2, pp=2, dp_replicate=2, order="tp-cp-ep-pp-dp"), 16),
    ],
)
def test_fsdp_model_groups_come_from_the_grid(kwargs, world):
    from parastrat.estimate.fsdp import ShardGroups, Sharding

    s = Strategy(**kwargs).with_world_size(world)
    dp = s.dp or 1
    groups = ShardGroups.of_strategy(s, dp)
    g = layout(s, world)
    assert groups.shard == len(g["dp_shard-cp"][0])
    assert groups.replicate == len(g["dp_replicate"][0])
    if s.order == "tp-cp-ep-dp-pp":  # the FSDP model's default-order shortcut agrees
        sharding = Sharding.from_strategy(s, distributed_optimizer=True)
        assert ShardGroups.dense(sharding, tp=s.tp, cp=s.cp) == groups


def test_grid_is_an_immutable_value():
    import copy
    import pickle

    g = training_grid("tp-cp-ep-dp-pp", 2, 1, 1, 2, 1, 8)
    assert pickle.loads(pickle.dumps(g)) == g and hash(copy.deepcopy(g)) == hash(g)
    with pytest.raises(AttributeError):
        g.sizes = (8,)  # type: ignore[misc]
