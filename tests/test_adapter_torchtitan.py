"""The torchtitan adapter against torchtitan's own config definition and validation.

Field names and defaults are read from the installed ``torchtitan/config/configs.py`` (its
``ParallelismConfig`` dataclass, parsed, not imported); what the adapter writes is then built
into the real ``ParallelismConfig`` and passed to the real ``ParallelDims`` (validation and
device mesh on torch's fake process group).
"""

from __future__ import annotations

import ast
import importlib.util
import warnings
from pathlib import Path

import pytest

from parastrat import Strategy, StrategyError, UsageError, layout
from parastrat.adapters import torchtitan as tt


def parallelism_fields() -> dict[str, object]:
    """``ParallelismConfig`` field -> default, from the installed source."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtitan is not installed")
    src = Path(next(iter(spec.submodule_search_locations))) / "config" / "configs.py"
    tree = ast.parse(src.read_text())
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ParallelismConfig"
    )
    out: dict[str, object] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            try:
                out[node.target.id] = ast.literal_eval(node.value) if node.value else None
            except ValueError:
                out[node.target.id] = ...
    return out


def test_field_table_matches_torchtitans_parallelism_config():
    fields = parallelism_fields()
    written = {t for _, t in tt.FIELDS} | set(tt.EXTRA_FIELDS)
    assert written <= set(fields), written - set(fields)
    # every field of the installed version is either written or knowingly passed over
    assert set(fields) == written | tt._OTHER_FIELDS | tt._SPLIT_OVERRIDES
    for name, default in tt._DEFAULTS.items():
        assert fields[name] == default, name
    assert fields["fsdp_reshard_after_forward"] == "default"


CASES = [
    # (strategy, world, num_layers)
    (Strategy(tp=2, dp_replicate=2, fsdp="optim_grads_params", sp=True), 16, None),
    (Strategy(tp=4, cp=2, dp_shard=2, dp_replicate=2, fsdp="optim_grads", sp=True), 32, None),
    (Strategy(tp=2, pp=2, vpp=2, dp_replicate=4, dp_shard=1), 16, None),
    (Strategy(pp=4, vpp=4, account_for_embedding=True, account_for_loss=True), 4, 30),
    (Strategy(tp=2, ep=4, pp=2, fsdp="optim_grads_params"), 16, None),
]


@pytest.mark.parametrize(("s", "world", "layers"), CASES)
def test_real_parallel_dims_accept_what_we_write(s, world, layers, fake_world, parallel_dims):
    table = tt.to_parallelism(s, world, num_layers=layers)
    cfg = parallel_dims.config_class(**table, spmd_backend="full_dtensor")
    dims = parallel_dims.from_config(cfg, world)  # torchtitan's own _validate
    placed = s.with_world_size(world)
    assert (dims.tp, dims.cp, dims.pp, dims.ep) == (s.tp, s.cp, s.pp, s.ep)
    assert (dims.dp_shard, dims.dp_replicate) == (placed.dp_shard_degree, s.dp_replicate)
    fake_world(world)
    dims.build_mesh()
    assert dims._global_meshes["dense"].mesh.numel() == world
    fsdp_axis = dims._global_meshes["dense"]["dp_shard", "cp"]._flatten("fsdp_check")
    assert sorted(fsdp_axis.mesh.tolist()) in [sorted(g) for g in layout(s, world)["dp_shard-cp"]]


@pytest.mark.parametrize(("s", "world", "layers"), CASES)
def test_toml_round_trip(s, world, layers, tmp_path):
    path = tt.write_toml(tmp_path / "job.toml", s, world, num_layers=layers)
    back = tt.read_toml(path, world_size=world, num_layers=layers)
    assert back == s
    assert tt._tomllib().loads(path.read_text())["parallelism"] == tt.to_parallelism(
        s, world, num_layers=layers
    )


def test_existing_config_keeps_other_tables_and_keys(tmp_path):
    path = tmp_path / "llama.toml"
    original = (
        '# a torchtitan job\n[job]\ndump_folder = "./out"\n\n'
        '[parallelism]\ntensor_parallel_degree = 8\nspmd_backend = "full_dtensor"\n'
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1"]]\n\n'
        "[training]\nsteps = 10  # keep me\n"
    )
    path.write_text(original)
    tt.write_toml(path, Strategy(tp=2, dp_replicate=2, fsdp="optim_grads_params"), 16)
    doc = tt._tomllib().loads(path.read_text())
    assert doc["job"] == {"dump_folder": "./out"} and doc["training"] == {"steps": 10}
    assert doc["parallelism"]["tensor_parallel_degree"] == 2
    assert doc["parallelism"]["spmd_backend"] == "full_dtensor"
    # an explicit split would replace the pipeline written (torchtitan uses it as is): dropped
    assert "module_fqns_per_model_part" not in doc["parallelism"]
    assert "# keep me" in path.read_text() and path.read_text().startswith("# a torchtitan job")
    # a refused strategy leaves the file untouched
    before = path.read_bytes()
    with pytest.raises(StrategyError):
        tt.write_toml(path, Strategy(tp=2, ulysses=2, order="tp-cp-ep-dp-pp"), 16)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "body",
    [
        '["parallelism"]\ntensor_parallel_degree = 2\n',
        "parallelism.tensor_parallel_degree = 8\n",
        'note = """\n[parallelism]\n"""\n',
    ],
)
def test_a_table_the_editor_cannot_rewrite_is_refused_unchanged(tmp_path, body):
    """Valid TOML that declares the table another way (a quoted header, dotted keys) or hides a
    header in a string: a usage error that gives the table to paste, the file unchanged."""
    path = tmp_path / "job.toml"
    path.write_text(body)
    s = Strategy(tp=2, dp_shard=2, fsdp="optim_grads_params")
    with pytest.raises(UsageError, match="by hand"):
        tt.write_toml(path, s, 4)
    assert path.read_text() == body


def test_the_file_keeps_its_mode(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[job]\n")
    path.chmod(0o644)
    tt.write_toml(path, Strategy(tp=2, dp_shard=2, fsdp="optim_grads_params"), 4)
    assert path.stat().st_mode & 0o777 == 0o644


def test_everything_torchtitan_cannot_express_at_once():
    s = Strategy(
        tp=2,
        pp=2,
        ep=2,
        etp=2,
        ulysses=2,
        fsdp="optim",
        first_stage_layers=3,
        order="tp-cp-ep-dp-pp",
    )
    with pytest.raises(StrategyError) as e:
        tt.to_parallelism(s)
    assert e.value.rules == [
        "torchtitan-ulysses",
        "torchtitan-etp",
        "torchtitan-fsdp-level",
        "torchtitan-uneven",
    ]
    with pytest.raises(StrategyError) as e:
        tt.to_parallelism(Strategy(tp=2, pp=2, order="tp-cp-ep-pp-dp"))
    assert e.value.rules == ["torchtitan-order"]
    with pytest.raises(StrategyError) as e:
        tt.to_parallelism(Strategy(ulysses=2, cfg=2))
    assert e.value.rules == ["torchtitan-inference"]
    with pytest.raises(StrategyError) as e:
        tt.to_parallelism(Strategy(pp=2, vpp=3))
    assert e.value.rules == ["torchtitan-vpp-layers"]
    assert (
        tt.to_parallelism(Strategy(pp=2, vpp=3), num_layers=12)[
            "pipeline_parallel_layers_per_stage"
        ]
        == 2
    )


def test_fsdp2_needs_fsdp_and_the_fixes_work():
    with pytest.raises(StrategyError) as e:
        tt.to_parallelism(Strategy(tp=2), 16)
    assert e.value.rules == ["torchtitan-needs-fsdp"]
    tt.to_parallelism(Strategy(tp=2, fsdp="optim_grads_params"), 16)
    tt.to_parallelism(Strategy(tp=2, dp_shard=1, dp_replicate=8), 16)  # DDP
    assert tt.to_parallelism(Strategy(tp=2))["data_parallel_shard_degree"] == -1


def test_expert_replica_rule_is_torchtitans_mesh_constraint(fake_world, parallel_dims):
    # experts borrow ep ranks from dp_shard*cp*tp in torchtitan; Megatron needs dp_replicate to
    # divide the expert dp: with etp = 1 the two are one condition, refused before the adapter
    with pytest.raises(StrategyError) as e:
        Strategy(ep=4, dp_shard=2, dp_replicate=4, fsdp="optim_grads_params")
    assert e.value.rules == ["dp-replicate-expert"]
    dims = parallel_dims(
        dp_replicate=4,
        dp_shard=2,
        cp=1,
        tp=1,
        pp=1,
        ep=4,
        world_size=8,
        spmd_backend="full_dtensor",
    )
    fake_world(8)
    with pytest.raises(Exception):  # noqa: B017  (torch's unflatten refuses the 0-rank axis)
        dims.build_mesh()
    tt.to_parallelism(Strategy(ep=4, dp_shard=4, dp_replicate=2, fsdp="optim_grads_params"))


def test_reading_bad_tables_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="unknown"):
        tt.from_parallelism({"tensor_parallel_size": 2})
    with pytest.raises(UsageError, match="whole numbers"):
        tt.from_parallelism({"tensor_parallel_degree": "2"})
    bad = tmp_path / "bad.toml"
    bad.write_text("[parallelism\n")
    with pytest.raises(UsageError, match="cannot read"):
        tt.read_toml(bad)
    with pytest.raises(UsageError, match="cannot read"):
        tt.read_toml(tmp_path / "missing.toml")


def test_an_explicit_split_is_refused_on_read_and_one_shard_fsdp_on_write(tmp_path):
    """module_fqns_per_model_part sets torchtitan's stages in place of the degree and schedule:
    a table carrying one is not read as something else; FSDP over one shard rank is plain
    data parallelism there and would not read back as FSDP."""
    table = {"pipeline_parallel_degree": 2, "module_fqns_per_model_part": [["a"], ["b"], ["c"]]}
    with pytest.raises(UsageError, match="module_fqns_per_model_part"):
        tt.from_parallelism(table, world_size=2)
    with pytest.raises(StrategyError) as err:
        tt.to_parallelism(Strategy(dp_replicate=4, dp_shard=1, fsdp="optim_grads_params"), 4)
    assert "torchtitan-fsdp-one-shard" in err.value.rules


def test_a_crlf_file_keeps_its_line_endings(tmp_path):
    path = tmp_path / "win.toml"
    path.write_bytes(
        b'[job]\r\ndump_folder = "./out"\r\n\r\n[parallelism]\r\ntensor_parallel_degree = 8\r\n'
    )
    s = Strategy(tp=2, fsdp="optim_grads_params")
    tt.write_toml(path, s, 8)
    raw = path.read_bytes()
    assert b"\r\n" in raw and raw.count(b"\n") == raw.count(b"\r\n")
    assert tt.read_toml(path, world_size=8) == s


def test_cli_args_are_what_torchtitans_own_parser_takes():
    """torchtitan 0.3.0 reads no TOML: its ConfigManager builds the config from --module /
    --config plus tyro command-line overrides.  The overrides parse, with tyro and torchtitan's
    own ParallelismConfig, into the same table to_parallelism gives (flags included)."""
    import dataclasses

    tyro = pytest.importorskip("tyro")
    from torchtitan.config.configs import ParallelismConfig, TrainingConfig

    job = dataclasses.make_dataclass(
        "Job",
        [
            (
                "parallelism",
                ParallelismConfig,
                dataclasses.field(default_factory=ParallelismConfig),
            ),
            ("training", TrainingConfig, dataclasses.field(default_factory=TrainingConfig)),
        ],
    )

    for s, world in (
        (Strategy(tp=2, sp=True, dp_replicate=2, fsdp="optim_grads_params"), 16),
        (Strategy(tp=2, pp=2, vpp=2, fsdp="optim_grads"), 16),
        (Strategy(tp=4, dp_replicate=2, dp_shard=1), 8),
    ):
        args = tt.to_cli_args(s, world, num_layers=32)
        parsed_job = tyro.cli(job, args=args, default=job())
        parsed = parsed_job.parallelism
        assert parsed_job.training.disable_cuda_graphs is (s.pp > 1)
        for key, value in tt.to_parallelism(s, world, num_layers=32).items():
            assert getattr(parsed, key) == value, (s, key)


@pytest.mark.parametrize(
    ("module", "config", "s", "world"),
    [
        ("llama3", "llama3_debugmodel", Strategy(tp=2, sp=True, fsdp="optim_grads_params"), 8),
        ("llama3", "llama3_debugmodel", Strategy(tp=2, pp=2, vpp=2, fsdp="optim_grads"), 16),
        ("llama3", "llama3_debugmodel", Strategy(pp=4, dp_replicate=2, dp_shard=1), 8),
        ("deepseek_v3", "deepseek_v3_debugmodel", Strategy(ep=4, fsdp="optim_grads_params"), 8),
    ],
)
def test_cli_args_start_torchtitans_own_config_manager(module, config, s, world, capsys):
    """What a user pastes after ``--module/--config`` is parsed and validated by torchtitan
    0.3.0's ConfigManager itself (tyro, then ``Trainer.Config``'s checks): pipeline and expert
    parallel lines turn off the CUDA graphs torchtitan refuses beside them, and every degree
    written is the one read back."""
    pytest.importorskip("tyro")
    try:
        from torchtitan.config import ConfigManager
    except ImportError as exc:  # its model registry imports tensorboard, torchdata, spmd_types
        pytest.skip(f"torchtitan's ConfigManager does not import here: {exc}")
    args = tt.to_cli_args(s, world, num_layers=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = ConfigManager().parse_args(["--module", module, "--config", config, *args])
    for key, value in tt.to_parallelism(s, world, num_layers=8).items():
        assert getattr(job.parallelism, key) == value, key
    graphs_refused = s.pp > 1 or s.ep > 1
    assert job.training.disable_cuda_graphs is graphs_refused
    if graphs_refused:  # without the switch torchtitan refuses the line
        plain = [a for a in args if a != "--training.disable_cuda_graphs"]
        with pytest.raises(SystemExit), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ConfigManager().parse_args(["--module", module, "--config", config, *plain])
        assert "disable_cuda_graphs" in capsys.readouterr().err.replace("\n", "")
