"""``--format megatron-args``: Megatron-LM ``pretrain_gpt.py`` arguments, checked against the
argument names Megatron-LM's ``megatron/training/arguments.py`` declares.

Megatron-LM's training package is not part of the megatron-core wheel, so the names (with
their kind: int, flag, string, list) are kept as test data with the commit they were read at
(``tests/data/megatron_lm_arguments.json``); the parser below is built from that data with
argparse, so an argument parastrat writes that Megatron-LM does not declare fails to parse.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import parastrat as ps
from parastrat import Strategy
from parastrat.adapters import megatron as mg
from parastrat.errors import UsageError
from parastrat.spec.models import get

DATA = json.loads((Path(__file__).parent / "data" / "megatron_lm_arguments.json").read_text())


def megatron_lm_parser() -> argparse.ArgumentParser:
    """argparse with Megatron-LM's declarations of the recorded arguments (allow_abbrev off,
    as Megatron-LM's own parser)."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, spec in DATA["arguments"].items():
        kind, kw = spec["kind"], {"choices": spec.get("choices")}
        if kind == "flag":
            p.add_argument(name, action="store_true")
        elif kind in ("int", "str"):
            p.add_argument(name, type=int if kind == "int" else str, **kw)
        else:  # "int+", "str+", "str*"
            nargs = kind[-1]
            p.add_argument(name, nargs=nargs, type=int if kind.startswith("int") else str)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    return megatron_lm_parser().parse_args(argv)


@pytest.mark.parametrize(
    "s",
    [
        Strategy(tp=4, pp=8, vpp=6, sp=True),
        Strategy(tp=2, pp=4, ulysses=2, ring=2, sp=True),
        Strategy(tp=8, pp=4, sp=True, first_stage_layers=18, last_stage_layers=20),
        Strategy(tp=4, pp=8, vpp=3, account_for_embedding=True, account_for_loss=True),
        Strategy(tp=2, pp=8, ep=8, sp=True, pipeline_layout="Et*4|(t*4|)*14tmL"),
        Strategy(tp=2, pp=4, order="tp-cp-ep-pp-dp"),
    ],
)
def test_every_argument_is_declared_and_reads_back(s):
    a = parse(mg.megatron_lm_args(s, micro_batch_size=2, global_batch_size=512))
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size) == (s.tp, s.pp)
    assert a.context_parallel_size == s.cp
    assert (a.expert_model_parallel_size, a.expert_tensor_parallel_size) == (s.ep, s.etp)
    assert a.sequence_parallel is s.sp
    assert (a.micro_batch_size, a.global_batch_size) == (2, 512)
    assert a.decoder_first_pipeline_num_layers == s.first_stage_layers
    assert a.decoder_last_pipeline_num_layers == s.last_stage_layers
    assert a.account_for_embedding_in_pipeline_split is s.account_for_embedding
    assert a.use_tp_pp_dp_mapping is (s.order == "tp-cp-ep-pp-dp")
    if s.pipeline_layout is not None:  # the layout sets vpp: no second source
        assert a.pipeline_model_parallel_layout == "Et*4|(t*4|)*14tmL"
        assert a.num_virtual_stages_per_pipeline_rank is None
    else:
        assert a.num_virtual_stages_per_pipeline_rank == (s.vpp if s.vpp > 1 else None)
    if s.ulysses > 1:
        assert (a.cp_comm_type, a.hierarchical_context_parallel_sizes) == (["a2a+p2p"], [2, 2])


def test_list_layout_is_written_in_the_string_syntax():
    rows = [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "loss"]]
    a = parse(mg.megatron_lm_args(Strategy(tp=2, pp=16, ep=32, sp=True, pipeline_layout=rows)))
    assert Strategy(
        pp=16, pipeline_layout=a.pipeline_model_parallel_layout
    ).layout_parsed.stages == (Strategy(pp=16, pipeline_layout=rows).layout_parsed.stages)


@pytest.fixture(scope="module")
def moe_plan():
    return ps.plan(
        get("deepseek-v3"),
        ps.Cluster(accelerator="h100", num_devices=256),
        seq_len=4096,
        global_batch_size=1024,
        top_k=1,
        moe_dispatcher="deepep",
        moe_a2a_overlap=True,
        recompute="full",
    )


def test_plan_arguments_carry_what_it_was_priced_with(moe_plan):
    a = parse(mg.megatron_lm_args(moe_plan))
    best = moe_plan.best
    assert (a.micro_batch_size, a.global_batch_size) == (best.micro_batch_size, 1024)
    assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == (
        "full",
        "uniform",
        1,
    )
    assert (a.moe_token_dispatcher_type, a.moe_enable_deepep) == ("flex", True)
    # combined 1F1B was asked for, but Megatron Core refuses it with full recompute ("disable
    # full recomputation when enabling overlap_moe_expert_parallel_comm"): priced off (noted)
    # and written off
    assert any("combined 1F1B) not applied" in n for n in best.step.notes)
    assert a.overlap_moe_expert_parallel_comm is False
    # the same switches as Bridge's overrides for the same plan
    overrides = mg.to_overrides(moe_plan)
    assert "model.moe_token_dispatcher_type=flex" in overrides
    assert "comm_overlap.overlap_moe_expert_parallel_comm=false" in overrides


def test_hybridep_has_no_megatron_lm_argument(moe_plan):
    import types

    # a plan priced with HybridEP (its step options name the backend)
    hybrid = types.SimpleNamespace(
        candidates=moe_plan.candidates,
        best=moe_plan.best,
        global_batch_size=moe_plan.global_batch_size,
        cluster=moe_plan.cluster,
        step_options={**moe_plan.step_options, "moe_dispatcher": "hybridep"},
    )
    with pytest.raises(UsageError, match="--moe-enable-deepep"):
        mg.megatron_lm_args(hybrid)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "parastrat", "plan", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_gb200_flex_megatron_args_refusal_names_a_fix_that_runs():
    """On GB200 the flex dispatcher runs HybridEP, which Megatron-LM has no argument for,
    and DeepEP does not start there: the refusal offers the alltoall dispatcher (and Bridge's
    overrides), never DeepEP, and the alltoall line it offers is printed."""
    base = ("--model", "qwen3-30b-a3b", "--gpus", "16", "--accelerator", "gb200")
    r = run_cli(*base, "--moe-dispatcher", "flex", "--format", "megatron-args")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--moe-dispatcher alltoall" in r.stderr
    assert "--moe-dispatcher deepep runs on other accelerators than gb200" in r.stderr
    fixed = run_cli(*base, "--moe-dispatcher", "alltoall", "--format", "megatron-args")
    assert fixed.returncode == 0, fixed.stderr
    assert parse(shlex.split(fixed.stdout)).moe_token_dispatcher_type == "alltoall"


def test_cli_megatron_args_parse_with_megatron_lm_names():
    r = run_cli("--model", "llama3-70b", "--gpus", "64", "--format", "megatron-args")
    assert r.returncode == 0, r.stderr
    a = parse(shlex.split(r.stdout))
    assert a.tensor_model_parallel_size * a.pipeline_model_parallel_size <= 64
    assert a.global_batch_size == 256  # 4 x the devices, the CLI's default


def test_ascend_torchrun_names_hccl_and_megatron_lm_launcher():
    r = run_cli(
        "--model",
        "llama3-70b",
        "--gpus",
        "64",
        "--accelerator",
        "ascend-910b",
        "--format",
        "torchrun",
    )
    assert r.returncode == 0, r.stderr
    assert "HCCL_CONNECT_TIMEOUT=" in r.stdout
    assert "NCCL" not in r.stdout and "run_recipe.py" not in r.stdout
    argv = shlex.split(r.stdout.replace("\\\n", " "))
    script = argv.index("pretrain_gpt.py")
    # every argument after the script is Megatron-LM's, but MindSpeed's own (which it adds to
    # Megatron-LM's parser: fused attention, MC2, its CP algorithms)
    parse(_without_mindspeed(argv[script + 1 :]))
    nvidia = run_cli("--model", "llama3-70b", "--gpus", "64", "--format", "torchrun")
    assert "NCCL_" in nvidia.stdout and "HCCL" not in nvidia.stdout


#: MindSpeed-LLM's arguments parastrat writes on Ascend, with how many values each takes
#: (MindSpeed ``arguments.py``: ``--use-flash-attn``, ``--use-ascend-mc2``,
#: ``--context-parallel-algo``, ``--ulysses-degree-in-cp``).
MINDSPEED_ARGS = {
    "--use-flash-attn": 0,
    "--use-ascend-mc2": 0,
    "--context-parallel-algo": 1,
    "--ulysses-degree-in-cp": 1,
}


def _without_mindspeed(argv: list[str]) -> list[str]:
    out, skip = [], 0
    for word in argv:
        if skip:
            skip -= 1
        elif word in MINDSPEED_ARGS:
            skip = MINDSPEED_ARGS[word]
        else:
            out.append(word)
    return out


def test_source_is_recorded():
    assert DATA["source"].startswith("NVIDIA/Megatron-LM megatron/training/arguments.py")
    assert len(DATA["commit"]) == 40


def test_cross_entropy_fusion_priced_is_written():
    """A plan priced with the fused loss writes Megatron-LM's ``--cross-entropy-loss-fusion``
    (a name Megatron-LM declares; off by default there); one priced unfused does not.  Unset,
    the switch is priced on for NVIDIA and off for Ascend, and written as priced."""
    model = ps.models.get("llama3-8b")
    cluster = ps.Cluster("h100", 8)

    def argv(**sw):
        plan = ps.plan(model, cluster, seq_len=4096, global_batch_size=64, top_k=1, **sw)
        return mg.megatron_lm_args(plan)

    assert "--cross-entropy-loss-fusion" in argv(cross_entropy_fusion=True)
    assert "--cross-entropy-loss-fusion" not in argv(cross_entropy_fusion=False)
    assert "--cross-entropy-loss-fusion" in argv()
    ascend = ps.plan(model, ps.Cluster("ascend-910b", 8), seq_len=4096, global_batch_size=64)
    assert "--cross-entropy-loss-fusion" not in mg.megatron_lm_args(ascend)
    assert parse(argv(cross_entropy_fusion=True)).cross_entropy_loss_fusion


def test_data_parallel_switches_priced_are_written():
    """Megatron-LM defaults the distributed optimizer and the DP overlaps off: a plan priced
    with them (the default) says them, one priced without them does not, and its memory is
    what the plan priced (pasting the flags without --use-distributed-optimizer ran out of
    memory on 70B)."""
    model = ps.models.get("llama3-70b")
    cluster = ps.Cluster("h100", 64)

    def argv(**sw):
        plan = ps.plan(model, cluster, seq_len=8192, global_batch_size=256, top_k=1, **sw)
        return parse(mg.megatron_lm_args(plan))

    on = argv()
    assert on.use_distributed_optimizer and on.overlap_grad_reduce and on.overlap_param_gather
    assert on.bf16 and on.seq_length == 8192  # BF16 parameters, the length priced
    off = argv(distributed_optimizer=False)
    assert not off.use_distributed_optimizer and not off.overlap_param_gather
    assert off.overlap_grad_reduce
    assert not argv(overlap_grad_reduce=False).overlap_grad_reduce


@pytest.mark.parametrize(
    ("fsdp", "replicas"), [("optim_grads_params", 1), ("optim_grads", 2), ("optim", 4)]
)
def test_fsdp_and_hsdp_lines_parse_as_megatron_lm_declares_them(fsdp, replicas):
    """A Megatron FSDP / HSDP line says the sharding strategy, the replicas (Megatron's
    distributed-optimizer instances) and the ``fsdp_dtensor`` checkpoint format FSDP saves in,
    each a name and value Megatron-LM declares."""
    s = Strategy(fsdp=fsdp, dp_replicate=replicas)
    a = parse(mg.megatron_lm_args(s, micro_batch_size=1, global_batch_size=64))
    assert a.use_megatron_fsdp and a.use_distributed_optimizer
    assert a.data_parallel_sharding_strategy == fsdp
    assert a.num_distributed_optimizer_instances == replicas
    assert a.ckpt_format == "fsdp_dtensor"
    plain = parse(mg.megatron_lm_args(Strategy(tp=2), micro_batch_size=1, global_batch_size=64))
    assert not plain.use_megatron_fsdp and plain.ckpt_format is None


def test_cuda_graphs_priced_are_written():
    plan = ps.plan(
        ps.models.get("llama3-8b"), ps.Cluster("h100", 8), seq_len=4096,
        global_batch_size=64, top_k=1, cuda_graphs="attn",
    )  # fmt: skip
    a = parse(mg.megatron_lm_args(plan))
    assert (a.cuda_graph_impl, a.cuda_graph_scope) == ("transformer_engine", ["attn"])


def test_an_ascend_plan_names_mindspeeds_context_parallel_algorithm():
    """MindSpeed picks its CP algorithm from --context-parallel-algo, not --cp-comm-type: an
    Ascend plan with CP says it (Ulysses, ring, or both with the Ulysses degree); a GPU plan
    does not (Megatron-LM has no such argument)."""
    model = ps.models.get("llama3-8b")
    kw = dict(seq_len=32768, global_batch_size=64, top_k=1, cp=4)

    def algo(accel: str, **pins) -> list[str]:
        argv = mg.megatron_lm_args(ps.plan(model, ps.Cluster(accel, 16), **kw, **pins))
        i = argv.index("--context-parallel-algo") if "--context-parallel-algo" in argv else None
        return argv[i : i + 4] if i is not None else []

    assert algo("ascend-910b", ulysses=4)[:2] == ["--context-parallel-algo", "ulysses_cp_algo"]
    assert algo("ascend-910b", ulysses=2) == [
        "--context-parallel-algo", "hybrid_cp_algo", "--ulysses-degree-in-cp", "2",
    ]  # fmt: skip
    assert algo("ascend-910b", ulysses=1)[:2] == ["--context-parallel-algo", "megatron_cp_algo"]
    assert algo("h100", ulysses=4) == []


def test_an_ascend_line_speaks_mindspeed():
    """What an Ascend plan priced, as MindSpeed-LLM spells it: TP overlap is MC2
    (``--use-ascend-mc2``, not Transformer Engine's ``--tp-comm-overlap``), fused attention
    ``--use-flash-attn`` (left out when priced unfused), and a hybrid stack launches
    ``pretrain_mamba.py``; a GPU plan keeps Megatron-LM's spelling."""
    kw = dict(seq_len=4096, global_batch_size=64, top_k=1, tp=(2,))

    def argv(accel: str, model: str = "llama3-8b", **switches) -> list[str]:
        plan = ps.plan(ps.models.get(model), ps.Cluster(accel, 16), **kw, **switches)
        return mg.megatron_lm_command(plan, nproc_per_node=8, nnodes=2)

    npu = argv("ascend-910b", tp_comm_overlap=True)
    assert "--use-ascend-mc2" in npu and "--tp-comm-overlap" not in npu
    assert "--use-flash-attn" in npu and "pretrain_gpt.py" in npu
    assert "--use-flash-attn" not in argv("ascend-910b", flash_attention=False)
    gpu = argv("h100", tp_comm_overlap=True)
    assert "--tp-comm-overlap" in gpu and "--use-ascend-mc2" not in gpu
    assert "--use-flash-attn" not in gpu
    assert "pretrain_mamba.py" in argv("ascend-910b", "nemotron-h-8b")


def test_cuda_graphs_are_refused_on_ascend():
    """No CUDA graphs on an NPU: asked for on Ascend, the plan is refused naming the flag (the
    launch line carried --cuda-graph-impl to MindSpeed-LLM); eager plans run."""
    r = run_cli("--model", "llama3-70b", "--gpus", "64", "--accelerator", "ascend-910b",
                "--cuda-graphs", "--format", "torchrun")  # fmt: skip
    assert r.returncode == 2 and "drop --cuda-graphs" in r.stderr and not r.stdout
    assert "Traceback" not in r.stderr
