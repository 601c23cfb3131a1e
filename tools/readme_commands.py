"""Print the README's set-up commands, one per line (CI runs them exactly as written).

``python tools/readme_commands.py 1`` prints the first (install + main job), ``2`` the second
(install the test extra + run the tests).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def setup_commands() -> list[str]:
    """The ```bash blocks of the README's "Set up on a fresh machine" section."""
    text = README.read_text()
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [c.strip() for c in re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)]


if __name__ == "__main__":
    print(setup_commands()[int(sys.argv[1]) - 1])
