"""The fleet limiter across nodes: two runtimes, each with its own PostgreSQL store
connection and its own limiter, share one stream and one limit."""

from __future__ import annotations

from collections.abc import Iterator

import _postgres
import pytest
import trio
from _wait import wait_until_async
from test_limiter import _check_log

from actors.events import GrantIssued, GrantSettled
from actors.limits import Limit, LimiterPolicy, spawn_limiter
from protocols.codec import decode_record
from runtime import open_runtime
from runtime.postgres import open_postgres_store
from runtime.testing import PostgresServer


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = _postgres.fresh_schema()
    yield name
    trio.run(_postgres.drop_schema, postgres_server, name)


def test_two_nodes_on_one_log_hold_one_limit(postgres_server: PostgresServer, schema: str) -> None:
    """Ten callers on each of two nodes ask as fast as they can for two seconds; the
    shared log shows no window and no concurrency slot ever over the limit, the whole
    requests-per-minute limit granted (no more), and both nodes granted some."""
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=60)}, tree=Limit(concurrent=1))
    got: dict[str, list[GrantIssued]] = {"a": [], "b": []}
    settled: set[str] = set()

    async def main() -> list[object]:
        dsn = postgres_server.dsn()
        async with (
            open_postgres_store(dsn, schema=schema) as store_a,
            open_postgres_store(dsn, schema=schema) as store_b,
            open_runtime(store=store_a) as node_a,
            open_runtime(store=store_b) as node_b,
        ):
            limiters = {
                "a": await spawn_limiter(node_a, policy, shared=True),
                "b": await spawn_limiter(node_b, policy, shared=True),
            }

            async def caller(node: str, tree: str) -> None:
                limiter = limiters[node]
                with trio.move_on_after(2):
                    while True:
                        grant = await limiter.acquire(
                            provider="p", model="m", tenant="t", tree=tree, tokens=1
                        )
                        got[node].append(grant)
                        await trio.sleep(0.01)  # the call
                        limiter.settle(grant, 1)
                        settled.add(grant.grant_id)

            async with trio.open_nursery() as nursery:
                for number in range(10):
                    nursery.start_soon(caller, "a", f"a{number}")
                    nursery.start_soon(caller, "b", f"b{number}")

            async def with_every_settle() -> list[object] | None:
                events = [decode_record(r) for r in await store_a.read("limiter/fleet")]
                logged = {e.grant_id for e in events if isinstance(e, GrantSettled)}
                return events if logged >= settled else None

            return await wait_until_async(with_every_settle, "the last settles to reach the log")

    events = trio.run(main)
    _check_log(events, policy)
    grants = [e for e in events if isinstance(e, GrantIssued)]
    assert len(grants) == 60
    assert len({g.grant_id for g in grants}) == 60
    assert got["a"] and got["b"]
    assert sorted(g.grant_id for g in got["a"] + got["b"]) == sorted(g.grant_id for g in grants)
