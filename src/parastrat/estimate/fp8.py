"""FP8 / NVFP4 training overheads: quantisation traffic, weight casts, amax reductions,
accumulation.

Transformer Engine runs a linear layer's GEMMs in FP8 by quantising their BF16 operands first.
What that costs depends on the recipe and the architecture (pure functions here; the step
model calls them when its switches' ``Mechanisms.fp8`` is on):

* **Activation / gradient quantisation** (:func:`cast_bytes_per_element`, HBM bytes per
  element of a GEMM's input forward or output gradient backward):

  - per-tensor *current* scaling (``fp8`` in the recipes' FP8-CS, Megatron Bridge's H100
    presets): an amax pass (read 2 B), then the cast (read 2 B, write 1 B); Hopper's FP8
    tensor cores take only the TN layout (K-major A and B), so the wgrad / dgrad operands
    also need a transposed FP8 copy (+1 B, TE's fused cast-transpose); Blackwell's
    ``tcgen05`` reads FP8 in either major-ness, so TE skips the transpose there
    (``is_non_tn_fp8_gemm_supported``): 6 B on Hopper, 5 B on Blackwell;
  - *delayed* scaling (amax history): no amax pre-pass (the amax is taken in the cast):
    4 B on Hopper, 3 B on Blackwell;
  - *blockwise* (1 x 128 activations, DeepSeek-V3 style) and *MXFP8* (1 x 32 blocks, E8M0
    scales): one pass finds each block's scale and writes row-wise and column-wise copies
    (their blocks run along different axes): read 2, write 1 + 1, plus one scale byte per
    block: 4 + 2/128 and 4 + 2/32 B.

* **Weight casts**: TE caches a weight's FP8 copy across the micro-batches of a step
  (``is_first_microbatch``, set by Megatron's schedules), so each weight is cast once per
  step: read 2 B (BF16 weight), write 1 B (+1 B transpose on Hopper, or the column-wise copy
  of blockwise / MXFP8).
* **Amax reductions**: with current scaling and sequence parallelism, the amax of an input
  that is all-gathered across TP ranks is all-reduced over the TP group (TE quantizers'
  ``with_amax_reduction`` / ``amax_reduction_group``): two inputs forward (QKV, FC1) and two
  output gradients backward (projection, FC2) per layer, each a 4-byte all-reduce on the
  compute stream (latency-bound: 13.7 us for an 8-byte all-reduce on 8 H100, nccl-tests
  sample in ``collectives_measured.csv`` C001).
* **Quantised all-gathers**: with sequence parallelism TE quantises a column-parallel linear's
  input before the TP all-gather and a row-parallel linear's output gradient before the
  backward all-gather (``gather_along_first_dim(..., quantizer=...)`` in ``_Linear`` /
  ``_LayerNormLinear`` forward and ``grad_output_preprocess``), so those all-gathers move
  :data:`OPERAND_BYTES` per element (:func:`gather_bytes`); reduce-scatters stay BF16.
* **NVFP4** (Transformer Engine's ``NVFP4BlockScaling``, Megatron Bridge's
  ``bf16_with_nvfp4_mixed``: ``fp4="e2m1"``, ``fp4_recipe="nvfp4"``; NVIDIA, "Pretraining
  Large Language Models with NVFP4", arXiv:2509.25149, section 4): the fprop, dgrad and wgrad
  GEMMs of every linear layer take E2M1 operands (0.5 B) with one E4M3 scale per 16
  elements (+1/16 B) and one FP32 scale per tensor.  The per-tensor scale needs the tensor's
  amax before the cast, so every activation / gradient operand costs an amax pass (read
  2 B; TE computes the amax of the tensor and of its Hadamard transform in that one read),
  a row-wise cast for fprop / dgrad (read 2, write 0.5 + 1/16; gradients stochastically
  rounded, which is arithmetic in the same memory-bound pass) and a column-wise cast for
  wgrad after a 16 x 16 random Hadamard transform (RHT; read 2, write 0.5 + 1/16; the
  transform is 32 FLOP per element, far under the HBM roofline): 7 + 1/8 B per element.
  Weights use 2D 16 x 16 block scales, so one cast writes both orientations: amax (2) +
  read (2) + two FP4 copies with scales (2 x 9/16) = 5 + 1/8 B per parameter, once per step.
  With the ``nvfp4`` mechanism off, NVFP4 operands cost one MXFP8-like pass at FP4 sizes
  (read 2, write 2 x 9/16: no amax pass, no separate RHT cast).  NVFP4's per-tensor amax is
  all-reduced over TP with SP like current scaling's (TE ``NVFP4Quantizer`` with
  ``with_amax_reduction``).
* **Split accumulation on Hopper**: Hopper's FP8 tensor cores accumulate in reduced
  precision (DeepSeek-V3 report section 3.3.2: ~14 bits); TE promotes partial sums to FP32
  ("2x accumulation", ``_2X_ACC_DGRAD`` / ``_2X_ACC_WGRAD`` True, ``_2X_ACC_FPROP`` False)
  for the backward GEMMs, which cuBLAS runs without ``FAST_ACCUM``.  Fast accumulation is
  1.1-1.2x faster (PyTorch torchao issue #2377; Triton issue #2513 on H100):
  :data:`HOPPER_SPLIT_ACC` = 1.15 on dgrad and wgrad.  Blackwell accumulates FP8 in FP32
  in the tensor memory: no penalty.
"""

from __future__ import annotations

from ..spec.hardware import precision_recipe

#: Bytes per element of an FP8 GEMM operand's quantisation, by (recipe, needs transpose).
_CAST = {
    ("current", True): 6.0,
    ("current", False): 5.0,
    ("delayed", True): 4.0,
    ("delayed", False): 3.0,
    ("blockwise", True): 4.0 + 2 / 128,
    ("blockwise", False): 4.0 + 2 / 128,
    ("mxfp8", True): 4.0 + 2 / 32,
    ("mxfp8", False): 4.0 + 2 / 32,
    ("nvfp4", True): 7.0 + 2 / 16,
    ("nvfp4", False): 7.0 + 2 / 16,
    # the nvfp4 mechanism switched off: one block-scaled pass at FP4 sizes
    ("nvfp4-flat", True): 2.0 + 2 * (0.5 + 1 / 16),
    ("nvfp4-flat", False): 2.0 + 2 * (0.5 + 1 / 16),
}
#: Bytes per element of one quantised GEMM operand as the tensor cores read it (data + block
#: scales): FP8 1 (MXFP8 +1/32 E8M0 scale), NVFP4 0.5 + 1/16 (E4M3 scale per 16).
OPERAND_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
#: Bytes per element of the copy of a linear layer's input that TE keeps for the wgrad GEMM
#: (the memory model's ``lin``): BF16 2, FP8 / MXFP8 1 (the existing accounting, scales not
#: counted), NVFP4 the column-wise RHT-quantised copy, 0.5 + 1/16.
SAVED_INPUT_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5 + 1 / 16}
#: The recipe each canonical precision stands for (the recipes' spelling: FP8-CS on H100,
#: MXFP8 on Blackwell; "fp8-delayed" / "fp8-blockwise" select the others).
RECIPE_OF = {"fp8": "current", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
#: Backward (dgrad, wgrad) FP8 GEMM slowdown from split accumulation on Hopper.
HOPPER_SPLIT_ACC = 1.15
#: Per-layer amax all-reduces under current scaling with SP (2 forward + 2 backward).
AMAX_REDUCTIONS_PER_LAYER = 4
#: Bytes of one amax all-reduce (an FP32 scalar).
AMAX_BYTES = 4


def gather_bytes(precision: str) -> float:
    """Bytes per element a sequence-parallel TP all-gather moves at canonical ``precision``:
    the quantised operand (:data:`OPERAND_BYTES`) under FP8 / MXFP8 / NVFP4, else BF16."""
    return OPERAND_BYTES.get(precision, OPERAND_BYTES["bf16"])


def recipe(precision: str) -> str:
    """The FP8 recipe of a precision spelling: "current", "delayed", "blockwise", "mxfp8",
    "nvfp4" (:func:`parastrat.spec.hardware.precision_recipe`; BF16 reads as "current")."""
    return precision_recipe(precision) or "current"


def needs_transpose(arch: str) -> bool:
    """Whether the architecture's FP8 GEMMs need TN operands (a transposed FP8 copy)."""
    return arch in ("hopper", "ada", "ampere")


def cast_bytes_per_element(fp8_recipe: str, arch: str) -> float:
    """HBM bytes to quantise one BF16 activation / gradient element for an FP8 GEMM."""
    return _CAST[(fp8_recipe, needs_transpose(arch))]


def weight_cast_bytes_per_param(fp8_recipe: str, arch: str) -> float:
    """HBM bytes to cast one BF16 weight to FP8 / NVFP4 (once per step; both orientations
    where the GEMMs need them)."""
    if fp8_recipe == "nvfp4":  # amax + read + two 16x16-scaled FP4 copies
        return 2.0 + 2.0 + 2 * OPERAND_BYTES["nvfp4"]
    if fp8_recipe == "nvfp4-flat":
        return 2.0 + 2 * OPERAND_BYTES["nvfp4"]
    second = needs_transpose(arch) or fp8_recipe in ("blockwise", "mxfp8")
    return 2.0 + 1.0 + (1.0 if second else 0.0)


def backward_gemm_slowdown(arch: str) -> float:
    """Factor on FP8 dgrad / wgrad GEMM time (Hopper's split accumulation)."""
    return HOPPER_SPLIT_ACC if arch == "hopper" else 1.0


def amax_reductions(fp8_recipe: str, tp: int, sp: bool) -> int:
    """Amax all-reduces over the TP group per layer and micro-batch (current scaling + SP)."""
    per_tensor = fp8_recipe in ("current", "nvfp4")
    return AMAX_REDUCTIONS_PER_LAYER if per_tensor and sp and tp > 1 else 0


def recipe_for(precision: str, nvfp4_mechanism: bool = True, fp8_recipe: str | None = None) -> str:
    """The recipe a canonical quantised precision is priced with: the workload's
    ``fp8_recipe`` when it names one, else :data:`RECIPE_OF`, with NVFP4 priced as one flat
    block-scaled pass ("nvfp4-flat") when its mechanism is off."""
    r = fp8_recipe or RECIPE_OF.get(precision, "current")
    return "nvfp4-flat" if (r == "nvfp4" and not nvfp4_mechanism) else r
