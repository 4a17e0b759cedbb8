"""Fleets: the file's checks, apply's reconciliation, schedules on a node in virtual time
(no catch-up storm), pause, the day budget, drain, upgrade checks and the status fold."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from actors._fleet._control import read_control, request_drain
from actors._fleet._upgrade import upgrade_check
from actors.cli._fleet_demo import fleet_demo_llm
from actors.events import (
    FleetAgentChanged,
    FleetAgentDeclared,
    FleetAgentRetired,
    FleetNodeDraining,
    FleetNodeStarted,
    FleetNodeStopped,
    FleetRunFinished,
    FleetRunSkipped,
    FleetRunStarted,
)
from actors.fleet import (
    AgentDecl,
    FleetAgentNotFoundError,
    FleetFile,
    FleetFileError,
    FleetNode,
    FleetNodeNotFoundError,
    apply_fleet,
    fleet_status,
    parse_fleet_file,
    read_fleet_status,
    set_paused,
)
from protocols import LLM
from protocols.codec import decode, decode_record, encode
from runtime import Clock, EventStore, NewEvent, Runtime, open_runtime
from runtime.maintenance import import_jsonl
from runtime.timers import TimerFired

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0
DAY = 86_400.0

FLEET = """
[agents.digest]
prompt = "You write the digest."
input = "Write it."
[[agents.digest.schedules]]
cron = "0 7 * * *"

[agents.pinger]
prompt = "You ping."
tools = ["tests.test_fleet:pong"]
[[agents.pinger.schedules]]
every = "6h"
"""


def pong() -> str:
    """Answer a ping."""
    return "pong"


def _demo(_decl: AgentDecl) -> LLM:
    return fleet_demo_llm()


async def _events(store: EventStore, stream: str) -> list[object]:
    return [decode_record(r) for r in await store.read(stream)]


@asynccontextmanager
async def _node(runtime: Runtime, name: str = "n1") -> AsyncIterator[FleetNode]:
    node = FleetNode(runtime, node=name, llm_for=_demo, poll=60.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)
        yield node
        node.drain("test over")


def _run(test: Callable[[], object]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


# -- the file -------------------------------------------------------------------------------

BAD = """\
[agents.digest]
prompt = "You write the digest."
tools = ["nosuch.mod:fn", "not a path"]
budget = { run_tokens = 0 }
colour = "red"

[[agents.digest.schedules]]
cron = "0 7 * * 1-5"

[[agents.digest.schedules]]
cron = "61 * * * *"

[[agents.digest.schedules]]
every = "-5m"

[agents.empty]
provider = "gpt"
"""


def test_a_bad_file_gets_one_error_per_problem_with_its_line() -> None:
    """Every problem is reported at once, in line order, each with its line."""
    with pytest.raises(FleetFileError) as raised:
        parse_fleet_file(BAD, "fleet.toml")
    error = raised.value
    assert error.code == "config.fleet_file"
    assert [line for line, _ in error.problems] == [3, 3, 4, 5, 11, 14, 16, 17]
    assert str(error).splitlines() == [
        "fleet file fleet.toml has 8 problems:",
        "fleet.toml:3: agents.digest: tool 'nosuch.mod:fn': module 'nosuch.mod' does not "
        "import (No module named 'nosuch')",
        "fleet.toml:3: agents.digest: tool 'not a path' is not an import path like "
        "'package.module:function'",
        "fleet.toml:4: agents.digest.budget: run_tokens must be a whole number >= 1",
        "fleet.toml:5: agents.digest: unknown key 'colour'",
        "fleet.toml:11: agents.digest.schedules[1]: cron '61 * * * *': minute: 61 is outside 0-59",
        "fleet.toml:14: agents.digest.schedules[2]: every '-5m' must be a positive duration: "
        "seconds, or a number with s, m, h or d",
        "fleet.toml:16: agents.empty: prompt must be a non-empty string",
        "fleet.toml:17: agents.empty: provider 'gpt' is not one of demo, openai, anthropic",
    ]


def test_toml_syntax_and_empty_files() -> None:
    """A syntax error is one problem at its line; a file with no agents says so."""
    with pytest.raises(FleetFileError) as raised:
        parse_fleet_file('[agents.a]\nprompt = "x"\n[agents.b\n', "f.toml")
    assert raised.value.problems == (
        (3, "TOML syntax: Expected ']' at the end of a table declaration"),
    )
    with pytest.raises(FleetFileError) as raised:
        parse_fleet_file("", "f.toml")
    assert str(raised.value) == (
        "fleet file f.toml has 1 problem:\n"
        "f.toml: no agents: declare at least one [agents.NAME] table"
    )


def test_a_good_file_parses_and_tools_load_by_import_path() -> None:
    """Schedules, tools and budgets come out as declared; a plain function becomes a tool."""
    fleet = parse_fleet_file(FLEET)
    digest, pinger = fleet.agents
    assert digest.schedules[0].key == "cron=0 7 * * *"
    assert pinger.schedules[0].seconds == 6 * HOUR
    assert [t.name for t in pinger.load_tools()] == ["pong"]
    assert AgentDecl.from_json(pinger.to_json()) == pinger


# -- apply ------------------------------------------------------------------------------------


def test_apply_creates_changes_retires_and_is_idempotent() -> None:
    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            fleet = parse_fleet_file(FLEET)
            first = await apply_fleet(store, fleet)
            assert first.created == ("digest", "pinger")
            again = await apply_fleet(store, fleet)
            assert (again.created, again.changed, again.unchanged) == (
                (),
                {},
                ("digest", "pinger"),
            )
            changed = FLEET.replace("You write the digest.", "You write the evening digest.")
            only_digest = changed.split("[agents.pinger]")[0]
            report = await apply_fleet(store, parse_fleet_file(only_digest))
            assert report.changed == {"digest": ("prompt",)}
            assert report.retired == ("pinger",)
            await apply_fleet(store, fleet)  # pinger comes back, digest changes back
            kinds = [type(e).__name__ for e in await _events(store, "fleet")]
            assert kinds == [
                "FleetAgentDeclared",
                "FleetAgentDeclared",
                "FleetAgentChanged",
                "FleetAgentRetired",
                "FleetAgentChanged",
                "FleetAgentDeclared",
            ]
            with pytest.raises(FleetAgentNotFoundError) as raised:
                await set_paused(store, "nobody", paused=True)
            assert str(raised.value) == ("the fleet has no agent 'nobody' (agents: digest, pinger)")

    _run(main)


# -- a node -----------------------------------------------------------------------------------


def test_schedules_fire_and_downtime_gives_one_firing_not_a_storm() -> None:
    """A day on a node, three days down, then a node again: each schedule fires once for
    all the slots it missed, then keeps its rhythm."""

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            await apply_fleet(runtime.store, parse_fleet_file(FLEET))
            async with _node(runtime):
                await trio.sleep(DAY)
            await trio.sleep(3 * DAY)  # no node: digest misses 3 slots, pinger 12
            async with _node(runtime):
                await trio.sleep(HOUR)
                status = await read_fleet_status(runtime.store, now=runtime.clock.now())
                catch_up = {a.name: a.runs_today for a in status.agents}
                await trio.sleep(DAY - HOUR)
            digest = await _events(runtime.store, "fleet/agent/digest")
            pinger = await _events(runtime.store, "fleet/agent/pinger")
        fired = [e.fired_at for e in digest if isinstance(e, TimerFired)]
        assert [round((t - START) / HOUR, 2) for t in fired] == [23.0, 96.0, 119.0]
        pings = [round((e.fired_at - START) / HOUR, 2) for e in pinger if isinstance(e, TimerFired)]
        assert pings == [6.0, 12.0, 18.0, 24.0, 96.0, 102.0, 108.0, 114.0, 120.0]
        assert catch_up == {"digest": 1, "pinger": 1}
        started = {e.run_id: e.started_at for e in pinger if isinstance(e, FleetRunStarted)}
        finished = [e for e in pinger if isinstance(e, FleetRunFinished)]
        assert len(finished) == 9
        # A run that began as its node drained got one turn, then was cancelled.
        cancelled = [
            round((started[e.run_id] - START) / HOUR) for e in finished if e.status != "completed"
        ]
        assert set(cancelled) <= {24, 120}
        assert {e.status for e in finished} <= {"completed", "cancelled"}

    _run(main)


def test_a_changed_spec_is_used_from_the_next_run_and_pause_skips_slots() -> None:
    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            await apply_fleet(store, parse_fleet_file(FLEET))
            async with _node(runtime) as node:
                await trio.sleep(7 * HOUR)
                changed = FLEET.replace("You ping.", "You ping twice.")
                await apply_fleet(store, parse_fleet_file(changed))
                node._poll = 60.0
                await trio.sleep(6 * HOUR)
                await set_paused(store, "pinger", paused=True)
                await trio.sleep(6 * HOUR)
            events = await _events(store, "fleet/agent/pinger")
            control = await _events(store, "fleet")
        started = [e for e in events if isinstance(e, FleetRunStarted)]
        assert len(started) == 2
        assert started[0].spec_hash != started[1].spec_hash
        assert started[1].code_version.endswith("spec " + started[1].spec_hash)
        change = next(e for e in control if isinstance(e, FleetAgentChanged))
        assert change.changed == ("prompt",)
        assert change.spec_hash == started[1].spec_hash
        skipped = [e for e in events if isinstance(e, FleetRunSkipped)]
        assert [(s.reason, s.trigger) for s in skipped] == [("paused", "every=6h")]

    _run(main)


def test_the_day_budget_skips_runs_once_spent() -> None:
    text = FLEET.split("[agents.pinger]", maxsplit=1)[0].replace(
        'input = "Write it."', 'input = "Write it."\nbudget = { day_tokens = 50 }'
    )
    text = text.replace('cron = "0 7 * * *"', 'cron = "*/30 * * * *"')

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            await apply_fleet(runtime.store, parse_fleet_file(text))
            async with _node(runtime):
                await trio.sleep(3 * HOUR)
            events = await _events(runtime.store, "fleet/agent/digest")
        tokens = [e.tokens for e in events if isinstance(e, FleetRunFinished)]
        assert sum(tokens[:-1]) < 50 <= sum(tokens)
        skipped = {e.reason for e in events if isinstance(e, FleetRunSkipped)}
        assert skipped == {"budget.day"}

    _run(main)


def test_upgrade_check_names_a_changed_prompt() -> None:
    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            fleet = parse_fleet_file(FLEET)
            await apply_fleet(store, fleet)
            async with _node(runtime):
                await trio.sleep(DAY)
            same = await upgrade_check(store, fleet, sample=2)
            changed = FLEET.replace("You ping.", "You ping loudly.")
            report = await upgrade_check(store, parse_fleet_file(changed), sample=2)
        assert [(a.name, a.action, [r.diverges for r in a.runs]) for a in same] == [
            ("digest", "keep", [False]),
            ("pinger", "keep", [False, False]),
        ]
        pinger = report[1]
        assert (pinger.action, pinger.changed) == ("change", ("prompt",))
        assert pinger.old_version != pinger.new_version
        assert [r.run_id for r in pinger.runs] == ["run-3", "run-4"]
        assert all(r.diverges for r in pinger.runs)
        assert "You ping loudly." in pinger.runs[0].detail
        assert report[0].runs[0].diverges is False

    _run(main)


def test_fleet_status_is_a_pure_fold() -> None:
    """The fold needs no store: operators' events and an agent's runs, at a given time."""
    decl = parse_fleet_file(FLEET).agents[0]
    events: list[tuple[str, object]] = [
        ("fleet", FleetAgentDeclared(name="digest", decl=decl.to_json(), spec_hash="h1")),
        (
            "fleet/agent/digest",
            FleetRunStarted(
                run_id="run-1",
                session_id="digest-1",
                input="x",
                trigger="every=1h",
                spec_hash="h1",
                package_version="0",
                started_at=START,
            ),
        ),
        (
            "fleet/agent/digest",
            FleetRunFinished(
                run_id="run-1",
                status="failed",
                tokens=40,
                finished_at=START + 5,
                error="boom",
                error_code="llm.server",
            ),
        ),
        ("fleet", FleetAgentRetired(name="digest")),
    ]
    status = fleet_status(events[:3], now=START + 10)
    digest = status.agent("digest")
    assert digest is not None
    assert (digest.state, digest.runs_today, digest.tokens_today, digest.errors) == (
        "active",
        1,
        40,
        1,
    )
    assert digest.last_error == "[llm.server] boom"
    assert digest.code_version == "powertrio 0 spec h1"
    assert fleet_status(events[:3], now=START + DAY).agents[0].tokens_today == 0
    assert fleet_status(events, now=START).agents[0].state == "retired"


def test_a_node_whose_lease_lapsed_is_lost_not_running() -> None:
    """The log cannot tell a node that was killed from a running one (SIGKILL records
    nothing): given the nodes whose lease holds, the others the log has running or
    draining are lost; a stopped node stays stopped."""
    started = [
        (f"fleet/node/{name}", FleetNodeStarted(node=name, pid=pid, version="0", started_at=START))
        for name, pid in (("a", 11), ("b", 12), ("c", 13), ("d", 14))
    ]
    events: list[tuple[str, object]] = [
        *started,
        ("fleet/node/c", FleetNodeDraining(node="c", reason="SIGTERM", deadline=START + 30)),
        ("fleet/node/d", FleetNodeStopped(node="d", stopped_at=START + 1)),
    ]
    status = fleet_status(events, now=START + 2)
    assert [(n.name, n.state) for n in status.nodes] == [
        ("a", "running"),
        ("b", "running"),
        ("c", "draining"),
        ("d", "stopped"),
    ]
    seen = status.with_live_nodes({"a"})
    assert [(n.name, n.state) for n in seen.nodes] == [
        ("a", "running"),
        ("b", "lost"),
        ("c", "lost"),
        ("d", "stopped"),
    ]
    assert seen.agents == status.agents


def test_a_node_says_each_time_the_agents_it_hosts_change() -> None:
    """``on_hosting`` gets the hosted agents whenever that set changes after the start
    (here an agent declared meanwhile), not for the start itself: ``serve`` prints those,
    so what it says follows what ``fleet status`` says."""

    async def main() -> None:
        said: list[list[str]] = []
        async with open_runtime(clock=Clock(START)) as runtime:
            fleet_file = parse_fleet_file(FLEET)
            await apply_fleet(runtime.store, FleetFile(agents=fleet_file.agents[:1]))
            node = FleetNode(runtime, node="n1", llm_for=_demo, poll=60.0, on_hosting=said.append)
            async with trio.open_nursery() as nursery:
                await nursery.start(node.serve)
                assert (node.agents(), said) == (["digest"], [])
                await apply_fleet(runtime.store, fleet_file)
                await trio.sleep(61)
                assert said == [["digest", "pinger"]]
                status = await read_fleet_status(runtime.store, now=START)
                assert {a.name: a.node for a in status.agents} == {"digest": "n1", "pinger": "n1"}
                node.drain("test over")
        assert said == [["digest", "pinger"]]  # the drain is no change to announce

    _run(main)


def test_draining_a_node_that_never_served_is_an_error_naming_the_nodes() -> None:
    """``fleet drain NOSUCH`` would ask no one and never be answered: it names the nodes
    there are instead, and appends nothing."""

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            with pytest.raises(FleetNodeNotFoundError) as none:
                await request_drain(store, "n1")
            assert str(none.value) == (
                "the fleet has no node 'n1' (nodes: none: start one with `powertrio serve`)"
            )
            for name in ("n2", "n1"):
                event = FleetNodeStarted(node=name, pid=1, version="0", started_at=START)
                await store.append(f"fleet/node/{name}", [NewEvent.from_encoded(encode(event))], 0)
            with pytest.raises(FleetNodeNotFoundError) as unknown:
                await request_drain(store, "nosuch")
            assert (unknown.value.code, unknown.value.known) == ("config.fleet_node", ("n1", "n2"))
            assert str(unknown.value) == "the fleet has no node 'nosuch' (nodes: n1, n2)"
            assert await store.stream_version("fleet") == 0
            await request_drain(store, "n2")
            assert [type(e).__name__ for e in await _events(store, "fleet")] == [
                "FleetNodeDrainRequested"
            ]

    _run(main)


# -- an old log ----------------------------------------------------------------------------

OLD_LOG = Path(__file__).parent / "data" / "fleet_log_v1.jsonl"
"""A fleet's log as the first fleet code wrote it: ``fleet.run_started`` at schema version
1, whose ``code_version`` string version 2 split into ``package_version``."""

OLD_FLEET = """
[agents.pinger]
prompt = "You ping."
input = "Ping."
[[agents.pinger.schedules]]
every = "6h"
"""


def test_an_old_log_is_upcast_and_still_checked_for_upgrades() -> None:
    async def main() -> None:
        async with open_runtime(clock=Clock(START + DAY)) as runtime:
            store = runtime.store
            await import_jsonl(store, OLD_LOG)
            records = await store.read("fleet/agent/pinger")
            stored = [r for r in records if r.type == "fleet.run_started"]
            assert {r.schema_version for r in stored} == {1}
            started = [e for e in map(decode_record, stored) if isinstance(e, FleetRunStarted)]
            assert [(e.run_id, e.package_version) for e in started] == [
                ("run-1", "0.1.0"),
                ("run-2", "0.1.0"),
            ]
            assert started[0].code_version == f"powertrio 0.1.0 spec {started[0].spec_hash}"
            status = await read_fleet_status(store, now=START + HOUR)
            pinger = status.agent("pinger")
            assert pinger is not None
            assert (pinger.last_run, pinger.node) == ("run-2", "old-node")
            same = await upgrade_check(store, parse_fleet_file(OLD_FLEET))
            assert [r.diverges for r in same[0].runs] == [False, False]
            louder = OLD_FLEET.replace("You ping.", "You ping loudly.")
            changed = await upgrade_check(store, parse_fleet_file(louder))
            assert [r.diverges for r in changed[0].runs] == [True, True]
            assert changed[0].runs[0].recorded_version.startswith("powertrio 0.1.0 spec ")

    _run(main)


def test_the_upcaster_names_an_unreadable_version() -> None:
    """A version-1 event whose code version string has another shape still decodes."""
    data = {
        "run_id": "r",
        "session_id": "s",
        "input": "i",
        "trigger": "t",
        "spec_hash": "h",
        "code_version": "something else",
        "started_at": 1.0,
    }
    event = decode("fleet.run_started", 1, orjson.dumps(data))
    assert isinstance(event, FleetRunStarted)
    assert event.package_version == "unknown"


def test_an_agent_whose_tools_do_not_import_on_this_node_is_reported() -> None:
    """A node whose code lacks an agent's tool hosts the others and records why not."""
    broken = AgentDecl(name="broken", prompt="p", tools=("nosuch.mod:fn",))

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            await apply_fleet(store, parse_fleet_file(FLEET))
            declared = FleetAgentDeclared(name="broken", decl=broken.to_json(), spec_hash="x")
            await store.append("fleet", [NewEvent.from_encoded(encode(declared))], 2)
            async with _node(runtime) as node:
                await trio.sleep(HOUR)
                hosted = node.agents()
            status = await read_fleet_status(store, now=runtime.clock.now())
        assert hosted == ["digest", "pinger"]
        agent = status.agent("broken")
        assert agent is not None
        assert (agent.node, agent.errors) == (None, 1)
        assert agent.last_error == (
            "[config.invalid] n1: tool 'nosuch.mod:fn': module 'nosuch.mod' does not import "
            "(No module named 'nosuch')"
        )

    _run(main)


_FILES = st.lists(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["p1", "p2"]), max_size=4
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=examples(40), deadline=None)
@given(files=_FILES)
def test_apply_converges_on_the_last_file_whatever_came_before(files: list[dict[str, str]]) -> None:
    """After any sequence of applies, the live agents and their specs are the last file's,
    retired agents are the others ever declared, and applying the last file again (twice,
    concurrently) appends nothing."""

    def fleet(agents: dict[str, str]) -> FleetFile:
        return FleetFile(tuple(AgentDecl(name=n, prompt=p) for n, p in sorted(agents.items())))

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            store = runtime.store
            for agents in files:
                await apply_fleet(store, fleet(agents))
            version = await store.stream_version("fleet")
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(apply_fleet, store, fleet(files[-1]))
            assert await store.stream_version("fleet") == version
            control = await read_control(store)
        last = files[-1]
        assert control.live() == sorted(last)
        assert {n: a.decl.prompt for n, a in control.agents.items() if not a.retired} == last
        ever = set().union(*files)
        assert {n for n, a in control.agents.items() if a.retired} == ever - set(last)

    _run(main)


def test_concurrent_applies_declare_each_agent_once() -> None:
    """Two operators apply the same new file at once: the control stream's optimistic
    append makes one of them see the other's declarations and append nothing."""

    async def main() -> None:
        async with open_runtime(clock=Clock(START)) as runtime:
            fleet_file = parse_fleet_file(FLEET)
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(apply_fleet, runtime.store, fleet_file)
            kinds = [type(e).__name__ for e in await _events(runtime.store, "fleet")]
        assert kinds == ["FleetAgentDeclared", "FleetAgentDeclared"]

    _run(main)
