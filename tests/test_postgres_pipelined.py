"""The PostgreSQL store's pipelined appends (``begin_append``): an append queued behind
another of its stream commits only if that one does, and a session's sends use them."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from _gated_store import hold_in_thread

from actors import Tool, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage
from protocols.errors import ConcurrencyConflictError, FencedError, StoreClosedError
from runtime import AppendResult, NewEvent, PostgresEventStore, open_postgres_store, open_runtime
from runtime._postgres_writer import PendingAppend
from runtime.testing import FunctionLLM, PostgresServer


def _event(n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n)


@asynccontextmanager
async def _store(server: PostgresServer, schema: str) -> AsyncIterator[PostgresEventStore]:
    async with open_postgres_store(server.dsn(), schema=schema) as store:
        yield store


@asynccontextmanager
async def _writer_paused(store: PostgresEventStore) -> AsyncIterator[None]:
    """Keep the writer thread busy in a maintenance write; appends queue up meanwhile and
    are committed (in one group) once the block is left."""
    hold, entered, release = hold_in_thread()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(store._run_write, hold, retry=False))
        assert await trio.to_thread.run_sync(entered.wait, 30)
        try:
            yield
        finally:
            release.set()


class _Begun:
    """Appends begun with ``begin_append``, and a Trio event per append set when decided."""

    def __init__(self, store: PostgresEventStore) -> None:
        self.store = store
        self.decided: list[trio.Event] = []

    def begin(
        self, stream: str, events: list[NewEvent], expected: int, after: PendingAppend | None
    ) -> PendingAppend:
        decided = trio.Event()
        self.decided.append(decided)
        pending = self.store.begin_append(
            stream, tuple(events), expected, after=after, wake=decided.set
        )
        assert pending is not None
        return pending

    async def all_decided(self) -> None:
        for decided in self.decided:
            await decided.wait()


async def test_an_append_begun_behind_another_commits_right_after_it(
    postgres_server: PostgresServer, schema: str
) -> None:
    """``after``: the second append is queued before the first is decided, expecting the
    version the first leaves; both commit, in order, in one group when queued together."""
    async with _store(postgres_server, schema) as store:
        begun = _Begun(store)
        before = store.statistics().commits
        async with _writer_paused(store):
            first = begun.begin("a", [_event(0), _event(1)], 0, None)
            second = begun.begin("a", [_event(2)], 2, first)
            assert store.statistics().pending_appends == 2
        await begun.all_decided()
        assert [store.finish_append(first), store.finish_append(second)] == [
            AppendResult(stream="a", version=2, first_position=1, last_position=2),
            AppendResult(stream="a", version=3, first_position=3, last_position=3),
        ]
        assert store.statistics().commits - before == 1
        assert [e.data for e in await store.read("a")] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']


@pytest.mark.parametrize("together", [True, False], ids=["one group", "two groups"])
async def test_an_append_behind_one_that_conflicted_never_commits(
    postgres_server: PostgresServer, schema: str, together: bool
) -> None:
    """Another writer took the stream: the first append conflicts, and the one queued
    behind it fails too, even though the stream now stands at the version it expected. It
    was decided on the first one's events, not on the other writer's."""
    async with _store(postgres_server, schema) as store:
        begun = _Begun(store)
        async with trio.open_nursery() as nursery:
            async with _writer_paused(store):
                nursery.start_soon(store.append, "a", [_event(9)], 0)  # the other writer
                await trio.testing.wait_all_tasks_blocked()
                first = begun.begin("a", [_event(0)], 0, None)
                if together:
                    second = begun.begin("a", [_event(1)], 1, first)
            if not together:  # behind an append decided, not finished yet
                await begun.decided[0].wait()
                second = begun.begin("a", [_event(1)], 1, first)
        await begun.all_decided()
        for pending, expected in ((first, 0), (second, 1)):
            with pytest.raises(ConcurrencyConflictError) as info:
                store.finish_append(pending)
            assert (info.value.stream, info.value.expected, info.value.actual) == (
                "a",
                expected,
                1,
            )
        assert [e.data for e in await store.read("a")] == [b'{"n":9}']


class _NotHeld:
    """A node's leases that hold no shard: every claim is refused."""

    def claim(self, stream: str) -> tuple[int, int] | None:
        raise FencedError(stream, 0, "n1", "this node does not hold its shard's lease")


async def test_begin_append_checks_its_arguments_and_declines_what_append_refuses(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Bad arguments raise as ``append`` would. A stream whose lease the node does not
    hold, or a closing store, queues nothing and says so with ``None``: the caller then
    appends and gets the typed error."""
    async with _store(postgres_server, schema) as store:
        with pytest.raises(ValueError, match="expected_version"):
            store.begin_append("a", (_event(0),), -1, after=None, wake=lambda: None)
        store._fence = _NotHeld()  # type: ignore[assignment]
        assert store.begin_append("a", (_event(0),), 0, after=None, wake=lambda: None) is None
        with pytest.raises(FencedError, match="does not hold its shard"):
            await store.append("a", [_event(0)], 0)
        store._fence = None
        await store.aclose()
        assert store.begin_append("a", (_event(0),), 0, after=None, wake=lambda: None) is None
        with pytest.raises(StoreClosedError):
            await store.append("a", [_event(0)], 0)


def _answer(request: LLMRequest) -> LLMResponse:
    if isinstance(request.messages[-1], ToolResultMessage):
        return LLMResponse(content="done")
    return LLMResponse(tool_calls=(ToolCall(id="c1", name="echo", arguments='{"text": "hi"}'),))


def _echo() -> Tool[[str], Coroutine[Any, Any, str]]:
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    return tool(echo)


async def test_a_sessions_sends_on_postgres_take_fewer_commits_than_appends(
    postgres_server: PostgresServer, schema: str
) -> None:
    """A send of two rounds and one tool call is four decisions that append. Pipelined,
    the tool call and the second model call are decided while the events asking for them
    commit, and go in right behind them: fewer commits than decisions, and the log and
    the session agree."""
    sends = 10
    async with (
        _store(postgres_server, schema) as store,
        open_runtime(store=store, seed=1) as runtime,
    ):
        session = await spawn_session(runtime, llm=FunctionLLM(_answer), tools=[_echo()])
        await session.state()
        before = store.statistics().commits
        for i in range(sends):
            result = await session.send(f"message {i}")
            assert (result.status, result.text) == ("completed", "done")
        commits = store.statistics().commits - before
        state = await session.state()
        recorded = await store.read(f"session/{session.id}")
    assert commits < 4 * sends, commits
    assert len(state.transcript) == 4 * sends
    assert sum(e.type == "session.run_finished" for e in recorded) == sends
