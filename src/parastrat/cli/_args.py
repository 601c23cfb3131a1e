"""Argument tables: a command's flags as data, one record per ``add_argument`` call.

A subcommand lists its flags in tuples of :class:`Arg`, grouped by theme, and registers each
tuple with :func:`add_args` on the parser, an argument group or a mutually exclusive group;
the order of a table is the order ``--help`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Arg:
    """One flag: its names (``"--gpus", "--devices"``) and the keyword options of
    :meth:`argparse.ArgumentParser.add_argument` (type, default, help, ...)."""

    names: tuple[str, ...]
    options: Mapping[str, Any]


def arg(*names: str, **options: Any) -> Arg:
    """The :class:`Arg` of ``add_argument(*names, **options)``."""
    return Arg(names, MappingProxyType(options))


def store_true(name: str, text: str) -> Arg:
    """A ``store_true`` switch: ``name`` with help ``text``."""
    return arg(name, action="store_true", help=text)


def add_args(target: Any, rows: Iterable[Arg]) -> None:
    """Add every row of ``rows`` to ``target`` (a parser, an argument group or a mutually
    exclusive group), in order."""
    for row in rows:
        target.add_argument(*row.names, **row.options)
