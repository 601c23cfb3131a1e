"""The config readers state what they read: a missing size is refused naming the file's own
key (never guessed), an absent switch means what Hugging Face means, every field a diffusers
reader reads is checked (and the ones it ignores change nothing), and a pipe nobody writes to is
refused instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import parastrat as ps
from parastrat import _io
from parastrat.errors import SpecError, UsageError
from parastrat.rules.check import check
from parastrat.spec import dit_config
from parastrat.spec.dit import DiTSpec

HF = Path(__file__).parent / "data" / "hf"
SRC = Path(ps.__file__).parent.parent


def _cfg(name: str) -> dict[str, Any]:
    return json.loads((HF / name).read_text())


def _write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


# ---- 1. a missing size is refused naming the key; an absent switch means what HF means -------


@pytest.mark.parametrize(
    "fname, key",
    [
        ("deepseek-v3.json", "n_routed_experts"),
        ("deepseek-v2.json", "n_routed_experts"),
        ("qwen3-30b-a3b.json", "num_experts"),
        ("qwen3-235b-a22b.json", "num_experts"),
        ("mixtral-8x7b.json", "num_local_experts"),
        ("olmoe-1b-7b.json", "num_experts"),
        ("gpt-oss-20b.json", "num_local_experts"),
        ("qwen3-30b-a3b.json", "moe_intermediate_size"),
        ("deepseek-v3.json", "moe_intermediate_size"),
        ("llama3-8b.json", "intermediate_size"),
        ("qwen3-8b.json", "intermediate_size"),
        ("mixtral-8x7b.json", "intermediate_size"),
    ],
)
def test_a_dropped_size_is_refused_naming_the_files_key(tmp_path, fname, key):
    cfg = _cfg(fname)
    del cfg[key]
    path = _write(tmp_path, cfg)
    with pytest.raises(SpecError, match=rf"missing field '{key}'") as exc:
        ps.ModelSpec.from_hf_config(path)
    assert str(path) in str(exc.value) and cfg["model_type"] in str(exc.value)


@pytest.mark.parametrize("key", ["n_routed_experts", "moe_intermediate_size"])
def test_a_null_expert_field_is_refused_too(key):
    cfg = {**_cfg("deepseek-v3.json"), key: None}
    with pytest.raises(SpecError, match=f"missing field '{key}'"):
        ps.ModelSpec.from_hf_config(cfg)


def test_llama4_text_config_sizes_are_refused_naming_the_key():
    cfg = _cfg("llama4-maverick.json")
    del cfg["text_config"]["num_local_experts"]
    with pytest.raises(SpecError, match="missing field 'num_local_experts'"):
        ps.ModelSpec.from_hf_config(cfg)
    # Maverick has dense layers (interleave_moe_layer_step 2): their MLP width is needed
    cfg = _cfg("llama4-maverick.json")
    del cfg["text_config"]["intermediate_size_mlp"]
    with pytest.raises(SpecError, match="missing field 'intermediate_size_mlp'"):
        ps.ModelSpec.from_hf_config(cfg)
    # Scout's layers all hold experts: the dense width is unused, so not needed
    cfg = _cfg("llama4-scout.json")
    del cfg["text_config"]["intermediate_size_mlp"]
    got = ps.ModelSpec.from_hf_config(cfg)
    assert got.num_params == ps.ModelSpec.from_hf_config(HF / "llama4-scout.json").num_params


def test_an_unknown_moe_family_must_state_its_experts():
    cfg = {**_cfg("mixtral-8x7b.json"), "model_type": "granitemoe"}
    del cfg["num_local_experts"]
    with pytest.raises(SpecError, match=r"missing field 'num_local_experts'.*'granitemoe'"):
        ps.ModelSpec.from_hf_config(cfg)


def test_a_dense_family_stays_dense_without_experts_or_with_zero():
    llama = ps.ModelSpec.from_hf_config(HF / "llama3-8b.json")
    assert llama.num_moe_experts is None
    zero = ps.ModelSpec.from_hf_config({**_cfg("llama3-8b.json"), "num_experts": 0})
    assert zero.num_moe_experts is None and zero.num_params == llama.num_params


def test_gpt2_family_builds_4x_hidden_for_a_null_mlp_width():
    """Hugging Face's GPT-2 builds ``4 * n_embd`` for ``n_inner: null``."""
    gpt2 = {
        "model_type": "gpt2",
        "n_layer": 12,
        "n_embd": 768,
        "n_head": 12,
        "vocab_size": 50257,
        "n_inner": None,
    }
    assert ps.ModelSpec.from_hf_config(gpt2).ffn_hidden_size == 4 * 768
    assert ps.ModelSpec.from_hf_config({**gpt2, "n_inner": 1000}).ffn_hidden_size == 1000


def test_qwen2_without_use_sliding_window_has_no_window_and_allows_ring_cp():
    cfg = _cfg("qwen2-7b.json")
    del cfg["use_sliding_window"]
    m = ps.ModelSpec.from_hf_config(cfg)
    assert m.sliding_window is None
    assert "cp-ring-attention" not in {v.rule for v in check(ps.Strategy(cp=4), m)}
    on = ps.ModelSpec.from_hf_config({**cfg, "use_sliding_window": True, "max_window_layers": 0})
    assert on.sliding_window == 131072
    assert "cp-ring-attention" in {v.rule for v in check(ps.Strategy(cp=4), on)}


def test_sliding_window_matches_transformers_class_defaults():
    transformers = pytest.importorskip("transformers")
    qwen2 = _cfg("qwen2-7b.json")
    del qwen2["use_sliding_window"]
    assert transformers.Qwen2Config(**qwen2).sliding_window is None
    assert ps.ModelSpec.from_hf_config(qwen2).sliding_window is None
    # Mistral has no switch: its sliding_window alone is the window
    mistral = {**_cfg("llama3-8b.json"), "model_type": "mistral", "sliding_window": 4096}
    assert transformers.MistralConfig(**mistral).sliding_window == 4096
    assert ps.ModelSpec.from_hf_config(mistral).sliding_window == 4096


@pytest.mark.parametrize("full_layers", [None, 0, 14, 28, 40])
def test_qwen2_max_window_layers_reads_as_transformers_builds_the_layers(full_layers):
    """With the window on, Qwen2's first ``max_window_layers`` layers keep full attention
    (class default 28 when absent): all full is no window, none full is a window on every
    layer, a leading full block has no Megatron spelling and is refused naming the field."""
    transformers = pytest.importorskip("transformers")
    cfg = {**_cfg("qwen2-7b.json"), "use_sliding_window": True, "sliding_window": 4096}
    if full_layers is None:
        del cfg["max_window_layers"]
    else:
        cfg["max_window_layers"] = full_layers
    types = transformers.Qwen2Config(**cfg).layer_types
    if len(set(types)) == 2:
        with pytest.raises(SpecError, match="max_window_layers"):
            ps.ModelSpec.from_hf_config(cfg)
        return
    m = ps.ModelSpec.from_hf_config(cfg)
    assert (m.sliding_window is not None) == (types[0] == "sliding_attention")


@pytest.mark.parametrize(
    "model_type, field, default",
    [
        ("deepseek_v3", "n_shared_experts", 1),
        ("deepseek_v2", "n_shared_experts", 2),
        ("qwen2_moe", "shared_expert_intermediate_size", 5632),
    ],
)
def test_absent_shared_experts_mean_the_class_default(model_type, field, default):
    """A shared-expert field a file omits is what the Hugging Face class builds (not none);
    null or 0 is none."""
    transformers = pytest.importorskip("transformers")
    cls = {
        "deepseek_v3": transformers.DeepseekV3Config,
        "deepseek_v2": transformers.DeepseekV2Config,
        "qwen2_moe": transformers.Qwen2MoeConfig,
    }[model_type]
    assert getattr(cls(), field) == default
    base = _cfg("deepseek-v3.json") if model_type.startswith("deepseek") else _qwen2_moe()
    cfg = {k: v for k, v in base.items() if k not in ("n_shared_experts", field)}
    cfg["model_type"] = model_type
    width = cfg["moe_intermediate_size"] if field == "n_shared_experts" else 1
    assert ps.ModelSpec.from_hf_config(cfg).moe_shared_expert_intermediate_size == default * width
    for none in (None, 0):
        spec = ps.ModelSpec.from_hf_config({**cfg, field: none})
        assert not spec.moe_shared_expert_intermediate_size


def _qwen2_moe() -> dict[str, Any]:
    """Qwen1.5-MoE-A2.7B's config.json fields that size it (Qwen/Qwen1.5-MoE-A2.7B)."""
    return {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
    }


def test_use_sliding_window_must_be_a_boolean():
    cfg = {**_cfg("qwen2-7b.json"), "use_sliding_window": "false"}
    with pytest.raises(SpecError, match="field 'use_sliding_window' must be true or false"):
        ps.ModelSpec.from_hf_config(cfg)


# ---- 2. errors name the file's own key -----------------------------------------------------


@pytest.mark.parametrize(
    "fname, change, key",
    [
        ("deepseek-v3.json", {"n_routed_experts": -5}, "n_routed_experts"),
        ("qwen3-30b-a3b.json", {"num_experts": 0}, "num_experts"),
        ("mixtral-8x7b.json", {"num_local_experts": 2.5}, "num_local_experts"),
        ("qwen3-30b-a3b.json", {"decoder_sparse_step": 0}, "decoder_sparse_step"),
        ("deepseek-v3.json", {"moe_layer_freq": "x"}, "moe_layer_freq"),
        ("deepseek-v3.json", {"num_nextn_predict_layers": -1}, "num_nextn_predict_layers"),
        ("deepseek-v3.json", {"n_group": 0}, "n_group"),
        ("llama3-8b.json", {"num_key_value_heads": 0}, "num_key_value_heads"),
        ("llama3-8b.json", {"max_position_embeddings": -1}, "max_position_embeddings"),
    ],
)
def test_a_bad_value_is_named_by_the_files_key(fname, change, key):
    with pytest.raises(SpecError, match=f"field '{key}' must be"):
        ps.ModelSpec.from_hf_config({**_cfg(fname), **change})


@pytest.mark.parametrize(
    "alias, value", [("n_layer", 0), ("n_embd", -1), ("n_head", "x"), ("num_kv_heads", 0)]
)
def test_an_alias_is_named_as_the_file_spells_it(alias, value):
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 1000,
    }
    canonical = {
        "n_layer": "num_hidden_layers",
        "n_embd": "hidden_size",
        "n_head": "num_attention_heads",
    }
    cfg.pop(canonical.get(alias, ""), None)
    with pytest.raises(SpecError, match=f"field '{alias}' must be"):
        ps.ModelSpec.from_hf_config({**cfg, alias: value})


@pytest.mark.parametrize("bad", ["abc", [], 5, True])
def test_a_text_config_that_is_no_object_is_named(bad):
    cfg = {**_cfg("llama4-scout.json"), "text_config": bad}
    with pytest.raises(SpecError, match="field 'text_config' must be a JSON object") as exc:
        ps.ModelSpec.from_hf_config(cfg)
    assert "num_hidden_layers" not in str(exc.value)


# ---- 3. the diffusers reader checks every field it reads -----------------------------------


def _read_keys(monkeypatch: pytest.MonkeyPatch, cls: str) -> set[str]:
    """The fields the reader of ``cls`` looks up, recorded from an empty config."""
    seen: set[str] = set()

    class Recording(dict):
        def get(self, key: Any, default: Any = None) -> Any:
            seen.add(key)
            return super().get(key, default)

    real_init = dit_config._Fields.__init__

    def recording_init(self: Any, cfg: Any, where: str, cls_name: str) -> None:
        real_init(self, Recording(cfg), where, cls_name)

    with monkeypatch.context() as m:
        m.setattr(dit_config._Fields, "__init__", recording_init)
        DiTSpec.from_diffusers_config({"_class_name": cls})
    return seen - {"_class_name"}


@pytest.mark.parametrize("cls", sorted(dit_config.READERS))
def test_every_field_a_diffusers_reader_reads_is_checked(monkeypatch, cls):
    keys = _read_keys(monkeypatch, cls)
    assert {"num_attention_heads", "attention_head_dim", "num_layers"} <= keys
    for key in sorted(keys):
        with pytest.raises(SpecError, match=f"{cls} field '{key}' must be"):
            DiTSpec.from_diffusers_config({"_class_name": cls, key: [7]})


@pytest.mark.parametrize(
    "cls, key",
    [
        ("WanTransformer3DModel", "out_channels"),
        ("WanTransformer3DModel", "ffn_dim"),
        ("FluxTransformer2DModel", "in_channels"),
        ("SD3Transformer2DModel", "patch_size"),
        ("QwenImageTransformer2DModel", "patch_size"),
        ("HunyuanVideoTransformer3DModel", "patch_size_t"),
        ("CogVideoXTransformer3DModel", "time_embed_dim"),
        ("MochiTransformer3DModel", "in_channels"),
    ],
)
def test_a_size_read_must_be_at_least_one(cls, key):
    with pytest.raises(SpecError, match=f"field '{key}' must be a whole number in \\[1,"):
        DiTSpec.from_diffusers_config({"_class_name": cls, key: 0})


@pytest.mark.parametrize(
    "cls, key",
    [
        ("WanTransformer3DModel", "in_channels"),
        ("FluxTransformer2DModel", "patch_size"),
        ("FluxTransformer2DModel", "out_channels"),
        ("HunyuanVideoTransformer3DModel", "in_channels"),
    ],
)
def test_an_ignored_field_changes_nothing_and_the_docstring_says_so(monkeypatch, cls, key):
    assert key not in _read_keys(monkeypatch, cls)
    plain = DiTSpec.from_diffusers_config({"_class_name": cls})
    assert DiTSpec.from_diffusers_config({"_class_name": cls, key: 0}) == plain
    doc = " ".join((dit_config.__doc__ or "").split())
    assert "Every other field is ignored" in doc and f"``{key}``" in doc


def test_sd3_qk_norm_is_null_or_a_name():
    sd3 = {"_class_name": "SD3Transformer2DModel"}
    assert DiTSpec.from_diffusers_config({**sd3, "qk_norm": "rms_norm"}) != (
        DiTSpec.from_diffusers_config(sd3)
    )
    with pytest.raises(SpecError, match="field 'qk_norm' must be null or a name"):
        DiTSpec.from_diffusers_config({**sd3, "qk_norm": 1})


# ---- 4. a pipe nobody writes to, a device or a folder is refused, not read ----------------

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")

_SILENT_PIPE = """
import sys, time
from parastrat import _io
from parastrat.spec.dit import DiTSpec
import parastrat as ps
_io.PIPE_WAIT_S = 0.5
for read in (ps.ModelSpec.from_hf_config, DiTSpec.from_diffusers_config):
    start = time.monotonic()
    try:
        read(sys.argv[1])
    except ps.errors.SpecError as exc:
        print(f"{time.monotonic() - start:.1f}", exc)
"""


@needs_fifo
def test_a_named_pipe_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    run = subprocess.run(
        [sys.executable, "-c", _SILENT_PIPE, str(fifo)],
        capture_output=True,
        text=True,
        timeout=10,  # a regression hangs: fail instead
        env=env,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == 2, run.stderr
    for line in lines:
        seconds, message = line.split(" ", 1)
        assert float(seconds) < 5
        assert str(fifo) in message and "it is a pipe and nothing came through it" in message


@needs_fifo
def test_the_cli_refuses_a_silent_named_pipe(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    code = (
        "import sys; from parastrat import _io; _io.PIPE_WAIT_S = 0.5; "
        "from parastrat.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, "plan", "--hf-config", str(fifo), "--gpus", "8"],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert run.returncode == 2 and str(fifo) in run.stderr.replace("\n", "")
    assert "Traceback" not in run.stderr


@needs_fifo
def test_a_pipe_with_a_writer_is_read_like_process_substitution(tmp_path):
    """``--hf-config <(cat config.json)`` hands over a pipe its command writes into."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    text = (HF / "llama3-8b.json").read_bytes()

    def writer() -> None:
        with open(fifo, "wb") as fh:  # blocks until the reader opens
            for i in range(0, len(text), 100):
                fh.write(text[i : i + 100])
                fh.flush()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    m = ps.ModelSpec.from_hf_config(fifo)
    thread.join(timeout=10)
    assert m.num_params == ps.ModelSpec.from_hf_config(HF / "llama3-8b.json").num_params


@needs_fifo
def test_a_link_to_a_pipe_is_judged_by_what_it_points_to(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "PIPE_WAIT_S", 0.2)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "config.json"
    link.symlink_to(fifo)
    with pytest.raises(UsageError, match="it is a pipe and nothing came through"):
        _io.read_json(link, what="config")


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="POSIX device")
def test_a_device_or_a_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(UsageError, match="/dev/null: it is a device, not a file"):
        _io.read_text("/dev/null", what="config")
    with pytest.raises(SpecError, match="/dev/null: it is a device"):
        DiTSpec.from_diffusers_config("/dev/null")
    with pytest.raises(UsageError, match="it is a folder; give a file"):
        _io.read_text(tmp_path, what="config")


def test_a_regular_file_reads_as_before_and_the_limit_holds(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"a": 1}')
    assert _io.read_json(path) == {"a": 1}
    assert _io.read_bytes(path, limit=3) == b'{"a"'  # limit + 1 bytes: "too large"
