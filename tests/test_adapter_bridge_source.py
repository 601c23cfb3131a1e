"""Every Megatron Bridge field the adapter writes or reads exists upstream.

Megatron Bridge cannot be imported without Transformer Engine, so its source is read with
``ast``: the files are located through the installed distribution's file list (no import),
and a class's fields are the annotated names of its body plus those of its bases, followed
through ``from ... import`` statements into Bridge and megatron-core.  A rename upstream then
fails this test instead of a user's training job.

Install for this test: ``pip install --no-deps megatron-bridge`` (checked with 0.3.1).
"""

from __future__ import annotations

import ast
import dataclasses
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest

from parastrat import Strategy
from parastrat.adapters import megatron as mg
from parastrat.strategy import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER


def _root(dist: str) -> Path | None:
    try:
        return Path(metadata.distribution(dist).locate_file(""))
    except metadata.PackageNotFoundError:
        return None


BRIDGE_ROOT = _root("megatron-bridge")
CORE_ROOT = _root("megatron-core")

pytestmark = pytest.mark.skipif(
    BRIDGE_ROOT is None or CORE_ROOT is None,
    reason="megatron-bridge source not installed: pip install --no-deps megatron-bridge "
    "(and megatron-core)",
)

CONFIG_MODULE = "megatron.bridge.training.config"


def _module_file(module: str) -> Path:
    rel = Path(*module.split("."))
    for root in (BRIDGE_ROOT, CORE_ROOT):
        for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(f"no source for {module}")


@cache
def _parse(module: str) -> ast.Module:
    return ast.parse(_module_file(module).read_text(encoding="utf-8"))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = _module_file(module).name == "__init__.py"
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) for every ``from X import Y`` (later ones win)."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(_parse(module)):
        if isinstance(node, ast.ImportFrom):
            src = _absolute(module, node)
            for alias in node.names:
                out[alias.asname or alias.name] = (src, alias.name)
    return out


def _base_name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Subscript):  # Generic[T], ModelProviderMixin[X]
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


@cache
def _find_class(module: str, name: str) -> tuple[str, ast.ClassDef] | None:
    """The class definition ``name`` seen from ``module``, following re-exports."""
    for node in _parse(module).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    target = _imports(module).get(name)
    if target is None:
        return None
    try:
        return _find_class(*target)
    except FileNotFoundError:  # a third-party base (typing, abc, ...)
        return None


@cache
def class_fields(module: str, name: str) -> frozenset[str]:
    """Annotated fields and properties of a class and all its bases, from source."""
    found = _find_class(module, name)
    if found is None:
        return frozenset()
    mod, node = found
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.FunctionDef) and any(
            _base_name(d) == "property" for d in item.decorator_list
        ):
            names.add(item.name)
    for base in node.bases:
        base_name = _base_name(base)
        if base_name:
            names |= class_fields(mod, base_name)
    return frozenset(names)


def _annotation_class(module: str, container: str, field: str) -> str:
    """The first class named in ``container.field``'s annotation (``A | B`` -> A)."""
    _, node = _find_class(module, container)
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == field:
            ann = item.annotation
            while True:
                if isinstance(ann, ast.BinOp):
                    ann = ann.left
                elif isinstance(ann, ast.Subscript):  # Optional[X], Union[X, Y]
                    sl = ann.slice
                    ann = sl.elts[0] if isinstance(sl, ast.Tuple) else sl
                else:
                    break
            return _base_name(ann)
    raise AssertionError(f"{container} has no field {field!r}")


def section_fields(section: str) -> frozenset[str]:
    """Fields of the class ``ConfigContainer.<section>`` is annotated with."""
    return class_fields(CONFIG_MODULE, _annotation_class(CONFIG_MODULE, "ConfigContainer", section))


def test_ast_walker_sees_megatron_core_fields_through_bridge_bases():
    """The walker itself: GPTModelProvider -> Bridge TransformerConfig -> megatron-core's
    TransformerConfig -> ModelParallelConfig carries every real dataclass field."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    real = {f.name for f in dataclasses.fields(TransformerConfig)}
    missing = real - section_fields("model")
    assert not missing, sorted(missing)
    # ... and only them: a misspelt name is not found, Bridge's own seq_length is.
    assert "tensor_parallel_size" not in section_fields("model")
    assert "seq_length" in section_fields("model") and "seq_length" not in real


def test_container_sections_exist():
    assert {"model", "train", "dist"} <= class_fields(CONFIG_MODULE, "ConfigContainer")
    assert _annotation_class(CONFIG_MODULE, "ConfigContainer", "model") == "GPTModelProvider"


def test_every_model_field_written_exists_on_gpt_model_provider():
    missing = set(mg.MODEL_FIELDS) - section_fields("model")
    assert not missing, f"renamed upstream? {sorted(missing)}"


def test_every_dist_field_written_exists_on_distributed_init_config():
    missing = set(mg.DIST_FIELDS) - section_fields("dist")
    assert not missing, sorted(missing)


def test_every_field_read_exists():
    missing = [f"{sec}.{name}" for sec, name in mg.READ_FIELDS if name not in section_fields(sec)]
    assert not missing


@pytest.mark.parametrize(
    "s",
    [
        Strategy(tp=4, pp=4, vpp=2, sp=True, ulysses=2, ring=2, order=MEGATRON_ORDER),
        Strategy(tp=2, ep=8, sp=True, pp=4, first_stage_layers=3, last_stage_layers=5),
        Strategy(tp=2, pp=2, sp=True, order=MEGATRON_TP_PP_DP_ORDER),
    ],
)
def test_every_override_path_exists(s):
    for override in mg.to_overrides(s, micro_batch_size=1, global_batch_size=256):
        path = override.split("=", 1)[0]
        section, name = path.split(".")
        assert name in section_fields(section), override


def test_version_checked():
    """Records the Bridge version this adapter was checked against (skipped if absent)."""
    version = metadata.version("megatron-bridge")
    major, minor = (int(x) for x in version.split(".")[:2])
    assert (major, minor) >= (0, 3), version
