"""DiT specs: token counts by hand, workload errors, parameter counts, the shared head rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError, StrategyError
from parastrat.spec import dit

PRESETS = [
    "flux.1-dev",
    "wan2.1-t2v-1.3b",
    "wan2.1-t2v-14b",
    "hunyuanvideo",
    "sd3.5-large",
    "cogvideox1.5-5b",
    "qwen-image",
]


def test_registry_has_every_preset_and_each_cites_a_source():
    assert set(PRESETS) <= set(dit.names())
    for name in PRESETS:
        spec = dit.get(name)
        assert spec.source, name
        assert dit.get(name.upper()) is spec  # case-insensitive


def test_unknown_preset_lists_the_known_names():
    with pytest.raises(SpecError) as err:
        dit.get("wan3-t2v")
    for name in PRESETS:
        assert name in str(err.value)


def test_lazy_public_name():
    assert ps.DiTSpec is dit.DiTSpec


def test_hunyuanvideo_720p_129_frames():
    # (129 - 1) / 4 + 1 = 33 latent frames; 720 / (8 * 2) = 45; 1280 / 16 = 80
    # 33 * 45 * 80 = 118,800 (HunyuanVideo's own log prints n_tokens: 118800)
    m = dit.get("hunyuanvideo")
    assert m.tokens(720, 1280, 129) == 118_800
    assert m.sequence_length(720, 1280, 129) == 118_800 + 256


def test_wan_480p_81_frames_text_is_cross_attention():
    # (81 - 1) / 4 + 1 = 21; 480 / 16 = 30; 832 / 16 = 52 -> 21 * 30 * 52 = 32,760
    m = dit.get("wan2.1-t2v-14b")
    assert m.tokens(480, 832, 81) == 32_760
    assert m.sequence_length(480, 832, 81) == 32_760  # text enters by cross-attention


def test_flux_and_sd35_images():
    # 1024 / 16 = 64 -> 64 * 64 = 4096 image tokens; + 512 T5 tokens (FLUX) / 77 + 256 (SD3.5)
    assert dit.get("flux.1-dev").sequence_length(1024, 1024) == 4096 + 512
    assert dit.get("sd3.5-large").sequence_length(1024, 1024) == 4096 + 77 + 256


def test_cogvideox15_pads_odd_latent_frames():
    # 81 frames -> 21 latent frames; temporal patch 2 -> padded to 22 -> 11 token frames;
    # 768 / 16 = 48, 1360 / 16 = 85 -> 11 * 48 * 85 = 44,880
    shape = dit.get("cogvideox1.5-5b").latent_shape(768, 1360, 81)
    assert (shape.latent_frames, shape.padded_latent_frames, shape.frames) == (21, 1, 11)
    assert shape.tokens == 44_880


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(height=1000, width=1024), ["height=1000", "992", "1008"]),
        (dict(height=1024, width=1030), ["width=1030", "1024", "1040"]),
        (dict(height=1024, width=1024, frames=2), ["image model", "frames must be 1"]),
        (dict(height=0, width=1024), ["height=0"]),
    ],
)
def test_flux_bad_sizes(kwargs, words):
    with pytest.raises(SpecError) as err:
        dit.get("flux.1-dev").tokens(**kwargs)
    for w in words:
        assert w in str(err.value)


def test_wan_frames_must_be_4k_plus_1():
    with pytest.raises(SpecError) as err:
        dit.get("wan2.1-t2v-1.3b").tokens(480, 832, 80)
    assert "4k+1" in str(err.value) and "77" in str(err.value) and "81" in str(err.value)


def test_parameter_counts_from_the_shapes():
    # FLUX: double block 2 * (4 + 8 + 6) h^2 = 36 h^2, single block (4 + 8 + 3) h^2 = 15 h^2,
    # h = 3072 -> 19 * 36 * 9,437,184 + 38 * 15 * 9,437,184 = 11,834,228,736 (+ 0.07e9 embedders)
    assert dit.get("flux.1-dev").num_params == pytest.approx(11_834_228_736 + 0.07e9)
    # Wan2.1-14B: 8 h^2 + 2 h f = 209,715,200 + 141,557,760 = 351,272,960 per block, 40 blocks;
    # embedders: patch 327,680 + text 47,185,920 + time 27,525,120 + projection 157,286,400
    # + head 327,680 = 232,652,800 (WanModel's modules)
    assert dit.get("wan2.1-t2v-14b").num_params == 40 * 351_272_960 + 232_652_800
    # published sizes: FLUX 12B, HunyuanVideo 13B, Qwen-Image 20B, SD3.5 Large 8.1B
    for name, published in [
        ("flux.1-dev", 12e9),
        ("hunyuanvideo", 13e9),
        ("qwen-image", 20e9),
        ("sd3.5-large", 8.1e9),
    ]:
        assert dit.get(name).num_params == pytest.approx(published, rel=0.05), name


def test_mlp_ratio_and_layers():
    assert dit.get("wan2.1-t2v-14b").mlp_ratio == pytest.approx(13824 / 5120)
    assert dit.get("hunyuanvideo").num_layers == 60
    assert dit.get("flux.1-dev").num_layers == 57


def test_strategy_rules_apply_to_dit_specs():
    # Wan2.1-1.3B has 12 heads: Ulysses 8 does not divide them (12 = 8 * 1.5)
    with pytest.raises(StrategyError) as err:
        ps.Strategy(ulysses=8).validate(dit.get("wan2.1-t2v-1.3b"))
    assert "heads-ulysses" in err.value.rules
    # Wan2.1-14B has 40 heads = 8 * 5: Ulysses 8 is legal (Wan2.1's README runs t2v-14B with
    # --ulysses_size 8)
    ps.Strategy(ulysses=8).validate(dit.get("wan2.1-t2v-14b"))
    # HunyuanVideo: 24 heads, TP 2 leaves 12 per rank; Ulysses 8 does not divide 12
    with pytest.raises(StrategyError):
        ps.Strategy(tp=2, ulysses=8).validate(dit.get("hunyuanvideo"))


def test_bad_spec_fields():
    with pytest.raises(SpecError):
        dit.DiTSpec(
            name="x",
            blocks=(),
            hidden_size=64,
            num_attention_heads=4,
            head_dim=16,
            ffn_hidden_size=256,
            text_tokens=0,
        )
    with pytest.raises(SpecError):
        dit.BlockGroup("triple", 3)
    with pytest.raises(SpecError):
        dit.DiTSpec(
            name="x",
            blocks=(dit.BlockGroup("joint", 1),),
            hidden_size=64,
            num_attention_heads=4,
            num_query_groups=3,
            head_dim=16,
            ffn_hidden_size=256,
            text_tokens=0,
        )


@given(
    name=st.sampled_from(PRESETS),
    a=st.integers(1, 120),
    b=st.integers(1, 120),
    k=st.integers(0, 40),
)
def test_tokens_are_the_latent_grid(name, a, b, k):
    m = dit.get(name)
    unit = m.pixel_multiple
    frames = k * m.vae_temporal + 1 if m.is_video else 1
    shape = m.latent_shape(a * unit, b * unit, frames)
    assert shape.height == a and shape.width == b
    assert m.tokens(a * unit, b * unit, frames) == shape.frames * a * b
    lat = (frames - 1) // m.vae_temporal + 1 if m.is_video else 1
    assert shape.frames == -(-lat // m.patch_size_t)
    extra = m.text_tokens if m.text_in_sequence else 0
    assert m.sequence_length(a * unit, b * unit, frames) - shape.tokens == extra
