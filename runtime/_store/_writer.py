"""The writer thread both SQL engines run, less its commit: :class:`GroupCommitWriter`.

What the SQLite and PostgreSQL writers share is the state the Trio thread and the
writer thread hand work through, and its rules: the queues of appends and maintenance
writes under one mutex, waking the thread (for an append, once Trio is idle), taking the
next group or write, stopping once drained, and handing what the thread decided back to
Trio through the run's token. An engine's writer subclasses it and writes its commit,
its maintenance writes and what it does while idle; it holds every engine's concurrency
rules, and nothing of this state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar, final

import attrs
import trio

from protocols.errors import StoreClosedError

from .._virtual_time import Flight
from ._contract import CommitSignal, NewEvent
from ._writer_queue import PendingAppend, Queued, resume, take_back

__all__ = ["GroupCommitWriter", "WakeWhenIdle", "WriteJob"]

C = TypeVar("C")
_Item = TypeVar("_Item", bound=Queued)


@final
class WriteJob(Generic[C]):
    """A maintenance write (snapshot, deletion, vacuum) queued for the writer thread,
    which runs ``fn`` on its connection between two commits."""

    __slots__ = ("error", "flight", "fn", "mutex", "queue", "result", "retry", "task")

    def __init__(
        self,
        fn: Callable[[C], object],
        queue: list[WriteJob[C]],
        mutex: threading.Lock,
        flight: Flight | None = None,
        *,
        retry: bool = False,
    ) -> None:
        self.fn = fn
        # Idempotent (running it twice does no harm): an engine with outages retries it.
        self.retry = retry
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        self.task = trio.lowlevel.current_task()
        self.result: object = None
        self.error: BaseException | None = None

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if not started, else wait for it (like ``to_thread``)."""
        return take_back(self)


_ROUNDS = 4
"""Scheduler rounds an append may wait for Trio to go idle before its writer is woken
anyway (a busy Trio thread is seldom idle)."""


class WakeWhenIdle(trio.abc.Instrument):
    """Wakes an idle writer thread for the appends queued meanwhile when Trio is about
    to wait for I/O, or after a few scheduler rounds if it never does.

    Woken at once, the thread would take the GIL from the Trio thread at its next
    release, while it still works on what follows the append (the model call the
    appended events asked for goes out while they commit). Each such hand-over of the
    GIL costs a wake-up, a tenth of a millisecond or more. Woken once Trio has nothing
    to run, the thread does its Python work then, and syncs without the GIL.
    """

    __slots__ = ("_rounds", "_wake", "due")

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._rounds = 0
        self.due = False
        """An append is queued for an idle thread that has not been woken for it."""

    def before_io_wait(self, timeout: float) -> None:
        if not self.due:
            return
        self._rounds += 1
        if timeout > 0 or self._rounds >= _ROUNDS:
            self.due = False
            self._rounds = 0
            self._wake()


class _Counters(Protocol):
    failed_appends: int


@attrs.define(eq=False, repr=False)
class GroupCommitWriter(Generic[C]):
    """A writer thread's shared state and its rules, for an engine's writer to subclass.

    The subclass (an attrs class) holds ``_token``, ``_signal``, ``_max_batch`` and
    ``counters`` as fields, and writes ``_main`` (the thread: commit what
    :meth:`_take_work` gives, then :meth:`_stop`), ``_run_job`` and, if it has work for
    idle moments, ``_idle_work_due``. Everything both threads touch is guarded by
    ``_mutex``.
    """

    if TYPE_CHECKING:  # the subclass's fields
        _token: trio.lowlevel.TrioToken
        _signal: CommitSignal
        _max_batch: int
        counters: _Counters

    # Shared with the Trio thread, guarded by _mutex: queued appends and maintenance
    # writes, whether the thread sleeps on _work, whether it should stop once drained,
    # and how many appends it has taken but not handed back.
    _mutex: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _work: threading.Condition = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: threading.Condition(self._mutex), takes_self=True),
    )
    _queue: list[PendingAppend] = attrs.field(init=False, factory=list)
    _jobs: list[WriteJob[C]] = attrs.field(init=False, factory=list)
    _idle: bool = attrs.field(init=False, default=False)
    _stopping: bool = attrs.field(init=False, default=False)
    _in_flight: int = attrs.field(init=False, default=0)
    # The Trio thread's alone: wakes the thread for appends once Trio is idle.
    _nudge: WakeWhenIdle = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: WakeWhenIdle(self._wake_thread), takes_self=True),
    )
    thread: threading.Thread | None = attrs.field(init=False, default=None)
    drained: trio.Event = attrs.field(init=False, factory=trio.Event)
    """Set (in the Trio thread) once the thread has answered everything and stopped."""

    # --- what an engine writes -------------------------------------------------------

    def _main(self) -> None:
        """The writer thread."""
        raise NotImplementedError

    def _run_job(self, job: WriteJob[C]) -> None:
        """Run a maintenance write on the write connection (writer thread); its outcome
        waits in ``job.result`` or ``job.error``."""
        raise NotImplementedError

    def _idle_work_due(self) -> bool:
        """Whether the thread has work of its own when nothing is queued (under the
        mutex): :meth:`_take_work` then returns ``"idle"`` rather than waiting."""
        return False

    # --- the Trio side ---------------------------------------------------------------

    def _start(self, name: str) -> None:
        """Start the writer thread (once, from Trio)."""
        trio.lowlevel.add_instrument(self._nudge)
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def join(self) -> None:
        """Wait for the thread to end; after ``drained``, this returns at once."""
        with contextlib.suppress(KeyError, RuntimeError):  # never added, or Trio is gone
            trio.lowlevel.remove_instrument(self._nudge)
        if self.thread is not None:
            self.thread.join()

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
    ) -> PendingAppend | None:
        """Queue an append for the next group; ``None`` if the thread has stopped.

        The caller parks on the result with ``wait_task_rescheduled(pending.abort)``, or
        passes ``wake`` to be called instead (``after``: see ``PipelinedAppends``).
        ``flight`` (under virtual time) lands once the caller's wake-up is posted;
        ``fence`` is the ``(shard, epoch)`` the commit must find still held (an engine
        without a fence never gets one).
        """
        # _enqueue, written out for an append (the hot path): one call fewer.
        queue = self._queue
        pending = PendingAppend(
            stream, events, expected_version, queue, self._mutex, flight, fence, after, wake
        )
        with self._mutex:
            if self._stopping:
                if flight is not None:
                    flight.land()
                return None
            queue.append(pending)
            if not self._idle:
                return pending
            if flight is not None:
                # Under virtual time, whose clock must not wait on a thread nobody woke.
                self._idle = False
                self._work.notify()
                return pending
        self._nudge.due = True
        return pending

    def enqueue_job(
        self, fn: Callable[[C], object], flight: Flight | None = None, *, retry: bool = False
    ) -> WriteJob[C] | None:
        """Queue a maintenance write to run between commits; ``None`` if the thread has
        stopped. The caller parks on the result with ``wait_task_rescheduled(job.abort)``.

        ``flight`` (under virtual time) lands once the caller's wake-up is posted;
        ``retry``: ``fn`` is idempotent, so an engine with outages retries it through one.
        """
        job = WriteJob(fn, self._jobs, self._mutex, flight, retry=retry)
        return job if self._enqueue(self._jobs, job) else None

    def _enqueue(self, queue: list[_Item], item: _Item) -> bool:
        """Queue ``item`` and wake the thread (for an append, once Trio is idle: see
        :class:`WakeWhenIdle`); ``False`` if it has stopped (closing, or it died), as
        nobody would run the item."""
        with self._mutex:
            if self._stopping:
                if item.flight is not None:
                    item.flight.land()
                return False
            queue.append(item)
            if not self._idle:
                return True
            if queue is not self._queue or item.flight is not None:
                # A maintenance write, or an append under virtual time (whose clock must
                # not wait on a thread nobody woke).
                self._idle = False
                self._work.notify()
                return True
        self._nudge.due = True
        return True

    def _wake_thread(self) -> None:
        """Wake the thread if it waits for work (Trio thread)."""
        with self._mutex:
            if self._idle:
                self._idle = False
                self._work.notify()

    def pending_appends(self) -> int:
        """Appends queued or taken but not yet handed back."""
        with self._mutex:
            return len(self._queue) + self._in_flight

    def request_stop(self) -> None:
        """Ask the thread to commit what is queued, then stop (``drained`` tells when)."""
        with self._mutex:
            self._stopping = True
            self._work.notify()

    def _deliver(self, decided: list[PendingAppend], head: int) -> None:
        """Resume the callers of a decided group (Trio thread; must not raise)."""
        with self._mutex:
            self._in_flight -= len(decided)
        resume(decided)
        self._signal.advance(head)

    # --- the writer thread -----------------------------------------------------------

    def _take_work(
        self, *, holding: bool = False
    ) -> list[PendingAppend] | WriteJob[C] | Literal["idle"] | None:
        """The next group of appends or maintenance write, waiting for one if needed.

        Returns ``[]`` instead of waiting while ``holding`` callers to hand back,
        ``"idle"`` when nothing is queued but the engine has work of its own
        (:meth:`_idle_work_due`), and ``None`` once the store is closing and everything
        queued is done.
        """
        with self._mutex:
            while True:
                if self._queue:
                    take = self._group_size(len(self._queue), holding=holding)
                    batch = self._queue[:take]
                    del self._queue[:take]
                    self._in_flight += len(batch)
                    return batch
                if self._jobs:
                    return self._jobs.pop(0)
                if holding:
                    return []
                if self._idle_work_due():
                    return "idle"
                if self._stopping:
                    return None
                self._idle = True
                self._work.wait()
                self._idle = False

    def _group_size(self, queued: int, *, holding: bool) -> int:
        """How many of the ``queued`` appends the next group takes (under the mutex)."""
        return self._max_batch

    def _call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` in the Trio thread (from the writer thread)."""
        with contextlib.suppress(trio.RunFinishedError):  # nobody is left to tell
            self._token.run_sync_soon(fn, *args)

    def _resume_job(self, job: WriteJob[C]) -> None:
        """Have Trio resume the task parked on a finished maintenance write."""
        self._call_soon(trio.lowlevel.reschedule, job.task)
        if job.flight is not None:
            job.flight.land()

    def _post_decided(self, decided: list[PendingAppend], head: int) -> None:
        """Have Trio resume the callers of ``decided`` (from the writer thread)."""
        self._call_soon(self._deliver, decided, head)
        # Under virtual time: only now, with the wake-up posted, may Trio wait for I/O.
        for pending in decided:
            if pending.flight is not None:
                pending.flight.land()

    def _stop(self, decided: list[PendingAppend], head: int) -> None:
        """The writer thread's last act: refuse new work, answer everyone (``decided``
        with the log's ``head``), report drained.

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
        self.counters.failed_appends += len(left)
        if decided or left:
            self._post_decided(decided + left, head)
        for job in jobs:
            job.error = StoreClosedError("the event store's writer stopped")
            self._resume_job(job)
        self._call_soon(self.drained.set)
