"""Settings that name one of a few implementations (pooling, softmax, optimizer, ...): a table from
name to implementation, so that adding one is adding one entry, and an unknown name is an error
that lists the known ones."""

from __future__ import annotations

from typing import Mapping, TypeVar

T = TypeVar("T")


def choose(table: Mapping[str, T], setting: str, name: str) -> T:
    """``table[name]``; a ValueError naming ``setting``, the known names and ``name`` otherwise."""
    try:
        return table[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value, e.g. a list from JSON
        raise ValueError(f"{setting} must be one of {tuple(table)}, got {name!r}.") from None
