"""The PostgreSQL side of the tests: a fresh schema per store on the session's server, and
nodes of a fleet on it."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
from _wait import wait_until_async

from actors import AgentSpec
from actors.cluster import NodeHost, host_node
from runtime import EventStore, open_runtime
from runtime.cluster import Node
from runtime.postgres import open_postgres_store
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


@asynccontextmanager
async def node_host(
    server: PostgresServer, schema: str, name: str, catalog: Mapping[str, AgentSpec]
) -> AsyncIterator[NodeHost]:
    """A node of 4 shards (lease TTL 1 s) on ``schema``, hosting ``catalog``'s sessions."""
    node = Node(name=name, shards=4, ttl=1.0, poll_interval=0.2)
    async with (
        open_postgres_store(server.dsn(), schema=schema) as store,
        open_runtime(store=store, node=node) as runtime,
        host_node(runtime, catalog) as host,
    ):
        yield host


@asynccontextmanager
async def two_nodes(
    server: PostgresServer, schema: str, catalog: Mapping[str, AgentSpec]
) -> AsyncIterator[tuple[NodeHost, NodeHost]]:
    """Nodes ``a`` and ``b`` hosting ``catalog`` on ``schema``, once each holds 2 shards."""
    async with (
        node_host(server, schema, "a", catalog) as a,
        node_host(server, schema, "b", catalog) as b,
    ):
        await wait_for_split(a, b)
        yield a, b


async def wait_for_split(a: NodeHost, b: NodeHost) -> None:
    """Until two nodes of 4 shards hold 2 each (10 s at most)."""

    async def split() -> bool:
        return len(a.node.held) == 2 == len(b.node.held)

    await wait_until_async(split, "two nodes holding 2 shards each", timeout=10)
