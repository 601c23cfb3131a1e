"""FSDP shard and replicate groups against the real frameworks, built on CPU.

* Megatron Core 0.16: ``parallel_state.initialize_model_parallel`` with
  ``num_distributed_optimizer_instances`` (Megatron FSDP's hybrid sharding, Bridge's
  ``ddp.num_distributed_optimizer_instances``), run for real on torch's fake process group; the
  rank lists it hands to ``create_group`` are recorded by their ``group_desc``: the
  intra-instance dp-cp groups are the FSDP shard groups (``dp_shard-cp``), the inter-instance
  groups (level 1 of the expert-DP hierarchy, which Megatron FSDP uses as its outer group) are
  ``dp_replicate``.
* torchtitan 0.3.0: ``ParallelDims.build_mesh`` for real, on the fake process group; its
  device meshes ``(pp, dp_replicate, dp_shard, cp, tp)`` and ``(pp, dp_replicate, efsdp, ep)``
  give every group.  Its package imports two modules this environment lacks (``tyro`` through
  ``torchtitan.config.__init__`` and ``spmd_types``, used only for annotations and other
  backends), so the test imports ``parallel_dims.py`` and ``config/configs.py`` themselves,
  with an empty ``spmd_types`` and a bare ``torchtitan.config`` package.
"""

from __future__ import annotations

import warnings

import pytest

from parastrat import Strategy, layout


# ---------------------------------------------------------------------------------------------
# Megatron Core
# ---------------------------------------------------------------------------------------------
def megatron_fsdp_groups(s: Strategy, world: int, monkeypatch) -> dict[str, list[list[int]]]:
    """Rank lists initialize_model_parallel creates, by group_desc."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps = pytest.importorskip("megatron.core.parallel_state")
    made: dict[str, list[list[int]]] = {}
    real = ps.create_group

    def record(ranks=None, timeout=None, backend=None, pg_options=None, group_desc=None, **kw):
        made.setdefault(group_desc, []).append(list(ranks))
        return real(ranks, timeout=timeout, backend=backend, pg_options=pg_options, **kw)

    monkeypatch.setattr(ps, "create_group", record)
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=s.tp,
            pipeline_model_parallel_size=s.pp,
            context_parallel_size=s.cp,
            expert_model_parallel_size=s.ep,
            expert_tensor_parallel_size=s.etp,
            num_distributed_optimizer_instances=s.dp_replicate,
            order=s.order,
            create_gloo_process_groups=False,
        )
    finally:
        ps.destroy_model_parallel()
    return made


MEGATRON_CASES = [
    # (strategy kwargs, world)
    (dict(tp=2, cp=2, dp_replicate=2, fsdp="optim_grads_params"), 16),
    (dict(tp=2, dp_replicate=2, fsdp="optim_grads"), 16),
    (dict(tp=1, pp=2, dp_replicate=4, fsdp="optim"), 32),
    (dict(tp=2, pp=2, cp=2, dp_replicate=2, fsdp="optim_grads_params"), 32),
    (dict(tp=2, ep=4, dp_replicate=2, fsdp="optim_grads_params"), 32),
    (dict(tp=2, ep=2, etp=2, pp=2, dp_replicate=2, fsdp="optim"), 32),
    # partial distributed optimizer without FSDP, on Bridge's use_tp_pp_dp_mapping order
    (dict(tp=2, pp=2, dp_replicate=2, order="tp-cp-ep-pp-dp"), 32),
    (dict(tp=4, cp=2, dp_replicate=3), 48),
]


@pytest.mark.parametrize(("kwargs", "world"), MEGATRON_CASES)
def test_fsdp_groups_equal_megatron_hybrid_sharding(kwargs, world, fake_world, monkeypatch):
    pytest.importorskip("einops")
    s = Strategy(**kwargs)
    fake_world(world)
    made = megatron_fsdp_groups(s, world, monkeypatch)
    ours = layout(s, world)
    # same groups, each in the same rank order (Megatron lists them instance by instance)
    assert sorted(ours["dp_shard-cp"]) == sorted(made["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"])
    assert sorted(ours["dp_replicate"]) == sorted(
        made["HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1"]
    )
    # the shard axis alone: the intra-instance dp groups without CP
    shard = {tuple(g) for g in ours["dp_shard"]}
    for g in made["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"]:
        assert sum(len(x) for x in shard if set(x) <= set(g)) == len(g)
    assert ours["dp-cp"] == made["DATA_PARALLEL_GROUP_WITH_CP"]


def test_without_replicas_the_shard_group_is_megatrons_dp_cp_group(fake_world, monkeypatch):
    s = Strategy(tp=2, cp=2, fsdp="optim_grads_params")
    fake_world(16)
    made = megatron_fsdp_groups(s, 16, monkeypatch)
    ours = layout(s, 16)
    assert "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP" not in made  # Megatron reuses dp-cp
    assert ours["dp_shard-cp"] == made["DATA_PARALLEL_GROUP_WITH_CP"]
    assert ours["dp_replicate"] == [[r] for r in range(16)]


# ---------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------
def mesh_groups(mesh, names: tuple[str, ...]) -> list[list[int]]:
    """Groups of ranks along ``names`` (flattened, last fastest) of a DeviceMesh."""
    t = mesh.mesh
    dims = [mesh.mesh_dim_names.index(n) for n in names]
    rest = [d for d in range(t.dim()) if d not in dims]
    size = 1
    for d in dims:
        size *= t.shape[d]
    return sorted(t.permute(*rest, *dims).reshape(-1, size).tolist())


TORCHTITAN_CASES = [
    (dict(tp=2, cp=2, dp_replicate=2, fsdp="optim_grads_params"), 16),
    (dict(tp=2, pp=2, dp_replicate=2, fsdp="optim_grads_params"), 32),
    (dict(tp=4, dp_shard=2, dp_replicate=3, fsdp="optim_grads_params"), 24),
    (dict(tp=2, cp=2, pp=2, ep=4, fsdp="optim_grads_params"), 32),
    (dict(tp=2, ep=8, dp_replicate=2, fsdp="optim_grads_params"), 32),
    (dict(tp=1, ep=2, pp=3, dp_replicate=2, fsdp="optim_grads"), 24),
]


@pytest.mark.parametrize(("kwargs", "world"), TORCHTITAN_CASES)
def test_groups_equal_torchtitan_device_mesh(kwargs, world, fake_world, parallel_dims):
    s = Strategy(**kwargs).with_world_size(world)
    fake_world(world)
    dims = parallel_dims(
        dp_replicate=s.dp_replicate,
        dp_shard=-1,
        cp=s.cp,
        tp=s.tp,
        pp=s.pp,
        ep=s.ep,
        world_size=world,
        spmd_backend="full_dtensor",
    )
    dims.build_mesh()
    dense, sparse = dims._global_meshes["dense"], dims._global_meshes["sparse"]
    ours = {k: sorted(v) for k, v in layout(s, world).items()}
    for kind, axes in (
        ("tp", ("tp",)),
        ("cp", ("cp",)),
        ("pp", ("pp",)),
        ("dp_shard", ("dp_shard",)),
        ("dp_replicate", ("dp_replicate",)),
        ("dp_shard-cp", ("dp_shard", "cp")),  # torchtitan's flattened "fsdp" axis
        ("dp", ("dp_replicate", "dp_shard")),  # its "batch" axis
    ):
        assert ours[kind] == mesh_groups(dense, axes), kind
    if s.ep > 1:  # torchtitan keeps the sparse mesh only with EP (experts then have no TP)
        assert s.etp == 1
        assert ours["ep"] == mesh_groups(sparse, ("ep",))
        assert ours["edp"] == mesh_groups(sparse, ("dp_replicate", "efsdp"))
