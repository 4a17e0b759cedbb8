"""SQLite's dialect of the one SQL event store: its SQL, run on one connection.

``runtime._store._sql.SqlEventStore`` calls these in a worker thread (reads, on a
read-only connection) or in the writer thread (writes, on the write connection), with
the arguments checked and SQLite's errors mapped around the call. Reads of a stream and
of the listing join the indexed part of the log and its tail (``_sqlite._schema``) in
one read transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import final

from .._store._contract import RecordedEvent, Snapshot, StreamInfo, effective_limit
from .._store._sql import snapshot_from_row
from ._schema import (
    DELETE_INDEXED_EVENTS,
    DELETE_ORPHAN_BLOBS,
    DELETE_STREAM_ROWS,
    DELETE_TAIL_EVENTS,
    READ_ALL,
    READ_HEAD_VERSION,
    READ_INDEXED,
    READ_SNAPSHOT,
    READ_SNAPSHOT_CHUNKS,
    READ_TAIL,
    READ_TAIL_BACK,
    SAVE_SNAPSHOT,
    STREAMS_LISTING,
    check_contiguous,
    indexed_upto,
    merge_infos,
    replace_snapshot_chunks,
    row_to_event,
)

__all__ = ["SqliteDialect"]

_READ_META = "SELECT key, value FROM meta WHERE key IN (?, ?)"
_UPSERT_META = (
    "INSERT INTO meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


@final
class SqliteDialect:
    """The SQL of a log in one SQLite file (``SqlDialect[sqlite3.Connection]``)."""

    __slots__ = ("_forget_versions", "_path")

    def __init__(self, path: str, forget_versions: Callable[[], None]) -> None:
        self._path = path
        # The writer's cache of stream versions, dropped after a deletion.
        self._forget_versions = forget_versions

    def read_stream(
        self, conn: sqlite3.Connection, stream: str, from_version: int, limit: int | None
    ) -> list[RecordedEvent]:
        """The events, verified one by one and as a run of versions with no gap.

        The unindexed tail is scanned only for the versions the index does not hold, from
        the newest event back to the oldest one wanted: a stream whose events are all
        indexed (or a read past its head, such as a re-activation from a snapshot at its
        head) costs the same however many events other streams keep in the tail, and a
        read of a stream's newest events does not scan past its older ones.
        """
        wanted = effective_limit(limit)
        conn.execute("BEGIN")  # one snapshot for the indexed part, the tail and the head
        try:
            upto = indexed_upto(conn)
            head = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
            rows = conn.execute(READ_INDEXED, (stream, from_version, wanted)).fetchall()
            rest = -1 if wanted < 0 else wanted - len(rows)
            if rest and head is None:  # no head to bound the tail by: scan it all
                rows += conn.execute(READ_TAIL, (upto, stream, from_version, rest))
            elif rest:
                # The tail holds the stream's versions after the indexed ones, in order
                # (a log that does not fails the check below whatever the tail holds).
                start = from_version + len(rows)
                stop = head[0] if rest < 0 else min(head[0], start + rest - 1)
                if stop >= start:
                    count = stop - start + 1
                    tail = conn.execute(READ_TAIL_BACK, (upto, stream, start, stop, count))
                    rows += reversed(tail.fetchall())
        finally:
            conn.execute("COMMIT")
        path = self._path
        events = [row_to_event(path, row) for row in rows]
        check_contiguous(
            path,
            stream,
            from_version=from_version,
            wanted=wanted,
            events=events,
            head=0 if head is None else head[0],
        )
        return events

    def read_all(
        self, conn: sqlite3.Connection, from_position: int, limit: int | None
    ) -> list[RecordedEvent]:
        """The log in position order (one writer: positions commit in order)."""
        path = self._path
        args = (from_position, effective_limit(limit))
        return [row_to_event(path, row) for row in conn.execute(READ_ALL, args)]

    def stream_version(self, conn: sqlite3.Connection, stream: str) -> int:
        """The stream's head as the one-writer guard keeps it."""
        row = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
        return 0 if row is None else int(row[0])

    def streams(self, conn: sqlite3.Connection, prefix: str) -> list[StreamInfo]:
        """The listing: the index's rows merged with the tail's."""
        conn.execute("BEGIN")
        try:
            rows = conn.execute(
                STREAMS_LISTING, (len(prefix), prefix, indexed_upto(conn))
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        merged = merge_infos(rows)
        return [merged[name] for name in sorted(merged)]

    def load_snapshot(self, conn: sqlite3.Connection, stream: str) -> Snapshot | None:
        """The row and its chunks as one snapshot of the file."""
        conn.execute("BEGIN")
        try:
            row = conn.execute(READ_SNAPSHOT, (stream,)).fetchone()
            if row is None:
                return None
            chunks = dict(conn.execute(READ_SNAPSHOT_CHUNKS, (stream,)).fetchall())
        finally:
            conn.execute("COMMIT")
        return snapshot_from_row(stream, row, chunks)

    def save_snapshot(
        self,
        conn: sqlite3.Connection,
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
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
            current = 0 if row is None else int(row[0])
            if version <= current:
                conn.execute(
                    SAVE_SNAPSHOT, (stream, version, type_, schema_version, data, recorded_at)
                )
                if conn.execute("SELECT changes()").fetchone()[0]:  # not older: saved
                    replace_snapshot_chunks(conn, stream, chunks)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return current

    def delete_streams(self, conn: sqlite3.Connection, streams: list[str]) -> int:
        """Delete in chunks of 500 names, from the index and the tail alike."""
        deleted = 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(streams), 500):
                chunk = [(n,) for n in streams[start : start + 500]]
                before = conn.total_changes
                upto = indexed_upto(conn)
                conn.executemany(DELETE_INDEXED_EVENTS, chunk)
                conn.executemany(DELETE_TAIL_EVENTS, [(upto, name) for (name,) in chunk])
                deleted += conn.total_changes - before
                for statement in DELETE_STREAM_ROWS:
                    conn.executemany(statement, chunk)
            conn.execute(DELETE_ORPHAN_BLOBS)
            conn.execute("COMMIT")
        finally:
            self._forget_versions()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return deleted

    def load_checkpoint(self, conn: sqlite3.Connection, name: str) -> tuple[int, bytes] | None:
        """Two rows of ``meta``: the data, and its position under the key with ``@``."""
        key = f"checkpoint/{name}"
        rows = dict(
            conn.execute(
                "SELECT key, value FROM meta WHERE key IN (?, ?)", (key, key + "@")
            ).fetchall()
        )
        data, position = rows.get(key), rows.get(key + "@")
        if type(data) is not bytes or type(position) is not int:
            return None
        return position, data

    def save_checkpoint(
        self, conn: sqlite3.Connection, name: str, position: int, data: bytes
    ) -> None:
        """Both rows of ``meta`` in one transaction."""
        key = f"checkpoint/{name}"
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_UPSERT_META, (key, data))
            conn.execute(_UPSERT_META, (key + "@", position))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
