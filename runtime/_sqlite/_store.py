"""The embedded event store: one SQLite file in WAL mode, one writer thread with group commit.

This is the Trio side: ``SqliteEventStore`` implements ``EventStore`` by queueing appends
and maintenance writes to the writer thread (``_sqlite._writer``) and running reads on
pooled read-only connections in worker threads; ``open_sqlite_store`` ties the thread,
the checkpointing task and the file to one ``async with`` block. The file format and its
SQL live in ``_sqlite._schema``.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import TypeVar, cast, final

import attrs
import trio

from protocols.errors import StoreClosedError
from protocols.lowlevel import unwrap_single_error

from .._store._contract import (
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
from .._store._ops import CheckProblem, CheckReport
from .._store._writer_queue import PendingAppend
from .._virtual_time import VirtualRun, run_in_thread, virtual_run
from ._audit import audit_database
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
    SAVE_SNAPSHOT,
    STREAMS_LISTING,
    Synchronous,
    check_contiguous,
    connect,
    indexed_upto,
    map_errors,
    merge_infos,
    open_database,
    replace_snapshot_chunks,
    row_to_event,
)
from ._watch import watch_head
from ._writer import SqliteWriter

__all__ = ["SqliteEventStore", "open_sqlite_store"]

T = TypeVar("T")

logger = logging.getLogger("powertrio.store")


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
    _clock: Callable[[], float]
    _writer: SqliteWriter
    _signal: CommitSignal
    # Under a MockClock (fixed for the run): appends are flights; None costs nothing.
    _virtual: VirtualRun | None
    _readers: list[sqlite3.Connection] = attrs.field(factory=list)
    _reader_limit: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(4))
    _readers_guard: threading.Lock = attrs.field(factory=threading.Lock)
    _closing: bool = False
    _closed: bool = False
    _checkpoint_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _appended: trio.Event = attrs.field(factory=trio.Event)

    def __repr__(self) -> str:
        return f"<SqliteEventStore {self._path!r}>"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

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
        virtual = self._virtual
        pending = self._writer.enqueue_append(
            stream,
            events if type(events) is tuple else tuple(events),
            expected_version,
            None if virtual is None else virtual.start_flight(),
        )
        if pending is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        if virtual is None:
            await trio.lowlevel.wait_task_rescheduled(pending.abort)
        else:
            virtual.hold()
            try:
                await trio.lowlevel.wait_task_rescheduled(pending.abort)
            finally:
                virtual.release()
        return self.finish_append(pending)

    def begin_append(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        *,
        after: PendingAppend | None,
        wake: Callable[[], object],
    ) -> PendingAppend | None:
        """Queue an append behind ``after`` and return at once (``PipelinedAppends``).

        ``None``: not queued, as the store is closing or runs under virtual time. A begun
        append is decided within a commit or two, or taken back with ``pending.abort``.
        """
        if self._closing or self._virtual is not None:
            return None
        check_append_args(stream, events, expected_version)
        return self._writer.enqueue_append(stream, events, expected_version, after=after, wake=wake)

    def finish_append(self, pending: PendingAppend) -> AppendResult:
        """The result of a decided append (see :meth:`begin_append`).

        Raises:
            ConcurrencyConflictError, StoreClosedError, StoreError: as ``append``.
        """
        result = pending.result()
        if not self._appended.is_set():
            self._appended.set()
        return result

    async def _checkpointer(self, interval: float) -> None:
        """Copy the WAL back into the database now and then, off the commit path.

        A PASSIVE checkpoint on its own connection neither blocks the writer nor readers;
        once it has copied everything, SQLite restarts the WAL from its beginning.
        """
        conn = await run_in_thread(lambda: connect(self._path, read_only=False))
        try:
            with self._checkpoint_scope:
                await self._checkpoint_loop(conn, interval)
        finally:
            conn.close()

    async def _checkpoint_loop(self, conn: sqlite3.Connection, interval: float) -> None:
        seen = -1
        while not self._closing:
            await trio.sleep(interval)
            commits = self._writer.counters.commits
            if commits == seen:
                # Idle: wait for the next append rather than ticking, so an idle store sets
                # no deadline (virtual time then jumps straight to the next real one).
                self._appended = trio.Event()
                await self._appended.wait()
                continue
            seen = commits
            try:
                await run_in_thread(functools.partial(self._checkpoint_passive, conn))
            except sqlite3.Error:  # the next round tries again, but never silently
                self._writer.counters.checkpoint_failures += 1
                logger.exception("event log %r: the WAL checkpoint failed", self._path)

    def _checkpoint_passive(self, conn: sqlite3.Connection) -> None:
        with self._writer.checkpoint_lock:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # --- reading ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError()

    async def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        async with self._reader_limit:
            return await run_in_thread(functools.partial(self._read_sync, fn))

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._readers_guard:
            conn = self._readers.pop() if self._readers else None
        with map_errors(self._path):
            if conn is None:
                conn = connect(self._path, read_only=True)
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

        Every event is verified (its checksum, its blob's address, its columns' types),
        and so is the run of versions: exactly ``from_version``, ``from_version + 1``, ...
        up to the limit or the stream's head, so a lost or doubled event is an error,
        never a shorter or different history.

        Raises:
            StoreClosedError: the store is closed.
            CorruptLogError: the file is damaged; ``stream`` and ``version`` name the
                event, ``kind`` says how (``checksum``, ``gap``, ``duplicate``, ...).
        """
        check_stream_name(stream)
        check_from("from_version", from_version, limit)
        path = self._path
        wanted = effective_limit(limit)

        def run(conn: sqlite3.Connection) -> list[RecordedEvent]:
            conn.execute("BEGIN")  # one snapshot for the indexed part, the tail and the head
            try:
                upto = indexed_upto(conn)
                rows = conn.execute(READ_INDEXED, (stream, from_version, wanted)).fetchall()
                rest = -1 if wanted < 0 else wanted - len(rows)
                if rest:
                    rows += conn.execute(READ_TAIL, (upto, stream, from_version, rest))
                head = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
            finally:
                conn.execute("COMMIT")
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
            return [row_to_event(path, row) for row in conn.execute(READ_ALL, args)]

        return await self._run_read(run)

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0 if absent), as the one-writer guard knows it.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
            return 0 if row is None else int(row[0])

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
                    STREAMS_LISTING, (len(prefix), prefix, indexed_upto(conn))
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            merged = merge_infos(rows)
            return [merged[name] for name in sorted(merged)]

        return await self._run_read(run)

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream``, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)

        def run(conn: sqlite3.Connection) -> Snapshot | None:
            conn.execute("BEGIN")  # the row and its chunks as one snapshot of the file
            try:
                row = conn.execute(READ_SNAPSHOT, (stream,)).fetchone()
                if row is None:
                    return None
                chunks = dict(conn.execute(READ_SNAPSHOT_CHUNKS, (stream,)).fetchall())
            finally:
                conn.execute("COMMIT")
            version, type_, schema_version, data, recorded_at = row
            return Snapshot(
                stream=stream,
                version=version,
                type=type_,
                schema_version=schema_version,
                data=data,
                recorded_at=recorded_at,
                chunks=chunks,
            )

        return await self._run_read(run)

    async def load_checkpoint(self, name: str) -> tuple[int, bytes] | None:
        """A projection's checkpoint: the log position it folded up to, and its state.

        A projection (the timers index) keeps one here so that opening folds only the
        events after it. Not part of ``EventStore``: with a store that lacks it, the
        projection folds the whole log at open.

        Raises:
            StoreClosedError: the store is closed.
        """
        key = f"checkpoint/{name}"

        def run(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            rows = dict(
                conn.execute(
                    "SELECT key, value FROM meta WHERE key IN (?, ?)", (key, key + "@")
                ).fetchall()
            )
            data, position = rows.get(key), rows.get(key + "@")
            if type(data) is not bytes or type(position) is not int:
                return None
            return position, data

        return await self._run_read(run)

    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None:
        """Replace the checkpoint of projection ``name`` (see :meth:`load_checkpoint`).

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``position`` is negative.
        """
        if position < 0:
            raise ValueError(f"checkpoint position must be >= 0, got {position}")
        key = f"checkpoint/{name}"
        upsert = (
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(upsert, (key, data))
                conn.execute(upsert, (key + "@", position))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run_write(run)

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log from ``from_position``; see ``EventStore.subscribe``."""

        async def read_batch(start: int, limit: int) -> list[RecordedEvent]:
            return await self.read_all(start, limit=limit)

        return Subscription(read_batch, self._signal, from_position, prefix)

    async def changes(self) -> AsyncGenerator[int, None]:
        """Follow the head across processes; see ``EventStore.changes``.

        A connection of its own asks the file's change counter (``PRAGMA data_version``)
        every 0.1 s, and reads the head only when it moved (``_sqlite._watch``); this
        store's own commits wake it at once.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        async with aclosing(watch_head(self._path, self._signal, lambda: self._closing)) as heads:
            async for head in heads:
                yield head

    # --- maintenance writes ----------------------------------------------------------

    async def _run_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the write connection, in the writer thread, between commits."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise StoreClosedError()
        virtual = self._virtual
        job = self._writer.enqueue_job(fn, None if virtual is None else virtual.start_flight())
        if job is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        if virtual is None:
            await trio.lowlevel.wait_task_rescheduled(job.abort)
        else:
            virtual.hold()
            try:
                await trio.lowlevel.wait_task_rescheduled(job.abort)
            finally:
                virtual.release()
        if job.error is not None:
            raise job.error
        return cast(T, job.result)

    async def save_snapshot(
        self,
        stream: str,
        version: int,
        *,
        type: str,
        schema_version: int,
        data: bytes,
        chunks: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Cache a folded state of ``stream`` at ``version``; see ``EventStore``.

        The chunks go to ``blobs`` (each once) and ``snapshot_chunks`` lists the stream's;
        only the chunks the stream's previous snapshot did not reference are written, and
        those it referenced and this one does not are dropped if no snapshot keeps them.

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``version`` is below 1 or beyond the stream's version, or a new
                chunk does not match its address.
        """
        check_stream_name(stream)
        if version < 1:
            raise ValueError(f"snapshot version must be >= 1, got {version}")
        now = self._clock()
        wanted = dict(chunks or {})

        def run(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
                current = 0 if row is None else int(row[0])
                if version <= current:
                    conn.execute(SAVE_SNAPSHOT, (stream, version, type, schema_version, data, now))
                    if conn.execute("SELECT changes()").fetchone()[0]:  # not older: saved
                        replace_snapshot_chunks(conn, stream, wanted)
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
                    upto = indexed_upto(conn)
                    conn.executemany(DELETE_INDEXED_EVENTS, chunk)
                    conn.executemany(DELETE_TAIL_EVENTS, [(upto, name) for (name,) in chunk])
                    deleted += conn.total_changes - before
                    for statement in DELETE_STREAM_ROWS:
                        conn.executemany(statement, chunk)
                conn.execute(DELETE_ORPHAN_BLOBS)
                conn.execute("COMMIT")
            finally:
                self._writer.invalidate_cache()
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
            conn.execute(DELETE_ORPHAN_BLOBS)
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

    async def audit(self) -> CheckReport:
        """Verify every stored event, blob and index entry, not only what reads touch.

        Finds what :meth:`read` refuses (checksums, blob addresses, mistyped columns,
        version gaps and duplicates), and more: every problem of every stream, index
        entries that point nowhere, heads that disagree with the events, and this
        store's own swallowed-no-more failures (checkpoints, index sweeps). One read
        transaction over the whole file: for ``powertrio check``, not the hot path.

        Returns:
            CheckReport: the streams and events scanned, each problem (with its stream,
            version and kind) and notes (e.g. rows that got checksums at an upgrade).

        Raises:
            StoreClosedError: the store is closed.
        """
        path = self._path
        report = await self._run_read(lambda conn: audit_database(conn, path))
        counters = self._writer.counters
        failures = [
            ("checkpoint_failed", counters.checkpoint_failures, "WAL checkpoints failed"),
            ("sweep_failed", counters.sweep_failures, "index sweeps failed"),
        ]
        extra = tuple(
            CheckProblem(
                stream=None,
                version=None,
                code="check." + kind,
                kind=kind,
                message=f"{count} {what} in this process (see the powertrio.store log)",
            )
            for kind, count, what in failures
            if count
        )
        return attrs.evolve(report, problems=report.problems + extra)

    # --- lifecycle -------------------------------------------------------------------

    def statistics(self) -> EventStoreStatistics:
        """Current counters."""
        c = self._writer.counters
        return EventStoreStatistics(
            appends=c.appends,
            events_appended=c.events_appended,
            conflicts=c.conflicts,
            failed_appends=c.failed_appends,
            commits=c.commits,
            pending_appends=self._writer.pending_appends(),
            head_position=self._signal.head,
            closed=self._closing,
            checkpoint_failures=c.checkpoint_failures,
            checkpoints_blocked=c.checkpoints_blocked,
            wal_checkpoints=c.wal_checkpoints,
            sweep_failures=c.sweep_failures,
            guard_trips=c.guard_trips,
        )

    def _begin_close(self) -> None:
        self._closing = True
        self._checkpoint_scope.cancel()
        self._writer.request_stop()

    def _finish_close(self) -> None:
        self._closing = True
        self._closed = True
        self._writer.join()  # it has drained: this returns at once
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
            await self._writer.drained.wait()
        self._signal.close()
        await trio.lowlevel.checkpoint()


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
    wal_limit: int = 64 * 1024 * 1024,
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
        wal_limit (int): the WAL file's bound in bytes: the writer checkpoints and
            truncates it between two group commits before the next group could take it
            past (keeping the largest growth of one group, at least a quarter of the
            bound, free); 0 leaves it to the background checkpoints, which under
            sustained writes never catch up.

    Yields:
        SqliteEventStore: the open store.

    Raises:
        CorruptLogError: the file is damaged or not an SQLite database.
        ForeignDatabaseError: the file is another application's SQLite database.
        StoreSchemaVersionError: a newer powertrio wrote the file.
        StoreNotFoundError: ``path`` is a folder.
        StoreReadOnlyError: the file or its folder is read-only.
        StoreError: the file cannot be opened (permissions, missing directory).
    """
    if blob_threshold < 0:
        raise ValueError(f"blob_threshold must be >= 0, got {blob_threshold}")
    if index_lag < 0:
        raise ValueError(f"index_lag must be >= 0, got {index_lag}")
    if wal_limit < 0:
        raise ValueError(f"wal_limit must be >= 0, got {wal_limit}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if synchronous not in ("FULL", "NORMAL", "OFF"):
        raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'OFF', got {synchronous!r}")
    where = os.fspath(path)
    conn, head = await run_in_thread(
        lambda: open_database(where, synchronous=synchronous, verify=verify)
    )
    signal = CommitSignal(head)
    writer = SqliteWriter(
        path=where,
        conn=conn,
        token=trio.lowlevel.current_trio_token(),
        signal=signal,
        clock=clock,
        blob_threshold=blob_threshold,
        max_batch=max_batch,
        index_lag=index_lag,
        wal_limit=wal_limit,
    )
    store = SqliteEventStore(
        path=where, clock=clock, writer=writer, signal=signal, virtual=virtual_run()
    )
    try:
        writer.start()
        with unwrap_single_error():  # an error from the block comes out bare, not in a group
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store._checkpointer, checkpoint_interval)
                try:
                    yield store
                finally:
                    store._begin_close()
                    with trio.CancelScope(shield=True):
                        # Bounded by committing what is queued: nothing is left half-done.
                        await writer.drained.wait()
    finally:
        store._finish_close()
