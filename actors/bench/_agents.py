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
* ``kb_per_idle_session``: RSS per session that made one send and went idle past the
  idle time (``IDLE_TIME``; passivated), over the third and fourth of five waves of 1,000
  in a fresh process (by then the heap has the room a wave of warm sessions needs and
  SQLite's page caches are full; ``sqlite_heap_mib`` says how much they hold); beside it
  ``kb_per_idle_session_first_wave`` (from the fresh process on, so with that room and
  those caches), ``live_kb_per_idle_session`` (tracemalloc) and
  ``kb_per_warm_session_baseline`` (one send, never passivated).
* ``reactivation_ms_p50`` (and p99): a look at a passivated session's state, which starts
  its actor from its log; ``reactivation_long_ms_p50`` for one long session, from its
  snapshot and tail.
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
import ctypes
import ctypes.util
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
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
    Runtime,
    SqliteEventStore,
    open_runtime,
    open_sqlite_store,
)
from runtime.bench import Figures, in_fresh_process, rss_bytes
from runtime.supervision import ActorPassivated
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


IDLE_TIME = 0.5
"""The bench's ``passivate_after`` (seconds), so sessions go idle past it quickly; the
default (``PASSIVATE_AFTER``) is two minutes."""

WAVE = 1_000
"""Sessions in one wave of the idle-memory figures."""


async def _idle_wave(
    runtime: Runtime, llm: FunctionLLM, echo: Tool[[str], Coroutine[Any, Any, str]], n: int
) -> list[Session]:
    """``n`` new sessions, each one send (all at once), then idle until every one has
    passivated; collected, with the model double's record of requests dropped (a
    provider's transport keeps none)."""
    with runtime.subscribe(buffer=4 * n) as events:
        sessions = [
            await spawn_session(runtime, llm=llm, tools=[echo], passivate_after=IDLE_TIME)
            for _ in range(n)
        ]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.send, "hello")
        waiting = {session.id for session in sessions}
        while waiting:
            event = await events.receive()
            if isinstance(event, ActorPassivated):
                waiting.discard(event.actor_id)
    llm.requests.clear()
    gc.collect()
    return sessions


async def idle_session_figures(count: str, path: str) -> list[float]:
    """RSS per idle (passivated) session, in this fresh process: over the first wave of
    ``count`` sessions that each made one send and went idle past the idle time, then
    over the third and fourth waves (by then the heap has the room a wave of warm sessions
    needs, and SQLite's page caches are full: the RSS they grew by is what idle sessions
    keep); live bytes per idle session (tracemalloc, over a fifth wave: its bookkeeping
    would count in the RSS); SQLite's own heap at the end, in bytes; the p50 and p99 of
    a re-activation (a look at a passivated session's state: its actor starts and folds
    its log) in ms."""
    n = int(count)
    echo = _echo_tool()
    llm = FunctionLLM(_answer)
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        await _idle_wave(runtime, llm, echo, 10)  # warm the imports and the store
        rss = [rss_bytes()]
        kept = []
        for _ in range(4):
            kept.append(await _idle_wave(runtime, llm, echo, n))
            rss.append(rss_bytes())
        tracemalloc.start()
        kept.append(await _idle_wave(runtime, llm, echo, n))
        traced, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        latencies = []
        for session in kept[0]:
            began = time.perf_counter()
            await session.state()
            latencies.append(time.perf_counter() - began)
        latencies.sort()
        sqlite_heap = sqlite_heap_bytes()  # while its connections are open
    return [
        (rss[1] - rss[0]) / n,
        (rss[4] - rss[2]) / (2 * n),
        traced / n,
        latencies[len(latencies) // 2] * 1e3,
        latencies[int(len(latencies) * 0.99)] * 1e3,
        float(sqlite_heap),
    ]


def sqlite_heap_bytes() -> int:
    """What SQLite's own allocator holds in this process (its page caches, statements):
    RSS that is neither Python's nor any one session's (0 where the library is not
    found)."""
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return 0
    used = ctypes.CDLL(name).sqlite3_memory_used
    used.restype = ctypes.c_int64
    return int(used())


async def warm_session_bytes(count: str, path: str) -> float:
    """RSS per session that made one send and stays warm (``passivate_after=None``), in
    this fresh process: the baseline the idle figures are read against."""
    n = int(count)
    echo = _echo_tool()
    llm = FunctionLLM(_answer)
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        await (await spawn_session(runtime, llm=llm, tools=[echo])).send("warm")
        gc.collect()
        before = rss_bytes()
        sessions = [
            await spawn_session(runtime, llm=llm, tools=[echo], passivate_after=None)
            for _ in range(n)
        ]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.send, "hello")
        llm.requests.clear()
        gc.collect()
        return (rss_bytes() - before) / n


async def reactivation_ms(sends: str, times: str, path: str) -> list[float]:
    """The p50 and p99 re-activation of one session with a long history (``sends`` sends,
    so its log holds snapshots): each time it has passivated, a look at its state starts
    it from its latest snapshot and the tail after it."""
    echo = _echo_tool()
    llm = FunctionLLM(_answer)
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(
            runtime, llm=llm, tools=[echo], passivate_after=IDLE_TIME / 10
        )
        for i in range(int(sends)):
            await session.send(f"message {i}")
        llm.requests.clear()
        latencies = []
        with runtime.subscribe() as events:
            for _ in range(int(times)):
                while not isinstance(await events.receive(), ActorPassivated):
                    pass
                began = time.perf_counter()
                await session.state()
                latencies.append(time.perf_counter() - began)
        latencies.sort()
        version = await store.stream_version(f"session/{session.id}")
    return [
        latencies[len(latencies) // 2] * 1e3,
        latencies[int(len(latencies) * 0.99)] * 1e3,
        float(version),
    ]


def _idle_memory(folder: Path, *, quick: bool) -> Figures:
    """Idle sessions' memory and re-activation, each in a fresh process."""
    first, marginal, live, p50, p99, sqlite_heap = in_fresh_process(
        "actors.bench._agents:idle_session_figures", str(WAVE), str(folder / "waves.sqlite")
    )
    warm: float = in_fresh_process(
        "actors.bench._agents:warm_session_bytes", str(WAVE), str(folder / "warm.sqlite")
    )
    long_p50, long_p99, version = in_fresh_process(
        "actors.bench._agents:reactivation_ms",
        "50" if quick else "200",
        "20" if quick else "100",
        str(folder / "long.sqlite"),
    )
    return {
        "idle_time_s": IDLE_TIME,
        "kb_per_idle_session": round(marginal / 1024, 2),
        "idle_sessions_measured": 5 * WAVE,
        "kb_per_idle_session_first_wave": round(first / 1024, 2),
        "kb_per_warm_session_baseline": round(warm / 1024, 2),
        "live_kb_per_idle_session": round(live / 1024, 2),
        "sqlite_heap_mib": round(sqlite_heap / 2**20, 2),
        "reactivation_ms_p50": round(p50, 3),
        "reactivation_ms_p99": round(p99, 3),
        "reactivation_long_ms_p50": round(long_p50, 3),
        "reactivation_long_ms_p99": round(long_p99, 3),
        "reactivation_long_events": int(version),
    }


def _memory(folder: Path, *, quick: bool, registered: int | None = None) -> Figures:
    """Idle and registered sessions' memory, each in a fresh process."""
    figures: Figures = {}
    n_idle = 1_000 if quick else 5_000
    measure = "actors.bench._agents:idle_bytes"
    idle: float = in_fresh_process(measure, "session", str(n_idle), str(folder / "idle.sqlite"))
    bare: float = in_fresh_process(measure, "actor", str(n_idle), str(folder / "bare.sqlite"))
    figures["idle_session_bytes"] = round(idle)
    figures["idle_actor_bytes"] = round(bare)
    figures["idle_sessions_per_gib"] = round(2**30 / idle) if idle > 0 else 0
    # The full run creates the million (unless --registered says fewer); --quick
    # extrapolates from 20,000.
    n_registered = registered or (20_000 if quick else 1_000_000)
    per_registered, per_active, whole = in_fresh_process(
        "actors.bench._agents:registered_bytes",
        str(n_registered),
        "1000",
        str(folder / "registered.sqlite"),
    )
    figures["registered_sessions_measured"] = n_registered
    figures["registered_session_bytes"] = round(per_registered)
    figures["active_session_bytes"] = round(per_active)
    # As measured when the process held the million, else linear from the two
    # per-session figures measured above (and said so).
    million = whole + per_registered * (1_000_000 - n_registered)
    figures["rss_bytes_1m_registered_1k_active"] = round(million)
    figures["rss_1m_registered_extrapolated"] = n_registered != 1_000_000
    figures["gib_1m_registered_1k_active"] = round(million / 2**30, 3)
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
        registered = getattr(args, "registered", None)  # `powertrio bench` passes none
        figures.update(_memory(folder, quick=quick, registered=registered))
        figures.update(_idle_memory(folder, quick=quick))
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--registered N``: create N sessions for the million-registered figure (it is then
    projected linearly to a million and says so)."""
    parser.add_argument(
        "--registered",
        type=int,
        default=None,
        help="sessions to create for rss_bytes_1m_registered_1k_active (default: 1,000,000; "
        "20,000 with --quick); fewer are projected to a million",
    )
