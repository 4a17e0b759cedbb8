"""The built-in ``recall`` tool: full-text search over a session's whole history.

Compaction takes old turns out of the model's view, never out of the log. ``recall``
searches the log: every user input, follow-up, answer, tool call and result, and every
summary, each found with the stream version of the event that holds it.

The index is a cache, rebuildable from the log at any time: an SQLite FTS5 table
(``recall_passages``, with ``recall_progress``: how far each stream is indexed), built
lazily from a session's stream at its first search and extended from the stream's tail
at each later one (one read of the new events). With the SQLite store it lives in the
log's own file, so it survives restarts and is shared by every process using the file.
With the PostgreSQL store it lives in the log's schema (a ``tsvector`` column with a GIN
index, ``runtime._postgres._text``), equally durable and shared; with the in-memory
store, in the process's memory. Dropping the two tables loses nothing but time.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, TypeGuard, final

import attrs
import trio

from protocols import JsonObject, JsonValue
from protocols.codec import default_registry
from runtime import SqliteEventStore

from .._tools._tool import Tool, ToolContext, tool
from ._context import ContextCompacted
from ._events import (
    AssistantRecorded,
    FollowUpReceived,
    HumanAnswered,
    RunStarted,
    ToolFinished,
)

if TYPE_CHECKING:
    from runtime import EventStore, RecordedEvent

logger = logging.getLogger("powertrio.recall")

__all__ = ["RECALL", "RecallHit", "recall_tool", "search_history"]

RECALL: Final = "recall"
"""The tool's name."""

_PAGE = 2048
_CANDIDATES = 200
"""Passages BM25 ranks best, re-ranked by how many words of the query each holds."""
_WORD = re.compile(r"\w+", re.UNICODE)


def passages(event: object) -> list[tuple[str, str]]:
    """The searchable texts of one session event, each with its kind."""
    if isinstance(event, RunStarted):
        return [("user", event.input)] if event.input else []
    if isinstance(event, FollowUpReceived):
        return [(event.follow_up.kind, event.follow_up.content)]
    if isinstance(event, AssistantRecorded):
        found = [("assistant", event.message.content)] if event.message.content else []
        found += [
            ("tool_call", f"{call.name}({call.arguments})")
            for call in event.message.tool_calls
            if call.name != RECALL  # a search would find itself
        ]
        return found
    if isinstance(event, ToolFinished):
        if event.outcome.tool_name == RECALL:
            return []  # its excerpts are already indexed where they came from
        return [("tool_result", event.outcome.content)]
    if isinstance(event, ContextCompacted):
        return [("summary", event.summary)] if event.summary else []
    if isinstance(event, HumanAnswered):
        return [("human", event.answer)] if event.answer else []
    return []


@final
@attrs.frozen
class RecallHit:
    """One passage found in a session's history."""

    version: int
    """The stream version of the event that holds it."""
    kind: str
    """What it is: ``user``, a follow-up's kind, ``assistant``, ``tool_call``,
    ``tool_result``, ``summary`` or ``human``."""
    excerpt: str
    """The passage around the words found (each marked ``[like this]``)."""

    def as_json(self) -> JsonObject:
        """The hit as the model reads it."""
        return {"version": self.version, "kind": self.kind, "excerpt": self.excerpt}


class _Index:
    """The FTS5 cache of one store: passages by stream and version, and how far each
    stream is indexed (in the store's own file for SQLite, else in memory)."""

    def __init__(self, path: str | None) -> None:
        self._db = sqlite3.connect(
            path or ":memory:", check_same_thread=False, timeout=30, isolation_level=None
        )
        # A cache: a lost tail is indexed again from the log, so no fsync is needed.
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS recall_passages USING fts5("
            "stream UNINDEXED, version UNINDEXED, kind UNINDEXED, text)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS recall_progress "
            "(stream TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        self._lock = trio.Lock()

    def _indexed(self, stream: str) -> int:
        row = self._db.execute(
            "SELECT version FROM recall_progress WHERE stream = ?", (stream,)
        ).fetchone()
        return int(row[0]) if row is not None else 0

    async def catch_up(self, store: EventStore, stream: str) -> None:
        async with self._lock:  # two searches of one round index the tail once
            version = self._indexed(stream)
            if await store.stream_version(stream) < version:  # deleted, then written again
                with self._db:
                    self._db.execute("DELETE FROM recall_passages WHERE stream = ?", (stream,))
                    self._db.execute("DELETE FROM recall_progress WHERE stream = ?", (stream,))
                version = 0
            while True:
                page = await store.read(stream, version + 1, limit=_PAGE)
                if page:
                    self._store(stream, page)
                    version = page[-1].version
                if len(page) < _PAGE:
                    return

    def _store(self, stream: str, page: list[RecordedEvent]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            done = self._indexed(stream)  # another process may have indexed some meanwhile
            rows = [
                (stream, record.version, kind, text)
                for record in page
                if record.version > done
                for kind, text in passages(default_registry.decode_record(record))
            ]
            self._db.executemany("INSERT INTO recall_passages VALUES (?, ?, ?, ?)", rows)
            self._db.execute(
                "INSERT OR REPLACE INTO recall_progress VALUES (?, ?)",
                (stream, max(done, page[-1].version)),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def search(self, stream: str, query: str, limit: int) -> list[RecallHit]:
        words = {w.lower() for w in _WORD.findall(query)}
        if not words:
            return []
        match = " OR ".join('"' + word.replace('"', "") + '"' for word in sorted(words))
        rows = self._db.execute(
            "SELECT version, kind, snippet(recall_passages, 3, '[', ']', '…', 24), text, rank "
            "FROM recall_passages WHERE recall_passages MATCH ? AND stream = ? "
            "ORDER BY rank, version "
            "LIMIT ?",
            (match, stream, _CANDIDATES),
        ).fetchall()

        return _best(rows, words, limit)


def _best(rows: Sequence[Sequence[object]], words: set[str], limit: int) -> list[RecallHit]:
    """Rows ``(version, kind, excerpt, text, score)``, re-ranked: the hits to return."""

    def score(row: Sequence[object]) -> tuple[int, float, int]:
        # Most words of the query first, then the engine's rank (which alone favours
        # short texts); a lower score ranks better.
        found = {w.lower() for w in _WORD.findall(str(row[3]))} & words
        return (-len(found), float(str(row[4])), int(str(row[0])))

    best = sorted(rows, key=score)[:limit]
    return [RecallHit(int(str(v)), str(k), str(e)) for v, k, e, _, _ in best]


class _TextIndexStore(Protocol):
    """A store that keeps the index itself (the PostgreSQL store)."""

    async def indexed_version(self, stream: str) -> int: ...
    async def index_passages(
        self, stream: str, up_to: int, passages: Sequence[tuple[int, str, str]]
    ) -> None: ...
    async def reset_passages(self, stream: str) -> None: ...
    async def search_passages(
        self, stream: str, words: Sequence[str], limit: int
    ) -> list[tuple[int, str, str, str, float]]: ...


def _keeps_text_index(store: object) -> TypeGuard[_TextIndexStore]:
    return all(
        callable(getattr(store, name, None))
        for name in ("indexed_version", "index_passages", "reset_passages", "search_passages")
    )


class _StoreIndex:
    """The index kept by the store itself, in its database: durable and shared."""

    def __init__(self, store: _TextIndexStore) -> None:
        self._store = store
        self._lock = trio.Lock()

    async def catch_up(self, store: EventStore, stream: str) -> None:
        async with self._lock:  # two searches of one round index the tail once
            version = await self._store.indexed_version(stream)
            if await store.stream_version(stream) < version:  # deleted, then written again
                await self._store.reset_passages(stream)
                version = 0
            while True:
                page = await store.read(stream, version + 1, limit=_PAGE)
                if page:
                    rows = [
                        (record.version, kind, text)
                        for record in page
                        for kind, text in passages(default_registry.decode_record(record))
                    ]
                    version = page[-1].version
                    await self._store.index_passages(stream, version, rows)
                if len(page) < _PAGE:
                    return

    async def search(self, stream: str, query: str, limit: int) -> list[RecallHit]:
        words = {w.lower() for w in _WORD.findall(query)}
        if not words:
            return []
        rows = await self._store.search_passages(stream, sorted(words), _CANDIDATES)
        return _best(rows, words, limit)


_INDEXES: weakref.WeakKeyDictionary[EventStore, _Index | _StoreIndex] = weakref.WeakKeyDictionary()


def _open_index(store: EventStore) -> _Index | _StoreIndex:
    """The index of ``store``: in its own file for SQLite, in its database for a store
    that keeps one (PostgreSQL), else (or when the SQLite file cannot take it, as when it
    is read-only) in memory."""
    if _keeps_text_index(store):
        return _StoreIndex(store)
    if isinstance(store, SqliteEventStore):
        try:
            return _Index(store.path)
        except sqlite3.Error:
            logger.warning("recall: cannot keep the index in %s; keeping it in memory", store)
    return _Index(None)


async def search_history(
    store: EventStore, session_id: str, query: str, *, limit: int = 5
) -> list[RecallHit]:
    """Search a session's whole history (compacted parts included), best match first.

    Args:
        store (EventStore): the log.
        session_id (str): the session.
        query (str): words; a passage matches if it holds any of them (ranked by BM25).
        limit (int): the most hits.

    Returns:
        list[RecallHit]: the hits, each with the stream version of its event.
    """
    index = _INDEXES.get(store)
    if index is None:
        index = _INDEXES[store] = _open_index(store)
    stream = f"session/{session_id}"
    await index.catch_up(store, stream)
    if isinstance(index, _StoreIndex):
        return await index.search(stream, query, limit)
    return index.search(stream, query, limit)


def recall_tool() -> Tool[..., object]:
    """The ``recall`` tool: search this session's whole history, compacted parts included.

    A session with a :class:`ContextPolicy` gets it unless ``recall=False``; give it to any
    other session as ``tools=[recall_tool()]``. The session searched is the caller, taken
    from the :class:`ToolContext`, never from the model's arguments.
    """

    @tool(
        name=RECALL,
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Words to look for (any of them; best matches first).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 20,
                    "description": "The most excerpts to return (default 5).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )
    async def recall(context: ToolContext, query: str, limit: int = 5) -> JsonObject:
        """Search everything said in this conversation so far, including the parts that
        were summarised or dropped from your context; returns excerpts with the log
        version of each."""
        if context.runtime is None:
            msg = "recall: the tool was called outside a runtime"
            raise RuntimeError(msg)
        if not _WORD.search(query):
            msg = f"recall: the query {query!r} has no words to search for"
            raise ValueError(msg)
        hits = await search_history(context.runtime.store, context.session_id, query, limit=limit)
        found: list[JsonValue] = [hit.as_json() for hit in hits]
        return {"query": query, "count": len(found), "results": found}

    return recall
