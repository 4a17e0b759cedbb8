"""The simulation's small scenarios replayed on a real PostgreSQL with real node processes:
after each step the lease table holds the owners and epochs the simulation says.

Each scenario is sequenced so that its outcome does not hang on which node's round comes
first (one node at a time can take what is free), so the simulation's table is the one
the real fleet must reach, shard by shard."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import _postgres
import psycopg
import pytest
import trio
from _tcp_proxy import TcpProxy
from _wait import wait_until

from actors.bench._child import NodeProcess as Child
from runtime._cluster._fleet_sim import Fault, SimConfig, simulate
from runtime.testing import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "_cluster_node.py"
TTL = 1.5  # tests/_cluster_node.py
SHARDS = 16

# n0 starts alone; n1 joins at 10 s, is killed at 20 s and restarts at 30 s; n0 is
# paused at 40 s past its lease and resumed at 45 s; n2 joins at 60 s.
SCENARIO = SimConfig(
    nodes=3,
    shards=SHARDS,
    sessions=0,
    seed=3,
    duration=75.0,
    ttl=TTL,
    faults=(
        Fault("crash", 0.0, 10.0, node=1),
        Fault("crash", 0.0, 60.0, node=2),
        Fault("crash", 20.0, 10.0, node=1),
        Fault("pause", 40.0, 5.0, node=0),
    ),
    snapshots=(9.0, 19.0, 29.0, 39.0, 44.5, 59.0, 74.0),
)

# n0 starts alone, n1 joins at 10 s; n1 is cut off from the database at 20 s (every
# connection reset) past its lease, and healed; n0 is black-holed at 40 s (nothing flows,
# its calls run late), and healed. Replayed through a TCP proxy per node.
PARTITIONS = SimConfig(
    nodes=2,
    shards=SHARDS,
    sessions=0,
    seed=4,
    duration=60.0,
    ttl=TTL,
    faults=(
        Fault("crash", 0.0, 10.0, node=1),
        Fault("partition", 20.0, 6.0, node=1),
        Fault("partition", 40.0, 6.0, node=0),
    ),
    snapshots=(9.0, 19.0, 25.5, 39.0, 45.5, 59.0),
)

Table = tuple[tuple[str | None, int], ...]


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = _postgres.fresh_schema()
    yield name
    trio.run(_postgres.drop_schema, postgres_server, name)


def _table(server: PostgresServer, schema: str) -> Table:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        try:
            rows = conn.execute("SELECT node, epoch FROM shard_leases ORDER BY shard").fetchall()
        except psycopg.errors.UndefinedTable:
            return ()
    return tuple((None if node is None else str(node), int(epoch)) for node, epoch in rows)


class _Fleet:
    """Node processes on ``schema``, and the lease table they must reach."""

    def __init__(
        self, server: PostgresServer, schema: str, tmp_path: Path, expected: tuple[Table, ...]
    ) -> None:
        self.server, self.schema, self.tmp_path, self.expected = server, schema, tmp_path, expected
        self.started: list[Child] = []
        self.seen: list[Table] = []

    def start(self, name: str, dsn: str | None = None) -> Child:
        dsn = self.server.dsn() if dsn is None else dsn
        args = [sys.executable, str(CHILD), dsn, self.schema, name, "0", "0", "0"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        log = self.tmp_path / f"{name}-{len(self.started)}.log"
        child = Child(name, args, env, log)
        self.started.append(child)
        return child

    def reach(self, step: int, what: str) -> None:
        expected = self.expected[step]

        def agrees() -> bool:
            self.seen.append(_table(self.server, self.schema))
            return self.seen[-1] == expected

        wait_until(
            agrees,
            lambda: f"{what}: the simulation says {expected}, the database {self.seen[-1]}",
            timeout=30,
        )

    def close(self) -> None:
        for child in self.started:
            child.close()


@pytest.mark.slow
def test_a_real_fleet_reaches_the_owners_and_epochs_the_simulation_says(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    expected = simulate(SCENARIO).snapshots
    fleet = _Fleet(postgres_server, schema, tmp_path, expected)
    start, reach = fleet.start, fleet.reach
    try:
        n0 = start("n0")
        reach(0, "n0 alone")
        n1 = start("n1")
        reach(1, "n1 joined")
        n1.close()  # SIGKILL
        reach(2, "n1 killed")
        n1 = start("n1")
        reach(3, "n1 restarted")
        n0.proc.send_signal(signal.SIGSTOP)
        reach(4, "n0 paused past its lease")
        n0.proc.send_signal(signal.SIGCONT)
        reach(5, "n0 resumed")
        start("n2")
        reach(6, "n2 joined")
    finally:
        fleet.close()
    print(f"agreed on {len(expected)} tables of {SHARDS} shards: {expected[-1]}")


@pytest.mark.slow
def test_cut_off_and_black_holed_nodes_reach_the_owners_and_epochs_the_simulation_says(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    expected = simulate(PARTITIONS).snapshots
    fleet = _Fleet(postgres_server, schema, tmp_path, expected)
    proxies = [TcpProxy(postgres_server.host, postgres_server.port) for _ in range(2)]
    try:
        fleet.start("n0", proxies[0].dsn(postgres_server.dsn()))
        fleet.reach(0, "n0 alone")
        fleet.start("n1", proxies[1].dsn(postgres_server.dsn()))
        fleet.reach(1, "n1 joined")
        proxies[1].cut()
        fleet.reach(2, "n1 cut off past its lease")
        proxies[1].heal()
        fleet.reach(3, "n1 healed")
        proxies[0].black_hole()
        fleet.reach(4, "n0 black-holed past its lease")
        proxies[0].heal()
        fleet.reach(5, "n0 healed")
    finally:
        fleet.close()
        for proxy in proxies:
            proxy.close()
    print(f"agreed on {len(expected)} tables of {SHARDS} shards: {expected[-1]}")
