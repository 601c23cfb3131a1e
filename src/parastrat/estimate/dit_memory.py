"""Per-device memory of one DiT generation, phase by phase.

A generation passes through three phases, each holding a different set of tensors on a device
(docs/dit-model.md, "Memory"):

1. **text encoding**: the text encoders run once per prompt (twice with guidance);
2. **denoising loop**: the transformer's weights (whole, TP-split, or FSDP shards plus the
   blocks gathered for their forward), one block's activations under Ulysses / ring / CFG;
3. **VAE decode**: on one rank (Wan: ``if self.rank == 0: videos = self.vae.decode(x0)``;
   xDiT without its parallel VAE likewise), its cached frames, working tensors and the decoded
   video (:meth:`~parastrat.spec.vae.VAEDecoder.decode_memory`).

:class:`DiTMemoryOptions` says how the run keeps its weights: whole on every device (the
default, as diffusers/xDiT pipelines moved ``.to("cuda")`` do), FSDP-sharded (Wan's
``--dit_fsdp`` / ``--t5_fsdp``), offloaded to the host between phases (Wan's
``--offload_model True``), in which dtype the parameters are stored, and whether the two
guidance branches run as one batch (diffusers) or one after the other (Wan's ``generate``).
Every constant below is a framework's documented behaviour; none is fitted to a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..spec.dit import DiTSpec
from ..spec.hardware import GiB

#: Bytes per element of each dtype a DiT run computes in or stores its parameters in (the
#: one table: :mod:`.dit` takes its compute precisions from it, all but fp32).
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "mxfp8": 1}

#: FSDP units whose gathered (unsharded) parameters can be live at once.  Wan's ``shard_model``
#: (wan/distributed/fsdp.py) builds PyTorch FSDP1 with FULL_SHARD, one unit per transformer
#: block (``lambda_auto_wrap_policy``: ``m in model.blocks``), MixedPrecision(param_dtype=bf16)
#: and the FSDP defaults ``forward_prefetch=False``, ``limit_all_gathers=True``: the rate
#: limiter (torch/distributed/fsdp/_limiter_utils.py, ``_max_num_inflight_all_gathers = 2``)
#: lets the next block's all-gather start while the freed block's memory is still in use on
#: the compute stream, so two blocks' gathered parameters are physically live.
FSDP_INFLIGHT_UNITS = 2

#: Hidden-width tensors live per token inside one text-encoder layer (T5/umT5: residual,
#: normed input, Q, K, V, attention output; the gated FFN's two 2.5x-wide projections and
#: their product ~7.5): what the text phase adds to the encoder's weights.
ENCODER_ACT_LIVE_H = 13.5

#: The phases of a generation, in order.
PHASES = ("text_encode", "denoise", "vae_decode")


@dataclass(frozen=True, kw_only=True)
class DiTMemoryOptions:
    """How a DiT run keeps its weights on the devices (one switch per field).

    * ``dit_fsdp``: the transformer's parameters are sharded (FSDP FULL_SHARD) over the ranks
      that hold the same TP slice (``ulysses * ring * cfg``; Wan: the whole sequence-parallel
      world; one rank keeps the whole model); each block is gathered whole, in the run's
      precision, for its forward
      (:data:`FSDP_INFLIGHT_UNITS` at once) and freed after it; the root unit (the embedders
      and the final layer) stays gathered after the first forward (FSDP1 does not reshard the
      root after forward: ``_post_forward_reshard`` in torch/distributed/fsdp/_runtime_utils.py).
    * ``encoder_fsdp``: the text encoders sharded the same way (Wan's ``--t5_fsdp``: umT5's
      24 blocks are the units; its 1.05 B-parameter token embedding is the root and stays
      gathered after the first prompt).
    * ``offload``: Wan's ``--offload_model True``: the text encoder is moved to the device for
      the prompts and back to the host after them; the transformer (on the device since the
      pipeline was built) is moved to the host before the VAE decode
      (wan/text2video.py ``generate``).
    * ``weight_precision``: the dtype the parameters are stored in (None: the run's
      ``precision``).  Wan2.1's checkpoint is float32 and ``generate`` runs it under
      ``amp.autocast(bf16)`` without converting it ("fp32"; Wan2.2 added
      ``--convert_model_dtype`` for that); FSDP shards keep the stored dtype and gather the
      compute precision.
    * ``cfg_batched``: the two guidance branches run as one batch of two (diffusers, xDiT);
      False: one after the other (Wan's ``generate`` calls the model for the conditional,
      then the unconditional prediction), so only one branch's activations are live.
    """

    dit_fsdp: bool = False
    encoder_fsdp: bool = False
    offload: bool = False
    weight_precision: str | None = None
    cfg_batched: bool = True

    def __post_init__(self) -> None:
        for name in ("dit_fsdp", "encoder_fsdp", "offload", "cfg_batched"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise SpecError(
                    f"DiTMemoryOptions.{name}={value!r} must be True or False "
                    f"(e.g. DiTMemoryOptions({name}=True))"
                )
        wp = self.weight_precision
        if wp is not None and (not isinstance(wp, str) or wp.lower() not in DTYPE_BYTES):
            raise SpecError(
                f"DiTMemoryOptions.weight_precision={wp!r} is not a stored dtype; known: "
                f"{', '.join(DTYPE_BYTES)}, or None for the run's precision"
            )
        if self.offload and (self.dit_fsdp or self.encoder_fsdp):
            raise SpecError(
                "DiTMemoryOptions: offload=True with FSDP sharding is not modelled (Wan offloads "
                "whole models on one GPU and shards without offloading on several); use "
                "offload=True alone for one device, or dit_fsdp/encoder_fsdp without offload"
            )

    @classmethod
    def wan_generate(cls, devices: int) -> DiTMemoryOptions:
        """Wan2.1 ``generate.py`` as its README runs the 14B model: on one GPU
        ``--offload_model True``; on several ``--dit_fsdp --t5_fsdp --ulysses_size N``
        (``offload_model`` then defaults to False).  The fp32 checkpoint is not converted and
        the guidance branches run one after the other."""
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise SpecError(f"devices={devices!r} must be a whole number >= 1")
        multi = devices > 1
        return cls(
            dit_fsdp=multi,
            encoder_fsdp=multi,
            offload=not multi,
            weight_precision="fp32",
            cfg_batched=False,
        )

    def to_dict(self) -> dict[str, Any]:
        """The options as a JSON-ready dict."""
        return {
            "dit_fsdp": self.dit_fsdp,
            "encoder_fsdp": self.encoder_fsdp,
            "offload": self.offload,
            "weight_precision": self.weight_precision,
            "cfg_batched": self.cfg_batched,
        }


def require_options(options: Any) -> DiTMemoryOptions:
    """``options`` as :class:`DiTMemoryOptions` (None: the defaults); SpecError otherwise."""
    if options is None:
        return DiTMemoryOptions()
    if not isinstance(options, DiTMemoryOptions):
        raise SpecError(
            f"memory={options!r} must be a DiTMemoryOptions (e.g. "
            "DiTMemoryOptions(dit_fsdp=True)) or None"
        )
    return options


@dataclass(frozen=True)
class MemoryPhase:
    """Bytes per device while one phase runs: ``parts`` by what holds them (``transformer``,
    ``transformer_gathered``, ``text_encoders``, ``text_encoders_gathered``, ``activations``,
    ``vae_weights``, ``vae_cache``, ``vae_working``, ``vae_output``, ``runtime``)."""

    name: str
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """The phase's bytes per device."""
        return sum(self.parts.values())

    def describe(self) -> str:
        """One line: the phase, its total and its non-zero parts in GiB."""
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in self.parts.items() if v)
        return f"{self.name} {self.total / GiB:.1f} GiB ({parts})"

    def to_dict(self) -> dict[str, Any]:
        """The parts with ``total``, JSON-ready."""
        return {**self.parts, "total": self.total}


@dataclass(frozen=True)
class Residency:
    """What the run keeps where, resolved from the model, the options and the strategy: bytes
    resident per device, before the phases decide which are on the device when."""

    transformer: float
    transformer_root: float
    transformer_gathered: float
    encoders: float
    encoders_root: float
    encoders_gathered: float
    encoder_activations: float
    vae_weights: float


def residency(
    model: DiTSpec,
    options: DiTMemoryOptions,
    *,
    nbytes: int,
    tp: int,
    shard_world: int,
    text_on_device: bool,
    prompts: int,
) -> Residency:
    """Bytes of each kept thing per device (see :class:`Residency`).  ``shard_world``: the
    ranks an FSDP unit is sharded over; ``prompts``: prompts encoded (2 with guidance)."""
    wbytes = DTYPE_BYTES[options.weight_precision.lower()] if options.weight_precision else nbytes
    blocks = sum(g.count * model.block_params(g.kind) for g in model.blocks) / tp
    whole = model.experts * (blocks + model.embedder_params) * wbytes
    root = gathered = 0.0
    transformer = whole
    if options.dit_fsdp and shard_world > 1:
        transformer = whole / shard_world
        largest = max(model.block_params(g.kind) for g in model.blocks) / tp
        gathered = FSDP_INFLIGHT_UNITS * largest * nbytes
        root = model.experts * model.embedder_params * nbytes
    enc_bytes = DTYPE_BYTES["bf16"]  # the presets' encoders (Wan: t5_dtype = torch.bfloat16)
    encoders = model.text_encoder_params * enc_bytes if text_on_device else 0.0
    enc_root = enc_gathered = 0.0
    if text_on_device and options.encoder_fsdp and shard_world > 1:
        encoders /= shard_world
        enc_root = sum(e.embed_params for e in model.text_encoders) * enc_bytes
        per_layer = [(e.params - e.embed_params) / e.layers for e in model.text_encoders]
        enc_gathered = FSDP_INFLIGHT_UNITS * max(per_layer, default=0.0) * enc_bytes
    enc_act = max(
        (
            prompts * e.tokens * e.hidden * ENCODER_ACT_LIVE_H * enc_bytes
            for e in model.text_encoders
        ),
        default=0.0,
    )
    vae = model.vae
    vae_weights = vae.params * vae.act_bytes if vae is not None else 0.0
    return Residency(
        transformer=transformer,
        transformer_root=root,
        transformer_gathered=gathered,
        encoders=encoders,
        encoders_root=enc_root,
        encoders_gathered=enc_gathered,
        encoder_activations=enc_act if text_on_device else 0.0,
        vae_weights=vae_weights,
    )


def memory_phases(
    model: DiTSpec,
    options: DiTMemoryOptions,
    kept: Residency,
    *,
    activations: float,
    runtime: float,
    latent: tuple[int, int, int],
    vae_devices: int,
    tiled: bool,
    decode: bool,
) -> tuple[MemoryPhase, ...]:
    """The three phases' bytes per device (rank 0, which also decodes).  An FSDP root, once
    gathered, stays gathered (a serving process holds it in every phase after its first
    request), so every phase counts it.  ``activations``: one
    block's live tensors in the loop; ``latent``: (frames, height, width) of the latent the VAE
    decodes; ``vae_devices`` > 1 splits the decode's working set and cache (patch-parallel);
    ``decode=False``: no VAE decode (``output_type="latent"``)."""
    off = options.offload
    text = MemoryPhase(
        PHASES[0],
        {
            "transformer": kept.transformer + kept.transformer_root,
            "text_encoders": kept.encoders + kept.encoders_root + kept.encoders_gathered,
            "activations": kept.encoder_activations,
            "vae_weights": kept.vae_weights,
            "runtime": runtime,
        },
    )
    # after the prompts: an offloaded encoder is back on the host; a sharded one keeps its
    # shards and its gathered root (FSDP1 does not reshard the root after forward)
    enc_after = 0.0 if off else kept.encoders + kept.encoders_root
    loop = MemoryPhase(
        PHASES[1],
        {
            "transformer": kept.transformer + kept.transformer_root,
            "transformer_gathered": kept.transformer_gathered,
            "text_encoders": enc_after,
            "activations": activations,
            "vae_weights": kept.vae_weights,
            "runtime": runtime,
        },
    )
    vae = model.vae
    dec = vae.decode_memory(*latent, tiled=tiled) if (vae is not None and decode) else None
    n = max(1, vae_devices)
    decode_phase = MemoryPhase(
        PHASES[2],
        {
            "transformer": 0.0 if off else kept.transformer + kept.transformer_root,
            "text_encoders": enc_after,
            "vae_weights": kept.vae_weights,
            "vae_cache": dec.cache / n if dec else 0.0,
            "vae_working": dec.working / n if dec else 0.0,
            "vae_output": dec.output if dec else 0.0,
            "runtime": runtime,
        },
    )
    return (text, loop, decode_phase)


@dataclass(frozen=True)
class Remedies:
    """What a run already does to save memory, so a hint names only what is left:
    ``devices`` per replica, the parallel VAE, tiled decoding (as priced), the text encoder on
    the device, and the weight options (:class:`DiTMemoryOptions`)."""

    devices: int = 1
    vae_parallel: bool = False
    #: the serving framework has a parallel VAE decode (diffusers 0.39 has none)
    vae_parallel_runs: bool = True
    #: the serving framework runs tensor parallelism for this model (xDiT and diffusers do not)
    tp_runs: bool = True
    vae_tiled: bool = False
    #: the VAE has a tiled decode (its ``tiling``): else tiling is no remedy
    vae_tileable: bool = True
    text_on_device: bool = True
    options: DiTMemoryOptions = field(default_factory=DiTMemoryOptions)


def memory_hint(phase: str, taken: Remedies | None = None) -> str:
    """How to bring the named phase (:data:`PHASES`) under the device's memory: the remedies
    ``taken`` does not use yet and can combine with (FSDP only on several devices and not
    with offloading; encoder sharding only for an encoder kept on the device)."""
    t = taken or Remedies()
    o = t.options
    shardable = t.devices > 1 and not o.offload
    fixes = []
    if phase == "vae_decode":
        if t.devices > 1 and not t.vae_parallel and t.vae_parallel_runs:
            fixes.append("decode with a parallel VAE (vae_parallel=True)")
        if t.vae_tileable and not t.vae_tiled:
            fixes.append("decode in tiles (vae_tiling=True)")
        if not (o.offload or o.dit_fsdp or o.encoder_fsdp):
            fixes.append(
                "move the transformer off the device first (DiTMemoryOptions(offload=True))"
            )
    else:
        if phase == "denoise":
            fixes.append(
                "use more devices for TP"
                if t.tp_runs
                else "use more devices to split the sequence (the weights stay whole on each)"
            )
            if shardable and not o.dit_fsdp:
                fixes.append("shard the transformer over them (DiTMemoryOptions(dit_fsdp=True))")
        if t.text_on_device and not o.encoder_fsdp:
            fixes.append("keep the text encoder on the host (text_encoder_on_device=False)")
        if phase == "text_encode" and shardable and t.text_on_device and not o.encoder_fsdp:
            fixes.append("shard the text encoder (DiTMemoryOptions(encoder_fsdp=True))")
    fixes.append("use a device with more memory")
    return ", or ".join(fixes)


__all__ = [
    "DTYPE_BYTES",
    "FSDP_INFLIGHT_UNITS",
    "PHASES",
    "DiTMemoryOptions",
    "MemoryPhase",
    "Remedies",
    "Residency",
    "memory_hint",
    "memory_phases",
    "require_options",
    "residency",
]
