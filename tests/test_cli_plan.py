"""The plan and explain subcommands end to end (in process)."""

import json

import pytest

from parastrat.cli import main


def test_plan_json(capsys):
    rc = main(
        [
            "plan",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--accelerator",
            "h100",
            "--seq-len",
            "4096",
            "--global-batch-size",
            "64",
            "--format",
            "json",
            "--top-k",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    d = json.loads(out)
    assert len(d["candidates"]) == 2 and d["candidates"][0]["strategy"]["world_size"] == 8


def test_plan_table_and_torchrun(capsys):
    assert (
        main(
            [
                "plan",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--seq-len",
                "4096",
                "--global-batch-size",
                "64",
                "--top-k",
                "2",
            ]
        )
        == 0
    )
    assert "seed guide" in capsys.readouterr().out
    assert (
        main(
            [
                "plan",
                "--model",
                "llama3-70b",
                "--gpus",
                "16",
                "--seq-len",
                "4096",
                "--global-batch-size",
                "64",
                "--format",
                "torchrun",
                "--tp",
                "8",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "torchrun" in out and "CUDA_DEVICE_MAX_CONNECTIONS=1" in out


def test_plan_user_errors_exit_2(capsys):
    assert main(["plan", "--model", "nope", "--gpus", "8"]) == 2
    assert (
        main(
            [
                "plan",
                "--model",
                "llama3.1-405b",
                "--gpus",
                "8",
                "--seq-len",
                "8192",
                "--global-batch-size",
                "64",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "would fit" in err and "Traceback" not in err


def test_explain_and_compare(capsys):
    assert (
        main(
            [
                "explain",
                "--model",
                "llama3-70b",
                "--gpus",
                "64",
                "--tp",
                "8",
                "--pp",
                "4",
                "--sp",
                "--seq-len",
                "4096",
                "--global-batch-size",
                "64",
            ]
        )
        == 0
    )
    assert "step time" in capsys.readouterr().out
    assert (
        main(
            [
                "explain",
                "--model",
                "llama3-70b",
                "--gpus",
                "64",
                "--tp",
                "8",
                "--pp",
                "4",
                "--sp",
                "--seq-len",
                "4096",
                "--global-batch-size",
                "64",
                "--compare",
                "tp=4,pp=8,sp",
            ]
        )
        == 0
    )
    assert "cause:" in capsys.readouterr().out


def test_plan_cuda_graphs_and_tp_overlap_flags(capsys):
    args = [
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--gpus",
        "8",
        "--accelerator",
        "gb200",
        "--seq-len",
        "4096",
        "--global-batch-size",
        "64",
        "--format",
        "json",
        "--top-k",
        "1",
        "--ep",
        "8",
        "--micro-batch-size",
        "1",
    ]
    assert main(args) == 0
    eager = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["breakdown"]
    assert main([*args, "--cuda-graphs"]) == 0
    graphed = json.loads(capsys.readouterr().out)["candidates"][0]["step"]["breakdown"]
    assert eager["host"] > 0 and graphed["host"] == 0
    assert main([*args, "--cuda-graphs", "attn,moe_router", "--no-tp-comm-overlap"]) == 0
    capsys.readouterr()
    assert main([*args, "--cuda-graphs", "bogus"]) == 2
    assert "unknown CUDA-graph scope" in capsys.readouterr().err


def test_plan_table_keeps_bracketed_model_names(capsys):
    """A model name in square brackets is user text, not rich markup: printed as is."""
    import dataclasses

    import parastrat as ps
    from parastrat.cli.plan import print_table
    from parastrat.planner.search import plan

    model = dataclasses.replace(ps.models.get("llama3-8b"), name="[red]my-model")
    result = plan(
        model, ps.Cluster("h100", num_devices=8), seq_len=4096, global_batch_size=64, top_k=1
    )
    print_table(result, result.candidates)
    assert "[red]my-model on 8 x h100" in capsys.readouterr().out


def test_explain_takes_the_runtime_switches(capsys):
    # The same strategy priced eagerly and with CUDA graphs: the graphs remove host launch time,
    # so the step cannot get slower (and the switch must reach the step model).
    from parastrat.cli import main

    base = [
        "explain",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--accelerator",
        "h100",
        "--tp",
        "2",
        "--sp",
        "--format",
        "json",
    ]
    assert main(base) == 0
    eager = json.loads(capsys.readouterr().out)["step"]["step_time_s"]
    assert main([*base, "--cuda-graphs"]) == 0
    graphs = json.loads(capsys.readouterr().out)["step"]["step_time_s"]
    assert graphs <= eager


def test_explain_takes_the_moe_switches(capsys):
    # Qwen3-30B-A3B at EP 8 on one H100 node: the flex dispatcher sends a token once per
    # destination rank (128 experts over 8 ranks, top-8: 0.67 of the per-expert copies), so
    # the EP all-to-all term must shrink; combined 1F1B (PP 1) must hide part of it.
    from parastrat.cli import main

    base = [
        "explain",
        "--model",
        "qwen3-30b-a3b",
        "--gpus",
        "8",
        "--accelerator",
        "h100",
        "--ep",
        "8",
        "--seq-len",
        "4096",
        "--global-batch-size",
        "64",
        "--recompute",
        "none",
        "--format",
        "json",
    ]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)["step"]["breakdown"]
    assert main([*base, "--moe-dispatcher", "hybridep"]) == 0
    flex = json.loads(capsys.readouterr().out)["step"]["breakdown"]
    assert flex["ep"] < plain["ep"]
    from parastrat.estimate.comm import dedup_scale

    # the byte ratio is the de-duplication; latency terms make the time ratio a bit larger
    assert flex["ep"] / plain["ep"] == pytest.approx(dedup_scale(128, 8, 8), rel=0.05)
    assert main([*base, "--moe-a2a-overlap"]) == 0
    overlap = json.loads(capsys.readouterr().out)["step"]["breakdown"]
    assert overlap["ep_exposed"] < plain["ep_exposed"]


def test_torchrun_format_names_the_recipe_and_rendezvous(capsys):
    from parastrat.cli import main

    args = [
        "plan",
        "--model",
        "llama3-70b",
        "--gpus",
        "64",
        "--accelerator",
        "h100",
        "--seq-len",
        "8192",
        "--global-batch-size",
        "256",
        "--format",
        "torchrun",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    # 64 H100s = 8 nodes of 8: a c10d rendezvous and Bridge's run_recipe.py with a recipe.
    assert "--nnodes=8" in out and "--rdzv-backend=c10d" in out
    assert "--recipe llama3_70b_pretrain_config" in out
    assert main([*args, "--recipe", "my_recipe"]) == 0
    got = capsys.readouterr()
    assert "--recipe my_recipe" in got.out
    assert "not one Megatron Bridge 0.3.1 exports" in got.err  # the user's own, or a typo
    assert main([*args, "--recipe", "llama3_70b_pretrain_confg"]) == 0
    assert "did you mean llama3_70b_pretrain_config?" in capsys.readouterr().err
    assert main([*args, "--recipe", "llama3_70b_pretrain_config; rm -rf ~"]) == 2
    got = capsys.readouterr()
    assert not got.out and "is not a Python name" in got.err
    # a model Bridge exports no recipe for: no invented name, the flag that fixes it instead
    mixtral = [*args[:2], "mixtral-8x7b", *args[3:]]
    assert main(mixtral) == 2
    err = capsys.readouterr()
    assert "run_recipe.py" not in err.out and "pass --recipe NAME" in err.err
    assert main([*mixtral, "--recipe", "my_recipe"]) == 0


def test_plan_plot_draws_throughput_against_memory(tmp_path):
    pytest.importorskip("matplotlib")
    from parastrat.cli import main

    out = tmp_path / "plan.png"
    assert (
        main(
            [
                "plan",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--accelerator",
                "h100",
                "--seq-len",
                "4096",
                "--plot",
                str(out),
            ]
        )
        == 0
    )
    assert out.stat().st_size > 10_000


def test_a_bf16_plan_on_a_quantised_recipe_says_the_recipe_keeps_its_precision(capsys):
    """Nemotron-H 47B's recipe trains FP8; a BF16 plan's lines keep it (they never turn a
    recipe's FP8 off), so the launch is not what was priced: the CLI says so."""
    argv = ["plan", "--model", "nemotron-h-47b", "--gpus", "64", "--seq-len", "8192"]
    assert main([*argv, "--format", "overrides"]) == 0
    err = capsys.readouterr().err
    assert "nemotron_h_bf16_with_fp8_current_scaling_mixed" in err and "--precision fp8" in err
