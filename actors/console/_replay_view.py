"""The replay page's divergence side by side: what the log recorded beside what this code
asked for, row by row."""

from __future__ import annotations

import re
from itertools import zip_longest
from typing import final

import attrs

__all__ = ["DiffRow", "side_by_side"]

_FIELD = re.compile(r"^(?P<name>[\w ]+): recorded (?P<old>.*?), replayed (?P<new>.*)$")


@final
@attrs.frozen
class DiffRow:
    """One row: the recorded side, the replayed side, and how they differ."""

    recorded: str
    replayed: str
    kind: str
    """``same`` (context), ``changed``, ``removed``, ``added``, ``hunk`` or ``note``
    (a line that belongs to neither side, given across both)."""


def side_by_side(difference: str) -> list[DiffRow]:
    """The rows of a replay's difference text (a unified diff of the system prompt and
    one ``name: recorded A, replayed B`` line per other field)."""
    rows: list[DiffRow] = []
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for old, new in zip_longest(removed, added):
            kind = (
                "changed"
                if old is not None and new is not None
                else "removed"
                if new is None
                else "added"
            )
            rows.append(DiffRow(old or "", new or "", kind))
        removed.clear()
        added.clear()

    for line in difference.splitlines():
        if line.startswith(("--- ", "+++ ")):
            flush()
            continue
        if line.startswith("-"):
            removed.append(line[1:])
            continue
        if line.startswith("+"):
            added.append(line[1:])
            continue
        flush()
        if line.startswith("@@"):
            rows.append(DiffRow(line, line, "hunk"))
        elif line.startswith(" "):
            rows.append(DiffRow(line[1:], line[1:], "same"))
        elif (found := _FIELD.match(line)) is not None:
            name = found["name"]
            rows.append(DiffRow(f"{name}: {found['old']}", f"{name}: {found['new']}", "changed"))
        else:
            rows.append(DiffRow(line, line, "note"))
    flush()
    return rows
