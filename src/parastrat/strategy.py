"""Strategy: one immutable value that says how a job is split over devices.

A strategy names every parallel degree (TP, PP, virtual PP, CP = Ulysses x ring, EP, ETP, DP,
sequence parallelism, CFG) and the rank order.  Constructing one never touches torch.  It
knows the rules in ``shared/reference/constraints.md`` through :mod:`parastrat.rules` and says
exactly what to change when one breaks.

Two conventions share the one value:

* **training** (Megatron Core): order ``tp-cp-ep-dp-pp`` by default; a dense grid
  (tp, cp, dp, pp) and an expert grid (etp, ep, edp, pp) over the same ranks;
* **inference** (xDiT / MindIE-SD): order ``tp-sp-pp-cfg-dp``, picked when ``ulysses > 1`` or
  ``cfg > 1`` and no order is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from . import rules
from .checks import divisors, fmt_set, is_int, lcm
from .errors import StrategyError, StrategyTypeError, Violation
from .grid import expert_dp as _expert_dp
from .pipeline_layout import (
    LayoutValue,
    PipelineLayout,
    StagePlacement,
    resolve_layout,
    split_stages,
)
from .rules.orders import MEGATRON_ORDER, MEGATRON_TP_PP_DP_ORDER, XDIT_ORDER

__all__ = [
    "MEGATRON_ORDER",
    "MEGATRON_TP_PP_DP_ORDER",
    "XDIT_ORDER",
    "Strategy",
    "divisors",
    "fmt_set",
    "lcm",
    "order_kind",
    "require_strategy",
]


@lru_cache(maxsize=256)
def order_kind(order: str) -> str:
    """ "training" for a Megatron-style order, "inference" for an xDiT-style one (memoised: the
    planner asks for every candidate)."""
    names = set(order.split("-"))
    return "inference" if names & {"sp", "cfg"} else "training"


def _bad_int(name: str, value: Any, *, allow_none: bool) -> Violation | None:
    if type(value) is int and value >= 1:  # the common case, first (thousands per plan)
        return None
    if value is None and allow_none:
        return None
    if not is_int(value):
        return Violation(
            f"{name}-type",
            f"{name}={value!r} is a {type(value).__name__}, not a whole number",
            f"pass an int >= 1, e.g. {name}=1",
        )
    if value < 1:
        return Violation(f"{name}-positive", f"{name}={value} must be >= 1", _positive_fix(name))
    return None


#: What a degree of 1 switches off, by Strategy field.
_ONE_MEANS = {
    "tp": "no tensor parallelism",
    "pp": "no pipeline",
    "vpp": "no interleaving",
    "cp": "no context parallelism",
    "ep": "no expert parallelism",
    "etp": "experts not tensor-split",
    "dp": "one replica",
    "ulysses": "no Ulysses",
    "ring": "no ring attention",
    "cfg": "guidance branches together",
    "dp_replicate": "one replica",
}


def _positive_fix(name: str) -> str:
    """What to pass instead of a ``name`` below 1."""
    if name == "dp_shard":
        return "use dp_shard=-1 (the rest of dp) or a degree >= 1"
    if name.endswith("_stage_layers"):
        return f"leave {name}=None (an even split) or give a layer count >= 1"
    if name not in _ONE_MEANS:
        return f"give {name} >= 1"
    derived = " or leave it None (derived)" if name in ("dp", "cp", "etp", "ring") else ""
    return f"use {name}=1 ({_ONE_MEANS[name]}){derived}"


#: The whole-number arguments of :class:`Strategy` in the order it checks them, and whether
#: each may be None.
_INT_FIELDS = (
    ("tp", False),
    ("pp", False),
    ("vpp", False),
    ("cp", True),
    ("ep", False),
    ("etp", True),
    ("dp", True),
    ("ulysses", False),
    ("ring", True),
    ("cfg", False),
    ("first_stage_layers", True),
    ("last_stage_layers", True),
    ("dp_shard", True),
    ("dp_replicate", False),
)


def _value_violations(
    found: list[Violation],
    cfg: Any,
    sp: Any,
    account_for_embedding: Any,
    account_for_loss: Any,
    order: Any,
    fsdp: Any,
) -> list[Violation]:
    """What the non-degree arguments break: a CFG degree other than 1 or 2 (unless ``found``
    already names it), non-boolean flags, a non-string order, an unknown FSDP mode."""
    out: list[Violation] = []
    if cfg not in (1, 2) and not any(v.rule.startswith("cfg-") for v in found):
        out.append(
            Violation(
                "cfg-degree",
                f"cfg={cfg}: classifier-free guidance has 2 branches",
                "use cfg=2 with guidance on, cfg=1 otherwise",
            )
        )
    if not isinstance(sp, bool):
        out.append(
            Violation(
                "sp-type",
                f"sp={sp!r} must be True or False",
                "pass sp=True to shard activations along the sequence",
            )
        )
    for name, flag in (
        ("account_for_embedding", account_for_embedding),
        ("account_for_loss", account_for_loss),
    ):
        if not isinstance(flag, bool):
            out.append(
                Violation(
                    f"{name}-type",
                    f"{name}={flag!r} must be True or False",
                    f"pass {name}=True to count it as a pipeline layer",
                )
            )
    if order is not None and not isinstance(order, str):
        out.append(
            Violation(
                "order-type",
                f"order={order!r} must be a string",
                f"e.g. order={MEGATRON_ORDER!r}",
            )
        )
    return out + rules.fsdp_value_violations(fsdp)


def _cp_ring(cp: int | None, ulysses: int, ring: int | None) -> tuple[int, int]:
    """(cp, ring) with cp = ulysses * ring; cp=N alone means ring=N / ulysses."""
    if ring is None:
        if cp is None:
            ring = 1
        elif cp % ulysses:
            raise StrategyError(
                Violation(
                    "cp-ulysses-ring",
                    f"cp={cp} is not a multiple of ulysses={ulysses} (cp = ulysses * ring)",
                    f"use cp a multiple of ulysses (e.g. cp={ulysses * (cp // ulysses + 1)}) "
                    f"that divides the world, or ulysses in "
                    f"{fmt_set([d for d in divisors(cp) if d < ulysses])} (ring = cp / ulysses)",
                )
            )
        else:
            ring = cp // ulysses
    if cp is None:
        cp = ulysses * ring
    elif cp != ulysses * ring:
        raise StrategyError(
            Violation(
                "cp-ulysses-ring",
                f"cp={cp} but ulysses={ulysses} x ring={ring} = {ulysses * ring}",
                f"drop cp (it follows from ulysses and ring) or set cp={ulysses * ring}",
            )
        )
    return cp, ring


def _int_violations(values: tuple[Any, ...]) -> list[Violation]:
    """:func:`_bad_int` of each of :data:`_INT_FIELDS` (``values`` in that order)."""
    out = []
    for (name, none_ok), value in zip(_INT_FIELDS, values):
        if (type(value) is int and value >= 1) or (value is None and none_ok):  # without a call
            continue
        bad = _bad_int(name, value, allow_none=none_ok)
        if bad:
            out.append(bad)
    return out


def require_strategy(value: Any, where: str) -> Strategy:
    """``value`` when it is a :class:`Strategy`; else :class:`StrategyTypeError` (rule
    ``strategy-type``) naming ``where`` and the type received: the one error every API raises
    for a non-Strategy."""
    if isinstance(value, Strategy):
        return value
    fix = "build one with parastrat.Strategy(tp=..., pp=...) or Strategy.from_dict(d)"
    if isinstance(value, str):
        fix = f"parse the text first: parastrat.Strategy.parse({value!r})"
    raise StrategyTypeError(
        Violation(
            "strategy-type", f"{where} takes a parastrat.Strategy, got {type(value).__name__}", fix
        )
    )


#: Keys :meth:`Strategy.to_dict` adds that are computed, not set.
_DERIVED_KEYS = frozenset(
    {"min_world_size", "world_size", "expert_dp", "kind", "text", "order_given"}
)


def _reject_unknown_fields(values: Mapping[str, Any]) -> None:
    """StrategyError ``unknown-field`` naming keys that are not Strategy fields."""
    known = {f.name for f in fields(Strategy)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise StrategyError(
            Violation(
                "unknown-field",
                f"unknown strategy field(s): {', '.join(map(str, unknown))}",
                f"use only {', '.join(sorted(known))}",
            )
        )


@dataclass(frozen=True, init=False)
class Strategy:
    """How one job is split over devices: every parallel degree and the rank order.

    Degrees: ``tp`` tensor, ``pp`` pipeline, ``vpp`` virtual pipeline stages per rank,
    ``cp`` context/sequence parallel (= ``ulysses * ring``; ``cp=N`` alone means ring=N),
    ``ep`` expert, ``etp`` expert tensor (resolved: 1 with EP, else TP), ``dp`` data
    (None until a world size is known), ``sp`` Megatron sequence parallelism (a flag on TP),
    ``cfg`` classifier-free-guidance branches in parallel (1 or 2, inference).
    ``first_stage_layers``/``last_stage_layers`` give an uneven pipeline split as Megatron's
    ``num_layers_in_first/last_pipeline_stage`` do; ``account_for_embedding``/
    ``account_for_loss`` count the input embedding / the output layer and loss as one layer
    of the first / last stage (Megatron's ``account_for_*_in_pipeline_split``), which is how
    recipes put Qwen3-235B's 94 layers on PP 8 with VPP 3 (94 + 2 = 8 * 3 * 4).
    ``pipeline_layout`` is Megatron's ``pipeline_model_parallel_layout`` (a string such as
    ``"Et*4|(t*4|)*14tmL"`` or a list of lists of layer names, :mod:`parastrat.pipeline_layout`):
    which stage holds the embedding, each decoder and MTP layer and the loss; ``vpp`` follows
    from it (stages / pp).

    Data-parallel sharding (training): ``dp_shard`` x ``dp_replicate`` = ``dp`` with
    torchtitan's degree names (``dp_replicate`` unset means 1; ``dp_shard`` unset or ``-1``
    takes the rest of dp, like torchtitan's ``data_parallel_shard_degree=-1``), and ``fsdp``
    names what is sharded over each dp_shard x cp group with Megatron's names: ``None`` (or
    ``"no_shard"``: today's behaviour, plain DDP / distributed optimizer), ``"optim"``,
    ``"optim_grads"`` or ``"optim_grads_params"``.  See ``docs/fsdp.md``.
    """

    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    dp: int | None
    sp: bool
    ulysses: int
    ring: int
    cfg: int
    order: str
    first_stage_layers: int | None
    last_stage_layers: int | None
    account_for_embedding: bool
    account_for_loss: bool
    pipeline_layout: LayoutValue | None
    dp_shard: int | None
    dp_replicate: int
    fsdp: str | None

    def __init__(
        self,
        tp: int = 1,
        pp: int = 1,
        vpp: int | None = 1,
        cp: int | None = None,
        ep: int = 1,
        etp: int | None = None,
        dp: int | None = None,
        sp: bool = False,
        ulysses: int = 1,
        ring: int | None = None,
        cfg: int = 1,
        order: str | None = None,
        first_stage_layers: int | None = None,
        last_stage_layers: int | None = None,
        account_for_embedding: bool = False,
        account_for_loss: bool = False,
        pipeline_layout: Any = None,
        dp_shard: int | None = None,
        dp_replicate: int | None = None,
        fsdp: str | None = None,
    ):
        vpp = 1 if vpp is None else vpp
        if pipeline_layout is not None and isinstance(pp, int) and pp >= 1:
            pipeline_layout, vpp = resolve_layout(pipeline_layout, pp, vpp)
        dp_shard = None if dp_shard == -1 else dp_shard  # torchtitan's "the rest of dp"
        dp_replicate = 1 if dp_replicate is None else dp_replicate
        fsdp = None if fsdp == "no_shard" else fsdp  # Megatron's name for no sharding
        problems = _int_violations(
            (tp, pp, vpp, cp, ep, etp, dp, ulysses, ring, cfg)
            + (first_stage_layers, last_stage_layers, dp_shard, dp_replicate)
        )
        problems += _value_violations(
            problems, cfg, sp, account_for_embedding, account_for_loss, order, fsdp
        )
        if problems:
            raise StrategyError(problems)
        cp, ring = _cp_ring(cp, ulysses, ring)

        if etp is None:
            etp = 1 if ep > 1 else tp
        # remembered (not a field): a default inference order may become Megatron's training
        # one where the target is a training framework (adapters.megatron.apply)
        object.__setattr__(self, "_order_given", order is not None)
        if order is None:
            order = XDIT_ORDER if (ulysses > 1 or cfg > 1) else MEGATRON_ORDER
        order = order.lower().strip()
        if dp is None and dp_shard is not None:
            dp = dp_shard * dp_replicate  # torchtitan: dp_shard * dp_replicate is the dp degree

        # the fields, in their declared order (one update: the planner builds thousands)
        self.__dict__.update(
            tp=tp,
            pp=pp,
            vpp=vpp,
            cp=cp,
            ep=ep,
            etp=etp,
            dp=dp,
            sp=sp,
            ulysses=ulysses,
            ring=ring,
            cfg=cfg,
            order=order,
            first_stage_layers=first_stage_layers,
            last_stage_layers=last_stage_layers,
            account_for_embedding=account_for_embedding,
            account_for_loss=account_for_loss,
            pipeline_layout=pipeline_layout,
            dp_shard=dp_shard,
            dp_replicate=dp_replicate,
            fsdp=fsdp,
        )

        problems = rules.structural_violations(self)
        if not problems and dp is not None:
            # An explicit dp fixes the world: it must fit the expert grid too.
            problems = rules.world_violations(self, self.model_parallel_size * dp)
        if problems:
            raise StrategyError(problems)

    # ---- value semantics ----------------------------------------------------------------
    def _key(self) -> tuple[Any, ...]:
        """The fields as compared and hashed: a pipeline layout by its stages, so the string
        ``"Et*2|t*2L"`` and the same layer lists written out are one strategy."""
        key = self.__dict__.get("_key_cache")
        if key is None:  # computed once: the planner hashes strategies by the thousand
            d = self.__dict__
            values = [d[name] for name in _FIELD_NAMES]
            if self.pipeline_layout is not None:
                values[_LAYOUT_INDEX] = self.layout_parsed.stages  # type: ignore[union-attr]
            key = d["_key_cache"] = tuple(values)
        return key

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    # ---- derived ------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """ "training" (Megatron grids) or "inference" (xDiT/MindIE-SD grid)."""
        return order_kind(self.order)

    @property
    def order_given(self) -> bool:
        """True when the rank order was passed explicitly (not derived from the degrees)."""
        return bool(self.__dict__.get("_order_given", True))

    @property
    def is_inference(self) -> bool:
        """True for an xDiT / MindIE-SD inference grid (the order has ``sp`` or ``cfg``), False for
        a Megatron training grid."""
        return order_kind(self.order) == "inference"  # not through .kind: asked thousands of times

    @property
    def uneven(self) -> bool:
        """True when first/last pipeline stages hold a custom number of layers."""
        return (
            self.first_stage_layers is not None
            or self.last_stage_layers is not None
            or self.account_for_embedding
            or self.account_for_loss
        )

    @property
    def layout_parsed(self) -> PipelineLayout | None:
        """The parsed :attr:`pipeline_layout` (None without one)."""
        return (
            None if self.pipeline_layout is None else PipelineLayout(self.pipeline_layout, self.pp)
        )

    @property
    def model_parallel_size(self) -> int:
        """Ranks one model replica spans for the dense part: tp * cp * pp (training)."""
        if self.is_inference:
            return self.tp * self.cp * self.pp * self.cfg
        return self.tp * self.cp * self.pp

    @property
    def min_world_size(self) -> int:
        """Smallest world that fits: the world itself once ``dp`` is given, else
        ``pp * lcm(tp*cp*dp_shard*dp_replicate, ep*etp)`` (training; the FSDP axes count when
        given), or ``tp * ulysses * ring * cfg * pp`` (inference)."""
        if self.world_size is not None:
            return self.world_size
        if self.is_inference:
            return self.world_step
        dense = self.tp * self.cp * (self.dp_shard or 1) * self.dp_replicate
        return self.pp * lcm(dense, self.ep * self.etp)

    @property
    def world_step(self) -> int:
        """The grids' period: a world fits the degrees (``dp`` and the FSDP axes aside) only
        when it is a multiple of this: ``pp * lcm(tp*cp, ep*etp)`` (training) or
        ``tp * ulysses * ring * cfg * pp`` (inference)."""
        if self.is_inference:
            return self.tp * self.ulysses * self.ring * self.cfg * self.pp
        return self.pp * lcm(self.tp * self.cp, self.ep * self.etp)

    @property
    def world_size(self) -> int | None:
        """Total ranks, known once ``dp`` is."""
        if self.dp is None:
            return None
        return self.model_parallel_size * self.dp

    @property
    def expert_dp(self) -> int | None:
        """Expert data-parallel degree ``world / (etp * ep * pp)`` (CP folds into it)."""
        world = self.world_size
        if world is None:
            return None
        return _expert_dp(world, self.etp, self.ep, self.pp)

    @property
    def dp_shard_degree(self) -> int | None:
        """Ranks of the data-parallel shard axis, ``dp / dp_replicate`` (``dp_shard`` when
        set); None until dp is known.  FSDP shards over ``dp_shard_degree * cp`` ranks."""
        if self.dp is None:
            return self.dp_shard
        return self.dp // self.dp_replicate

    @property
    def cp_comm_type(self) -> str:
        """Megatron's ``cp_comm_type``: ring -> p2p, Ulysses -> a2a, both -> a2a+p2p."""
        if self.ulysses > 1 and self.ring > 1:
            return "a2a+p2p"
        if self.ulysses > 1:
            return "a2a"
        return "p2p"

    # ---- copies -------------------------------------------------------------------------
    def replace(self, **changes: Any) -> Strategy:
        """A copy with some degrees changed (validated like a new one).

        Changing ``cp`` alone re-derives ``ring``; changing ``tp``/``ep`` re-derives an
        ``etp`` that was left at its default.
        """
        d = self._degrees()
        if "cp" in changes and "ring" not in changes:
            d["ring"] = None
        elif "ulysses" in changes or "ring" in changes:
            d["cp"] = None
        if not self.order_given and "order" not in changes:
            d["order"] = None
        if self.pipeline_layout is not None and "vpp" not in changes:
            d["vpp"] = None  # it came from the layout: a new layout (or pp) sets it again
        etp_was_default = self.etp == (1 if self.ep > 1 else self.tp)
        if ("tp" in changes or "ep" in changes) and "etp" not in changes and etp_was_default:
            d["etp"] = None
        _reject_unknown_fields(changes)
        d.update(changes)
        return Strategy(**d)

    def with_world_size(self, world_size: int) -> Strategy:
        """A copy with ``dp`` filled in for ``world_size``; StrategyError when it does not fit."""
        bad = _bad_int("world_size", world_size, allow_none=False)
        if bad:
            raise StrategyError(bad)
        problems = rules.world_violations(self, world_size)
        if problems:
            raise StrategyError(problems)
        # Every field but dp is already validated and world_violations has just checked the
        # world: copy without running __init__'s checks again (the planner builds thousands).
        copy = object.__new__(Strategy)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.pop("_key_cache", None)  # dp changes: the compared key with it
        object.__setattr__(copy, "dp", world_size // self.model_parallel_size)
        return copy

    # ---- rules --------------------------------------------------------------------------
    def check(
        self,
        model: Any = None,
        *,
        world_size: int | None = None,
        seq_len: int | None = None,
        global_batch_size: int | None = None,
        micro_batch_size: int | None = None,
        devices_per_node: int | None = None,
        verify_hints: bool = False,
    ) -> list[Violation]:
        """Every hard rule broken (severity "error") and soft rule bent ("warning").  With
        ``verify_hints``, pipeline-split hints name only fixes that pass every rule."""
        return rules.check(
            self,
            model,
            world_size=world_size,
            seq_len=seq_len,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            devices_per_node=devices_per_node,
            verify_hints=verify_hints,
        )

    def validate(
        self,
        model: Any = None,
        *,
        world_size: int | None = None,
        seq_len: int | None = None,
        global_batch_size: int | None = None,
        micro_batch_size: int | None = None,
    ) -> None:
        """Return None, or raise StrategyError listing every hard rule the inputs break."""
        errors = [
            v
            for v in self.check(
                model,
                world_size=world_size,
                seq_len=seq_len,
                global_batch_size=global_batch_size,
                micro_batch_size=micro_batch_size,
                verify_hints=True,
            )
            if v.severity == "error"
        ]
        if errors:
            raise StrategyError(errors)

    def warnings(self, model: Any = None, **kwargs: Any) -> list[Violation]:
        """The soft rules this strategy bends (TP across nodes, PP without VPP, ...)."""
        return [v for v in self.check(model, **kwargs) if v.severity == "warning"]

    def stage_layers(self, num_layers: int) -> list[int]:
        """Transformer layers held by each of the ``pp`` physical pipeline stages.

        Even split unless ``first_stage_layers``/``last_stage_layers`` are set; then the
        middle stages share the rest evenly (Megatron's uneven pipeline split); with a
        ``pipeline_layout``, the decoder layers it places on each rank.  Raises
        StrategyError when the layers cannot be split that way.
        """
        layout = self.layout_parsed
        mtp = layout.count("mtp") if layout is not None else None
        problems = rules.layer_split_violations(self, num_layers, mtp)
        if problems:
            raise StrategyError(problems)
        p = self.pp
        if layout is not None:
            return [
                sum(layout.stage(r, c).count("decoder") for c in range(self.vpp)) for r in range(p)
            ]
        if p == 1:
            return [num_layers]
        if self.account_for_embedding or self.account_for_loss:
            each = (num_layers + self.account_for_embedding + self.account_for_loss) // p
            out = [each] * p
            out[0] -= self.account_for_embedding
            out[-1] -= self.account_for_loss
            return out
        first = self.first_stage_layers
        last = self.last_stage_layers
        middle_stages = p - (first is not None) - (last is not None)
        rest = num_layers - (first or 0) - (last or 0)
        each = rest // middle_stages if middle_stages else 0
        out = [each] * p
        if first is not None:
            out[0] = first
        if last is not None:
            out[-1] = last
        return out

    def placements(self, num_layers: int, mtp_num_layers: int = 0) -> list[StagePlacement]:
        """What each (pipeline rank, virtual chunk) builds — embedding, decoder and MTP layer
        counts, loss — from the layout, ``account_for_*``, first/last stage counts or the even
        split, exactly as Megatron Core places them.  StrategyError when the split is
        impossible."""
        self.stage_layers(num_layers)  # the split's rules, with the fix
        layout = self.layout_parsed or split_stages(
            num_layers,
            self.pp,
            self.vpp,
            first_stage_layers=self.first_stage_layers,
            last_stage_layers=self.last_stage_layers,
            account_for_embedding=self.account_for_embedding,
            account_for_loss=self.account_for_loss,
            mtp_num_layers=mtp_num_layers,
        )
        return layout.placements()

    # ---- runtime (lazy edge) --------------------------------------------------------------
    def initialize(self, backend: str = "auto", **kwargs: Any):
        """Start torch.distributed if needed and build this strategy's process groups.

        Returns a handle whose ``[kind]`` is this rank's process group for every layout kind.
        Needs ``pip install "parastrat[megatron]"`` (torch; megatron-core for training).
        """
        from .runtime.groups import initialize

        return initialize(self, backend=backend, **kwargs)

    # ---- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every degree (plus derived world sizes and ``text``, the form
        :meth:`parse` reads back, ``str(self)``), JSON-ready."""
        d = self._degrees()
        d["min_world_size"] = self.min_world_size
        d["world_size"] = self.world_size
        d["expert_dp"] = self.expert_dp
        d["text"] = str(self)
        d["order_given"] = self.order_given  # whether "order" was chosen or derived
        return d

    def _degrees(self) -> dict[str, Any]:
        """Every field (a pipeline layout in Megatron's list form): what ``Strategy(**d)``
        takes back."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.layout_parsed is not None:
            d["pipeline_layout"] = self.layout_parsed.to_megatron()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Strategy:
        """Inverse of :meth:`to_dict` (derived keys are ignored; unknown keys are an error)."""
        if not isinstance(d, Mapping):
            raise StrategyError(
                Violation(
                    "strategy-type",
                    f"a strategy dict is a mapping of degrees, got {type(d).__name__}",
                    'pass e.g. {"tp": 4, "pp": 2}',
                )
            )
        known = {f.name for f in fields(cls)}
        _reject_unknown_fields({k: v for k, v in d.items() if k not in _DERIVED_KEYS})
        kwargs = {k: v for k, v in d.items() if k in known}
        if d.get("order_given") is False:  # derived from the degrees: derive it again
            kwargs.pop("order", None)
        return cls(**kwargs)

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """A Strategy from the text it prints (``"TP2 PP8(VP4)[Et|(t*2|)*30mL] CP1 EP64 ETP1
        DP64 SP"``, as a plan's table shows it) or from ``"tp=2,pp=8,vpp=4,ep=64,sp"``
        (:func:`parastrat.strategy_text.parse_strategy`; UsageError for text that is neither)."""
        from .strategy_text import parse_strategy  # strategy_text builds on this module

        return parse_strategy(text)

    def _pp_text(self) -> str:
        """``PP8(VP4)[3/2][+emb+loss]``: the pipeline degree with its split, as printed."""
        pp = f"PP{self.pp}" + (f"(VP{self.vpp})" if self.vpp > 1 else "")
        if self.first_stage_layers or self.last_stage_layers:
            pp += f"[{self.first_stage_layers or '-'}/{self.last_stage_layers or '-'}]"
        if self.pipeline_layout is not None:
            pp += f"[{self.layout_parsed}]"
        if self.account_for_embedding or self.account_for_loss:
            pp += ("[+emb" if self.account_for_embedding else "[") + (
                "+loss]" if self.account_for_loss else "]"
            )
        return pp

    def __str__(self) -> str:
        if self.is_inference:
            parts = [f"TP{self.tp}", f"U{self.ulysses}", f"R{self.ring}", f"CFG{self.cfg}"]
            split = self.vpp > 1 or self.uneven or self.pipeline_layout is not None
            if self.pp > 1 or split:
                parts.append(self._pp_text())
            if self.ep > 1 or self.etp != self.tp:
                parts.append(f"EP{self.ep} ETP{self.etp}")
        else:
            pp = self._pp_text()
            cp = f"CP{self.cp}" + (
                f"(U{self.ulysses}xR{self.ring})"
                if self.ulysses > 1 and self.ring > 1
                else "(U)"
                if self.ulysses > 1
                else ""
            )
            parts = [f"TP{self.tp}", pp, cp]
            if self.ep > 1 or self.etp != self.tp:
                parts.append(f"EP{self.ep} ETP{self.etp}")
        if self.dp is not None:
            parts.append(f"DP{self.dp}")
        if self.dp_shard is not None or self.dp_replicate > 1:
            parts.append(f"S{self.dp_shard_degree or '-'}xR{self.dp_replicate}")
        if self.fsdp is not None:
            parts.append(f"FSDP:{self.fsdp}")
        if self.sp:
            parts.append("SP")
        if self.order not in (MEGATRON_ORDER, XDIT_ORDER):
            parts.append(f"order={self.order}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Strategy({str(self)!r})"


#: The fields in declared order, and where ``pipeline_layout`` sits (:meth:`Strategy._key`).
_FIELD_NAMES = tuple(f.name for f in fields(Strategy))
_LAYOUT_INDEX = _FIELD_NAMES.index("pipeline_layout")


def as_training(s: Strategy) -> Strategy:
    """``s`` in Megatron's training order when its inference order was only a default (Ulysses
    given, no order, no CFG): ``Strategy(tp=2, ulysses=2, ring=2)`` is Megatron's hierarchical
    CP.  An explicit inference order (or cfg > 1) is refused (``megatron-inference-strategy``)
    with the fix: the training step model, memory model and Megatron adapters all read it."""
    if not s.is_inference:
        return s
    if not s.order_given and s.cfg == 1:
        try:
            return s.replace(order=MEGATRON_ORDER)
        except StrategyError:
            pass
    raise StrategyError(
        Violation(
            "megatron-inference-strategy",
            f"{s} uses the diffusion-inference rank order {s.order!r}"
            + (f" with cfg={s.cfg}" if s.cfg > 1 else "")
            + "; Megatron training has no CFG axis and orders ranks tp-cp-ep-dp-pp",
            f"use order {MEGATRON_ORDER} (--order; Python: Strategy(ulysses={s.ulysses}, "
            f"ring={s.ring}, order={MEGATRON_ORDER!r})) and cfg 1; plan-dit prices inference",
        )
    )
