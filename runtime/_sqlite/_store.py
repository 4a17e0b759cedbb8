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
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import TypeVar, final

import attrs
import trio

from protocols.errors import StoreClosedError, StoreError
from protocols.lowlevel import unwrap_single_error

from .._store._contract import (
    CommitSignal,
)
from .._store._ops import CheckProblem, CheckReport
from .._store._sql import SqlEventStore
from .._virtual_time import VirtualRun, run_in_thread, virtual_run
from ._audit import audit_database
from ._dialect import SqliteDialect
from ._schema import (
    DELETE_ORPHAN_BLOBS,
    Synchronous,
    connect,
    map_errors,
    open_database,
)
from ._watch import watch_head
from ._writer import SqliteWriter

__all__ = ["SqliteEventStore", "open_sqlite_store"]

T = TypeVar("T")

logger = logging.getLogger("powertrio.store")


@final
@attrs.define(eq=False, repr=False)
class SqliteEventStore(SqlEventStore[sqlite3.Connection]):
    """The embedded event store on one SQLite file (WAL), opened by :func:`open_sqlite_store`.

    Appends are queued to one writer thread, which commits everything queued so far in one
    transaction and one sync: concurrent appenders share the cost of durability while
    each awaits its own acknowledgement. Reads run in worker threads on
    separate read-only connections, so they never wait behind a commit.
    """

    _path: str
    _clock: Callable[[], float]
    _writer: SqliteWriter
    _dialect: SqliteDialect
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
    # Set (from the writer thread) when a commit grew the WAL past its reuse size.
    _wal_grew: trio.Event = attrs.field(factory=trio.Event)

    def __repr__(self) -> str:
        return f"<SqliteEventStore {self._path!r}>"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    # --- the one SQL store's hooks ----------------------------------------------------

    def _after_append(self) -> None:
        if not self._appended.is_set():
            self._appended.set()

    async def _checkpointer(self, interval: float) -> None:
        """Copy the WAL back into the database now and then, off the commit path, and
        have the writer start it again from its beginning.

        A PASSIVE checkpoint on its own connection neither blocks the writer nor readers.
        But the writer commits meanwhile, so the WAL is never wholly copied when its next
        commit starts, and SQLite then never restarts it: the file grows by every commit.
        A commit that grows the file costs its sync a journal commit of the file system
        (the file's size changes), several times the sync of a commit that overwrites
        pages the file already holds. So after each background checkpoint the writer
        thread copies the few commits made meanwhile itself, between two of its commits
        (``_catch_up``): its next commit then finds the WAL wholly copied and restarts
        it, and the WAL's pages are reused from then on.
        """
        conn = await run_in_thread(lambda: connect(self._path, read_only=False))
        try:
            with self._checkpoint_scope:
                await self._checkpoint_loop(conn, interval)
        finally:
            conn.close()

    async def _checkpoint_loop(self, conn: sqlite3.Connection, interval: float) -> None:
        """Checkpoint every ``interval`` seconds while appends come, or as soon as the
        writer finds the WAL growing (past its reuse size, ``_WAL_REUSE``), though not
        more often than every ``interval / 8``: every commit that grows the file pays for
        it, so the WAL is restarted before it grows further."""
        seen = -1
        writer = self._writer
        while not self._closing:
            await trio.sleep(interval / 8)
            with trio.move_on_after(interval * 7 / 8):
                await self._wal_grew.wait()
            commits = writer.counters.commits
            if commits == seen:
                # Idle: wait for the next append rather than ticking, so an idle store sets
                # no deadline (virtual time then jumps straight to the next real one).
                self._appended = trio.Event()
                await self._appended.wait()
                continue
            seen = commits
            self._wal_grew = trio.Event()  # before the catch-up, which re-arms the writer
            try:
                busy, frames, copied = await run_in_thread(
                    functools.partial(self._checkpoint_passive, conn)
                )
                if busy or frames != copied:
                    continue  # a reader kept part of the WAL: it cannot restart yet
                await self._run_write(writer.catch_up)
            except StoreClosedError:
                return
            except (sqlite3.Error, StoreError):  # the next round tries again, never silently
                writer.counters.checkpoint_failures += 1
                logger.exception("event log %r: the WAL checkpoint failed", self._path)

    def _wal_growth(self) -> None:
        """The writer found the WAL growing past its reuse size: checkpoint now."""
        self._wal_grew.set()

    def _checkpoint_passive(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """A PASSIVE checkpoint: (busy, frames in the WAL, frames copied)."""
        with self._writer.checkpoint_lock:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, frames, copied

    # --- reading ---------------------------------------------------------------------

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

    def _extra_statistics(self) -> dict[str, int]:
        c = self._writer.counters
        return {
            "checkpoint_failures": c.checkpoint_failures,
            "checkpoints_blocked": c.checkpoints_blocked,
            "wal_checkpoints": c.wal_checkpoints,
            "sweep_failures": c.sweep_failures,
            "guard_trips": c.guard_trips,
        }

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
        checkpoint_interval (float): seconds between background WAL checkpoints while
            appends come; one comes sooner (though not before an eighth of it) when a
            commit grows the WAL past 256 KiB, so that the WAL restarts and commits
            overwrite its pages rather than grow the file.
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
        path=where,
        clock=clock,
        writer=writer,
        dialect=SqliteDialect(where, writer.invalidate_cache),
        signal=signal,
        virtual=virtual_run(),
    )
    writer.on_wal_growth = store._wal_growth
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
