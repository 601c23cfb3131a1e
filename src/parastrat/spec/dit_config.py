"""Read a diffusers transformer ``config.json`` into a :class:`~parastrat.spec.dit.DiTSpec`.

Only the local file is read; nothing is downloaded.  The ``_class_name`` that diffusers writes
into every saved config picks the field map; field names are the ``__init__`` arguments of the
diffusers 0.35 classes:

=================================  =============================================================
``FluxTransformer2DModel``         ``num_layers`` double + ``num_single_layers`` single blocks,
                                   ``num_attention_heads`` x ``attention_head_dim``, MLP 4x,
                                   ``in_channels`` / 4 latent channels (2x2 packing);
                                   one branch per step whatever ``guidance_embeds`` says
                                   (FluxPipeline runs true CFG only with a negative prompt
                                   and ``true_cfg_scale`` > 1; schnell is timestep-distilled)
``SD3Transformer2DModel``          ``num_layers`` joint (MMDiT) blocks, heads x head dim,
                                   ``patch_size``, ``in_channels``, ``qk_norm`` (null or a name:
                                   set means SD3.5); 77 CLIP + 256 T5 tokens
``WanTransformer3DModel``          ``num_layers`` cross-attention blocks, ``ffn_dim``,
                                   ``patch_size`` (t, h, w), ``out_channels`` (48: Wan2.2 VAE)
``HunyuanVideoTransformer3DModel`` ``num_layers`` dual + ``num_single_layers``, ``mlp_ratio``,
                                   ``patch_size``, ``patch_size_t``, ``out_channels``,
                                   ``guidance_embeds``
``CogVideoXTransformer3DModel``    ``num_layers`` joint blocks, ``time_embed_dim`` (adaLN width),
                                   ``patch_size``, ``patch_size_t``, ``max_text_seq_length``,
                                   ``out_channels``, ``temporal_compression_ratio``,
                                   ``use_rotary_positional_embeddings``
``QwenImageTransformer2DModel``    ``num_layers`` MMDiT blocks, ``patch_size``,
                                   ``in_channels`` / ``patch_size`` squared latents,
                                   ``guidance_embeds``
``MochiTransformer3DModel``        ``num_layers`` dual-stream blocks, ``max_sequence_length``,
                                   ``pooled_projection_dim``, ``patch_size``, ``in_channels``
=================================  =============================================================

Every class also reads ``num_attention_heads`` and ``attention_head_dim``.  Each field read is
checked (whole numbers >= 1 where it is a size, >= 0 for a block count; a flag is true or
false), and an absent or null one takes the class's ``__init__`` default.  **Every other field is
ignored**: not read, not checked, and without effect on the estimate.  Among them: Flux's
``patch_size`` and ``out_channels`` (FluxPipeline packs 2x2 latent patches into ``in_channels``
itself; the transformer's ``patch_size`` is 1 in every Flux checkpoint and only sizes the
output projection), Wan's and HunyuanVideo's ``in_channels`` (the patch embedding's input: 36
for Wan image-to-video, where the latents the blocks see are ``out_channels``), text and pooled
projection widths other than Mochi's, rotary settings, norms' epsilons.

What the transformer config does not say (text length, encoders, VAE) comes from the class's
standard pipeline.  Hostile files -- not UTF-8, not JSON, NaN/Infinity, nesting too deep,
numbers of the wrong type or absurd size, unknown classes -- raise :class:`SpecError` naming
the file and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._io import read_bytes
from ..errors import SpecError, UsageError
from . import text_encoder as te
from . import vae as vaes
from .block_traffic import EAGER_TRAFFIC
from .dit import BlockGroup, DiTSpec

#: Largest config file read (a transformer config is a few hundred bytes).
MAX_BYTES = 1 << 20
#: Largest width/count accepted for any integer field (larger is not a real model).
MAX_INT = 1 << 20


class _Fields:
    """Typed access to a config's fields, each error naming the file and the field."""

    def __init__(self, cfg: Mapping[str, Any], where: str, cls: str):
        self.cfg, self.where, self.cls = cfg, where, cls

    def err(self, key: str, what: str, value: Any) -> SpecError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return SpecError(f"{self.where}: {self.cls} field {key!r} must be {what}, got {shown}")

    def whole(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.cfg.get(key, default)
        if value is None:
            if default is None:
                raise SpecError(f"{self.where}: {self.cls} needs field {key!r}")
            value = default
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value != int(value)
            or not minimum <= value <= MAX_INT
        ):
            raise self.err(key, f"a whole number in [{minimum}, {MAX_INT}]", value)
        return int(value)

    def number(self, key: str, default: float) -> float:
        value = self.cfg.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(key, "a number", value)
        if not math.isfinite(value) or not 0 < value <= 64:
            raise self.err(key, "a finite number in (0, 64]", value)
        return float(value)

    def width(self, key: str, default: float, base: int) -> int:
        """``base`` scaled by the ratio field ``key`` (rounded), at least one unit wide."""
        ratio = self.number(key, default)
        if round(ratio * base) < 1:
            raise self.err(key, f"large enough that {key} x {base} >= 1", ratio)
        return round(ratio * base)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.err(key, "true or false", value)
        return value

    def name(self, key: str) -> str | None:
        """A field that names a choice (``qk_norm: "rms_norm"``), or None when absent/null."""
        value = self.cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise self.err(key, "null or a name (a string)", value)
        return value

    def patch3(self, key: str) -> tuple[int, int, int]:
        value = self.cfg.get(key, (1, 2, 2))
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 64 for v in value)
        ):
            raise self.err(key, "a list of three whole numbers (t, h, w) in [1, 64]", value)
        if value[1] != value[2]:
            raise self.err(key, "square in space (h == w)", value)
        return int(value[0]), int(value[1]), int(value[2])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_config(path: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The config as a dict and where it came from; a folder means its ``config.json`` (or
    ``transformer/config.json`` of a pipeline folder)."""
    if isinstance(path, Mapping):
        return dict(path), "<dict>"
    if not isinstance(path, (str, Path)):
        raise SpecError(f"config must be a path or a mapping, got {type(path).__name__}")
    p = Path(path)
    if p.is_dir():
        nested = p / "transformer" / "config.json"
        p = nested if nested.is_file() else p / "config.json"
    try:
        data = read_bytes(p, what="diffusers config", limit=MAX_BYTES)
    except UsageError as exc:
        raise SpecError(
            f"{exc} (pass a local transformer config.json, or the folder holding it)"
        ) from None
    if len(data) > MAX_BYTES:
        raise SpecError(f"{p} is larger than {MAX_BYTES} bytes: not a transformer config.json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p} is not UTF-8 text (byte {exc.start}): not a config.json") from None
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise SpecError(f"{p}: JSON nested too deeply to be a config.json") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError; so is NaN/Infinity
        raise SpecError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{p} must hold a JSON object, got {type(raw).__name__}")
    return raw, str(p)


def _flux(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 24), f.whole("attention_head_dim", 128)
    return DiTSpec(
        name=name,
        blocks=_groups(
            ("double", f.whole("num_layers", 19, 0)),
            ("single", f.whole("num_single_layers", 38, 0)),
            where=f,
        ),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=4 * heads * d,
        text_tokens=512,
        latent_channels=_packed(f, "in_channels", 64),
        text_encoders=(te.CLIP_L, te.T5_XXL.with_tokens(512)),
        vae=vaes.KL_2D,
        guidance_distilled=_flux_one_branch(f),
        eager_traffic=EAGER_TRAFFIC["flux"],
        source=f"{f.where} (FluxTransformer2DModel; text 512 tokens as FluxPipeline)",
    )


def _flux_one_branch(f: _Fields) -> bool:
    """FluxPipeline's default for any Flux transformer: one branch per step.  ``__call__``
    sets ``do_true_cfg = true_cfg_scale > 1 and has_neg_prompt`` with ``true_cfg_scale=1.0``
    by default (diffusers 0.35 ``pipeline_flux.py``): dev embeds the guidance scale
    (``guidance_embeds``), schnell is timestep-distilled and embeds none.  The field is still
    read, so a wrong type is refused."""
    f.flag("guidance_embeds")
    return True


def _qwen(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 24), f.whole("attention_head_dim", 128)
    patch = f.whole("patch_size", 2)
    return DiTSpec(
        name=name,
        blocks=_groups(("double", f.whole("num_layers", 60, 0)), where=f),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=4 * heads * d,
        text_tokens=512,
        patch_size=patch,
        latent_channels=_packed(f, "in_channels", 64, patch * patch),
        text_encoders=(te.QWEN25_VL_7B,),
        vae=vaes.WAN21_VAE,
        guidance_distilled=f.flag("guidance_embeds"),
        eager_traffic=EAGER_TRAFFIC["qwen-image"],
        source=f"{f.where} (QwenImageTransformer2DModel; Qwen2.5-VL text, up to 512 tokens)",
    )


def _hunyuan_one_branch(f: _Fields) -> bool:
    """HunyuanVideo's pipelines run one branch per step by default, whatever
    ``guidance_embeds`` says: the text-to-video and image-to-video ``__call__`` both take
    ``true_cfg_scale=1.0`` and set ``do_true_cfg = true_cfg_scale > 1 and has_neg_prompt``
    (diffusers 0.39 ``pipeline_hunyuan_video.py``, ``pipeline_hunyuan_video_image2video.py``;
    the I2V transformer has ``guidance_embeds: false``).  The field is still read, so a wrong
    type is refused."""
    f.flag("guidance_embeds", True)
    return True


def _sd3(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 18), f.whole("attention_head_dim", 64)
    return DiTSpec(
        name=name,
        blocks=_groups(("double", f.whole("num_layers", 18, 0)), where=f),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=4 * heads * d,
        text_tokens=77 + 256,
        patch_size=f.whole("patch_size", 2),
        latent_channels=f.whole("in_channels", 16),
        text_encoders=(te.CLIP_L, te.CLIP_G, te.T5_XXL.with_tokens(256)),
        vae=vaes.KL_2D,
        eager_traffic=EAGER_TRAFFIC["sd3.5" if f.name("qk_norm") else "sd3"],
        source=f"{f.where} (SD3Transformer2DModel; 77 CLIP + 256 T5 tokens; dual-attention "
        "layers of MMDiT-X priced as plain joint blocks)",
    )


def _wan(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 40), f.whole("attention_head_dim", 128)
    pt, ph, _ = f.patch3("patch_size")
    out = f.whole("out_channels", 16)
    wan22 = out == 48
    return DiTSpec(
        name=name,
        blocks=_groups(("cross", f.whole("num_layers", 40, 0)), where=f),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=f.whole("ffn_dim", 13824),
        text_tokens=512,
        vae_spatial=16 if wan22 else 8,
        vae_temporal=4,
        patch_size=ph,
        patch_size_t=pt,
        latent_channels=out,
        text_encoders=(te.UMT5_XXL,),
        vae=vaes.WAN22_VAE if wan22 else vaes.WAN21_VAE_FP32,
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["wan"],
        source=f"{f.where} (WanTransformer3DModel; umT5 512 tokens; "
        f"{'Wan2.2' if wan22 else 'Wan2.1'} VAE)",
    )


def _hunyuan(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 24), f.whole("attention_head_dim", 128)
    return DiTSpec(
        name=name,
        blocks=_groups(
            ("double", f.whole("num_layers", 20, 0)),
            ("single", f.whole("num_single_layers", 40, 0)),
            where=f,
        ),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=f.width("mlp_ratio", 4.0, heads * d),
        text_tokens=256,
        vae_temporal=4,
        patch_size=f.whole("patch_size", 2),
        patch_size_t=f.whole("patch_size_t", 1),
        latent_channels=f.whole("out_channels", 16),
        text_encoders=(te.LLAVA_LLAMA3_8B, te.CLIP_L),
        vae=vaes.HUNYUAN_VAE,
        guidance_distilled=_hunyuan_one_branch(f),
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["hunyuanvideo"],
        source=f"{f.where} (HunyuanVideoTransformer3DModel; LLaVA + CLIP text, 256 tokens)",
    )


def _cogvideox(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 30), f.whole("attention_head_dim", 64)
    text = f.whole("max_text_seq_length", 226)
    return DiTSpec(
        name=name,
        blocks=_groups(("joint", f.whole("num_layers", 30, 0)), where=f),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=4 * heads * d,
        text_tokens=text,
        vae_temporal=f.whole("temporal_compression_ratio", 4),
        patch_size=f.whole("patch_size", 2),
        patch_size_t=f.whole("patch_size_t", 1),
        latent_channels=f.whole("out_channels", 16),
        adaln_dim=f.whole("time_embed_dim", 512),
        text_encoders=(te.T5_XXL.with_tokens(text),),
        vae=vaes.COGVIDEOX_VAE,
        is_video=True,
        eager_traffic=EAGER_TRAFFIC[
            "cogvideox-5b" if f.flag("use_rotary_positional_embeddings") else "cogvideox-2b"
        ],
        source=f"{f.where} (CogVideoXTransformer3DModel; T5 {text} tokens)",
    )


def _mochi(f: _Fields, name: str) -> DiTSpec:
    heads, d = f.whole("num_attention_heads", 24), f.whole("attention_head_dim", 128)
    text = f.whole("max_sequence_length", 256)
    return DiTSpec(
        name=name,
        blocks=_groups(("double", f.whole("num_layers", 48, 0)), where=f),
        hidden_size=heads * d,
        num_attention_heads=heads,
        head_dim=d,
        ffn_hidden_size=4 * heads * d,  # SwiGLU of 8/3 x: the same matrices as a 4x MLP
        context_dim=f.whole("pooled_projection_dim", 1536),
        text_tokens=text,
        vae_temporal=6,
        patch_size=f.whole("patch_size", 2),
        latent_channels=f.whole("in_channels", 12),
        text_encoders=(te.T5_XXL.with_tokens(text),),
        vae=vaes.MOCHI_VAE,
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["mochi"],
        source=f"{f.where} (MochiTransformer3DModel; T5 {text} tokens)",
    )


def _packed(f: _Fields, key: str, default: int, pack: int = 4) -> int:
    """Latent channels of a pipeline that packs ``pack`` latent pixels into one input token."""
    value = f.whole(key, default)
    if value % pack:
        raise f.err(key, f"a multiple of {pack} (2x2-packed latent channels)", value)
    return value // pack


def _groups(*pairs: tuple[str, int], where: _Fields) -> tuple[BlockGroup, ...]:
    groups = tuple(BlockGroup(kind, n) for kind, n in pairs if n > 0)
    if not groups:
        raise SpecError(f"{where.where}: {where.cls} has no transformer blocks (num_layers 0)")
    return groups


READERS: dict[str, Callable[[_Fields, str], DiTSpec]] = {
    "FluxTransformer2DModel": _flux,
    "SD3Transformer2DModel": _sd3,
    "WanTransformer3DModel": _wan,
    "HunyuanVideoTransformer3DModel": _hunyuan,
    "CogVideoXTransformer3DModel": _cogvideox,
    "QwenImageTransformer2DModel": _qwen,
    "MochiTransformer3DModel": _mochi,
}


def dit_from_diffusers_config(
    path: str | Path | Mapping[str, Any], *, name: str | None = None
) -> DiTSpec:
    """A DiTSpec from a diffusers transformer ``config.json`` (file, folder or dict)."""
    raw, where = read_config(path)
    cls = raw.get("_class_name")
    if not isinstance(cls, str) or cls not in READERS:
        shown = repr(cls) if isinstance(cls, str) and len(cls) < 80 else type(cls).__name__
        raise SpecError(
            f"{where}: '_class_name' {shown} is not a diffusers transformer parastrat reads; "
            f"known: {', '.join(READERS)}"
        )
    if name is None and where != "<dict>":
        folder = Path(where).parent
        name = folder.parent.name if folder.name == "transformer" else folder.name
    label = name if name is not None else cls
    if not isinstance(label, str) or not label.strip():
        label = cls
    try:
        spec = replace(READERS[cls](_Fields(raw, where, cls), label), diffusers_class=cls)
    except SpecError as exc:
        msg = str(exc)
        raise SpecError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    return _with_second_expert(spec, where, cls)


def _with_second_expert(spec: DiTSpec, where: str, cls: str) -> DiTSpec:
    """``spec`` with two transformer copies when ``where`` is a pipeline folder's
    ``transformer/config.json`` beside a ``transformer_2/config.json`` of the same class
    (Wan2.2 A14B: a high-noise and a low-noise expert, both loaded, one run per step by the
    pipeline's ``boundary_ratio``)."""
    here = Path(where)
    if where == "<dict>" or here.parent.name != "transformer":
        return spec
    second = here.parent.parent / "transformer_2" / "config.json"
    if not second.is_file():
        return spec
    raw2, where2 = read_config(second)
    if raw2.get("_class_name") != cls:
        raise SpecError(
            f"{where2}: the second transformer's class {raw2.get('_class_name')!r} differs from "
            f"{cls!r} in {where}; parastrat prices two experts of one class only"
        )
    return replace(spec, experts=2, source=f"{spec.source}; two experts ({where2})")
