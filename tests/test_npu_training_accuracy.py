"""The Ascend 910B training benchmark (benchmarks/npu_training_accuracy.py) reads its rows right.

Checks the reading of the measured table, not the predictions: the VPP column's "N
layers/vstage" spelling, that every row's strategy passes parastrat's rules on the row's own
devices and batch, and that the model table agrees with the presets it duplicates.
"""

from __future__ import annotations

import pytest

import parastrat as ps

from ._modules import load_script

BENCH = load_script("benchmarks/npu_training_accuracy.py")
ROWS = BENCH.measured_rows(short=False)
MODELS = BENCH.load_models()


@pytest.mark.parametrize(
    "cell, layers, pp, vpp",
    [
        ("", 80, 4, 1),
        ("5 layers/vstage", 80, 4, 4),  # LLaMA2-70B: 80 / (4 x 5)
        ("2 layers/vstage", 96, 16, 3),  # GPT-3 175B: 96 / (16 x 2)
        ("2 layers/vstage", 80, 8, 5),  # Qwen1.5-72B
    ],
)
def test_vpp_from_layers_per_virtual_stage(cell, layers, pp, vpp):
    assert BENCH.parse_vpp(cell, layers, pp) == vpp


@pytest.mark.parametrize(
    "cell, layers, pp", [("3 layers/vstage", 80, 4), ("8 layers/vstage", 32, 8)]
)
def test_vpp_that_does_not_divide_is_refused(cell, layers, pp):
    with pytest.raises(ValueError, match="do not split"):
        BENCH.parse_vpp(cell, layers, pp)


def test_every_measured_model_is_in_the_model_table():
    assert len(ROWS) == 40
    assert {r["model"] for r in ROWS} <= set(MODELS)


@pytest.mark.parametrize("row", ROWS, ids=[r["row_id"] for r in ROWS])
def test_row_strategy_passes_the_rules_on_its_devices(row):
    m = MODELS[row["model"]]
    strategy = BENCH.row_strategy(row, m)
    devices = BENCH.row_devices(row)
    assert strategy.world_size == devices
    assert strategy.tp * strategy.pp * strategy.cp * strategy.dp == devices
    assert strategy.sp == (strategy.tp > 1)
    strategy.validate(
        m.spec,
        world_size=devices,
        seq_len=int(row["seq_len"]),
        global_batch_size=int(row["global_batch_size"]),
        micro_batch_size=int(row["micro_batch_size"]),
    )


def test_uneven_bloom_split_is_the_scripts_layer_list():
    row = next(r for r in ROWS if r["model"] == "Bloom-176B")
    strategy = BENCH.row_strategy(row, MODELS["Bloom-176B"])
    # --num-layer-list 5,6,6,6,6,6,6,6,6,6,6,5
    assert strategy.stage_layers(70) == [5] + [6] * 10 + [5]


SHAPE = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "gated_linear_unit",
    "tied_embeddings",
    "position_embedding_type",
    "normalization",
    "num_experts",
    "moe_router_topk",
)


@pytest.mark.parametrize(
    "name, preset",
    [
        ("LLaMA3-8B", "llama3-8b"),
        ("LLaMA3-70B", "llama3-70b"),
        ("Mixtral-8x7B", "mixtral-8x7b"),
        ("GPT3-175B", "gpt3-175b"),
    ],
)
def test_model_table_agrees_with_the_preset_it_duplicates(name, preset):
    ours, theirs = MODELS[name].spec, ps.models.get(preset)
    assert {f: getattr(ours, f) for f in SHAPE} == {f: getattr(theirs, f) for f in SHAPE}
