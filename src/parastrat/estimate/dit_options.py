"""The typed values of a diffusion-transformer estimate or plan: what is asked, how it runs,
and what the planner may try.

* :class:`DiTRequest`: one generation as a user asks for it (picture size, frames, denoising
  steps, guidance, what the pipeline returns);
* :class:`DiTSwitches`: how the serving run executes it (precision, torch.compile, VAE
  placement and tiling, where the text encoders live, how weights are kept, the framework);
* :class:`DiTSearch`: what :func:`~parastrat.planner.dit.plan_dit` may try (device count,
  replicas, splits across nodes, a latency bound, how many candidates to keep).

They are the DiT counterparts of :class:`~parastrat.spec.workload.Workload`,
:class:`~parastrat.spec.workload.Switches` and :class:`~parastrat.spec.workload.SearchSpace`:
``estimate_dit(model, strategy, cluster, request, switches)`` and
``plan_dit(model, cluster, request, switches, search)`` take them whole; the keyword form
(``height=..., steps=..., compiled=...``) builds them (:func:`resolve_dit`), an omitted keyword
taking its field's default.  A cost priced for one set of switches therefore cannot be reused
for another, and the planner hands the estimate the same two values it was given.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..checks import require_positive
from ..errors import SpecError, UsageError
from ..spec.dit_frameworks import DiTFramework, LaunchSwitches, get_framework
from .dit_memory import DiTMemoryOptions, require_options
from .dit_serial import POSTPROCESS_S_PER_ELEMENT


@dataclass(frozen=True, kw_only=True)
class DiTRequest:
    """One generation.

    * ``height`` / ``width``: the output picture in pixels (the model's VAE and patch must
      divide them: :meth:`~parastrat.spec.dit.DiTSpec.latent_shape`);
    * ``frames``: video frames (1 for an image);
    * ``steps``: denoising steps (50 for HunyuanVideo, 28 for FLUX.1-dev);
    * ``guidance``: classifier-free guidance, two branches per step; None follows the model
      (guidance-distilled models such as FLUX.1 and HunyuanVideo run one branch);
    * ``output_type``: what the diffusers pipeline returns: "pil" (its default) and "np" add
      the host's conversion of the pixels, "pt" keeps the tensor, "latent" skips the VAE.
    """

    height: int
    width: int
    frames: int = 1
    steps: int
    guidance: bool | None = None
    output_type: str = "pil"

    def __post_init__(self) -> None:
        steps = self.steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise SpecError(
                f"steps={steps!r} must be a whole number >= 1 (denoising steps, e.g. "
                "50 for HunyuanVideo, 28 for FLUX.1-dev)"
            )
        if self.output_type not in POSTPROCESS_S_PER_ELEMENT:
            raise SpecError(
                f"output_type={self.output_type!r} is not one a diffusers pipeline takes; "
                f"known: {', '.join(POSTPROCESS_S_PER_ELEMENT)}"
            )

    @property
    def size(self) -> str:
        """The picture as ``WIDTHxHEIGHT`` (how serving frameworks write it)."""
        return f"{self.width}x{self.height}"


@dataclass(frozen=True, kw_only=True)
class DiTSwitches:
    """How one generation runs.

    * ``precision``: the compute precision ("bf16", "fp16", "fp8" where the device has it);
    * ``compiled``: the transformer under torch.compile (fused element-wise chains, fewer
      host launches);
    * ``vae_parallel``: the VAE decode split over every model-parallel device (xDiT's
      patch-parallel VAE, MindIE-SD's ``--vae_parallel``); off: one device decodes;
    * ``vae_tiling``: tiled VAE decoding on / off (None: the VAE's default);
    * ``vae_cold``: the decode is the serving process's first (no warm-up before it);
    * ``text_encoder_on_device``: the text encoders run on the device (off: on the host);
    * ``attention_eff``: the attention kernel's fraction of the peak (None: the device's and
      head dimension's, :func:`~parastrat.estimate.dit_step.attention_efficiency`);
    * ``memory``: how weights are kept (:class:`~parastrat.estimate.dit_memory.DiTMemoryOptions`;
      None: whole weights on every device);
    * ``framework``: "mindiesd", "xdit", "diffusers" or "any" (None: MindIE-SD on Ascend, xDiT
      on GPUs; :mod:`~parastrat.spec.dit_frameworks`): how ring runs and which splits exist.
    """

    precision: str = "bf16"
    compiled: bool = False
    vae_parallel: bool = False
    vae_tiling: bool | None = None
    vae_cold: bool = False
    text_encoder_on_device: bool = True
    attention_eff: float | None = None
    memory: DiTMemoryOptions | None = None
    framework: str | DiTFramework | None = None

    def __post_init__(self) -> None:
        options = require_options(self.memory)
        object.__setattr__(self, "memory", options)
        if options.encoder_fsdp and not self.text_encoder_on_device:
            raise SpecError(
                "memory=DiTMemoryOptions(encoder_fsdp=True) shards text encoders that "
                "text_encoder_on_device=False keeps on the host; use one or the other"
            )
        if self.vae_parallel and self.framework is not None:
            refused = get_framework(self.framework).vae_parallel_violation()
            if refused is not None:
                raise UsageError(f"{refused.message}; {refused.hint}")

    @property
    def launch_switches(self) -> LaunchSwitches:
        """The switches a launch must repeat for the run to be the one priced."""
        mem = self.memory_options
        return LaunchSwitches(
            vae_parallel=self.vae_parallel,
            dit_fsdp=mem.dit_fsdp,
            encoder_fsdp=mem.encoder_fsdp,
            offload=mem.offload,
            compiled=self.compiled,
            vae_tiling=self.vae_tiling is True,
        )

    @property
    def memory_options(self) -> DiTMemoryOptions:
        """:attr:`memory` as a :class:`DiTMemoryOptions` (set from None at construction)."""
        return require_options(self.memory)


@dataclass(frozen=True, kw_only=True)
class DiTSearch:
    """What :func:`~parastrat.planner.dit.plan_dit` may try.

    * ``devices``: the devices to split (None: the cluster's);
    * ``data_parallel``: also try replicas (``dp``) serving other requests, and rank by
      requests per second instead of latency;
    * ``allow_cross_node``: TP and Ulysses may cross the NVLink node / HCCS island;
    * ``max_latency_s``: a serving SLO: slower splits are dropped;
    * ``top_k``: candidates kept in the plan.
    """

    devices: int | None = None
    data_parallel: bool = False
    allow_cross_node: bool = False
    max_latency_s: float | None = None
    top_k: int = 5

    def __post_init__(self) -> None:
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise UsageError(f"top_k={top_k!r} must be a whole number >= 1")
        if self.max_latency_s is not None:
            require_positive("max_latency_s", self.max_latency_s, "5")


#: The keyword options that belong to :class:`DiTSearch`.
SEARCH_FIELDS = frozenset(f.name for f in fields(DiTSearch))


def _built(cls: type, given: Any, options: dict[str, Any], who: str) -> Any:
    """``given`` when the caller passed the typed value, else ``cls`` built from the keyword
    ``options`` it names (None: not given); UsageError when both are given."""
    names = {f.name for f in fields(cls)}
    mine = {k: v for k, v in options.items() if k in names and v is not None}
    if given is None:
        return cls(**mine)
    if not isinstance(given, cls):
        raise UsageError(f"{who}: expected a {cls.__name__}, got {type(given).__name__}")
    if mine:
        raise UsageError(
            f"{who}: {', '.join(sorted(mine))} given beside a {cls.__name__}; pass one or the "
            f"other (dataclasses.replace({cls.__name__.lower()}, ...) changes a field)"
        )
    return given


#: The request fields without a default, each with an example.
_REQUIRED = {
    "height": "height=1024 (pixels)",
    "width": "width=1024 (pixels)",
    "steps": "steps=28 (denoising steps)",
}


def resolve_dit(
    request: DiTRequest | None,
    switches: DiTSwitches | None,
    *,
    who: str,
    **options: Any,
) -> tuple[DiTRequest, DiTSwitches]:
    """The typed values of a keyword-convenience call: ``request`` / ``switches`` as given, or
    built from the keyword ``options`` (None means "not given")."""
    unknown = set(options) - {f.name for f in (*fields(DiTRequest), *fields(DiTSwitches))}
    if unknown:
        raise UsageError(
            f"{who}: unknown argument(s) {', '.join(sorted(unknown))}; the fields of DiTRequest "
            "and DiTSwitches are the keywords it takes"
        )
    if request is None:
        missing = [k for k in _REQUIRED if options.get(k) is None]
        if missing:
            raise UsageError(
                f"{who} needs {', '.join(missing)}: "
                + ", ".join(_REQUIRED[k] for k in missing)
                + " (or a DiTRequest)"
            )
    return (
        _built(DiTRequest, request, options, who),
        _built(DiTSwitches, switches, options, who),
    )


def resolve_search(search: DiTSearch | None, *, who: str, **options: Any) -> DiTSearch:
    """``search`` as given, or built from the keyword ``options`` (None: not given)."""
    built: DiTSearch = _built(DiTSearch, search, options, who)
    return built
