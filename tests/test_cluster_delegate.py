"""Work on another node without a sub-agent: a tool delegates to a session by id.

docs/cluster.md (section 8) tells why agent trees stay on one node and recommends this
instead; this test holds the recommendation to what it promises.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import _cluster_agents
import trio

from actors import AgentSpec, ToolContext, tool
from actors.cluster import NodeHost, host_node
from protocols import LLMRequest, LLMResponse, ToolCall, UserMessage
from runtime import Runtime, open_runtime
from runtime.cluster import Node
from runtime.postgres import open_postgres_store
from runtime.testing import FunctionLLM, PostgresServer

_hosts: dict[int, NodeHost] = {}
"""The host of each runtime (by id), for the delegating tool."""


@tool(crash_policy="retry")
async def research(context: ToolContext, question: str) -> str:
    """Ask the research session, wherever it runs."""
    runtime = context.runtime
    assert isinstance(runtime, Runtime)
    host = _hosts[id(runtime)]
    helper = await host.create(
        "worker", session_id=f"{context.session_id}~research", traceparent=context.traceparent
    )
    result = await helper.send(question, id=context.idempotency_key)
    return result.text or result.status


def _lead_model(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "tool":
        return LLMResponse(content=f"lead ({last.content})")
    assert isinstance(last, UserMessage)
    arguments = json.dumps({"question": last.text})
    return LLMResponse(tool_calls=[ToolCall(id="c1", name="research", arguments=arguments)])


@asynccontextmanager
async def _host(server: PostgresServer, schema: str, name: str) -> AsyncIterator[NodeHost]:
    node = Node(name=name, shards=4, ttl=1.0, poll_interval=0.2)
    catalog = {
        **_cluster_agents.catalog(),
        "lead": AgentSpec(name="lead", tools=(research,), llm=FunctionLLM(_lead_model)),
    }
    async with (
        open_postgres_store(server.dsn(), schema=schema) as store,
        open_runtime(store=store, node=node) as runtime,
        host_node(runtime, catalog) as host,
    ):
        _hosts[id(runtime)] = host
        try:
            yield host
        finally:
            del _hosts[id(runtime)]


async def test_a_tool_delegates_to_a_session_on_another_node(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with (
        _host(postgres_server, schema, "a") as a,
        _host(postgres_server, schema, "b") as b,
    ):
        with trio.fail_after(10):
            for _ in range(1000):
                if len(a.node.held) == 2 == len(b.node.held):
                    break
                await trio.sleep(0.05)
        n = 0
        while not (a.node.owns(f"L{n}") and b.node.owns(f"L{n}~research")):
            n += 1
        lead = await a.create("lead", session_id=f"L{n}")
        result = await lead.send("why is the sky blue", id="r1")
        assert result.text == "lead (answer (done: why is the sky blue))"
        assert f"L{n}" in a.sessions
        assert f"L{n}~research" in b.sessions  # the helper ran on the other node
        assert f"L{n}~research" not in a.sessions
        assert await (await b.session(f"L{n}")).send("ignored", id="r1") == result


async def test_a_delegated_session_s_run_joins_its_caller_s_trace(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The tool that delegates runs in the lead's trace; the session it asks on another
    node should continue that trace under the tool's span, as a sub-agent does."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from actors.telemetry import (
        export_session_spans,
        telemetry_tracer_provider,
        tool_span_id,
        trace_id_of,
    )

    async with _host(postgres_server, schema, "a") as a:
        lead = await a.create("lead", session_id="T0")
        result = await lead.send("why is the sky blue", id="r1")
        exporter = InMemorySpanExporter()
        provider = telemetry_tracer_provider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        assert await export_session_spans(a.runtime.store, ["T0~research"], provider) > 0
    helper_run = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert helper_run.context.trace_id == trace_id_of("T0", result.run_id)
    assert helper_run.parent is not None
    assert helper_run.parent.span_id == tool_span_id("T0", result.run_id, "c1")


def _old_placement_table(server: PostgresServer, schema: str) -> None:
    """The placements table as a fleet made it before placements carried a trace context."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        conn.execute(
            'CREATE TABLE placements (session_id text COLLATE "C" PRIMARY KEY, '
            "shard integer NOT NULL, agent text NOT NULL)"
        )


def _old_placement(server: PostgresServer, schema: str, session_id: str, shard: int) -> None:
    """Place a session the way a node did before placements carried a trace context."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        conn.execute("INSERT INTO placements VALUES (%s, %s, %s)", (session_id, shard, "worker"))


async def test_a_session_placed_without_a_trace_context_runs_in_a_trace_of_its_own(
    postgres_server: PostgresServer, schema: str
) -> None:
    """A fleet's older placements table and its rows carry no trace context: a node
    upgrades the table, runs such a session, and its run starts a trace of its own."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from actors.telemetry import export_session_spans, telemetry_tracer_provider, trace_id_of

    async with open_postgres_store(postgres_server.dsn(), schema=schema):
        pass  # the log, made by the older version too
    await trio.to_thread.run_sync(_old_placement_table, postgres_server, schema)
    async with _host(postgres_server, schema, "a") as a:
        shard = a.node.shard_of_session("old")
        await trio.to_thread.run_sync(_old_placement, postgres_server, schema, "old", shard)
        helper = await a.session("old")
        result = await helper.send("why is the sky blue", id="r1")
        assert result.text == "answer (done: why is the sky blue)"
        exporter = InMemorySpanExporter()
        provider = telemetry_tracer_provider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        assert await export_session_spans(a.runtime.store, ["old"], provider) > 0
    run = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert run.context.trace_id == trace_id_of("old", "r1")
    assert run.parent is None
