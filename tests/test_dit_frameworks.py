"""The serving frameworks' limits (``spec/dit_frameworks.py``) against the real sources.

diffusers runs here: which transformer classes define a context-parallel plan is read from
the installed package.  xDiT and MindIE-SD cannot run on this machine; their limits are cited
in the module (xDiT README "Supported DiTs", ``xfuser/config/args.py``; the MindIE-SD Wan
ports' ``generate.py``) and checked here through the launch lines and refusals they give.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import parastrat as ps
from parastrat.errors import SpecError
from parastrat.spec import dit
from parastrat.spec.dit_config import READERS
from parastrat.spec.dit_frameworks import (
    DIFFUSERS_CP_CLASSES,
    FRAMEWORKS,
    LaunchSwitches,
    default_framework,
    get_framework,
)

ROOT = Path(__file__).resolve().parents[1]


def test_diffusers_cp_classes_are_those_with_a_cp_plan():
    """diffusers' ``enable_parallelism`` raises for a class without ``_cp_plan``: the recorded
    set is exactly the classes parastrat reads that define one in the installed diffusers."""
    diffusers = pytest.importorskip("diffusers")
    with_plan = {c for c in READERS if getattr(getattr(diffusers, c), "_cp_plan", None)}
    assert with_plan == DIFFUSERS_CP_CLASSES


def test_every_preset_has_its_diffusers_class():
    for name in dit.names():
        assert dit.get(name).diffusers_class in READERS, name


def test_launch_lines_as_each_framework_takes_them():
    s = ps.Strategy(ulysses=4, ring=2, cfg=2)
    vae = LaunchSwitches(vae_parallel=True)
    assert FRAMEWORKS["mindiesd"].launch(s, vae) == (
        "--ulysses_size 4 --ring_size 2 --cfg_size 2 --tp_size 1 --vae_parallel"
    )
    # xfuser/config/args.py: --ulysses_degree, --ring_degree, --use_cfg_parallel (cfg 2),
    # --use_parallel_vae
    assert FRAMEWORKS["xdit"].launch(s, vae) == (
        "--ulysses_degree 4 --ring_degree 2 --use_cfg_parallel --use_parallel_vae"
    )
    assert FRAMEWORKS["diffusers"].launch(s).startswith("ContextParallelConfig(ulysses_degree=4")
    assert FRAMEWORKS["any"].launch(s) == ""


def test_defaults_and_names():
    assert default_framework("huawei") == "mindiesd" and default_framework("nvidia") == "xdit"
    assert get_framework("MindIE-SD").name == "mindiesd"
    assert get_framework(None, "huawei").name == "mindiesd"
    with pytest.raises(SpecError, match="one of mindiesd, xdit, diffusers, any"):
        get_framework("vllm")


def test_refusals_name_a_split_that_the_framework_takes():
    """Each refusal's hint names degrees that, tried, the framework accepts."""
    flux, sd3 = dit.get("flux.1-dev"), dit.get("sd3-medium")
    cases = [
        ("mindiesd", ps.Strategy(tp=2, ulysses=2), flux, ps.Strategy(ulysses=4)),
        ("xdit", ps.Strategy(tp=2, ulysses=2), flux, ps.Strategy(ulysses=4)),
        ("xdit", ps.Strategy(ulysses=2, cfg=2), flux, ps.Strategy(ulysses=4)),
        ("diffusers", ps.Strategy(ulysses=2), sd3, ps.Strategy()),
        ("diffusers", ps.Strategy(tp=2), flux, ps.Strategy(ulysses=2)),  # no TP in 0.39
    ]
    for name, bad, model, fixed in cases:
        fw = FRAMEWORKS[name]
        got = fw.violations(bad, model)
        assert got and got[0].rule in fw.rule_ids(), (name, bad)
        assert not fw.violations(fixed, model), (name, fixed)
    assert not FRAMEWORKS["xdit"].violations(ps.Strategy(ulysses=2, cfg=2), sd3)
    assert not any(FRAMEWORKS["any"].violations(s, flux) for s, *_ in [c[1:] for c in cases])


def test_every_framework_rule_is_documented():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    missing = [r for f in FRAMEWORKS.values() for r in f.rule_ids() if f"`{r}`" not in text]
    assert not missing


def test_mindiesd_ring_is_priced_as_the_gathered_k_v_it_runs():
    """The MindIE-SD Wan ports all-gather the ring group's K and V before one attention
    (``xFuserLongContextAttention``): exposed, no merges, the whole K/V in memory; xDiT's ring
    passes blocks behind the attention."""
    from parastrat.estimate.dit import estimate_dit

    wan = dict(height=720, width=1280, frames=81, steps=50)
    s = ps.Strategy(ulysses=2, ring=4)
    npu = ps.Cluster("ascend-910b", 8)
    gathered = estimate_dit("wan2.1-t2v-14b", s, npu, **wan)  # MindIE-SD: Ascend's default
    passed = estimate_dit("wan2.1-t2v-14b", s, npu, framework="any", **wan)
    assert gathered.breakdown["ring_merge"] == 0 and gathered.hidden["ring_kv_exchange"] == 0
    assert passed.breakdown["ring_merge"] > 0 and passed.hidden["ring_kv_exchange"] > 0
    assert gathered.breakdown["ring_kv_exchange"] > passed.breakdown["ring_kv_exchange"]
    assert gathered.memory.activations > passed.memory.activations
    # the attention itself is the same work either way
    assert gathered.breakdown["attention"] == pytest.approx(passed.breakdown["attention"])
    # no ring: nothing differs
    u8 = ps.Strategy(ulysses=8)
    assert estimate_dit("wan2.1-t2v-14b", u8, npu, **wan).latency_s == pytest.approx(
        estimate_dit("wan2.1-t2v-14b", u8, npu, framework="any", **wan).latency_s
    )


def test_a_padded_split_on_diffusers_names_the_option_it_needs():
    """Qwen-Image at 1328^2 has 83 x 83 = 6,889 tokens: every split pads.  diffusers'
    EquipartitionSharder asserts an exact split unless ulysses_anything / ring_anything."""
    qwen = dict(height=1328, width=1328, steps=50, guidance=False)
    plan = ps.plan_dit("qwen-image", ps.Cluster("h100", 8), framework="diffusers", **qwen)
    assert any("ulysses_anything=True" in w for w in plan.best.report.warnings)
    xdit = ps.plan_dit("qwen-image", ps.Cluster("h100", 8), **qwen)
    assert not any("ulysses_anything" in w for w in xdit.best.report.warnings)


def test_mindiesd_wan_ports_take_only_their_sizes():
    from parastrat.errors import StrategyError
    from parastrat.spec.dit_frameworks import MINDIESD_WAN_SIZES

    assert set(MINDIESD_WAN_SIZES) <= set(dit.names())
    cluster = ps.Cluster("ascend-910b", num_devices=8)
    work = dict(frames=81, steps=50)
    with pytest.raises(StrategyError, match=r"mindiesd-size.*1920x1088.*--width 1280 --height 720"):
        ps.plan_dit("wan2.1-t2v-14b", cluster, width=1920, height=1088, **work)
    ps.plan_dit("wan2.1-t2v-14b", cluster, width=1280, height=720, **work)  # the hint's size
    for other in ("xdit", "any"):  # no such table there
        ps.plan_dit(
            "wan2.1-t2v-14b",
            cluster,
            width=1920,
            height=1088,
            framework=other,
            # xDiT's Wan examples decode on one device: the transformer offloaded for it
            memory=ps.DiTMemoryOptions(offload=other == "xdit"),
            **work,
        )
    with pytest.raises(StrategyError, match="704x1280"):
        ps.plan_dit("wan2.2-ti2v-5b", cluster, width=736, height=1280, **work)
    ps.plan_dit("flux.1-dev", cluster, width=1536, height=1024, steps=28)  # no table for Flux


def test_mindiesd_wan21_runs_one_generation_on_1_2_4_or_8_cards():
    work = dict(width=1280, height=720, frames=81, steps=50)
    with pytest.raises(ps.UsageError, match="mindiesd-cards"):
        ps.plan_dit("wan2.1-t2v-14b", ps.Cluster("ascend-910b", num_devices=10), **work)
    served = ps.plan_dit(
        "wan2.1-t2v-14b",
        ps.Cluster("ascend-910b", num_devices=16),
        data_parallel=True,
        top_k=100,
        **work,
    )
    assert all(
        c.strategy.tp * c.strategy.cp * c.strategy.cfg in (1, 2, 4, 8) for c in served.candidates
    )
    any_fw = ps.plan_dit(
        "wan2.1-t2v-14b",
        ps.Cluster("ascend-910b", num_devices=10),
        framework="any",
        allow_cross_node=True,
        **work,
    )
    assert any_fw.best.strategy.tp * any_fw.best.strategy.cp * any_fw.best.strategy.cfg == 10
