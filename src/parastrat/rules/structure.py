"""Rules that need nothing but the strategy: the order strings, the degrees that need one another,
inference against training fields (checked when a Strategy is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import divisors, fmt_set
from ..errors import Violation
from .fsdp import fsdp_structural_violations
from .layers import layout_conflict_violations
from .orders import INFERENCE_ORDER_NAMES, TRAINING_ORDER_NAMES
from .violations import err

if TYPE_CHECKING:
    from ..strategy import Strategy


def structural_violations(s: Strategy) -> list[Violation]:
    """Rules that depend only on the degrees and the order string."""
    unknown = _order_violations(s)
    if unknown:
        return unknown
    mode = _inference_violations(s) if s.is_inference else _training_violations(s)
    return (
        _dependency_violations(s)
        + layout_conflict_violations(s)
        + mode
        + fsdp_structural_violations(s)
    )


def _order_violations(s: Strategy) -> list[Violation]:
    """The order string names every axis of its grid once."""
    names = s.order.split("-")
    expected = INFERENCE_ORDER_NAMES if s.is_inference else TRAINING_ORDER_NAMES
    if sorted(names) == sorted(expected):
        return []
    return [
        err(
            "order-unknown",
            f"order {s.order!r} is not a permutation of {'-'.join(TRAINING_ORDER_NAMES)} "
            f"(training) or {'-'.join(INFERENCE_ORDER_NAMES)} (inference)",
            "use 'tp-cp-ep-dp-pp' (Megatron default), 'tp-cp-ep-pp-dp' (Bridge's "
            "use_tp_pp_dp_mapping) or 'tp-sp-pp-cfg-dp' (xDiT)",
        )
    ]


def _dependency_violations(s: Strategy) -> list[Violation]:
    """Settings that need another degree (SP needs TP, virtual or uneven stages need PP), and
    the two ways of balancing a pipeline that exclude each other."""
    out: list[Violation] = []
    if s.sp and s.tp == 1:
        out.append(
            err(
                "sp-needs-tp",
                "sequence parallelism (sp=True) needs tp > 1; tp=1",
                "set tp >= 2 (SP shards activations over the TP group) or sp=False",
            )
        )
    if s.vpp > 1 and s.pp == 1:
        out.append(
            err("vpp-needs-pp", f"vpp={s.vpp} (virtual pipeline) needs pp > 1; pp=1", _vpp_fix(s))
        )
    if s.uneven and s.pp == 1:
        out.append(
            err(
                "uneven-needs-pp",
                "first/last pipeline stage layer counts need pp > 1; pp=1",
                "set pp >= 2, or drop first_stage_layers/last_stage_layers",
            )
        )
    if (s.account_for_embedding or s.account_for_loss) and (
        s.first_stage_layers is not None or s.last_stage_layers is not None
    ):
        out.append(
            err(
                "uneven-conflict",
                "first/last stage layer counts cannot be combined with "
                "account_for_embedding/account_for_loss (Megatron refuses both)",
                "use one way to balance the pipeline",
            )
        )
    return out


def _vpp_fix(s: Strategy) -> str:
    """vpp-needs-pp's fix; a pipeline layout sets vpp itself (its stages / pp), so its fix is a
    pp > 1 that divides the stages, or another layout."""
    if s.pipeline_layout is None:
        return "set pp >= 2 with vpp, or vpp=1"
    pps = [d for d in divisors(s.vpp) if d > 1]
    return (
        f"the pipeline layout's {s.vpp} stages set vpp (stages / pp): use pp in {fmt_set(pps)} "
        "(dividing the stages), or write the layout with pp * vpp stages for the pp you want "
        "(a layout sets vpp itself)"
    )


def _inference_violations(s: Strategy) -> list[Violation]:
    """Training-only degrees on an inference order."""
    out = (
        [
            err(
                "inference-ep",
                f"ep={s.ep}: expert parallelism is not part of the xDiT/MindIE-SD inference grid",
                "use ep=1 (pass groups['tp'] to fused MoE kernels) or a training "
                "order such as 'tp-cp-ep-dp-pp'",
            )
        ]
        if s.ep > 1
        else []
    )
    if s.vpp > 1:
        out.append(
            err(
                "inference-vpp",
                f"vpp={s.vpp}: inference pipelines have no virtual stages",
                "use vpp=1, or (training with Ulysses as context parallelism) a training "
                "order such as 'tp-cp-ep-dp-pp'",
            )
        )
    return out


def _training_violations(s: Strategy) -> list[Violation]:
    """Inference-only degrees on a training order."""
    if s.cfg <= 1:
        return []
    return [
        err(
            "cfg-training",
            f"cfg={s.cfg} with training order {s.order!r}: CFG parallelism is "
            "for diffusion inference",
            "use cfg=1 for training, or order='tp-sp-pp-cfg-dp' for inference",
        )
    ]
