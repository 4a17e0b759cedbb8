"""The console's pictures where people look: the replay diff side by side, ..."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
import trio

pytest.importorskip("starlette", reason="the console extra is not installed")

from _console import copy_log, record_log, serve

from actors.console._replay_view import DiffRow, side_by_side


def test_a_replay_difference_reads_side_by_side() -> None:
    difference = "\n".join(
        [
            "--- recorded system prompt",
            "+++ replayed system prompt",
            "@@ -1,3 +1,3 @@",
            " You are a helper.",
            "-Answer in French.",
            "+Answer in <b>German</b>.",
            "-Be brief.",
            " Thank you.",
            "model: recorded 'm-1', replayed 'm-2'",
            "tools: same names, but a description or schema changed",
        ]
    )
    assert side_by_side(difference) == [
        DiffRow("@@ -1,3 +1,3 @@", "@@ -1,3 +1,3 @@", "hunk"),
        DiffRow("You are a helper.", "You are a helper.", "same"),
        DiffRow("Answer in French.", "Answer in <b>German</b>.", "changed"),
        DiffRow("Be brief.", "", "removed"),
        DiffRow("Thank you.", "Thank you.", "same"),
        DiffRow("model: 'm-1'", "model: 'm-2'", "changed"),
        DiffRow(
            "tools: same names, but a description or schema changed",
            "tools: same names, but a description or schema changed",
            "note",
        ),
    ]
    assert side_by_side("+only new") == [DiffRow("", "only new", "added")]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-pictures") / "recorded.sqlite"
    trio.run(record_log, path)
    return path


def tamper_system_prompt(db: Path) -> None:
    """Change the demo session's recorded system prompt, as a changed agent would."""
    from runtime._sqlite._schema import event_checksum

    with sqlite3.connect(db) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM events WHERE stream = 'session/demo' AND version = 1"
        ).fetchall()
        changed = bytes(data).replace(b"Answer concisely.", b"Answer <b>at length</b>.")
        assert changed != bytes(data)
        conn.create_function("checksum", 6, event_checksum)
        conn.execute(
            "UPDATE events SET data = ?1, checksum = checksum(stream, version, type, "
            "schema_version, ?1, metadata) WHERE stream = 'session/demo' AND version = 1",
            (changed,),
        )


async def test_the_replay_page_shows_a_changed_prompt_side_by_side(
    recorded: Path, tmp_path: Path
) -> None:
    db = copy_log(recorded, tmp_path / "powertrio.sqlite")
    tamper_system_prompt(db)
    async with serve(db) as console:
        html = (await console.client.get("/sessions/demo/replay")).text
    assert '<table class="side-by-side" id="replay-diff">' in html
    row = html[html.index('<tr class="changed">') :].split("</tr>")[0]
    assert "Answer concisely.</td>" in row
    assert "Answer &lt;b&gt;at length&lt;/b&gt;.</td>" in row


@pytest.fixture(scope="module")
def fleet_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import trio.testing
    from _console_fleet import run_fleet

    path = tmp_path_factory.mktemp("console-pictures-fleet") / "fleet.sqlite"
    trio.run(run_fleet, path, 13.0, clock=trio.testing.MockClock(autojump_threshold=0))
    return path


async def test_the_fleet_page_shows_each_agent_s_latest_runs_and_usage_per_agent(
    fleet_log: Path,
) -> None:
    from _console_fleet import HOUR, START

    from actors import Price
    from actors.console import LogFleetSource
    from runtime import open_sqlite_store

    async with open_sqlite_store(fleet_log) as store:
        source = LogFleetSource(store, now=lambda: START + 13 * HOUR)
        prices = {"": Price(prompt=1.0, completion=1.0)}  # every model, at $1 a million
        async with serve(fleet_log, writable=False, fleet=source, prices=prices) as console:
            page = (await console.client.get("/")).text
            usage = (await console.client.get("/usage")).text
    pinger = page[page.index('<tr data-agent="pinger">') :].split("</tr>")[0]
    # pinger ran twice (14:00 and 20:00), each run its own session, linked to its trace.
    runs = re.findall(r'<a href="(/sessions/[^"]+/trace)"><rect class="run (\w+)"', pinger)
    assert runs == [
        ("/sessions/pinger-1/trace", "completed"),
        ("/sessions/pinger-2/trace", "completed"),
    ]
    assert "<title>run-1 · pinger-1 · completed · " in pinger
    digest = page[page.index('<tr data-agent="digest">') :].split("</tr>")[0]
    assert '<td class="strip"></td>' in digest  # it has not run yet
    assert "tokens per day per tree" in usage and "tokens per day per fleet agent" in usage
    assert "cost per day per fleet agent (USD)" in usage
    chart = usage[usage.index("tokens per day per fleet agent") :].split("</figure>")[0]
    assert "<title>pinger · " in chart and "<title>pinger-1 · " not in chart
