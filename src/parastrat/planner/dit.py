"""Choose Ulysses, ring, CFG and TP degrees for diffusion-transformer inference.

:func:`plan_dit` enumerates every legal split of the device count into
``tp * ulysses * ring * cfg`` (times a data-parallel remainder when asked), prices each with
:func:`~parastrat.estimate.dit.estimate_dit`, drops those that do not fit in memory, and
ranks the rest by latency (or by requests per second with ``data_parallel=True``).

Legal means: the strategy rules (``Strategy.check``: heads and KV heads divisible by TP and
Ulysses), ``cfg = 2`` only with guidance on, no more sequence ranks than image/video tokens,
and -- unless ``allow_cross_node`` -- TP and Ulysses inside one NVLink node / HCCS island
(``tp * ulysses <= cluster.scale_up_domain``; ring and CFG may cross it).

The plan also states MindIE-SD's rule of thumb for the device count (2 cards: TP 2 or CFG;
4 cards: Ulysses 4 or TP 2 + CFG; long sequences: add ring) and, for each piece of advice,
where its numbers put it and why.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import StrategyError, UsageError
from ..estimate.dit import (
    DiTMemory,
    DiTReport,
    GiB,
    estimate_dit,
    resolve_guidance,
)
from ..estimate.dit_memory import DiTMemoryOptions
from ..estimate.dit_options import DiTRequest, DiTSearch, DiTSwitches, resolve_dit, resolve_search
from ..estimate.dit_step import attention_efficiency
from ..estimate.track_record import TrackRecord, track_record
from ..spec.cluster import Cluster, require_cluster
from ..spec.dit import DiTSpec
from ..spec.dit import get as get_dit
from ..spec.dit_frameworks import DiTFramework, LaunchSwitches, get_framework
from ..strategy import XDIT_ORDER, Strategy, divisors
from .dit_published import PublishedDiTBeside, dit_published_beside
from .dit_remedies import working_remedy
from .explain import TIGHT_MEMORY
from .sensitivity import Sensitivity, changes, sensitivity_lines

#: Image/video tokens from which MindIE-SD's guide calls a sequence "long" (ring worth adding):
#: at 32K tokens one ring hop's attention block (32K/r queries x 32K/r keys) takes longer than
#: sending its K/V over HCCS/NVLink for r <= 8 (see docs/dit-model.md).
LONG_SEQUENCE = 32_768

#: Breakdown entries that are communication (for the "why" lines).
COMM_KEYS = (
    "ulysses_all_to_all",
    "ring_kv_exchange",
    "ring_merge",
    "tp_all_reduce",
    "sp_gather",
    "cfg_gather",
)

#: How the "why" lines name each breakdown entry of :class:`~parastrat.estimate.dit.DiTReport`
#: (``tests/test_plan_dit.py`` checks that every entry has one).
_LABELS = {
    "linear": "linear layers",
    "attention": "attention",
    "elementwise": "element-wise kernels",
    "ulysses_all_to_all": "Ulysses all-to-all",
    "ring_kv_exchange": "exposed ring K/V exchange",
    "ring_merge": "ring output merges",
    "sp_layout": "sequence-parallel layout copies",
    "tp_all_reduce": "TP all-reduces",
    "sp_gather": "sequence gather",
    "cfg_gather": "CFG gather",
    "host_wait": "host launch overhead",
    "scheduler": "scheduler steps",
    "text_encode": "text encoding",
    "vae_decode": "VAE decode",
    "postprocess": "output conversion",
}


@dataclass(frozen=True)
class DiTCandidate:
    """One priced strategy: ``strategy``, its ``report`` and the ``reasons`` it ranks where it
    does (``why`` joins them into one sentence)."""

    strategy: Strategy
    report: DiTReport
    reasons: list[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        """The reasons as one sentence (as training candidates give it)."""
        return "; ".join(self.reasons)

    @property
    def latency_s(self) -> float:
        """Seconds for one whole request (from the report): what the latency objective ranks by."""
        return self.report.latency_s

    @property
    def per_step_s(self) -> float:
        """Seconds per denoising step (from the report)."""
        return self.report.per_step_s

    @property
    def memory(self) -> DiTMemory:
        """Bytes per device (the report's :class:`~parastrat.estimate.dit.DiTMemory`)."""
        return self.report.memory

    @property
    def requests_per_s(self) -> float:
        """Requests per second with ``dp`` replicas (from the report): what the throughput objective
        (``data_parallel=True``) ranks by."""
        return self.report.requests_per_s

    def mindiesd_flags(self) -> str:
        """The launch flags MindIE-SD's examples take for this strategy."""
        return self.launch("mindiesd")

    def launch(self, framework: str | DiTFramework) -> str:
        """This strategy as ``framework`` launches it (:meth:`DiTFramework.launch`: MindIE-SD's
        ``--ulysses_size ...``, xDiT's ``--ulysses_degree ...``, diffusers'
        ``ContextParallelConfig(...)``; "" for ``any``), with the switches it was priced with."""
        return get_framework(framework).launch(self.strategy, self.launch_switches)

    @property
    def launch_switches(self) -> LaunchSwitches:
        """The switches the report was priced with (a parallel VAE only where the decode was
        split: one device decodes alone)."""
        vae = self.report.serial.get("vae", {}).get("devices", 1) > 1
        return replace(self.report.switches, vae_parallel=vae)

    def launch_warnings(self, framework: str | DiTFramework) -> list[str]:
        """The priced switches ``framework``'s launch cannot carry
        (:meth:`DiTFramework.launch_warnings`)."""
        return get_framework(framework).launch_warnings(self.launch_switches)

    def to_dict(self) -> dict[str, Any]:
        """The candidate as a JSON-ready dict (degrees, timings, memory, reasons, MindIE-SD flags
        and the full report): one entry of :meth:`DiTPlan.to_dict`."""
        s = self.strategy
        return {
            "strategy": {
                "tp": s.tp,
                "ulysses": s.ulysses,
                "ring": s.ring,
                "cfg": s.cfg,
                "dp": s.dp or 1,
            },
            "strategy_str": label(s),
            "latency_s": self.latency_s,
            "per_step_s": self.per_step_s,
            "requests_per_s": self.requests_per_s,
            "memory": self.memory.to_dict(),
            "why": self.why,
            "reasons": list(self.reasons),
            "mindiesd": self.mindiesd_flags(),
            "report": self.report.to_dict(),
        }


@dataclass(frozen=True)
class DiTPlan:
    """Ranked candidates (best first), MindIE-SD's advice compared, and what was refused."""

    model: str
    accelerator: str
    devices: int
    workload: dict[str, Any]
    candidates: list[DiTCandidate]
    advice: list[str]
    rejected: dict[str, int]
    objective: str = "latency"
    #: the serving framework whose limits the splits keep (:mod:`~parastrat.spec.dit_frameworks`)
    framework: str = "any"
    #: the latency model's record on published runs on this accelerator
    #: (:func:`~parastrat.estimate.track_record.track_record`; None when none was measured)
    track_record: TrackRecord | None = None
    #: what the best candidate's latency hangs on: each physical constant 10 % worse
    #: (:func:`~parastrat.planner.sensitivity.changes`), largest first
    sensitivity: tuple[Sensitivity, ...] = ()
    #: the generations xDiT / Wan published for this model on this accelerator, the same
    #: request first with its split's place in this plan
    #: (:func:`~parastrat.planner.dit_published.dit_published_beside`)
    published: tuple[PublishedDiTBeside, ...] = ()

    @property
    def best(self) -> DiTCandidate:
        """The top-ranked candidate (``candidates[0]``)."""
        return self.candidates[0]

    def explain(self) -> str:
        """A readable account: the workload, the ranking with reasons, MindIE-SD's advice."""
        w = self.workload
        lines = [
            (
                f"{self.model} on {self.devices} x {self.accelerator}: {w['width']}x"
                f"{w['height']}, {w['frames']} frame(s), {w['steps']} steps, guidance "
                f"{'on' if w['guidance'] else 'off'}"
                f"{' (the model default)' if w.get('guidance_from') == 'model' else ''}; "
                f"{w['video_tokens']} image/video tokens"
                f" + {w['text_tokens']} text tokens"
            )
        ]
        for i, c in enumerate(self.candidates, 1):
            lines.append(
                f"{i}. {label(c.strategy)}: {c.latency_s:.3g} s "
                f"({c.per_step_s:.3g} s/step), {c.memory.total / GiB:.1f} GiB/device"
            )
            lines += [f"   - {y}" for y in c.reasons]
        if self.launch():
            lines.append(f"launch ({get_framework(self.framework).title}): {self.launch()}")
        lines += [f"warning: {w}" for w in self.launch_warnings()]
        if self.track_record is not None:
            lines.append(f"record: {self.track_record.summary()}")
        lines += [b.summary() for b in self.published]
        lines += sensitivity_lines(list(self.sensitivity))
        if self.advice:
            lines.append("MindIE-SD's rule of thumb:")
            lines += [f"   - {a}" for a in self.advice]
        if self.rejected:
            lines.append(
                "refused: " + ", ".join(f"{k} ({v})" for k, v in sorted(self.rejected.items()))
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        """One line: model, devices, the best split and how many were ranked (the candidates
        are in :attr:`candidates`, the account in :meth:`explain`)."""
        best = self.best
        rate = f", {best.requests_per_s:.3g} req/s" if self.objective == "throughput" else ""
        return (
            f"DiTPlan({self.model} on {self.devices} x {self.accelerator}: best "
            f"{label(best.strategy)}, {best.latency_s:.3g} s{rate}; "
            f"{len(self.candidates)} candidates, framework {self.framework})"
        )

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self) -> Iterator[DiTCandidate]:
        """The candidates, best first (``for c in plan``)."""
        return iter(self.candidates)

    def __getitem__(self, i: int) -> DiTCandidate:
        return self.candidates[i]

    def launch(self) -> str:
        """The best split as :attr:`framework` launches it ("" for ``any``, and where the
        framework needs no parallel launch: diffusers on one device)."""
        return self.best.launch(self.framework)

    def launch_warnings(self) -> list[str]:
        """The switches the best split was priced with that :attr:`framework`'s launch cannot
        carry (the run must set them some other way)."""
        return self.best.launch_warnings(self.framework)

    def to_dict(self) -> dict[str, Any]:
        """The plan as one JSON-ready dict: what ``parastrat plan-dit --format json`` prints."""
        return {
            "model": self.model,
            "accelerator": self.accelerator,
            "devices": self.devices,
            "workload": dict(self.workload),
            "objective": self.objective,
            "framework": self.framework,
            "launch": self.launch(),
            "launch_warnings": self.launch_warnings(),
            "best": self.best.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "advice": list(self.advice),
            "rejected": dict(self.rejected),
            "track_record": self.track_record.to_dict() if self.track_record else None,
            "sensitivity": [x.to_dict() for x in self.sensitivity],
            "published": [b.to_dict() for b in self.published],
        }


def label(s: Strategy) -> str:
    """Short name of an inference strategy: ``U4 R2 CFG2 TP1`` with degrees of 1 left out."""
    parts = [
        f"{name}{v}"
        for name, v in (
            ("Ulysses", s.ulysses),
            ("Ring", s.ring),
            ("CFG", s.cfg),
            ("TP", s.tp),
            ("DP", s.dp or 1),
        )
        if v > 1
    ]
    return " x ".join(parts) or "1 device"


def _splits(devices: int, guidance: bool, data_parallel: bool) -> list[Strategy]:
    """Every xDiT strategy whose tp * ulysses * ring * cfg * dp is ``devices``."""
    out = []
    for dp in divisors(devices) if data_parallel else [1]:
        rest = devices // dp
        for cfg in (1, 2) if guidance else (1,):
            if rest % cfg:
                continue
            for tp in divisors(rest // cfg):
                sp = rest // cfg // tp
                for u in divisors(sp):
                    out.append(
                        Strategy(tp=tp, ulysses=u, ring=sp // u, cfg=cfg, dp=dp, order=XDIT_ORDER)
                    )
    return out


def plan_dit(
    model: DiTSpec | str,
    cluster: Cluster,
    request: DiTRequest | None = None,
    switches: DiTSwitches | None = None,
    search: DiTSearch | None = None,
    *,
    height: int | None = None,
    width: int | None = None,
    frames: int | None = None,
    steps: int | None = None,
    guidance: bool | None = None,
    top_k: int | None = None,
    devices: int | None = None,
    data_parallel: bool | None = None,
    allow_cross_node: bool | None = None,
    vae_parallel: bool | None = None,
    vae_tiling: bool | None = None,
    text_encoder_on_device: bool | None = None,
    precision: str | None = None,
    compiled: bool | None = None,
    memory: DiTMemoryOptions | None = None,
    framework: str | DiTFramework | None = None,
    max_latency_s: float | None = None,
) -> DiTPlan:
    """Rank every legal Ulysses/ring/CFG/TP split of the devices (default: the cluster's).

    Typed form: ``plan_dit(model, cluster, request, switches, search)`` with a
    :class:`~parastrat.estimate.dit_options.DiTRequest` (what is generated),
    :class:`~parastrat.estimate.dit_options.DiTSwitches` (how it runs: every split is priced
    with them by :func:`~parastrat.estimate.dit.estimate_dit`) and
    :class:`~parastrat.estimate.dit_options.DiTSearch` (what may be tried); the keyword form
    builds them, an omitted keyword taking its field's default.

    ``data_parallel=True`` also tries replicas (``dp``) that serve separate requests and
    ranks by requests per second; otherwise all devices serve one request and the ranking is
    by latency.  A split fits when its peak memory phase does (``memory``: how the weights are
    kept).  ``framework`` ("mindiesd", "xdit", "diffusers" or "any"; None: MindIE-SD on
    Ascend, xDiT on GPUs) keeps only the splits that framework runs for this model
    (:mod:`~parastrat.spec.dit_frameworks`) and names the launch.
    ``guidance=None`` follows the model (one branch for guidance-distilled
    models, so no CFG split is proposed); ``True``/``False`` override.
    ``max_latency_s``: a latency bound (a serving SLO): splits slower per request are
    dropped, so with ``data_parallel=True`` the plan is the most requests per second
    within it.
    Raises :class:`SpecError` for a workload the model cannot take,
    :class:`StrategyError` (rule ``<framework>-size``) for an output size the framework's port
    of the model refuses, and :class:`UsageError` when no split is legal or fits, saying what
    would.
    """
    request, switches = resolve_dit(
        request,
        switches,
        who="plan_dit",
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        guidance=guidance,
        precision=precision,
        compiled=compiled,
        vae_parallel=vae_parallel,
        vae_tiling=vae_tiling,
        text_encoder_on_device=text_encoder_on_device,
        memory=memory,
        framework=framework,
    )
    search = resolve_search(
        search,
        who="plan_dit",
        top_k=top_k,
        devices=devices,
        data_parallel=data_parallel,
        allow_cross_node=allow_cross_node,
        max_latency_s=max_latency_s,
    )
    return _plan(_Job.of(model, cluster, request, switches, search))


@dataclass(frozen=True)
class _Job:
    """What :func:`plan_dit` plans, checked: the model, the cluster, the typed request,
    switches (the serving framework resolved) and search, and the devices to split."""

    model: DiTSpec
    cluster: Cluster
    request: DiTRequest
    switches: DiTSwitches
    search: DiTSearch
    devices: int
    guidance: bool

    @classmethod
    def of(
        cls,
        model: DiTSpec | str,
        cluster: Cluster,
        request: DiTRequest,
        switches: DiTSwitches,
        search: DiTSearch,
    ) -> _Job:
        """The checked job; SpecError for a model, cluster or picture size the model cannot
        take, StrategyError for one the framework's port refuses, UsageError for a device
        count the cluster does not have."""
        model = get_dit(model)
        cluster = require_cluster(cluster, "plan_dit()")
        model.latent_shape(request.height, request.width, request.frames)
        guidance = resolve_guidance(model, request.guidance)
        target = get_framework(switches.framework, cluster.accel.vendor)
        wrong_size = target.size_violations(model, request.height, request.width)
        if wrong_size:
            raise StrategyError(wrong_size)
        n = _device_count(cluster, search.devices)
        switches = replace(switches, framework=target)
        return cls(model, cluster, request, switches, search, n, guidance)

    @property
    def framework(self) -> DiTFramework:
        """The serving framework whose limits the splits keep."""
        return get_framework(self.switches.framework)

    def price(self, strategy: Strategy, cluster: Cluster | None = None) -> DiTReport:
        """``strategy``'s report for this job (on ``cluster``: another view of the devices)."""
        c = self.cluster if cluster is None else cluster
        return estimate_dit(self.model, strategy, c, self.request, self.switches)


def _plan(job: _Job) -> DiTPlan:
    """Price and rank every split of the job's devices."""
    model, cluster, req, search, n = job.model, job.cluster, job.request, job.search, job.devices
    video = model.tokens(req.height, req.width, req.frames)
    domain = None if search.allow_cross_node else cluster.scale_up_domain
    runs = functools.partial(job.framework.violations, model=model)
    splits = _splits(n, job.guidance, search.data_parallel)
    found = _price_splits(splits, job.price, domain, runs)
    found = _bounded(found, search.max_latency_s, f"{n} {cluster.accel.name}", model)
    if not found.priced:
        tried = (search.allow_cross_node, search.data_parallel, job.framework)
        raise _nothing_fits(model, cluster, n, video, found, tried, _remedy(job, found))
    objective = "throughput" if search.data_parallel else "latency"
    ranked = _ranked(found.priced, model, objective)
    return DiTPlan(
        model=model.name,
        accelerator=cluster.accel.name,
        devices=n,
        workload=_workload(job, video),
        candidates=ranked[: search.top_k],
        advice=_advice(model, ranked, n, video, job.guidance, found.reasons, job.framework.title),
        rejected=found.rejected,
        objective=objective,
        framework=job.framework.name,
        track_record=track_record(model, cluster.accel),
        published=dit_published_beside(
            model,
            cluster.accel.name,
            (n, req.height, req.width, req.frames, req.steps, job.switches.compiled),
            ranked,
        ),
        sensitivity=tuple(
            changes(
                lambda c: job.price(ranked[0].strategy, c).latency_s,
                cluster,
                job.switches.precision,
                attention_efficiency(cluster.accel, model.head_dim),
            )
        ),
    )


def _workload(job: _Job, video: int) -> dict[str, Any]:
    """The plan's ``workload`` entry: the request, with guidance resolved and where it came
    from, and the tokens it makes."""
    req = job.request
    return {
        "height": req.height,
        "width": req.width,
        "frames": req.frames,
        "steps": req.steps,
        "guidance": job.guidance,
        "guidance_from": "argument" if req.guidance is not None else "model",
        "compiled": job.switches.compiled,
        "video_tokens": video,
        "text_tokens": job.model.text_tokens,
    }


def _ranked(priced: list[DiTCandidate], model: DiTSpec, objective: str) -> list[DiTCandidate]:
    """The priced splits best first (by requests per second for "throughput", else by
    latency), each with the reasons for its place."""
    if objective == "throughput":
        priced.sort(key=lambda c: (-c.requests_per_s, c.latency_s))
    else:
        priced.sort(key=lambda c: (c.latency_s, c.memory.total))
    best = priced[0]
    return [DiTCandidate(c.strategy, c.report, _why(c, best, model, objective)) for c in priced]


def _device_count(cluster: Cluster, devices: int | None) -> int:
    """The devices to split (default: the cluster's), checked."""
    n = cluster.num_devices if devices is None else devices
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"devices={n!r} must be a whole number >= 1")
    if n > cluster.num_devices:
        raise UsageError(
            f"devices={n} but the cluster has {cluster.num_devices}; pass a "
            f"Cluster with num_devices >= {n}"
        )
    return n


@dataclass
class _Priced:
    """What pricing the splits found: those that fit, refusals counted by rule, the reports
    that did not fit memory, and why each (tp, ulysses, ring, cfg) was dropped."""

    priced: list[DiTCandidate] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    too_big: list[DiTReport] = field(default_factory=list)
    reasons: dict[tuple[int, int, int, int], str] = field(default_factory=dict)
    #: The first reason given under each rule, with its split.
    examples: dict[str, str] = field(default_factory=dict)

    def drop(self, s: Strategy, rule: str, why: str) -> None:
        self.rejected[rule] = self.rejected.get(rule, 0) + 1
        self.reasons[(s.tp, s.ulysses, s.ring, s.cfg)] = why
        self.examples.setdefault(rule, f"{label(s)}: {why}")

    def summary(self, most: int = 4) -> str:
        """The rules that dropped splits, most splits first, each with its first example."""
        ranked = sorted(self.rejected.items(), key=lambda kv: -kv[1])[:most]
        return "; ".join(
            f"{rule} ({count} split{'s' if count > 1 else ''}, e.g. {self.examples[rule]})"
            for rule, count in ranked
        )


def _price_splits(
    splits: list[Strategy], price: Any, domain: int | None, runs: Any = None
) -> _Priced:
    """Price every split with ``price(strategy=...)``; one the serving framework cannot run
    (``runs(s)``: its violations), a TP x Ulysses group wider than the scale-up ``domain``
    (None: allowed), a refused strategy and one that does not fit memory are dropped with
    the reason."""
    out = _Priced()
    for s in splits:
        if domain is not None and s.tp * s.ulysses > domain:
            tpu = s.tp * s.ulysses
            why = f"tp*ulysses = {tpu} would leave one {domain}-device NVLink/HCCS domain"
            out.drop(s, "TP/Ulysses across nodes", why)
            continue
        try:
            rep = price(strategy=s)
        except StrategyError as exc:
            out.drop(s, exc.violations[0].rule, exc.violations[0].message)
            continue
        refused = runs(s) if runs is not None else []  # after the model's own rules
        if refused:
            out.drop(s, refused[0].rule, refused[0].message)
            continue
        if not rep.memory.fits():
            why = (
                f"needs {rep.memory.total / GiB:.1f} GiB of {rep.memory.capacity / GiB:.1f} "
                f"({rep.memory.peak_phase})"
            )
            out.drop(s, "out of memory", why)
            out.too_big.append(rep)
            continue
        out.priced.append(DiTCandidate(strategy=s, report=rep))
    return out


def _bounded(found: _Priced, bound: float | None, devices: str, model: DiTSpec) -> _Priced:
    """``found`` within the latency ``bound`` (None: all of it); UsageError naming the fastest
    split when splits were priced but none meets the bound (``devices``: "8 h100")."""
    if bound is None:
        return found
    fastest = min(found.priced, key=lambda c: c.latency_s, default=None)
    kept = _within(found, bound)
    if not kept.priced and fastest is not None:
        raise UsageError(
            f"no split of {devices} devices serves {model.name} within {bound:g} s: the "
            f"fastest ({label(fastest.strategy)}) takes {fastest.latency_s:.3g} s; allow more "
            "latency, more devices, or fewer steps / a compiled transformer where the "
            "framework runs one"
        )
    return kept


def _within(found: _Priced, bound: float) -> _Priced:
    """``found`` with the splits slower than ``bound`` seconds per request dropped (rule
    "over the latency bound")."""
    kept = []
    for c in found.priced:
        if c.latency_s <= bound:
            kept.append(c)
        else:
            found.drop(c.strategy, "over the latency bound", f"{c.latency_s:.3g} s > {bound:g} s")
    found.priced = kept
    return found


def _remedy(job: _Job, found: _Priced) -> str:
    """The sentence naming the fewest memory remedies that make a too-big split fit, tried
    (:func:`.dit_remedies.working_remedy`); "" when none or no split was too big."""
    if not found.too_big:
        return ""

    def reprice(rep: DiTReport, sw: DiTSwitches) -> DiTReport | None:
        try:
            return estimate_dit(job.model, rep.strategy, job.cluster, job.request, sw)
        except UsageError:  # a switch this framework's launch of the model has none of
            return None

    works = working_remedy(job.switches, found.too_big, reprice)
    if works is None:
        return ""
    names, rep = works
    tight = rep.memory.total > TIGHT_MEMORY * rep.memory.capacity
    return (
        f". Tried: with {names}, {label(rep.strategy)} fits at "
        f"{rep.memory.total / GiB:.1f} GiB ({rep.latency_s:.3g} s"
        f"{', little headroom' if tight else ''})"
    )


def _nothing_fits(
    model: DiTSpec,
    cluster: Cluster,
    n: int,
    video: int,
    found: _Priced,
    tried: tuple,
    remedy: str = "",
) -> UsageError:
    """Why no split is left, and what would leave one (``tried``: whether the search already
    allowed cross-node groups and data-parallel replicas, and the serving framework;
    ``remedy``: :func:`_remedy`'s sentence)."""
    if found.too_big:
        least = min(found.too_big, key=lambda r: r.memory.total)
        return UsageError(
            f"no split of {n} {cluster.accel.name} devices fits {model.name}: the smallest "
            f"({label(least.strategy)}) needs {least.memory.total / GiB:.1f} GiB of "
            f"{least.memory.capacity / GiB:.1f} at its {least.memory.peak.describe()}; "
            f"{least.memory.hint()}{remedy}"
        )
    cross_node, replicas, target = tried
    fixes = []
    if any("heads" in rule for rule in found.rejected):  # heads-tp, heads-ulysses, kv-heads-...
        fixes.append("a device count whose factors divide the heads")
    if any(rule.startswith(f"{target.name}-") for rule in found.rejected):
        fixes.append(
            f"framework='any' (the splits the model prices without {target.title}'s limits)"
        )
    if not cross_node and "TP/Ulysses across nodes" in found.rejected:
        fixes.append("allow_cross_node=True")
    if not replicas:
        fixes.append("data_parallel=True (replicas serving separate requests)")
    fixes = fixes or ["another device count"]
    return UsageError(
        f"no legal split of {n} devices for {model.name} "
        f"({model.num_attention_heads} heads, {video} tokens): {found.summary()}. Use "
        + ", or ".join(fixes)
    )


def _share(rep: DiTReport, key: str) -> str:
    return f"{rep.breakdown[key]:.3g} s ({100 * rep.breakdown[key] / rep.latency_s:.1f} %)"


def _why(c: DiTCandidate, best: DiTCandidate, model: DiTSpec, objective: str) -> list[str]:
    """Reasons for one candidate's place: what its degrees buy, and what costs it time."""
    s, rep = c.strategy, c.report
    out: list[str] = []
    if s.ulysses > 1:
        out.append(
            f"Ulysses {s.ulysses}: {model.num_attention_heads // s.tp // s.ulysses} "
            f"heads per rank; all-to-all {_share(rep, 'ulysses_all_to_all')}"
        )
    if s.ring > 1 and not rep.breakdown["ring_merge"]:  # gathered whole (MindIE-SD's ports)
        out.append(
            f"ring {s.ring}: K/V all-gathered before the attention "
            f"{_share(rep, 'ring_kv_exchange')}, not hidden"
        )
    elif s.ring > 1:
        hidden = rep.hidden.get("ring_kv_exchange", 0.0)
        out.append(
            f"ring {s.ring}: K/V exchange {hidden + rep.breakdown['ring_kv_exchange']:.3g}"
            f" s, {hidden:.3g} s of it hidden by attention; merges "
            f"{_share(rep, 'ring_merge')}"
        )
    if s.cfg > 1:
        out.append(
            f"CFG 2: the two guidance branches run on separate halves; gather "
            f"{_share(rep, 'cfg_gather')}"
        )
    if s.tp > 1:
        out.append(
            f"TP {s.tp}: weights {rep.memory.weights / GiB:.1f} GiB per device; "
            f"all-reduces {_share(rep, 'tp_all_reduce')}"
        )
    if c is best:
        comm = sum(rep.breakdown[k] for k in COMM_KEYS)
        out.append(
            f"best by {objective}: communication {100 * comm / rep.latency_s:.1f} % "
            f"of {rep.latency_s:.3g} s"
        )
    else:
        moved = _moved(rep, best.report)
        if moved:
            slower = rep.latency_s / best.latency_s - 1
            out.append(f"{100 * slower:+.1f} % latency vs best: {moved}")
    if rep.tokens.padding:
        out.append(f"pads {rep.tokens.padding} tokens so {rep.tokens.sp} ranks split them")
    mem = rep.memory
    if mem.total > TIGHT_MEMORY * mem.capacity:
        out.append(
            f"little headroom: {mem.total / GiB:.1f} of {mem.capacity / GiB:.1f} GiB "
            f"({mem.total / mem.capacity:.1%}) at its {mem.peak_phase}; to keep more free: "
            f"{mem.hint()}"
        )
    return out


#: Parts of the latency that moved by less than this share of the largest move are not named.
MOVED_FLOOR = 0.01
#: How many parts :func:`_moved` names in each direction.
MOVED_NAMED = 2


def _moved(rep: DiTReport, best: DiTReport) -> str:
    """The largest parts of ``rep``'s latency that moved against ``best``'s, in both
    directions and savings first when ``rep`` is faster: "attention -0.269 s, linear layers
    -0.243 s; host launch overhead +0.105 s" ("" when nothing moved)."""
    diff = {k: rep.breakdown[k] - best.breakdown[k] for k in rep.breakdown}
    floor = MOVED_FLOOR * max((abs(v) for v in diff.values()), default=0.0)
    big = [k for k in diff if abs(diff[k]) > floor]
    saved = sorted((k for k in big if diff[k] < 0), key=lambda k: diff[k])[:MOVED_NAMED]
    added = sorted((k for k in big if diff[k] > 0), key=lambda k: -diff[k])[:MOVED_NAMED]
    groups = [saved, added] if rep.latency_s < best.latency_s else [added, saved]
    return "; ".join(", ".join(f"{_LABELS[k]} {diff[k]:+.3g} s" for k in g) for g in groups if g)


def _advice(
    model: DiTSpec,
    ranked: list[DiTCandidate],
    n: int,
    video: int,
    guidance: bool,
    reasons: dict[tuple[int, int, int, int], str],
    framework: str,
) -> list[str]:
    """MindIE-SD's suggestions for ``n`` devices, each placed in the ranking of the plan for
    ``framework`` (its title, named in every line) with a reason."""
    wanted: list[tuple[str, tuple[int, int, int, int]]] = []  # (text, (tp, u, r, cfg))
    heads = model.num_attention_heads
    if n == 2:
        wanted = [("TP 2", (2, 1, 1, 1))]
        if guidance:
            wanted.append(("CFG 2", (1, 1, 1, 2)))
    elif n == 4:
        wanted = [("Ulysses 4", (1, 4, 1, 1))]
        if guidance:
            wanted.append(("TP 2 + CFG 2", (2, 1, 1, 2)))
    if n >= 4 and video >= LONG_SEQUENCE:
        cfg = 2 if guidance and n % 2 == 0 else 1
        sp = n // cfg
        u = max(d for d in divisors(sp) if heads % d == 0 and d <= 8)
        if sp // u > 1:
            wanted.append(
                (
                    f"long sequence: Ulysses {u} + ring {sp // u}"
                    + (" + CFG 2" if cfg > 1 else ""),
                    (1, u, sp // u, cfg),
                )
            )
    if not wanted:
        return []
    index: dict[tuple[int, int, int, int], int] = {}
    for i, c in enumerate(ranked):
        index.setdefault((c.strategy.tp, c.strategy.ulysses, c.strategy.ring, c.strategy.cfg), i)
    best = ranked[0]
    out = []
    for text, key in wanted:
        if key not in index:
            why = reasons.get(key, "not a legal split here")
            out.append(f"{text}: not a candidate under {framework} ({why})")
            continue
        i = index[key]
        c = ranked[i]
        if i == 0:
            out.append(f"{text}: agrees -- ranked first under {framework} at {c.latency_s:.3g} s")
            continue
        out.append(
            f"{text}: ranked {i + 1} under {framework} at {c.latency_s:.3g} s, "
            f"{100 * (c.latency_s / best.latency_s - 1):+.1f} % vs {label(best.strategy)}"
            f"; {_moved(c.report, best.report) or 'the same parts'}"
        )
    return out
