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


def test_dp_distributed_optimizer_volume():
    s = Strategy(tp=8).with_world_size(64)
    st = comm.group_strides(s, 8, 8)
    items = comm.dp_step(s, 1e9, 0, 8, 8, st)
    assert [(c.op, c.nbytes, c.group_size) for c in items] == [
        ("reduce_scatter", 2e9, 8),
        ("all_gather", 2e9, 8),
    ]
    assert comm.dp_step(s, 1e9, 0, 8, 8, st, distributed_optimizer=False)[0].op == "all_reduce"
