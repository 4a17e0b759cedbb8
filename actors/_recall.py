"""The built-in ``recall`` tool: full-text search over a session's whole history.

Compaction takes old turns out of the model's view, never out of the log. ``recall``
searches the log: every user input, follow-up, answer, tool call and result, and every
summary, each found with the stream version of the event that holds it.

The index is a cache, rebuildable from the log at any time: an SQLite FTS5 table in
memory, one per event store in the process, built lazily from a session's stream at its
first search and extended from the stream's tail at each later one (one read of the new
events). It serves every store (SQLite, PostgreSQL, in memory) the same way; a new
process rebuilds it on its first search.
"""

from __future__ import annotations

import re
import sqlite3
import weakref
from typing import TYPE_CHECKING, Final

from protocols import JsonObject, JsonValue, default_registry

from ._session_events import (
    AssistantRecorded,
    ContextCompacted,
    FollowUpReceived,
    HumanAnswered,
    RunStarted,
    ToolFinished,
)
from ._tools import Tool, ToolContext, tool

if TYPE_CHECKING:
    from runtime import EventStore

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


class RecallHit:
    """One passage found: the stream version of its event, its kind and an excerpt."""

    __slots__ = ("excerpt", "kind", "version")

    def __init__(self, version: int, kind: str, excerpt: str) -> None:
        self.version = version
        self.kind = kind
        self.excerpt = excerpt

    def as_json(self) -> JsonObject:
        """The hit as the model reads it."""
        return {"version": self.version, "kind": self.kind, "excerpt": self.excerpt}


class _Index:
    """The FTS5 cache of one store: passages by stream and version, and how far each
    stream is indexed."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE passages USING fts5("
            "stream UNINDEXED, version UNINDEXED, kind UNINDEXED, text)"
        )
        self._indexed: dict[str, int] = {}

    async def catch_up(self, store: EventStore, stream: str) -> None:
        version = self._indexed.get(stream, 0)
        if await store.stream_version(stream) < version:  # deleted and written again
            self._db.execute("DELETE FROM passages WHERE stream = ?", (stream,))
            version = 0
        while True:
            page = await store.read(stream, version + 1, limit=_PAGE)
            rows = []
            for record in page:
                event = default_registry.decode_record(record)
                rows += [(stream, record.version, kind, text) for kind, text in passages(event)]
                version = record.version
            self._db.executemany("INSERT INTO passages VALUES (?, ?, ?, ?)", rows)
            self._indexed[stream] = version
            if len(page) < _PAGE:
                return

    def search(self, stream: str, query: str, limit: int) -> list[RecallHit]:
        words = {w.lower() for w in _WORD.findall(query)}
        if not words:
            return []
        match = " OR ".join('"' + word.replace('"', "") + '"' for word in sorted(words))
        rows = self._db.execute(
            "SELECT version, kind, snippet(passages, 3, '[', ']', '…', 24), text, rank "
            "FROM passages WHERE passages MATCH ? AND stream = ? ORDER BY rank, version "
            "LIMIT ?",
            (match, stream, _CANDIDATES),
        ).fetchall()

        def score(row: tuple[object, ...]) -> tuple[int, float, int]:
            # Most words of the query first, then BM25 (which alone favours short texts).
            found = {w.lower() for w in _WORD.findall(str(row[3]))} & words
            return (-len(found), float(str(row[4])), int(str(row[0])))

        best = sorted(rows, key=score)[:limit]
        return [RecallHit(int(v), str(k), str(e)) for v, k, e, _, _ in best]


_INDEXES: weakref.WeakKeyDictionary[EventStore, _Index] = weakref.WeakKeyDictionary()


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
        index = _INDEXES[store] = _Index()
    stream = f"session/{session_id}"
    await index.catch_up(store, stream)
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
