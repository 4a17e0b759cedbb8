"""Control messages (cancels, replies) and the truth a run's result tells.

Cancels overtake queued input and are durable before they act; a child cancelled with its
parent still reports its usage; a send can be retried by id; a result says when it was
truncated, when a tool's result is unknown, and why it failed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing
from _depth import examples
from _gated_store import GatedStore
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import AgentSpec, RunResult, Session, spawn_agent, spawn_session, tool
from actors._session._actor import SessionActor
from actors._session._steps import session_config
from actors.events import (
    CancelRequested,
    ChildFinished,
    FollowUpReceived,
    InputQueued,
    RunFinished,
    RunStarted,
)
from protocols import LLMRequest, LLMResponse, ToolCall, Usage
from protocols.codec import decode_record
from runtime import open_runtime
from runtime.supervision import Backoff, Supervision
from runtime.testing import FunctionLLM, InMemoryEventStore

FAST_RESTART = Supervision(max_restarts=100, within=1, backoff=Backoff(initial=0))


def answer(text: str = "", *calls: ToolCall, tokens: int = 10) -> LLMResponse:
    return LLMResponse(
        content=text,
        tool_calls=calls,
        usage=Usage(prompt_tokens=tokens, completion_tokens=1),
        model="scripted",
    )


async def events_of(store: InMemoryEventStore, stream: str) -> list[object]:
    return [decode_record(r) for r in await store.read(stream)]


def first_call_hangs() -> FunctionLLM:
    """The first request never gets an answer (a run in flight); later ones say ``ok``."""
    calls = 0

    async def model(request: LLMRequest) -> LLMResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            await trio.sleep_forever()
        return answer("ok")

    return FunctionLLM(model)


async def _flood_then_cancel(session: Session, store: GatedStore, count: int) -> list[object]:
    """A run in flight, ``count`` follow-ups sent at once, then a cancel; the stream."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.send, "work")
        await trio.testing.wait_all_tasks_blocked()
        for i in range(count):
            nursery.start_soon(functools.partial(session.follow_up, f"more {i}", id=f"f{i}"))
        await trio.testing.wait_all_tasks_blocked()  # the actor waits in the first append
        assert store.waiting == 1
        nursery.start_soon(session.cancel, "stop")
        await trio.testing.wait_all_tasks_blocked()
        statistics = session.ref.statistics()
        store.gate.set()
    assert statistics.queued_system == 1, statistics  # the cancel waits in the priority lane
    return await events_of(store.inner, f"session/{session.id}")


def _follow_ups_before_cancel(events: list[object]) -> int:
    cancel = next(i for i, e in enumerate(events) if isinstance(e, CancelRequested))
    return sum(isinstance(e, FollowUpReceived) for e in events[:cancel])


async def test_a_cancel_overtakes_queued_follow_ups() -> None:
    """300 follow-ups queued behind a run in flight: the cancel is recorded right after the
    one the actor was handling, not after all of them."""
    store = GatedStore("session.follow_up_received")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        session = await spawn_session(runtime, llm=first_call_hangs(), session_id="s")
        events = await _flood_then_cancel(session, store, 300)
    assert _follow_ups_before_cancel(events) == 1
    assert sum(isinstance(e, FollowUpReceived) for e in events) == 300
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert finished[0].status == "cancelled"


async def test_a_cancel_never_waits_for_room_in_a_full_mailbox() -> None:
    """The user lane is full and senders wait: the cancel still goes in, and first."""
    store = GatedStore("session.follow_up_received")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        config = session_config(AgentSpec(name="s"), session_id="s", llm=first_call_hangs())
        ref = await runtime.spawn(lambda: SessionActor(config), id="s", mailbox_capacity=5)
        session = Session._create(ref, runtime, config)
        events = await _flood_then_cancel(session, store, 20)
    assert _follow_ups_before_cancel(events) == 1


class Hung:
    """What the ``wait_for_ever`` tool went through."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = trio.Event()
        self.seen: list[str] = []


hung = Hung()


@tool
async def wait_for_ever() -> str:
    """Never returns (until cancelled)."""
    hung.started.set()
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        hung.seen.append("cancelled")
        raise
    return "never"


def tool_then_hang() -> FunctionLLM:
    """Round 1 calls ``wait_for_ever``; every later request never gets an answer."""

    async def model(request: LLMRequest) -> LLMResponse:
        if len(request.messages) == 1:
            return answer("", ToolCall(id="t1", name="wait_for_ever", arguments="{}"))
        await trio.sleep_forever()
        return answer("never")

    return FunctionLLM(model)


async def test_an_immediate_cancel_is_durable_before_the_run_stops() -> None:
    """The append of the cancel fails: the tool was not cancelled by a cancel the log does
    not hold (it went on until the crash); the retried cancel then ends the run."""
    hung.reset()
    store = GatedStore("session.cancel_requested")
    async with open_runtime(store=store.as_store(), seed=1, supervision=FAST_RESTART) as runtime:
        session = await spawn_session(
            runtime, llm=tool_then_hang(), tools=[wait_for_ever], session_id="s"
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(session.send, "go", id="r1"))
            await hung.started.wait()
            nursery.start_soon(session.cancel, "stop")
            await trio.testing.wait_all_tasks_blocked()
            assert store.waiting == 1
            assert hung.seen == []  # appending the cancel: the step still runs
            store.fail = True
            store.gate.set()
        result = await session.wait("r1")
    assert hung.seen == ["cancelled"]  # by the crash of the actor, after the failed append
    events = await events_of(store.inner, "session/s")
    assert sum(isinstance(e, CancelRequested) for e in events) == 1  # the retried one
    assert result.status == "cancelled"
    assert result.unknown_tool_results == ("t1",)


async def test_a_child_cancelled_with_its_parent_reports_its_usage() -> None:
    """The parent is cancelled while its child runs a tool: the child's run ends cancelled,
    the parent records ChildFinished with the child's usage, and its run's usage has it."""
    hung.reset()

    def child_model(request: LLMRequest) -> LLMResponse:
        return answer("", ToolCall(id="w1", name="wait_for_ever", arguments="{}"), tokens=7)

    def parent_model(request: LLMRequest) -> LLMResponse:
        arguments = '{"agent": "worker", "task": "wait"}'
        return answer("", ToolCall(id="s1", name="spawn_agent", arguments=arguments), tokens=5)

    worker = AgentSpec(name="worker", tools=[wait_for_ever], llm=FunctionLLM(child_model))
    boss = AgentSpec(name="boss", agents=[worker])
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        root = await spawn_agent(runtime, boss, llm=FunctionLLM(parent_model), session_id="r")
        async with trio.open_nursery() as nursery:
            results = []

            async def send() -> None:
                results.append(await root.send("go"))

            nursery.start_soon(send)
            await hung.started.wait()
            assert await root.cancel("enough")
    (result,) = results
    events = await events_of(store, "session/r")
    child_events = await events_of(store, "session/r.1")
    child_result = next(e for e in child_events if isinstance(e, RunFinished))
    finished = [e for e in events if isinstance(e, ChildFinished)]
    assert child_result.status == "cancelled"
    assert [(f.child_id, f.status, f.usage) for f in finished] == [
        ("r.1", "cancelled", Usage(prompt_tokens=7, completion_tokens=1))
    ]
    assert result.status == "cancelled"
    assert result.usage == Usage(prompt_tokens=5 + 7, completion_tokens=2)
    run_finished = next(e for e in events if isinstance(e, RunFinished))
    assert events.index(finished[0]) < events.index(run_finished)


_ = (pytest, logging, Callable)


# -- a send retried by id --------------------------------------------------------------


@tool(crash_policy="retry")
async def lookup(key: str) -> str:
    """Look a key up (idempotent: run again after a crash)."""
    await trio.sleep(0.5)
    return f"value of {key}"


def lookup_model() -> FunctionLLM:
    """Slow answers, computed from the request: a tool round, then the final answer."""

    async def model(request: LLMRequest) -> LLMResponse:
        await trio.sleep(1)
        if len(request.messages) == 1:
            return answer("", ToolCall(id="k1", name="lookup", arguments='{"key": "a"}'))
        return answer(f"done after {len(request.messages)} messages", tokens=3)

    return FunctionLLM(model)


async def _send_with_kills(store: InMemoryEventStore, kills: list[tuple[float, bool]]) -> RunResult:
    """Send with id ``x``; each kill cancels the sending task after some virtual seconds
    and, if asked, restarts the runtime; the last attempt runs to the end."""
    llm = lookup_model()
    attempts = [*kills, (None, False)]
    result: RunResult | None = None
    runtime_cm = None
    session: Session | None = None
    for kill_at, restart in attempts:
        if session is None:
            runtime_cm = open_runtime(store=store, seed=1, supervision=FAST_RESTART)
            runtime = await runtime_cm.__aenter__()
            session = await spawn_session(runtime, llm=llm, tools=[lookup], session_id="s")
        if kill_at is None:
            result = await session.send("look a up", id="x")
        else:
            with trio.move_on_after(kill_at):
                result = await session.send("look a up", id="x")
        if restart or kill_at is None:
            assert runtime_cm is not None
            await runtime_cm.__aexit__(None, None, None)
            session = None
    assert result is not None
    return result


@settings(max_examples=examples(60), deadline=None)
@given(
    kills=st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]), st.booleans()),
        max_size=4,
    )
)
def test_a_send_retried_by_id_runs_once(kills: list[tuple[float, bool]]) -> None:
    """Kill the sender (and maybe the runtime) at any point and send again with the same
    id: one user turn, one ``RunStarted`` for the id, the same result as an unbroken send."""

    async def main() -> None:
        reference = await _send_with_kills(InMemoryEventStore(), [])
        store = InMemoryEventStore()
        result = await _send_with_kills(store, kills)
        events = await events_of(store, "session/s")
        assert [e.run_id for e in events if isinstance(e, RunStarted)] == ["x"]
        assert not [e for e in events if isinstance(e, InputQueued)]
        assert result == reference
        assert result.status == "completed"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_send_with_a_known_id_returns_the_recorded_run() -> None:
    """A finished run's id: its result again, no model call; an empty id is refused."""
    llm = FunctionLLM(lambda request: answer("hello"))
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s")
        first = await session.send("hi", id="greet")
        again = await session.send("something else", id="greet")
        with pytest.raises(ValueError, match="id must not be empty"):
            await session.send("hi", id="")
    assert again == first
    assert first.run_id == "greet"
    assert len(llm.requests) == 1


# -- what a result tells ---------------------------------------------------------------


async def test_a_final_answer_cut_off_by_the_token_limit_is_truncated() -> None:
    """finish_reason ``length`` on the last answer: completed, but ``truncated``."""
    cut = LLMResponse(content="The plan has three par", finish_reason="length", model="m")
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(lambda request: cut))
        result = await session.send("plan")
        whole = await (await spawn_session(runtime, llm=FunctionLLM(lambda r: answer("ok")))).send(
            "plan"
        )
    assert (result.status, result.truncated) == ("completed", True)
    assert (whole.status, whole.truncated, whole.unknown_tool_results) == ("completed", False, ())


async def test_an_exception_in_a_model_function_is_logged_and_carried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An IndexError in a FunctionLLM: the run fails with its code and message, and the
    traceback reaches the ``powertrio.session`` logger."""

    def broken(request: LLMRequest) -> LLMResponse:
        answers = [answer("never")]
        return answers[len(request.messages) + 2]

    caplog.set_level(logging.WARNING, logger="powertrio.session")
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(broken), session_id="s")
        result = await session.send("go")
        fine = await session.send("again", id="fine")
    assert result.status == "failed"
    assert (result.error_code, result.error_message) == ("IndexError", "list index out of range")
    assert result.error == "IndexError: list index out of range"
    record, _ = [r for r in caplog.records if r.name == "powertrio.session"]
    assert record.levelno == logging.ERROR
    assert "session s" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is IndexError
    assert (fine.error_code, fine.error_message) == ("IndexError", "list index out of range")


@tool
def divide(a: int, b: int) -> float:
    """Divide."""
    return a / b


async def test_an_exception_in_a_tool_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model reads the tool's error; the traceback goes to ``powertrio.session``."""

    def model(request: LLMRequest) -> LLMResponse:
        if len(request.messages) == 1:
            return answer("", ToolCall(id="d1", name="divide", arguments='{"a": 1, "b": 0}'))
        return answer("cannot divide")

    caplog.set_level(logging.WARNING, logger="powertrio.session")
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(model), tools=[divide])
        result = await session.send("1/0")
    assert (result.status, result.error_code, result.error_message) == ("completed", None, None)
    (record,) = [r for r in caplog.records if r.name == "powertrio.session"]
    assert "divide" in record.getMessage() and "d1" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
