"""A full-text index of passages by stream and version, kept in the PostgreSQL log's schema.

The ``recall`` tool (``actors._session._recall``) indexes what a session said and heard; with the
SQLite store that index is an FTS5 table in the log's file, and here it is a table with
a ``tsvector`` column and a GIN index in the log's schema: it survives restarts and is
shared by every process on the database. Like FTS5's default tokenizer it does not stem
(the ``simple`` configuration), so the same words find the same passages on both stores.

It is a cache, rebuildable from the log: the tables are created at first use, and
dropping them loses nothing but the time to index again. Which events hold which
passages is the caller's business; this module only stores and searches text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "TextIndexMethods",
    "forget_streams",
    "index_passages",
    "indexed_version",
    "prepare",
    "reset_stream",
    "search_passages",
]

T = TypeVar("T")

_DDL = (
    """CREATE TABLE IF NOT EXISTS recall_passages (
        stream text COLLATE "C" NOT NULL,
        version bigint NOT NULL,
        kind text NOT NULL,
        text text NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
    )""",
    "CREATE INDEX IF NOT EXISTS recall_passages_stream ON recall_passages (stream, version)",
    "CREATE INDEX IF NOT EXISTS recall_passages_tsv ON recall_passages USING gin (tsv)",
    """CREATE TABLE IF NOT EXISTS recall_progress (
        stream text COLLATE "C" PRIMARY KEY,
        version bigint NOT NULL
    )""",
)

_HEADLINE = "StartSel=[, StopSel=], MaxWords=24, MinWords=8, ShortWord=0"

_SEARCH = (
    "SELECT p.version, p.kind, ts_headline('simple', p.text, q, %s), p.text, "
    "-ts_rank(p.tsv, q) FROM recall_passages p, to_tsquery('simple', %s) q "
    "WHERE p.stream = %s AND p.tsv @@ q ORDER BY ts_rank(p.tsv, q) DESC, p.version LIMIT %s"
)


def _stream_lock(schema: str, stream: str) -> int:
    digest = hashlib.sha256(f"powertrio-recall/{schema}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def prepare(conn: psycopg.Connection, schema: str) -> None:
    """Create the tables if missing (two processes at once: one creates, one waits)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_stream_lock(schema, ""),))
        for statement in _DDL:
            conn.execute(statement)


def indexed_version(conn: psycopg.Connection, stream: str) -> int:
    """How far ``stream`` is indexed (0: not at all)."""
    row = conn.execute("SELECT version FROM recall_progress WHERE stream = %s", (stream,))
    found = row.fetchone()
    return 0 if found is None else int(found[0])


def index_passages(
    conn: psycopg.Connection,
    schema: str,
    stream: str,
    up_to: int,
    passages: Sequence[tuple[int, str, str]],
) -> None:
    """Add the passages ``(version, kind, text)`` of ``stream`` up to version ``up_to``.

    Passages at or below what another process indexed meanwhile are skipped, so racing
    indexers never store one twice.
    """
    versions = [p[0] for p in passages]
    kinds = [p[1] for p in passages]
    texts = [p[2] for p in passages]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_stream_lock(schema, stream),))
        done = indexed_version(conn, stream)
        if passages:
            conn.execute(
                "INSERT INTO recall_passages (stream, version, kind, text) "
                "SELECT %s, v, k, t FROM unnest(%s::bigint[], %s::text[], %s::text[]) "
                "AS r(v, k, t) WHERE v > %s",
                (stream, versions, kinds, texts, done),
            )
        conn.execute(
            "INSERT INTO recall_progress VALUES (%s, %s) ON CONFLICT (stream) "
            "DO UPDATE SET version = greatest(recall_progress.version, excluded.version)",
            (stream, up_to),
        )


def reset_stream(conn: psycopg.Connection, schema: str, stream: str) -> None:
    """Forget what is indexed of ``stream`` (it was deleted and written again)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_stream_lock(schema, stream),))
        conn.execute("DELETE FROM recall_passages WHERE stream = %s", (stream,))
        conn.execute("DELETE FROM recall_progress WHERE stream = %s", (stream,))


def forget_streams(conn: psycopg.Connection, streams: Sequence[str]) -> None:
    """Drop what is indexed of ``streams`` (in the caller's transaction deleting them)."""
    row = conn.execute("SELECT to_regclass('recall_progress') IS NOT NULL").fetchone()
    if row is not None and row[0]:
        conn.execute("DELETE FROM recall_passages WHERE stream = ANY(%s::text[])", (streams,))
        conn.execute("DELETE FROM recall_progress WHERE stream = ANY(%s::text[])", (streams,))


def search_passages(
    conn: psycopg.Connection, stream: str, words: Sequence[str], limit: int
) -> list[tuple[int, str, str, str, float]]:
    """Passages of ``stream`` holding any of ``words``: ``(version, kind, excerpt, text,
    score)``, best first (a lower score is better, as FTS5's rank)."""
    # The words are \\w+ runs (no quote, no operator): quoted, each is one lexeme.
    query = " | ".join("'" + word.replace("'", "") + "'" for word in words if word)
    if not query:
        return []
    rows = conn.execute(_SEARCH, (_HEADLINE, query, stream, limit)).fetchall()
    return [(int(v), str(k), str(e), str(t), float(s)) for v, k, e, t, s in rows]


class TextIndexMethods:
    """The recall index's methods of ``PostgresEventStore`` (an optional capability).

    Kept here, beside their SQL. The writes are idempotent and run on the store's pooled
    read connections in transactions of their own, never in the writer thread, so
    indexing a long history does not hold up appends; they are retried through outages
    like reads.
    """

    _schema: str
    _text_ready: bool

    async def _run_read(self, fn: Callable[[psycopg.Connection], T]) -> T:
        raise NotImplementedError  # the store's own

    async def _run_text(self, fn: Callable[[psycopg.Connection], T]) -> T:
        if not self._text_ready:
            schema = self._schema
            await self._run_read(lambda conn: prepare(conn, schema))
            self._text_ready = True
        return await self._run_read(fn)

    async def indexed_version(self, stream: str) -> int:
        """How far the recall index holds ``stream``'s passages (0: not at all).

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        return await self._run_text(lambda conn: indexed_version(conn, stream))

    async def index_passages(
        self, stream: str, up_to: int, passages: Sequence[tuple[int, str, str]]
    ) -> None:
        """Index the passages ``(version, kind, text)`` of ``stream`` up to ``up_to``.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        schema, rows = self._schema, list(passages)
        await self._run_text(lambda conn: index_passages(conn, schema, stream, up_to, rows))

    async def reset_passages(self, stream: str) -> None:
        """Forget the indexed passages of ``stream`` (it was deleted and written again).

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        schema = self._schema
        await self._run_text(lambda conn: reset_stream(conn, schema, stream))

    async def search_passages(
        self, stream: str, words: Sequence[str], limit: int
    ) -> list[tuple[int, str, str, str, float]]:
        """Indexed passages of ``stream`` holding any of ``words``, best first:
        ``(version, kind, excerpt, text, score)``, a lower score ranking better.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        found = list(words)
        return await self._run_text(lambda conn: search_passages(conn, stream, found, limit))
