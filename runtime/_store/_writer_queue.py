"""What the SQLite and PostgreSQL writers share: the queued append and its rules (taking
one back, when a pipelined append may not commit, resuming its caller), and the Trio side
of a writer thread (queueing work, waking the thread once Trio is idle, handing what it
decided back).

A task waiting for a queued append or maintenance write is cancelled: if the writer thread
has not taken the item yet it never will, else the item's outcome is decided by the work in
flight and the task keeps waiting for it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, final

import trio

from protocols.lowlevel import slot_setter

from .._virtual_time import Flight
from ._contract import AppendResult, CommitSignal, NewEvent


class Queued(Protocol):
    """An item queued for a writer thread (an append or a maintenance write)."""

    @property
    def queue(self) -> list[Any]:
        """The queue it waits in (items of its own kind)."""

    @property
    def mutex(self) -> threading.Lock:
        """The lock the queue is shared under."""

    @property
    def flight(self) -> Flight | None:
        """Under virtual time, the flight that lands once the item is decided."""


_new_object = object.__new__
_SET_STREAM = slot_setter(AppendResult, "stream")
_SET_VERSION = slot_setter(AppendResult, "version")
_SET_FIRST = slot_setter(AppendResult, "first_position")
_SET_LAST = slot_setter(AppendResult, "last_position")


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
class PendingAppend:
    """One queued append, waiting for its group commit (a plain slotted class: hot path).

    The caller parks its task directly (``wait_task_rescheduled``) and is rescheduled
    once its group is committed: no ``trio.Event`` or parking lot per append. An append
    begun without waiting (``begin_append`` of either store) has ``wake`` called instead,
    and may be queued ``after`` another of its stream. On PostgreSQL, ``fence`` is the
    (shard, epoch) of the lease it is made under (``None``: not fenced).
    """

    __slots__ = (
        "after",
        "events",
        "expected_version",
        "fence",
        "first_position",
        "flight",
        "last_position",
        "mutex",
        "outcome",
        "queue",
        "stream",
        "task",
        "version",
        "wake",
    )

    def __init__(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        queue: list[PendingAppend],
        mutex: threading.Lock,
        *,
        flight: Flight | None = None,
        fence: tuple[int, int] | None = None,
        after: PendingAppend | None = None,
        wake: Callable[[], object] | None = None,
    ) -> None:
        self.stream = stream
        self.fence = fence
        self.events = events
        self.expected_version = expected_version
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        # Queued behind ``after`` (same stream, before it is decided): commits only if
        # ``after`` does, at the version ``after`` leaves (see ``PipelinedAppends``).
        self.after = after
        # Called (in Trio) once decided, instead of rescheduling the task.
        self.wake = wake
        self.task = trio.lowlevel.current_task()
        # An error, or None: once the caller is resumed, None means committed, with the
        # figures below (set by the writer thread; the caller builds the AppendResult).
        self.outcome: BaseException | None = None
        self.version = 0
        self.first_position = 0
        self.last_position = 0

    def result(self) -> AppendResult:
        """What the append came to, once decided: its result, or its error raised."""
        if self.outcome is not None:
            raise self.outcome
        # AppendResult(...) without its frozen-attribute guard: see _set_result_slots.
        result: AppendResult = _new_object(AppendResult)
        _set_result_slots(
            result, self.stream, self.version, self.first_position, self.last_position
        )
        return result

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if still queued, else wait for the commit in flight.

        Once the writer thread has taken the append out of the queue its outcome is
        decided by the commit in flight (bounded by one commit), so the caller keeps
        waiting and learns what happened; the cancellation is delivered at its next
        checkpoint.
        """
        return take_back(self)


def take_back(item: Queued) -> trio.lowlevel.Abort:
    """``abort_fn`` of a task parked on ``item``: ``SUCCEEDED`` if it was still queued
    (now removed, its flight landed), ``FAILED`` if the thread has it (bounded by one
    commit or one write; the cancellation is delivered at the task's next checkpoint)."""
    with item.mutex:
        try:
            item.queue.remove(item)
        except ValueError:
            return trio.lowlevel.Abort.FAILED
    if item.flight is not None:
        item.flight.land()  # never handed to the thread: nothing to wait for
    return trio.lowlevel.Abort.SUCCEEDED


def behind_failure(pending: PendingAppend) -> bool:
    """Whether ``pending`` was queued behind an append that failed, or that conflicted
    or left another version in this plan: it then conflicts too, never landing on top of
    what another writer wrote meanwhile, even at its expected version."""
    after = pending.after
    return after is not None and (
        after.outcome is not None or after.version != pending.expected_version
    )


def resume(decided: list[PendingAppend]) -> None:
    """Resume the callers of decided appends (Trio thread): wake what began one without
    waiting, reschedule the task parked on each other."""
    for pending in decided:
        pending.after = None  # decided: a chain of them must not keep the first alive
        wake, pending.wake = pending.wake, None  # a bound method of what holds pending
        if wake is None:
            trio.lowlevel.reschedule(pending.task)
        else:
            wake()


class _Job(Protocol):
    """A maintenance write, as the Trio side resumes its caller."""

    @property
    def task(self) -> trio.lowlevel.Task:
        """The task parked on it."""

    @property
    def flight(self) -> Flight | None:
        """Under virtual time, the flight that lands once the caller's wake-up is posted."""


_Item = TypeVar("_Item", bound=Queued)


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


class GroupCommitWriter:
    """What the SQLite and PostgreSQL writers share: queueing appends and maintenance
    writes for the writer thread under one mutex, waking it, and handing what it decided
    back to Trio through the run's token. The writers declare these attributes as their
    own fields."""

    _nudge: WakeWhenIdle
    _mutex: threading.Lock
    _work: threading.Condition
    _queue: list[PendingAppend]
    _idle: bool
    _stopping: bool
    _in_flight: int
    _token: trio.lowlevel.TrioToken
    _signal: CommitSignal

    def _start_thread(self, main: Callable[[], None], name: str) -> threading.Thread:
        """Start the writer thread running ``main`` (once, from Trio)."""
        trio.lowlevel.add_instrument(self._nudge)
        thread = threading.Thread(target=main, name=name, daemon=True)
        thread.start()
        return thread

    def _stop_nudging(self) -> None:
        """Take the idle wake-up out of the run (the store is closed)."""
        with contextlib.suppress(KeyError, RuntimeError):  # never added, or Trio is gone
            trio.lowlevel.remove_instrument(self._nudge)

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
        pending = PendingAppend(
            stream,
            events,
            expected_version,
            self._queue,
            self._mutex,
            flight=flight,
            fence=fence,
            after=after,
            wake=wake,
        )
        return pending if self._enqueue(self._queue, pending) else None

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

    def _call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` in the Trio thread (from the writer thread)."""
        with contextlib.suppress(trio.RunFinishedError):  # nobody is left to tell
            self._token.run_sync_soon(fn, *args)

    def _resume_job(self, job: _Job) -> None:
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

    def _deliver(self, decided: list[PendingAppend], head: int) -> None:
        """Resume the callers of a decided group (Trio thread; must not raise)."""
        with self._mutex:
            self._in_flight -= len(decided)
        resume(decided)
        self._signal.advance(head)
