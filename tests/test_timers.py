"""Durable timers: firing on the Trio clock, recurrence, cancel, hook, re-arm, dedup, errors."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from _depth import examples
from _timer_owner import STREAM, GetState, Owner, OwnerState, fold, registry
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import (
    ActorCrashedError,
    ActorStoppedError,
    TimerArgumentError,
    TimerError,
    TimerNotFoundError,
    TimerOwnerUnavailableError,
)
from runtime import Actor, Clock, EventStore, open_runtime, open_sqlite_store
from runtime.lowlevel import TimerBook, timer_decision
from runtime.supervision import Backoff, Supervision
from runtime.testing import InMemoryEventStore
from runtime.timers import (
    CancelTimer,
    DueTimer,
    ListTimers,
    PendingTimer,
    Postpone,
    ScheduleTimer,
    TimerCancelled,
    TimerFired,
    TimerScheduled,
    TimerService,
    TimerServiceStatistics,
    TimerVerdict,
    Veto,
)

T0 = 1_700_000_000.0
"""Wall time at the clock's origin: whole seconds keep every due time exact."""

HOUR = 3600.0
DAY = 86400.0


def make_clock() -> Clock:
    """A runtime clock that reads ``T0`` at the mock clock's origin."""
    return Clock(start=T0)


async def timer_events(store: EventStore, stream: str = STREAM) -> list[object]:
    """The timer events in ``stream``, decoded."""
    return [registry.decode_record(record) for record in await store.read(stream)]


async def firings(store: EventStore, stream: str = STREAM) -> list[TimerFired]:
    """The firings recorded in ``stream``, in log order."""
    return [e for e in await timer_events(store, stream) if isinstance(e, TimerFired)]


async def settle() -> None:
    """Let every task run until all are blocked, without moving the mock clock."""
    await trio.testing.wait_all_tasks_blocked()


# -- firing on time ---------------------------------------------------------------------


async def test_one_shot_timers_fire_at_their_due_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``delay=`` and ``at=`` each fire once, exactly at the virtual due time."""
    clock = make_clock()
    async with open_runtime(clock=clock, seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        by_delay = await runtime.timers.schedule(owner, delay=60, note="by delay")
        by_at = await runtime.timers.schedule(owner, at=T0 + 90, note="by at")
        await trio.sleep(59)
        await settle()
        assert await firings(runtime.store) == []
        await trio.sleep(2)
        await settle()
        expected = [TimerFired(timer_id=by_delay, due_at=T0 + 60, fired_at=T0 + 60)]
        assert expected == await firings(runtime.store)
        await trio.sleep(DAY)
        expected.append(TimerFired(timer_id=by_at, due_at=T0 + 90, fired_at=T0 + 90))
        assert expected == await firings(runtime.store)
        records = await runtime.store.read(STREAM)
        # The in-memory store stamps records with the runtime clock: appended when due.
        assert [r.recorded_at for r in records if r.type == "timer.fired"] == [T0 + 60, T0 + 90]
        assert await runtime.timers.list_timers(owner) == ()


async def test_days_of_a_recurring_timer_run_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An hourly timer fires 24 times a day for 30 days, each at fire time + every."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        timer_id = await runtime.timers.schedule(owner, delay=HOUR, every=HOUR, note="hourly")
        await trio.sleep(30 * DAY + 1)
        fired = await firings(runtime.store)
        assert [T0 + HOUR * k for k in range(1, 30 * 24 + 1)] == [f.due_at for f in fired]
        assert all(f.fired_at == f.due_at for f in fired)
        assert {timer_id} == {f.timer_id for f in fired}
        (pending,) = await runtime.timers.list_timers(owner)
        assert fired[-1].fired_at + HOUR == pending.due_at
        state = await owner.ask(GetState())
        assert state.fired == 30 * 24


async def test_a_recurring_timer_is_fixed_delay(autojump_clock: trio.testing.MockClock) -> None:
    """A late firing moves every later due time: next due = actual fire time + every."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        postponed: list[float] = []

        def late_once(due: DueTimer) -> TimerVerdict:
            if not postponed:
                postponed.append(due.due_at)
                return Postpone(30)
            return None

        runtime.timers.set_hook(late_once)
        await runtime.timers.schedule(owner, delay=100, every=100)
        await trio.sleep(400)
        fired = await firings(runtime.store)
        assert [(f.due_at, f.fired_at) for f in fired] == [
            (T0 + 100, T0 + 130),
            (T0 + 230, T0 + 230),
            (T0 + 330, T0 + 330),
        ]


# -- cancel and list ----------------------------------------------------------------------


async def test_a_cancelled_timer_never_fires(autojump_clock: trio.testing.MockClock) -> None:
    """The owner records the cancellation with its reason; the timer is gone everywhere."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        timer_id = await runtime.timers.schedule(owner, delay=60, every=60)
        await trio.sleep(61)
        await runtime.timers.cancel_timer(timer_id, reason="no longer needed")
        await trio.sleep(DAY)
        events = await timer_events(runtime.store)
        assert [TimerScheduled, TimerFired, TimerCancelled] == [type(e) for e in events]
        assert TimerCancelled(timer_id=timer_id, reason="no longer needed") == events[-1]
        assert await runtime.timers.list_timers(owner) == ()
        assert runtime.timers.pending(STREAM) == ()
        with pytest.raises(TimerNotFoundError) as info:
            await runtime.timers.cancel_timer(timer_id)
        assert timer_id == info.value.timer_id
        assert (
            f"no pending timer has id {timer_id!r}; it never existed, already fired "
            "(a one-shot) or was cancelled"
        ) == str(info.value)


async def test_list_timers_answers_from_the_owner_by_due_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``list_timers`` asks the owner; the service's index agrees with it."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        late = await runtime.timers.schedule(owner, delay=300, note="late")
        soon = await runtime.timers.schedule(owner, delay=100, note="soon", every=50)
        expected = (
            PendingTimer(timer_id=soon, due_at=T0 + 100, note="soon", every=50.0),
            PendingTimer(timer_id=late, due_at=T0 + 300, note="late"),
        )
        assert expected == await runtime.timers.list_timers(owner)
        assert expected == runtime.timers.pending(STREAM)
        assert expected == await owner.ask(ListTimers())


async def test_scheduling_the_same_id_again_is_a_no_op(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A retried schedule (same id) appends nothing, even after the timer fired."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        first = await runtime.timers.schedule(owner, delay=10, timer_id="tmr_retry")
        again = await runtime.timers.schedule(owner, delay=99, timer_id="tmr_retry")
        await trio.sleep(20)
        after_firing = await runtime.timers.schedule(owner, delay=5, timer_id="tmr_retry")
        await trio.sleep(20)
        assert [first, again, after_firing] == ["tmr_retry"] * 3
        events = await timer_events(runtime.store)
        assert [TimerScheduled, TimerFired] == [type(e) for e in events]


async def test_generated_ids_are_unique_and_prefixed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ids come from the runtime's id source."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        ids = [await runtime.timers.schedule(owner, delay=5) for _ in range(20)]
        assert len(set(ids)) == 20
        assert all(timer_id.startswith("tmr_") for timer_id in ids)


# -- the hook ------------------------------------------------------------------------------


async def test_a_veto_makes_the_owner_cancel_with_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The hook sees each due timer; a veto is recorded as a cancellation by the owner."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        seen: list[DueTimer] = []

        def hook(due: DueTimer) -> TimerVerdict:
            seen.append(due)
            return Veto("quiet hours") if due.note == "noisy" else None

        runtime.timers.set_hook(hook)
        noisy = await runtime.timers.schedule(owner, delay=10, note="noisy", every=10)
        quiet = await runtime.timers.schedule(owner, delay=20, note="quiet")
        await trio.sleep(100)
        events = await timer_events(runtime.store)
        assert [
            TimerCancelled(timer_id=noisy, reason="vetoed: quiet hours"),
            TimerFired(timer_id=quiet, due_at=T0 + 20, fired_at=T0 + 20),
        ] == events[2:]
        assert [
            DueTimer(stream=STREAM, timer_id=noisy, due_at=T0 + 10, note="noisy", every=10.0),
            DueTimer(stream=STREAM, timer_id=quiet, due_at=T0 + 20, note="quiet", every=None),
        ] == seen
        stats = runtime.timers.statistics()
        assert (stats.vetoed, stats.delivered, stats.pending) == (1, 1, 0)


async def test_a_postponed_timer_is_asked_about_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each postponement waits its delay, then the hook decides again."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        asked_at: list[float] = []

        def hook(due: DueTimer) -> TimerVerdict:
            asked_at.append(runtime.clock.now())
            return Postpone(60) if len(asked_at) < 3 else None

        runtime.timers.set_hook(hook)
        timer_id = await runtime.timers.schedule(owner, delay=10)
        await trio.sleep(HOUR)
        assert asked_at == [T0 + 10, T0 + 70, T0 + 130]
        assert [TimerFired(timer_id=timer_id, due_at=T0 + 10, fired_at=T0 + 130)] == (
            await firings(runtime.store)
        )
        assert runtime.timers.statistics().postponed == 2
        runtime.timers.set_hook(None)


async def test_a_broken_hook_never_loses_a_timer(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook that raises or returns nonsense is logged and the timer is delivered."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)

        def hook(due: DueTimer) -> TimerVerdict:
            if due.note == "raise":
                raise ZeroDivisionError("hook bug")
            return "later"  # type: ignore[return-value]  # the mistake under test

        runtime.timers.set_hook(hook)
        raising = await runtime.timers.schedule(owner, delay=10, note="raise")
        odd = await runtime.timers.schedule(owner, delay=20, note="odd")
        with caplog.at_level(logging.WARNING, logger="powertrio.timers"):
            await trio.sleep(30)
        assert [raising, odd] == [f.timer_id for f in await firings(runtime.store)]
        messages = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert [
            (
                "ERROR",
                f"timer hook failed on timer {raising} of stream {STREAM}; delivering it",
            ),
            (
                "ERROR",
                f"timer hook returned 'later' for timer {odd} of stream {STREAM}, not Veto, "
                "Postpone or None; delivering it",
            ),
        ] == messages
        assert isinstance(caplog.records[0].exc_info[1], ZeroDivisionError)  # type: ignore[index]


# -- durability ----------------------------------------------------------------------------


async def test_reopening_on_sqlite_rearms_and_collapses_missed_periods(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """After 10 days down, an hourly timer fires once (not 240 times), then hourly again."""
    path = tmp_path / "timers.sqlite"
    clock = make_clock()
    async with (
        open_sqlite_store(path, synchronous="OFF") as store,
        open_runtime(clock=clock, store=store, seed=1) as runtime,
    ):
        owner = await runtime.spawn(Owner)
        # at=, not delay=: the SQLite thread may let the mock clock jump while we wait.
        hourly = await runtime.timers.schedule(owner, at=T0 + HOUR, every=HOUR, note="hourly")
        once = await runtime.timers.schedule(owner, at=T0 + 2 * HOUR, note="once")
    await trio.sleep(10 * DAY)  # the process is down
    reopened = clock.now()
    seen: list[TimerFired] = []
    wanted = 2
    enough = trio.Event()

    def on_fired(event: TimerFired) -> None:
        seen.append(event)
        if len(seen) == wanted:
            enough.set()

    async with (
        open_sqlite_store(path, synchronous="OFF") as store,
        open_runtime(clock=clock, store=store, seed=2) as runtime,
    ):
        assert runtime.timers.statistics().pending == 2
        await runtime.spawn(lambda: Owner(on_fired=on_fired))
        await enough.wait()
        first, second = seen
        assert {(hourly, T0 + HOUR), (once, T0 + 2 * HOUR)} == {
            (f.timer_id, f.due_at) for f in seen
        }
        # Overdue timers fire as soon as the owner runs (the clock may jump a little
        # meanwhile, as above; it never goes back).
        collapsed = first if first.timer_id == hourly else second
        assert collapsed.fired_at >= reopened
        (pending,) = runtime.timers.pending(STREAM)
        assert collapsed.fired_at + HOUR == pending.due_at
        # Wait for the next firing through the owner, not a sleep: the SQLite thread may
        # let the mock clock run past a sleep before the append is done.
        wanted, enough = 3, trio.Event()
        await enough.wait()
    third = seen[2]
    assert (hourly, collapsed.fired_at + HOUR) == (third.timer_id, third.due_at)
    assert third.fired_at >= third.due_at


async def test_an_owner_started_after_the_runtime_opened_gets_its_due_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Due timers wait for their owner, then are delivered in due order when it starts."""
    clock = make_clock()
    store = InMemoryEventStore(clock.now)
    async with open_runtime(clock=clock, store=store, seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        later = await runtime.timers.schedule(owner, delay=20)
        timer_id = await runtime.timers.schedule(owner, delay=10)
    async with open_runtime(clock=clock, store=store, seed=2) as runtime:
        await trio.sleep(HOUR)
        await settle()
        stats = runtime.timers.statistics()
        assert (stats.pending, stats.waiting_for_owner, stats.delivered) == (2, 2, 0)
        assert await firings(store) == []
        with pytest.raises(TimerOwnerUnavailableError) as info:
            await runtime.timers.cancel_timer(timer_id)
        assert (timer_id, STREAM) == (info.value.timer_id, info.value.stream)
        assert (
            f"timer {timer_id!r} belongs to stream 'owner/1', whose actor is not running; "
            "start that actor, then try again"
        ) == str(info.value)
        started = clock.now()
        await runtime.spawn(Owner)
        await settle()
        assert [
            TimerFired(timer_id=timer_id, due_at=T0 + 10, fired_at=started),
            TimerFired(timer_id=later, due_at=T0 + 20, fired_at=started),
        ] == await firings(store)


@attrs.frozen
class Block:
    """Makes :class:`BlockingOwner` wait for ``gate``, then stop for good."""

    gate: trio.Event


class BlockingOwner(Owner):
    """An owner that can be held in the middle of a message, then stopped."""

    async def receive(self, message: object) -> object:
        if isinstance(message, Block):
            await message.gate.wait()
            self.context.stop()
            return None
        return await super().receive(message)


async def test_cancel_fails_cleanly_when_the_owner_stops_before_answering(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The owner was running when asked but stopped for good before it handled the cancel."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(BlockingOwner, restart="temporary")
        timer_id = await runtime.timers.schedule(owner, delay=HOUR)
        gate = trio.Event()
        await owner.tell(Block(gate))
        errors: list[Exception] = []

        async def cancel() -> None:
            try:
                await runtime.timers.cancel_timer(timer_id)
            except TimerOwnerUnavailableError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel)
            await settle()  # the cancel waits in the blocked owner's mailbox
            gate.set()
        (error,) = errors
        assert isinstance(error.__cause__, ActorStoppedError)
        assert (timer_id, STREAM) == (error.timer_id, error.stream)  # type: ignore[attr-defined]
        assert runtime.timers.pending(STREAM) != ()  # still pending: nobody recorded a cancel


async def test_a_firing_lost_in_a_crash_is_delivered_again_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The owner crashes on the delivery; its restart gets it again and records it once."""
    budget = [1]
    supervision = Supervision(backoff=Backoff(initial=1, jitter=0))
    async with open_runtime(clock=make_clock(), seed=1, supervision=supervision) as runtime:
        owner = await runtime.spawn(lambda: Owner(crash_budget=budget))
        timer_id = await runtime.timers.schedule(owner, delay=10)
        await trio.sleep(20)
        assert budget[0] == 0
        # Crashed at +10, restarted 1 s later, delivered again at once.
        assert [TimerFired(timer_id=timer_id, due_at=T0 + 10, fired_at=T0 + 11)] == (
            await firings(runtime.store)
        )
        assert runtime.timers.statistics().delivered == 2


async def test_a_duplicate_firing_is_recorded_once(autojump_clock: trio.testing.MockClock) -> None:
    """Telling the same ``TimerFired`` twice appends it once, one-shot or recurring."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        once = await runtime.timers.schedule(owner, delay=DAY)
        every = await runtime.timers.schedule(owner, delay=DAY, every=HOUR)
        for timer_id in (once, every, once, every):
            await owner.tell(TimerFired(timer_id=timer_id, due_at=T0 + DAY, fired_at=T0 + 5))
        state = await owner.ask(GetState())
        assert state.fired == 2
        assert [once, every] == [f.timer_id for f in await firings(runtime.store)]
        assert (PendingTimer(timer_id=every, due_at=T0 + 5 + HOUR, every=HOUR),) == (
            runtime.timers.pending(STREAM)
        )
        await trio.sleep(DAY + 1)  # the one-shot's original due time passes: nothing more
        fired = await firings(runtime.store)
        assert 2 + math.floor((DAY + 1 - 5) / HOUR) == len(fired)
        assert sum(f.timer_id == once for f in fired) == 1


async def test_a_timer_whose_stream_is_gone_is_dropped_with_a_reason(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention deleted the owner's stream: the due timer is dropped and logged."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        timer_id = await runtime.timers.schedule(owner, delay=60)
        await runtime.stop(owner)
        await runtime.store.delete_streams([STREAM])
        with caplog.at_level(logging.WARNING, logger="powertrio.timers"):
            await trio.sleep(120)
        assert [
            f"timer {timer_id} of stream {STREAM} dropped: its stream is gone "
            "(deleted by retention?)"
        ] == [r.getMessage() for r in caplog.records]
        stats = runtime.timers.statistics()
        assert (stats.pending, stats.dropped, stats.delivered) == (0, 1, 0)
        assert runtime.timers.pending(STREAM) == ()


async def test_a_snapshot_carries_the_timer_book(autojump_clock: trio.testing.MockClock) -> None:
    """An owner recovered from a snapshot has the same timers as the fold of its log."""
    clock = make_clock()
    store = InMemoryEventStore(clock.now)
    async with open_runtime(clock=clock, store=store, seed=1) as runtime:
        owner = await runtime.spawn(lambda: Owner(snapshot_every=2))
        for delay in (10, 20, 30, 40):
            await runtime.timers.schedule(owner, delay=delay, every=100)
        await trio.sleep(25)
    snapshot = await store.load_snapshot(STREAM)
    assert snapshot is not None
    async with open_runtime(clock=clock, store=store, seed=2) as runtime:
        owner = await runtime.spawn(lambda: Owner(snapshot_every=2))
        state = await owner.ask(GetState())
        assert fold(await store.read(STREAM)) == state
        assert state.timers.pending == runtime.timers.pending(STREAM)


# -- the pure pieces -------------------------------------------------------------------------


def test_timer_decision_ignores_other_messages() -> None:
    """``None`` tells the actor the message is its own business."""
    assert timer_decision(TimerBook(), GetState()) is None


def test_timer_book_evolve_is_total() -> None:
    """Unknown timers and other events leave the book as it is."""
    book = TimerBook()
    for event in (
        TimerFired(timer_id="x", due_at=1.0, fired_at=2.0),
        TimerCancelled(timer_id="x", reason="r"),
        object(),
    ):
        assert book.evolve(event) is book


def test_cancel_of_an_unknown_timer_replies_false() -> None:
    """The owner appends nothing and answers ``False``."""
    decision = timer_decision(TimerBook(), CancelTimer(timer_id="nope"))
    assert decision is not None
    assert (decision.events, decision.reply) == ((), False)


# -- misuse ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "argument", "message"),
    [
        ({}, "at", "give exactly one of at= (epoch seconds) or delay= (seconds), got neither"),
        (
            {"at": T0, "delay": 5},
            "at",
            "give exactly one of at= (epoch seconds) or delay= (seconds), got both",
        ),
        ({"delay": -1}, "delay", "delay must be >= 0 seconds, got -1"),
        ({"delay": math.inf}, "delay", "delay must be a finite number of seconds, got inf"),
        ({"at": math.nan}, "at", "at must be a finite number of seconds, got nan"),
        (
            {"delay": 5, "every": 0},
            "every",
            "every must be > 0 seconds (the gap between firings of a recurring timer), got 0",
        ),
        (
            {"delay": 5, "every": -2.5},
            "every",
            "every must be > 0 seconds (the gap between firings of a recurring timer), got -2.5",
        ),
        ({"delay": 5, "timer_id": ""}, "timer_id", "timer_id must be a non-empty string"),
    ],
)
async def test_bad_schedule_values_raise_timer_argument_error(
    kwargs: dict[str, object], argument: str, message: str
) -> None:
    """Each bad value names its argument, in a message and in ``argument``."""
    async with open_runtime(seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        with pytest.raises(TimerArgumentError) as info:
            await runtime.timers.schedule(owner, **kwargs)  # type: ignore[arg-type]
        assert (message, argument, "timer.invalid_args") == (
            str(info.value),
            info.value.argument,
            info.value.code,
        )
        assert isinstance(info.value, ValueError)
        assert await runtime.timers.list_timers(owner) == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay": "5"}, "delay must be a number of seconds, got str"),
        ({"delay": True}, "delay must be a number of seconds, got bool"),
        ({"at": None, "delay": 5, "every": "1"}, "every must be a number of seconds, got str"),
        ({"delay": 5, "note": 3}, "note must be a str, got int"),
        ({"delay": 5, "timer_id": 7}, "timer_id must be a str, got int"),
    ],
)
async def test_wrong_schedule_types_raise_type_error(
    kwargs: dict[str, object], message: str
) -> None:
    """Wrong types are programmer errors: ``TypeError`` naming the argument."""
    async with open_runtime(seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        with pytest.raises(TypeError) as info:
            await runtime.timers.schedule(owner, **kwargs)  # type: ignore[arg-type]
        assert message == str(info.value)


async def test_other_misuse_raises_with_a_message() -> None:
    """Owner, hook, cancel arguments and hand-built values are checked too."""
    async with open_runtime(seed=1) as runtime:
        timers = runtime.timers
        with pytest.raises(TypeError, match=r"^owner must be an ActorRef \(from spawn\), got str$"):
            await timers.schedule("owner/1", delay=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^owner must be an ActorRef \(from spawn\), got int$"):
            await timers.list_timers(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^hook must be callable or None, got int$"):
            timers.set_hook(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^timer_id must be a str, got int$"):
            await timers.cancel_timer(5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^reason must be a str, got NoneType$"):
            await timers.cancel_timer("tmr_x", reason=None)  # type: ignore[arg-type]
        with pytest.raises(TimerNotFoundError, match=r"^no pending timer has id 'tmr_x'; "):
            await timers.cancel_timer("tmr_x")
    with pytest.raises(TimerArgumentError, match=r"^delay must be > 0 seconds, got 0$"):
        Postpone(0)
    with pytest.raises(TimerArgumentError, match=r"^due_at must be a finite number of seconds"):
        ScheduleTimer(timer_id="t", due_at=math.nan)
    with pytest.raises(TimerArgumentError, match=r"^every must be > 0 seconds"):
        ScheduleTimer(timer_id="t", due_at=1.0, every=0.0)
    with pytest.raises(TypeError, match=r"^TimerService is made by open_runtime\(\)"):
        TimerService()


async def test_an_owner_that_does_not_handle_timers_fails_the_schedule() -> None:
    """The ask fails like any message the actor cannot handle."""

    class Plain(Actor[object]):
        pass

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Plain, restart="temporary")
        with pytest.raises(ActorCrashedError):
            await runtime.timers.schedule(ref, delay=1)


async def test_cancel_of_a_timer_that_fired_meanwhile_raises_not_found(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The index still lists it, but the owner already recorded the firing."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        timer_id = await runtime.timers.schedule(owner, at=T0 + 10)
        await owner.tell(TimerFired(timer_id=timer_id, due_at=T0 + 10, fired_at=T0 + 1))
        with pytest.raises(TimerNotFoundError):
            await runtime.timers.cancel_timer(timer_id)


async def test_timer_operations_checkpoint(autojump_clock: trio.testing.MockClock) -> None:
    """Every public async method is a checkpoint, on its error paths too."""
    async with open_runtime(clock=make_clock(), seed=1) as runtime:
        owner = await runtime.spawn(Owner)
        with trio.testing.assert_checkpoints():
            timer_id = await runtime.timers.schedule(owner, delay=5)
        with trio.testing.assert_checkpoints():
            await runtime.timers.list_timers(owner)
        with trio.testing.assert_checkpoints():
            await runtime.timers.cancel_timer(timer_id)
        with trio.testing.assert_checkpoints(), pytest.raises(TimerNotFoundError):
            await runtime.timers.cancel_timer(timer_id)


def test_statistics_start_empty() -> None:
    """A fresh runtime's service has nothing pending and nothing counted."""

    async def scenario() -> TimerServiceStatistics:
        async with open_runtime(seed=1) as runtime:
            return runtime.timers.statistics()

    expected = TimerServiceStatistics(
        pending=0,
        armed=0,
        waiting_for_owner=0,
        in_flight=0,
        delivered=0,
        vetoed=0,
        postponed=0,
        dropped=0,
    )
    assert expected == trio.run(scenario)


def test_timer_errors_form_their_own_branch() -> None:
    """Callers can catch every timer error at once."""
    assert issubclass(TimerNotFoundError, TimerError)
    assert issubclass(TimerNotFoundError, LookupError)
    assert issubclass(TimerOwnerUnavailableError, TimerError)
    assert TimerError.code == "timer"


# -- property: random schedules, cancels, advances, restarts -----------------------------------

Op = tuple[str, int, int | None]
"""``(kind, n, every)``: schedule after n s (recurring if every), cancel or re-deliver the
n-th timer or firing, advance n s, restart after n s down."""

_op: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, 500), st.one_of(st.none(), st.integers(1, 300))),
    st.tuples(st.sampled_from(["cancel", "duplicate"]), st.integers(0, 30), st.none()),
    st.tuples(st.sampled_from(["advance", "restart"]), st.integers(0, 2000), st.none()),
)


@settings(max_examples=examples(100), deadline=None)
@given(ops=st.lists(_op, min_size=4, max_size=30))
def test_any_schedule_cancel_advance_restart_sequence_fires_each_due_time_once(
    ops: list[Op],
) -> None:
    """Each (timer, due time) fires at most once; nothing due is left behind; a restart's
    state equals the fold of the log and the service's index agrees with the owner."""

    async def scenario() -> None:
        clock = make_clock()
        store = InMemoryEventStore(clock.now)
        scheduled: list[str] = []
        todo = list(ops)  # hypothesis keeps ``ops`` to report a failure: do not consume it
        seed = 0

        async def check(runtime_state: OwnerState, pending: tuple[PendingTimer, ...]) -> None:
            records = await store.read(STREAM)
            assert fold(records) == runtime_state
            assert runtime_state.timers.pending == pending
            now = clock.now()
            # Nothing is overdue: every due timer was delivered and recorded.
            assert all(timer.due_at > now for timer in pending)

        while True:
            seed += 1
            restart_after = None
            async with open_runtime(clock=clock, store=store, seed=seed) as runtime:
                owner = await runtime.spawn(Owner)
                await settle()
                await check(await owner.ask(GetState()), runtime.timers.pending(STREAM))
                while todo:
                    kind, n, every = todo.pop(0)
                    if kind == "schedule":
                        scheduled.append(await runtime.timers.schedule(owner, delay=n, every=every))
                    elif kind == "cancel" and scheduled:
                        timer_id = scheduled[n % len(scheduled)]
                        try:
                            await runtime.timers.cancel_timer(timer_id)
                        except TimerNotFoundError:
                            state = await owner.ask(GetState())
                            assert state.timers.get(timer_id) is None
                    elif kind == "advance":
                        await trio.sleep(n)
                    elif kind == "duplicate":
                        fired = await firings(store)
                        if fired:
                            await owner.tell(fired[n % len(fired)])
                    elif kind == "restart":
                        restart_after = n
                        break
                    await settle()
                    await check(await owner.ask(GetState()), runtime.timers.pending(STREAM))
            if restart_after is None:
                break
            await trio.sleep(restart_after)  # down time: periods missed here collapse
        fired = await firings(store)
        keys = [(f.timer_id, f.due_at) for f in fired]
        assert len(keys) == len(set(keys))
        assert all(f.fired_at >= f.due_at for f in fired)
        events = await timer_events(store)
        every_of = {e.timer_id: e.every for e in events if isinstance(e, TimerScheduled)}
        last: dict[str, TimerFired] = {}
        for event in events:
            if isinstance(event, TimerFired):
                previous = last.get(event.timer_id)
                if previous is not None:
                    every = every_of[event.timer_id]
                    assert every is not None, "a one-shot fired twice"
                    assert previous.fired_at + every == event.due_at  # fixed delay
                last[event.timer_id] = event
            if isinstance(event, TimerCancelled):
                last.pop(event.timer_id, None)
                every_of[event.timer_id] = None

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_book_folds_like_the_owner_decides() -> None:
    """A hand-driven owner: decisions fold into the book, duplicates append nothing."""
    book = TimerBook()
    decisions = [
        ScheduleTimer(timer_id="a", due_at=10.0, every=5.0),
        TimerFired(timer_id="a", due_at=10.0, fired_at=12.0),
        TimerFired(timer_id="a", due_at=10.0, fired_at=13.0),
        CancelTimer(timer_id="a", reason="done"),
        ScheduleTimer(timer_id="a", due_at=99.0),
    ]
    appended: list[object] = []
    for message in decisions:
        decision = timer_decision(book, message)
        assert decision is not None
        for event in decision.events:
            book = book.evolve(event)
            appended.append(event)
    assert [
        TimerScheduled(timer_id="a", due_at=10.0, every=5.0),
        TimerFired(timer_id="a", due_at=10.0, fired_at=12.0),
        TimerCancelled(timer_id="a", reason="done"),
    ] == appended
    assert TimerBook(finished=frozenset({"a"})) == book
    assert attrs.evolve(book, pending=()) == book
