"""Sequence and batch: the sequence against CP, TP and chunks; the global batch against the
micro-batch and data parallelism."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checks import divisors, fmt_set, is_count, lcm
from ..errors import Violation
from .violations import err, warn

if TYPE_CHECKING:
    from ..strategy import Strategy


def sequence_violations(s: Strategy, seq_len: int) -> list[Violation]:
    """Sequence length against CP (load-balanced causal split) and SP."""
    out: list[Violation] = []
    if s.is_inference:
        return out  # DiT token counts are padded, not refused: see estimate.dit
    if s.cp > 1 and seq_len % (2 * s.cp):
        # the fix must clear seq-sp too: a multiple of 2*cp and, with SP, of tp*cp
        unit = lcm(2 * s.cp, s.tp * s.cp if s.sp else 1)
        cps = [
            c
            for c in divisors(seq_len // 2)
            if c > 1 and not (s.sp and seq_len % (s.tp * c))
        ] if seq_len % 2 == 0 else []  # fmt: skip
        others = f" or cp in {fmt_set(cps)} (with the world size a multiple of it)" if cps else ""
        out.append(
            err(
                "seq-cp",
                f"seq_len={seq_len} is not a multiple of 2*cp = {2 * s.cp} (the "
                "load-balanced causal split gives each CP rank two chunks)",
                f"use seq_len a multiple of {unit} (e.g. {(seq_len // unit + 1) * unit}){others}",
            )
        )
    if s.sp and seq_len % (s.tp * s.cp):
        out.append(
            err(
                "seq-sp",
                f"seq_len={seq_len} is not a multiple of tp*cp = {s.tp * s.cp} "
                "(sequence parallelism splits each CP chunk over TP)",
                f"use seq_len a multiple of {lcm(s.tp * s.cp, 2 * s.cp if s.cp > 1 else 1)}",
            )
        )
    return out


def chunk_violations(s: Strategy, model: Any, seq_len: int) -> list[Violation]:
    """Context parallelism against chunked attention (Llama 4): Megatron Bridge's
    ``Llama4SelfAttention.forward`` asserts that each rank's two load-balanced CP chunks hold
    whole attention chunks when the sequence is longer than one (``seq_len % (2 cp) == 0`` and
    ``(seq_len / (2 cp)) % attention_chunk_size == 0``), so any other CP stops at the first
    forward."""
    chunk = getattr(model, "attention_chunk_size", None)
    if s.is_inference or s.cp <= 1 or not chunk or seq_len <= chunk:
        return []
    unit = 2 * s.cp * chunk
    if seq_len % unit == 0:
        return []
    ok = [c for c in divisors(seq_len // 2) if c > 1 and (seq_len // (2 * c)) % chunk == 0]
    fix = f"use cp in {fmt_set(ok)}" if ok else "use cp=1"
    return [
        err(
            "cp-attention-chunk",
            f"cp={s.cp} splits seq_len={seq_len} into {2 * s.cp} pieces of "
            f"{seq_len / (2 * s.cp):g} tokens, not whole {chunk}-token attention chunks of "
            f"{getattr(model, 'name', 'the model')} (Megatron Bridge's Llama 4 attention asserts "
            "it)",
            f"{fix}, or a seq_len that is a multiple of {unit}",
        )
    ]


def interleave_fits(s: Strategy, microbatches: int) -> bool:
    """Whether Megatron Core's interleaved schedule takes ``microbatches`` per step: a
    multiple of ``pp`` with ``vpp > 1`` (``microbatch_group_size_per_vp_stage`` = ``pp`` by
    default; a last group of fewer raises at the first step), anything without interleaving."""
    return s.vpp == 1 or microbatches % s.pp == 0


def _either(value: int, unit: int) -> str:
    """The multiples of ``unit`` around ``value``: "48 or 64", or just "64" below one unit."""
    lower, upper = value // unit * unit, (value // unit + 1) * unit
    return f"{lower} or {upper}" if lower else str(upper)


def batch_violations(
    s: Strategy, dp: int, global_batch_size: int | None, micro_batch_size: int | None
) -> list[Violation]:
    """Global batch against micro-batch and DP; micro-batches against pipeline stages."""
    out: list[Violation] = []
    mbs = micro_batch_size or 1
    for label, value in (
        ("global_batch_size", global_batch_size),
        ("micro_batch_size", micro_batch_size),
    ):
        if value is not None and not is_count(value):
            out.append(
                err(
                    f"{label.replace('_', '-')}-positive",
                    f"{label}={value!r} must be a whole number >= 1",
                    f"pass {label} as an int >= 1",
                )
            )
    if out or global_batch_size is None:
        return out
    unit = mbs * dp
    if global_batch_size % unit:
        out.append(
            err(
                "batch-divisible",
                f"global_batch_size={global_batch_size} is not a multiple of micro_batch_size*dp "
                f"= {mbs}*{dp} = {unit}",
                f"use global_batch_size {_either(global_batch_size, unit)}, or a micro-batch "
                "size dividing "
                f"{global_batch_size // dp if global_batch_size % dp == 0 else 'gbs/dp'}",
            )
        )
        return out
    m = global_batch_size // unit
    if s.pp > 1 and m < s.pp:
        out.append(
            warn(
                "pp-few-microbatches",
                f"{m} micro-batches per step for pp={s.pp} stages: most of each step is "
                "pipeline bubble",
                f"raise global_batch_size to at least {s.pp * unit} or lower pp",
            )
        )
    if not interleave_fits(s, m):
        out.append(
            err(
                "vpp-microbatches",
                f"{m} micro-batches is not a multiple of pp={s.pp}: Megatron Core's interleaved "
                "schedule (microbatch_group_size_per_vp_stage = pp, its default) refuses a "
                "last group of fewer than pp micro-batches at the first step",
                f"use global_batch_size {_either(global_batch_size, s.pp * unit)} (a multiple "
                f"of pp*micro_batch_size*dp = {s.pp * unit}), or vpp=1",
            )
        )
    return out
