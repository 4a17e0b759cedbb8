"""Sessions passivate by default: idle for ``PASSIVATE_AFTER`` seconds, a session's actor
stops and frees its memory; its next message, or a due timer, folds it back from the log."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from _gated_store import GatedStore

from actors import AgentSpec, spawn_agent, spawn_session
from actors._session._steps import PASSIVATE_AFTER, TIMER_KEEPS_WARM
from protocols import LLMRequest, LLMResponse, Usage, UserMessage
from protocols.errors import ConfigError
from runtime import open_runtime
from runtime.supervision import ActorPassivated, ActorStarted, LifecycleEvent
from runtime.testing import FunctionLLM, InMemoryEventStore


def _counting_llm() -> FunctionLLM:
    """Answers ``answer N`` to its N-th call, and shows how much conversation it was given."""

    def answer(request: LLMRequest) -> LLMResponse:
        return LLMResponse(content=f"answer {len(request.messages)}", usage=Usage(prompt_tokens=1))

    return FunctionLLM(answer)


def _drain(events: trio.MemoryReceiveChannel[LifecycleEvent]) -> list[LifecycleEvent]:
    seen: list[LifecycleEvent] = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except trio.WouldBlock:
            return seen


def _passivations(seen: list[LifecycleEvent], actor_id: str) -> list[int]:
    return [
        e.incarnation for e in seen if isinstance(e, ActorPassivated) and e.actor_id == actor_id
    ]


def _starts(seen: list[LifecycleEvent], actor_id: str) -> list[int]:
    return [e.incarnation for e in seen if isinstance(e, ActorStarted) and e.actor_id == actor_id]


def test_the_default_idle_time_is_two_minutes() -> None:
    assert PASSIVATE_AFTER == 120.0


async def test_a_default_session_passivates_when_idle_and_its_next_send_folds_it_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No option given: idle ``PASSIVATE_AFTER`` seconds, the actor passivates and writes
    nothing (the log is unchanged); the next send starts it again with the whole
    conversation, and no crash or restart is counted."""
    store = InMemoryEventStore()
    llm = _counting_llm()
    async with open_runtime(store=store, seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=llm)
            assert (await session.send("one")).text == "answer 1"
            before = await session.state()
            logged = await store.read(f"session/{session.id}")
            await trio.sleep(PASSIVATE_AFTER - 1)
            assert _passivations(_drain(events), session.id) == []  # not yet
            await trio.sleep(2)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]
            assert await store.read(f"session/{session.id}") == logged  # nothing written
            after = await session.state()  # a look at it starts it again
            assert _starts(_drain(events), session.id) == [2]
            assert (after.transcript, after.results) == (before.transcript, before.results)
            assert (await session.send("two")).text == "answer 3"  # saw the first turn
        assert runtime.statistics().restarts == 0
        assert runtime.statistics().crashes == 0


async def test_every_message_restarts_the_idle_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A session used more often than ``PASSIVATE_AFTER`` stays warm."""
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm())
            for turn in range(5):
                await session.send(f"turn {turn}")
                await trio.sleep(PASSIVATE_AFTER * 0.9)
            assert _passivations(_drain(events), session.id) == []
            await trio.sleep(PASSIVATE_AFTER)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]


async def test_a_passivated_session_wakes_for_its_durable_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A timer due later than ``TIMER_KEEPS_WARM`` does not keep the actor: it
    passivates, and the timer's firing starts it again, which runs the reminder; then it
    passivates again."""
    llm = _counting_llm()
    delay = 2 * TIMER_KEEPS_WARM
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=llm)
            await session.send("hello")
            await runtime.timers.schedule(session.ref, delay=delay, note="check the build")
            await trio.sleep(PASSIVATE_AFTER + 1)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]
            await trio.sleep(delay)
            await trio.testing.wait_all_tasks_blocked()
            seen = _drain(events)
            assert _starts(seen, session.id) == [2]
            assert _passivations(seen, session.id) == [2]  # idle again after the reminder
            assert len(llm.requests) == 2
            reminder = llm.requests[1].messages[-1]
            assert isinstance(reminder, UserMessage)
            assert reminder.text.endswith("] check the build")
            state = await session.state()
    assert [r.status for r in state.results.values()] == ["completed", "completed"]
    assert state.timers.pending == ()


async def test_a_timer_due_soon_keeps_the_session_warm(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An hourly agent is not passivated between its wakes: re-activation would read its
    whole snapshot back at each one. Once its timer is cancelled, it passivates."""
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm())
            await session.send("hello")
            timer = await runtime.timers.schedule(
                session.ref, delay=TIMER_KEEPS_WARM - 1, note="hourly"
            )
            await trio.sleep(TIMER_KEEPS_WARM - PASSIVATE_AFTER)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == []
            await runtime.timers.cancel_timer(timer)
            await trio.sleep(PASSIVATE_AFTER + 1)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]


async def test_passivate_after_none_keeps_the_actor_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm(), passivate_after=None)
            await session.send("hello")
            await trio.sleep(86_400)
            await session.send("again")
            seen = _drain(events)
    assert _passivations(seen, session.id) == []
    assert _starts(seen, session.id) == [1]


async def test_a_send_being_handled_at_the_idle_deadline_is_not_cut_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The idle time runs out while a send waits for its append (its run not folded
    yet): the actor stays, and the send gets its answer, not ``ActorStoppedError``."""
    store = GatedStore("session.run_started")
    store.gate.set()
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm())
            await session.send("one")
            store.gate = trio.Event()  # the next send's first append waits
            answers: list[str] = []

            async def send() -> None:
                answers.append((await session.send("two")).text)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await trio.sleep(PASSIVATE_AFTER * 2)
                assert store.waiting == 1
                store.gate.set()
            assert answers == ["answer 3"]
            assert _passivations(_drain(events), session.id) == []


async def test_a_session_waits_for_its_sub_agent_before_it_passivates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A sub-agent's actor runs in its parent's nursery: the parent, idle itself while
    the child works for longer than ``PASSIVATE_AFTER``, stays until the child is done."""

    async def slow(request: LLMRequest) -> LLMResponse:
        await trio.sleep(PASSIVATE_AFTER * 3)
        return LLMResponse(content="researched", usage=Usage(prompt_tokens=1))

    helper = AgentSpec(name="helper", llm=FunctionLLM(slow))
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm())
            result = await session.spawn(helper, "look into it")
            assert result.text == "researched"
            assert _passivations(_drain(events), session.id) == []
            await trio.sleep(PASSIVATE_AFTER + 1)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]


_BAD = (0, -1, math.nan, math.inf, True, "60")


@pytest.mark.parametrize("value", _BAD, ids=repr)
async def test_a_bad_passivate_after_is_a_config_error(value: object) -> None:
    expected = (
        "passivate_after must be a positive number of seconds, or None to keep the "
        f"session's actor running while it is idle; got {value!r}"
    )
    async with open_runtime() as runtime:
        llm = _counting_llm()
        with pytest.raises(ConfigError) as raised:
            await spawn_session(runtime, llm=llm, passivate_after=value)  # type: ignore[arg-type]
        assert (raised.value.code, str(raised.value)) == ("config.invalid", expected)
        with pytest.raises(ConfigError) as raised:
            spec = AgentSpec(name="a", llm=llm)
            await spawn_agent(runtime, spec, passivate_after=value)  # type: ignore[arg-type]
        assert str(raised.value) == expected


class _CountingSnapshots:
    """An in-memory store counting the snapshot loads made through it."""

    def __init__(self) -> None:
        self.inner = InMemoryEventStore()
        self.loads = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def load_snapshot(self, stream: str) -> object:
        self.loads += 1
        return await self.inner.load_snapshot(stream)


async def test_a_passivating_session_snapshots_a_long_tail_and_skips_a_snapshot_it_has_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Passivating with 16 events or more since its last snapshot, a session saves one at
    its version, so its next start folds from there; a short session saves none, and its
    next start does not look for one."""
    store = _CountingSnapshots()
    async with open_runtime(store=store, seed=1) as runtime:  # type: ignore[arg-type]
        short = await spawn_session(runtime, llm=_counting_llm())
        await short.send("one")  # 4 events
        long = await spawn_session(runtime, llm=_counting_llm())
        for turn in range(6):  # 1 + 3 a send: 19 events
            await long.send(f"turn {turn}")
        await trio.sleep(PASSIVATE_AFTER + 1)
        await trio.testing.wait_all_tasks_blocked()
        assert await store.inner.load_snapshot(f"session/{short.id}") is None
        snapshot = await store.inner.load_snapshot(f"session/{long.id}")
        assert snapshot is not None
        assert snapshot.version == await store.inner.stream_version(f"session/{long.id}") == 19
        loads = store.loads
        assert (await short.state()).results  # started again: no snapshot looked for
        assert store.loads == loads
        assert len((await long.state()).results) == 6  # from the snapshot
        assert store.loads == loads + 1


def _tasks() -> list[str]:
    """The names of every task of this Trio run."""
    names: list[str] = []
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return names


async def test_a_warm_session_runs_no_idle_task_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Twenty warm sessions waiting to passivate run as many tasks as twenty that never
    do: one idle sweeper per runtime looks at them all, not a sleeping task each."""
    async with open_runtime(seed=1) as runtime:
        llm = _counting_llm()
        added = []
        for passivate_after in (None, PASSIVATE_AFTER):
            await trio.testing.wait_all_tasks_blocked()
            before = len(_tasks())
            for _ in range(20):
                session = await spawn_session(runtime, llm=llm, passivate_after=passivate_after)
                await session.send("hello")
            await trio.testing.wait_all_tasks_blocked()
            added.append(len(_tasks()) - before)
        assert added[1] == added[0]
        assert not [name for name in _tasks() if name.endswith(" idle")]
        assert len(runtime._idle) == 20  # one look scheduled per session that passivates
        await trio.sleep(PASSIVATE_AFTER + 1)
        await trio.testing.wait_all_tasks_blocked()
        assert len(_tasks()) == before  # each passivated
        await trio.sleep(PASSIVATE_AFTER)
        assert len(runtime._idle) == 0  # and its look, due next, was dropped


async def test_the_sweeper_lets_go_of_a_passivated_actor_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A passivated session's actor (and its folded state) is freed when it stops: the
    sweeper keeps no reference to it until its next look."""
    import gc
    import weakref

    from actors._session._actor import SessionActor

    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=_counting_llm(), passivate_after=10)
            await session.send("hello")
            actor = runtime.lookup(session.id)._cell.actor
            assert isinstance(actor, SessionActor)
            gone = weakref.ref(actor)
            del actor
            await trio.sleep(11)
            await trio.testing.wait_all_tasks_blocked()
            assert _passivations(_drain(events), session.id) == [1]
            gc.collect()
            assert gone() is None
            assert (await session.send("again")).text == "answer 3"


class _SlowReads(_CountingSnapshots):
    """An in-memory store whose snapshot loads and stream reads each take a second."""

    reads = 0

    async def load_snapshot(self, stream: str) -> object:
        await trio.sleep(1)
        return await super().load_snapshot(stream)

    async def read(self, stream: str, from_version: int = 1, *, limit: int | None = None) -> object:
        self.reads += 1
        await trio.sleep(1)
        return await self.inner.read(stream, from_version, limit=limit)


async def test_a_reactivation_reads_its_snapshot_and_its_tail_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A passivated session with a snapshot starts again in one wait for the store: its
    snapshot and the last events it folded are read at the same time (each trip to a
    worker thread is most of a short read); one without a snapshot reads its log alone.
    Either way its state is the one it had."""
    store = _SlowReads()
    async with open_runtime(store=store, seed=1) as runtime:  # type: ignore[arg-type]
        short = await spawn_session(runtime, llm=_counting_llm())
        await short.send("one")  # 4 events: passivates with no snapshot
        long = await spawn_session(runtime, llm=_counting_llm())
        for turn in range(6):  # 19 events: passivates with a snapshot at its head
            await long.send(f"turn {turn}")
        for round_ in range(2):  # then with 3 events after that snapshot
            states = {s.id: await s.state() for s in (short, long)}
            await trio.sleep(PASSIVATE_AFTER + 1)
            await trio.testing.wait_all_tasks_blocked()
            for session, loads in ((short, 0), (long, 1)):
                before, reads = store.loads, store.reads
                began = trio.current_time()
                state = await session.state()
                assert trio.current_time() - began == 1.0  # one wait
                assert (store.loads - before, store.reads - reads) == (loads, 1)
                assert (state.transcript, state.results) == (
                    states[session.id].transcript,
                    states[session.id].results,
                )
            if round_ == 0:
                assert (await long.send("again")).text == "answer 13"
        snapshot = await store.inner.load_snapshot(f"session/{long.id}")
        assert snapshot is not None
        assert (snapshot.version, await store.inner.stream_version(f"session/{long.id}")) == (
            19,
            22,
        )
