"""Accelerator presets: memory, dense peak FLOP/s, memory bandwidth and interconnect.

Every number comes from a vendor datasheet (named in ``source``); where a figure is an
*achievable* one rather than a peak it says so.  Conventions:

* ``memory_bytes``: the nominal HBM capacity read as GiB; ``usable_memory_bytes`` what the
  device really exposes where measured (NVIDIA's "80 GB" H100 shows 81,559 MiB = 79.6 GiB in
  ``nvidia-smi``), which is what a :class:`~parastrat.Cluster` plans against.
* ``peak_flops``: *dense* (not 2:4 sparse) tensor-core FLOP/s per device, keyed by precision
  ("bf16", "fp8", "mxfp8", "nvfp4"); a quantised format the device lacks is refused by
  :func:`require_precision` before any training estimate, as Transformer Engine refuses it
  (:meth:`peak` still falls back to bf16 for callers that only want a rate).
* ``scale_up_bw_Bps``: *achievable* all-reduce bus bandwidth per device inside one scale-up
  domain (NVLink / HCCS), as nccl-tests reports it; ``scale_up_peak_Bps`` records the link's
  unidirectional peak for comparison.  NVLink collectives reach ~75-85 % of the link peak.
* ``scale_out_bw_Bps``: the per-device NIC line rate (one 400 Gb/s NIC = 50e9 B/s).  InfiniBand
  collectives reach ~90-95 % of line rate, close enough that the line rate is used as is.
* ``intra_latency_s`` / ``inter_latency_s``: rough per-step latencies of one collective step
  (one ring hop / tree level) inside and across the scale-up domain; a calibration from
  ``parastrat bench`` replaces them (:meth:`parastrat.Cluster.calibrate`).
* ``host_link_Bps``: one direction of the device's link to host memory, per device (CPU
  activation offloading moves activations over it: :mod:`parastrat.estimate.offload`); None
  where no source is at hand (offloading is then refused, not guessed).  ``host_memory_bytes``:
  the host memory one device's offloaded tensors share (None: not checked).  See
  :data:`PCIE_GEN4_X16_BPS`, :data:`PCIE_GEN5_X16_BPS`, :data:`GRACE_C2C_PER_GPU_BPS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError

GiB = 1024**3
MiB = 1024**2
TFLOPS = 1e12
GBps = 1e9

# ---- host links (CPU activation offloading) -------------------------------------------------
#: PCIe Gen4 x16, one direction: 16 GT/s x 16 lanes x 128/130 encoding = 31.5 GB/s raw; TLP and
#: DLLP overhead at a 256 B payload leave ~85 %, and CUDA's ``bandwidthTest`` / NVIDIA's
#: ``nvbandwidth`` measure ~25-26 GB/s pinned host<->device on A100 / L40-class servers: 25 GB/s.
PCIE_GEN4_X16_BPS = 25 * GBps
#: PCIe Gen5 x16, one direction: 32 GT/s x 16 x 128/130 = 63 GB/s raw; the same ~85 % protocol
#: efficiency, ~53-55 GB/s measured pinned host<->device on H100 SXM servers: 53 GB/s.
PCIE_GEN5_X16_BPS = 53 * GBps
#: NVLink-C2C of a Grace Blackwell superchip: 900 GB/s bidirectional between one Grace and its
#: two Blackwell GPUs (NVIDIA GB200 / GB300 NVL72 datasheets), i.e. 450 GB/s each way per
#: superchip, 225 GB/s each way per GPU when both GPUs offload at once (they do: every rank of
#: a data-parallel run offloads the same layers at the same time).  The datasheet share, not a
#: measured rate (none at hand for Blackwell): exposure computed from it is a lower bound.
GRACE_C2C_PER_GPU_BPS = 225 * GBps
#: LPDDR5X of one Grace (up to 480 GB, GB200 / GB300 NVL72 datasheets: 17 TB over 36 Grace
#: CPUs) shared by its two GPUs.
GRACE_HOST_BYTES_PER_GPU = 240 * 10**9

#: Precision spellings people use -> the key in ``Accelerator.peak_flops``.
_PRECISION_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "bf16",
    "float16": "bf16",
    "half": "bf16",
    "fp8": "fp8",
    "fp8-cs": "fp8",
    "fp8-ds": "fp8",
    "fp8-delayed": "fp8",
    "fp8-current": "fp8",
    "fp8-tensorwise": "fp8",
    "fp8-blockwise": "fp8",
    "fp8-block": "fp8",
    "mxfp8": "mxfp8",
    "mx-fp8": "mxfp8",
    "nvfp4": "nvfp4",
    "nv-fp4": "nvfp4",
    "fp4": "nvfp4",
    "nvfp4-bs": "nvfp4",
    "nvfp4-blockscaling": "nvfp4",
    "nvfp4blockscaling": "nvfp4",
    "e2m1": "nvfp4",
}
PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")
#: Precisions whose linear-layer GEMMs run on quantised operands (Transformer Engine recipes);
#: the one list the step, memory and MoE-kernel models test against.
QUANTISED = ("fp8", "mxfp8", "nvfp4")


#: Scaling recipes of canonical FP8 (Transformer Engine's ``Float8CurrentScaling``,
#: ``DelayedScaling``, ``Float8BlockScaling``); MXFP8 and NVFP4 have one recipe each.
FP8_RECIPES = ("current", "delayed", "blockwise")


def precision_recipe(precision: str) -> str | None:
    """The quantisation recipe a precision spelling names: "current" (``fp8``, ``fp8-cs``,
    ``fp8-tensorwise``: Megatron Bridge's FP8-CS), "delayed" (``fp8-ds``, ``fp8-delayed``),
    "blockwise" (``fp8-blockwise``), "mxfp8", "nvfp4"; None for BF16.  SpecError for an
    unknown spelling (as :func:`canonical_precision`)."""
    canon = canonical_precision(precision)
    if canon not in QUANTISED:
        return None
    if canon != "fp8":
        return canon
    key = str(precision).strip().lower().replace("_", "-")
    if "delayed" in key or key == "fp8-ds":
        return "delayed"
    if "block" in key:
        return "blockwise"
    return "current"


def canonical_precision(precision: str) -> str:
    """Map a precision spelling ("BF16", "FP8-CS", "MXFP8", "fp16") to bf16 / fp8 / mxfp8.

    Raises :class:`~parastrat.errors.SpecError` naming the accepted spellings otherwise.
    """
    key = str(precision).strip().lower().replace("_", "-")
    try:
        return _PRECISION_ALIASES[key]
    except KeyError:
        raise SpecError(
            f"unknown precision {precision!r}; use one of "
            f"{', '.join(PRECISIONS)} (FP8 recipes such as 'fp8-cs' map to fp8; "
            "'fp4' / 'nvfp4-bs' map to nvfp4)"
        ) from None


#: What Transformer Engine requires of a device for each quantised format, as it checks before
#: any training step (``transformer_engine/pytorch/quantization.py``: ``check_fp8_support``
#: "Device compute capability 8.9 or higher required for FP8 execution", i.e. Ada, Hopper and
#: later; ``_compute_mxfp8_support`` / ``_compute_nvfp4_support``: compute capability 10.0,
#: Blackwell).  ``fp8_autocast`` asserts them, so a run that asks for the format on an older part
#: stops at its first step.  A device preset lists a format in ``peak_flops`` exactly when it
#: has the tensor cores (Ascend 910B/910C have no FP8 or FP4 units at all).
PRECISION_NEEDS = {
    "fp8": "FP8 tensor cores (Transformer Engine: compute capability 8.9+, Ada / Hopper / "
    "Blackwell)",
    "mxfp8": "MXFP8 block-scaled tensor cores (Transformer Engine's MXFP8BlockScaling: compute "
    "capability 10.0, Blackwell)",
    "nvfp4": "FP4 tensor cores (Transformer Engine's NVFP4BlockScaling: compute capability "
    "10.0, Blackwell)",
}


def require_precision(accel: Accelerator, precision: str) -> str:
    """The canonical ``precision``, or :class:`~parastrat.errors.SpecError` when it is a
    quantised format (:data:`PRECISION_NEEDS`) that ``accel`` has no tensor cores for: pricing
    it at a fallback rate would describe a run that Transformer Engine stops before its first
    step.  The message names the parts that have the format and a precision that runs here."""
    key = canonical_precision(precision)
    if key in PRECISION_NEEDS and key not in accel.peak_flops:
        able = ", ".join(n for n, a in _PRESETS.items() if key in a.peak_flops)
        here = next((k for k in ("fp8", "bf16") if k in accel.peak_flops), "bf16")
        raise SpecError(
            f"precision {key} needs {PRECISION_NEEDS[key]}, which {accel.name} lacks "
            f"(devices with it: {able or 'none of the presets'}); use --precision {here} on "
            "this device"
        )
    return key


#: NVIDIA parts on which Megatron Bridge refuses DeepEP: Bridge 0.3.1
#: ``training/flex_dispatcher_backend.py`` ``validate_flex_dispatcher_backend`` accepts DeepEP
#: on compute capability 8.x / 9.x and on devices named "NVIDIA B200" / "NVIDIA B300" only, so
#: the Grace-Blackwell superchips (compute capability 10.x, named GB200 / GB300) are refused;
#: HybridEP is accepted on every 8.x / 9.x / 10.x part (its message: "GB200, GB300 with NVL72
#: and ... Ampere, Hopper, B200 and B300").
DEEPEP_REFUSED = ("gb200", "gb300")


def flex_backend(accel: Accelerator) -> str:
    """The backend the ``flex`` dispatcher runs on ``accel``: HybridEP where Bridge refuses
    DeepEP (GB200 / GB300, as their Megatron Bridge performance recipes use), else DeepEP
    (``moe_flex_dispatcher_backend``'s default)."""
    return "hybridep" if accel.name in DEEPEP_REFUSED else "deepep"


def require_dispatcher(accel: Accelerator, dispatcher: str) -> str:
    """``dispatcher`` (``Switches.moe_dispatcher``: "alltoall", "flex", "deepep", "hybridep"),
    or :class:`~parastrat.errors.SpecError` when Megatron Bridge would refuse its flex backend
    on ``accel`` at start-up (``validate_flex_dispatcher_backend``, which the CPU
    ``validate()`` does not reach: a planned run would die after its queue wait)."""
    if dispatcher == "alltoall":
        return dispatcher
    if accel.vendor != "nvidia":
        raise SpecError(
            f"moe dispatcher {dispatcher!r} runs on NVIDIA GPUs only (DeepEP / HybridEP "
            f"kernels), not on {accel.name}; use --moe-dispatcher alltoall"
        )
    if dispatcher == "deepep" and accel.name in DEEPEP_REFUSED:
        raise SpecError(
            f"moe dispatcher 'deepep' does not start on {accel.name}: Megatron Bridge's "
            "validate_flex_dispatcher_backend accepts DeepEP on Ampere, Hopper, B200 and B300 "
            "only; use --moe-dispatcher hybridep (or flex, which runs HybridEP there)"
        )
    return dispatcher


def require_graphs(accel: Accelerator, scopes: frozenset[str]) -> None:
    """:class:`~parastrat.errors.SpecError` when CUDA-graph ``scopes`` are asked for on a device
    that has no CUDA graphs (an Ascend NPU: MindSpeed-LLM trains eagerly, and the launch line
    would carry Megatron's ``--cuda-graph-impl`` to a run that cannot capture one)."""
    if scopes and accel.vendor != "nvidia":
        raise SpecError(
            f"CUDA graphs ({', '.join(sorted(scopes))}) run on NVIDIA GPUs only, not on "
            f"{accel.name}; train eagerly (cuda_graphs=None), as MindSpeed-LLM does"
        )


@dataclass(frozen=True)
class Accelerator:
    """One device type: what the memory, step-time and DiT models need to know about it."""

    name: str
    vendor: str  # "nvidia" | "huawei"
    memory_bytes: int
    #: Dense FLOP/s per precision key ("bf16", "fp8", "mxfp8", "nvfp4").
    peak_flops: dict[str, float]
    mem_bandwidth_Bps: float
    #: Devices in one NVLink / HCCS domain (8 on HGX, 72 on GB200/GB300 NVL72).
    scale_up_domain: int
    #: Achievable all-reduce bus bandwidth per device inside the domain (unidirectional).
    scale_up_bw_Bps: float
    #: Per-device scale-out NIC line rate (400 Gb/s = 50e9).
    scale_out_bw_Bps: float
    devices_per_node: int
    intra_latency_s: float
    inter_latency_s: float
    source: str
    #: Unidirectional peak of the scale-up links per device (for reference; not used in cost).
    scale_up_peak_Bps: float = 0.0
    #: Other names this preset answers to (matched case-insensitively).
    aliases: tuple[str, ...] = field(default=(), compare=False)
    #: Memory the device exposes to CUDA (``nvidia-smi``'s "Total", the same number as
    #: ``torch.cuda.mem_get_info()[1]``), where it differs from the nominal capacity: an
    #: "80 GB" H100 exposes 81,559 MiB = 79.6 GiB, not 80 GiB.  None: not measured, nominal
    #: used.  A :class:`~parastrat.Cluster` plans against this number; the CUDA context, NCCL
    #: buffers and allocator fragmentation that live inside it are the memory estimator's
    #: ``other`` allowance (``estimate/memory.py``, docs/memory-model.md).
    usable_memory_bytes: int | None = None
    #: Measured kernel constants that replace the step model's defaults for this device
    #: (``gemm_eff`` per precision, ``attn_eff``, ``mem_eff``, ``host_op_s``; see
    #: :data:`parastrat.spec.cluster.KERNEL_KEYS`).  Set by a :class:`~parastrat.Cluster`
    #: whose calibration has a ``kernels`` section; empty for the presets.
    kernels: dict[str, Any] = field(default_factory=dict, compare=False)
    #: One direction of the device's host link (bytes/s), what CPU activation offloading moves
    #: activations over (None: no source, offloading refused; module docstring).
    host_link_Bps: float | None = None
    #: Host memory one device's offloaded tensors may use (None: not checked).
    host_memory_bytes: int | None = None

    def peak(self, precision: str = "bf16") -> float:
        """Dense peak FLOP/s at ``precision``; a quantised format falls back to fp8 / bf16 where
        unsupported (training estimates refuse it first: :func:`require_precision`)."""
        key = canonical_precision(precision)
        flops = self.peak_flops
        if key in flops:
            return flops[key]
        if key == "mxfp8" and "fp8" in flops:
            return flops["fp8"]
        return flops["bf16"]

    def supports(self, precision: str) -> bool:
        """Whether the device has tensor cores for ``precision`` (False means it falls back)."""
        return canonical_precision(precision) in self.peak_flops

    def to_dict(self) -> dict[str, object]:
        """Every field but ``aliases`` as a JSON-ready dict, to show or save a device;
        ``Accelerator(**d)`` rebuilds it."""
        return {
            "name": self.name,
            "vendor": self.vendor,
            "memory_bytes": self.memory_bytes,
            **(
                {"usable_memory_bytes": self.usable_memory_bytes}
                if self.usable_memory_bytes
                else {}
            ),
            "peak_flops": dict(self.peak_flops),
            "mem_bandwidth_Bps": self.mem_bandwidth_Bps,
            "scale_up_domain": self.scale_up_domain,
            "scale_up_bw_Bps": self.scale_up_bw_Bps,
            "scale_up_peak_Bps": self.scale_up_peak_Bps,
            "scale_out_bw_Bps": self.scale_out_bw_Bps,
            "devices_per_node": self.devices_per_node,
            "intra_latency_s": self.intra_latency_s,
            "inter_latency_s": self.inter_latency_s,
            "source": self.source,
            **({"kernels": dict(self.kernels)} if self.kernels else {}),
            **({"host_link_Bps": self.host_link_Bps} if self.host_link_Bps else {}),
            **({"host_memory_bytes": self.host_memory_bytes} if self.host_memory_bytes else {}),
        }


_PRESETS: dict[str, Accelerator] = {}
_ALIASES: dict[str, str] = {}


def register(accel: Accelerator) -> Accelerator:
    """Add (or replace) a preset; its name and aliases become valid for :func:`get`."""
    _PRESETS[accel.name] = accel
    for alias in (accel.name, *accel.aliases):
        _ALIASES[_norm(alias)] = accel.name
    return accel


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def names() -> list[str]:
    """Names of the accelerator presets."""
    return list(_PRESETS)


def get(name: str | Accelerator) -> Accelerator:
    """The preset called ``name`` (case-insensitive; aliases such as "H100-SXM" accepted).

    An :class:`Accelerator` passes through unchanged.  Unknown names raise
    :class:`~parastrat.errors.SpecError` listing the known ones.
    """
    if isinstance(name, Accelerator):
        return name
    key = _ALIASES.get(_norm(name))
    if key is None:
        import difflib

        near = difflib.get_close_matches(_norm(name), list(_ALIASES), n=6, cutoff=0.6)
        near = list(dict.fromkeys(_ALIASES[n] for n in near))[:3]
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise SpecError(
            f"unknown accelerator {name!r}{hint}; known: {', '.join(names())} "
            "(their rates and links: `parastrat accelerators`)"
        )
    return _PRESETS[key]


# ---- NVIDIA ------------------------------------------------------------------------------
# A100 SXM4 80GB. NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense (624 with
# sparsity), no FP8, HBM2e 80GB at 2,039 GB/s, NVLink3 600 GB/s bidirectional (300 each way).
# DGX A100: 8 GPUs, 8x ConnectX-6 HDR 200 Gb/s (25 GB/s per GPU).  Achievable NVLink3 all-reduce
# busbw in nccl-tests on DGX A100: ~230 GB/s.
register(
    Accelerator(
        name="a100",
        vendor="nvidia",
        memory_bytes=80 * GiB,
        usable_memory_bytes=81_920 * MiB,  # nvidia-smi on A100-SXM4-80GB: 81920MiB
        peak_flops={"bf16": 312 * TFLOPS},
        mem_bandwidth_Bps=2039 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=230 * GBps,
        scale_up_peak_Bps=300 * GBps,
        scale_out_bw_Bps=25 * GBps,
        devices_per_node=8,
        intra_latency_s=3e-6,
        inter_latency_s=8e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        host_memory_bytes=128 * 10**9,  # DGX A100: 1 TB host memory / 8 GPUs
        source="NVIDIA A100 datasheet (SXM4 80GB); DGX A100 user guide (8x HDR 200Gb/s)",
        aliases=("a100-sxm", "a100-80gb", "a100-sxm4-80gb"),
    )
)

# H100 SXM5 80GB. NVIDIA H100 Tensor Core GPU datasheet: BF16 989 TFLOPS dense (1,979 sparse),
# FP8 1,979 dense; HBM3 80GB at 3.35 TB/s; NVLink4 900 GB/s bidirectional (450 each way).
# DGX H100: 8x ConnectX-7 NDR 400 Gb/s = 50 GB/s per GPU.  Achievable NVLink4 all-reduce busbw
# (nccl-tests, without NVLS): ~360-400 GB/s; 370 used.
register(
    Accelerator(
        name="h100",
        vendor="nvidia",
        memory_bytes=80 * GiB,
        usable_memory_bytes=81_559 * MiB,  # nvidia-smi on H100 80GB HBM3: 81559MiB
        peak_flops={"bf16": 989 * TFLOPS, "fp8": 1979 * TFLOPS},
        mem_bandwidth_Bps=3350 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=370 * GBps,
        scale_up_peak_Bps=450 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        host_memory_bytes=256 * 10**9,  # DGX H100: 2 TB host memory / 8 GPUs
        source="NVIDIA H100 datasheet (SXM5); DGX H100 user guide (8x CX-7 NDR 400Gb/s)",
        aliases=("h100-sxm", "h100-sxm5", "h100-80gb", "dgx-h100"),
    )
)

# H200 SXM 141GB. NVIDIA H200 datasheet: same tensor cores as H100 (BF16 989 / FP8 1,979 dense),
# HBM3e 141GB at 4.8 TB/s, NVLink4 900 GB/s.  HGX H200 ships with 400 Gb/s NDR per GPU.
register(
    Accelerator(
        name="h200",
        vendor="nvidia",
        memory_bytes=141 * GiB,
        usable_memory_bytes=143_771 * MiB,  # nvidia-smi on H200 141GB HBM3e: 143771MiB
        peak_flops={"bf16": 989 * TFLOPS, "fp8": 1979 * TFLOPS},
        mem_bandwidth_Bps=4800 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=370 * GBps,
        scale_up_peak_Bps=450 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        host_memory_bytes=256 * 10**9,  # DGX H200: 2 TB host memory / 8 GPUs
        source="NVIDIA H200 datasheet (SXM); HGX H200 with CX-7 NDR 400Gb/s",
        aliases=("h200-sxm", "h200-141gb"),
    )
)

# B200 (HGX B200 / DGX B200, 1,000 W). DGX B200 datasheet: 72 PFLOPS FP8 training for 8 GPUs
# = 9 PFLOPS FP8 sparse per GPU -> 4.5 PFLOPS FP8 dense, 2.25 PFLOPS BF16 dense; 1,440 GB HBM3e
# for 8 GPUs = 180 GB, 64 TB/s total = 8 TB/s per GPU; NVLink5 1.8 TB/s bidirectional (900 GB/s
# each way); 8x ConnectX-7 400 Gb/s.  MXFP8 runs at the FP8 rate.  Achievable NVLink5 all-reduce
# busbw ~720 GB/s (80 % of the link peak, as for NVLink4).  FP4: DGX B200 datasheet, 144
# PFLOPS FP4 inference (with sparsity) for 8 GPUs = 18 sparse, 9 PFLOPS dense per GPU.
register(
    Accelerator(
        name="b200",
        vendor="nvidia",
        memory_bytes=180 * GiB,
        peak_flops={
            "bf16": 2250 * TFLOPS,
            "fp8": 4500 * TFLOPS,
            "mxfp8": 4500 * TFLOPS,
            "nvfp4": 9000 * TFLOPS,
        },
        mem_bandwidth_Bps=8000 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=720 * GBps,
        scale_up_peak_Bps=900 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        host_memory_bytes=512 * 10**9,  # DGX B200: 4 TB host memory / 8 GPUs
        source="NVIDIA DGX B200 datasheet; HGX B200 (NVLink5, CX-7 400Gb/s)",
        aliases=("b200-sxm", "dgx-b200", "hgx-b200"),
    )
)

# B300 (HGX B300, Blackwell Ultra). NVIDIA HGX B300 / DGX B300 datasheet: 2.3 TB HBM3e for 8 GPUs
# = 288 GB per GPU, 8 TB/s per GPU; dense BF16 2.25 PFLOPS and FP8 4.5 PFLOPS per GPU (the
# Ultra gains are in FP4 and attention); NVLink5 900 GB/s each way; ConnectX-8 SuperNIC
# 800 Gb/s per GPU (100 GB/s).  FP4: 13,125 TFLOPS dense per GPU for the HGX B300 (G.
# Lockwood's B300 notes, from NVIDIA's HGX B300 figures: 105 PFLOPS dense FP4 for 8 GPUs);
# third-party tables round it to 14.  Below GB300's 15: the HGX part runs at 1,100 W against
# GB300's 1,400 W.
register(
    Accelerator(
        name="b300",
        vendor="nvidia",
        memory_bytes=288 * GiB,
        peak_flops={
            "bf16": 2250 * TFLOPS,
            "fp8": 4500 * TFLOPS,
            "mxfp8": 4500 * TFLOPS,
            "nvfp4": 13125 * TFLOPS,
        },
        mem_bandwidth_Bps=8000 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=720 * GBps,
        scale_up_peak_Bps=900 * GBps,
        scale_out_bw_Bps=100 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        source="NVIDIA HGX/DGX B300 datasheet (Blackwell Ultra, CX-8 800Gb/s)",
        aliases=("b300-sxm", "dgx-b300", "hgx-b300", "blackwell-ultra"),
    )
)

# GB200 NVL72. NVIDIA GB200 NVL72 datasheet: per GPU 2.5 PFLOPS BF16 dense (5 sparse), FP8 5
# PFLOPS dense, HBM3e 186 GB (13.4 TB / 72) at 8 TB/s; the whole rack is one NVLink5 domain of 72
# GPUs (900 GB/s each way per GPU); compute trays hold 4 GPUs (2 superchips); ConnectX-7
# 400 Gb/s per GPU for scale-out.  FP4: the datasheet's 1,440 PFLOPS FP4 for the rack is
# with sparsity (720 PFLOPS FP8 likewise); dense 720 / 72 = 10 PFLOPS FP4 per GPU.
register(
    Accelerator(
        name="gb200",
        vendor="nvidia",
        memory_bytes=186 * GiB,
        peak_flops={
            "bf16": 2500 * TFLOPS,
            "fp8": 5000 * TFLOPS,
            "mxfp8": 5000 * TFLOPS,
            "nvfp4": 10000 * TFLOPS,
        },
        mem_bandwidth_Bps=8000 * GBps,
        scale_up_domain=72,
        scale_up_bw_Bps=720 * GBps,
        scale_up_peak_Bps=900 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=4,
        intra_latency_s=3e-6,
        inter_latency_s=6e-6,
        host_link_Bps=GRACE_C2C_PER_GPU_BPS,
        host_memory_bytes=GRACE_HOST_BYTES_PER_GPU,
        source="NVIDIA GB200 NVL72 datasheet (per-GPU figures; NVL72 = one 72-GPU NVLink domain)",
        aliases=("gb200-nvl72", "nvl72", "gb200nvl72"),
    )
)

# GB300 NVL72. NVIDIA GB300 NVL72 datasheet: per GPU 288 GB HBM3e at 8 TB/s, dense BF16 2.5
# PFLOPS and FP8 5 PFLOPS, NVLink5 in a 72-GPU domain, ConnectX-8 800 Gb/s (XDR) per GPU.
# FP4: "1,440 | 1,080 PFLOPS" (with | without sparsity) for the rack = 15 PFLOPS dense per GPU,
# 3x its dense FP8 (NVIDIA's "Inside NVIDIA Blackwell Ultra" blog, 2025-08: 15 PFLOPS dense
# NVFP4 per GPU, 1.5x Blackwell's 10).
register(
    Accelerator(
        name="gb300",
        vendor="nvidia",
        memory_bytes=288 * GiB,
        peak_flops={
            "bf16": 2500 * TFLOPS,
            "fp8": 5000 * TFLOPS,
            "mxfp8": 5000 * TFLOPS,
            "nvfp4": 15000 * TFLOPS,
        },
        mem_bandwidth_Bps=8000 * GBps,
        scale_up_domain=72,
        scale_up_bw_Bps=720 * GBps,
        scale_up_peak_Bps=900 * GBps,
        scale_out_bw_Bps=100 * GBps,
        devices_per_node=4,
        intra_latency_s=3e-6,
        inter_latency_s=6e-6,
        host_link_Bps=GRACE_C2C_PER_GPU_BPS,
        host_memory_bytes=GRACE_HOST_BYTES_PER_GPU,
        source="NVIDIA GB300 NVL72 datasheet (Blackwell Ultra; CX-8 800Gb/s XDR per GPU)",
        aliases=("gb300-nvl72", "gb300nvl72"),
    )
)

# ---- Huawei Ascend -----------------------------------------------------------------------
# Ascend 910B (Atlas 800T A2 training server). Huawei Atlas 800T A2 product page / Ascend 910B
# figures: FP16/BF16 ~313 TFLOPS dense (910B3; 910B1/B2 bins reach ~376-414), 64 GB HBM2e at
# ~1.6 TB/s, no FP8.  8 NPUs per server fully meshed by HCCS (7 links x 56 GB/s = 392 GB/s
# bidirectional, ~196 GB/s each way) = one 8-card island; 8x 200GE RoCE (25 GB/s per NPU).
# NOTE: older Atlas 800 (910A/910 Pro) servers form two 4-card HCCS islands; MindIE-SD's
# measurements there (reference/mindiesd.md) give ~132 GB/s all-to-all inside an island and ~86
# GB/s across.  For those servers use Cluster(..., scale_up_domain=4).
register(
    Accelerator(
        name="ascend-910b",
        vendor="huawei",
        memory_bytes=64 * GiB,
        peak_flops={"bf16": 313 * TFLOPS},
        mem_bandwidth_Bps=1600 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=150 * GBps,
        scale_up_peak_Bps=196 * GBps,
        scale_out_bw_Bps=25 * GBps,
        devices_per_node=8,
        intra_latency_s=5e-6,
        inter_latency_s=10e-6,
        source="Huawei Atlas 800T A2 / Ascend 910B specs (HCCS full mesh of 8, 200GE RoCE)",
        aliases=("910b", "ascend910b", "atlas-800t-a2"),
    )
)

# Ascend 910C (Atlas 800T A3 / CloudMatrix 384). Two 910B-class dies in one package: FP16/BF16
# ~752 TFLOPS dense (some sources quote 800), 128 GB HBM at ~3.2 TB/s, no FP8.  One preset device
# is one *package*.  NOTE: torch_npu on A3 servers shows each die as its own device (16 devices of
# 64 GB per 8-package server, pairs linked by SIO); plan such servers with ascend-910b-sized
# devices or Cluster(devices_per_node=16).  Scale-up: 8 packages per server over HCCS; the
# CloudMatrix 384 supernode extends the domain to 384 over the UB fabric (use
# Cluster(scale_up_domain=384) there).  ~392 GB/s UB per package each way, ~280 achievable
# (estimate); 400 Gb/s RDMA per package for scale-out.
register(
    Accelerator(
        name="ascend-910c",
        vendor="huawei",
        memory_bytes=128 * GiB,
        peak_flops={"bf16": 752 * TFLOPS},
        mem_bandwidth_Bps=3200 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=280 * GBps,
        scale_up_peak_Bps=392 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=5e-6,
        inter_latency_s=10e-6,
        source="Huawei Atlas 800T A3 / CloudMatrix 384 public figures (910C package = 2 dies)",
        aliases=("910c", "ascend910c", "atlas-800t-a3"),
    )
)

# ---- DiT serving parts: H20, H800/A800 and PCIe machines (issue 16) --------------------------
# PCIe servers have no NVLink: peers talk through the PCIe switch under one CPU socket, and
# across sockets through the host bridge (UPI/QPI), where NCCL does not use P2P by default
# (NCCL_P2P_LEVEL's default stops below SYS) and stages through host memory instead.  A typical
# 8-GPU PCIe Gen4 server has 4 GPUs per socket: the "scale-up domain" here is those 4 (peer
# traffic over the switch at the achievable Gen4 x16 rate), the "scale-out" rate is the
# cross-socket path.  PCIe Gen4 x16: 32 GB/s per direction raw, ~26 GB/s after encoding and
# TLP overhead; NCCL all-reduce bus bandwidth over a Gen4 switch ~20 GB/s; through host memory
# across sockets ~10 GB/s (nccl-tests on PCIe Gen4 servers; NVIDIA NCCL docs on P2P levels).
_PCIE4_SWITCH_BW = 20 * GBps
_PCIE4_HOST_BW = 10 * GBps

# L40 (PCIe, 48GB). NVIDIA L40 datasheet: BF16/FP16 tensor 181.05 TFLOPS dense (362.1 sparse)
# with FP32 accumulate, FP8 362 dense; 48 GB GDDR6 at 864 GB/s; PCIe Gen4 x16; no NVLink.
register(
    Accelerator(
        name="l40",
        vendor="nvidia",
        memory_bytes=48 * GiB,
        peak_flops={"bf16": 181 * TFLOPS, "fp8": 362 * TFLOPS},
        mem_bandwidth_Bps=864 * GBps,
        scale_up_domain=4,
        scale_up_bw_Bps=_PCIE4_SWITCH_BW,
        scale_up_peak_Bps=32 * GBps,
        scale_out_bw_Bps=_PCIE4_HOST_BW,
        devices_per_node=8,
        intra_latency_s=10e-6,
        inter_latency_s=15e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        source="NVIDIA L40 datasheet (PCIe Gen4 x16, no NVLink); 8-GPU PCIe server, 4 per socket",
        aliases=("l40-pcie", "l40-48gb"),
    )
)
# L40S. NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse), FP8 733 dense; 48 GB
# GDDR6 at 864 GB/s; PCIe Gen4 x16; no NVLink.
register(
    Accelerator(
        name="l40s",
        vendor="nvidia",
        memory_bytes=48 * GiB,
        peak_flops={"bf16": 362 * TFLOPS, "fp8": 733 * TFLOPS},
        mem_bandwidth_Bps=864 * GBps,
        scale_up_domain=4,
        scale_up_bw_Bps=_PCIE4_SWITCH_BW,
        scale_up_peak_Bps=32 * GBps,
        scale_out_bw_Bps=_PCIE4_HOST_BW,
        devices_per_node=8,
        intra_latency_s=10e-6,
        inter_latency_s=15e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        source="NVIDIA L40S datasheet (PCIe Gen4 x16, no NVLink)",
        aliases=("l40s-pcie",),
    )
)
# L20. NVIDIA L20 product brief: BF16 119.5 TFLOPS dense (239 sparse), FP8 239 dense; 48 GB
# GDDR6 at 864 GB/s; PCIe Gen4 x16; no NVLink.
register(
    Accelerator(
        name="l20",
        vendor="nvidia",
        memory_bytes=48 * GiB,
        peak_flops={"bf16": 119.5 * TFLOPS, "fp8": 239 * TFLOPS},
        mem_bandwidth_Bps=864 * GBps,
        scale_up_domain=4,
        scale_up_bw_Bps=_PCIE4_SWITCH_BW,
        scale_up_peak_Bps=32 * GBps,
        scale_out_bw_Bps=_PCIE4_HOST_BW,
        devices_per_node=8,
        intra_latency_s=10e-6,
        inter_latency_s=15e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        source="NVIDIA L20 product brief (PCIe Gen4 x16, no NVLink)",
        aliases=("l20-pcie",),
    )
)
# GeForce RTX 4090. NVIDIA Ada Lovelace architecture whitepaper (RTX 4090): FP16/BF16 tensor
# with FP32 accumulate 165.2 TFLOPS dense, FP8 with FP32 accumulate 330.3 dense; 24 GB GDDR6X
# at 1,008 GB/s; PCIe Gen4 x16.  GeForce drivers do not enable peer-to-peer: every transfer
# between GPUs stages through host memory, under one socket or not.
register(
    Accelerator(
        name="rtx-4090",
        vendor="nvidia",
        memory_bytes=24 * GiB,
        peak_flops={"bf16": 165.2 * TFLOPS, "fp8": 330.3 * TFLOPS},
        mem_bandwidth_Bps=1008 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=_PCIE4_HOST_BW,
        scale_up_peak_Bps=32 * GBps,
        scale_out_bw_Bps=_PCIE4_HOST_BW,
        devices_per_node=8,
        intra_latency_s=15e-6,
        inter_latency_s=15e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        source="NVIDIA Ada Lovelace whitepaper (RTX 4090); no P2P on GeForce (host-staged)",
        aliases=("4090", "rtx4090", "geforce-rtx-4090"),
    )
)
# H20 (HGX H20, 96GB). NVIDIA H20 product brief: BF16 148 TFLOPS dense, FP8 296 dense; 96 GB
# HBM3 at 4.0 TB/s; NVLink 900 GB/s bidirectional (450 each way) in 8-GPU HGX boards; 400 Gb/s
# NIC per GPU.  Collectives reach the H100's achievable NVLink4 rate.
register(
    Accelerator(
        name="h20",
        vendor="nvidia",
        memory_bytes=96 * GiB,
        peak_flops={"bf16": 148 * TFLOPS, "fp8": 296 * TFLOPS},
        mem_bandwidth_Bps=4000 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=370 * GBps,
        scale_up_peak_Bps=450 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        source="NVIDIA H20 product brief (HGX, NVLink 900 GB/s, HBM3 96GB 4.0 TB/s)",
        aliases=("h20-96gb", "hgx-h20"),
    )
)
# H800 SXM5 80GB: the H100 SXM5 with NVLink cut to 400 GB/s bidirectional (8 links, 200 each
# way); compute and HBM3 as H100 (NVIDIA H800 product brief).  Achievable all-reduce busbw at
# ~80 % of the link: 160 GB/s.  8x 400 Gb/s NICs in the HGX H800 servers.
register(
    Accelerator(
        name="h800",
        vendor="nvidia",
        memory_bytes=80 * GiB,
        peak_flops={"bf16": 989 * TFLOPS, "fp8": 1979 * TFLOPS},
        mem_bandwidth_Bps=3350 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=160 * GBps,
        scale_up_peak_Bps=200 * GBps,
        scale_out_bw_Bps=50 * GBps,
        devices_per_node=8,
        intra_latency_s=2.5e-6,
        inter_latency_s=6e-6,
        host_link_Bps=PCIE_GEN5_X16_BPS,
        source="NVIDIA H800 SXM5 product brief (NVLink 400 GB/s bidirectional)",
        aliases=("h800-sxm", "h800-80gb"),
    )
)
# A800 SXM4 80GB: the A100 SXM4 with NVLink cut to 400 GB/s bidirectional (200 each way);
# compute and HBM2e as A100 (NVIDIA A800 product brief).  Achievable busbw ~155 GB/s.
register(
    Accelerator(
        name="a800",
        vendor="nvidia",
        memory_bytes=80 * GiB,
        peak_flops={"bf16": 312 * TFLOPS},
        mem_bandwidth_Bps=2039 * GBps,
        scale_up_domain=8,
        scale_up_bw_Bps=155 * GBps,
        scale_up_peak_Bps=200 * GBps,
        scale_out_bw_Bps=25 * GBps,
        devices_per_node=8,
        intra_latency_s=3e-6,
        inter_latency_s=8e-6,
        host_link_Bps=PCIE_GEN4_X16_BPS,
        source="NVIDIA A800 SXM4 product brief (NVLink 400 GB/s bidirectional)",
        aliases=("a800-sxm", "a800-80gb"),
    )
)
