"""Human reasons: what limits a candidate, why it beats the next, and how the plan departs
from the seed guide's starting point."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import SpecError, StrategyError, UsageError
from ..estimate.fsdp import ShardGroups
from ..estimate.memory import capacity_left, memory_of
from ..estimate.step import StepModel, StepReport, validate_strategy
from ..estimate.track_record import track_record
from ..spec.hardware import GiB
from ..spec.workload import Switches, Workload, resolve
from ..strategy import Strategy
from .advice import SwitchAdvice, switch_advice
from .price import price
from .published import same_job_lines
from .ranking import RANK_TIE, VPP_TIE, model_parallel_sizes, tie_criterion
from .sensitivity import (
    RankingCheck,
    Sensitivity,
    ranking_check,
    sensitivity,
    sensitivity_lines,
    step_cost,
)

if TYPE_CHECKING:
    from ..spec.cluster import Cluster
    from .result import Candidate, Plan

#: Readable names of the step-time terms.
TERM_NAMES = {
    "compute": "compute",
    "recompute": "recompute",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "tp_exposed": "exposed TP comm",
    "cp_exposed": "exposed CP comm",
    "ep_exposed": "exposed EP all-to-all",
    "pp_exposed": "exposed PP send/recv",
    "dp_exposed": "exposed DP grad/param sync",
    "host_exposed": "host-bound time (eager kernel launches, MoE token-count sync)",
}


def overheads(step: StepReport) -> list[tuple[str, float]]:
    """Non-compute terms of a step as (name, seconds), largest first."""
    terms = [
        (k, v) for k, v in step.breakdown.items() if k in TERM_NAMES and k != "compute" and v > 0
    ]
    return sorted(terms, key=lambda kv: -kv[1])


def limiter(step: StepReport) -> str:
    """``"compute-bound (81%); largest overhead: exposed EP all-to-all 12%"``."""
    total = step.step_time_s
    share = step.breakdown.get("compute", 0.0) / total if total else 0.0
    over = overheads(step)
    head = f"compute {share:.0%} of the step"
    if over:
        name, sec = over[0]
        head += f"; largest overhead: {TERM_NAMES[name]} {sec / total:.0%}"
    return head


def difference(a: StepReport, b: StepReport) -> str:
    """The term that most explains why ``a`` is faster than ``b``."""
    keys = [k for k in TERM_NAMES]
    deltas = sorted(
        ((b.breakdown.get(k, 0.0) - a.breakdown.get(k, 0.0), k) for k in keys), reverse=True
    )
    gain, key = deltas[0]
    if gain <= 0:
        return "about the same on every term"
    return f"{TERM_NAMES[key]} {gain * 1e3:.0f} ms lower"


def _rel(a: StepReport, b: StepReport) -> float:
    """How much longer step ``a`` is than step ``b`` (a fraction)."""
    return a.step_time_s / b.step_time_s - 1


def _pipeline_label(s: Strategy) -> str:
    """``PP8(VP4)[+emb+loss] CP2(U)``: the pipeline and CP parts of a strategy's name."""
    return " ".join(part for part in str(s).split() if part.startswith(("PP", "CP")))


#: Share of device memory above which a candidate's reason says its headroom is small (a
#: presentation threshold, not a fit rule: the plan keeps every candidate that fits).
TIGHT_MEMORY = 0.95


def capacity_gib(capacity: float) -> str:
    """``79.6 GiB``: a device's memory as every planner text states it, to the tenth of a GiB
    (the figure the fit check and the percentages use: :attr:`Cluster.memory_bytes`, the
    accelerator's ``usable_memory_bytes`` where measured, so an "80 GB" H100 reads 79.6)."""
    return f"{capacity / GiB:.1f} GiB"


def _tight(peak: float, capacity: float) -> str:
    """ ", little headroom: ..." when ``peak`` is above :data:`TIGHT_MEMORY` of ``capacity``."""
    if peak <= TIGHT_MEMORY * capacity:
        return ""
    return (
        f", little headroom: {peak / capacity:.1%} of device memory, so an estimate a few "
        f"percent low would not fit; --headroom {1 - TIGHT_MEMORY:.2f} (headroom="
        f"{1 - TIGHT_MEMORY:.2f} in Python) plans below {TIGHT_MEMORY:.0%}"
    )


def _tie_reason(c: Candidate, nxt: Candidate) -> str:
    """Why tied ``c`` is ranked above ``nxt``, in words (:func:`.ranking.tie_criterion`)."""
    (mp, ep), (nmp, nep) = model_parallel_sizes(c), model_parallel_sizes(nxt)
    mine = c.step.exposed_comm_s / c.step.step_time_s
    theirs = nxt.step.exposed_comm_s / nxt.step.step_time_s
    more_dp = "more devices on data parallelism"
    return {
        "offload": "no CPU activation offloading",
        "model": f"less model parallelism (TPxCPxPP {mp} vs {nmp}: {more_dp})",
        "experts": f"less model parallelism (EPxETP {ep} vs {nep}: {more_dp})",
        "exposure": f"less exposed communication ({mine:.1%} vs {theirs:.1%} of the step)",
        "memory": "lower peak memory",
        "step": "shorter step",
        None: "the tie rule among the candidates ahead of it",
    }[tie_criterion(c, nxt)]


#: Near-equal variants a reason names; the rest are counted (``Candidate.alternatives`` and
#: the JSON keep every one).
VARIANTS_NAMED = 5


def _variants(c: Candidate) -> str:
    """The near-equal variants of ``c``'s layout, the :data:`VARIANTS_NAMED` nearest in step
    time named with their step relative to ``c`` (negative where faster)."""
    nearest = sorted(c.alternatives, key=lambda a: abs(_rel(a.step, c.step)))
    named = ", ".join(
        f"{_pipeline_label(a.strategy)} {round(_rel(a.step, c.step), 4) + 0.0:+.2%}"
        for a in nearest[:VARIANTS_NAMED]
    )
    more = len(nearest) - VARIANTS_NAMED
    return f"near-equal variants of this layout (within {VPP_TIE:.0%}): {named}" + (
        f" and {more} more" if more > 0 else ""
    )


def annotate(ranked: list[Candidate], cluster: Cluster) -> None:
    """Fill each candidate's ``why``: its limiter, memory, and its edge over the next one."""
    cap = cluster.memory_bytes
    for i, c in enumerate(ranked):
        parts = [
            limiter(c.step),
            f"peak memory {c.memory.peak_bytes / GiB:.1f} of {capacity_gib(cap)} "
            f"({c.recompute} recompute){_tight(c.memory.peak_bytes, cap)}",
        ]
        if c.alternatives:
            parts.append(_variants(c))
        if i + 1 < len(ranked):
            nxt = ranked[i + 1]
            gain = nxt.step.step_time_s / c.step.step_time_s - 1
            if abs(gain) < RANK_TIE:
                reason = _tie_reason(c, nxt)
                parts.append(
                    f"tied with #{i + 2} ({nxt.label()}, {gain:+.1%}, within the "
                    f"model's {RANK_TIE:.0%} resolution): ranked first for {reason}"
                )
            else:
                parts.append(
                    f"{gain:.1%} faster than #{i + 2} ({nxt.label()}): "
                    f"{difference(c.step, nxt.step)}"
                )
        c.why = "; ".join(parts)


def explain_plan(plan: Plan, render: Callable[[dict[str, Any]], str] | None = None) -> str:
    """Seed heuristic vs the chosen strategy, term by term, as plain text, after the switches
    that would shorten the choice's step (:func:`choice_advice`; ``render`` as
    :func:`explain_strategy`'s)."""
    best = plan.best
    lines = [
        f"{plan.model.name} on {plan.num_devices} x {plan.cluster.accel.name}, seq "
        f"{plan.seq_len}, global batch {plan.global_batch_size}, {plan.precision}",
        f"choice: {best.label()}  ->  {best.step.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
        f"{best.step.tflops_per_gpu:.0f} TFLOP/s/GPU (MFU {best.step.mfu:.1%}), step "
        f"{best.step.step_time_s:.2f} s",
        f"  why: {best.why}",
    ]
    if plan.track_record is not None:
        lines.append(f"  record: {plan.track_record.summary()}")
    lines += [f"  {b.summary()}" for b in plan.published()]
    lines += sensitivity_lines(choice_sensitivity(plan), "  ")
    robust = choice_robustness(plan)
    if robust is not None and robust.lead > RANK_TIE:  # a tie is explained in "why"
        lines.append(f"  robustness: {robust.summary('#1', '#2')}")
    if plan.search.fsdp:
        lines.append(f"  fsdp: {fsdp_verdict(plan)}")
    advice = choice_advice(plan)
    if advice:
        shown = ", ".join(f"{(render or python_keywords)(a.change)} -{a.gain:.1%}" for a in advice)
        lines.append(f"  switches that would shorten it: {shown} (plan again with them)")
    heur = plan.heuristic
    if heur is None:
        return "\n".join(lines)
    lines.append(
        "seed guide's starting point: " + (str(heur.strategy) if heur.strategy else "none legal")
    )
    lines += [f"  - {r}" for r in heur.reasons]
    if heur.strategy is None:
        return "\n".join(lines)
    rank = plan.find(heur.strategy)
    if rank is not None:
        c = plan.ranked[rank] if plan.ranked else plan.candidates[rank]
        lines.append(
            f"  the planner ranks it #{rank + 1} ({c.label()}, "
            f"{c.step.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)"
        )
    # price the seed strategy with the best micro-batch / recompute that fits
    seed = _price(plan, heur.strategy)
    if seed is None:
        lines.append(f"  {_seed_failure(plan, heur.strategy)}")
        return "\n".join(lines)
    step, mbs, mode, peak = seed
    ratio = best.step.tokens_per_s_per_gpu / step.tokens_per_s_per_gpu
    lines.append(
        f"  as priced: mbs{mbs} {mode} -> {step.tokens_per_s_per_gpu:,.0f} "
        f"tokens/s/GPU, peak {peak / GiB:.1f} GiB; the choice is {ratio:.2f}x"
    )
    if ratio > 1.0005:
        lines.append(
            "  where the cost model departs from the guide (seconds per step, seed -> choice):"
        )
        for key, name in TERM_NAMES.items():
            a, b = step.breakdown.get(key, 0.0), best.step.breakdown.get(key, 0.0)
            if abs(a - b) > 0.005 * step.step_time_s:
                lines.append(f"    {name:<28} {a:8.3f} -> {b:8.3f}")
    return "\n".join(lines)


def _pipeline_cost(c: Candidate) -> float:
    """Seconds of pipeline bubble plus exposed PP send/recv in a candidate's step."""
    return c.step.breakdown.get("bubble", 0.0) + c.step.breakdown.get("pp_exposed", 0.0)


def _shard_where(c: Candidate, cluster: Cluster) -> str:
    """``"8 GPUs (inside the scale-up domain)"``: an FSDP candidate's shard group."""
    s = c.strategy
    groups = ShardGroups.of_strategy(s, s.dp or 1)
    span = cluster.span(groups.shard, groups.shard_stride)
    where = "inside the scale-up domain" if span == "intra" else "across nodes"
    hsdp = f", {groups.replicate} replicas" if groups.replicate > 1 else ""
    return f"{groups.shard} GPUs ({where}{hsdp})"


def fsdp_verdict(plan: Plan) -> str:
    """Why the plan's choice uses FSDP or not: its best FSDP candidate against its best
    unsharded one (pipeline bubble saved vs exposed FSDP communication), or why no FSDP
    candidate made the ranking (it does not fit, or is slower)."""
    ranked = plan.ranked or plan.candidates
    fs = next((c for c in ranked if c.strategy.fsdp is not None), None)
    plain = next((c for c in ranked if c.strategy.fsdp is None), None)
    if fs is None:
        return _no_fsdp(plan, plain)
    comm = fs.step.breakdown.get("dp", 0.0)
    exposed = fs.step.breakdown.get("dp_exposed", 0.0)
    head = f"{fs.label()}: FSDP over {_shard_where(fs, plan.cluster)} at pp={fs.strategy.pp}"
    if plain is None:
        return f"{head}; no unsharded strategy made the ranking (none fits or all are slower)"
    gain = plain.step.step_time_s / fs.step.step_time_s - 1
    saved = _pipeline_cost(plain) - _pipeline_cost(fs)
    if ranked.index(fs) < ranked.index(plain):
        edge = (
            f"{gain:.1%} faster than"
            if gain >= RANK_TIE
            else f"tied ({gain:+.1%}, within the model's {RANK_TIE:.0%} resolution) and ranked "
            "ahead of"
        )
        trade = (
            f"saves {saved:.2f} s of pipeline bubble and PP send/recv for {exposed:.2f} s of "
            "exposed FSDP communication"
            if saved > 0.005 * fs.step.step_time_s
            else f"{difference(fs.step, plain.step)}, for {exposed:.2f} s of exposed FSDP "
            "communication"
        )
        return f"FSDP chosen, {edge} the best unsharded strategy ({plain.label()}). {head}: {trade}"
    m = fs.step.micro_batches
    why = (
        f"it gathers every layer each micro-batch: {m} x (AG fwd + AG bwd + RS) = "
        f"{comm:.2f} s of FSDP communication, {exposed:.2f} s exposed, more than the "
        f"{saved:.2f} s of bubble and PP send/recv it saves"
        if fs.strategy.fsdp == "optim_grads_params" and saved < exposed
        else "the unsharded strategy's " + difference(plain.step, fs.step)
    )
    loss = 1 - fs.step.tokens_per_s_per_gpu / plain.step.tokens_per_s_per_gpu
    return f"FSDP not chosen: {head} is {loss:.1%} slower than {plain.label()}; {why}"


def _no_fsdp(plan: Plan, plain: Candidate | None) -> str:
    """No FSDP candidate ranked: price full sharding at pp=1 beside the best unsharded one."""
    if plain is None:
        return "no candidate ranked"
    s = plain.strategy
    world = plan.num_devices or plan.cluster.num_devices
    dp = world // (s.tp * s.cp)
    try:
        probe = Strategy(
            tp=s.tp, cp=s.cp, ep=s.ep, etp=s.etp, sp=s.sp, fsdp="optim_grads_params", dp_shard=dp
        ).with_world_size(world)
    except StrategyError:
        return f"no FSDP strategy ranked; TP{s.tp} CP{s.cp} at pp=1 breaks a rule"
    priced = _price(plan, probe)
    if priced is None:
        wl = plan.workload or Workload(model=plan.model, seq_len=plan.seq_len)
        try:
            mem = memory_of(wl.with_micro_batch(1), probe, plan.switches.with_recompute("full"))
        except (StrategyError, UsageError, SpecError) as exc:
            return f"no FSDP strategy ranked; {probe} is not legal here ({exc})"
        st = mem.peak_stage
        kept = (st.weights + st.gradients + st.optimizer + st.working) / GiB
        return (
            f"FSDP does not fit: {probe} needs {mem.peak_bytes / GiB:.1f} GiB per GPU even "
            f"with full recompute (weights, gradients, optimizer and gathered layers "
            f"{kept:.1f} GiB) > {capacity_gib(plan.cluster.memory_bytes)}"
        )
    step, mbs, mode, _peak = priced
    return (
        f"FSDP is slower: {probe} mbs{mbs} {mode} gives {step.tokens_per_s_per_gpu:,.0f} "
        f"tokens/s/GPU vs {plain.step.tokens_per_s_per_gpu:,.0f} for {plain.label()}"
    )


def _workload(plan: Plan) -> Workload:
    """The workload ``plan`` was made for (built from its fields for an older Plan)."""
    return plan.workload or Workload(
        model=plan.model,
        seq_len=plan.seq_len,
        global_batch_size=plan.global_batch_size,
        precision=plan.precision,
    )


def _seed_failure(plan: Plan, strategy: Strategy) -> str:
    """Why a strategy has no price in ``plan``: the rules it breaks at every micro-batch (as
    at micro-batch 1), else its smallest peak memory against the device."""
    try:
        validate_strategy(
            plan.model, strategy, plan.num_devices, plan.seq_len, plan.global_batch_size, 1
        )
    except StrategyError as exc:
        first = exc.violations[0]
        return f"it breaks {', '.join(exc.rules)}: {first.message} (fix: {first.hint})"
    wl = _workload(plan)
    least = "selective" if plan.model.is_hybrid else "full"  # MambaStack has no full recompute
    try:
        mem = memory_of(wl.with_micro_batch(1), strategy, plan.switches.with_recompute(least))
    except (StrategyError, UsageError, SpecError) as exc:
        return f"it cannot be priced: {exc}"
    capacity = plan.cluster.accel.memory_bytes  # what MemoryReport.fits compares with
    return (
        "it does not fit in memory with any micro-batch and recompute mode the planner tries "
        f"({least} recompute at micro-batch 1: peak {mem.peak_bytes / GiB:.1f} of "
        f"{capacity_gib(capacity)})"
    )


def _price(plan: Plan, strategy: Strategy) -> tuple[StepReport, int, str, float] | None:
    """Best (step, mbs, recompute, peak) of ``strategy`` that fits, or None, priced with the
    plan's own workload and switches so the seed and the choice compare alike."""
    wl = _workload(plan)
    steps = StepModel(plan.cluster, wl, plan.switches)
    best = None
    for mbs in (1, 2, 4, 8):
        try:
            validate_strategy(
                plan.model, strategy, plan.num_devices, plan.seq_len, plan.global_batch_size, mbs
            )
        except StrategyError:
            continue
        for mode in ("none", "selective", "full"):
            try:
                mem = memory_of(
                    wl.with_micro_batch(mbs), strategy, plan.switches.with_recompute(mode)
                )
            except (StrategyError, UsageError, SpecError):
                break
            if not mem.fits(plan.cluster.accel):
                continue
            step = steps.price(strategy, micro_batch_size=mbs, recompute=mode)
            if best is None or step.step_time_s < best[0].step_time_s:
                best = (step, mbs, mode, mem.peak_bytes)
            break
    return best


def explain_strategy(
    model: Any,
    strategy: Strategy,
    cluster: Cluster,
    switches: Switches | None = None,
    *,
    workload: Workload | None = None,
    render: Callable[[dict[str, Any]], str] | None = None,
    headroom: float | None = None,
    **options: Any,
) -> str:
    """Memory per stage and the step-time breakdown of one given strategy, as text, and the
    implementation switches that would shorten its step (:func:`.advice.switch_advice`);
    ``headroom`` (a fraction of device memory kept free): the memory line's verdict is the
    fit below what it leaves, as ``plan(headroom=...)`` judges.

    Typed form: ``explain_strategy(workload, strategy, cluster, switches)``; the keyword form
    (``model, strategy, cluster, seq_len=..., global_batch_size=...`` and any
    :class:`~parastrat.spec.workload.Switches` field) builds them.  ``render`` writes a switch
    change (``{"tp_comm_overlap": True}``) as the caller spells it (default: Python keywords,
    ``tp_comm_overlap=True``; the CLI passes its flags).
    """
    wl, sw = resolve(model, workload, switches, who="explain_strategy", **options)
    s, step, mem = price(wl, strategy, cluster, sw)
    total = step.step_time_s
    lines = [
        f"{mem.model} | {s} | mbs {mem.micro_batch_size} | {step.recompute} recompute | "
        f"{_precision_label(step)} on {cluster.num_devices} x {cluster.accel.name}",
        f"step {total:.3f} s, {step.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
        f"{step.tflops_per_gpu:.0f} TFLOP/s/GPU, MFU {step.mfu:.1%}, "
        f"{step.micro_batches} micro-batches",
        f"limiter: {limiter(step)}",
        *(f"record: {r}" for r in _record(wl.model, cluster.accel)),
        "step time (s):",
    ]
    for key, value in step.breakdown.items():
        if value > 0:
            lines.append(f"  {key:<12} {value:9.4f}  {value / total:6.1%}")
    if step.kinds:  # a hybrid model: the slowest stage's compute by layer kind
        lines.append("compute by layer kind (s):")
        for key, value in step.kinds.items():
            lines.append(f"  {key:<12} {value:9.4f}  {value / total:6.1%}")
    lines.append(_memory_line(mem, cluster, headroom))
    lines += [f"note: {n}" for n in step.notes]
    lines += same_job_lines(wl, cluster, s, step)
    lines += _advice_lines(switch_advice(wl, s, cluster, sw), render or python_keywords)
    lines += sensitivity_lines(sensitivity(wl, s, cluster, sw))
    return "\n".join(lines)


def _memory_line(mem: Any, cluster: Cluster, headroom: float | None) -> str:
    """ "memory: peak X GiB of Y GiB (fits)", with ``headroom`` judged below what it leaves."""
    fits = "fits" if mem.fits(cluster.accel, headroom=headroom or 0.0) else "DOES NOT FIT"
    kept = ""
    if headroom:
        left = capacity_left(cluster.accel, headroom) / GiB
        kept = f", {left:.1f} GiB with {headroom:.0%} kept free"
    return (
        f"memory: peak {mem.peak_bytes / GiB:.1f} GiB of "
        f"{capacity_gib(cluster.memory_bytes)}{kept} ({fits})"
    )


def _record(model: Any, accel: Any) -> list[str]:
    """The model's track record on published runs of this model's class on ``accel``
    (:func:`~parastrat.estimate.track_record.track_record`), as one line, or none."""
    rec = track_record(model, accel)
    return [rec.summary()] if rec is not None else []


def choice_advice(plan: Plan) -> list[SwitchAdvice]:
    """:func:`.advice.switch_advice` of the plan's choice, with its micro-batch, recompute and
    switches (none when the plan has no workload, as a hand-built one)."""
    choice = plan.priced_as(plan.best)
    return switch_advice(*choice) if choice is not None else []


def choice_sensitivity(plan: Plan) -> list[Sensitivity]:
    """:func:`.sensitivity.sensitivity` of the plan's choice, priced as
    :func:`choice_advice` prices it (none for a hand-built plan)."""
    choice = plan.priced_as(plan.best)
    return sensitivity(*choice) if choice is not None else []


def choice_robustness(plan: Plan) -> RankingCheck | None:
    """:func:`.sensitivity.ranking_check` of the plan's second candidate against its choice:
    whether the order survives each physical constant 10 % off (None with one candidate or a
    hand-built plan)."""
    if len(plan.candidates) < 2:
        return None
    first, second = (plan.priced_as(c) for c in plan.candidates[:2])
    if first is None or second is None:
        return None
    costs = [step_cost(wl, s, sw) for wl, s, _c, sw in (first, second)]
    return ranking_check(costs[0], costs[1], plan.cluster)


def python_keywords(change: dict[str, Any]) -> str:
    """A switch change as Python keywords: ``cuda_graphs=('attn', 'mlp')``."""
    return ", ".join(
        f"{k}={tuple(sorted(v)) if isinstance(v, frozenset) else v!r}" for k, v in change.items()
    )


def _advice_lines(advice: list[SwitchAdvice], render: Callable[[dict[str, Any]], str]) -> list[str]:
    """The text lines of :func:`.advice.switch_advice`'s result (none when it is empty)."""
    if not advice:
        return []
    lines = ["switches that would shorten this step (each alone, same model):"]
    for a in advice:
        lines.append(
            f"  {render(a.change)}: step {a.step.step_time_s:.3f} s (-{a.gain:.1%}), "
            f"{a.step.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
        )
    return lines


def _precision_label(step: StepReport) -> str:
    """The precision, with its FP8 scaling recipe when that is not FP8's default (current)."""
    if step.precision == "fp8" and step.fp8_recipe not in (None, "current"):
        return f"fp8 ({step.fp8_recipe} scaling)"
    return step.precision
