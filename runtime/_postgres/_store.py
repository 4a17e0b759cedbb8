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
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar, final

import attrs
import trio

from protocols.errors import StoreError

from .._store._contract import (
    CommitSignal,
)
from .._store._sql import SqlEventStore
from .._virtual_time import VirtualRun, run_in_thread, virtual_run
from ._dialect import PostgresDialect
from ._fence import Fence
from ._retry import DEFAULT_RETRY_DEADLINE, Retrying
from ._schema import (
    HEAD_POSITION,
    check_dsn,
    connect,
    describe,
    log_channel,
    map_errors,
    prepare_schema,
)
from ._text import TextIndexMethods
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
class PostgresEventStore(SqlEventStore["psycopg.Connection"], TextIndexMethods):
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
    _dialect: PostgresDialect
    _signal: CommitSignal
    # Under a MockClock (fixed for the run): appends are flights; None costs nothing.
    _virtual: VirtualRun | None
    _poll_interval: float
    _reader_limit: trio.CapacityLimiter
    _readers: _ReaderPool
    _read_retrying: Retrying
    _closing: bool = False
    _text_ready: bool = False
    # The leases appends are checked against (``install_fence``); None: no fencing.
    _fence: Fence | None = None

    def __repr__(self) -> str:
        return f"<PostgresEventStore {self._server} schema {self._schema!r}>"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the log's tables."""
        return self._schema

    # --- the one SQL store's hooks ----------------------------------------------------

    def _claim(self, stream: str) -> tuple[int, int] | None:
        """The lease an append is made under, if a fence is installed (a node's)."""
        return None if self._fence is None else self._fence.claim(stream)

    async def _wait_held_back(self) -> None:
        """An older transaction, perhaps another client's, still holds positions back:
        poll every ``poll_interval`` seconds instead of spinning."""
        await trio.sleep(self._poll_interval)

    # --- reading ---------------------------------------------------------------------

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
                conn = self.connect()
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

    # --- beside the log: a fence, and SQL of others on its connections ----------------

    async def install_fence(self, fence: Fence, *, idle: float) -> None:
        """Check every append against ``fence`` from now on (a node's leases).

        ``idle``: seconds a transaction may sit idle before the server ends it. A writer
        paused inside its transaction (``SIGSTOP``) holds the rows its fence read locked,
        so a takeover waits at most that long.

        Raises:
            StoreUnavailableError: the server cannot be reached.
        """
        writer = self._writer
        writer.fence = fence
        writer.fence_idle = idle
        await self._run_write(writer.limit_idle, retry=True)
        self._fence = fence

    @property
    def fenced_appends(self) -> int:
        """Appends the installed fence refused in their commit's own check."""
        return self._writer.counters.fenced

    def connect(self) -> psycopg.Connection:
        """A new autocommit connection to the log's schema, for SQL beside the log (a
        node's leases and ``LISTEN``); the caller closes it. Run its statements inside
        :meth:`errors`.

        Raises:
            StoreUnavailableError: the server cannot be reached.
        """
        return connect(
            self._dsn, self._schema, server=self._server, connect_timeout=self._connect_timeout
        )

    def errors(self) -> contextlib.AbstractContextManager[None]:
        """Turn psycopg's errors inside the block into the store's typed errors (an
        outage into ``StoreUnavailableError``), naming this server."""
        return map_errors(self._server)

    async def call(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run ``fn`` on a pooled autocommit connection in a worker thread: SQL beside
        the log (a node's placements and inbox), with the store's typed errors.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: the server cannot be reached.
            StoreError: the server refused.
        """
        return await self._run_read(fn)

    # --- lifecycle -------------------------------------------------------------------

    def _finish_close(self) -> None:
        self._closing = True
        self._writer.join()
        self._signal.close()
        self._readers.close()


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
        dialect=PostgresDialect(f"{server} schema {schema!r}"),
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
