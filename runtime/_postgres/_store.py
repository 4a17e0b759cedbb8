"""The event store on PostgreSQL: the same ``EventStore`` as SQLite, for logs shared by nodes.

Threads, not asyncio: psycopg's async connections run only on asyncio, and bridging them
into Trio (trio-asyncio) would put a second event loop and its failure modes under every
append. psycopg's sync connections release the GIL while they wait on the socket, so
this store runs them in threads, as the SQLite store does: appends and maintenance
writes are queued to one writer thread with its own connection (``_postgres._writer``),
which commits everything queued so far in one transaction (group commit: one round of
statements and one WAL flush for many appends), and reads run in worker threads on a
small pool of autocommit connections, so they never wait behind a commit. A single
writer connection beat a pool of writer connections here: with a pool each append pays
its own transaction and flush, while one queue lets the batch grow with the load. The
tables and SQL live in ``_postgres._schema``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar, cast, final

import attrs
import trio

from protocols.errors import FencedError, StoreClosedError, StoreError

from .._cluster._sql import Fence
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
)
from .._store._writer_queue import PendingAppend
from .._virtual_time import VirtualRun, run_in_thread, virtual_run
from ._retry import DEFAULT_RETRY_DEADLINE, Retrying
from ._schema import (
    DELETE_EVENTS,
    DELETE_ORPHAN_BLOBS,
    DELETE_SNAPSHOT_CHUNKS,
    DELETE_SNAPSHOTS,
    HEAD_POSITION,
    LOAD_CHECKPOINT,
    READ_ALL,
    READ_SNAPSHOT,
    READ_SNAPSHOT_CHUNKS,
    READ_STREAM,
    SAVE_CHECKPOINT,
    SAVE_SNAPSHOT,
    STREAM_VERSION,
    STREAMS_LISTING,
    check_dsn,
    connect,
    describe,
    log_channel,
    map_errors,
    prepare_schema,
    replace_snapshot_chunks,
    row_to_event,
)
from ._text import TextIndexMethods, forget_streams
from ._writer import PostgresWriter

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresEventStore", "open_postgres_store"]

T = TypeVar("T")

logger = logging.getLogger("powertrio.store")

WATCH_POLL_SECONDS = 0.25
"""How often a watcher of the head (``changes``) reads it with no ring heard: the most a
commit between two rings (a writer rings at most every 50 ms) or a lost ``NOTIFY``
delays a change."""


@attrs.define(eq=False)
class _ReaderPool:
    """Idle read connections (autocommit), shared by worker threads; broken ones are dropped."""

    _dsn: str
    _schema: str
    _server: str
    _connect_timeout: float
    _idle: list[psycopg.Connection] = attrs.field(factory=list)
    _guard: threading.Lock = attrs.field(factory=threading.Lock)
    _closed: bool = False

    def take(self) -> psycopg.Connection:
        """An idle connection, or a new one (worker thread).

        Raises:
            StoreUnavailableError: the server cannot be reached.
        """
        with self._guard:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(
                self._dsn, self._schema, server=self._server, connect_timeout=self._connect_timeout
            )
        return conn

    def give_back(self, conn: psycopg.Connection) -> None:
        """Keep a healthy connection for the next read; close it otherwise."""
        with self._guard:
            if not (self._closed or conn.broken or conn.closed):
                self._idle.append(conn)
                return
        conn.close()

    def drop_idle(self) -> None:
        """Close the idle connections (after a failure they are likely dead too)."""
        with self._guard:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close every idle connection; ones in use close when given back."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


@final
@attrs.define(eq=False, repr=False)
class PostgresEventStore(TextIndexMethods):
    """The event store on a PostgreSQL schema, opened by :func:`open_postgres_store`.

    Appends are queued to one writer thread that commits each group in one transaction;
    the ``(stream, version)`` primary key refuses a stale append whoever else writes to
    the schema. Reads run in worker threads on pooled connections. ``read_all`` and
    subscriptions only return events whose transaction is older than every one still in
    flight, so a follower never skips a position that commits late.
    """

    _dsn: str
    _schema: str
    _server: str
    _connect_timeout: float
    _clock: Callable[[], float]
    _writer: PostgresWriter
    _signal: CommitSignal
    # Under a MockClock (fixed for the run): appends are flights; None costs nothing.
    _virtual: VirtualRun | None
    _poll_interval: float
    _reader_limit: trio.CapacityLimiter
    _readers: _ReaderPool
    _read_retrying: Retrying
    _closing: bool = False
    _text_ready: bool = False
    # The node's leases when the store serves a node (see ``_node``); None: no fencing.
    _fence: Fence | None = None

    def __repr__(self) -> str:
        return f"<PostgresEventStore {self._server} schema {self._schema!r}>"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the log's tables."""
        return self._schema

    @property
    def _where(self) -> str:
        return f"{self._server} schema {self._schema!r}"

    # --- writing ---------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append events to a stream if it is at ``expected_version``; see ``EventStore``.

        Raises:
            ConcurrencyConflictError: the stream is at another version; nothing was written.
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
            StoreError: the commit failed; nothing was written.
            TypeError, ValueError: bad arguments.
        """
        check_append_args(stream, events, expected_version)
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        fence = None if self._fence is None else self._fence.claim(stream)
        pending = self._writer.enqueue_append(
            stream,
            events if type(events) is tuple else tuple(events),
            expected_version,
            None if self._virtual is None else self._virtual.start_flight(),
            fence,
        )
        if pending is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        await self._park(pending.abort)
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

        ``None``: not queued, as the store is closing, runs under virtual time, or serves
        a node that does not hold the stream's lease. Through an outage a begun append is
        decided at the latest when the store's retry deadline has passed.
        """
        if self._closing or self._virtual is not None:
            return None
        check_append_args(stream, events, expected_version)
        fence = None
        if self._fence is not None:
            try:
                fence = self._fence.claim(stream)
            except FencedError:
                return None
        return self._writer.enqueue_append(
            stream, events, expected_version, None, fence, after=after, wake=wake
        )

    def finish_append(self, pending: PendingAppend) -> AppendResult:
        """The result of a decided append (see :meth:`begin_append`).

        Raises:
            ConcurrencyConflictError, FencedError, StoreClosedError,
            StoreUnavailableError, StoreError: as ``append``.
        """
        return pending.result()

    async def _park(self, abort: Callable[[object], trio.lowlevel.Abort]) -> None:
        """Wait for the writer thread to resume this task (holding a virtual clock)."""
        virtual = self._virtual
        if virtual is None:
            await trio.lowlevel.wait_task_rescheduled(abort)
            return
        virtual.hold()
        try:
            await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            virtual.release()

    async def _run_write(self, fn: Callable[[psycopg.Connection], T], *, retry: bool) -> T:
        """Run ``fn`` on the write connection, in the writer thread, between commits.

        ``retry``: ``fn`` is idempotent, so it is retried through an outage.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise StoreClosedError()
        job = self._writer.enqueue_job(
            fn, None if self._virtual is None else self._virtual.start_flight(), retry=retry
        )
        if job is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        await self._park(job.abort)
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

        Chunks go to ``blobs`` once each; only those the stream's previous snapshot did
        not reference are written.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
            ValueError: ``version`` is below 1 or beyond the stream's version, or a new
                chunk does not match its address.
        """
        check_stream_name(stream)
        if version < 1:
            raise ValueError(f"snapshot version must be >= 1, got {version}")
        now = self._clock()
        wanted = dict(chunks or {})

        def run(conn: psycopg.Connection) -> int:
            with conn.transaction():
                row = conn.execute(STREAM_VERSION, (stream,)).fetchone()
                current = 0 if row is None else int(row[0])
                if version <= current:
                    saved = conn.execute(
                        SAVE_SNAPSHOT, (stream, version, type, schema_version, data, now)
                    ).rowcount
                    if saved:  # not older than the stored one
                        replace_snapshot_chunks(conn, stream, wanted)
            return current

        current = await self._run_write(run, retry=True)
        if version > current:
            raise ValueError(
                f"snapshot of {stream!r} at version {version} is beyond the stream's "
                f"version {current}; fold the stream's events before snapshotting"
            )

    async def delete_streams(self, streams: Sequence[str]) -> int:
        """Delete whole streams with their snapshots and unreferenced blobs.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        names = list(dict.fromkeys(streams))
        for name in names:
            check_stream_name(name)

        def run(conn: psycopg.Connection) -> int:
            if not names:
                return 0
            with conn.transaction():
                deleted = conn.execute(DELETE_EVENTS, (names,)).rowcount
                conn.execute(DELETE_SNAPSHOTS, (names,))
                conn.execute(DELETE_SNAPSHOT_CHUNKS, (names,))
                conn.execute(DELETE_ORPHAN_BLOBS)
                forget_streams(conn, names)  # the recall index's passages of them
            return deleted

        return await self._run_write(run, retry=True)

    # --- reading ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError()

    async def _run_read(self, fn: Callable[[psycopg.Connection], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        async with self._reader_limit:
            return await self._read_retrying.acall(
                functools.partial(run_in_thread, functools.partial(self._read_sync, fn)),
                after_failure=self._readers.drop_idle,
            )

    def _read_sync(self, fn: Callable[[psycopg.Connection], T]) -> T:
        conn = self._readers.take()
        try:
            with map_errors(self._server):
                return fn(conn)
        finally:
            self._readers.give_back(conn)

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream from ``from_version`` on; see ``EventStore.read``.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
            CorruptLogError: a payload is missing or does not match its blob id.
        """
        check_stream_name(stream)
        check_from("from_version", from_version, limit)
        where = self._where

        def run(conn: psycopg.Connection) -> list[RecordedEvent]:
            rows = conn.execute(READ_STREAM, (stream, from_version, limit), binary=True)
            return [row_to_event(where, row) for row in rows]

        return await self._run_read(run)

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read the whole log in global order; see ``EventStore.read_all``.

        Only events whose transaction is older than every transaction still in flight
        are returned, so reading on from the last position seen never skips one.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
            CorruptLogError: a payload is missing or does not match its blob id.
        """
        check_from("from_position", from_position, limit)
        where = self._where

        def run(conn: psycopg.Connection) -> list[RecordedEvent]:
            rows = conn.execute(READ_ALL, (from_position, limit), binary=True)
            return [row_to_event(where, row) for row in rows]

        return await self._run_read(run)

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0 if absent).

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        check_stream_name(stream)

        def run(conn: psycopg.Connection) -> int:
            row = conn.execute(STREAM_VERSION, (stream,)).fetchone()
            return 0 if row is None else int(row[0])

        return await self._run_read(run)

    async def head_position(self) -> int:
        """The newest global position this store has committed or seen at opening.

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
            StoreUnavailableError: the server is unreachable or the connection broke.
        """

        def run(conn: psycopg.Connection) -> list[StreamInfo]:
            return [
                StreamInfo(stream=name, version=version, created_at=first, updated_at=last)
                for name, version, first, last in conn.execute(STREAMS_LISTING, (prefix,))
            ]

        return await self._run_read(run)

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream``, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """
        check_stream_name(stream)

        def run(conn: psycopg.Connection) -> Snapshot | None:
            with conn.transaction():  # the row and its chunks as of one moment
                row = conn.execute(READ_SNAPSHOT, (stream,), binary=True).fetchone()
                if row is None:
                    return None
                chunks = {
                    bytes(id_): bytes(data)
                    for id_, data in conn.execute(READ_SNAPSHOT_CHUNKS, (stream,), binary=True)
                }
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

        As on SQLite (see ``SqliteEventStore.load_checkpoint``): the timers index keeps
        one so that opening folds only the events after it. Its position is one the
        projection reached through ``read_all``, so no event at or below it can still
        commit late.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
        """

        def run(conn: psycopg.Connection) -> tuple[int, bytes] | None:
            row = conn.execute(LOAD_CHECKPOINT, (name,), binary=True).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return await self._run_read(run)

    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None:
        """Replace the checkpoint of projection ``name`` (see :meth:`load_checkpoint`).

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server is unreachable or the connection broke.
            ValueError: ``position`` is negative.
        """
        if position < 0:
            raise ValueError(f"checkpoint position must be >= 0, got {position}")

        def run(conn: psycopg.Connection) -> None:
            conn.execute(SAVE_CHECKPOINT, (name, position, data), binary=True)

        await self._run_write(run, retry=True)

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log from ``from_position``; see ``EventStore.subscribe``.

        When the head has moved but ``read_all`` still holds events back (an older
        transaction is in flight, perhaps another client's), the follower polls every
        ``poll_interval`` seconds instead of spinning.
        """

        async def read_batch(start: int, limit: int) -> list[RecordedEvent]:
            batch = await self.read_all(start, limit=limit)
            if not batch and self._signal.head >= start:
                await trio.sleep(self._poll_interval)
            return batch

        return Subscription(read_batch, self._signal, from_position, prefix)

    async def changes(self) -> AsyncGenerator[int, None]:
        """Follow the head across processes; see ``EventStore.changes``.

        A thread of its own ``LISTEN``s (one connection) to the log's channel, which
        every store's writer rings as it commits (at most every 50 ms); the head is read
        again at each ring, and every :data:`WATCH_POLL_SECONDS` for the commits between
        rings and a ring lost while the listening connection is made again. The head is
        the newest position ``read_all`` returns now, so a position an older transaction
        still holds back comes later.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        token = trio.lowlevel.current_trio_token()
        rung = [trio.Event()]
        stop = threading.Event()

        def ring() -> None:
            rung[0].set()  # the event of the wait under way (each read makes a new one)

        def heard() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(ring)

        threading.Thread(
            target=self._listen_log,
            args=(stop, heard),
            name=f"powertrio-pg-watch {self._server}",
            daemon=True,
        ).start()
        try:
            last = -1
            while not self._closing:
                rung[0] = trio.Event()
                head = await self._run_read(_read_head)
                if head > last:
                    last = head
                    yield head
                with trio.move_on_after(WATCH_POLL_SECONDS):
                    await rung[0].wait()
        finally:
            stop.set()

    def _listen_log(self, stop: threading.Event, heard: Callable[[], None]) -> None:
        """``LISTEN`` to the log's channel until ``stop``; connect again after a loss."""
        from psycopg import sql as psql  # noqa: PLC0415  # the optional extra

        channel = psql.SQL("LISTEN {}").format(psql.Identifier(log_channel(self._schema)))
        while not stop.is_set():
            try:
                conn = self._connect()
            except StoreError:
                stop.wait(WATCH_POLL_SECONDS)
                continue
            try:
                conn.execute(channel)
                heard()  # a commit may have come while no one listened
                while not stop.is_set():
                    for _ in conn.notifies(timeout=WATCH_POLL_SECONDS):
                        heard()
            except Exception:  # a lost connection: listen again (the poll covers the gap)
                logger.debug("the log's listener lost its connection", exc_info=True)
                stop.wait(WATCH_POLL_SECONDS)
            finally:
                conn.close()

    # --- a node's fence -----------------------------------------------------------------

    async def _attach_fence(self, fence: Fence, node: str, idle: float) -> None:
        """Check every append of a placed stream against ``fence`` (a node's leases)."""
        writer = self._writer
        writer.fence_node = node
        writer.fence_idle = idle
        await self._run_write(writer.limit_idle, retry=True)
        self._fence = fence

    def _connect(self) -> psycopg.Connection:
        """A new autocommit connection of the log's schema (the node's ``LISTEN``).

        Raises:
            StoreUnavailableError: the server cannot be reached.
        """
        return connect(
            self._dsn, self._schema, server=self._server, connect_timeout=self._connect_timeout
        )

    async def _call(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run ``fn`` on a pooled autocommit connection in a worker thread (the node's SQL)."""
        return await self._run_read(fn)

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
        )

    def _finish_close(self) -> None:
        self._closing = True
        self._writer.join()
        self._signal.close()
        self._readers.close()

    async def aclose(self) -> None:
        """Stop taking appends and reads; wait until the writer committed what was queued.

        The connections close when the ``open_postgres_store`` block exits.
        """
        self._closing = True
        self._writer.request_stop()
        with trio.CancelScope(shield=True):
            await self._writer.drained.wait()
        self._signal.close()
        await trio.lowlevel.checkpoint()


def _read_head(conn: psycopg.Connection) -> int:
    row = conn.execute(HEAD_POSITION).fetchone()
    return 0 if row is None else int(row[0])


@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    schema: str = "powertrio",
    blob_threshold: int = 64 * 1024,
    max_batch: int = 1024,
    readers: int = 4,
    connect_timeout: float = 10.0,
    poll_interval: float = 0.05,
    clock: Callable[[], float] = time.time,
    create: bool = True,
    retry_deadline: float = DEFAULT_RETRY_DEADLINE,
) -> AsyncIterator[PostgresEventStore]:
    """Open (or create) the event log in ``schema`` of a PostgreSQL database.

    The store lives as long as the ``async with`` block: its writer thread runs
    meanwhile, and leaving the block commits queued appends, stops it and closes the
    connections. Needs the ``postgres`` extra (psycopg 3) and PostgreSQL 13 or later.

    Args:
        dsn (str): a libpq connection string or URI (``"host=... dbname=..."``).
        schema (str): the PostgreSQL schema holding the log; created if missing.
        blob_threshold (int): payloads longer than this many bytes are stored once in
            the content-addressed blob table (checked against their hash on read).
        max_batch (int): most appends one group commit takes.
        readers (int): most read connections (and concurrent reads).
        connect_timeout (float): seconds to wait for a connection before
            ``StoreUnavailableError``; statement timeouts belong in the DSN
            (``options=-c statement_timeout=5s``) and raise it too.
        poll_interval (float): how often a follower re-reads while an older transaction
            holds events back.
        clock (Callable[[], float]): the time source for ``recorded_at``.
        create (bool): create the log's tables when ``schema`` has none; with false,
            a missing log is ``StoreNotFoundError`` (so a typo does not leave one behind).
        retry_deadline (float): seconds the open store keeps retrying reads and writes
            through an outage (a restart, a failover) before ``StoreUnavailableError``;
            0 reports the first failure. Acknowledged appends are never lost nor written
            twice (see ``runtime._postgres._retry``). Opening itself does not retry.

    Yields:
        PostgresEventStore: the open store.

    Raises:
        BadConnectionStringError: ``dsn`` does not parse.
        StoreUnavailableError: the server cannot be reached.
        StoreRefusedError: the server refused the connection (no such database or
            user, bad password).
        StoreNotFoundError: there is no log in ``schema`` and ``create`` is false.
        ForeignDatabaseError: ``schema`` holds another application's tables.
        StoreSchemaVersionError: a newer powertrio wrote the log.
        StoreError: the server refused (e.g. no right to create the schema).
    """
    try:
        import psycopg  # noqa: F401, PLC0415  # the optional extra: fail here, clearly
    except ImportError as exc:
        msg = "open_postgres_store needs psycopg 3: pip install 'powertrio[postgres]'"
        raise ImportError(msg) from exc
    if blob_threshold < 0:
        raise ValueError(f"blob_threshold must be >= 0, got {blob_threshold}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if readers < 1:
        raise ValueError(f"readers must be >= 1, got {readers}")
    if not schema:
        raise ValueError("schema must be a non-empty string")
    if not retry_deadline >= 0:
        raise ValueError(f"retry_deadline must be >= 0 seconds, got {retry_deadline}")
    check_dsn(dsn)
    server = describe(dsn)

    def opening() -> tuple[psycopg.Connection, int]:
        conn = connect(dsn, schema, server=server, connect_timeout=connect_timeout)
        try:
            return conn, prepare_schema(conn, schema, server=server, create=create)
        except BaseException:
            conn.close()
            raise

    conn, head = await run_in_thread(opening)
    signal = CommitSignal(head)
    writer = PostgresWriter(
        dsn=dsn,
        schema=schema,
        server=server,
        connect_timeout=connect_timeout,
        token=trio.lowlevel.current_trio_token(),
        signal=signal,
        clock=clock,
        blob_threshold=blob_threshold,
        max_batch=max_batch,
        head=head,
        conn=conn,
        retrying=Retrying(retry_deadline),
    )
    store = PostgresEventStore(
        dsn=dsn,
        schema=schema,
        server=server,
        connect_timeout=connect_timeout,
        clock=clock,
        writer=writer,
        signal=signal,
        virtual=virtual_run(),
        poll_interval=poll_interval,
        reader_limit=trio.CapacityLimiter(readers),
        readers=_ReaderPool(dsn=dsn, schema=schema, server=server, connect_timeout=connect_timeout),
        read_retrying=Retrying(retry_deadline),
    )
    try:
        writer.start()
        try:
            yield store
        finally:
            store._closing = True
            writer.request_stop()
            with trio.CancelScope(shield=True):
                await writer.drained.wait()
    finally:
        store._finish_close()
