"""Reading SSE bodies: the decoder cut anywhere, compressed bodies, and connection reuse."""

from __future__ import annotations

import gzip
import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trio
from _scripted_http import ScriptedHTTPServer, sse, sse_reply
from hypothesis import given
from hypothesis import strategies as st

from protocols import LLMRequest, UserMessage
from protocols.streaming import TextDelta
from protocols.transports import (
    AnthropicTransport,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    ServerSentEvent,
)
from protocols.transports._sse import SSEDecoder

REQUEST = LLMRequest(messages=[UserMessage("hi")], max_tokens=16)

#: Every line ending, comments, a multi-byte character, a field with no space, an unknown
#: field, an id, a retry, and an unfinished event at the end.
BODY = (
    "\ufeff: hello\r\n"
    "event: a\r\n"
    "data: één\r\n"
    "data:two\r"
    "id: 7\n"
    "\n"
    "\r\n"
    'data: {"x": 1}\n'
    "retry: 10\n"
    "what: ever\n"
    "\r"
    "data: cut"
).encode()
EVENTS = [
    ServerSentEvent(event="a", data="één\ntwo", id="7"),
    ServerSentEvent(data='{"x": 1}', id="7", retry=10),
]


def _decode(pieces: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(points)]


def test_decoder_reads_a_body_in_one_piece() -> None:
    """All three line endings, comments and fields; the leading BOM is dropped."""
    assert _decode([BODY]) == EVENTS


def test_decoder_reads_a_body_byte_by_byte() -> None:
    """A CRLF cut between its CR and LF ends one line, and a cut character decodes whole."""
    assert _decode([BODY[i : i + 1] for i in range(len(BODY))]) == EVENTS


@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=8))
def test_decoder_events_do_not_depend_on_where_the_body_is_cut(cuts: list[int]) -> None:
    """Any cuts give the events of the whole body."""
    assert _decode(_cut(BODY, cuts)) == EVENTS


def test_decoder_replaces_bytes_that_are_not_utf8() -> None:
    """Invalid UTF-8 becomes U+FFFD, as httpx's text decoding did."""
    assert [ServerSentEvent(data="a\ufffdb")] == _decode([b"data: a\xffb\n\n"])


def test_decoder_hands_events_out_as_it_goes() -> None:
    """Lines an iterator did not reach are parsed by the next feed, in order."""
    decoder = SSEDecoder()
    events = decoder.feed(b"data: 1\n\ndata: 2\n\ndata: 3")
    assert ServerSentEvent(data="1") == next(events)
    later = list(decoder.feed(b"\n\n"))
    assert [ServerSentEvent(data="2"), ServerSentEvent(data="3")] == later


# --- the transports reading bodies --------------------------------------------------------


def _chunk(text: str, finish: str | None = None) -> dict[str, object]:
    delta = {"content": text} if text else {}
    return {
        "id": "chatcmpl-1",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


STREAM = sse(
    (None, _chunk("Hel")),
    (None, _chunk("lo wörld")),
    (None, _chunk("", finish="stop")),
    (None, "[DONE]"),
)


def _openai(url: str) -> OpenAITransport:
    return OpenAITransport(
        ProviderConfig(
            provider="openai",
            base_url=url + "/v1",
            model="gpt-test",
            retry=RetryPolicy(max_attempts=1),
        )
    )


async def test_stream_cut_into_single_bytes() -> None:
    """The body arriving a byte at a time (every line and character cut) reads the same."""
    pieces = [STREAM[i : i + 1] for i in range(len(STREAM))]
    with ScriptedHTTPServer([sse_reply(*pieces)]) as server:
        async with _openai(server.url) as transport, transport.stream(REQUEST) as stream:
            deltas = [delta async for delta in stream]
    assert [TextDelta("Hel"), TextDelta("lo wörld")] == deltas[:2]
    assert stream.response is not None
    assert stream.response.content == "Hello wörld"


async def test_gzip_stream() -> None:
    """A compressed body is decompressed before parsing."""
    reply = sse_reply(gzip.compress(STREAM))
    reply.headers.append(("content-encoding", "gzip"))
    with ScriptedHTTPServer([reply]) as server:
        async with _openai(server.url) as transport, transport.stream(REQUEST) as stream:
            response = await stream.final_response()
    assert response.content == "Hello wörld"


async def test_a_server_talking_after_done_does_not_hold_the_stream() -> None:
    """Keep-alives after ``[DONE]`` are not waited for: leaving the stream hangs up at once."""
    with ScriptedHTTPServer([sse_reply(STREAM, drip=b": ping\n\n", drip_every=0.01)]) as server:
        async with _openai(server.url) as transport:
            with trio.fail_after(2):
                async with transport.stream(REQUEST) as stream:
                    response = await stream.final_response()
            assert response.content == "Hello wörld"
            assert await trio.to_thread.run_sync(server.hung_up.wait, 5.0)


ANTHROPIC_STREAM = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {"id": "msg_1", "model": "claude-test", "usage": {"input_tokens": 3}},
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    ("message_stop", {"type": "message_stop"}),
)


class _KeepAliveHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; records the client port of every request."""

    protocol_version = "HTTP/1.1"
    ports: list[int]

    def do_POST(self) -> None:
        self.ports.append(self.client_address[1])
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = ANTHROPIC_STREAM if self.path == "/v1/messages" else STREAM
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def keepalive_server() -> Iterator[tuple[str, list[int]]]:
    ports: list[int] = []
    handler = type("Handler", (_KeepAliveHandler,), {"ports": ports})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", ports
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_streams_read_to_the_end_reuse_their_connection(
    keepalive_server: tuple[str, list[int]], provider: str
) -> None:
    """A stream read to its terminal event gives its connection back to the pool."""
    url, ports = keepalive_server
    transport = (
        _openai(url)
        if provider == "openai"
        else AnthropicTransport(
            ProviderConfig(provider="anthropic", base_url=url, model="claude-test")
        )
    )
    async with transport:
        for _ in range(3):
            async with transport.stream(REQUEST) as stream:
                response = await stream.final_response()
            assert response.content in ("Hello wörld", "Hi")
    assert len(ports) == 3
    assert len(set(ports)) == 1


async def test_a_stream_left_early_does_not_reuse_its_connection(
    keepalive_server: tuple[str, list[int]],
) -> None:
    """Leaving before the end closes the connection (so the provider stops generating)."""
    url, ports = keepalive_server
    async with _openai(url) as transport:
        for _ in range(2):
            async with transport.stream(REQUEST) as stream:
                async for _delta in stream:
                    break
    assert len(set(ports)) == 2
