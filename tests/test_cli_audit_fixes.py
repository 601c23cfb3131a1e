"""The CLI defects of a user audit, each as the command that showed it: the fewest devices
independent of the --gpus bound, output paths checked before a sweep, another model's recipe,
--gpus aliases and explain --headroom, JSON error documents, --compare read as --strategy,
usable memory, and a model given to the wrong planner."""

from __future__ import annotations

import json
import shlex

import pytest

from parastrat.cli import main

SMALLEST = "plan --model llama3-8b --train-tokens 1T --deadline-days 1 --smallest"


def _run(capsys, line: str) -> tuple[int, str, str]:
    code = main(shlex.split(line))
    got = capsys.readouterr()
    return code, got.out, got.err


# ---- 1. plan --smallest ------------------------------------------------------------------------
def test_smallest_needs_a_batch_and_answers_independently_of_the_bound(capsys):
    code, out, err = _run(capsys, f"{SMALLEST} --gpus 4096")
    assert code == 2 and not out
    assert "--smallest needs --global-batch-size" in err and "--global-batch-size 16384" in err
    answers = set()
    for bound in (2048, 4096):
        code, out, _ = _run(capsys, f"{SMALLEST} --gpus {bound} --global-batch-size 8192")
        assert code == 0
        answers.add(next(x for x in out.splitlines() if x.startswith("llama3-8b on")))
    assert len(answers) == 1  # the same fewest devices whatever the bound


def test_a_missed_deadline_prints_a_smallest_command_that_runs(capsys):
    line = "plan --model llama3-8b --gpus 64 --train-tokens 1T --deadline-days 1 "
    code, out, _ = _run(capsys, line + "--global-batch-size 512")
    assert code == 0
    hint = next(x for x in out.splitlines() if "misses the 1-day deadline" in x)
    command = hint.split("at this global batch (512): ")[1]
    assert command.startswith("parastrat plan ") and "--global-batch-size 512" in command
    words = shlex.split(command)[1:]
    assert words.count("--gpus") == 1 and "--smallest" in words
    code, out, _ = _run(capsys, shlex.join(words))
    assert code == 0 and "misses" not in out and "global batch 512" in out


# ---- 2. bench output paths ---------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--output", "--fit", "--plot"])
def test_bench_refuses_an_unwritable_destination_before_the_sweep(capsys, tmp_path, flag):
    missing = tmp_path / "nodir" / "out.json"
    line = f"bench --world 2 --ops all_reduce --sizes 4KB --iters 1 --warmup 0 {flag} {missing}"
    code, out, err = _run(capsys, line)
    assert code == 2
    assert "does not exist" in err and f"mkdir -p {tmp_path / 'nodir'}" in err
    assert "benchmarking" not in err + out  # nothing was measured


def test_plan_refuses_an_unwritable_plot_before_searching(capsys, tmp_path):
    code, _, err = _run(capsys, f"plan --model llama3-8b --gpus 8 --plot {tmp_path}/no/p.png")
    assert code == 2 and "does not exist" in err


# ---- 3. --recipe of another model --------------------------------------------------------------
LAUNCH = "plan --model llama3-70b --gpus 64 --seq-len 8192 --global-batch-size 256 --format"


def test_another_models_recipe_is_refused_with_the_models_own(capsys):
    code, out, err = _run(capsys, f"{LAUNCH} torchrun --recipe qwen3_8b_pretrain_config")
    assert code == 2 and not out
    assert "builds qwen3-8b, not llama3-70b" in err
    assert "llama3_70b_pretrain_config" in err  # the model's default recipe
    # the model's own variants stay accepted
    code, out, _ = _run(capsys, f"{LAUNCH} overrides --recipe llama3_70b_sft_config")
    assert code == 0 and out


def test_did_you_mean_prefers_the_pretrain_recipe(capsys):
    code, _, err = _run(capsys, f"{LAUNCH} torchrun --recipe llama3_70b")
    assert code == 0 and "did you mean llama3_70b_pretrain_config?" in err


def test_recipe_model_names_the_owner():
    from parastrat.adapters.bridge_overrides import recipe_model

    assert recipe_model("qwen3_8b_pretrain_config") == "qwen3-8b"
    assert recipe_model("llama3_8b_16k_pretrain_config") == "llama3-8b"
    assert recipe_model("qwen3_30b_a3b_pretrain_config") == "qwen3-30b-a3b"
    assert recipe_model("my_recipe") is None


# ---- 4. --gpus aliases, explain --headroom -----------------------------------------------------
@pytest.mark.parametrize("command", ["verify", "bench"])
@pytest.mark.parametrize("alias", ["--gpus", "--devices"])
def test_gpus_is_an_alias_of_world(command, alias):
    from parastrat.cli import build_parser

    args = build_parser().parse_args([command, alias, "4"])
    assert args.world == 4


def test_explain_takes_headroom(capsys):
    line = (
        "explain --model llama3-8b --gpus 1024 --global-batch-size 16384 "
        '--strategy "TP2 PP1 CP1 DP512 SP" --micro-batch-size 8 --cpu-offload-layers 8'
    )
    code, out, _ = _run(capsys, line + " --format json")
    assert code == 0 and json.loads(out)["fits"] is True
    code, out, _ = _run(capsys, line + " --headroom 0.05 --format json")
    assert code == 0 and json.loads(out)["fits"] is False
    code, out, _ = _run(capsys, line + " --headroom 0.05")
    # one verdict: the memory line judges the fit below what the headroom leaves
    memory = [x for x in out.splitlines() if x.startswith("memory:")]
    assert len(memory) == 1 and "with 5% kept free (DOES NOT FIT)" in memory[0]
    assert "(fits)" not in out


# ---- 5. one JSON document on failure -----------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("check --model llama3-70 --gpus 8 --tp 2", "spec"),
        ("plan --model llama3-70b --gpus 3", "usage"),
        ("check --gpus 8 --sp", "strategy"),
        ("check --gpus 8 --tp zero", "arguments"),
    ],
)
def test_json_failures_print_one_error_document(capsys, line, kind):
    try:
        code = main(shlex.split(line + " --format json"))
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    got = capsys.readouterr()
    assert code == 2
    error = json.loads(got.out)["error"]
    assert error["kind"] == kind and error["message"]
    assert "error" in got.err  # the text stays on stderr
    if kind == "strategy":
        assert error["violations"][0]["rule"] == "sp-needs-tp"
        assert "--sp" in error["violations"][0]["hint"]


def test_table_failures_keep_stdout_empty(capsys):
    code, out, _ = _run(capsys, "check --model llama3-70 --gpus 8 --tp 2")
    assert code == 2 and not out


# ---- 6. --compare reads as --strategy ----------------------------------------------------------
def test_compare_parses_as_strategy(capsys):
    line = 'explain --model llama3-8b --gpus 8 --strategy "Ulysses4" --compare "Ulysses4"'
    code, out, _ = _run(capsys, line)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].removeprefix("A: ") == lines[1].removeprefix("B: ")
    assert "changed: nothing" in out


# ---- 7. usable memory --------------------------------------------------------------------------
def test_accelerator_shows_usable_memory(capsys):
    from parastrat.spec.cluster import Cluster

    usable = Cluster("h100", num_devices=1).accel.memory_bytes
    code, out, _ = _run(capsys, "accelerators h100 --format json")
    doc = json.loads(out)
    assert code == 0 and doc["usable_memory_bytes"] == usable < doc["memory_bytes"]
    code, out, _ = _run(capsys, "accelerators h100")
    assert "usable_memory_bytes" in out and "79.6 GiB" in out and "80.0 GiB" in out


# ---- 8. a model given to the wrong planner -----------------------------------------------------
def test_a_diffusers_config_points_to_plan_dit(capsys, tmp_path):
    config = tmp_path / "config.json"
    flux = {"_class_name": "FluxTransformer2DModel", "_diffusers_version": "0.30.0"}
    config.write_text(json.dumps({**flux, "num_layers": 19, "attention_head_dim": 128}))
    code, _, err = _run(capsys, f"plan --hf-config {config} --gpus 8")
    assert code == 2 and f"parastrat plan-dit --config {config}" in err
    assert "missing field" not in err


def test_an_llm_preset_in_plan_dit_points_to_plan(capsys):
    line = "plan-dit --model llama3-8b --devices 8 --accelerator h100 --height 1024 --width 1024"
    code, _, err = _run(capsys, line + " --steps 28")
    assert code == 2 and "language-model preset" in err
    assert "parastrat plan --model llama3-8b" in err


def test_compare_reads_a_strategy_text_as_a_training_strategy():
    """``compare(a, "Ulysses4")`` prices Megatron's CP4 with all-to-all, as ``explain
    --strategy`` reads the text: the same strategy on both sides changes nothing."""
    import parastrat as ps
    from parastrat.planner.compare import as_strategy, compare

    a = as_strategy("Ulysses4")
    assert (a.cp, a.ulysses, a.is_inference) == (4, 4, False)
    result = compare(
        a.with_world_size(8),
        "Ulysses4",
        model="llama3-8b",
        cluster=ps.Cluster("h100", 8),
        seq_len=4096,
        global_batch_size=32,
    )
    assert result.changed == {}


def test_an_accelerator_dict_keeps_its_usable_memory():
    """``Accelerator(**a.to_dict())`` rebuilds the device with the memory plans use."""
    import parastrat as ps
    from parastrat.spec.hardware import Accelerator

    h100 = ps.hardware.get("h100")
    d = h100.to_dict()
    assert d["usable_memory_bytes"] == 81_559 * 2**20
    assert Accelerator(**d) == h100


# ---- 6. runtime and bench (fifth audit) --------------------------------------------------------
def test_verify_world_refuses_a_backend_it_would_not_use(capsys):
    """``--world`` spawns local gloo ranks: an nccl ``--backend`` beside it was ignored and the
    run reported "on gloo"; it is refused, and the line without it runs."""
    code, _, err = _run(capsys, "verify --world 2 --backend nccl")
    assert code == 2 and "takes effect under torchrun" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["verify --world 2", "bench --world 2 --ops all_reduce"])
def test_a_timeout_beyond_what_a_wait_takes_is_a_usage_error(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main(shlex.split(f"{command} --timeout 3e6"))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "2000000 or less" in err and "internal error" not in err


def test_a_launched_rank_other_than_0_prints_no_json_document(capsys, monkeypatch):
    """Under torchrun every rank may reach the same mistake: rank 0 alone prints the JSON
    document (N ranks printed N on one stdout); every rank keeps its text on stderr."""
    line = "plan --model llama3-8b --gpus 6 --tp 4 --format json"
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)  # a launcher's (consistent) variables
    code, out, err = _run(capsys, line)
    assert (code, out) == (2, "") and "error" in err
    monkeypatch.setenv("RANK", "0")
    code, out, err = _run(capsys, line)
    assert code == 2 and json.loads(out)["error"]["kind"] == "usage" and err
