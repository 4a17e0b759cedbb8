"""One big streamed event: CPU seconds to read it through a transport, beside the raw bytes.

A model that writes a long answer, or a tool call with large arguments, can put megabytes
into one SSE event. Reading it must cost CPU in proportion to its bytes, whatever its size:
a parser that rescans what it holds at every network read costs the square of the size, and
its idle timeout fires while it is still busy. Each figure streams one OpenAI-style event of
8, 16, 33 and 50 MB, in 64 KiB reads (about what a socket hands over), from an in-process
httpx ``MockTransport``, and reports the CPU seconds of the whole stream through
``OpenAITransport.stream``, beside the same bytes read raw from the same client and decoded
with one ``orjson.loads`` of the payload (the floor: every byte read once, parsed once).
The ratio should stay flat as the size grows.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator

import httpx
import orjson
import trio

from protocols import LLMRequest, UserMessage
from protocols.transports import OpenAITransport, ProviderConfig, RetryPolicy, Timeouts

_READ = 65536
"""Bytes per network read of the fake provider."""

_SIZES_MB = (8, 16, 33, 50)


def _body(size: int) -> tuple[bytes, bytes]:
    """A stream whose one content event is about ``size`` bytes, and that event's payload."""
    payload = orjson.dumps(
        {
            "id": "c",
            "model": "bench",
            "choices": [{"index": 0, "delta": {"content": "x" * size}, "finish_reason": None}],
        }
    )
    end = b'{"id":"c","model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
    return b"data: " + payload + b"\n\ndata: " + end + b"\n\ndata: [DONE]\n\n", payload


class _Chunks(httpx.AsyncByteStream):
    """The body in fixed reads, with a checkpoint between them as a socket would have."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        view = memoryview(self._body)
        for start in range(0, len(view), _READ):
            await trio.lowlevel.checkpoint()
            yield bytes(view[start : start + _READ])


def _client(body: bytes) -> httpx.AsyncClient:
    def reply(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Chunks(body)
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(reply))


async def _transport_cpu(body: bytes, size: int) -> float:
    """CPU seconds to stream ``body`` through the transport; checks the answer's length."""
    config = ProviderConfig(
        provider="openai",
        base_url="http://bench.invalid/v1",
        model="bench",
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(idle=600.0, total=3600.0),
    )
    request = LLMRequest(messages=[UserMessage("write")], max_tokens=16)
    async with _client(body) as client:
        transport = OpenAITransport(config, client=client)
        start = time.process_time()
        async with transport.stream(request) as stream:
            response = await stream.final_response()
        took = time.process_time() - start
    assert len(response.content) == size
    return took


async def _raw_cpu(body: bytes, payload: bytes) -> float:
    """CPU seconds to read the same bytes raw and parse the event's payload once."""
    async with _client(body) as client:
        start = time.process_time()
        async with client.stream("POST", "http://bench.invalid/v1") as response:
            chunks = [chunk async for chunk in response.aiter_raw()]
        data = b"".join(chunks)
        orjson.loads(data[len(b"data: ") : len(b"data: ") + len(payload)])
        return time.process_time() - start


async def _measure(sizes: tuple[int, ...]) -> dict[str, float | int | str]:
    figures: dict[str, float | int | str] = {}
    for mb in sizes:
        body, payload = _body(mb * 1_000_000)
        raw = await _raw_cpu(body, payload)
        ours = await _transport_cpu(body, mb * 1_000_000)
        figures[f"sse_event_{mb}mb_cpu_s"] = ours
        figures[f"sse_event_{mb}mb_raw_cpu_s"] = raw
        figures[f"sse_event_{mb}mb_ratio"] = ours / raw if raw > 0 else float("inf")
    return figures


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """Run the suite: ``--quick`` streams 8 and 16 MB only."""
    sizes = _SIZES_MB[:2] if getattr(args, "quick", False) else _SIZES_MB
    return trio.run(_measure, sizes)


__all__ = ["run"]
