"""The embedded event store: one SQLite file in WAL mode, one writer task with group commit."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar, final

import attrs
import trio

from protocols.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    ForeignDatabaseError,
    StoreClosedError,
    StoreError,
    StoreSchemaVersionError,
)

from ._event_store import (
    AppendResult,
    CommitSignal,
    EventStoreStatistics,
    NewEvent,
    RecordedEvent,
    Snapshot,
    StreamInfo,
    Subscription,
    check_append_args,
    check_from,
    check_stream_name,
    effective_limit,
)

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SqliteEventStore", "open_sqlite_store"]

APPLICATION_ID = 0x50545249
"""``PRAGMA application_id`` of a powertrio event log ("PTRI"): how we recognise our files."""

SCHEMA_VERSION = 1
"""The storage schema this code writes and reads (``PRAGMA user_version``)."""

# Why the (stream, version) index lags behind: events are appended in position order, so
# the events table only grows at its end, but an index keyed by stream puts each new
# entry on the leaf page of its stream. A group commit over 256 streams would dirty 256
# index pages, each written whole to the WAL and synced: most of the cost of a commit.
# So a commit indexes the events only once ``index_lag`` of them are unindexed (one
# sweep, amortised over many commits), and a stream read adds the short unindexed tail
# (positions above ``meta.indexed_upto``) with a range scan. Both parts are read in one
# transaction, so a reader never sees an event twice or misses one.
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
_READ_INDEXED = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, "
    "coalesce(e.data, b.data), e.metadata, e.recorded_at, e.blob_id "
    "FROM stream_index i JOIN events e ON e.position = i.position "
    "LEFT JOIN blobs b ON b.id = e.blob_id "
    "WHERE i.stream = ? AND i.version >= ? ORDER BY i.version LIMIT ?"
)
_READ_TAIL = (
    _SELECT + "WHERE e.position > ? AND e.stream = ? AND e.version >= ? ORDER BY e.position LIMIT ?"
)
_INDEX_TAIL = (
    "INSERT INTO stream_index (stream, version, position) "
    "SELECT stream, version, position FROM events WHERE position > ? ORDER BY position"
)
_READ_ALL = _SELECT + "WHERE e.position >= ? ORDER BY e.position LIMIT ?"
_INSERT_EVENT = (
    "INSERT INTO events (position, stream, version, type, schema_version, data, blob_id, "
    "metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
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
_STREAMS_LISTING = (
    "SELECT 0, stream, version, created_at, updated_at FROM streams "
    "WHERE substr(stream, 1, ?1) = ?2 "
    "UNION ALL SELECT 1, stream, max(version), min(recorded_at), max(recorded_at) FROM events "
    "WHERE position > ?3 AND substr(stream, 1, ?1) = ?2 GROUP BY stream ORDER BY 1"
)
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (id, data) VALUES (?, ?)"
_DELETE_ORPHAN_BLOBS = (
    "DELETE FROM blobs WHERE id NOT IN (SELECT blob_id FROM events WHERE blob_id IS NOT NULL)"
)

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL", "OFF"]


@final
class _PendingAppend:
    """One queued append, waiting for its group commit (a plain slotted class: hot path)."""

    __slots__ = ("done", "events", "expected_version", "outcome", "stream", "taken")

    def __init__(self, stream: str, events: Sequence[NewEvent], expected_version: int) -> None:
        self.stream = stream
        self.events = events
        self.expected_version = expected_version
        self.done = trio.Event()
        self.taken = False
        self.outcome: AppendResult | BaseException | None = None


@attrs.define(eq=False)
class _Plan:
    head: int
    event_rows: list[tuple[object, ...]] = attrs.field(factory=list)
    blob_rows: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    stream_rows: dict[str, tuple[str, int, float, float]] = attrs.field(factory=dict)
    accepted: list[tuple[_PendingAppend, AppendResult]] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Counters:
    appends: int = 0
    events_appended: int = 0
    conflicts: int = 0
    failed_appends: int = 0
    commits: int = 0


@contextlib.contextmanager
def _map_errors(path: str) -> Iterator[None]:
    """Turn sqlite3 errors into our typed errors (the one boundary for this backend)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "malformed" in text or "not a database" in text or "corrupt" in text:
            raise CorruptLogError(path, text) from exc
        raise StoreError(f"event log {path!r}: {text}") from exc


def _connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    # Checkpoints run in a background task (_checkpointer), never inside a commit that
    # callers are waiting for.
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    if read_only:
        conn.execute("PRAGMA query_only = 1")
    return conn


def _indexed_upto(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'indexed_upto'").fetchone()
    return 0 if row is None else int(row[0])


def _merge_infos(rows: Sequence[Any]) -> dict[str, StreamInfo]:
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


def _stream_info(conn: sqlite3.Connection, stream: str, upto: int) -> StreamInfo | None:
    """A stream's info from the swept table plus the unindexed tail (caller's transaction)."""
    return _merge_infos(conn.execute(_STREAM_INFO, (stream, upto)).fetchall()).get(stream)


def _row_to_event(path: str, row: Any) -> RecordedEvent:  # an sqlite3 row
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


@final
@attrs.define(eq=False, repr=False)
class SqliteEventStore:
    """The embedded event store on one SQLite file (WAL), opened by :func:`open_sqlite_store`.

    Appends are queued to one writer task, which commits everything queued so far in one
    transaction and one sync, in a worker thread: concurrent appenders share the cost of
    durability while each awaits its own acknowledgement. Reads run in worker threads on
    separate read-only connections, so they never wait behind a commit.
    """

    _path: str
    _blob_threshold: int
    _max_batch: int
    _clock: Callable[[], float]
    _writer: sqlite3.Connection
    _write_lock: trio.Lock = attrs.field(factory=trio.Lock)
    _readers: list[sqlite3.Connection] = attrs.field(factory=list)
    _reader_limit: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(4))
    _readers_guard: threading.Lock = attrs.field(factory=threading.Lock)
    _queue: list[_PendingAppend] = attrs.field(factory=list)
    _wakeup: trio.Event = attrs.field(factory=trio.Event)
    _in_flight: int = 0
    _closing: bool = False
    _closed: bool = False
    _signal: CommitSignal = attrs.field(factory=CommitSignal)
    _drained: trio.Event = attrs.field(factory=trio.Event)
    # Writer-thread cache of stream versions (see _plan); only the writer thread uses it.
    _versions: dict[str, tuple[int, float]] = attrs.field(factory=dict)
    _db_head: int = 0
    _data_version: int = -1
    _cache_valid: bool = False
    _indexed_upto: int = 0
    _index_lag: int = 4096
    _checkpoint_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _counters: _Counters = attrs.field(factory=_Counters)

    def __repr__(self) -> str:
        return f"<SqliteEventStore {self._path!r}>"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    # --- opening ---------------------------------------------------------------------

    @classmethod
    def _open_sync(
        cls, path: str, *, synchronous: Synchronous, verify: bool
    ) -> tuple[sqlite3.Connection, int]:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, "rb") as file:
                header = file.read(len(_SQLITE_HEADER))
            if header != _SQLITE_HEADER:
                raise CorruptLogError(path, "the file is not an SQLite database (bad header)")
        with _map_errors(path):
            conn = _connect(path, read_only=False)
        try:
            with _map_errors(path):
                cls._prepare(conn, path, synchronous=synchronous, verify=verify)
                head = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'events'"
                ).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        return conn, int(head)

    @staticmethod
    def _prepare(
        conn: sqlite3.Connection, path: str, *, synchronous: Synchronous, verify: bool
    ) -> None:
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

    # --- writing ---------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append events to a stream if it is at ``expected_version``; see ``EventStore``.

        Raises:
            ConcurrencyConflictError: the stream is at another version; nothing was written.
            StoreClosedError: the store is closed.
            StoreError: the commit failed; nothing was written.
            TypeError, ValueError: bad arguments.
        """
        check_append_args(stream, events, expected_version)
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        pending = _PendingAppend(stream, tuple(events), expected_version)
        self._queue.append(pending)
        self._wakeup.set()
        try:
            await pending.done.wait()
        except trio.Cancelled:
            if not pending.taken:
                self._queue.remove(pending)
                raise
            # The writer already holds it: the outcome is decided by the commit in flight.
            # Waiting for it (bounded by one commit) lets the caller learn what happened.
            with trio.CancelScope(shield=True):
                await pending.done.wait()
        outcome = pending.outcome
        if isinstance(outcome, AppendResult):
            return outcome
        assert outcome is not None
        raise outcome

    async def _checkpointer(self, interval: float) -> None:
        """Copy the WAL back into the database now and then, off the commit path.

        A PASSIVE checkpoint on its own connection neither blocks the writer nor readers;
        once it has copied everything, SQLite restarts the WAL from its beginning.
        """
        conn = await trio.to_thread.run_sync(lambda: _connect(self._path, read_only=False))
        try:
            with self._checkpoint_scope:
                await self._checkpoint_loop(conn, interval)
        finally:
            conn.close()

    async def _checkpoint_loop(self, conn: sqlite3.Connection, interval: float) -> None:
        seen = -1
        while not self._closing:
            await trio.sleep(interval)
            if self._counters.commits != seen:
                seen = self._counters.commits
                with contextlib.suppress(sqlite3.Error):
                    await trio.to_thread.run_sync(conn.execute, "PRAGMA wal_checkpoint(PASSIVE)")

    async def _writer_loop(self) -> None:
        try:
            await self._writer_loop_inner()
        finally:
            self._drained.set()

    async def _writer_loop_inner(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            for pending in batch:
                pending.taken = True
            self._in_flight = len(batch)
            head = None
            try:
                async with self._write_lock:
                    head = await trio.to_thread.run_sync(self._commit_sync, batch)
            except Exception as exc:
                # An I/O error fails this group only; the next commit may succeed.
                self._fail(batch, exc)
            except BaseException as exc:
                self._fail(batch, exc)
                raise
            finally:
                self._in_flight = 0
                for pending in batch:
                    pending.done.set()
            if head is not None:
                self._signal.advance(head)

    def _fail(self, batch: list[_PendingAppend], exc: BaseException) -> None:
        for pending in batch:
            if pending.outcome is None:
                pending.outcome = _as_store_error(self._path, exc)
                self._counters.failed_appends += 1

    def _commit_sync(self, batch: list[_PendingAppend]) -> int:
        """Commit one group of appends in one transaction; runs in a worker thread."""
        conn = self._writer
        counters = self._counters
        with _map_errors(self._path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                plan = self._plan(conn, batch)
                if plan.blob_rows:
                    conn.executemany(_INSERT_BLOB, plan.blob_rows)
                if plan.event_rows:
                    conn.executemany(_INSERT_EVENT, plan.event_rows)
                indexed = self._indexed_upto
                if plan.head - indexed > self._index_lag:
                    conn.execute(_INDEX_TAIL, (indexed,))
                    conn.execute(_SWEEP_STREAMS, (indexed,))
                    conn.execute(
                        "UPDATE meta SET value = ? WHERE key = 'indexed_upto'", (plan.head,)
                    )
                    indexed = plan.head
                conn.execute("COMMIT")
            except BaseException:
                self._cache_valid = False
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        for name, version, created, _updated in plan.stream_rows.values():
            self._versions[name] = (version, created)
        self._db_head = plan.head
        self._indexed_upto = indexed
        counters.commits += 1
        for pending, result in plan.accepted:
            pending.outcome = result
            counters.appends += 1
            counters.events_appended += len(pending.events)
        return plan.head

    def _plan(self, conn: sqlite3.Connection, batch: list[_PendingAppend]) -> _Plan:
        """Check expected versions and build the rows of one group commit.

        Stream versions and the head come from a cache this connection keeps, checked
        inside the write transaction against ``PRAGMA data_version``: if another
        connection committed anything since, the cache is dropped and re-read, so a second
        process writing the same file cannot slip in between the check and the insert.
        """
        now = self._clock()
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        if not self._cache_valid or data_version != self._data_version:
            self._versions.clear()
            self._db_head = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'events'"
            ).fetchone()[0]
            self._indexed_upto = _indexed_upto(conn)
            self._data_version = data_version
            self._cache_valid = True
        head = self._db_head
        cache = self._versions
        known: dict[str, tuple[int, float]] = {}
        names = []
        for name in {p.stream for p in batch}:
            hit = cache.get(name)
            if hit is None:
                names.append(name)
            else:
                known[name] = hit
        for name in names:
            info = _stream_info(conn, name, self._indexed_upto)
            if info is not None:
                known[name] = (info.version, info.created_at)
        plan = _Plan(head=head)
        position = head
        for pending in batch:
            current, created = known.get(pending.stream, (0, now))
            if current != pending.expected_version:
                pending.outcome = ConcurrencyConflictError(
                    pending.stream, pending.expected_version, current
                )
                self._counters.conflicts += 1
                continue
            first = position + 1
            version = current
            stamp = now
            for event in pending.events:
                position += 1
                version += 1
                stamp = now if event.recorded_at is None else event.recorded_at
                if version == 1:
                    created = stamp
                data: bytes | None = event.data
                blob_id: bytes | None = None
                if len(event.data) > self._blob_threshold:
                    blob_id = hashlib.sha256(event.data).digest()
                    plan.blob_rows.append((blob_id, event.data))
                    data = None
                plan.event_rows.append(
                    (
                        position,
                        pending.stream,
                        version,
                        event.type,
                        event.schema_version,
                        data,
                        blob_id,
                        event.metadata,
                        stamp,
                    )
                )
            if pending.events:
                known[pending.stream] = (version, created)
                plan.stream_rows[pending.stream] = (pending.stream, version, created, stamp)
            result = AppendResult(
                stream=pending.stream, version=version, first_position=first, last_position=position
            )
            plan.accepted.append((pending, result))
        plan.head = position
        return plan

    # --- reading ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError()

    async def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        async with self._reader_limit:
            return await trio.to_thread.run_sync(self._read_sync, fn)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._readers_guard:
            conn = self._readers.pop() if self._readers else None
        with _map_errors(self._path):
            if conn is None:
                conn = _connect(self._path, read_only=True)
            try:
                return fn(conn)
            finally:
                with self._readers_guard:
                    if self._closed:
                        conn.close()
                    else:
                        self._readers.append(conn)

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream from ``from_version`` on; see ``EventStore.read``.

        Raises:
            StoreClosedError: the store is closed.
            CorruptLogError: the file is damaged.
        """
        check_stream_name(stream)
        check_from("from_version", from_version, limit)
        path = self._path
        wanted = effective_limit(limit)

        def run(conn: sqlite3.Connection) -> list[RecordedEvent]:
            conn.execute("BEGIN")  # one snapshot for the indexed part and the tail
            try:
                upto = _indexed_upto(conn)
                rows = conn.execute(_READ_INDEXED, (stream, from_version, wanted)).fetchall()
                rest = -1 if wanted < 0 else wanted - len(rows)
                if rest:
                    rows += conn.execute(_READ_TAIL, (upto, stream, from_version, rest))
            finally:
                conn.execute("COMMIT")
            return [_row_to_event(path, row) for row in rows]

        return await self._run_read(run)

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read the whole log in global order; see ``EventStore.read_all``.

        Raises:
            StoreClosedError: the store is closed.
            CorruptLogError: the file is damaged.
        """
        check_from("from_position", from_position, limit)
        path = self._path
        args = (from_position, effective_limit(limit))

        def run(conn: sqlite3.Connection) -> list[RecordedEvent]:
            return [_row_to_event(path, row) for row in conn.execute(_READ_ALL, args)]

        return await self._run_read(run)

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0 if absent).

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)

        def run(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN")
            try:
                info = _stream_info(conn, stream, _indexed_upto(conn))
            finally:
                conn.execute("COMMIT")
            return 0 if info is None else info.version

        return await self._run_read(run)

    async def head_position(self) -> int:
        """The newest global position (0 when empty).

        Raises:
            StoreClosedError: the store is closed.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        return self._signal.head

    async def streams(self, prefix: str = "") -> list[StreamInfo]:
        """List streams starting with ``prefix``, sorted by name.

        Raises:
            StoreClosedError: the store is closed.
        """

        def run(conn: sqlite3.Connection) -> list[StreamInfo]:
            conn.execute("BEGIN")
            try:
                rows = conn.execute(
                    _STREAMS_LISTING, (len(prefix), prefix, _indexed_upto(conn))
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            merged = _merge_infos(rows)
            return [merged[name] for name in sorted(merged)]

        return await self._run_read(run)

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream``, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)

        def run(conn: sqlite3.Connection) -> Snapshot | None:
            row = conn.execute(
                "SELECT version, type, schema_version, data, recorded_at FROM snapshots "
                "WHERE stream = ?",
                (stream,),
            ).fetchone()
            if row is None:
                return None
            version, type_, schema_version, data, recorded_at = row
            return Snapshot(
                stream=stream,
                version=version,
                type=type_,
                schema_version=schema_version,
                data=data,
                recorded_at=recorded_at,
            )

        return await self._run_read(run)

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log from ``from_position``; see ``EventStore.subscribe``."""

        async def read_batch(start: int, limit: int) -> list[RecordedEvent]:
            return await self.read_all(start, limit=limit)

        return Subscription(read_batch, self._signal, from_position, prefix)

    # --- maintenance writes ----------------------------------------------------------

    async def _run_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise StoreClosedError()
        path = self._path

        def run() -> T:
            with _map_errors(path):
                return fn(self._writer)

        async with self._write_lock:
            return await trio.to_thread.run_sync(run)

    async def save_snapshot(
        self, stream: str, version: int, *, type: str, schema_version: int, data: bytes
    ) -> None:
        """Cache a folded state of ``stream`` at ``version``; see ``EventStore``.

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``version`` is below 1 or beyond the stream's version.
        """
        check_stream_name(stream)
        if version < 1:
            raise ValueError(f"snapshot version must be >= 1, got {version}")
        now = self._clock()

        def run(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                info = _stream_info(conn, stream, _indexed_upto(conn))
                current = 0 if info is None else info.version
                if version <= current:
                    conn.execute(
                        "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (stream) "
                        "DO UPDATE SET version = excluded.version, type = excluded.type, "
                        "schema_version = excluded.schema_version, data = excluded.data, "
                        "recorded_at = excluded.recorded_at "
                        "WHERE excluded.version >= snapshots.version",
                        (stream, version, type, schema_version, data, now),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return current

        current = await self._run_write(run)
        if version > current:
            raise ValueError(
                f"snapshot of {stream!r} at version {version} is beyond the stream's "
                f"version {current}; fold the stream's events before snapshotting"
            )

    async def delete_streams(self, streams: Sequence[str]) -> int:
        """Delete whole streams with their snapshots and unreferenced blobs.

        Raises:
            StoreClosedError: the store is closed.
        """
        names = list(dict.fromkeys(streams))
        for name in names:
            check_stream_name(name)

        def run(conn: sqlite3.Connection) -> int:
            deleted = 0
            conn.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(names), 500):
                    chunk = [(n,) for n in names[start : start + 500]]
                    before = conn.total_changes
                    upto = _indexed_upto(conn)
                    conn.executemany(
                        "DELETE FROM events WHERE position IN "
                        "(SELECT position FROM stream_index WHERE stream = ?)",
                        chunk,
                    )
                    conn.executemany(
                        "DELETE FROM events WHERE position > ? AND stream = ?",
                        [(upto, name) for (name,) in chunk],
                    )
                    deleted += conn.total_changes - before
                    conn.executemany("DELETE FROM stream_index WHERE stream = ?", chunk)
                    conn.executemany("DELETE FROM streams WHERE stream = ?", chunk)
                    conn.executemany("DELETE FROM snapshots WHERE stream = ?", chunk)
                conn.execute(_DELETE_ORPHAN_BLOBS)
                conn.execute("COMMIT")
            finally:
                # This connection's own commits do not move data_version: drop the cache.
                self._cache_valid = False
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            return deleted

        return await self._run_write(run)

    async def vacuum(self) -> None:
        """Drop unreferenced blobs, checkpoint the WAL and rebuild the file to reclaim space.

        Raises:
            StoreClosedError: the store is closed.
            StoreError: SQLite refused (e.g. out of disk space: VACUUM needs a copy's worth).
        """

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(_DELETE_ORPHAN_BLOBS)
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await self._run_write(run)

    async def backup(self, destination: str | os.PathLike[str]) -> None:
        """Copy the live log to ``destination`` with SQLite's online backup API.

        The copy reads one consistent snapshot on a read connection, so appends keep
        flowing meanwhile; the result is a log that :func:`open_sqlite_store` opens.

        Raises:
            StoreClosedError: the store is closed.
            StoreError: the destination cannot be written.
        """
        target = os.fspath(destination)

        def run(conn: sqlite3.Connection) -> None:
            dest = sqlite3.connect(target)
            try:
                # One step (pages=-1) copies inside one read transaction: a consistent
                # snapshot, while WAL lets the writer keep committing.
                conn.backup(dest, pages=-1)
                dest.execute("PRAGMA journal_mode = WAL")
            finally:
                dest.close()

        await self._run_read(run)

    async def integrity_check(self) -> list[str]:
        """Run SQLite's full ``integrity_check``; an empty list means the file is sound.

        Raises:
            StoreClosedError: the store is closed.
        """

        def run(conn: sqlite3.Connection) -> list[str]:
            rows = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
            return [] if rows == ["ok"] else rows

        return await self._run_read(run)

    # --- lifecycle -------------------------------------------------------------------

    def statistics(self) -> EventStoreStatistics:
        """Current counters."""
        c = self._counters
        return EventStoreStatistics(
            appends=c.appends,
            events_appended=c.events_appended,
            conflicts=c.conflicts,
            failed_appends=c.failed_appends,
            commits=c.commits,
            pending_appends=len(self._queue) + self._in_flight,
            head_position=self._signal.head,
            closed=self._closing,
        )

    def _begin_close(self) -> None:
        self._closing = True
        self._checkpoint_scope.cancel()
        self._wakeup.set()

    def _finish_close(self) -> None:
        self._closing = True
        self._closed = True
        for pending in self._queue:
            pending.outcome = StoreClosedError()
            pending.done.set()
        self._queue.clear()
        self._signal.close()
        with self._readers_guard:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        self._writer.close()

    async def aclose(self) -> None:
        """Stop taking appends and reads; wait until the writer committed what was queued.

        The file itself is closed when the ``open_sqlite_store`` block exits.
        """
        self._begin_close()
        with trio.CancelScope(shield=True):
            await self._drained.wait()
        self._signal.close()
        await trio.lowlevel.checkpoint()


def _as_store_error(path: str, exc: BaseException) -> BaseException:
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, trio.Cancelled):
        return StoreClosedError("the event store closed before this append was committed")
    error = StoreError(f"event log {path!r}: the commit failed ({exc!r}); nothing was written")
    error.__cause__ = exc
    return error


@asynccontextmanager
async def open_sqlite_store(
    path: str | os.PathLike[str],
    *,
    blob_threshold: int = 64 * 1024,
    synchronous: Synchronous = "FULL",
    verify: bool = True,
    max_batch: int = 4096,
    clock: Callable[[], float] = time.time,
    checkpoint_interval: float = 0.5,
    index_lag: int = 4096,
) -> AsyncIterator[SqliteEventStore]:
    """Open (or create) the event log at ``path`` and run its writer task.

    The store lives as long as the ``async with`` block: a nursery inside owns the writer
    task, and leaving the block commits queued appends and closes the file. A file left by
    a killed process opens cleanly: SQLite's WAL recovery keeps every committed
    transaction and drops a torn tail.

    Args:
        path (str | os.PathLike): the database file; created if missing.
        blob_threshold (int): payloads longer than this many bytes are stored once in the
            content-addressed blob table; events keep the blob id.
        synchronous ("FULL" | "NORMAL" | "OFF"): SQLite's sync level. ``"FULL"`` (default)
            syncs every commit that acknowledges appends; the others trade durability on
            power loss for speed (tests, bulk loads).
        verify (bool): run ``PRAGMA quick_check`` when opening an existing file.
        max_batch (int): most appends one group commit takes.
        clock (Callable[[], float]): the time source for ``recorded_at``.
        checkpoint_interval (float): seconds between background WAL checkpoints.
        index_lag (int): how many newest events may wait before a commit adds them to the
            per-stream index (reads scan that tail); 0 indexes in every commit.

    Yields:
        SqliteEventStore: the open store.

    Raises:
        CorruptLogError: the file is damaged or not an SQLite database.
        ForeignDatabaseError: the file is another application's SQLite database.
        StoreSchemaVersionError: a newer powertrio wrote the file.
        StoreError: the file cannot be opened (permissions, missing directory).
    """
    if blob_threshold < 0:
        raise ValueError(f"blob_threshold must be >= 0, got {blob_threshold}")
    if index_lag < 0:
        raise ValueError(f"index_lag must be >= 0, got {index_lag}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if synchronous not in ("FULL", "NORMAL", "OFF"):
        raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'OFF', got {synchronous!r}")
    where = os.fspath(path)
    conn, head = await trio.to_thread.run_sync(
        lambda: SqliteEventStore._open_sync(where, synchronous=synchronous, verify=verify)
    )
    store = SqliteEventStore(
        path=where, blob_threshold=blob_threshold, max_batch=max_batch, clock=clock, writer=conn
    )
    store._signal.head = head
    store._index_lag = index_lag
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._writer_loop)
            nursery.start_soon(store._checkpointer, checkpoint_interval)
            try:
                yield store
            finally:
                store._begin_close()
    finally:
        store._finish_close()
