"""parastrat.pipeline_layout against Megatron Core 0.16.1's own PipelineParallelLayerLayout.

The property tests draw random layouts (list form and string form), pipeline sizes and models,
and require the same accept/refuse decision and the same per-(rank, chunk) placement as the
real parser plus ``validate_layer_layout``.  Each property runs ``max_examples`` layouts
(:data:`EXAMPLES`; ``PARASTRAT_THOROUGH=1`` runs 20,000 each).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from parastrat import Strategy, StrategyError
from parastrat.pipeline_layout import (
    PipelineLayout,
    compact,
    layout_violations,
    parse_string,
    recipe_layouts,
)
from parastrat.spec.models import get

EXAMPLES = 20000 if os.environ.get("PARASTRAT_THOROUGH") else 400

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


def test_one_layout_in_two_spellings_is_one_strategy():
    """A layout written as Megatron's string, folded or not, and as lists of layer names is the
    same strategy: equal, one hash, one set member; the spelling given is kept for output."""
    rows = [["embedding", "decoder", "decoder"], ["decoder", "decoder", "loss"]]
    spellings = ["Et*2|t*2L", "Ett|ttL", rows, tuple(map(tuple, rows))]
    strategies = [Strategy(pp=2, pipeline_layout=x) for x in spellings]
    assert len(set(strategies)) == 1 and all(s == strategies[0] for s in strategies)
    assert strategies[1].to_dict()["pipeline_layout"] == "Ett|ttL"
    assert strategies[0] != Strategy(pp=2, pipeline_layout="Et|tttL")
    assert strategies[0] != Strategy(pp=2, account_for_embedding=True, account_for_loss=True)
    # dp filled in later (with_world_size) is part of the value, as any other field
    assert strategies[0].with_world_size(4) == strategies[2].with_world_size(4)
    assert strategies[0].with_world_size(4) != strategies[0].with_world_size(2)


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


# ---------------------------------------------------------------------------------------------
# Every split as Megatron places it; recipe-style layouts Megatron accepts.
# ---------------------------------------------------------------------------------------------
def megatron_config(num_layers: int, pp: int, vpp: int, **kw):
    """A real TransformerConfig for the split (construction runs Megatron's checks)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=num_layers,
        hidden_size=64,
        num_attention_heads=8,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        pipeline_dtype=__import__("torch").bfloat16,
        **kw,
    )


@st.composite
def splits(draw):
    pp = draw(st.integers(2, 8))
    vpp = draw(st.sampled_from([1, 1, 2, 3]))
    kind = draw(st.sampled_from(["even", "accounted", "uneven"]))
    if kind == "even":
        return draw(st.integers(1, 6)) * pp * vpp, pp, vpp, {}
    if kind == "accounted":
        emb, loss = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
        total = draw(st.integers(1, 6)) * pp * vpp
        return total - emb - loss, pp, vpp, {"account_for_embedding": emb, "account_for_loss": loss}
    first, last = draw(st.integers(1, 4)) * vpp, draw(st.integers(1, 4)) * vpp
    mid = draw(st.integers(1, 4)) * vpp
    return (
        first + last + mid * (pp - 2),
        pp,
        vpp,
        {"first_stage_layers": first, "last_stage_layers": last},
    )


@settings(max_examples=150)
@given(splits())
def test_split_placement_is_megatrons(case):
    """Strategy.placements against Megatron Core's get_num_layers_to_build per (rank, chunk)."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    layers, pp, vpp, kw = case
    assume(layers > 0)
    s = Strategy(pp=pp, vpp=vpp, **kw)
    try:
        ours = {(p.pp_rank, p.chunk): p.decoder for p in s.placements(layers)}
    except StrategyError:
        ours = None
    mcore_kw = {
        "num_layers_in_first_pipeline_stage": kw.get("first_stage_layers"),
        "num_layers_in_last_pipeline_stage": kw.get("last_stage_layers"),
        "account_for_embedding_in_pipeline_split": kw.get("account_for_embedding", False),
        "account_for_loss_in_pipeline_split": kw.get("account_for_loss", False),
    }
    try:
        cfg = megatron_config(layers, pp, vpp, **mcore_kw)
        real = {
            (r, c): get_num_layers_to_build(cfg, vp_stage=c if vpp > 1 else None, pp_rank=r)
            for r in range(pp)
            for c in range(vpp)
        }
    except (AssertionError, ValueError):
        real = None
    assert ours == real


LAYOUT_CASES = [
    # (model, pp, vpp): DeepSeek-V3 61 + 1 MTP, Kimi K2 61, Llama 3.1 405B 126
    ("deepseek-v3", 8, 1),
    ("deepseek-v3", 8, 2),
    ("deepseek-v3", 8, 4),
    ("deepseek-v3", 16, 1),
    ("deepseek-v3", 16, 2),
    ("kimi-k2", 8, 1),
    ("kimi-k2", 16, 1),
    ("kimi-k2", 16, 2),
    ("llama3.1-405b", 8, 1),
    ("llama3.1-405b", 8, 2),
    ("llama3.1-405b", 16, 1),
    ("llama3.1-405b", 16, 2),
]


@pytest.mark.parametrize(("name", "pp", "vpp"), LAYOUT_CASES)
def test_recipe_layouts_pass_megatrons_transformer_config(name, pp, vpp):
    m = get(name)
    found = recipe_layouts(m.num_layers, pp, vpp, m.mtp_num_layers)
    assert found
    for text in found:
        cfg = megatron_config(
            m.num_layers,
            pp,
            1,
            pipeline_model_parallel_layout=text,
            mtp_num_layers=m.mtp_num_layers or None,
        )
        assert (cfg.virtual_pipeline_model_parallel_size or 1) == vpp
        s = Strategy(pp=pp, pipeline_layout=text)
        assert not [v for v in s.check(m) if v.severity == "error"]
        assert sum(s.stage_layers(m.num_layers)) == m.num_layers


def test_recipe_layouts_include_the_published_ones():
    assert "Et*4|(t*4|)*14tmL" in recipe_layouts(61, 8, 2, 1)  # Bridge's DeepSeek-V3 recipe
    assert "Et|(t*2|)*30L" in recipe_layouts(61, 8, 4, 0)  # NVIDIA's GB200 runs, as Et|(tt|)*30L
    assert "Et*4|(t*4|)*14tL" in recipe_layouts(61, 16, 1, 0)  # Bridge's Kimi K2 recipe
    # 64 chunks for 61 layers + MTP: no layout with balanced (full) middle stages
    assert recipe_layouts(61, 16, 4, 1) == []


# ---------------------------------------------------------------------------------------------
# Hints that propose a split: each suggestion clears its rule and breaks no other.
# ---------------------------------------------------------------------------------------------
def suggestions(hint: str) -> list[dict]:
    """The strategy changes a hint proposes: 'pp in {1, 2}' (one change per value) and
    'name=value, name=value' groups; device counts are not strategy changes."""
    import ast
    import re

    out = []
    for part in hint.removeprefix("use ").split("; or "):
        m = re.fullmatch(r"(\w+) in \{([\d, ]+)(?:, \.\.\.)?\}", part)
        if m:
            out += [{m.group(1): int(x)} for x in m.group(2).split(", ")]
        elif "=" in part and "devices" not in part:
            pairs = re.findall(r"(\w+)=('[^']*'|[^,]+)", part)
            out.append({k: ast.literal_eval(v) for k, v in pairs})
    return out


HINT_CASES = [
    ("llama3-70b", {"tp": 8, "pp": 4}, 48),
    ("deepseek-v3", {"tp": 2, "pp": 8, "ep": 8, "sp": True}, 256),
    ("deepseek-v3", {"tp": 2, "pp": 8, "vpp": 2, "ep": 8, "sp": True}, 256),
    ("llama3.1-405b", {"tp": 8, "pp": 8, "sp": True}, 128),
    ("llama3.1-405b", {"tp": 8, "pp": 16, "sp": True}, 256),
    ("kimi-k2", {"tp": 2, "pp": 16, "ep": 32, "sp": True}, 1024),
    ("qwen3-235b-a22b", {"tp": 4, "pp": 8, "vpp": 3, "ep": 8, "sp": True}, 256),
    ("llama3-70b", {"tp": 8, "pp": 3}, 48),
]


@pytest.mark.parametrize(("name", "kw", "world"), HINT_CASES)
def test_split_hints_clear_their_rule_and_break_no_other(name, kw, world):
    m = get(name)
    s = Strategy(**kw)

    def errors(t):
        return {v.rule for v in t.check(m, world_size=world) if v.severity == "error"}

    before = errors(s)
    found = [v for v in s.check(m, world_size=world, verify_hints=True) if v.severity == "error"]
    assert {v.rule for v in found} == before
    checked = 0
    for v in found:
        for change in suggestions(v.hint):
            after = errors(s.replace(**change))
            assert v.rule not in after, (v.rule, change)
            assert after <= before, (v.rule, change, after - before)
            checked += 1
    assert checked or not before


def test_hints_named_in_the_issue():
    hint = {
        name: {
            v.rule: v.hint for v in Strategy(**kw).check(get(name), world_size=w, verify_hints=True)
        }
        for name, kw, w in HINT_CASES[:4]
    }
    assert "pp in {1, 2}" in hint["llama3-70b"]["world-dense"]  # not 3 or 6 (80 layers)
    assert "61" not in hint["deepseek-v3"]["layers-pp"].split("pipeline_layout")[0]
    assert "pipeline_layout=" in hint["deepseek-v3"]["layers-pp"]
    assert "account_for_embedding=True, account_for_loss=True" in hint["llama3.1-405b"]["layers-pp"]


def test_replacing_the_layout_infers_vpp_again():
    s = Strategy(pp=8, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert s.vpp == 2
    t = s.replace(pipeline_layout="Et|(tt|)*30L")
    assert t.vpp == 4
    assert s.replace(pipeline_layout=None).vpp == 1


@pytest.mark.parametrize(
    "text",
    ["Et*99999999999999|t*16L", "(t|)*100000000L", "E" + "(t)*60000" * 3 + "L", "t*" + "9" * 5000],
)
def test_a_huge_repeat_count_is_refused_before_it_is_expanded(text):
    """A mistyped count used to expand first (MemoryError, or 17 s and 1.5 GB for 10^8)."""
    with pytest.raises(StrategyError, match="past 65,536") as err:
        Strategy(pp=2, pipeline_layout=text)
    assert err.value.rules == ["pipeline-layout"]
