"""Reading SSE bodies: the decoder cut anywhere, compressed bodies, and connection reuse."""

from __future__ import annotations

import gzip
import itertools

from _scripted_http import ScriptedHTTPServer, sse, sse_reply
from hypothesis import given
from hypothesis import strategies as st

from protocols import LLMRequest, TextDelta, UserMessage
from protocols.transports import (
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
    "data: {\"x\": 1}\n"
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
