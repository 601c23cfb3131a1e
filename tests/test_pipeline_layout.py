"""parastrat.pipeline_layout against Megatron Core 0.16.1's own PipelineParallelLayerLayout.

The property tests draw random layouts (list form and string form), pipeline sizes and models,
and require the same accept/refuse decision and the same per-(rank, chunk) placement as the
real parser plus ``validate_layer_layout``.  Each property runs ``max_examples`` layouts
(:data:`EXAMPLES`; ``PARASTRAT_THOROUGH=1`` runs 20,000 each).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from parastrat import Strategy, StrategyError
from parastrat.pipeline_layout import (
    PipelineLayout,
    compact,
    layout_violations,
    parse_string,
)
from parastrat.spec.models import get

EXAMPLES = 400

mlayout = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
from megatron.core.transformer.enums import LayerType

Real = mlayout.PipelineParallelLayerLayout
NAMES = ("embedding", "decoder", "mtp", "loss")


def real_verdict(layout, pp: int, num_layers: int, mtp: int | None):
    """Megatron's decision: None when refused, else {(rank, chunk): (E, t, m, L)}."""
    try:
        parsed = Real(layout, pp)
        parsed.validate_layer_layout(num_layers=num_layers, mtp_num_layers=mtp)
    except Exception:
        return None
    return {
        (r, c): (
            LayerType.embedding in parsed.layout[r][c],
            parsed.layout[r][c].count(LayerType.decoder),
            parsed.layout[r][c].count(LayerType.mtp),
            LayerType.loss in parsed.layout[r][c],
        )
        for r in range(pp)
        for c in range(parsed.virtual_pipeline_model_parallel_size)
    }


def our_verdict(layout, pp: int, num_layers: int, mtp: int | None):
    try:
        parsed = PipelineLayout.parse(layout, pp)
    except StrategyError:
        return None
    if layout_violations(parsed, num_layers, mtp):
        return None
    return {
        (p.pp_rank, p.chunk): (p.embedding, p.decoder, p.mtp, p.loss) for p in parsed.placements()
    }


def _spelled(name: str):
    """A layer name as recipe authors may write it (any case, blanks around)."""
    return st.sampled_from([name, name.upper(), f" {name} ", name.capitalize()])


@st.composite
def plausible_stages(draw):
    """Mostly valid layouts: E first, L last, decoders spread, MTP near the end; then
    perturbed (a layer moved, dropped or duplicated) some of the time."""
    pp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    vpp = draw(st.sampled_from([1, 1, 2, 3]))
    n = pp * vpp
    stages = [["decoder"] * draw(st.integers(0, 4)) for _ in range(n)]
    stages[0].insert(0, "embedding")
    mtp = draw(st.integers(0, 2))
    last = draw(st.sampled_from([n - 1, n - 1, n - 2, n - pp])) if n > 1 else 0
    stages[max(last, 0)] += ["mtp"] * mtp
    stages[-1].append("loss")
    if draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(0, n - 1))
        stages[i].insert(
            draw(st.integers(0, len(stages[i]))), draw(st.sampled_from(NAMES + ("encoder",)))
        )
    if draw(st.integers(0, 3)) == 0 and n > 1:
        stages.pop(draw(st.integers(0, n - 1)))
    decoders = sum(s.count("decoder") for s in stages)
    num_layers = decoders + draw(st.sampled_from([0, 0, 0, 0, 0, 1, -1]))
    model_mtp = draw(st.sampled_from([mtp, mtp, mtp, mtp or None, mtp + 1]))
    spelled = [[draw(_spelled(x)) for x in s] for s in stages]
    return spelled, draw(st.sampled_from([pp, pp, pp, pp, 1, 2, 4])), max(num_layers, 1), model_mtp


@settings(max_examples=EXAMPLES)
@given(plausible_stages())
def test_list_layouts_decided_and_placed_as_megatron_does(case):
    layout, pp, num_layers, mtp = case
    assert our_verdict(layout, pp, num_layers, mtp) == real_verdict(layout, pp, num_layers, mtp)


@settings(max_examples=EXAMPLES)
@given(plausible_stages())
def test_compact_string_is_the_same_layout(case):
    """The string str(strategy) shows parses, in Megatron, to the very same stages."""
    layout, pp, num_layers, mtp = case
    try:
        rows = PipelineLayout.parse(layout, 1).stages
    except StrategyError:
        return
    assume(not any("encoder" in row for row in rows))  # the string form has no encoder letter
    text = compact(rows)
    assert Real.parse_str_to_list(text) == [[LayerType[x] for x in row] for row in rows]
    assert our_verdict(text, pp, num_layers, mtp) == real_verdict(text, pp, num_layers, mtp)


@settings(max_examples=EXAMPLES)
@given(
    st.text(alphabet="EtmL|()*,0123x ", max_size=24),
    st.sampled_from([1, 2, 4]),
    st.integers(1, 12),
    st.sampled_from([None, 0, 1]),
)
@example("Et*4|(t*4|)*14tmL", 8, 61, 1)
@example("Et|(tt|)*30L", 8, 61, None)
@example("t*2*3", 1, 6, None)
@example("(t)EL", 1, 1, None)
def test_random_strings_decided_as_megatron_does(text, pp, num_layers, mtp):
    assert our_verdict(text, pp, num_layers, mtp) == real_verdict(text, pp, num_layers, mtp)


# ---------------------------------------------------------------------------------------------
# The strategy field.
# ---------------------------------------------------------------------------------------------
def test_nvidia_deepseek_v3_layouts_on_the_model_preset():
    v3 = get("deepseek-v3")  # 61 layers, 1 MTP layer
    s = Strategy(tp=2, pp=8, ep=8, sp=True, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert s.vpp == 2 and not [v for v in s.check(v3) if v.severity == "error"]
    assert s.stage_layers(61) == [8] * 7 + [5]
    last = s.layout_parsed.placement(7, 1)
    assert (last.decoder, last.mtp, last.loss) == (1, 1, True)
    # NVIDIA's GB200 layout has no MTP slot: refused for the preset, with the count
    bad = Strategy(pp=8, pipeline_layout="Et|(tt|)*30L")
    assert bad.vpp == 4
    errors = [v for v in bad.check(v3) if v.severity == "error"]
    assert [v.rule for v in errors] == ["pipeline-layout-mtp"]
    assert "1" in errors[0].hint


def test_list_form_round_trips_and_prints_compactly():
    rows = [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "loss"]]
    s = Strategy(tp=2, pp=16, ep=32, sp=True, pipeline_layout=rows)
    assert "PP16[Et*4|(t*4|)*14|tL]" in str(s) or "PP16[Et*4|(t*4|)*14tL]" in str(s)
    d = s.to_dict()
    assert d["pipeline_layout"] == rows
    assert Strategy.from_dict(d) == s
    assert hash(s) == hash(Strategy.from_dict(d))
    assert parse_string(compact(s.pipeline_layout)) == s.pipeline_layout


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"pp": 3, "pipeline_layout": "Et|t|tL|t"}, "pipeline-layout-pp"),
        ({"pp": 2, "vpp": 4, "pipeline_layout": "Et|t|t|tL"}, "pipeline-layout-vpp"),
        ({"pp": 2, "pipeline_layout": "Ex|tL"}, "pipeline-layout"),
        ({"pp": 2, "pipeline_layout": [["embedding", "E"], ["loss"]]}, "pipeline-layout"),
        (
            {"pp": 2, "account_for_loss": True, "pipeline_layout": "Et|tL"},
            "pipeline-layout-conflict",
        ),
    ],
)
def test_refusals_name_the_rule(kwargs, rule):
    with pytest.raises(StrategyError) as err:
        Strategy(**kwargs)
    assert err.value.rules == [rule]
