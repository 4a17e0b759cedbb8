"""The timers index's checkpoint: open in time proportional to what is pending, not history.

The timers service re-arms every pending timer at open. Folding the whole log for that
costs time proportional to the log's age (a year of an hourly agent is millions of
events). Instead the service keeps a checkpoint in the store: the pending timers of
every stream as folded up to a log position. Opening loads it and folds only the events
after that position; the service saves a new one after each open and every
:data:`CHECKPOINT_EVERY` events appended while it runs.

A checkpoint is a cache, like a snapshot: the index it gives is exactly the fold of the
log up to its position, since it is itself built only from the log (never from what the
service merely observed); one of another format or that does not decode is logged and
ignored (the whole log is folded). A store without ``load_checkpoint``/``save_checkpoint``
(an optional capability: the SQLite, PostgreSQL and in-memory stores have it) gets
the full fold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol, TypeGuard

import orjson

from protocols.codec import default_registry

from .._store._contract import EventStore
from ._book import PendingTimer, TimerBook

logger = logging.getLogger("powertrio.timers")

NAME = "timers"
"""The checkpoint's name in the store."""
FORMAT = 1
"""The checkpoint's format version; another one is ignored."""
CHECKPOINT_EVERY = 10_000
"""Events appended while the runtime runs between two checkpoints: at most this many
(plus those of the last open) are folded at the next open, however old the log."""


class _Checkpoints(Protocol):
    async def load_checkpoint(self, name: str) -> tuple[int, bytes] | None: ...
    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None: ...


def supports_checkpoints(store: object) -> TypeGuard[_Checkpoints]:
    """Whether ``store`` can keep a projection's checkpoint."""
    return callable(getattr(store, "load_checkpoint", None)) and callable(
        getattr(store, "save_checkpoint", None)
    )


def encode(books: Mapping[str, TimerBook]) -> bytes:
    """The pending timers of each stream as checkpoint bytes."""
    unstructure = default_registry.converter.unstructure
    return orjson.dumps(
        {
            "format": FORMAT,
            "books": {
                stream: unstructure(book.pending, tuple[PendingTimer, ...])
                for stream, book in books.items()
            },
        }
    )


def decode(data: bytes) -> dict[str, TimerBook]:
    """The books :func:`encode` wrote.

    Raises:
        ValueError: another format, or bytes that do not decode.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"format {found!r}, expected {FORMAT}")
    structure = default_registry.converter.structure
    try:
        return {
            stream: TimerBook(pending=structure(pending, tuple[PendingTimer, ...]))
            for stream, pending in raw["books"].items()
        }
    except Exception as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


async def load(store: EventStore) -> tuple[int, dict[str, TimerBook]] | None:
    """The newest checkpoint's position and books, or ``None`` (fold the whole log)."""
    if not supports_checkpoints(store):
        return None
    found = await store.load_checkpoint(NAME)
    if found is None:
        return None
    position, data = found
    try:
        return position, decode(data)
    except ValueError as exc:
        logger.warning("timers: ignored the checkpoint at position %s (%s)", position, exc)
        return None


async def save(store: EventStore, position: int, books: Mapping[str, TimerBook]) -> None:
    """Save the books folded up to ``position`` (a no-op for a store without checkpoints)."""
    if supports_checkpoints(store):
        await store.save_checkpoint(NAME, position, encode(books))
