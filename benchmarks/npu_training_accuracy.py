"""Training-step accuracy on Ascend 910B against published MindSpeed-LLM measurements.

    python benchmarks/npu_training_accuracy.py            # every row
    python benchmarks/npu_training_accuracy.py --short    # CI: a handful of rows
    python benchmarks/npu_training_accuracy.py --ablation # MAPE under other switch readings

Reads ``benchmarks/data/npu_training_measured.csv`` (40 tokens/s/NPU figures of MindSpeed-LLM's
README performance table, Atlas 900 A2 PODc, with the parallel configuration of each model's
example script) and ``benchmarks/data/npu_models.csv`` (each model's architecture and the
script flags that change its cost, with sources).  For every row it builds the ModelSpec, the
Strategy (TP, PP, VPP = layers / (PP x layers per virtual stage) where the row says "N
layers/vstage", EP, DP = devices / (TP x PP x CP), sequence parallelism when TP > 1 as every
script sets it), ``Cluster("ascend-910b", devices)`` and prices it with
:func:`~parastrat.estimate.step.estimate_step` and
:func:`~parastrat.estimate.memory.estimate_memory`:

* switches from the script: ``--use-flash-attn`` (flash attention), ``--use-distributed-
  optimizer`` and ``--overlap-grad-reduce`` (Megatron's defaults are off for all three, and the
  scripts without a flag run without it); TP communication overlap is left to the library's
  default (``Switches.tp_comm_overlap=None``), so a change of that default shows here;
* recompute: the script's ``--recompute-granularity full`` where it sets one, else the cheapest
  of none / selective / full that fits 64 GiB;
* FP16 rows are priced as BF16: the 910B's cube units run both at the same rate (one
  ``bf16`` entry in the accelerator preset), and the loss-scaling work is not modelled;
* ALiBi models (Baichuan-13B, Baichuan2-13B, BLOOM) are priced with no position embedding
  (``position_embedding_type="none"``): ModelSpec has no ALiBi, whose bias add is fused into
  the attention kernel (or, without flash attention, one more score-sized elementwise op).

Rows whose TP x PP exceeds the device count follow the source the row's notes cite (see
:data:`DEVICES_FROM_NOTES`); rows that still cannot be priced are skipped with the reason.
The script prints, per row, the measured and predicted tokens/s/NPU and the signed error, then
the MAPE over all priced rows, by family (dense / MoE) and the skipped rows.  No constant is
fitted to these rows.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import parastrat as ps
from parastrat.errors import SpecError, StrategyError, UsageError
from parastrat.estimate.memory import estimate_memory
from parastrat.estimate.step import StepReport, estimate_step
from parastrat.spec.workload import Switches

DATA = Path(__file__).resolve().parent / "data"
MEASURED = DATA / "npu_training_measured.csv"
MODELS = DATA / "npu_models.csv"
ACCELERATOR = "ascend-910b"

#: Rows priced in ``--short`` (CI): TP 8 / PP 1, PP with VPP, pure DP, an uneven pipeline split
#: with full recompute and no flash attention, and an MoE row.
SHORT_ROWS = ("T095", "T098", "T113", "T118", "T126")

#: Device counts taken from the row's own notes where the table's cluster cannot hold the
#: script's TP x PP: Mixtral-8x7B (table "2x8", script TP 8 x PP 4 = 32 NPUs);
#: examples/mixtral/README_en.md reports the same 487 tokens/s/p on "4 nodes and 32 chips with
#: tp8 pp4".
DEVICES_FROM_NOTES = {"T121": 32}

#: Recompute modes, cheapest first.
ALL_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class NpuModel:
    """A model of the table: its spec and the script flags that change its cost."""

    spec: ps.ModelSpec
    flags: frozenset[str]
    stage_layers: tuple[int, int] | None
    alibi: bool
    #: TP, PP, micro and global batch of the script version read (``script_config``)
    script_config: str


def _int(cell: str) -> int | None:
    return int(cell) if cell.strip() else None


def _yes(cell: str) -> bool:
    return cell.strip() == "yes"


def model_from_row(r: dict[str, str]) -> NpuModel:
    """The ModelSpec (and script flags) of one ``npu_models.csv`` row."""
    experts = _int(r["experts"])
    spec = ps.ModelSpec(
        name=r["model"],
        num_layers=int(r["layers"]),
        hidden_size=int(r["hidden"]),
        num_attention_heads=int(r["heads"]),
        num_query_groups=_int(r["kv_heads"]),
        kv_channels=_int(r["kv_channels"]),
        ffn_hidden_size=int(r["ffn"]),
        vocab_size=int(r["vocab"]),
        make_vocab_size_divisible_by=int(r["vocab_divisible_by"]),
        gated_linear_unit=_yes(r["gated"]),
        activation=r["activation"] if r["activation"] != "silu" else None,
        normalization=r["normalization"],
        position_embedding_type="none" if r["position"] == "alibi" else r["position"],
        tied_embeddings=_yes(r["tied"]),
        add_bias_linear=_yes(r["bias_linear"]),
        add_qkv_bias=_yes(r["qkv_bias"]),
        sliding_window=_int(r["sliding_window"]),
        num_moe_experts=experts,
        moe_router_topk=_int(r["topk"]) or 2,
        max_position_embeddings=8192,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        source=r["source"],
    )
    split = r["stage_layers"].split("/") if r["stage_layers"].strip() else None
    return NpuModel(
        spec=spec,
        flags=frozenset(r["flags"].split()),
        stage_layers=(int(split[0]), int(split[1])) if split else None,
        alibi=r["position"] == "alibi",
        script_config=r["script_config"],
    )


def load_models() -> dict[str, NpuModel]:
    """Every model of ``npu_models.csv`` by name."""
    with open(MODELS) as fh:
        return {r["model"]: model_from_row(r) for r in csv.DictReader(fh)}


def parse_vpp(cell: str, num_layers: int, pp: int) -> int:
    """Virtual stages per pipeline rank from the row's ``vpp`` cell: empty -> 1, "N
    layers/vstage" (Megatron's ``--num-layers-per-virtual-pipeline-stage N``) ->
    layers / (PP x N), which must be whole."""
    cell = cell.strip()
    if not cell:
        return 1
    per_stage = int(cell.split()[0])
    vpp, rest = divmod(num_layers, pp * per_stage)
    if rest or vpp < 1:
        raise ValueError(
            f"{num_layers} layers do not split into PP {pp} x {per_stage} layers per virtual stage"
        )
    return vpp


def row_devices(r: dict[str, str]) -> int:
    """Devices a row is priced on (:data:`DEVICES_FROM_NOTES` overrides the table)."""
    return DEVICES_FROM_NOTES.get(r["row_id"], int(r["num_gpus"]))


def row_strategy(r: dict[str, str], m: NpuModel) -> ps.Strategy:
    """The row's Strategy with its world size (DP = devices / (TP x PP x CP))."""
    tp, pp = int(r["tp"]), int(r["pp"])
    first, last = m.stage_layers or (None, None)
    strategy = ps.Strategy(
        tp=tp,
        pp=pp,
        vpp=parse_vpp(r["vpp"], m.spec.num_layers, pp),
        cp=_int(r["cp"]) or 1,
        ep=_int(r["ep"]) or 1,
        # an empty cell is Megatron's default: experts split over the TP group (Megatron Core's
        # expert_tensor_parallel_size=None -> tensor_model_parallel_size; the Core releases
        # before it had no separate degree and split experts by TP)
        etp=_int(r["etp"]) or tp,
        sp=tp > 1,
        first_stage_layers=first,
        last_stage_layers=last,
    )
    return strategy.with_world_size(row_devices(r))


def row_switches(
    m: NpuModel,
    tp_overlap: bool | None = None,
    defaults: bool = False,
    mc2: bool = False,
    ce_fusion: bool | None = None,
) -> Switches:
    """Switches the script sets (``--use-flash-attn``, ``--use-distributed-optimizer``,
    ``--overlap-grad-reduce``), TP overlap at ``tp_overlap`` and the loss fusion at
    ``ce_fusion`` (None: the library's defaults on Ascend, both off; no script read sets
    ``--cross-entropy-loss-fusion``); ``defaults``: Megatron Core's defaults instead of the
    script's flags; ``mc2``: TP overlap on where the script sets ``--use-mc2`` (both for the
    ablation)."""
    if mc2:
        tp_overlap = "--use-mc2" in m.flags or tp_overlap
    if defaults:
        return Switches(tp_comm_overlap=tp_overlap, cross_entropy_fusion=ce_fusion)
    return Switches(
        flash_attention="--use-flash-attn" in m.flags,
        distributed_optimizer="--use-distributed-optimizer" in m.flags,
        overlap_grad_reduce="--overlap-grad-reduce" in m.flags,
        tp_comm_overlap=tp_overlap,
        cross_entropy_fusion=ce_fusion,
    )


def row_modes(m: NpuModel) -> tuple[str, ...]:
    """The script's recompute mode, or every mode cheapest first."""
    return ("full",) if "--recompute-granularity=full" in m.flags else ALL_MODES


def cheapest_fitting(m, strategy, cluster, r, switches) -> tuple[StepReport, bool, float]:
    """(step, fits, peak GiB) with the cheapest of :func:`row_modes` that fits, else the
    last one tried."""
    seq, gbs, mbs = int(r["seq_len"]), int(r["global_batch_size"]), int(r["micro_batch_size"])
    last = None
    for mode in row_modes(m):
        sw = switches.with_recompute(mode)
        mem = estimate_memory(
            m.spec,
            strategy,
            sw,
            seq_len=seq,
            global_batch_size=gbs,
            micro_batch_size=mbs,
            precision="bf16",
        )
        step = estimate_step(
            m.spec,
            strategy,
            cluster,
            sw,
            seq_len=seq,
            global_batch_size=gbs,
            micro_batch_size=mbs,
            precision="bf16",
        )
        last = (step, mem.fits(cluster.accel), mem.peak_bytes / 2**30)
        if last[1]:
            break
    assert last is not None
    return last


def price_row(r: dict[str, str], models: dict[str, NpuModel], **switch_kw: Any) -> dict:
    """One priced row (or one with ``skip`` set to the reason)."""
    measured = float(r["tokens_per_sec_per_gpu"])
    out: dict[str, Any] = {"id": r["row_id"], "model": r["model"], "measured": measured}
    m = models.get(r["model"])
    if m is None:
        return out | {"skip": "model not in npu_models.csv"}
    out["moe"] = m.spec.is_moe
    try:
        strategy = row_strategy(r, m)
        cluster = ps.Cluster(ACCELERATOR, num_devices=row_devices(r))
        step, fits, peak = cheapest_fitting(m, strategy, cluster, r, row_switches(m, **switch_kw))
    except (SpecError, StrategyError, UsageError, ValueError) as exc:
        return out | {"skip": str(exc).splitlines()[0]}
    pred = step.tokens_per_s_per_gpu
    return out | {
        "tp": strategy.tp,
        "pp": strategy.pp,
        "seq": int(r["seq_len"]),
        "mc2": "--use-mc2" in m.flags,
        "devices": strategy.world_size,
        "strategy": f"{strategy} mbs{r['micro_batch_size']} gbs{r['global_batch_size']}",
        "recompute": step.recompute,
        "fits": fits,
        "peak_gib": peak,
        "predicted": pred,
        "error": (pred - measured) / measured,
        "mfu": step.mfu,
        "note": _row_note(r, m),
        "drift": row_config(r) != m.script_config,
    }


def row_config(r: dict[str, str]) -> str:
    """The row's TP, PP, micro and global batch as ``script_config`` spells them."""
    return f"TP{r['tp']} PP{r['pp']} mbs{r['micro_batch_size']} gbs{r['global_batch_size']}"


def _row_note(r: dict[str, str], m: NpuModel) -> str:
    """Flags shown beside a row: the script version read has another parallel configuration
    ("drift": its flags may differ from the measured run's), devices from the notes, ALiBi,
    FP16, no flash attention."""
    notes = ["drift"] if row_config(r) != m.script_config else []
    if r["row_id"] in DEVICES_FROM_NOTES:
        notes.append(f"{DEVICES_FROM_NOTES[r['row_id']]} NPUs per notes")
    if m.alibi:
        notes.append("alibi")
    if r["precision"].upper() == "FP16":
        notes.append("fp16")
    if "--use-flash-attn" not in m.flags:
        notes.append("no FA")
    return ", ".join(notes)


def measured_rows(short: bool) -> list[dict[str, str]]:
    """The measured rows (``--short``: :data:`SHORT_ROWS` only)."""
    with open(MEASURED) as fh:
        rows = list(csv.DictReader(fh))
    return [r for r in rows if not short or r["row_id"] in SHORT_ROWS]


def price_all(short: bool, **switch_kw) -> list[dict]:
    """Every (or the short) row priced with :func:`price_row`."""
    models = load_models()
    return [price_row(r, models, **switch_kw) for r in measured_rows(short)]


def mape(rows: list[dict]) -> float:
    """Mean absolute percentage error of the priced rows (nan when none)."""
    errs = [abs(r["error"]) for r in rows if "error" in r]
    return sum(errs) / len(errs) if errs else float("nan")


def summary(rows: list[dict]) -> tuple[float, float, float, int]:
    """(MAPE all, dense, MoE, priced rows)."""
    priced = [r for r in rows if "error" in r]
    dense = [r for r in priced if not r["moe"]]
    moe = [r for r in priced if r["moe"]]
    return mape(priced), mape(dense), mape(moe), len(priced)


def print_table(rows: list[dict]) -> None:
    """The per-row table."""
    print(
        f"{'id':<5} {'model':<14} {'NPUs':>4} {'strategy':<40} {'rec':<9} {'fit':>3} "
        f"{'GiB':>5} {'measured':>8} {'predicted':>9} {'error':>7} {'MFU':>5}  notes"
    )
    for r in rows:
        if "skip" in r:
            print(f"{r['id']:<5} {r['model']:<14} skipped: {r['skip']}")
            continue
        print(
            f"{r['id']:<5} {r['model']:<14} {r['devices']:>4} {r['strategy']:<40} "
            f"{r['recompute']:<9} {'yes' if r['fits'] else 'NO':>3} {r['peak_gib']:5.1f} "
            f"{r['measured']:8.0f} {r['predicted']:9.0f} {r['error']:+7.1%} {r['mfu']:5.1%}  "
            f"{r['note']}"
        )


def group_stats(rows: list[dict], key: str) -> list[str]:
    """ "value: MAPE, mean signed error (rows)" for each value of ``key`` among dense rows."""
    dense = [r for r in rows if not r["moe"]]
    out = []
    for value in sorted({r[key] for r in dense}):
        group = [r for r in dense if r[key] == value]
        bias = sum(r["error"] for r in group) / len(group)
        out.append(f"{value}: {mape(group):.1%} MAPE, {bias:+.1%} signed ({len(group)})")
    return out


def print_summary(rows: list[dict]) -> None:
    """MAPE over all priced rows, by family, signed mean error, skipped rows."""
    all_, dense, moe, n = summary(rows)
    priced = [r for r in rows if "error" in r]
    n_moe = sum(1 for r in priced if r["moe"])
    bias = sum(r["error"] for r in priced) / n if n else float("nan")
    worst = max(priced, key=lambda r: abs(r["error"])) if priced else None
    print()
    print(
        f"tokens/s/NPU MAPE {all_:.1%} over {n} priced rows (dense {dense:.1%} over {n - n_moe}, "
        f"MoE {moe:.1%} over {n_moe}); mean signed error {bias:+.1%}"
    )
    if worst:
        print(f"worst row: {worst['id']} {worst['model']} {worst['error']:+.1%}")
    same = [r for r in priced if not r["drift"]]
    print(
        f"rows whose script version read has the row's TP/PP/mbs/gbs: MAPE {mape(same):.1%} "
        f"over {len(same)}; the other {n - len(same)} ('drift'): "
        f"{mape([r for r in priced if r['drift']]):.1%}"
    )
    print(f"predicted to fit 64 GiB: {sum(1 for r in priced if r['fits'])}/{n}")
    for label, key in (("TP", "tp"), ("PP", "pp"), ("seq", "seq")):
        print(f"by {label}: " + "; ".join(group_stats(priced, key)))
    tp_rows = [r for r in priced if r["tp"] > 1]
    print("TP > 1 by the script's --use-mc2: " + "; ".join(group_stats(tp_rows, "mc2")))
    skipped = [r for r in rows if "skip" in r]
    print(f"skipped: {len(skipped)}")
    for r in skipped:
        print(f"  {r['id']} {r['model']}: {r['skip']}")


#: ``--ablation`` cases: label -> keywords of :func:`row_switches`.
ABLATION = {
    "script flags, TP overlap at the library default": {},
    "script flags, TP overlap off everywhere": {"tp_overlap": False},
    "script flags, TP overlap on (SP, inside a node)": {"tp_overlap": True},
    "script flags, TP overlap on where the script sets --use-mc2": {"mc2": True},
    "script flags, cross-entropy fused (Megatron Bridge's default)": {"ce_fusion": True},
    "Megatron Core defaults (FA, dist. optimizer, DP overlap on)": {"defaults": True},
}


def ablation() -> int:
    """MAPE of every row under each :data:`ABLATION` reading, as a Markdown table."""
    print("| switches | MAPE all | dense | MoE | mean signed error |")
    print("|---|---|---|---|---|")
    for label, kw in ABLATION.items():
        rows = price_all(False, **kw)
        all_, dense, moe, n = summary(rows)
        bias = sum(r["error"] for r in rows if "error" in r) / n
        print(f"| {label} | {all_:.1%} | {dense:.1%} | {moe:.1%} | {bias:+.1%} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, price the rows, print the table and the summary."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--short", action="store_true", help=f"CI: only rows {', '.join(SHORT_ROWS)}")
    ap.add_argument(
        "--ablation", action="store_true", help="print only the MAPE under other switch readings"
    )
    args = ap.parse_args(argv)
    if args.ablation:
        return ablation()
    t0 = time.perf_counter()
    rows = price_all(args.short)
    print_table(rows)
    print_summary(rows)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
