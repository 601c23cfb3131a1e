"""Hybrid (Mamba) models: per-kind records, FLOPs and the pipeline split against the real
Megatron Core / Megatron Bridge sources (``megatron/core/ssm``, Bridge's ``flop_utils``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from parastrat import ModelSpec, Strategy
from parastrat.estimate import mamba
from parastrat.estimate.flops import kind_matrices, model_flops_per_token
from parastrat.estimate.layers import (
    kind_record,
    pipeline_split,
    stage_params,
)
from parastrat.spec.models import get as get_model

#: The presets, which equal Bridge's NemotronHModelProvider56B / 8B and Nemotron3NanoProvider
#: field by field (tests/test_hybrid_bridge.py checks it against the real providers).
NH56 = get_model("nemotron-h-56b")
NH8 = get_model("nemotron-h-8b")
NANO3 = get_model("nemotron-3-nano")
P8 = NH8.hybrid_override_pattern
SPECS = (NH56, NH8, NANO3)


@pytest.mark.parametrize("model", SPECS, ids=lambda m: m.name)
def test_kind_records_sum_to_num_params(model):
    """Per-kind records on one rank (TP 1, EP 1) over the pattern, plus the ends, are the
    model's parameters; under TP 4 / EP 8 each kind is split as Megatron splits it."""
    blocks = stage_params(model, 1, 1, 1, (model.num_layers,), (model.num_moe_layers,))
    assert blocks[0].params == pytest.approx(model.num_params, rel=1e-12)
    kinds = {model.layer_kind(i) for i in range(model.num_layers)}
    for kind in kinds:
        whole = kind_record(model, kind, 1)
        assert whole.params == pytest.approx(model.kind_params(kind))
    norm = model.param_breakdown["layer_norms"]
    # the mixer is split by TP entirely; its pre-norm stays whole
    mixer = kind_record(model, "mamba", 4)
    assert mixer.params == pytest.approx((model.kind_params("mamba") - norm) / 4 + norm)
    assert mixer.linear_params == pytest.approx(
        (model.hidden_size * model.mamba_in_proj_width + model.mamba_d_inner * model.hidden_size)
        / 4
    )
    if model.is_moe:
        moe = kind_record(model, "moe", 2, 8, 1)
        assert moe.expert_params == pytest.approx(16 * model.param_breakdown["expert"])


def test_published_sizes():
    """The specs are the published models: Nemotron-H 56B and 8B, Nemotron 3 Nano (NVIDIA's
    model card: 31.6B total, 3.2B active, 3.6B active with the embeddings, which
    ``num_active_params`` counts)."""
    assert NH56.num_params / 1e9 == pytest.approx(56.3, abs=0.1)
    assert NH8.num_params / 1e9 == pytest.approx(8.1, abs=0.1)
    assert NANO3.num_params / 1e9 == pytest.approx(31.6, abs=0.1)
    assert NANO3.num_active_params / 1e9 == pytest.approx(3.6, abs=0.05)


def test_mixer_matrices_are_megatrons_shapes():
    """in_proj: h -> 2 d_inner + 2 G N + H (z, x, B, C, dt), column-parallel; out_proj:
    d_inner -> h, row-parallel (``MambaMixer.__init__``)."""
    inp, out = kind_matrices(NH56, "mamba")
    assert (inp.in_dim, inp.out_dim, inp.split) == (8192, 2 * 16384 + 2 * 8 * 256 + 256, "col")
    assert (out.in_dim, out.out_dim, out.split) == (16384, 8192, "row")
    assert kind_matrices(NH56, "mlp")[0].out_dim == 32768  # squared ReLU: not gated


@pytest.mark.parametrize("model", SPECS, ids=lambda m: m.name)
def test_model_flops_are_bridges(bridge, model):
    """``tflops_per_gpu`` counts what Megatron Bridge's ``num_floating_point_operations``
    counts for a hybrid model (``flop_utils.py``, ``is_hybrid_model``)."""
    from megatron.bridge.training.utils.flop_utils import num_floating_point_operations

    cfg_model = SimpleNamespace(
        is_hybrid_model=True,
        hybrid_override_pattern=model.hybrid_override_pattern,
        num_layers=model.num_layers,
        seq_length=8192,
        hidden_size=model.hidden_size,
        vocab_size=model.vocab_size,
        make_vocab_size_divisible_by=model.make_vocab_size_divisible_by,
        tensor_model_parallel_size=1,
        num_query_groups=model.num_query_groups,
        num_attention_heads=model.num_attention_heads,
        kv_channels=model.kv_channels,
        mamba_state_dim=model.mamba_state_dim,
        mamba_head_dim=model.mamba_head_dim,
        mamba_num_groups=model.mamba_num_groups,
        mamba_num_heads=model.mamba_num_heads,
        ffn_hidden_size=model.ffn_hidden_size,
        gated_linear_unit=model.gated_linear_unit,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size or None,
        moe_router_topk=model.moe_router_topk,
    )
    theirs = num_floating_point_operations(SimpleNamespace(model=cfg_model, peft=None), 1)
    assert model_flops_per_token(model, 8192) * 8192 == pytest.approx(theirs, rel=1e-12)


def test_scan_flops_follow_the_ssd_products():
    """The SSD forward: ``2 Q (G N + H P) + 4 H P N`` per token, a few percent of the mixer's
    GEMMs for Nemotron-H 56B."""
    q, g, n, h, p = 128, 8, 256, 256, 64
    assert mamba.scan_flops_per_token(NH56, 8192) == 2 * q * (g * n + h * p) + 4 * h * p * n
    gemms = sum(m.flops_per_token for m in kind_matrices(NH56, "mamba"))
    assert 0.01 < mamba.scan_flops_per_token(NH56, 8192) / gemms < 0.1


def _mamba_stack_selection(model: ModelSpec, pp: int, first=None, last=None) -> list[str]:
    """Layer symbols each stage builds, by Megatron Core's own
    ``MambaStack._select_layers_for_pipeline_parallel`` (called on a stand-in ``self``)."""
    from megatron.core.ssm.mamba_block import MambaStack

    out = []
    for rank in range(pp):
        fake = SimpleNamespace(
            config=SimpleNamespace(
                virtual_pipeline_model_parallel_size=None,
                num_layers=model.num_layers,
                num_layers_in_first_pipeline_stage=first,
                num_layers_in_last_pipeline_stage=last,
            ),
            pp_group=SimpleNamespace(rank=lambda r=rank: r, size=lambda: pp),
        )
        _, chosen = MambaStack._select_layers_for_pipeline_parallel(
            fake, list(model.hybrid_override_pattern)
        )
        out.append("".join(chosen))
    return out


@pytest.mark.parametrize(
    ("model", "pp", "first", "last"),
    [(NH56, 2, None, None), (NH56, 4, 28, 30), (NH8, 4, None, None), (NANO3, 4, None, None)],
)
def test_pipeline_split_is_mamba_stacks(model, pp, first, last):
    """Each stage's layer kinds are MambaStack's slice of the pattern (even or first/last)."""
    s = Strategy(tp=1, pp=pp, first_stage_layers=first, last_stage_layers=last)
    split = pipeline_split(model, s)
    theirs = _mamba_stack_selection(model, pp, first, last)
    assert list(split.stage_layers) == [len(t) for t in theirs]
    for counts, symbols in zip(split.stage_kinds, theirs):
        want = {mamba.HYBRID_KINDS["M*-E".index(c)]: symbols.count(c) for c in set(symbols)}
        assert dict(counts) == want


def test_mamba_stack_refuses_vpp():
    """The assert behind rule ``hybrid-vpp`` is in the installed MambaStack."""
    from megatron.core.ssm.mamba_block import MambaStack

    fake = SimpleNamespace(config=SimpleNamespace(virtual_pipeline_model_parallel_size=2))
    with pytest.raises(AssertionError, match="virtual/interleaved"):
        MambaStack._select_layers_for_pipeline_parallel(fake, list(P8))


def test_stage_kinds_follow_the_chunks_of_a_gpt_split():
    """PipelineSplit.stage_kinds counts each stage's layers over its virtual chunks: for
    DeepSeek-V3 under a VPP layout its "moe" counts are stage_moe and its totals stage_layers."""
    import parastrat as ps

    ds = ps.models.get("deepseek-v3")
    s = Strategy(tp=2, pp=8, vpp=4, pipeline_layout="Et|(t*2|)*30mL")
    split = pipeline_split(ds, s)
    for kinds, n, moe in zip(split.stage_kinds, split.stage_layers, split.stage_moe):
        assert sum(c for _, c in kinds) == n
        assert dict(kinds).get("moe", 0) == moe
    # DeepSeek's three dense layers: layer 0 on stage 0's first chunk, 1 and 2 on stage 1's
    assert [dict(k).get("dense", 0) for k in split.stage_kinds[:3]] == [1, 2, 0]
