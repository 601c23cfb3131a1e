"""Whole-or-nothing file writes, and reading user files with errors that name the file.

Every file parastrat writes (``--output``, ``--fit``, ``--plot``, ...) goes through
:func:`write_bytes` / :func:`write_text`: the bytes go to a temporary file in the same folder,
are flushed and ``fsync``-ed, and the temporary file is renamed over the target with
``os.replace`` (atomic on POSIX and Windows within one file system).  A signal, a full disk
(``ENOSPC``) or a file-size limit (``ulimit -f``) while writing leaves the previous file as it
was; a symbolic link at the target is replaced by the new file, never followed (so a link
planted at ``out.json`` cannot make parastrat overwrite the file it points to).  A device, FIFO
or socket at the target (``/dev/null``, ``/dev/stdout``, a named pipe; also through a link) is
written through in place instead: it is never replaced.

Reading goes through :func:`read_bytes` / :func:`read_text` / :func:`read_json`: a missing,
unreadable, undecodable (not UTF-8) or too deeply nested file is a
:class:`~parastrat.errors.UsageError` naming the file and the problem, never an internal error.
The path is opened non-blocking and its kind read from the open descriptor (so a link is
followed, and nothing swapped in between a check and the open can block the read): a regular
file is read; a pipe -- process substitution ``--hf-config <(cmd)``, a named pipe -- is read
while its writer keeps sending, each wait at most :data:`PIPE_WAIT_S` seconds, so a named pipe
no program writes to is refused instead of hanging; a folder, device or socket is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import UsageError

#: Deepest nesting of lists/objects accepted in a JSON or YAML input file.  parastrat's own
#: files nest at most 5 levels (calibration: ops -> op -> span -> field); 64 leaves room for
#: hand-written files and stays far below the interpreter's recursion limit.
MAX_NESTING = 64

#: Largest input file read (bytes).  A Hugging Face config.json is a few KiB, a calibration or a
#: full bench sweep well under 1 MiB.
MAX_INPUT_BYTES = 64 * 2**20

#: Longest wait (seconds) for the next bytes from a pipe before the read is refused: long enough
#: for ``<(cmd)`` whose command starts slowly, short enough that a named pipe with no writer
#: fails instead of hanging.
PIPE_WAIT_S = 15.0

_TEMP_PREFIX = ".parastrat-tmp-"
#: Open flags of a read: never block on a pipe with no writer (0 where the OS lacks the flag).
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
_CHUNK = 1 << 20


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _mode_for(path: Path) -> int:
    """Permission bits for the new file: the old regular file's, else 0o666 less the umask."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_bytes(path: str | os.PathLike[str], data: bytes, *, what: str = "file") -> Path:
    """Write ``data`` to ``path`` whole or not at all; return the path written.

    The target is replaced atomically (temporary file in the same folder, flush, fsync,
    ``os.replace``); a symlink at ``path`` is replaced, not followed.  Any OS failure
    (missing folder, no permission, full disk, file-size limit) is a UsageError naming the
    path, and the previous file, if any, is left untouched.
    """
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        raise UsageError(f"cannot write the {what} to {target}: it is a folder; give a file name")
    if is_special(target):
        return _write_through(target, data, what)
    folder = target.parent
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".part", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, _mode_for(target))
        os.replace(tmp_name, target)
        tmp_name = None
        _fsync_dir(folder)
    except OSError as exc:
        raise UsageError(
            f"cannot write the {what} to {target}: {_why(exc)}; the previous file (if any) is "
            "unchanged. Give a path in an existing, writable folder with free space"
        ) from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
    return target


def is_special(path: Path) -> bool:
    """True when ``path`` is (or links to) a device, FIFO or socket -- ``/dev/null``,
    ``/dev/stdout``, a named pipe: written through in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_through(target: Path, data: bytes, what: str) -> Path:
    """Stream ``data`` into a special file (no temporary file: a device node or pipe cannot be
    renamed over, and replacing one as root would break every other process using it)."""
    try:
        with open(target, "wb") as fh:
            fh.write(data)
            fh.flush()
    except OSError as exc:
        raise UsageError(f"cannot write the {what} to {target}: {_why(exc)}") from None
    return target


def write_text(path: str | os.PathLike[str], text: str, *, what: str = "file") -> Path:
    """:func:`write_bytes` of ``text`` encoded as UTF-8."""
    return write_bytes(path, text.encode("utf-8"), what=what)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_bytes(
    path: str | os.PathLike[str], *, what: str = "file", limit: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of a user file, at most ``limit`` + 1 of them (one more than ``limit`` tells the
    caller the file is too large).  A regular file (also through a link) is read; a pipe is read
    while its writer sends (each wait at most :data:`PIPE_WAIT_S`); anything else -- folder,
    device, socket -- and a pipe that stays silent are UsageErrors naming the path."""
    p = Path(path)
    fd = _open_for_reading(p, what)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            return _read_fd(fd, limit, None)
        if stat.S_ISFIFO(mode) and os.name != "nt":
            return _read_pipe(fd, p, what, limit)
        raise UsageError(f"cannot read {what} {p}: {_not_a_file(mode)}")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {p}: {_why(exc)}") from None
    finally:
        os.close(fd)


def _open_for_reading(p: Path, what: str) -> int:
    """A descriptor of ``p`` opened read-only and non-blocking (a pipe with no writer cannot
    block the open)."""
    try:
        return os.open(p, _READ_FLAGS)
    except FileNotFoundError:
        raise UsageError(f"cannot read {what} {p}: it does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"cannot read {what} {p}: it is a folder; give a file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {p}: {_why(exc)}") from None
    except ValueError:  # a NUL byte in the path
        raise UsageError(f"cannot read {what} {p!r}: not a valid path") from None


def _not_a_file(mode: int) -> str:
    """Why a file of this kind is not read."""
    if stat.S_ISDIR(mode):
        return "it is a folder; give a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "it is a device, not a file; give a regular file"
    return "it is not a regular file (a socket?); give a regular file"


def _read_fd(fd: int, limit: int, wait: Callable[[], None] | None) -> bytes:
    """Read ``fd`` to its end or to ``limit`` + 1 bytes; ``wait`` (if any) before each read."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        if wait is not None:
            wait()
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        except BlockingIOError:  # woken with nothing to read yet: wait again
            continue
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read_pipe(fd: int, p: Path, what: str, limit: int) -> bytes:
    """A pipe's bytes, each wait for more bounded by :data:`PIPE_WAIT_S`; UsageError when it
    stays silent (a named pipe no program writes to) or sends nothing."""
    advice = "give a regular file, or a pipe whose command writes promptly (`<(cmd)`)"

    def wait() -> None:
        ready, _, _ = select.select([fd], [], [], PIPE_WAIT_S)
        if not ready:
            raise UsageError(
                f"cannot read {what} {p}: it is a pipe and nothing came through it for "
                f"{PIPE_WAIT_S:g} s (a named pipe no program writes to?); {advice}"
            )

    data = _read_fd(fd, limit, wait)
    if not data:
        raise UsageError(f"cannot read {what} {p}: the pipe sent nothing; {advice}")
    return data


def read_text(path: str | os.PathLike[str], *, what: str = "file") -> str:
    """The UTF-8 text of a user file; UsageError naming it when it is missing, unreadable, a
    folder, a device, a silent pipe, too large, or not UTF-8 text (a binary or UTF-16 file)."""
    p = Path(path)
    raw = read_bytes(p, what=what)
    if len(raw) > MAX_INPUT_BYTES:
        raise UsageError(f"{what} {p} is larger than {MAX_INPUT_BYTES // 2**20} MiB")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UsageError(f"{what} {p} is UTF-16 text; save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {p} is not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r});"
            " is it the right file?"
        ) from None


def check_nesting(obj: Any, *, source: str, limit: int = MAX_NESTING) -> None:
    """UsageError when ``obj`` nests lists/dicts deeper than ``limit`` (iterative walk)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise UsageError(f"{source} nests deeper than {limit} levels; is it the right file?")
        stack.extend((c, depth + 1) for c in children)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a floating-point number")
    return value


def loads_json(text: str, *, source: str) -> Any:
    """Parse JSON text from ``source`` (named in errors): NaN/Infinity literals, too deep
    nesting and numbers that overflow are UsageErrors."""
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc}") from None
    except ValueError as exc:  # NaN/Infinity literal, or an integer with too many digits
        raise UsageError(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{source} nests too deeply; is it the right file?") from None
    check_nesting(data, source=source)
    return data


def read_json(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """The JSON document in a user file, with :func:`read_text` 's and :func:`loads_json` 's
    errors (each naming ``what`` and the path)."""
    return loads_json(read_text(path, what=what), source=f"{what} {Path(path)}")
