"""MindIE-SD adapter: a Strategy as the settings of the MindIE-SD model ports (Ascend NPUs).

The ``mindiesd`` wheel itself (3.1.0) holds kernels and no parallel configuration; the
settings live in its model ports (Wan2.1/Wan2.2 on Ascend), whose
``wan.distributed.parallel_mgr.ParallelConfig(tp_degree, sp_degree, ulysses_degree,
ring_degree, use_cfg_parallel, world_size)`` starts the HCCL groups in rank order
``tp-sp-cfg`` with ``world_size == cfg * sp * tp`` and ``sp = ulysses * ring``.  Their service
example takes the same degrees as ``--ulysses_size --ring_size --cfg_size --tp_size``.

This module needs neither torch nor torch_npu: :class:`MindIEParallelConfig` mirrors the
ports' settings as plain data, and :func:`to_port_config` builds the port's own class only
when that port is importable (it imports ``torch_npu``).

What the ports cannot express is refused with StrategyError: pipeline parallelism (xDiT's
PipeFusion must be 1 on NPU and the ports have none), expert parallelism, data-parallel
replicas (world must equal cfg * sp * tp), Megatron's sequence-parallel flag, and rank
orders other than tp inside sp inside cfg.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import MissingExtraError, StrategyError, Violation
from ..spec.dit_frameworks import FRAMEWORKS, MINDIESD_FLAGS, LaunchSwitches
from ..strategy import Strategy, require_strategy

#: Where the MindIE-SD model ports keep their ``ParallelConfig`` (tried in order).
PORT_CONFIG_MODULES: tuple[str, ...] = ("wan.distributed.parallel_mgr",)


@dataclass(frozen=True)
class MindIEParallelConfig:
    """The parallel settings a MindIE-SD model port takes, as plain data.

    ``tp_degree`` tensor parallel; ``sp_degree`` sequence parallel (= ``ulysses_degree *
    ring_degree``: Ulysses all-to-all inside, ring/KV-gather across); ``use_cfg_parallel``
    runs the conditional and unconditional guidance branches on two halves of the devices;
    ``world_size = tp * sp * (2 if use_cfg_parallel else 1)``.
    """

    tp_degree: int = 1
    sp_degree: int = 1
    ulysses_degree: int = 1
    ring_degree: int = 1
    use_cfg_parallel: bool = False
    world_size: int = 1

    @property
    def cfg_degree(self) -> int:
        """2 when the guidance branches run in parallel, else 1."""
        return 2 if self.use_cfg_parallel else 1

    def to_dict(self) -> dict[str, Any]:
        """The six settings as a dict (the ports' ``ParallelConfig`` keyword arguments)."""
        return asdict(self)

    def to_cli_args(
        self, *, vae_parallel: bool = False, switches: LaunchSwitches | None = None
    ) -> list[str]:
        """``--ulysses_size U --ring_size R --cfg_size C --tp_size T`` for the service example,
        then the Wan flags of the memory ``switches`` the split was priced with
        (:data:`~parastrat.spec.dit_frameworks.MINDIESD_FLAGS`: ``--vae_parallel``,
        ``--dit_fsdp``, ``--t5_fsdp``, ``--offload_model True``, as ``plan-dit`` prints
        them); ``vae_parallel=True`` is ``switches.vae_parallel``."""
        switches = switches or LaunchSwitches()
        if vae_parallel:
            switches = LaunchSwitches(**{**asdict(switches), "vae_parallel": True})
        args = [
            "--ulysses_size",
            str(self.ulysses_degree),
            "--ring_size",
            str(self.ring_degree),
            "--cfg_size",
            str(self.cfg_degree),
            "--tp_size",
            str(self.tp_degree),
        ]
        return args + [word for name in switches.on() for word in MINDIESD_FLAGS[name].split()]

    def to_port_config(self, cls: type | None = None) -> Any:
        """The port's own ``ParallelConfig`` built from these settings.

        ``cls`` defaults to the first importable of :data:`PORT_CONFIG_MODULES`; importing a
        port needs ``torch_npu`` and the port's code on ``sys.path``.
        """
        cls = cls if cls is not None else _find_port_class()
        accepted = _accepted_names(cls)
        values = self.to_dict()
        lost = [
            k
            for k, v in values.items()
            if accepted is not None and k not in accepted and v != _NEUTRAL[k]
        ]
        if lost:
            raise StrategyError(
                Violation(
                    "mindiesd-port-field",
                    f"{cls.__name__} takes no {', '.join(lost)}, needed for these settings",
                    f"use a strategy with {', '.join(f'{k}={_NEUTRAL[k]!r}' for k in lost)}, or a "
                    "port whose ParallelConfig has those fields",
                )
            )
        kwargs = {k: v for k, v in values.items() if accepted is None or k in accepted}
        return cls(**kwargs)


_NEUTRAL = {
    "tp_degree": 1,
    "sp_degree": 1,
    "ulysses_degree": 1,
    "ring_degree": 1,
    "use_cfg_parallel": False,
    "world_size": 1,
}


def _find_port_class() -> type:
    reasons = []
    for name in PORT_CONFIG_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        cls = getattr(module, "ParallelConfig", None)
        if isinstance(cls, type):
            return cls
        reasons.append(f"{name} has no ParallelConfig")
    raise MissingExtraError(
        PORT_CONFIG_MODULES[0],
        "mindiesd",
        "; ".join(reasons),
        install=(
            "It is the MindIE-SD model port's own code (e.g. the Wan port's wan/ package), "
            "not part of the mindiesd wheel: put the port's folder on sys.path on an Ascend "
            'machine with torch_npu and the CANN runtime (pip install "parastrat[mindiesd]" '
            "gives torch_npu and mindiesd, not the port), or pass cls=<the port's "
            "ParallelConfig>"
        ),
    )


def _accepted_names(cls: type) -> set[str] | None:
    """Keyword names ``cls`` takes, or None when it takes ``**kwargs``/cannot be inspected."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _order_violations(s: Strategy) -> list[Violation]:
    """The ports nest tp inside sp inside cfg; the strategy's order must agree."""
    names = ["sp" if n == "cp" else n for n in s.order.split("-")]
    used = [n for n in names if n in ("tp", "sp", "cfg")]
    if used != [n for n in ("tp", "sp", "cfg") if n in used]:
        return [
            Violation(
                "mindiesd-order",
                f"order {s.order!r} nests {'-'.join(used)}; the MindIE-SD ports place ranks "
                "tp-sp-cfg (tp fastest)",
                "use order='tp-sp-pp-cfg-dp' (the default for inference strategies)",
            )
        ]
    return []


def _violations(s: Strategy, world_size: int | None) -> list[Violation]:
    out: list[Violation] = []
    if s.pp > 1:
        out.append(
            Violation(
                "mindiesd-pp",
                f"pp={s.pp}: the MindIE-SD ports have no pipeline parallelism "
                "(PipeFusion must be 1 on NPU)",
                "use pp=1 and give those devices to ulysses (inside an HCCS island) or ring",
            )
        )
    if s.ep > 1:
        out.append(
            Violation(
                "mindiesd-ep",
                f"ep={s.ep}: the MindIE-SD ports take no expert parallel degree",
                "use ep=1 (fused MoE kernels take caller-made tp/ep groups instead)",
            )
        )
    if s.sp:
        out.append(
            Violation(
                "mindiesd-megatron-sp",
                "sp=True is Megatron's activation sharding over TP; the "
                "ports' sequence parallelism is ulysses x ring",
                "use sp=False and set ulysses/ring",
            )
        )
    out += _order_violations(s)
    unit = s.tp * s.cp * s.cfg
    if world_size is not None and world_size != unit:
        out.append(
            Violation(
                "mindiesd-world",
                f"world size {world_size} != cfg*ulysses*ring*tp = {s.cfg}*{s.ulysses}*{s.ring}*"
                f"{s.tp} = {unit}: the ports have no data-parallel replicas",
                _world_fix(unit, world_size),
            )
        )
    return out


def _world_fix(unit: int, world_size: int) -> str:
    """How to run ``world_size`` devices with a ``unit``-device split: one service per
    replica when it divides, else other degrees."""
    if world_size > unit and world_size % unit == 0:
        return (
            f"run {world_size // unit} replicas (one service each) of {unit} devices: "
            f"to_parallel_config(s, world_size={unit}) / to_cli_args(s, world_size={unit}) "
            "for each"
        )
    return f"use {unit} devices, or degrees whose product is {world_size}"


def to_parallel_config(
    s: Strategy, model: Any = None, *, world_size: int | None = None
) -> MindIEParallelConfig:
    """MindIE-SD port settings for strategy ``s``.

    With ``model`` (anything with ``num_attention_heads`` and, for GQA, ``num_query_groups``)
    head divisibility by tp and Ulysses is checked by :meth:`Strategy.validate`'s rules.
    ``world_size`` defaults to ``s.world_size`` (when dp is set), else ``cfg * sp * tp``.
    Raises StrategyError with every rule broken.
    """
    require_strategy(s, "to_parallel_config()")
    if world_size is None:
        world_size = s.world_size
    problems = _violations(s, world_size)
    problems += FRAMEWORKS["mindiesd"].violations(s, model)
    if model is not None:
        problems += [v for v in s.check(model) if v.severity == "error"]
    if problems:
        raise StrategyError(problems)
    return MindIEParallelConfig(
        tp_degree=s.tp,
        sp_degree=s.cp,
        ulysses_degree=s.ulysses,
        ring_degree=s.ring,
        use_cfg_parallel=s.cfg == 2,
        world_size=s.tp * s.cp * s.cfg,
    )


def to_cli_args(
    s: Strategy,
    model: Any = None,
    *,
    world_size: int | None = None,
    vae_parallel: bool = False,
    switches: LaunchSwitches | None = None,
) -> list[str]:
    """``["--ulysses_size", "4", "--ring_size", "1", "--cfg_size", "2", "--tp_size", "1"]``,
    then the flags of the memory ``switches`` (:meth:`MindIEParallelConfig.to_cli_args`)."""
    return to_parallel_config(s, model, world_size=world_size).to_cli_args(
        vae_parallel=vae_parallel, switches=switches
    )


def to_port_config(
    s: Strategy | MindIEParallelConfig, model: Any = None, *, cls: type | None = None
) -> Any:
    """The MindIE-SD port's own ``ParallelConfig`` for a strategy (or settings).

    Needs the port importable (``torch_npu``, CANN, the port on ``sys.path``) unless ``cls``
    is given; raises MissingExtraError naming the ``mindiesd`` extra otherwise.
    """
    settings = s if isinstance(s, MindIEParallelConfig) else to_parallel_config(s, model)
    return settings.to_port_config(cls)
