"""The PostgreSQL store's pipelined appends (``begin_append``) in a fleet and under a
session; what both stores share is in ``test_pipelined_appends.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from actors import Tool, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage
from protocols.errors import FencedError
from runtime import NewEvent, PostgresEventStore, open_postgres_store, open_runtime
from runtime.testing import FunctionLLM, PostgresServer


def _event(n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n)


@asynccontextmanager
async def _store(server: PostgresServer, schema: str) -> AsyncIterator[PostgresEventStore]:
    async with open_postgres_store(server.dsn(), schema=schema) as store:
        yield store


class _NotHeld:
    """A node's leases that hold no shard: every claim is refused."""

    def claim(self, stream: str) -> tuple[int, int] | None:
        raise FencedError(stream, 0, "n1", "this node does not hold its shard's lease")


async def test_begin_append_declines_a_stream_whose_lease_the_node_does_not_hold(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Nothing is queued, and ``None`` says so: the caller then appends and gets the
    fence's typed error."""
    async with _store(postgres_server, schema) as store:
        store._fence = _NotHeld()  # type: ignore[assignment]
        assert store.begin_append("a", (_event(0),), 0, after=None, wake=lambda: None) is None
        with pytest.raises(FencedError, match="does not hold its shard"):
            await store.append("a", [_event(0)], 0)
        assert store.statistics().pending_appends == 0


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
