"""Make a provider's text valid Unicode: lone surrogates become U+FFFD."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import attrs

__all__ = ["repair", "repair_text"]

_T = TypeVar("_T")

#: ``attrs.evolve`` for any attrs instance (mypy's attrs plugin wants a concrete class).
_evolve: Callable[..., object] = attrs.evolve


def repair_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD.

    JSON can escape a lone surrogate (``"\\ud800"``), and Python decodes it into a string
    that no UTF-8 encoder accepts, so a single bad character from a model would make every
    event holding it unencodable. Surrogate pairs that arrived as two escapes are joined
    into the character they encode.

    Args:
        text (str): text from a provider.

    Returns:
        (str): valid text; ``text`` itself when it was valid.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def repair(value: _T) -> tuple[_T, bool]:
    """``value`` with its text repaired by :func:`repair_text`, and whether anything changed.

    Walks strings, tuples and attrs instances (deltas, responses, tool calls); anything
    else is returned as it is.

    Args:
        value (T): a stream delta, a response, or a part of one.

    Returns:
        (tuple[T, bool]): the repaired value (``value`` itself when nothing changed) and
        True when a replacement happened.
    """
    if isinstance(value, str):
        fixed = repair_text(value)
        return cast("_T", fixed), fixed is not value
    if isinstance(value, tuple):
        items = [repair(item) for item in value]
        if not any(changed for _, changed in items):
            return value, False
        return cast("_T", tuple(item for item, _ in items)), True
    cls = type(value)
    if attrs.has(cls):
        changes: dict[str, object] = {}
        for field in attrs.fields(cls):
            fixed_field, changed = repair(getattr(value, field.name))
            if changed:
                changes[field.name] = fixed_field
        if not changes:
            return value, False
        return cast("_T", _evolve(value, **changes)), True
    return value, False
