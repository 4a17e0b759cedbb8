"""A fleet file: two agents declared in TOML, scheduled by cron and by interval, on a node.

Runs offline in virtual time (two days take a second), on a SQLite log:

    python examples/12_fleet_file.py

``apply`` declares the agents in the log; a node hosts them, and their schedules are
durable timers in their own streams; the status is a fold of the log. Then a changed
prompt is checked with ``upgrade_check``: replaying the recorded runs against the new
spec names what the model would now be asked differently. From a shell, the same is
``powertrio fleet apply``, ``powertrio serve``, ``powertrio fleet status`` and
``powertrio fleet upgrade --check``.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import trio
import trio.testing

from actors._fleet._upgrade import upgrade_check
from actors.cli._fleet_demo import fleet_demo_llm
from actors.fleet import AgentDecl, FleetNode, apply_fleet, parse_fleet_file, read_fleet_status
from protocols import LLM
from runtime import Clock, open_runtime, open_sqlite_store

FLEET = """
[agents.digest]
prompt = "You write the morning digest."
input = "Write today's digest."
tools = ["__main__:headlines"]
budget = { run_tokens = 2000, day_tokens = 20000 }

[[agents.digest.schedules]]
cron = "0 7 * * 1-5"              # weekdays at 07:00 UTC

[agents.watch]
prompt = "You watch the build."
input = "Is the build green?"

[[agents.watch.schedules]]
every = "6h"
"""

START = datetime(2027, 1, 14, 12, 0, tzinfo=UTC).timestamp()  # a Thursday, noon


def headlines() -> str:
    """Today's headlines."""
    return "3 headlines"


def model(_decl: AgentDecl) -> LLM:
    return fleet_demo_llm()


def when(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%a %H:%M")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with (
            open_sqlite_store(Path(folder) / "fleet.sqlite") as store,
            open_runtime(store=store, clock=Clock(START), seed=12) as runtime,
        ):
            report = await apply_fleet(store, parse_fleet_file(FLEET, "fleet.toml"))
            print(f"applied: created {', '.join(report.created)}")
            node = FleetNode(runtime, node="node-1", llm_for=model, poll=3600)
            async with trio.open_nursery() as nursery:
                await nursery.start(node.serve)
                await trio.sleep(2 * 86_400 + 1800)  # drain between two slots
                node.drain("the example is over")
            status = await read_fleet_status(store, now=runtime.clock.now())
            for agent in status.agents:
                print(
                    f"{agent.name}: {agent.state} on {agent.node}, last {agent.last_run} "
                    f"{agent.last_status} at {when(agent.last_finished_at)}, next "
                    f"{when(agent.next_wakeup)}, today {agent.runs_today} runs "
                    f"{agent.tokens_today} tokens"
                )
            changed = FLEET.replace("the morning digest", "the evening digest")
            for agent in await upgrade_check(store, parse_fleet_file(changed), sample=1):
                for run in agent.runs:
                    verdict = "would change" if run.diverges else "same"
                    print(f"upgrade check {agent.name} {run.run_id}: {agent.action}, {verdict}")
    print("[completed] the fleet ran two virtual days and drained")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
