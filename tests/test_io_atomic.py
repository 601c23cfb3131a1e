"""Whole-or-nothing writes (parastrat._io): a failure or a signal mid-write leaves the previous
file intact, a symlink at the target is replaced rather than followed, the path reported is
the path written."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parastrat import _io
from parastrat.cli import main
from parastrat.errors import UsageError

ROWS = [
    {
        "op": "ring",
        "bytes": b,
        "world": 2,
        "time_s": t,
        "time_min_s": t,
        "time_max_s": t,
        "algbw_gbps": b / t / 1e9,
        "busbw_gbps": b / t / 1e9,
        "iters": 1,
        "backend": "nccl",
        "dtype": "bfloat16",
        "span": "inter",
    }
    for b, t in ((1 << 10, 10e-6 + 1024 / 25e9), (1 << 26, 10e-6 + (1 << 26) / 25e9))
]


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(_io._TEMP_PREFIX)]


def test_write_replaces_and_keeps_the_mode(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    target.chmod(0o640)
    assert _io.write_text(target, "new") == target
    assert target.read_text() == "new"
    assert (target.stat().st_mode & 0o777) == 0o640
    assert not _leftovers(tmp_path)


def test_full_disk_leaves_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "cal.json"
    target.write_text("good")

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_io.os, "fsync", no_space)
    with pytest.raises(UsageError, match=r"No space left.*unchanged"):
        _io.write_text(target, "x" * 10_000, what="calibration")
    assert target.read_text() == "good"
    assert not _leftovers(tmp_path)


def test_interrupt_mid_write_leaves_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "rows.json"
    target.write_text("good")

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(_io.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _io.write_text(target, "new")
    assert target.read_text() == "good"
    assert not _leftovers(tmp_path)


def test_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(ROWS))
    assert main(["bench", "--load", str(src), "--fit", str(link)]) == 0
    assert victim.read_text() == "precious"
    assert not link.is_symlink()
    assert "ring" in json.loads(link.read_text())["ops"]


def test_missing_folder_and_folder_target_are_usage_errors(tmp_path, capsys):
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(ROWS))
    assert main(["bench", "--load", str(src), "--output", str(tmp_path / "no" / "x.json")]) == 2
    assert "no/x.json" in capsys.readouterr().err
    assert main(["bench", "--load", str(src), "--fit", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_plot_reports_the_path_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(ROWS))
    assert main(["bench", "--load", str(src), "--plot", str(tmp_path / "myplot")]) == 0
    assert (tmp_path / "myplot.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "myplot").exists()
    assert "myplot.png" in capsys.readouterr().err


def _cli(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "parastrat", *argv], capture_output=True, text=True, **kw
    )


def test_file_size_limit_keeps_a_good_calibration(tmp_path):
    """(ulimit -f 1; parastrat bench --load rows.json --fit cal.json) used to cut cal.json."""
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(ROWS))
    cal = tmp_path / "cal.json"
    assert _cli(["bench", "--load", str(src), "--fit", str(cal)]).returncode == 0
    good = cal.read_text()
    assert len(good) > 256

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))

    done = _cli(["bench", "--load", str(src), "--fit", str(cal)], preexec_fn=limit)
    assert done.returncode == 2, done.stderr
    assert "cal.json" in done.stderr and "Traceback" not in done.stderr
    assert cal.read_text() == good
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_write_leaves_the_previous_file(tmp_path, sig):
    """A process killed between writing and renaming leaves the target as it was."""
    target = tmp_path / "out.json"
    target.write_text("good")
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from parastrat import _io
        def slow(fd):
            print("writing", flush=True)
            time.sleep(30)
        _io.os.fsync = slow
        _io.write_text({str(target)!r}, "x" * 100000)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(sig)
    proc.wait(timeout=10)
    assert target.read_text() == "good"
    # the temporary file may remain (the process had no chance to clean up); never the target
    assert all(name.endswith(".part") for name in _leftovers(tmp_path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_or_device_at_the_target_is_written_through_not_replaced(tmp_path, capsys):
    """``--output /dev/null`` as root used to rename a regular file over the device node (and
    ``--plot /dev/null`` wrote ``/dev/null.png``): a device, FIFO or a link to one is written
    in place and stays what it was."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    _io.write_text(fifo, "rows\n", what="rows")
    reader.join(timeout=10)
    assert got == [b"rows\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "to-null"
    link.symlink_to(os.devnull)
    assert _io.write_text(link, "x") == link and link.is_symlink()
    null_mode = os.stat(os.devnull).st_mode
    assert main(["layout", "--gpus", "4", "--tp", "2", "--plot", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and os.stat(os.devnull).st_mode == null_mode
    assert not Path(os.devnull + ".png").exists()
    assert f"{os.devnull}" in capsys.readouterr().err
