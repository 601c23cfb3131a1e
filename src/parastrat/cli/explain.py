"""``parastrat explain``: the memory and step-time breakdown of one strategy, or of two
(``--compare``) term by term."""

from __future__ import annotations

import argparse

from ..spec.workload import RECOMPUTE_MODES
from ._common import (
    DEFAULT_RECOMPUTE,
    HEADROOM_HELP,
    RECOMPUTE_HELP,
    add_strategy_flags,
    add_switch_args,
    cli_words,
    console,
    headroom_fraction,
    parse_strategy_text,
    positive_int,
    print_json,
    strategy_from_args,
    switch_flags,
    switches_from_args,
    workload_from_args,
)
from .plan import add_target_args, build_target


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``explain`` subcommand (memory and step-time breakdown of a strategy, or of two with
    ``--compare``) to ``sub``."""
    p = sub.add_parser(
        "explain",
        help="memory and step-time breakdown of a strategy",
        description="Price one strategy (the strategy flags) on a cluster: "
        "memory per pipeline stage and step time term by term.  "
        "With --compare, price a second strategy and say what "
        "changed and which change caused it.",
    )
    add_target_args(p)
    p.add_argument("--micro-batch-size", type=positive_int, default=1)
    p.add_argument(
        "--recompute",
        choices=RECOMPUTE_MODES,
        default=DEFAULT_RECOMPUTE,
        help=RECOMPUTE_HELP,
    )
    p.add_argument(
        "--compare",
        default=None,
        metavar="STRATEGY",
        help='second strategy, e.g. "tp=4,pp=2,vpp=5,sp" or as a plan prints it, '
        '"TP4 PP2(VP5) CP1 DP8 SP"',
    )
    p.add_argument(
        "--headroom",
        type=headroom_fraction,
        default=None,
        help=HEADROOM_HELP + "; says whether the peak fits with it, as plan and memory take it",
    )
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="text, or one JSON document"
    )
    add_switch_args(p)
    add_strategy_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``parastrat explain``: print one strategy's memory and step-time breakdown, or with
    ``--compare`` what changed between two and why (table or JSON); return 0."""
    from ..estimate.track_record import track_record
    from ..planner.advice import switch_advice
    from ..planner.compare import compare
    from ..planner.explain import explain_strategy
    from ..planner.price import price
    from ..planner.sensitivity import sensitivity

    model, cluster, gbs = build_target(args)
    workload = workload_from_args(args, model, gbs)
    switches = switches_from_args(args)
    strategy = strategy_from_args(args, training=True, model=model)
    if args.compare:
        other = parse_strategy_text(args.compare, training=True)  # read as --strategy is
        cmp = compare(strategy, other, cluster=cluster, workload=workload, switches=switches)
        if args.format == "json":
            fits = {"fits_headroom": [_fits(m, cluster, args.headroom) for m in cmp.memory]}
            extra = fits if args.headroom is not None else {}
            print_json({**cmp.to_dict(), **_compared_training(cmp, args.train_tokens), **extra})
        else:
            console.print(cmp.summary(), markup=False)
            for side, mem in zip("AB", cmp.memory):
                _print_headroom(mem, cluster, args.headroom, f"{side}: ")
            if args.train_tokens is not None:
                console.print(_compared_line(cmp, args.train_tokens), markup=False)
        return 0
    if args.format == "json":
        s, step, mem = price(workload, strategy, cluster, switches)
        advice = switch_advice(workload, s, cluster, switches)
        record = track_record(workload.model, cluster.accel)
        print_json(
            {
                "strategy": s.to_dict(),
                "step": step.to_dict(),
                "memory": mem.to_dict(),
                "fits": _fits(mem, cluster, args.headroom),
                "switch_advice": [a.to_dict() for a in advice],
                "sensitivity": [x.to_dict() for x in sensitivity(workload, s, cluster, switches)],
                "track_record": record.to_dict() if record is not None else None,
                **_training(step, args.train_tokens, record),
            }
        )
        return 0
    text = explain_strategy(
        workload, strategy, cluster, switches, render=switch_flags, headroom=args.headroom
    )
    console.print(cli_words(text), markup=False)
    if args.train_tokens is not None:
        from ..estimate.train_time import record_note

        _, step, _ = price(workload, strategy, cluster, switches)
        training = step.time_to_train(args.train_tokens)
        note = record_note(training, track_record(workload.model, cluster.accel))
        console.print(f"time to train: {training.summary(cluster.accel.name)}{note}", markup=False)
    return 0


def _training(step, tokens: float | None, record=None) -> dict:
    """``{"time_to_train": ...}`` for ``tokens`` at ``step``, with the days on ``record``
    (empty without ``tokens``)."""
    if tokens is None:
        return {}
    return {"time_to_train": step.time_to_train(tokens).to_dict(record)}


def _compared_training(cmp, tokens: float | None) -> dict:
    """``{"time_to_train": {"a": ..., "b": ...}}`` of a comparison (empty without ``tokens``)."""
    if tokens is None:
        return {}
    a, b = (step.time_to_train(tokens).to_dict(cmp.track_record) for step in cmp.step)
    return {"time_to_train": {"a": a, "b": b}}


def _compared_line(cmp, tokens: float) -> str:
    """Days and device-hours of ``tokens`` tokens with A and with B, and the difference."""
    from ..estimate.train_time import tokens_text

    a, b = (step.time_to_train(tokens) for step in cmp.step)
    return (
        f"time to train {tokens_text(tokens)} tokens: {a.days:,.1f} -> {b.days:,.1f} days "
        f"({b.days - a.days:+,.1f}); {a.device_hours:,.0f} -> {b.device_hours:,.0f} "
        "device-hours (no restarts, evaluation or checkpoint stalls counted)"
    )


def _fits(mem, cluster, headroom: float | None) -> bool:
    """Whether ``mem``'s peak fits the cluster's device memory less ``headroom`` (a fraction;
    None: the estimate's own allowance alone, as plan without --headroom)."""
    return bool(mem.fits(cluster.accel, headroom=headroom or 0.0))


def _print_headroom(mem, cluster, headroom: float | None, prefix: str = "") -> None:
    """With ``--headroom``: whether the peak stays below device memory less that fraction."""
    from ..estimate.memory import capacity_left
    from ..spec.hardware import GiB

    if headroom is None:
        return
    limit = capacity_left(cluster.accel, headroom) / GiB
    verdict = "fits" if _fits(mem, cluster, headroom) else "DOES NOT FIT"
    console.print(
        f"{prefix}with --headroom {headroom:g}: peak {mem.peak_bytes / GiB:.1f} GiB of the "
        f"{limit:.1f} GiB it leaves ({verdict})",
        markup=False,
    )
