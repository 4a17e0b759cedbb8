"""One node of the multi-node test (a real process): hosts sessions and drives some.

Usage: ``python _cluster_node.py DSN SCHEMA NAME FIRST LAST ROUNDS``. Prints ``ready``,
waits for ``go`` on stdin, then sends ``ROUNDS`` runs to each session ``s<k>`` with
``FIRST <= k < LAST`` (every session of the fleet is created by whoever drives it, and
runs on whichever node holds its shard), printing ``answered <k> <round> <error code> <status>`` as
each answer comes back, then ``driven``. It keeps hosting until ``stop`` arrives, then
prints ``stats fenced=<n> resumed=<n>``.
"""

from __future__ import annotations

import sys

import _cluster_agents
import trio

from actors.cluster import NodeHost, host_node
from runtime import open_runtime
from runtime.cluster import Node
from runtime.postgres import open_postgres_store

TTL = 1.5


def say(line: str) -> None:
    print(line, flush=True)


async def readline() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def drive(host: NodeHost, k: int, rounds: int) -> None:
    session = await host.create("worker", session_id=f"s{k}")
    for j in range(rounds):
        result = await session.send(f"task {k}-{j}", id=f"run-{k}-{j}")
        say(f"answered {k} {j} {result.error_code} {result.status}")


async def main(dsn: str, schema: str, name: str, first: int, last: int, rounds: int) -> None:
    node = Node(name=name, shards=16, ttl=TTL, poll_interval=0.2)
    async with (
        open_postgres_store(dsn, schema=schema) as store,
        open_runtime(store=store, node=node) as runtime,
        host_node(runtime, _cluster_agents.catalog()) as host,
    ):
        say("ready")
        await readline()
        async with trio.open_nursery() as nursery:
            for k in range(first, last):
                nursery.start_soon(drive, host, k, rounds)
        say("driven")
        await readline()
        assert runtime.node is not None
        say(f"stats fenced={runtime.node.fenced_appends} resumed={host.resumed}")


if __name__ == "__main__":
    dsn, schema, name, first, last, rounds = sys.argv[1:]
    trio.run(main, dsn, schema, name, int(first), int(last), int(rounds))
