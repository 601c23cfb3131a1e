"""The MoE token-count sync drains the GPU's queue (mechanism ``sync_drain``).

Megatron's dispatchers copy the tokens-per-expert counts to the host once per MoE layer
forward; the copy returns only when the GPU has run everything queued, so the MoE block the
host issues afterwards runs at the host's pace, and its host time beyond its own GPU time is
exposed even when the layer as a whole has GPU time to spare.
"""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat.estimate.host_ops import host_ops
from parastrat.estimate.layer_cost import LayerCost
from parastrat.estimate.overlap import sync_drain
from parastrat.estimate.step import estimate_step
from parastrat.spec.workload import Mechanisms, Switches, parse_ablation

QWEN30 = ps.models.get("qwen3-30b-a3b")
LLAMA8 = ps.models.get("llama3-8b")
OFF = parse_ablation("sync_drain")


def test_the_block_after_the_sync_is_the_moe_block():
    s = ps.Strategy(ep=16).with_world_size(16)
    # Qwen3-30B-A3B, FP8 current scaling, 8 local experts: norm + residual 2, 2 grouped
    # matrices x 8 experts x (1 GEMM + 2 casts) 48, act 1, permute / unpermute 2, dispatch /
    # combine 2, sort / unsort 2, FP8 padding / unpadding 2 = 59 (test_step's count of the
    # MoE block); the router and the preprocessing before the sync are not in it
    assert host_ops(QWEN30, True, s, "fp8", after_sync=True) == (59, True)
    assert host_ops(LLAMA8, False, ps.Strategy().with_world_size(1), "fp8", after_sync=True)[0] == 0
    # the whole MoE block graphed: no sync, nothing issued after one
    assert host_ops(QWEN30, True, s, "fp8", frozenset({"moe"}), after_sync=True)[0] == 0


def test_drain_is_the_block_host_time_beyond_its_own_gpu_time():
    c = LayerCost(
        gemm_fwd=1.0e-3, gemm_bwd=2.0e-3, attn_fwd=0.0, attn_bwd=0.0, elem_fwd=0.0,
        elem_bwd=0.0, dense_params=0.0, expert_params=0.0, mlp_fwd=0.2e-3, mlp_bwd=0.4e-3,
    )  # fmt: skip
    # 0.8 ms of host time after the sync against 0.2 ms of GEMMs and 0.3 / 3 ms of exposed
    # communication in the forward
    assert sync_drain(0.8e-3, c, 0.3e-3, False) == pytest.approx(0.5e-3)
    # combined 1F1B issues another micro-batch's layer backward in the same span: hidden
    assert sync_drain(0.8e-3, c, 0.3e-3, True) == 0.0
    # a block whose GPU time exceeds its host time exposes nothing
    assert sync_drain(0.1e-3, c, 0.0, False) == 0.0


def _qwen_b200(mech, recompute="none"):
    cluster = ps.Cluster(accelerator="b200", num_devices=8)
    strategy = ps.Strategy(ep=8).with_world_size(8)
    return estimate_step(
        QWEN30,
        strategy,
        cluster,
        Switches(mechanisms=mech).with_recompute(recompute),
        seq_len=4096,
        global_batch_size=512,
        micro_batch_size=1,
        precision="mxfp8",
    )


def test_host_bound_moe_waits_for_the_host_after_each_sync():
    on, off = _qwen_b200(Mechanisms()), _qwen_b200(OFF)
    added = on.breakdown["host_exposed"] - off.breakdown["host_exposed"]
    assert added > 0
    assert on.step_time_s == pytest.approx(off.step_time_s + added)
    # never more than the host time of every post-sync block of the step: 48 MoE layers x 64
    # micro-batches x the block's operations
    h_op = 13.5e-6  # efficiency.HOST_OP_S["x86"]: B200 systems have x86 hosts
    block = host_ops(QWEN30, True, ps.Strategy(ep=8).with_world_size(8), "mxfp8", after_sync=True)[
        0
    ]
    assert added < 48 * on.micro_batches * block * h_op


def test_full_recompute_syncs_again_in_the_backward():
    on, off = _qwen_b200(Mechanisms(), "full"), _qwen_b200(OFF, "full")
    on1, off1 = _qwen_b200(Mechanisms()), _qwen_b200(OFF)
    once = on1.breakdown["host_exposed"] - off1.breakdown["host_exposed"]
    added = on.breakdown["host_exposed"] - off.breakdown["host_exposed"]
    assert added > once


def test_dense_models_are_unchanged():
    cluster = ps.Cluster(accelerator="h100", num_devices=8)
    s = ps.Strategy().with_world_size(8)
    kw = dict(seq_len=8192, global_batch_size=64, micro_batch_size=1, precision="fp8")
    on = estimate_step(LLAMA8, s, cluster, Switches(), **kw)
    off = estimate_step(LLAMA8, s, cluster, Switches(mechanisms=OFF), **kw)
    assert on.breakdown == off.breakdown
