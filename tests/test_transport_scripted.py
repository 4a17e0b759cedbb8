"""The transports against a scripted HTTP server on loopback: wire formats, faults, retries."""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx
import orjson
import pytest
import trio
from _scripted_http import Reply, ScriptedHTTPServer, json_reply, sse, sse_reply

from protocols import (
    AssistantMessage,
    ImagePart,
    LLMRequest,
    Message,
    ResponseFormat,
    SystemMessage,
    TextPart,
    ThinkingBlock,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.errors import (
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextOverflowError,
    LLMMalformedStreamError,
    LLMRateLimitedError,
    LLMServerError,
    LLMTimeoutError,
)
from protocols.lowlevel import MessageView
from protocols.streaming import TextDelta, ToolCallDelta
from protocols.transports import (
    AnthropicTransport,
    Attempt,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    Timeouts,
    open_http_client,
)

KEY = "sk-test-0123456789-secret"
WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
REQUEST = LLMRequest(messages=[UserMessage("hi")], max_tokens=16)


def _openai(
    server: ScriptedHTTPServer,
    attempts: list[Attempt] | None = None,
    *,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
) -> OpenAITransport:
    config = ProviderConfig(
        provider="openai",
        base_url=server.url + "/v1",
        model="gpt-test",
        api_key=KEY,
        retry=retry or RetryPolicy(max_attempts=3, initial_delay=0.01, jitter=0.0),
        timeouts=timeouts or Timeouts(),
    )
    return OpenAITransport(
        config, on_attempt=None if attempts is None else attempts.append, rand=lambda: 0.5
    )


def _anthropic(server: ScriptedHTTPServer) -> AnthropicTransport:
    config = ProviderConfig(
        provider="anthropic",
        base_url=server.url,
        model="claude-test",
        api_key=KEY,
        retry=RetryPolicy(max_attempts=1),
    )
    return AnthropicTransport(config)


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


OK_BODY = {
    "id": "chatcmpl-9",
    "model": "gpt-test",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}


# --- OpenAI wire format ----------------------------------------------------------------


async def test_openai_request_body_and_tool_calls_streamed_in_fragments() -> None:
    """Two tool calls whose arguments arrive in pieces assemble by index; usage details count."""
    stream = sse(
        (None, _chunk({"role": "assistant", "content": None})),
        (
            None,
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "weather", "arguments": ""},
                        }
                    ]
                }
            ),
        ),
        (None, _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]})),
        (None, _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]})),
        (
            None,
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city"'},
                        }
                    ]
                }
            ),
        ),
        (None, _chunk({"tool_calls": [{"index": 1, "function": {"arguments": ': "Rome"}'}}]})),
        (None, _chunk({}, finish="tool_calls")),
        (
            None,
            {
                "id": "chatcmpl-1",
                "model": "gpt-test",
                "choices": [],
                "usage": {
                    "prompt_tokens": 100,
                    "completion_tokens": 30,
                    "prompt_tokens_details": {"cached_tokens": 64},
                    "completion_tokens_details": {"reasoning_tokens": 12},
                },
            },
        ),
        (None, "[DONE]"),
    )
    request = LLMRequest(
        messages=[
            SystemMessage("be brief"),
            UserMessage(
                [
                    TextPart("what is this?"),
                    ImagePart(url="data:image/png;base64,iVBORw0", detail="low"),
                ]
            ),
            AssistantMessage(tool_calls=[ToolCall(id="c0", name="weather", arguments="{}")]),
            ToolResultMessage(tool_call_id="c0", content='{"temp": 3}'),
        ],
        tools=[WEATHER],
        tool_choice=ToolChoice.tool("weather"),
        response_format=ResponseFormat(name="answer", schema={"type": "object"}),
        max_tokens=50,
        temperature=0.2,
        stop=["END"],
    )
    with ScriptedHTTPServer([sse_reply(stream)]) as server:
        async with _openai(server) as transport, transport.stream(request) as s:
            deltas = [d async for d in s]
            response = await s.final_response()
    fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert len(fragments) == 5
    assert response.tool_calls == (
        ToolCall(id="call_a", name="weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="call_b", name="weather", arguments='{"city": "Rome"}'),
    )
    assert response.finish_reason == "tool_calls"
    assert response.usage == Usage(
        prompt_tokens=100, completion_tokens=30, cached_tokens=64, reasoning_tokens=12
    )
    assert response.model == "gpt-test"
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.json()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0", "detail": "low"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": '{"temp": 3}'},
    ]
    assert (body["max_tokens"], body["temperature"], body["stop"]) == (50, 0.2, ["END"])


async def test_openai_complete_with_tool_calls() -> None:
    """A non-streamed answer with two tool calls and usage details."""
    body = {
        "id": "x",
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"A"}'},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"B"}'},
                        },
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
    }
    with ScriptedHTTPServer([json_reply(200, body)]) as server:
        async with _openai(server) as transport:
            response = await transport.complete(REQUEST)
    assert [c.id for c in response.tool_calls] == ["a", "b"]
    assert response.tool_calls[1].arguments == '{"city":"B"}'
    assert (response.finish_reason, response.content) == ("tool_calls", "")
    assert response.usage == Usage(prompt_tokens=9, completion_tokens=4, cached_tokens=8)
    assert "stream" not in server.requests[0].json()


# --- retries -----------------------------------------------------------------------------


async def test_429_with_retry_after_is_honoured() -> None:
    """A 429 is retried after exactly the Retry-After the server asked for."""
    attempts: list[Attempt] = []
    with ScriptedHTTPServer(
        [
            json_reply(
                429,
                {"error": {"message": "slow down", "type": "rate_limit"}},
                [("retry-after", "0.2")],
            ),
            json_reply(200, OK_BODY),
        ]
    ) as server:
        async with _openai(server, attempts) as transport:
            start = trio.current_time()
            response = await transport.complete(REQUEST)
            waited = trio.current_time() - start
    assert response.content == "hello"
    assert [(a.number, a.error_code, a.status, a.next_delay) for a in attempts] == [
        (1, "llm.rate_limited", 429, 0.2),
        (2, None, None, None),
    ]
    assert attempts[0].error_message == "openai: HTTP 429: slow down"
    assert waited >= 0.2
    assert len(server.requests) == 2


async def test_500_then_success_backs_off() -> None:
    """A 500 is retried after the computed backoff; the second attempt succeeds."""
    attempts: list[Attempt] = []
    with ScriptedHTTPServer(
        [
            json_reply(500, {"error": {"message": "boom"}}),
            json_reply(503, {"error": {"message": "busy"}}),
            json_reply(200, OK_BODY),
        ]
    ) as server:
        async with _openai(server, attempts) as transport:
            response = await transport.complete(REQUEST)
    assert response.content == "hello"
    assert [(a.error_code, a.status, a.next_delay) for a in attempts] == [
        ("llm.server", 500, 0.01),
        ("llm.server", 503, 0.02),
        (None, None, None),
    ]


async def test_retries_exhausted_raise_the_last_error() -> None:
    """After max_attempts failures the last error is raised and no more requests are sent."""
    attempts: list[Attempt] = []
    with ScriptedHTTPServer([json_reply(502, {"error": {"message": "bad gateway"}})] * 3) as server:
        async with _openai(server, attempts) as transport:
            with pytest.raises(LLMServerError) as info:
                await transport.complete(REQUEST)
    assert info.value.code == "llm.server"
    assert info.value.status == 502
    assert str(info.value) == "openai: HTTP 502: bad gateway"
    assert [a.next_delay for a in attempts] == [0.01, 0.02, None]
    assert len(server.requests) == 3


async def test_deadline_stops_retries() -> None:
    """No retry starts when its wait would pass the total deadline."""
    attempts: list[Attempt] = []
    retry = RetryPolicy(max_attempts=5, deadline=1.0)
    with ScriptedHTTPServer(
        [
            json_reply(429, {"error": {"message": "later"}}, [("retry-after", "30")]),
        ]
    ) as server:
        async with _openai(server, attempts, retry=retry) as transport:
            with pytest.raises(LLMRateLimitedError) as info:
                await transport.complete(REQUEST)
    assert (info.value.code, info.value.retry_after) == ("llm.rate_limited", 30.0)
    assert [(a.error_code, a.next_delay) for a in attempts] == [("llm.rate_limited", None)]


@pytest.mark.parametrize(
    ("status", "body", "cls", "code", "message"),
    [
        (
            401,
            {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}},
            LLMAuthError,
            "llm.auth",
            "openai: HTTP 401: Incorrect API key (check the API key: POWERTRIO_API_KEY or "
            "the provider's own variable)",
        ),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens",
                    "code": "context_length_exceeded",
                }
            },
            LLMContextOverflowError,
            "llm.context_overflow",
            "openai: HTTP 400: This model's maximum context length is 8192 tokens",
        ),
        (
            400,
            {"error": {"message": "temperature must be <= 2", "type": "invalid_request"}},
            LLMBadRequestError,
            "llm.bad_request",
            "openai: HTTP 400: temperature must be <= 2",
        ),
        (
            404,
            {"error": {"message": "no such model"}},
            LLMBadRequestError,
            "llm.bad_request",
            "openai: HTTP 404: no such model",
        ),
    ],
)
async def test_4xx_is_typed_and_never_retried(
    status: int, body: object, cls: type[Exception], code: str, message: str
) -> None:
    """401, 400 (incl. context overflow) and 404 map to their class and are tried once."""
    attempts: list[Attempt] = []
    with ScriptedHTTPServer([json_reply(status, body)]) as server:
        async with _openai(server, attempts) as transport:
            with pytest.raises(cls) as info:
                await transport.complete(REQUEST)
    assert type(info.value) is cls
    assert getattr(info.value, "code") == code  # noqa: B009
    assert str(info.value) == message
    assert len(server.requests) == 1
    assert [(a.error_code, a.next_delay) for a in attempts] == [(code, None)]


async def test_connection_refused_is_retried_then_typed() -> None:
    """Nothing listening: each attempt is an llm.connection error, retried, then raised."""
    attempts: list[Attempt] = []
    with ScriptedHTTPServer() as server:
        url = server.url
    config = ProviderConfig(
        provider="openai",
        base_url=url,
        model="m",
        retry=RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0.0),
    )
    async with OpenAITransport(config, on_attempt=attempts.append) as transport:
        with pytest.raises(LLMConnectionError) as info:
            await transport.complete(REQUEST)
    assert info.value.code == "llm.connection"
    assert str(info.value).startswith("openai: cannot reach the provider: ")
    assert isinstance(info.value.__cause__, Exception)
    assert [(a.error_code, a.next_delay) for a in attempts] == [
        ("llm.connection", 0.01),
        ("llm.connection", None),
    ]


async def test_read_timeout_is_typed() -> None:
    """A server silent past the read timeout gives llm.timeout with phase 'read'."""
    with ScriptedHTTPServer([Reply(head_delay=1.0)]) as server:
        transport = _openai(server, retry=RetryPolicy(max_attempts=1), timeouts=Timeouts(read=0.2))
        async with transport:
            with pytest.raises(LLMTimeoutError) as info:
                await transport.complete(REQUEST)
    assert (info.value.code, info.value.phase) == ("llm.timeout", "read")
    assert str(info.value).startswith("openai: read timeout: ")


async def test_total_timeout_is_typed() -> None:
    """A body trickling in past the per-attempt total gives llm.timeout, phase 'total'."""
    reply = Reply(
        headers=[("content-type", "application/json")],
        chunks=[b"{", b'"a"', b":", b"1", b"}"],
        delay=0.15,
    )
    with ScriptedHTTPServer([reply]) as server:
        transport = _openai(server, retry=RetryPolicy(max_attempts=1), timeouts=Timeouts(total=0.3))
        async with transport:
            with pytest.raises(LLMTimeoutError) as info:
                await transport.complete(REQUEST)
    assert (info.value.code, info.value.phase) == ("llm.timeout", "total")
    assert str(info.value) == "openai: no complete answer within 0.3 s"


# --- broken streams ----------------------------------------------------------------------


async def test_stream_cut_mid_event_chunked() -> None:
    """The connection drops inside a chunked body, mid-event: llm.malformed_stream."""
    first = sse((None, _chunk({"content": "Hel"})))
    half = b'data: {"id": "chatcmpl-1", "choi'
    with ScriptedHTTPServer([sse_reply(first, half, cut=True)]) as server:
        async with _openai(server) as transport, transport.stream(REQUEST) as s:
            seen = []
            with pytest.raises(LLMMalformedStreamError) as info:
                async for delta in s:
                    seen.append(delta)
    assert seen == [TextDelta("Hel")]
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value).startswith("openai: the stream was cut before it was complete: ")


async def test_stream_ending_without_done_is_malformed() -> None:
    """A close-delimited stream that stops mid-event (no [DONE]) is llm.malformed_stream."""
    body = sse((None, _chunk({"content": "Hel"}))) + b'data: {"id": "x'
    with ScriptedHTTPServer([sse_reply(body, chunked=False)]) as server:
        async with _openai(server) as transport, transport.stream(REQUEST) as s:
            with pytest.raises(LLMMalformedStreamError) as info:
                await s.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == "openai: the stream ended before its final event"


async def test_malformed_json_in_event() -> None:
    """An SSE event whose data is not JSON is llm.malformed_stream, naming the problem."""
    body = sse((None, _chunk({"content": "ok"})), (None, "{not json"), (None, "[DONE]"))
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        async with _openai(server) as transport, transport.stream(REQUEST) as s:
            with pytest.raises(LLMMalformedStreamError) as info:
                await s.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value).startswith("openai: a stream event is not valid JSON: ")


async def test_stream_429_is_retried_before_first_event() -> None:
    """Opening a stream is retried like a plain call."""
    attempts: list[Attempt] = []
    body = sse((None, _chunk({"content": "hi"}, finish="stop")), (None, "[DONE]"))
    with ScriptedHTTPServer(
        [
            json_reply(429, {"error": {"message": "wait"}}, [("retry-after", "0")]),
            sse_reply(body),
        ]
    ) as server:
        async with _openai(server, attempts) as transport, transport.stream(REQUEST) as s:
            response = await s.final_response()
    assert response.content == "hi"
    assert [(a.error_code, a.next_delay) for a in attempts] == [
        ("llm.rate_limited", 0.0),
        (None, None),
    ]


async def test_cancel_closes_the_connection_promptly() -> None:
    """Cancelling the consumer mid-stream closes the socket: the server sees the hang-up."""
    body = sse((None, _chunk({"content": "a"})), (None, _chunk({"content": "b"})))
    drip = b": keep-alive\n\n"
    with ScriptedHTTPServer([sse_reply(body, drip=drip)]) as server:
        async with _openai(server) as transport:
            with trio.move_on_after(30) as scope:
                async with transport.stream(REQUEST) as s:
                    async for delta in s:
                        if delta == TextDelta("b"):
                            scope.cancel()
            assert scope.cancelled_caught
            assert await trio.to_thread.run_sync(server.hung_up.wait, 5.0)


# --- Anthropic -------------------------------------------------------------------------


ANTHROPIC_STREAM = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-test",
                "stop_reason": None,
                "usage": {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 200,
                    "cache_creation_input_tokens": 50,
                    "output_tokens": 1,
                },
            },
        },
    ),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "check."},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "sig=="},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("ping", {"type": "ping"}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Checking."},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"city":'},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ' "Oslo"}'},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 3}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 42},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
)


async def test_anthropic_stream_tools_thinking_and_cache_usage() -> None:
    """Thinking (with signature), text and two tool uses assemble; cache usage is counted."""
    request = LLMRequest(
        messages=[
            SystemMessage("You are terse."),
            UserMessage("weather?"),
            AssistantMessage(
                content="Looking.",
                tool_calls=[ToolCall(id="t0", name="weather", arguments='{"city": "Rome"}')],
                thinking=[ThinkingBlock(thinking="hmm", signature="s0")],
            ),
            ToolResultMessage(tool_call_id="t0", content="sunny"),
            UserMessage("and Oslo?"),
        ],
        tools=[WEATHER],
        tool_choice=ToolChoice.required(),
        thinking_budget=1024,
    )
    with ScriptedHTTPServer([sse_reply(ANTHROPIC_STREAM)]) as server:
        async with _anthropic(server) as transport, transport.stream(request) as s:
            response = await s.final_response()
    assert response.content == "Checking."
    assert response.thinking == (ThinkingBlock(thinking="Let me check.", signature="sig=="),)
    assert response.tool_calls == (
        ToolCall(id="toolu_1", name="weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="toolu_2", name="now", arguments="{}"),
    )
    assert response.finish_reason == "tool_calls"
    assert response.usage == Usage(
        prompt_tokens=260, completion_tokens=42, cached_tokens=200, cache_write_tokens=50
    )
    assert (response.model, response.id) == ("claude-test", "msg_1")
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = sent.json()
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": ephemeral}
    ]
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "Weather for a city.",
            "input_schema": WEATHER.parameters,
            "cache_control": ephemeral,
        }
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 4096
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s0"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t0", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t0", "content": "sunny", "is_error": False},
                {"type": "text", "text": "and Oslo?", "cache_control": ephemeral},
            ],
        },
    ]


async def test_anthropic_complete() -> None:
    """A non-streamed Messages answer with thinking, text and a tool use."""
    body = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "On it."},
            {"type": "tool_use", "id": "toolu_9", "name": "weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 7, "cache_read_input_tokens": 100},
    }
    with ScriptedHTTPServer([json_reply(200, body)]) as server:
        async with _anthropic(server) as transport:
            response = await transport.complete(REQUEST)
    assert response.thinking == (ThinkingBlock(thinking="opaque", redacted=True),)
    assert response.content == "On it."
    assert response.tool_calls == (
        ToolCall(id="toolu_9", name="weather", arguments='{"city":"Oslo"}'),
    )
    assert response.usage == Usage(prompt_tokens=103, completion_tokens=7, cached_tokens=100)
    assert response.finish_reason == "tool_calls"


async def test_anthropic_sends_arguments_nested_too_deep_as_raw_text() -> None:
    """A call whose arguments nest past the tools' limit (refused as invalid arguments)
    goes back as its raw text, since the body could not encode it as an object."""
    deep = '{"a": ' + "[" * 300 + "]" * 300 + "}"
    request = LLMRequest(
        messages=[
            UserMessage("nest"),
            AssistantMessage(tool_calls=[ToolCall(id="t0", name="weather", arguments=deep)]),
            ToolResultMessage(tool_call_id="t0", content="invalid", is_error=True),
        ],
        max_tokens=16,
    )
    body = {
        "id": "msg_3",
        "type": "message",
        "model": "claude-test",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    with ScriptedHTTPServer([json_reply(200, body)]) as server:
        async with _anthropic(server) as transport:
            response = await transport.complete(request)
    assert response.content == "ok"
    (use,) = server.requests[0].json()["messages"][1]["content"]
    assert use == {
        "type": "tool_use",
        "id": "t0",
        "name": "weather",
        "input": {"_raw_arguments": deep},
    }


async def test_anthropic_error_event_in_stream() -> None:
    """An `error` event mid-stream raises the mapped class (overloaded -> llm.server)."""
    body = sse(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "m", "model": "claude-test", "usage": {"input_tokens": 1}},
            },
        ),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        async with _anthropic(server) as transport, transport.stream(REQUEST) as s:
            with pytest.raises(LLMServerError) as info:
                await s.final_response()
    assert info.value.code == "llm.server"
    assert str(info.value) == (
        "anthropic: error event in the stream (overloaded_error): Overloaded"
    )


async def test_anthropic_context_overflow() -> None:
    """Anthropic's 'prompt is too long' 400 is llm.context_overflow."""
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000",
        },
    }
    with ScriptedHTTPServer([json_reply(400, body)]) as server:
        async with _anthropic(server) as transport:
            with pytest.raises(LLMContextOverflowError) as info:
                await transport.complete(REQUEST)
    assert info.value.code == "llm.context_overflow"
    assert str(info.value) == "anthropic: HTTP 400: prompt is too long: 210000 tokens > 200000"


async def test_anthropic_rejects_response_format() -> None:
    """response_format has no Messages equivalent here: a bad request before any I/O."""
    request = LLMRequest(
        messages=[UserMessage("x")], response_format=ResponseFormat(name="a", schema={})
    )
    with ScriptedHTTPServer() as server:
        async with _anthropic(server) as transport:
            with pytest.raises(LLMBadRequestError) as info:
                await transport.complete(request)
        assert server.requests == []
    assert info.value.code == "llm.bad_request"
    assert "response_format is not supported" in str(info.value)


# --- secrets ---------------------------------------------------------------------------


async def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    """With a failing call, the key is in no log record, attempt, exception text or repr."""
    caplog.set_level(logging.DEBUG)
    attempts: list[Attempt] = []
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}
    with ScriptedHTTPServer(
        [
            json_reply(500, {"error": {"message": f"upstream refused {KEY}"}}),
            json_reply(401, echo),
        ]
    ) as server:
        transport = _openai(server, attempts)
        async with transport:
            with pytest.raises(LLMAuthError) as info:
                await transport.complete(REQUEST)
            texts = [repr(transport), repr(transport.config), str(transport.config)]
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    error = info.value
    texts += [str(error), repr(error), repr(attempts)]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    cause = error.__cause__ or error.__context__
    while cause is not None:
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    assert len(attempts) == 2
    assert caplog.records
    for text in texts:
        assert KEY not in text
    assert str(error).startswith("openai: HTTP 401: Incorrect API key provided: ***")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_request_holding_a_view_sends_the_same_body(
    provider: Literal["openai", "anthropic"],
) -> None:
    """A session's request holds a view of its transcript, not a copy: the transports
    build the same HTTP body from it as from the tuple of the same messages."""
    config = ProviderConfig(
        provider=provider, base_url="http://127.0.0.1:9", model="m", api_key=KEY
    )
    transport = (OpenAITransport if provider == "openai" else AnthropicTransport)(config)
    buffer: list[Message] = [
        UserMessage("older"),
        UserMessage("What is the weather?"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="weather", arguments="{}"),)),
        ToolResultMessage(tool_call_id="c1", content="sunny"),
        UserMessage("not yet sent"),
    ]
    lead = (SystemMessage("Be brief."),)
    view = MessageView(buffer, 1, 4).prefixed(lead)
    copied: tuple[Message, ...] = (*lead, *buffer[1:4])
    with_view = transport._build(LLMRequest(messages=view, max_tokens=50), stream=False)
    with_tuple = transport._build(LLMRequest(messages=copied, max_tokens=50), stream=False)
    assert with_view.content == with_tuple.content
    assert b"not yet sent" not in with_view.content and b"older" not in with_view.content


async def test_headers_sent_with_every_call() -> None:
    """Key, extra headers and content type go with both calls; only a stream asks for SSE."""
    body = sse((None, _chunk({"content": "hi"}, finish="stop")), (None, "[DONE]"))
    replies = [json_reply(200, OK_BODY), sse_reply(body), json_reply(200, OK_BODY)]
    with ScriptedHTTPServer(replies) as server:
        config = ProviderConfig(
            provider="openai",
            base_url=server.url + "/v1",
            model="gpt-test",
            api_key=KEY,
            extra_headers=(("openai-organization", "org-1"),),
        )
        async with OpenAITransport(config) as transport:
            await transport.complete(REQUEST)
            async with transport.stream(REQUEST) as stream:
                await stream.final_response()
            await transport.complete(REQUEST)
    seen = [
        (
            r.path,
            r.headers["authorization"],
            r.headers["openai-organization"],
            r.headers["content-type"],
            r.headers.get("accept"),
        )
        for r in server.requests
    ]
    plain = ("/v1/chat/completions", f"Bearer {KEY}", "org-1", "application/json", "*/*")
    assert seen == [plain, (*plain[:4], "text/event-stream"), plain]


@pytest.mark.parametrize("call", ["complete", "stream"])
async def test_retry_deadline_before_the_attempt_timeout_bounds_a_slow_answer(call: str) -> None:
    """With the policy's deadline shorter than an attempt's total timeout, it is the bound."""
    with ScriptedHTTPServer([Reply(head_delay=1.5)]) as server:
        transport = _openai(server, retry=RetryPolicy(deadline=0.3), timeouts=Timeouts(total=60))
        start = trio.current_time()
        async with transport:
            with pytest.raises(LLMTimeoutError) as info:
                if call == "complete":
                    await transport.complete(REQUEST)
                else:
                    async with transport.stream(REQUEST) as stream:
                        await stream.final_response()
        took = trio.current_time() - start
    assert (info.value.code, info.value.phase) == ("llm.timeout", "total")
    assert str(info.value) == (
        "openai: no answer within the 0.3 s deadline for all attempts (1 started)"
    )
    assert 0.3 <= took < 1.2


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_is_the_clients_own_without_its_merge_per_call(
    provider: Literal["openai", "anthropic"], stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport makes its requests' headers once, not through the client's merge on
    every call (most of a request's cost before it left), and each request is the one the
    client's ``build_request`` makes: its headers, changed after the transport was made,
    go with it; so do cookies and query parameters, for which the client builds it."""
    config = ProviderConfig(
        provider=provider,
        base_url="http://127.0.0.1:9",
        model="m",
        api_key=KEY,
        extra_headers=(("x-team", "blue"),),
    )
    async with open_http_client() as client:
        transport = (OpenAITransport if provider == "openai" else AnthropicTransport)(
            config, client=client
        )
        build_request = client.build_request
        merged: list[str] = []

        def counting(*args: Any, **kwargs: Any) -> httpx.Request:
            merged.append(str(args[1]))
            return build_request(*args, **kwargs)

        monkeypatch.setattr(client, "build_request", counting)

        def shape(request: httpx.Request) -> tuple[object, ...]:
            return (
                request.method,
                str(request.url),
                request.headers.multi_items(),
                request.content,
                request.extensions,
            )

        def check() -> None:
            built = transport._build(REQUEST, stream=stream)
            content = orjson.dumps(transport._body(REQUEST, stream=stream))
            headers = transport._stream_headers if stream else transport._plain_headers
            expected = build_request(
                "POST",
                transport._url,
                content=content,
                headers=headers,
                extensions={"timeout": config.timeouts.to_httpx().as_dict()},
            )
            assert shape(built) == shape(expected)

        check()
        check()
        client.headers["x-proxy"] = "hop-1"
        check()
        assert merged == []
        client.cookies.set("__cf_bm", "token", domain="127.0.0.1")
        check()
        assert "__cf_bm=token" in transport._build(REQUEST, stream=stream).headers["cookie"]
        client.cookies.clear()
        client.params = httpx.QueryParams({"api-version": "1"})
        check()
        assert transport._build(REQUEST, stream=stream).url.params["api-version"] == "1"
        assert len(merged) == 4
