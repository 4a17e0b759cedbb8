"""The SQLite event log's file format: schema, pragmas, SQL statements and row decoding.

The writer thread and the store facade both speak SQL to the same tables; keeping every
statement and the layout decisions behind them (the lagging per-stream index, small pages,
the single-statement group insert) in one module means a change to the file format is made
and reviewed in one place, and the other two modules read as the concurrency they are.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from protocols.errors import (
    CorruptLogError,
    ForeignDatabaseError,
    StoreError,
    StoreSchemaVersionError,
)

from ._event_store import RecordedEvent, StreamInfo

APPLICATION_ID = 0x50545249
"""``PRAGMA application_id`` of a powertrio event log ("PTRI"): how we recognise our files."""

SCHEMA_VERSION = 1
"""The storage schema this code writes and reads (``PRAGMA user_version``)."""

# Why the (stream, version) index lags behind: events are appended in position order, so
# the events table only grows at its end, but an index keyed by stream puts each new
# entry on the leaf page of its stream. A group commit over 256 streams would dirty 256
# index pages, each written whole to the WAL and synced: most of the cost of a commit.
# So the events are indexed in sweeps, each amortised over many commits, and a stream read
# adds the short unindexed tail (positions above ``meta.indexed_upto``) with a range scan.
# Both parts are read in one transaction, so a reader never sees an event twice or misses
# one. When to sweep is the writer thread's decision (``_sqlite_writer``).
#
# Small pages: whatever pages a commit does dirty are written whole to the WAL.
_PAGE_SIZE = 1024

_SQLITE_HEADER = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE events (
    position       INTEGER PRIMARY KEY AUTOINCREMENT,
    stream         TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    data           BLOB,
    blob_id        BLOB,
    metadata       BLOB,
    recorded_at    REAL    NOT NULL
);
CREATE TABLE stream_index (
    stream   TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (stream, version)
) WITHOUT ROWID;
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('indexed_upto', 0);
CREATE INDEX events_blob ON events (blob_id) WHERE blob_id IS NOT NULL;
CREATE TABLE streams (
    stream     TEXT    PRIMARY KEY,
    version    INTEGER NOT NULL,
    created_at REAL    NOT NULL,
    updated_at REAL    NOT NULL
) WITHOUT ROWID;
CREATE TABLE snapshots (
    stream         TEXT    PRIMARY KEY,
    version        INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    data           BLOB    NOT NULL,
    recorded_at    REAL    NOT NULL
) WITHOUT ROWID;
CREATE TABLE blobs (
    id   BLOB PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;
"""
_REQUIRED_TABLES = frozenset({"events", "stream_index", "meta", "streams", "snapshots", "blobs"})

_SELECT = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, "
    "coalesce(e.data, b.data), e.metadata, e.recorded_at, e.blob_id "
    "FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
)
READ_INDEXED = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, "
    "coalesce(e.data, b.data), e.metadata, e.recorded_at, e.blob_id "
    "FROM stream_index i JOIN events e ON e.position = i.position "
    "LEFT JOIN blobs b ON b.id = e.blob_id "
    "WHERE i.stream = ? AND i.version >= ? ORDER BY i.version LIMIT ?"
)
READ_TAIL = (
    _SELECT + "WHERE e.position > ? AND e.stream = ? AND e.version >= ? ORDER BY e.position LIMIT ?"
)
# In key order, each insert lands beside the previous one in the b-tree (about 15 %
# cheaper than position order, which jumps between streams' leaves on every row).
_INDEX_TAIL = (
    "INSERT INTO stream_index (stream, version, position) "
    "SELECT stream, version, position FROM events WHERE position > ? ORDER BY stream, version"
)
READ_ALL = _SELECT + "WHERE e.position >= ? ORDER BY e.position LIMIT ?"
# A group commit inserts its events with a few multi-row INSERTs rather than executemany:
# one statement step binds many rows, so the per-row cost of a step (and of the GIL hand-off
# around it) is paid once per statement. Batch sizes vary, so a batch is cut into chunks
# whose sizes are powers of two: nine statements, prepared once and kept in the connection's
# statement cache, cover every batch with at most nine executions.
_EVENT_COLUMNS = 9
_MAX_INSERT_ROWS = 256  # 2304 parameters, far below SQLite's limit of 32766
_INSERT_EVENTS = {
    rows: "INSERT INTO events (position, stream, version, type, schema_version, data, "
    "blob_id, metadata, recorded_at) VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    for rows in (1 << shift for shift in range(_MAX_INSERT_ROWS.bit_length()))
}
# The common group commit is this one statement, run outside any explicit transaction:
# SQLite inserts the group and commits it (with its sync) in a single step, which runs
# without the GIL, so Trio can run the callers of the previous group meanwhile. The rows
# travel as one JSON array of integers and plain-ASCII names, their payloads as one blob
# (a leading byte keeps it non-empty: substr of an empty blob is NULL). The last
# condition makes it insert nothing if another connection committed since the plan was
# made (it takes the write lock first, waiting for it like BEGIN IMMEDIATE, and reads
# after): then nothing was written, and the group goes through an explicit transaction.
INSERT_GROUP = (
    "INSERT INTO events (position, stream, version, type, schema_version, data, blob_id, "
    "metadata, recorded_at) "
    "SELECT ?3 + e.key, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, "
    "substr(?2, e.value ->> 4, e.value ->> 5), NULL, "
    "CASE WHEN e.value ->> 6 IS NOT NULL THEN substr(?2, e.value ->> 6, e.value ->> 7) END, "
    "?4 FROM json_each(?1) AS e "
    "WHERE (SELECT data_version FROM pragma_data_version()) = ?5"
)
GROUP_STATEMENT = sqlite3.sqlite_version_info >= (3, 38, 0)  # the ->> operator
_SWEEP_STREAMS = (
    "INSERT INTO streams (stream, version, created_at, updated_at) "
    "SELECT stream, max(version), min(recorded_at), max(recorded_at) FROM events "
    "WHERE position > ? GROUP BY stream "
    "ON CONFLICT (stream) DO UPDATE SET version = excluded.version, "
    "updated_at = excluded.updated_at"
)
# The streams table is swept with the index; newer facts are in the tail of events.
_STREAM_INFO = (
    "SELECT 0, stream, version, created_at, updated_at FROM streams WHERE stream = ?1 "
    "UNION ALL SELECT 1, stream, max(version), min(recorded_at), max(recorded_at) FROM events "
    "WHERE position > ?2 AND stream = ?1 GROUP BY stream ORDER BY 1"
)
STREAMS_LISTING = (
    "SELECT 0, stream, version, created_at, updated_at FROM streams "
    "WHERE substr(stream, 1, ?1) = ?2 "
    "UNION ALL SELECT 1, stream, max(version), min(recorded_at), max(recorded_at) FROM events "
    "WHERE position > ?3 AND substr(stream, 1, ?1) = ?2 GROUP BY stream ORDER BY 1"
)
INSERT_BLOB = "INSERT OR IGNORE INTO blobs (id, data) VALUES (?, ?)"
_READ_HEAD = "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'events'"
READ_SNAPSHOT = (
    "SELECT version, type, schema_version, data, recorded_at FROM snapshots WHERE stream = ?"
)
# Never replaces a newer snapshot with an older one: two savers racing leave the higher version.
SAVE_SNAPSHOT = (
    "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (stream) "
    "DO UPDATE SET version = excluded.version, type = excluded.type, "
    "schema_version = excluded.schema_version, data = excluded.data, "
    "recorded_at = excluded.recorded_at "
    "WHERE excluded.version >= snapshots.version"
)
DELETE_INDEXED_EVENTS = (
    "DELETE FROM events WHERE position IN (SELECT position FROM stream_index WHERE stream = ?)"
)
DELETE_TAIL_EVENTS = "DELETE FROM events WHERE position > ? AND stream = ?"
DELETE_STREAM_ROWS = tuple(
    f"DELETE FROM {table} WHERE stream = ?" for table in ("stream_index", "streams", "snapshots")
)
DELETE_ORPHAN_BLOBS = (
    "DELETE FROM blobs WHERE id NOT IN (SELECT blob_id FROM events WHERE blob_id IS NOT NULL)"
)

Synchronous = Literal["FULL", "NORMAL", "OFF"]


@contextlib.contextmanager
def map_errors(path: str) -> Iterator[None]:
    """Turn sqlite3 errors into our typed errors (the one boundary for this backend)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "malformed" in text or "not a database" in text or "corrupt" in text:
            raise CorruptLogError(path, text) from exc
        raise StoreError(f"event log {path!r}: {text}") from exc


def connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection to an existing log, with the pragmas every connection needs."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    # The store checkpoints in a background task, never inside a commit that callers are
    # waiting for.
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    if read_only:
        conn.execute("PRAGMA query_only = 1")
    return conn


def insert_events(conn: sqlite3.Connection, params: list[object], count: int) -> None:
    """Insert ``count`` events from flat ``params`` in power-of-two chunks, in order."""
    start = 0
    size = _MAX_INSERT_ROWS
    while count:
        while size > count:
            size >>= 1
        end = start + size * _EVENT_COLUMNS
        conn.execute(_INSERT_EVENTS[size], params[start:end] if start or count > size else params)
        start = end
        count -= size


def sweep(conn: sqlite3.Connection, indexed: int, head: int) -> int:
    """Index events ``indexed + 1 .. head`` and fold them into ``streams`` (caller's
    write transaction); returns the new ``indexed_upto``."""
    conn.execute(_INDEX_TAIL, (indexed,))
    conn.execute(_SWEEP_STREAMS, (indexed,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed_upto'", (head,))
    return head


def read_head(conn: sqlite3.Connection) -> int:
    """The newest position ever given out (deleted events included: positions never repeat)."""
    return int(conn.execute(_READ_HEAD).fetchone()[0])


def indexed_upto(conn: sqlite3.Connection) -> int:
    """The last position the per-stream index covers; a read scans the events above it."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'indexed_upto'").fetchone()
    return 0 if row is None else int(row[0])


def merge_infos(rows: Sequence[Any]) -> dict[str, StreamInfo]:
    """Merge swept stream rows (part 0) with tail aggregates (part 1, which come later)."""
    merged: dict[str, StreamInfo] = {}
    for _part, name, version, created, updated in rows:
        seen = merged.get(name)
        merged[name] = StreamInfo(
            stream=name,
            version=version,
            created_at=created if seen is None else seen.created_at,
            updated_at=updated,
        )
    return merged


def stream_info(conn: sqlite3.Connection, stream: str, upto: int) -> StreamInfo | None:
    """A stream's info from the swept table plus the unindexed tail (caller's transaction)."""
    return merge_infos(conn.execute(_STREAM_INFO, (stream, upto)).fetchall()).get(stream)


def row_to_event(path: str, row: Any) -> RecordedEvent:  # an sqlite3 row
    """Decode a row of ``READ_INDEXED``, ``READ_TAIL`` or ``READ_ALL``.

    Raises:
        CorruptLogError: the event's payload (or the blob holding it) is missing.
    """
    stream, version, position, type_, schema_version, data, metadata, recorded_at, blob = row
    if data is None:
        detail = (
            f"blob {bytes(blob).hex()} of {stream!r} version {version} is missing"
            if blob is not None
            else f"event {stream!r} version {version} has no payload"
        )
        raise CorruptLogError(path, detail)
    return RecordedEvent(
        stream=stream,
        version=version,
        position=position,
        type=type_,
        schema_version=schema_version,
        data=data,
        metadata=metadata,
        recorded_at=recorded_at,
    )


def open_database(
    path: str, *, synchronous: Synchronous, verify: bool
) -> tuple[sqlite3.Connection, int]:
    """Open or create the log at ``path`` for writing; returns the connection and the head.

    Raises:
        CorruptLogError: the file is damaged or not an SQLite database.
        ForeignDatabaseError: the file is another application's SQLite database.
        StoreSchemaVersionError: a newer powertrio wrote the file.
        StoreError: the file cannot be opened, or WAL mode cannot be turned on.
    """
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
        if header != _SQLITE_HEADER:
            raise CorruptLogError(path, "the file is not an SQLite database (bad header)")
    with map_errors(path):
        conn = connect(path, read_only=False)
    try:
        with map_errors(path):
            _prepare(conn, path, synchronous=synchronous, verify=verify)
            head = read_head(conn)
    except BaseException:
        conn.close()
        raise
    return conn, head


def _prepare(
    conn: sqlite3.Connection, path: str, *, synchronous: Synchronous, verify: bool
) -> None:
    """Create the schema in a new file, or check that an existing one is a log we can read."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {
        name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise ForeignDatabaseError(path)
    if app_id == 0:
        # A new file: the whole schema and the markers commit in one transaction, so a
        # crash here leaves an empty file, never a half-made log.
        conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"event log {path!r}: cannot switch to WAL mode (got {mode})")
        conn.executescript(
            "SAVEPOINT init;"
            + _SCHEMA
            + f"PRAGMA application_id = {APPLICATION_ID};"
            + f"PRAGMA user_version = {SCHEMA_VERSION};"
            + "RELEASE init;"
        )
    else:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise StoreSchemaVersionError(path, found, SCHEMA_VERSION)
        if found < 1 or not tables >= _REQUIRED_TABLES:
            raise CorruptLogError(
                path, f"storage schema {found} with tables {sorted(tables)} is incomplete"
            )
        if verify:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise CorruptLogError(path, "; ".join(map(str, problems[:5])))
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
