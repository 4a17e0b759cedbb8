"""The one SQL event store: every engine's ``EventStore``, written once over a dialect.

SQLite and PostgreSQL keep the log the same way: one writer thread commits the queued
appends in groups, reads run in worker threads on connections of their own, and every
method is the same three steps: check the arguments, run the engine's SQL on a
connection, shape the rows. :class:`SqlEventStore` writes those steps once: appends
(queued, pipelined, parked under virtual time), reads, snapshots, checkpoints,
deletions, subscriptions and statistics. An engine supplies the rest:

- a :class:`SqlDialect`: its SQL, as functions of one connection, run in a thread;
- its connections: :meth:`SqlEventStore._run_read` (a pool, a retry through outages);
- its writer thread (a :class:`SqlWriter`: group commit, the version check at commit);
- what only it has: following the head across processes (``changes``), and extras
  such as SQLite's ``vacuum`` or PostgreSQL's fence.

docs/stores.md tells how to add an engine; ``runtime.testing.check_event_store`` is the
judge of every one.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import trio

from protocols.errors import FencedError, StoreClosedError

from .._virtual_time import Flight, VirtualRun
from ._contract import (
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
from ._writer_queue import PendingAppend

__all__ = ["SqlDialect", "SqlEventStore", "SqlWriter", "snapshot_from_row"]

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)
C_co = TypeVar("C_co", covariant=True)
T = TypeVar("T")


class SqlDialect(Protocol[C_contra]):
    """An engine's SQL for the one store: each method runs in a worker thread (reads) or
    the writer thread (writes) on one connection, and returns what the store returns.
    Arguments arrive checked; the engine's typed errors are mapped around the call."""

    def read_stream(
        self, conn: C_contra, stream: str, from_version: int, limit: int | None
    ) -> list[RecordedEvent]:
        """``stream``'s events from ``from_version`` on, at most ``limit``, verified."""
        ...

    def read_all(
        self, conn: C_contra, from_position: int, limit: int | None
    ) -> list[RecordedEvent]:
        """The log from ``from_position`` in global order (none a later commit may
        still put before the last one returned)."""
        ...

    def stream_version(self, conn: C_contra, stream: str) -> int:
        """The stream's version, 0 if absent."""
        ...

    def streams(self, conn: C_contra, prefix: str) -> list[StreamInfo]:
        """The streams whose names start with ``prefix``, sorted by name."""
        ...

    def load_snapshot(self, conn: C_contra, stream: str) -> Snapshot | None:
        """The stream's snapshot with its chunks, read as of one moment."""
        ...

    def save_snapshot(
        self,
        conn: C_contra,
        stream: str,
        version: int,
        *,
        type_: str,
        schema_version: int,
        data: bytes,
        recorded_at: float,
        chunks: dict[bytes, bytes],
    ) -> int:
        """In one transaction: save the snapshot unless it is beyond the stream's version
        or older than the stored one; return the stream's version."""
        ...

    def delete_streams(self, conn: C_contra, streams: list[str]) -> int:
        """Delete whole streams, their snapshots and unreferenced blobs, in one
        transaction; return how many events went."""
        ...

    def load_checkpoint(self, conn: C_contra, name: str) -> tuple[int, bytes] | None:
        """A projection's checkpoint: ``(position, data)``, or ``None``."""
        ...

    def save_checkpoint(self, conn: C_contra, name: str, position: int, data: bytes) -> None:
        """Replace a projection's checkpoint, position and data together."""
        ...


def snapshot_from_row(stream: str, row: Sequence[Any], chunks: dict[bytes, bytes]) -> Snapshot:
    """A snapshot from its row, ``(version, type, schema_version, data, recorded_at)``,
    as every dialect's ``READ_SNAPSHOT`` selects it, and its chunks."""
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


class _Job(Protocol):
    result: object
    error: BaseException | None

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort: ...


class _Counters(Protocol):
    appends: int
    events_appended: int
    conflicts: int
    failed_appends: int
    commits: int


class SqlWriter(Protocol[C_co]):
    """An engine's writer thread, as the one store drives it."""

    @property
    def counters(self) -> _Counters: ...

    @property
    def drained(self) -> trio.Event: ...

    def enqueue_append(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        flight: Flight | None = None,
        fence: tuple[int, int] | None = None,
        *,
        after: PendingAppend | None = None,
        wake: Callable[[], object] | None = None,
    ) -> PendingAppend | None: ...

    def enqueue_job(
        self, fn: Callable[[C_co], Any], flight: Flight | None = None, *, retry: bool = False
    ) -> _Job | None: ...

    def pending_appends(self) -> int: ...

    def request_stop(self) -> None: ...


class SqlEventStore(Generic[C]):
    """``EventStore`` on an SQL engine: what every engine shares, written once.

    A subclass is an attrs class holding the attributes below, and supplies
    :meth:`_run_read` (its connections) and :meth:`changes`; it may override the hooks
    (``_claim``, ``_after_append``, ``_wait_held_back``, ``_extra_statistics``,
    ``_begin_close``).
    """

    if TYPE_CHECKING:  # the subclass's attrs fields; no annotations here at run time,
        # which would be resolved against the subclass's module when its names are fixed up
        _clock: Callable[[], float]
        _writer: SqlWriter[C]
        _dialect: SqlDialect[C]
        _signal: CommitSignal
        # Under a MockClock (fixed for the run): appends are flights; None costs nothing.
        _virtual: VirtualRun | None
        _closing: bool

    # --- what an engine supplies ------------------------------------------------------

    async def _run_read(self, fn: Callable[[C], T]) -> T:
        """Run ``fn`` on a read connection in a worker thread, the engine's errors typed."""
        raise NotImplementedError

    def changes(self) -> AsyncGenerator[int, None]:
        """Follow the head across processes; see ``EventStore.changes``."""
        raise NotImplementedError

    def _claim(self, stream: str) -> tuple[int, int] | None:
        """The lease an append to ``stream`` is made under (``None``: not fenced).

        Raises:
            FencedError: the stream may not be written here; nothing is queued.
        """
        return None

    def _after_append(self) -> None:
        """An append was decided (the SQLite store's checkpointer wakes on it)."""

    async def _wait_held_back(self) -> None:
        """The head moved but ``read_all`` returned nothing: an older transaction still
        holds its positions back. An engine whose commits are in position order never
        gets here."""
        await trio.lowlevel.checkpoint()

    def _extra_statistics(self) -> dict[str, int]:
        """The engine's own counters of ``EventStoreStatistics``."""
        return {}

    def _begin_close(self) -> None:
        """Stop taking work: the writer drains what is queued, then stops."""
        self._closing = True
        self._writer.request_stop()

    # --- writing ---------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append events to a stream if it is at ``expected_version``; see ``EventStore``.

        Raises:
            ConcurrencyConflictError: the stream is at another version; nothing was written.
            FencedError: the store is fenced and its holder does not hold the stream.
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
            StoreError: the commit failed; nothing was written.
            TypeError, ValueError: bad arguments.
        """
        check_append_args(stream, events, expected_version)
        if self._closing:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        # No checkpoint_if_cancelled first: parking is the checkpoint, and a caller that
        # is already cancelled is taken straight back out of the queue by ``abort``.
        claim = self._claim(stream)
        virtual = self._virtual
        pending = self._writer.enqueue_append(
            stream,
            events if type(events) is tuple else tuple(events),
            expected_version,
            None if virtual is None else virtual.start_flight(),
            claim,
        )
        if pending is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        # Parked here rather than through _park and finished inline: one coroutine and
        # one call fewer on every append (the hot path).
        if virtual is None:
            await trio.lowlevel.wait_task_rescheduled(pending.abort)
        else:
            await self._park(pending.abort)
        result = pending.result()
        self._after_append()
        return result

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

        ``None``: not queued, as the store is closing, runs under virtual time, or is
        fenced and may not write the stream. A begun append is decided within a commit
        or two (through an outage, at the latest when the retry deadline has passed), or
        taken back with ``pending.abort``.
        """
        if self._closing or self._virtual is not None:
            return None
        check_append_args(stream, events, expected_version)
        try:
            claim = self._claim(stream)
        except FencedError:
            return None
        return self._writer.enqueue_append(
            stream, events, expected_version, None, claim, after=after, wake=wake
        )

    def finish_append(self, pending: PendingAppend) -> AppendResult:
        """The result of a decided append (see :meth:`begin_append`).

        Raises:
            ConcurrencyConflictError, FencedError, StoreClosedError,
            StoreUnavailableError, StoreError: as ``append``.
        """
        result = pending.result()
        self._after_append()
        return result

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

    async def _run_write(self, fn: Callable[[C], T], *, retry: bool = False) -> T:
        """Run ``fn`` on the write connection, in the writer thread, between commits.

        ``retry``: ``fn`` is idempotent, so an engine with outages retries it through one.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closing:
            raise StoreClosedError()
        virtual = self._virtual
        job = self._writer.enqueue_job(
            fn, None if virtual is None else virtual.start_flight(), retry=retry
        )
        if job is None:
            await trio.lowlevel.checkpoint()
            raise StoreClosedError()
        await self._park(job.abort)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]  # what ``fn`` returned

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
            StoreUnavailableError: a server is unreachable or the connection broke.
            ValueError: ``version`` is below 1 or beyond the stream's version, or a new
                chunk does not match its address.
        """
        check_stream_name(stream)
        if version < 1:
            raise ValueError(f"snapshot version must be >= 1, got {version}")
        now = self._clock()
        wanted = dict(chunks or {})
        dialect = self._dialect

        def run(conn: C) -> int:
            return dialect.save_snapshot(
                conn,
                stream,
                version,
                type_=type,
                schema_version=schema_version,
                data=data,
                recorded_at=now,
                chunks=wanted,
            )

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
            StoreUnavailableError: a server is unreachable or the connection broke.
        """
        names = list(dict.fromkeys(streams))
        for name in names:
            check_stream_name(name)
        dialect = self._dialect
        return await self._run_write(lambda conn: dialect.delete_streams(conn, names), retry=True)

    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None:
        """Replace the checkpoint of projection ``name`` (see :meth:`load_checkpoint`).

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
            ValueError: ``position`` is negative.
        """
        if position < 0:
            raise ValueError(f"checkpoint position must be >= 0, got {position}")
        dialect = self._dialect
        await self._run_write(
            lambda conn: dialect.save_checkpoint(conn, name, position, data), retry=True
        )

    # --- reading ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError()

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream from ``from_version`` on; see ``EventStore.read``.

        Every event is verified (its checksum or its blob's address, its columns), and
        so is the run of versions where the engine can tell: a lost or doubled event is
        an error, never a shorter or different history.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
            CorruptLogError: the log is damaged; ``stream`` and ``version`` name the
                event, ``kind`` says how (``checksum``, ``gap``, ``duplicate``, ...).
        """
        check_stream_name(stream)
        check_from("from_version", from_version, limit)
        dialect = self._dialect
        return await self._run_read(
            lambda conn: dialect.read_stream(conn, stream, from_version, limit)
        )

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read the whole log in global order; see ``EventStore.read_all``.

        Only events no later commit can put before them are returned, so reading on
        from the last position seen never skips one.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
            CorruptLogError: the log is damaged.
        """
        check_from("from_position", from_position, limit)
        dialect = self._dialect
        return await self._run_read(lambda conn: dialect.read_all(conn, from_position, limit))

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0 if absent), as the one-writer guard knows it.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
        """
        check_stream_name(stream)
        dialect = self._dialect
        return await self._run_read(lambda conn: dialect.stream_version(conn, stream))

    async def head_position(self) -> int:
        """The newest global position this store has committed or seen (0 when empty).

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
            StoreUnavailableError: a server is unreachable or the connection broke.
        """
        dialect = self._dialect
        return await self._run_read(lambda conn: dialect.streams(conn, prefix))

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream``, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
        """
        check_stream_name(stream)
        dialect = self._dialect
        return await self._run_read(lambda conn: dialect.load_snapshot(conn, stream))

    async def load_checkpoint(self, name: str) -> tuple[int, bytes] | None:
        """A projection's checkpoint: the log position it folded up to, and its state.

        A projection (the timers index) keeps one here so that opening folds only the
        events after it. Its position is one the projection reached through
        ``read_all``, so no event at or below it can still commit late. Not part of
        ``EventStore``: with a store that lacks it, the projection folds the whole log.

        Raises:
            StoreClosedError: the store is closed.
            StoreUnavailableError: a server is unreachable or the connection broke.
        """
        dialect = self._dialect
        return await self._run_read(lambda conn: dialect.load_checkpoint(conn, name))

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log from ``from_position``; see ``EventStore.subscribe``."""

        async def read_batch(start: int, limit: int) -> list[RecordedEvent]:
            batch = await self.read_all(start, limit=limit)
            if not batch and self._signal.head >= start:
                await self._wait_held_back()
            return batch

        return Subscription(read_batch, self._signal, from_position, prefix)

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
            **self._extra_statistics(),
        )

    async def aclose(self) -> None:
        """Stop taking appends and reads; wait until the writer committed what was queued.

        The connections close when the store's ``async with`` block exits.
        """
        self._begin_close()
        with trio.CancelScope(shield=True):
            await self._writer.drained.wait()
        self._signal.close()
        await trio.lowlevel.checkpoint()
