"""DiT memory phases and the typed memory options (estimate/dit_memory.py, spec/vae.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parastrat as ps
from parastrat.errors import SpecError
from parastrat.estimate.dit import estimate_dit
from parastrat.estimate.dit_memory import FSDP_INFLIGHT_UNITS, DiTMemoryOptions
from parastrat.spec import dit
from parastrat.spec.vae import CACHE_T, KL_2D, WAN21_VAE_FP32

X = "tp-sp-pp-cfg-dp"
WAN = dict(height=720, width=1280, frames=81, steps=50, output_type="pt")


def _wan(n: int, memory: DiTMemoryOptions | None, device: str = "h800", **kw):
    kw = {"framework": "any", **WAN, **kw}  # Wan's own generate.py flags: a what-if on GPUs
    s = ps.Strategy(ulysses=n, order=X)
    return estimate_dit("wan2.1-t2v-14b", s, ps.Cluster(device, num_devices=n), memory=memory, **kw)


@settings(max_examples=6, deadline=None)
@given(world=st.sampled_from([2, 4, 5, 8, 10]), fp32=st.booleans())
def test_fsdp_divides_the_sharded_weights_by_the_world(world, fp32):
    spec = dit.get("wan2.1-t2v-14b")
    opts = DiTMemoryOptions(
        dit_fsdp=True, encoder_fsdp=True, weight_precision="fp32" if fp32 else None
    )
    loop = dict(_wan(world, opts).memory.phases[1].parts)
    stored = 4 if fp32 else 2
    # shards of the stored dtype, plus the root (embedders) gathered in bf16 after its forward
    assert loop["transformer"] == pytest.approx(
        spec.num_params * stored / world + spec.embedder_params * 2
    )
    # two whole blocks gathered in bf16 (the FSDP1 rate limiter), whatever the world
    assert loop["transformer_gathered"] == pytest.approx(
        FSDP_INFLIGHT_UNITS * spec.block_params("cross") * 2
    )
    # umT5 shards + its token embedding (the FSDP root) gathered
    (t5,) = spec.text_encoders
    assert loop["text_encoders"] == pytest.approx(t5.params * 2 / world + t5.embed_params * 2)


def test_defaults_are_unchanged_and_whole_weights_everywhere():
    plain = _wan(8, None).memory
    assert plain == _wan(8, DiTMemoryOptions()).memory
    spec = dit.get("wan2.1-t2v-14b")
    assert plain.weights == pytest.approx(2 * spec.num_params)  # bf16, not divided by Ulysses
    assert plain.encoders == pytest.approx(2 * spec.text_encoder_params)
    assert plain.phases[1].parts["transformer_gathered"] == 0


def test_peak_phase_follows_where_the_bytes_are():
    # one GPU, offloaded (Wan's recipe): the fp32 DiT and the activations peak in the loop
    one = _wan(1, DiTMemoryOptions.wan_generate(1)).memory
    assert one.peak_phase == "denoise"
    assert one.phases[2].parts["transformer"] == 0  # moved to the host before the decode
    assert one.phases[1].parts["text_encoders"] == 0  # back on the host after the prompts
    # eight GPUs, FSDP: the shards are small, rank 0's VAE decode of 81 720p frames is not
    eight = _wan(8, DiTMemoryOptions.wan_generate(8)).memory
    assert eight.peak_phase == "vae_decode"
    assert eight.total == max(p.total for p in eight.phases)
    assert eight.to_dict()["peak_phase"] == "vae_decode"
    assert set(eight.to_dict()["phases"]) == {"text_encode", "denoise", "vae_decode"}
    # a single 480p frame: the loop is tiny, the umT5 brought on for the prompts is the peak
    img = _wan(1, DiTMemoryOptions.wan_generate(1), height=480, width=832, frames=1).memory
    assert img.peak_phase == "text_encode"


def test_the_decode_does_not_shrink_with_more_gpus_but_the_shards_do():
    dec = {n: _wan(n, DiTMemoryOptions.wan_generate(n)).memory.phases[2].parts for n in (2, 8)}
    for part in ("vae_cache", "vae_working", "vae_output", "vae_weights"):
        assert dec[2][part] == dec[8][part] > 0
    assert dec[2]["transformer"] > 3 * dec[8]["transformer"]


def test_parallel_vae_divides_the_decode_working_set():
    opts = DiTMemoryOptions.wan_generate(4)
    one = _wan(4, opts).memory.phases[2].parts
    par = _wan(4, opts, vae_parallel=True).memory.phases[2].parts
    assert par["vae_working"] == pytest.approx(one["vae_working"] / 4)
    assert par["vae_cache"] == pytest.approx(one["vae_cache"] / 4)


def test_sequential_guidance_holds_one_branch_of_activations():
    batched = _wan(2, DiTMemoryOptions(dit_fsdp=True)).memory.activations
    seq = _wan(2, DiTMemoryOptions(dit_fsdp=True, cfg_batched=False)).memory.activations
    assert seq == pytest.approx(batched / 2)


def test_not_fitting_names_the_phase_and_a_fix():
    small = dataclasses.replace(ps.hardware.get("h800"), name="h800-24g", memory_bytes=24 * 2**30)
    s = ps.Strategy(ulysses=8, order=X)
    r = estimate_dit(
        "wan2.1-t2v-14b",
        s,
        ps.Cluster(small, num_devices=8),
        memory=DiTMemoryOptions.wan_generate(8),
        framework="any",
        **WAN,
    )
    assert not r.memory.fits()
    (w,) = [w for w in r.warnings if w.startswith("memory:")]
    assert "vae_decode" in w and "vae_parallel=True" in w
    # the fix the message names works: a patch-parallel decode fits
    fixed = estimate_dit(
        "wan2.1-t2v-14b",
        s,
        ps.Cluster(small, num_devices=8),
        memory=DiTMemoryOptions.wan_generate(8),
        framework="any",
        vae_parallel=True,
        **WAN,
    )
    assert fixed.memory.fits()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(dit_fsdp="yes"), ["dit_fsdp='yes'", "True or False"]),
        (dict(cfg_batched=1), ["cfg_batched=1", "True or False"]),
        (dict(weight_precision="fp64"), ["fp64", "fp32", "bf16"]),
        (dict(weight_precision=4), ["weight_precision=4", "fp32"]),
        (dict(offload=True, dit_fsdp=True), ["offload=True", "without offload"]),
    ],
)
def test_invalid_options_raise_with_the_fix(kwargs, words):
    with pytest.raises(SpecError) as err:
        DiTMemoryOptions(**kwargs)
    for word in words:
        assert word in str(err.value)


def test_hostile_arguments_to_estimate_dit():
    with pytest.raises(SpecError, match="DiTMemoryOptions"):
        _wan(2, "fsdp")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="one or the other"):
        _wan(2, DiTMemoryOptions(encoder_fsdp=True), text_encoder_on_device=False)
    for bad in (0, True, 2.0):
        with pytest.raises(SpecError, match="whole number"):
            DiTMemoryOptions.wan_generate(bad)  # type: ignore[arg-type]
    # the suggested forms work
    assert DiTMemoryOptions(offload=True).offload
    assert _wan(2, DiTMemoryOptions(encoder_fsdp=False), text_encoder_on_device=False).memory


def test_options_are_public():
    assert ps.DiTMemoryOptions is DiTMemoryOptions and "DiTMemoryOptions" in ps.__all__


def test_wan_recipe_is_the_readme_one():
    assert DiTMemoryOptions.wan_generate(1).to_dict() == {
        "dit_fsdp": False,
        "encoder_fsdp": False,
        "offload": True,
        "weight_precision": "fp32",
        "cfg_batched": False,
    }
    multi = DiTMemoryOptions.wan_generate(8)
    assert (multi.dit_fsdp, multi.encoder_fsdp, multi.offload) == (True, True, False)


def test_wan_vae_decode_memory_from_its_layout():
    # 720p x 81 frames: latent 21 x 90 x 160; steady chunks of 4 frames at 720 x 1280, 96 ch
    m = WAN21_VAE_FP32.decode_memory(21, 90, 160)
    full = 96 * 4 * 720 * 1280 * 4  # the largest stage's tensor per chunk, fp32
    assert m.chunk_frames == 4
    assert m.working == pytest.approx(5.5 * full)
    assert m.output == 3 * 81 * 720 * 1280 * 4
    # six cached convs of the last stage and the head's, 2 frames of 96 x 720 x 1280 each
    assert m.cache > 7 * CACHE_T * 96 * 720 * 1280 * 4
    # an image VAE decodes the whole latent: no cache, block input + activation + conv output
    img = KL_2D.decode_memory(1, 128, 128)
    assert img.cache == 0 and img.working == pytest.approx(3 * 128 * 1024 * 1024 * 2)


def _live_bytes_mode(torch):
    """A dispatch mode that counts the bytes of the CPU tensors the decoder creates and still
    holds (a storage is freed when the last tensor on it dies): the allocator-free analogue of
    ``torch.cuda.max_memory_allocated``."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    class Live(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.refs: dict[int, int] = {}
            self.size: dict[int, int] = {}
            self.live = self.peak = 0

        def _drop(self, ptr):
            self.refs[ptr] -= 1
            if not self.refs[ptr]:
                self.live -= self.size.pop(ptr)
                del self.refs[ptr]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if not isinstance(t, torch.Tensor) or not t.untyped_storage().data_ptr():
                    continue
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr not in self.refs:
                    self.refs[ptr], self.size[ptr] = 0, st.nbytes()
                    self.live += st.nbytes()
                    self.peak = max(self.peak, self.live)
                self.refs[ptr] += 1
                weakref.finalize(t, self._drop, ptr)
            return out

    return Live()


def test_wan_vae_decode_memory_matches_diffusers_decoder():
    """diffusers' AutoencoderKLWan decoder, run chunk by chunk as Wan and diffusers run it, at a
    small base width with the preset's layout (the counts depend on the layout only): the
    cache it keeps between chunks is what the model counts, and the peak of its live tensors
    is the model's cache + working set + video."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    base = 16
    vae = diffusers.AutoencoderKLWan(
        base_dim=base,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=2,
        temperal_downsample=[False, True, True],
    ).eval()
    t, h, w = 3, 8, 12
    with torch.no_grad():
        x = vae.post_quant_conv(torch.randn(1, 16, t, h, w))
        vae.clear_cache()
        live = _live_bytes_mode(torch)
        out = None
        with live:
            for i in range(t):
                vae._conv_idx = [0]
                kw = {"first_chunk": True} if i == 0 else {}
                y = vae.decoder(
                    x[:, :, i : i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx, **kw
                )
                out = y if out is None else torch.cat([out, y], 2)
    assert out is not None and tuple(out.shape) == (1, 3, 9, 8 * h, 8 * w)
    cached = [c for c in vae._feat_map if isinstance(c, torch.Tensor)]
    stages = tuple(
        dataclasses.replace(s, channels=s.channels * base // 96) for s in WAN21_VAE_FP32.stages
    )
    model = dataclasses.replace(WAN21_VAE_FP32, stages=stages).decode_memory(t, h, w)
    # 32 cached causal convs; the preset takes each stage's first conv at the stage width
    # (diffusers halves it after an upsampler): within 2 %
    assert len(cached) == 32
    assert model.cache == pytest.approx(sum(c.numel() * c.element_size() for c in cached), rel=0.02)
    # the decode's peak of live tensors (measured: the model is 6.5 % under it)
    assert model.total == pytest.approx(live.peak, rel=0.10)


WAN_CLI = [
    "plan-dit",
    "--model",
    "wan2.1-t2v-14b",
    "--devices",
    "8",
    "--accelerator",
    "h800",
    "--height",
    "720",
    "--width",
    "1280",
    "--frames",
    "81",
    "--steps",
    "50",
    "--format",
    "json",
    "--top-k",
    "50",
]


def test_cli_plan_dit_takes_the_memory_switches(capsys):
    from parastrat.cli import main

    flags = ["--dit-fsdp", "--encoder-fsdp", "--weight-precision", "fp32", "--sequential-cfg"]
    assert main(WAN_CLI + flags) == 0
    doc = json.loads(capsys.readouterr().out)
    spec = dit.get("wan2.1-t2v-14b")
    checked = 0
    for cand in doc["candidates"]:
        s, mem = cand["strategy"], cand["report"]["memory"]
        world = s["ulysses"] * s["ring"] * s["cfg"]  # the ranks FSDP shards over
        if s["tp"] == 1 and world > 1:
            checked += 1
            assert mem["phases"]["denoise"]["transformer"] == pytest.approx(
                spec.num_params * 4 / world + spec.embedder_params * 2
            )
        assert mem["peak_phase"] in ("denoise", "vae_decode")
        assert mem["total"] == max(p["total"] for p in mem["phases"].values())
    assert checked > 0
    assert main(WAN_CLI) == 0  # without the switches: whole bf16 weights on every device
    plain = json.loads(capsys.readouterr().out)["candidates"][0]["report"]["memory"]
    assert plain["weights"] == pytest.approx(spec.num_params * 2)


def test_cli_refuses_offload_with_fsdp_naming_its_flags(capsys):
    from parastrat.cli import main

    assert main(WAN_CLI + ["--offload-model", "--dit-fsdp"]) == 2
    err = capsys.readouterr().err
    assert "--offload-model" in err and "--dit-fsdp" in err and "Traceback" not in err


def test_a_report_built_without_phases_keeps_the_old_sum():
    from parastrat.estimate.dit import DiTMemory

    m = DiTMemory(weights=1.0, encoders=2.0, activations=3.0, other=4.0, capacity=10.0)
    assert m.total == 10.0 and m.fits() and m.peak_phase == "denoise"


def test_plan_dit_names_the_peak_phase_when_nothing_fits(capsys):
    from parastrat.cli import main

    args = WAN_CLI[:4] + ["1", "--accelerator", "l40"] + WAN_CLI[7:-4]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "at its denoise" in err and "--offload-text-encoder" in err
    assert "--dit-fsdp" not in err  # one device has nothing to shard the transformer over


def _hint_chain(extra: list[str], capsys) -> str:
    from parastrat.cli import main

    args = ["plan-dit", "--model", "flux.1-dev", "--devices", "1", "--accelerator", "rtx-4090"]
    assert main(args + ["--height", "1024", "--width", "1024", "--steps", "28", *extra]) == 2
    return capsys.readouterr().err


def test_memory_hints_name_only_remedies_left_and_real_flags(capsys):
    """Each out-of-memory hint names CLI flags plan-dit has, never one already given or one
    that cannot apply (a parallel VAE or FSDP on one device, FSDP with offloading); following
    them in turn ends at the one remedy left, a device with more memory."""
    first = _hint_chain([], capsys)
    assert "--vae-tiling" in first and "--offload-model" in first
    assert "--vae-parallel" not in first and "vae_tiling=True" not in first
    offload = _hint_chain(["--vae-tiling", "--offload-model"], capsys)
    assert "at its text_encode" in offload and "--offload-text-encoder" in offload
    assert "--encoder-fsdp" not in offload and "--dit-fsdp" not in offload
    last = _hint_chain(["--vae-tiling", "--offload-model", "--offload-text-encoder"], capsys)
    assert "at its denoise" in last and "--offload-text-encoder" not in last
    assert last.rstrip().endswith("or use a device with more memory")


def test_memory_hint_offers_sharding_on_several_devices():
    from parastrat.estimate.dit_memory import DiTMemoryOptions, Remedies, memory_hint

    many = memory_hint("denoise", Remedies(devices=4))
    assert "dit_fsdp=True" in many and "text_encoder_on_device=False" in many
    sharded = Remedies(devices=4, options=DiTMemoryOptions(dit_fsdp=True, encoder_fsdp=True))
    assert "dit_fsdp" not in memory_hint("denoise", sharded)
    assert "encoder" not in memory_hint("text_encode", sharded)
    assert "vae_parallel=True" in memory_hint("vae_decode", Remedies(devices=4))
    assert "vae_parallel" not in memory_hint("vae_decode", Remedies(devices=4, vae_parallel=True))


def test_tiling_the_2d_and_wan_vaes_is_a_remedy_that_works():
    """FLUX's AutoencoderKL and Wan's AutoencoderKLWan tile only when asked (enable_tiling:
    1024 px / stride 768 and 256 / 192): the default decode is untiled, --vae-tiling brings an
    8192^2 FLUX decode under 80 GiB, and a VAE without a tiled decode is never told to tile."""
    import parastrat as ps
    from parastrat.estimate.dit import estimate_dit
    from parastrat.estimate.dit_memory import Remedies, memory_hint
    from parastrat.spec import vae

    big = dict(height=8192, width=8192, steps=28)
    one = ps.Cluster("h100", 1)
    plain = estimate_dit("flux.1-dev", ps.Strategy(), one, **big)
    tiled = estimate_dit("flux.1-dev", ps.Strategy(), one, vae_tiling=True, **big)
    assert not plain.memory.fits() and "--vae-tiling" not in plain.memory.hint()
    assert "vae_tiling=True" in plain.memory.hint()
    assert tiled.memory.fits() and tiled.serial["vae"]["tiled"]
    at_1024 = dict(height=1024, width=1024, steps=28)
    assert not estimate_dit("flux.1-dev", ps.Strategy(), one, **at_1024).serial["vae"]["tiled"]
    assert vae.WAN21_VAE.tiling is not None and vae.WAN21_VAE_FP32.tiling is None
    assert "tiles" not in memory_hint("vae_decode", Remedies(vae_tileable=False))
