"""What each diffusion-transformer serving framework can run, and how it is launched.

A split the cost model prices is worth nothing if the framework that serves the model cannot
start it.  The frameworks differ per model class (the diffusers transformer class of the
:class:`~parastrat.spec.dit.DiTSpec`, :attr:`~parastrat.spec.dit.DiTSpec.diffusers_class`):

* **MindIE-SD** (Ascend; its Wan model ports): ``--ulysses_size --ring_size --cfg_size
  --tp_size``.  TP only without sequence parallelism: the Wan2.1 port's ``generate.py``
  asserts ``ulysses_size == 1 and ring_size == 1`` when ``tp_size > 1``, because its
  ``parallel_mgr`` lays ranks out TP-first but builds yunchang's Ulysses / ring groups over the
  whole world on consecutive ranks, which are then the TP pairs (the Wan2.2 port refuses any
  ``tp_size > 1``: "Tensor Parallel is not supported now").
* **xDiT** (GPUs; ``xfuser/config/args.py``): ``--ulysses_degree --ring_degree
  --use_cfg_parallel --use_parallel_vae``.  Its hybrid parallelism (README, "Supported
  DiTs") has no tensor parallelism (TP is a legacy stand-alone method), and CFG parallelism
  only for the classes marked there: SD3, CogVideoX, Mochi ("NA" for the guidance-distilled
  Flux and HunyuanVideo, not supported for Wan and Qwen-Image).
* **diffusers** (``ModelMixin.enable_parallelism(config=ContextParallelConfig(...))``,
  0.39, the version the project's extra pins): context parallelism for the classes that
  define a ``_cp_plan`` (Flux, Wan, Qwen-Image; ``enable_parallelism`` raises for the others),
  no CFG parallelism, no tensor parallelism (``TensorParallelConfig`` arrives in 0.40) and no
  parallel VAE decode.  ``ContextParallelConfig`` needs ulysses or ring > 1, so a split on one
  device launches with no parallel config ("" ; :mod:`parastrat.adapters.diffusers`).

The memory switches a plan was priced with (:class:`LaunchSwitches`: parallel VAE, FSDP of the
transformer and of the text encoder, Wan's model offload) go into the launch in the
framework's own spelling: MindIE-SD's Wan ports take Wan's ``generate.py`` flags
(``--vae_parallel --dit_fsdp --t5_fsdp --offload_model True``: ``store_true`` switches but
``--offload_model``, a ``str2bool`` value); xDiT's
``xfuser/config/args.py`` has ``--use_parallel_vae --shard_dit --shard_t5_encoder
--use_torch_compile --enable_tiling``, each read only by the example scripts of some classes
(:data:`XDIT_FLAG_CLASSES`: a parallel VAE for Flux and SD3 alone, sharding for Wan alone), and
nothing that offloads as Wan's ``--offload_model`` does; diffusers' ``ContextParallelConfig``
carries none.  A switch a framework has no spelling for
is named by :meth:`DiTFramework.launch_warnings` instead of being dropped silently.

``any`` constrains nothing (a what-if over every split the cost model can price) and prints no
launch line.  :func:`default_framework` picks MindIE-SD on Ascend and xDiT on GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError, Violation

#: diffusers classes with a context-parallel plan (``_cp_plan``) in diffusers 0.39
#: (checked against the installed package in ``tests/test_dit_frameworks.py``).
DIFFUSERS_CP_CLASSES = frozenset(
    {"FluxTransformer2DModel", "WanTransformer3DModel", "QwenImageTransformer2DModel"}
)
#: The output sizes (width, height) the MindIE-SD Wan ports take, by preset: their
#: ``generate.py`` asserts ``args.size in SUPPORTED_SIZES[args.task]`` ("Unsupport size ...";
#: ``--size W*H``), with the tables of the Ascend ports MindIE-SD's Wan examples run
#: (Eco-Sphere/Wan2.1 and Eco-Sphere/Wan2.2 ``wan/configs/__init__.py``: t2v-14B, t2v-1.3B,
#: t2v-A14B, ti2v-5B).
MINDIESD_WAN_SIZES: dict[str, tuple[tuple[int, int], ...]] = {
    "wan2.1-t2v-14b": ((720, 1280), (1280, 720), (480, 832), (832, 480), (480, 720), (720, 480)),
    "wan2.1-t2v-1.3b": ((480, 832), (832, 480), (480, 720), (720, 480)),
    "wan2.2-t2v-a14b": ((720, 1280), (1280, 720), (480, 832), (832, 480)),
    "wan2.2-ti2v-5b": ((704, 1280), (1280, 704)),
}
#: Cards one generation may run on in the MindIE-SD Wan2.1 14B port, by preset (MindIE-SD
#: ``examples/wan/parameter_config.md``, ``nproc_per_node``: "Wan2.1-T2V-14B supports 1, 2, 4,
#: or 8 cards").
MINDIESD_WAN_CARDS: dict[str, tuple[int, ...]] = {"wan2.1-t2v-14b": (1, 2, 4, 8)}
#: Classes xDiT's README table marks ✔️ under CFG (parallel guidance branches).
XDIT_CFG_CLASSES = frozenset(
    {"SD3Transformer2DModel", "CogVideoXTransformer3DModel", "MochiTransformer3DModel"}
)


@dataclass(frozen=True, kw_only=True)
class LaunchSwitches:
    """The switches a split was priced with that its launch must repeat: ``vae_parallel``
    (the decode split over the devices), ``dit_fsdp`` / ``encoder_fsdp`` (the transformer's /
    text encoders' parameters sharded), ``offload`` (Wan's ``--offload_model True``),
    ``compiled`` (the transformer under torch.compile) and ``vae_tiling`` (a tiled decode
    asked for)."""

    vae_parallel: bool = False
    dit_fsdp: bool = False
    encoder_fsdp: bool = False
    offload: bool = False
    compiled: bool = False
    vae_tiling: bool = False
    #: the diffusers class served (not a switch: which of a framework's flags its launch
    #: script reads, :attr:`DiTFramework.flag_classes`); "" when unknown
    model_class: str = ""

    def on(self) -> tuple[str, ...]:
        """The names of the switches that are on, in field order."""
        return tuple(name for name in SWITCH_NAMES if getattr(self, name))


#: The :class:`LaunchSwitches` fields, in launch order, each as the Python argument that sets
#: it (``parastrat plan-dit`` names its flag instead).
SWITCH_NAMES = {
    "vae_parallel": "vae_parallel=True",
    "dit_fsdp": "DiTMemoryOptions(dit_fsdp=True)",
    "encoder_fsdp": "DiTMemoryOptions(encoder_fsdp=True)",
    "offload": "DiTMemoryOptions(offload=True)",
    "compiled": "compiled=True",
    "vae_tiling": "vae_tiling=True",
}
#: MindIE-SD's Wan ports take Wan's ``generate.py`` flags.
MINDIESD_FLAGS = {
    "vae_parallel": "--vae_parallel",
    "dit_fsdp": "--dit_fsdp",
    "encoder_fsdp": "--t5_fsdp",
    "offload": "--offload_model True",
}
#: xDiT's ``xfuser/config/args.py`` (all ``store_true``); no offload that matches Wan's.
XDIT_FLAGS = {
    "vae_parallel": "--use_parallel_vae",
    "dit_fsdp": "--shard_dit",
    "encoder_fsdp": "--shard_t5_encoder",
    "compiled": "--use_torch_compile",
    "vae_tiling": "--enable_tiling",
}
#: The classes whose xDiT launch script reads a flag (absent: every class).  xDiT runs each
#: family from its own example, and a switch reaches the run only where that script or the
#: xFuser pipeline wrapper it uses reads it: the parallel VAE through the Flux and SD3
#: wrappers (``base_pipeline.py`` ``_convert_vae``), while ``hunyuan_video_usp_example.py`` and
#: the CogVideoX examples ``assert engine_args.use_parallel_vae is False`` ("parallel VAE not
#: implemented") and the Wan examples never read it; ``--shard_dit`` / ``--shard_t5_encoder``
#: only ``wan_example.py``; ``--enable_tiling`` only the CogVideoX and HunyuanVideo examples
#: (``pipe.vae.enable_tiling``); ``--use_torch_compile`` every one.
XDIT_FLAG_CLASSES = {
    "vae_parallel": frozenset({"FluxTransformer2DModel", "SD3Transformer2DModel"}),
    "dit_fsdp": frozenset({"WanTransformer3DModel"}),
    "encoder_fsdp": frozenset({"WanTransformer3DModel"}),
    "vae_tiling": frozenset({"CogVideoXTransformer3DModel", "HunyuanVideoTransformer3DModel"}),
}


@dataclass(frozen=True)
class DiTFramework:
    """One serving framework's parallel features: ``tp`` (tensor parallelism at all),
    ``tp_with_sp`` (TP together with Ulysses / ring), the classes with CFG and with sequence
    parallelism (None: every class), and how its launch names the degrees."""

    name: str
    title: str
    tp: bool
    tp_with_sp: bool
    cfg_classes: frozenset[str] | None
    sp_classes: frozenset[str] | None
    source: str
    #: models (by the start of their name) whose port has no TP at all
    no_tp_models: tuple[str, ...] = ()
    #: ring > 1 gathers the ring group's whole K and V on every rank before one attention
    #: (exposed all-gathers, no merges) instead of passing K/V blocks around a ring behind the
    #: attention: the MindIE-SD Wan2.2 port's ``xFuserLongContextAttention``
    #: (``dist.all_gather_into_tensor(k_full, key, group=self.ring_pg)``, then V), as MindIE-SD's
    #: ``usp_attention(kv_gather_group=...)`` ("KV-AllGather, not Ring Attention",
    #: ``docs/en/features/usp.md``)
    ring_gather: bool = False
    #: what a split whose tokens do not divide needs in this framework ("" : it pads itself)
    pad_note: str = ""
    #: output sizes (width, height) the framework's port of a preset takes, by preset name
    #: (absent: any size the model's VAE and patch take)
    sizes: dict[str, tuple[tuple[int, int], ...]] | None = None
    #: devices one generation (one replica) may span in the framework's port of a preset, by
    #: preset name (absent: any count)
    cards: dict[str, tuple[int, ...]] | None = None
    #: how the launch spells each :class:`LaunchSwitches` field (absent: no such switch)
    flags: dict[str, str] | None = None
    #: the model classes whose launch reads a flag, by switch (absent: every class)
    flag_classes: dict[str, frozenset[str]] | None = None

    def flag(self, switch: str, model_class: str = "") -> str | None:
        """How this framework's launch for ``model_class`` spells ``switch`` (None: it has no
        such switch for that class; an unknown class is held to the class-free table)."""
        classes = (self.flag_classes or {}).get(switch)
        if switch not in (self.flags or {}) or not _covers(classes, model_class):
            return None
        return (self.flags or {})[switch]

    @property
    def parallel_vae(self) -> bool:
        """Whether the framework decodes with the VAE split over the devices (``any``: a
        what-if that allows it)."""
        return self.name == "any" or "vae_parallel" in (self.flags or {})

    def runs_tp(self, model: Any) -> bool:
        """Whether the framework runs tensor parallelism for ``model`` (a DiTSpec or name)."""
        name = str(getattr(model, "name", model)).lower()
        return self.tp and not name.startswith(self.no_tp_models)

    def parallel_vae_for(self, model: Any) -> bool:
        """Whether this framework decodes ``model`` (a DiTSpec) with the VAE split."""
        return self.vae_parallel_violation(model) is None

    def vae_parallel_violation(self, model: Any = None) -> Violation | None:
        """Why ``vae_parallel=True`` cannot run under this framework for ``model`` (a
        DiTSpec; None: for any model), or None when it can."""
        cls = str(getattr(model, "diffusers_class", "") or "")
        if self.name == "any" or self.flag("vae_parallel", cls) is not None:
            return None
        rule = f"{self.name}-vae-parallel"  # one of rule_ids()
        fix = "drop vae_parallel=True (vae_tiling=True also cuts the decode's memory)"
        if not self.parallel_vae:
            why = f"{self.title} has no parallel VAE decode ({self.source})"
            fix += (
                ", or framework='xdit' (--use_parallel_vae) / framework='mindiesd' (--vae_parallel)"
            )
        else:
            why = (
                f"{self.title} has no parallel VAE decode for {cls} (its launch script does not "
                "read the switch, or refuses it: xDiT's HunyuanVideo and CogVideoX examples "
                "assert use_parallel_vae is False)"
            )
            fix += ", or framework='any' to price your own parallel decode as a what-if"
        return Violation(rule, f"vae_parallel=True: {why}", fix)

    def size_violations(self, model: Any, height: int, width: int) -> list[Violation]:
        """Why this framework's port of ``model`` refuses a ``width`` x ``height`` output
        (rule ``<name>-size``); empty when it takes it."""
        allowed = (self.sizes or {}).get(str(getattr(model, "name", "")).lower())
        if not allowed or (width, height) in allowed:
            return []
        listed = ", ".join(f"{w}x{h}" for w, h in allowed)
        w, h = min(allowed, key=lambda wh: _distance(wh, (width, height)))
        return [
            Violation(
                f"{self.name}-size",
                f"{width}x{height}: {self.title}'s {model.name} port takes only {listed} "
                f"({self.title} Wan ports' generate.py: --size W*H from SUPPORTED_SIZES)",
                f"use --width {w} --height {h} (width={w}, height={h}); or plan for another "
                "framework (--framework / framework=)",
            )
        ]

    def violations(self, s: Any, model: Any) -> list[Violation]:
        """Why this framework cannot run strategy ``s`` (tp / ulysses / ring / cfg) for
        ``model`` (a DiTSpec; a model of unknown class is held to the class-free limits
        only); empty when it can."""
        cls = getattr(model, "diffusers_class", "") or ""
        out: list[Violation] = []
        name = str(getattr(model, "name", "")).lower()
        to_sp = f"use tp=1 and ulysses x ring = {s.tp * s.cp}"
        if s.tp > 1 and not self.tp:
            out.append(self._no("tp", f"tp={s.tp}: {self.title} has no tensor parallelism", to_sp))
        elif s.tp > 1 and not self.runs_tp(name):
            out.append(self._no("tp", f"tp={s.tp}: {self.title}'s {name} port has no TP", to_sp))
        elif s.tp > 1 and s.cp > 1 and not self.tp_with_sp:
            out.append(
                self._no(
                    "tp-sp",
                    f"tp={s.tp} with ulysses x ring = {s.cp}: {self.title} runs TP only without "
                    "sequence parallelism",
                    f"{to_sp}, or ulysses = ring = 1 and tp = {s.tp * s.cp}",
                )
            )
        if s.cp > 1 and not _covers(self.sp_classes, cls):
            out.append(
                self._no(
                    "sp",
                    f"ulysses x ring = {s.cp}: {self.title} has no sequence parallelism for {cls}",
                    "use ulysses = ring = 1, or a framework that shards its sequence",
                )
            )
        allowed = (self.cards or {}).get(name)
        per_replica = s.tp * s.cp * s.cfg
        if allowed and per_replica not in allowed:
            out.append(
                self._no(
                    "cards",
                    f"{per_replica} devices for one generation: {self.title}'s {name} port "
                    f"runs on {', '.join(map(str, allowed))} cards",
                    f"a split over {' or '.join(map(str, allowed))} devices per replica",
                )
            )
        if s.cfg > 1 and not _covers(self.cfg_classes, cls):
            out.append(
                self._no(
                    "cfg",
                    f"cfg={s.cfg}: {self.title} has no CFG parallelism for {cls}",
                    f"use cfg=1 and ulysses x ring x tp = {s.tp * s.cp * s.cfg} (both branches "
                    "as one batch)",
                )
            )
        return out

    def _no(self, what: str, message: str, fix: str) -> Violation:
        rule = f"{self.name}-{what}"  # one of rule_ids()
        return Violation(
            rule,
            message + f" ({self.source})",
            fix + "; or plan for another framework (--framework / framework=)",
        )

    def rule_ids(self) -> tuple[str, ...]:
        """Every rule id :meth:`violations` can give (documented in docs/troubleshooting.md)."""
        kinds = ("tp", "tp-sp", "sp", "cfg", *(("size",) if self.sizes else ()))
        kinds += ("cards",) if self.cards else ()
        vae_limited = not self.parallel_vae or "vae_parallel" in (self.flag_classes or {})
        kinds += ("vae-parallel",) if vae_limited and self.name != "any" else ()
        return tuple(f"{self.name}-{what}" for what in kinds)

    def launch(self, s: Any, switches: LaunchSwitches | None = None) -> str:
        """The degrees and the priced ``switches`` as this framework's launch takes them (""
        for ``any``, and for diffusers on one device: no ContextParallelConfig then)."""
        if self.name == "mindiesd":
            degrees = (
                f"--ulysses_size {s.ulysses} --ring_size {s.ring} --cfg_size {s.cfg} "
                f"--tp_size {s.tp}"
            )
        elif self.name == "xdit":
            cfg = " --use_cfg_parallel" if s.cfg > 1 else ""
            degrees = f"--ulysses_degree {s.ulysses} --ring_degree {s.ring}{cfg}"
        elif self.name == "diffusers" and s.cp > 1:
            return f"ContextParallelConfig(ulysses_degree={s.ulysses}, ring_degree={s.ring})"
        else:
            return ""
        sw = switches or LaunchSwitches()
        spelled = (self.flag(name, sw.model_class) for name in sw.on())
        return " ".join([degrees, *(flag for flag in spelled if flag is not None)])

    def launch_warnings(self, switches: LaunchSwitches | None) -> list[str]:
        """One line per priced switch this framework's launch has no spelling for (empty for
        ``any``, which prints no launch)."""
        if self.name == "any":
            return []
        sw = switches or LaunchSwitches()
        served = f" of {sw.model_class}" if sw.model_class else ""
        return [
            f"the plan was priced with {SWITCH_NAMES[name]}, which the {self.title} "
            f"launch{served} has no switch for: set it up yourself, or the run differs from "
            "the plan's"
            for name in sw.on()
            if self.flag(name, sw.model_class) is None
        ]


def _distance(size: tuple[int, int], asked: tuple[int, int]) -> tuple[float, float]:
    """How far a (width, height) is from the one asked: aspect ratio first, then area."""
    aspect = abs(math.log((size[0] / size[1]) / (asked[0] / asked[1])))
    return round(aspect, 6), abs(math.log(size[0] * size[1] / (asked[0] * asked[1])))


def _covers(classes: frozenset[str] | None, cls: str) -> bool:
    return classes is None or not cls or cls in classes


FRAMEWORKS = {
    f.name: f
    for f in (
        DiTFramework(
            "mindiesd",
            "MindIE-SD",
            tp=True,
            tp_with_sp=False,
            cfg_classes=None,
            sp_classes=None,
            source="the MindIE-SD Wan ports' generate.py: TP only with ulysses_size == "
            "ring_size == 1, and none in the Wan2.2 port; card counts: MindIE-SD "
            "examples/wan/parameter_config.md",
            no_tp_models=("wan2.2",),
            ring_gather=True,
            sizes=MINDIESD_WAN_SIZES,
            cards=MINDIESD_WAN_CARDS,
            flags=MINDIESD_FLAGS,
        ),
        DiTFramework(
            "xdit",
            "xDiT",
            tp=False,
            tp_with_sp=False,
            cfg_classes=XDIT_CFG_CLASSES,
            sp_classes=None,
            source="xDiT README, 'Supported DiTs'; xfuser/config/args.py",
            flags=XDIT_FLAGS,
            flag_classes=XDIT_FLAG_CLASSES,
        ),
        DiTFramework(
            "diffusers",
            "diffusers",
            tp=False,
            tp_with_sp=False,
            cfg_classes=frozenset(),
            sp_classes=DIFFUSERS_CP_CLASSES,
            source="diffusers 0.39 enable_parallelism: a class _cp_plan; no CFG or tensor "
            "parallelism (TensorParallelConfig from 0.40), no parallel VAE decode",
            pad_note="diffusers shards only exact splits (EquipartitionSharder asserts the "
            "sequence divides by the mesh): pass ContextParallelConfig(ulysses_anything=True) "
            "for Ulysses, ring_anything=True for ring",
        ),
        DiTFramework(
            "any",
            "any framework",
            tp=True,
            tp_with_sp=True,
            cfg_classes=None,
            sp_classes=None,
            source="no framework's limits",
        ),
    )
}


def get_framework(name: str | DiTFramework | None, vendor: str = "nvidia") -> DiTFramework:
    """A framework by name; None gives :func:`default_framework` for ``vendor``."""
    if isinstance(name, DiTFramework):
        return name
    if name is None:
        return FRAMEWORKS[default_framework(vendor)]
    key = str(name).strip().lower().replace("-", "")
    if key not in FRAMEWORKS:
        raise SpecError(
            f"framework={name!r} is not one parastrat knows; use one of {', '.join(FRAMEWORKS)}"
        )
    return FRAMEWORKS[key]


def default_framework(vendor: str) -> str:
    """MindIE-SD on Ascend (Huawei) devices, xDiT on GPUs."""
    return "mindiesd" if vendor == "huawei" else "xdit"
