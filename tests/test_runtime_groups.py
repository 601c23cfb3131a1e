"""initialize()/destroy() on real gloo process groups, checked against layout and Megatron Core.

One spawned world of 8 ranks runs every strategy in turn (initialize -> check -> destroy ->
the next initialize in the same processes), because each spawn of 8 ranks costs tens of
seconds of Megatron imports on a small CI machine.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from parastrat import Strategy, StrategyError, layout
from parastrat.errors import UsageError
from parastrat.runtime import groups as rt_groups
from parastrat.runtime.launch import spawn_local

WORLD = 8

#: Named independently of the code under test: Megatron's getter for each layout kind.
MEGATRON_ORACLE = {
    "tp": ("get_tensor_model_parallel_group", {}),
    "cp": ("get_context_parallel_group", {}),
    "dp": ("get_data_parallel_group", {}),
    "dp-cp": ("get_data_parallel_group", {"with_context_parallel": True}),
    "pp": ("get_pipeline_model_parallel_group", {}),
    "tp-pp": ("get_model_parallel_group", {}),
    "etp": ("get_expert_tensor_parallel_group", {}),
    "ep": ("get_expert_model_parallel_group", {}),
    "edp": ("get_expert_data_parallel_group", {}),
    "etp-ep": ("get_expert_tensor_and_model_parallel_group", {}),
}

TRAINING = {
    "TP2 PP2 DP2": dict(tp=2, pp=2),
    "TP2 EP2 ETP1 SP": dict(tp=2, ep=2, etp=1, sp=True),
    "PP2 CP2 DP2": dict(pp=2, cp=2),
    "PP2 CP4=U2xR2": dict(pp=2, ulysses=2, ring=2, order="tp-cp-ep-dp-pp"),
}
INFERENCE = {
    "U2 x R2 x CFG2": dict(ulysses=2, ring=2, cfg=2),
    "TP2 x U2 x CFG2": dict(tp=2, ulysses=2, cfg=2),
}


def _ranks(pg) -> list[int]:
    import torch.distributed as dist

    return sorted(dist.get_process_group_ranks(pg))


def _every_strategy(rank: int, world: int) -> dict:
    """On each rank: initialize every strategy in turn, record what the groups hold."""
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as mps
    from yunchang.globals import PROCESS_GROUP

    from parastrat.runtime.groups import destroy, initialize

    out: dict = {}
    for name, kw in {**TRAINING, **INFERENCE}.items():
        s = Strategy(**kw)
        g = initialize(s, backend="auto", timeout=60)
        rec: dict = {
            "backend": g.backend,
            "started_here": dist.is_initialized(),
            "ranks": {},
            "sums": {},
            "megatron": {},
            "handle_ranks": dict(g.ranks),
        }
        for kind in g:
            rec["ranks"][kind] = _ranks(g[kind])
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t, group=g[kind])
            rec["sums"][kind] = t.item()
        if not s.is_inference:
            for kind, (getter, kwargs) in MEGATRON_ORACLE.items():
                rec["megatron"][kind] = _ranks(getattr(mps, getter)(**kwargs))
            if s.ulysses > 1 and s.ring > 1:
                hier = mps.get_hierarchical_context_parallel_groups()
                rec["megatron"]["ulysses"] = _ranks(hier[0])
                rec["megatron"]["ring"] = _ranks(hier[1])
        else:
            rec["yunchang_is_ours"] = (
                PROCESS_GROUP.ULYSSES_PG is g["ulysses"] and PROCESS_GROUP.RING_PG is g["ring"]
            )
            if s.tp == 1:  # yunchang's own layout as a second oracle (it knows no TP)
                import yunchang

                yunchang.set_seq_parallel_pg(s.ulysses, s.ring, rank, world)
                rec["yunchang_own"] = {
                    "ulysses": _ranks(PROCESS_GROUP.ULYSSES_PG),
                    "ring": _ranks(PROCESS_GROUP.RING_PG),
                }
            if s.ring == 1:
                rec["usp_error"] = _ulysses_attention_error(g, rank)
        destroy()
        destroy()  # safe twice
        rec["after_destroy"] = {
            "dist": dist.is_initialized(),
            "megatron": mps.model_parallel_is_initialized(),
            "yunchang": PROCESS_GROUP.ULYSSES_PG is None,
        }
        out[name] = rec
    return out


def _ulysses_attention_error(g, rank: int) -> float:
    """yunchang.LongContextAttention over our Ulysses group vs. full attention on one rank.

    (Ring > 1 is not run: yunchang's CPU ring kernel is inexact with its own groups too.)
    """
    import torch
    from yunchang import LongContextAttention
    from yunchang.kernels import AttnType

    gen = torch.Generator().manual_seed(0)  # same inputs on every rank
    q, k, v = (torch.randn(1, 16, 4, 8, generator=gen) for _ in range(3))
    n, i = len(g.ranks["sp"]), g.ranks["sp"].index(rank)

    def shard(t):
        return t.chunk(n, dim=1)[i].contiguous()

    out = LongContextAttention(attn_type=AttnType.TORCH_MATH)(shard(q), shard(k), shard(v))
    full = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    ).transpose(1, 2)
    return (out - shard(full)).abs().max().item()


@pytest.fixture(scope="module")
def every_strategy() -> list[dict]:
    return spawn_local(_every_strategy, WORLD, backend=None, timeout_s=400)


def _mine(groups: list[list[int]], rank: int) -> list[int]:
    return sorted(next(g for g in groups if rank in g))


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", [*TRAINING, *INFERENCE])
def test_groups_match_layout_and_sum_correctly(every_strategy, name):
    kw = {**TRAINING, **INFERENCE}[name]
    grid = layout(Strategy(**kw), WORLD)
    for rank, out in enumerate(every_strategy):
        rec = out[name]
        assert rec["backend"] == "gloo" and rec["started_here"]
        assert set(rec["ranks"]) == set(grid)  # every layout kind is there
        for kind, groups in grid.items():
            assert rec["ranks"][kind] == _mine(groups, rank), (name, rank, kind)
            assert sorted(rec["handle_ranks"][kind]) == _mine(groups, rank)
            # each member contributed rank + 1
            assert rec["sums"][kind] == sum(r + 1 for r in _mine(groups, rank)), (name, kind)
        assert rec["after_destroy"] == {"dist": False, "megatron": False, "yunchang": True}


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(TRAINING))
def test_megatron_getters_agree_with_layout(every_strategy, name):
    grid = layout(Strategy(**TRAINING[name]), WORLD)
    for rank, out in enumerate(every_strategy):
        meg = out[name]["megatron"]
        assert meg, "Megatron getters were not read"
        for kind, ranks in meg.items():
            assert ranks == _mine(grid[kind], rank), (name, rank, kind)


@pytest.mark.multiprocess
def test_hand_computed_groups_for_tp2_pp2_on_8(every_strategy):
    # order tp-cp-ep-dp-pp: rank = tp + 2*dp + 4*pp, so rank 5 is tp=1, dp=0, pp=1:
    # tp group {4,5}, dp group (tp=1, pp=1) {5,7}, pp group (tp=1, dp=0) {1,5}
    rec = every_strategy[5]["TP2 PP2 DP2"]
    assert (rec["ranks"]["tp"], rec["ranks"]["dp"], rec["ranks"]["pp"]) == ([4, 5], [5, 7], [1, 5])
    # TP2 EP2 ETP1 on 8: expert grid etp=1, ep=2, edp=4: ep groups are consecutive pairs
    assert every_strategy[5]["TP2 EP2 ETP1 SP"]["ranks"]["ep"] == [4, 5]
    assert every_strategy[5]["TP2 EP2 ETP1 SP"]["ranks"]["etp"] == [5]


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(INFERENCE))
def test_inference_groups_feed_yunchang(every_strategy, name):
    for out in every_strategy:
        rec = out[name]
        assert rec["yunchang_is_ours"]
        if "yunchang_own" in rec:
            assert rec["yunchang_own"] == {
                "ulysses": rec["ranks"]["ulysses"],
                "ring": rec["ranks"]["ring"],
            }
        if "usp_error" in rec:
            assert rec["usp_error"] < 1e-5


def test_wrong_world_size_fails_before_anything_starts(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "6")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")  # would fail loudly if anything tried to connect
    with pytest.raises(StrategyError) as info:
        rt_groups.initialize(Strategy(tp=4), backend="gloo", timeout=5)
    assert "world" in info.value.violations[0].rule and "6" in str(info.value)
    assert info.value.violations[0].hint
    assert not dist.is_initialized() and rt_groups.current() is None


def test_initialize_destroy_initialize_in_one_process(monkeypatch):
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as mps

    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    warnings.filterwarnings("ignore")
    g = Strategy().initialize(backend="gloo", timeout=30)  # the Strategy hook
    try:
        assert g.world_size == 1 and g.megatron and mps.model_parallel_is_initialized()
        with pytest.raises(UsageError, match="destroy"):
            rt_groups.initialize(Strategy(), backend="gloo")
    finally:
        rt_groups.destroy()
    assert not dist.is_initialized() and not mps.model_parallel_is_initialized()
    rt_groups.destroy()  # safe twice
    g2 = rt_groups.initialize(Strategy(), backend="gloo", timeout=30)
    try:
        t = torch.ones(1)
        dist.all_reduce(t, group=g2["tp"])
        assert t.item() == 1.0 and g2.ranks["dp"] == [0]
    finally:
        g2.destroy()
    with pytest.raises(UsageError, match="destroyed"):
        g2["tp"]


@pytest.fixture
def callers_default_group(monkeypatch):
    """A one-rank gloo default group the caller (not parastrat) started, destroyed after."""
    import socket

    import torch.distributed as dist

    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    warnings.filterwarnings("ignore")
    with socket.socket() as sock:  # a free port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_callers_megatron_state_is_refused_and_left_alone(callers_default_group):
    """Megatron's parallel_state set up by the caller: initialize refuses before starting
    anything, and leaves it initialized (the failure cleanup used to destroy it)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mps

    mps.initialize_model_parallel()
    try:
        with pytest.raises(UsageError, match="not by parastrat"):
            rt_groups.initialize(Strategy(), backend="gloo", timeout=30)
        assert mps.model_parallel_is_initialized() and dist.is_initialized()
    finally:
        mps.destroy_model_parallel()


def test_destroy_frees_megatrons_groups_under_a_callers_default_group(callers_default_group):
    """With the default group started by the caller, destroy() used to drop Megatron's groups
    from its globals only: each initialize/destroy cycle leaked every one of them (about 77
    file descriptors at tp 2 on 2 ranks)."""
    import torch.distributed as dist

    baseline = len(rt_groups._live_groups())
    for _ in range(3):
        rt_groups.initialize(Strategy(), backend="gloo", timeout=30)
        assert len(rt_groups._live_groups()) > baseline
        rt_groups.destroy()
        assert len(rt_groups._live_groups()) == baseline and dist.is_initialized()


@pytest.mark.multiprocess
def test_ranks_started_with_different_strategies_are_told_before_any_group():
    """Rank 0 with TP 2, rank 1 with Ulysses 2: each would build other groups and both waited
    on a raw store timeout; now both say which strategies differ, before any group."""
    from ._workers import initialize_by_rank

    said = spawn_local(
        initialize_by_rank, 2, args=(["TP2", "Ulysses2"],), backend=None, timeout_s=120
    )
    assert all("every rank must build the same strategy" in m for m in said)
    assert "TP2" in said[0] and "U2" in said[0]
    agreed = spawn_local(initialize_by_rank, 2, args=(["TP2", "TP2"],), backend=None)
    assert agreed == ["ok", "ok"]


@pytest.mark.multiprocess
def test_a_rank_stalled_mid_build_is_a_rank_timeout_on_both_sides():
    """Rank 1 stalls in its first new_group past rank 0's 5 s timeout: rank 0 times out
    waiting, rank 1 then finds rank 0 gone; both say so with the strategy and what torch
    said, instead of torch's bare store or network error."""
    from ._workers import stall_in_group_build

    said = spawn_local(stall_in_group_build, 2, args=(12,), backend=None, timeout_s=120)
    assert all(m.startswith("RankTimeoutError: rank ") for m in said), said
    assert "timed out waiting for another rank" in said[0] and "DistStoreError" in said[0]
    assert "lost another rank" in said[1] and "U2" in said[1]
    assert "Megatron" not in said[0]  # no Megatron groups in an inference strategy


def test_only_torchs_store_and_network_errors_become_rank_timeouts():
    import torch.distributed as dist

    from parastrat.errors import RankTimeoutError

    s = Strategy(tp=2)
    lost = rt_groups._peer_lost(dist.DistStoreError("wait timeout after 60000ms"), s, 3, 61.2)
    assert isinstance(lost, RankTimeoutError) and "rank 3" in str(lost)
    assert "timed out waiting" in str(lost) and "61 s" in str(lost) and "whole minutes" in str(lost)
    assert rt_groups._peer_lost(ValueError("a bug"), s, 0, 1.0) is None
    assert rt_groups._peer_lost(RuntimeError("timeout"), s, 0, 1.0) is None


def test_the_rank_that_raised_is_blamed_not_the_peer_that_lost_it():
    """Rank 1 raised; rank 0, waiting on it in a collective, reported the closed connection
    first by rank number: rank 1 is the root cause."""
    from parastrat.runtime.launch import _root_cause

    failures = {
        0: "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [::1]",
        1: "ValueError: the real bug is on rank 1",
    }
    assert _root_cause(failures) == 1
    assert _root_cause({0: "ValueError: a", 1: "ValueError: b"}) == 0


def test_mismatched_world_on_a_running_world_creates_no_group(monkeypatch):
    import torch.distributed as dist
    from megatron.core import parallel_state as mps

    from parastrat.runtime.backend import init_distributed

    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    init_distributed("gloo", timeout=30)
    try:
        with pytest.raises(StrategyError, match="tp"):
            rt_groups.initialize(Strategy(tp=2), backend="gloo")
        assert not mps.model_parallel_is_initialized() and rt_groups.current() is None
        assert dist.is_initialized()  # the caller's world is untouched
    finally:
        dist.destroy_process_group()


class _OldParallelState:
    """The signature of an older megatron-core (before expert_tensor_parallel_size)."""

    @staticmethod
    def initialize_model_parallel(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None,
        context_parallel_size=1,
        expert_model_parallel_size=1,
        distributed_timeout_minutes=30,
        order="tp-cp-ep-dp-pp",
    ):
        raise AssertionError("not called in these tests")


def test_arguments_follow_the_installed_signature(monkeypatch):
    from datetime import timedelta

    kw = rt_groups._megatron_init_kwargs(
        Strategy(tp=2, ep=2, etp=1, sp=True, pp=2, vpp=2).with_world_size(8),
        timedelta(seconds=90),
        None,
    )
    # installed 0.16: ETP explicit; 90 s rounds up to 2 whole minutes; VPP passed through
    assert kw["expert_tensor_parallel_size"] == 1 and kw["distributed_timeout_minutes"] == 2
    assert kw["virtual_pipeline_model_parallel_size"] == 2
    assert (
        rt_groups._megatron_init_kwargs(Strategy(), None, None)[
            "virtual_pipeline_model_parallel_size"
        ]
        is None
    )
    with pytest.raises(UsageError, match="no argument 'bogus'"):
        rt_groups._megatron_init_kwargs(Strategy(), None, {"bogus": 1})

    monkeypatch.setattr(rt_groups, "_parallel_state", lambda: _OldParallelState)
    # etp == tp: the old default, so the argument can be dropped
    kw = rt_groups._megatron_init_kwargs(Strategy(tp=2), None, None)
    assert "expert_tensor_parallel_size" not in kw and kw["tensor_model_parallel_size"] == 2
    with pytest.raises(UsageError, match="expert_tensor_parallel_size=1"):
        rt_groups._megatron_init_kwargs(Strategy(tp=2, ep=2, etp=1, sp=True), None, None)
    with pytest.raises(UsageError, match="hierarchical_context_parallel_sizes"):
        rt_groups._megatron_init_kwargs(
            Strategy(ulysses=2, ring=2, order="tp-cp-ep-dp-pp"), None, None
        )


def test_the_cli_reports_a_rank_timeout_as_an_error_not_an_internal_one(monkeypatch, capsys):
    """``parastrat verify`` on a job whose peer hung: exit 1 with the message, no traceback."""
    from parastrat.cli import main
    from parastrat.cli import verify as cli_verify
    from parastrat.errors import RankTimeoutError

    def hung(args):
        raise RankTimeoutError("rank 0: building the process groups of TP2 timed out")

    monkeypatch.setattr(cli_verify, "run", hung)
    assert main(["verify", "--world", "2", "--tp", "2"]) == 1
    err = capsys.readouterr().err
    assert "timed out" in err and "internal error" not in err and "Traceback" not in err
