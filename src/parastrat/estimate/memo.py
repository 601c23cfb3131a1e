"""Memos that belong to one model spec.

A :class:`~parastrat.spec.model.ModelSpec` is frozen, so the object itself stands for every
field: a memo held per spec object and keyed by a function's other arguments is keyed by
everything the function reads, without hashing the spec's forty fields on every call (which
cost ~10 us a call, a third of a memory estimate).  The memo keeps a reference to its spec, so
an id is never reused while its entry lives.  Equal specs built separately get separate memos
(correct, only less shared).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..spec.model import ModelSpec

#: Specs with a memo at most (the oldest half is dropped beyond it).
MAX_MODELS = 256

_MEMOS: dict[int, tuple[ModelSpec, dict[tuple, Any]]] = {}

F = TypeVar("F", bound=Callable[..., Any])


def model_memo(model: ModelSpec) -> dict[tuple, Any]:
    """The memo of ``model`` (created on first use)."""
    hit = _MEMOS.get(id(model))
    if hit is None or hit[0] is not model:
        if len(_MEMOS) >= MAX_MODELS:
            for key in list(_MEMOS)[: MAX_MODELS // 2]:
                del _MEMOS[key]
        hit = _MEMOS[id(model)] = (model, {})
    return hit[1]


def per_model(fn: F) -> F:
    """Memoise ``fn(model, ...)`` (hashable arguments) in ``model``'s memo, keyed by the
    function and every other argument."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def wrapper(model: ModelSpec, *args: Any, **kwargs: Any) -> Any:
        hit = _MEMOS.get(id(model))  # model_memo's common case, without the call
        memo = hit[1] if hit is not None and hit[0] is model else model_memo(model)
        key = (name, *args, *sorted(kwargs.items())) if kwargs else (name, *args)
        try:
            return memo[key]
        except KeyError:
            out = memo[key] = fn(model, *args, **kwargs)
            return out

    return cast(F, wrapper)


def clear() -> None:
    """Drop every model's memo."""
    _MEMOS.clear()
