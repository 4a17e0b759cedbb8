"""Provider transports: time to first token and call latency, beside bare httpx in the same run.

Against a local canned OpenAI-compatible server on loopback, three ways of getting the first
token: bare httpx (the physical baseline), the transport (request building, retries
wrapper, SSE parsing, delta assembly), and a session actor using the transport (the send,
the ``RunStarted`` append, which the request overlaps, the step, and the delta's trip
through the observer bus). The ratios are our overhead per call relative to the
baseline. The server is a process of its own, as a provider is.

All three measure the same thing: from the start of the call to the first token, on a
stream then read to its end (as a session reads it, so its connection goes back to the
pool). Each has its own client, so one that closes its connection does not decide whether
the next gets a warm one, and the calls take turns in a rotating order with a settle
between them, so work one call leaves behind is not billed to the same neighbour.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import httpx
import orjson
import trio
import trio.testing

from actors import spawn_session
from actors.events import DeltaReceived, RunEnded
from protocols import LLMRequest, UserMessage
from protocols.streaming import TextDelta
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


_THINKING = "bench-thinking"
"""A model whose first token comes after ``_THINKING_S``, as a provider's does after some
thought (hundreds of milliseconds in practice): long enough for a commit to finish."""
_THINKING_S = 0.005


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
        if request.get("model") == _THINKING:
            time.sleep(_THINKING_S)
        payload = _STREAM if stream else _BODY
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return  # keep the benchmark output clean


def serve() -> None:
    """Serve the canned answers on a loopback port, printed on the first line of stdout."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def _body(model: str, *, stream: bool) -> bytes:
    """A bare request's body: one user message to ``model``."""
    request: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        request["stream"] = True
    return orjson.dumps(request)


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
    # The server runs in its own process, as a provider does: in a thread of this one it
    # would share the GIL with the client it is timed against.
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", "from actors.bench._providers import serve; serve()"],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    first = b""
    while not first.endswith(b"\n"):
        first += await process.stdout.receive_some()
    host, port = "127.0.0.1", int(first)
    url = f"http://{host!s}:{port}/v1"
    body = _body("bench", stream=True)
    plain_body = _body("bench", stream=False)
    request = LLMRequest(messages=[UserMessage("hi")])
    config = ProviderConfig(provider="openai", base_url=url, model="bench")
    try:
        async with (
            open_http_client() as client,
            open_http_client() as transport_client,
            open_http_client() as session_client,
        ):
            transport = OpenAITransport(config, client=transport_client)

            async def bare_ttft(content: bytes = body) -> float | None:
                start = trio.current_time()
                first: float | None = None
                async with client.stream(
                    "POST",
                    url + "/chat/completions",
                    content=content,
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

            # On disk, as users run it: the run's start commits while the model is asked,
            # and its first delta is told once that commit is done.
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "ttft.sqlite"
                async with (
                    open_sqlite_store(log) as store,
                    open_runtime(seed=1, store=store) as runtime,
                ):
                    session_transport = OpenAITransport(config, client=session_client)
                    session_ttft = await _session_ttft(
                        runtime, session_transport, n + 1, started=True
                    )
                    new_session_ttft = await _session_ttft(
                        runtime, session_transport, n + 1, started=False
                    )
                    thinking_session_ttft, run_starts = await _thinking_session_ttft(
                        runtime, config, session_client, n + 1
                    )
                    thinking_body = _body(_THINKING, stream=True)

                    async def bare_thinking_ttft() -> float | None:
                        return await bare_ttft(thinking_body)

                    ways = (
                        bare_ttft,
                        ours_ttft,
                        session_ttft,
                        new_session_ttft,
                        bare_thinking_ttft,
                        thinking_session_ttft,
                    )
                    for warm in (*ways, bare_complete, ours_complete):
                        await warm()
                    (
                        bare_t,
                        ours_t,
                        session_t,
                        new_session_t,
                        bare_thinking_t,
                        session_thinking_t,
                    ) = await _p50s(n, *ways)
                    bare_c, ours_c = await _p50s(n, bare_complete, ours_complete)
    finally:
        process.kill()
        await process.wait()
    return {
        "requests": n,
        "ttft_bare_httpx_p50_ms": bare_t * 1000,
        "ttft_transport_p50_ms": ours_t * 1000,
        "ttft_ratio": ours_t / bare_t,
        "ttft_session_p50_ms": session_t * 1000,
        "ttft_session_ratio": session_t / bare_t,
        "ttft_session_over_bare_ms": (session_t - bare_t) * 1000,
        "ttft_new_session_p50_ms": new_session_t * 1000,
        "ttft_new_session_ratio": new_session_t / bare_t,
        "ttft_bare_httpx_thinking_p50_ms": bare_thinking_t * 1000,
        "ttft_session_thinking_p50_ms": session_thinking_t * 1000,
        "ttft_session_over_bare_thinking_ms": (session_thinking_t - bare_thinking_t) * 1000,
        "ttft_thinking_run_start_commit_p50_ms": run_starts.p50() * 1000,
        "complete_bare_httpx_p50_ms": bare_c * 1000,
        "complete_transport_p50_ms": ours_c * 1000,
        "complete_ratio": ours_c / bare_c,
    }


@attrs.define
class _RunStarts:
    """How long the append of each timed session's run start took: a first token that
    comes sooner waits for it, as it must, so when it takes longer than the model
    thinks, the session's time to first token is the disk's."""

    streams: list[str] = attrs.Factory(list)
    """The timed sessions' streams."""
    seconds: dict[str, float] = attrs.Factory(dict)
    """Each stream's first append (the run's start, with the session's creation)."""

    def __call__(self, stream: str, events: int, seconds: float) -> None:
        self.seconds.setdefault(stream, seconds)

    def p50(self) -> float:
        return statistics.median(self.seconds[stream] for stream in self.streams)


async def _thinking_session_ttft(
    runtime: Any, config: ProviderConfig, client: httpx.AsyncClient, count: int
) -> tuple[_Timed, _RunStarts]:
    """:func:`_session_ttft` with the model that thinks, and how long its runs' starts
    took to commit."""
    run_starts = _RunStarts()
    runtime.add_commit_observer(run_starts)
    thinking = OpenAITransport(attrs.evolve(config, model=_THINKING), client=client)
    timed = await _session_ttft(runtime, thinking, count, started=True, streams=run_starts.streams)
    return timed, run_starts


async def _session_ttft(
    runtime: Any,
    transport: OpenAITransport,
    count: int,
    *,
    started: bool,
    streams: list[str] | None = None,
) -> _Timed:
    """A timed call: the first send on a session of its own (so every request is the same
    size), timed from the send to its first streamed text; the run then finishes untimed.

    ``started``: the session's actor is running already (it has answered a question), as
    in a conversation's later turns; otherwise the send starts it (a new session's first
    turn, ``ttft_new_session_*``). ``streams``, if given, gets the stream of each session
    timed.
    """
    sessions = [await spawn_session(runtime, llm=transport) for _ in range(count)]
    if started:
        for session in sessions:
            await session.state()

    async def timed() -> float | None:
        session = sessions.pop()
        if streams is not None:
            streams.append(f"session/{session.id}")
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
