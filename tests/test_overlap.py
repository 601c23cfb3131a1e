"""The overlap rules (``estimate/overlap.py``): what part of a collective stays exposed.

Properties every rule must keep whatever the durations: an overlapped collective is never
cheaper than its part beyond the window nor dearer than itself plus the contention on the part
it hides, more compute to hide behind never exposes more, and a switch that hides
communication never exposes more than running without it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parastrat.estimate.layer_cost import LayerCost
from parastrat.estimate.overlap import (
    OVERLAP_SLOWDOWN,
    MoEComm,
    effective_moe_comm,
    ep_exposed,
    exposed_time,
    moe_a2a_overlap_ok,
    tp_exposed,
)
from parastrat.spec.workload import ALL_MECHANISMS, Mechanisms
from parastrat.strategy import Strategy

SECONDS = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def _layer(gemm_fwd, gemm_bwd, attn, mlp_fwd, mlp_bwd, shared=0.0):
    return LayerCost(
        gemm_fwd=gemm_fwd,
        gemm_bwd=gemm_bwd,
        attn_fwd=attn,
        attn_bwd=2.5 * attn,
        elem_fwd=0.0,
        elem_bwd=0.0,
        dense_params=0.0,
        expert_params=0.0,
        mlp_fwd=mlp_fwd,
        mlp_bwd=mlp_bwd,
        shared=shared,
    )


@given(t=SECONDS, window=SECONDS, more=SECONDS)
def test_exposed_time_is_bounded_and_monotone_in_the_window(t, window, more):
    exposed = exposed_time(t, window, True)
    assert max(0.0, t - window) <= exposed + 1e-15
    assert exposed <= t + 1e-15  # hiding never costs more than not overlapping
    assert exposed_time(t, window + more, True) <= exposed + 1e-15
    assert exposed_time(t, window, False) == t


def test_exposed_time_hand_checked():
    # 3 ms of collective behind 2 ms of compute: 1 ms sticks out, the hidden 2 ms slow the
    # compute by OVERLAP_SLOWDOWN of their duration
    assert exposed_time(3e-3, 2e-3, True) == pytest.approx(1e-3 + OVERLAP_SLOWDOWN * 2e-3)
    assert exposed_time(1e-3, 5e-3, True) == pytest.approx(OVERLAP_SLOWDOWN * 1e-3)


@given(t=SECONDS, g_f=SECONDS, g_b=SECONDS, sp=st.booleans(), delayed=st.booleans())
def test_tp_overlap_and_async_share_never_expose_more_than_serial(t, g_f, g_b, sp, delayed):
    c = _layer(g_f, g_b, 0.0, 0.0, 0.0)
    serial = tp_exposed(t, c, False, sp, ALL_MECHANISMS.ablate("tp_async"))
    assert serial == t
    assert tp_exposed(t, c, True, sp, ALL_MECHANISMS) <= t + 1e-15
    assert tp_exposed(t, c, False, sp, ALL_MECHANISMS, delayed) <= t + 1e-15
    if delayed:  # a delayed wgrad leaves nothing for the async share to hide behind
        assert tp_exposed(t, c, False, sp, ALL_MECHANISMS, True) == t


@given(
    t_ep=SECONDS,
    attn=SECONDS,
    mlp_f=SECONDS,
    mlp_b=SECONDS,
    shared=SECONDS,
    dispatcher=st.sampled_from(["alltoall", "flex"]),
)
def test_moe_overlaps_never_expose_more_than_the_all_to_alls(
    t_ep, attn, mlp_f, mlp_b, shared, dispatcher
):
    c = _layer(mlp_f, mlp_b, attn, mlp_f, mlp_b, shared)
    plain = ep_exposed(c, t_ep, MoEComm(dispatcher), "none")
    assert plain == t_ep
    paired = ep_exposed(c, t_ep, MoEComm(dispatcher, a2a_overlap=True), "none")
    beside_shared = ep_exposed(c, t_ep, MoEComm(dispatcher, shared_expert_overlap=True), "none")
    assert 0.0 <= paired <= t_ep + 1e-15
    assert 0.0 <= beside_shared <= t_ep + 1e-15


def test_combined_1f1b_hides_each_phase_under_the_other_micro_batch():
    # four all-to-all phases of 1 ms each under compute phases of 2 ms: all hidden, only the
    # contention on the hidden 4 ms remains
    c = _layer(gemm_fwd=2e-3, gemm_bwd=2e-3, attn=0.0, mlp_fwd=2e-3, mlp_bwd=2e-3)
    c = replace(c, attn_fwd=2e-3, attn_bwd=2e-3)
    out = ep_exposed(c, 4e-3, MoEComm(a2a_overlap=True), "none")
    assert out == pytest.approx(OVERLAP_SLOWDOWN * 4e-3)


@pytest.mark.parametrize(
    ("strategy", "recompute", "mtp", "ok"),
    [
        (Strategy(ep=8), "none", 0, True),
        (Strategy(ep=1), "none", 0, False),  # nothing to overlap
        (Strategy(ep=8, pp=4), "none", 0, False),  # PP without VPP
        (Strategy(ep=8, pp=4, vpp=2), "selective", 0, True),
        (Strategy(ep=8), "full", 0, False),  # Megatron refuses it with full recompute
        (Strategy(ep=8), "none", 1, False),  # an MTP layer needs PP > 1
        (Strategy(ep=8, pp=4, vpp=2), "none", 1, True),
        (Strategy(ep=8, pp=4, vpp=2), "none", 2, False),  # one MTP layer at most
    ],
)
def test_combined_1f1b_runs_where_megatron_allows_it(strategy, recompute, mtp, ok):
    assert moe_a2a_overlap_ok(strategy, recompute, mtp_layers=mtp) is ok
    notes: list[str] = []
    wanted = MoEComm(a2a_overlap=True, shared_expert_overlap=True)
    got = effective_moe_comm(strategy, recompute, wanted, notes, mtp_layers=mtp)
    assert got.a2a_overlap is ok
    assert not (got.a2a_overlap and got.shared_expert_overlap)  # never both
    # each switch dropped is said (with EP 1 there is no all-to-all to speak of)
    assert bool(notes) is (strategy.ep > 1)


def test_shared_expert_overlap_needs_the_alltoall_dispatcher():
    notes: list[str] = []
    got = effective_moe_comm(
        Strategy(ep=8), "none", MoEComm("flex", shared_expert_overlap=True), notes
    )
    assert not got.shared_expert_overlap and "alltoall" in notes[0]
    unchanged = MoEComm("alltoall", shared_expert_overlap=True)
    assert effective_moe_comm(Strategy(ep=8), "none", unchanged, []) is unchanged


def test_mechanisms_default_is_everything_on():
    assert Mechanisms() == ALL_MECHANISMS
    assert all(getattr(ALL_MECHANISMS, name) for name in ALL_MECHANISMS.switches)
