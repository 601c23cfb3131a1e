"""The typed values of a DiT estimate or plan (``parastrat.estimate.dit_options``): the
typed form prices as the keyword form does, the two are never mixed, and bad values are
refused at construction with the field named."""

from __future__ import annotations

import dataclasses

import pytest

import parastrat as ps
from parastrat.errors import SpecError, UsageError
from parastrat.estimate.dit_options import resolve_dit
from parastrat.strategy import XDIT_ORDER

XDIT = XDIT_ORDER
FLUX = {"height": 1024, "width": 1024, "steps": 28}
WAN = {"height": 720, "width": 1280, "frames": 81, "steps": 50}


def _cluster(n: int = 4, accel: str = "h100") -> ps.Cluster:
    return ps.Cluster(accelerator=accel, num_devices=n)


@pytest.mark.parametrize(
    ("model", "size", "switches"),
    [
        ("flux.1-dev", FLUX, {"compiled": True}),
        ("wan2.1-t2v-14b", WAN, {"vae_parallel": True, "precision": "bf16", "framework": "any"}),
        ("flux.1-dev", FLUX, {"vae_tiling": True, "vae_cold": True, "framework": "xdit"}),
    ],
)
def test_typed_estimate_prices_as_the_keyword_form(model, size, switches):
    s = ps.Strategy(ulysses=4, order=XDIT)
    by_keywords = ps.estimate_dit(model, s, _cluster(), **size, **switches)
    typed = ps.estimate_dit(model, s, _cluster(), ps.DiTRequest(**size), ps.DiTSwitches(**switches))
    assert typed == by_keywords
    assert typed.latency_s > 0


def test_switches_change_the_price_they_name():
    s, req = ps.Strategy(ulysses=4, order=XDIT), ps.DiTRequest(**FLUX)
    eager = ps.estimate_dit("flux.1-dev", s, _cluster(), req, ps.DiTSwitches())
    compiled = ps.estimate_dit("flux.1-dev", s, _cluster(), req, ps.DiTSwitches(compiled=True))
    assert compiled.per_step_s < eager.per_step_s
    assert compiled.compiled and not eager.compiled


def test_typed_plan_ranks_as_the_keyword_form():
    cluster = _cluster(8)
    by_keywords = ps.plan_dit("wan2.1-t2v-14b", cluster, **WAN, data_parallel=True, top_k=3)
    typed = ps.plan_dit(
        "wan2.1-t2v-14b",
        cluster,
        ps.DiTRequest(**WAN),
        ps.DiTSwitches(),
        ps.DiTSearch(data_parallel=True, top_k=3),
    )
    assert [c.strategy for c in typed.candidates] == [c.strategy for c in by_keywords.candidates]
    assert [c.latency_s for c in typed.candidates] == [c.latency_s for c in by_keywords.candidates]
    assert typed.objective == "throughput" and len(typed.candidates) == 3


def test_the_plan_prices_its_best_with_the_switches_it_was_given():
    cluster, req = _cluster(4), ps.DiTRequest(**FLUX)
    sw = ps.DiTSwitches(compiled=True, vae_parallel=True)
    plan = ps.plan_dit("flux.1-dev", cluster, req, sw)
    again = ps.estimate_dit("flux.1-dev", plan.best.strategy, cluster, req, sw)
    assert again.latency_s == pytest.approx(plan.best.latency_s)
    assert plan.workload["compiled"] is True


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: ps.DiTRequest(height=1024, width=1024, steps=0), "steps=0"),
        (lambda: ps.DiTRequest(height=1024, width=1024, steps=True), "steps=True"),
        (lambda: ps.DiTRequest(**FLUX, output_type="jpeg"), "output_type='jpeg'"),
        (
            lambda: ps.DiTSwitches(
                memory=ps.DiTMemoryOptions(encoder_fsdp=True), text_encoder_on_device=False
            ),
            "encoder_fsdp",
        ),
        (lambda: ps.DiTSwitches(memory="fsdp"), "DiTMemoryOptions"),
    ],
)
def test_bad_values_are_refused_at_construction(call, named):
    with pytest.raises(SpecError, match=named.replace("(", r"\(")):
        call()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"top_k": 0}, "top_k=0"), ({"max_latency_s": -1.0}, "max_latency_s")],
)
def test_bad_search_values_are_usage_errors(kwargs, named):
    with pytest.raises(UsageError, match=named):
        ps.DiTSearch(**kwargs)


def test_keywords_beside_a_typed_value_are_refused():
    s = ps.Strategy(ulysses=4, order=XDIT)
    req = ps.DiTRequest(**FLUX)
    with pytest.raises(UsageError, match="steps given beside a DiTRequest"):
        ps.estimate_dit("flux.1-dev", s, _cluster(), req, steps=50)
    with pytest.raises(UsageError, match="compiled given beside a DiTSwitches"):
        ps.estimate_dit("flux.1-dev", s, _cluster(), req, ps.DiTSwitches(), compiled=True)
    with pytest.raises(UsageError, match="top_k given beside a DiTSearch"):
        ps.plan_dit("flux.1-dev", _cluster(), req, search=ps.DiTSearch(), top_k=2)


def test_a_missing_size_names_what_is_missing():
    s = ps.Strategy(ulysses=4, order=XDIT)
    with pytest.raises(UsageError, match="needs width, steps"):
        ps.estimate_dit("flux.1-dev", s, _cluster(), height=1024)
    with pytest.raises(UsageError, match="expected a DiTRequest, got dict"):
        ps.plan_dit("flux.1-dev", _cluster(), dict(FLUX))


def test_replace_changes_one_field_and_rechecks_it():
    req = ps.DiTRequest(**FLUX)
    assert dataclasses.replace(req, steps=4).steps == 4
    with pytest.raises(SpecError, match="steps=0"):
        dataclasses.replace(req, steps=0)
    sw = dataclasses.replace(ps.DiTSwitches(), compiled=True)
    assert sw.compiled and sw.memory == ps.DiTMemoryOptions()


def test_resolve_keeps_given_values_and_defaults_the_rest():
    req, sw = resolve_dit(None, None, who="t", height=64, width=64, steps=2, compiled=None)
    assert (req.frames, req.guidance, req.output_type) == (1, None, "pil")
    assert sw == ps.DiTSwitches()


def test_sizing_takes_the_typed_values_and_chooses_the_devices():
    from parastrat.planner.dit_sizing import smallest_dit

    cluster, req = _cluster(16), ps.DiTRequest(**FLUX)
    typed = smallest_dit(
        "flux.1-dev",
        cluster,
        min_requests_per_s=1,
        request=req,
        search=ps.DiTSearch(max_latency_s=3.0),
    )
    by_keywords = smallest_dit(
        "flux.1-dev", cluster, min_requests_per_s=1, max_latency_s=3.0, **FLUX
    )
    assert typed.devices == by_keywords.devices
    assert typed.best.strategy == by_keywords.best.strategy
    assert typed.objective == "throughput"  # a throughput target plans with replicas
    with pytest.raises(UsageError, match="chooses the device count"):
        smallest_dit("flux.1-dev", cluster, request=req, search=ps.DiTSearch(devices=4))


def test_an_unknown_keyword_is_named():
    with pytest.raises(UsageError, match=r"unknown argument.*hieght"):
        resolve_dit(None, None, who="t", hieght=64, width=64, steps=2)
