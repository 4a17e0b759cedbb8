"""``python -m runtime.bench cluster``: the PostgreSQL store beside raw psycopg inserts.

Both run in the same process against one server the suite starts itself (crash-safe
settings: ``fsync`` and synchronous commit on), so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import threading
import time

import trio

from .._postgres._server import PostgresServer, postgres_missing, running_postgres
from .._postgres._store import open_postgres_store
from .._store._contract import EventStore, NewEvent
from ._log import _payload, _registry

__all__ = ["run"]

WRITERS = 64

_RAW_TABLE = """CREATE TABLE raw_events (
    stream text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    position bigint NOT NULL GENERATED ALWAYS AS IDENTITY UNIQUE,
    type text NOT NULL,
    schema_version integer NOT NULL,
    data bytea,
    metadata bytea,
    recorded_at double precision NOT NULL,
    PRIMARY KEY (stream, version)
)"""
_RAW_INSERT = (
    "INSERT INTO raw_events (stream, version, type, schema_version, data, metadata, "
    "recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


async def append_from_writers(
    store: EventStore, seconds: float, event: NewEvent
) -> tuple[int, float]:
    """64 tasks, each appending ``event`` one at a time to its own stream for ``seconds``:
    the appends made and the seconds they took."""
    count = 0
    deadline = trio.current_time() + seconds

    async def writer(index: int) -> None:
        nonlocal count
        version = 0
        while trio.current_time() < deadline:
            version = (await store.append(f"w/{index}", [event], version)).version
            count += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(WRITERS):
            nursery.start_soon(writer, index)
    return count, time.perf_counter() - start


async def _store_appends(
    server: PostgresServer, seconds: float, event: NewEvent
) -> tuple[float, float]:
    """64 tasks, each appending one event at a time to its own stream.

    Returns durable appends/s and appends per commit (how well group commit groups).
    """
    async with open_postgres_store(server.dsn(), schema="bench") as store:
        count, elapsed = await append_from_writers(store, seconds, event)
        stats = store.statistics()
    return count / elapsed, stats.appends / max(stats.commits, 1)


def _raw_inserts(server: PostgresServer, seconds: float, event: NewEvent) -> float:
    """64 threads, each with its own connection, committing the same rows one by one."""
    import psycopg  # noqa: PLC0415  # the optional extra

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(_RAW_TABLE)
    counts = [0] * WRITERS
    ready = threading.Barrier(WRITERS + 1)
    deadline = [0.0]

    def writer(index: int) -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            ready.wait()
            version = 0
            while time.perf_counter() < deadline[0]:
                version += 1
                conn.execute(
                    _RAW_INSERT,
                    (f"w/{index}", version, event.type, event.schema_version, event.data,
                     event.metadata, time.time()),
                )  # fmt: skip
                counts[index] += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds
    start = time.perf_counter()
    ready.wait()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """Durable appends/s through the store at 64 writers beside raw psycopg inserts.

    Without PostgreSQL (or psycopg) the suite reports why instead of failing, so
    ``powertrio bench`` still runs the other suites.
    """
    missing = postgres_missing()
    if missing is not None:
        return {"skipped": missing}
    seconds = 1.0 if args.quick else 5.0
    event = _payload(_registry(), 1)
    with running_postgres(durable=True, database="bench") as server:
        raw = _raw_inserts(server, seconds, event)
        store, grouped = trio.run(_store_appends, server, seconds, event)
    return {
        "writers": WRITERS,
        "store_appends_per_s": store,
        "raw_inserts_per_s": raw,
        "store_appends_per_commit": grouped,
        "append_ratio": store / raw,
    }
