"""``python -m runtime.bench outage``: the PostgreSQL store through a server restart.

64 tasks append, each to its own stream, while the suite stops the server (a fast
shutdown: connections dropped, commits kept) and starts it again. Figures: how long the
appenders stalled beside how long the server was away (the baseline: no client can do
better than waiting for the server), and from re-reading every stream, how many
acknowledged appends are missing (``lost``) or stored twice (``duplicates``), both 0 when
the retry and the settling of commits in doubt work (``runtime._postgres._retry``).
"""

from __future__ import annotations

import argparse
import time

import orjson
import trio

from protocols.errors import StoreError

from .._postgres._server import PostgresServer, postgres_missing, running_postgres
from .._postgres._store import PostgresEventStore, open_postgres_store
from .._store._contract import NewEvent

__all__ = ["run"]

WRITERS = 64


def _event(writer: int, n: int) -> NewEvent:
    return NewEvent(type="bench.outage", schema_version=1, data=orjson.dumps([writer, n]))


async def _through_a_restart(server: PostgresServer, warm: float) -> dict[str, float | int]:
    acked = [0] * WRITERS
    last_ack = [time.perf_counter()]
    stall = [0.0]
    done = trio.Event()
    errors = 0

    async def writer(store: PostgresEventStore, w: int) -> None:
        nonlocal errors
        version = 0
        while not done.is_set():
            try:
                await store.append(f"w/{w}", [_event(w, version + 1)], version)
            except StoreError:  # counted: the figure says whether any reached a caller
                errors += 1
                version = await store.stream_version(f"w/{w}")
                continue
            version += 1
            acked[w] = version
            now = time.perf_counter()
            stall[0] = max(stall[0], now - last_ack[0])
            last_ack[0] = now

    async with open_postgres_store(server.dsn(), schema="outage", retry_deadline=60) as store:
        async with trio.open_nursery() as nursery:
            for w in range(WRITERS):
                nursery.start_soon(writer, store, w)
            await trio.sleep(warm)
            stall[0] = 0.0  # only the restart's stall counts
            away = time.perf_counter()
            await trio.to_thread.run_sync(server.stop)
            await trio.to_thread.run_sync(server.start)
            restart = time.perf_counter() - away
            await trio.sleep(warm)
            done.set()
        lost = duplicates = stored = 0
        for w in range(WRITERS):
            events = await store.read(f"w/{w}")
            numbers = [orjson.loads(e.data)[1] for e in events]
            stored += len(events)
            duplicates += len(numbers) - len(set(numbers))
            lost += len(set(range(1, acked[w] + 1)) - set(numbers))
        retries = store._writer.retrying.failures
    return {
        "restart_s": restart,
        "append_stall_s": stall[0],
        "stall_over_restart": stall[0] / restart,
        "acked": sum(acked),
        "stored": stored,
        "lost": lost,
        "duplicates": duplicates,
        "append_errors": errors,
        "writer_retries": retries,
    }


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """Stalls, losses and duplicates of 64 appenders across one server restart.

    Without PostgreSQL (or psycopg) the suite reports why instead of failing.
    """
    missing = postgres_missing()
    if missing is not None:
        return {"skipped": missing}
    warm = 0.5 if args.quick else 2.0
    with running_postgres(durable=True, database="bench") as server:
        figures: dict[str, float | int | str] = {"writers": WRITERS}
        figures.update(trio.run(_through_a_restart, server, warm))
    return figures
