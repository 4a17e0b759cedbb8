"""Spans over real OTLP/HTTP, configured by the standard ``OTEL_*`` variables, checked
against the OpenTelemetry GenAI semantic conventions as a collector receives them."""

from __future__ import annotations

import pytest
import trio
from _otlp import KIND_CLIENT, KIND_INTERNAL, STATUS_ERROR, ReceivedSpan, otlp_receiver

from actors import AgentSpec, spawn_agent, tool
from actors.telemetry import Telemetry, otlp_tracer_provider, tool_span_id, trace_id_of
from protocols import LLMResponse, ToolCall, Usage
from protocols.errors import ConfigError
from runtime import open_runtime
from runtime.testing import FunctionLLM

OTEL_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)

# What the conventions ask of each operation's spans: the attribute the name is made of,
# the span kind, and the attributes required (or recommended and known here).
NAMED_AFTER = {
    "invoke_agent": "gen_ai.agent.name",
    "chat": "gen_ai.request.model",
    "execute_tool": "gen_ai.tool.name",
}
KIND = {"invoke_agent": KIND_INTERNAL, "chat": KIND_CLIENT, "execute_tool": KIND_INTERNAL}
REQUIRED = {
    "invoke_agent": {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.agent.name",
        "gen_ai.agent.id",
        "gen_ai.conversation.id",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    },
    "chat": {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.conversation.id",
    },
    "execute_tool": {
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.type",
    },
}
DEPRECATED = {"gen_ai.system", "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("boom")


def _planner(request):
    if not any(m.role == "tool" for m in request.messages):
        return LLMResponse(
            tool_calls=[
                ToolCall(id="c1", name="lookup", arguments='{"city": "Oslo"}'),
                ToolCall(id="c2", name="broken", arguments="{}"),
                ToolCall(
                    id="c3",
                    name="spawn_agent",
                    arguments='{"agent": "helper", "task": "check the forecast"}',
                ),
            ],
            usage=Usage(prompt_tokens=40, completion_tokens=9),
            model="big-2026-01",
            finish_reason="tool_calls",
        )
    return LLMResponse(
        content="sunny", usage=Usage(prompt_tokens=90, completion_tokens=3), model="big-2026-01"
    )


def _helper(request):
    return LLMResponse(
        content="forecast: sunny",
        usage=Usage(prompt_tokens=12, completion_tokens=4),
        model="small-2026-01",
        finish_reason="length",
    )


async def test_a_run_s_spans_reach_an_otlp_receiver_by_the_conventions(clean_env):
    with otlp_receiver() as receiver:
        clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        clean_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
        provider = otlp_tracer_provider(instance="node-7")
        assert provider is not None
        helper = AgentSpec(
            name="helper", system_prompt="You check.", llm=FunctionLLM(_helper), model="small"
        )
        planner = AgentSpec(
            name="planner",
            system_prompt="You plan.",
            llm=FunctionLLM(_planner),
            model="big",
            tools=[lookup, broken],
            agents=[helper],
        )
        async with open_runtime() as runtime:
            Telemetry(tracer_provider=provider, provider="openai").install(runtime)
            session = await spawn_agent(runtime, planner, session_id="trip")
            result = await session.send("weather?")
        assert result.text == "sunny"
        assert await trio.to_thread.run_sync(provider.force_flush)
        await trio.to_thread.run_sync(provider.shutdown)
        receiver.wait_for(lambda spans: len(spans) == 8, "the run's eight spans")
    assert receiver.requests[0] == "/v1/traces application/x-protobuf"
    spans = receiver.spans
    by_name: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == [
        "chat big",
        "chat small",
        "execute_tool broken",
        "execute_tool lookup",
        "execute_tool spawn_agent",
        "invoke_agent helper",
        "invoke_agent planner",
    ]
    for span in spans:
        operation = span.attributes["gen_ai.operation.name"]
        assert span.name == f"{operation} {span.attributes[NAMED_AFTER[operation]]}"
        assert span.kind == KIND[operation], span.name
        assert REQUIRED[operation] <= set(span.attributes), (
            span.name,
            REQUIRED[operation] - set(span.attributes),
        )
        assert not DEPRECATED & set(span.attributes), span.name
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.resource["service.name"] == "powertrio"
        assert span.resource["service.instance.id"] == "node-7"
        assert span.resource["deployment.environment.name"] == "test"
    # One tree, one trace: the child's spans under the spawning call, in the root's trace.
    trace = f"{trace_id_of('trip', result.run_id):032x}"
    assert {span.trace_id for span in spans} == {trace}
    root = by_name["invoke_agent planner"][0]
    assert root.parent_span_id == ""
    spawn = by_name["execute_tool spawn_agent"][0]
    assert spawn.span_id == f"{tool_span_id('trip', result.run_id, 'c3'):016x}"
    child = by_name["invoke_agent helper"][0]
    assert child.parent_span_id == spawn.span_id
    assert by_name["chat small"][0].parent_span_id == child.span_id
    assert child.attributes["gen_ai.agent.id"] == "trip.1"
    assert root.attributes["gen_ai.agent.id"] == "trip"
    # Values as the conventions type them.
    first, last = by_name["chat big"]
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert last.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert by_name["chat small"][0].attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert first.attributes["gen_ai.request.model"] == "big"
    assert first.attributes["gen_ai.response.model"] == "big-2026-01"
    assert (
        first.attributes["gen_ai.usage.input_tokens"],
        first.attributes["gen_ai.usage.output_tokens"],
    ) == (40, 9)
    # A run's usage is its tree's: its own two calls and its child's.
    assert root.attributes["gen_ai.usage.input_tokens"] == 40 + 90 + 12
    lookup_span = by_name["execute_tool lookup"][0]
    assert lookup_span.attributes["gen_ai.tool.call.id"] == "c1"
    assert lookup_span.attributes["gen_ai.tool.type"] == "function"
    assert "error.type" not in lookup_span.attributes
    failed = by_name["execute_tool broken"][0]
    assert failed.status_code == STATUS_ERROR
    assert failed.attributes["error.type"] == "tool"


def test_no_otel_variables_no_export(clean_env):
    assert otlp_tracer_provider() is None
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    clean_env.setenv("OTEL_TRACES_EXPORTER", "none")
    assert otlp_tracer_provider() is None


def test_the_service_name_and_the_traces_endpoint_come_from_the_environment(clean_env):
    clean_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    clean_env.setenv("OTEL_SERVICE_NAME", "checkout-agents")
    clean_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-3")
    clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/custom")
    provider = otlp_tracer_provider(instance="node-7")
    assert provider is not None
    try:
        attributes = provider.resource.attributes
        assert attributes["service.name"] == "checkout-agents"
        assert attributes["service.instance.id"] == "pod-3"
        processor = provider._active_span_processor._span_processors[0]
        assert processor._batch_processor._exporter._endpoint == "http://collector:4318/custom"
    finally:
        provider.shutdown()


def test_unsupported_otel_settings_say_what_is_supported(clean_env):
    clean_env.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError) as caught:
        otlp_tracer_provider()
    assert str(caught.value) == (
        "OTEL_TRACES_EXPORTER=zipkin is not supported: powertrio exports spans through otlp "
        "(or none)"
    )
    assert caught.value.code == "config.invalid"
    clean_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError) as caught:
        otlp_tracer_provider()
    assert str(caught.value) == (
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: powertrio exports OTLP over "
        "http/protobuf"
    )
