"""The SQLite store's writer thread: group commit of queued appends, and maintenance writes.

One thread owns the write connection and commits everything queued so far in one
transaction and one sync, so concurrent appenders share the cost of durability. Its
state machine (take work, plan, commit, hand callers back, sweep the index when idle,
stop) runs outside Trio and touches Trio only through the run's token; keeping it apart
from the Trio-side facade keeps that boundary, and the mutex guarding it, in one place.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import final

import attrs
import orjson
import trio

from protocols.errors import ConcurrencyConflictError, StoreError

from .._store._contract import CommitSignal, NewEvent
from .._store._writer import GroupCommitWriter, WriteJob
from .._store._writer_queue import PendingAppend, behind_failure
from ._schema import (
    BUSY_TIMEOUT_MS,
    GROUP_STATEMENT,
    GUARD_MESSAGE,
    INSERT_BLOB,
    INSERT_GROUP,
    READ_HEAD_VERSION,
    event_checksum,
    indexed_upto,
    insert_events,
    map_errors,
    read_head,
    sweep,
)
from ._wal_headroom import WalHeadroom

__all__ = ["SqliteWriter", "WriteJob"]

logger = logging.getLogger("powertrio.store")

# When to sweep the lagging per-stream index (see _sqlite._schema): the writer sweeps in a
# transaction of its own once ``index_lag`` events are unindexed and no append is waiting,
# or once the oldest unindexed event has waited ``index_after`` seconds and no append is
# waiting, however few wait: a session that went idle reads its events through the index
# when it is next re-activated, not by a scan of every event committed after its first one
# (milliseconds a read with a few thousand of them). Sweeping by age costs at most one
# sweep per ``index_after`` beside what the lag asks for, and none while appends keep the
# queue full.
# A writer that never runs out of appends sweeps inside a commit once _SWEEP_DEFERRAL
# times as many are: a sweep blocks every append while it runs, and much of its cost
# (about one dirty leaf page per stream) does not grow with its size, so under load a
# longer tail for reads buys append throughput.
_SWEEP_DEFERRAL = 4

# A queue at least this long, met when nothing else is in flight, is split in two groups.
_SPLIT_QUEUE = 64

# The WAL's size from which a commit that grows it asks for a checkpoint (see
# SqliteWriter._look_at_wal): below it, the file grows to this size once; above it,
# each growth costs a journal commit of the file system in the commit's sync.
_WAL_REUSE = 256 * 1024

# The WAL bound (see SqliteWriter._bound_wal): how long a blocking checkpoint waits for
# readers to leave the WAL, and how many commits to wait after readers kept it busy.
_CHECKPOINT_WAIT_MS = 200
_CHECKPOINT_BACKOFF = 16


@attrs.define(eq=False)
class _Plan:
    """The rows of one group commit, built by ``_plan`` in the writer thread."""

    head: int
    now: float
    event_count: int = 0
    # For insert_events: the events table's nine columns per event, in position order.
    event_params: list[object] = attrs.field(factory=list)
    blob_rows: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    # For INSERT_GROUP: one tuple per event and the payload bytes they point into.
    group_rows: list[tuple[object, ...]] = attrs.field(factory=list)
    payloads: list[bytes] = attrs.field(factory=lambda: [b"."])
    # Each written stream's new version, for the writer's cache.
    streams: dict[str, int] = attrs.field(factory=dict)
    accepted: int = 0
    conflicts: list[tuple[PendingAppend, int]] = attrs.field(factory=list)
    # Some stream's version was the caller's word, for the guard to check (group only).
    guessed: bool = False


@attrs.define(eq=False)
class _Counters:
    """The writer's running totals (written by its thread, read by ``statistics()``)."""

    appends: int = 0
    events_appended: int = 0
    conflicts: int = 0
    failed_appends: int = 0
    commits: int = 0
    checkpoint_failures: int = 0
    sweep_failures: int = 0
    wal_checkpoints: int = 0
    checkpoints_blocked: int = 0
    guard_trips: int = 0


def _add_row(
    plan: _Plan, event: NewEvent, *, position: int, stream: str, version: int, threshold: int
) -> None:
    """Add an event's row for ``insert_events`` (and its blob)."""
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
        event_checksum(
            stream, version, event.type, event.schema_version, event.data, event.metadata
        ),
    )


def _plain(name: str) -> bool:
    """Whether ``name`` is printable ASCII, which JSON carries to SQLite unchanged."""
    return name.isascii() and name.isprintable()


def _as_store_error(path: str, exc: BaseException) -> BaseException:
    """What a failed group's callers see: our error as is, anything else as a StoreError."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(f"event log {path!r}: the commit failed ({exc!r}); nothing was written")
    error.__cause__ = exc
    return error


@final
@attrs.define(eq=False, repr=False)
class SqliteWriter(GroupCommitWriter[sqlite3.Connection]):
    """The writer thread of one ``SqliteEventStore``: its commits, its version cache
    (the thread's alone), the index sweep and the WAL's bound.

    The store queues appends and maintenance writes from the Trio thread through the
    shared part (``GroupCommitWriter``); this thread takes them, commits, and resumes
    the waiting tasks through the run's token.
    """

    _path: str
    _conn: sqlite3.Connection
    _token: trio.lowlevel.TrioToken
    _signal: CommitSignal
    _clock: Callable[[], float]
    _blob_threshold: int
    _max_batch: int
    _index_lag: int
    # The oldest unindexed event's longest wait, in seconds, before an idle writer sweeps
    # (None: only index_lag says when).
    _index_after: float | None = None
    # The WAL's bound: the writer truncates it between groups before it passes (0: never).
    _wal_limit: int = 0
    # Commit common groups with INSERT_GROUP (tests turn it off to cover the other way).
    group_statement: bool = GROUP_STATEMENT
    counters: _Counters = attrs.field(factory=_Counters)
    # The writer thread's cache of stream versions (see _plan); only that thread uses it.
    _versions: dict[str, int] = attrs.field(factory=dict)
    _db_head: int = 0
    _data_version: int = -1
    _cache_valid: bool = False
    _indexed_upto: int = 0
    _tail_since: float | None = None
    """When (``time.monotonic``) the tail last went from empty to not empty (None: empty,
    or not known)."""
    _wal_room: WalHeadroom = attrs.field(
        default=attrs.Factory(lambda self: WalHeadroom(self._wal_limit), takes_self=True)
    )
    _wal_path: str = attrs.field(
        default=attrs.Factory(lambda self: self._path + "-wal", takes_self=True)
    )
    _wal_size: int = 0
    """The WAL file's size after the last commit."""
    _growth_told: bool = False
    on_wal_growth: Callable[[], object] | None = None
    """Called (in Trio) when a commit grew the WAL past its reuse size (``_WAL_REUSE``)."""
    checkpoint_lock: threading.Lock = attrs.field(factory=threading.Lock)
    """Held by whoever checkpoints (the background task, or this thread at the bound):
    two checkpoints at once would make one of them fail busy."""

    # --- the Trio side ---------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (once, from Trio)."""
        self._start(f"powertrio-writer {self._path}")

    def close(self) -> None:
        """Close the write connection (after ``join``)."""
        self._conn.close()

    def invalidate_cache(self) -> None:
        """Forget the cached versions and head (in the thread, from a maintenance write).

        This connection's own commits do not move ``data_version``, so a maintenance
        write that changes what the cache holds must say so.
        """
        self._cache_valid = False

    # --- the writer thread -----------------------------------------------------------

    def _main(self) -> None:
        """The writer thread: commit queued appends in groups, run maintenance writes.

        One long-lived thread owns the write connection, so taking the next group needs
        no round trip through Trio. A group's callers are handed back (resumed in Trio)
        when the next group is about to commit, or when the thread runs out of work: the
        thread does its Python work for the next group while Trio has nothing to run,
        then SQLite writes and syncs it (without the GIL) while Trio runs the callers just
        resumed. Handing them back earlier would make both threads want the GIL at once,
        and the thread would wait for Trio to go idle before it could finish the commit.
        """
        decided: list[PendingAppend] = []  # committed or failed, not handed back yet
        self._learn_tail()
        try:
            while (work := self._take_work(holding=bool(decided))) is not None:
                if not isinstance(work, list) or not work:
                    # Out of work, or a maintenance write (which may be long): hand back.
                    self._hand_back(decided)
                    decided = []
                    if isinstance(work, WriteJob):
                        self._run_job(work)
                        self._resume_job(work)
                    elif work == "idle":
                        self._sweep_when_idle()
                    continue
                previous, decided = decided, work
                try:
                    self._commit_sync(work, functools.partial(self._hand_back, previous))
                except BaseException as exc:  # the group fails; the next commit may succeed
                    self._fail(work, exc)
                # Not kept while the thread waits for work: a group's appends hold their
                # events and their callers' tasks.
                previous = work = []
                if self._look_at_wal():
                    self._hand_back(decided)  # nobody waits for their answer behind it
                    decided = []
                    self._bound_wal()
        finally:
            self._stop(decided, self._db_head)

    def _group_size(self, queued: int, *, holding: bool) -> int:
        if not holding and queued >= _SPLIT_QUEUE:
            # A long queue and no other group in flight: commit half alone, so its
            # callers run in Trio while the other half syncs. Two groups then alternate,
            # one on disk while the other is in Trio.
            return min(self._max_batch, queued // 2)
        return self._max_batch

    def _idle_work_due(self) -> bool:
        # Idle, or closing: a good moment to catch the index up (a file left with a long
        # tail would slow the next opener's first reads).
        if self._cache_valid and self._db_head - self._indexed_upto > self._index_lag:
            return True
        wait = self._idle_work_in()
        return wait is not None and wait <= 0

    def _idle_work_in(self) -> float | None:
        since = self._tail_since
        if since is None or self._index_after is None:
            return None
        return since + self._index_after - time.monotonic()

    def _learn_tail(self) -> None:
        """Whether a previous writer left a tail (writer thread, at start), for this one
        to index once it has been idle long enough, whether or not anything is appended."""
        if self._index_after is None:
            return
        conn = self._conn
        try:
            if read_head(conn) > indexed_upto(conn):
                self._tail_since = time.monotonic()
        except sqlite3.Error:
            pass  # the first commit finds the tail

    def _run_job(self, job: WriteJob[sqlite3.Connection]) -> None:
        try:
            with map_errors(self._path):
                job.result = job.fn(self._conn)
        except BaseException as exc:  # handed to the waiting task
            job.error = exc

    def _hand_back(self, decided: list[PendingAppend]) -> None:
        if decided:
            self._post_decided(decided, self._db_head)

    def _fail(self, batch: list[PendingAppend], exc: BaseException) -> None:
        for pending in batch:
            if pending.outcome is None:
                pending.outcome = _as_store_error(self._path, exc)
                self.counters.failed_appends += 1

    def _commit_sync(self, batch: list[PendingAppend], ready: Callable[[], None]) -> None:
        """Commit one group of appends, all or nothing for each append (writer thread).

        Calls ``ready`` once, when the Python work is done and the sync begins (or on
        failure): see ``_main``.
        """
        called = False

        def ready_once() -> None:
            nonlocal called
            if not called:
                called = True
                ready()

        conn = self._conn
        try:
            with map_errors(self._path):
                try:
                    if not (
                        self.group_statement
                        and self._cache_valid
                        and self._commit_group(conn, batch, ready_once)
                    ):
                        self._commit_transaction(conn, batch, ready_once)
                except sqlite3.IntegrityError as exc:
                    if GUARD_MESSAGE not in str(exc):
                        raise
                    self._retry_after_guard(conn, batch, ready_once)
        finally:
            ready_once()

    def _retry_after_guard(
        self, conn: sqlite3.Connection, batch: list[PendingAppend], ready: Callable[[], None]
    ) -> None:
        """SQLite's one-writer guard refused a version the plan took for free: nothing was
        written, and the cache was stale (a writer that bypassed this one, or a bug).

        Re-plan from the database in a transaction: an append whose stream has moved on
        fails as a conflict naming the stream and its version, the others commit.
        """
        self.counters.guard_trips += 1
        logger.warning(
            "event log %r: the one-writer guard refused a group commit (stale version "
            "cache); re-planning it from the database",
            self._path,
        )
        self._cache_valid = False
        self._commit_transaction(conn, [p for p in batch if p.outcome is None], ready)

    def _commit_group(
        self, conn: sqlite3.Connection, batch: list[PendingAppend], ready: Callable[[], None]
    ) -> bool:
        """Commit with the one statement ``INSERT_GROUP``; False if it wrote nothing.

        Outside a transaction the plan rests on the cache and reads of the moment; the
        statement's ``data_version`` condition makes sure nothing changed before it took
        the write lock, and its guard that every version the plan took on the caller's
        word is right. Either way it writes nothing otherwise, and the transaction
        re-plans.
        """
        plan = self._plan(conn, batch, group=True)
        if plan is None:
            return False
        if not plan.event_count:
            if plan.conflicts and self._cache_moved(conn):
                return False  # conflicts seen on a stale cache: the transaction decides
        else:
            try:
                params = (
                    orjson.dumps(plan.group_rows),
                    b"".join(plan.payloads),
                    plan.head - plan.event_count + 1,
                    plan.now,
                    self._data_version,
                )
                ready()
                written = conn.execute(INSERT_GROUP, params).rowcount
            except sqlite3.Error:
                if plan.guessed:
                    # A guessed version was wrong (the guard), or the write failed: its
                    # conflicts may rest on the guess, so the transaction decides all.
                    return False
                self._decide_conflicts(plan)  # conflicts stay conflicts when the rest fails
                raise
            except BaseException:
                self._decide_conflicts(plan)
                raise
            if written != plan.event_count:
                return False
        self._decide_conflicts(plan)
        self._settle(plan, self._indexed_upto)
        return True

    def _commit_transaction(
        self, conn: sqlite3.Connection, batch: list[PendingAppend], ready: Callable[[], None]
    ) -> None:
        """Commit in an explicit transaction: blobs, imported times, names the group
        statement does not carry, a sweep, or a retry after the group statement."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            plan = self._plan(conn, batch, group=False)
            assert plan is not None
            self._decide_conflicts(plan)
            if plan.blob_rows:
                conn.executemany(INSERT_BLOB, plan.blob_rows)
            if plan.event_count:
                insert_events(conn, plan.event_params, plan.event_count)
            ready()
            indexed = self._indexed_upto
            if plan.head - indexed > self._index_lag * _SWEEP_DEFERRAL:
                indexed = sweep(conn, indexed, plan.head)
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
        self.counters.conflicts += len(plan.conflicts)

    def _settle(self, plan: _Plan, indexed: int) -> None:
        """Record a committed plan in the cache and the counters."""
        self._versions.update(plan.streams)
        self._db_head = plan.head
        self._indexed_upto = indexed
        if indexed == plan.head:
            self._tail_since = None
        elif self._tail_since is None:
            self._tail_since = time.monotonic()
        counters = self.counters
        counters.commits += 1
        counters.appends += plan.accepted
        counters.events_appended += plan.event_count

    def _sweep_when_idle(self) -> None:
        """Index the unindexed tail in a transaction of its own (writer thread, idle).

        A failure leaves the tail as it is (reads still see it) and drops the cache, so
        that no idle sweep is tried again before a commit has re-read it.
        """
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_cache(conn)
                indexed = self._indexed_upto
                if self._db_head > indexed:
                    indexed = sweep(conn, indexed, self._db_head)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            # Not fatal (reads scan the unindexed tail), but never silent. The next commit
            # re-reads the cache and starts the wait for the next try.
            self._cache_valid = False
            self._tail_since = None
            self.counters.sweep_failures += 1
            logger.exception("event log %r: the index sweep failed", self._path)
            return
        self._indexed_upto = indexed
        self._tail_since = None

    def _look_at_wal(self) -> bool:
        """After a commit: whether to truncate the WAL now (its bound), having told the
        checkpointer if the commit grew the file past its reuse size (writer thread).

        Each commit that grows the file pays its file system a journal commit in its
        sync; once the WAL restarts, commits overwrite its pages instead. The
        checkpointer then copies the WAL and has this thread restart it
        (:meth:`catch_up`); told once until that catch-up.
        """
        try:
            size = os.stat(self._wal_path).st_size
        except OSError:
            return False
        grew = size > self._wal_size
        self._wal_size = size
        if grew and size >= _WAL_REUSE and not self._growth_told:
            tell = self.on_wal_growth
            if tell is not None:
                self._growth_told = True
                self._call_soon(tell)
        return self._wal_room.due(size, self.counters.commits)

    def catch_up(self, conn: sqlite3.Connection) -> None:
        """Copy what the WAL holds beyond the last checkpoint (writer thread, between two
        commits, as a maintenance write): the next commit then finds it wholly copied and
        starts it again from its beginning, so its pages are reused."""
        with self.checkpoint_lock:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._growth_told = False

    def _bound_wal(self) -> None:
        """Checkpoint and truncate the WAL, between two groups (writer thread).

        The background PASSIVE checkpoints copy most pages back meanwhile, but under
        sustained writes they never catch up with the end of the WAL, which then grows
        without bound. So once the next group could take it past ``wal_limit``
        (``WalHeadroom``) the writer, which then holds no transaction, runs a TRUNCATE
        checkpoint: it waits (briefly) for readers to leave the WAL, copies the rest and
        empties the file. Readers that stay keep it busy: the writer tries again some
        commits later, and counts and logs it.
        """
        conn = self._conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {_CHECKPOINT_WAIT_MS}")
            try:
                with self.checkpoint_lock:
                    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error:
            self.counters.checkpoint_failures += 1
            self._wal_room.after = self.counters.commits + _CHECKPOINT_BACKOFF
            logger.exception("event log %r: the WAL checkpoint failed", self._path)
            return
        if busy:
            self.counters.checkpoints_blocked += 1
            self._wal_room.after = self.counters.commits + _CHECKPOINT_BACKOFF
            logger.warning(
                "event log %r: the WAL is past %d bytes but could not be truncated "
                "(readers or another checkpoint kept it busy); trying again later",
                self._path,
                self._wal_limit,
            )
        else:
            self.counters.wal_checkpoints += 1
            self._wal_room.truncated()
            self._wal_size = 0

    def _cache_moved(self, conn: sqlite3.Connection) -> bool:
        """Whether another connection committed since the cache was filled."""
        return bool(conn.execute("PRAGMA data_version").fetchone()[0] != self._data_version)

    def _check_cache(self, conn: sqlite3.Connection) -> None:
        """Drop and re-read the cache if another connection committed since it was filled."""
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        if not self._cache_valid or data_version != self._data_version:
            self._versions.clear()
            self._db_head = read_head(conn)
            self._indexed_upto = indexed_upto(conn)
            self._data_version = data_version
            self._cache_valid = True

    def _plan(  # noqa: PLR0915  # one flat loop over every append: the hot path
        self, conn: sqlite3.Connection, batch: list[PendingAppend], *, group: bool
    ) -> _Plan | None:
        """Check expected versions and build the rows of one group commit.

        Stream versions and the head come from a cache this connection keeps, valid as
        long as no other connection has committed (``PRAGMA data_version`` has not moved).
        The transaction checks that first, dropping and re-reading a stale cache, and
        nobody can commit between that check and its commit. The group statement checks
        it itself as it takes the write lock, and writes nothing on a stale cache: the
        transaction then re-plans the group. A stream missing from the cache is read once
        and cached (a committed fact; a rollback or a change drops the whole cache); for
        the group statement, it takes the caller's expected version instead, which the
        statement's guard checks. What this batch writes goes to ``plan.streams`` and
        joins the cache after the commit.

        With ``group``, builds the rows of ``INSERT_GROUP``, or returns None if the
        batch needs the explicit transaction.
        """
        now = self._clock()
        if not group:  # the group statement checks for itself (see above)
            # Not asking before a group saves the writer thread one trip out of and back
            # into the GIL per commit, a wait for the Trio thread each time.
            self._check_cache(conn)
        cache = self._versions
        upto = self._indexed_upto
        threshold = self._blob_threshold
        plan = _Plan(head=self._db_head, now=now)
        written = plan.streams
        rows = plan.group_rows
        payloads = plan.payloads
        offset = 2  # substr() counts from 1, after the leading byte
        checksum = event_checksum
        position = plan.head
        accepted = 0
        for pending in batch:
            stream = pending.stream
            if group and not _plain(stream):
                return None
            refused = behind_failure(pending)
            current = written.get(stream)
            if current is None:
                current = cache.get(stream)
            if current is None:
                if group and pending.events and not refused:
                    # A stream the cache has not seen (a new session's first append):
                    # take the caller's version. The guard checks it as the first row
                    # goes in; if it is wrong, the statement writes nothing and the
                    # transaction re-plans from the log. Reading it here would cost the
                    # writer thread a trip out of and back into the GIL.
                    current = pending.expected_version
                    plan.guessed = True
                else:
                    # The guard's own table, so the plan agrees with what SQLite accepts.
                    row = conn.execute(READ_HEAD_VERSION, (stream,)).fetchone()
                    current = 0 if row is None else cache.setdefault(stream, row[0])
            if refused or current != pending.expected_version:
                pending.version = 0
                plan.conflicts.append((pending, current))
                continue
            pending.first_position = position + 1
            version = current
            for event in pending.events:
                position += 1
                version += 1
                if not group:
                    _add_row(
                        plan,
                        event,
                        position=position,
                        stream=stream,
                        version=version,
                        threshold=threshold,
                    )
                    continue
                data = event.data
                meta = event.metadata
                if event.recorded_at is not None or len(data) > threshold or not _plain(event.type):
                    return None
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
                        checksum(stream, version, event.type, event.schema_version, data, meta),
                    )
                )
                payloads.append(data)
                offset = end
                if meta is not None:
                    payloads.append(meta)
                    offset += len(meta)
            if version != current:
                written[stream] = version
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
