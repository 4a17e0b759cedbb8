"""A log's session streams, read page by page: ids, prefixes, events decoded or skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from protocols.codec import decode_record
from protocols.errors import CodecError, ConfigError, StreamNotFoundError

if TYPE_CHECKING:
    from runtime import RecordedEvent, SqliteEventStore
    from runtime.postgres import PostgresEventStore

__all__ = [
    "READ_PAGE",
    "SESSION_PREFIX",
    "LogStore",
    "decode_or_none",
    "in_session_tree",
    "read_stream",
    "resolve_session",
    "session_id_of",
]

SESSION_PREFIX = "session/"

LogStore: TypeAlias = "SqliteEventStore | PostgresEventStore"
"""What the CLI's ``open_log`` opens."""


def session_id_of(stream: str) -> str | None:
    """The session id of a ``session/<id>`` stream, else ``None``."""
    return stream[len(SESSION_PREFIX) :] if stream.startswith(SESSION_PREFIX) else None


def in_session_tree(root_id: str, session_id: str) -> bool:
    """Whether ``session_id`` is ``root_id`` or one of its sub-agents (``root.1``, ``root.1.2``)."""
    return session_id == root_id or session_id.startswith(root_id + ".")


async def resolve_session(store: LogStore, given: str) -> str:
    """The session id ``given`` names: an id, a ``session/<id>`` stream, or a unique prefix.

    Raises:
        StreamNotFoundError: no session matches.
        ConfigError: the prefix matches several sessions (they are listed).
    """
    wanted = given.removeprefix(SESSION_PREFIX)
    if not wanted:
        raise StreamNotFoundError(SESSION_PREFIX)
    if await store.stream_version(SESSION_PREFIX + wanted) > 0:
        # The whole id: one look at the stream's head. The listing below aggregates
        # every stream under the prefix (on PostgreSQL, over all of a long session's
        # events), which a page of the console should not pay for each time.
        return wanted
    infos = await store.streams(SESSION_PREFIX + wanted)
    ids = [sid for info in infos if (sid := session_id_of(info.stream)) is not None]
    if wanted in ids:
        return wanted
    # A prefix names a top-level session or a sub-agent, never several of either.
    candidates = sorted({i for i in ids if "." not in i[len(wanted) :]})
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise StreamNotFoundError(SESSION_PREFIX + wanted)
    listed = ", ".join(candidates[:5]) + (", ..." if len(candidates) > 5 else "")
    msg = f"{given!r} matches {len(candidates)} sessions ({listed}); give more of the id"
    raise ConfigError(msg)


READ_PAGE = 2000
"""Events read from the log at a time."""


async def read_stream(store: LogStore, stream: str) -> list[RecordedEvent]:
    """Every event of ``stream``, in order."""
    events: list[RecordedEvent] = []
    while True:
        page = await store.read(stream, len(events) + 1, limit=READ_PAGE)
        events.extend(page)
        if len(page) < READ_PAGE:
            return events


def decode_or_none(record: RecordedEvent) -> object | None:
    """The decoded event, or ``None`` when the codec cannot read it (``check`` says why)."""
    try:
        return decode_record(record)
    except CodecError:
        return None
