"""DiTSpec.from_diffusers_config: real diffusers configs, hostile files, the CLI, the lookup."""

from __future__ import annotations

import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import SpecError
from parastrat.spec import dit
from parastrat.spec.dit import DiTSpec

diffusers = pytest.importorskip("diffusers")

#: Tiny instances of each class (real modules, built on CPU) and what the reader must see.
TINY = {
    "FluxTransformer2DModel": dict(
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=16,
        in_channels=16,
        axes_dims_rope=(4, 6, 6),
        guidance_embeds=True,
    ),
    "SD3Transformer2DModel": dict(
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=16,
        pooled_projection_dim=16,
        sample_size=32,
        in_channels=4,
        out_channels=4,
    ),
    "WanTransformer3DModel": dict(
        num_layers=2,
        num_attention_heads=2,
        attention_head_dim=16,
        ffn_dim=48,
        text_dim=16,
        freq_dim=16,
        in_channels=4,
        out_channels=4,
    ),
    "HunyuanVideoTransformer3DModel": dict(
        num_layers=1,
        num_single_layers=1,
        num_refiner_layers=1,
        num_attention_heads=2,
        attention_head_dim=16,
        text_embed_dim=16,
        pooled_projection_dim=8,
        rope_axes_dim=(4, 6, 6),
        in_channels=4,
        out_channels=4,
    ),
    "CogVideoXTransformer3DModel": dict(
        num_layers=2,
        num_attention_heads=2,
        attention_head_dim=16,
        time_embed_dim=8,
        text_embed_dim=16,
        in_channels=4,
        out_channels=4,
        sample_width=8,
        sample_height=8,
        sample_frames=9,
        max_text_seq_length=8,
    ),
    "QwenImageTransformer2DModel": dict(
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=16,
        in_channels=16,
        out_channels=4,
        axes_dims_rope=(4, 6, 6),
    ),
    "MochiTransformer3DModel": dict(
        num_layers=4,
        num_attention_heads=2,
        attention_head_dim=32,
        pooled_projection_dim=32,
        in_channels=4,
        text_embed_dim=16,
        time_embed_dim=8,
        max_sequence_length=16,
    ),
}


@pytest.fixture(scope="module", params=sorted(TINY))
def saved(request, tmp_path_factory):
    cls = getattr(diffusers, request.param)
    model = cls.from_config(TINY[request.param])
    folder = tmp_path_factory.mktemp(request.param)
    model.save_config(folder)
    return request.param, model, folder


def test_reads_what_diffusers_built(saved):
    cls, model, folder = saved
    cfg = model.config
    spec = DiTSpec.from_diffusers_config(folder, name="tiny")
    assert spec.name == "tiny"
    assert spec.num_attention_heads == cfg.num_attention_heads
    assert spec.head_dim == cfg.attention_head_dim
    assert spec.hidden_size == cfg.num_attention_heads * cfg.attention_head_dim
    layers = cfg.num_layers + getattr(cfg, "num_single_layers", 0)
    assert spec.num_layers == layers
    # the block weight matrices diffusers built, within 25 % (the spec prices 6 adaLN vectors
    # per stream where Mochi has 4, and a full last block where some have context_pre_only;
    # at these tiny widths the modulation is a large share)
    prefixes = ("transformer_blocks.", "single_transformer_blocks.", "blocks.")
    blocks = sum(
        p.numel() for n, p in model.named_parameters() if n.startswith(prefixes) and p.ndim > 1
    )
    counted = sum(g.count * spec.block_params(g.kind) for g in spec.blocks)
    assert counted == pytest.approx(blocks, rel=0.25)
    if cls == "FluxTransformer2DModel":
        assert spec.guidance_distilled and spec.latent_channels == 4  # 2x2-packed
    if cls == "WanTransformer3DModel":
        assert spec.ffn_hidden_size == 48 and spec.is_video


def test_default_configs_match_the_presets():
    import inspect

    pairs = {
        "FluxTransformer2DModel": ("flux.1-dev", {"guidance_embeds": True}),
        "WanTransformer3DModel": ("wan2.1-t2v-14b", {}),
        "HunyuanVideoTransformer3DModel": ("hunyuanvideo", {}),
        "CogVideoXTransformer3DModel": ("cogvideox-2b", {}),
        "QwenImageTransformer2DModel": ("qwen-image", {}),
        "MochiTransformer3DModel": ("mochi-1", {}),
    }
    for cls, (preset, over) in pairs.items():
        sig = inspect.signature(getattr(diffusers, cls).__init__)
        cfg = {k: v.default for k, v in sig.parameters.items() if k != "self"}
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in {**cfg, **over}.items()}
        spec = DiTSpec.from_diffusers_config({**cfg, "_class_name": cls})
        want = dit.get(preset)
        for field in (
            "blocks",
            "hidden_size",
            "ffn_hidden_size",
            "text_tokens",
            "patch_size",
            "latent_channels",
            "vae_temporal",
            "guidance_distilled",
            "vae",
            "eager_traffic",
        ):
            assert getattr(spec, field) == getattr(want, field), (cls, field)


GOOD = {"_class_name": "FluxTransformer2DModel", "num_layers": 2, "num_single_layers": 2}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"_class_name": "FluxTransformer2DModel", "num_layers": NaN}', "not valid JSON"),
        (b'{"_class_name": "FluxTransformer2DModel", "num_layers": Infinity}', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|not valid JSON"),
        (b'{"_class_name": "UNet2DConditionModel"}', "known: FluxTransformer2DModel"),
        (b'{"num_layers": 3}', "_class_name"),
        (json.dumps({**GOOD, "num_layers": 10**40}).encode(), "whole number"),
        (json.dumps({**GOOD, "num_layers": "19"}).encode(), "whole number"),
        (json.dumps({**GOOD, "num_layers": True}).encode(), "whole number"),
        (json.dumps({**GOOD, "num_layers": 2.5}).encode(), "whole number"),
        (json.dumps({**GOOD, "num_attention_heads": -3}).encode(), "whole number"),
        (json.dumps({**GOOD, "in_channels": 62}).encode(), "multiple of 4"),
        (json.dumps({**GOOD, "guidance_embeds": "yes"}).encode(), "true or false"),
        (json.dumps({**GOOD, "num_layers": 0, "num_single_layers": 0}).encode(), "no transformer"),
        (
            json.dumps({"_class_name": "WanTransformer3DModel", "patch_size": [1, 2]}).encode(),
            "three whole numbers",
        ),
        (
            json.dumps(
                {"_class_name": "HunyuanVideoTransformer3DModel", "mlp_ratio": 1e308}
            ).encode(),
            "finite number",
        ),
        (json.dumps({"_class_name": ["x"]}).encode(), "not a diffusers transformer"),
    ],
)
def test_hostile_files_are_spec_errors(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=message) as exc:
        DiTSpec.from_diffusers_config(path)
    assert str(path) in str(exc.value)


def test_missing_and_oversized_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        DiTSpec.from_diffusers_config(tmp_path / "nope.json")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(SpecError, match="larger than"):
        DiTSpec.from_diffusers_config(big)
    with pytest.raises(SpecError, match="path or a mapping"):
        DiTSpec.from_diffusers_config(3)


def test_cli_plans_a_config_and_refuses_a_bad_one(tmp_path, capsys):
    cfg = tmp_path / "transformer" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(
        json.dumps(
            {
                "_class_name": "WanTransformer3DModel",
                "num_layers": 30,
                "num_attention_heads": 12,
                "ffn_dim": 8960,
            }
        )
    )
    args = [
        "plan-dit",
        "--config",
        str(tmp_path),
        "--devices",
        "4",
        "--accelerator",
        "h100",
        "--height",
        "480",
        "--width",
        "832",
        "--frames",
        "81",
        "--steps",
        "50",
        "--format",
        "json",
    ]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"]["guidance"] is True  # Wan is not distilled: CFG possible
    cfg.write_bytes(b"\x80\x81")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and "Traceback" not in err


def test_models_get_finds_dit_presets_and_training_points_at_plan_dit():
    """One place to look a model up (the public contract): ps.models.get finds DiT presets;
    where a language model is needed, the name is refused with where it belongs."""
    assert ps.models.get("flux.1-dev") is dit.get("flux.1-dev")
    assert isinstance(ps.models.get("llama3-8b"), ps.ModelSpec)
    with pytest.raises(SpecError, match=r"diffusion-transformer .* plan-dit --model flux\.1-dev"):
        ps.Workload(model="flux.1-dev", seq_len=4096, global_batch_size=8)
    with pytest.raises(SpecError, match=r"did you mean .*flux\.1-dev"):
        ps.models.get("flux.1-dv")
    with pytest.raises(SpecError, match=r"did you mean .*hunyuanvideo"):
        dit.get("hunyuan-video")


def test_every_flux_config_runs_one_branch_by_default():
    """FluxPipeline runs true CFG only with a negative prompt and true_cfg_scale > 1, so a
    schnell-like config (no guidance embedding) is one branch too, as its preset."""
    schnell = DiTSpec.from_diffusers_config(
        {"_class_name": "FluxTransformer2DModel", "guidance_embeds": False}
    )
    assert schnell.guidance_distilled == dit.get("flux.1-schnell").guidance_distilled is True
    plan = ps.plan_dit(schnell, ps.Cluster("h100", 8), height=1024, width=1024, steps=4)
    assert all(c.strategy.cfg == 1 for c in plan.candidates)


def test_every_hunyuanvideo_config_runs_one_branch_by_default():
    """HunyuanVideo's T2V and I2V pipelines take true_cfg_scale=1.0: one branch per step by
    default, also for the I2V transformer whose config has guidance_embeds false."""
    i2v = {"_class_name": "HunyuanVideoTransformer3DModel", "guidance_embeds": False}
    spec = DiTSpec.from_diffusers_config({**i2v, "in_channels": 33})
    assert spec.guidance_distilled is True
    cluster = ps.Cluster("ascend-910b", 8)
    video = dict(height=720, width=1280, frames=129, steps=50)
    assert all(c.strategy.cfg == 1 for c in ps.plan_dit(spec, cluster, **video).candidates)
    forced = ps.plan_dit(spec, cluster, guidance=True, top_k=100, **video)
    assert any(c.strategy.cfg == 2 for c in forced.candidates)  # --guidance still offers CFG
    with pytest.raises(SpecError, match="guidance_embeds"):
        DiTSpec.from_diffusers_config({**i2v, "guidance_embeds": "no"})


def _pipeline(folder, second: dict | None) -> object:
    """A pipeline folder with a Wan transformer/config.json, and ``second`` as
    transformer_2/config.json when given."""
    cfg = {"_class_name": "WanTransformer3DModel", "num_layers": 40, "out_channels": 16}
    for sub, body in (("transformer", cfg), ("transformer_2", second)):
        if body is not None:
            (folder / sub).mkdir(parents=True)
            (folder / sub / "config.json").write_text(json.dumps(body))
    return folder


def test_a_two_expert_pipeline_folder_counts_both_experts(tmp_path):
    """Wan2.2 A14B keeps a high-noise and a low-noise transformer in memory: a pipeline
    folder with transformer_2 prices two experts, as the preset does, so a split that only
    fits one expert is not recommended."""
    one = DiTSpec.from_diffusers_config(_pipeline(tmp_path / "a", None))
    same = {"_class_name": "WanTransformer3DModel", "num_layers": 40, "out_channels": 16}
    two = DiTSpec.from_diffusers_config(_pipeline(tmp_path / "b", same))
    assert (one.experts, two.experts) == (1, dit.get("wan2.2-t2v-a14b").experts) == (1, 2)
    assert two.name == "b" and "two experts" in two.source
    with pytest.raises(SpecError, match="two experts of one class"):
        DiTSpec.from_diffusers_config(_pipeline(tmp_path / "c", {"_class_name": "Other"}))


def test_ratio_field_errors_name_the_config_field():
    with pytest.raises(SpecError, match="'mlp_ratio' must be large enough"):
        DiTSpec.from_diffusers_config(
            {"_class_name": "HunyuanVideoTransformer3DModel", "mlp_ratio": 0.0001}
        )
