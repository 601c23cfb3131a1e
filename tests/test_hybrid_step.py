"""Step time and memory of hybrid (Mamba) models: per-kind terms, the Mamba scan's share,
MambaContextParallel's all-to-alls, and the mixer's saved tensors."""

from __future__ import annotations

import pytest

import parastrat as ps
from parastrat import Strategy
from parastrat.estimate import comm, mamba
from parastrat.estimate.flops import model_flops_per_token
from parastrat.estimate.layers import consecutive_kind_counts, pipeline_split
from parastrat.estimate.memory import activations
from parastrat.planner.explain import explain_strategy
from tests.test_hybrid_model import NANO3, NH8, NH56

H100_64 = ps.Cluster("h100", num_devices=64)
H100_8 = ps.Cluster("h100", num_devices=8)
KW = dict(seq_len=8192, global_batch_size=768, micro_batch_size=1)


@pytest.fixture(scope="module")
def step56():
    return ps.estimate_step(NH56, Strategy(tp=8, pp=2, sp=True), H100_64, **KW)


def test_step_terms_are_positive_and_add_up(step56):
    """Every priced term is >= 0, compute and TP are > 0, and the exposed terms, compute,
    recompute, bubble and optimizer add up to the step (StepReport's contract)."""
    b = step56.breakdown
    assert all(v >= 0 for v in b.values())
    assert b["compute"] > 0 and b["tp"] > 0 and b["bubble"] > 0
    parts = ("compute", "recompute", "bubble", "optimizer")
    exposed = sum(v for k, v in b.items() if k.endswith("_exposed"))
    assert sum(b[k] for k in parts) + exposed == pytest.approx(step56.step_time_s)


def test_kinds_and_scan_share_are_reported(step56):
    """Per-kind compute of the slowest stage: every kind of the 56B pattern (no MoE), the
    scan a positive part of the Mamba layers', the kinds together within the stage's compute
    (the rest: the output layer and cross-entropy on the last stage)."""
    k = step56.kinds
    assert set(k) == {"mamba", "attention", "mlp", "mamba_scan"}
    assert 0 < k["mamba_scan"] < k["mamba"]
    layers = k["mamba"] + k["attention"] + k["mlp"]
    assert layers <= step56.breakdown["compute"] * (1 + 1e-12)
    assert step56.to_dict()["kinds"] == k


def test_mfu_counts_bridges_flops(step56):
    """tflops_per_gpu = Bridge's hybrid model FLOPs x tokens / step / GPUs."""
    fpt = model_flops_per_token(NH56, 8192)
    want = fpt * 768 * 8192 / step56.step_time_s / 64 / 1e12
    assert step56.tflops_per_gpu == pytest.approx(want)
    assert step56.model_flops_per_token == fpt


def test_nano_moe_prices_expert_parallel_layers():
    """Nemotron 3 Nano (hybrid MoE) on 8 H100 with EP 8: the MoE layers' all-to-alls and
    every kind are priced."""
    r = ps.estimate_step(
        NANO3, Strategy(ep=8), H100_8, seq_len=8192, global_batch_size=64, micro_batch_size=1
    )
    assert r.breakdown["ep"] > 0 and set(r.kinds) >= {"mamba", "attention", "moe"}
    assert r.stage_expert_params > 0


def test_mamba_cp_all_to_alls():
    """With CP each Mamba layer runs MambaContextParallel's six all-to-alls each way over the
    CP group (z, x, B, C, dt; y), attention layers their CP attention, MLPs nothing."""
    s = Strategy(tp=2, ulysses=2, sp=True, order="tp-cp-ep-dp-pp").with_world_size(8)
    strides = comm.group_strides(s, s.dp)
    tokens = 4096.0
    _, (a2a,) = comm.cp_layer(NH8, s, tokens, strides, "mamba")
    d, g, n, h = NH8.mamba_d_inner / 2, 8 / 2, NH8.mamba_state_dim, NH8.mamba_heads / 2
    assert a2a.count == 12 and a2a.group_size == 2
    assert a2a.nbytes * 6 == pytest.approx(tokens * (3 * d + 2 * g * n + h) * 2)
    assert comm.cp_layer(NH8, s, tokens, strides, "mlp") == ([], [])
    assert comm.cp_layer(NH8, s, tokens, strides, "attention")[1]
    cp = ps.estimate_step(NH8, s, H100_8, seq_len=8192, global_batch_size=16, micro_batch_size=1)
    assert cp.breakdown["cp"] > 0 and cp.breakdown["cp_exposed"] > 0


def test_tp_pairs_per_block():
    """One all-gather / reduce-scatter pair (forward and backward) per block: a Mamba mixer
    like attention; a GPT layer has two."""
    s = Strategy(tp=4, sp=True)
    one = {"tp": 1, "etp": 1}
    (ag, rs) = comm.tp_layer(NH8, s, 4096, "mamba", one)
    assert ag.count == 2 and rs.count == 2
    gpt = ps.models.get("llama3-8b")
    assert comm.tp_layer(gpt, s, 4096, False, one)[0].count == 4


def test_mixer_activations_are_the_saved_tensors():
    """Per token of a Mamba layer (TP 4, SP, BF16): the pre-norm's input and output (split by
    SP) plus what the mem-eff path keeps: zxbcdt, out_x, the gated norm's input and rstd,
    out_proj's input."""
    acts = activations(NH8, 4, True, 1, 1, 1, 8192, "bf16", "selective", True)
    per_token = dict(acts.kinds)["mamba"] / 8192
    h, d, w, g = 4096, NH8.mamba_d_inner / 4, NH8.mamba_in_proj_width / 4, 8 / 4
    want = (2 * h + 2 * h) / 4 + 2 * w + 2 * d + 2 * d + 4 * g + 2 * d
    assert per_token == pytest.approx(want)
    assert mamba.mixer_activation_bytes(NH8, 4, 1, 2.0) == pytest.approx(want - h)


def test_stage_memory_sums_its_kinds():
    """A stage's activations are its in-flight micro-batches x its layers by kind (the first
    stage: two in flight, and the embedding's output of each)."""
    s = Strategy(tp=4, pp=2, sp=True).with_world_size(8)
    mem = ps.estimate_memory(NH8, s, seq_len=8192, global_batch_size=16, micro_batch_size=1)
    every = activations(NH8, 4, True, 1, 1, 1, 8192, "bf16", "selective", True)
    acts = dict(every.kinds)
    split = pipeline_split(NH8, s)
    counts = split.stage_kinds
    assert counts == consecutive_kind_counts(NH8, split.stage_layers)
    st1 = mem.stages[1]  # the last stage: one micro-batch in flight, plus the output layer
    layers = sum(n * acts[k] for k, n in counts[1])
    assert st1.activations > layers
    first = 2 * sum(n * acts[k] for k, n in counts[0]) + 2 * every.embedding
    assert mem.stages[0].activations == pytest.approx(first)


def test_explain_and_check_work_for_a_hybrid():
    """explain_strategy prints the hybrid's memory and step; Strategy.check names the mixer
    rule for a TP the mixer refuses."""
    text = explain_strategy(NH8, Strategy(tp=2, sp=True), H100_8, seq_len=8192,
                            global_batch_size=16)  # fmt: skip
    assert "nemotron-h-8b" in text and "compute by layer kind" in text
    assert "mamba_scan" in text
    assert "mamba-groups-tp" in {v.rule for v in Strategy(tp=16).check(NH8)}


def test_selective_recompute_leaves_the_mixer_alone():
    """Selective recompute with the ``mlp`` module (as a ``TransformerLayer`` runs it) shrinks
    the MLP layers' activations to their input and leaves a Mamba layer's (``MambaLayer`` has
    no recompute path) and an attention layer's (flash attention keeps no scores) as they are."""
    args = (NH8, 4, True, 1, 1, 1, 8192, "bf16")
    plain = dict(activations(*args, "none", True).kinds)
    sel = dict(activations(*args, "selective", True, ("core_attn", "mlp")).kinds)
    assert sel["mamba"] == plain["mamba"] and sel["attention"] == plain["attention"]
    assert sel["mlp"] == pytest.approx(2 * 4096 / 4 * 8192)
    assert sel["mlp"] < plain["mlp"]
