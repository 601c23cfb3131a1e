"""Every rule a strategy must satisfy, written once (``shared/reference/constraints.md``).

Each function returns a list of :class:`~parastrat.errors.Violation` — never raises — so the
caller can report *all* broken rules together.  Hard rules have severity "error" (the frameworks
would refuse or crash); soft rules are "warning" (heuristics the planner may break, and says
why).  Rule ids are stable and documented in ``docs/troubleshooting.md``.

``model`` is duck-typed: anything with the Megatron-named attributes ``num_attention_heads``,
``num_query_groups`` (None means MHA), ``num_layers`` and ``num_moe_experts`` works (a
:class:`~parastrat.spec.model.ModelSpec`, a DiT spec, a view of a Megatron config).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .checks import MAX_DEVICES, divisors, fmt_set, is_count, lcm
from .errors import SpecError, StrategyError, Violation
from .grid import expert_dp, training_grid

if TYPE_CHECKING:
    from .strategy import Strategy

TRAINING_ORDER_NAMES = ("tp", "cp", "ep", "dp", "pp")
#: Megatron FSDP's sharding levels (``ddp.data_parallel_sharding_strategy``), least first:
#: DDP, ZeRO-1, -2, -3.  A Strategy stores ``"no_shard"`` as ``None`` (today's behaviour: DDP or
#: the distributed optimizer).
FSDP_LEVELS = ("no_shard", "optim", "optim_grads", "optim_grads_params")
#: Other names for the levels (ZeRO stages, FSDP wording), so an error can name the Megatron one.
FSDP_ALIASES = {
    "none": "no_shard",
    "ddp": "no_shard",
    "zero1": "optim",
    "zero-1": "optim",
    "zero2": "optim_grads",
    "zero-2": "optim_grads",
    "zero3": "optim_grads_params",
    "zero-3": "optim_grads_params",
    "full": "optim_grads_params",
    "fsdp": "optim_grads_params",
    "full_shard": "optim_grads_params",
}
#: Bridge's ``use_tp_pp_dp_mapping`` order, which Megatron FSDP refuses.
_TP_PP_DP_ORDER = "tp-cp-ep-pp-dp"
INFERENCE_ORDER_NAMES = ("tp", "sp", "pp", "cfg", "dp")


def _err(rule: str, message: str, hint: str) -> Violation:
    return Violation(rule, message, hint, "error")


def _warn(rule: str, message: str, hint: str) -> Violation:
    return Violation(rule, message, hint, "warning")


# ---------------------------------------------------------------------------------------------
# Rules that need nothing but the strategy (checked at construction).
# ---------------------------------------------------------------------------------------------
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
        _err(
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
            _err(
                "sp-needs-tp",
                "sequence parallelism (sp=True) needs tp > 1; tp=1",
                "set tp >= 2 (SP shards activations over the TP group) or sp=False",
            )
        )
    if s.vpp > 1 and s.pp == 1:
        out.append(
            _err(
                "vpp-needs-pp",
                f"vpp={s.vpp} (virtual pipeline) needs pp > 1; pp=1",
                "set pp >= 2 with vpp, or vpp=1",
            )
        )
    if s.uneven and s.pp == 1:
        out.append(
            _err(
                "uneven-needs-pp",
                "first/last pipeline stage layer counts need pp > 1; pp=1",
                "set pp >= 2, or drop first_stage_layers/last_stage_layers",
            )
        )
    if (s.account_for_embedding or s.account_for_loss) and (
        s.first_stage_layers is not None or s.last_stage_layers is not None
    ):
        out.append(
            _err(
                "uneven-conflict",
                "first/last stage layer counts cannot be combined with "
                "account_for_embedding/account_for_loss (Megatron refuses both)",
                "use one way to balance the pipeline",
            )
        )
    return out


def _inference_violations(s: Strategy) -> list[Violation]:
    """Training-only degrees on an inference order."""
    out = (
        [
            _err(
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
            _err(
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
        _err(
            "cfg-training",
            f"cfg={s.cfg} with training order {s.order!r}: CFG parallelism is "
            "for diffusion inference",
            "use cfg=1 for training, or order='tp-sp-pp-cfg-dp' for inference",
        )
    ]


# ---------------------------------------------------------------------------------------------
# Data-parallel sharding (Megatron FSDP in Bridge, FSDP2 / HSDP in torchtitan).
# ---------------------------------------------------------------------------------------------
def fsdp_value_violations(fsdp: Any) -> list[Violation]:
    """Is ``fsdp`` one of Megatron's sharding levels (or None)?"""
    if fsdp is None or (isinstance(fsdp, str) and fsdp in FSDP_LEVELS):
        return []
    alias = FSDP_ALIASES.get(fsdp.strip().lower()) if isinstance(fsdp, str) else None
    return [
        _err(
            "fsdp-unknown",
            f"fsdp={fsdp!r} is not a Megatron FSDP sharding level",
            f"use fsdp={alias!r}"
            if alias
            else "use fsdp=None (no sharding) or one of "
            + ", ".join(repr(x) for x in FSDP_LEVELS[1:]),
        )
    ]


def fsdp_structural_violations(s: Strategy) -> list[Violation]:
    """Sharding rules that need only the strategy: inference has none, and Megatron FSDP
    refuses Bridge's ``use_tp_pp_dp_mapping`` order (``ConfigContainer.validate``)."""
    out: list[Violation] = []
    sharded = s.fsdp is not None or s.dp_shard is not None or s.dp_replicate > 1
    if not sharded:
        return out
    if s.is_inference:
        out.append(
            _err(
                "fsdp-inference",
                "dp_shard/dp_replicate/fsdp describe training data parallelism; the inference "
                f"order {s.order!r} replicates the model over dp",
                "drop dp_shard, dp_replicate and fsdp for inference",
            )
        )
    if s.fsdp is not None and s.order == _TP_PP_DP_ORDER:
        out.append(
            _err(
                "fsdp-order",
                f"fsdp={s.fsdp!r} with order {s.order!r}: Megatron Bridge refuses "
                "use_tp_pp_dp_mapping with Megatron FSDP",
                "use the default order 'tp-cp-ep-dp-pp' with FSDP",
            )
        )
    return out


def fsdp_world_violations(s: Strategy, dp: int, edp: int) -> list[Violation]:
    """dp_shard x dp_replicate against dp (torchtitan's ParallelDims: their product times
    cp*tp*pp is the world) and dp_replicate against the expert data-parallel group (Megatron
    builds one optimizer instance per replica: ``num_distributed_optimizer_instances`` must
    divide dp*cp and the expert dp)."""
    out: list[Violation] = []
    r = s.dp_replicate
    if s.dp_shard is not None and s.dp_shard * r != dp:
        out.append(
            _err(
                "dp-shard-world",
                f"dp_shard={s.dp_shard} x dp_replicate={r} = {s.dp_shard * r} but the world "
                f"leaves dp={dp}",
                f"use dp_shard={dp // r} (or -1, the rest of dp)"
                if dp % r == 0
                else f"use dp_replicate in {fmt_set(divisors(dp))} and dp_shard=-1",
            )
        )
    elif dp % r:
        out.append(
            _err(
                "dp-replicate-world",
                f"dp_replicate={r} does not divide dp={dp}",
                f"use dp_replicate in {fmt_set(divisors(dp))}",
            )
        )
    if r > 1 and dp % r == 0 and edp % r:
        out.append(
            _err(
                "dp-replicate-expert",
                f"dp_replicate={r} does not divide the expert data-parallel size {edp} "
                "(Megatron's num_distributed_optimizer_instances must divide it)",
                f"use dp_replicate in {fmt_set(divisors(math.gcd(dp, edp)))}",
            )
        )
    return out


def fsdp_soft_violations(s: Strategy, dp: int) -> list[Violation]:
    """FSDP that has nothing to shard over (a shard group of one rank)."""
    shard = dp // s.dp_replicate * s.cp
    if s.fsdp is None or shard > 1:
        return []
    return [
        _warn(
            "fsdp-nothing-to-shard",
            f"fsdp={s.fsdp!r} but the shard group dp_shard*cp = {shard} rank: nothing is "
            "sharded, only gathered",
            "use fsdp=None, or give the shard axis more ranks (dp_shard > 1)",
        )
    ]


# ---------------------------------------------------------------------------------------------
# World size.
# ---------------------------------------------------------------------------------------------
def _fitting_worlds(s: Strategy, world: int) -> str:
    """``use W devices``: the world sizes nearest ``world`` that fit, within the device bound
    (:data:`~parastrat.checks.MAX_DEVICES`); smaller degrees when none does."""
    step = s.min_world_size
    lower = (world // step) * step
    options = [w for w in (lower, lower + step) if 0 < w <= MAX_DEVICES]
    if not options:  # no cluster parastrat takes is that large
        return f"use smaller degrees (no world of at most {MAX_DEVICES:,} devices fits)"
    return "use " + " or ".join(str(w) for w in options) + " devices"


def world_violations(s: Strategy, world: int) -> list[Violation]:
    """Does the world size fit the grids (dense and expert, or the inference grid)?"""
    if s.is_inference:
        out = _inference_world_violations(s, world)
    else:
        out = _training_world_violations(s, world)
    if s.dp is not None and s.world_size != world:
        out.append(
            _err(
                "dp-world",
                f"dp={s.dp} gives {s.world_size} ranks, not the world size {world}",
                f"drop dp (it follows from the world size) or use world {s.world_size}",
            )
        )
    return out


def _inference_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world against the xDiT grid's model-parallel unit."""
    unit = s.tp * s.ulysses * s.ring * s.cfg * s.pp
    if world % unit == 0:
        return []
    return [
        _err(
            "world-inference",
            f"world size {world} is not a multiple of tp*ulysses*ring*cfg*pp = "
            f"{s.tp}*{s.ulysses}*{s.ring}*{s.cfg}*{s.pp} = {unit}",
            f"{_fitting_worlds(s, world)}, or degrees whose product divides {world}",
        )
    ]


def _training_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world against the dense and expert grids; when both fit, the sharding degrees and
    the pipeline groups of the two grids."""
    out = _grid_world_violations(s, world)
    if not out:
        dp, edp = world // (s.tp * s.cp * s.pp), expert_dp(world, s.etp, s.ep, s.pp)
        out = fsdp_world_violations(s, dp, edp)
    if not out:
        out = _pp_groups_violations(s, world)
    return out


def _grid_world_violations(s: Strategy, world: int) -> list[Violation]:
    """The world a multiple of tp*cp*pp (dense grid) and of etp*ep*pp (expert grid)."""
    out: list[Violation] = []
    dense = s.tp * s.cp * s.pp
    expert = s.etp * s.ep * s.pp
    if world % dense:
        alt = ""
        if world % (s.tp * s.cp) == 0:
            alt = (
                f", or pp in {fmt_set(divisors(world // (s.tp * s.cp)))} with tp*cp = {s.tp * s.cp}"
            )
        out.append(
            _err(
                "world-dense",
                f"world size {world} is not a multiple of tp*cp*pp = {s.tp}*{s.cp}*{s.pp} = "
                f"{dense}",
                f"{_fitting_worlds(s, world)} (multiples of pp*lcm(tp*cp, ep*etp) "
                f"= {s.min_world_size}){alt}",
            )
        )
    if world % expert and expert != dense:
        out.append(
            _err(
                "world-expert",
                f"world size {world} is not a multiple of etp*ep*pp = {s.etp}*{s.ep}*{s.pp} = "
                f"{expert} (the expert grid)",
                f"{_fitting_worlds(s, world)}, or ep*etp*pp dividing {world}",
            )
        )
    return out


def _pp_groups_violations(s: Strategy, world: int) -> list[Violation]:
    """With pp not last in the order, the dense and expert grids must give the same pipeline
    groups (with pp last both give it stride world/pp: nothing to compare)."""
    if s.pp <= 1 or s.order.endswith("-pp"):
        return []
    grid = training_grid(s.order, s.tp, s.cp, s.ep, s.etp, s.pp, world, s.ulysses, s.dp_replicate)
    dp, edp = world // (s.tp * s.cp * s.pp), expert_dp(world, s.etp, s.ep, s.pp)
    # megatron-core 0.16 initialize_model_parallel asserts equal DP sizes whenever pp is not
    # last ("the data parallel size of the attention and moe layers must be the same"), which
    # equal pipeline strides alone do not imply
    if grid.stride("pp") == grid.view("expert").stride("pp") and dp == edp:
        return []
    return [
        _err(
            "pp-groups-differ",
            f"with order {s.order!r} (pp not last) Megatron Core needs the dense and expert "
            f"grids to agree (same data-parallel size, same pipeline ranks): dp={dp} but "
            f"expert dp={edp} (tp*cp={s.tp * s.cp}, ep*etp={s.ep * s.etp})",
            "use order 'tp-cp-ep-dp-pp' (pp last), or make tp*cp == ep*etp",
        )
    ]


# ---------------------------------------------------------------------------------------------
# Model shape.
# ---------------------------------------------------------------------------------------------
def layout_conflict_violations(s: Strategy) -> list[Violation]:
    """A pipeline layout excludes the other split settings (as Megatron Core refuses)."""
    if s.pipeline_layout is None or not s.uneven:
        return []
    return [
        _err(
            "pipeline-layout-conflict",
            f"pipeline_layout {s.layout_parsed} with first/last stage layer counts or "
            "account_for_embedding/loss: Megatron Core refuses both",
            "keep the layout and drop first_stage_layers, last_stage_layers and "
            "account_for_embedding/loss (the layout places embedding and loss itself)",
        )
    ]


def layer_split_violations(
    s: Strategy, num_layers: int, mtp_num_layers: int | None = None
) -> list[Violation]:
    """Can ``num_layers`` be split over pp stages (and vpp chunks per stage)?  With a
    pipeline layout: Megatron's layout checks (decoder and MTP counts, placement)."""
    first, last = s.first_stage_layers, s.last_stage_layers
    emb, loss, layout = s.account_for_embedding, s.account_for_loss, s.pipeline_layout
    split = (s.pp, s.vpp, first, last, emb, loss, s.uneven, layout)
    return list(_split_violations(*split, num_layers, mtp_num_layers))


@lru_cache(maxsize=1 << 12)
def _split_violations(
    p: int,
    v: int,
    first: int | None,
    last: int | None,
    emb: bool,
    loss: bool,
    uneven: bool,
    layout_value: Any,
    num_layers: int,
    mtp_num_layers: int | None,
) -> tuple[Violation, ...]:
    """:func:`layer_split_violations` of the strategy's split fields (memoised: the planner
    checks thousands of strategies that share a few splits)."""
    if layout_value is not None:
        from .pipeline_layout import PipelineLayout, layout_violations

        return tuple(layout_violations(PipelineLayout(layout_value, p), num_layers, mtp_num_layers))
    if p == 1:
        return ()
    if not uneven:
        return tuple(_even_split_violations(p, v, num_layers))
    if emb or loss:
        return tuple(_accounted_split_violations(p, v, emb, loss, num_layers))
    return tuple(_uneven_split_violations(p, v, first, last, num_layers))


def _even_split_violations(p: int, v: int, num_layers: int) -> list[Violation]:
    """``num_layers`` split evenly over ``p`` stages, each stage's share over ``v`` chunks."""
    if num_layers % p:
        return [
            _err(
                "layers-pp",
                f"{num_layers} layers do not split evenly over pp={p} stages",
                f"use pp in {fmt_set([d for d in divisors(num_layers) if d > 1])}, or set "
                f"first_stage_layers/last_stage_layers for an uneven split",
            )
        ]
    per = num_layers // p
    if per % v == 0:
        return []
    return [
        _err(
            "layers-vpp",
            f"{per} layers per stage (={num_layers}/pp {p}) do not split into vpp={v} "
            f"virtual chunks",
            f"use vpp in {fmt_set(divisors(per))}",
        )
    ]


def _accounted_split_violations(
    p: int, v: int, emb: bool, loss: bool, num_layers: int
) -> list[Violation]:
    """The layers plus the embedding and loss slots split evenly over ``p * v`` chunks."""
    total = num_layers + emb + loss
    if total % (p * v) == 0:
        return []
    return [
        _err(
            "layers-accounted",
            f"{num_layers} layers + {int(emb)} embedding + {int(loss)} loss = {total} "
            f"is not a multiple of pp*vpp = {p * v}",
            f"use pp*vpp in {fmt_set([d for d in divisors(total) if d > 1])}, or "
            "first_stage_layers/last_stage_layers",
        )
    ]


def _uneven_split_violations(
    p: int, v: int, first: int | None, last: int | None, num_layers: int
) -> list[Violation]:
    """First/last stage counts leave an even split for the middle stages, every stage's
    count a multiple of ``v``."""
    middle = p - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest <= 0 or rest % middle)):
        return [
            _err(
                "layers-uneven",
                f"{num_layers} layers with first_stage_layers={first}, last_stage_layers={last} "
                f"leave {rest} layers for {middle} middle stage(s), which does not split evenly",
                "choose first/last so that (layers - first - last) is a positive multiple of the "
                "middle stages",
            )
        ]
    counts = [c for c in (first, last, rest // middle if middle else None) if c is not None]
    if v > 1 and any(c % v for c in counts):
        return [
            _err(
                "layers-vpp",
                f"stage layer counts {counts} do not all divide into vpp={v} virtual chunks",
                "make every stage's layer count a multiple of vpp",
            )
        ]
    return []


def clear_caches() -> None:
    """Empty the rules' memo of pipeline-split checks (for timing a plan from a cold start)."""
    _split_violations.cache_clear()


def resolve_model(model: Any) -> Any:
    """``model`` as the rules read it: a preset name becomes its spec (a language model's or
    a DiT's, as ``parastrat.plan`` and ``parastrat.plan_dit`` take names); a number is refused
    (SpecError), since no rule could be checked against it; anything else passes (a spec, or
    an object with the same fields, such as Megatron's ``TransformerConfig``)."""
    if isinstance(model, str):
        from .spec import dit, models

        key = model.strip().lower()
        return dit.get(key) if key in dit.names() else models.get_llm(model)
    if isinstance(model, (bool, int, float)):
        raise SpecError(
            f"model={model!r} must be a ModelSpec, a DiTSpec or a preset name "
            "(e.g. 'llama3-70b', 'flux.1-dev')"
        )
    return model


def model_violations(s: Strategy, model: Any) -> list[Violation]:
    """Heads, query groups, layers and experts against the degrees."""
    heads = getattr(model, "num_attention_heads", None)
    name = getattr(model, "name", "the model")
    out: list[Violation] = []
    if heads:
        groups = getattr(model, "num_query_groups", None) or heads
        out += _head_violations(s, heads, groups, name)
    if s.ring > 1 and not s.is_inference:
        out += _ring_attention_violations(s, model, name)
    if getattr(model, "is_hybrid", False):
        out += hybrid_violations(s, model)
    layers = getattr(model, "num_layers", None)
    if layers:
        out += layer_split_violations(s, layers, getattr(model, "mtp_num_layers", None))
    return out + _expert_violations(s, model, name)


def _head_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """Attention heads and query groups against TP and Ulysses."""
    out = _head_tp_violations(s, heads, groups, name)
    if s.ulysses == 1 or heads % s.tp:
        return out
    return out + _head_ulysses_violations(s, heads, groups, name)


def _head_tp_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """Attention heads and query groups (KV heads) against TP."""
    out: list[Violation] = []
    if heads % s.tp:
        out.append(
            _err(
                "heads-tp",
                f"tp={s.tp} does not divide {heads} attention heads of {name}",
                f"use tp in {fmt_set(divisors(heads))}",
            )
        )
    elif groups % s.tp and s.tp % groups:
        ok = sorted({d for d in divisors(heads) if groups % d == 0 or d % groups == 0})
        out.append(
            _err(
                "query-groups-tp",
                f"tp={s.tp} and {groups} query groups (KV heads) of {name}: neither divides "
                f"the other",
                f"use tp in {fmt_set(ok)}",
            )
        )
    elif groups % s.tp:
        out.append(
            _warn(
                "query-groups-tp-replicated",
                f"tp={s.tp} > {groups} query groups: KV heads are replicated "
                f"{s.tp // groups}x (accepted by megatron-core >= 0.16 only)",
                "use megatron-core >= 0.16, or tp <= the number of query groups",
            )
        )
    return out


def _head_ulysses_violations(s: Strategy, heads: int, groups: int, name: str) -> list[Violation]:
    """The attention heads and the KV heads per TP rank against Ulysses (MindIE-SD's USP at
    inference, Transformer Engine's all-to-all CP in training)."""
    out: list[Violation] = []
    local = heads // s.tp
    if local % s.ulysses:
        out.append(
            _err(
                "heads-ulysses",
                f"ulysses={s.ulysses} does not divide the {local} attention heads per TP "
                f"rank ({heads} heads / tp {s.tp}) of {name}",
                f"use ulysses in {fmt_set(divisors(local))}, and cover the rest of the "
                f"sequence split with ring",
            )
        )
    if groups != heads:
        local_kv = groups // s.tp if groups % s.tp == 0 else groups
        who = (
            "MindIE-SD's USP raises USPTopologyError"
            if s.is_inference
            # AttnFuncWithCPAndQKVOA2A asserts q and k heads % cp_size == 0; Megatron Core does
            # not replicate KV heads for context parallelism
            else "Transformer Engine's all-to-all context parallelism asserts it"
        )
        if local_kv % s.ulysses:
            out.append(
                _err(
                    "kv-heads-ulysses",
                    f"ulysses={s.ulysses} does not divide the {local_kv} KV heads per TP "
                    f"rank of {name} ({who})",
                    f"use ulysses in {fmt_set(divisors(local_kv))} and add ring",
                )
            )
    return out


def _expert_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """Experts against EP and ETP (and EP / ETP on a dense model)."""
    experts = getattr(model, "num_moe_experts", None) or 0
    out: list[Violation] = []
    if experts and getattr(model, "add_bias_linear", False) and s.etp != 1:
        out.append(
            _err(
                "moe-bias-etp",
                f"etp={s.etp} on {name}, whose expert linear layers carry a bias "
                "(add_bias_linear): Megatron Core supports bias in MoE only with etp=1",
                "use etp=1 (experts split by ep alone)",
            )
        )
    if s.ep > 1 and not experts:
        out.append(
            _err(
                "ep-dense",
                f"ep={s.ep} on {name}, which has no experts",
                "use ep=1 for a dense model (give the devices to dp, tp or cp)",
            )
        )
    elif s.ep > 1 and experts % s.ep:
        out.append(
            _err(
                "experts-ep",
                f"ep={s.ep} does not divide the {experts} experts of {name}",
                f"use ep in {fmt_set(divisors(experts))}",
            )
        )
    elif s.ep == 1 and not experts and s.etp != s.tp and not s.is_inference:
        out.append(
            _warn(
                "etp-dense",
                f"etp={s.etp} differs from tp={s.tp} on dense {name}; it has no effect",
                "drop etp",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Hybrid (Mamba) models: what Megatron Core 0.16.1's MambaModel asserts or ignores.
# ---------------------------------------------------------------------------------------------
def hybrid_violations(s: Strategy, model: Any) -> list[Violation]:
    """A hybrid model's Mamba mixer and stack against the degrees: ``MambaMixer.__init__``
    asserts ``nheads % tp == 0`` and ``ngroups % tp == 0`` (``megatron/core/ssm/
    mamba_mixer.py``); ``MambaContextParallel.__init__`` asserts the CP splits of heads and
    groups (``mamba_context_parallel.py``); ``MambaStack._select_layers_for_pipeline_parallel``
    asserts no virtual pipeline and places layers by the even split or the first/last stage
    counts alone (``mamba_block.py``), so a pipeline layout or ``account_for_*`` would be
    ignored by the Mamba stack while its attention layers honour them; ``MambaModel`` builds no
    multi-token prediction."""
    name = getattr(model, "name", "the model")
    out = _mamba_tp_cp_violations(s, model, name)
    if s.vpp > 1:
        out.append(
            _err(
                "hybrid-vpp",
                f"vpp={s.vpp} on hybrid {name}: Megatron Core's MambaStack asserts "
                "'does not currently support virtual/interleaved pipeline parallelism'",
                "use vpp=1",
            )
        )
    if s.pipeline_layout is not None:
        out.append(
            _err(
                "hybrid-pipeline-layout",
                f"pipeline_layout on hybrid {name}: MambaStack splits its pattern by the even "
                "split or first/last stage counts only and ignores the layout",
                "drop pipeline_layout; use first_stage_layers/last_stage_layers",
            )
        )
    if s.account_for_embedding or s.account_for_loss:
        out.append(
            _err(
                "hybrid-pipeline-accounting",
                f"account_for_embedding/loss_in_pipeline_split on hybrid {name}: MambaStack "
                "ignores them (it slices num_layers // pp layers per stage)",
                "drop account_for_embedding/loss; use first_stage_layers/last_stage_layers",
            )
        )
    if getattr(model, "mtp_num_layers", 0):
        out.append(
            _err(
                "hybrid-mtp",
                f"mtp_num_layers={model.mtp_num_layers} on hybrid {name}: Megatron Core "
                "0.16.1's MambaModel builds no multi-token prediction block",
                "set mtp_num_layers=0",
            )
        )
    return out


def _mamba_tp_cp_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """``MambaMixer``'s TP asserts and ``MambaContextParallel``'s CP asserts."""
    if "M" not in (getattr(model, "hybrid_override_pattern", None) or ""):
        return []
    heads, groups, out = model.mamba_heads, model.mamba_num_groups, []
    if heads % s.tp:
        out.append(
            _err(
                "mamba-heads-tp",
                f"tp={s.tp} does not divide the {heads} Mamba heads of {name} (MambaMixer "
                "asserts 'nheads must be evenly divisble by tp_size')",
                f"use tp in {fmt_set(divisors(math.gcd(heads, groups)))}",
            )
        )
    if groups % s.tp:
        out.append(
            _err(
                "mamba-groups-tp",
                f"tp={s.tp} does not divide the {groups} Mamba groups of {name} (MambaMixer "
                "asserts 'ngroups must be evenly divisible by tp_size')",
                f"use tp in {fmt_set(divisors(math.gcd(heads, groups)))}",
            )
        )
    if out or s.cp == 1:
        return out
    local_heads, local_groups = heads // s.tp, groups // s.tp
    ok = [
        c
        for c in divisors(local_heads)
        if local_groups % c == 0 or (local_groups < c and c % local_groups == 0)
    ]
    if local_heads % s.cp:
        why = f"the {local_heads} Mamba heads per TP rank ('nheads must be evenly divisible by "
        why += "tp_size * cp_size')"
    elif local_groups >= s.cp and local_groups % s.cp:
        why = f"the {local_groups} Mamba groups per TP rank ('ngroups must be evenly divisible "
        why += "by tp_size * cp_size')"
    elif local_groups < s.cp and s.cp % local_groups:
        why = f"a multiple of the {local_groups} Mamba groups per TP rank ('cp_size must be "
        why += "evenly divisible by ngroups/tp_size')"
    else:
        return out
    out.append(
        _err(
            "mamba-cp",
            f"cp={s.cp} on {name} is not {why}: MambaContextParallel asserts it",
            f"use cp in {fmt_set(ok)}",
        )
    )
    return out


#: Recompute modes ``MambaStack`` runs: it has no checkpointed forward (``mamba_block.py``
#: has no ``recompute_granularity`` path), so "full" would silently recompute nothing.
HYBRID_RECOMPUTE = ("none", "selective")


def hybrid_workload_violations(model: Any, precision: str, recompute: str) -> list[Violation]:
    """A hybrid model's workload against Megatron Core: FP8 / MXFP8 (``config.fp8``) need the
    mixer's in_proj output width ``2 d_inner + 2 G N + H`` to be a multiple of 16
    (``MambaMixer`` asserts it); full recompute is not implemented by ``MambaStack``."""
    if not getattr(model, "is_hybrid", False):
        return []
    name, out = getattr(model, "name", "the model"), []
    width = model.mamba_in_proj_width
    if precision in ("fp8", "mxfp8") and "M" in model.hybrid_override_pattern and width % 16:
        out.append(
            _err(
                "mamba-fp8-in-proj",
                f"precision={precision} on {name}: the Mamba in_proj output width {width} "
                "(2 d_inner + 2 groups x state + heads) is not a multiple of 16 (MambaMixer "
                "asserts it under FP8)",
                "use precision='bf16'",
            )
        )
    if recompute not in HYBRID_RECOMPUTE:
        out.append(
            _err(
                "hybrid-full-recompute",
                f"recompute={recompute!r} on hybrid {name}: Megatron Core's MambaStack has no "
                "full-layer recompute (it would run without recomputing anything)",
                "use recompute='selective' or 'none'",
            )
        )
    return out


def _ring_attention_violations(s: Strategy, model: Any, name: str) -> list[Violation]:
    """Ring context parallelism (``cp_comm_type`` p2p or a2a+p2p) against the attention
    variants Transformer Engine's context-parallel attention refuses it for: a sliding window
    and attention sinks ("No support for SWA with cp_comm_type={p2p, a2a+p2p}" and "only
    supports cp_comm_type=a2a for non-vanilla softmax types", TE
    ``tests/pytorch/attention/test_attention_with_cp.py``; Megatron Bridge's GPT-OSS recipe:
    "only a2a cp is supported for sink attention")."""
    window = getattr(model, "sliding_window", None)
    softmax = getattr(model, "softmax_type", "vanilla")
    if not window and softmax == "vanilla":
        return []
    what = f"a {window}-token sliding window" if window else f"attention sinks ({softmax} softmax)"
    heads = getattr(model, "num_attention_heads", None) or 0
    groups = getattr(model, "num_query_groups", None) or heads
    local = heads // s.tp if heads and heads % s.tp == 0 else 0
    local_kv = groups // s.tp if groups and groups % s.tp == 0 else groups
    if local and local_kv:  # Ulysses splits the query and the KV heads of each TP rank
        local = math.gcd(local, local_kv)
    fix = f"use ulysses={s.cp} (cp_comm_type='a2a')"
    if local and local % s.cp:
        fix = f"use cp in {fmt_set(divisors(local))} as ulysses (cp_comm_type='a2a'), or cp=1"
        if local == 1:
            fix = "use cp=1, or a smaller tp so that each TP rank holds several KV heads"
    return [
        _err(
            "cp-ring-attention",
            f"cp={s.cp} with ring={s.ring} (cp_comm_type={s.cp_comm_type!r}) on {name}, whose "
            f"attention has {what}: Transformer Engine's context-parallel attention supports it "
            "only with cp_comm_type='a2a'",
            fix,
        )
    ]


# ---------------------------------------------------------------------------------------------
# Sequence and batch.
# ---------------------------------------------------------------------------------------------
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
            _err(
                "seq-cp",
                f"seq_len={seq_len} is not a multiple of 2*cp = {2 * s.cp} (the "
                "load-balanced causal split gives each CP rank two chunks)",
                f"use seq_len a multiple of {unit} (e.g. {(seq_len // unit + 1) * unit}){others}",
            )
        )
    if s.sp and seq_len % (s.tp * s.cp):
        out.append(
            _err(
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
        _err(
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
                _err(
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
            _err(
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
            _warn(
                "pp-few-microbatches",
                f"{m} micro-batches per step for pp={s.pp} stages: most of each step is "
                "pipeline bubble",
                f"raise global_batch_size to at least {s.pp * unit} or lower pp",
            )
        )
    if not interleave_fits(s, m):
        out.append(
            _err(
                "vpp-microbatches",
                f"{m} micro-batches is not a multiple of pp={s.pp}: Megatron Core's interleaved "
                "schedule (microbatch_group_size_per_vp_stage = pp, its default) refuses a "
                "last group of fewer than pp micro-batches at the first step",
                f"use global_batch_size {_either(global_batch_size, s.pp * unit)} (a multiple "
                f"of pp*micro_batch_size*dp = {s.pp * unit}), or vpp=1",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Soft rules (heuristics).
# ---------------------------------------------------------------------------------------------
def soft_violations(s: Strategy, devices_per_node: int | None) -> list[Violation]:
    """Heuristics from the seed guides: TP inside a node, VPP with PP, SP with TP."""
    out = _node_violations(s, devices_per_node) if devices_per_node else []
    if not s.is_inference:
        out += _interleave_violations(s) + _sequence_parallel_violations(s)
    return out


def _node_violations(s: Strategy, devices_per_node: int) -> list[Violation]:
    """TP (and, for inference, TP x Ulysses) inside one node of ``devices_per_node``."""
    out: list[Violation] = []
    if s.tp > devices_per_node:
        out.append(
            _warn(
                "tp-across-nodes",
                f"tp={s.tp} spans more than one node of {devices_per_node} "
                "devices: every layer's TP collectives cross the slow link",
                f"keep tp <= {devices_per_node}; use pp (or cp) across nodes",
            )
        )
    if s.is_inference and s.tp * s.ulysses > devices_per_node:
        out.append(
            _warn(
                "ulysses-across-nodes",
                f"tp*ulysses = {s.tp * s.ulysses} spans more than one node/island "
                f"of {devices_per_node}",
                "keep Ulysses inside a node and use ring across nodes",
            )
        )
    return out


def _interleave_violations(s: Strategy) -> list[Violation]:
    """Virtual pipeline stages where they pay (pp > 2) and where they need extra care."""
    out: list[Violation] = []
    if s.pp > 2 and s.vpp == 1:
        out.append(
            _warn(
                "pp-without-vpp",
                f"pp={s.pp} without virtual stages: bubble (p-1)/m is vpp times "
                "larger than with interleaving",
                "set vpp >= 2 when layers per stage allow",
            )
        )
    if s.vpp > 1 and s.pp == 2:
        out.append(
            _warn(
                "vpp-pp2",
                "vpp with pp=2 needs overlap_p2p_comm in Megatron-LM's training arguments",
                "use pp >= 3 or enable overlap_p2p_comm",
            )
        )
    return out


def _sequence_parallel_violations(s: Strategy) -> list[Violation]:
    """Sequence parallelism with TP (Megatron Core requires it with EP)."""
    if s.sp or s.tp <= 1:
        return []
    if s.ep > 1:
        return [
            _warn(
                "ep-tp-without-sp",
                f"ep={s.ep} with tp={s.tp} without sequence parallelism: Megatron "
                "Core says SP 'must be used' (a ValueError before 0.10, a warning "
                "in 0.16)",
                "set sp=True",
            )
        ]
    return [
        _warn(
            "tp-without-sp",
            f"tp={s.tp} without sequence parallelism "
            "replicates LayerNorm/dropout activations on every TP rank",
            "set sp=True (same communication volume, less memory)",
        )
    ]


# ---------------------------------------------------------------------------------------------
# Everything together.
# ---------------------------------------------------------------------------------------------
def check(
    s: Strategy,
    model: Any = None,
    *,
    world_size: int | None = None,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    devices_per_node: int | None = None,
    verify_hints: bool = False,
) -> list[Violation]:
    """Every rule the given inputs allow checking: errors first, then warnings.

    With ``verify_hints`` (user-facing checks) a broken pipeline-split rule's hint lists only
    fixes that clear it and break no other rule (:func:`verified_split_hints`).
    """
    model = resolve_model(model)
    out, world, world_ok = _world_check(s, world_size)
    if model is not None:
        out += model_violations(s, model)
    if seq_len is not None:
        if not is_count(seq_len):
            out.append(
                _err(
                    "seq-len-positive",
                    f"seq_len={seq_len!r} must be an int >= 1",
                    "pass the training sequence length in tokens",
                )
            )
        else:
            out += sequence_violations(s, seq_len)
            if model is not None:
                out += chunk_violations(s, model, seq_len)
    if world_ok and world is not None and s.fsdp is not None:
        out += fsdp_soft_violations(s, world // s.model_parallel_size)
    if global_batch_size is not None or micro_batch_size is not None:
        dp = world // s.model_parallel_size if world_ok and world is not None else None
        out += _batch_check(s, dp, global_batch_size, micro_batch_size)
    soft = soft_violations(s, devices_per_node)
    if model is not None and getattr(model, "hybrid_override_pattern", None):
        # MambaStack takes no virtual pipeline (hybrid-vpp): no advice to interleave
        soft = [v for v in soft if v.rule not in ("pp-without-vpp", "vpp-pp2")]
    out += soft
    if verify_hints and model is not None and any(v.rule in SPLIT_RULES for v in out):
        w = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None

        def recheck(t: Strategy) -> set[str]:
            found = check(
                t,
                model,
                world_size=w,
                seq_len=seq_len,
                global_batch_size=global_batch_size,
                micro_batch_size=micro_batch_size,
            )
            return {v.rule for v in found if v.severity == "error"}

        errors = [v for v in out if v.severity == "error"]
        rest = [v for v in out if v.severity != "error"]
        out = verified_split_hints(s, model, errors, recheck, w) + rest
    return sorted(out, key=lambda v: v.severity != "error")


def _world_check(s: Strategy, world_size: Any) -> tuple[list[Violation], int | None, bool]:
    """(violations, the world to check against, whether it is a valid one): ``world_size``
    when given (checked against the grid), else the strategy's own."""
    if world_size is None:
        return [], s.world_size, s.world_size is not None
    if not is_count(world_size):
        bad = _err(
            "world-size-positive",
            f"world_size={world_size!r} must be an int >= 1",
            "pass the number of devices",
        )
        return [bad], None, False
    found = world_violations(s, world_size)
    return found, world_size, not found


def _batch_check(
    s: Strategy, dp: int | None, global_batch_size: int | None, micro_batch_size: int | None
) -> list[Violation]:
    """The batch rules over ``dp`` replicas; without a valid world only what needs none (the
    micro-batch's, and the global batch's positivity)."""
    if dp is not None:
        return batch_violations(s, dp, global_batch_size, micro_batch_size)
    out = batch_violations(s, 1, None, micro_batch_size)
    if global_batch_size is not None:
        out += [
            v
            for v in batch_violations(s, 1, global_batch_size, None)
            if v.rule.endswith("-positive")
        ]
    return out


# ---------------------------------------------------------------------------------------------
# Hints that propose a pipeline split, held to the rules themselves.
# ---------------------------------------------------------------------------------------------
#: Rules whose fix is a pipeline degree or split.
SPLIT_RULES = frozenset(
    {
        "world-dense",
        "layers-pp",
        "layers-vpp",
        "layers-accounted",
        "layers-uneven",
        "pipeline-layout-layers",
        "pipeline-layout-mtp",
        "pipeline-layout-embedding",
        "pipeline-layout-loss",
    }
)
_SPLIT_OFF = {
    "first_stage_layers": None,
    "last_stage_layers": None,
    "account_for_embedding": False,
    "account_for_loss": False,
    "pipeline_layout": None,
}


def _balanced_first_last(layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """The most even (first, last) stage layer counts whose rest splits over the middle
    stages, every count a multiple of vpp (first and last no larger than the middle)."""
    if pp < 3:
        return None
    best = None
    for first in range(vpp, layers, vpp):
        for last in range(vpp, layers - first, vpp):
            rest = layers - first - last
            if rest % (pp - 2) or (rest // (pp - 2)) % vpp:
                continue
            mid = rest // (pp - 2)
            if first <= mid and last <= mid:
                key = (mid - min(first, last), abs(first - last))
                if best is None or key < best[0]:
                    best = (key, (first, last))
    return best[1] if best else None


def _split_changes(s: Strategy, model: Any, world: int | None, rule: str) -> list[dict[str, Any]]:
    """Candidate fixes for a broken split rule, most recipe-like first."""
    from .pipeline_layout import recipe_layouts

    layers = getattr(model, "num_layers", None) or 0
    mtp = getattr(model, "mtp_num_layers", None) or 0
    unit = s.tp * s.cp
    low = 1 if rule == "world-dense" else 2
    pps = [d for d in range(low, 129) if d != s.pp and (world is None or world % (unit * d) == 0)]
    out: list[dict[str, Any]] = [{"pp": d, **_SPLIT_OFF} for d in pps]
    if rule == "world-dense" or not layers:
        return out
    out += [{"vpp": v, **_SPLIT_OFF} for v in range(1, 9) if v != s.vpp]
    for emb, loss in ((True, True), (False, True), (True, False)):
        out.append({**_SPLIT_OFF, "account_for_embedding": emb, "account_for_loss": loss})
    pair = _balanced_first_last(layers, s.pp, s.vpp)
    if pair:
        out.append({**_SPLIT_OFF, "first_stage_layers": pair[0], "last_stage_layers": pair[1]})
    for text in recipe_layouts(layers, s.pp, s.vpp, mtp)[:1]:
        out.append({**_SPLIT_OFF, "pipeline_layout": text})
    return out


def _describe(change: dict[str, Any], s: Strategy) -> str:
    """``name=value`` for every field the change sets differently (resets included)."""
    shown = {k: v for k, v in change.items() if getattr(s, k) != v}
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in shown.items())


def verified_split_hints(
    s: Strategy, model: Any, errors: list[Violation], recheck: Any, world: int | None
) -> list[Violation]:
    """``errors`` with the hints of split rules rewritten to list only fixes that clear the
    rule and break no other: ``recheck(strategy)`` gives the set of rule ids a strategy
    breaks with the same model, world, sequence and batch."""
    before = {v.rule for v in errors}
    out = []
    for v in errors:
        if v.rule not in SPLIT_RULES:
            out.append(v)
            continue
        pps: list[int] = []
        others: list[str] = []
        for change in _split_changes(s, model, world, v.rule):
            try:
                after = recheck(s.replace(dp=None, **change))
            except StrategyError:
                continue
            if v.rule in after or not after <= before:
                continue
            if set(change) == {"pp", *_SPLIT_OFF} and not s.uneven and s.pipeline_layout is None:
                pps.append(change["pp"])
            elif len(others) < 3:
                others.append(_describe(change, s))
        fixes = ([f"pp in {fmt_set(pps)}"] if pps else []) + others
        if v.rule == "world-dense":  # other device counts stay the first answer
            fixes.insert(0, v.hint.split(", or pp in")[0].removeprefix("use "))
        hint = (
            "use " + "; or ".join(fixes)
            if fixes
            else f"no pipeline change fixes it alone ({v.hint})"
        )
        if fixes and v.rule.startswith("pipeline-layout"):  # mending the layout comes first
            hint = f"{v.hint}; or {hint}"
        out.append(Violation(v.rule, v.message, hint, v.severity))
    return out
