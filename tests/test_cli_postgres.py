"""The ``powertrio`` CLI on a PostgreSQL log: ``--db postgresql://...`` and ``POWERTRIO_DB``.

Each test gets a database of its own on the session's server. The CLI runs in this
process (``tests/_cli.py``; offline: the scripted demo model, answering at once).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from _cli import environment, run_cli
from psycopg import sql

from runtime.lowlevel import postgres_lock
from runtime.testing import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
_databases = itertools.count()


@pytest.fixture
def dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A ``postgresql://`` URI of a new, empty database, dropped after the test."""
    name = f"cli{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield f"postgresql://{postgres_server.user}@{postgres_server.host}:{postgres_server.port}/{name}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def cli(
    *args: str, db: str | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run ``powertrio [--db DB] ARGS`` (in this process) and return what it printed."""
    return run_cli(*(["--db", db] if db else []), *args, cwd=cwd, env=environment(**(env or {})))


def test_a_run_and_every_reading_command_work_on_postgres(dsn: str, tmp_path: Path) -> None:
    """``run`` creates the log in the database; the other commands read it back."""
    started = cli("run", "--demo", "plan a picnic", db=dsn)
    assert started.returncode == 0, started.stderr
    assert "completed" in started.stdout
    listed = cli("sessions", "--json", db=dsn)
    assert listed.returncode == 0, listed.stderr
    sessions = json.loads(listed.stdout)
    roots = [s for s in sessions if s["parent_id"] is None]
    assert len(roots) == 1
    assert len(sessions) == 3  # the demo model starts two helpers
    assert {s["status"] for s in sessions} == {"completed"}
    sid = roots[0]["session_id"]
    assert "plan a picnic" in cli("show", sid, db=dsn).stdout
    assert f"{sid}.1" in cli("tree", sid, db=dsn).stdout
    events = [json.loads(line) for line in cli("log", sid, "--json", db=dsn).stdout.splitlines()]
    assert events[0]["type"] == "session.created"
    replayed = cli("replay", sid, db=dsn)
    assert replayed.returncode == 0, replayed.stderr
    checked = cli("check", "--json", db=dsn)
    assert json.loads(checked.stdout)["ok"] is True
    assert cli("timers", db=dsn).returncode == 0
    exported = tmp_path / "log.jsonl"
    assert cli("export", str(exported), db=dsn).returncode == 0
    assert len(exported.read_text().splitlines()) == sum(s["events"] for s in sessions)
    # Driving commands too: a follow-up, and a fork continued with its own send.
    sent = cli("send", sid, "one more thing", "--demo", db=dsn)
    assert sent.returncode == 0, sent.stderr
    first_run = str(roots[0]["events"])  # the end of the first run: a decision's edge
    forked = json.loads(
        cli("--json", "fork", sid, "--at", first_run, "--as", "branch", db=dsn).stdout
    )
    assert (forked["session_id"], forked["events"]) == ("branch", roots[0]["events"])
    assert cli("send", "branch", "go on", "--demo", db=dsn).returncode == 0
    runs = {
        s["session_id"]: s["runs"] for s in json.loads(cli("sessions", "--json", db=dsn).stdout)
    }
    assert (runs[sid], runs["branch"]) == (2, 2)
    # The export imports into a SQLite log: the same sessions, readable there.
    local = str(tmp_path / "copy.sqlite")
    assert cli("import", str(exported), db=local).returncode == 0
    assert [s["session_id"] for s in json.loads(cli("sessions", "--json", db=local).stdout)] == [
        s["session_id"] for s in sessions
    ]


def test_powertrio_db_names_the_database_too(dsn: str, tmp_path: Path) -> None:
    """``POWERTRIO_DB=postgresql://...`` is the same as ``--db``, with no file written."""
    env = {"POWERTRIO_DB": dsn}
    assert cli("run", "--demo", "hello", env=env, cwd=tmp_path).returncode == 0
    listed = cli("sessions", "--json", env=env, cwd=tmp_path)
    assert len(json.loads(listed.stdout)) == 3
    assert list(tmp_path.iterdir()) == []  # no powertrio.sqlite, no lock file


def test_a_reading_command_does_not_create_a_log(dsn: str) -> None:
    """Like a missing file: ``sessions`` on a database without a log says so, creates none."""
    done = cli("sessions", db=dsn)
    assert done.returncode == 1
    assert "error [store.not_found]: no event log at" in done.stderr
    assert "start one there with `powertrio run`" in done.stderr
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'powertrio'"
        ).fetchone()
    assert found == (0,)


def test_a_connection_string_that_does_not_parse_is_a_usage_error() -> None:
    """Exit 2 with ``config.connection_string``, and the password is never printed."""
    done = cli("sessions", db="postgresql://me:hunter2@localhost:notaport/x?nope=1")
    assert done.returncode == 2
    assert "error [config.connection_string]: the PostgreSQL connection string is not valid" in (
        done.stderr
    )
    assert "postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout


def test_an_unreachable_server_is_reported_with_its_address(tmp_path: Path) -> None:
    """Nothing listens on the port: ``store.unavailable`` naming host, port and database."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = cli("--json", "sessions", db=f"postgresql://me:hunter2@127.0.0.1:{port}/fleet")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "store.unavailable"
    assert error["message"].startswith(f"event store server 127.0.0.1:{port}/fleet cannot be ")
    assert "hunter2" not in done.stdout + done.stderr


def test_a_missing_database_is_refused_not_retried(postgres_server: PostgresServer) -> None:
    """The server answers but has no such database: ``store.refused`` says what to check."""
    host, port = postgres_server.host, postgres_server.port
    done = cli("sessions", db=f"postgresql://{postgres_server.user}@{host}:{port}/nosuchdb")
    assert done.returncode == 1
    assert f"error [store.refused]: event store server {host}:{port}/nosuchdb refused" in (
        done.stderr
    )
    assert 'database "nosuchdb" does not exist' in done.stderr
    assert "check the database, user and password" in done.stderr


def test_one_process_drives_a_database_log_at_a_time(dsn: str) -> None:
    """The driver lock is an advisory lock on the server: a second ``run`` is refused,
    naming the holder, and can run once the first lets go."""
    with postgres_lock(dsn, "powertrio-driver", holder="pid 4242 (`powertrio run`)"):
        done = cli("run", "--demo", "hello", db=dsn)
        assert done.returncode == 1
        assert "error [store.locked]" in done.stderr
        assert "is being driven by pid 4242 (`powertrio run`)" in done.stderr
    assert cli("run", "--demo", "hello", db=dsn).returncode == 0


def _readme_commands() -> list[str]:
    """The ``powertrio`` commands of the first block of the README's "More than one
    process" (its second starts two long-running nodes and kills one: what
    tests/test_fleet_nodes.py does with real processes)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## More than one process", 1)[1].split("\n## ", 1)[0]
    block, nodes = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert "powertrio serve" in nodes, nodes
    found: list[str] = []
    for line in block.splitlines():
        for piece in line.split("#", 1)[0].split(";"):
            command = piece.strip()
            if command.startswith("powertrio ") and not re.search(r"\bID\b", command):
                found.append(command)
    return found


def test_the_readme_commands_run_on_postgres(dsn: str, tmp_path: Path) -> None:
    """The README's commands for a shared database run as written, against ``POWERTRIO_DB``
    (the server set-up lines aside: the test's server stands in for them)."""
    commands = _readme_commands()
    assert commands[0].startswith("powertrio run"), commands
    assert any(c.startswith("powertrio sessions") for c in commands), commands
    for command in commands:
        done = cli(*shlex.split(command)[1:], env={"POWERTRIO_DB": dsn}, cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr)
    assert (tmp_path / "fleet.jsonl").exists()


def test_without_psycopg_a_database_log_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--db postgresql://...`` with no psycopg: exit 2, naming the extra to install."""
    from actors.cli import main

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    assert main(["--db", "postgresql://localhost/fleet", "sessions"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error [config.missing_extra]: a PostgreSQL log (--db postgresql://...) needs the "
        "'postgres' extra (psycopg is not installed): pip install 'powertrio[postgres]'"
    )
