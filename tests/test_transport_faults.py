"""Faults stay where they happen: stalled streams, bad shapes and bad text from a provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import httpx
import orjson
import pytest
import trio
import trio.testing
from _scripted_http import Reply, ScriptedHTTPServer, json_reply, sse, sse_reply

from protocols import LLMRequest, UserMessage
from protocols.errors import LLMMalformedStreamError, LLMTimeoutError
from protocols.transports import (
    AnthropicTransport,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    Timeouts,
    Transport,
)
from protocols.transports._repair import repair_text

REQUEST = LLMRequest(messages=[UserMessage("hi")], max_tokens=16)

#: How long any one test may take before we call it a hang (the bug took over 60 s).
HANG = 5.0


def _transport(
    provider: str, server: ScriptedHTTPServer, timeouts: Timeouts
) -> OpenAITransport | AnthropicTransport:
    if provider == "openai":
        return OpenAITransport(
            ProviderConfig(
                provider="openai",
                base_url=server.url + "/v1",
                model="gpt-test",
                retry=RetryPolicy(max_attempts=1),
                timeouts=timeouts,
            )
        )
    return AnthropicTransport(
        ProviderConfig(
            provider="anthropic",
            base_url=server.url,
            model="claude-test",
            retry=RetryPolicy(max_attempts=1),
            timeouts=timeouts,
        )
    )


def _openai_chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


_ANTHROPIC_START = sse(
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
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
)

#: For each provider: the opening of a stream, and one data event that adds text.
OPENINGS: dict[str, tuple[bytes, bytes]] = {
    "openai": (
        sse((None, _openai_chunk({"role": "assistant", "content": "Hel"}))),
        sse((None, _openai_chunk({"content": "lo"}))),
    ),
    "anthropic": (
        _ANTHROPIC_START,
        sse(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "lo"},
                },
            )
        ),
    ),
}

#: What a provider sends while it keeps the connection open but says nothing.
KEEPALIVES: dict[str, list[bytes]] = {
    "openai": [b": ping\n\n"],
    "anthropic": [b": ping\n\n", sse(("ping", {"type": "ping"}))],
}


async def _stream_until_error(transport: Transport) -> tuple[LLMTimeoutError, float]:
    """Consume a stream that must fail with llm.timeout; the error and the seconds it took."""
    start = trio.current_time()
    with trio.fail_after(HANG):
        async with transport, transport.stream(REQUEST) as stream:
            with pytest.raises(LLMTimeoutError) as info:
                await stream.final_response()
            assert stream.response is None  # the partial answer is not a success
    return info.value, trio.current_time() - start


# --- 1. deadlines that hold ---------------------------------------------------------------


def _cases() -> list[tuple[str, bytes]]:
    cases = [(provider, drip) for provider, drips in KEEPALIVES.items() for drip in drips]
    # A data line that never ends: one byte at a time, and no event is ever complete.
    cases += [(provider, b" ") for provider in OPENINGS]
    return cases


@pytest.mark.parametrize(("provider", "drip"), _cases())
async def test_idle_timeout_ends_a_stalled_stream(provider: str, drip: bytes) -> None:
    """Keep-alives and trickled bytes do not count as data: the idle timeout ends the stream."""
    opening, _ = OPENINGS[provider]
    if drip == b" ":
        opening += b'data: {"type": '
    reply = sse_reply(opening, drip=drip)
    with ScriptedHTTPServer([reply]) as server:
        transport = _transport(provider, server, Timeouts(idle=0.3, total=30.0))
        error, took = await _stream_until_error(transport)
    assert (error.code, error.phase) == ("llm.timeout", "idle")
    assert str(error) == f"{provider}: no data event for 0.3 s (the stream's idle timeout)"
    assert 0.3 <= took < 2.0


@pytest.mark.parametrize("provider", list(OPENINGS))
async def test_total_timeout_covers_a_stream_that_never_ends(provider: str) -> None:
    """Data events arriving faster than the idle timeout still stop at the total deadline."""
    opening, data = OPENINGS[provider]
    reply = sse_reply(opening, drip=data)
    with ScriptedHTTPServer([reply]) as server:
        transport = _transport(provider, server, Timeouts(idle=0.3, total=0.6))
        error, took = await _stream_until_error(transport)
    assert (error.code, error.phase) == ("llm.timeout", "total")
    assert str(error) == f"{provider}: the stream ran past its 0.6 s total timeout"
    assert 0.6 <= took < 2.0


@pytest.mark.parametrize(("provider", "drip"), _cases())
async def test_total_timeout_ends_a_stalled_stream(provider: str, drip: bytes) -> None:
    """With a long idle timeout, the total deadline alone ends a stream that says nothing."""
    opening, _ = OPENINGS[provider]
    if drip == b" ":
        opening += b'data: {"type": '
    reply = sse_reply(opening, drip=drip, drip_every=0.1)
    with ScriptedHTTPServer([reply]) as server:
        transport = _transport(provider, server, Timeouts(idle=30.0, total=0.5))
        error, took = await _stream_until_error(transport)
    assert (error.code, error.phase) == ("llm.timeout", "total")
    assert str(error) == f"{provider}: the stream ran past its 0.5 s total timeout"
    assert 0.5 <= took < 2.0


@pytest.mark.parametrize("provider", list(OPENINGS))
async def test_total_timeout_covers_the_wait_for_headers(provider: str) -> None:
    """The total deadline starts with the request: slow response headers count against it."""
    with ScriptedHTTPServer([Reply(head_delay=1.5)]) as server:
        transport = _transport(provider, server, Timeouts(read=10.0, total=0.3))
        error, took = await _stream_until_error(transport)
    assert (error.code, error.phase) == ("llm.timeout", "total")
    assert str(error) == f"{provider}: no response headers within the 0.3 s total timeout"
    assert 0.3 <= took < 1.5


class _SlowBody(httpx.AsyncByteStream):
    """A body read in ``size`` pieces, one per ``every`` seconds: a slow but steady link."""

    def __init__(self, body: bytes, size: int, every: float) -> None:
        self._body, self._size, self._every = body, size, every

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), self._size):
            await trio.sleep(self._every)
            yield self._body[start : start + self._size]


async def test_a_50_mb_event_arriving_for_longer_than_the_idle_timeout_is_read_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Idle means no bytes: one 50 MB event taking 200 s to arrive (256 KiB a second) is
    read to its end with the default 60 s idle timeout, which counts its bytes as progress."""
    text = "x" * 50_000_000
    body = (
        b"data: "
        + orjson.dumps(_openai_chunk({"role": "assistant", "content": text}))
        + b"\n\ndata: "
        + orjson.dumps(_openai_chunk({}, finish="stop"))
        + b"\n\ndata: [DONE]\n\n"
    )

    def reply(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=_SlowBody(body, 262_144, 1.0),
        )

    config = ProviderConfig(
        provider="openai",
        base_url="http://provider.invalid/v1",
        model="gpt-test",
        retry=RetryPolicy(max_attempts=1),
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        transport = OpenAITransport(config, client=client)
        start = trio.current_time()
        async with transport.stream(REQUEST) as stream:
            response = await stream.final_response()
    assert trio.current_time() - start > 3 * config.timeouts.idle
    assert (len(response.content), response.finish_reason) == (50_000_000, "stop")


async def test_idle_timeout_default() -> None:
    """Streams get a 60 s idle timeout unless configured otherwise."""
    assert Timeouts().idle == 60.0


# --- 2. bad shapes are errors --------------------------------------------------------------


_USAGE_ONLY = {
    "id": "chatcmpl-1",
    "model": "gpt-test",
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 0},
}


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ([{}], "a stream chunk has no choices"),
        (
            [{"id": "chatcmpl-1", "object": "chat.completion.chunk"}],
            "a stream chunk has no choices",
        ),
        ([_USAGE_ONLY], "the stream ended without any choice"),
        ([{"id": "chatcmpl-1", "choices": [{"index": 0}]}], "a choice has no delta"),
        (
            [_openai_chunk({}), _openai_chunk({"role": "assistant"}), _USAGE_ONLY],
            "the stream ended with no text, no tool call and no finish reason",
        ),
    ],
)
async def test_openai_stream_of_the_wrong_shape(
    events: list[dict[str, object]], problem: str
) -> None:
    """Chunks without choices or deltas are llm.malformed_stream, not an empty answer."""
    body = sse(*[(None, event) for event in events], (None, "[DONE]"))
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        transport = _transport("openai", server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            with pytest.raises(LLMMalformedStreamError) as info:
                await stream.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == f"openai: {problem}"


async def test_openai_empty_answer_with_a_finish_reason_is_fine() -> None:
    """An empty text that the model ended on purpose is an answer, not a bad shape."""
    body = sse(
        (None, _openai_chunk({"role": "assistant", "content": ""})),
        (None, _openai_chunk({}, finish="stop")),
        (None, _USAGE_ONLY),
        (None, "[DONE]"),
    )
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        transport = _transport("openai", server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            response = await stream.final_response()
    assert (response.content, response.finish_reason) == ("", "stop")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "the answer has no choices"),
        ({"id": "x", "choices": []}, "the answer has no choices"),
        ({"id": "x", "choices": [{"index": 0}]}, "a choice has no message"),
        (
            {"id": "x", "choices": [{"index": 0, "message": {"role": "assistant"}}]},
            "the answer has no text, no tool call and no finish reason",
        ),
    ],
)
async def test_openai_answer_of_the_wrong_shape(body: dict[str, object], problem: str) -> None:
    """A non-streamed answer without choices or a message is llm.malformed_stream."""
    with ScriptedHTTPServer([json_reply(200, body)]) as server:
        transport = _transport("openai", server, Timeouts())
        async with transport:
            with pytest.raises(LLMMalformedStreamError) as info:
                await transport.complete(REQUEST)
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == f"openai: {problem}"


_MESSAGE_STOP = ("message_stop", {"type": "message_stop"})


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ([_MESSAGE_STOP], "the stream has no message_start event"),
        ([("message", {}), _MESSAGE_STOP], "the stream has no message_start event"),
        (
            [
                (
                    "message_start",
                    {"type": "message_start", "message": {"id": "msg_1", "usage": {}}},
                ),
                _MESSAGE_STOP,
            ],
            "the stream ended with no content block and no stop reason",
        ),
    ],
)
async def test_anthropic_stream_of_the_wrong_shape(
    events: list[tuple[str, object]], problem: str
) -> None:
    """A Messages stream without its opening or without any content is llm.malformed_stream."""
    with ScriptedHTTPServer([sse_reply(sse(*events))]) as server:
        transport = _transport("anthropic", server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            with pytest.raises(LLMMalformedStreamError) as info:
                await stream.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == f"anthropic: {problem}"


async def test_anthropic_stream_without_message_stop() -> None:
    """A Messages stream that ends without message_stop is llm.malformed_stream."""
    opening, data = OPENINGS["anthropic"]
    with ScriptedHTTPServer([sse_reply(opening, data)]) as server:
        transport = _transport("anthropic", server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            with pytest.raises(LLMMalformedStreamError) as info:
                await stream.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == "anthropic: the stream ended before its final event"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "the answer has no content"),
        (
            {"id": "msg_1", "type": "message", "content": []},
            "the answer has no content block and no stop reason",
        ),
    ],
)
async def test_anthropic_answer_of_the_wrong_shape(body: dict[str, object], problem: str) -> None:
    """A non-streamed Messages answer without content is llm.malformed_stream."""
    with ScriptedHTTPServer([json_reply(200, body)]) as server:
        transport = _transport("anthropic", server, Timeouts())
        async with transport:
            with pytest.raises(LLMMalformedStreamError) as info:
                await transport.complete(REQUEST)
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == f"anthropic: {problem}"


# --- 4. lone surrogates from the model -----------------------------------------------------

# Raw bytes: orjson cannot write a lone surrogate, which is the point. `\\ud800` is a JSON
# escape of a lone high surrogate; inside `arguments` it lands in the arguments' text.
_OPENAI_SURROGATES = (
    b'data: {"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "delta": '
    b'{"role": "assistant", "content": "a\\ud800b"}}]}\n\n'
    b'data: {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
    b'"id": "call_1", "type": "function", "function": {"name": "echo", '
    b'"arguments": "{\\"text\\": \\"x\\udc00y\\"}"}}]}}]}\n\n'
    b'data: {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}'
    b"\n\n"
    b"data: [DONE]\n\n"
)
_ANTHROPIC_SURROGATES = _ANTHROPIC_START + (
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
    b'"delta": {"type": "text_delta", "text": "a\\ud800b"}}\n\n'
    b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
    b'event: content_block_start\ndata: {"type": "content_block_start", "index": 1, '
    b'"content_block": {"type": "tool_use", "id": "call_1", "name": "echo", "input": {}}}\n\n'
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 1, '
    b'"delta": {"type": "input_json_delta", "partial_json": "{\\"text\\": \\"x\\udc00y\\"}"}}'
    b"\n\n"
    b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 1}\n\n'
    b'event: message_delta\ndata: {"type": "message_delta", "delta": '
    b'{"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}\n\n'
    b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
)


@pytest.mark.parametrize(
    ("provider", "body"),
    [
        ("openai", _OPENAI_SURROGATES),
        ("anthropic", _ANTHROPIC_SURROGATES),
    ],
)
async def test_lone_surrogates_in_a_stream_become_replacement_characters(
    provider: str, body: bytes
) -> None:
    """Text and arguments with lone surrogates are repaired, flagged, and encode as JSON."""
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        transport = _transport(provider, server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            deltas = [delta async for delta in stream]
            response = await stream.final_response()
    assert response.content == "a\ufffdb"
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("echo", '{"text": "x\ufffdy"}')
    ]
    assert response.invalid_text_replaced
    orjson.dumps(attrs.asdict(response))
    orjson.dumps([attrs.asdict(delta) for delta in deltas])
    assert orjson.loads(response.tool_calls[0].arguments) == {"text": "x\ufffdy"}


@pytest.mark.parametrize(
    ("provider", "body"),
    [
        (
            "openai",
            b'{"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "message": '
            b'{"role": "assistant", "content": "a\\ud800b"}, "finish_reason": "stop"}]}',
        ),
        (
            "anthropic",
            b'{"id": "msg_1", "type": "message", "model": "claude-test", "content": '
            b'[{"type": "text", "text": "a\\ud800b"}], "stop_reason": "end_turn"}',
        ),
        (  # a surrogate encoded as UTF-8 bytes, which the stdlib parser lets through
            "openai",
            b'{"id": "c1", "model": "gpt-test", "choices": [{"index": 0, "message": '
            b'{"role": "assistant", "content": "a\xed\xa0\x80b"}, "finish_reason": "stop"}]}',
        ),
    ],
)
async def test_lone_surrogates_in_an_answer_become_replacement_characters(
    provider: str, body: bytes
) -> None:
    """A non-streamed answer with a lone surrogate is repaired and flagged too."""
    reply = Reply(headers=[("content-type", "application/json")], chunks=[body], chunked=False)
    with ScriptedHTTPServer([reply]) as server:
        transport = _transport(provider, server, Timeouts())
        async with transport:
            response = await transport.complete(REQUEST)
    assert (response.content, response.invalid_text_replaced) == ("a\ufffdb", True)
    orjson.dumps(attrs.asdict(response))


async def test_valid_text_is_not_flagged() -> None:
    """Answers without bad text keep the flag off (and astral characters stay as they are)."""
    body = sse(
        (None, _openai_chunk({"content": "snow \u2603 and \U0001f600"}, finish="stop")),
        (None, "[DONE]"),
    )
    with ScriptedHTTPServer([sse_reply(body)]) as server:
        transport = _transport("openai", server, Timeouts())
        async with transport, transport.stream(REQUEST) as stream:
            response = await stream.final_response()
    assert (response.content, response.invalid_text_replaced) == (
        "snow \u2603 and \U0001f600",
        False,
    )


def test_repair_text_joins_pairs_and_replaces_lone_halves() -> None:
    """A pair split over two escapes becomes its character; lone halves become U+FFFD."""
    assert repair_text("\ud83d\ude00 \ud800x\udc00") == "\U0001f600 \ufffdx\ufffd"
    text = "fine \u2603"
    assert repair_text(text) is text
