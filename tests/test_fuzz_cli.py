"""Hypothesis fuzzing of the command line: any argument list for the planning commands (check,
layout, memory, plan, explain) and for bench on saved rows exits 0 or 2 (a usage error with a
message), never 1 (an internal error) and never a traceback.  Budget: about 20 s in CI
(``max_examples`` below; ``PARASTRAT_THOROUGH=1`` runs more)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parastrat.cli import main

EXAMPLES = 1000 if os.environ.get("PARASTRAT_THOROUGH") else 40
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Values a user (or a script gone wrong) types: good ones, boundaries, and garbage.
NUMBERS = st.sampled_from(
    [
        "1",
        "2",
        "3",
        "4",
        "8",
        "16",
        "64",
        "0",
        "-1",
        "1_000",
        "\u0668",
        "+8",
        " 8",
        "1e3",
        "nan",
        "inf",
        "2147483648",
        "1048577",
        "99999999999999999999",
        "",
        "x",
        "4.0",
    ]
)
WORDS = st.sampled_from(
    [
        "llama3-8b",
        "mixtral-8x7b",
        "deepseek-v3",
        "nope",
        "h100",
        "a100",
        "b200",
        "bf16",
        "fp8",
        "mxfp8",
        "none",
        "full",
        "selective",
        "tp-cp-ep-dp-pp",
        "tp-dp",
        "",
        "[x]",
        "\x1b[2J",
    ]
)
#: Strategy texts (the printed form, key=value pairs) and pipeline layouts, good and broken.
STRATEGY_TEXTS = st.sampled_from(
    [
        "TP2 PP2 CP1 DP2 SP",
        "TP2 PP8(VP4)[Et|(t*2|)*30mL] CP1 EP64 ETP1 DP64 SP",
        "TP1 U2 R2 CFG2",
        "tp=2,pp=2,sp",
        "tp=x",
        "TP",
        "PP2(VP",
        "TP2 PP4[] CP1",
        "TP99999999999999999999 PP1",
        "TP1 PP1 CP1 DP8 S9xR1 FSDP:zero9",
        "",
        "[x]",
    ]
)
LAYOUTS = st.sampled_from(
    ["Et|(t*2|)*30mL", "Et*16|t*16|t*16|t*13mL", "E|L", "((((", "t*99999999999", "", "x|y"]
)
FLAGS = {
    "--strategy": STRATEGY_TEXTS,
    "--pipeline-layout": LAYOUTS,
    "--gpus": NUMBERS,
    "--tp": NUMBERS,
    "--pp": NUMBERS,
    "--vpp": NUMBERS,
    "--cp": NUMBERS,
    "--ep": NUMBERS,
    "--etp": NUMBERS,
    "--ulysses": NUMBERS,
    "--ring": NUMBERS,
    "--seq-len": NUMBERS,
    "--global-batch-size": NUMBERS,
    "--micro-batch-size": NUMBERS,
    "--top-k": NUMBERS,
    "--max-tp": NUMBERS,
    "--max-pp": NUMBERS,
    "--model": WORDS,
    "--accelerator": WORDS,
    "--precision": WORDS,
    "--recompute": WORDS,
    "--order": WORDS,
    "--format": st.sampled_from(["table", "json", "yaml", "overrides", "torchrun", "csv", "x"]),
    "--sp": st.none(),
    "--smallest": st.none(),
    "--train-tokens": st.sampled_from(
        ["15T", "1", "300B", "1.5e12", "0", "-1", "1e30", "15Q", "", "nan", "1_000", "\u0668"]
    ),
    "--deadline-days": st.sampled_from(["90", "0.5", "0", "-3", "inf", "nan", "1e9", "x", ""]),
    "NAME": WORDS,
    "--devices": NUMBERS,
    "--height": st.sampled_from(["1024", "720", "480", "1088", "0", "17", "99999999", "x"]),
    "--width": st.sampled_from(["1024", "1280", "832", "1920", "0", "33", "x"]),
    "--frames": st.sampled_from(["1", "81", "49", "4", "0", "-1", "x"]),
    "--steps": NUMBERS,
    "--framework": st.sampled_from(["mindiesd", "xdit", "diffusers", "any", "x", ""]),
    "--max-latency": st.sampled_from(["3", "0.5", "0", "-1", "nan", "inf", "x"]),
    "--min-rps": st.sampled_from(["4", "0.1", "0", "nan", "1e9", "x"]),
    "--data-parallel": st.none(),
    "--guidance": st.none(),
    "--no-guidance": st.none(),
}
#: DiT presets and near misses, for plan-dit's --model.
DIT_MODELS = st.sampled_from(
    ["flux.1-dev", "wan2.1-t2v-14b", "wan2.2-ti2v-5b", "hunyuanvideo", "sd3-medium", "flux", "x"]
)
COMMANDS = {
    "check": [
        "--strategy",
        "--pipeline-layout",
        "--gpus",
        "--tp",
        "--pp",
        "--cp",
        "--ep",
        "--etp",
        "--seq-len",
        "--model",
        "--global-batch-size",
        "--micro-batch-size",
        "--order",
        "--sp",
        "--format",
    ],
    "layout": [
        "--strategy",
        "--gpus",
        "--tp",
        "--pp",
        "--cp",
        "--ep",
        "--ulysses",
        "--ring",
        "--order",
        "--format",
    ],
    "memory": [
        "--strategy",
        "--pipeline-layout",
        "--gpus",
        "--tp",
        "--pp",
        "--vpp",
        "--cp",
        "--ep",
        "--seq-len",
        "--model",
        "--micro-batch-size",
        "--recompute",
        "--precision",
        "--accelerator",
        "--format",
    ],
    "plan": [
        "--gpus",
        "--tp",
        "--pp",
        "--ep",
        "--seq-len",
        "--model",
        "--global-batch-size",
        "--top-k",
        "--max-tp",
        "--max-pp",
        "--recompute",
        "--precision",
        "--accelerator",
        "--format",
        "--smallest",
        "--train-tokens",
        "--deadline-days",
    ],
    "explain": [
        "--strategy",
        "--pipeline-layout",
        "--gpus",
        "--tp",
        "--pp",
        "--cp",
        "--ep",
        "--seq-len",
        "--model",
        "--micro-batch-size",
        "--recompute",
        "--format",
        "--train-tokens",
    ],
    "plan-dit": [
        "--model",
        "--devices",
        "--accelerator",
        "--height",
        "--width",
        "--frames",
        "--steps",
        "--framework",
        "--max-latency",
        "--min-rps",
        "--smallest",
        "--data-parallel",
        "--guidance",
        "--no-guidance",
        "--format",
    ],
    # the preset listings: an optional positional NAME (below, "NAME" stands for it)
    "models": ["NAME", "--format"],
    "accelerators": ["NAME", "--format"],
}


@st.composite
def command_lines(draw):
    cmd = draw(st.sampled_from(sorted(COMMANDS)))
    flags = draw(st.lists(st.sampled_from(COMMANDS[cmd]), max_size=6, unique=True))
    # usually a valid core, so the fuzzing reaches past argparse
    if draw(st.booleans()):
        core = ("--model", "--gpus", "--devices", "--height", "--width", "--steps")
        flags = [f for f in core if f in COMMANDS[cmd]] + [f for f in flags if f not in core]
    argv = [cmd]
    for f in flags:
        flag_only = ("--sp", "--smallest", "--data-parallel", "--guidance", "--no-guidance")
        value = draw(FLAGS[f]) if f not in flag_only else None
        if f == "--model" and cmd == "plan-dit":
            value = draw(DIT_MODELS)
        elif f == "--model" and draw(st.booleans()):
            value = draw(st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3"]))
        if f == "--gpus" and draw(st.booleans()):
            value = draw(st.sampled_from(["8", "16", "64", "1048576"]))
        if f == "NAME":
            argv += [value or "x"]
            continue
        argv += [f] if value is None else [f, value]
    return argv


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@FUZZ
@given(argv=command_lines())
def test_cli_never_fails_internally(capsys, argv):
    code = exit_code(argv)
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, err[-2000:])
    assert "internal error" not in err and "Traceback" not in err, (argv, err[-2000:])
    assert "\x1b[2J" not in out + err  # a name from argv is never printed as a terminal code


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    rows = [
        {
            "op": "all_reduce",
            "bytes": b,
            "world": 2,
            "time_s": t,
            "time_min_s": t,
            "time_max_s": t,
            "algbw_gbps": b / t / 1e9,
            "busbw_gbps": b / t / 1e9,
            "iters": 1,
            "backend": "gloo",
            "dtype": "float32",
        }
        for b, t in ((4096, 2e-5), (1 << 20, 4e-4), (1 << 24, 6e-3))
    ]
    path = tmp_path_factory.mktemp("rows") / "rows.json"
    path.write_text(json.dumps(rows))
    return path


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 12))
@given(
    fmt=st.sampled_from(["table", "json", "csv"]),
    ops=st.sampled_from([None, "all_reduce", "ring", "nope,,"]),
    out=st.sampled_from([None, "o.json", "o.csv", "sub/o.json", ".", "o"]),
    plot=st.sampled_from([None, "p", "p.png", "p.svg", "p.xyz"]),
    fit=st.sampled_from([None, "c.json", "."]),
)
def test_bench_on_saved_rows_never_fails_internally(
    capsys, tmp_path_factory, rows_file, fmt, ops, out, plot, fit
):
    folder = tmp_path_factory.mktemp("out")
    argv = ["bench", "--load", str(rows_file), "--format", fmt]
    for flag, value in (("--ops", ops), ("--output", out), ("--plot", plot), ("--fit", fit)):
        if value is not None:
            argv += [flag, value if flag == "--ops" else str(folder / value)]
    code = exit_code(argv)
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, err[-2000:])
    assert "internal error" not in err, (argv, err[-2000:])
    # nothing half-written: every file left in the folder is whole
    for p in folder.rglob("*"):
        if p.name == "c.json" or (p.name == "o.json" and fmt != "csv"):
            json.loads(p.read_text())
        assert not p.name.startswith(".parastrat-tmp-")
