"""Communication volumes and their pricing through Cluster.collective_time."""

import pytest

from parastrat import Strategy
from parastrat.estimate import comm
from parastrat.spec.cluster import Cluster
from parastrat.spec.model import ModelSpec

M = ModelSpec(
    name="t",
    num_layers=8,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=8,
    ffn_hidden_size=14336,
    vocab_size=32000,
    gated_linear_unit=True,
    num_moe_experts=8,
    moe_router_topk=2,
)


def test_strides_follow_megatron_order():
    s = Strategy(tp=2, cp=2, pp=2, ep=4, sp=True).with_world_size(32)
    st = comm.group_strides(s, dp=s.dp, edp=s.expert_dp)
    # tp-cp-ep-dp-pp: tp 1, cp 2, dp 4, pp 2*2*4 = 16; expert grid etp1 ep1 edp 4
    assert (st["tp"], st["cp"], st["dp"], st["pp"]) == (1, 2, 4, 16)
    assert (st["etp"], st["ep"], st["edp"]) == (1, 1, 4)


def test_tp_sp_volume_per_layer():
    s = Strategy(tp=4, sp=True).with_world_size(4)
    items = comm.tp_layer(M, s, tokens=8192, moe=False, strides={"tp": 1, "etp": 1})
    # dense layer: 4 all-gathers + 4 reduce-scatters of T h 2 bytes = 8192*4096*2 = 64 MiB
    assert {(c.op, c.count, c.nbytes) for c in items} == {
        ("all_gather", 4, 8192 * 4096 * 2),
        ("reduce_scatter", 4, 8192 * 4096 * 2),
    }


def test_priced_by_cluster_collective_time():
    cl = Cluster("h100", num_devices=16)
    c = comm.Collective("tp", "all_gather", 64e6, 4, 1, 4)
    assert c.time(cl) == pytest.approx(4 * cl.collective_time("all_gather", 64e6, 4, "intra"))


def test_ep_all_to_all_across_nodes_splits_by_link():
    cl = Cluster("h100", num_devices=16)
    c = comm.Collective("ep", "all_to_all", 1e9, 16, 1, 1)
    # 8 of 16 peers are local: 8/15 of the bytes cross the NIC, 7/15 stay on NVLink
    inter = cl.collective_time("all_to_all", 1e9 * 8 / 15, 16, "inter")
    intra = cl.collective_time("all_to_all", 1e9 * 7 / 15, 16, "intra")
    assert c.time(cl) == pytest.approx(max(inter, intra))
    assert c.time(cl) < cl.collective_time("all_to_all", 1e9, 16, "inter")


def test_ep_volume_and_cp_ring_volume():
    s = Strategy(tp=1, ep=8).with_world_size(8)
    (a2a,) = comm.ep_layer(M, s, tokens=4096, strides={"ep": 1})
    # dispatch + combine, fwd + bwd = 4 all-to-alls of T * topk * h * 2 = 4096*2*4096*2
    assert a2a.count == 4 and a2a.nbytes == 4096 * 2 * 4096 * 2
    s2 = Strategy(tp=2, cp=4, sp=True).with_world_size(8)
    ring, a2a = comm.cp_layer(M, s2, tokens=2048, strides={"ring": 2, "ulysses": 2})
    # K,V of 8/2 = 4 KV heads * 128: 2*4*128 = 1024 elements/token * 2048 tokens * 2 bytes;
    # 3 * (ring - 1) = 9 hops (forward 3, backward K/V 3 + their gradients 3)
    assert not a2a and ring[0].nbytes == 1024 * 2048 * 2 and ring[0].count == 9


def test_dedup_scale_hand_checked():
    # 4 experts in 2 groups of 2, top-2: both in one group with probability C(2,2)/C(4,2) *
    # 2 groups = 1/3, so a token touches 1 * 1/3 + 2 * 2/3 = 5/3 groups against 2 copies
    assert comm.expected_groups_hit(4, 2, 2) == pytest.approx(5 / 3)
    assert comm.dedup_scale(4, 2, 2) == pytest.approx(5 / 6)
    # one expert per group (EP = number of experts): nothing to de-duplicate
    assert comm.dedup_scale(8, 2, 8) == 1.0
    # Qwen3-30B-A3B (128 experts, top-8) over 8 ranks: 1 - prod (112-i)/(128-i) of 8
    miss = 1.0
    for i in range(8):
        miss *= (112 - i) / (128 - i)
    assert comm.dedup_scale(128, 8, 8) == pytest.approx(8 * (1 - miss) / 8)


def test_group_limited_routing_hand_checked():
    # 4 experts in 2 routing groups of 2, one group per token, top-2: both experts come from
    # the drawn group, so exactly one of the 2 blocks (= routing groups) is hit
    assert comm.expected_groups_hit(4, 2, 2, routing_groups=2, group_topk=1) == 1.0
    # 8 experts, 2 routing groups of 4, one drawn; blocks of 2 (4 blocks, 2 per group): the two
    # experts share a block with probability 2/6, so 1/3 * 1 + 2/3 * 2 = 5/3 blocks
    assert comm.expected_groups_hit(8, 2, 4, routing_groups=2, group_topk=1) == pytest.approx(5 / 3)
    # drawing every group is no limit at all
    assert comm.expected_groups_hit(256, 8, 8, 8, 8) == comm.expected_groups_hit(256, 8, 8)
    # DeepSeek-V3 on 8 nodes (EP 64): 4 of 8 node-sized groups, 8 experts among their 128:
    # 4 (1 - C(96, 8) / C(128, 8)) nodes instead of 8 (1 - C(224, 8) / C(256, 8))
    from math import comb

    limited = 4 * (1 - comb(96, 8) / comb(128, 8))
    assert comm.expected_groups_hit(256, 8, 8, 8, 4) == pytest.approx(limited)
    assert comm.dedup_scale(256, 8, 8, 8, 4) == pytest.approx(limited / 8)
    assert limited < comm.expected_groups_hit(256, 8, 8)


def test_flex_dispatcher_sends_once_per_rank_inside_a_domain():
    """DeepEP/HybridEP inside one NVLink domain: one copy per destination rank, not per
    routed expert (Megatron's alltoall permutes one row per expert)."""
    cl = Cluster("h100", num_devices=8)
    model = ModelSpec(
        name="fine",
        num_layers=4,
        hidden_size=2048,
        num_attention_heads=16,
        ffn_hidden_size=768,
        vocab_size=32000,
        gated_linear_unit=True,
        num_moe_experts=128,
        moe_router_topk=8,
    )
    s = Strategy(ep=8).with_world_size(8)
    (plain,) = comm.ep_layer(model, s, tokens=4096, strides={"ep": 1})
    (flex,) = comm.ep_layer(model, s, 4096, {"ep": 1}, "flex", cl.scale_up_domain)
    assert flex.local_scale == pytest.approx(comm.dedup_scale(128, 8, 8))
    assert flex.remote_scale == 1.0  # one domain: nothing crosses the NIC
    expect = 4 * cl.collective_time("all_to_all", plain.nbytes * flex.local_scale, 8, "intra")
    assert flex.time(cl) == pytest.approx(expect)
    assert flex.time(cl) < plain.time(cl)
    # across two H100 nodes (EP 16): per-domain copies on the NIC, per-rank on NVLink
    s16 = Strategy(ep=16).with_world_size(16)
    cl16 = Cluster("h100", num_devices=16)
    (f16,) = comm.ep_layer(model, s16, 4096, {"ep": 1}, "flex", cl16.scale_up_domain)
    assert f16.remote_scale == pytest.approx(comm.dedup_scale(128, 8, 2))
    assert f16.local_scale == pytest.approx(comm.dedup_scale(128, 8, 16))
    inter = cl16.collective_time("all_to_all", f16.nbytes * f16.remote_scale * 8 / 15, 16, "inter")
    intra = cl16.collective_time("all_to_all", f16.nbytes * f16.local_scale * 7 / 15, 16, "intra")
    assert f16.time(cl16) == pytest.approx(4 * max(inter, intra))


def test_dp_distributed_optimizer_volume():
    s = Strategy(tp=8).with_world_size(64)
    st = comm.group_strides(s, 8, 8)
    items = comm.dp_step(s, 1e9, 0, 8, 8, st)
    assert [(c.op, c.nbytes, c.group_size) for c in items] == [
        ("reduce_scatter", 2e9, 8),
        ("all_gather", 2e9, 8),
    ]
    assert comm.dp_step(s, 1e9, 0, 8, 8, st, distributed_optimizer=False)[0].op == "all_reduce"
