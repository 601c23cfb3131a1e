"""Element-wise traffic of each DiT family's transformer block as its eager code runs it.

Outside its matrix products and attention core, a DiT block runs chains of element-wise
kernels -- norms (often upcast to fp32), modulation, gates, RoPE, layout copies, text/image
concatenations, residual adds, the MLP activation -- and each reads and writes its tensors
through HBM.  How many bytes per token depends on the block's code, not only on its shape:
SD3-medium's block has neither QK-norm nor RoPE, Wan's and Mochi's keep their norms and
modulation in fp32.  :class:`EagerTraffic` holds the count for one block kind: bytes per token
per hidden-width element and per MLP-hidden element.

The numbers in :data:`EAGER_TRAFFIC` were counted, not estimated:
``python benchmarks/dit_elementwise.py`` runs one forward of each family's real diffusers block
(diffusers 0.39.0) on the CPU in bf16 under a ``TorchDispatchMode`` and sums the bytes every ATen
operation other than GEMMs, attention and views reads and writes.  The estimator uses them for
eager execution; compiled execution fuses the chains (``estimate/dit_step.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True)
class EagerTraffic:
    """Eager element-wise bytes per token of one block ``kind``: ``hidden_bytes`` per element of
    the hidden width (divided neither by TP nor by the MLP) and ``ffn_bytes`` per element of the
    MLP hidden width (divided by TP with the MLP)."""

    kind: str
    hidden_bytes: float
    ffn_bytes: float

    def __post_init__(self) -> None:
        if not (self.hidden_bytes >= 0 and self.ffn_bytes >= 0):
            raise SpecError(f"eager traffic of {self.kind!r} blocks must be >= 0 bytes")


def _one(kind: str, hidden: float, ffn: float) -> tuple[EagerTraffic, ...]:
    return (EagerTraffic(kind, hidden, ffn),)


#: Counted by ``python benchmarks/dit_elementwise.py`` (diffusers 0.39.0 blocks, bf16), per
#: family: FluxTransformerBlock / FluxSingleTransformerBlock; HunyuanVideoTransformerBlock /
#: HunyuanVideoSingleTransformerBlock; JointTransformerBlock without (SD3) and with (SD3.5)
#: RMS QK-norm; CogVideoXBlock without (2b) and with (5b, 1.5) RoPE; MochiTransformerBlock;
#: WanTransformerBlock; QwenImageTransformerBlock.
EAGER_TRAFFIC: dict[str, tuple[EagerTraffic, ...]] = {
    "flux": (EagerTraffic("double", 244.0, 4.0), EagerTraffic("single", 226.4, 6.0)),
    "hunyuanvideo": (EagerTraffic("double", 220.0, 4.0), EagerTraffic("single", 218.4, 6.0)),
    "sd3": _one("double", 60.0, 4.0),
    "sd3.5": _one("double", 128.0, 4.0),
    "cogvideox-2b": _one("joint", 60.1, 5.0),
    "cogvideox-5b": _one("joint", 166.8, 5.0),
    "mochi": _one("double", 356.2, 6.3),
    "wan": _one("cross", 364.0, 4.0),
    "qwen-image": _one("double", 166.0, 4.0),
}

__all__ = ["EAGER_TRAFFIC", "EagerTraffic"]
