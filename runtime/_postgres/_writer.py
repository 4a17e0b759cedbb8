"""The PostgreSQL store's writer thread: group commit of queued appends, and maintenance writes.

One thread owns the write connection and commits everything queued so far in one
transaction, so concurrent appenders share one commit (one WAL flush) while each awaits
its own acknowledgement. The thread touches Trio only through the run's token, as the
SQLite writer does.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, final

import attrs
import trio

from protocols.errors import (
    ConcurrencyConflictError,
    FencedError,
    StoreError,
    StoreUnavailableError,
)

from .._store._contract import CommitSignal
from .._store._writer import GroupCommitWriter, WriteJob
from .._store._writer_queue import PendingAppend, behind_failure
from ._fence import Fence
from ._retry import (
    DEFAULT_RETRY_DEADLINE,
    Backend,
    Retrying,
    end_orphan,
    identify,
    xact_committed,
)
from ._schema import (
    INSERT_BLOBS,
    INSERT_EVENTS,
    STREAM_VERSIONS,
    connect,
    lock_key,
    log_channel,
    map_errors,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresWriter"]

# How often a group is retried when another writer (another node, a stray client) took a
# version between our read and our insert; the primary key refused it, nothing was written.
_RETRIES = 3


@attrs.define(eq=False)
class _Counters:
    """The writer's running totals (written by its thread, read by ``statistics()``)."""

    appends: int = 0
    events_appended: int = 0
    conflicts: int = 0
    failed_appends: int = 0
    commits: int = 0
    fenced: int = 0


@attrs.define(eq=False)
class _Plan:
    """The columns of one group's insert, in position order, and who conflicted."""

    accepted: list[PendingAppend] = attrs.field(factory=list)
    conflicts: list[tuple[PendingAppend, int]] = attrs.field(factory=list)
    columns: tuple[list[object], ...] = attrs.field(factory=lambda: tuple([] for _ in range(8)))
    blob_ids: list[bytes] = attrs.field(factory=list)
    blob_data: list[bytes] = attrs.field(factory=list)


RING_SECONDS = 0.05
"""The least time between two rings of the log's doorbell (``NOTIFY``) by one writer."""
_UNLOCK = "SELECT pg_advisory_unlock(%s), pg_current_xact_id()::text"
_UNLOCK_AND_RING = _UNLOCK + ", pg_notify(%s, %s)"


class _Retry(Exception):  # control flow inside the writer, never raised out
    """Another writer took a version between our read and our insert: plan again."""


@final
@attrs.define(eq=False, repr=False)
class PostgresWriter(GroupCommitWriter["psycopg.Connection"]):
    """The writer thread of one ``PostgresEventStore``: its commits, riding out outages,
    the fence and the log's doorbell (the queues are ``GroupCommitWriter``'s)."""

    _dsn: str
    _schema: str
    _server: str
    _connect_timeout: float
    _token: trio.lowlevel.TrioToken
    _signal: CommitSignal
    _clock: Callable[[], float]
    _blob_threshold: int
    _max_batch: int
    _head: int
    _conn: psycopg.Connection | None = None
    fence: Fence | None = None
    """The leases fenced appends are checked against (``PostgresEventStore.install_fence``)."""
    fence_idle: float = 0.0
    """Seconds a transaction may sit idle before the server ends it (when fencing)."""
    _lock_key: int = attrs.field(
        default=attrs.Factory(lambda self: lock_key(self._schema), takes_self=True)
    )
    _rung: float = float("-inf")
    """When this writer last rang the log's doorbell (monotonic seconds)."""
    _channel: str = attrs.field(
        default=attrs.Factory(lambda self: log_channel(self._schema), takes_self=True)
    )
    counters: _Counters = attrs.field(factory=_Counters)
    retrying: Retrying = attrs.field(factory=lambda: Retrying(DEFAULT_RETRY_DEADLINE))
    """How the writer rides out an outage (see ``_postgres._retry``)."""
    _identity: Backend | None = None
    """The write connection's server process (to end it if the connection is lost)."""
    _orphan: Backend | None = None
    """A lost write connection's server process, ended by the next connection."""

    # --- the Trio side ---------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (once, from Trio)."""
        self._start(f"powertrio-pg-writer {self._server}")

    def join(self) -> None:
        """Wait for the thread to end and close its connection."""
        GroupCommitWriter.join(self)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- the writer thread -----------------------------------------------------------

    def _main(self) -> None:
        try:
            while (work := self._take_work()) is not None:
                if isinstance(work, WriteJob):
                    self._run_job(work)
                    self._resume_job(work)
                elif isinstance(work, list):  # never "idle": nothing to do then
                    head = self._commit(work)
                    self._post_decided(work, head)
        finally:
            self._stop([], 0)

    def _connection(self) -> psycopg.Connection:
        """The write connection, reconnecting after a loss.

        Raises:
            StoreUnavailableError: the server cannot be reached.
        """
        conn = self._conn
        if conn is not None and (conn.broken or conn.closed):
            self._drop_connection()
            conn = None
        if conn is None:
            conn = connect(
                self._dsn, self._schema, server=self._server, connect_timeout=self._connect_timeout
            )
            try:
                if self._orphan is not None:  # see _postgres_retry.end_orphan
                    end_orphan(conn, self._orphan)
                    self._orphan = None
                self._identity = None
                self._identity = identify(conn, self._server)
                self.limit_idle(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        elif self._identity is None:  # the connection opening the store handed over
            self._identity = identify(conn, self._server)
        return conn

    def _drop_connection(self) -> None:
        """After a failure: close the write connection, so the next try makes a new one.

        Its server process may outlive it (a network cut leaves it waiting, in its
        transaction, holding its rows' locks): the next connection ends it.
        """
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._orphan, self._identity = self._identity, None

    def limit_idle(self, conn: psycopg.Connection) -> None:
        """A fenced writer paused inside a transaction (SIGSTOP) holds its lease rows
        ``FOR KEY SHARE``: the server ends such a transaction after ``fence_idle`` seconds,
        so a takeover waits at most that long."""
        if self.fence is not None and self.fence_idle > 0:
            with map_errors(self._server):
                conn.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                    (f"{int(self.fence_idle * 1000)}ms",),
                )

    def _run_job(self, job: WriteJob[psycopg.Connection]) -> None:
        def attempt() -> object:
            conn = self._connection()
            with map_errors(self._server):
                return job.fn(conn)

        try:
            if job.retry:
                job.result = self.retrying.call(attempt, after_failure=self._drop_connection)
            else:
                job.result = attempt()
        except BaseException as exc:  # handed to the waiting task
            job.error = exc

    def _commit_group(self, batch: list[PendingAppend]) -> tuple[_Plan, int]:
        """One try at the group (a few more if other writers took its versions meanwhile).

        Raises:
            StoreUnavailableError: the server is out of reach; nothing was written.
        """
        conn = self._connection()
        for attempt in range(_RETRIES + 1):
            try:
                return self._commit_once(conn, batch)
            except _Retry:
                if attempt == _RETRIES:
                    raise StoreError(
                        f"event store {self._server}: other writers kept taking the "
                        "versions this group read; nothing was written"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _ask_committed(self, xid: int) -> bool:
        """Whether ``xid`` committed, asked on a new write connection."""
        self._drop_connection()
        conn = self._connection()
        with map_errors(self._server):
            return xact_committed(conn, xid, self._server)

    def _commit(self, batch: list[PendingAppend]) -> int:
        """Commit one group, all or nothing per append; returns the head it reached.

        Through an outage the group is retried until the deadline (``_postgres._retry``).
        """
        try:
            plan, head = self.retrying.call(
                lambda: self._commit_group(batch), after_failure=self._drop_connection
            )
        except BaseException as exc:  # the group fails; the next commit may succeed
            error = (
                exc
                if isinstance(exc, StoreError)
                else StoreError(
                    f"event store {self._server}: the commit failed ({exc!r}); nothing was written"
                )
            )
            if error is not exc:
                error.__cause__ = exc
            for pending in batch:
                pending.outcome = error
            self.counters.failed_appends += len(batch)
            return 0
        for pending, current in plan.conflicts:
            pending.outcome = ConcurrencyConflictError(
                pending.stream, pending.expected_version, current
            )
        counters = self.counters
        counters.conflicts += len(plan.conflicts)
        counters.appends += len(plan.accepted)
        counters.events_appended += len(plan.columns[0])
        counters.commits += 1
        return head

    def _plan(self, batch: list[PendingAppend], versions: dict[str, int]) -> _Plan:
        """Check expected versions against ``versions`` and lay out the rows to insert."""
        now = self._clock()
        threshold = self._blob_threshold
        plan = _Plan()
        streams, numbers, types, schemas, datas, blob_ids, metas, stamps = plan.columns
        for pending in batch:
            stream = pending.stream
            current = versions.get(stream, 0)
            if current != pending.expected_version or behind_failure(pending):
                pending.version = 0
                plan.conflicts.append((pending, current))
                continue
            for event in pending.events:
                current += 1
                data: bytes | None = event.data
                blob_id: bytes | None = None
                if len(event.data) > threshold:
                    blob_id = hashlib.sha256(event.data).digest()
                    plan.blob_ids.append(blob_id)
                    plan.blob_data.append(event.data)
                    data = None
                streams.append(stream)
                numbers.append(current)
                types.append(event.type)
                schemas.append(event.schema_version)
                datas.append(data)
                blob_ids.append(blob_id)
                metas.append(event.metadata)
                stamps.append(now if event.recorded_at is None else event.recorded_at)
            versions[stream] = current
            pending.version = current
            plan.accepted.append(pending)
        return plan

    def _commit_once(
        self, conn: psycopg.Connection, batch: list[PendingAppend]
    ) -> tuple[_Plan, int]:
        """One try at committing the group in one transaction.

        Positions are taken under a session advisory lock held only around the insert,
        which also gives the transaction its id (its first write): positions are thus
        handed out in transaction-id order, which is what makes ``READ_ALL`` gap-safe.

        Raises:
            _Retry: the primary key refused a version another writer took meanwhile.
        """
        from psycopg import errors as pg_errors  # noqa: PLC0415  # the optional extra

        server = self._server
        names = list(dict.fromkeys(pending.stream for pending in batch))
        locked = False
        with map_errors(server):
            conn.execute("BEGIN")
            try:
                rows = conn.execute(STREAM_VERSIONS, (names,)).fetchall()
                live = self._fence(conn, batch)
                plan = self._plan(live, {name: version or 0 for name, version in rows})
                positions: list[int] = []
                xid: int | None = None
                if plan.columns[0]:
                    conn.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
                    locked = True
                    cursor = conn.execute(INSERT_EVENTS, plan.columns, binary=True)
                    positions = [row[0] for row in cursor.fetchall()]
                    # The transaction's id, to settle a COMMIT the connection loses; and
                    # the log's doorbell for watchers of other processes, rung as it
                    # commits, at most every RING_SECONDS (a ring costs each commit that
                    # makes one; the watchers' poll covers the commits between rings).
                    unlocked = conn.execute(*self._unlock(positions[-1])).fetchone()
                    xid = None if unlocked is None else int(unlocked[1])
                    locked = False
                    if plan.blob_ids:
                        conn.execute(INSERT_BLOBS, (plan.blob_ids, plan.blob_data), binary=True)
            except BaseException as exc:
                self._abandon(conn, locked=locked)
                if isinstance(exc, pg_errors.UniqueViolation):
                    raise _Retry from exc
                raise
        try:
            with map_errors(server, committing=True):
                conn.execute("COMMIT")
        except StoreUnavailableError as exc:
            # Nothing to write (xid None) means nothing was; else ask the server.
            if xid is not None and self.retrying.settle(xid, self._ask_committed):
                pass  # it committed: acknowledge the group
            else:
                raise StoreUnavailableError(server, exc.reason, exc.detail) from exc
        index = 0
        for pending in plan.accepted:
            count = len(pending.events)
            if count:
                pending.first_position = positions[index]
                pending.last_position = positions[index + count - 1]
                index += count
        if positions:
            self._head = max(self._head, positions[-1])
        # An empty append reports the head: first = head + 1, last = head.
        for pending in plan.accepted:
            if not pending.events:
                pending.first_position = self._head + 1
                pending.last_position = self._head
        return plan, self._head

    def _unlock(self, last: int) -> tuple[str, tuple[object, ...]]:
        """The statement that releases the position lock, with a ring if one is due."""
        now = time.monotonic()
        if now - self._rung < RING_SECONDS:
            return _UNLOCK, (self._lock_key,)
        self._rung = now
        return _UNLOCK_AND_RING, (self._lock_key, self._channel, str(last))

    def _fence(self, conn: psycopg.Connection, batch: list[PendingAppend]) -> list[PendingAppend]:
        """The appends whose lease is still held; the others are refused, fenced.

        The fence reads its leases in the append's transaction, locking what it read: a
        takeover waits for this commit, so no append lands after its shard changed hands.
        """
        claims = {pending.fence for pending in batch if pending.fence is not None}
        if not claims:
            return batch
        fence = self.fence
        admitted = () if fence is None else fence.admitted(conn, claims)
        holder = "" if fence is None else fence.name
        live: list[PendingAppend] = []
        for pending in batch:
            claim = pending.fence
            if claim is None or claim in admitted:
                live.append(pending)
                continue
            pending.outcome = FencedError(
                pending.stream,
                claim[0],
                holder,
                f"its lease of epoch {claim[1]} has expired or was taken over",
            )
            self.counters.failed_appends += 1
            self.counters.fenced += 1
        return live

    def _abandon(self, conn: psycopg.Connection, *, locked: bool) -> None:
        """Roll back after a failure, releasing the position lock if we held it."""
        import psycopg  # noqa: PLC0415  # the optional extra

        if conn.broken or conn.closed:
            return  # the server ends the transaction and the session's locks
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
            if locked:
                conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key,))
