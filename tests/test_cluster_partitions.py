"""Three node processes reach PostgreSQL each through its own TCP proxy, and the test cuts,
black-holes and delays those links, pauses a node and kills one, while every node drives
sessions. Afterwards the history is checked: no acknowledged send lost, no tool run
twice, no append by a node that did not hold its shard's lease at that moment."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import _postgres
import psycopg
import pytest
import trio
from _tcp_proxy import TcpProxy
from _wait import wait_until

import actors
from actors.bench._child import NodeProcess as Child
from actors.testing import assert_runs_end_once
from protocols.codec import decode_record
from runtime import RecordedEvent
from runtime._cluster._node import placement_key, shard_of
from runtime.postgres import open_postgres_store
from runtime.testing import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "_cluster_node.py"
SESSIONS = 36
ROUNDS = 3
SHARDS = 16  # tests/_cluster_node.py

# Every append and every change of a lease row, with the server's time: an append must
# be made by the node the shard's latest lease row names (the row is locked from the
# fence's check to the commit, so neither a takeover nor the node's own hand-back falls
# in between). An append's time is taken as its transaction commits (a deferred
# trigger), not as it inserts: a lease handed back between the two counts as late.
_AUDIT = """
CREATE TABLE audit_appends (stream text, node text, at timestamptz);
CREATE FUNCTION audit_append() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO audit_appends VALUES (NEW.stream, current_setting('application_name'),
        clock_timestamp());
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER audit_append AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION audit_append();
CREATE TABLE audit_leases (shard integer, node text, epoch bigint, at timestamptz);
INSERT INTO audit_leases SELECT shard, node, epoch, clock_timestamp() FROM shard_leases;
CREATE FUNCTION audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO audit_leases VALUES (NEW.shard, NEW.node, NEW.epoch, clock_timestamp());
    RETURN NULL;
END $$;
CREATE TRIGGER audit_lease AFTER UPDATE ON shard_leases FOR EACH ROW
    WHEN (OLD.node IS DISTINCT FROM NEW.node OR OLD.epoch IS DISTINCT FROM NEW.epoch)
    EXECUTE FUNCTION audit_lease();
"""


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = _postgres.fresh_schema()
    yield name
    trio.run(_postgres.drop_schema, postgres_server, name)


def _sql(server: PostgresServer, schema: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        cursor = conn.execute(query.encode())
        return cursor.fetchall() if cursor.description else []


def _holding(server: PostgresServer, schema: str, node: str) -> int:
    rows = _sql(server, schema, f"SELECT count(*) FROM shard_leases WHERE node = '{node}'")
    return int(str(rows[0][0]))


def _answered(child: Child) -> list[tuple[int, int, str]]:
    found = []
    for line in child.lines():
        if line.startswith("answered "):
            _, k, j, _code, status = line.split()
            found.append((int(k), int(j), status))
    return found


def _said(child: Child, prefix: str) -> Callable[[], bool]:
    return lambda: any(line.startswith(prefix) for line in child.lines())


def _wait(what: str, done: Callable[[], bool], *children: Child, seconds: float = 60) -> None:
    def alive() -> None:
        for child in children:
            if child.proc.poll() is not None:
                tail = "\n".join(child.lines()[-30:])
                raise AssertionError(f"node {child.name} exited waiting for {what}:\n{tail}")

    wait_until(done, what, timeout=seconds, check=alive)


async def _records(server: PostgresServer, schema: str) -> list[RecordedEvent]:
    async with open_postgres_store(server.dsn(), schema=schema) as store:
        return await store.read_all()


def _late_fenced(server: PostgresServer, schema: str) -> tuple[list[str], int]:
    """Appends to placed streams made by a node the shard's lease did not name (each with
    the shard's lease history up to it); of how many."""
    leases: dict[int, list[tuple[object, str | None, int]]] = {}
    for shard, node, epoch, at in _sql(
        server, schema, "SELECT shard, node, epoch, at FROM audit_leases ORDER BY at"
    ):
        leases.setdefault(int(str(shard)), []).append(
            (at, None if node is None else str(node), int(str(epoch)))
        )
    late: list[str] = []
    checked = 0
    for stream, node, at in _sql(server, schema, "SELECT stream, node, at FROM audit_appends"):
        key = placement_key(str(stream))
        if key is None:
            continue
        checked += 1
        shard = shard_of(key, SHARDS)
        before = [row for row in leases[shard] if row[0] <= at]  # type: ignore[operator]
        if not before or before[-1][1] != node:
            late.append(f"{node} appended to {stream} (shard {shard}) at {at}: {before[-3:]}")
    return late, checked


@pytest.mark.slow
def test_nodes_cut_off_paused_and_killed_lose_nothing_and_run_nothing_twice(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    tool_log = tmp_path / "tools.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "CLUSTER_TOOL_LOG": str(tool_log),
        "CLUSTER_TOOL_SECONDS": "0.3",
    }
    server = postgres_server
    thirds = [(0, 12), (12, 24), (24, SESSIONS)]
    proxies = {name: TcpProxy(server.host, server.port) for name in "abc"}
    children = [
        Child(
            name,
            [
                sys.executable,
                str(CHILD),
                f"{proxies[name].dsn(server.dsn())} application_name={name}",
                schema,
                name,
                str(first),
                str(last),
                str(ROUNDS),
            ],
            env,
            tmp_path / f"{name}.log",
        )
        for name, (first, last) in zip("abc", thirds, strict=True)
    ]
    a, b, c = children
    try:
        for child in children:
            _wait(f"{child.name} ready", _said(child, "ready"), child)
        _sql(server, schema, _AUDIT)
        for child in children:
            child.tell("go")

        # a is cut off (connections reset, new ones refused) until b and c took its shards.
        _wait("a's first answers", lambda: len(_answered(a)) >= 3, *children)
        proxies["a"].cut()
        _wait("a's shards taken", lambda: _holding(server, schema, "a") == 0, b, c)
        proxies["a"].heal()

        # b is black-holed (nothing flows, nothing is reset) until its shards moved.
        _wait("b holding shards", lambda: _holding(server, schema, "b") > 0, *children)
        proxies["b"].black_hole()
        _wait("b's shards taken", lambda: _holding(server, schema, "b") == 0, a, c)
        proxies["b"].heal()

        # c's link slows down; a is paused past its lease, then resumed.
        proxies["c"].delay(0.05)
        _wait("a holding shards again", lambda: _holding(server, schema, "a") > 0, *children)
        a.proc.send_signal(signal.SIGSTOP)
        _wait("a's shards taken again", lambda: _holding(server, schema, "a") == 0, b, c)
        a.proc.send_signal(signal.SIGCONT)
        proxies["c"].heal()

        # b is killed once it holds shards again.
        _wait("b holding shards again", lambda: _holding(server, schema, "b") > 0, *children)
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()

        for child in (a, c):
            _wait(f"{child.name} driven", _said(child, "driven"), a, c, seconds=120)

        def settled() -> bool:
            row = _sql(
                server,
                schema,
                "SELECT count(*) FILTER (WHERE type = 'session.run_started') - "
                "count(*) FILTER (WHERE type = 'session.run_finished') FROM events",
            )
            return row[0][0] == 0

        _wait("every run the log started to end", settled, a, c)
        for child in (a, c):
            child.tell("stop")
            _wait(f"{child.name} stats", _said(child, "stats"))
    finally:
        for child in children:
            child.close()
        for proxy in proxies.values():
            proxy.close()

    records = trio.run(_records, server, schema)
    finished: Counter[str] = Counter()
    for record in records:
        event = decode_record(record)
        if isinstance(event, actors.events.RunFinished):
            finished[event.run_id] += 1
    acknowledged = [(k, j) for child in children for k, j, _ in _answered(child)]
    lost = sum(1 for k, j in acknowledged if finished[f"run-{k}-{j}"] == 0)
    lines = [json.loads(line) for line in tool_log.read_text().splitlines()]
    calls = Counter((line["call"], line["task"]) for line in lines)
    doubled = sum(1 for n in calls.values() if n > 1) + sum(1 for n in finished.values() if n > 1)
    late, audited = _late_fenced(server, schema)
    fenced = sum(
        int(x.split()[1].removeprefix("fenced="))
        for child in (a, c)
        for x in child.lines()
        if x.startswith("stats")
    )
    print(
        f"acknowledged={len(acknowledged)} tools={len(lines)} audited_appends={audited} "
        f"fenced={fenced} lost={lost} doubled={doubled} late_fenced={len(late)}"
    )
    print("\n".join(late))
    assert (lost, doubled, len(late)) == (0, 0, 0)
    assert audited > 0
    assert fenced > 0  # the cut-off and paused nodes' stale appends were refused
    assert all(proxy.connections > 0 for proxy in proxies.values())
    # The surviving drivers had every send answered, as completed.
    for child, (first, last) in ((a, thirds[0]), (c, thirds[2])):
        answered = _answered(child)
        assert len(answered) == (last - first) * ROUNDS, child.lines()[-20:]
        assert {status for _, _, status in answered} == {"completed"}
    assert_runs_end_once(records)
