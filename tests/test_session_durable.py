"""What a session's log holds when it matters: a tool's result is durable before the model
call that reads it goes out, and a session whose stream went backwards stops instead of
running its history again."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from actors import spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage, Usage
from protocols.errors import ActorFailedError, StoreError, StreamRewoundError
from runtime import (
    AppendResult,
    EventStore,
    NewEvent,
    RecordedEvent,
    SqliteEventStore,
    open_runtime,
    open_sqlite_store,
)
from runtime.supervision import Backoff, Supervision
from runtime.testing import FunctionLLM, InMemoryEventStore

FAST_RESTART = Supervision(max_restarts=100, within=1, backoff=Backoff(initial=0))


class SlowDisk:
    """An in-memory store whose appends take ``latency`` seconds to be written, and a
    process that can die: :meth:`crash` loses every append still being written (nothing
    of it is stored; its caller gets a ``StoreError``), or the next one if none is, as a
    kill at that moment would. The actor that loses one crashes and folds what was
    written, as a restarted process does."""

    def __init__(self, latency: float = 0.001) -> None:
        self.inner = InMemoryEventStore()
        self.latency = latency
        self.crashes = 0
        self.writing = 0
        self.fail_next = False
        self.lost: list[str] = []
        """The types of the events a crash lost, in order."""

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        crashes = self.crashes
        self.writing += 1
        try:
            await trio.sleep(self.latency)
        finally:
            self.writing -= 1
        if crashes != self.crashes or self.fail_next:
            self.fail_next = False
            self.lost.extend(e.type for e in events)
            msg = "the process died before this append was written"
            raise StoreError(msg)
        return await self.inner.append(stream, events, expected_version)

    def crash(self) -> None:
        self.crashes += 1
        self.fail_next = self.writing == 0

    def as_store(self) -> EventStore:
        return self  # type: ignore[return-value]  # a duck-typed EventStore


def _usage() -> Usage:
    return Usage(prompt_tokens=10, completion_tokens=1)


async def test_a_crash_as_the_next_model_call_begins_keeps_the_tool_result_it_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The tool ran (crash policy ``abort``) and the process dies as the model call that
    reads its result goes out: that result is in the log, so the restarted session asks
    the model again with it and the run ends with no unknown tool result; the tool ran
    once. (A call that went out while the result was still being written lost it to the
    crash: recovery closed the call as ``aborted`` and the run reported it unknown.)"""
    store = SlowDisk()
    ran: list[str] = []
    durable_at_call: list[bool] = []

    @tool
    def touch(name: str) -> str:
        """Touch a file (not safe to run twice)."""
        ran.append(name)
        return f"touched {name}"

    async def answer(request: LLMRequest) -> LLMResponse:
        if not isinstance(request.messages[-1], ToolResultMessage):
            call = ToolCall(id="c1", name="touch", arguments='{"name": "x"}')
            return LLMResponse(tool_calls=(call,), usage=_usage())
        if not durable_at_call:
            logged = await store.inner.read("session/s")
            durable_at_call.append(any(r.type == "session.tool_finished" for r in logged))
            store.crash()  # the process dies as this call goes out
        return LLMResponse(content="done", usage=_usage())

    llm = FunctionLLM(answer)
    async with open_runtime(store=store.as_store(), seed=1, supervision=FAST_RESTART) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[touch], session_id="s")
        result = await session.send("touch x")
    assert (result.status, result.text) == ("completed", "done")
    assert result.unknown_tool_results == ()
    assert durable_at_call == [True]
    assert ran == ["x"]
    assert "session.tool_finished" not in store.lost
    assert store.lost[:1] == ["session.assistant"]  # the crash lost the model's answer
    read_by_last_call = [m for m in llm.requests[-1].messages if isinstance(m, ToolResultMessage)]
    assert [(m.content, m.is_error) for m in read_by_last_call] == [("touched x", False)]


class CommitLog:
    """The SQLite store, pipelined appends included, noting the types of the events of
    each append once its caller has learnt it is committed (a conservative view of what
    the file holds: the commit itself came a little before)."""

    def __init__(self, inner: SqliteEventStore) -> None:
        self.inner = inner
        self.committed: list[str] = []
        self._begun: dict[int, list[str]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        result = await self.inner.append(stream, events, expected_version)
        self.committed.extend(e.type for e in events)
        return result

    def begin_append(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        *,
        after: Any,
        wake: Callable[[], object],
    ) -> Any:
        pending = self.inner.begin_append(stream, events, expected_version, after=after, wake=wake)
        if pending is not None:
            self._begun[id(pending)] = [e.type for e in events]
        return pending

    def finish_append(self, pending: Any) -> AppendResult:
        result = self.inner.finish_append(pending)
        self.committed.extend(self._begun.pop(id(pending)))
        return result

    def as_store(self) -> EventStore:
        return self  # type: ignore[return-value]  # a duck-typed EventStore


async def test_on_sqlite_the_model_call_reading_a_tool_result_waits_for_its_commit(
    tmp_path: Path,
) -> None:
    """With pipelined appends (SQLite), a model call that reads nothing new goes out while
    the events asking for it commit, but one that reads a tool's result goes out only
    once that result is committed."""
    seen: list[tuple[bool, list[str]]] = []

    @tool
    def touch(name: str) -> str:
        """Touch a file."""
        return f"touched {name}"

    def answer(request: LLMRequest) -> LLMResponse:
        committed = list(log.committed)
        if not isinstance(request.messages[-1], ToolResultMessage):
            seen.append((False, committed))
            call = ToolCall(id="c1", name="touch", arguments='{"name": "x"}')
            return LLMResponse(tool_calls=(call,), usage=_usage())
        seen.append((True, committed))
        return LLMResponse(content="done", usage=_usage())

    async with open_sqlite_store(tmp_path / "log.db") as sqlite:
        log = CommitLog(sqlite)
        async with open_runtime(store=log.as_store(), seed=1) as runtime:
            session = await spawn_session(
                runtime, llm=FunctionLLM(answer), tools=[touch], session_id="s"
            )
            result = await session.send("touch x")
    assert (result.status, result.unknown_tool_results) == ("completed", ())
    (first_reads_result, before_first), (second_reads_result, before_second) = seen
    assert (first_reads_result, second_reads_result) == (False, True)
    assert "session.run_started" not in before_first  # it went out with its run's commit
    assert before_second[-1:] == ["session.tool_finished"]


# -- a stream that goes backwards under its session ------------------------------------------


def copy(record: RecordedEvent) -> NewEvent:
    return NewEvent(
        type=record.type,
        schema_version=record.schema_version,
        data=record.data,
        metadata=record.metadata,
    )


REWOUND = (
    "stream 'session/s' holds {held}, but its actor had folded it up to version {known}; "
    "the actor stops rather than start over on a history it lost (restore the stream "
    "from a backup, or start anew under another id)"
)


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_deleting_a_running_sessions_stream_stops_it_with_a_typed_error(
    engine: str, tmp_path: Path
) -> None:
    """The stream is deleted while the session's tool runs: the session stops for good
    with ``store.stream_rewound`` (naming the stream and both versions) at its next
    append, instead of starting over on an empty stream and running the send, and its
    tool, again. Nothing is written over the deleted stream."""
    ran: list[str] = []
    started = trio.Event()
    release = trio.Event()

    @tool
    async def touch(name: str) -> str:
        """Touch a file (not safe to run twice)."""
        ran.append(name)
        started.set()
        await release.wait()
        return f"touched {name}"

    def answer(request: LLMRequest) -> LLMResponse:
        if not isinstance(request.messages[-1], ToolResultMessage):
            call = ToolCall(id="c1", name="touch", arguments='{"name": "x"}')
            return LLMResponse(tool_calls=(call,), usage=_usage())
        return LLMResponse(content="done", usage=_usage())

    async with AsyncExitStack() as stack:
        if engine == "sqlite":
            store: EventStore = await stack.enter_async_context(
                open_sqlite_store(tmp_path / "log.db")
            )
        else:
            store = InMemoryEventStore()
        runtime = await stack.enter_async_context(
            open_runtime(store=store, seed=1, supervision=FAST_RESTART)
        )
        session = await spawn_session(
            runtime, llm=FunctionLLM(answer), tools=[touch], session_id="s"
        )
        failure: list[ActorFailedError] = []

        async def send() -> None:
            with pytest.raises(ActorFailedError) as raised:
                await session.send("touch x")
            failure.append(raised.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await started.wait()
            assert await store.stream_version("session/s") == 4
            await store.delete_streams(["session/s"])
            release.set()
        with pytest.raises(ActorFailedError) as again:
            await session.send("touch y")
        assert await store.read("session/s") == []
    (error,) = failure
    assert error.cause_code == "store.stream_rewound"
    cause = error.__cause__
    assert isinstance(cause, StreamRewoundError)
    assert (cause.stream, cause.known, cause.found) == ("session/s", 4, 0)
    assert str(cause) == REWOUND.format(held="no events (it was deleted)", known=4)
    assert again.value.cause_code == "store.stream_rewound"
    assert ran == ["x"]


async def test_a_session_whose_stream_went_back_while_passivated_stops_at_its_next_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A passivated session's stream is cut back to its first two events (deleted and
    partly written again): the message that brings the session back finds it behind what
    the session had folded, and the session stops with ``store.stream_rewound`` rather
    than go on from an older history."""
    store = InMemoryEventStore()
    llm = FunctionLLM(lambda request: LLMResponse(content="ok", usage=_usage()))
    async with open_runtime(store=store, seed=1, supervision=FAST_RESTART) as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s", passivate_after=60)
        assert (await session.send("one")).text == "ok"
        assert (await session.send("two")).text == "ok"
        await trio.sleep(120)  # idle: passivated
        kept = await store.read("session/s", limit=2)
        known = await store.stream_version("session/s")
        await store.delete_streams(["session/s"])
        await store.append("session/s", [copy(r) for r in kept], 0)
        with pytest.raises(ActorFailedError) as raised:
            await session.send("three")
        assert await store.stream_version("session/s") == 2
    assert len(llm.requests) == 2
    cause = raised.value.__cause__
    assert isinstance(cause, StreamRewoundError)
    assert (cause.known, cause.found) == (known, 2)
    assert str(cause) == REWOUND.format(held="only up to version 2", known=known)
