"""A fleet node's drain: how long a node with 100 busy sessions takes to stop.

* ``drain_s``: from ``FleetNode.drain`` to the node having recorded ``FleetNodeStopped``,
  with ``drain_sessions`` (100) fleet agents each mid-run: every run's model call takes
  ``drain_model_latency_s`` and the drain begins about half-way through it. A drain asks
  every running session to stop after its current turn and waits for every run's end to
  be recorded, so the figure is about the rest of the turn in flight plus the node's own
  work (100 cancels, 100 ``FleetRunFinished``, stopping 100 agents).
* ``drain_s_idle``: the baseline of the same run: the same node with 100 agents and no
  run in flight (their schedules are an hour away).
* ``drain_cancelled_runs``: runs the deadline (60 s) had to cancel at once (0 expected).

On SQLite (one durable commit per event batch), wall-clock time, the offline model of
``provider = "demo"`` replaced by a double that answers after a fixed latency. Run it
with ``python -m actors.bench fleet [--json] [--quick]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

from protocols import LLMRequest, LLMResponse, Usage
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

from .._fleet._control import apply_fleet, read_fleet_status
from .._fleet._file import parse_fleet_file
from .._fleet._node import FleetNode


def _answer(_request: LLMRequest) -> LLMResponse:
    return LLMResponse(
        content="done", finish_reason="stop", usage=Usage(prompt_tokens=20, completion_tokens=4)
    )


def _fleet_text(agents: int, every: str) -> str:
    return "".join(
        f'[agents.a{i}]\nprompt = "You work."\ninput = "Work."\n'
        f'[[agents.a{i}.schedules]]\nevery = "{every}"\n'
        for i in range(agents)
    )


async def _drain(agents: int, latency: float, *, busy: bool) -> tuple[float, int]:
    """Seconds the drain took, and the runs it cancelled at once."""
    every = "1s" if busy else "1h"
    with tempfile.TemporaryDirectory() as directory:
        async with open_sqlite_store(Path(directory) / "fleet.sqlite") as store:
            await apply_fleet(store, parse_fleet_file(_fleet_text(agents, every)))
            async with open_runtime(store=store) as runtime:
                llm = FunctionLLM(_answer, latency=latency)
                node = FleetNode(
                    runtime, node="bench", llm_for=lambda _decl: llm, drain_deadline=60.0
                )
                async with trio.open_nursery() as nursery:
                    await nursery.start(node.serve)
                    if busy:
                        while True:
                            status = await read_fleet_status(store, now=time.time())
                            if sum(a.state == "running" for a in status.agents) == agents:
                                break
                            await trio.sleep(0.05)
                        await trio.sleep(latency / 2)  # mid-way through the model calls
                    began = time.perf_counter()
                    node.drain("bench")
                    await node.stopped.wait()
                    took = time.perf_counter() - began
                    nursery.cancel_scope.cancel()
    return took, node.cancelled_runs


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    agents = 100
    latency = 2.0 if args.quick else 4.0
    busy, cancelled = trio.run(lambda: _drain(agents, latency, busy=True))
    idle, _ = trio.run(lambda: _drain(agents, latency, busy=False))
    return {
        "drain_s": round(busy, 3),
        "drain_s_idle": round(idle, 3),
        "drain_sessions": agents,
        "drain_model_latency_s": latency,
        "drain_cancelled_runs": cancelled,
    }
