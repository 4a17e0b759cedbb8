"""PostgreSQL's dialect of the one SQL event store: its SQL, run on one connection.

``runtime._store._sql.SqlEventStore`` calls these in a worker thread (reads, on a
pooled autocommit connection, retried through an outage) or in the writer thread
(writes, retried when idempotent), with the arguments checked and psycopg's errors
mapped around the call. ``READ_ALL`` returns only events whose transaction is older
than every one in flight (``_postgres._schema``), so a follower never skips a late one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from .._store._contract import RecordedEvent, Snapshot, StreamInfo
from .._store._sql import snapshot_from_row
from ._schema import (
    DELETE_EVENTS,
    DELETE_ORPHAN_BLOBS,
    DELETE_SNAPSHOT_CHUNKS,
    DELETE_SNAPSHOTS,
    LOAD_CHECKPOINT,
    READ_ALL,
    READ_SNAPSHOT,
    READ_SNAPSHOT_CHUNKS,
    READ_STREAM,
    SAVE_CHECKPOINT,
    SAVE_SNAPSHOT,
    STREAM_VERSION,
    STREAMS_LISTING,
    replace_snapshot_chunks,
    row_to_event,
)
from ._text import forget_streams

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresDialect"]


@final
class PostgresDialect:
    """The SQL of a log in one PostgreSQL schema (``SqlDialect[psycopg.Connection]``)."""

    __slots__ = ("_where",)

    def __init__(self, where: str) -> None:
        self._where = where  # the server and schema, named in a CorruptLogError

    def read_stream(
        self, conn: psycopg.Connection, stream: str, from_version: int, limit: int | None
    ) -> list[RecordedEvent]:
        """The events, each verified (a payload against its blob id)."""
        where = self._where
        rows = conn.execute(READ_STREAM, (stream, from_version, limit), binary=True)
        return [row_to_event(where, row) for row in rows]

    def read_all(
        self, conn: psycopg.Connection, from_position: int, limit: int | None
    ) -> list[RecordedEvent]:
        """The log in position order, up to the oldest transaction still in flight."""
        where = self._where
        rows = conn.execute(READ_ALL, (from_position, limit), binary=True)
        return [row_to_event(where, row) for row in rows]

    def stream_version(self, conn: psycopg.Connection, stream: str) -> int:
        """The stream's head row."""
        row = conn.execute(STREAM_VERSION, (stream,)).fetchone()
        return 0 if row is None else int(row[0])

    def streams(self, conn: psycopg.Connection, prefix: str) -> list[StreamInfo]:
        """The listing, sorted by the server."""
        return [
            StreamInfo(stream=name, version=version, created_at=first, updated_at=last)
            for name, version, first, last in conn.execute(STREAMS_LISTING, (prefix,))
        ]

    def load_snapshot(self, conn: psycopg.Connection, stream: str) -> Snapshot | None:
        """The row and its chunks as of one moment."""
        with conn.transaction():
            row = conn.execute(READ_SNAPSHOT, (stream,), binary=True).fetchone()
            if row is None:
                return None
            chunks = {
                bytes(id_): bytes(data)
                for id_, data in conn.execute(READ_SNAPSHOT_CHUNKS, (stream,), binary=True)
            }
        return snapshot_from_row(stream, row, chunks)

    def save_snapshot(
        self,
        conn: psycopg.Connection,
        stream: str,
        version: int,
        *,
        type_: str,
        schema_version: int,
        data: bytes,
        recorded_at: float,
        chunks: dict[bytes, bytes],
    ) -> int:
        """Save unless beyond the head or older than the stored snapshot."""
        with conn.transaction():
            row = conn.execute(STREAM_VERSION, (stream,)).fetchone()
            current = 0 if row is None else int(row[0])
            if version <= current:
                saved = conn.execute(
                    SAVE_SNAPSHOT, (stream, version, type_, schema_version, data, recorded_at)
                ).rowcount
                if saved:  # not older than the stored one
                    replace_snapshot_chunks(conn, stream, chunks)
        return current

    def delete_streams(self, conn: psycopg.Connection, streams: list[str]) -> int:
        """Delete the rows of every table, and the recall index's passages of them."""
        if not streams:
            return 0
        with conn.transaction():
            deleted = conn.execute(DELETE_EVENTS, (streams,)).rowcount
            conn.execute(DELETE_SNAPSHOTS, (streams,))
            conn.execute(DELETE_SNAPSHOT_CHUNKS, (streams,))
            conn.execute(DELETE_ORPHAN_BLOBS)
            forget_streams(conn, streams)
        return deleted

    def load_checkpoint(self, conn: psycopg.Connection, name: str) -> tuple[int, bytes] | None:
        """The ``checkpoints`` table's row."""
        row = conn.execute(LOAD_CHECKPOINT, (name,), binary=True).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def save_checkpoint(
        self, conn: psycopg.Connection, name: str, position: int, data: bytes
    ) -> None:
        """One upsert: position and data together."""
        conn.execute(SAVE_CHECKPOINT, (name, position, data), binary=True)
