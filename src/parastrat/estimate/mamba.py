"""The Mamba-2 mixer of a hybrid model, as Megatron Core 0.16.1 trains it: its scan's work,
its saved tensors, its context-parallel exchange, and Megatron Bridge's FLOP count.

Sources (installed packages unless named):

* ``megatron/core/ssm/mamba_mixer.py`` ``MambaMixer``: ``in_proj`` (column-parallel, fused with
  the layer's pre-norm) to ``z, x, B, C, dt`` of width ``2 d_inner + 2 G N + H``; the
  training path ``_ssm_training`` calls ``mamba_split_conv1d_scan_combined`` (mamba-ssm,
  ``ops/triton/ssd_combined.py``) with ``chunk_size=128``, then the gated RMSNorm
  (``self.norm``) over ``d_inner`` and ``out_proj`` (row-parallel).  Every per-head tensor
  (conv1d, ``dt_bias``, ``A_log``, ``D``, the norm) is split by TP.
* ``MambaSplitConv1dScanCombinedFn.forward`` (mamba-ssm ``ssd_combined.py``) saves for
  backward ``zxbcdt`` (the in_proj output), the weights, and ``out_x`` (the scan output
  before gating, ``d_inner`` wide); the causal convolution's output is recomputed in
  backward (the "memory-efficient path", ``use_mamba_mem_eff_path``, on by default).
* ``megatron/core/ssm/mamba_context_parallel.py`` ``MambaContextParallel``: with CP the
  in_proj output goes through five all-to-alls (z, x, B, C, dt: sequence-sharded to
  head-sharded) before the scan and one (y) after it; B and C are repeated per CP rank when
  there are fewer local groups than CP ranks (``group_repeat_count``).
* The SSD algorithm (Dao & Gu 2024, "Transformers are SSMs", section 6): per chunk of ``Q``
  tokens four matrix products: ``C B^T`` per group (Q x Q, contracting N), the masked
  intra-chunk output ``(L o C B^T) X`` per head (Q x P, contracting Q), the chunk states
  ``B^T X`` per head (P x N, contracting Q), and the inter-chunk output ``C h`` per head
  (Q x P, contracting N); the state passing between chunks is a scan over ``s / Q`` states.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.model import MAMBA_CONV_KERNEL, ModelSpec

#: ``MambaMixer(chunk_size=128)``: the SSD chunk length Megatron Core trains with.
SSD_CHUNK = 128
#: Layer kinds of a hybrid model, in the order every per-kind table lists them
#: (``ModelSpec.layer_kind``).
HYBRID_KINDS = ("mamba", "attention", "mlp", "moe")
#: Backward work of the SSD products relative to their forward: each product ``Y = A B``
#: has two gradient products (``dA = dY B^T``, ``dB = A^T dY``), as for a GEMM.
SCAN_BWD_RATIO = 2.0
#: HBM passes over the chunk states per forward: ``_chunk_state_fwd`` writes them (FP32),
#: ``_state_passing_fwd`` reads and rewrites them, ``_chunk_scan_fwd`` reads them.
STATE_PASSES_FWD = 4
#: Bytes of one state element (``states_in_fp32=True`` in ``_mamba_chunk_scan_combined_fwd``).
STATE_BYTES = 4
ACT = 2  # bytes of one BF16 activation element


@dataclass(frozen=True)
class MixerShape:
    """One rank's slice of a Mamba-2 mixer: heads, groups (after CP's ``group_repeat_count``)
    and widths per token, under TP ``tp`` and CP ``cp`` (``MambaContextParallel``)."""

    heads: float  # local heads during the scan (H / (tp cp))
    groups: float  # local B/C groups during the scan
    head_dim: int
    state: int
    d_inner_tp: float  # d_inner / tp (the in_proj / out_proj width on the rank)
    in_proj_tp: float  # in_proj output width on the rank (z, x, B, C, dt)

    @property
    def conv_width(self) -> float:
        """Channels of the causal convolution during the scan (x, B, C)."""
        return self.heads * self.head_dim + 2 * self.groups * self.state


def mixer_shape(model: ModelSpec, tp: int, cp: int = 1) -> MixerShape:
    """The :class:`MixerShape` of ``model``'s mixer on a rank of TP ``tp`` and CP ``cp``."""
    groups_tp = model.mamba_num_groups / tp
    groups = max(groups_tp / cp, 1.0) if cp > 1 else groups_tp  # repeated when G/tp < cp
    return MixerShape(
        heads=model.mamba_heads / (tp * cp),
        groups=groups,
        head_dim=model.mamba_head_dim,
        state=model.mamba_state_dim,
        d_inner_tp=model.mamba_d_inner / tp,
        in_proj_tp=model.mamba_in_proj_width / tp,
    )


def scan_products(
    model: ModelSpec, tokens: float, seq_len: int, tp: int, cp: int
) -> list[tuple[float, float, float, float]]:
    """The SSD forward's four batched products on one rank for one micro-batch of ``tokens``
    (= b s / cp) as ``(m, n, k, batch)`` GEMM shapes (module docstring); with CP each rank
    scans the whole sequence for its ``1 / cp`` of the heads."""
    sh = mixer_shape(model, tp, cp)
    q = min(SSD_CHUNK, seq_len)
    chunks = tokens * cp / q  # (sequences x chunks per sequence) on the rank
    p, n = sh.head_dim, sh.state
    return [
        (q, q, n, chunks * sh.groups),  # C B^T per group
        (q, p, q, chunks * sh.heads),  # (L o CB) X per head
        (p, n, q, chunks * sh.heads),  # chunk states B^T X per head
        (q, p, n, chunks * sh.heads),  # C h_prev per head
    ]


def scan_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of the SSD scan (whole mixer, no split): the four products
    of :func:`scan_products`, ``2 Q (G N + H P) + 4 H P N``."""
    return sum(2.0 * m * n * k * b for m, n, k, b in scan_products(model, 1.0, seq_len, 1, 1))


def scan_bytes(model: ModelSpec, tokens: float, tp: int, cp: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the mixer's memory-bound work on one rank and
    micro-batch beyond the products: the causal convolution (read x, B, C, write its
    output), the scan's reads of x, B, C, z, dt and writes of ``out_x`` and the gated output,
    the FP32 chunk states (:data:`STATE_PASSES_FWD`), and the gated RMSNorm (read, write).
    Backward moves twice the forward's bytes and runs the convolution again (the
    memory-efficient path recomputes it)."""
    sh = mixer_shape(model, tp, cp)
    local = tokens * cp  # the scan sees the whole sequence for its heads
    inner = sh.heads * sh.head_dim
    conv = 2 * sh.conv_width * ACT  # read + write
    scan_io = (sh.conv_width + inner + sh.heads + 2 * inner) * ACT
    states = STATE_PASSES_FWD * sh.heads * sh.head_dim * sh.state * STATE_BYTES / SSD_CHUNK
    norm = 2 * inner * ACT
    fwd = local * (conv + scan_io + states + norm)
    return fwd, 2 * fwd + local * conv


def cp_exchange_elements(model: ModelSpec, tp: int, cp: int) -> float:
    """Elements per local token that ``MambaContextParallel`` all-to-alls in one forward:
    z, x (``d_inner / tp`` each), B and C (``G N / tp`` each, times ``group_repeat_count``)
    and dt (``H / tp``) before the scan, y (``d_inner / tp``) after it."""
    if cp <= 1:
        return 0.0
    g_tp = model.mamba_num_groups / tp
    repeat = cp / g_tp if g_tp < cp else 1.0
    d = model.mamba_d_inner / tp
    return 3 * d + 2 * g_tp * repeat * model.mamba_state_dim + model.mamba_heads / tp


def mixer_activation_bytes(model: ModelSpec, tp: int, cp: int, lin: float) -> float:
    """Bytes per local token a mixer keeps for backward, split by TP (the caller adds the
    layer's norm input, in_proj input and dropout mask, which SP divides):

    * ``zxbcdt`` (BF16, the in_proj output the combined kernel saves; with CP the
      head-sharded copy it builds, B and C repeated);
    * ``out_x`` (BF16, ``d_inner``), saved by the same kernel;
    * the gated RMSNorm's input (BF16) and its per-group ``rstd`` (FP32);
    * ``out_proj``'s input (``lin`` bytes: BF16, or FP8 / FP4 copies under quantisation).
    """
    sh = mixer_shape(model, tp, cp)
    d = sh.d_inner_tp
    zx = sh.in_proj_tp
    if cp > 1:  # the head-sharded copy of the whole sequence, per local token
        zx = (2 * sh.heads * sh.head_dim + 2 * sh.groups * sh.state + sh.heads) * cp
    groups_tp = model.mamba_num_groups / tp
    return ACT * zx + ACT * d + ACT * d + 4.0 * groups_tp + lin * d


def mixer_params_split(model: ModelSpec) -> tuple[float, float]:
    """(parameters, linear-layer weights) of one mixer before TP: every tensor of the mixer
    is split by TP (``in_proj`` column-, ``out_proj`` row-parallel, conv1d, dt_bias, A_log,
    D and the gated norm over the local heads)."""
    lin = model.hidden_size * model.mamba_in_proj_width + model.mamba_d_inner * model.hidden_size
    return model.param_breakdown["mamba"], float(lin)


def conv_params(model: ModelSpec) -> int:
    """Weights and biases of the depthwise causal convolution over x, B and C."""
    width = model.mamba_d_inner + 2 * model.mamba_num_groups * model.mamba_state_dim
    return width * (MAMBA_CONV_KERNEL + 1)


# ---------------------------------------------------------------------------------------------
# Model FLOPs: Megatron Bridge's formula (what NVIDIA's published hybrid TFLOPs count)
# ---------------------------------------------------------------------------------------------
def bridge_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token of a hybrid model by Megatron Bridge 0.3.1's
    ``num_floating_point_operations`` (``megatron/bridge/training/utils/flop_utils.py``,
    ``hybrid_flops``): ``3 x`` the forward of

    * attention layers ``4 s h p (h + h g / a + s / 2)`` per sequence, ``p = d a / h``;
    * Mamba layers ``2 s h (2 d_in + 2 G N + H) + 7 s d_in N + 2 s d_in h`` with
      ``d_in = 2 h`` (Bridge's expand-2 assumption, even where ``mamba_num_heads`` makes the
      real ``d_inner`` differ);
    * MLP layers ``4 s h f`` (x 3/2 gated), MoE layers ``4 s h (f_e k + f_shared)``
      (x 3/2 gated; no router);
    * the logits ``2 s h V`` over the vocabulary padded to ``make_vocab_size_divisible_by``.
    """
    h, s = model.hidden_size, float(seq_len)
    d, a, g = model.head_dim, model.num_attention_heads, model.query_groups
    scale = 1.5 if model.gated_linear_unit else 1.0
    d_in = 2.0 * h
    n, groups, heads = model.mamba_state_dim, model.mamba_num_groups, model.mamba_heads
    per_kind = {
        "attention": 4.0 * h * (d * a / h) * (h + h * g / a + s / 2),
        "mamba": 2.0 * h * (2 * d_in + 2 * groups * n + heads) + 7.0 * d_in * n + 2.0 * d_in * h,
        "mlp": 4.0 * h * model.ffn_hidden_size * scale,
        "moe": 4.0
        * h
        * (
            (model.moe_ffn_hidden_size or model.ffn_hidden_size) * model.moe_router_topk
            + model.moe_shared_expert_intermediate_size
        )
        * scale,
    }
    fwd = sum(per_kind[k] * model.layer_count(k) for k in HYBRID_KINDS)
    fwd += 2.0 * h * model.padded_vocab_size(1)
    return 3.0 * fwd
