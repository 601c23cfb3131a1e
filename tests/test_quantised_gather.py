"""TP all-gathers move quantised bytes under FP8 / MXFP8 / NVFP4 with sequence parallelism.

Transformer Engine quantises a column-parallel linear's input before its sequence-parallel
all-gather and a row-parallel linear's output gradient before its backward all-gather
(``gather_along_first_dim(..., quantizer=...)``); the reduce-scatters stay BF16.  The
``quantised_gather`` mechanism prices that, and ablating it restores 2 bytes per element.
"""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat.estimate import comm, fp8
from parastrat.spec.workload import Switches, parse_ablation

from .test_comm import M

STRIDES = {"tp": 1, "etp": 1}


def test_all_gathers_carry_the_gathered_bytes_and_reduce_scatters_stay_bf16():
    s = ps.Strategy(tp=4, sp=True).with_world_size(4)
    full = 8192 * 4096 * 2
    items = comm.tp_layer(M, s, tokens=8192, moe=False, strides=STRIDES, gather_bytes=1.0)
    assert {(c.op, c.nbytes) for c in items} == {
        ("all_gather", full / 2),
        ("reduce_scatter", full),
    }
    # without SP the all-reduces carry the BF16 activations whatever the precision
    no_sp = ps.Strategy(tp=4).with_world_size(4)
    (ar,) = comm.tp_layer(M, no_sp, tokens=8192, moe=False, strides=STRIDES, gather_bytes=1.0)
    assert (ar.op, ar.nbytes) == ("all_reduce", full)


def test_gathered_bytes_per_precision():
    assert fp8.gather_bytes("bf16") == 2.0
    assert fp8.gather_bytes("fp8") == 1.0
    assert fp8.gather_bytes("mxfp8") == pytest.approx(1 + 1 / 32)  # E8M0 scale per 32
    assert fp8.gather_bytes("nvfp4") == pytest.approx(0.5 + 1 / 16)  # E4M3 scale per 16


def _tp_seconds(precision: str, accel: str, mechanisms: str = "") -> float:
    """Seconds of TP communication per step for Llama 3 70B at TP4 with SP, TP overlap off."""
    rep = ps.estimate_step(
        ps.models.get("llama3-70b"),
        ps.Strategy(tp=4, pp=4, vpp=5, sp=True),
        ps.Cluster(accel, 64),
        Switches(tp_comm_overlap=False, mechanisms=parse_ablation(mechanisms)),
        seq_len=8192,
        global_batch_size=256,
        precision=precision,
    )
    return rep.breakdown["tp"]


@pytest.mark.parametrize(
    "precision,accel", [("fp8", "h100"), ("mxfp8", "gb200"), ("nvfp4", "gb200")]
)
def test_a_quantised_run_moves_fewer_tp_bytes_and_the_ablation_restores_them(precision, accel):
    on = _tp_seconds(precision, accel)
    off = _tp_seconds(precision, accel, "quantised_gather")
    assert on < off
    # the ablated step prices its all-gathers as a BF16 run does (the amax reductions of
    # the quantised run aside)
    assert off >= _tp_seconds("bf16", accel)
    # half the TP bytes are all-gathers: at most that half shrinks
    assert on > 0.5 * off


def test_bf16_is_unchanged_by_the_mechanism():
    assert _tp_seconds("bf16", "h100") == _tp_seconds("bf16", "h100", "quantised_gather")
