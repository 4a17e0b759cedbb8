"""Agent benchmark: sends of 2 rounds + 1 tool against a zero-latency scripted LLM, on disk."""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import trio

from actors import Session, Tool, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage, Usage
from runtime import open_runtime, open_sqlite_store
from runtime.bench import rss_bytes
from runtime.testing import FunctionLLM


def _answer(request: LLMRequest) -> LLMResponse:
    # Round 1 asks for the tool; round 2 (after its result) answers.
    if isinstance(request.messages[-1], ToolResultMessage):
        return LLMResponse(content="done", usage=Usage(prompt_tokens=20, completion_tokens=2))
    return LLMResponse(
        tool_calls=(ToolCall(id="c1", name="echo", arguments='{"text": "hi"}'),),
        usage=Usage(prompt_tokens=10, completion_tokens=5),
    )


def _echo_tool() -> Tool[[str], Coroutine[Any, Any, str]]:
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    return tool(echo)


async def _sessions(n: int, sends: int, path: Path) -> tuple[float, list[float]]:
    echo = _echo_tool()
    latencies: list[float] = []
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        sessions = [
            await spawn_session(runtime, llm=FunctionLLM(_answer), tools=[echo])
            for _ in range(n)
        ]

        async def drive(session: Session) -> None:
            for i in range(sends):
                start = time.perf_counter()
                result = await session.send(f"message {i}")
                latencies.append(time.perf_counter() - start)
                assert result.status == "completed"

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(drive, session)
        elapsed = time.perf_counter() - start
    return n * sends / elapsed, latencies


async def _growth(sends: int, path: Path) -> float:
    _, latencies = await _sessions(1, sends, path)
    early = statistics.mean(latencies[:10])
    late = statistics.mean(latencies[-10:])
    return late / early


async def _idle_sessions(n: int, path: Path) -> float:
    """RSS per idle session actor (spawned, its stream created, waiting for input)."""
    echo = _echo_tool()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        llm = FunctionLLM(_answer)
        await spawn_session(runtime, llm=llm, tools=[echo])  # warm the imports
        gc.collect()
        before = rss_bytes()
        for _ in range(n):
            await spawn_session(runtime, llm=llm, tools=[echo])
        gc.collect()
        after = rss_bytes()
    return (after - before) / n


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """N concurrent sessions (1, 32, 256) on an on-disk log, plus send cost vs history."""
    quick = bool(getattr(args, "quick", False))
    figures: dict[str, float | int | str] = {}
    all_latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 32, 256):
            sends = max(2, (40 if quick else 400) // n) if n > 1 else (20 if quick else 200)
            rate, latencies = trio.run(_sessions, n, sends, Path(tmp) / f"agents-{n}.sqlite")
            figures[f"sends_per_s_{n}"] = round(rate, 1)
            all_latencies.extend(latencies)
        all_latencies.sort()
        figures["send_p50_ms"] = round(all_latencies[len(all_latencies) // 2] * 1000, 3)
        figures["send_p99_ms"] = round(all_latencies[int(len(all_latencies) * 0.99)] * 1000, 3)
        figures["send_cost_ratio_500_vs_10"] = round(
            trio.run(_growth, 100 if quick else 500, Path(tmp) / "growth.sqlite"), 3
        )
        n_idle = 1_000 if quick else 5_000
        idle = trio.run(_idle_sessions, n_idle, Path(tmp) / "idle.sqlite")
        figures["idle_session_bytes"] = round(idle)
        figures["idle_sessions_per_gib"] = round(2**30 / idle) if idle > 0 else 0
    return figures
