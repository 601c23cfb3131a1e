"""VAE decoders of the DiT presets: their layer layout, and the work one decode does.

A latent-diffusion VAE decoder is a stack of resnet blocks (group norm, SiLU, 3x3 -- or 3x3x3
for the causal video VAEs -- convolution, twice, plus the residual add) at widening
resolutions, joined by upsamplers (nearest interpolation then a convolution, or a linear
depth-to-space projection in Mochi's VAE).  :class:`VAEDecoder` holds that layout as published
in each model's VAE config (``block_out_channels``, ``layers_per_block``, the temporal and
spatial expansions); :meth:`VAEDecoder.work` turns a latent size into

* ``conv_flops``: 2 x taps x C_in x C_out per output voxel of every convolution;
* ``act_bytes``: the element-wise traffic around them -- per resnet :data:`RESNET_PASSES`
  reads/writes of its activation (eager kernels, as diffusers runs them), plus the replicate
  padding copy a causal 3D convolution makes of its input (:data:`CAUSAL_PAD_PASSES`);
* ``halo_bytes``: what a spatially split (patch-parallel) decode exchanges between neighbours:
  one boundary row per side per 3x3 convolution;
* ``norms``: group norms (a patch-parallel decode all-reduces their statistics).

Two properties of how a VAE is *run* change its cost and are part of its preset:
``precision`` ("fp32" where the reference code keeps the VAE in float32: its convolutions then
run on TF32 tensor cores and every activation is 4 bytes) and ``causal_mask_rows`` (the
mid-block causal attention mask built one row per eager operation, which the host issues one
after the other while the device waits: :meth:`VAEDecoder.mask_rows` counts them).

Tiled decoding (diffusers ``enable_tiling``; HunyuanVideo's frame-wise decode) decodes
overlapping tiles and blends them: :meth:`VAEDecoder.tile_factor` is the work of all tiles over
the work of one untiled decode.  Everything is computed from the published shapes; the time
per FLOP and per byte is the estimator's business (``estimate/dit.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from ..errors import SpecError

#: Reads + writes of a resnet block's activation by its eager element-wise kernels and the
#: convolutions' own input/output (diffusers ``ResnetBlock2D``/``HunyuanVideoResnetBlockCausal3D``
#: forward: norm1 r+w, SiLU r+w, conv1 r+w, norm2 r+w, SiLU r+w, conv2 r+w, residual add 2r+w).
RESNET_PASSES = 15
#: A causal 3D convolution pads its input in time (``F.pad(..., mode="replicate")``): one more
#: read and write of the input per convolution.
CAUSAL_PAD_PASSES = 2
#: Nearest-neighbour upsampling: read the low-resolution tensor, write the high-resolution one.
UPSAMPLE_PASSES = 1.25
#: Input frames a causal 3x3x3 convolution caches between decoder calls (Wan2.1
#: wan/modules/vae.py ``CACHE_T = 2``: the last two frames of each causal convolution's input,
#: kept in ``feat_cache`` so the next latent frame's call can pad with them).
CACHE_T = 2


@dataclass(frozen=True)
class VAEStage:
    """``resnets`` resnet blocks of ``channels`` width at one resolution, followed by an
    upsampler by ``up_spatial`` per side and ``up_temporal`` in time (1: none)."""

    channels: int
    resnets: int
    up_spatial: int = 1
    up_temporal: int = 1


@dataclass(frozen=True)
class Tiling:
    """Tiled decoding in output pixels/frames: tiles of ``tile`` with ``stride`` between their
    starts (``stride < tile``: the overlap is decoded twice and blended); 0 = not tiled."""

    tile: int = 0
    stride: int = 0
    tile_frames: int = 0
    stride_frames: int = 0
    #: the pipeline tiles without being asked (HunyuanVideo's frame-wise decode, ...); False:
    #: only with ``enable_tiling()`` (``vae_tiling=True`` / ``--vae-tiling``)
    default: bool = True


@dataclass(frozen=True)
class VAEWork:
    """Work of one decode: convolution FLOPs, element-wise bytes, halo bytes per split
    boundary, group norms, and output voxels."""

    conv_flops: float
    act_bytes: float
    halo_bytes: float
    norms: int
    voxels: float


@dataclass(frozen=True)
class VAEMemory:
    """Device bytes of one VAE decode at its peak (the VAE's weights apart): ``cache`` (the
    causal convolutions' cached input frames between chunked calls), ``working`` (the live
    tensors of the largest stage, :meth:`VAEDecoder.live_tensors`), ``output`` (the decoded
    video, accumulated as the chunks finish); ``chunk_frames`` output frames per call at the
    full-resolution stage."""

    cache: float
    working: float
    output: float
    chunk_frames: float

    @property
    def total(self) -> float:
        """cache + working + output."""
        return self.cache + self.working + self.output


@dataclass(frozen=True)
class VAEDecoder:
    """A VAE decoder's layout (see the module docstring)."""

    name: str
    latent_channels: int
    #: Stages from the latent side (the mid block is ``mid_resnets`` more at stage 0's width).
    stages: tuple[VAEStage, ...]
    #: Temporal taps of the resnet convolutions (1: 2D VAE, 3: causal 3D VAE).
    kernel_t: int = 1
    #: Temporal taps of the upsampler convolution (HunyuanVideo's is 3D; CogVideoX's, Wan's 2D).
    up_kernel_t: int = 1
    #: "conv": interpolate then 3x3 conv; "linear": 1x1 projection to C*t*s*s, depth-to-space.
    up_kind: str = "conv"
    mid_resnets: int = 2
    #: Mid-block self-attention: "none", "frame" (per frame, 2D) or "video" (all latent voxels).
    mid_attention: str = "frame"
    #: Output pixels per decoder-output pixel per side (Wan2.2's VAE unpatchifies 2x2).
    unpatch: int = 1
    out_channels: int = 3
    tiling: Tiling | None = None
    #: "bf16"/"fp16" (2-byte activations) or "fp32" (the reference code keeps the VAE in float32).
    precision: str = "bf16"
    #: The mid-block causal mask is built with one slice assignment per row (a Python loop over
    #: the attention's sequence), each an eager operation the host issues while the device waits.
    causal_mask_rows: bool = False
    #: Latent frames per decoder call when the reference code decodes a video chunk by chunk
    #: with a cache of each causal convolution's last :data:`CACHE_T` input frames (Wan2.1
    #: ``WanVAE_.decode``: ``for i in range(iter_)`` over single latent frames); 0: the whole
    #: latent (or tile) in one call.
    decode_chunk_latent_frames: int = 0
    #: Parameters the pipeline holds on the device for this VAE (encoder included where the
    #: reference code loads the whole VAE); 0: not counted in memory.
    params: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if not self.stages:
            raise SpecError(f"VAE {self.name!r}: needs at least one stage")
        if self.up_kind not in ("conv", "linear") or self.mid_attention not in (
            "none",
            "frame",
            "video",
        ):
            raise SpecError(f"VAE {self.name!r}: bad up_kind/mid_attention")
        if self.precision not in ("bf16", "fp16", "fp32"):
            raise SpecError(f"VAE {self.name!r}: precision must be bf16, fp16 or fp32")

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element (4 for an fp32 VAE, else 2)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def temporal_factor(self) -> int:
        """Output frames per latent frame (after the first)."""
        f = 1
        for s in self.stages:
            f *= s.up_temporal
        return f

    @property
    def spatial_factor(self) -> int:
        """Output pixels per latent pixel per side."""
        f = self.unpatch
        for s in self.stages:
            f *= s.up_spatial
        return f

    def work(
        self, latent_frames: int, latent_h: int, latent_w: int, nbytes: int = 2, causal: bool = True
    ) -> VAEWork:
        """The work of decoding a ``latent_frames x latent_h x latent_w`` latent (untiled).

        Temporal upsampling of a causal VAE keeps the first frame: ``t -> 1 + (t - 1) * f``.
        """
        t, h, w = float(latent_frames), float(latent_h), float(latent_w)
        kt = self.kernel_t
        flops = act = halo = 0.0
        norms = 0
        c0 = self.stages[0].channels
        # conv_in and the mid block at the latent resolution
        vox = t * h * w
        flops += 2 * kt * 9 * self.latent_channels * c0 * vox
        act += 2 * c0 * vox * nbytes
        halo += 2 * kt * (t * w) * (self.latent_channels + c0) * nbytes
        if self.mid_attention != "none":
            n = h * w if self.mid_attention == "frame" else vox
            groups = t if self.mid_attention == "frame" else 1
            flops += groups * (4 * n * n * c0 + 8 * n * c0 * c0)
            act += 6 * c0 * vox * nbytes
        c_prev = c0
        stages = [VAEStage(c0, self.mid_resnets)] + list(self.stages)
        for st in stages:
            vox = t * h * w
            for r in range(st.resnets):
                cin = c_prev if r == 0 else st.channels
                conv = 2 * kt * 9 * (cin * st.channels + st.channels * st.channels) * vox
                short = 2 * cin * st.channels * vox if cin != st.channels else 0.0
                flops += conv + short
                passes = RESNET_PASSES + (2 * CAUSAL_PAD_PASSES if kt > 1 else 0)
                act += passes * st.channels * vox * nbytes
                halo += 2 * kt * (t * w) * (cin + st.channels) * nbytes
                norms += 2
                c_prev = st.channels
            if st.up_spatial > 1 or st.up_temporal > 1:
                t2 = 1 + (t - 1) * st.up_temporal if causal else t * st.up_temporal
                h2, w2 = h * st.up_spatial, w * st.up_spatial
                vox2 = t2 * h2 * w2
                c = st.channels
                if self.up_kind == "linear":
                    flops += 2 * c * c * vox2  # 1x1 projection to c * t * s * s, per input voxel
                    act += 2 * c * vox2 * nbytes
                else:
                    flops += 2 * self.up_kernel_t * 9 * c * c * vox2
                    act += UPSAMPLE_PASSES * 2 * c * vox2 * nbytes
                    halo += 2 * self.up_kernel_t * (t2 * w2) * 2 * c * nbytes
                t, h, w = t2, h2, w2
        vox = t * h * w
        flops += 2 * kt * 9 * c_prev * self.out_channels * vox  # conv_out
        act += 2 * c_prev * vox * nbytes
        voxels = vox * self.unpatch**2
        return VAEWork(conv_flops=flops, act_bytes=act, halo_bytes=halo, norms=norms, voxels=voxels)

    def decode_memory(
        self, latent_frames: int, latent_h: int, latent_w: int, *, tiled: bool = False
    ) -> VAEMemory:
        """Device bytes one decode holds at its peak, beyond the VAE's weights (see
        :class:`VAEMemory`).

        The decoder runs over a chunk: one call of :attr:`decode_chunk_latent_frames` latent
        frames (temporal upsampling doubles a steady chunk: no causal first frame), else the
        whole latent, or one tile of it when ``tiled``.  Activations are in :attr:`act_bytes`.
        """
        b = float(self.act_bytes)
        sf, tf = self.spatial_factor, self.temporal_factor
        chunk = self.decode_chunk_latent_frames
        t, h, w = float(chunk or latent_frames), float(latent_h), float(latent_w)
        tl = self.tiling if tiled else None
        if tl is not None and tl.tile:
            h, w = min(h, tl.tile // sf), min(w, tl.tile // sf)
            if tl.tile_frames and not chunk:
                t = min(t, tl.tile_frames // tf + 1)
        cached = bool(chunk) and self.kernel_t > 1
        # a clip of one chunk runs only the first call: no cache yet, no temporal upsampling
        steady = bool(chunk) and latent_frames > chunk
        cache = CACHE_T * self.latent_channels * h * w * b if cached else 0.0  # conv_in
        largest = 0.0
        c_last = self.stages[0].channels
        for st in (VAEStage(self.stages[0].channels, self.mid_resnets), *self.stages):
            largest = max(largest, st.channels * t * h * w * b)
            convs = 2 * st.resnets + (1 if st.up_temporal > 1 else 0)  # + the time conv
            cache += convs * CACHE_T * st.channels * h * w * b if cached else 0.0
            if st.up_spatial > 1 or st.up_temporal > 1:
                grow = t * st.up_temporal if steady else 1 + (t - 1) * st.up_temporal
                t, h, w = grow, h * st.up_spatial, w * st.up_spatial
            c_last = st.channels
        cache += CACHE_T * c_last * h * w * b if cached else 0.0  # the head's conv
        frames = 1 + (latent_frames - 1) * tf if self.kernel_t > 1 else latent_frames * tf
        output = self.out_channels * frames * (latent_h * sf) * (latent_w * sf) * b
        return VAEMemory(
            cache=cache if steady else 0.0,
            working=self.live_tensors(t, steady) * largest,
            output=output,
            chunk_frames=t,
        )

    def live_tensors(self, chunk_frames: float, steady: bool = True) -> float:
        """Tensors of the largest stage's size live at once inside one resnet block (Wan2.1
        ``ResidualBlock.forward`` and ``CausalConv3d.forward``): the block input (kept for the
        residual) and the activation feeding the convolution, then

        * a 2D (or 1-frame) convolution: its output -> 3;
        * a causal convolution on the whole clip: its replicate-padded copy
          (``(t + kt - 1) / t``) and its output -> ``4 + (kt - 1) / t``;
        * a cached chunk: the clone of the last :data:`CACHE_T` frames for the next chunk, the
          ``torch.cat`` of the cache with the input and ``F.pad``'s copy of that, live together
          -> ``2 + 2 (t + CACHE_T) / t + CACHE_T / t`` (5.5 for Wan's 4-frame chunks); the
          first chunk (``steady=False``) has no cache to concatenate: the clone and the
          zero-padded copy -> ``2 + (t + CACHE_T) / t + min(t, CACHE_T) / t``.
        """
        t = max(chunk_frames, 1.0)
        if self.kernel_t <= 1:
            return 3.0
        if not self.decode_chunk_latent_frames:
            return 4.0 + (self.kernel_t - 1) / t
        if not steady:
            return 2.0 + (t + CACHE_T) / t + min(t, CACHE_T) / t
        return 2.0 + 2.0 * (t + CACHE_T) / t + CACHE_T / t

    def mask_rows(self, latent_frames: int, latent_h: int, latent_w: int, tiled: bool) -> int:
        """Rows of the mid-block causal attention mask one decode builds: the attention's
        sequence length (latent frames x height x width) summed over the decoder calls.

        Tiled, the decoder runs once per tile; the tiles start every ``stride`` from 0 to the
        end (``range(0, size, stride)``, as the tiled decoders loop) and are cut at the edge;
        a temporal tile of ``tile_frames`` output frames holds ``tile_frames / t + 1`` latent
        frames (the causal first frame).  0 when the mask is not built row by row.
        """
        if not self.causal_mask_rows or self.mid_attention != "video":
            return 0
        tl = self.tiling if tiled else None

        def extents(size: int, tile: int, stride: int) -> list[int]:
            if not tile or not stride or size <= tile:
                return [size]
            return [min(tile, size - start) for start in range(0, size, stride)]

        sf, tf = self.spatial_factor, self.temporal_factor
        if tl is None:
            hs, ws, ts = [latent_h], [latent_w], [latent_frames]
        else:
            hs = extents(latent_h, tl.tile // sf, tl.stride // sf)
            ws = extents(latent_w, tl.tile // sf, tl.stride // sf)
            t_tile = tl.tile_frames // tf + 1 if tl.tile_frames else 0
            ts = extents(latent_frames, t_tile, tl.stride_frames // tf)
        return sum(ts) * sum(hs) * sum(ws)

    def tile_factor(self, frames: int, height: int, width: int) -> float:
        """Work of a tiled decode over an untiled one (1.0 when not tiled or one tile fits)."""
        if self.tiling is None:
            return 1.0
        tl = self.tiling

        def factor(size: int, tile: int, stride: int) -> float:
            if not tile or not stride or size <= tile:
                return 1.0
            n = ceil((size - tile) / stride) + 1
            covered = sum(min(tile, size - i * stride) for i in range(n))
            return covered / size

        return (
            factor(height, tl.tile, tl.stride)
            * factor(width, tl.tile, tl.stride)
            * factor(frames, tl.tile_frames, tl.stride_frames)
        )


# ---------------------------------------------------------------------------------------------
# The decoders the presets use (diffusers VAE configs; block widths listed encoder-first in the
# configs, decoder stages here from the latent side).
# ---------------------------------------------------------------------------------------------
#: SD3 / FLUX.1 AutoencoderKL: block_out_channels (128, 256, 512, 512), layers_per_block 2 (the
#: decoder runs 3 resnets per up block), mid block with attention, 16 latent channels;
#: enable_tiling tiles of sample_size 1024 with overlap 0.25 (stride 768).
KL_2D = VAEDecoder(
    name="autoencoder-kl-16ch",
    latent_channels=16,
    stages=(VAEStage(512, 3, 2), VAEStage(512, 3, 2), VAEStage(256, 3, 2), VAEStage(128, 3)),
    # enable_tiling(): tile_sample_min_size = sample_size (1024), tile_overlap_factor 0.25
    # (diffusers 0.39 autoencoder_kl.py); off unless the pipeline asks
    tiling=Tiling(tile=1024, stride=768, default=False),
    source="black-forest-labs/FLUX.1-dev vae/config.json; stabilityai/stable-diffusion-3-medium "
    "vae/config.json (AutoencoderKL, block_out_channels [128,256,512,512], layers_per_block 2, "
    "sample_size 1024)",
)

#: HunyuanVideo causal 3D VAE: block_out_channels (128, 256, 512, 512), layers_per_block 2,
#: 3x3x3 causal convs, upsampler convs 3D, time upsampling in up blocks 1 and 2, mid attention
#: over all latent voxels; frame-wise decode in tiles of 16 frames, stride 12 (default on),
#: spatial tiles 256 px, stride 192 (enable_tiling).
HUNYUAN_VAE = VAEDecoder(
    name="hunyuanvideo-vae",
    latent_channels=16,
    stages=(
        VAEStage(512, 3, 2, 1),
        VAEStage(512, 3, 2, 2),
        VAEStage(256, 3, 2, 2),
        VAEStage(128, 3),
    ),
    kernel_t=3,
    up_kernel_t=3,
    mid_attention="video",
    tiling=Tiling(tile=256, stride=192, tile_frames=16, stride_frames=12),
    source="hunyuanvideo-community/HunyuanVideo vae/config.json (AutoencoderKLHunyuanVideo: "
    "block_out_channels [128,256,512,512], layers_per_block 2, temporal ratio 4); tile sizes "
    "from diffusers 0.35 AutoencoderKLHunyuanVideo.__init__",
)

#: HunyuanVideo's VAE as its own repository ran it when xDiT measured HunyuanVideo on H100/H20
#: (docs/performance/hunyuanvideo.md: "benchmarks are done with the official HunyuanVideo
#: repository", Dec 2024): fp16 under autocast (--vae-precision fp16), tiling on by default
#: (--vae-tiling): spatial tiles of sample_size 256 px with overlap 0.25 (stride 192), temporal
#: tiles of sample_tsize 64 frames (16 latent + the causal first) with stride 48 (12 latent)
#: (hyvideo/vae/autoencoder_kl_causal_3d.py); and the mid-block causal mask built row by row,
#: ``for i in range(seq_len): mask[i, :(i_frame + 1) * n_hw] = 0`` (hyvideo/vae/
#: unet_causal_3d_blocks.py), vectorised only later (Tencent-Hunyuan/HunyuanVideo PR #208,
#: 2025-01-29: "very slow ... it needs to make 1000s of calls"; diffusers PR #10764, 2025-02-11).
HUNYUAN_VAE_2024 = replace(
    HUNYUAN_VAE,
    name="hunyuanvideo-vae-2024",
    tiling=Tiling(tile=256, stride=192, tile_frames=64, stride_frames=48),
    precision="fp16",
    causal_mask_rows=True,
    source="Tencent/HunyuanVideo (Dec 2024) hyvideo/vae: AutoencoderKLCausal3D tiling "
    "(sample_size 256, sample_tsize 64, overlap 0.25) and prepare_causal_attention_mask's row "
    "loop; fixed by Tencent-Hunyuan/HunyuanVideo PR #208 and diffusers PR #10764",
)

#: CogVideoX 3D VAE: block_out_channels (128, 256, 256, 512), layers_per_block 3 (4 resnets per
#: up block), causal 3x3x3 convs, 2D upsampler convs with time compression in the first two up
#: blocks, no mid attention.
COGVIDEOX_VAE = VAEDecoder(
    name="cogvideox-vae",
    latent_channels=16,
    stages=(
        VAEStage(512, 4, 2, 2),
        VAEStage(256, 4, 2, 2),
        VAEStage(256, 4, 2, 1),
        VAEStage(128, 4),
    ),
    kernel_t=3,
    mid_attention="none",
    decode_chunk_latent_frames=2,
    source="THUDM/CogVideoX-2b vae/config.json (AutoencoderKLCogVideoX: block_out_channels "
    "[128,256,256,512], layers_per_block 3, temporal_compression_ratio 4); diffusers "
    "AutoencoderKLCogVideoX._decode runs num_latent_frames_batch_size = 2 latent frames per "
    "call with a conv_cache of each causal conv's last 2 input frames",
)

#: Wan2.1 VAE: base_dim 96, dim_mult (1, 2, 4, 4) -> widths 384, 384, 192, 96 from the latent
#: side, num_res_blocks 2 (3 per up block), causal 3x3x3 convs, time upsampling in the first
#: two up blocks, per-frame mid attention.  (Its upsamplers also halve the width; taken at the
#: stage width here, an over-count of < 5 %.)  Qwen-Image uses the same decoder on one frame.
WAN21_VAE = VAEDecoder(
    name="wan2.1-vae",
    latent_channels=16,
    stages=(
        VAEStage(384, 3, 2, 2),
        VAEStage(384, 3, 2, 2),
        VAEStage(192, 3, 2, 1),
        VAEStage(96, 3),
    ),
    kernel_t=3,
    decode_chunk_latent_frames=1,
    params=127e6,
    # AutoencoderKLWan.enable_tiling(): 256 px tiles, stride 192 (diffusers 0.39
    # autoencoder_kl_wan.py); off unless the pipeline asks
    tiling=Tiling(tile=256, stride=192, default=False),
    source="Wan-AI/Wan2.1-T2V-14B-Diffusers vae/config.json (AutoencoderKLWan: base_dim 96, "
    "dim_mult [1,2,4,4], num_res_blocks 2, temperal_downsample [False,True,True]); decoded one "
    "latent frame per call with a 2-frame cache per causal conv (wan/modules/vae.py "
    "WanVAE_.decode, CACHE_T = 2); 127 M parameters (Wan2.1_VAE.pth, 508 MB in fp32; Wan "
    "report: Wan-VAE 127M), encoder and decoder both loaded on the device by WanVAE",
)

#: The Wan2.1 VAE as Wan's own code runs it: ``WanVAE(..., dtype=torch.float)`` (Wan2.1
#: wan/modules/vae.py; Wan2.2 keeps ``Wan2_1_VAE(dtype=torch.float)``) decodes in float32, so
#: its convolutions run on TF32 tensor cores and every activation is 4 bytes.
WAN21_VAE_FP32 = replace(
    WAN21_VAE,
    precision="fp32",
    tiling=None,  # Wan's own WanVAE has no tiled decode
    source=WAN21_VAE.source + "; Wan2.1 wan/modules/vae.py WanVAE(dtype=torch.float): fp32",
)

#: Wan2.2 VAE (TI2V-5B): decoder_base_dim 256, dim_mult (1, 2, 4, 4), z_dim 48, 16x spatial
#: compression = three 2x upsamplers and a 2x2 unpatchify, 4x temporal.
WAN22_VAE = VAEDecoder(
    name="wan2.2-vae",
    latent_channels=48,
    stages=(
        VAEStage(1024, 3, 2, 2),
        VAEStage(1024, 3, 2, 2),
        VAEStage(512, 3, 2, 1),
        VAEStage(256, 3),
    ),
    kernel_t=3,
    unpatch=2,
    decode_chunk_latent_frames=1,
    tiling=Tiling(tile=256, stride=192, default=False),  # AutoencoderKLWan.enable_tiling()
    source="Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json (AutoencoderKLWan: base_dim 160, "
    "decoder_base_dim 256, z_dim 48, dim_mult [1,2,4,4], patch_size 2, scale_factor_spatial 16)",
)

#: Mochi-1 VAE: decoder_block_out_channels (128, 256, 512, 768), layers_per_block
#: (3, 3, 4, 6, 3), temporal_expansions (1, 2, 3), spatial_expansions (2, 2, 2) by linear
#: depth-to-space projections, causal 3x3x3 convs, 12 latent channels, no decoder attention.
#: Its tiling applies only where a pipeline calls ``enable_vae_tiling`` (ParaAttention's
#: run_mochi.py does).
MOCHI_VAE = VAEDecoder(
    name="mochi-vae",
    latent_channels=12,
    stages=(
        VAEStage(768, 6, 2, 3),
        VAEStage(512, 4, 2, 2),
        VAEStage(256, 3, 2, 1),
        VAEStage(128, 3),
    ),
    kernel_t=3,
    up_kind="linear",
    mid_resnets=3,
    mid_attention="none",
    tiling=Tiling(tile=256, stride=192),
    source="genmo/mochi-1-preview vae/config.json (AutoencoderKLMochi: decoder_block_out_channels "
    "[128,256,512,768], layers_per_block [3,3,4,6,3], temporal_expansions [1,2,3]); "
    "enable_tiling: 256 px tiles, stride 192 (diffusers 0.35)",
)

__all__ = [
    "COGVIDEOX_VAE",
    "HUNYUAN_VAE",
    "HUNYUAN_VAE_2024",
    "KL_2D",
    "MOCHI_VAE",
    "WAN21_VAE",
    "WAN21_VAE_FP32",
    "WAN22_VAE",
    "Tiling",
    "VAEDecoder",
    "VAEMemory",
    "VAEStage",
    "VAEWork",
]
