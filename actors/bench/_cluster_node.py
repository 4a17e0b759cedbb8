"""One node process of ``python -m actors.bench cluster``, driven by commands on stdin.

``python -m actors.bench._cluster_node DSN SCHEMA NAME TTL`` hosts the bench agent
(one instant tool call per send) and answers, one line each:

- ``drive FIRST LAST SECONDS``: send to sessions ``s<FIRST>``..``s<LAST-1>`` in a loop
  for ``SECONDS``, one send at a time per session; prints ``drove <answered>``.
- ``probe K1,K2,...``: send once to each, at once; prints ``probed <k> <epoch time>``
  as each answers.
- ``owned``: prints ``owned K1,K2,...``, the sessions whose shard this node holds.
- ``quit``.

Every tool execution leaves a line (its call's idempotency key) in the file
``BENCH_TOOL_LOG`` names, to count calls run twice.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import trio

from actors import AgentSpec, ToolContext, tool
from protocols import LLMRequest, LLMResponse, ToolCall, UserMessage
from runtime import open_runtime
from runtime.cluster import Node
from runtime.postgres import open_postgres_store
from runtime.testing import FunctionLLM

from .._fleet._cluster import NodeHost, host_node

_ids = itertools.count()


@tool
def work(context: ToolContext, task: str) -> str:
    """Do the task."""
    path = os.environ.get("BENCH_TOOL_LOG")
    if path:  # one line per execution of one call (its key survives crash resumes)
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"call": context.idempotency_key, "task": task}) + "\n")
    return f"done: {task}"


def _model(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "tool":
        return LLMResponse(content="done")
    task = last.text if isinstance(last, UserMessage) else ""
    call = ToolCall(id="c1", name="work", arguments=json.dumps({"task": task}))
    return LLMResponse(tool_calls=[call])


CATALOG = {"bench": AgentSpec(name="bench", tools=(work,), llm=FunctionLLM(_model))}


def say(line: str) -> None:
    print(line, flush=True)


async def _drive(host: NodeHost, name: str, first: int, last: int, seconds: float) -> int:
    answered = 0
    deadline = trio.current_time() + seconds

    async def one(k: int) -> None:
        nonlocal answered
        session = await host.create("bench", session_id=f"s{k}")
        while trio.current_time() < deadline:
            run = f"{name}-{k}-{next(_ids)}"
            await session.send(f"task {run}", id=run)
            answered += 1

    async with trio.open_nursery() as nursery:
        for k in range(first, last):
            nursery.start_soon(one, k)
    return answered


async def _probe(host: NodeHost, name: str, keys: list[str]) -> None:
    async def one(k: str) -> None:
        session = await host.session(f"s{k}")
        run = f"{name}-probe-{k}-{next(_ids)}"
        await session.send(f"task {run}", id=run)
        say(f"probed {k} {time.time()!r}")

    async with trio.open_nursery() as nursery:
        for k in keys:
            nursery.start_soon(one, k)


async def main(dsn: str, schema: str, name: str, ttl: str) -> None:
    node = Node(name=name, ttl=float(ttl), poll_interval=0.1)
    async with (
        open_postgres_store(dsn, schema=schema) as store,
        open_runtime(store=store, node=node) as runtime,
        host_node(runtime, CATALOG) as host,
    ):
        say("ready")
        while line := (await trio.to_thread.run_sync(sys.stdin.readline)).split():
            command, *rest = line
            if command == "drive":
                first, last, seconds = int(rest[0]), int(rest[1]), float(rest[2])
                say(f"drove {await _drive(host, name, first, last, seconds)}")
            elif command == "probe":
                await _probe(host, name, rest[0].split(",") if rest else [])
                say("probe done")
            elif command == "owned":
                mine = [s[1:] for s in await _placed(host) if host.node.owns(s)]
                say("owned " + ",".join(mine))
            elif command == "quit":
                break


async def _placed(host: NodeHost) -> list[str]:
    return [sid for sid, _ in await host.node.placements(sorted(range(host.node.config.shards)))]


if __name__ == "__main__":
    dsn, schema, name, ttl = sys.argv[1:5]
    trio.run(main, dsn, schema, name, ttl)
