"""The SQLite event log's file format: schema, pragmas, SQL statements and row decoding.

The writer thread and the store facade both speak SQL to the same tables; keeping every
statement and the layout decisions behind them (the lagging per-stream index, small pages,
the single-statement group insert) in one module means a change to the file format is made
and reviewed in one place, and the other two modules read as the concurrency they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from protocols.errors import (
    CorruptLogError,
    ForeignDatabaseError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreSchemaVersionError,
)

from .._store._contract import RecordedEvent, StreamInfo

APPLICATION_ID = 0x50545249
"""``PRAGMA application_id`` of a powertrio event log ("PTRI"): how we recognise our files."""

SCHEMA_VERSION = 3
"""The storage schema this code writes and reads (``PRAGMA user_version``).

Version 2 added a checksum to every event row and the ``heads`` table whose triggers
refuse a second event at a taken (stream, version); version 3 added ``snapshot_chunks``,
which snapshot references the chunks stored apart in ``blobs``. An older file is upgraded
when opened (see ``_upgrade_from_1`` and ``_upgrade_from_2``).
"""

# Why the (stream, version) index lags behind: events are appended in position order, so
# the events table only grows at its end, but an index keyed by stream puts each new
# entry on the leaf page of its stream. A group commit over 256 streams would dirty 256
# index pages, each written whole to the WAL and synced: most of the cost of a commit.
# So the events are indexed in sweeps, each amortised over many commits, and a stream read
# adds the short unindexed tail (positions above ``meta.indexed_upto``) with a range scan.
# Both parts are read in one transaction, so a reader never sees an event twice or misses
# one. When to sweep is the writer thread's decision (``_sqlite._writer``).
#
# Small pages: whatever pages a commit does dirty are written whole to the WAL. Larger
# ones hold more pointers per interior page, so a growing events table balances its right
# edge (a fresh log's one step in bytes per run, when the table gains its third level)
# less often; but every page a run writes costs two or four times the bytes, which more
# than pays for that step (measured in the longevity bench's docstring).
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
    recorded_at    REAL    NOT NULL,
    checksum       INTEGER
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
# A snapshot's chunks (``save_snapshot(chunks=)``) live in ``blobs`` beside the big event
# payloads, content-addressed alike; this table says which stream's snapshot references
# which, so a chunk is kept while any snapshot references it and dropped after.
_CHUNK_STATEMENTS = (
    "CREATE TABLE snapshot_chunks (stream TEXT NOT NULL, id BLOB NOT NULL, "
    "PRIMARY KEY (stream, id)) WITHOUT ROWID",
    "CREATE INDEX snapshot_chunks_id ON snapshot_chunks (id)",
)
# The one-writer-per-stream guard, checked by SQLite at every insert, whoever inserts: an
# event must be its stream's head + 1, so a second writer of a (stream, version) and a gap
# are both refused, and the statement (the whole group) writes nothing. A UNIQUE index on
# events (stream, version) would say the same, but it is the per-commit index the lagging
# stream_index exists to avoid (one dirty leaf per stream per commit); ``heads`` has one
# short row per stream, so a group commit over 256 streams dirties a handful of its pages.
# (RAISE takes only a literal message: the writer names the stream and version, see
# SqliteWriter._retry_after_guard.)
GUARD_MESSAGE = "powertrio: stream version taken"
_GUARD_STATEMENTS = (
    "CREATE TABLE heads (stream TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TRIGGER events_guard BEFORE INSERT ON events BEGIN "
    f"SELECT RAISE(ABORT, '{GUARD_MESSAGE}') WHERE NEW.version IS NOT "
    "1 + coalesce((SELECT version FROM heads WHERE stream = NEW.stream), 0); END",
    "CREATE TRIGGER events_head AFTER INSERT ON events BEGIN "
    "INSERT INTO heads (stream, version) VALUES (NEW.stream, NEW.version) "
    "ON CONFLICT (stream) DO UPDATE SET version = excluded.version; END",
)


def _statements(script: str) -> tuple[str, ...]:
    """The statements of ``script``, one by one."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    assert not pending.strip(), pending
    return tuple(statements)


_NEW_LOG = (
    *_statements(_SCHEMA),
    *_GUARD_STATEMENTS,
    *_CHUNK_STATEMENTS,
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)
"""What a new file gets, in one transaction."""
_REQUIRED_TABLES = frozenset(
    {"events", "stream_index", "meta", "streams", "snapshots", "blobs", "heads", "snapshot_chunks"}
)
_REQUIRED_TABLES_BY_VERSION = {
    1: _REQUIRED_TABLES - {"heads", "snapshot_chunks"},
    2: _REQUIRED_TABLES - {"snapshot_chunks"},
}

_COLUMNS = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, "
    "coalesce(e.data, b.data), e.metadata, e.recorded_at, e.blob_id, e.checksum "
)
_SELECT = _COLUMNS + "FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
READ_INDEXED = (
    _COLUMNS + "FROM stream_index i JOIN events e ON e.position = i.position "
    "LEFT JOIN blobs b ON b.id = e.blob_id "
    "WHERE i.stream = ? AND i.version >= ? ORDER BY i.version LIMIT ?"
)
READ_TAIL = (
    _SELECT + "WHERE e.position > ? AND e.stream = ? AND e.version >= ? ORDER BY e.position LIMIT ?"
)
# The versions start..stop of a stream from the tail, newest first, limited to their
# count: the scan walks back from the head and stops at the oldest one wanted. A version
# stored as something else than an integer is returned, for the read to report it.
READ_TAIL_BACK = (
    _SELECT + "WHERE e.position > ? AND e.stream = ? AND e.version >= ? "
    "AND (e.version <= ? OR typeof(e.version) <> 'integer') ORDER BY e.position DESC LIMIT ?"
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
_EVENT_COLUMNS = 10
_MAX_INSERT_ROWS = 256  # 2560 parameters, far below SQLite's limit of 32766
_INSERT_EVENTS = {
    rows: "INSERT INTO events (position, stream, version, type, schema_version, data, "
    "blob_id, metadata, recorded_at, checksum) VALUES "
    + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
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
    "metadata, recorded_at, checksum) "
    "SELECT ?3 + e.key, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, "
    "substr(?2, e.value ->> 4, e.value ->> 5), NULL, "
    "CASE WHEN e.value ->> 6 IS NOT NULL THEN substr(?2, e.value ->> 6, e.value ->> 7) END, "
    "?4, e.value ->> 8 FROM json_each(?1) AS e "
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
READ_HEAD_VERSION = "SELECT version FROM heads WHERE stream = ?"
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
    f"DELETE FROM {table} WHERE stream = ?"
    for table in ("stream_index", "streams", "snapshots", "heads", "snapshot_chunks")
)
DELETE_ORPHAN_BLOBS = (
    "DELETE FROM blobs WHERE id NOT IN (SELECT blob_id FROM events WHERE blob_id IS NOT NULL) "
    "AND id NOT IN (SELECT id FROM snapshot_chunks)"
)
_READ_SNAPSHOT_CHUNK_IDS = "SELECT id FROM snapshot_chunks WHERE stream = ?"
READ_SNAPSHOT_CHUNKS = (
    "SELECT c.id, b.data FROM snapshot_chunks c JOIN blobs b ON b.id = c.id WHERE c.stream = ?"
)
_INSERT_SNAPSHOT_CHUNK = "INSERT OR IGNORE INTO snapshot_chunks (stream, id) VALUES (?, ?)"
_DELETE_SNAPSHOT_CHUNK = "DELETE FROM snapshot_chunks WHERE stream = ? AND id = ?"
# A chunk no snapshot references any more, unless an event's payload has the same bytes.
_DELETE_UNREFERENCED_CHUNK = (
    "DELETE FROM blobs WHERE id = ?1 "
    "AND NOT EXISTS (SELECT 1 FROM snapshot_chunks WHERE id = ?1) "
    "AND NOT EXISTS (SELECT 1 FROM events WHERE blob_id = ?1)"
)

Synchronous = Literal["FULL", "NORMAL", "OFF"]


_SQLITE_READONLY = 8
"""SQLite's primary result code for a write refused by a read-only file or folder (its
extended codes keep it in their low byte)."""


@contextlib.contextmanager
def map_errors(path: str) -> Iterator[None]:
    """Turn sqlite3 errors into our typed errors (the one boundary for this backend)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "malformed" in text or "not a database" in text or "corrupt" in text:
            raise CorruptLogError(path, text) from exc
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_READONLY:
            raise StoreReadOnlyError(path, text) from exc
        raise StoreError(f"event log {path!r}: {text}") from exc


BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for a lock another process holds, in milliseconds."""


def connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection to an existing log, with the pragmas every connection needs."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # The store checkpoints in a background task, never inside a commit that callers are
    # waiting for.
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    # Where SQLite is built with SECURE_DELETE (Debian's is), every page a write frees is
    # zeroed and so written too: a snapshot's update, which frees its old overflow pages,
    # then wrote half as many pages again. FAST still zeroes deleted cells on the B-tree
    # pages a write touches anyway, but adds no page to it.
    conn.execute("PRAGMA secure_delete = FAST")
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


def replace_snapshot_chunks(
    conn: sqlite3.Connection, stream: str, chunks: Mapping[bytes, bytes]
) -> None:
    """Make ``chunks`` the chunks of ``stream``'s snapshot (caller's write transaction).

    Writes the chunks its previous snapshot did not reference (each checked against its
    address first), and drops those it did and no snapshot or event references now: a
    snapshot of a state that grew by one chunk writes one chunk, whatever its size.

    Raises:
        ValueError: a new chunk's bytes do not match its address.
    """
    before = {bytes(id_) for (id_,) in conn.execute(_READ_SNAPSHOT_CHUNK_IDS, (stream,))}
    added = [id_ for id_ in chunks if id_ not in before]
    for id_ in added:
        data = chunks[id_]
        if hashlib.sha256(data).digest() != id_:
            msg = f"snapshot chunk {id_.hex()} of {stream!r} does not match its content address"
            raise ValueError(msg)
    if added:
        conn.executemany(INSERT_BLOB, [(id_, chunks[id_]) for id_ in added])
        conn.executemany(_INSERT_SNAPSHOT_CHUNK, [(stream, id_) for id_ in added])
    gone = [(id_,) for id_ in before if id_ not in chunks]
    if gone:
        conn.executemany(_DELETE_SNAPSHOT_CHUNK, [(stream, id_) for (id_,) in gone])
        conn.executemany(_DELETE_UNREFERENCED_CHUNK, gone)


def event_checksum(  # noqa: PLR0917  # positional: the hot path, and an SQL function
    stream: str, version: int, type_: str, schema_version: int, data: bytes, metadata: bytes | None
) -> int:
    """The CRC32 an event row carries: over its stream, version, type, schema version,
    payload and metadata, so a flipped byte in any of them is seen on read.

    CRC32 (``zlib``) costs well under a microsecond for a typical event; it is a guard
    against decay and stray writes, not against someone forging rows.
    """
    head = f"{stream}\n{version}\n{type_}\n{schema_version}\n"
    head += "-" if metadata is None else str(len(metadata))
    crc = zlib.crc32(data, zlib.crc32(head.encode("utf-8", "surrogatepass")))
    return crc if metadata is None else zlib.crc32(metadata, crc)


def row_to_event(path: str, row: Any) -> RecordedEvent:  # an sqlite3 row
    """Decode and verify a row of ``READ_INDEXED``, ``READ_TAIL`` or ``READ_ALL``.

    Nothing a damaged row claims is returned: its columns must have their types, a blob
    must match its content address and the row its checksum.

    Raises:
        CorruptLogError: the event's payload (or the blob holding it) is missing, a
            column is mistyped, or the checksum or the blob's address does not match.
    """
    stream, version, position, type_, schema_version, data, metadata, recorded_at, blob, crc = row
    if (
        type(version) is not int
        or type(schema_version) is not int
        or type(stream) is not str
        or type(type_) is not str
        or not (metadata is None or type(metadata) is bytes)
        or not (data is None or type(data) is bytes)
    ):
        raise CorruptLogError(
            path,
            f"the event at position {position} of {stream!r} has a mistyped column "
            f"(version {version!r}, schema_version {schema_version!r}, payload "
            f"{type(data).__name__})",
            stream=str(stream),
            version=version if type(version) is int else None,
            kind="mistyped",
        )
    if data is None:
        detail = (
            f"blob {bytes(blob).hex()} of {stream!r} version {version} is missing"
            if blob is not None
            else f"event {stream!r} version {version} has no payload"
        )
        raise CorruptLogError(path, detail, stream=stream, version=version, kind="missing")
    if blob is not None and hashlib.sha256(data).digest() != blob:
        raise CorruptLogError(
            path,
            f"blob {bytes(blob).hex()} of {stream!r} version {version} does not match its "
            "content address",
            stream=stream,
            version=version,
            kind="blob_hash",
        )
    if crc != event_checksum(stream, version, type_, schema_version, data, metadata):
        detail = "has no checksum" if crc is None else "does not match its checksum"
        raise CorruptLogError(
            path,
            f"event {stream!r} version {version} {detail}",
            stream=stream,
            version=version,
            kind="checksum",
        )
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


def check_contiguous(
    path: str,
    stream: str,
    *,
    from_version: int,
    wanted: int,
    events: Sequence[RecordedEvent],
    head: int,
) -> None:
    """Check that a stream read holds exactly the versions it should (``head``: the
    stream's version in ``heads``), so a deleted or duplicated event is never read as a
    shorter or different history.

    Raises:
        CorruptLogError: a version is missing or repeated, or the stream ends early.
    """
    expected = from_version
    for event in events:
        if event.version != expected:
            kind = "duplicate" if event.version < expected else "gap"
            detail = (
                f"{stream!r} version {event.version} is stored twice"
                if kind == "duplicate"
                else f"{stream!r} version {expected} is missing (the next stored is "
                f"{event.version})"
            )
            raise CorruptLogError(path, detail, stream=stream, version=expected, kind=kind)
        expected += 1
    if (wanted < 0 or len(events) < wanted) and expected <= head:
        raise CorruptLogError(
            path,
            f"{stream!r} versions {expected}..{head} are missing (the stream's head is {head})",
            stream=stream,
            version=expected,
            kind="gap",
        )


def open_database(
    path: str, *, synchronous: Synchronous, verify: bool
) -> tuple[sqlite3.Connection, int]:
    """Open or create the log at ``path`` for writing; returns the connection and the head.

    Raises:
        CorruptLogError: the file is damaged or not an SQLite database.
        ForeignDatabaseError: the file is another application's SQLite database.
        StoreSchemaVersionError: a newer powertrio wrote the file.
        StoreNotFoundError: ``path`` is a folder.
        StoreReadOnlyError: the file or its folder cannot be written.
        StoreError: the file cannot be opened, or WAL mode cannot be turned on.
    """
    if os.path.isdir(path):
        hint = "it is a folder: name the log's file (new or existing) in it"
        raise StoreNotFoundError(path, hint)
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


def _markers(conn: sqlite3.Connection) -> tuple[int, set[str]]:
    """The file's application id and its tables."""
    app_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {
        name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    return app_id, tables


def _create(conn: sqlite3.Connection) -> bool:
    """Write the schema and the markers into a new file; ``False`` when another process
    wrote them first.

    The write lock comes before the second look, so of two processes opening a new file
    at once one creates the log and the other finds it made (statement by statement:
    ``executescript`` would commit the transaction that holds the lock first)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        new = _markers(conn) == (0, set())
        if new:
            for statement in _NEW_LOG:
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return new


def _journal_in_wal(conn: sqlite3.Connection) -> str:
    """Switch the file into WAL mode and return the mode it is in.

    The switch takes the file's exclusive lock and, when another process holds a lock on
    the same new file at that moment (two openers of one new log), SQLite answers
    "database is locked" at once rather than through the busy timeout: try again, a little
    later each time, for as long as that timeout would have waited."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _prepare(
    conn: sqlite3.Connection, path: str, *, synchronous: Synchronous, verify: bool
) -> None:
    """Create the schema in a new file, or check that an existing one is a log we can read."""
    # One read transaction: another process may be creating the log meanwhile, and its id
    # read before that commit beside its tables read after would look like a foreign file.
    conn.execute("BEGIN")
    try:
        app_id, tables = _markers(conn)
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise ForeignDatabaseError(path)
    if app_id == 0:
        # A new file: the whole schema and the markers commit in one transaction, so a
        # crash here leaves an empty file, never a half-made log.
        conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        mode = _journal_in_wal(conn)
        if mode != "wal":
            raise StoreError(f"event log {path!r}: cannot switch to WAL mode (got {mode})")
        if not _create(conn):
            # Another process made the log meanwhile (``powertrio sessions`` beside the
            # ``run`` that creates it): open it as found.
            _prepare(conn, path, synchronous=synchronous, verify=verify)
            return
    else:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise StoreSchemaVersionError(path, found, SCHEMA_VERSION)
        required = _REQUIRED_TABLES_BY_VERSION.get(found, _REQUIRED_TABLES)
        if found < 1 or not tables >= required:
            raise CorruptLogError(
                path, f"storage schema {found} with tables {sorted(tables)} is incomplete"
            )
        if verify:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise CorruptLogError(path, "; ".join(map(str, problems[:5])))
        _journal_in_wal(conn)
        if found == 1:
            _upgrade_from_1(conn)
        if found <= 2:
            _upgrade_from_2(conn)
    conn.execute(f"PRAGMA synchronous = {synchronous}")


UPGRADE_CHECKSUMS_KEY = "checksummed_at_upgrade"
"""``meta`` key: how many event rows got their checksum when a version-1 file was upgraded
(their content before that moment could not be verified; ``check`` says so)."""

_CHECKSUM_FUNCTION = "powertrio_event_checksum"


def _checksum_or_null(  # noqa: PLR0917  # an SQL function's arguments
    stream: object,
    version: object,
    type_: object,
    schema_version: object,
    data: object,
    metadata: object,
) -> int | None:
    """``event_checksum`` as an SQL function; NULL for a row too damaged to checksum
    (a mistyped column or a missing payload), which reads then report."""
    if not (
        type(stream) is str
        and type(version) is int
        and type(type_) is str
        and type(schema_version) is int
        and type(data) is bytes
        and (metadata is None or type(metadata) is bytes)
    ):
        return None
    return event_checksum(stream, version, type_, schema_version, data, metadata)


def _upgrade_from_1(conn: sqlite3.Connection) -> None:
    """Bring a version-1 log to version 2 in one transaction (all or nothing); then
    ``_upgrade_from_2``.

    Adds the checksum column and fills it (one pass over the events, about a second per
    million rows), and the ``heads`` guard, filled from the events. The checksums bless
    the rows as they are now: ``meta`` keeps how many got one this way.
    """
    conn.create_function(_CHECKSUM_FUNCTION, 6, _checksum_or_null, deterministic=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 1:  # not upgraded meanwhile
            conn.execute("ALTER TABLE events ADD COLUMN checksum INTEGER")
            for statement in _GUARD_STATEMENTS:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO heads (stream, version) "
                "SELECT stream, max(version) FROM events GROUP BY stream"
            )
            checksummed = conn.execute(
                f"UPDATE events SET checksum = {_CHECKSUM_FUNCTION}(stream, version, type, "
                "schema_version, coalesce(data, (SELECT b.data FROM blobs b "
                "WHERE b.id = events.blob_id)), metadata)"
            ).rowcount
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                (UPGRADE_CHECKSUMS_KEY, checksummed),
            )
            conn.execute("PRAGMA user_version = 2")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _upgrade_from_2(conn: sqlite3.Connection) -> None:
    """Bring a version-2 log to version 3 in one transaction: add ``snapshot_chunks``
    (empty: a version-2 snapshot holds its chunks inline)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 2:  # not upgraded meanwhile
            for statement in _CHUNK_STATEMENTS:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
