"""The layer records: one parameter accounting, read by the memory and the step-time model."""

import pytest

import parastrat as ps
from parastrat.estimate.layers import (
    GRAD_BYTES,
    embedding_record,
    layer_record,
    mtp_record,
    stage_params,
)
from parastrat.estimate.memory import estimate_memory
from parastrat.estimate.step import estimate_step
from parastrat.planner.search import static_lower_bound

PRESETS = ps.models.names()


def _strategy(model: ps.ModelSpec) -> tuple[ps.Strategy, int]:
    """A pipelined strategy the preset accepts (TP 2 or 1, PP 2 or 4 with the split the
    planner would try, EP over the experts), and its world size."""
    from parastrat.planner.search import pipeline_variants

    tp = 2 if model.num_attention_heads % 2 == 0 and model.query_groups % 2 == 0 else 1
    ep = 4 if model.is_moe and model.num_experts % 4 == 0 else 1
    for pp in (4, 2):
        variants = pipeline_variants(model, pp, 1)
        if variants:
            s = ps.Strategy(tp=tp, pp=pp, ep=ep, sp=tp > 1, **variants[0])
            return s, 8 * pp
    raise AssertionError(f"no pipeline split for {model.name}")


@pytest.mark.parametrize("name", PRESETS)
def test_memory_and_step_hold_the_same_parameters(name):
    """Every preset: the stage the step model prices (its DP traffic and optimizer step) holds
    exactly the parameters the memory estimate counts on that stage, dense and expert."""
    model = ps.models.get(name)
    s, world = _strategy(model)
    s = s.with_world_size(world)
    cluster = ps.Cluster("h100", num_devices=world)
    kw = dict(seq_len=4096, global_batch_size=4 * world // s.tp // s.pp)
    step = estimate_step(model, s, cluster, **kw)
    mem = estimate_memory(model, s, **kw)
    stage = mem.stages[step.stage]
    assert step.stage_params == stage.params > 0
    assert step.stage_expert_params == stage.expert_params
    assert stage.gradients == GRAD_BYTES * stage.params


@pytest.mark.parametrize("name", PRESETS)
def test_records_add_up_to_the_published_parameter_count(name):
    """Unsplit, the records of every block add up to ``ModelSpec.num_params`` (plus the MTP
    modules, and the vocabulary padding Megatron allocates): the records and the spec's own
    count are one accounting (DeepSeek-V3's latent-norm parameters included)."""
    model = ps.models.get(name)
    s = ps.Strategy().with_world_size(1)
    mem = estimate_memory(model, s, seq_len=1024)
    pad = (model.padded_vocab_size(1) - model.vocab_size) * model.hidden_size
    pads = pad * (1 if model.tied_embeddings else 2)
    assert mem.stages[0].params - pads == pytest.approx(
        model.num_params + model.num_mtp_params, rel=1e-12
    )


def test_deepseek_v3_latent_norms_are_counted_once():
    """The step model used to count a DeepSeek-V3 layer 2,048 parameters short: the RMSNorms
    of the q (1,536) and kv (512) latents, which Megatron keeps whole on every TP rank."""
    ds = ps.models.get("deepseek-v3")
    p = ds.param_breakdown
    rec = layer_record(ds, True, 2, 8, 1)
    matrices = sum(
        m.in_dim * m.out_dim / (1 if m.split == "dup" else 2)
        for m in rec.matrices
        if m.block not in ("expert",)
    )
    norms = p["layer_norms"] + ds.q_lora_rank + ds.kv_lora_rank
    assert ds.q_lora_rank + ds.kv_lora_rank == 2048
    assert rec.dense_params == pytest.approx(matrices + norms)


def test_mtp_embedding_copy_is_on_the_last_stage_for_both_models():
    """With MTP and PP > 1 Megatron builds the embedding on the last stage too (MTP embeds the
    shifted tokens): the memory estimate and the step model's DP traffic both carry it."""
    ds = ps.models.get("deepseek-v3")
    blocks = stage_params(ds, 2, 8, 1, (15, 16, 16, 14), (12, 16, 16, 14))
    emb = embedding_record(ds, 2).dense_params
    last_layers = layer_record(ds, True, 2, 8, 1).times(14)
    mtp = mtp_record(ds, 2, 8, 1)
    out = ds.padded_vocab_size(2) * ds.hidden_size / 2 + ds.param_breakdown["final_norm"]
    assert blocks[-1].dense_params == pytest.approx(
        last_layers.dense_params + mtp.dense_params + out + emb
    )
    # one pipeline stage: the embedding is there once
    (only,) = stage_params(ds, 2, 8, 1, (61,), (58,))
    assert only.dense_params == pytest.approx(
        layer_record(ds, False, 2, 8, 1).times(3).dense_params
        + layer_record(ds, True, 2, 8, 1).times(58).dense_params
        + mtp.dense_params
        + out
        + emb
    )


def test_static_bound_is_the_memory_estimate_without_activations():
    """The planner's prefilter reads the same records: weights (BF16, no FP8 copies), FP32
    gradients and the sharded optimizer state of the fullest stage, never more than the
    memory estimate of the same strategy."""
    model = ps.models.get("llama3-70b")
    s = ps.Strategy(tp=4, pp=4, sp=True).with_world_size(64)
    mem = estimate_memory(model, s, seq_len=4096, global_batch_size=64)
    bound = static_lower_bound(model, 64, 4, 4, 1, 1, 1, 4, {})
    static = max(st.weights + st.gradients + st.optimizer for st in mem.stages)
    assert bound == pytest.approx(static)
    assert bound <= mem.peak_bytes
