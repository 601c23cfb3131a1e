"""Eager element-wise traffic counted on each family's real diffusers block, and how the DiT
estimator prices it (compiled execution, TP, the switch, specs without a count); the host's
output post-processing (``output_type``); the sequence-parallel attention path's copies."""

from __future__ import annotations

import dataclasses

import pytest

import parastrat as ps
from parastrat.estimate import dit_step
from parastrat.estimate.dit import estimate_dit
from parastrat.spec import dit
from parastrat.spec.block_traffic import EAGER_TRAFFIC, EagerTraffic
from parastrat.spec.dit import DiTSpec

from ._modules import load_script

X = "tp-sp-pp-cfg-dp"
IMG = dict(height=1024, width=1024, steps=20)


@pytest.mark.parametrize(
    "block, family, kind",
    [("sd3 double", "sd3", "double"), ("cogvideox-5b joint", "cogvideox-5b", "joint")],
)
def test_table_is_what_the_real_block_moves(block, family, kind):
    pytest.importorskip("diffusers")
    mod = load_script("benchmarks/dit_elementwise.py")
    tot, mlp, ti, tt, h, ffn = mod._blocks()[block]()
    counted = {e.kind: e for e in EAGER_TRAFFIC[family]}[kind]
    assert (tot - mlp) / ((ti + tt) * h) == pytest.approx(counted.hidden_bytes, rel=0.01)
    assert mlp / ((ti + tt) * ffn) == pytest.approx(counted.ffn_bytes, rel=0.01)


def test_counts_differ_by_family_as_the_code_does():
    byte = {f: {e.kind: e.hidden_bytes for e in t} for f, t in EAGER_TRAFFIC.items()}
    # SD3-medium has neither QK-norm nor RoPE; SD3.5 adds RMS QK-norm; FLUX adds RoPE on top
    assert byte["sd3"]["double"] < byte["sd3.5"]["double"] < byte["flux"]["double"]
    # CogVideoX-5b rotates Q and K, 2b does not
    assert byte["cogvideox-2b"]["joint"] < byte["cogvideox-5b"]["joint"]
    # Wan and Mochi keep norms and modulation in fp32: the most traffic per token
    assert min(byte["wan"]["cross"], byte["mochi"]["double"]) > byte["flux"]["double"]
    assert dit.get("cogvideox-2b").eager_traffic == EAGER_TRAFFIC["cogvideox-2b"]
    assert dit.get("cogvideox1.5-5b").eager_traffic == EAGER_TRAFFIC["cogvideox-5b"]
    with pytest.raises(ps.SpecError):
        EagerTraffic("double", -1.0, 4.0)


def _elementwise(model, compiled=False, **deg):
    n = deg.get("tp", 1) * deg.get("ulysses", 1)
    s = ps.Strategy(order=X, **deg)
    rep = estimate_dit(model, s, ps.Cluster("a100", num_devices=n), compiled=compiled, **IMG)
    return rep.breakdown["elementwise"]


def test_eager_prices_the_count_and_compiled_does_not():
    sd3 = dit.get("sd3-medium")
    generic = dataclasses.replace(sd3, eager_traffic=())
    # SD3's block moves fewer bytes than the generic 80 passes; Mochi's more
    assert _elementwise(sd3) < 0.5 * _elementwise(generic)
    mochi = dit.get("mochi-1")
    assert _elementwise(mochi) > 1.5 * _elementwise(dataclasses.replace(mochi, eager_traffic=()))
    # compiled: the chains are fused whatever the eager count
    assert _elementwise(sd3, compiled=True) == pytest.approx(_elementwise(generic, compiled=True))
    # the counted bytes are what the estimate charges: tokens x (hidden + ffn) bytes at HBM rate
    e = sd3.eager_traffic[0]
    a100 = ps.Cluster("a100", num_devices=1).accel
    from parastrat.estimate import efficiency

    tokens = 2 * (sd3.tokens(1024, 1024) + sd3.text_tokens)  # CFG batch of two
    per_block = tokens * (e.hidden_bytes * sd3.hidden_size + e.ffn_bytes * sd3.ffn_hidden_size)
    want = 20 * sd3.num_layers * efficiency.memory_time(a100, per_block)
    assert _elementwise(sd3) == pytest.approx(want, rel=1e-9)


def test_tp_divides_only_the_mlp_part():
    flux = dit.get("flux.1-dev")
    e = {t.kind: t for t in flux.eager_traffic}["double"]
    h, f = flux.hidden_size, flux.ffn_hidden_size
    one = dit_step.elementwise_bytes_per_token(flux, "double", False, 2, 1)
    two = dit_step.elementwise_bytes_per_token(flux, "double", False, 2, 2)
    assert one == pytest.approx(e.hidden_bytes * h + e.ffn_bytes * f)
    assert one - two == pytest.approx(e.ffn_bytes * f / 2)


def test_switch_and_uncounted_kinds_fall_back_to_generic_passes(monkeypatch):
    wan = dit.get("wan2.1-t2v-14b")
    generic = dit_step.elementwise_bytes_per_token(
        dataclasses.replace(wan, eager_traffic=()), "cross", False, 2, 1
    )
    assert dit_step.elementwise_bytes_per_token(wan, "cross", False, 2, 1) > generic
    # a kind the model has no count for is priced with the generic passes
    h, f = wan.hidden_size, wan.ffn_hidden_size
    per_h, per_f = dit_step.ELEMENTWISE_PASSES_H[False], dit_step.ELEMENTWISE_PASSES_F
    passes = 2 * 2 * (per_h / 2 * h + per_f * f)
    assert dit_step.elementwise_bytes_per_token(wan, "double", False, 2, 1) == pytest.approx(passes)
    assert generic == pytest.approx(passes)
    monkeypatch.setattr(dit_step, "USE_EAGER_TRAFFIC", False)
    assert dit_step.elementwise_bytes_per_token(wan, "cross", False, 2, 1) == pytest.approx(generic)


def test_config_reader_picks_the_family_count():
    sd3 = {"_class_name": "SD3Transformer2DModel", "num_layers": 2}
    assert DiTSpec.from_diffusers_config(sd3).eager_traffic == EAGER_TRAFFIC["sd3"]
    sd35 = {**sd3, "qk_norm": "rms_norm"}
    assert DiTSpec.from_diffusers_config(sd35).eager_traffic == EAGER_TRAFFIC["sd3.5"]
    cog = {"_class_name": "CogVideoXTransformer3DModel", "num_layers": 2}
    rope = {**cog, "use_rotary_positional_embeddings": True}
    assert DiTSpec.from_diffusers_config(cog).eager_traffic == EAGER_TRAFFIC["cogvideox-2b"]
    assert DiTSpec.from_diffusers_config(rope).eager_traffic == EAGER_TRAFFIC["cogvideox-5b"]


# ---- output post-processing (output_type) --------------------------------------------------
def _report(output_type, model="flux.1-schnell", vae_cold=False, **kw):
    kw = {**dict(height=1024, width=1024, steps=4), **kw}
    c = ps.Cluster("a100", num_devices=1)
    s = ps.Strategy(order=X)
    return estimate_dit(model, s, c, output_type=output_type, vae_cold=vae_cold, **kw)


def test_output_type_prices_the_host_conversion_per_output_element():
    from parastrat.estimate.dit_serial import POSTPROCESS_S_PER_ELEMENT

    pil, np_, pt = (_report(t) for t in ("pil", "np", "pt"))
    per = POSTPROCESS_S_PER_ELEMENT
    assert pil.breakdown["postprocess"] == pytest.approx(3 * 1024 * 1024 * per["pil"])
    assert np_.breakdown["postprocess"] == pytest.approx(3 * 1024 * 1024 * per["np"])
    assert pt.breakdown["postprocess"] == 0.0
    assert pil.latency_s - pt.latency_s == pytest.approx(pil.breakdown["postprocess"])
    assert sum(pil.breakdown.values()) == pytest.approx(pil.latency_s)
    assert pil.serial["postprocess_s"] == pil.breakdown["postprocess"]
    # four times the pixels, four times the host work; video: every frame
    big = _report("pil", height=2048, width=2048)
    assert big.breakdown["postprocess"] == pytest.approx(4 * pil.breakdown["postprocess"])
    video = _report("pil", model="cogvideox-2b", height=480, width=720, frames=49, steps=2)
    assert video.breakdown["postprocess"] == pytest.approx(49 * 3 * 480 * 720 * per["pil"])


def test_latent_output_skips_the_decode_and_bad_output_types_are_refused():
    latent, pt = _report("latent"), _report("pt")
    assert latent.breakdown["vae_decode"] == 0.0 < pt.breakdown["vae_decode"]
    assert latent.latency_s == pytest.approx(pt.latency_s - pt.breakdown["vae_decode"])
    with pytest.raises(ps.SpecError, match="known: pil, np, pt, latent"):
        _report("png")


# ---- the sequence-parallel attention path's copies (yunchang / xDiT) -----------------------
COG = dict(height=480, width=720, frames=49, steps=1)


def _layout(model, u=1, r=1, cfg=1, **kw):
    n = u * r * cfg
    s = ps.Strategy(ulysses=u, ring=r, cfg=cfg, order=X)
    rep = estimate_dit(model, s, ps.Cluster("a100", num_devices=n), **{**COG, **kw})
    return rep.breakdown["sp_layout"]


def test_sequence_parallel_path_copies_follow_the_code():
    # none without a sequence split (CFG alone runs flash_attn_func directly)
    assert _layout("cogvideox-2b") == 0.0 == _layout("cogvideox-2b", cfg=2)
    uly, ring = _layout("cogvideox-2b", u=2), _layout("cogvideox-2b", r=2)
    # Ulysses and ring pass through the same all_to_all_4D copies (batch of two: CFG) and the
    # same fp32 output conversion; CFG 2 halves the rows each rank holds, and with one sample
    # per rank Q, K and V leave the all-to-all as views: less than half
    assert uly > 0 and ring == pytest.approx(uly, rel=0.05)
    assert 0.3 * uly < _layout("cogvideox-2b", u=2, cfg=2) < 0.5 * uly


def test_copy_bytes_count_each_copy_once():
    m = dit.get("cogvideox-2b")
    img, txt, nb = 1000.0, 100.0, 2
    q = (img + txt) * m.inner_dim * nb
    kv = img * m.kv_dim * nb
    out = 2 * 2 * q  # the output: copied in and out of the all-to-all, read + write each
    fp32 = dit_step.USP_OUT_FP32_BYTES * q / nb
    # CogVideoX's joint block: the KV-cache copies and the front concatenation of Q, K, V
    joint = dit_step.USP_KV_CACHE_COPIES * 4 * kv + 2 * q + 4 * kv
    # batch of two, Ulysses 2: Q, K, V copied in and out too
    got = dit_step.usp_copy_bytes(m, "joint", img, txt, 2, 2, 1, nb)
    assert got == pytest.approx(2 * 2 * (q + 2 * kv) + out + fp32 + joint)
    # one sample, Ulysses 2: Q, K, V copied on the way in only (the other transpose is a view)
    got = dit_step.usp_copy_bytes(m, "joint", img, txt, 1, 2, 1, nb)
    assert got == pytest.approx(2 * (q + 2 * kv) + out + fp32 + joint)
    # ring only, one sample: Q, K, V pass as views; the output is still copied twice
    got = dit_step.usp_copy_bytes(m, "joint", img, txt, 1, 1, 1, nb)
    assert got == pytest.approx(out + fp32 + joint)
    # a dual-stream block concatenates text and image Q, K, V on one device too: only the
    # KV-cache copies are extra
    flux = dit.get("flux.1-dev")
    qf = (img + txt) * flux.inner_dim * nb
    kf = img * flux.kv_dim * nb
    want = (
        2 * 2 * (qf + 2 * kf)
        + 2 * 2 * qf
        + dit_step.USP_OUT_FP32_BYTES * qf / nb
        + dit_step.USP_KV_CACHE_COPIES * 4 * kf
    )
    assert dit_step.usp_copy_bytes(flux, "double", img, txt, 2, 2, 1, nb) == pytest.approx(want)
    single = dit_step.usp_copy_bytes(flux, "single", img, txt, 2, 2, 1, nb)
    assert single == pytest.approx(want + 2 * qf + 4 * kf)
    # Wan's cross-attention blocks have no joint text: no joint or KV-cache copies
    wan = dit.get("wan2.1-t2v-14b")
    qw = img * wan.inner_dim * nb
    kw_ = img * wan.kv_dim * nb
    want = 2 * 2 * (qw + 2 * kw_) + 2 * 2 * qw + dit_step.USP_OUT_FP32_BYTES * qw / nb
    assert dit_step.usp_copy_bytes(wan, "cross", img, txt, 2, 2, 1, nb) == pytest.approx(want)


def test_sequence_parallel_copies_switch(monkeypatch):
    monkeypatch.setattr(dit_step, "USE_USP_COPIES", False)
    assert _layout("cogvideox-2b", u=2) == 0.0


def test_cold_first_vae_decode_adds_the_measured_one_time_cost():
    from parastrat.estimate.dit_serial import VAE_COLD_START_S

    warm, cold = _report("pil"), _report("pil", vae_cold=True)
    assert cold.breakdown["vae_decode"] - warm.breakdown["vae_decode"] == pytest.approx(
        VAE_COLD_START_S
    )
    assert cold.latency_s - warm.latency_s == pytest.approx(VAE_COLD_START_S)
    assert cold.serial["vae"]["cold_start_s"] == VAE_COLD_START_S
    assert warm.serial["vae"]["cold_start_s"] == 0.0
    # one decode per request, whatever the split: the same cost on 8 devices
    s8 = ps.Strategy(ulysses=8, order=X)
    c8 = ps.Cluster("a100", num_devices=8)
    kw = dict(height=1024, width=1024, steps=4)
    w8 = estimate_dit("flux.1-schnell", s8, c8, **kw)
    k8 = estimate_dit("flux.1-schnell", s8, c8, vae_cold=True, **kw)
    assert k8.latency_s - w8.latency_s == pytest.approx(VAE_COLD_START_S)
    # no decode, nothing cold
    assert _report("latent", vae_cold=True).breakdown["vae_decode"] == 0.0
