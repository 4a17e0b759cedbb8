"""A session under random interleavings of every kind of message, crashes and restarts.

Hypothesis generates a whole operation list (sends, follow-ups with repeated ids, cancels
of both modes, timer schedules and cancels, virtual time advances, failed appends that
crash the actor, and restarts of the runtime on the same store); one ``trio.run`` under
``MockClock(autojump_threshold=0)`` plays it. The log is then checked
against the session's invariants: every follow-up id is injected at most once and, once the
session has settled, exactly once; every timer fires at most once per due time; every
LLM request is provider-valid; and the state a restarted session reports equals the fold
of its log.

``pytest --hypothesis-profile=deep`` runs 10,000 examples instead of 200.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from _depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import BusyPolicy, Session, SessionBusyError, SessionState, spawn_session, tool
from actors._session._events import evolve, timer_follow_up
from actors.events import (
    AssistantRecorded,
    FollowUpReceived,
    FollowUpsInjected,
    RunFinished,
    RunStarted,
)
from actors.lowlevel import is_provider_valid
from protocols import CancelMode, LLMRequest, LLMResponse, ToolCall, Usage, UserMessage
from protocols.codec import decode_record
from protocols.errors import ActorCrashedError, TimerNotFoundError, TimerOwnerUnavailableError
from runtime import AppendResult, Clock, NewEvent, RecordedEvent, open_runtime
from runtime.supervision import Backoff, Supervision
from runtime.testing import FunctionLLM, InMemoryEventStore
from runtime.timers import TimerFired, TimerScheduled, TimerService

T = TypeVar("T")

FAST_RESTART = Supervision(max_restarts=1000, within=1, backoff=Backoff(initial=0))
START = 1_750_000_000.0
"""The wall clock at the start of every example (epoch seconds)."""
STREAM = "session/s"
SETTLE = 2_000.0
"""Virtual seconds the final drain waits: past every one-shot's due time and every run."""


# -- operations ---------------------------------------------------------------------------


@attrs.frozen
class Send:
    """``session.send`` in a background task (it returns when its run ends)."""

    text: str
    if_busy: BusyPolicy | None = None


@attrs.frozen
class FollowUp:
    id: str
    kind: str = "user"


@attrs.frozen
class Cancel:
    mode: CancelMode


@attrs.frozen
class Schedule:
    timer_id: str
    delay: float
    every: float | None = None


@attrs.frozen
class CancelTimer:
    timer_id: str


@attrs.frozen
class Advance:
    seconds: float


@attrs.frozen
class FailAppend:
    """The session's next append fails: it crashes and its supervisor restarts it."""


@attrs.frozen
class Restart:
    """Stop the runtime (every actor, every task) and open a new one on the same store."""


Op = Send | FollowUp | Cancel | Schedule | CancelTimer | Advance | FailAppend | Restart

FOLLOW_UP_IDS = ["f0", "f1", "f2"]
TIMER_IDS = ["t0", "t1", "t2"]

operations = st.one_of(
    st.builds(
        Send,
        text=st.sampled_from(["hi", "use a tool", "use tools"]),
        if_busy=st.sampled_from([None, "queue", "interrupt", "reject"]),
    ),
    st.builds(
        FollowUp, id=st.sampled_from(FOLLOW_UP_IDS), kind=st.sampled_from(["user", "system"])
    ),
    st.builds(Cancel, mode=st.sampled_from(["immediate", "after_turn"])),
    st.builds(
        Schedule,
        timer_id=st.sampled_from(TIMER_IDS),
        delay=st.sampled_from([0.0, 2.0, 30.0, 600.0]),
        every=st.sampled_from([None, None, 50.0]),
    ),
    st.builds(CancelTimer, timer_id=st.sampled_from(TIMER_IDS)),
    st.builds(Advance, seconds=st.sampled_from([0.5, 1.0, 3.0, 10.0, 100.0])),
    st.just(FailAppend()),
    st.just(Restart()),
)


# -- the system under test -----------------------------------------------------------------


@tool
async def work(seconds: float) -> str:
    """Work for a while (closed as aborted if a crash interrupts it)."""
    await trio.sleep(seconds)
    return f"worked {seconds:g} s"


@tool(crash_policy="retry")
async def fetch(url: str) -> str:
    """An idempotent fetch (run again after a crash)."""
    await trio.sleep(1)
    return f"content of {url}"


def usage() -> Usage:
    return Usage(prompt_tokens=3, completion_tokens=1)


def make_llm(store: InMemoryEventStore, problems: list[str]) -> FunctionLLM:
    """A deterministic model that takes virtual time and checks every request it gets."""

    async def answer(request: LLMRequest) -> LLMResponse:
        if not is_provider_valid(request.messages):
            problems.append(f"a request that is not provider-valid: {request.messages!r}")
        recorded = {
            event.request_fingerprint
            for event in map(decode_record, await store.read(STREAM))
            if isinstance(event, AssistantRecorded)
        }
        if request.fingerprint() in recorded:
            problems.append("a request whose answer is in the log was made again")
        n = len(request.messages)
        await trio.sleep(1 + n % 3)
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("use a tool"):
            call = ToolCall(id=f"c{n}", name="work", arguments='{"seconds": 2}')
            return LLMResponse(tool_calls=[call], usage=usage())
        if isinstance(last, UserMessage) and last.text.startswith("use tools"):
            calls = [
                ToolCall(id=f"c{n}a", name="work", arguments='{"seconds": 3}'),
                ToolCall(id=f"c{n}b", name="fetch", arguments='{"url": "u"}'),
            ]
            return LLMResponse(tool_calls=calls, usage=usage())
        return LLMResponse(content=f"answer {n}", usage=usage())

    return FunctionLLM(answer)


def fold(records: Sequence[RecordedEvent]) -> list[SessionState]:
    """The state after each prefix of the stream (``[0]``: the empty stream)."""
    states = [SessionState()]
    for record in records:
        states.append(evolve(states[-1], decode_record(record)))
    return states


def of(kind: type[T], events: Sequence[object]) -> list[T]:
    return [e for e in events if isinstance(e, kind)]


async def retrying_state(session: Session) -> SessionState:
    """The session's state; asked again if the actor crashed under the question."""
    while True:
        try:
            return await session.state()
        except ActorCrashedError:
            await trio.lowlevel.checkpoint()


@attrs.define
class Outcome:
    """What the driver saw, for the checks after the run."""

    follow_ups: list[tuple[str, bool]] = attrs.Factory(list)
    """Each ``follow_up`` call: its id and what it returned."""
    observed: list[tuple[str, SessionState, list[SessionState]]] = attrs.Factory(list)
    """After each runtime start and each operation: what happened last, the state the
    session reported, and the folds of every prefix of the log read right after."""
    final: SessionState | None = None


async def play(ops: Sequence[Op], store: InMemoryEventStore, problems: list[str]) -> Outcome:
    """Run the operations, restarting the runtime at each ``Restart``, then settle."""
    outcome = Outcome()
    llm = make_llm(store, problems)
    clock = Clock(START)
    segments: list[list[Op]] = [[]]
    for op in ops:
        if isinstance(op, Restart):
            segments.append([])
        else:
            segments[-1].append(op)
    for index, segment in enumerate(segments):
        # A new seed per runtime: ids made in the same virtual millisecond must differ.
        async with open_runtime(
            store=store, clock=clock, seed=index, supervision=FAST_RESTART
        ) as runtime:
            session = await spawn_session(
                runtime, llm=llm, tools=[work, fetch], session_id="s", max_rounds=4
            )
            await observe(f"runtime {index} started", session, store, outcome)
            async with trio.open_nursery() as nursery:
                for op in segment:
                    await apply(op, session, runtime.timers, store, nursery, outcome)
                    await observe(repr(op), session, store, outcome)
                if index == len(segments) - 1:
                    outcome.final = await settle(session, runtime.timers)
                nursery.cancel_scope.cancel()
    return outcome


async def observe(
    after: str, session: Session, store: InMemoryEventStore, outcome: Outcome
) -> None:
    state = await retrying_state(session)
    outcome.observed.append((after, state, fold(await store.read(STREAM))))


async def apply(
    op: Op,
    session: Session,
    timers: TimerService,
    store: InMemoryEventStore,
    nursery: trio.Nursery,
    outcome: Outcome,
) -> None:
    if isinstance(op, Send):

        async def send() -> None:
            with contextlib.suppress(SessionBusyError):  # "reject", while a run is active
                await session.send(op.text, if_busy=op.if_busy)

        nursery.start_soon(send)
        await trio.testing.wait_all_tasks_blocked()
    elif isinstance(op, FollowUp):
        fresh = await session.follow_up(f"follow-up {op.id}", id=op.id, kind=op.kind)
        outcome.follow_ups.append((op.id, fresh))
    elif isinstance(op, Cancel):
        await session.cancel("stop", mode=op.mode)
    elif isinstance(op, Schedule):
        while True:  # the same id again is a no-op: safe to retry after a crash
            try:
                await timers.schedule(
                    session.ref, delay=op.delay, every=op.every, timer_id=op.timer_id, note="n"
                )
                break
            except ActorCrashedError:
                await trio.lowlevel.checkpoint()
    elif isinstance(op, CancelTimer):
        # Not pending (fired, cancelled, never scheduled), or the owner is restarting.
        with contextlib.suppress(TimerNotFoundError, TimerOwnerUnavailableError, ActorCrashedError):
            await timers.cancel_timer(op.timer_id)
    elif isinstance(op, Advance):
        await trio.sleep(op.seconds)
    else:
        assert isinstance(op, FailAppend)
        store.fail_next_commit()


async def settle(session: Session, timers: TimerService) -> SessionState:
    """Stop the recurring timers, let every due timer fire and every run end, then send
    once more so that follow-ups left in an idle inbox are read (see
    ``test_a_follow_up_received_during_a_cancelled_run_is_read``)."""
    for timer in (await retrying_state(session)).timers.pending:
        if timer.every is None:
            continue
        while True:
            try:
                await timers.cancel_timer(timer.timer_id)
                break
            except TimerNotFoundError:
                break
            except (TimerOwnerUnavailableError, ActorCrashedError):
                await trio.sleep(1)
    await trio.sleep(SETTLE)
    await session.send("final")
    await trio.sleep(SETTLE)
    await trio.testing.wait_all_tasks_blocked()
    return await retrying_state(session)


# -- the property --------------------------------------------------------------------------


def check(outcome: Outcome, records: list[RecordedEvent], problems: list[str]) -> None:
    assert problems == []
    events = [decode_record(r) for r in records]
    states = fold(records)

    # The state a session reports, after a restart of the runtime, of the actor (a failed
    # append) or nothing, is the fold of the log up to the events it had appended when
    # it answered.
    for after, state, prefixes in outcome.observed:
        assert state in prefixes, f"after {after}: the state is no fold of the log"
    final = outcome.final
    assert final is not None
    assert final == states[-1]

    # Follow-ups: received once per id; injected at most once, and (settled) exactly once.
    received = [e.follow_up.id for e in of(FollowUpReceived, events)]
    assert len(received) == len(set(received))
    injected = Counter(i for e in of(FollowUpsInjected, events) for i in e.ids)
    assert max(injected.values(), default=1) == 1
    notes = {e.timer_id: e.note for e in of(TimerScheduled, events)}
    fired = of(TimerFired, events)
    wake_ups = [timer_follow_up(f, notes[f.timer_id]).id for f in fired]
    assert sorted(injected) == sorted([*received, *wake_ups])
    assert final.inbox == ()
    pieces = Counter(
        piece
        for message in final.transcript
        if isinstance(message, UserMessage)
        for piece in message.text.split("\n\n")
    )
    assert {i: pieces[f"follow-up {i}"] for i in received} == dict.fromkeys(received, 1)
    # What follow_up() answered agrees with the log: True at most once per id, and only
    # for an id that was received; False for an id the log holds.
    fresh = Counter(i for i, answer in outcome.follow_ups if answer)
    assert max(fresh.values(), default=1) == 1
    assert {i for i, _ in outcome.follow_ups} <= set(received)

    # Timers: at most once per due time; settled, none left (one-shots fired, recurring
    # ones cancelled).
    keys = [(f.timer_id, f.due_at) for f in fired]
    assert len(keys) == len(set(keys))
    assert final.timers.pending == ()

    # Runs: each started once and, settled, finished once.
    started = [e.run_id for e in of(RunStarted, events)]
    assert len(started) == len(set(started))
    assert Counter(e.run_id for e in of(RunFinished, events)) == Counter(started)
    assert (final.run, final.queued) == (None, ())
    assert is_provider_valid(final.transcript)


@pytest.mark.slow
@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(operations, max_size=40))
def test_random_interleavings_keep_the_session_invariants(ops: list[Op]) -> None:
    """Sends, follow-ups, cancels, timers, time, crashes and restarts in any order: each
    follow-up and each firing is read once, nothing is asked twice, restarts fold the log."""
    store = InMemoryEventStore()
    problems: list[str] = []
    outcome = trio.run(
        play, ops, store, problems, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    records = trio.run(store.read, STREAM)
    check(outcome, records, problems)


# -- regressions found by the property -----------------------------------------------------


async def test_a_follow_up_received_during_a_cancelled_run_is_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The run is cancelled after its turn while a follow-up waits for the next round
    boundary: the follow-up must still be read (it wakes the idle session, as one that
    arrives when the session is idle does), not wait for the next send."""
    store = InMemoryEventStore()
    problems: list[str] = []
    async with open_runtime(store=store, clock=Clock(START)) as runtime:
        session = await spawn_session(runtime, llm=make_llm(store, problems), session_id="s")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.send, "hi")
            await trio.sleep(0.5)  # the model is thinking
            assert await session.follow_up("one more thing", id="f")
            assert await session.cancel("wrap up", mode="after_turn")
        await trio.sleep(SETTLE)
        state = await session.state()
    assert problems == []
    assert state.inbox == ()
    injected = [e for e in map(decode_record, await store.read(STREAM))]
    assert [e.ids for e in of(FollowUpsInjected, injected)] == [("f",)]


async def test_follow_up_returns_true_for_a_new_id_even_if_the_actor_crashed_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The follow-up wakes the idle session: FollowUpReceived and RunStarted are appended,
    then the append of the injection fails and the actor restarts. The caller's retry finds
    the id received, but this call is the one that delivered it."""
    store = InMemoryEventStore()
    problems: list[str] = []
    failed: list[bool] = []

    class FailInjection:
        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def append(
            self, stream: str, events: Sequence[NewEvent], expected_version: int
        ) -> AppendResult:
            if not failed and any(e.type == "session.follow_ups_injected" for e in events):
                failed.append(True)
                store.fail_next_commit()
            return await store.append(stream, events, expected_version)

    async with open_runtime(
        store=FailInjection(),  # type: ignore[arg-type]  # duck-typed: delegates to `store`
        clock=Clock(START),
        supervision=FAST_RESTART,
    ) as runtime:
        session = await spawn_session(runtime, llm=make_llm(store, problems), session_id="s")
        fresh = await session.follow_up("hello", id="h")
        result = await session.wait("fu-h")
    assert failed
    assert problems == []
    assert result.status == "completed"
    assert fresh is True
