"""The console's fleet page over a real fleet: the agents a fleet file declared, run by a
node in virtual time (the demo model), then shown by the console over HTTP beside the
sessions of the log; and ``powertrio serve --ui-port`` serving that page itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from _wait import wait_until

pytest.importorskip("starlette", reason="the console extra is not installed")
pytest.importorskip("hypercorn", reason="the console extra is not installed")

from _cli import run_cli
from _console import serve
from _console_fleet import FLEET, HOUR, START, run_fleet

from actors.cli._common import CliContext, db_lock
from actors.console import LogFleetSource
from actors.events import FleetAgentHosted, FleetNodeStarted
from actors.fleet import apply_fleet, parse_fleet_file, read_fleet_status
from protocols.codec import encode
from runtime import NewEvent, open_sqlite_store


@pytest.fixture(scope="module")
def fleet_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-fleet") / "fleet.sqlite"
    trio.run(run_fleet, path, 13.0, clock=trio.testing.MockClock(autojump_threshold=0))
    return path


async def test_the_fleet_page_shows_the_fleet_file_s_agents_beside_the_sessions(
    fleet_log: Path,
) -> None:
    now = START + 13 * HOUR
    async with open_sqlite_store(fleet_log) as store:
        status = await read_fleet_status(store, now=now)
        source = LogFleetSource(store, now=lambda: now)
        async with serve(fleet_log, writable=False, fleet=source) as console:
            body = (await console.client.get("/api/fleet")).json()
            page = (await console.client.get("/")).text
    agents = {a["name"]: a for a in body["agents"]}
    assert set(agents) == {a.name for a in status.agents} == {"broken", "digest", "pinger"}
    for found in status.agents:
        row = agents[found.name]
        assert row["state"] == found.state
        assert row["node"] == (found.node or "")
        assert row["runs today"] == str(found.runs_today)
        assert row["tokens today"] == f"{found.tokens_today:,}"
    # 13 hours from 08:00: pinger ran at 14:00 and 20:00; digest waits for 07:00.
    assert agents["pinger"]["node"] == "n1"
    assert agents["pinger"]["last run"].startswith("run-2 completed at ")
    assert agents["pinger"]["session"] == "pinger-2"
    assert agents["pinger"]["next wake-up"] == "in 5h"
    assert agents["digest"]["last run"] == "" and agents["digest"]["next wake-up"] == "in 10h"
    assert agents["broken"]["errors"] == "config.invalid×1"  # noqa: RUF001
    assert agents["broken"]["node"] == "" and agents["pinger"]["errors"] == ""
    # The sessions of those runs are in the log's view, beside the agents.
    assert {"pinger-1", "pinger-2"} <= {row["id"] for row in body["sessions"]}
    assert '<table id="agents">' in page and "<h2>Sessions of the log</h2>" in page
    assert '<a href="/sessions/pinger-2">pinger</a>' in page
    assert "config.invalid×1" in page  # noqa: RUF001


async def test_the_fleet_page_shows_the_nodes_and_calls_one_whose_lease_lapsed_lost(
    tmp_path: Path,
) -> None:
    """Two nodes the log has running: this process holds the SQLite log's driver lock
    as node ``n-live`` (as ``powertrio serve`` would); ``n-lost`` was killed (no stop, no
    lock). The page and its JSON say what ``powertrio fleet status`` says."""
    path = tmp_path / "fleet.sqlite"
    lost_pid = 2**22 + 7  # above Linux's largest pid: no such process
    async with open_sqlite_store(path) as store:
        await apply_fleet(store, parse_fleet_file(FLEET))
        for node, pid, agent in (("n-live", os.getpid(), "digest"), ("n-lost", lost_pid, "pinger")):
            started = FleetNodeStarted(node=node, pid=pid, version="9.9", started_at=START)
            await store.append(f"fleet/node/{node}", [NewEvent.from_encoded(encode(started))], 0)
            hosted = FleetAgentHosted(node=node, spec_hash="x")
            await store.append(f"fleet/agent/{agent}", [NewEvent.from_encoded(encode(hosted))], 0)
    ctx = CliContext.create(db=str(path), json=True, debug=True)
    with db_lock(ctx, "serve"):
        async with serve(path, writable=False) as console:
            body = (await console.client.get("/api/fleet")).json()
            page = (await console.client.get("/")).text
        # ``main`` runs its own Trio loop: in a thread of its own.
        status = partial(run_cli, "--db", str(path), "fleet", "status", "--json", cwd=tmp_path)
        cli = await trio.to_thread.run_sync(status)
    assert [(n["name"], n["state"], n["pid"]) for n in body["nodes"]] == [
        ("n-live", "running", os.getpid()),
        ("n-lost", "lost", lost_pid),
    ]
    assert body["nodes"] == json.loads(cli.stdout)["nodes"]
    agents = {a["name"]: a for a in body["agents"]}
    assert agents["digest"]["node"] == "n-live"
    assert agents["pinger"]["node"] == "n-lost (lost)"
    assert '<table id="nodes">' in page
    assert (
        '<tr data-node="n-lost"><td>n-lost</td><td><span class="status lost">lost</span> '
        '<span class="dim">its lease lapsed and it recorded no stop (killed?)</span></td>'
    ) in page
    assert (
        '<tr data-node="n-live"><td>n-live</td><td><span class="status running">running</span></td>'
        in page
    )
    assert "<td>n-lost (lost)</td>" in page


async def test_a_log_with_no_fleet_file_shows_only_its_sessions(db_demo: Path) -> None:
    async with serve(db_demo, writable=False) as console:
        body = (await console.client.get("/api/fleet")).json()
        page = (await console.client.get("/")).text
    assert body["agents"] == []
    assert '<table id="agents">' not in page and body["sessions"]


@pytest.fixture
def db_demo(tmp_path: Path) -> Path:
    from _console import record_log

    path = tmp_path / "demo.sqlite"
    trio.run(record_log, path)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for(url: str) -> httpx.Response:
    """The first answer of a server that is starting (a subprocess's)."""

    def answered() -> httpx.Response | None:
        try:
            return httpx.get(url, timeout=30)
        except httpx.TransportError:
            return None

    return wait_until(answered, f"a server to answer at {url}", timeout=30)


def test_powertrio_serve_serves_the_console_with_ui_port(tmp_path: Path) -> None:
    """``serve --ui-port N`` hosts the fleet and serves its console on loopback: the fleet
    page shows the agents on this node; SIGTERM drains both and exits 0."""
    root = Path(__file__).resolve().parent.parent
    db = tmp_path / "serve.sqlite"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET)
    # The fleet file names tools in tests/test_fleet.py, which imports the suite's helpers.
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    cli = [sys.executable, "-m", "actors.cli", "--db", str(db)]
    applied = subprocess.run(
        [*cli, "fleet", "apply", str(fleet)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    port = _free_port()
    command = [*cli, "serve", "--node", "n7", "--ui-port", str(port)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root
    ) as process:
        try:
            body = _wait_for(f"http://127.0.0.1:{port}/api/fleet").json()
            page = httpx.get(f"http://127.0.0.1:{port}/", timeout=30)
            refused = httpx.get(
                f"http://127.0.0.1:{port}/", headers={"Host": "evil.example"}, timeout=30
            )
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
            code = process.returncode
    assert code == 0
    assert f"console on http://127.0.0.1:{port}/" in err, err
    assert {a["name"]: a["node"] for a in body["agents"]} == {"digest": "n7", "pinger": "n7"}
    assert page.status_code == 200 and '<table id="agents">' in page.text
    assert refused.status_code == 403


def test_serve_refuses_a_console_beyond_loopback_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before the node starts: nothing is hosted, the log is not even opened."""
    from actors.cli import main

    monkeypatch.delenv("POWERTRIO_UI_TOKEN", raising=False)
    db = tmp_path / "none.sqlite"
    code = main(["serve", "--db", str(db), "--ui-host", "0.0.0.0", "--ui-port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error [config.console_token]: the console would listen on '0.0.0.0'" in err
    assert not db.exists()
