"""The PostgreSQL store's pipelined appends (``begin_append``) in a fleet and under a
session; what both stores share is in ``test_pipelined_appends.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from _gated_store import writer_paused

from actors import Tool, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage
from protocols.errors import FencedError
from runtime import NewEvent, open_runtime
from runtime.postgres import PostgresEventStore, open_postgres_store
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


async def test_a_sessions_next_decision_is_queued_behind_its_commit_on_postgres(
    postgres_server: PostgresServer, schema: str
) -> None:
    """While the writer is held, a send queues its run's start, and its model answers at
    once: that answer's events are decided and queued behind the start, not sent to the
    actor's mailbox to wait for the commit. Both then commit in one group, and the send
    completes with the log and the session agreeing."""
    async with (
        _store(postgres_server, schema) as store,
        open_runtime(store=store, seed=1) as runtime,
    ):
        session = await spawn_session(runtime, llm=FunctionLLM(_answer), tools=[_echo()])
        await session.state()
        before = store.statistics().commits
        results = []

        async def send() -> None:
            results.append(await session.send("message"))

        async with trio.open_nursery() as nursery, writer_paused(store):
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert store.statistics().pending_appends == 2
        assert [(r.status, r.text) for r in results] == [("completed", "done")]
        state = await session.state()
        recorded = await store.read(f"session/{session.id}")
        commits = store.statistics().commits - before
    assert len(state.transcript) == 4
    assert [e.type for e in recorded].count("session.run_finished") == 1
    assert commits < 4  # four appends; the first two in one group
