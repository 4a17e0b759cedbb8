"""Telemetry: spans derived from the log (ids stable across a resume), GenAI attributes,
Prometheus metrics scraped over loopback HTTP, JSON logs."""

from __future__ import annotations

import io
import logging

import orjson
import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from actors import ToolContext, spawn_session, tool
from actors.telemetry import (
    FleetMetrics,
    JsonFormatter,
    Telemetry,
    export_session_spans,
    llm_span_id,
    run_span_id,
    serve_metrics,
    telemetry_tracer_provider,
    tool_span_id,
    trace_id_of,
    use_json_logs,
)
from protocols import LLMResponse, ToolCall, Usage
from protocols.errors import ConfigError
from runtime import Clock, open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM


def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = telemetry_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def usage(prompt: int, completion: int) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def shape(spans):
    """What a span is, ids included, without its times."""
    return sorted(
        (
            s.name,
            s.context.trace_id,
            s.context.span_id,
            s.parent.span_id if s.parent is not None else None,
            tuple(sorted(s.attributes.items())),
        )
        for s in spans
    )


async def test_a_run_gives_run_llm_and_tool_spans_with_log_derived_ids(virtual_clock):
    provider, exporter = traced()
    llm = ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"city": "Oslo"}')],
                usage=usage(30, 5),
                model="gpt-x-2024",
                finish_reason="tool_calls",
            ),
            LLMResponse(content="sunny", usage=usage(50, 2), model="gpt-x-2024"),
        ]
    )
    async with open_runtime() as runtime:
        Telemetry(tracer_provider=provider, provider="openai").install(runtime)
        session = await spawn_session(
            runtime, llm=llm, tools=[lookup], model="gpt-x", session_id="s1", agent_name="weather"
        )
        result = await session.send("weather?")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["chat gpt-x", "execute_tool lookup", "invoke_agent weather"]
    run, tool_span = spans["invoke_agent weather"], spans["execute_tool lookup"]
    trace_id = trace_id_of("s1", result.run_id)
    assert {s.context.trace_id for s in spans.values()} == {trace_id}
    assert run.context.span_id == run_span_id("s1", result.run_id)
    assert run.parent is None
    assert tool_span.context.span_id == tool_span_id("s1", result.run_id, "c1")
    assert tool_span.parent.span_id == run.context.span_id
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat gpt-x"]
    assert [s.context.span_id for s in chats] == [
        llm_span_id("s1", result.run_id, 1),
        llm_span_id("s1", result.run_id, 2),
    ]
    first = chats[0].attributes
    assert first["gen_ai.provider.name"] == "openai"
    assert "gen_ai.system" not in first
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "gpt-x"
    assert first["gen_ai.response.model"] == "gpt-x-2024"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (30, 5)
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert tool_span.attributes["gen_ai.tool.name"] == "lookup"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool_span.attributes["gen_ai.tool.type"] == "function"
    assert run.attributes["gen_ai.agent.name"] == "weather"
    assert run.attributes["gen_ai.agent.id"] == "s1"
    assert run.attributes["gen_ai.provider.name"] == "openai"
    assert run.attributes["gen_ai.usage.input_tokens"] == 80
    assert run.attributes["powertrio.run.status"] == "completed"
    assert run.start_time <= chats[0].start_time <= chats[0].end_time <= run.end_time


async def test_a_failed_run_and_a_failed_tool_carry_their_error_codes():
    provider, exporter = traced()

    @tool
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("boom")

    calls = [0]

    def answer(request):
        calls[0] += 1
        if calls[0] == 1:
            return LLMResponse(tool_calls=[ToolCall(id="b", name="broken", arguments="{}")])
        raise RuntimeError("the model broke")

    async with open_runtime() as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        session = await spawn_session(
            runtime, llm=FunctionLLM(answer), tools=[broken], session_id="s"
        )
        result = await session.send("go")
    assert result.status == "failed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span, run = spans["execute_tool broken"], spans["invoke_agent"]
    assert tool_span.status.status_code.name == "ERROR"
    assert tool_span.attributes["powertrio.tool.status"] == "error"
    assert tool_span.attributes["error.type"] == "tool"
    assert run.status.status_code.name == "ERROR"
    assert run.attributes["error.type"] == result.error_code


async def test_a_failed_model_call_ends_with_its_run_as_an_error_span():
    from protocols.errors import LLMServerError

    provider, exporter = traced()

    def answer(request):
        raise LLMServerError("the provider is down", status=503, provider="p")

    async with open_runtime() as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        session = await spawn_session(runtime, llm=FunctionLLM(answer), session_id="s")
        result = await session.send("go")
    assert result.error_code == "llm.server"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    chat = spans["chat"]
    assert chat.status.status_code.name == "ERROR"
    assert chat.attributes["error.type"] == "llm.server"
    assert chat.context.span_id == llm_span_id("s", result.run_id, 1)
    assert chat.parent.span_id == spans["invoke_agent"].context.span_id


async def test_a_resumed_run_continues_its_trace_with_the_same_ids(virtual_clock):
    """Kill the runtime while the second model call is in flight; a new runtime on the same
    log resumes the run: its spans join the trace the first one began, and exporting the
    session from the log gives exactly the spans the two processes gave live."""
    store = InMemoryEventStore()
    clock = Clock(start=1_700_000_000.0)
    provider, exporter = traced()
    asked = trio.Event()

    async def hang(request):
        if len(request.messages) > 2:  # the second call: block until the "kill"
            asked.set()
            await trio.sleep_forever()
        await trio.sleep(1)  # virtual: a model call takes time
        return LLMResponse(
            tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"city": "Rome"}')],
            usage=usage(10, 1),
        )

    with trio.CancelScope() as kill:
        async with open_runtime(store=store, clock=clock) as runtime:
            Telemetry(tracer_provider=provider).install(runtime)
            session = await spawn_session(
                runtime, llm=FunctionLLM(hang), tools=[lookup], session_id="s"
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.send, "weather?")
                await asked.wait()
                kill.cancel()
    before = {s.name for s in exporter.get_finished_spans()}
    assert before == {"chat", "execute_tool lookup"}  # the run never ended here

    async def finish(request):
        await trio.sleep(1)
        return LLMResponse(content="warm", usage=usage(20, 2))

    await trio.sleep(10)  # the process is down a while

    async with open_runtime(store=store, clock=clock) as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        session = await spawn_session(
            runtime, llm=FunctionLLM(finish), tools=[lookup], session_id="s"
        )
        run_id = (await session.state()).run.started.run_id
        with trio.fail_after(5):
            assert (await session.wait(run_id)).text == "warm"
    live = exporter.get_finished_spans()
    names = sorted(s.name for s in live)
    assert names == ["chat", "chat", "execute_tool lookup", "invoke_agent"]
    run = next(s for s in live if s.name == "invoke_agent")
    assert {s.context.trace_id for s in live} == {trace_id_of("s", run_id)}
    assert run.attributes["powertrio.run.resumed"] is True
    assert {s.parent.span_id for s in live if s is not run} == {run_span_id("s", run_id)}
    # The log gives the same spans, ids and attributes (a resumed run's start is exact there).
    provider2, exporter2 = traced()
    assert await export_session_spans(store, ["s"], provider2) == 4
    from_log = exporter2.get_finished_spans()

    def without_resumed(spans):
        return [
            (n, t, i, p, tuple(a for a in attrs if a[0] != "powertrio.run.resumed"))
            for n, t, i, p, attrs in shape(spans)
        ]

    assert without_resumed(from_log) == without_resumed(live)
    logged_run = next(s for s in from_log if s.name == "invoke_agent")
    assert logged_run.attributes["powertrio.run.resumed"] is False
    assert logged_run.start_time < run.start_time  # the log knows when the run began


async def test_a_resumed_session_s_live_spans_carry_its_agent_name(virtual_clock):
    """The process that resumes a session never sees its first event (it was committed
    before): its live spans still name the agent, as the log's export does."""
    store = InMemoryEventStore()
    clock = Clock(start=1_700_000_000.0)
    provider, exporter = traced()
    asked = trio.Event()

    async def hang(request):
        asked.set()
        await trio.sleep_forever()

    with trio.CancelScope() as kill:
        async with open_runtime(store=store, clock=clock) as runtime:
            Telemetry(tracer_provider=provider).install(runtime)
            session = await spawn_session(
                runtime, llm=FunctionLLM(hang), session_id="s", agent_name="weather"
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.send, "weather?")
                await asked.wait()
                kill.cancel()

    async def finish(request):
        await trio.sleep(1)
        return LLMResponse(content="warm", usage=usage(20, 2))

    async with open_runtime(store=store, clock=clock) as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        session = await spawn_session(
            runtime, llm=FunctionLLM(finish), session_id="s", agent_name="weather"
        )
        run_id = (await session.state()).run.started.run_id
        with trio.fail_after(5):
            assert (await session.wait(run_id)).text == "warm"
    live = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(live) == ["chat", "invoke_agent weather"]
    assert {s.attributes["gen_ai.agent.name"] for s in live.values()} == {"weather"}


async def test_a_sub_agent_s_run_joins_its_parent_s_trace():
    from actors import AgentSpec

    provider, exporter = traced()
    child_llm = ScriptedLLM([LLMResponse(content="child done")])
    child = AgentSpec(name="helper", system_prompt="help", llm=child_llm)
    llm = ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[
                    ToolCall(
                        id="sp",
                        name="spawn_agent",
                        arguments='{"agent": "helper", "task": "do it"}',
                    )
                ]
            ),
            LLMResponse(content="parent done"),
        ]
    )
    async with open_runtime() as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        session = await spawn_session(runtime, llm=llm, agents=[child], session_id="p")
        result = await session.send("go")
    assert result.text == "parent done"
    spans = exporter.get_finished_spans()
    child_run = next(s for s in spans if s.name == "invoke_agent helper")
    spawn = next(s for s in spans if s.name == "execute_tool spawn_agent")
    assert child_run.context.trace_id == trace_id_of("p", result.run_id)
    assert child_run.parent.span_id == spawn.context.span_id


async def test_a_sub_agent_s_log_carries_its_trace_context_to_any_process():
    """The child's own log says which trace it belongs to: exported alone (as a node that
    never saw the parent's spawn would), its run still joins the parent's trace under the
    spawning call, and is named after its agent."""
    from actors import AgentSpec

    store = InMemoryEventStore()
    child = AgentSpec(
        name="helper", system_prompt="help", llm=ScriptedLLM([LLMResponse(content="ok")])
    )
    llm = ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[
                    ToolCall(
                        id="sp", name="spawn_agent", arguments='{"agent": "helper", "task": "x"}'
                    )
                ]
            ),
            LLMResponse(content="parent done"),
        ]
    )
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, agents=[child], session_id="p")
        result = await session.send("go")
    provider, exporter = traced()
    assert await export_session_spans(store, ["p.1"], provider) == 2
    spans = {s.name: s for s in exporter.get_finished_spans()}
    child_run = spans["invoke_agent helper"]
    assert child_run.context.trace_id == trace_id_of("p", result.run_id)
    assert child_run.parent.span_id == tool_span_id("p", result.run_id, "sp")
    assert child_run.attributes["gen_ai.agent.name"] == "helper"
    assert spans["chat"].context.trace_id == trace_id_of("p", result.run_id)


class _Anthropic:
    """A model that names its provider, as the provider transports do."""

    provider = "anthropic"

    def __init__(self, inner):
        self._inner = inner

    async def complete(self, request):
        return await self._inner.complete(request)

    def stream(self, request):
        return self._inner.stream(request)


async def test_each_session_s_provider_is_its_transport_s_unless_told():
    provider, exporter = traced()
    answer = FunctionLLM(lambda r: LLMResponse(content="ok", model="claude-x"))
    async with open_runtime() as runtime:
        Telemetry(tracer_provider=provider).install(runtime)
        named = await spawn_session(runtime, llm=_Anthropic(answer), session_id="a")
        await named.send("hi")
        unnamed = await spawn_session(runtime, llm=answer, session_id="b")
        await unnamed.send("hi")
    by_session = {}
    for span in exporter.get_finished_spans():
        session = span.attributes["gen_ai.conversation.id"]
        by_session.setdefault(session, set()).add(span.attributes["gen_ai.provider.name"])
    assert by_session == {"a": {"anthropic"}, "b": {"_OTHER"}}
    told, told_exporter = traced()
    async with open_runtime() as runtime:
        Telemetry(tracer_provider=told, provider="azure.ai.openai").install(runtime)
        session = await spawn_session(runtime, llm=_Anthropic(answer), session_id="c")
        await session.send("hi")
    assert {s.attributes["gen_ai.provider.name"] for s in told_exporter.get_finished_spans()} == {
        "azure.ai.openai"
    }


def test_a_tracer_provider_with_random_ids_is_refused():
    with pytest.raises(ConfigError, match="the tracer provider must take its ids from the log"):
        Telemetry(tracer_provider=TracerProvider())


# -- metrics ------------------------------------------------------------------------------


async def _scrape(port: int, path: str = "/metrics", accept: str | None = None) -> tuple[str, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    headers = "Host: x\r\n" + (f"Accept: {accept}\r\n" if accept is not None else "")
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\n{headers}\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_are_scraped_over_loopback_http():
    metrics = FleetMetrics(node="n1")
    calls = [0]

    def answer(request):
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("the model broke")
        return LLMResponse(content="ok", usage=usage(12, 3), model="m1")

    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        Telemetry(metrics=metrics).install(runtime)
        listeners = await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        session = await spawn_session(runtime, llm=FunctionLLM(answer), session_id="s")
        await session.send("a")
        await session.send("b")
        assert (await session.send("c")).status == "failed"
        head, body = await _scrape(port)
        missing, _ = await _scrape(port, "/nothing")
        nursery.cancel_scope.cancel()
    assert head.startswith("HTTP/1.1 200 OK")
    assert "Content-Type: text/plain; version=" in head
    assert missing.startswith("HTTP/1.1 404 Not Found")
    found = samples(body)
    assert found[("powertrio_runs_started_total", ())] == 3
    assert found[("powertrio_runs_total", (("status", "completed"),))] == 2
    assert found[("powertrio_runs_total", (("status", "failed"),))] == 1
    assert found[("powertrio_llm_tokens_total", (("model", "m1"), ("type", "input")))] == 24
    assert found[("powertrio_llm_tokens_total", (("model", "m1"), ("type", "output")))] == 6
    assert found[("powertrio_errors_total", (("code", "RuntimeError"),))] == 1
    assert found[("powertrio_leases", (("node", "n1"), ("state", "owned")))] == 1
    # Every append was timed: at least the RunStarted and the RunFinished of each send.
    assert found[("powertrio_commit_seconds_count", ())] >= 6
    assert found[("powertrio_events_appended_total", ())] >= 9
    assert found[("powertrio_mailbox_queued", ())] == 0
    assert found[("powertrio_actors", ())] >= 1


PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
"""What Prometheus itself sends when it scrapes."""


def strict_openmetrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, parsed by prometheus_client's OpenMetrics parser (which refuses any
    line out of the format, and a body without its ``# EOF``)."""
    found = {}
    for family in openmetrics_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_negotiate_openmetrics_and_carry_process_metrics():
    metrics = FleetMetrics(node="n1")
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        Telemetry(metrics=metrics).install(runtime)
        listeners = await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        session = await spawn_session(
            runtime, llm=FunctionLLM(lambda r: LLMResponse(content="ok")), session_id="s"
        )
        await session.send("a")
        open_head, open_body = await _scrape(port, accept="application/openmetrics-text")
        prom_head, prom_body = await _scrape(port, accept=PROMETHEUS_ACCEPT)
        text_head, text_body = await _scrape(port)
        preferred_head, _ = await _scrape(
            port, accept="text/plain;q=1.0, application/openmetrics-text;q=0.5"
        )
        nursery.cancel_scope.cancel()
    assert "Content-Type: application/openmetrics-text; version=1.0.0" in open_head
    assert "Content-Type: application/openmetrics-text; version=1.0.0" in prom_head
    assert "Content-Type: text/plain; version=" in text_head
    assert "Content-Type: text/plain; version=" in preferred_head
    assert "Vary: Accept" in open_head
    assert open_body.endswith("# EOF\n")
    assert "# EOF" not in text_body
    for found in (strict_openmetrics(open_body), strict_openmetrics(prom_body), samples(text_body)):
        assert found[("powertrio_runs_total", (("status", "completed"),))] == 1
        assert found[("process_cpu_seconds_total", ())] >= 0
        assert found[("process_resident_memory_bytes", ())] > 0
        assert found[("process_start_time_seconds", ())] > 1_600_000_000
        assert found[("process_open_fds", ())] > 0
    with pytest.raises(ValueError, match=r"Clashing name|Missing # EOF"):  # text is no OpenMetrics
        strict_openmetrics(text_body)


def test_the_accept_header_is_read_with_its_qualities():
    from actors.telemetry._metrics import prefers_openmetrics

    assert prefers_openmetrics("application/openmetrics-text")
    assert prefers_openmetrics("application/openmetrics-text; version=0.0.1,text/plain;q=0.5")
    assert prefers_openmetrics(PROMETHEUS_ACCEPT)
    assert not prefers_openmetrics(None)
    assert not prefers_openmetrics("*/*")
    assert not prefers_openmetrics("text/plain, application/openmetrics-text;q=0.9")
    assert not prefers_openmetrics("application/openmetrics-text;q=0")


async def test_the_limiter_s_grants_and_backoffs_are_counted():
    from actors.limits import LimiterPolicy, spawn_limiter

    metrics = FleetMetrics()
    async with open_runtime() as runtime:
        Telemetry(metrics=metrics).install(runtime)
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        for _ in range(3):
            grant = await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
            limiter.settle(grant, 1)
        limiter.rate_limited("p", "m", 0.0)
        await limiter.statistics()  # the told messages are handled before this ask
    found = samples(metrics.render()[0].decode())
    assert found[("powertrio_limiter_grants_total", (("model", "p/m"),))] == 3
    assert found[("powertrio_limiter_backoffs_total", (("model", "p/m"),))] == 1


# -- logs ---------------------------------------------------------------------------------


def test_json_logs_are_one_object_per_line_with_the_extra_fields():
    out = io.StringIO()
    logger = logging.getLogger("test.telemetry.json")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        assert use_json_logs(True, stream=out)
        logger.warning("run %s failed", "r1", extra={"session_id": "s1", "obj": object()})
        try:
            raise ValueError("bad")
        except ValueError:
            logger.exception("with a traceback")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["message"] == "run r1 failed"
    assert (lines[0]["level"], lines[0]["logger"]) == ("warning", "test.telemetry.json")
    assert lines[0]["session_id"] == "s1"
    assert lines[0]["obj"].startswith("<object object")
    assert "ValueError: bad" in lines[1]["exception"]


def test_the_json_switch_reads_the_environment(monkeypatch):
    monkeypatch.setenv("POWERTRIO_LOG_FORMAT", "text")
    assert use_json_logs() is False
    record = logging.LogRecord("x", logging.INFO, "f", 1, "hi", (), None)
    assert orjson.loads(JsonFormatter().format(record))["message"] == "hi"


async def test_a_session_started_with_a_tool_call_s_trace_context_joins_that_trace():
    """A tool hands its call's context (``ToolContext.traceparent``) to a session it
    starts apart from the caller's tree: that session's runs join the caller's trace under
    the call's span, and from its log alone, as a sub-agent's do."""
    store = InMemoryEventStore()
    seen: list[str | None] = []

    @tool
    async def hand_off(ctx: ToolContext, task: str) -> str:
        """Hand the task to a session of its own."""
        seen.append(ctx.traceparent)
        assert ctx.runtime is not None
        helper = await spawn_session(
            ctx.runtime,
            llm=ScriptedLLM([LLMResponse(content="helped")]),
            session_id="h",
            agent_name="helper",
            traceparent=ctx.traceparent,
        )
        return (await helper.send(task)).text or ""

    call = ToolCall(id="c1", name="hand_off", arguments='{"task": "x"}')
    llm = ScriptedLLM([LLMResponse(tool_calls=[call]), LLMResponse(content="done")])
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[hand_off], session_id="p")
        result = await session.send("go")
    trace_id, span_id = trace_id_of("p", result.run_id), tool_span_id("p", result.run_id, "c1")
    assert [f"00-{trace_id:032x}-{span_id:016x}-01"] == seen
    provider, exporter = traced()
    assert await export_session_spans(store, ["h"], provider) == 2
    helper_run = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent helper")
    assert trace_id == helper_run.context.trace_id
    assert span_id == helper_run.parent.span_id
