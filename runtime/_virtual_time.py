"""Virtual time that stays deterministic while work runs in threads.

``trio.testing.MockClock(autojump_threshold=0)`` jumps to the next deadline as soon as
every task is blocked, and a task waiting for a thread counts as blocked. So a test under
virtual time would see its timers fire *during* an fsync in the store's writer thread or a
sync tool in a worker thread, at a point that depends on how long the thread took.

Holding the clock still is not enough. While one task waits for its thread, the others
keep running, and how many steps they take before the thread's result is back depends on
the wall clock: a read of the log racing a timer that falls due, or two reads finishing in
either order, give two plays of one test two different histories at the same virtual time
(found by ``test_a_run_on_sqlite_is_reproducible``: a zero-delay timer fired before the
harness cancelled it in one play and after it in the other). Under a ``MockClock`` the
runtime's thread work is therefore a *flight*:

- while a flight is in the air the clock's autojump is suspended, so virtual time cannot
  move (:func:`hold_virtual_clock`);
- before each of its I/O waits the run loop blocks until every flight in the air has
  posted its result back to Trio (an instrument of the run, :class:`VirtualRun`). A
  thread's work thus takes exactly one pass of the scheduler, whatever its wall time, and
  the tasks it wakes join the same batch in every play.

Work that may itself wait for Trio (a sync tool calling ``trio.from_thread`` or waiting
for its cancellation) cannot be waited for without a deadlock; such a flight stops
blocking the loop after a grace of wall time (:data:`TOOL_GRACE`), keeping only the clock
held. The runtime's own store work never waits for Trio and has no grace.

With a real clock none of this exists: a flight costs one type check.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar, cast, final

import outcome
import trio

if TYPE_CHECKING:
    import trio.testing

__all__ = [
    "TOOL_GRACE",
    "Flight",
    "VirtualRun",
    "hold_virtual_clock",
    "run_in_thread",
    "run_sync_in_thread",
    "start_flight",
    "virtual_run",
]

T = TypeVar("T")

TOOL_GRACE = 1.0
"""Wall seconds the run loop waits for a sync tool's thread before it stops waiting (the
clock stays held): a tool that waits for Trio would otherwise never be answered."""


@final
class Flight:
    """One piece of thread work that the Trio thread waits for, under a ``MockClock``.

    Made in the Trio thread by :func:`start_flight`; :meth:`land` is called once the
    work's result has been posted to Trio (``TrioToken.run_sync_soon``), from any thread.
    """

    __slots__ = ("_grace_end", "_run")

    def __init__(self, run: VirtualRun, grace: float | None) -> None:
        self._run = run
        self._grace_end = math.inf if grace is None else time.monotonic() + grace

    def land(self) -> None:
        """The result is posted: the run loop may do its I/O wait (idempotent)."""
        run = self._run
        with run.condition:
            run.flights.discard(self)
            run.condition.notify_all()


@final
class VirtualRun(trio.abc.Instrument):
    """The virtual-time state of one ``trio.run`` on a ``MockClock``, and its instrument."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        self.clock = clock
        self.holds = 0
        self.saved_threshold = clock.autojump_threshold
        self.condition = threading.Condition(threading.Lock())
        self.flights: set[Flight] = set()

    def before_io_wait(self, timeout: float) -> None:
        """Block the run loop until every flight in the air has posted its result."""
        with self.condition:
            while self.flights:
                now = time.monotonic()
                end = min(flight._grace_end for flight in self.flights)
                if end <= now:
                    self.flights = {f for f in self.flights if f._grace_end > now}
                    continue
                self.condition.wait(None if end == math.inf else end - now)

    def hold(self) -> None:
        if self.holds == 0:
            self.saved_threshold = self.clock.autojump_threshold
            self.clock.autojump_threshold = math.inf
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0:
            self.clock.autojump_threshold = self.saved_threshold

    def start_flight(self, grace: float | None = None) -> Flight:
        """See :func:`start_flight`."""
        flight = Flight(self, grace)
        with self.condition:
            self.flights.add(flight)
        return flight


_RUN: trio.lowlevel.RunVar[VirtualRun | None] = trio.lowlevel.RunVar("powertrio_virtual_run")


def virtual_run() -> VirtualRun | None:
    """This run's virtual-time state; ``None`` under a real clock.

    The clock of a run never changes: a store asks once when it opens and keeps the
    answer, so under a real clock its hot path pays nothing.
    """
    try:
        return _RUN.get()
    except LookupError:
        pass
    clock = trio.lowlevel.current_clock()
    # A MockClock's module is loaded by whoever made the clock; importing it here would
    # load pytest with it (trio.testing's RaisesGroup) into every process.
    loaded = "trio.testing" in sys.modules
    run = VirtualRun(clock) if loaded and isinstance(clock, trio.testing.MockClock) else None
    if run is not None:
        trio.lowlevel.add_instrument(run)
    _RUN.set(run)
    return run


@contextmanager
def hold_virtual_clock() -> Iterator[None]:
    """Keep a ``MockClock`` from jumping while the block waits for a thread.

    Use it around the wait for a thread's result (``to_thread.run_sync``, a writer
    thread's reply): the clock's autojump is suspended until the block exits, so virtual
    time stands still however long the thread takes. Nestable and shared by every task of
    the run; a no-op under a real clock. It does not order the thread's result among the
    other tasks' steps, and ``trio.testing.wait_all_tasks_blocked`` may return while the
    thread runs: the runtime's own thread work, and :func:`run_sync_in_thread`, also land
    in a fixed pass of the scheduler (see this module).
    """
    run = virtual_run()
    if run is None:
        yield
        return
    run.hold()
    try:
        yield
    finally:
        run.release()


def start_flight(*, grace: float | None = None) -> Flight | None:
    """A flight for thread work about to start, or ``None`` under a real clock.

    Call it in the Trio thread *before* handing the work to its thread, and have the
    thread call :meth:`Flight.land` right after posting the result to Trio. The waiting
    task holds the clock (:func:`hold_virtual_clock`) until it is resumed.

    Args:
        grace (float | None): wall seconds after which the loop stops waiting for it;
            ``None`` (the store's own work, which never waits for Trio) waits for good.
    """
    run = virtual_run()
    return None if run is None else run.start_flight(grace)


async def run_in_thread(fn: Callable[[], T], *, name: str = "powertrio thread") -> T:
    """Run ``fn()`` in a worker thread and return its result (or raise its error).

    With a real clock this is ``trio.to_thread.run_sync(fn)``. Under a ``MockClock`` the
    work is a flight (see this module): the thread posts its result to Trio itself and
    only then lands, so the run loop resumes the caller in a fixed pass. Not cancellable
    once started (like ``to_thread.run_sync``); ``fn`` must never wait for Trio.
    """
    run = virtual_run()
    if run is None:
        return await trio.to_thread.run_sync(fn)
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    flight = start_flight()
    assert flight is not None

    def deliver(result: outcome.Outcome[T]) -> None:
        try:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)
        except trio.RunFinishedError:  # pragma: no cover - the caller waits for it
            pass
        finally:
            flight.land()

    def refuse(_raise_cancel: object) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.FAILED

    trio.lowlevel.start_thread_soon(fn, deliver, name=name)
    with hold_virtual_clock():
        value: T = await trio.lowlevel.wait_task_rescheduled(refuse)
    return value


@final
class _ArmingLimiter:
    """The default thread limiter, arming a flight as the thread is about to start.

    ``trio.to_thread.run_sync`` takes "a CapacityLimiter-like object", acquires it (a
    checkpoint: other tasks run) and then starts the thread in the same step. A flight
    armed before that checkpoint would block the run loop for a thread not yet started;
    armed here, it is in the air exactly while the thread is.
    """

    __slots__ = ("_inner", "flight")

    def __init__(self, inner: trio.CapacityLimiter) -> None:
        self._inner = inner
        self.flight: Flight | None = None

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        await self._inner.acquire_on_behalf_of(borrower)
        self.flight = start_flight(grace=TOOL_GRACE)

    def release_on_behalf_of(self, borrower: object) -> None:
        self._inner.release_on_behalf_of(borrower)

    def land(self) -> None:
        if self.flight is not None:
            self.flight.land()


async def run_sync_in_thread(fn: Callable[[], T], *, abandon_on_cancel: bool = False) -> T:
    """``trio.to_thread.run_sync(fn)`` that keeps virtual time deterministic.

    For work that is not the runtime's own, such as a sync tool: it runs in Trio's worker
    thread, so ``trio.from_thread`` works in it. Under a ``MockClock`` the clock is held
    until the result is back, and the run loop waits for ``fn`` to return before its
    next I/O wait, for up to :data:`TOOL_GRACE` wall seconds (a thread that waits for
    Trio is answered after that). Trio posts the result a few microseconds after ``fn``
    returns, so unlike the store's work this leaves a narrow window in which the caller
    may resume one pass later.

    Args:
        fn (Callable[[], T]): the blocking work.
        abandon_on_cancel (bool): as in ``trio.to_thread.run_sync``.
    """
    if virtual_run() is None:
        return await trio.to_thread.run_sync(fn, abandon_on_cancel=abandon_on_cancel)
    limiter = _ArmingLimiter(trio.to_thread.current_default_thread_limiter())

    def work() -> T:
        try:
            return fn()
        finally:
            limiter.land()

    try:
        with hold_virtual_clock():
            return await trio.to_thread.run_sync(
                work,
                abandon_on_cancel=abandon_on_cancel,
                limiter=cast(trio.CapacityLimiter, limiter),  # "CapacityLimiter-like"
            )
    finally:
        limiter.land()  # also when cancelled before it started, or abandoned
