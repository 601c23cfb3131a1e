"""The README's two set-up commands work as written (the install half is what CI does)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def setup_commands() -> list[str]:
    text = README.read_text()
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


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
