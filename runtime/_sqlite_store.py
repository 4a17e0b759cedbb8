"""The embedded event store: one SQLite file in WAL mode, one writer thread with group commit."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar, cast, final

import attrs
import orjson
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
# So the events are indexed in sweeps, each amortised over many commits, and a stream read
# adds the short unindexed tail (positions above ``meta.indexed_upto``) with a range scan.
# Both parts are read in one transaction, so a reader never sees an event twice or misses
# one. The writer sweeps in a transaction of its own once ``index_lag`` events are
# unindexed and no append is waiting. A writer that never runs out of appends sweeps
# inside a commit once _SWEEP_DEFERRAL times as many are: a sweep blocks every append
# while it runs, and much of its cost (about one dirty leaf page per stream) does not
# grow with its size, so under load a longer tail for reads buys append throughput.
#
# Small pages: whatever pages a commit does dirty are written whole to the WAL.
_PAGE_SIZE = 1024
_SWEEP_DEFERRAL = 4

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
# In key order, each insert lands beside the previous one in the b-tree (about 15 %
# cheaper than position order, which jumps between streams' leaves on every row).
_INDEX_TAIL = (
    "INSERT INTO stream_index (stream, version, position) "
    "SELECT stream, version, position FROM events WHERE position > ? ORDER BY stream, version"
)
_READ_ALL = _SELECT + "WHERE e.position >= ? ORDER BY e.position LIMIT ?"
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
_INSERT_GROUP = (
    "INSERT INTO events (position, stream, version, type, schema_version, data, blob_id, "
    "metadata, recorded_at) "
    "SELECT ?3 + e.key, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, "
    "substr(?2, e.value ->> 4, e.value ->> 5), NULL, "
    "CASE WHEN e.value ->> 6 IS NOT NULL THEN substr(?2, e.value ->> 6, e.value ->> 7) END, "
    "?4 FROM json_each(?1) AS e "
    "WHERE (SELECT data_version FROM pragma_data_version()) = ?5"
)
_GROUP_STATEMENT = sqlite3.sqlite_version_info >= (3, 38, 0)  # the ->> operator
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

# A queue at least this long, met when nothing else is in flight, is split in two groups.
_SPLIT_QUEUE = 64

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL", "OFF"]


def _slot_setter(name: str) -> Callable[[AppendResult, object], None]:
    """The ``__set__`` of AppendResult's slot descriptor for field ``name``."""
    setter: Callable[[AppendResult, object], None] = AppendResult.__dict__[name].__set__
    return setter


_new_object = object.__new__
_SET_STREAM = _slot_setter("stream")
_SET_VERSION = _slot_setter("version")
_SET_FIRST = _slot_setter("first_position")
_SET_LAST = _slot_setter("last_position")


def _set_result_slots(
    result: AppendResult, stream: str, version: int, first: int, last: int
) -> None:
    """Fill a new AppendResult's slots directly (once per append: the hot path).

    AppendResult is a frozen, slotted attrs class, whose ``__init__`` goes through the
    frozen ``__setattr__`` guard for each field; writing the slots through their
    descriptors builds the same object (a test compares them) at half the cost.
    """
    _SET_STREAM(result, stream)
    _SET_VERSION(result, version)
    _SET_FIRST(result, first)
    _SET_LAST(result, last)


@final
class _PendingAppend:
    """One queued append, waiting for its group commit (a plain slotted class: hot path).

    The caller parks its task directly (``wait_task_rescheduled``) and is rescheduled
    once its group is committed: no ``trio.Event`` or parking lot per append.
    """

    __slots__ = (
        "events",
        "expected_version",
        "first_position",
        "last_position",
        "mutex",
        "outcome",
        "queue",
        "stream",
        "task",
        "version",
    )

    def __init__(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        queue: list[_PendingAppend],
        mutex: threading.Lock,
    ) -> None:
        self.stream = stream
        self.events = events
        self.expected_version = expected_version
        self.queue = queue
        self.mutex = mutex
        self.task = trio.lowlevel.current_task()
        # An error, or None: once the caller is resumed, None means committed, with the
        # figures below (set by the writer thread; the caller builds the AppendResult).
        self.outcome: BaseException | None = None
        self.version = 0
        self.first_position = 0
        self.last_position = 0

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if still queued, else wait for the commit in flight.

        Once the writer thread has taken the append out of the queue its outcome is
        decided by the commit in flight (bounded by one commit), so the caller keeps
        waiting and learns what happened; the cancellation is delivered at its next
        checkpoint.
        """
        with self.mutex:
            try:
                self.queue.remove(self)
            except ValueError:
                return trio.lowlevel.Abort.FAILED
        return trio.lowlevel.Abort.SUCCEEDED


@final
class _WriteJob:
    """A maintenance write (snapshot, deletion, vacuum) queued for the writer thread."""

    __slots__ = ("error", "fn", "mutex", "queue", "result", "task")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], object],
        queue: list[_WriteJob],
        mutex: threading.Lock,
    ) -> None:
        self.fn = fn
        self.queue = queue
        self.mutex = mutex
        self.task = trio.lowlevel.current_task()
        self.result: object = None
        self.error: BaseException | None = None

    def run(self, conn: sqlite3.Connection, path: str) -> None:
        """Run in the writer thread; the outcome waits in ``result`` or ``error``."""
        try:
            with _map_errors(path):
                self.result = self.fn(conn)
        except BaseException as exc:  # handed to the waiting task
            self.error = exc

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if not started, else wait for it (like ``to_thread``)."""
        with self.mutex:
            try:
                self.queue.remove(self)
            except ValueError:
                return trio.lowlevel.Abort.FAILED
        return trio.lowlevel.Abort.SUCCEEDED


@attrs.define(eq=False)
class _Plan:
    """The rows of one group commit, built by ``_plan`` in the writer thread."""

    head: int
    now: float
    event_count: int = 0
    # For _insert_events: _EVENT_COLUMNS values per event, in position order.
    event_params: list[object] = attrs.field(factory=list)
    blob_rows: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    # For _INSERT_GROUP: one tuple per event and the payload bytes they point into.
    group_rows: list[tuple[object, ...]] = attrs.field(factory=list)
    payloads: list[bytes] = attrs.field(factory=lambda: [b"."])
    # Each written stream's new (version, created_at), for the writer's cache.
    streams: dict[str, tuple[int, float]] = attrs.field(factory=dict)
    accepted: int = 0
    conflicts: list[tuple[_PendingAppend, int]] = attrs.field(factory=list)


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


def _insert_events(conn: sqlite3.Connection, params: list[object], count: int) -> None:
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


def _add_row(
    plan: _Plan, event: NewEvent, *, position: int, stream: str, version: int, threshold: int
) -> float:
    """Add an event's row for ``_insert_events`` (and its blob); returns its time."""
    stamp = plan.now if event.recorded_at is None else event.recorded_at
    data: bytes | None = event.data
    blob_id: bytes | None = None
    if len(event.data) > threshold:
        blob_id = hashlib.sha256(event.data).digest()
        plan.blob_rows.append((blob_id, event.data))
        data = None
    plan.event_params += (
        position,
        stream,
        version,
        event.type,
        event.schema_version,
        data,
        blob_id,
        event.metadata,
        stamp,
    )
    return stamp


def _plain(name: str) -> bool:
    """Whether ``name`` is printable ASCII, which JSON carries to SQLite unchanged."""
    return name.isascii() and name.isprintable()


def _sweep(conn: sqlite3.Connection, indexed: int, head: int) -> int:
    """Index events ``indexed + 1 .. head`` and fold them into ``streams`` (caller's
    write transaction); returns the new ``indexed_upto``."""
    conn.execute(_INDEX_TAIL, (indexed,))
    conn.execute(_SWEEP_STREAMS, (indexed,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed_upto'", (head,))
    return head


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

    Appends are queued to one writer thread, which commits everything queued so far in one
    transaction and one sync: concurrent appenders share the cost of durability while
    each awaits its own acknowledgement. Reads run in worker threads on
    separate read-only connections, so they never wait behind a commit.
    """

    _path: str
    _blob_threshold: int
    _max_batch: int
    _clock: Callable[[], float]
    _writer: sqlite3.Connection
    _token: trio.lowlevel.TrioToken
    _readers: list[sqlite3.Connection] = attrs.field(factory=list)
    _reader_limit: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(4))
    _readers_guard: threading.Lock = attrs.field(factory=threading.Lock)
    # Shared with the writer thread, guarded by _mutex: queued appends and maintenance
    # writes, whether the thread sleeps on _work, whether it should stop once drained,
    # and how many appends it has taken but not handed back.
    _mutex: threading.Lock = attrs.field(factory=threading.Lock)
    _work: threading.Condition = attrs.field(
        default=attrs.Factory(lambda self: threading.Condition(self._mutex), takes_self=True)
    )
    _queue: list[_PendingAppend] = attrs.field(factory=list)
    _jobs: list[_WriteJob] = attrs.field(factory=list)
    _idle: bool = False
    _stopping: bool = False
    _in_flight: int = 0
    _thread: threading.Thread | None = None
    # Commit common groups with _INSERT_GROUP (tests turn it off to cover the other way).
    _group_statement: bool = _GROUP_STATEMENT
    _closing: bool = False
    _closed: bool = False
    _signal: CommitSignal = attrs.field(factory=CommitSignal)
    _drained: trio.Event = attrs.field(factory=trio.Event)
    # The writer thread's cache of stream versions (see _plan); only that thread uses it.
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
        if self._closing:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        # No checkpoint_if_cancelled first: parking is the checkpoint, and a caller that
        # is already cancelled is taken straight back out of the queue by ``abort``.
        pending = _PendingAppend(
            stream,
            events if type(events) is tuple else tuple(events),
            expected_version,
            self._queue,
            self._mutex,
        )
        with self._mutex:
            refused = self._stopping  # the writer thread has stopped (see _stop)
            if not refused:
                self._queue.append(pending)
                if self._idle:
                    self._idle = False
                    self._work.notify()
        if refused:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        await trio.lowlevel.wait_task_rescheduled(pending.abort)
        if pending.outcome is not None:
            raise pending.outcome
        # AppendResult(...) without its frozen-attribute guard: see _set_result_slots.
        result: AppendResult = _new_object(AppendResult)
        _set_result_slots(
            result, stream, pending.version, pending.first_position, pending.last_position
        )
        return result

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

    def _writer_main(self) -> None:
        """The writer thread: commit queued appends in groups, run maintenance writes.

        One long-lived thread owns the write connection, so taking the next group needs
        no round trip through Trio. A group's callers are handed back (resumed in Trio)
        when the next group is about to commit, or when the thread runs out of work: the
        thread does its Python work for the next group while Trio has nothing to run,
        then SQLite writes and syncs it (without the GIL) while Trio runs the callers just
        resumed. Handing them back earlier would make both threads want the GIL at once,
        and the thread would wait for Trio to go idle before it could finish the commit.
        """
        decided: list[_PendingAppend] = []  # committed or failed, not handed back yet
        try:
            while (work := self._take_work(holding=bool(decided))) is not None:
                if not isinstance(work, list) or not work:
                    # Out of work, or a maintenance write (which may be long): hand back.
                    self._hand_back(decided)
                    decided = []
                    if isinstance(work, _WriteJob):
                        work.run(self._writer, self._path)
                        self._call_soon(trio.lowlevel.reschedule, work.task)
                    elif work == "sweep":
                        self._sweep_when_idle()
                    continue
                previous, decided = decided, work
                try:
                    self._commit_sync(work, functools.partial(self._hand_back, previous))
                except BaseException as exc:  # the group fails; the next commit may succeed
                    self._fail(work, exc)
        finally:
            self._stop(decided)

    def _take_work(
        self, *, holding: bool
    ) -> list[_PendingAppend] | _WriteJob | Literal["sweep"] | None:
        """The next group of appends or maintenance write, waiting for one if needed.

        Returns ``[]`` instead of waiting while ``holding`` callers to hand back,
        ``"sweep"`` when there is nothing else to do but the index is behind, and
        ``None`` once the store is closing and everything queued (and the index) is done.
        """
        with self._mutex:
            while True:
                if self._queue:
                    take = self._max_batch
                    if not holding and len(self._queue) >= _SPLIT_QUEUE:
                        # A long queue and no other group in flight: commit half alone,
                        # so its callers run in Trio while the other half syncs. Two
                        # groups then alternate, one on disk while the other is in Trio.
                        take = min(take, len(self._queue) // 2)
                    batch = self._queue[:take]
                    del self._queue[:take]
                    self._in_flight += len(batch)
                    return batch
                if self._jobs:
                    return self._jobs.pop(0)
                if holding:
                    return []
                # Idle, or closing: a good moment to catch the index up (a file left with
                # a long tail would slow the next opener's first reads).
                if self._cache_valid and self._db_head - self._indexed_upto > self._index_lag:
                    return "sweep"
                if self._stopping:
                    return None
                self._idle = True
                self._work.wait()
                self._idle = False

    def _stop(self, decided: list[_PendingAppend]) -> None:
        """The writer thread's last act: refuse new work, answer everyone, report drained.

        After a normal close nothing is left queued; after an unexpected error in the
        thread, whatever is left fails rather than waiting forever.
        """
        with self._mutex:
            self._stopping = True
            left = self._queue[:]
            jobs = self._jobs[:]
            self._queue.clear()
            self._jobs.clear()
            self._in_flight += len(left)
        for pending in left:
            pending.outcome = StoreClosedError("the event store's writer stopped")
            self._counters.failed_appends += 1
        self._hand_back(decided + left)
        for job in jobs:
            job.error = StoreClosedError("the event store's writer stopped")
            self._call_soon(trio.lowlevel.reschedule, job.task)
        self._call_soon(self._drained.set)

    def _call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` in the Trio thread (from the writer thread)."""
        with contextlib.suppress(trio.RunFinishedError):  # nobody is left to tell
            self._token.run_sync_soon(fn, *args)

    def _hand_back(self, decided: list[_PendingAppend]) -> None:
        if decided:
            self._call_soon(self._deliver, decided, self._db_head)

    def _deliver(self, decided: list[_PendingAppend], head: int) -> None:
        """Resume the callers of a decided group (Trio thread; must not raise)."""
        with self._mutex:
            self._in_flight -= len(decided)
        for pending in decided:
            trio.lowlevel.reschedule(pending.task)
        self._signal.advance(head)

    def _fail(self, batch: list[_PendingAppend], exc: BaseException) -> None:
        for pending in batch:
            if pending.outcome is None:
                pending.outcome = _as_store_error(self._path, exc)
                self._counters.failed_appends += 1

    def _commit_sync(self, batch: list[_PendingAppend], ready: Callable[[], None]) -> None:
        """Commit one group of appends, all or nothing for each append (writer thread).

        Calls ``ready`` once, when the Python work is done and the sync begins (or on
        failure): see ``_writer_main``.
        """
        called = False

        def ready_once() -> None:
            nonlocal called
            if not called:
                called = True
                ready()

        conn = self._writer
        try:
            with _map_errors(self._path):
                if not (
                    self._group_statement
                    and self._cache_valid
                    and self._commit_group(conn, batch, ready_once)
                ):
                    self._commit_transaction(conn, batch, ready_once)
        finally:
            ready_once()

    def _commit_group(
        self, conn: sqlite3.Connection, batch: list[_PendingAppend], ready: Callable[[], None]
    ) -> bool:
        """Commit with the one statement ``_INSERT_GROUP``; False if it wrote nothing.

        Outside a transaction the plan rests on the cache and reads of the moment; the
        statement's ``data_version`` condition makes sure nothing changed before it took
        the write lock.
        """
        plan = self._plan(conn, batch, group=True)
        if plan is None:
            return False
        if plan.event_count:
            try:
                params = (
                    orjson.dumps(plan.group_rows),
                    b"".join(plan.payloads),
                    plan.head - plan.event_count + 1,
                    plan.now,
                    self._data_version,
                )
                ready()
                written = conn.execute(_INSERT_GROUP, params).rowcount
            except BaseException:
                self._decide_conflicts(plan)  # conflicts stay conflicts when the rest fails
                raise
            if written != plan.event_count:
                return False
        self._decide_conflicts(plan)
        self._settle(plan, self._indexed_upto)
        return True

    def _commit_transaction(
        self, conn: sqlite3.Connection, batch: list[_PendingAppend], ready: Callable[[], None]
    ) -> None:
        """Commit in an explicit transaction: blobs, imported times, names the group
        statement does not carry, a sweep, or a retry after the group statement."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            plan = self._plan(conn, batch, group=False)
            assert plan is not None
            self._decide_conflicts(plan)
            if plan.blob_rows:
                conn.executemany(_INSERT_BLOB, plan.blob_rows)
            if plan.event_count:
                _insert_events(conn, plan.event_params, plan.event_count)
            ready()
            indexed = self._indexed_upto
            if plan.head - indexed > self._index_lag * _SWEEP_DEFERRAL:
                indexed = _sweep(conn, indexed, plan.head)
            conn.execute("COMMIT")
        except BaseException:
            self._cache_valid = False
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self._settle(plan, indexed)

    def _decide_conflicts(self, plan: _Plan) -> None:
        for pending, current in plan.conflicts:
            pending.outcome = ConcurrencyConflictError(
                pending.stream, pending.expected_version, current
            )
        self._counters.conflicts += len(plan.conflicts)

    def _settle(self, plan: _Plan, indexed: int) -> None:
        """Record a committed plan in the cache and the counters."""
        self._versions.update(plan.streams)
        self._db_head = plan.head
        self._indexed_upto = indexed
        counters = self._counters
        counters.commits += 1
        counters.appends += plan.accepted
        counters.events_appended += plan.event_count

    def _sweep_when_idle(self) -> None:
        """Index the unindexed tail in a transaction of its own (writer thread, idle).

        A failure leaves the tail as it is (reads still see it) and drops the cache, so
        that no idle sweep is tried again before a commit has re-read it.
        """
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_cache(conn)
                indexed = self._indexed_upto
                if self._db_head - indexed > self._index_lag:
                    indexed = _sweep(conn, indexed, self._db_head)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            self._cache_valid = False
            return
        self._indexed_upto = indexed

    def _check_cache(self, conn: sqlite3.Connection) -> None:
        """Drop and re-read the cache if another connection committed since it was filled."""
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        if not self._cache_valid or data_version != self._data_version:
            self._versions.clear()
            self._db_head = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'events'"
            ).fetchone()[0]
            self._indexed_upto = _indexed_upto(conn)
            self._data_version = data_version
            self._cache_valid = True

    def _plan(  # noqa: PLR0915  # one flat loop over every append: the hot path
        self, conn: sqlite3.Connection, batch: list[_PendingAppend], *, group: bool
    ) -> _Plan | None:
        """Check expected versions and build the rows of one group commit.

        Stream versions and the head come from a cache this connection keeps, checked
        against ``PRAGMA data_version``: if another connection committed anything since,
        the cache is dropped and re-read. Inside the write transaction nobody can commit
        between this check and our commit; for the group statement, its own condition on
        ``data_version`` closes that gap. A stream missing from the cache is read once
        and cached (a committed fact; a rollback or a change drops the whole cache). What
        this batch writes goes to ``plan.streams`` and joins the cache after the commit.

        With ``group``, builds the rows of ``_INSERT_GROUP``, or returns None if the
        batch needs the explicit transaction.
        """
        now = self._clock()
        self._check_cache(conn)
        cache = self._versions
        upto = self._indexed_upto
        threshold = self._blob_threshold
        plan = _Plan(head=self._db_head, now=now)
        written = plan.streams
        rows = plan.group_rows
        payloads = plan.payloads
        offset = 2  # substr() counts from 1, after the leading byte
        position = plan.head
        accepted = 0
        for pending in batch:
            stream = pending.stream
            if group and not _plain(stream):
                return None
            state = written.get(stream) or cache.get(stream)
            if state is None:
                info = _stream_info(conn, stream, upto)
                if info is None:
                    state = (0, now)
                else:
                    state = cache[stream] = (info.version, info.created_at)
            current, created = state
            if current != pending.expected_version:
                plan.conflicts.append((pending, current))
                continue
            pending.first_position = position + 1
            version = current
            for event in pending.events:
                position += 1
                version += 1
                if not group:
                    stamp = _add_row(
                        plan,
                        event,
                        position=position,
                        stream=stream,
                        version=version,
                        threshold=threshold,
                    )
                    if version == 1:
                        created = stamp
                    continue
                data = event.data
                meta = event.metadata
                if event.recorded_at is not None or len(data) > threshold or not _plain(event.type):
                    return None
                if version == 1:
                    created = now
                end = offset + len(data)
                rows.append(
                    (
                        stream,
                        version,
                        event.type,
                        event.schema_version,
                        offset,
                        len(data),
                        None if meta is None else end,
                        0 if meta is None else len(meta),
                    )
                )
                payloads.append(data)
                offset = end
                if meta is not None:
                    payloads.append(meta)
                    offset += len(meta)
            if version != current:
                written[stream] = (version, created)
            # Tentative until the commit succeeds; a failure replaces outcome None.
            pending.version = version
            pending.last_position = position
            accepted += 1
        plan.accepted = accepted
        plan.event_count = position - plan.head
        if group and position - upto > self._index_lag * _SWEEP_DEFERRAL:
            return None  # the sweep goes in the commit: the explicit transaction
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
        """Run ``fn`` on the write connection, in the writer thread, between commits."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise StoreClosedError()
        job = _WriteJob(fn, self._jobs, self._mutex)
        with self._mutex:
            refused = self._stopping
            if not refused:
                self._jobs.append(job)
                if self._idle:
                    self._idle = False
                    self._work.notify()
        if refused:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        await trio.lowlevel.wait_task_rescheduled(job.abort)
        if job.error is not None:
            raise job.error
        return cast(T, job.result)

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
            pending_appends=self._pending_appends(),
            head_position=self._signal.head,
            closed=self._closing,
        )

    def _pending_appends(self) -> int:
        with self._mutex:
            return len(self._queue) + self._in_flight

    def _begin_close(self) -> None:
        self._closing = True
        self._checkpoint_scope.cancel()
        with self._mutex:
            self._stopping = True
            self._work.notify()

    def _finish_close(self) -> None:
        self._closing = True
        self._closed = True
        if self._thread is not None:
            self._thread.join()  # it has drained: this returns at once
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
    """Open (or create) the event log at ``path`` and run its writer thread.

    The store lives as long as the ``async with`` block: the writer thread and a
    checkpointing task run meanwhile, and leaving the block commits queued appends, stops
    them and closes the file. A file left by a killed process opens cleanly: SQLite's WAL
    recovery keeps every committed transaction and drops a torn tail.

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
        index_lag (int): how many newest events may wait before the writer adds them to
            the per-stream index (reads scan that tail): once it has no append waiting,
            or, under a steady stream of appends, once four times as many wait; 0 indexes
            in every commit.

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
        path=where,
        blob_threshold=blob_threshold,
        max_batch=max_batch,
        clock=clock,
        writer=conn,
        token=trio.lowlevel.current_trio_token(),
    )
    store._signal.head = head
    store._index_lag = index_lag
    try:
        thread = threading.Thread(
            target=store._writer_main, name=f"powertrio-writer {where}", daemon=True
        )
        thread.start()
        store._thread = thread
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._checkpointer, checkpoint_interval)
            try:
                yield store
            finally:
                store._begin_close()
                with trio.CancelScope(shield=True):
                    # Bounded by committing what is queued: nothing is left half-done.
                    await store._drained.wait()
    finally:
        store._finish_close()
