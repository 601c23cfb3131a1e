"""Text from user files made safe to print: terminal control sequences removed."""

from __future__ import annotations

import re

# ANSI/VT escape sequences (CSI ... final byte, OSC ... BEL/ST, two-byte ESC x), then any other
# C0/C1 control character and DEL.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC
    r"|\x1b[@-_]"  # two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (a model name read from
    a config's ``_name_or_path`` must not move the cursor or recolour the terminal)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", str(text)))
