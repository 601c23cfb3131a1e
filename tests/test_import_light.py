"""The core stays light: importing parastrat and planning never import torch or megatron."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "megatron", "yunchang", "diffusers", "matplotlib", "torch_npu", "mindiesd")


def _modules_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return {m.split(".")[0] for m in r.stdout.split()}


def test_import_parastrat_is_light():
    loaded = _modules_after("import parastrat; parastrat.Strategy(tp=2).with_world_size(8)")
    assert not loaded & set(HEAVY)


def test_layout_and_rules_are_light():
    loaded = _modules_after(
        "import parastrat as ps\n"
        "ps.layout(ps.Strategy(tp=2, pp=2, ep=2, sp=True), 8)\n"
        "ps.Strategy(ulysses=2, cfg=2).check(world_size=8)\n"
        "import parastrat.adapters, parastrat.bench\n"
    )
    assert not loaded & set(HEAVY)


def test_missing_extra_error_names_the_extra():
    from parastrat._deps import require
    from parastrat.errors import MissingExtraError

    try:
        require("parastrat_no_such_module", extra="megatron")
    except MissingExtraError as e:
        assert 'pip install "parastrat[megatron]"' in str(e)
    else:  # pragma: no cover
        raise AssertionError("require() did not raise")
