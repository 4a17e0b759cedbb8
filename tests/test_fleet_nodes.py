"""``powertrio serve --node`` on PostgreSQL, as real processes: two nodes split a fleet of
interval-scheduled agents; one is SIGKILLed, and within its lease TTL (plus a margin) the
other runs its agents: ``fleet status`` names the new node, runs go on, no schedule slot
fires twice and every run's session ends its run once. SIGTERM drains the survivor and it
exits 0, handing its shards back."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import _postgres
import psycopg
import pytest
import trio
from _cli import run_cli
from _wait import wait_until

from actors.testing import assert_runs_end_once, assert_timers_fire_once
from runtime import RecordedEvent
from runtime._cluster._node import placement_key, shard_of
from runtime.postgres import open_postgres_store
from runtime.testing import PostgresServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parent.parent
AGENTS = [f"agent{i}" for i in range(8)]
FLEET = "".join(
    f'[agents.{name}]\nprompt = "You tick."\ninput = "Tick."\n'
    f'[[agents.{name}.schedules]]\nevery = "1s"\n'
    for name in AGENTS
)
_databases = itertools.count()


def _agent_shard(name: str) -> int:
    """The shard a fleet node places agent ``name`` on (its stream's placement key)."""
    from actors.fleet import FLEET_PLACED

    key = placement_key(f"fleet/agent/{name}", FLEET_PLACED)
    assert key is not None
    return shard_of(key, 16)


@pytest.fixture
def dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database on the session's server, as a ``postgresql://`` URI (what ``--db``
    takes); dropped after the test."""
    name = f"fleet_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    server = postgres_server
    yield f"postgresql://{server.user}@{server.host}:{server.port}/{name}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--db", dsn, *args, cwd=ROOT, env=_env())


class Serve:
    """One ``powertrio serve --node NAME`` process, its stderr in a file."""

    def __init__(self, dsn: str, name: str, log: Path, *extra: str) -> None:
        self.name = name
        self.log = log
        self._err: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "actors.cli", "--db", dsn, "serve", "--node", name),
                *("--poll", "0.2", "--drain-deadline", "30", *extra),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            env=_env(POWERTRIO_DEMO_DELAY="0.05"),
        )

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._err.close()


def _status(dsn: str) -> dict[str, dict[str, object]]:
    done = run_cli("--db", dsn, "fleet", "status", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {a["name"]: a for a in json.loads(done.stdout)["agents"]}


def _nodes(dsn: str) -> dict[str, str]:
    """Node -> its state, as ``fleet status`` says (run in this process)."""
    done = run_cli("--db", dsn, "fleet", "status", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {n["name"]: n["state"] for n in json.loads(done.stdout)["nodes"]}


_HOSTING = re.compile(r"^node (\S+) (?:serving|now hosts) (\d+) agents?\b", re.MULTILINE)


def _said_hosting(node: Serve) -> int | None:
    """How many agents the node said last that it hosts (start-up line, then changes)."""
    said = _HOSTING.findall(node.text())
    return int(said[-1][1]) if said else None


def _wait(what: str, done: Callable[[], bool], nodes: list[Serve], seconds: float = 90) -> None:
    def alive() -> None:
        for node in nodes:
            if node.proc.poll() is not None:
                pytest.fail(f"node {node.name} exited waiting for {what}:\n{node.text()[-3000:]}")

    wait_until(done, what, timeout=seconds, every=0.2, check=alive)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return str(reply.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return ""


def _metrics_args(port: int | None) -> tuple[str, ...]:
    return () if port is None else ("--metrics-port", str(port))


def _settled(dsn: str) -> bool:
    """The two nodes hold 8 shards each, every agent runs on the node holding its shard
    (as ``fleet status`` says), and every agent has finished a run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            rows = conn.execute(
                "SELECT shard, node FROM powertrio.shard_leases WHERE expires_at > now()"
            ).fetchall()
        except psycopg.errors.UndefinedTable:  # no node has started yet
            return False
    holder = {int(shard): str(node) for shard, node in rows}
    if sorted(Counter(holder.values()).values()) != [8, 8]:
        return False
    status = _status(dsn)
    return all(
        s["node"] == holder.get(_agent_shard(n)) and _runs(s) >= 1 for n, s in status.items()
    )


def _runs(agent: dict[str, object]) -> int:
    last = agent["last_run"]
    return 0 if not isinstance(last, str) else int(last.removeprefix("run-"))


async def _records(dsn: str) -> list[RecordedEvent]:
    async with open_postgres_store(dsn) as store:
        return await store.read_all()


@pytest.mark.slow
def test_two_nodes_split_a_fleet_and_one_takes_over_when_the_other_is_killed(
    dsn: str, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET, encoding="utf-8")
    applied = _cli(dsn, "fleet", "apply", str(fleet))
    assert applied.returncode == 0, applied.stderr
    otel = importlib.util.find_spec("prometheus_client") is not None
    ports = {name: _free_port() for name in ("a", "b")} if otel else {}
    nodes = [
        Serve(dsn, name, tmp_path / f"{name}.log", *_metrics_args(ports.get(name)))
        for name in ("a", "b")
    ]
    try:
        _wait(
            "the shards split 8/8, each agent on its shard's node, past its first run",
            lambda: _settled(dsn),
            nodes,
        )

        # What each node says it hosts follows the leases to what `fleet status` says
        # (its start-up line alone counted only the shards it took first).
        hosted: Counter[str] = Counter()

        def told() -> bool:
            hosted.clear()
            hosted.update(str(s["node"]) for s in _status(dsn).values())
            return all(_said_hosting(n) == hosted[n.name] for n in nodes)

        _wait("each node's last hosting line to match fleet status", told, nodes)
        victim_name = hosted.most_common(1)[0][0]
        victim = next(n for n in nodes if n.name == victim_name)
        b = next(n for n in nodes if n.name != victim_name)  # the survivor
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        at_kill = _status(dsn)
        moved = sorted(n for n, s in at_kill.items() if s["node"] == victim_name)
        assert moved, at_kill
        runs_at_kill = {n: _runs(s) for n, s in at_kill.items()}

        def taken_over() -> bool:
            now = _status(dsn)
            return all(
                s["node"] == b.name and _runs(s) >= runs_at_kill[n] + 2 for n, s in now.items()
            )

        _wait(f"node {b.name} running {moved} (ttl 3 s)", taken_over, [b])
        # The victim recorded no stop; its lease lapsed: lost, not running forever.
        _wait(
            f"fleet status calling {victim_name} lost",
            lambda: _nodes(dsn) == {victim_name: "lost", b.name: "running"},
            [b],
        )
        if otel:  # the survivor's lease gauge counts every shard (16)
            scraped = {"text": ""}
            held = f'powertrio_leases{{node="{b.name}",state="shards_held"}} 16.0'

            def all_shards() -> bool:
                scraped["text"] = _scrape(ports[b.name])
                return held in scraped["text"]

            _wait(f"{b.name}'s /metrics counting 16 shards", all_shards, [b])
            surplus = f'powertrio_leases{{node="{b.name}",state="shards_surplus"}} 0.0'
            assert surplus in scraped["text"]
        b.proc.send_signal(signal.SIGTERM)
        assert b.proc.wait(timeout=60) == 0, b.text()
        assert f"node {b.name} drained" in b.text()
    finally:
        for node in nodes:
            node.close()
    records = trio.run(_records, dsn)
    assert_timers_fire_once(records)
    assert_runs_end_once([r for r in records if not r.stream.startswith("fleet/")])
    # Each agent's runs are numbered once each: no slot started two runs.
    for name in AGENTS:
        started = [
            json.loads(r.data)["run_id"]
            for r in records
            if r.stream == f"fleet/agent/{name}" and r.type == "fleet.run_started"
        ]
        assert len(started) == len(set(started)), (name, started)
    # b handed every shard back as it left.
    with psycopg.connect(dsn, autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM powertrio.shard_leases WHERE node = %s AND expires_at > now()",
            (b.name,),
        ).fetchone()
    assert held == (0,)


async def test_a_fleet_node_must_place_its_agents_streams(postgres_server: PostgresServer) -> None:
    """A node whose ``placed`` leaves out ``fleet/agent`` would run agents unfenced."""
    from actors.cluster import host_node
    from actors.fleet import FLEET_PLACED, FleetNode
    from protocols.errors import ConfigError
    from runtime import open_runtime
    from runtime.cluster import Node

    schema = _postgres.fresh_schema()
    try:
        async with (
            open_postgres_store(postgres_server.dsn(), schema=schema) as store,
            open_runtime(store=store, node=Node(name="a")) as runtime,
            host_node(runtime, {}) as host,
        ):
            with pytest.raises(ConfigError) as caught:
                FleetNode(runtime, node="a", llm_for=lambda _decl: None, host=host)  # type: ignore[arg-type, return-value]
    finally:
        await _postgres.drop_schema(postgres_server, schema)
    assert str(caught.value) == (
        "a fleet node on PostgreSQL must place its agents' streams: open the runtime with "
        f"Node(placed={FLEET_PLACED!r})"
    )
    assert FLEET_PLACED == ("session", "board", "fleet/agent")
