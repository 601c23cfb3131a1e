"""Why a plan came back empty, and what would give one.

A refusal from :func:`parastrat.plan` names the cause (a pinned degree no device count can
take, a batch that splits over no data-parallel degree, memory) and a fix that has been
tried: every device count or batch it names was planned (``run``, supplied by the search,
so that this module does not import it) and gives a plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import SpecError, StrategyError, UsageError, Violation
from ..estimate.step import graph_run
from ..rules.graphs import graph_violations
from ..spec.cluster import MAX_DEVICES, Cluster
from ..spec.hardware import GiB
from ..spec.workload import SearchSpace, Switches, Workload
from ..strategy import MEGATRON_ORDER, Strategy, divisors
from .diagnose import PIN_NAMES
from .explain import TIGHT_MEMORY, capacity_gib
from .fewest import MAX_TRIALS, accepted_counts
from .variants import pipeline_variants

if TYPE_CHECKING:
    from ..estimate.train_time import TrainingBudget
    from ..spec.model import ModelSpec
    from .result import Plan

#: Plans a workload on a cluster (top 1) with the switches and search space at hand: how a
#: suggested device count or batch is tried before it is named.
Run = Callable[[Cluster, Workload], "Plan"]


def graphs_note(wl: Workload, sw: Switches, space: SearchSpace) -> str:
    """Why full recompute was not tried, when the CUDA-graph scopes ruled it out (the rule
    :func:`~parastrat.graph_rules.graph_violations` names, with its fix)."""
    if not sw.cuda_graphs or "full" in space.modes:
        return ""
    bad = graph_violations(sw.cuda_graphs, graph_run(wl.model, sw, "full"))
    return f" (full recompute not tried: [{bad[0].rule}] {bad[0].hint})" if bad else ""


def over_budget_message(result: Plan, budget: TrainingBudget) -> str:
    """The most devices allowed still miss ``budget``: by how much, and what would meet it."""
    step = result.best.step
    took = step.time_to_train(budget.tokens)
    need = math.ceil(step.world_size * took.days / budget.days)
    return (
        f"no device count up to {step.world_size:,} trains {budget}: the best plan on "
        f"{step.world_size:,} {result.cluster.accel.name} ({result.best.strategy}) takes "
        f"{took.days:,.1f} days; allow more devices (about {need:,} at the same throughput per "
        "device) or more days"
    )


def pinned_step(space: SearchSpace) -> int:
    """The smallest world step the pinned degrees allow (TP x CP x PP when all are pinned)."""
    step = 1
    for name in ("tp", "cp", "pp"):
        choices = getattr(space, name)
        if choices is not None and len(choices) == 1:
            step *= choices[0]
    return step


def _pins(space: SearchSpace) -> dict[str, int]:
    """The degrees the search space pins to one value."""
    out = {}
    for name in PIN_NAMES:
        choices = getattr(space, name)
        if choices is not None and len(choices) == 1:
            out[name] = choices[0]
    return out


def _pin_variants(model: ModelSpec, pins: dict[str, int]) -> Iterator[dict[str, Any]]:
    """Strategy keywords for every way the planner could run ``pins`` whatever the device
    count: each pipeline split it tries, each Ulysses x ring split of a pinned CP (SP on with
    TP, Megatron's order)."""
    pp, vpp, cp = pins.get("pp", 1), pins.get("vpp", 1), pins.get("cp", 1)
    splits = pipeline_variants(model, pp, vpp) or ({},)  # (): none works, the even one says why
    ulysses = [pins["ulysses"]] if "ulysses" in pins else divisors(cp)
    base = {**pins, "sp": pins.get("tp", 1) > 1, "order": MEGATRON_ORDER}
    for split in splits:
        for u in ulysses:
            yield {**base, "ulysses": u, **split}


def _variant_errors(kw: dict[str, Any], wl: Workload) -> tuple[Strategy | None, list[Violation]]:
    """The strategy ``kw`` builds (None when it cannot be built) and the hard rules it breaks
    without a world."""
    try:
        s = Strategy(**kw)
    except StrategyError as exc:
        return None, [v for v in exc.violations if v.severity == "error"]
    return s, [v for v in s.check(wl.model, seq_len=wl.seq_len) if v.severity == "error"]


def pin_errors(wl: Workload, space: SearchSpace, world: int | None = None) -> list[Violation]:
    """The hard rules the pinned degrees break on every device count: every way the planner
    could run them (:func:`_pin_variants`) breaks a rule checked without a world (model,
    sequence); the first way's errors, their fixes verified on ``world`` devices where the
    rules can (:func:`rules.check`'s ``verify_hints``).  Empty when one way is fine, or when
    a virtual pipeline is pinned without the pipeline it needs a world to choose."""
    pins = _pins(space)
    if not pins or ("vpp" in pins and "pp" not in pins):
        return []
    first: tuple[Strategy | None, list[Violation]] | None = None
    for kw in _pin_variants(wl.model, pins):
        s, errors = _variant_errors(kw, wl)
        if not errors:
            return []
        first = first or (s, errors)
    if first is None:
        return []
    s, errors = first
    if s is None:
        return errors
    kw = {"world_size": world, "seq_len": wl.seq_len, "verify_hints": True}
    hinted = {v.rule: v for v in s.check(wl.model, **kw)}
    return [hinted.get(v.rule, v) for v in errors]


def _yields_plan(run: Run, cluster: Cluster, wl: Workload) -> bool:
    """Whether planning ``wl`` on ``cluster`` gives at least one candidate (a suggestion
    tried before it is made)."""
    try:
        return bool(run(cluster, wl).candidates)
    except (StrategyError, SpecError, UsageError):
        return False


def _world_trials(world: int, step: int, gbs: int) -> list[int]:
    """Device counts worth trying instead of ``world``: multiples of the pinned ``step``
    within 64 of it (at most :data:`MAX_DEVICES`) whose data-parallel split of ``gbs`` can
    work, nearest first."""
    low = max(step, world - 64 - (world - 64) % step)
    near = [
        w
        for w in range(low, min(world + 65, MAX_DEVICES + 1), step)
        if w != world and (gbs % w == 0 or (w % 8 == 0 and gbs % 8 == 0))
    ]
    return sorted(near, key=lambda w: (abs(w - world), w))


def _no_legal_message(cluster: Cluster, wl: Workload, space: SearchSpace, run: Run) -> str:
    """Nothing is legal on this device count: the rules the pins break on every count, else
    the device counts and batch size that, tried, give a plan."""
    world, gbs = cluster.num_devices, wl.needs_global_batch("plan")
    head = (
        f"no legal strategy for {wl.model.name} on {world} devices with seq_len="
        f"{wl.seq_len} and global_batch_size={gbs} (with the pins/bounds given): "
    )
    broken = pin_errors(wl, space, world)
    if broken:
        rules_text = "; ".join(f"[{v.rule}] {v.message} (fix: {v.hint})" for v in broken)
        return f"{head}the pinned degrees break a rule on every device count: {rules_text}"
    trials = _world_trials(world, pinned_step(space), gbs)
    worlds = accepted_counts(trials, lambda w: _yields_plan(run, cluster.with_devices(w), wl))
    hints = [f"try {', '.join(map(str, sorted(worlds)))} devices"] if worlds else []
    suggested = max(1, gbs // world) * world
    if suggested != gbs and _yields_plan(run, cluster, replace(wl, global_batch_size=suggested)):
        hints.append(
            f"or a global batch size divisible by the data-parallel degree (e.g. {suggested})"
        )
    if not hints:
        tried = ", ".join(map(str, sorted(trials[:MAX_TRIALS]))) or "none"
        hints.append(
            f"no nearby device count gives a plan either (tried {tried}); relax the pinned "
            "degrees or bounds"
        )
    return head + "; ".join(hints)


def _batch_message(world: int, wl: Workload, space: SearchSpace, gbs: int) -> str:
    """Legal strategies exist but the global batch splits into none of the micro-batch sizes
    over their data-parallel degrees (a multiple of ``pp`` micro-batches when interleaved)."""
    sizes = list(space.micro_batch_sizes)
    fix = (
        "a micro-batch size of 1"
        if 1 not in sizes
        else f"a global batch size divisible by the data-parallel degree (e.g. {world * 8})"
    )
    return (
        f"global_batch_size={gbs} does not split into micro-batches of "
        f"{', '.join(map(str, sizes))} over the data-parallel degree of any legal strategy for "
        f"{wl.model.name} on {world} devices (gbs = micro-batch size x DP x micro-batches, a "
        f"multiple of pp with interleaving); use {fix}"
    )


def nothing_fits_message(
    cluster: Cluster, wl: Workload, sw: Switches, space: SearchSpace, result: Plan, run: Run
) -> str:
    """Say why nothing came back and what would work instead (``run``: how a device count or
    batch is tried before it is named)."""
    world, model = cluster.num_devices, wl.model
    gbs = wl.needs_global_batch("plan")
    if result.enumerated == 0 and result.memory_pruned == 0:
        return _no_legal_message(cluster, wl, space, run)
    if result.enumerated and not result.bounded:
        return _batch_message(world, wl, space, gbs)
    # legal strategies exist but none fits: look for a device count that would
    cap = cluster.memory_bytes
    for factor in (2, 4, 8, 16):
        if world * factor > MAX_DEVICES:
            break
        try:
            trial = run(cluster.with_devices(world * factor), wl)
        except (StrategyError, SpecError, UsageError):
            continue
        if trial.candidates:
            # the fastest that leaves some headroom, when one does: the fix should run
            roomy = [x for x in trial.ranked if x.memory.peak_bytes <= TIGHT_MEMORY * cap]
            c, why = (roomy or [trial.best])[0], graphs_note(wl, sw, space)
            return (
                f"no strategy for {model.name} fits in {cluster.accel.name} memory "
                f"({capacity_gib(cap)}) on {world} devices at seq_len="
                f"{wl.seq_len}, even with {space.modes[-1]} recompute{why}; "
                f"{world * factor} devices would fit, e.g. {c.strategy} mbs{c.micro_batch_size} "
                f"{c.recompute} (peak {c.memory.peak_bytes / GiB:.1f} GiB"
                f"{'' if roomy else ', little headroom'})"
            )
    return (
        f"no strategy for {model.name} fits in {cluster.accel.name} memory "
        f"({capacity_gib(cap)}) on {world} devices, nor on up to {16 * world}; use a shorter "
        "sequence, an accelerator with more memory, or more devices"
    )
