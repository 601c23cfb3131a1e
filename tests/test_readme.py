"""The README's two set-up commands have the agreed shape and the main job runs.

CI (``.ci/run``) runs both commands exactly as written, install included; this test runs the
main job with the installed package, so a broken command fails the suite too.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from ._modules import load_script

setup_commands = load_script("tools/readme_commands.py").setup_commands


def test_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2
    assert cmds[0].startswith("pip install . && parastrat ")
    assert '".[test]"' in cmds[1] and cmds[1].rstrip().endswith("python -m pytest")


def test_main_job_command_runs():
    # The part after the install: run it with this interpreter's parastrat.
    job = setup_commands()[0].split("&&", 1)[1].strip()
    argv = shlex.split(job)
    assert argv[0] == "parastrat"
    r = subprocess.run(
        [sys.executable, "-m", "parastrat", *argv[1:]], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "tokens/s" in r.stdout or "tok/s" in r.stdout
