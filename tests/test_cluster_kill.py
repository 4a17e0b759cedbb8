"""Three node processes share one PostgreSQL and drive 100 sessions; one is killed with
SIGKILL mid-run, another paused (SIGSTOP) past its lease and resumed, so its late appends
are fenced. Nothing is lost, nothing runs twice, every transcript stays provider-valid."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import _postgres
import psycopg
import pytest
import trio
from _wait import wait_until

import actors
from actors._session._events import evolve as session_evolve  # the fold, as the owner folds
from actors.bench._child import NodeProcess as Child
from actors.lowlevel import is_provider_valid
from actors.testing import assert_runs_end_once, assert_timers_fire_once
from protocols.codec import decode_record
from runtime import RecordedEvent
from runtime.postgres import open_postgres_store
from runtime.testing import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "_cluster_node.py"
SESSIONS = 100
ROUNDS = 3
TTL = 1.5  # the children's lease TTL (tests/_cluster_node.py)


def _answered(child: Child) -> list[str]:
    return [line for line in child.lines() if line.startswith("answered ")]


def _wait(
    what: str | Callable[[], str],
    done: Callable[[], bool],
    seconds: float = 120,
    *,
    child: Child | None = None,
) -> None:
    def alive() -> None:
        if child is not None and child.proc.poll() is not None:
            tail = "\n".join(child.lines()[-30:])
            name = what if isinstance(what, str) else what()
            raise AssertionError(f"node {child.name} exited waiting for {name}:\n{tail}")

    def described() -> str:
        tail = "" if child is None else "\n".join(child.lines()[-30:])
        return f"{what if isinstance(what, str) else what()}\n{tail}"

    wait_until(done, described, timeout=seconds, check=alive)


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = _postgres.fresh_schema()
    yield name
    trio.run(_postgres.drop_schema, postgres_server, name)


def _settled(server: PostgresServer, schema: str) -> bool | str:
    """Every run the log started has ended, and every timer it scheduled has fired."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE type = 'session.run_started'), "
            "count(*) FILTER (WHERE type = 'session.run_finished'), "
            "count(*) FILTER (WHERE type = 'timer.scheduled'), "
            "count(*) FILTER (WHERE type = 'timer.fired') FROM events"
        ).fetchone()
    assert row is not None
    started, finished, scheduled, fired = row
    if started == finished and scheduled == fired:
        return True
    return f"runs {started} started, {finished} ended; timers {scheduled} set, {fired} fired"


async def _records(server: PostgresServer, schema: str) -> list[RecordedEvent]:
    async with open_postgres_store(server.dsn(), schema=schema) as store:
        return await store.read_all()


@pytest.mark.slow
def test_three_nodes_survive_a_kill_and_a_pause(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    tool_log = tmp_path / "tools.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "CLUSTER_TOOL_LOG": str(tool_log),
        "CLUSTER_TOOL_SECONDS": "0.4",
        "CLUSTER_WAKE_SECONDS": "1.0",
    }
    thirds = [(0, 34), (34, 67), (67, SESSIONS)]
    base = [sys.executable, str(CHILD), postgres_server.dsn(), schema]
    children = [
        Child(
            name,
            [*base, name, str(a), str(b), str(ROUNDS)],
            env,
            tmp_path / f"{name}.log",
        )
        for name, (a, b) in zip("abc", thirds, strict=True)
    ]
    killed, paused, calm = children
    try:
        for child in children:
            _wait(f"{child.name} ready", lambda c=child: "ready" in c.lines(), child=child)
        for child in children:
            child.tell("go")
        # Kill a mid-run, then pause b while it still has sends in flight.
        _wait("a first answers", lambda: len(_answered(killed)) >= 10)
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait()
        _wait("b in flight", lambda: len(_answered(paused)) >= 10)
        paused.proc.send_signal(signal.SIGSTOP)
        time.sleep(2 * TTL + 1)
        paused.proc.send_signal(signal.SIGCONT)
        for child in (paused, calm):
            _wait(f"{child.name} driven", lambda c=child: "driven" in c.lines(), child=child)
        _wait(
            lambda: f"the log to settle: {_settled(postgres_server, schema)}",
            lambda: _settled(postgres_server, schema) is True,
            child=calm,
        )
        for child in (paused, calm):
            child.tell("stop")
            _wait(f"{child.name} stats", lambda c=child: any(x[:5] == "stats" for x in c.lines()))
    finally:
        for child in children:
            child.close()

    # Every send of the surviving drivers was answered, as completed.
    for child, (first, last) in ((paused, thirds[1]), (calm, thirds[2])):
        answered = _answered(child)
        assert len(answered) == (last - first) * ROUNDS, child.lines()[-20:]
        assert {line.split()[-1] for line in answered} == {"completed"}
    stats = next(x for x in paused.lines() if x.startswith("stats"))
    fenced = int(stats.split()[1].removeprefix("fenced="))
    assert fenced > 0, stats

    records = trio.run(_records, postgres_server, schema)
    # Every acknowledged send (a run the log started, the killed driver's too) ended once.
    assert_runs_end_once(records)
    # Every timer fired once, by whoever owned its session when it was due.
    assert_timers_fire_once(records)
    scheduled = [r for r in records if r.type == "timer.scheduled"]
    fired = [r for r in records if r.type == "timer.fired"]
    assert len(scheduled) == len(fired) >= (SESSIONS - 34) * ROUNDS
    started = [r for r in records if r.type == "session.run_started"]
    assert len(started) >= (SESSIONS - 34) * ROUNDS
    # No tool ran twice (the default crash policy aborts a call that may have run).
    # A call is its key (stable across resumes) within its send (the task names it).
    lines = [json.loads(line) for line in tool_log.read_text().splitlines()]
    calls = Counter((line["call"], line["task"]) for line in lines)
    assert [call for call, n in calls.items() if n > 1] == []
    # Every transcript is provider-valid.
    states: dict[str, actors.SessionState] = {}
    for record in records:
        if record.stream.startswith("session/"):
            state = states.get(record.stream, actors.SessionState())
            states[record.stream] = session_evolve(state, decode_record(record))
    # (The killed driver may not have reached all of its sessions.)
    assert {f"session/s{k}" for k in range(34, SESSIONS)} <= set(states)
    for stream, state in states.items():
        assert is_provider_valid(state.transcript), stream
