"""The MoE layout-ranking benchmark (benchmarks/moe_layouts.py) reads its rows right.

Checks the reading of the Model Zoo table, not the predictions: each row's command becomes the
switches it names, every layout passes parastrat's rules on its own devices and batch, the
step model counts the FLOPs the table's TFLOP/s were computed with, and the pair count orders
only rows of one job.
"""

from __future__ import annotations

import csv

import pytest

import parastrat as ps
from parastrat.spec.workload import Mechanisms

from ._modules import load_script

load_script("benchmarks/planner_accuracy.py")  # the benchmark's sibling imports
load_script("benchmarks/planner_crosscheck.py")
BENCH = load_script("benchmarks/moe_layouts.py")
with open(BENCH.DATA) as fh:
    ROWS = list(csv.DictReader(fh))
BY_ID = {r["id"]: r for r in ROWS}
MECH = Mechanisms()


def test_commands_become_their_switches():
    sw = BENCH.switches_of(BY_ID["Z02"], MECH)
    assert sw.recompute == "selective"
    assert set(sw.mechanisms.recompute_modules) == {"layernorm", "moe_act"}
    assert sw.moe_dispatcher == "deepep" and sw.moe_a2a_overlap
    assert sw.tp_comm_overlap and sw.grad_reduce_in_fp32  # BF16: --tp-comm-overlap, FP32 grads
    assert BENCH.switches_of(BY_ID["Z03"], MECH).recompute == "full"
    assert BENCH.switches_of(BY_ID["Z04"], MECH).moe_dispatcher == "alltoall"
    gb200 = BENCH.switches_of(BY_ID["Z10"], MECH)
    assert gb200.cuda_graphs == {"attn", "moe_router", "moe_preprocess"}
    assert gb200.recompute == "none"
    assert not BENCH.switches_of(BY_ID["Z13"], MECH).tp_comm_overlap  # MXFP8: no TP overlap


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_layout_passes_the_rules_on_its_devices(row):
    model = ps.models.get(row["preset"])
    strategy = BENCH.strategy_of(row, model)
    assert strategy.world_size == int(row["num_gpus"])
    assert (strategy.tp, strategy.ep, strategy.pp) == (
        int(row["tp"]),
        int(row["ep"]),
        int(row["pp"]),
    )
    strategy.validate(
        model,
        world_size=int(row["num_gpus"]),
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["gbs"]),
        micro_batch_size=int(row["mbs"]),
    )


@pytest.mark.parametrize("row", [r for r in ROWS if r["step_s"]], ids=lambda r: r["id"])
def test_the_step_model_counts_the_tables_flops(row):
    """TFLOP/s x step seconds / tokens per GPU is the table's FLOPs per token; the step model's
    own count agrees within 1.5 % (the table rounds both figures)."""
    tokens_per_gpu = int(row["gbs"]) * int(row["seq_len"]) / int(row["num_gpus"])
    table = float(row["tflops_per_gpu"]) * 1e12 * float(row["step_s"]) / tokens_per_gpu
    priced = BENCH.price(row, MECH, {})
    model_flops = priced["predicted"] * 1e12 * priced["step"] / tokens_per_gpu
    assert model_flops == pytest.approx(table, rel=0.015)


def test_pairs_compare_rows_of_one_job_only():
    def row(id_, job, code="a"):
        return {"id": id_, "job": job, "code": code}

    priced = [
        {"row": row("A", "j"), "measured": 300.0, "predicted": 250.0},
        {"row": row("B", "j"), "measured": 200.0, "predicted": 260.0},
        {"row": row("C", "j"), "measured": 200.0, "predicted": 100.0},
        {"row": row("D", "other"), "measured": 900.0, "predicted": 1.0},
    ]
    got = [(f["row"]["id"], s["row"]["id"], ok) for f, s, ok in BENCH.pairs(priced)]
    # B and C tie as measured: no pair; D is another job
    assert got == [("A", "B", False), ("A", "C", True)]
