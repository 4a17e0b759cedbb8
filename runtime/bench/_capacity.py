"""``python -m runtime.bench capacity``: what a fleet costs its one PostgreSQL, per unit.

The figures docs/cluster.md's capacity model is built from, each measured as the
server's own CPU time (its processes' ``/proc`` counters, the backends and the
postmaster's reaped children), so that they hold apart from how fast the client is:

- ``appends_per_pg_core_s``: durable appends (64 writers, group commit) per second of
  server CPU, beside ``store_appends_per_s`` (wall clock, on this machine);
- ``lease_round_us_fixed`` and ``lease_round_us_per_shard``: the server CPU of one
  node's lease round (``lease_tick``), from rounds renewing 21 shards (a node's share
  of 4096 among 200) and 4096 (one node holding all);
- ``notify_us_per_listener``: the server CPU of one ``NOTIFY`` per connection
  listening (the inbox's doorbell reaches every node), from 1 and 32 listeners.
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import TYPE_CHECKING

import trio

from .._cluster._sql import lease_tick, prepare_cluster_schema
from .._postgres._server import PostgresServer, postgres_missing, running_postgres
from .._postgres._store import open_postgres_store
from .._store._contract import NewEvent
from ._cluster import append_from_writers
from ._log import _payload, _registry

if TYPE_CHECKING:
    import psycopg

__all__ = ["run"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _server_cpu(postmaster: int) -> float:
    """CPU seconds of the server: the postmaster, its live children, its reaped ones."""
    fields = _stat(postmaster)
    if fields is None:
        return 0.0
    # utime, stime, cutime, cstime are fields 14-17 (index 11-14 after the name).
    ticks = sum(int(x) for x in fields[11:15])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        child = _stat(int(entry))
        if child is not None and int(child[1]) == postmaster:
            ticks += int(child[11]) + int(child[12])
    return ticks / _TICKS


def _postmaster(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    fields = _stat(int(row[0]))
    assert fields is not None
    return int(fields[1])


async def _appends(
    server: PostgresServer, postmaster: int, seconds: float, event: NewEvent
) -> tuple[int, float, float]:
    """64 tasks appending one event at a time to their own streams: appends, seconds,
    server CPU seconds (read while the store's backends still run: a backend that just
    exited may not be reaped, its time counted nowhere yet)."""
    async with open_postgres_store(server.dsn(), schema="appends") as store:
        before = _server_cpu(postmaster)
        count, elapsed = await append_from_writers(store, seconds, event)
        spent = _server_cpu(postmaster) - before
    return count, elapsed, spent


def _lease_rounds(conn: psycopg.Connection, postmaster: int, others: int, rounds: int) -> float:
    """Server CPU microseconds of one lease round of a node among ``others + 1``."""
    conn.execute("DROP SCHEMA IF EXISTS lease CASCADE")
    conn.execute("CREATE SCHEMA lease")
    conn.execute("SET search_path = lease")
    conn.execute("CREATE TABLE powertrio_meta (key text PRIMARY KEY, value text NOT NULL)")
    prepare_cluster_schema(conn, 4096)
    conn.execute(
        "INSERT INTO cluster_nodes SELECT 'other' || n, 'infinity' FROM generate_series(1, %s) n",
        (others,),
    )
    held = lease_tick(conn, "me", {}, ttl=3.0, shards=4096, take=True).held
    before = _server_cpu(postmaster)
    for _ in range(rounds):
        held = lease_tick(conn, "me", held, ttl=3.0, shards=4096, take=True).held
    return (_server_cpu(postmaster) - before) / rounds * 1e6


def _notify(server: PostgresServer, postmaster: int, listeners: int, count: int) -> float:
    """Server CPU microseconds of one ``NOTIFY`` heard by ``listeners`` connections."""
    import psycopg  # noqa: PLC0415  # the optional extra

    ready = threading.Barrier(listeners + 1)
    heard = [0] * listeners

    def listen(index: int) -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("LISTEN bench")
            ready.wait()
            for _ in conn.notifies(timeout=30, stop_after=count):
                heard[index] += 1

    threads = [threading.Thread(target=listen, args=(i,)) for i in range(listeners)]
    for thread in threads:
        thread.start()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        ready.wait()
        before = _server_cpu(postmaster)
        for n in range(count):
            conn.execute("SELECT pg_notify('bench', %s)", (f"i{n}",))
        for thread in threads:
            thread.join()
        spent = _server_cpu(postmaster) - before
    if min(heard) != count:
        msg = f"listeners heard {heard} of {count} notifications"
        raise RuntimeError(msg)
    return spent / count * 1e6


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """The server's CPU per append, per lease round and shard, per notify and listener."""
    missing = postgres_missing()
    if missing is not None:
        return {"skipped": missing}
    import psycopg  # noqa: PLC0415  # the optional extra

    quick = bool(getattr(args, "quick", False))
    seconds = 1.0 if quick else 5.0
    # The kernel counts CPU in clock ticks (10 ms): enough work per figure to see it.
    rounds = 200 if quick else 600
    notifies = 1000 if quick else 4000
    event = _payload(_registry(), 1)
    with running_postgres(durable=True, database="bench") as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            postmaster = _postmaster(conn)
            appends, elapsed, append_cpu = trio.run(_appends, server, postmaster, seconds, event)
            small = _lease_rounds(conn, postmaster, 199, rounds)
            big = _lease_rounds(conn, postmaster, 0, max(10, rounds // 10))
        one = _notify(server, postmaster, 1, notifies)
        many = _notify(server, postmaster, 32, notifies)
    per_shard = (big - small) / (4096 - 21)
    return {
        "store_appends_per_s": round(appends / elapsed),
        "pg_cpu_us_per_append": round(append_cpu / appends * 1e6, 1),
        "appends_per_pg_core_s": round(appends / append_cpu) if append_cpu else 0,
        "lease_round_us_21_shards": round(small),
        "lease_round_us_4096_shards": round(big),
        "lease_round_us_per_shard": round(per_shard, 2),
        "lease_round_us_fixed": round(small - 21 * per_shard),
        "notify_us_1_listener": round(one, 1),
        "notify_us_32_listeners": round(many, 1),
        "notify_us_per_listener": round((many - one) / 31, 2),
    }
