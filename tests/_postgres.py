"""The PostgreSQL side of the store tests: a fresh schema per store on the session's server."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from runtime import EventStore, open_postgres_store
from runtime.testing import PostgresServer, postgres_missing, running_postgres

_schemas = itertools.count()


def serve_postgres() -> Iterator[PostgresServer]:
    """The session's server; skipped with the reason when PostgreSQL is missing.

    In CI (``CI=true``), whose script installs PostgreSQL, a missing server fails instead.
    """
    reason = postgres_missing()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
        pytest.skip(reason)
    with running_postgres() as server:
        yield server


def fresh_schema() -> str:
    """A schema name no other store of this session has used."""
    return f"t{os.getpid()}_{next(_schemas)}"


async def drop_schema(server: PostgresServer, schema: str) -> None:
    """Drop a test's schema with everything in it."""
    import psycopg
    from psycopg import sql

    def run() -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    await trio.to_thread.run_sync(run)


def postgres_backend(
    server: PostgresServer, **options: int
) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    """A store factory: each store gets a new, empty schema, dropped after use."""

    @asynccontextmanager
    async def make() -> AsyncIterator[EventStore]:
        schema = fresh_schema()
        try:
            async with open_postgres_store(
                server.dsn(), schema=schema, blob_threshold=1024, **options
            ) as store:
                yield store
        finally:
            with trio.CancelScope(shield=True):
                await drop_schema(server, schema)

    return make
