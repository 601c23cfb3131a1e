"""A strategy written as text, in either of the two forms users meet.

* ``key=value`` pairs: ``"tp=4,pp=2,vpp=5,sp"`` (a bare flag name such as ``sp`` means True;
  ``order``, ``pipeline_layout`` and ``fsdp`` take text), as ``explain --compare`` takes them;
* the form :class:`~parastrat.Strategy` prints, which ``plan``, ``explain`` and ``check`` show:
  ``"TP2 PP8(VP4)[Et|(t*2|)*30mL] CP1 EP64 ETP1 DP64 SP"`` or, for a diffusion-serving grid,
  ``"TP1 U2 R2 CFG2 DP1"``.  So a candidate copied from a plan's table can be pasted back
  wherever a strategy is taken.

:func:`parse_strategy` tells the forms apart (``=`` or a bare lower-case flag: pairs; tokens
such as ``TP4``: the printed form) and raises :class:`~parastrat.errors.UsageError` naming the
token it could not read.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

from .errors import UsageError
from .strategy import MEGATRON_ORDER, XDIT_ORDER, Strategy

#: Every field a Strategy takes (one source of truth: the dataclass itself).
FIELDS = tuple(f.name for f in fields(Strategy))
_FLAGS = tuple(f.name for f in fields(Strategy) if f.type == "bool")
#: Fields given as text: the rank order, a pipeline layout (``Et*4|(t*4|)*14tmL``), an FSDP level.
_TEXT = ("order", "pipeline_layout", "fsdp")

#: Tokens of the printed form with one whole number: the token's prefix -> the field.
_DEGREES = {
    "TP": "tp",
    "CP": "cp",
    "EP": "ep",
    "ETP": "etp",
    "DP": "dp",
    "U": "ulysses",
    "R": "ring",
    "CFG": "cfg",
    # plan-dit's labels: "Ulysses4 x Ring2 x CFG2 x TP2"
    "Ulysses": "ulysses",
    "Ring": "ring",
}
_DEGREE = re.compile(rf"^({'|'.join(sorted(_DEGREES, key=len, reverse=True))})(\d+)$")
#: What a plan's candidate adds after its strategy (micro-batch, recompute, offloaded layers):
#: not part of a strategy; said so with the flags that set them.
_RUN_WORDS = re.compile(r"^(mbs\d+|none|selective|full|offload\d+)$")
_PP = re.compile(r"^PP(\d+)(?:\(VP(\d+)\))?((?:\[[^\]]*\])*)$")
_CP = re.compile(r"^CP(\d+)\((?:U(\d+)xR(\d+)|U)\)$")
_SHARD = re.compile(r"^S(\d+|-)xR(\d+)$")
_SPLIT = re.compile(r"^(\d+|-)/(\d+|-)$")


def parse_strategy(text: str) -> Strategy:
    """A :class:`~parastrat.Strategy` from ``"tp=4,pp=2,sp"`` or from the form it prints
    (``"TP4 PP2 CP1 DP8 SP"``); :class:`~parastrat.errors.UsageError` for text that is neither,
    a :class:`~parastrat.errors.StrategyError` (rule ids) for degrees that break a rule."""
    text = str(text).strip()
    if not text:
        raise UsageError('empty strategy; write e.g. "tp=4,pp=2,sp" or "TP4 PP2 CP1 SP"')
    first = text.split()[0]
    if first == "x" or _read_token(first, {}) or _RUN_WORDS.match(first):
        return Strategy(**printed_fields(text))
    return Strategy(**pair_fields(text))


def pair_fields(text: str) -> dict[str, Any]:
    """Strategy keywords of ``"tp=4,pp=2,vpp=5,sp"`` (spaces count as commas)."""
    kwargs: dict[str, Any] = {}
    for part in (p.strip() for p in text.replace(" ", ",").split(",")):
        if not part:
            continue
        key, _, value = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if key not in FIELDS:
            raise UsageError(f"unknown strategy field {key!r} in {text!r}; use {', '.join(FIELDS)}")
        if key in kwargs:
            raise UsageError(f"{key} is given twice in {text!r}; give each field once")
        if key in _FLAGS:
            kwargs[key] = _flag(key, value, text)
        elif key in _TEXT:
            kwargs[key] = value.strip()
        else:
            try:
                kwargs[key] = int(value)
            except ValueError:
                raise UsageError(f"{key}={value!r} in {text!r} is not a whole number") from None
    return kwargs


#: Spellings of a flag's value ("sp" alone means on).
_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(key: str, value: str, text: str) -> bool:
    """A flag field's value; UsageError for a spelling that is neither on nor off."""
    word = value.strip().lower()
    if word not in _ON + _OFF:
        raise UsageError(f"{key}={value!r} in {text!r} is not on or off; write {key} or {key}=0")
    return word in _ON


def printed_fields(text: str) -> dict[str, Any]:
    """Strategy keywords of the printed form (``str(strategy)``), token by token."""
    kwargs: dict[str, Any] = {}
    for token in text.split():
        before = dict(kwargs)
        if token == "x":  # plan-dit joins its degrees with " x "
            continue
        if _RUN_WORDS.match(token):
            raise UsageError(
                f"{token!r} in {text!r} is how a plan runs its candidate (mbsN: the micro-batch, "
                "none/selective/full: the recompute, offloadN: offloaded layers), not part of "
                "the strategy: leave it out and pass --micro-batch-size / --recompute / "
                "--cpu-offload-layers"
            )
        if not _read_token(token, kwargs):
            raise UsageError(
                f"cannot read {token!r} in strategy {text!r}: the printed form is e.g. "
                '"TP2 PP8(VP4) CP1 EP8 ETP1 DP16 SP" (or write "tp=2,pp=8,vpp=4,ep=8,sp")'
            )
        if twice := sorted(k for k in before if k in kwargs and before[k] != kwargs[k]):
            raise UsageError(f"{token!r} gives {', '.join(twice)} again in {text!r}; once each")
    # a serving grid prints CFG (and U, R); a training one CP, whose Ulysses part alone would
    # make Strategy derive the serving order.  A serving grid whose degrees derive the xDiT
    # order anyway leaves it derived (as Strategy(ulysses=2) would), so that the text of a
    # strategy built without an order reads back as one
    serving = "cfg" in kwargs or ("ulysses" in kwargs and "cp" not in kwargs)
    derived = serving and (kwargs.get("ulysses", 1) > 1 or kwargs.get("cfg", 1) > 1)
    if not derived:
        kwargs.setdefault("order", XDIT_ORDER if serving else MEGATRON_ORDER)
    return kwargs


def _read_token(token: str, kwargs: dict[str, Any]) -> bool:
    """Put what ``token`` says into ``kwargs``; False when it is no token of the form."""
    if token == "SP":
        kwargs["sp"] = True
    elif token.startswith("order="):
        kwargs["order"] = token.partition("=")[2] or MEGATRON_ORDER
    elif token.startswith("FSDP:"):
        kwargs["fsdp"] = token.partition(":")[2]
    elif m := _DEGREE.match(token):
        kwargs[_DEGREES[m.group(1)]] = int(m.group(2))
    elif m := _CP.match(token):
        kwargs["cp"] = int(m.group(1))
        kwargs["ulysses"] = int(m.group(2)) if m.group(2) else int(m.group(1))
        kwargs["ring"] = int(m.group(3)) if m.group(3) else 1
    elif m := _SHARD.match(token):
        kwargs["dp_shard"] = None if m.group(1) == "-" else int(m.group(1))
        kwargs["dp_replicate"] = int(m.group(2))
    elif m := _PP.match(token):
        kwargs["pp"] = int(m.group(1))
        if m.group(2):
            kwargs["vpp"] = int(m.group(2))
        return _read_brackets(re.findall(r"\[([^\]]*)\]", m.group(3)), kwargs)
    else:
        return False
    return True


def _read_brackets(groups: list[str], kwargs: dict[str, Any]) -> bool:
    """The ``[...]`` groups after ``PPn(VPv)``: ``[first/last]`` layer counts, ``[+emb+loss]``
    accounting, or a pipeline layout."""
    for group in groups:
        if m := _SPLIT.match(group):
            first, last = m.groups()
            kwargs["first_stage_layers"] = None if first == "-" else int(first)
            kwargs["last_stage_layers"] = None if last == "-" else int(last)
        elif group.startswith("+"):
            kwargs["account_for_embedding"] = "+emb" in group
            kwargs["account_for_loss"] = "+loss" in group
        elif group:
            kwargs["pipeline_layout"] = group
        else:
            return False
    return True
