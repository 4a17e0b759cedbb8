"""Virtual time is deterministic with the SQLite store and with sync tools in threads.

Under ``MockClock`` the order of what happens must not depend on how long a thread took:
the runtime's own thread work (store reads, group commits, maintenance writes) lands in a
fixed pass of the scheduler, and a sync tool's thread is waited for before the next I/O
wait (``runtime/_virtual_time.py``). The tests here slow one thread at a time on purpose
and ask for the same history, record for record.

The case that found it (``test_a_run_on_sqlite_is_reproducible``): a timer set with no
delay just before the harness settles. The timer service reads the log before it
delivers (a thread); the harness lists and cancels timers (more threads). Whichever read
came back first decided whether the log said ``timer.fired`` or ``timer.cancelled``.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable

import pytest
import trio
import trio.lowlevel
import trio.testing
from test_testing_kit import FOUND_CONVERSATION, FOUND_OPERATIONS, SQLITE_HARNESS

import runtime._sqlite._store as sqlite_store
import runtime._sqlite._writer as sqlite_writer
from actors import AgentSpec, tool
from actors.testing import (
    AdvanceClock,
    RuntimeHarness,
    Send,
    SendFollowUp,
    SetTimer,
    Trace,
)
from protocols import LLMResponse, ToolCall
from runtime._virtual_time import run_in_thread, start_flight
from runtime.lowlevel import hold_virtual_clock, run_sync_in_thread

SQLITE = SQLITE_HARNESS
"""The harness of ``test_a_run_on_sqlite_is_reproducible`` (states observed after each
operation: more reads of the log)."""


def _history(trace: Trace) -> tuple[object, ...]:
    return (trace.records, trace.outcomes, trace.faults)


def _slow_nth(original: Callable[..., object], n: int) -> Callable[..., object]:
    """``original``, with its ``n``-th call (counted from 0) 30 ms late."""
    calls = itertools.count()

    @functools.wraps(original)
    def slow(*args: object) -> object:
        if next(calls) == n:
            time.sleep(0.03)
        return original(*args)

    return slow


def test_the_found_case_has_one_history_however_long_each_store_read_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each store read slowed in turn, one history (before the fix, slowing one of a few
    of them gave ``timer.fired`` instead of ``timer.cancelled``)."""
    first = SQLITE.run(FOUND_CONVERSATION, FOUND_OPERATIONS)
    ends = [r.type for r in first.records if r.type in ("timer.fired", "timer.cancelled")]
    assert len(ends) == 1  # the race: fired first, or cancelled by the settling harness
    expected = _history(first)
    original = sqlite_store.SqliteEventStore._read_sync
    for n in range(30):
        monkeypatch.setattr(sqlite_store.SqliteEventStore, "_read_sync", _slow_nth(original, n))
        assert _history(SQLITE.run(FOUND_CONVERSATION, FOUND_OPERATIONS)) == expected, n


def test_a_history_does_not_depend_on_how_long_a_group_commit_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer thread's commits: each one slowed in turn, one history. (Before the
    fix some of these gave another history, but not reliably enough to pin here.)"""
    operations = (SetTimer(delay=0.0, note="wake up"),)
    expected = _history(SQLITE.run((), operations))
    original = sqlite_writer.SqliteWriter._commit_sync
    for n in range(30):
        monkeypatch.setattr(sqlite_writer.SqliteWriter, "_commit_sync", _slow_nth(original, n))
        assert _history(SQLITE.run((), operations)) == expected, n


_TOOL_DELAY = [0.0]


@tool(crash_policy="retry")
def slow_add(a: int, b: int) -> int:
    """Add two integers, taking a while in a worker thread.

    Args:
        a: the first.
        b: the second.
    """
    time.sleep(_TOOL_DELAY[0])
    return a + b


@pytest.mark.parametrize(
    "operations",
    [
        (Send("go", wait=False), SetTimer(delay=0.0), SendFollowUp(text="more", id="f1")),
        (Send("go", wait=False), AdvanceClock(seconds=0.0), SetTimer(delay=0.0)),
    ],
    ids=["timer-then-follow-up", "timer-while-the-tool-runs"],
)
def test_a_sync_tool_gives_one_history_however_long_its_thread_takes(
    operations: tuple[object, ...],
) -> None:
    """A thread tool racing timers and follow-ups, on SQLite: the same record each play,
    whether the tool takes no time or 100 ms (before the fix, even two plays with the same
    delay could differ)."""
    harness = RuntimeHarness(AgentSpec(name="t", tools=[slow_add]), store="sqlite")
    call = ToolCall(id="c1", name="slow_add", arguments='{"a": 1, "b": 2}')
    conversation = [LLMResponse(tool_calls=[call]), LLMResponse(content="ok")]
    histories = []
    for delay in (0.0, 0.03, 0.0, 0.1):
        _TOOL_DELAY[0] = delay
        histories.append(_history(harness.run(conversation, operations)))  # type: ignore[arg-type]
    assert histories[1:] == [histories[0]] * 3


# -- the mechanism ------------------------------------------------------------------------


async def test_store_thread_work_returns_its_value_and_raises_its_error(
    virtual_clock: trio.testing.MockClock,
) -> None:
    """``run_in_thread`` under a MockClock: the result comes back, an error is raised in
    the caller, and virtual time did not move meanwhile."""
    before = trio.current_time()
    assert await run_in_thread(lambda: 6 * 7) == 42

    def fail() -> None:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        await run_in_thread(fail)
    assert trio.current_time() == before


async def test_a_timer_cannot_fire_while_store_work_is_in_a_thread(
    virtual_clock: trio.testing.MockClock,
) -> None:
    """A 1 ms virtual timer against 50 ms of thread work: the work is back first."""
    order: list[str] = []

    async def timer() -> None:
        await trio.sleep(0.001)
        order.append("timer")

    def work() -> None:
        time.sleep(0.05)
        order.append("thread")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer)
        await run_in_thread(work)
        order.append("caller")
    assert order == ["thread", "caller", "timer"]


async def test_the_hold_suspends_autojump_and_gives_it_back(
    virtual_clock: trio.testing.MockClock,
) -> None:
    with hold_virtual_clock(), hold_virtual_clock():
        assert virtual_clock.autojump_threshold == math.inf
    assert virtual_clock.autojump_threshold == 0


async def test_a_sync_tool_that_calls_back_into_trio_is_answered_after_the_grace(
    virtual_clock: trio.testing.MockClock,
) -> None:
    """A thread that waits for Trio cannot be waited for: after the grace the loop runs
    again and answers it (no deadlock), with the clock still held."""
    token = trio.lowlevel.current_trio_token()
    before = trio.current_time()

    def call_back() -> str:
        return trio.from_thread.run_sync(lambda: "answered", trio_token=token)

    assert await run_sync_in_thread(call_back) == "answered"
    assert trio.current_time() == before


async def test_a_flight_that_never_lands_stops_blocking_after_its_grace(
    virtual_clock: trio.testing.MockClock,
) -> None:
    flight = start_flight(grace=0.05)
    assert flight is not None
    await trio.lowlevel.checkpoint()  # one pass: blocked for the grace, then the flight is dropped
    await trio.lowlevel.checkpoint()
    flight.land()  # late: harmless


async def test_under_a_real_clock_there_are_no_flights() -> None:
    assert start_flight() is None
    assert await run_in_thread(lambda: "plain") == "plain"
    assert await run_sync_in_thread(lambda: "plain") == "plain"
