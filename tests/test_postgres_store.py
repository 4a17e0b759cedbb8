"""The PostgreSQL store's own behaviour: gap-safe tailing, several writers, lost servers.

The conformance suite and the stateful test run on it too (``test_event_store*.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import _postgres
import psycopg
import pytest
import trio
import trio.testing
from psycopg import sql

from protocols.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    ForeignDatabaseError,
    StoreSchemaVersionError,
    StoreUnavailableError,
)
from runtime import NewEvent
from runtime._postgres._schema import INSERT_EVENTS, lock_key
from runtime.postgres import PostgresEventStore, open_postgres_store
from runtime.testing import PostgresServer


def _event(n: int, size: int = 10) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d,"p":"%s"}' % (n, b"y" * size))


@asynccontextmanager
async def _store(
    server: PostgresServer, schema: str, **options: float
) -> AsyncIterator[PostgresEventStore]:
    async with open_postgres_store(server.dsn(), schema=schema, **options) as store:  # type: ignore[arg-type]  # test options
        yield store


@contextmanager
def _raw(server: PostgresServer, schema: str) -> Iterator[psycopg.Connection]:
    """Another client of the same schema (a second node, a stray tool)."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        yield conn


def _foreign_append_uncommitted(conn: psycopg.Connection, schema: str, stream: str) -> int:
    """Append one event the way another node's writer does, leaving it uncommitted."""
    conn.execute("BEGIN")
    conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
    columns = ([stream], [1], ["t"], [1], [b"{}"], [None], [None], [0.0])
    row = conn.execute(INSERT_EVENTS, columns).fetchone()
    conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(schema),))
    assert row is not None
    return int(row[0])


async def test_tailing_never_skips_a_position_that_commits_late(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Two transactions commit out of order: a follower sees neither until both are done.

    A takes position 2, B position 3, B commits first. A plain ``position >= n`` read
    would return 3 and move past 2 for good; ``read_all`` holds 3 back while A is in
    flight, and the subscription then delivers 2, 3 and the store's own 4 in order.
    """
    async with _store(postgres_server, schema) as store:
        await store.append("own", [_event(1)], 0)
        seen: list[int] = []

        async def follow() -> None:
            async for event in store.subscribe(1):
                seen.append(event.position)
                if len(seen) == 4:
                    return

        with (
            _raw(postgres_server, schema) as a,
            _raw(postgres_server, schema) as b,
            trio.fail_after(20),
        ):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                first = await trio.to_thread.run_sync(_foreign_append_uncommitted, a, schema, "a")
                second = await trio.to_thread.run_sync(_foreign_append_uncommitted, b, schema, "b")
                assert (first, second) == (2, 3)
                await trio.to_thread.run_sync(b.execute, "COMMIT")
                naive = b.execute("SELECT position FROM events WHERE position >= 2").fetchall()
                assert naive == [(3,)]  # the gap a naive tailer would jump over
                assert [e.position for e in await store.read_all()] == [1]
                mine = await store.append("own", [_event(2)], 1)  # wakes the follower
                assert mine.first_position == 4
                await trio.sleep(0.3)
                assert seen == [1]
                await trio.to_thread.run_sync(a.execute, "COMMIT")  # the follower ends
        assert seen == [1, 2, 3, 4]
        assert [e.position for e in await store.read_all()] == [1, 2, 3, 4]


async def test_two_stores_on_one_schema_refuse_stale_appends(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Two nodes racing on the same streams: one append wins each round, none is lost."""
    async with _store(postgres_server, schema) as one, _store(postgres_server, schema) as two:
        wins = {"one": 0, "two": 0}
        conflicts = 0

        async def race(name: str, store: PostgresEventStore, round_: int) -> None:
            nonlocal conflicts
            try:
                await store.append(f"s/{round_ % 5}", [_event(round_)], round_ // 5)
                wins[name] += 1
            except ConcurrencyConflictError:
                conflicts += 1

        for round_ in range(50):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(race, "one", one, round_)
                nursery.start_soon(race, "two", two, round_)
        assert wins["one"] + wins["two"] == 50
        assert conflicts == 50
        for stream in range(5):
            assert list(range(1, 11)) == [e.version for e in await two.read(f"s/{stream}")]


async def test_group_commit_shares_transactions(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Concurrent appends share commits: fewer transactions than appends."""
    async with _store(postgres_server, schema) as store:
        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(store.append, f"g/{i}", [_event(i)], 0)
        stats = store.statistics()
        assert (stats.appends, stats.events_appended) == (64, 64)
        assert stats.commits < 64


async def test_events_survive_reopening(postgres_server: PostgresServer, schema: str) -> None:
    """A reopened store reads what was committed and carries on from the same head."""
    async with _store(postgres_server, schema) as store:
        await store.append("s", [_event(1), _event(2)], 0)
    async with _store(postgres_server, schema) as store:
        assert await store.head_position() == 2
        assert [e.version for e in await store.read("s")] == [1, 2]
        result = await store.append("s", [_event(3)], 2)
        assert (result.version, result.first_position) == (3, 3)


async def test_blobs_are_stored_once_and_verified(
    postgres_server: PostgresServer, schema: str
) -> None:
    """A large payload is stored once by hash; an altered or missing blob is corruption."""
    big = bytes(range(256)) * 64
    async with _store(postgres_server, schema, blob_threshold=1024) as store:
        await store.append("a", [NewEvent(type="big", schema_version=1, data=big)], 0)
        await store.append("b", [NewEvent(type="big", schema_version=1, data=big)], 0)
        with _raw(postgres_server, schema) as conn:
            assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (1,)
            conn.execute("UPDATE blobs SET data = %s", (big[::-1],))
            with pytest.raises(CorruptLogError, match="is altered"):
                await store.read("a")
            conn.execute("DELETE FROM blobs")
            with pytest.raises(CorruptLogError, match="is missing"):
                await store.read_all()


async def test_a_lost_connection_is_reported_and_the_store_reconnects(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The server drops every connection: with no retry the next call fails with ``lost``,
    then it heals (``test_postgres_faults`` has the retrying default)."""
    async with _store(postgres_server, schema, retry_deadline=0) as store:
        await store.append("s", [_event(1)], 0)
        assert [e.version for e in await store.read("s")] == [1]
        with _raw(postgres_server, schema) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(StoreUnavailableError) as appending:
            await store.append("s", [_event(2)], 1)
        assert (appending.value.code, appending.value.reason) == ("store.unavailable", "lost")
        assert not appending.value.outcome_unknown
        with pytest.raises(StoreUnavailableError) as reading:
            await store.read("s")
        assert reading.value.reason == "lost"
        assert store.statistics().failed_appends == 1
        await store.append("s", [_event(2)], 1)
        assert [e.version for e in await store.read("s")] == [1, 2]


async def test_an_unreachable_server_is_reported(postgres_server: PostgresServer) -> None:
    """Opening a store where nothing listens raises ``StoreUnavailableError`` (connect)."""
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"host=127.0.0.1 port={port} dbname=x user=postgres password=secret"
    with pytest.raises(StoreUnavailableError) as caught:
        async with open_postgres_store(dsn, connect_timeout=2):
            pass
    assert caught.value.reason == "connect"
    assert "secret" not in str(caught.value)
    assert f"127.0.0.1:{port}/x" in str(caught.value)


async def test_a_statement_timeout_is_reported(
    postgres_server: PostgresServer, schema: str
) -> None:
    """A statement the server cancels for running too long raises ``timeout``."""
    dsn = postgres_server.dsn() + " options='-c statement_timeout=200'"
    async with open_postgres_store(dsn, schema=schema, retry_deadline=0) as store:
        await store.append("s", [_event(1)], 0)
        with _raw(postgres_server, schema) as conn:
            conn.execute("BEGIN")
            conn.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(StoreUnavailableError) as caught:
                await store.read("s")
            conn.execute("ROLLBACK")
        assert caught.value.reason == "timeout"
        assert [e.version for e in await store.read("s")] == [1]


async def test_foreign_and_future_schemas_are_refused(
    postgres_server: PostgresServer, schema: str
) -> None:
    """A schema with other tables, or written by a newer powertrio, is not opened."""
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {}.orders (id int)").format(sql.Identifier(schema)))
    with pytest.raises(ForeignDatabaseError):
        async with _store(postgres_server, schema):
            pass
    other = _postgres.fresh_schema()
    try:
        async with _store(postgres_server, other):
            pass
        with _raw(postgres_server, other) as conn:
            conn.execute("UPDATE powertrio_meta SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(StoreSchemaVersionError) as caught:
            async with _store(postgres_server, other):
                pass
        assert (caught.value.found, caught.value.supported) == (99, 1)
    finally:
        await _postgres.drop_schema(postgres_server, other)


@pytest.mark.parametrize(
    ("option", "value", "text"),
    [
        ("blob_threshold", -1, "blob_threshold"),
        ("max_batch", 0, "max_batch"),
        ("readers", 0, "readers"),
        ("schema", "", "schema"),
        ("retry_deadline", -1.0, "retry_deadline must be >= 0 seconds, got -1.0"),
    ],
)
async def test_bad_options_are_refused(option: str, value: object, text: str) -> None:
    """Misconfiguration raises ``ValueError`` naming the option, before connecting."""
    with pytest.raises(ValueError, match=text):
        async with open_postgres_store("host=127.0.0.1 port=1", **{option: value}):  # type: ignore[arg-type]  # misuse on purpose
            pass


async def test_store_repr_and_schema(postgres_server: PostgresServer, schema: str) -> None:
    """The repr names the server and schema, never the connection string's secrets."""
    async with _store(postgres_server, schema) as store:
        assert schema == store.schema
        assert repr(store) == (
            f"<PostgresEventStore {postgres_server.host}:{postgres_server.port}/"
            f"{postgres_server.database} schema {schema!r}>"
        )


@pytest.mark.slow
def test_cluster_bench_reports_both_rates(postgres_server: PostgresServer) -> None:
    """``python -m runtime.bench cluster --quick`` prints the store's and raw psycopg's rates."""
    import argparse

    from runtime.bench._cluster import run

    figures = run(argparse.Namespace(quick=True, json=True))
    assert {
        "writers",
        "store_appends_per_s",
        "raw_inserts_per_s",
        "store_appends_per_commit",
        "append_ratio",
    } == set(figures)
    assert figures["writers"] == 64
    assert float(figures["store_appends_per_s"]) > 0
    assert float(figures["raw_inserts_per_s"]) > 0
