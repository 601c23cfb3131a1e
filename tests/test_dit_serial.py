"""The serial parts, compiled execution, the new presets and accelerators, and the orderings
the published measurements show (model behaviour, not timing)."""

from __future__ import annotations

import dataclasses

import pytest

import parastrat as ps
from parastrat.estimate import efficiency
from parastrat.estimate.dit import estimate_dit
from parastrat.estimate.dit_serial import (
    VAE_CONV_CEILING,
    VAE_CONV_EFF,
    vae_conv_rate,
    vae_decode,
)
from parastrat.spec import dit
from parastrat.spec.text_encoder import T5_XXL
from parastrat.spec.vae import HUNYUAN_VAE, HUNYUAN_VAE_2024, KL_2D, WAN21_VAE, WAN21_VAE_FP32

X = "tp-sp-pp-cfg-dp"
HY = dict(height=720, width=1280, frames=129, steps=50)
COG = dict(height=480, width=720, frames=49, steps=50)


def _lat(model, device, kw, **deg):
    n = deg.get("ulysses", 1) * deg.get("ring", 1) * deg.get("cfg", 1) * deg.get("tp", 1)
    s = ps.Strategy(order=X, **deg)
    return estimate_dit(model, s, ps.Cluster(device, num_devices=n), **kw).latency_s


def test_vae_work_follows_its_layout():
    # 2D SD/FLUX decoder: ~1e7 FLOPs per output pixel (docs/dit-model.md derivation)
    w = KL_2D.work(1, 128, 128)
    assert 0.9e7 < w.conv_flops / (1024 * 1024) < 1.1e7
    # a 3D causal decoder does ~2x the work per output voxel (27-tap convs, narrower widths)
    v = HUNYUAN_VAE.work(33, 90, 160)
    assert v.voxels == 129 * 720 * 1280
    assert 1.5e7 < v.conv_flops / v.voxels < 3e7
    # tiling repeats the overlaps; one tile is not tiled
    assert HUNYUAN_VAE.tile_factor(129, 720, 1280) > 1.5
    assert HUNYUAN_VAE.tile_factor(1, 256, 256) == 1.0


def test_row_by_row_causal_mask_counts_the_rows_of_every_tile():
    # 720p x 129 frames: latent 33 x 90 x 160; the official repo's tiles start every 12 latent
    # frames (17 long), every 24 latent pixels (32 wide): 17+17+9 frames, 32+32+32+18 rows,
    # 6 x 32 + 16 columns -> 43 x 114 x 208 mask rows over the 84 decoder calls
    assert HUNYUAN_VAE_2024.mask_rows(33, 90, 160, tiled=True) == 43 * 114 * 208
    assert HUNYUAN_VAE_2024.mask_rows(33, 90, 160, tiled=False) == 33 * 90 * 160
    assert HUNYUAN_VAE.mask_rows(33, 90, 160, tiled=True) == 0  # diffusers: vectorised
    m = dataclasses.replace(dit.get("hunyuanvideo"), vae=HUNYUAN_VAE_2024)
    secs = {}
    for device in ("h100", "h20"):
        c = ps.Cluster(device, num_devices=1)
        _, detail = vae_decode(m, c, height=720, width=1280, frames=129)
        secs[device] = detail["mask_host_s"]
        # host-bound: one eager operation per row, whatever the device's FLOP rate
        assert detail["mask_host_s"] == pytest.approx(
            detail["mask_rows"] * efficiency.host_op_time(c.accel)
        )
    assert secs["h100"] == pytest.approx(secs["h20"])


def test_fp32_vae_runs_on_tf32_with_four_byte_activations():
    c = ps.Cluster("a800", num_devices=1)
    bf = dataclasses.replace(dit.get("wan2.1-t2v-14b"), vae=WAN21_VAE)
    fp = dataclasses.replace(bf, vae=WAN21_VAE_FP32)
    _, d16 = vae_decode(bf, c, height=720, width=1280, frames=81)
    _, d32 = vae_decode(fp, c, height=720, width=1280, frames=81)
    assert d32["conv_s"] == pytest.approx(2 * d16["conv_s"])  # TF32: half the BF16 rate
    assert d32["act_bytes"] == pytest.approx(2 * d16["act_bytes"])
    assert dit.get("wan2.1-t2v-14b").vae.precision == "fp32"  # Wan's own code: WanVAE(fp32)


def test_vae_convolutions_cap_at_the_measured_hopper_rate():
    # SGLang's H200 decode of FLUX.1-schnell at 1024^2 (89.9 ms) is what the ceiling encodes:
    # the model's decode there lands within 15 % of it; a part whose own fraction is lower
    # (H20) and a part without a measured ceiling (A100) keep VAE_CONV_EFF of their peak
    m = dit.get("flux.1-schnell")
    t, _ = vae_decode(m, ps.Cluster("h200", 1), height=1024, width=1024, frames=1)
    assert t == pytest.approx(0.0899, rel=0.15)
    for name in ("h20", "a100"):
        accel = ps.Cluster(name, 1).accel
        assert vae_conv_rate(accel) == pytest.approx(accel.peak("bf16") * VAE_CONV_EFF)
    assert vae_conv_rate(ps.Cluster("h100", 1).accel) == VAE_CONV_CEILING["h100"]


def test_parallel_vae_divides_the_decode():
    m = dit.get("hunyuanvideo")
    c = ps.Cluster("h100", num_devices=8)
    one, d1 = vae_decode(m, c, height=720, width=1280, frames=129)
    eight, d8 = vae_decode(m, c, height=720, width=1280, frames=129, devices=8)
    assert d8["halo_s"] > 0 and d1["halo_s"] == 0
    assert one / 8 < eight < one / 6  # divided, plus halo rows and group-norm all-reduces


def test_estimate_reports_each_serial_part_and_plan_accounts_for_them():
    r = estimate_dit("hunyuanvideo", ps.Strategy(ulysses=8), ps.Cluster("h100", 8), **HY)
    serial = r.serial
    assert set(serial["text_encoders"]) == {"llava-llama-3-8b-text", "clip-l"}
    assert serial["vae"]["vae"] == "hunyuanvideo-vae"
    for key in ("text_encode", "vae_decode", "scheduler"):
        assert r.breakdown[key] > 0
    assert sum(r.breakdown.values()) == pytest.approx(r.latency_s)
    par = estimate_dit(
        "hunyuanvideo",
        ps.Strategy(ulysses=8),
        ps.Cluster("h100", 8),
        vae_parallel=True,
        framework="any",  # xDiT's HunyuanVideo example has none: a what-if
        **HY,
    )
    assert par.breakdown["vae_decode"] < r.breakdown["vae_decode"] / 6
    p = ps.plan_dit("hunyuanvideo", ps.Cluster("h100", 8), **HY)
    assert p.best.report.breakdown["vae_decode"] == pytest.approx(r.breakdown["vae_decode"])


def test_serial_parts_cap_the_speedup():
    one = _lat("hunyuanvideo", "h20", HY)
    eight = _lat("hunyuanvideo", "h20", HY, ulysses=8)
    no_serial = dataclasses.replace(dit.get("hunyuanvideo"), vae=None, text_encoders=())
    c1, c8 = ps.Cluster("h20", 1), ps.Cluster("h20", 8)
    ideal = (
        estimate_dit(no_serial, ps.Strategy(order=X), c1, **HY).latency_s
        / estimate_dit(no_serial, ps.Strategy(ulysses=8), c8, **HY).latency_s
    )
    assert one / eight < ideal  # the VAE decode on one device does not shrink


def test_cfg_doubles_the_prompts():
    m = dit.get("wan2.1-t2v-14b")
    c = ps.Cluster("h100", 1)
    on = estimate_dit(
        m, ps.Strategy(order=X), c, guidance=True, height=480, width=832, frames=81, steps=1
    )
    off = estimate_dit(
        m, ps.Strategy(order=X), c, guidance=False, height=480, width=832, frames=81, steps=1
    )
    assert on.breakdown["text_encode"] == pytest.approx(2 * off.breakdown["text_encode"])
    assert T5_XXL.with_tokens(256).flops < T5_XXL.flops


def test_compiled_removes_elementwise_traffic_and_launches():
    c = ps.Cluster("h100", 1)
    kw = dict(height=1024, width=1024, steps=28)
    eager = estimate_dit("flux.1-dev", ps.Strategy(order=X), c, **kw)
    comp = estimate_dit("flux.1-dev", ps.Strategy(order=X), c, compiled=True, **kw)
    assert comp.compiled and not eager.compiled
    assert comp.breakdown["elementwise"] < 0.5 * eager.breakdown["elementwise"]
    assert comp.breakdown["linear"] == eager.breakdown["linear"]
    assert comp.latency_s < eager.latency_s


def test_host_launches_bound_a_tiny_step():
    # a 256x256 FLUX step on 8 H100s has too little work to hide the eager launches
    kw = dict(height=256, width=256, steps=4)
    r = estimate_dit("flux.1-schnell", ps.Strategy(ulysses=8), ps.Cluster("h100", 8), **kw)
    rc = estimate_dit(
        "flux.1-schnell", ps.Strategy(ulysses=8), ps.Cluster("h100", 8), compiled=True, **kw
    )
    assert r.breakdown["host_wait"] > 0
    assert rc.breakdown["host_wait"] < r.breakdown["host_wait"]


@pytest.mark.parametrize(
    "name, heads, layers, distilled",
    [
        ("flux.1-schnell", 24, 57, True),
        ("sd3-medium", 24, 24, False),
        ("cogvideox-2b", 30, 30, False),
        ("cogvideox-5b", 48, 42, False),
        ("mochi-1", 24, 48, False),
        ("wan2.2-t2v-a14b", 40, 40, False),
        ("wan2.2-ti2v-5b", 24, 30, False),
    ],
)
def test_new_presets(name, heads, layers, distilled):
    m = dit.get(name)
    assert (m.num_attention_heads, m.num_layers, m.guidance_distilled) == (heads, layers, distilled)
    assert m.vae is not None and m.text_encoders and m.source


def test_preset_sizes():
    assert dit.get("mochi-1").num_params == pytest.approx(10e9, rel=0.15)  # "10B" model card
    assert dit.get("wan2.2-t2v-a14b").experts == 2
    # Wan2.2 TI2V-5B: 16x VAE then 2x2 patches -> 32 px per token side
    assert dit.get("wan2.2-ti2v-5b").tokens(704, 1280, 121) == 31 * 22 * 40
    r = estimate_dit(
        "wan2.2-t2v-a14b",
        ps.Strategy(ulysses=8),
        ps.Cluster("h100", 8),
        height=720,
        width=1280,
        frames=81,
        steps=1,
    )
    r14 = estimate_dit(
        "wan2.1-t2v-14b",
        ps.Strategy(ulysses=8),
        ps.Cluster("h100", 8),
        height=720,
        width=1280,
        frames=81,
        steps=1,
    )
    assert r.memory.weights == pytest.approx(2 * r14.memory.weights)  # both experts resident
    assert r.per_step_s == pytest.approx(r14.per_step_s)  # one expert per step


def test_new_accelerators():
    for name, vendor_peak, domain in (
        ("l40", 181e12, 4),
        ("l40s", 362e12, 4),
        ("l20", 119.5e12, 4),
        ("rtx-4090", 165.2e12, 8),
        ("h20", 148e12, 8),
        ("h800", 989e12, 8),
        ("a800", 312e12, 8),
    ):
        a = ps.hardware.get(name)
        assert a.peak("bf16") == vendor_peak and a.scale_up_domain == domain
    pcie, nvl = ps.hardware.get("l40"), ps.hardware.get("a100")
    assert pcie.scale_up_bw_Bps < 0.1 * nvl.scale_up_bw_Bps  # no NVLink
    assert ps.hardware.get("h800").scale_up_bw_Bps < ps.hardware.get("h100").scale_up_bw_Bps


@pytest.mark.parametrize("model", ["cogvideox-2b", "cogvideox-5b"])
@pytest.mark.parametrize("deg", [2, 3])
def test_nvlink_ulysses_ahead_of_ring(model, deg):
    assert _lat(model, "a100", COG, ulysses=deg) < _lat(model, "a100", COG, ring=deg)


@pytest.mark.parametrize("model", ["cogvideox-2b", "cogvideox-5b"])
@pytest.mark.parametrize("deg", [2, 3])
def test_pcie_ring_ahead_of_ulysses(model, deg):
    assert _lat(model, "l40", COG, ring=deg) < _lat(model, "l40", COG, ulysses=deg)


@pytest.mark.parametrize(
    "model, device, kw",
    [
        ("cogvideox-2b", "a100", COG),
        ("cogvideox-5b", "l40", COG),
        ("mochi-1", "a100", dict(height=480, width=848, frames=79, steps=28)),
        ("sd3-medium", "a100", dict(height=1024, width=1024, steps=20)),
    ],
)
def test_cfg_is_the_best_two_device_split_with_guidance(model, device, kw):
    p = ps.plan_dit(model, ps.Cluster(device, 2), allow_cross_node=True, **kw)
    assert p.workload["guidance"] and p.best.strategy.cfg == 2


def test_a_model_at_another_prompt_length_reads_it_in_the_transformer_and_the_t5():
    """xDiT's Flux example runs 256-token prompts where FluxPipeline defaults to 512: the
    transformer's text tokens and the T5 encoder change, CLIP keeps its 77, and the run is
    cheaper."""
    dev = dit.get("flux.1-dev")
    short = dev.with_text_tokens(256)
    assert short.text_tokens == 256 and dev.text_tokens == 512
    assert sorted(e.tokens for e in short.text_encoders) == [77, 256]
    run = dict(height=1024, width=1024, steps=28)
    s, cluster = ps.Strategy(ulysses=2), ps.Cluster("h100", 2)
    assert (
        estimate_dit(short, s, cluster, **run).latency_s
        < estimate_dit(dev, s, cluster, **run).latency_s
    )
    with pytest.raises(ps.SpecError):
        dev.with_text_tokens(0)
