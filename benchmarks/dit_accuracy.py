"""Price every published DiT measurement whose model and device have presets.

    python benchmarks/dit_accuracy.py [--short] [--json]

Reads ``benchmarks/data/dit_measured.csv`` (106 xDiT, Wan and ParaAttention measurements, each
with its source), prices each row with :func:`parastrat.estimate.dit.estimate_dit` under the
row's own degrees, and prints (docs/accuracy-dit.md quotes this output):

1. the per-row table: measured, predicted, error; for multi-GPU rows the measured and
   predicted speed-up over the row's own single-GPU row (same model, size, device and
   compile mode) and its error;
2. latency MAPE, the speed-up errors, the rows skipped and why;
3. the MAPE per model and device; HunyuanVideo 1280x720x129, 50 steps on 1/2/4/8 H100 and
   H20 (xDiT) and the 8-GPU speed-ups;
4. the orderings the data shows: on NVLink Ulysses ahead of ring at equal degree, on PCIe
   L40 ring ahead, CFG the best two-device split when guidance is on;
5. peak memory per GPU for the rows that state one (Wan2.1-T2V-14B, 720p x 81 frames on
   1/2/4/8 H20, A800, H800), each priced the way Wan's README ran it
   (:meth:`DiTMemoryOptions.wan_generate`: one GPU ``--offload_model True``; several
   ``--dit_fsdp --t5_fsdp --ulysses_size N``), with the peak phase and the memory MAPE.

``--short`` (CI) prints only the summary (2-4).  No constant is fitted to these rows.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import parastrat as ps
from parastrat.errors import SpecError, StrategyError
from parastrat.estimate import dit as dit_est
from parastrat.estimate import dit_serial, dit_step
from parastrat.estimate.dit import estimate_dit
from parastrat.estimate.dit_memory import DiTMemoryOptions
from parastrat.spec import dit
from parastrat.spec.vae import HUNYUAN_VAE_2024

DATA = Path(__file__).parent / "data" / "dit_measured.csv"
X = "tp-sp-pp-cfg-dp"
TARGET = 0.15

MODELS = {
    "FLUX.1-schnell (12B)": "flux.1-schnell",
    "CogVideoX-2b": "cogvideox-2b",
    "CogVideoX-5b": "cogvideox-5b",
    "stable-diffusion-3-medium (2B)": "sd3-medium",
    "Wan2.1 T2V-14B": "wan2.1-t2v-14b",
    "mochi-1-preview": "mochi-1",
}
#: Device column -> preset.  "A800/A100" and "H800/H100" are Wan's README labels for its
#: A800 and H800 measurements.
DEVICES = {
    "A100": "a100",
    "A100 80GB (8x NVLink)": "a100",
    "A100 (8x NVLink)": "a100",
    "A100-SXM4-80GB": "a100",
    "L40 (8x PCIe Gen4)": "l40",
    "L40 (PCIe)": "l40",
    "H20": "h20",
    "A800/A100": "a800",
    "H800/H100": "h800",
}
#: Pipeline defaults the rows leave out: Mochi (diffusers MochiPipeline: 480x848; ParaAttention's
#: run_mochi.py asks 84 frames = 14 latent frames, which 79 frames also give, and leaves the
#: steps at the pipeline default).  Doubt: diffusers 0.35 defaults to 64 steps, but 64 steps with
#: CFG at this size need 1.1e15 FLOPs per step -- 196 s would be 1.2x the A100's dense peak --
#: so the December 2024 table cannot have run 64; 28 (the default of diffusers' first Mochi
#: pipeline, as of FLUX) is used.
MOCHI = dict(height=480, width=848, frames=79, steps=28)
#: xDiT docs/performance/hunyuanvideo.md, Ulysses, seconds (H100 and H20 tables).
HUNYUAN = {
    "h100": {1: 1904.08, 2: 925.04, 4: 514.08, 8: 337.58},
    "h20": {1: 6639.0, 2: 3401.0, 4: 1763.0, 8: 941.0},
}


@dataclass
class Row:
    """One priced row."""

    row_id: str
    model: str
    device: str
    n: int
    label: str
    compiled: bool
    measured: float
    predicted: float
    group: tuple
    per_step: bool
    #: the request (height, width, frames, steps), the degrees (ulysses, ring, cfg) and the
    #: row's source
    workload: dict[str, Any] = dataclasses.field(default_factory=dict)
    degrees: tuple[int, int, int] = (1, 1, 1)
    source: str = ""


def _int(text: str, default: int = 1) -> int:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else default


def _workload(r: dict[str, str], model: str) -> dict[str, Any]:
    if model == "mochi-1":
        return dict(MOCHI)
    w, h = (int(v) for v in re.findall(r"(\d+)x(\d+)", r["resolution"])[0])
    return dict(height=h, width=w, frames=_int(r["frames"]), steps=_int(r["steps"]))


#: Model variants for the ablation (``--short`` skips it): what each mechanism contributes.
ABLATIONS = (
    "full model",
    "no serial parts",
    "no host launch overhead",
    "no row-by-row VAE mask",
    "Wan VAE in bf16",
    "no Hopper VAE ceiling",
    "generic element-wise passes",
    "no output post-processing",
    "no sequence-parallel copies",
    "no cold first VAE decode",
)
_ABLATE = {"mode": "full model"}


def _model(name: str) -> Any:
    return _variant(dit.get(name))


def _cold_vae(model: str) -> bool:
    """Whether the row's timed call is the process's first VAE decode: xDiT's FLUX pipeline warms
    up with ``output_type="latent"`` (``xFuserFluxPipeline.prepare_run``), so its timed call
    decodes cold (``dit_serial.VAE_COLD_START_S``).  Other harnesses: not known to be cold."""
    return model.startswith("flux") and _ABLATE["mode"] != "no cold first VAE decode"


def _output(model: str) -> str:
    """The row's ``output_type``: Wan's and HunyuanVideo's own repositories return the decoded
    tensor (the video is written after the timed call); the diffusers pipelines that xDiT and
    ParaAttention time default to PIL images (``VaeImageProcessor.postprocess``)."""
    if _ABLATE["mode"] == "no output post-processing" or model.startswith(("wan", "hunyuan")):
        return "pt"
    return "pil"


def _variant(spec: Any) -> Any:
    """``spec`` with the ablation's mechanism switched off (unchanged for the full model)."""
    mode = _ABLATE["mode"]
    if mode == "no serial parts":
        return dataclasses.replace(spec, vae=None, text_encoders=(), text_encoder_params=1.0)
    if mode == "no row-by-row VAE mask" and spec.vae is not None:
        return dataclasses.replace(spec, vae=dataclasses.replace(spec.vae, causal_mask_rows=False))
    if mode == "Wan VAE in bf16" and spec.vae is not None and spec.vae.precision == "fp32":
        return dataclasses.replace(spec, vae=dataclasses.replace(spec.vae, precision="bf16"))
    return spec


def hunyuan_model() -> Any:
    """HunyuanVideo as xDiT measured it: the official repository's VAE of Dec 2024 (fp16,
    its own tiling, the causal mask built row by row; ``vae.HUNYUAN_VAE_2024``)."""
    return _variant(dataclasses.replace(dit.get("hunyuanvideo"), vae=HUNYUAN_VAE_2024))


def price(r: dict[str, str]) -> Row | str:
    """Price one CSV row, or say why it is skipped."""
    model = MODELS.get(r["model"])
    device = DEVICES.get(r["gpu_type"])
    if model is None or device is None:
        return f"no preset for {r['model']!r} on {r['gpu_type']!r}"
    if r["torch_compile"] == "onediff":
        return "OneDiff compilation (not torch.compile) is not modelled"
    n = _int(r["num_gpus"])
    u, ring, cfg = _int(r["ulysses"]), _int(r["ring"]), _int(r["cfg_parallel"])
    if _int(r["pipefusion"]) > 1:
        return "PipeFusion is not modelled"
    if model.startswith("wan") and n > 1:
        u = n  # Wan's README multi-GPU recipe: --ulysses_size N (with FSDP of the weights)
    if u * ring * cfg != n:
        return f"degrees {u}x{ring}x{cfg} do not make {n} GPUs"
    compiled = r["torch_compile"] == "yes"
    kw = _workload(r, model)
    s = ps.Strategy(ulysses=u, ring=ring, cfg=cfg, order=X)
    try:
        cluster = ps.Cluster(device, num_devices=n)
        rep = estimate_dit(
            _model(model),
            s,
            cluster,
            compiled=compiled,
            output_type=_output(model),
            vae_cold=_cold_vae(model),
            **kw,
        )
    except (SpecError, StrategyError) as exc:
        return f"refused: {exc}"
    per_step = r["latency_scope"].startswith("seconds per diffusion step")
    label = " x ".join(f"{k}{v}" for k, v in (("U", u), ("R", ring), ("CFG", cfg)) if v > 1)
    return Row(
        row_id=r["row_id"],
        model=model,
        device=device,
        n=n,
        label=label or "1 GPU",
        compiled=compiled,
        measured=float(r["latency_s"]),
        predicted=rep.per_step_s if per_step else rep.latency_s,
        group=(model, device, r["resolution"], compiled),
        per_step=per_step,
        workload=kw,
        degrees=(u, ring, cfg),
        source=r["source"],
    )


def evaluate() -> dict[str, Any]:
    """Price every row; errors, speed-ups and skips."""
    with DATA.open(newline="") as f:
        raw = list(csv.DictReader(f))
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    for r in raw:
        out = price(r)
        if isinstance(out, str):
            skipped[r["row_id"]] = out
        else:
            rows.append(out)
    single = {x.group: x for x in rows if x.n == 1}
    table = []
    for x in rows:
        err = x.predicted / x.measured - 1
        entry: dict[str, Any] = {
            "row": x.row_id,
            "model": x.model,
            "device": x.device,
            "gpus": x.n,
            "split": x.label,
            "compiled": x.compiled,
            "row_key": x.group[2],
            "measured": x.measured,
            "predicted": x.predicted,
            "error": err,
            "per_step": x.per_step,
            "workload": x.workload,
            "degrees": x.degrees,
            "source": x.source,
        }
        base = single.get(x.group)
        if x.n > 1 and base is not None:
            ms, ps_ = base.measured / x.measured, base.predicted / x.predicted
            entry.update(measured_speedup=ms, predicted_speedup=ps_, speedup_error=ps_ / ms - 1)
        table.append(entry)
    mape = sum(abs(e["error"]) for e in table) / len(table)
    sp = [e for e in table if "speedup_error" in e]
    return {
        "rows": table,
        "mape": mape,
        "speedup_rows": len(sp),
        "speedup_within": sum(abs(e["speedup_error"]) <= TARGET for e in sp),
        "speedup_max_error": max((abs(e["speedup_error"]) for e in sp), default=0.0),
        "skipped": skipped,
    }


#: Wan's README labels the peaks "GB"; they are read as GiB (2**30 bytes, what
#: ``torch.cuda.max_memory_allocated() / 1024**3`` prints): the rows' drop from 2 to 8 GPUs,
#: (m2 - m8) / (1/2 - 1/8), is the sharded state of the whole world, and it matches the
#: sharded fp32 DiT + bf16 umT5 in GiB to < 1 % and in GB only to 7 % (:func:`memory_units`).
MEM_UNIT = 2**30


def _memory_rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["peak_mem_gb"].strip()]


#: Memory ablation: each mechanism of the Wan recipe switched off, all else equal.
MEMORY_ABLATIONS = (
    "Wan recipe",
    "weights stored in bf16",
    "guidance branches batched",
    "text encoder not sharded",
    "no VAE decode phase",
    "no FSDP (whole bf16 weights)",
)


def _memory_variant(mode: str, n: int) -> tuple[Any, DiTMemoryOptions]:
    """The Wan spec and memory options with ``mode``'s mechanism switched off."""
    spec = dit.get("wan2.1-t2v-14b")
    opts = DiTMemoryOptions.wan_generate(n)
    if mode == "weights stored in bf16":
        opts = dataclasses.replace(opts, weight_precision=None)
    elif mode == "guidance branches batched":
        opts = dataclasses.replace(opts, cfg_batched=True)
    elif mode == "text encoder not sharded":
        opts = dataclasses.replace(opts, encoder_fsdp=False)
    elif mode == "no VAE decode phase":
        spec = dataclasses.replace(spec, vae=None)
    elif mode == "no FSDP (whole bf16 weights)":
        opts = DiTMemoryOptions()
    return spec, opts


def price_memory(r: dict[str, str], mode: str = "Wan recipe") -> dict[str, Any] | str:
    """One ``peak_mem_gb`` row priced the way it ran (Wan's README recipe), or why not."""
    model, device = MODELS.get(r["model"]), DEVICES.get(r["gpu_type"])
    if model is None or device is None or not model.startswith("wan"):
        return f"no Wan recipe for {r['model']!r} on {r['gpu_type']!r}"
    n = _int(r["num_gpus"])
    spec, opts = _memory_variant(mode, n)
    rep = estimate_dit(
        spec,
        ps.Strategy(ulysses=n, order=X),
        ps.Cluster(device, num_devices=n),
        output_type=_output(model),
        memory=opts,
        **_workload(r, model),
    )
    mem = rep.memory
    measured = float(r["peak_mem_gb"])
    predicted = mem.total / MEM_UNIT
    tensors = (mem.total - mem.other) / MEM_UNIT
    return {
        "row": r["row_id"],
        "device": device,
        "gpus": n,
        "recipe": "--dit_fsdp --t5_fsdp --ulysses_size N" if n > 1 else "--offload_model True",
        "measured_gib": measured,
        "predicted_gib": predicted,
        "tensors_gib": tensors,
        "error": predicted / measured - 1,
        "tensors_error": tensors / measured - 1,
        "peak_phase": mem.peak_phase,
        "phases": {p.name: p.total / MEM_UNIT for p in mem.phases},
        "peak_parts": {k: v / MEM_UNIT for k, v in mem.peak.parts.items() if v},
    }


def memory(mode: str = "Wan recipe") -> dict[str, Any]:
    """Every ``peak_mem_gb`` row: measured vs predicted peak per GPU, and the MAPE."""
    rows, skipped = [], {}
    for r in _memory_rows():
        out = price_memory(r, mode)
        if isinstance(out, str):
            skipped[r["row_id"]] = out
        else:
            rows.append(out)
    n = max(1, len(rows))
    return {
        "rows": rows,
        "mape": sum(abs(e["error"]) for e in rows) / n,
        "tensors_mape": sum(abs(e["tensors_error"]) for e in rows) / n,
        "skipped": skipped,
        "units": memory_units(rows),
    }


def memory_units(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per device: the sharded state the measured 2- and 8-GPU peaks imply,
    (m2 - m8) / (1/2 - 1/8) in the CSV's unit, against the model's sharded bytes (fp32 DiT +
    bf16 umT5, the parts FSDP divides) in GB and in GiB."""
    spec = dit.get("wan2.1-t2v-14b")
    sharded = spec.num_params * 4 + spec.text_encoder_params * 2
    out = {}
    for device in sorted({e["device"] for e in rows}):
        by_n = {e["gpus"]: e["measured_gib"] for e in rows if e["device"] == device}
        if 2 in by_n and 8 in by_n:
            implied = (by_n[2] - by_n[8]) / (1 / 2 - 1 / 8)
            out[device] = {"implied": implied, "gb": sharded / 1e9, "gib": sharded / 2**30}
    return out


def ablation() -> dict[str, dict[str, float]]:
    """MAPE and speed-up rows within target with each mechanism switched off."""
    out = {}
    saved = dict(dit_step.HOST_OPS), dict(dit_step.FUSED_CHAINS), dict(dit_serial.VAE_CONV_CEILING)
    try:
        for mode in ABLATIONS:
            _ABLATE["mode"] = mode
            dit_step.HOST_OPS.update(saved[0])  # each variant switches one mechanism off
            dit_step.FUSED_CHAINS.update(saved[1])
            dit_serial.VAE_CONV_CEILING.update(saved[2])
            if mode == "no host launch overhead":
                for table in (dit_step.HOST_OPS, dit_step.FUSED_CHAINS):
                    table.update(dict.fromkeys(table, -1000))
            if mode == "no Hopper VAE ceiling":
                dit_serial.VAE_CONV_CEILING.clear()
            dit_step.USE_EAGER_TRAFFIC = mode != "generic element-wise passes"
            dit_step.USE_USP_COPIES = mode != "no sequence-parallel copies"
            res = evaluate()
            hy = hunyuan()
            out[mode] = {
                "mape": res["mape"],
                "speedup_within": res["speedup_within"],
                "speedup_rows": res["speedup_rows"],
                "hunyuan_h100": hy["h100"]["predicted_speedup"],
                "hunyuan_h20": hy["h20"]["predicted_speedup"],
            }
    finally:
        _ABLATE["mode"] = "full model"
        dit_step.USE_EAGER_TRAFFIC = True
        dit_step.USE_USP_COPIES = True
        dit_step.HOST_OPS.update(saved[0])
        dit_step.FUSED_CHAINS.update(saved[1])
        dit_serial.VAE_CONV_CEILING.update(saved[2])
    return out


def hunyuan() -> dict[str, Any]:
    """xDiT's HunyuanVideo 720p x 129 frames, 50 steps on H100 and H20 with Ulysses."""
    kw = dict(height=720, width=1280, frames=129, steps=50)
    model = hunyuan_model()
    out: dict[str, Any] = {}
    for device, table in HUNYUAN.items():
        rows = {}
        for n, measured in table.items():
            s = ps.Strategy(ulysses=n, order=X)
            cluster = ps.Cluster(device, num_devices=n)
            rep = estimate_dit(model, s, cluster, output_type=_output("hunyuanvideo"), **kw)
            rows[n] = {
                "measured": measured,
                "predicted": rep.latency_s,
                "vae_decode_s": rep.breakdown["vae_decode"],
            }
        out[device] = {
            "rows": rows,
            "predicted_speedup": rows[1]["predicted"] / rows[8]["predicted"],
            "measured_speedup": table[1] / table[8],
        }
    return out


#: xDiT docs/performance/flux.md (the page the FLUX.1-schnell rows come from): FLUX.1-dev,
#: 1024px, 28 steps on 1-4 H100, seconds eager / with torch.compile, by (ulysses, ring).
#: Not rows of dit_measured.csv; priced as a cross-check (:func:`flux_dev_h100`), with the
#: 256-token prompts xDiT's ``examples/flux_example.py`` runs (``max_sequence_length=256``;
#: the preset keeps FluxPipeline's default 512).
XDIT_FLUX_TEXT_TOKENS = 256
FLUX_DEV_H100_TABLE = {
    (1, 1): (6.71, 4.30),
    (2, 1): (4.38, 2.68),
    (1, 2): (5.31, 2.60),
    (2, 2): (5.19, 1.80),
    (4, 1): (4.24, 1.63),
    (1, 4): (5.11, 1.98),
}
FLUX_DEV_H100 = dict(zip((False, True), FLUX_DEV_H100_TABLE[(1, 1)], strict=True))


def flux_dev_h100() -> list[tuple[str, bool, float, float]]:
    """(split, compiled, measured s, predicted s) for every entry of xDiT's FLUX.1-dev H100
    table (:data:`FLUX_DEV_H100_TABLE`)."""
    out = []
    model = dit.get("flux.1-dev").with_text_tokens(XDIT_FLUX_TEXT_TOKENS)
    for (u, r), times in FLUX_DEV_H100_TABLE.items():
        s = ps.Strategy(ulysses=u, ring=r, order=X)
        cluster = ps.Cluster("h100", num_devices=u * r)
        for compiled, measured in zip((False, True), times, strict=True):
            rep = estimate_dit(
                model,
                s,
                cluster,
                height=1024,
                width=1024,
                steps=28,
                compiled=compiled,
                vae_cold=_cold_vae("flux.1-dev"),
            )
            label = " x ".join(f"{k}{v}" for k, v in (("U", u), ("R", r)) if v > 1) or "1 GPU"
            out.append((label, compiled, measured, rep.latency_s))
    return out


def compile_gain(rows: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(label, measured, predicted) eager/compiled time ratio for every row pair that differs
    only in torch.compile, plus xDiT's FLUX.1-dev on one H100."""
    eager = {
        (e["model"], e["device"], e["gpus"], e["split"], e["row_key"]): e
        for e in rows
        if not e["compiled"]
    }
    out = []
    for e in rows:
        twin = eager.get((e["model"], e["device"], e["gpus"], e["split"], e["row_key"]))
        if e["compiled"] and twin is not None:
            label = f"{e['row']} {e['model']} {e['device']} {e['split']}"
            out.append(
                (label, twin["measured"] / e["measured"], twin["predicted"] / e["predicted"])
            )
    kw = dict(height=1024, width=1024, steps=28)
    c = ps.Cluster("h100", num_devices=1)
    pred = {
        comp: estimate_dit(
            dit.get("flux.1-dev").with_text_tokens(XDIT_FLUX_TEXT_TOKENS),
            ps.Strategy(order=X),
            c,
            compiled=comp,
            vae_cold=True,
            **kw,
        ).latency_s
        for comp in (False, True)
    }
    out.append(
        (
            "xDiT FLUX.1-dev 1024px 28 steps, 1 H100",
            FLUX_DEV_H100[False] / FLUX_DEV_H100[True],
            pred[False] / pred[True],
        )
    )
    return out


def by_group(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Latency MAPE per (model, device)."""
    groups: dict[str, list[float]] = {}
    for e in rows:
        groups.setdefault(f"{e['model']} on {e['device']}", []).append(abs(e["error"]))
    return {k: sum(v) / len(v) for k, v in groups.items()}


def _split(model: str, device: str, kw: dict[str, Any], **deg: int) -> float:
    n = deg.get("ulysses", 1) * deg.get("ring", 1) * deg.get("cfg", 1)
    s = ps.Strategy(order=X, **deg)
    return estimate_dit(model, s, ps.Cluster(device, num_devices=n), **kw).latency_s


def orderings() -> list[tuple[str, bool, str]]:
    """The orderings the measurements show, checked on the model."""
    cog = dict(height=480, width=720, frames=49, steps=50)
    out = []
    for model in ("cogvideox-2b", "cogvideox-5b"):
        for deg in (2, 3):
            u = _split(model, "a100", cog, ulysses=deg)
            r = _split(model, "a100", cog, ring=deg)
            out.append(
                (
                    f"{model} A100 NVLink: Ulysses {deg} ahead of ring {deg}",
                    u < r,
                    f"{u:.1f} vs {r:.1f} s",
                )
            )
        for deg in (2, 3):
            u = _split(model, "l40", cog, ulysses=deg)
            r = _split(model, "l40", cog, ring=deg)
            out.append(
                (
                    f"{model} L40 PCIe: ring {deg} ahead of Ulysses {deg}",
                    r < u,
                    f"{r:.1f} vs {u:.1f} s",
                )
            )
    for model, device, kw in (
        ("cogvideox-2b", "a100", cog),
        ("cogvideox-5b", "l40", cog),
        ("mochi-1", "a100", MOCHI),
        ("sd3-medium", "a100", dict(height=1024, width=1024, steps=20)),
    ):
        c = _split(model, device, kw, cfg=2)
        best_other = min(_split(model, device, kw, ulysses=2), _split(model, device, kw, ring=2))
        out.append(
            (
                f"{model} {device}: CFG 2 the best two-device split",
                c < best_other,
                f"{c:.1f} vs {best_other:.1f} s",
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="summary only (CI)")
    ap.add_argument("--json", action="store_true", help="one JSON document")
    args = ap.parse_args()
    res = evaluate()
    hy = hunyuan()
    orders = orderings()
    mem = memory()
    if args.json:
        json.dump(
            {"accuracy": res, "hunyuanvideo": hy, "orderings": orders, "memory": mem},
            sys.stdout,
            indent=1,
            default=str,
        )
        print()
        return 0
    if not args.short:
        print(
            "row   model            device  GPUs split        comp  measured  predicted  error   "
            "speed-up meas/pred  error"
        )
        for e in res["rows"]:
            sp = ""
            if "speedup_error" in e:
                sp = (
                    f"{e['measured_speedup']:5.2f}/{e['predicted_speedup']:5.2f}  "
                    f"{100 * e['speedup_error']:+6.1f} %"
                )
            print(
                f"{e['row']:5} {e['model']:16} {e['device']:7} {e['gpus']:4} {e['split']:12} "
                f"{'yes' if e['compiled'] else 'no':4} {e['measured']:9.3f} {e['predicted']:10.3f} "
                f"{100 * e['error']:+6.1f} %  {sp}"
            )
        for rid, why in res["skipped"].items():
            print(f"skipped {rid}: {why}")
    n = len(res["rows"])
    print(f"priced rows: {n} (skipped {len(res['skipped'])})")
    print(f"latency MAPE: {100 * res['mape']:.1f} % (target <= {100 * TARGET:.0f} %)")
    print(
        f"speed-up vs own single-GPU row: {res['speedup_within']}/{res['speedup_rows']} rows "
        f"within {100 * TARGET:.0f} %, largest error {100 * res['speedup_max_error']:.1f} %"
    )
    for group, mape in by_group(res["rows"]).items():
        print(f"  {group:24} MAPE {100 * mape:5.1f} %")
    for device, h in hy.items():
        print(f"HunyuanVideo 1280x720x129, 50 steps, {device}, Ulysses (xDiT):")
        for k, v in h["rows"].items():
            e = v["predicted"] / v["measured"] - 1
            print(
                f"  {k} GPU: measured {v['measured']:.0f} s, predicted {v['predicted']:.0f} s "
                f"({100 * e:+.1f} %; VAE decode {v['vae_decode_s']:.0f} s)"
            )
        err = h["predicted_speedup"] / h["measured_speedup"] - 1
        print(
            f"  8-GPU speed-up: measured {h['measured_speedup']:.2f}x, "
            f"predicted {h['predicted_speedup']:.2f}x ({100 * err:+.1f} %)"
        )
    print("torch.compile: eager / compiled time, measured vs predicted:")
    for label, meas, pred in compile_gain(res["rows"]):
        print(f"  {label:44} {meas:5.2f}x vs {pred:5.2f}x")
    if not args.short:
        print("cross-check, xDiT FLUX.1-dev 1024px 28 steps on H100 (not in the CSV):")
        for label, compiled, meas, pred in flux_dev_h100():
            mode = "compiled" if compiled else "eager"
            print(
                f"  {label:8} {mode:8} measured {meas:5.2f} s, predicted {pred:5.2f} s "
                f"({100 * (pred / meas - 1):+6.1f} %)"
            )
        print("ablation (each mechanism off; all else equal):")
        for mode, a in ablation().items():
            print(
                f"  {mode:28} MAPE {100 * a['mape']:5.1f} %, speed-up rows within "
                f"{100 * TARGET:.0f} %: {a['speedup_within']}/{a['speedup_rows']}; "
                f"HunyuanVideo 8-GPU speed-up H100 {a['hunyuan_h100']:.2f}x, "
                f"H20 {a['hunyuan_h20']:.2f}x"
            )
    print("orderings:")
    for text, ok, detail in orders:
        print(f"  [{'holds' if ok else 'FAILS'}] {text} ({detail})")
    print_memory(mem, short=args.short)
    return 0


def print_memory(mem: dict[str, Any], *, short: bool) -> None:
    """The peak-memory comparison (section 5 of the module docstring)."""
    if not short:
        print(
            "peak memory per GPU, Wan2.1-T2V-14B 1280x720x81, 50 steps, as Wan's README ran it "
            "(GiB; the README's 'GB'):"
        )
        print(
            "row   device GPUs recipe                                 measured predicted "
            "error   tensors error   peak phase"
        )
        for e in mem["rows"]:
            print(
                f"{e['row']:5} {e['device']:6} {e['gpus']:4} {e['recipe']:38} "
                f"{e['measured_gib']:8.1f} {e['predicted_gib']:9.1f} {100 * e['error']:+6.1f} % "
                f"{e['tensors_gib']:7.1f} {100 * e['tensors_error']:+6.1f} %  {e['peak_phase']}"
            )
        for device, u in mem["units"].items():
            print(
                f"  units, {device}: the 2- and 8-GPU peaks imply a sharded state of "
                f"{u['implied']:.1f}; the fp32 DiT + bf16 umT5 are {u['gib']:.1f} GiB = "
                f"{u['gb']:.1f} GB -> the figures are GiB"
            )
        for rid, why in mem["skipped"].items():
            print(f"skipped memory row {rid}: {why}")
        print("memory ablation (each mechanism of the recipe off; all else equal):")
        for mode in MEMORY_ABLATIONS:
            a = memory(mode)
            worst = max(a["rows"], key=lambda e: abs(e["error"]))
            print(
                f"  {mode:30} MAPE {100 * a['mape']:5.1f} % (largest {100 * worst['error']:+.1f} % "
                f"at {worst['row']}, {worst['gpus']} GPU)"
            )
    n = len(mem["rows"])
    print(
        f"memory MAPE: {100 * mem['mape']:.1f} % over {n} peak_mem_gb rows (peak phase incl. the "
        f"{dit_est.RUNTIME_RESERVE_BYTES / 2**30:.0f} GiB runtime reserve; tensors only "
        f"{100 * mem['tensors_mape']:.1f} %)"
    )


if __name__ == "__main__":
    sys.exit(main())
