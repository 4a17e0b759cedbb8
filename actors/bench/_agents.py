"""Agent benchmark: sends of 2 rounds + 1 tool against a zero-latency model, on disk.

Every figure is printed beside a baseline measured in the same run:

* ``sends_per_s_N`` (N sessions at once) beside ``raw_sends_per_s_N``: the same events,
  with the same payload sizes and the same concurrency, appended straight to the store
  (no actors, no decisions): the physical limit a send could reach on this disk.
* ``cpu_ms_per_send`` (process CPU over wall sends, 256 sessions).
* ``dependent_commits_per_send``: the commits (each one sync) of one sequential session
  per send; each is one its send waited for, as nothing else writes. Beside it
  ``appends_per_send`` (the appends it made, counted by a store wrapper; appends queued
  behind one in flight share its commit, or come right after it) and
  ``min_dependent_commits_per_send``: the fewest the invariants allow, one before each
  tool round, one of its results before the model call that reads them, and one before
  the reply, counted from the log (any other model call goes out while the events asking
  for it commit, so it needs none of its own).
* ``new_sessions_per_s`` beside ``raw_spawns_per_s``: spawning a bare actor, and
  ``raw_lazy_spawns_per_s``: one that starts at its first message, as a new session does.
* ``idle_session_bytes`` beside ``idle_actor_bytes``: RSS per idle session and per idle bare
  actor, each in a fresh process, so nothing an earlier workload left behind is counted.
* ``rss_bytes_1m_registered_1k_active``: the whole RSS of a fresh process holding a
  million created sessions of which a thousand have run (their actors idle, the rest
  never started), beside a million idle bare actors. ``--quick`` creates 20,000
  (``registered_sessions_measured``) and adds ``registered_session_bytes`` for each
  missing one (``rss_1m_registered_extrapolated``); ``active_session_bytes`` is the RSS
  each of the thousand added by running.
* ``send_cost_ratio_late_vs_early``: the mean of the last 10 sends of one long session
  over its sends 2 to 11 (the first, cold send is skipped).
* ``state_copies_per_send``: the copies of a session's working state made per send (one
  session, sequential): a state is copied only where it must outlive a step (a caller
  asked for it), so a send with nobody asking makes none.
* ``objects_allocated_per_send``: the memory blocks a send leaves allocated
  (``sys.getallocatedblocks`` after a collection, one session, sequential): what each send
  adds to a session's memory (its events' share of the transcript and results). The
  objects a send makes and frees again are counted by the ``instructions`` suite
  (``allocations_per_send_main``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import trio

from actors import Session, Tool, spawn_session, tool
from actors._session._working import copies
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage, Usage
from runtime import (
    Actor,
    AppendResult,
    EventStore,
    NewEvent,
    RecordedEvent,
    SqliteEventStore,
    open_runtime,
    open_sqlite_store,
)
from runtime.bench import Figures, in_fresh_process, rss_bytes
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


class _CountingStore:
    """The SQLite store, counting the appends made through it (waited for, or begun and
    finished by the pipelined path)."""

    def __init__(self, inner: SqliteEventStore) -> None:
        self.inner = inner
        self.appends = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        result = await self.inner.append(stream, events, expected_version)
        self.appends += 1
        return result

    def begin_append(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        *,
        after: Any,
        wake: Callable[[], object],
    ) -> Any:
        return self.inner.begin_append(stream, events, expected_version, after=after, wake=wake)

    def finish_append(self, pending: Any) -> AppendResult:
        result = self.inner.finish_append(pending)
        self.appends += 1
        return result


def _min_dependent_commits(events: list[RecordedEvent]) -> int:
    """One commit before each tool round, one of its results before the model call that
    reads them, and one before the reply: per run, its tool rounds (twice when a model
    call follows) plus one (read from the log)."""
    runs = sum(e.type == "session.run_started" for e in events)
    rounds = 0
    in_round = False
    unread = False
    for e in events:  # tool rounds: runs of consecutive tool results
        finished = e.type == "session.tool_finished"
        if finished and not in_round:
            rounds += 1
            unread = True
        elif unread and e.type == "session.assistant":
            rounds += 1  # a model call read the round's results: they were committed first
            unread = False
        elif e.type == "session.run_finished":
            unread = False
        in_round = finished
    return runs + rounds


class _Sends:
    """What a workload of sends measured: rate, latencies, CPU, commits, events written."""

    def __init__(self) -> None:
        self.rate = 0.0
        self.latencies: list[float] = []
        self.cpu_seconds = 0.0
        self.commits = 0
        self.appends = 0
        self.counted = 0
        self.events: list[RecordedEvent] = []
        self.state_copies = 0
        self.blocks = 0
        """Memory blocks left allocated by the sends (``sys.getallocatedblocks``)."""


async def _sessions(
    n: int, sends: int, path: Path, *, count: bool = False, memory: bool = False
) -> _Sends:
    """``n`` sessions of ``sends`` sends each; ``count``: count the appends, ``memory``:
    the blocks the sends leave allocated (two full collections around the sends, outside
    the timed part; off where instructions are counted, which they would add to)."""
    echo = _echo_tool()
    measured = _Sends()
    async with open_sqlite_store(path) as sqlite:
        counting = _CountingStore(sqlite) if count else None
        store: EventStore = counting if counting is not None else sqlite  # type: ignore[assignment]
        await _drive(n, sends, store, sqlite, counting, echo, measured, memory=memory)
    return measured


async def _drive(  # noqa: PLR0917  # the workload's parts, private
    n: int,
    sends: int,
    store: EventStore,
    sqlite: EventStore,
    counting: _CountingStore | None,
    echo: Tool[[str], Coroutine[Any, Any, str]],
    measured: _Sends,
    *,
    memory: bool,
) -> None:
    async with open_runtime(store=store, seed=1) as runtime:
        sessions = [
            await spawn_session(runtime, llm=FunctionLLM(_answer), tools=[echo]) for _ in range(n)
        ]

        async def drive(session: Session) -> None:
            for i in range(sends):
                start = time.perf_counter()
                result = await session.send(f"message {i}")
                measured.latencies.append(time.perf_counter() - start)
                assert result.status == "completed"

        before = sqlite.statistics()
        counted = counting.appends if counting is not None else 0
        copied = copies()
        if memory:
            gc.collect()
        blocks = sys.getallocatedblocks()
        cpu = time.process_time()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(drive, session)
        elapsed = time.perf_counter() - start
        measured.cpu_seconds = time.process_time() - cpu
        measured.state_copies = copies() - copied
        if memory:
            gc.collect()
            measured.blocks = sys.getallocatedblocks() - blocks - len(measured.latencies)
        after = sqlite.statistics()
        measured.commits = after.commits - before.commits
        measured.appends = after.appends - before.appends
        measured.counted = counting.appends - counted if counting is not None else 0
        measured.events = await sqlite.read_all(before.head_position + 1)
    measured.rate = n * sends / elapsed


async def _raw_appends(events: list[RecordedEvent], n: int, sends: int, path: Path) -> float:
    """Append the events ``n`` sessions wrote, as they were grouped, with no actors: the
    sends/s the store alone allows at this concurrency."""
    batches: dict[str, list[list[NewEvent]]] = {}
    last: tuple[str, float] | None = None
    for event in events:  # consecutive events of one stream at one time: one decision
        new = NewEvent(
            type=event.type,
            schema_version=event.schema_version,
            data=event.data,
            metadata=event.metadata,
        )
        key = (event.stream, event.recorded_at)
        streams = batches.setdefault(event.stream, [])
        if key == last:
            streams[-1].append(new)
        else:
            streams.append([new])
        last = key
    async with open_sqlite_store(path) as store:

        async def write(stream: str, groups: list[list[NewEvent]]) -> None:
            version = 0
            for group in groups:
                version = (await store.append(stream, group, version)).version

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for stream, groups in batches.items():
                nursery.start_soon(write, "raw/" + stream, groups)
        elapsed = time.perf_counter() - start
    return n * sends / elapsed


async def _create_sessions(n: int, path: Path) -> float:
    """Sessions created per second, one after another, on a store opened before the clock
    starts."""
    echo = _echo_tool()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        llm = FunctionLLM(_answer)
        start = time.perf_counter()
        for _ in range(n):
            await spawn_session(runtime, llm=llm, tools=[echo])
        return n / (time.perf_counter() - start)


async def _new_sessions(n: int, path: Path) -> tuple[float, float, float]:
    """Sessions created per second, sequentially, beside bare actors spawned per second
    (started at once, and started at their first message as a new session is)."""
    sessions = await _create_sessions(n, path)
    async with open_runtime(seed=1) as runtime:
        start = time.perf_counter()
        for _ in range(n):
            await runtime.spawn(_Idle)
        actors = n / (time.perf_counter() - start)
    async with open_runtime(seed=1) as runtime:
        start = time.perf_counter()
        for _ in range(n):
            await runtime.spawn(_Idle, lazy=True)
        lazy = n / (time.perf_counter() - start)
    return sessions, actors, lazy


class _Idle(Actor[object]):
    async def receive(self, message: object) -> object:
        return message


async def idle_bytes(kind: str, count: str, path: str) -> float:
    """RSS per idle session (spawned, its actor started by one look at its state: a new
    session's actor otherwise starts at its first message) or per idle bare actor."""
    n = int(count)
    echo = _echo_tool()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        llm = FunctionLLM(_answer)
        await spawn_session(runtime, llm=llm, tools=[echo])  # warm the imports
        await runtime.spawn(_Idle)
        gc.collect()
        before = rss_bytes()
        for _ in range(n):
            if kind == "session":
                await (await spawn_session(runtime, llm=llm, tools=[echo])).state()
            else:
                await runtime.spawn(_Idle)
        await trio.sleep(0.05)  # every actor reaches its idle wait
        gc.collect()
        after = rss_bytes()
    return (after - before) / n


async def registered_bytes(count: str, active: str, path: str) -> list[float]:
    """RSS per registered session (created, never used: its actor not started) and per
    active one (one send done, its actor running, idle), in this fresh process, and the
    process's whole RSS with all of them."""
    n, k = int(count), int(active)
    echo = _echo_tool()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        llm = FunctionLLM(_answer)
        await (await spawn_session(runtime, llm=llm, tools=[echo])).send("warm")
        gc.collect()
        before = rss_bytes()
        for _ in range(n):
            await spawn_session(runtime, llm=llm, tools=[echo])
        gc.collect()
        registered = rss_bytes()
        sessions = [await spawn_session(runtime, llm=llm, tools=[echo]) for _ in range(k)]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.send, "hello")
        gc.collect()
        after = rss_bytes()
    return [(registered - before) / n, (after - registered) / k, after]


def _memory(folder: Path, *, quick: bool) -> Figures:
    """Idle and registered sessions' memory, each in a fresh process."""
    figures: Figures = {}
    n_idle = 1_000 if quick else 5_000
    measure = "actors.bench._agents:idle_bytes"
    idle: float = in_fresh_process(measure, "session", str(n_idle), str(folder / "idle.sqlite"))
    bare: float = in_fresh_process(measure, "actor", str(n_idle), str(folder / "bare.sqlite"))
    figures["idle_session_bytes"] = round(idle)
    figures["idle_actor_bytes"] = round(bare)
    figures["idle_sessions_per_gib"] = round(2**30 / idle) if idle > 0 else 0
    # The full run creates the million; --quick extrapolates from 20,000.
    n_registered = 20_000 if quick else 1_000_000
    per_registered, per_active, whole = in_fresh_process(
        "actors.bench._agents:registered_bytes",
        str(n_registered),
        "1000",
        str(folder / "registered.sqlite"),
    )
    figures["registered_sessions_measured"] = n_registered
    figures["registered_session_bytes"] = round(per_registered)
    figures["active_session_bytes"] = round(per_active)
    if n_registered == 1_000_000:  # the process that held them, as measured
        figures["rss_bytes_1m_registered_1k_active"] = round(whole)
    else:  # linear from the two per-session figures measured above
        figures["rss_bytes_1m_registered_1k_active"] = round(
            whole + per_registered * (1_000_000 - n_registered)
        )
    figures["rss_1m_registered_extrapolated"] = n_registered != 1_000_000
    figures["rss_bytes_1m_idle_actors_baseline"] = round(bare * 1_000_000)
    return figures


def _ratio(value: float, baseline: float) -> float:
    return round(value / baseline, 3) if baseline > 0 else 0.0


def run(args: argparse.Namespace) -> Figures:
    """Sessions at once (1, 32, 256) on an on-disk log, each beside raw appends of the same
    events; CPU and commits per send; creation; idle memory; send cost against history."""
    quick = bool(getattr(args, "quick", False))
    figures: Figures = {}
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in (1, 32, 256):
            sends = max(2, (40 if quick else 400) // n) if n > 1 else (20 if quick else 200)
            measured = trio.run(
                partial(_sessions, count=n == 1, memory=n == 1),
                n,
                sends,
                folder / f"agents-{n}.sqlite",
            )
            raw = trio.run(_raw_appends, measured.events, n, sends, folder / f"raw-{n}.sqlite")
            figures[f"sends_per_s_{n}"] = round(measured.rate, 1)
            figures[f"raw_sends_per_s_{n}"] = round(raw, 1)
            figures[f"sends_ratio_{n}"] = _ratio(measured.rate, raw)
            latencies.extend(measured.latencies)
            if n == 1:
                figures["events_per_send"] = round(len(measured.events) / sends, 2)
                figures["appends_per_send"] = round(measured.counted / sends, 2)
                figures["dependent_commits_per_send"] = round(measured.commits / sends, 2)
                floor = _min_dependent_commits(measured.events)
                figures["min_dependent_commits_per_send"] = round(floor / sends, 2)
                figures["state_copies_per_send"] = round(measured.state_copies / sends, 2)
                figures["objects_allocated_per_send"] = round(measured.blocks / sends, 1)
            if n == 256:
                figures["cpu_ms_per_send"] = round(measured.cpu_seconds / (n * sends) * 1e3, 3)
        latencies.sort()
        figures["send_p50_ms"] = round(latencies[len(latencies) // 2] * 1000, 3)
        figures["send_p99_ms"] = round(latencies[int(len(latencies) * 0.99)] * 1000, 3)
        creations = 1_000 if quick else 10_000
        sessions, actors, lazy = trio.run(_new_sessions, creations, folder / "new.sqlite")
        figures["new_sessions_per_s"] = round(sessions, 1)
        figures["raw_spawns_per_s"] = round(actors, 1)
        figures["raw_lazy_spawns_per_s"] = round(lazy, 1)
        figures["new_sessions_ratio"] = _ratio(sessions, actors)
        figures["new_sessions_ratio_lazy"] = _ratio(sessions, lazy)
        growth = trio.run(_sessions, 1, 100 if quick else 500, folder / "growth.sqlite")
        early = statistics.mean(growth.latencies[1:11])  # the first send is cold
        late = statistics.mean(growth.latencies[-10:])
        figures["send_cost_ratio_late_vs_early"] = round(late / early, 3)
        figures.update(_memory(folder, quick=quick))
    return figures
