"""Strategy.initialize() at scale: one process acts as rank r of N on torch's fake process group.

``torch.testing._internal.distributed.fake_pg.FakeStore`` with ``init_process_group("fake")``
lets one process be any rank of any world; Megatron Core's real ``parallel_state`` then builds
that rank's groups (every ``new_group`` call of the whole world, as on a cluster), and
``Strategy.initialize`` adds the groups Megatron does not keep.  For worlds of 128 to 4,096 ranks
and the first, last and a random rank, every group's members must equal
:func:`parastrat.layout` (VPP included).  Each world runs in its own subprocess, so
``parallel_state``'s globals start clean.  The multi-process gloo tests
(test_runtime_groups.py) stay as they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("torch.testing._internal.distributed.fake_pg")

WORKER = textwrap.dedent("""
    import json, random, sys, warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from megatron.core import parallel_state as mps
    import parastrat as ps

    world, spec = int(sys.argv[1]), json.loads(sys.argv[2])
    s = ps.Strategy(**spec)
    expected = ps.layout(s.with_world_size(world), world)
    ranks = [0, world - 1, random.Random(world).randrange(1, world - 1)]
    out = []
    for r in ranks:
        dist.init_process_group("fake", rank=r, world_size=world, store=FakeStore())
        h = s.initialize(megatron_kwargs={"create_gloo_process_groups": False})
        got = {k: sorted(dist.get_process_group_ranks(h[k])) for k in expected}
        want = {k: sorted(next(g for g in groups if r in g)) for k, groups in expected.items()}
        out.append({
            "rank": r,
            "wrong": sorted(k for k in want if got[k] != want[k]),
            "kinds": len(want),
            "vpp": mps.get_virtual_pipeline_model_parallel_world_size(),
            "pp_group": got["pp"],
        })
        ps.destroy()
        dist.destroy_process_group()
    print(json.dumps(out))
""")

CASES = [
    (128, {"tp": 2, "pp": 8, "vpp": 2, "ep": 8, "sp": True}),
    (512, {"tp": 4, "pp": 4, "ulysses": 2, "ring": 2, "sp": True, "order": "tp-cp-ep-dp-pp"}),
    (1024, {"tp": 8, "pp": 16, "vpp": 4, "ep": 64, "sp": True}),
    (4096, {"tp": 8, "pp": 16, "vpp": 2, "ulysses": 2, "ring": 2, "ep": 32, "sp": True,
            "order": "tp-cp-ep-dp-pp"}),
]  # fmt: skip


@pytest.mark.parametrize(("world", "spec"), CASES, ids=[str(w) for w, _ in CASES])
def test_every_group_matches_layout_on_a_fake_world(world, spec):
    r = subprocess.run(
        [sys.executable, "-c", WORKER, str(world), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert [x["rank"] for x in results][:2] == [0, world - 1]
    pp, vpp = spec["pp"], spec.get("vpp", 1)
    for x in results:
        assert x["wrong"] == [], x
        assert x["kinds"] >= 10  # every kind parastrat.layout names, Megatron's and its own
        assert x["vpp"] == (vpp if vpp > 1 else None)
        assert len(x["pp_group"]) == pp and x["rank"] in x["pp_group"]


HSDP_WORKER = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from megatron.core import parallel_state as mps
    import parastrat as ps

    s = ps.Strategy(tp=2, dp_shard=4, dp_replicate=2, fsdp="optim_grads_params")
    expected = ps.layout(s.with_world_size(16), 16)
    out = []
    for r in (0, 5, 15):
        dist.init_process_group("fake", rank=r, world_size=16, store=FakeStore())
        s.initialize(megatron_kwargs={"create_gloo_process_groups": False})
        shard = mps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True)
        inter = mps.get_inter_distributed_optimizer_instance_group()
        out.append({
            "shard": sorted(dist.get_process_group_ranks(shard)),
            "want_shard": next(g for g in expected["dp_shard-cp"] if r in g),
            "inter": sorted(dist.get_process_group_ranks(inter)),
            "want_inter": next(g for g in expected["dp_replicate"] if r in g),
        })
        ps.destroy()
        dist.destroy_process_group()
    print(json.dumps(out))
""")


def test_hsdp_builds_megatron_distributed_optimizer_instances():
    """HSDP (dp_shard x dp_replicate): Megatron's intra-instance data-parallel group is the
    shard group and its inter-instance group the replicas, as the layout has them
    (initialize passes num_distributed_optimizer_instances = dp_replicate)."""
    r = subprocess.run(
        [sys.executable, "-c", HSDP_WORKER], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for x in json.loads(r.stdout.strip().splitlines()[-1]):
        assert x["shard"] == x["want_shard"] and x["inter"] == x["want_inter"]
