"""Latency and memory of diffusion-transformer inference under Ulysses, ring, CFG and TP.

:func:`estimate_dit` prices one generation (all denoising steps, then the VAE decode) of a
:class:`~parastrat.spec.dit.DiTSpec` on a :class:`~parastrat.Cluster` under a
:class:`~parastrat.Strategy` (``ulysses``, ``ring``, ``cfg``, ``tp``; ``dp`` replicas serve
other requests and do not change the latency).  The model, stated once (docs/dit-model.md):

* **Sequence split** (xDiT / yunchang USP): image/video tokens are split over the
  ``sp = ulysses * ring`` ranks, padded up to a multiple of ``sp`` when they do not divide;
  text tokens are replicated on every sequence-parallel rank (yunchang's joint-tensor strategy),
  each rank using its head slice of them.  Ulysses turns the sequence split into a head split
  with four all-to-alls per attention (Q, K, V, output); ring keeps the sequence split and
  passes K/V blocks ``ring - 1`` hops around the ring, each hop overlapped with the attention
  of the block already there, plus a memory-bound merge of partial outputs per hop.
* **TP** (Megatron-style, no sequence parallelism): matrices split by columns then rows, one
  all-reduce of the block's activations per row-split matrix; weights are divided by TP.
* **CFG**: guidance runs a conditional and an unconditional branch.  Without CFG parallelism
  both run on every device as a batch of two; with ``cfg=2`` each half of the devices runs one
  branch and the noise predictions are all-gathered once per step.
* Compute (:mod:`.dit_step`, one record per block kind): GEMMs through
  :func:`parastrat.estimate.efficiency.gemm_time` (shape-aware); the attention core at a
  forward-only flash-attention efficiency (:data:`.dit_step.ATTN_FWD_EFF`); element-wise
  kernels (norms, modulation, gates, RoPE, activations) as HBM traffic.
  Communication only through :meth:`Cluster.collective_time`.
* Outside the loop: text encoding and the VAE decode (on one device unless ``vae_parallel``).
* Memory per device, phase by phase (text encoding, denoising, VAE decode), with how the run
  keeps its weights (FSDP shards, offloading, stored dtype) in a
  :class:`~parastrat.estimate.dit_memory.DiTMemoryOptions` (:mod:`.dit_memory`).

Every constant is physical and documented; none is fitted to the comparisons in
docs/accuracy-dit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import SpecError, StrategyError, UsageError, Violation
from ..spec.cluster import Cluster, require_cluster
from ..spec.dit import DiTSpec, ceil_div
from ..spec.dit import get as get_dit
from ..spec.dit_frameworks import DiTFramework, LaunchSwitches, get_framework
from ..spec.hardware import Accelerator, GiB, require_precision
from ..strategy import XDIT_ORDER, Strategy, require_strategy
from .dit_memory import (
    DTYPE_BYTES,
    DiTMemoryOptions,
    MemoryPhase,
    Remedies,
    memory_hint,
    memory_phases,
    residency,
)
from .dit_options import DiTRequest, DiTSwitches, resolve_dit
from .dit_serial import (
    SerialParts,
    postprocess_time,
    text_encode_times,
    vae_decode,
)
from .dit_step import DeviceShard, StepTime, attention_efficiency, step_time

#: Live activation tensors per token while one block runs (inference keeps nothing for a
#: backward pass): hidden-width residual, normed, modulated, attention output, text stream and
#: one spare -> 6 x hidden; Q, K, V and the Ulysses all-to-all buffers -> 2 x (q + 2 kv) / tp;
#: MLP hidden before and after the activation -> 2 x ffn / tp.
ACT_LIVE_H = 6

#: Device memory outside the model: CUDA/CANN context, cuBLAS/flash workspaces, NCCL/HCCL
#: buffers and allocator fragmentation (typically 1-3 GiB on 80 GB parts).
RUNTIME_RESERVE_BYTES = 2 * GiB

#: Bytes per element of the precisions a DiT run computes in (fp32 is a stored dtype only).
BYTES = {k: v for k, v in DTYPE_BYTES.items() if k != "fp32"}


# ---------------------------------------------------------------------------------------------
# Report pieces.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenSplit:
    """How the workload's tokens land on one device.

    ``video`` image/video tokens in total, ``text`` text tokens (replicated on every
    sequence-parallel rank when they join the attention), ``sp`` the sequence split,
    ``per_device`` image/video tokens each rank holds (``ceil(video / sp)``), ``padding`` the
    tokens added so ``sp`` divides them, ``sequence`` the self-attention length
    (video + joint text) before padding.
    """

    video: int
    text: int
    sequence: int
    sp: int
    per_device: int
    padding: int
    text_in_sequence: bool

    @property
    def padded(self) -> int:
        """Image/video tokens after padding (``per_device * sp``): what the sequence-parallel ranks
        process together."""
        return self.video + self.padding

    def to_dict(self) -> dict[str, Any]:
        """The split as a JSON-ready dict (with ``padded``): the ``tokens`` entry of
        :meth:`DiTReport.to_dict`."""
        return {
            "video": self.video,
            "text": self.text,
            "sequence": self.sequence,
            "sp": self.sp,
            "per_device": self.per_device,
            "padding": self.padding,
            "padded": self.padded,
            "text_in_sequence": self.text_in_sequence,
        }


@dataclass(frozen=True)
class DiTMemory:
    """Bytes per device.  ``weights`` (transformer: whole, divided by TP, or FSDP shards plus
    the gathered blocks and root), ``encoders`` (text encoders on the device), ``activations``
    (one block's live tensors: divided by the sequence split, doubled by a batched CFG pair),
    ``other`` (runtime reserve) are the denoising loop's; ``phases`` holds every phase of the
    generation (text encoding, denoising, VAE decode: :mod:`~parastrat.estimate.dit_memory`),
    and :attr:`total` is the largest of them (:attr:`peak_phase`)."""

    weights: float
    encoders: float
    activations: float
    other: float
    capacity: float
    phases: tuple[MemoryPhase, ...] = ()
    #: What the run already does to save memory (what :meth:`hint` leaves out).
    taken: Remedies = field(default_factory=Remedies, compare=False)

    def hint(self) -> str:
        """How to bring the peak phase under the device's memory, of what the run does not
        do yet (:func:`~parastrat.estimate.dit_memory.memory_hint`)."""
        return memory_hint(self.peak_phase, self.taken)

    @property
    def peak(self) -> MemoryPhase:
        """The phase that needs the most bytes (the loop's parts when no phases are given)."""
        if self.phases:
            return max(self.phases, key=lambda p: p.total)
        loop = {"transformer": self.weights, "text_encoders": self.encoders}
        loop.update(activations=self.activations, runtime=self.other)
        return MemoryPhase("denoise", loop)

    @property
    def peak_phase(self) -> str:
        """Name of the phase that needs the most bytes ("text_encode", "denoise", "vae_decode")."""
        return self.peak.name

    @property
    def total(self) -> float:
        """Bytes per device at the peak phase (what :meth:`fits` compares with the capacity)."""
        return self.peak.total

    @property
    def peak_bytes(self) -> float:
        """The same as :attr:`total`, under the name
        :class:`~parastrat.estimate.memory.MemoryReport` uses, so code reads either report's peak
        alike."""
        return self.total

    def fits(self, capacity: float | None = None) -> bool:
        """Whether the peak phase fits ``capacity`` bytes (default: the device's memory)."""
        return self.total <= (self.capacity if capacity is None else capacity)

    def to_dict(self) -> dict[str, Any]:
        """The breakdown as a JSON-ready dict, with ``total``, ``peak_phase``, ``phases`` and
        ``fits`` (against the device's capacity) added."""
        return {
            "weights": self.weights,
            "encoders": self.encoders,
            "activations": self.activations,
            "other": self.other,
            "total": self.total,
            "peak_phase": self.peak_phase,
            "phases": {p.name: p.to_dict() for p in self.phases},
            "capacity": self.capacity,
            "fits": self.fits(),
        }


@dataclass(frozen=True)
class DiTReport:
    """What one generation costs under one strategy.

    ``latency_s`` is the whole request (steps x ``per_step_s`` + text encoding + VAE decode);
    ``breakdown`` gives seconds over the whole request per component and sums to
    ``latency_s``; ``hidden`` gives communication that compute hides (not in the latency).
    """

    model: str
    strategy: Strategy
    accelerator: str
    devices: int
    height: int
    width: int
    frames: int
    steps: int
    guidance: bool
    latency_s: float
    per_step_s: float
    memory: DiTMemory
    breakdown: dict[str, float]
    hidden: dict[str, float]
    tokens: TokenSplit
    warnings: list[str] = field(default_factory=list)
    #: The serial parts in detail (:class:`~parastrat.estimate.dit_serial.SerialParts`).
    serial: dict[str, Any] = field(default_factory=dict)
    compiled: bool = False
    #: The switches it was priced with that a launch must repeat
    #: (:class:`~parastrat.spec.dit_frameworks.LaunchSwitches`).
    switches: LaunchSwitches = field(default_factory=LaunchSwitches)

    @property
    def requests_per_s(self) -> float:
        """Throughput with ``dp`` replicas each serving its own request."""
        return (self.strategy.dp or 1) / self.latency_s

    def to_dict(self) -> dict[str, Any]:
        """The whole report as one JSON-ready dict: the ``report`` entry of each candidate in
        ``parastrat plan-dit --format json``."""
        return {
            "model": self.model,
            "strategy": self.strategy.to_dict(),
            "strategy_str": str(self.strategy),
            "accelerator": self.accelerator,
            "devices": self.devices,
            "height": self.height,
            "width": self.width,
            "frames": self.frames,
            "steps": self.steps,
            "guidance": self.guidance,
            "latency_s": self.latency_s,
            "per_step_s": self.per_step_s,
            "requests_per_s": self.requests_per_s,
            "memory": self.memory.to_dict(),
            "breakdown": dict(self.breakdown),
            "hidden": dict(self.hidden),
            "tokens": self.tokens.to_dict(),
            "warnings": list(self.warnings),
            "serial": dict(self.serial),
            "compiled": self.compiled,
        }


# ---------------------------------------------------------------------------------------------
# Inputs.
# ---------------------------------------------------------------------------------------------
def as_inference(strategy: Strategy) -> Strategy:
    """The strategy on the xDiT grid (``tp-sp-pp-cfg-dp``): ring-only or TP-only strategies
    built without an order get Megatron's order by default; the degrees are the same."""
    require_strategy(strategy, "estimate_dit()")
    if strategy.is_inference:
        return strategy
    # Re-reading the degrees on the xDiT grid lets the Strategy's own rules refuse what
    # inference cannot express (ep > 1: rule inference-ep; vpp > 1: inference-vpp).
    return Strategy(
        tp=strategy.tp,
        pp=strategy.pp,
        vpp=strategy.vpp,
        ep=strategy.ep,
        ulysses=strategy.ulysses,
        ring=strategy.ring,
        cfg=strategy.cfg,
        dp=strategy.dp,
        order=XDIT_ORDER,
    )


def resolve_guidance(model: DiTSpec, guidance: bool | None) -> bool:
    """Whether the run uses classifier-free guidance (two branches per step).

    ``None`` follows the model: guidance-distilled models (the guidance scale is an input
    embedding: FLUX.1-dev/schnell, HunyuanVideo) run one branch, the others two.  ``True`` /
    ``False`` override; anything else is a :class:`SpecError`.
    """
    if guidance is None:
        return not model.guidance_distilled
    if not isinstance(guidance, bool):
        raise SpecError(
            f"guidance={guidance!r} must be True, False or None (None follows the model: "
            f"{model.name} {'is' if model.guidance_distilled else 'is not'} guidance-distilled)"
        )
    return guidance


def _precision(precision: str, accel: Accelerator) -> int:
    """Bytes per element of ``precision``; SpecError for one the DiT model does not know or a
    quantised one ``accel`` has no tensor cores for (:func:`require_precision`)."""
    try:
        nbytes = BYTES[precision.lower()]
    except (KeyError, AttributeError):
        raise SpecError(f"unknown precision {precision!r}; known: {', '.join(BYTES)}") from None
    require_precision(accel, precision)
    return nbytes


def _memory(run: _Run, shard: DeviceShard, latent_frames: int, tiled: bool) -> DiTMemory:
    """Bytes per device, phase by phase (:mod:`~parastrat.estimate.dit_memory`): the
    weights as the run keeps them, the activations of the guidance branches live at once
    (``DiTMemoryOptions.cfg_batched``), the text encoders and the VAE decode of
    ``latent_frames`` at the output's pixel size (``tiled``: the decode is tiled)."""
    model, opts, s, out = run.model, run.switches.memory_options, run.s, run.request
    kept = residency(
        model,
        opts,
        nbytes=shard.nbytes,
        tp=s.tp,
        shard_world=s.ulysses * s.ring * s.cfg,
        text_on_device=run.switches.text_encoder_on_device,
        prompts=run.branches,
    )
    activations = _activation_bytes(model, s, shard, shard.batch if opts.cfg_batched else 1)
    vae = model.vae
    size = (out.height // vae.spatial_factor, out.width // vae.spatial_factor) if vae else None
    phases = memory_phases(
        model,
        opts,
        kept,
        activations=activations,
        runtime=RUNTIME_RESERVE_BYTES,
        latent=(latent_frames, *size) if size else (latent_frames, out.height, out.width),
        vae_devices=run.vae_devices,
        tiled=tiled,
        decode=out.output_type != "latent",
    )
    loop = phases[1].parts
    return DiTMemory(
        weights=loop["transformer"] + loop["transformer_gathered"],
        encoders=loop["text_encoders"],
        activations=activations,
        other=RUNTIME_RESERVE_BYTES,
        capacity=run.cluster.accel.memory_bytes,
        phases=phases,
        taken=run.remedies(tiled),
    )


def _activation_bytes(model: DiTSpec, s: Strategy, shard: DeviceShard, batch: int) -> float:
    """Live activations of one block for ``batch`` guidance branches (:data:`ACT_LIVE_H`),
    plus the ring's double-buffered K/V blocks."""
    nbytes, tp = shard.nbytes, s.tp
    f, q, kv = model.ffn_hidden_size, model.inner_dim, model.kv_dim
    img, txt = batch * shard.per_dev, batch * model.text_tokens
    activations = (
        (img + txt) * nbytes * (ACT_LIVE_H * model.hidden_size + 2 * (q + 2 * kv) / tp + 2 * f / tp)
    )
    if s.ring > 1:
        kv_loc = model.query_groups * model.head_dim / (s.tp * s.ulysses)
        # double-buffered K/V blocks, or the ring group's whole K and V when gathered
        blocks = s.ring if shard.ring_gather else 2
        activations += 2 * blocks * (s.ulysses * img) * kv_loc * nbytes
    return activations


def estimate_dit(
    model: DiTSpec | str,
    strategy: Strategy,
    cluster: Cluster,
    request: DiTRequest | None = None,
    switches: DiTSwitches | None = None,
    *,
    height: int | None = None,
    width: int | None = None,
    frames: int | None = None,
    steps: int | None = None,
    guidance: bool | None = None,
    output_type: str | None = None,
    precision: str | None = None,
    compiled: bool | None = None,
    vae_parallel: bool | None = None,
    vae_tiling: bool | None = None,
    vae_cold: bool | None = None,
    text_encoder_on_device: bool | None = None,
    attention_eff: float | None = None,
    memory: DiTMemoryOptions | None = None,
    framework: str | DiTFramework | None = None,
) -> DiTReport:
    """Latency, memory and its breakdown for one generation of ``model`` under ``strategy``.

    Typed form: ``estimate_dit(model, strategy, cluster, request, switches)`` with a
    :class:`~parastrat.estimate.dit_options.DiTRequest` (what is generated) and
    :class:`~parastrat.estimate.dit_options.DiTSwitches` (how it runs); the keyword form
    (``height=..., width=..., steps=..., compiled=...``) builds them, an omitted keyword taking
    its field's default (the fields say what each one means).

    ``strategy`` holds ``ulysses``, ``ring``, ``cfg`` (2 needs guidance), ``tp`` and
    optionally ``dp`` (replicas for throughput).  ``guidance=None`` (the default) follows the
    model: classifier-free guidance (two branches per step) unless the model is
    guidance-distilled (FLUX.1, HunyuanVideo: one branch).  The serial parts (text encoders,
    scheduler, VAE decode, output post-processing) are in ``.serial``; ``.memory`` reports
    every phase (text encoding, denoising, VAE decode) and the peak one.
    Raises :class:`SpecError` for a workload the
    VAE/patch cannot split or ``steps < 1``, :class:`StrategyError` for a strategy the model or
    cluster cannot take (heads vs Ulysses/TP, more devices than the cluster has, more
    sequence ranks than tokens); padding is reported in ``.warnings``.
    """
    request, switches = resolve_dit(
        request,
        switches,
        who="estimate_dit",
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        guidance=guidance,
        output_type=output_type,
        precision=precision,
        compiled=compiled,
        vae_parallel=vae_parallel,
        vae_tiling=vae_tiling,
        vae_cold=vae_cold,
        text_encoder_on_device=text_encoder_on_device,
        attention_eff=attention_eff,
        memory=memory,
        framework=framework,
    )
    return _estimate(_resolve(model, strategy, cluster, request, switches))


def _estimate(run: _Run) -> DiTReport:
    """The report of one checked run (:func:`estimate_dit`)."""
    req, sw = run.request, run.switches
    shape = run.model.latent_shape(req.height, req.width, req.frames)
    tokens, warnings = _admit(run, shape)
    serving = run.framework
    if tokens.padding and serving.pad_note:
        warnings.append(f"padding: {serving.pad_note}")
    shard = replace(_device_shard(run, tokens), ring_gather=serving.ring_gather)
    step, serial = _timed(run, shard)
    latency = req.steps * step.total + serial.total_s
    warnings += _latency_warnings(run, step, serial, latency, tokens.video)
    memory_rep = _memory(run, shard, shape.latent_frames, bool(serial.vae.get("tiled", False)))
    warnings += _memory_warnings(memory_rep, run.cluster.accel)
    return DiTReport(
        model=run.model.name,
        strategy=run.s,
        accelerator=run.cluster.accel.name,
        devices=run.devices,
        height=req.height,
        width=req.width,
        frames=req.frames,
        steps=req.steps,
        guidance=run.guidance,
        latency_s=latency,
        per_step_s=step.total,
        memory=memory_rep,
        breakdown=_breakdown(step, serial, req.steps),
        hidden={"ring_kv_exchange": req.steps * step.ring_hidden},
        tokens=tokens,
        warnings=warnings,
        serial=serial.to_dict(),
        compiled=sw.compiled,
        switches=replace(sw.launch_switches, model_class=run.model.diffusers_class or ""),
    )


@dataclass(frozen=True)
class _Run:
    """One generation's inputs, checked and with their defaults resolved: what the phases of
    :func:`estimate_dit` read.  ``guidance`` is resolved (the request's ``guidance`` None
    when the model chose it); ``s`` is the strategy on the xDiT grid."""

    model: DiTSpec
    s: Strategy
    cluster: Cluster
    request: DiTRequest
    switches: DiTSwitches
    guidance: bool

    @property
    def guidance_given(self) -> bool:
        """Whether the caller set guidance (rather than the model's default)."""
        return self.request.guidance is not None

    @property
    def branches(self) -> int:
        """Guidance branches per step (prompts the text encoders encode)."""
        return 2 if self.guidance else 1

    @property
    def devices(self) -> int:
        """Devices the strategy takes, replicas included."""
        return self.s.model_parallel_size * (self.s.dp or 1)

    @property
    def framework(self) -> DiTFramework:
        """The serving framework the run is priced for (the vendor's default when unnamed)."""
        return get_framework(self.switches.framework, self.cluster.accel.vendor)

    def remedies(self, tiled: bool) -> Remedies:
        """What this run already does to save memory (``tiled``: its decode is tiled)."""
        sw = self.switches
        return Remedies(
            devices=self.s.model_parallel_size,
            vae_parallel=sw.vae_parallel,
            vae_parallel_runs=self.framework.parallel_vae_for(self.model),
            tp_runs=self.framework.runs_tp(self.model),
            vae_tiled=tiled,
            vae_tileable=self.model.vae is not None and self.model.vae.tiling is not None,
            text_on_device=sw.text_encoder_on_device,
            options=sw.memory_options,
        )

    @property
    def vae_devices(self) -> int:
        """Devices the VAE decode runs on: every model-parallel one with ``vae_parallel``."""
        s = self.s
        return (s.tp * (s.ulysses * s.ring) * s.cfg) if self.switches.vae_parallel else 1


def _resolve(
    model: DiTSpec | str,
    strategy: Strategy,
    cluster: Cluster,
    request: DiTRequest,
    switches: DiTSwitches,
) -> _Run:
    """The checked inputs of :func:`estimate_dit`; SpecError for a model, cluster or workload
    it cannot take."""
    model = get_dit(model)
    cluster = require_cluster(cluster, "estimate_dit()")
    model.latent_shape(request.height, request.width, request.frames)
    run = _Run(
        model=model,
        s=as_inference(strategy),
        cluster=cluster,
        request=request,
        switches=switches,
        guidance=resolve_guidance(model, request.guidance),
    )
    refused = run.framework.vae_parallel_violation(model) if switches.vae_parallel else None
    if refused is not None:  # the framework's launch for this class may have none
        raise UsageError(f"{refused.message}; {refused.hint}")
    return run


def _admit(run: _Run, shape: Any) -> tuple[TokenSplit, list[str]]:
    """The token split of a run the model and cluster can take, and the warnings so far
    (the strategy's soft rules, padding, true CFG on a distilled model); StrategyError
    listing every refusal otherwise."""
    model, s, cluster = run.model, run.s, run.cluster
    size = run.request.size
    problems = _refusals(
        model, s, cluster, run.guidance, run.guidance_given, run.devices, (shape.tokens, size)
    )
    if problems:
        raise StrategyError(problems)
    warnings = [
        f"{v.rule}: {v.message} ({v.hint})"
        for v in s.warnings(model, devices_per_node=cluster.scale_up_domain)
    ]
    tokens = _token_split(model, s, shape.tokens)
    warnings += _token_warnings(model, tokens, shape, run.guidance)
    return tokens, warnings


def _device_shard(run: _Run, tokens: TokenSplit) -> DeviceShard:
    """What one device runs per step; SpecError for an unknown precision or an attention
    efficiency outside (0, 1]."""
    s, sw = run.s, run.switches
    return DeviceShard(
        batch=run.branches // s.cfg,  # branches each device runs per step (1 or 2)
        per_dev=tokens.per_device,
        text=run.model.text_tokens,
        tp=s.tp,
        ulysses=s.ulysses,
        ring=s.ring,
        nbytes=_precision(sw.precision, run.cluster.accel),
        precision=sw.precision,
        compiled=sw.compiled,
        attention_eff=_attention_eff(run.cluster.accel, run.model, sw.attention_eff),
    )


def _timed(run: _Run, shard: DeviceShard) -> tuple[StepTime, SerialParts]:
    """One denoising step on one device, and the serial parts around the request's steps."""
    req = run.request
    latent = run.model.latent_elements(req.height, req.width, req.frames)
    step = step_time(
        run.model, shard, run.cluster, latent_elements=latent, guidance=run.guidance, cfg=run.s.cfg
    )
    return step, _serial(run, nbytes=shard.nbytes, scheduler_s=req.steps * step.scheduler)


def _memory_warnings(memory: DiTMemory, accel: Accelerator) -> list[str]:
    """The peak phase when it does not fit, with what would make it fit."""
    if memory.fits():
        return []
    worst = memory.peak
    return [
        f"memory: {memory.total / GiB:.1f} GiB per device exceeds the "
        f"{accel.memory_bytes / GiB:.0f} GiB of {accel.name} at the "
        f"{worst.describe()}; " + memory.hint()
    ]


def _attention_eff(accel: Accelerator, model: DiTSpec, given: float | None) -> float:
    """``given`` (checked to lie in (0, 1]), else :func:`attention_efficiency` at the model's
    head dimension."""
    eff = given if given is not None else attention_efficiency(accel, model.head_dim)
    if not 0 < eff <= 1:
        raise SpecError(f"attention_eff={eff!r} must be in (0, 1]")
    return eff


def _refusals(
    model: DiTSpec,
    s: Strategy,
    cluster: Cluster,
    guidance: bool,
    explicit: bool,
    devices: int,
    tokens: tuple[int, str],
) -> list[Violation]:
    """What the model, the run or the cluster cannot take: ``Strategy.check``'s errors (one
    source of truth) and the DiT-only rules; ``tokens``: the image/video tokens and the
    picture size they come from."""
    problems = [v for v in s.check(model, world_size=devices) if v.severity == "error"]
    if s.pp > 1:  # pp=1 is the fix, so a pipeline split's rule (its fix another pp) goes
        problems = [v for v in problems if not v.rule.startswith("layers-")]
        problems.append(
            Violation(
                "dit-pipefusion",
                f"pp={s.pp}: PipeFusion is not modelled (and must be 1 on NPU)",
                "use pp=1; split with ulysses/ring",
            )
        )
    if s.cfg > 1 and not guidance:
        why = (
            "guidance=False"
            if explicit
            else f"{model.name} is guidance-distilled and guidance=None follows the model"
        )
        problems.append(
            Violation(
                "cfg-without-guidance",
                f"cfg={s.cfg} but the run has one branch per step ({why}): CFG parallelism has "
                "nothing to split",
                "use cfg=1, or guidance=True to price true classifier-free guidance "
                "(two branches per step)",
            )
        )
    if devices > cluster.num_devices:
        problems.append(
            Violation(
                "devices",
                f"the strategy needs {devices} devices ({s}), the cluster has "
                f"{cluster.num_devices}",
                f"use a cluster of >= {devices} devices or smaller degrees",
            )
        )
    sp = s.ulysses * s.ring
    video, size = tokens
    if sp > video:
        problems.append(
            Violation(
                "sp-exceeds-tokens",
                f"ulysses*ring = {sp} sequence ranks for only {video} "
                f"image/video tokens of {model.name} at {size}",
                f"use ulysses*ring <= {video}, or give the devices to dp",
            )
        )
    return problems


def _token_split(model: DiTSpec, s: Strategy, video: int) -> TokenSplit:
    """How the ``video`` image/video tokens and the text land on one sequence rank."""
    sp = s.ulysses * s.ring
    per_dev = ceil_div(video, sp)
    return TokenSplit(
        video=video,
        text=model.text_tokens,
        sequence=video + (model.text_tokens if model.text_in_sequence else 0),
        sp=sp,
        per_device=per_dev,
        padding=per_dev * sp - video,
        text_in_sequence=model.text_in_sequence,
    )


def _token_warnings(model: DiTSpec, t: TokenSplit, shape: Any, guidance: bool) -> list[str]:
    """Padding of the sequence split and of the latent frames; true CFG on a distilled model."""
    out = []
    if t.padding:
        out.append(
            f"padding: {t.video} image/video tokens do not divide by ulysses*ring = "
            f"{t.sp}; each rank holds {t.per_device} tokens after padding {t.padding} "
            f"({100 * t.padding / t.video:.2f} % extra work; padded tokens need an "
            "attention mask, which some ring kernels lack)"
        )
    if shape.padded_latent_frames:
        out.append(
            f"padding: {shape.latent_frames} latent frames are padded to "
            f"{shape.latent_frames + shape.padded_latent_frames} for "
            f"{model.name}'s temporal patch of {model.patch_size_t}"
        )
    if guidance and model.guidance_distilled:
        out.append(
            f"guidance: {model.name} is guidance-distilled (its default pipeline "
            "runs one branch per step); guidance=True prices true CFG with two "
            "branches -- leave guidance=None to follow the model"
        )
    return out


def _serial(run: _Run, *, nbytes: int, scheduler_s: float) -> SerialParts:
    """The parts outside the sharded transformer: text encoders and the VAE decode once,
    output post-processing, and the scheduler's steps (``scheduler_s``)."""
    model, cluster, out, sw = run.model, run.cluster, run.request, run.switches
    encoders = text_encode_times(model, cluster, prompts=run.branches)
    vae_s, vae_detail = vae_decode(
        model,
        cluster,
        height=out.height,
        width=out.width,
        frames=out.frames,
        devices=run.vae_devices,
        tiled=sw.vae_tiling,
        nbytes=nbytes,
        cold=sw.vae_cold,
    )
    if out.output_type == "latent":  # the pipeline returns the latents: no decode at all
        vae_s, vae_detail = 0.0, {"vae": None, "skipped": "output_type='latent'"}
    post = postprocess_time(
        model, height=out.height, width=out.width, frames=out.frames, output_type=out.output_type
    )
    return SerialParts(
        text_encode_s=sum(encoders.values()),
        text_encoders=encoders,
        scheduler_s=scheduler_s,
        vae_decode_s=vae_s,
        vae=vae_detail,
        postprocess_s=post,
        output_type=out.output_type,
    )


def _breakdown(step: StepTime, serial: SerialParts, steps: int) -> dict[str, float]:
    """Seconds of the whole generation by term."""
    out = {k: steps * v for k, v in step.terms.items()}
    out["sp_gather"] = steps * step.sp_gather
    out["cfg_gather"] = steps * step.cfg_gather
    out["host_wait"] = steps * step.host_wait
    out["scheduler"] = steps * step.scheduler
    out["text_encode"] = serial.text_encode_s
    out["vae_decode"] = serial.vae_decode_s
    out["postprocess"] = serial.postprocess_s
    return out


def _latency_warnings(
    run: _Run, step: StepTime, serial: SerialParts, latency: float, video: int
) -> list[str]:
    """A ring whose K/V exchange is not hidden; a one-device VAE decode that weighs."""
    s, steps, out = run.s, run.request.steps, []
    if s.ring > 1 and step.ring_uncovered > 0.05 * step.ring_total:
        out.append(
            f"ring: {steps * step.ring_uncovered:.3g} s of K/V exchange is not "
            f"hidden by attention ({video} tokens are too few per hop for "
            f"ring={s.ring}); prefer Ulysses or CFG for this sequence"
        )
    vae_s = serial.vae_decode_s
    if not run.switches.vae_parallel and s.model_parallel_size > 1 and vae_s > 0.1 * latency:
        fw = run.framework
        remedy = (
            "a parallel VAE decode (vae_parallel=True) would shorten it"
            if fw.parallel_vae_for(run.model)
            else f"{fw.title} has no parallel VAE decode (framework='xdit' or 'mindiesd' has)"
        )
        out.append(
            f"vae: the VAE decode ({vae_s:.3g} s) runs on one device and is "
            f"{100 * vae_s / latency:.0f} % of the latency; {remedy}"
        )
    return out
