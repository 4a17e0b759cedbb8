"""Peer benchmark: the agents' sends beside power-loop 8.0.0's, measured in the same run.

Our performance goals are ratios against power-loop (an embeddable agent kernel on
asyncio, ``pip install 'powertrio[bench]'``), so both sides run the same workload here:
one send is 2 rounds and 1 tool call (``echo``) against a zero-latency function model, the
sessions persisted in an on-disk SQLite file by each side's own durable store, as shipped
(powertrio: ``open_sqlite_store``, ``synchronous=FULL``; power-loop: its ``dsn=`` SQLite
store, WAL with ``synchronous=NORMAL``, which syncs less often, so the comparison favours
it). Every configuration runs in a fresh process, the two sides interleaved and their
order swapped every repeat; each figure is the median of 3 repeats (1 with ``--quick``).

Every ratio is powertrio's figure over power-loop's: above 1 is better for rates
(``sends_ratio_*``, ``new_sessions_ratio_vs_peer``), below 1 for costs
(``cpu_ratio_256_vs_peer``, ``seconds_500_sends_ratio_vs_peer``).

* ``sends_per_s_256``: 256 sessions at once, one send each (the sessions created first).
* ``cpu_ms_per_send_256``: the process's CPU (every thread) over those sends.
* ``sends_per_s_1``: one session, sends one after another.
* ``new_sessions_per_s``: sessions created one after another (10,000; 1,000 quick).
* ``seconds_500_sends``: 500 sends on one session, in total (100 with ``--quick``).
* ``state_copies_per_send`` and ``objects_allocated_per_send`` (ours only: the peer keeps
  no working state): as the ``agents`` suite measures them, on the sequential session.
* ``kb_per_idle_session``: RSS per session after 1,000 sessions (250 with ``--quick``)
  each made one send (all at once) and went idle (ours: past its idle time,
  ``actors.bench._agents.IDLE_TIME``, so passivated; power-loop keeps no actor per
  session), in a fresh process from before the first; ours also
  ``kb_per_idle_session_after_two_waves`` (over the third and fourth such waves: what
  an idle session keeps once the heap has room for a wave of warm ones) and
  ``reactivation_ms_p50`` (a look at a passivated session's state).

power-loop is a bench-only dependency: without it the suite raises
:class:`~protocols.errors.ConfigError` saying how to install it, and measures nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import trio

from actors.bench._agents import _create_sessions, _sessions, idle_session_figures
from protocols.errors import ConfigError
from runtime.bench import Figures, rss_bytes

PEER = "power-loop"
PEER_VERSION = "8.0.0"
"""The version our goals are stated against."""

SESSIONS_AT_ONCE = 256

_CONFIGS = ("at_once", "sequential", "new_sessions", "long_session", "idle")


def peer_version() -> str:
    """The installed power-loop's version.

    Raises:
        ConfigError: power-loop is not installed; nothing can be compared.
    """
    try:
        import power_loop  # noqa: PLC0415  # the optional bench-only dependency
    except ImportError:
        msg = (
            f"the peers benchmark compares powertrio with {PEER} {PEER_VERSION}, which is "
            f"not installed: pip install 'powertrio[bench]' (or pip install "
            f"'{PEER}=={PEER_VERSION}'); no figures were measured"
        )
        raise ConfigError(msg) from None
    return str(power_loop.__version__)


# --- power-loop's side -------------------------------------------------------------------


class _PeerModel:
    """power-loop's LLM service protocol, answering at once: round 1 asks for ``echo``,
    round 2 (after its result) answers "done" (the usage of ``_agents._answer``)."""

    async def complete(
        self,
        request: Any,
        *,
        on_chunk_delta_text: Any = None,
        on_chunk_think: Any = None,
        on_stream_end: Any = None,
    ) -> Any:
        from power_loop import LLMResponse, LLMTokenUsage  # noqa: PLC0415

        if request.messages[-1].get("role") == "tool":
            usage = LLMTokenUsage(prompt_tokens=20, completion_tokens=2, total_tokens=22)
            return LLMResponse(raw_text="done", content_text="done", token_usage=usage)
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text": "hi"}'},
        }
        usage = LLMTokenUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15)
        return LLMResponse(raw_text="", tool_calls=[call], token_usage=usage)

    def stream(self, request: Any) -> Any:
        raise NotImplementedError("the loop calls complete()")

    async def close(self) -> None:
        return None


async def _peer_echo(text: str) -> str:
    return text


def _peer_loop(path: str) -> Any:
    """A power-loop agent with the one ``echo`` tool on the SQLite file ``path``."""
    from power_loop import StatefulAgentLoop, ToolDefinition, ToolRegistry  # noqa: PLC0415

    registry = ToolRegistry()
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    definition = ToolDefinition(
        name="echo", description="Echo the text.", input_schema=schema, required_params=("text",)
    )
    registry.register(definition, _peer_echo)
    return StatefulAgentLoop(llm=_PeerModel(), dsn=path, tool_registry=registry)


async def _peer_sends(n: int, sends: int, path: str) -> dict[str, float]:
    """``n`` sessions at once, ``sends`` each: wall rate, CPU per send, total seconds."""
    loop = _peer_loop(path)
    try:
        ids = [await loop.new_session() for _ in range(n)]

        async def drive(session_id: str) -> None:
            for i in range(sends):
                result = await loop.send(f"message {i}", session_id=session_id)
                if result.status != "completed" or result.tool_calls != 1:
                    raise RuntimeError(f"{PEER} send did not run the workload: {result}")

        cpu = time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(drive(i) for i in ids))
        elapsed = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu
    finally:
        await loop.aclose()
    return _sends_figures(n * sends, elapsed, cpu_seconds)


async def _peer_new_sessions(n: int, path: str) -> float:
    loop = _peer_loop(path)
    try:
        await loop.prewarm("none")  # opens the store before the clock, as powertrio's side
        start = time.perf_counter()
        for _ in range(n):
            await loop.new_session()
        return n / (time.perf_counter() - start)
    finally:
        await loop.aclose()


async def _peer_idle(n: int, path: str) -> float:
    """RSS per power-loop session after ``n`` sessions each made one send (all at once)."""
    loop = _peer_loop(path)
    try:
        await loop.prewarm("none")
        ids = [await loop.new_session()]  # warm the imports and the store, as ours does
        await loop.send("warm", session_id=ids[0])
        gc.collect()
        before = rss_bytes()
        ids = [await loop.new_session() for _ in range(n)]
        await asyncio.gather(*(loop.send("hello", session_id=i) for i in ids))
        gc.collect()
        return (rss_bytes() - before) / n
    finally:
        await loop.aclose()


# --- one configuration, in this (fresh) process ------------------------------------------


def _sends_figures(total: int, elapsed: float, cpu_seconds: float) -> dict[str, float]:
    return {
        "rate": total / elapsed,
        "cpu_ms_per_send": cpu_seconds / total * 1e3,
        "seconds": elapsed,
    }


def measure(side: str, config: str, count: str, path: str) -> dict[str, float]:
    """One configuration of one side (``ours`` or ``peer``), ``count`` its size: its
    figures. Called by :func:`_fresh` in a new interpreter."""
    n = int(count)
    if side == "peer":
        if config == "at_once":
            return asyncio.run(_peer_sends(n, 1, path))
        if config == "new_sessions":
            return {"rate": asyncio.run(_peer_new_sessions(n, path))}
        if config == "idle":
            return {"kb": asyncio.run(_peer_idle(n, path)) / 1024}
        return asyncio.run(_peer_sends(1, n, path))
    if config == "idle":
        first, marginal, _live, p50, _p99, _sqlite = trio.run(idle_session_figures, count, path)
        return {"kb": first / 1024, "kb_after_two_waves": marginal / 1024, "reactivation": p50}
    if config == "new_sessions":
        return {"rate": trio.run(_create_sessions, n, Path(path))}
    sessions, sends = (n, 1) if config == "at_once" else (1, n)
    measured = trio.run(
        partial(_sessions, memory=config == "sequential"), sessions, sends, Path(path)
    )
    total = sessions * sends
    figures = _sends_figures(total, total / measured.rate, measured.cpu_seconds)
    figures["state_copies_per_send"] = measured.state_copies / total
    figures["objects_allocated_per_send"] = measured.blocks / total
    return figures


def _fresh(side: str, config: str, count: int, path: Path) -> dict[str, float]:
    """:func:`measure` in a new interpreter (``runtime.bench.in_fresh_process`` runs trio;
    power-loop runs on asyncio, so each side starts its own event loop here)."""
    code = (
        "import sys, orjson; from actors.bench._peers import measure; "
        "print(orjson.dumps(measure(*sys.argv[1:])).decode())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, side, config, str(count), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{side} {config} failed:\n{done.stderr[-2000:]}")
    figures: dict[str, float] = orjson.loads(done.stdout.splitlines()[-1])
    return figures


def _ratio(ours: float, peer: float) -> float:
    return round(ours / peer, 3) if peer > 0 else 0.0


def run(args: argparse.Namespace) -> Figures:
    """Each configuration of both sides in a fresh process, interleaved, median of 3."""
    version = peer_version()
    quick = bool(getattr(args, "quick", False))
    repeats = 1 if quick else 3
    counts = {
        "at_once": SESSIONS_AT_ONCE,
        "sequential": 20 if quick else 200,
        "new_sessions": 1_000 if quick else 10_000,
        "long_session": 100 if quick else 500,
        "idle": 250 if quick else 1_000,
    }
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            sides = ("ours", "peer") if repeat % 2 == 0 else ("peer", "ours")
            for config in _CONFIGS:
                for side in sides:
                    path = Path(tmp) / f"{side}-{config}-{repeat}.sqlite"
                    measured = _fresh(side, config, counts[config], path)
                    runs.setdefault((side, config), []).append(measured)

    def median(side: str, config: str, key: str) -> float:
        return statistics.median(f[key] for f in runs[side, config])

    figures: Figures = {"peer": f"{PEER} {version}", "repeats": repeats}
    long = f"seconds_{counts['long_session']}_sends"
    rows = (
        ("sends_per_s_256", "at_once", "rate", 1, "sends_ratio_256_vs_peer"),
        ("cpu_ms_per_send_256", "at_once", "cpu_ms_per_send", 3, "cpu_ratio_256_vs_peer"),
        ("sends_per_s_1", "sequential", "rate", 1, "sends_ratio_1_vs_peer"),
        ("new_sessions_per_s", "new_sessions", "rate", 1, "new_sessions_ratio_vs_peer"),
        (long, "long_session", "seconds", 3, f"{long}_ratio_vs_peer"),
    )
    for name, config, key, digits, ratio in rows:
        ours, peer = median("ours", config, key), median("peer", config, key)
        figures[name] = round(ours, digits)
        figures["peer_" + name] = round(peer, digits)
        figures[ratio] = _ratio(ours, peer)
    for key in ("state_copies_per_send", "objects_allocated_per_send"):
        figures[key] = round(median("ours", "sequential", key), 2)
    kb, peer_kb = median("ours", "idle", "kb"), median("peer", "idle", "kb")
    figures["kb_per_idle_session"] = round(kb, 2)
    figures["peer_kb_per_idle_session"] = round(peer_kb, 2)
    figures["kb_per_idle_session_ratio_vs_peer"] = _ratio(kb, peer_kb)
    figures["kb_per_idle_session_after_two_waves"] = round(
        median("ours", "idle", "kb_after_two_waves"), 2
    )
    figures["reactivation_ms_p50"] = round(median("ours", "idle", "reactivation"), 3)
    figures["sequential_sends_measured"] = counts["sequential"]
    figures["new_sessions_measured"] = counts["new_sessions"]
    return figures
