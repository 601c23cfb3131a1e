"""DiTSpec: the shape of a diffusion transformer, and presets for the models people serve.

A DiT turns a latent image/video into a token sequence: the VAE compresses each frame
``vae_spatial`` times per side (and ``vae_temporal`` frames into one latent frame, for video
VAEs), and the patch embedder groups ``patch_size x patch_size`` (x ``patch_size_t``) latent
pixels into one token.  :meth:`DiTSpec.tokens` turns a workload (height, width, frames) into
that token count, refusing sizes the VAE or patch cannot split.

Blocks come in four kinds (:data:`BLOCK_KINDS`), which differ in where the text goes and in
how many weight matrices a token passes through:

* ``double`` -- MMDiT dual-stream block (SD3, FLUX, HunyuanVideo, Qwen-Image): image and text
  tokens have their own QKV/out/MLP weights and meet in one joint attention;
* ``single`` -- single-stream block (FLUX, HunyuanVideo): text and image tokens share weights;
  QKV and the MLP input come from one fused matrix, attention and MLP run in parallel;
* ``cross`` -- self-attention over video tokens, then cross-attention to the text (Wan);
* ``joint`` -- one set of weights over the concatenated text+video sequence (CogVideoX).

Attribute names ``num_attention_heads``/``num_query_groups``/``num_layers`` match
:class:`~parastrat.ModelSpec` so the strategy rules (heads vs TP and Ulysses) apply unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..checks import is_count
from ..errors import SpecError

#: Block kinds a DiT is built from (see the module docstring).
BLOCK_KINDS = ("double", "single", "cross", "joint")


@dataclass(frozen=True)
class BlockGroup:
    """``count`` consecutive transformer blocks of one ``kind``."""

    kind: str
    count: int

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise SpecError(f"unknown block kind {self.kind!r}; known: {', '.join(BLOCK_KINDS)}")
        if not isinstance(self.count, int) or self.count < 1:
            raise SpecError(f"block count must be an int >= 1, got {self.count!r}")


@dataclass(frozen=True)
class LatentShape:
    """A workload after the VAE and the patch embedder.

    ``frames``/``height``/``width`` are the latent grid in tokens (after patching);
    ``padded_latent_frames`` counts latent frames the pipeline adds so the temporal patch
    divides them (CogVideoX 1.5 pads 21 latent frames to 22).
    """

    frames: int
    height: int
    width: int
    latent_frames: int
    padded_latent_frames: int = 0

    @property
    def tokens(self) -> int:
        """Image/video tokens of the workload: frames x height x width of the patched latent."""
        return self.frames * self.height * self.width


@dataclass(frozen=True)
class DiTSpec:
    """A diffusion transformer: its blocks, widths, text length and VAE/patch geometry."""

    name: str
    blocks: tuple[BlockGroup, ...]
    hidden_size: int
    num_attention_heads: int
    head_dim: int
    ffn_hidden_size: int
    #: Text tokens the transformer sees (joint attention: they join the sequence; ``cross``
    #: blocks: the cross-attention keys/values).
    text_tokens: int
    #: VAE compression: pixels per latent pixel per side, and frames per latent frame
    #: (1 for image VAEs; 4 for Wan/HunyuanVideo/CogVideoX, which take ``4k + 1`` frames).
    vae_spatial: int = 8
    vae_temporal: int = 1
    patch_size: int = 2
    patch_size_t: int = 1
    latent_channels: int = 16
    #: KV heads (GQA); None means multi-head attention.
    num_query_groups: int | None = None
    #: Input width of the per-block adaLN modulation linear (None: hidden_size).  CogVideoX
    #: modulates from a 512-wide time embedding.
    adaln_dim: int | None = None
    #: Text-encoder parameters kept on the device (T5-XXL, umT5, LLaVA, Qwen2.5-VL ...).
    text_encoder_params: float = 0.0
    #: Parameters outside the blocks (patch/text/time embedders, final layer): replicated.
    embedder_params: float = 0.0
    #: Forward FLOPs of the VAE decoder per output pixel (per frame), from its layer layout;
    #: see docs/dit-model.md for the derivation.
    vae_decode_flops_per_pixel: float = 0.0
    #: Guidance-distilled (FLUX.1-dev, HunyuanVideo): the guidance scale is an input embedding,
    #: the default pipeline runs one branch per step, and CFG parallelism has nothing to split.
    guidance_distilled: bool = False
    is_video: bool = False
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "num_attention_heads",
            "head_dim",
            "ffn_hidden_size",
            "vae_spatial",
            "vae_temporal",
            "patch_size",
            "patch_size_t",
            "latent_channels",
        ):
            value = getattr(self, name)
            if not is_count(value):
                raise SpecError(f"DiTSpec {self.name!r}: {name} must be an int >= 1, got {value!r}")
        if not is_count(self.text_tokens, 0):
            raise SpecError(
                f"DiTSpec {self.name!r}: text_tokens must be an int >= 0, got {self.text_tokens!r}"
            )
        if not self.blocks:
            raise SpecError(f"DiTSpec {self.name!r}: needs at least one block group")
        groups = self.query_groups
        if self.num_attention_heads % groups:
            raise SpecError(
                f"DiTSpec {self.name!r}: {groups} KV heads do not divide "
                f"{self.num_attention_heads} attention heads"
            )

    # ---- derived shape -------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Transformer blocks of every kind."""
        return sum(g.count for g in self.blocks)

    @property
    def query_groups(self) -> int:
        """KV heads: ``num_query_groups``, or the attention heads for MHA."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def mlp_ratio(self) -> float:
        """MLP hidden size over the model width (4.0 for FLUX, 2.7 for Wan2.1 14B)."""
        return self.ffn_hidden_size / self.hidden_size

    @property
    def inner_dim(self) -> int:
        """Width of Q (heads x head_dim); equals hidden_size for every preset."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (and of the V) projection: KV heads x head_dim (below :attr:`inner_dim`
        under GQA)."""
        return self.query_groups * self.head_dim

    @property
    def text_in_sequence(self) -> bool:
        """Whether text tokens join the self-attention sequence (all kinds but ``cross``)."""
        return any(g.kind != "cross" for g in self.blocks)

    def block_params(self, kind: str) -> float:
        """Weight-matrix parameters of one block of ``kind`` (biases and norms left out)."""
        h, f, q, kv = self.hidden_size, self.ffn_hidden_size, self.inner_dim, self.kv_dim
        mod = self.adaln_dim or h
        attn = h * q + 2 * h * kv + q * h  # Q, K, V, out
        mlp = 2 * h * f
        if kind == "double":
            return 2 * (attn + mlp + 6 * mod * h)  # two streams, adaLN-Zero (6 vectors) each
        if kind == "single":
            return attn + mlp + 3 * mod * h  # fused in/out matrices; 3 modulation vectors
        if kind == "cross":
            return 2 * attn + mlp  # self + cross attention; shared modulation
        if kind == "joint":
            return attn + mlp + 2 * 6 * mod * h  # two adaLN (text and video experts)
        raise SpecError(f"unknown block kind {kind!r}; known: {', '.join(BLOCK_KINDS)}")

    @property
    def num_params(self) -> float:
        """Transformer parameters: every block plus the embedders (no text encoder, no VAE)."""
        return sum(g.count * self.block_params(g.kind) for g in self.blocks) + self.embedder_params

    # ---- workloads -----------------------------------------------------------------------
    @property
    def pixel_multiple(self) -> int:
        """Height and width must be multiples of this (VAE compression x patch size)."""
        return self.vae_spatial * self.patch_size

    def latent_shape(self, height: int, width: int, frames: int = 1) -> LatentShape:
        """The token grid for an output of ``height x width`` pixels and ``frames`` frames.

        Raises :class:`SpecError` naming the nearest valid sizes when the VAE/patch cannot
        split the resolution, or when a video VAE cannot take the frame count.
        """
        for label, value in (("height", height), ("width", width), ("frames", frames)):
            if not is_count(value):
                raise SpecError(f"{label}={value!r} must be a whole number >= 1")
        m = self.pixel_multiple
        for label, value in (("height", height), ("width", width)):
            if value % m:
                lo, hi = value // m * m, (value // m + 1) * m
                near = f"{lo} or {hi}" if lo else f"{hi}"
                raise SpecError(
                    f"{label}={value} is not a multiple of {m} ({self.name}: VAE x"
                    f"{self.vae_spatial} then {self.patch_size}x{self.patch_size} patches); "
                    f"use {label} {near}"
                )
        if not self.is_video:
            if frames != 1:
                raise SpecError(f"{self.name} is an image model: frames must be 1, got {frames}")
            latent_frames = 1
        else:
            t = self.vae_temporal
            if (frames - 1) % t:
                lo = (frames - 1) // t * t + 1
                raise SpecError(
                    f"frames={frames} cannot be taken by {self.name}'s causal video VAE, which "
                    f"needs {t}k+1 frames (1 + {t} per latent frame); use frames {lo} or {lo + t}"
                )
            latent_frames = (frames - 1) // t + 1
        pt = self.patch_size_t
        padded = -latent_frames % pt
        return LatentShape(
            frames=(latent_frames + padded) // pt,
            height=height // m,
            width=width // m,
            latent_frames=latent_frames,
            padded_latent_frames=padded,
        )

    def tokens(self, height: int, width: int, frames: int = 1) -> int:
        """Image/video tokens for an output of ``height x width`` pixels and ``frames`` frames.

        The text tokens are not included; :meth:`sequence_length` adds them where text joins
        the self-attention sequence.  E.g. HunyuanVideo at 1280x720, 129 frames: 33 latent
        frames x 45 x 80 = 118,800 tokens.
        """
        return self.latent_shape(height, width, frames).tokens

    def sequence_length(self, height: int, width: int, frames: int = 1) -> int:
        """Self-attention sequence: image/video tokens plus text tokens under joint attention."""
        extra = self.text_tokens if self.text_in_sequence else 0
        return self.tokens(height, width, frames) + extra

    def latent_elements(self, height: int, width: int, frames: int = 1) -> int:
        """Elements of the latent the transformer predicts each step (what CFG gathers)."""
        shape = self.latent_shape(height, width, frames)
        return (
            (shape.latent_frames + shape.padded_latent_frames)
            * (height // self.vae_spatial)
            * (width // self.vae_spatial)
            * self.latent_channels
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict for display: blocks as ``{kind, count}``, derived sizes
        (layers, parameters, MLP ratio, KV heads) added, ``extra`` left out (not a constructor round
        trip)."""
        d = asdict(self)
        d.pop("extra")
        d["blocks"] = [{"kind": g.kind, "count": g.count} for g in self.blocks]
        d.update(
            num_layers=self.num_layers,
            num_params=self.num_params,
            mlp_ratio=self.mlp_ratio,
            query_groups=self.query_groups,
        )
        return d


# ---------------------------------------------------------------------------------------------
# Presets.  Shapes from each model's transformer config (diffusers class defaults checked
# against the published config.json); text-encoder sizes from their model cards.
# VAE decoder FLOPs per output pixel: docs/dit-model.md derives ~9.3e6 for the 2D SD/FLUX VAE
# decoder (channels 512,512,256,128; three 3x3 convs per resnet) and ~2.3e7 for 3D causal video
# decoders with the same channels (27-tap convs, two temporal upsamplings); Wan's VAE is
# narrower (384,384,192,96: x0.56).
# ---------------------------------------------------------------------------------------------
_T5_XXL = 4.76e9
_CLIP_L = 0.123e9

_PRESETS: dict[str, DiTSpec] = {}


def register(spec: DiTSpec) -> DiTSpec:
    """Add a preset (its name is the key, lower-case)."""
    _PRESETS[spec.name.lower()] = spec
    return spec


register(
    DiTSpec(
        name="flux.1-dev",
        blocks=(BlockGroup("double", 19), BlockGroup("single", 38)),
        hidden_size=3072,
        num_attention_heads=24,
        head_dim=128,
        ffn_hidden_size=12288,
        text_tokens=512,
        vae_spatial=8,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=_T5_XXL + _CLIP_L,
        embedder_params=0.07e9,
        vae_decode_flops_per_pixel=9.3e6,
        guidance_distilled=True,
        source="black-forest-labs/FLUX.1-dev transformer/config.json (19 double + 38 single "
        "blocks, 24x128 heads); FluxPipeline max_sequence_length=512; 16-channel 8x VAE, "
        "2x2 packing",
    )
)

register(
    DiTSpec(
        name="wan2.1-t2v-1.3b",
        blocks=(BlockGroup("cross", 30),),
        hidden_size=1536,
        num_attention_heads=12,
        head_dim=128,
        ffn_hidden_size=8960,
        text_tokens=512,
        vae_spatial=8,
        vae_temporal=4,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=5.68e9,
        embedder_params=0.03e9,
        vae_decode_flops_per_pixel=1.3e7,
        is_video=True,
        source="Wan-AI/Wan2.1-T2V-1.3B config.json (dim 1536, ffn 8960, 12 heads, 30 layers, "
        "patch (1,2,2), text_len 512); Wan-VAE stride (4,8,8), z_dim 16; umT5-XXL encoder",
    )
)

register(
    DiTSpec(
        name="wan2.1-t2v-14b",
        blocks=(BlockGroup("cross", 40),),
        hidden_size=5120,
        num_attention_heads=40,
        head_dim=128,
        ffn_hidden_size=13824,
        text_tokens=512,
        vae_spatial=8,
        vae_temporal=4,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=5.68e9,
        embedder_params=0.1e9,
        vae_decode_flops_per_pixel=1.3e7,
        is_video=True,
        source="Wan-AI/Wan2.1-T2V-14B config.json (dim 5120, ffn 13824, 40 heads, 40 layers, "
        "patch (1,2,2), text_len 512); Wan-VAE stride (4,8,8), z_dim 16",
    )
)

register(
    DiTSpec(
        name="hunyuanvideo",
        blocks=(BlockGroup("double", 20), BlockGroup("single", 40)),
        hidden_size=3072,
        num_attention_heads=24,
        head_dim=128,
        ffn_hidden_size=12288,
        text_tokens=256,
        vae_spatial=8,
        vae_temporal=4,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=7.5e9 + _CLIP_L,
        embedder_params=0.35e9,
        vae_decode_flops_per_pixel=2.3e7,
        guidance_distilled=True,
        is_video=True,
        source="tencent/HunyuanVideo (arXiv 2412.03603; diffusers HunyuanVideoTransformer3DModel: "
        "20 dual + 40 single blocks, 24x128 heads, mlp_ratio 4, patch 2/1, text_len 256); "
        "3D causal VAE 4x8x8, 16 channels; LLaVA-LLaMA-3-8B + CLIP-L text encoders",
    )
)

register(
    DiTSpec(
        name="sd3.5-large",
        blocks=(BlockGroup("double", 38),),
        hidden_size=2432,
        num_attention_heads=38,
        head_dim=64,
        ffn_hidden_size=9728,
        text_tokens=333,
        vae_spatial=8,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=_T5_XXL + _CLIP_L + 0.695e9,
        embedder_params=0.06e9,
        vae_decode_flops_per_pixel=9.3e6,
        source="stabilityai/stable-diffusion-3.5-large transformer/config.json (38 joint blocks, "
        "38x64 heads); text = 77 CLIP + 256 T5 tokens; 16-channel 8x VAE, patch 2",
    )
)

register(
    DiTSpec(
        name="cogvideox1.5-5b",
        blocks=(BlockGroup("joint", 42),),
        hidden_size=3072,
        num_attention_heads=48,
        head_dim=64,
        ffn_hidden_size=12288,
        text_tokens=224,
        vae_spatial=8,
        vae_temporal=4,
        patch_size=2,
        patch_size_t=2,
        latent_channels=16,
        adaln_dim=512,
        text_encoder_params=_T5_XXL,
        embedder_params=0.03e9,
        vae_decode_flops_per_pixel=2.3e7,
        is_video=True,
        source="THUDM/CogVideoX1.5-5B transformer/config.json (42 layers, 48x64 heads, "
        "patch_size 2, patch_size_t 2, max_text_seq_length 224, time_embed_dim 512); "
        "VAE 4x8x8, 16 channels; the pipeline pads odd latent frame counts by one",
    )
)

register(
    DiTSpec(
        name="qwen-image",
        blocks=(BlockGroup("double", 60),),
        hidden_size=3072,
        num_attention_heads=24,
        head_dim=128,
        ffn_hidden_size=12288,
        text_tokens=512,
        vae_spatial=8,
        patch_size=2,
        latent_channels=16,
        text_encoder_params=8.3e9,
        embedder_params=0.03e9,
        vae_decode_flops_per_pixel=1.3e7,
        source="Qwen/Qwen-Image transformer/config.json (60 MMDiT blocks, 24x128 heads, patch 2); "
        "text from Qwen2.5-VL-7B, up to max_sequence_length 512 tokens (an upper bound: "
        "prompts are not padded); Wan-style VAE, 8x, 16 channels",
    )
)


def names() -> list[str]:
    """Names of the DiT presets."""
    return sorted(_PRESETS)


def get(name: str | DiTSpec) -> DiTSpec:
    """A DiT preset by name (case-insensitive); a DiTSpec is returned unchanged."""
    if isinstance(name, DiTSpec):
        return name
    if not isinstance(name, str):
        raise SpecError(f"DiT model must be a preset name or a DiTSpec, got {type(name).__name__}")
    key = name.strip().lower()
    try:
        return _PRESETS[key]
    except KeyError:
        close = [n for n in names() if key and (key in n or n.split("-")[0] in key)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise SpecError(f"unknown DiT model {name!r}{hint}; known: {', '.join(names())}") from None


def ceil_div(a: int, b: int) -> int:
    """Smallest integer >= a / b."""
    return -(-a // b)


__all__ = [
    "BLOCK_KINDS",
    "BlockGroup",
    "DiTSpec",
    "LatentShape",
    "ceil_div",
    "get",
    "names",
    "register",
]
