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

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..checks import is_count
from ..errors import SpecError
from .block_traffic import EAGER_TRAFFIC, EagerTraffic
from .text_encoder import (
    CLIP_G,
    CLIP_L,
    LLAVA_LLAMA3_8B,
    QWEN25_VL_7B,
    T5_XXL,
    UMT5_XXL,
    TextEncoder,
)
from .vae import (
    COGVIDEOX_VAE,
    HUNYUAN_VAE,
    KL_2D,
    MOCHI_VAE,
    WAN21_VAE,
    WAN21_VAE_FP32,
    WAN22_VAE,
    VAEDecoder,
)

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
    #: Text-encoder parameters kept on the device (T5-XXL, umT5, LLaVA, Qwen2.5-VL ...);
    #: 0 means the sum over :attr:`text_encoders`.
    text_encoder_params: float = 0.0
    #: Parameters outside the blocks (patch/text/time embedders, final layer): replicated.
    embedder_params: float = 0.0
    #: The text encoders the pipeline runs once per prompt (serial, on one device).
    text_encoders: tuple[TextEncoder, ...] = ()
    #: The VAE decoder the pipeline runs after the loop (None: not priced).
    vae: VAEDecoder | None = None
    #: Transformer copies the pipeline keeps (Wan2.2 A14B: a high-noise and a low-noise expert,
    #: one used per step): weights in memory are multiplied, compute is not.
    experts: int = 1
    #: Width of the text stream in dual-stream blocks (None: hidden_size).  Mochi's is 1536
    #: against 3072 for the video stream; its MLP scales with it.
    context_dim: int | None = None
    #: Guidance-distilled (FLUX.1-dev, HunyuanVideo): the guidance scale is an input embedding,
    #: the default pipeline runs one branch per step, and CFG parallelism has nothing to split.
    guidance_distilled: bool = False
    is_video: bool = False
    #: Eager element-wise bytes per token of each block kind, counted on the family's real
    #: block (:mod:`~parastrat.spec.block_traffic`); a kind without a count is priced with the
    #: generic pass counts of ``estimate/dit_step.py``.
    eager_traffic: tuple[EagerTraffic, ...] = ()
    source: str = ""
    #: The diffusers transformer class of the model (``FluxTransformer2DModel``, ...): what the
    #: serving frameworks key their support on (:mod:`~parastrat.spec.dit_frameworks`).  Presets
    #: get it from their name (:data:`PRESET_CLASSES`), configs from ``_class_name``.
    diffusers_class: str = ""
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
        if not self.text_encoder_params and self.text_encoders:
            total = sum(e.params for e in self.text_encoders)
            object.__setattr__(self, "text_encoder_params", total)
        groups = self.query_groups
        if self.num_attention_heads % groups:
            raise SpecError(
                f"DiTSpec {self.name!r}: {groups} KV heads do not divide "
                f"{self.num_attention_heads} attention heads"
            )

    @classmethod
    def from_diffusers_config(cls, path: Any, *, name: str | None = None) -> DiTSpec:
        """A DiTSpec from a local diffusers transformer ``config.json`` (file, folder, or dict):
        Flux, SD3, Wan, HunyuanVideo, CogVideoX, Qwen-Image and Mochi transformer classes (see
        :mod:`parastrat.spec.dit_config`).  Bad files raise :class:`SpecError` naming the field."""
        from .dit_config import dit_from_diffusers_config

        return dit_from_diffusers_config(path, name=name)

    def with_text_tokens(self, tokens: int) -> DiTSpec:
        """The same model run with another prompt length (a pipeline's
        ``max_sequence_length``: FluxPipeline's default 512, xDiT's Flux example 256): the
        transformer's text tokens and the encoders that read that length (not CLIP's 77)."""
        if not is_count(tokens, 1):
            raise SpecError(f"with_text_tokens({tokens!r}): a token count is an int >= 1")
        encoders = tuple(
            e.with_tokens(tokens) if e.tokens == self.text_tokens else e for e in self.text_encoders
        )
        return replace(self, text_tokens=tokens, text_encoders=encoders)

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
    def text_width(self) -> int:
        """Width of the text stream of a dual-stream block (``context_dim`` or hidden_size)."""
        return self.context_dim or self.hidden_size

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
        if kind == "double":  # two streams, adaLN-Zero (6 vectors) each
            c = self.text_width
            text = c * q + 2 * c * kv + q * c + 2 * c * (f * c // h) + 6 * mod * c
            return attn + mlp + 6 * mod * h + text
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

    @property
    def total_params(self) -> float:
        """Transformer parameters the pipeline keeps: :attr:`num_params` (what one denoising
        step runs) for each of the :attr:`experts` (Wan2.2 A14B: two)."""
        return self.experts * self.num_params

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
        (layers, parameters per step and over the experts, MLP ratio, KV heads) added,
        ``extra`` left out (not a constructor round trip)."""
        d = asdict(self)
        d.pop("extra")
        d["text_encoders"] = [e.name for e in self.text_encoders]
        d["vae"] = self.vae.name if self.vae else None
        d["blocks"] = [{"kind": g.kind, "count": g.count} for g in self.blocks]
        d.update(
            num_layers=self.num_layers,
            num_params=self.num_params,
            total_params=self.total_params,
            mlp_ratio=self.mlp_ratio,
            query_groups=self.query_groups,
        )
        return d


# ---------------------------------------------------------------------------------------------
# Presets.  Shapes from each model's transformer config (diffusers class defaults checked
# against the published config.json); text encoders and VAE decoders from spec/text_encoder.py
# and spec/vae.py (their published architectures).
# ---------------------------------------------------------------------------------------------
_PRESETS: dict[str, DiTSpec] = {}


#: The diffusers transformer class of each preset family, by the start of the preset's name.
PRESET_CLASSES = {
    "flux": "FluxTransformer2DModel",
    "sd3": "SD3Transformer2DModel",
    "wan": "WanTransformer3DModel",
    "hunyuanvideo": "HunyuanVideoTransformer3DModel",
    "cogvideox": "CogVideoXTransformer3DModel",
    "mochi": "MochiTransformer3DModel",
    "qwen-image": "QwenImageTransformer2DModel",
}


def register(spec: DiTSpec) -> DiTSpec:
    """Add a preset (its name is the key, lower-case), with its family's diffusers class."""
    if not spec.diffusers_class:
        family = next(k for k in PRESET_CLASSES if spec.name.lower().startswith(k))
        spec = replace(spec, diffusers_class=PRESET_CLASSES[family])
    _PRESETS[spec.name.lower()] = spec
    return spec


def _flux(name: str, text: int, source: str) -> DiTSpec:
    return DiTSpec(
        name=name,
        blocks=(BlockGroup("double", 19), BlockGroup("single", 38)),
        hidden_size=3072,
        num_attention_heads=24,
        head_dim=128,
        ffn_hidden_size=12288,
        text_tokens=text,
        latent_channels=16,
        text_encoders=(CLIP_L, T5_XXL.with_tokens(text)),
        embedder_params=0.07e9,
        vae=KL_2D,
        guidance_distilled=True,
        eager_traffic=EAGER_TRAFFIC["flux"],
        source=source,
    )


register(
    _flux(
        "flux.1-dev",
        512,
        "black-forest-labs/FLUX.1-dev transformer/config.json (19 double + 38 single blocks, "
        "24x128 heads, guidance_embeds true); FluxPipeline max_sequence_length=512; 16-channel "
        "8x VAE, 2x2 packing",
    )
)
register(
    _flux(
        "flux.1-schnell",
        256,
        "black-forest-labs/FLUX.1-schnell transformer/config.json (19 double + 38 single blocks, "
        "24x128 heads; timestep-distilled, run without CFG); max_sequence_length 256 for schnell",
    )
)


#: Wan 14B parameters outside the blocks (wan/modules/model.py WanModel, dim 5120): patch
#: embedding 16 x (1*2*2) x 5120, text embedding 4096x5120 + 5120x5120, time embedding
#: 256x5120 + 5120x5120, time projection 5120 x 6*5120, head 5120 x 16*(1*2*2).
WAN_14B_EMBEDDERS = (
    16 * 4 * 5120 + (4096 + 5120) * 5120 + (256 + 5120) * 5120 + 5120 * 30720 + 5120 * 64
)


def _wan(name: str, dim: int, ffn: int, heads: int, layers: int, **kw: Any) -> DiTSpec:
    kw.setdefault("vae", WAN21_VAE_FP32)
    kw.setdefault("vae_spatial", 8)
    return DiTSpec(
        name=name,
        blocks=(BlockGroup("cross", layers),),
        hidden_size=dim,
        num_attention_heads=heads,
        head_dim=128,
        ffn_hidden_size=ffn,
        text_tokens=512,
        vae_temporal=4,
        patch_size=2,
        text_encoders=(UMT5_XXL,),
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["wan"],
        **kw,
    )


register(
    _wan(
        "wan2.1-t2v-1.3b",
        1536,
        8960,
        12,
        30,
        latent_channels=16,
        embedder_params=0.03e9,
        source="Wan-AI/Wan2.1-T2V-1.3B config.json (dim 1536, ffn 8960, 12 heads, 30 layers, "
        "patch (1,2,2), text_len 512); Wan-VAE stride (4,8,8), z_dim 16; umT5-XXL encoder",
    )
)
register(
    _wan(
        "wan2.1-t2v-14b",
        5120,
        13824,
        40,
        40,
        latent_channels=16,
        embedder_params=WAN_14B_EMBEDDERS,
        source="Wan-AI/Wan2.1-T2V-14B config.json (dim 5120, ffn 13824, 40 heads, 40 layers, "
        "patch (1,2,2), text_len 512); Wan-VAE stride (4,8,8), z_dim 16",
    )
)
register(
    _wan(
        "wan2.2-t2v-a14b",
        5120,
        13824,
        40,
        40,
        latent_channels=16,
        embedder_params=WAN_14B_EMBEDDERS,
        experts=2,
        source="Wan-AI/Wan2.2-T2V-A14B high_noise_model/ and low_noise_model/config.json (each "
        "dim 5120, ffn 13824, 40 heads, 40 layers; one expert per step by the boundary "
        "timestep); Wan2.1 VAE",
    )
)
register(
    _wan(
        "wan2.2-ti2v-5b",
        3072,
        14336,
        24,
        30,
        latent_channels=48,
        vae_spatial=16,
        embedder_params=0.05e9,
        vae=WAN22_VAE,
        source="Wan-AI/Wan2.2-TI2V-5B config.json (dim 3072, ffn 14336, 24 heads, 30 layers, "
        "in_dim 48, patch (1,2,2)); Wan2.2 VAE 4x16x16, z_dim 48",
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
        text_encoders=(LLAVA_LLAMA3_8B, CLIP_L),
        embedder_params=0.35e9,
        vae=HUNYUAN_VAE,
        guidance_distilled=True,
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["hunyuanvideo"],
        source="tencent/HunyuanVideo (arXiv 2412.03603; diffusers HunyuanVideoTransformer3DModel: "
        "20 dual + 40 single blocks, 24x128 heads, mlp_ratio 4, patch 2/1, text_len 256, "
        "guidance_embeds true); 3D causal VAE 4x8x8, 16 channels; LLaVA-LLaMA-3-8B + CLIP-L",
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
        latent_channels=16,
        text_encoders=(CLIP_L, CLIP_G, T5_XXL.with_tokens(256)),
        embedder_params=0.06e9,
        vae=KL_2D,
        eager_traffic=EAGER_TRAFFIC["sd3.5"],
        source="stabilityai/stable-diffusion-3.5-large transformer/config.json (38 joint blocks, "
        "38x64 heads); text = 77 CLIP + 256 T5 tokens; 16-channel 8x VAE, patch 2",
    )
)
register(
    DiTSpec(
        name="sd3-medium",
        blocks=(BlockGroup("double", 24),),
        hidden_size=1536,
        num_attention_heads=24,
        head_dim=64,
        ffn_hidden_size=6144,
        text_tokens=333,
        latent_channels=16,
        text_encoders=(CLIP_L, CLIP_G, T5_XXL.with_tokens(256)),
        embedder_params=0.03e9,
        vae=KL_2D,
        eager_traffic=EAGER_TRAFFIC["sd3"],
        source="stabilityai/stable-diffusion-3-medium-diffusers transformer/config.json "
        "(SD3Transformer2DModel: num_layers 24, 24x64 heads, patch 2, joint_attention_dim 4096); "
        "text = 77 CLIP + 256 T5 tokens (StableDiffusion3Pipeline max_sequence_length 256)",
    )
)


def _cogvideox(
    name: str, layers: int, heads: int, patch_t: int, text: int, rope: bool = True, **kw: Any
) -> DiTSpec:
    return DiTSpec(
        name=name,
        blocks=(BlockGroup("joint", layers),),
        hidden_size=heads * 64,
        num_attention_heads=heads,
        head_dim=64,
        ffn_hidden_size=4 * heads * 64,
        text_tokens=text,
        vae_spatial=8,
        vae_temporal=4,
        patch_size=2,
        patch_size_t=patch_t,
        latent_channels=16,
        adaln_dim=512,
        text_encoders=(T5_XXL.with_tokens(text),),
        vae=COGVIDEOX_VAE,
        is_video=True,
        # CogVideoX-2b has no RoPE; 5b and 1.5 rotate Q and K of the video tokens
        eager_traffic=EAGER_TRAFFIC["cogvideox-5b" if rope else "cogvideox-2b"],
        **kw,
    )


register(
    _cogvideox(
        "cogvideox-2b",
        30,
        30,
        1,
        226,
        rope=False,
        embedder_params=0.02e9,
        source="THUDM/CogVideoX-2b transformer/config.json (30 layers, 30x64 heads, patch 2, "
        "max_text_seq_length 226, time_embed_dim 512); VAE 4x8x8, 16 channels",
    )
)
register(
    _cogvideox(
        "cogvideox-5b",
        42,
        48,
        1,
        226,
        embedder_params=0.03e9,
        source="THUDM/CogVideoX-5b transformer/config.json (42 layers, 48x64 heads, patch 2, "
        "max_text_seq_length 226, time_embed_dim 512); VAE 4x8x8, 16 channels",
    )
)
register(
    _cogvideox(
        "cogvideox1.5-5b",
        42,
        48,
        2,
        224,
        embedder_params=0.03e9,
        source="THUDM/CogVideoX1.5-5B transformer/config.json (42 layers, 48x64 heads, "
        "patch_size 2, patch_size_t 2, max_text_seq_length 224, time_embed_dim 512); "
        "VAE 4x8x8, 16 channels; the pipeline pads odd latent frame counts by one",
    )
)

register(
    DiTSpec(
        name="mochi-1",
        blocks=(BlockGroup("double", 48),),
        hidden_size=3072,
        num_attention_heads=24,
        head_dim=128,
        # SwiGLU of inner width 8192 (4 x 3072 x 2/3): three 3072x8192 matrices = the weights
        # and FLOPs of a plain MLP of width 12288.
        ffn_hidden_size=12288,
        context_dim=1536,
        text_tokens=256,
        vae_spatial=8,
        vae_temporal=6,
        patch_size=2,
        latent_channels=12,
        text_encoders=(T5_XXL.with_tokens(256),),
        embedder_params=0.1e9,
        vae=MOCHI_VAE,
        is_video=True,
        eager_traffic=EAGER_TRAFFIC["mochi"],
        source="genmo/mochi-1-preview transformer/config.json (MochiTransformer3DModel: 48 "
        "layers, 24x128 heads, patch 2, SwiGLU, max_sequence_length 256, pooled_projection_dim "
        "1536 = the text stream's width); "
        "VAE 6x8x8, 12 channels",
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
        latent_channels=16,
        text_encoders=(QWEN25_VL_7B,),
        text_encoder_params=8.3e9,
        embedder_params=0.03e9,
        vae=WAN21_VAE,
        eager_traffic=EAGER_TRAFFIC["qwen-image"],
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
        import difflib

        from .models import names as llm_names

        if key in llm_names():
            raise SpecError(
                f"{name!r} is a language-model preset, not a diffusion transformer (DiT): use "
                f"parastrat.models.get({key!r}) / parastrat.plan, or `parastrat plan --model "
                f"{key}`"
            ) from None
        close = difflib.get_close_matches(key, names(), n=3, cutoff=0.6)
        close += [n for n in names() if key and n not in close and (key in n)]
        hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
        raise SpecError(
            f"unknown DiT model {name!r}{hint}; known: {', '.join(names())} (or read a diffusers "
            "transformer config with DiTSpec.from_diffusers_config(path) / plan-dit --config)"
        ) from None


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
