"""What the console's fleet tests share: a fleet run by a node in virtual time."""

from __future__ import annotations

from pathlib import Path

import trio
from test_fleet import FLEET, HOUR, START

from actors.cli._fleet_demo import fleet_demo_llm
from actors.events import FleetAgentDeclared
from actors.fleet import AgentDecl, FleetNode, apply_fleet, parse_fleet_file
from protocols import LLM
from protocols.codec import encode
from runtime import Clock, NewEvent, open_runtime, open_sqlite_store

__all__ = ["FLEET", "HOUR", "START", "run_fleet"]


def _demo(_decl: AgentDecl) -> LLM:
    return fleet_demo_llm()


async def run_fleet(path: Path, hours: float) -> None:
    """Declare the fleet (and an agent whose tool does not import), serve it on node n1
    for ``hours`` of virtual time in memory, then copy the log into SQLite at ``path``."""
    async with open_runtime(clock=Clock(START)) as runtime:
        store = runtime.store
        await apply_fleet(store, parse_fleet_file(FLEET))
        broken = AgentDecl(name="broken", prompt="p", tools=("nosuch.mod:fn",))
        declared = FleetAgentDeclared(name="broken", decl=broken.to_json(), spec_hash="x")
        await store.append("fleet", [NewEvent.from_encoded(encode(declared))], 2)
        node = FleetNode(runtime, node="n1", llm_for=_demo, poll=60.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve)
            await trio.sleep(hours * HOUR)
            node.drain("test over")
        records = await store.read_all(1, limit=1_000_000)
    async with open_sqlite_store(path) as target:
        versions: dict[str, int] = {}
        for r in records:
            event = NewEvent(
                type=r.type,
                schema_version=r.schema_version,
                data=r.data,
                metadata=r.metadata,
                recorded_at=r.recorded_at,
            )
            versions[r.stream] = (
                await target.append(r.stream, [event], versions.get(r.stream, 0))
            ).version
