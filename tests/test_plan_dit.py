"""plan_dit: legal splits only, MindIE-SD's advice and the public comparisons."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError, StrategyError, UsageError
from parastrat.planner.dit import plan_dit
from parastrat.spec import dit

WAN480 = dict(height=480, width=832, frames=81, steps=50)


def test_public_name():
    assert ps.plan_dit is plan_dit


def test_wan_13b_never_ulysses_8():
    # 12 heads: Ulysses degrees must divide 12 -> never 8 on 8 devices
    p = plan_dit("wan2.1-t2v-1.3b", ps.Cluster("h100", 8), top_k=100, **WAN480)
    assert p.candidates and all(c.strategy.ulysses in (1, 2, 4) for c in p.candidates)
    assert p.rejected.get("heads-ulysses", 0) > 0


def test_wan_14b_ulysses_follows_its_40_heads():
    # 40 heads = 8 * 5: Ulysses 8 is legal (Wan2.1's README launches t2v-14B with
    # --ulysses_size 8); every candidate's tp * ulysses divides 40
    p = plan_dit(
        "wan2.1-t2v-14b",
        ps.Cluster("h100", 8),
        top_k=100,
        height=720,
        width=1280,
        frames=81,
        steps=50,
    )
    assert all(40 % (c.strategy.tp * c.strategy.ulysses) == 0 for c in p.candidates)
    assert any(c.strategy.ulysses == 8 for c in p.candidates)


@settings(max_examples=25)
@given(
    name=st.sampled_from(dit.names()),
    n=st.sampled_from([1, 2, 4, 8, 16]),
    guidance=st.booleans(),
    dp=st.booleans(),
    accel=st.sampled_from(["h100", "ascend-910b"]),
)
def test_every_candidate_is_legal(name, n, guidance, dp, accel):
    m = dit.get(name)
    kw = dict(height=480, width=832, frames=25 if m.is_video else 1, steps=4)  # 4k+1 and 6k+1
    c = ps.Cluster(accel, num_devices=n)
    try:
        p = plan_dit(m, c, guidance=guidance, data_parallel=dp, top_k=1000, **kw)
    except (UsageError, StrategyError):  # nothing legal, or a size the framework refuses
        return
    lat = [x.latency_s for x in p.candidates]
    if not dp:
        assert lat == sorted(lat)
    for x in p.candidates:
        s = x.strategy
        assert s.tp * s.ulysses * s.ring * s.cfg * (s.dp or 1) == n
        assert s.cfg == 1 or guidance
        assert s.tp * s.ulysses <= c.scale_up_domain
        assert m.num_attention_heads % (s.tp * s.ulysses) == 0
        assert x.memory.fits()


def test_two_cards_mindiesd_tp2_or_cfg():
    # true CFG on FLUX.1-dev (two branches): MindIE-SD's 2-card advice is TP 2 or CFG 2
    p = plan_dit(
        "flux.1-dev",
        ps.Cluster("ascend-910b", 2),
        height=1024,
        width=1024,
        steps=28,
        guidance=True,
    )
    best = p.best.strategy
    assert (best.tp, best.cfg) in {(2, 1), (1, 2)}
    assert any("agrees" in a for a in p.advice)


def test_four_cards_cfg_gives_no_gain_where_ulysses_4_is_available():
    # xDiT issue #507: CFG parallel gave no gain over Ulysses 4 for Wan2.1 on 4 GPUs
    p = plan_dit("wan2.1-t2v-1.3b", ps.Cluster("h100", 4), top_k=100, framework="any", **WAN480)
    by = {
        (c.strategy.ulysses, c.strategy.ring, c.strategy.cfg, c.strategy.tp): c
        for c in p.candidates
    }
    u4 = by[(4, 1, 1, 1)].latency_s
    best_cfg = min(c.latency_s for c in p.candidates if c.strategy.cfg == 2)
    assert best_cfg > 0.95 * u4  # any CFG split gains less than 5 %
    assert any(a.startswith("Ulysses 4") for a in p.advice)


def test_long_sequence_adds_ring_across_nodes():
    # 16 H100s in two NVLink nodes: Ulysses stays inside a node, ring crosses
    p = plan_dit(
        "hunyuanvideo",
        ps.Cluster("h100", 16),
        height=720,
        width=1280,
        frames=129,
        steps=50,
        guidance=False,
    )
    best = p.best.strategy
    assert best.ulysses * best.tp <= 8 and best.ring >= 2
    assert any(a.startswith("long sequence") for a in p.advice)


def test_hunyuanvideo_8_gpus_ulysses_8_first():
    p = plan_dit(
        "hunyuanvideo",
        ps.Cluster("h100", 8),
        height=720,
        width=1280,
        frames=129,
        steps=50,
        guidance=False,
    )
    assert (p.best.strategy.ulysses, p.best.strategy.cfg) == (8, 1)
    assert p.best.mindiesd_flags() == "--ulysses_size 8 --ring_size 1 --cfg_size 1 --tp_size 1"


def test_cross_node_only_when_allowed():
    # CogVideoX1.5 has 48 heads, so Ulysses 16 divides them; it would span two 8-GPU nodes
    kw = dict(height=768, width=1360, frames=81, steps=50, guidance=False, top_k=1000)
    inside = plan_dit("cogvideox1.5-5b", ps.Cluster("h100", 16), **kw)
    assert max(c.strategy.tp * c.strategy.ulysses for c in inside.candidates) <= 8
    assert inside.rejected["TP/Ulysses across nodes"] > 0
    anywhere = plan_dit("cogvideox1.5-5b", ps.Cluster("h100", 16), allow_cross_node=True, **kw)
    assert max(c.strategy.tp * c.strategy.ulysses for c in anywhere.candidates) > 8


def test_data_parallel_ranks_by_throughput():
    p = plan_dit(
        "flux.1-dev",
        ps.Cluster("h100", 8),
        height=1024,
        width=1024,
        steps=28,
        data_parallel=True,
        top_k=50,
    )
    rates = [c.requests_per_s for c in p.candidates]
    assert rates == sorted(rates, reverse=True)
    assert p.objective == "throughput"


def test_explain_and_json():
    p = plan_dit(
        "wan2.1-t2v-14b",
        ps.Cluster("ascend-910b", 8),
        height=720,
        width=1280,
        frames=81,
        steps=50,
        top_k=3,
    )
    text = p.explain()
    assert len(p.candidates) == 3
    for c in p.candidates:
        assert c.reasons and c.reasons[0] in text and c.why.startswith(c.reasons[0])
    d = json.loads(json.dumps(p.to_dict()))
    assert d["best"]["strategy"]["ulysses"] == p.best.strategy.ulysses


def test_nothing_fits_says_what_would():
    small = dataclasses.replace(ps.hardware.get("h100"), name="h100-16g", memory_bytes=16 * 2**30)
    with pytest.raises(UsageError) as err:
        plan_dit("qwen-image", ps.Cluster(small, 1), height=1328, width=1328, steps=50)
    assert "GiB" in str(err.value)


def test_bad_inputs():
    c = ps.Cluster("h100", 8)
    with pytest.raises(SpecError):
        plan_dit("wan2.1-t2v-14b", c, height=720, width=1280, frames=80, steps=50)
    with pytest.raises(SpecError):
        plan_dit("wan2.1-t2v-14b", c, height=720, width=1280, frames=81, steps=0)
    with pytest.raises(UsageError):
        plan_dit("flux.1-dev", c, height=1024, width=1024, steps=28, devices=16)
    with pytest.raises(UsageError):
        plan_dit("flux.1-dev", c, height=1024, width=1024, steps=28, top_k=0)


def test_tiny_image_plans_with_tp_not_sequence_ranks():
    """FLUX at 32x32 has 4 image tokens: Ulysses/ring beyond 4 ranks is refused by the
    `sp-exceeds-tokens` rule, but TP does not split the sequence and stays allowed (the
    planner used to count TP as sequence ranks and refuse everything)."""
    tiny = dict(height=32, width=32, steps=28)
    r = plan_dit("flux.1-dev", ps.Cluster("ascend-910b", num_devices=8), **tiny)
    assert all(c.strategy.ulysses * c.strategy.ring <= 4 for c in r.candidates)
    assert any(c.strategy.tp > 1 for c in r.candidates)
    # xDiT (the GPU default) has no TP: nothing is left, and the error says which rule and
    # what leaves a split
    with pytest.raises(UsageError, match=r"xdit-tp .*sp-exceeds-tokens|framework='any'"):
        plan_dit("flux.1-dev", ps.Cluster("h100", num_devices=8), **tiny)


def test_each_framework_keeps_only_the_splits_it_runs():
    """MindIE-SD: no TP with Ulysses/ring; xDiT: no TP, CFG only for SD3 / CogVideoX / Mochi;
    diffusers: sequence parallelism only for classes with a _cp_plan, no CFG; any: all."""
    sd3 = dict(height=1024, width=1024, steps=28)
    by_fw = {
        fw: plan_dit("sd3-medium", ps.Cluster("h100", 8), top_k=1000, framework=fw, **sd3)
        for fw in ("mindiesd", "xdit", "any")
    }
    # diffusers 0.39: no TP, no context parallelism for SD3: one device per generation
    by_fw["diffusers"] = plan_dit(
        "sd3-medium",
        ps.Cluster("h100", 8),
        top_k=1000,
        framework="diffusers",
        data_parallel=True,
        **sd3,
    )
    splits = {fw: [c.strategy for c in p.candidates] for fw, p in by_fw.items()}
    assert not any(s.tp > 1 and s.cp > 1 for s in splits["mindiesd"])
    assert not any(s.tp > 1 for s in splits["xdit"]) and any(s.cfg == 2 for s in splits["xdit"])
    assert all(s.cp == s.cfg == s.tp == 1 for s in splits["diffusers"])  # SD3: no _cp_plan
    assert len(splits["any"]) > max(len(v) for fw, v in splits.items() if fw != "any")
    assert by_fw["xdit"].launch().startswith("--ulysses_degree")
    assert by_fw["any"].launch() == "" and by_fw["diffusers"].launch() == ""
    assert by_fw["diffusers"].rejected.get("diffusers-sp")


def test_every_breakdown_entry_has_a_label_for_the_why_lines():
    """The planner's "why" lines name breakdown entries through one table: every entry an
    estimate reports (sequence-parallel, TP and CFG splits, serial parts) has its label."""
    from parastrat.planner.dit import _LABELS

    keys: set[str] = set()
    for s in (
        ps.Strategy(ulysses=2, ring=2, cfg=2),
        ps.Strategy(tp=2),
    ):
        r = ps.estimate_dit(
            "cogvideox-2b",
            s,
            ps.Cluster("a100", 8),
            height=480,
            width=720,
            frames=49,
            steps=2,
        )
        keys |= set(r.breakdown)
    assert keys and keys <= set(_LABELS), sorted(keys - set(_LABELS))
