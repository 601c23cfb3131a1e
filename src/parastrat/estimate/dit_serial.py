"""The serial parts of a diffusion generation: text encoding, the scheduler, the VAE decode.

They run outside the sharded transformer, so more devices do not shorten them (except the VAE
decode when a parallel VAE splits it):

* **Text encoders** (:class:`~parastrat.spec.text_encoder.TextEncoder`): once per prompt, twice
  with classifier-free guidance (the negative prompt), on one device: the slower of the FLOPs
  at the device's GEMM rate and streaming the weights once through HBM.
* **Scheduler step** (FlowMatchEuler / DPM-Solver, once per denoising step): a few fp32
  passes over the latent (:data:`SCHEDULER_PASSES`) plus the CFG combination of the two
  predictions, and their host-side launches.
* **VAE decode** (:class:`~parastrat.spec.vae.VAEDecoder`): convolution FLOPs at
  :data:`VAE_CONV_EFF` of the peak, at most :data:`VAE_CONV_CEILING` on Hopper (half that, the
  TF32 rate :data:`TF32_PER_BF16`, for an fp32 VAE), plus the element-wise traffic at HBM
  speed, times the work a tiled decode repeats in its overlaps; plus, where the VAE builds its
  causal mask row by row, one host operation per row while the device waits
  (``mask_host_s``).  A patch-parallel decode (xDiT's DistVAE, MindIE-SD
  ``--vae_parallel``) splits the frame's height over ``n`` devices: FLOPs and traffic divide by
  ``n``; each convolution then exchanges one boundary row with each neighbour and each group
  norm all-reduces its statistics.
* **Output post-processing** (``output_type``): a diffusers pipeline hands the decoded pixels
  back as PIL images by default -- copied to the host, converted to float32 channels-last,
  rounded to uint8 and wrapped per image/frame -- on the host CPU, per output element
  (:data:`POSTPROCESS_S_PER_ELEMENT`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec.cluster import Cluster
from ..spec.dit import DiTSpec
from ..spec.hardware import Accelerator
from . import efficiency

#: Fraction of the dense peak the VAE decoder's convolutions reach.  cuDNN implicit-GEMM
#: convolutions over 128-512 channels reach about half of the tensor-core peak in channels-last
#: layout; diffusers runs its VAEs channels-first (NCHW / NCDHW), which costs layout transposes
#: or slower kernels -- SGLang measured 1.6-1.7x faster video-VAE decodes on H100 from
#: switching Conv3d to channels-last (sgl-project/sglang PR 23200) -> ~0.30.
VAE_CONV_EFF = 0.30

#: Highest rate, FLOP/s, a diffusers VAE decoder (channels-first, eager, bf16) reaches on Hopper,
#: whatever the part's tensor peak: SGLang measured the stock diffusers ``AutoencoderKL`` decode
#: on one H200 at 89.9 ms for FLUX.1-schnell at 1024^2 (sgl-project/sglang PR 33818) and at
#: 97.6 / 437.2 ms for FLUX.2's at 1024^2 / 2048^2 (PR 33451); less the element-wise traffic
#: priced here, that is 1.05e13 FLOPs in 83 ms and 4.85e13 in 411 ms: 118-126 TFLOP/s, 12-13 %
#: of the 989 TFLOP/s peak, the same at both sizes (a rate, not an overhead).  SGLang reports
#: channels-first Conv3d 2.7-3.7x slower than channels-last on Hopper (PR 27431).  The parts'
#: own fraction (:data:`VAE_CONV_EFF`) stays the limit where it is lower: H20 (148 TFLOP/s peak,
#: 44 at 0.30) sits under this ceiling, as it sits under FlashAttention-2's mma.sync limit.
VAE_CONV_CEILING: dict[str, float] = {
    "h100": 1.2e14,
    "h800": 1.2e14,
    "h200": 1.2e14,
    "h20": 1.2e14,
}

#: TF32 tensor-core rate over the dense BF16 rate: 0.5 on every NVIDIA datasheet the presets
#: use (A100/A800 156 vs 312 TFLOP/s, H100/H800 SXM 495 vs 989, H20 74 vs 148, L40 90.5 vs
#: 181).  An fp32 VAE's convolutions run there: PyTorch lets cuDNN use TF32 for convolutions by
#: default (``torch.backends.cudnn.allow_tf32 = True``).  Devices without a published TF32 rate
#: take the same ratio.
TF32_PER_BF16 = 0.5

#: fp32 passes over the latent per scheduler step: FlowMatchEuler's step upcasts the sample and
#: the prediction (2 reads, 2 writes), forms ``sample + dt * pred`` (2 reads, 1 write) and casts
#: back (1 read, 1 write) -> ~9; CFG's ``uncond + s * (cond - uncond)`` adds 3 reads, 2 writes.
SCHEDULER_PASSES = 9
CFG_COMBINE_PASSES = 5
#: Host seconds per output element (pixel x channel x frame) to hand the decoded pixels back as
#: the pipeline's ``output_type`` asks.  diffusers' ``VaeImageProcessor.postprocess`` (and
#: ``VideoProcessor.postprocess_video`` frame by frame) runs ``pt_to_numpy`` --
#: ``.cpu().permute(0, 2, 3, 1).float().numpy()`` -- for "np", then ``numpy_to_pil`` --
#: ``(x * 255).round().astype("uint8")`` and one ``PIL.Image`` per image -- for "pil" (the
#: default of the FLUX, SD3, CogVideoX and Mochi pipelines and of xDiT's examples); "pt" keeps
#: the tensor on the device; "latent" also skips the VAE decode.  Measured with diffusers' own
#: functions by ``python benchmarks/dit_postprocess.py`` on this project's CI-class x86 host
#: (AMD EPYC, 2 threads), 1024^2 and 2048^2 RGB, four runs: "np" 4.1-4.9 ns, "pil" 7.5-13.7 ns
#: per element (numpy's passes are single-threaded; the host is shared, hence the spread)
#: -> 4.5 and 10 ns.  The device-to-host copy (2 bytes per element over PCIe, ~0.1 ns) is
#: inside the noise.
POSTPROCESS_S_PER_ELEMENT: dict[str, float] = {
    "pil": 1.0e-8,
    "np": 4.5e-9,
    "pt": 0.0,
    "latent": 0.0,
}

#: Seconds a VAE decode costs on top of its work when it is the process's first (the timed
#: call decodes "cold": buffers allocated, convolution algorithms chosen and their kernels
#: loaded for the first time).  xDiT PR #300 ("Enable warm up for VAE", 2024-10-10) measured
#: it on FLUX, two 2048x1024 images, 4 x L20, Ulysses 4: 7.27 s without a VAE warm-up, 7.02 s
#: with one (the plain VAE; 0.98 against 0.37 s for the first and second patch-parallel
#: decode).  Before that PR xDiT's ``prepare_run`` warmed the pipeline up with
#: ``output_type="latent"``, so its published image timings include it.
VAE_COLD_START_S = 0.25

#: Eager operations per step outside the transformer (scheduler step, CFG combination, timestep
#: embedding inputs, latent concatenation for the batch of two): ~20 launches.
SCHEDULER_OPS = 20


@dataclass(frozen=True)
class SerialParts:
    """Seconds of each serial part of one generation and what set them."""

    text_encode_s: float
    text_encoders: dict[str, float]
    scheduler_s: float
    vae_decode_s: float
    vae: dict[str, Any]
    postprocess_s: float = 0.0
    output_type: str = "pil"

    @property
    def total_s(self) -> float:
        """Seconds the request spends outside the denoising loop (text encoding, VAE decode,
        output conversion; the scheduler's steps are inside the loop's step time)."""
        return self.text_encode_s + self.vae_decode_s + self.postprocess_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each part in seconds, with the per-encoder and VAE details."""
        return {
            "text_encode_s": self.text_encode_s,
            "text_encoders": dict(self.text_encoders),
            "scheduler_s": self.scheduler_s,
            "vae_decode_s": self.vae_decode_s,
            "vae": dict(self.vae),
            "postprocess_s": self.postprocess_s,
            "output_type": self.output_type,
        }


def text_encode_times(model: DiTSpec, cluster: Cluster, prompts: int) -> dict[str, float]:
    """Seconds per text encoder for ``prompts`` prompts (2 with CFG: the negative prompt)."""
    accel = cluster.accel
    prof = efficiency.profile(accel)
    rate = accel.peak("bf16") * prof.gemm_fraction("bf16")
    out: dict[str, float] = {}
    for enc in model.text_encoders:
        compute = enc.flops / rate
        stream = efficiency.memory_time(accel, enc.weight_bytes(), prof)
        out[enc.name] = prompts * max(compute, stream)
    return out


def scheduler_time(model: DiTSpec, cluster: Cluster, latent_elements: int, cfg: bool) -> float:
    """Seconds of one scheduler step (and the CFG combination when guidance is on)."""
    accel = cluster.accel
    passes = SCHEDULER_PASSES + (CFG_COMBINE_PASSES if cfg else 0)
    gpu = efficiency.memory_time(accel, passes * 4.0 * latent_elements)
    return gpu + SCHEDULER_OPS * efficiency.host_op_time(accel)


def postprocess_time(
    model: DiTSpec, *, height: int, width: int, frames: int, output_type: str = "pil"
) -> float:
    """Host seconds to hand ``frames`` decoded ``height`` x ``width`` RGB frames back as
    ``output_type`` (see :data:`POSTPROCESS_S_PER_ELEMENT`); 0 without a VAE."""
    if model.vae is None:
        return 0.0
    elements = float(max(1, frames)) * height * width * model.vae.out_channels
    return elements * POSTPROCESS_S_PER_ELEMENT[output_type]


def vae_conv_rate(accel: Accelerator) -> float:
    """FLOP/s of a VAE decoder's convolutions in bf16 on ``accel``: :data:`VAE_CONV_EFF` of the
    dense peak, capped by the measured :data:`VAE_CONV_CEILING` where one is known."""
    return min(accel.peak("bf16") * VAE_CONV_EFF, VAE_CONV_CEILING.get(accel.name, float("inf")))


def vae_decode(
    model: DiTSpec,
    cluster: Cluster,
    *,
    height: int,
    width: int,
    frames: int,
    devices: int = 1,
    tiled: bool | None = None,
    nbytes: int = 2,
    cold: bool = False,
) -> tuple[float, dict[str, Any]]:
    """Seconds of the VAE decode on ``devices`` (patch-parallel when > 1) and its details.

    ``tiled=None`` follows the VAE's default (frame-wise/tiled decoding where the VAE has a
    tiling and the output is larger than one tile); ``True``/``False`` force it.  ``cold``:
    the decode is the process's first (:data:`VAE_COLD_START_S` on top).
    """
    vae = model.vae
    if vae is None:
        return 0.0, {"vae": None}
    accel = cluster.accel
    prof = efficiency.profile(accel)
    shape = model.latent_shape(height, width, frames)
    lh, lw = height // vae.spatial_factor, width // vae.spatial_factor
    nbytes = max(nbytes, vae.act_bytes)
    work = vae.work(shape.latent_frames, lh, lw, nbytes=nbytes)
    use_tiles = vae.tiling is not None and (vae.tiling.default if tiled is None else tiled)
    factor = vae.tile_factor(frames, height, width) if use_tiles else 1.0
    n = max(1, int(devices))
    rate = vae_conv_rate(accel) * (TF32_PER_BF16 if vae.precision == "fp32" else 1)
    conv_s = factor * work.conv_flops / (rate * n)
    act_s = factor * efficiency.memory_time(accel, work.act_bytes / n, prof)
    # the row-by-row mask: one eager slice assignment per row, issued by the host one after
    # another while the device (which has only the latent-resolution layers queued) waits
    rows = vae.mask_rows(shape.latent_frames, lh, lw, use_tiles)
    mask_s = rows * efficiency.host_op_time(accel)
    halo_s = norm_s = 0.0
    if n > 1:
        span = cluster.span(n)
        halo_s = cluster.collective_time("send_recv", work.halo_bytes, 2, span)
        norm_s = work.norms * cluster.collective_time("all_reduce", 2 * 32 * 4.0, n, span)
    cold_s = VAE_COLD_START_S if cold else 0.0
    total = conv_s + act_s + mask_s + halo_s + norm_s + cold_s
    detail = {
        "vae": vae.name,
        "precision": vae.precision,
        "conv_flops": work.conv_flops * factor,
        "act_bytes": work.act_bytes * factor,
        "tile_factor": factor,
        "tiled": use_tiles,
        "devices": n,
        "conv_s": conv_s,
        "activation_s": act_s,
        "mask_rows": rows,
        "mask_host_s": mask_s,
        "halo_s": halo_s,
        "norm_allreduce_s": norm_s,
        "cold_start_s": cold_s,
    }
    return total, detail
