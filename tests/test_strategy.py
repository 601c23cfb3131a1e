"""Strategy: construction, derived degrees, the skill's worked numbers, bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parastrat import Strategy, StrategyError

from .strategies import inference_strategies, training_strategies


# --- the seed skill's minimum-GPU examples (sizing_heuristics.md) -------------------------
@pytest.mark.parametrize(
    "pp,tp,cp,ep,etp,expected",
    [
        (1, 2, 1, 8, 1, 8),
        (1, 4, 1, 8, 1, 8),
        (1, 2, 2, 8, 1, 8),
        (1, 2, 4, 8, 1, 8),
        (2, 2, 1, 8, 1, 16),
        (1, 2, 1, 4, 2, 8),
    ],
)
def test_skill_minimum_gpus(pp, tp, cp, ep, etp, expected):
    s = Strategy(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=True)
    assert s.min_world_size == expected


@pytest.mark.parametrize("world,dp,edp", [(8, 4, 1), (16, 8, 2), (32, 16, 4)])
def test_skill_dp_and_expert_dp_scaling(world, dp, edp):
    s = Strategy(tp=2, cp=1, ep=8, etp=1, pp=1, sp=True).with_world_size(world)
    assert (s.dp, s.expert_dp, s.world_size) == (dp, edp, world)


@pytest.mark.parametrize(
    "tp,cp,ep,etp,pp,lcm_world,max_world",
    [
        # tp*cp = 6, ep*etp = 4: lcm 12, max 6 (max would not even divide by 4)
        (3, 2, 4, 1, 1, 12, 6),
        # tp*cp = 4, ep*etp = 6 (ep 3, etp 2) with pp 2: 2*lcm(4,6) = 24, not 2*6 = 12
        (4, 1, 3, 2, 2, 24, 12),
    ],
)
def test_min_world_is_lcm_not_max(tp, cp, ep, etp, pp, lcm_world, max_world):
    s = Strategy(tp=tp, cp=cp, ep=ep, etp=etp, pp=pp, sp=True)
    assert s.min_world_size == lcm_world != max_world
    with pytest.raises(StrategyError):
        s.with_world_size(max_world)
    assert s.with_world_size(lcm_world).dp == lcm_world // (tp * cp * pp)


def test_min_world_is_not_the_product():
    s = Strategy(tp=2, cp=2, ep=8, etp=1, pp=2, sp=True)
    assert s.min_world_size == 16 != 2 * 2 * 8 * 1 * 2


def test_contract_example():
    s = Strategy(tp=4, pp=8, vpp=5, cp=1, ep=1, etp=None, dp=None, sp=True)
    assert s.etp == 4 and s.cp == 1 and s.min_world_size == 32 and s.dp is None
    s2 = s.with_world_size(64)
    assert (s2.dp, s2.expert_dp, s2.world_size) == (2, 2, 64)
    assert str(s2) == "TP4 PP8(VP5) CP1 DP2 SP"


def test_cp_ulysses_ring():
    assert (Strategy(cp=4).ring, Strategy(cp=4).ulysses) == (4, 1)
    s = Strategy(ulysses=2, ring=4)
    assert s.cp == 8 and s.is_inference
    assert Strategy(cp=8, ulysses=2, order="tp-cp-ep-dp-pp").ring == 4
    with pytest.raises(StrategyError) as e:
        Strategy(cp=6, ulysses=4)
    assert e.value.violations[0].rule == "cp-ulysses-ring"
    with pytest.raises(StrategyError):
        Strategy(cp=4, ulysses=2, ring=4)


def test_etp_resolution():
    assert Strategy(tp=4).etp == 4
    assert Strategy(tp=4, ep=8, sp=True).etp == 1
    assert Strategy(tp=4, ep=8, etp=2, sp=True).etp == 2


def test_order_convention():
    assert Strategy(tp=2).order == "tp-cp-ep-dp-pp"
    assert Strategy(ulysses=2).order == "tp-sp-pp-cfg-dp"
    assert Strategy(cfg=2).is_inference
    assert Strategy(ulysses=2, order="tp-cp-ep-dp-pp").kind == "training"
    assert Strategy(order="TP-CP-EP-PP-DP").order == "tp-cp-ep-pp-dp"


def test_inference_min_world_is_the_product():
    s = Strategy(tp=2, ulysses=2, ring=2, cfg=2)
    assert s.min_world_size == 16
    assert s.with_world_size(32).dp == 2


def test_uneven_pipeline_split():
    # DeepSeek-V3: 61 layers on PP 8.  First 7 and last 6 leave 48 for 6 middle stages (8 each).
    s = Strategy(pp=8, first_stage_layers=7, last_stage_layers=6)
    assert s.stage_layers(61) == [7, 8, 8, 8, 8, 8, 8, 6]
    with pytest.raises(StrategyError) as e:
        Strategy(pp=8).stage_layers(61)
    assert e.value.violations[0].rule == "layers-pp"
    assert "first_stage_layers" in e.value.violations[0].hint
    # Qwen3-235B: 94 layers on PP 8 with VPP 3.  First/last counts cannot do it (every count
    # must be a multiple of 3 and the middle a multiple of 6*3; 94 - 18k is never a sum of two
    # multiples of 3), but counting the embedding and the loss as layers gives 96 = 8*3*4.
    s = Strategy(pp=8, vpp=3, account_for_embedding=True, account_for_loss=True)
    assert s.stage_layers(94) == [11, 12, 12, 12, 12, 12, 12, 11]
    assert str(s) == "TP1 PP8(VP3)[+emb+loss] CP1"
    with pytest.raises(StrategyError) as e:
        Strategy(pp=8, vpp=3, first_stage_layers=10, last_stage_layers=12).stage_layers(94)
    assert e.value.violations[0].rule == "layers-vpp"
    with pytest.raises(StrategyError) as e:
        Strategy(pp=8, vpp=4, account_for_embedding=True).stage_layers(94)
    assert e.value.violations[0].rule == "layers-accounted"
    with pytest.raises(StrategyError) as e:
        Strategy(pp=4, first_stage_layers=3, account_for_loss=True)
    assert e.value.violations[0].rule == "uneven-conflict"
    assert Strategy(pp=4).stage_layers(32) == [8, 8, 8, 8]


@given(training_strategies())
def test_dict_round_trip(case):
    if case is None:
        return
    s, world = case
    placed = s.with_world_size(world)
    assert Strategy.from_dict(placed.to_dict()) == placed
    assert Strategy.from_dict(s.to_dict()) == s
    assert placed.world_size == world
    assert placed.dp * s.tp * s.cp * s.pp == world
    assert placed.expert_dp * s.etp * s.ep * s.pp == world


@given(training_strategies())
def test_min_world_formula(case):
    if case is None:
        return
    s, _ = case
    assert s.min_world_size == s.pp * math.lcm(s.tp * s.cp, s.ep * s.etp)
    s.with_world_size(s.min_world_size)  # always fits


@given(inference_strategies())
def test_inference_round_trip(case):
    if case is None:
        return
    s, world = case
    placed = s.with_world_size(world)
    assert Strategy.from_dict(placed.to_dict()) == placed
    assert placed.world_size == world


def test_replace_rederives():
    s = Strategy(tp=2, sp=True)
    assert s.replace(tp=4).etp == 4
    assert s.replace(cp=4).ring == 4
    assert Strategy(tp=2, ep=4, sp=True).replace(tp=4).etp == 1


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(StrategyError) as e:
        Strategy.from_dict({"tp": 2, "tensor_parallel": 2})
    assert e.value.violations[0].rule == "unknown-field"


# --- bad input: always StrategyError with a hint, never another error type --------------
@pytest.mark.parametrize(
    "kwargs,rule",
    [
        ({"tp": 0}, "tp-positive"),
        ({"pp": -2}, "pp-positive"),
        ({"tp": 2.0}, "tp-type"),
        ({"tp": "4"}, "tp-type"),
        ({"ep": True}, "ep-type"),
        ({"cfg": 3}, "cfg-degree"),
        ({"order": "tp-dp-xx"}, "order-unknown"),
        ({"order": "tp-cp-dp-pp"}, "order-unknown"),
        ({"sp": True}, "sp-needs-tp"),
        ({"vpp": 2}, "vpp-needs-pp"),
        ({"cfg": 2, "order": "tp-cp-ep-dp-pp"}, "cfg-training"),
        ({"ulysses": 2, "ep": 2}, "inference-ep"),
        ({"sp": 1, "tp": 2}, "sp-type"),
        ({"first_stage_layers": 3}, "uneven-needs-pp"),
    ],
)
def test_bad_values_raise_strategy_error(kwargs, rule):
    with pytest.raises(StrategyError) as e:
        Strategy(**kwargs)
    assert rule in e.value.rules
    assert all(v.hint and v.message for v in e.value.violations)
    assert isinstance(e.value, ValueError)


def test_several_bad_values_reported_together():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=0, pp=1.5, cfg=4, sp="yes")
    assert {"tp-positive", "pp-type", "cfg-degree", "sp-type"} <= set(e.value.rules)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "tp",
                "pp",
                "vpp",
                "cp",
                "ep",
                "etp",
                "dp",
                "sp",
                "ulysses",
                "ring",
                "cfg",
                "order",
                "first_stage_layers",
                "last_stage_layers",
            ]
        ),
        st.one_of(
            st.integers(-3, 9),
            st.floats(allow_nan=True),
            st.text(max_size=12),
            st.booleans(),
            st.none(),
        ),
    )
)
def test_any_input_gives_a_strategy_or_a_strategy_error(kwargs):
    try:
        s = Strategy(**kwargs)
    except StrategyError as e:
        assert e.violations and all(v.hint for v in e.violations)
        return
    # A strategy that constructs always fits its own world (dp given) or its minimum world.
    world = s.world_size or s.min_world_size
    placed = s.with_world_size(world)
    assert placed.world_size == world and placed.dp >= 1


def test_with_world_size_errors_name_the_fix():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=2, ep=8, sp=True).with_world_size(12)
    v = e.value.violations[0]
    assert v.rule == "world-expert" and "8 or 16" in v.hint
    with pytest.raises(StrategyError) as e:
        Strategy().with_world_size(0)
    assert e.value.rules == ["world_size-positive"]


def test_explicit_dp_must_fit_the_expert_grid():
    # dp=1 with tp=1, ep=2: one rank, but the expert grid needs 2.
    with pytest.raises(StrategyError) as e:
        Strategy(dp=1, ep=2)
    assert e.value.rules == ["world-expert"]
    s = Strategy(dp=2, ep=2)
    assert (s.world_size, s.expert_dp) == (2, 1)


def test_unknown_fields_and_non_mappings_are_strategy_errors():
    with pytest.raises(StrategyError) as e:
        Strategy(tp=2).replace(foo=1)
    assert e.value.rules == ["unknown-field"]
    with pytest.raises(StrategyError) as e:
        Strategy.from_dict([1])  # type: ignore[arg-type]
    assert e.value.rules == ["strategy-type"]
    # the dict round trip still ignores derived keys
    s = Strategy(tp=2, pp=2).with_world_size(8)
    assert Strategy.from_dict(s.to_dict()) == s


def test_non_strategy_arguments_raise_one_error_type():
    from parastrat.errors import StrategyTypeError
    from parastrat.strategy import require_strategy

    s = Strategy(tp=2)
    assert require_strategy(s, "apply()") is s
    with pytest.raises(StrategyTypeError) as e:
        require_strategy({"tp": 2}, "apply()")
    assert e.value.rules == ["strategy-type"]
    assert "apply() takes a parastrat.Strategy, got dict" in str(e.value)
    assert isinstance(e.value, TypeError) and isinstance(e.value, StrategyError)


def test_strategy_text_where_a_strategy_goes_names_the_parse_that_works():
    import parastrat as ps
    from parastrat.errors import StrategyTypeError

    with pytest.raises(StrategyTypeError) as e:
        ps.layout("TP2 PP2", 8)  # type: ignore[arg-type]
    assert "layout() takes a parastrat.Strategy, got str" in str(e.value)
    assert "parastrat.Strategy.parse('TP2 PP2')" in str(e.value)
    assert ps.layout(ps.Strategy.parse("TP2 PP2"), 8)["tp"][:2] == [[0, 1], [2, 3]]


def test_public_errors_are_exported():
    import parastrat

    for name in ("StrategyError", "SpecError", "UsageError", "StrategyTypeError"):
        assert name in parastrat.__all__ and hasattr(parastrat, name)


def test_dir_lists_the_package_surface_not_its_imports():
    """Tab completion on ``parastrat.`` shows the API (every ``__all__`` name, the lazy ones
    included), not the helpers ``parastrat/__init__.py`` imports for itself."""
    import parastrat

    listed = set(dir(parastrat))
    assert set(parastrat.__all__) <= listed
    assert not listed & {"Any", "importlib", "annotations"}
