"""The launch lines ``plan-dit`` prints run what was priced: diffusers accepts every
``ContextParallelConfig(...)`` it prints, and MindIE-SD / xDiT parse the memory switches the
plan was priced with (:mod:`parastrat.spec.dit_frameworks`)."""

from __future__ import annotations

import argparse
import ast
import json

import pytest

import parastrat as ps
from parastrat.cli import main
from parastrat.errors import UsageError
from parastrat.estimate.dit_memory import DiTMemoryOptions
from parastrat.estimate.dit_options import DiTSwitches
from parastrat.planner.dit import plan_dit
from parastrat.spec.dit_frameworks import FRAMEWORKS, LaunchSwitches

WAN = dict(height=720, width=1280, frames=81, steps=50)
SD3 = ["--model", "sd3-medium", "--accelerator", "h100", "--height", "1024", "--width", "1024"]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``parastrat plan-dit`` with ``argv`` (each item one or more space-separated words)."""
    rc = main(["plan-dit", *(word for part in argv for word in part.split())])
    out = capsys.readouterr()
    return rc, out.out.strip(), out.err


def _build_cp(diffusers, line: str):
    """``line`` ("ContextParallelConfig(ulysses_degree=U, ring_degree=R)") built with the
    installed diffusers: its keyword arguments evaluated, the class called."""
    call = ast.parse(line, mode="eval").body
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "ContextParallelConfig"
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return diffusers.ContextParallelConfig(**kwargs)


def test_diffusers_framework_has_the_tp_the_installed_diffusers_has():
    diffusers = pytest.importorskip("diffusers")
    assert FRAMEWORKS["diffusers"].tp == hasattr(diffusers, "TensorParallelConfig")
    assert not FRAMEWORKS["diffusers"].parallel_vae


@pytest.mark.parametrize(
    ("model", "accel", "n", "request_", "dp"),
    [
        ("flux.1-dev", "h100", 8, dict(height=1024, width=1024, steps=28), False),
        ("wan2.1-t2v-14b", "h100", 8, WAN, False),
        ("sd3-medium", "h100", 8, dict(height=1024, width=1024, steps=28), True),
        ("flux.1-dev", "h100", 1, dict(height=1024, width=1024, steps=28), False),
    ],
)
def test_every_diffusers_launch_builds_in_the_installed_diffusers(model, accel, n, request_, dp):
    """Each candidate's launch is "" (one device: no parallel config) or a
    ContextParallelConfig the installed diffusers accepts with exactly those degrees."""
    diffusers = pytest.importorskip("diffusers")
    plan = plan_dit(
        model,
        ps.Cluster(accel, n),
        framework="diffusers",
        data_parallel=dp,
        top_k=100,
        **request_,
    )
    for c in plan.candidates:
        s, line = c.strategy, c.launch("diffusers")
        assert s.tp == 1 and s.cfg == 1
        if s.cp == 1:
            assert line == ""
            continue
        cfg = _build_cp(diffusers, line)
        assert (cfg.ulysses_degree, cfg.ring_degree) == (s.ulysses, s.ring)


def test_diffusers_tp_only_repro_is_refused_and_one_device_prints_no_config(capsys):
    """The audit's repro: sd3-medium on 8 H100 under diffusers used to print TP8 as
    ContextParallelConfig(ulysses_degree=1, ring_degree=1); now TP is refused by the framework
    rule, and one-device replicas print no config (JSON: launch "")."""
    rc, _, err = _cli(capsys, *SD3, "--devices 8 --steps 28 --framework diffusers")
    assert rc == 2 and "diffusers-tp" in err and "diffusers has no tensor parallelism" in err
    rc, out, err = _cli(
        capsys,
        *SD3,
        ("--devices 8 --steps 28 --framework diffusers --data-parallel --format launch"),
    )
    assert rc == 0 and out == "" and "no ContextParallelConfig" in err
    rc, out, _ = _cli(
        capsys,
        *SD3,
        ("--devices 8 --steps 28 --framework diffusers --data-parallel --format json"),
    )
    assert json.loads(out)["launch"] == ""


def _wan_parser() -> argparse.ArgumentParser:
    """The launch switches of the Wan ``generate.py`` MindIE-SD's Wan ports run, as it spells
    them: the degrees as ints, ``--vae_parallel --dit_fsdp --t5_fsdp`` store_true,
    ``--offload_model`` a str2bool value."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for name in ("--ulysses_size", "--ring_size", "--cfg_size", "--tp_size"):
        p.add_argument(name, type=int, default=1)
    for name in ("--vae_parallel", "--dit_fsdp", "--t5_fsdp"):
        p.add_argument(name, action="store_true")
    p.add_argument("--offload_model", type=lambda v: v.lower() in ("yes", "true", "t", "1"))
    return p


def _xdit_parser() -> argparse.ArgumentParser:
    """xDiT's ``xfuser/config/args.py`` spellings of the degrees and the switches."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for name in ("--ulysses_degree", "--ring_degree"):
        p.add_argument(name, type=int, default=1)
    switches = (
        "--use_cfg_parallel",
        "--use_parallel_vae",
        "--shard_dit",
        "--shard_t5_encoder",
        "--use_torch_compile",
        "--enable_tiling",
    )
    for name in switches:
        p.add_argument(name, action="store_true")
    return p


def test_mindiesd_line_carries_the_fsdp_the_fit_depends_on(capsys):
    """The audit's repro: CFG2 for Wan2.1-14B on two 910B fits only with FSDP; the printed
    flags parse as Wan's generate.py takes them, with the FSDP switches on."""
    rc, out, _ = _cli(
        capsys,
        (
            "--model wan2.1-t2v-14b --devices 2 --accelerator ascend-910b --height 720 "
            "--width 1280 --frames 81 --steps 50 --weight-precision fp32 --dit-fsdp "
            "--encoder-fsdp --format mindiesd"
        ),
    )
    args = _wan_parser().parse_args(out.split())
    assert rc == 0 and args.dit_fsdp and args.t5_fsdp and not args.vae_parallel
    assert args.ulysses_size * args.ring_size * args.cfg_size * args.tp_size == 2
    assert args.offload_model is None


def test_mindiesd_offload_is_spelled_as_wan_takes_it(capsys):
    rc, out, _ = _cli(
        capsys,
        (
            "--model wan2.1-t2v-14b --devices 1 --accelerator ascend-910b --height 480 "
            "--width 832 --frames 81 --steps 50 --offload-model --format mindiesd"
        ),
    )
    assert rc == 0 and _wan_parser().parse_args(out.split()).offload_model is True


def test_json_launch_carries_the_switches_too():
    plan = plan_dit(
        "wan2.1-t2v-14b",
        ps.Cluster("h100", 8),
        framework="xdit",
        compiled=True,
        memory=DiTMemoryOptions(dit_fsdp=True, encoder_fsdp=True),
        **WAN,
    )
    args = _xdit_parser().parse_args(plan.to_dict()["launch"].split())
    assert args.shard_dit and args.shard_t5_encoder and args.use_torch_compile
    assert plan.to_dict()["launch_warnings"] == []
    flux = plan_dit(
        "flux.1-dev", ps.Cluster("h100", 8), vae_parallel=True, height=1024, width=1024, steps=28
    )
    assert _xdit_parser().parse_args(flux.launch().split()).use_parallel_vae


HUNYUAN = "--model hunyuanvideo --height 720 --width 1280 --frames 129 --steps 50 --devices 8"


def test_xdit_switches_reach_only_the_scripts_that_read_them(capsys):
    """xDiT runs each family from its own example script: HunyuanVideo's asserts
    use_parallel_vae is False (refused before a line is printed), never reads --shard_dit /
    --shard_t5_encoder (a warning, not a silent flag), and reads --enable_tiling and
    --use_torch_compile (written, so the run is the one priced)."""
    rc, out, err = _cli(capsys, HUNYUAN, "--accelerator h100 --vae-parallel --format launch")
    assert rc == 2 and out == "" and "xdit-vae-parallel" not in out
    assert "no parallel VAE decode for HunyuanVideoTransformer3DModel" in err
    assert "drop --vae-parallel" in err and "Traceback" not in err
    rc, out, err = _cli(capsys, HUNYUAN, "--accelerator h100 --dit-fsdp --format launch")
    args = _xdit_parser().parse_args(out.split())
    assert rc == 0 and not args.shard_dit and "--dit-fsdp" in err and "xDiT" in err
    rc, out, _ = _cli(capsys, HUNYUAN, "--accelerator h100 --vae-tiling --compile --format launch")
    args = _xdit_parser().parse_args(out.split())
    assert rc == 0 and args.enable_tiling and args.use_torch_compile
    with pytest.raises(UsageError, match=r"framework='any'"):
        ps.estimate_dit(
            "hunyuanvideo",
            ps.Strategy(ulysses=8),
            ps.Cluster("h100", 8),
            height=720,
            width=1280,
            frames=129,
            steps=50,
            vae_parallel=True,
        )


def test_a_switch_without_a_spelling_is_a_warning_not_a_silent_drop(capsys):
    """xDiT has no offload like Wan's --offload_model: the plan says so beside the line."""
    rc, out, err = _cli(
        capsys,
        (
            "--model wan2.1-t2v-14b --devices 1 --accelerator h100 --height 480 --width 832 "
            "--frames 81 --steps 50 --offload-model --framework xdit --format launch"
        ),
    )
    assert rc == 0 and "--offload-model" in err and "xDiT" in err
    _xdit_parser().parse_args(out.split())
    launched = FRAMEWORKS["diffusers"].launch(ps.Strategy(ulysses=2), LaunchSwitches(dit_fsdp=True))
    assert launched == "ContextParallelConfig(ulysses_degree=2, ring_degree=1)"
    assert FRAMEWORKS["diffusers"].launch_warnings(LaunchSwitches(dit_fsdp=True))
    assert not FRAMEWORKS["any"].launch_warnings(LaunchSwitches(offload=True))


def test_vae_parallel_is_refused_where_the_framework_has_none(capsys):
    with pytest.raises(UsageError, match=r"diffusers has no parallel VAE decode.*xdit"):
        DiTSwitches(vae_parallel=True, framework="diffusers")
    for fw in ("mindiesd", "xdit", "any", None):
        DiTSwitches(vae_parallel=True, framework=fw)
    rc, _, err = _cli(
        capsys,
        (
            "--model wan2.1-t2v-14b --devices 8 --accelerator l40 --height 720 --width 1280 "
            "--frames 81 --steps 50 --framework diffusers --vae-parallel"
        ),
    )
    assert rc == 2 and "--vae-parallel: diffusers has no parallel VAE decode" in err
    assert "drop --vae-parallel" in err and "--framework xdit" in err


def test_no_diffusers_plan_fits_by_a_parallel_vae_it_lacks():
    """Wan2.1-14B on 8 L40 under diffusers: the remedies tried and the hints never name the
    parallel VAE diffusers does not have."""
    try:
        plan = plan_dit("wan2.1-t2v-14b", ps.Cluster("l40", 8), framework="diffusers", **WAN)
    except UsageError as exc:
        assert "vae_parallel=True" not in str(exc)
        return
    assert all("vae_parallel=True" not in line for c in plan.candidates for line in c.reasons)
    assert all("vae_parallel" not in w for w in plan.best.report.warnings)


def test_memory_and_vae_advice_name_only_what_the_framework_has():
    """xDiT has no TP: a transformer that does not fit is not told to "use more devices for
    TP"; diffusers has no parallel VAE: the warning about a one-device decode says so instead
    of recommending one, and under xDiT it names the switch (vae_parallel=True, the CLI's
    --vae-parallel)."""
    request = dict(height=720, width=1280, frames=81, steps=50)
    with pytest.raises(UsageError) as xdit:
        plan_dit("wan2.1-t2v-14b", ps.Cluster("l40", 1), framework="xdit", **request)
    assert "for TP" not in str(xdit.value) and "split the sequence" in str(xdit.value)
    with pytest.raises(UsageError) as mindiesd:
        plan_dit("wan2.1-t2v-14b", ps.Cluster("ascend-910b", 1), **request)
    assert "use more devices for TP" in str(mindiesd.value)
    flux = dict(height=1024, width=1024, steps=4)

    def vae_warning(framework: str) -> str:
        plan = plan_dit("flux.1-schnell", ps.Cluster("h100", 8), framework=framework, **flux)
        (line,) = [w for w in plan.best.report.warnings if w.startswith("vae:")]
        return line

    assert "diffusers has no parallel VAE decode" in vae_warning("diffusers")
    assert "(vae_parallel=True) would shorten it" in vae_warning("xdit")
