"""Provider transports: time to first token and call latency, beside bare httpx in the same run.

Against a local canned OpenAI-compatible server on loopback, three ways of getting the first
token: bare httpx (the physical baseline), the transport (request building, retries
wrapper, SSE parsing, delta assembly), and a session actor using the transport (the send,
the ``RunStarted`` append, the step, and the delta's trip through the observer bus). The
ratios are our overhead per call relative to the baseline.

All three measure the same thing: from the start of the call to the first token, on a
stream then read to its end (as a session reads it, so its connection goes back to the
pool). Each has its own client, so one that closes its connection does not decide whether
the next gets a warm one, and the calls take turns in a rotating order with a settle
between them, so work one call leaves behind is not billed to the same neighbour.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import trio
import trio.testing

from actors import spawn_session
from actors.events import DeltaReceived, RunEnded
from protocols import LLMRequest, TextDelta, UserMessage
from protocols.transports import OpenAITransport, ProviderConfig, open_http_client
from runtime import open_runtime, open_sqlite_store

_CHUNK = {
    "id": "c",
    "model": "bench",
    "choices": [{"index": 0, "delta": {"content": "tok"}, "finish_reason": None}],
}
_STREAM = (
    b"".join(b"data: " + orjson.dumps(_CHUNK) + b"\n\n" for _ in range(20))
    + b'data: {"id":"c","model":"bench","choices":[{"index":0,"delta":{},'
    b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
_BODY = orjson.dumps(
    {
        "id": "c",
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "tok" * 20},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 20},
    }
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One buffered write per response and no Nagle: otherwise delayed ACKs add ~40 ms to
    # every call and drown what we measure.
    wbufsize = 65536
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        request = orjson.loads(self.rfile.read(length))
        stream = bool(request.get("stream"))
        payload = _STREAM if stream else _BODY
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return  # keep the benchmark output clean


_Timed = Callable[[], Awaitable[float | None]]


async def _p50s(n: int, *calls: _Timed) -> list[float]:
    """Median seconds of each call, run interleaved so drift affects all alike.

    A call that returns a float measured its own figure (time to first token of a stream
    that goes on afterwards); otherwise its whole duration is the sample. Each round starts
    one call later, so every call follows every other equally often (what one leaves
    behind, such as a session's log writes finishing, slows whichever comes next), and
    the loop waits for every task to block before the next call.
    """
    samples: list[list[float]] = [[] for _ in calls]
    for round_ in range(n):
        for j in range(len(calls)):
            i = (round_ + j) % len(calls)
            call = calls[i]
            start = trio.current_time()
            own = await call()
            samples[i].append(own if own is not None else trio.current_time() - start)
            await trio.testing.wait_all_tasks_blocked()
    return [statistics.median(s) for s in samples]


async def _measure(n: int) -> dict[str, float | int | str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    url = f"http://{host!s}:{port}/v1"
    body = orjson.dumps(
        {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    plain_body = orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]})
    request = LLMRequest(messages=[UserMessage("hi")])
    config = ProviderConfig(provider="openai", base_url=url, model="bench")
    try:
        async with (
            open_http_client() as client,
            open_http_client() as transport_client,
            open_http_client() as session_client,
        ):
            transport = OpenAITransport(config, client=transport_client)

            async def bare_ttft() -> float | None:
                start = trio.current_time()
                first: float | None = None
                async with client.stream(
                    "POST",
                    url + "/chat/completions",
                    content=body,
                    headers={"content-type": "application/json"},
                ) as r:
                    async for line in r.aiter_lines():
                        if first is None and line.startswith("data: "):
                            orjson.loads(line[6:])
                            first = trio.current_time() - start
                return first

            async def ours_ttft() -> float | None:
                start = trio.current_time()
                first: float | None = None
                async with transport.stream(request) as stream:
                    async for delta in stream:
                        if first is None and isinstance(delta, TextDelta):
                            first = trio.current_time() - start
                return first

            async def bare_complete() -> float | None:
                r = await client.post(
                    url + "/chat/completions",
                    content=plain_body,
                    headers={"content-type": "application/json"},
                )
                orjson.loads(r.content)
                return None

            async def ours_complete() -> float | None:
                await transport.complete(request)
                return None

            # On disk, as users run it: the run's start is durable before the model is asked.
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "ttft.sqlite"
                async with (
                    open_sqlite_store(log) as store,
                    open_runtime(seed=1, store=store) as runtime,
                ):
                    session_transport = OpenAITransport(config, client=session_client)
                    session_ttft = await _session_ttft(runtime, session_transport, n + 1)
                    for warm in (bare_ttft, ours_ttft, session_ttft, bare_complete, ours_complete):
                        await warm()
                    bare_t, ours_t, session_t = await _p50s(n, bare_ttft, ours_ttft, session_ttft)
                    bare_c, ours_c = await _p50s(n, bare_complete, ours_complete)
    finally:
        server.shutdown()
        server.server_close()
    return {
        "requests": n,
        "ttft_bare_httpx_p50_ms": bare_t * 1000,
        "ttft_transport_p50_ms": ours_t * 1000,
        "ttft_ratio": ours_t / bare_t,
        "ttft_session_p50_ms": session_t * 1000,
        "ttft_session_ratio": session_t / bare_t,
        "complete_bare_httpx_p50_ms": bare_c * 1000,
        "complete_transport_p50_ms": ours_c * 1000,
        "complete_ratio": ours_c / bare_c,
    }


async def _session_ttft(runtime: Any, transport: OpenAITransport, count: int) -> _Timed:
    """A timed call: a send on a fresh session (so every request is the same size), timed
    from the send to its first streamed text; the run then finishes untimed."""
    sessions = [await spawn_session(runtime, llm=transport) for _ in range(count)]

    async def timed() -> float | None:
        session = sessions.pop()
        first: list[float] = []
        with session.observe(buffer=4096) as observations:
            async with trio.open_nursery() as nursery:
                start = trio.current_time()
                nursery.start_soon(session.send, "hi")
                async for observation in observations:
                    if isinstance(observation, DeltaReceived) and not first:
                        first.append(trio.current_time() - start)
                    if isinstance(observation, RunEnded):
                        break
        return first[0]

    return timed


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """Run the suite: ``--quick`` does 30 requests per figure instead of 300."""
    n = 30 if getattr(args, "quick", False) else 300
    return trio.run(_measure, n)


__all__ = ["run"]
