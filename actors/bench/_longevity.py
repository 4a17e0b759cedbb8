"""Longevity benchmark: what a session of months costs, each figure beside its baseline.

``python -m actors.bench longevity [--json] [--quick]`` prints:

* ``send_cost_ratio_50k_vs_10``: the median send on a session of 50,000 messages over the
  median send on a session of 10 (both on disk, same model, same run, their sends
  interleaved so that the machine's load weighs on both alike); bar <= 1.1. Also the
  means (which count the sends that write a snapshot) and the CPU per send.
* ``restart_ms_50k_messages`` (snapshot + tail) beside ``full_fold_ms_50k_messages`` (the
  same session opened before it had a snapshot), each in a fresh process; bar <= 50.
  ``restart_cold_ms_50k_messages`` is the first restart in that process, which also
  builds the codec's hooks (once per process).
* ``wal_bytes_max_sustained``: the WAL's largest size while 256 writers append for 60 s
  (10 s with ``--quick``), beside its bound ``wal_bytes_bound`` (64 MiB).
* ``open_ms_1m_events``: opening a runtime on a log of 1,000,000 events with 1,000
  pending timers, from the timers checkpoint, beside ``open_full_scan_ms_1m_events`` (the
  first open, which folds the whole log); bar <= 200. ``--quick`` uses 100,000 events
  and says so in ``open_events``.
* ``run_cost_ratio_day90_vs_day1``: one agent woken hourly by a durable timer for 90
  days (2,160 runs, each with a tool call) under virtual time on SQLite, with the test
  kit: the mean CPU time of a run (all threads, the collector's share taken out) on its
  last day over its first (``--quick``: 10 days, ``sim_days`` says which), and
  ``run_cost_ratio_with_gc`` with the collector's share in (it grows with what the kit
  keeps: every request the model was sent); ``sim_logs_identical`` says two runs of it
  wrote the same log, event for event. Each run is a fresh process, and each day's
  figure the mean over both runs' runs of that day (the first run of each is cold and
  left out).

- ``context_tokens_max_over_budget``: the largest request a session with a context
  policy sent, over its budget (bar <= 1.0), beside its whole transcript's tokens over the
  same budget (what it would have sent without compaction; ``actors.bench._context``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import itertools
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from actors import AgentSpec, spawn_session, tool
from actors.events import SessionCreated
from protocols import (
    LLMRequest,
    LLMResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    default_registry,
)
from runtime import NewEvent, TimerScheduled, open_runtime, open_sqlite_store
from runtime.bench import Figures, in_fresh_process
from runtime.bench import _log as log_bench
from runtime.testing import FunctionLLM

from ._context import context_tokens_max_over_budget
from ._recorded import recorded_run

MIB = 2**20


def _answer(request: LLMRequest) -> LLMResponse:
    return LLMResponse(content="ok", usage=Usage(prompt_tokens=10, completion_tokens=2))


# -- a session of 50,000 messages ----------------------------------------------------------


def _history(session_id: str, messages: int) -> list[list[NewEvent]]:
    """The stream of a session whose runs each hold a user and an assistant message."""
    encode = default_registry.encode
    created = SessionCreated(session_id=session_id, system_prompt="", max_rounds=10)
    batches = [[NewEvent.from_encoded(encode(created))]]
    batch: list[NewEvent] = []
    for i in range(messages // 2):
        batch.extend(recorded_run(f"old-{i}", i))
        if len(batch) >= 3000:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


async def reopen_ms(path: str, times: str) -> list[float]:
    """Milliseconds to reopen the session ``long`` of the log at ``path``, ``times`` times
    in this process (the first also builds the codec's hooks, once per process)."""
    spent: list[float] = []
    for _ in range(int(times)):
        async with (
            open_sqlite_store(Path(path)) as store,
            open_runtime(store=store, seed=2) as runtime,
        ):
            start = time.perf_counter()
            await spawn_session(runtime, llm=FunctionLLM(_answer), session_id="long")
            spent.append((time.perf_counter() - start) * 1e3)
    return spent


async def _sends(paths: dict[str, Path], sends: int) -> dict[str, dict[str, float]]:
    """Sends on the session ``long`` of each log, interleaved: one send on each in turn
    (the order alternating), so a machine whose load drifts weighs on both alike."""
    latencies: dict[str, list[float]] = {name: [] for name in paths}
    cpu = dict.fromkeys(paths, 0.0)
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, path in paths.items():
            store = await stack.enter_async_context(open_sqlite_store(path))
            runtime = await stack.enter_async_context(open_runtime(store=store, seed=1))
            llm = FunctionLLM(_answer)
            sessions[name] = await spawn_session(runtime, llm=llm, session_id="long")
        order = list(sessions.items())
        for i in range(sends + 40):
            for name, session in order if i % 2 else reversed(order):
                start, start_cpu = time.perf_counter(), time.process_time()
                result = await session.send(f"new {i}")
                if i >= 40:  # the first sends write the first snapshot and warm the caches
                    latencies[name].append(time.perf_counter() - start)
                    cpu[name] += time.process_time() - start_cpu
                assert result.status == "completed", result
    return {
        name: {
            "send_median_ms": statistics.median(spent) * 1e3,
            "send_mean_ms": statistics.mean(spent) * 1e3,
            "send_cpu_ms": cpu[name] / sends * 1e3,
        }
        for name, spent in latencies.items()
    }


async def _build(path: Path, messages: int) -> None:
    async with open_sqlite_store(path) as store:
        version = 0
        for batch in _history("long", messages):
            version = (await store.append("session/long", batch, version)).version


def _session_costs(
    folder: Path, sessions: dict[str, int], sends: int
) -> dict[str, dict[str, float]]:
    """Sends on sessions of so many messages (by name), interleaved (wall median and
    mean, CPU), and for each, the time a fresh process takes to reopen it by a full fold
    and from its snapshot."""
    paths = {name: folder / f"{name}.sqlite" for name in sessions}
    for name, messages in sessions.items():
        trio.run(_build, paths[name], messages)
        shutil.copyfile(paths[name], folder / f"{name}-no-snapshot.sqlite")
    figures = trio.run(_sends, paths, sends)
    for name, path in paths.items():
        unfolded = folder / f"{name}-no-snapshot.sqlite"
        (full,) = in_fresh_process(f"{__name__}:reopen_ms", str(unfolded), "1")
        cold, warm = in_fresh_process(f"{__name__}:reopen_ms", str(path), "2")
        figures[name].update(full_fold_ms=full, restart_cold_ms=cold, restart_ms=warm)
    return figures


# -- opening a log of a million events -----------------------------------------------------


async def _open_costs(path: Path, events: int, timers: int) -> tuple[float, float]:
    """(first open: full fold, second open: checkpoint + tail) in ms."""
    filler = log_bench._payload(log_bench._registry(), 1)
    encode = default_registry.encode
    per_stream = events // timers
    async with open_sqlite_store(path, synchronous="OFF") as store:
        for t in range(timers):
            scheduled = TimerScheduled(timer_id=f"t{t}", due_at=4e9 + t, note="later")
            batch = [NewEvent.from_encoded(encode(scheduled)), *[filler] * (per_stream - 1)]
            await store.append(f"owner/{t}", batch, 0)
    times: list[float] = []
    for _ in range(2):
        async with open_sqlite_store(path) as store:
            start = time.perf_counter()
            async with open_runtime(store=store, seed=1) as runtime:
                times.append((time.perf_counter() - start) * 1e3)
                assert runtime.timers.statistics().pending == timers
    return times[0], times[1]


# -- the hourly agent ----------------------------------------------------------------------


class _GcClock:
    """Seconds spent in the garbage collector so far (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.total += time.process_time() - self._start


def _hourly_model(
    stamps: list[tuple[float, float]], gc_clock: _GcClock
) -> Callable[[LLMRequest], LLMResponse]:
    def model(request: LLMRequest) -> LLMResponse:
        if isinstance(request.messages[-1], ToolResultMessage):
            return LLMResponse(content="all quiet", usage=Usage(prompt_tokens=30))
        # A run begins (its first model call): CPU time (all threads), and GC time.
        stamps.append((time.process_time(), gc_clock.total))
        call = ToolCall(id=f"c{len(request.messages)}", name="check", arguments="{}")
        return LLMResponse(tool_calls=(call,), usage=Usage(prompt_tokens=20))

    return model


def _check() -> Any:
    async def check() -> str:
        """Look around."""
        return "nothing new"

    return tool(check)


def simulate(
    days: int, *, seed: int = 1
) -> tuple[list[tuple[object, ...]], list[tuple[float, float]]]:
    """Wake one agent hourly for ``days`` under virtual time, on SQLite, with the kit.

    Returns:
        The log (stream, version, type, data, metadata, recorded time of every event) and
        the cost of each run, from its first model call to the next run's: (CPU seconds
        of the process, of which seconds in the garbage collector).
    """
    from actors.testing import AdvanceClock, RuntimeHarness, SetTimer  # noqa: PLC0415

    stamps: list[tuple[float, float]] = []
    gc_clock = _GcClock()
    harness = RuntimeHarness(
        AgentSpec(name="hourly", tools=[_check()]),
        llm=FunctionLLM(_hourly_model(stamps, gc_clock)),
        seed=seed,
        store="sqlite",
        max_virtual_seconds=(days + 2) * 86_400.0,
    )
    gc.callbacks.append(gc_clock)
    try:
        trace = harness.run(
            operations=[
                SetTimer(delay=3600.0, every=3600.0, note="hourly"),
                AdvanceClock(days * 86_400.0 + 60),
            ]
        )
    finally:
        gc.callbacks.remove(gc_clock)
    records: list[tuple[object, ...]] = [
        (r.stream, r.version, r.type, r.data, r.metadata, r.recorded_at) for r in trace.records
    ]
    costs = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(stamps)]
    return records, costs


async def simulated(days: str) -> dict[str, object]:
    """:func:`simulate` in this process (a fresh one: see ``run``): its log's digest, for
    comparing two runs, and the runs' costs."""
    records, costs = await trio.to_thread.run_sync(simulate, int(days))
    return {"log": hashlib.sha256(repr(records).encode()).hexdigest(), "costs": costs}


def _ratio(value: float, baseline: float) -> float:
    return round(value / baseline, 3) if baseline > 0 else 0.0


def run(args: argparse.Namespace) -> Figures:
    """Every longevity figure beside its baseline (see the module docstring)."""
    quick = bool(getattr(args, "quick", False))
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sends = 60 if quick else 200
        sessions = _session_costs(folder, {"long": 50_000, "short": 10}, sends)
        long, short = sessions["long"], sessions["short"]
        figures["send_median_ms_50k_messages"] = round(long["send_median_ms"], 3)
        figures["send_median_ms_10_messages"] = round(short["send_median_ms"], 3)
        figures["send_cost_ratio_50k_vs_10"] = _ratio(
            long["send_median_ms"], short["send_median_ms"]
        )
        figures["send_mean_ratio_50k_vs_10"] = _ratio(long["send_mean_ms"], short["send_mean_ms"])
        figures["send_cpu_ms_50k_messages"] = round(long["send_cpu_ms"], 3)
        figures["send_cpu_ms_10_messages"] = round(short["send_cpu_ms"], 3)
        figures["send_cpu_ratio_50k_vs_10"] = _ratio(long["send_cpu_ms"], short["send_cpu_ms"])
        figures["restart_ms_50k_messages"] = round(long["restart_ms"], 1)
        figures["restart_cold_ms_50k_messages"] = round(long["restart_cold_ms"], 1)
        figures["full_fold_ms_50k_messages"] = round(long["full_fold_ms"], 1)
        seconds = 10.0 if quick else 60.0
        event = log_bench._payload(log_bench._registry(), 1)
        wal = trio.run(log_bench._wal_max_sustained, folder / "wal.sqlite", seconds, event)
        figures["wal_bytes_max_sustained"] = wal
        figures["wal_bytes_bound"] = 64 * MIB
        figures["wal_seconds"] = seconds
        events = 100_000 if quick else 1_000_000
        full, checkpointed = trio.run(_open_costs, folder / "open.sqlite", events, 1_000)
        figures["open_events"] = events
        figures["open_ms_1m_events"] = round(checkpointed, 1)
        figures["open_full_scan_ms_1m_events"] = round(full, 1)
    days = 10 if quick else 90
    # Each simulation in a fresh process: the workloads above leave this one a heap of a
    # million events' worth, which would weigh on the runs however old the agent is.
    sims = [in_fresh_process(f"{__name__}:simulated", str(days)) for _ in range(2)]
    runs: list[list[tuple[float, float]]] = [sim["costs"] for sim in sims]
    figures["sim_days"] = days
    figures["sim_runs"] = len(runs[0]) + 1
    figures["sim_logs_identical"] = int(sims[0]["log"] == sims[1]["log"])
    # CPU per run (all threads; the machine's other load does not count), without and
    # with the garbage collector's share (the kit keeps every request it was sent, its
    # LLMCall log for the invariants, so the collector's walks grow with the days). Each
    # day's figure is the mean over both simulations' runs of that day.
    first_day = [c for costs in runs for c in costs[1:24]]  # a simulation's first is cold
    last_day = [c for costs in runs for c in costs[-24:]]
    day1 = statistics.mean(cpu - in_gc for cpu, in_gc in first_day)
    last = statistics.mean(cpu - in_gc for cpu, in_gc in last_day)
    day1_gc = statistics.mean(cpu for cpu, _ in first_day)
    last_gc = statistics.mean(cpu for cpu, _ in last_day)
    figures["run_cpu_ms_day1"] = round(day1 * 1e3, 3)
    figures[f"run_cpu_ms_day{days}"] = round(last * 1e3, 3)
    figures["run_cost_ratio_day90_vs_day1"] = _ratio(last, day1)
    figures["run_cost_ratio_with_gc"] = _ratio(last_gc, day1_gc)
    figures.update(context_tokens_max_over_budget(args.quick))
    return figures


__all__ = ["run", "simulate"]
