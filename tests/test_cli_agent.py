"""The CLI acts on a session with the agent the session recorded, never with its own.

``send``, ``reply`` and ``cancel`` resume a session in the CLI's process, which can
rebuild only the CLI's agent: a session it made goes on as before (and still replays),
one an application made with its own prompt and tools is refused with
``session.foreign_agent`` and its log is left as it was.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from _app_session import record_app_session
from _cli import run_cli

from actors.cli._demo import demo_llm
from actors.cli._model import spawn_cli_session
from runtime import open_runtime, open_sqlite_store


def _json(cwd: Path, *args: str) -> tuple[int, dict[str, object]]:
    done: subprocess.CompletedProcess[str] = run_cli(*args, "--json", cwd=cwd)
    return done.returncode, json.loads(done.stdout)


def _events(cwd: Path) -> list[tuple[object, ...]]:
    """Every row of the log, in order."""
    with sqlite3.connect(cwd / "powertrio.sqlite") as conn:
        return conn.execute("SELECT * FROM events ORDER BY position").fetchall()


@pytest.fixture
def app_log(tmp_path: Path) -> Path:
    """A directory whose log holds the app's session ``app``, waiting for ``call-ask``."""

    async def record() -> None:
        async with open_sqlite_store(tmp_path / "powertrio.sqlite") as store:
            await record_app_session(store)

    trio.run(record)
    return tmp_path


def _refusal(action: str) -> str:
    return (
        "session 'app' runs an agent of its own (system prompt 'You are the billing desk "
        "agent. Look every invoice up befor…'; tools ask_human, lookup_invoice), "
        f"which {action} cannot rebuild: it has only the CLI's agent and would run the "
        "session with that instead, so nothing was recorded. Act on the session in the "
        "process that runs it (its Session's reply, approve, deny, follow_up or cancel), "
        "or on a fleet through the node that owns it (NodeHost.session(id))"
    )


@pytest.mark.parametrize(
    "command",
    [
        ("reply", "app", "call-ask", "INV-7", "--demo"),
        ("send", "app", "and the other invoice?", "--demo"),
        ("send", "app", "and the other invoice?", "--id", "second", "--demo"),
        ("cancel", "app"),
    ],
    ids=["reply", "send", "send-id", "cancel"],
)
def test_an_app_session_is_refused_with_its_log_unchanged(
    app_log: Path, command: tuple[str, ...]
) -> None:
    """Resumed by the CLI, the app's session would ask its next model call with the CLI's
    prompt and eight tools (``replay.divergence``); instead the command fails with the
    typed error and what to do, the log is byte for byte as it was, and it replays."""
    before = _events(app_log)
    code, out = _json(app_log, *command)
    assert code == 1
    assert out["error"] == {
        "code": "session.foreign_agent",
        "message": _refusal(f"powertrio {command[0]}"),
    }
    assert _events(app_log) == before
    code, replayed = _json(app_log, "replay", "app")
    assert (code, replayed["ok"], replayed["total_checked"]) == (0, True, 1)


def test_the_refusal_reads_for_people_without_a_traceback(app_log: Path) -> None:
    done = run_cli("reply", "app", "call-ask", "INV-7", "--demo", cwd=app_log)
    assert done.returncode == 1
    assert "error [session.foreign_agent]: session 'app' runs an agent of its own" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "parameters",
    [{}, {"model": "tuned-model", "temperature": 0.2, "max_rounds": 4}],
    ids=["defaults", "recorded-parameters"],
)
def test_a_cli_session_waiting_for_an_answer_goes_on_with_its_agent_and_replays(
    tmp_path: Path, parameters: dict[str, Any]
) -> None:
    """The CLI's own session is resumed with its recorded agent and parameters (the model
    name and temperature its requests asked for, its round limit), and the replay of every
    answer, the new ones too, finds no divergence."""

    async def record() -> None:
        async with (
            open_sqlite_store(tmp_path / "powertrio.sqlite") as store,
            open_runtime(store=store) as runtime,
        ):
            ask = await spawn_cli_session(
                runtime, demo_llm(0), session_id="ask", interactive=True, **parameters
            )
            assert (await ask.send("ask me about the picnic")).status == "waiting_for_human"

    trio.run(record)
    code, sessions = _json(tmp_path, "sessions")
    assert code == 0
    [request] = sessions[0]["waiting_for"]  # type: ignore[index]
    code, answered = _json(tmp_path, "reply", "ask", request, "outdoors", "--demo")
    assert (code, answered["status"]) == (0, "completed")
    code, replayed = _json(tmp_path, "replay", "ask")
    assert code == 0 and replayed["ok"] is True
    assert replayed["checked"] == answered["rounds"]


def test_a_sub_agent_is_acted_on_through_its_root(tmp_path: Path) -> None:
    """A helper's spec is its parent's: the CLI never resumes it alone with its own agent."""
    code, ran = _json(tmp_path, "run", "--demo", "plan a picnic")
    assert code == 0
    helper = f"{ran['session_id']}.1"
    before = _events(tmp_path)
    code, out = _json(tmp_path, "send", helper, "one more thing", "--demo")
    assert code == 1
    error = out["error"]
    assert isinstance(error, dict) and error["code"] == "session.foreign_agent"
    assert error["message"].startswith(
        f"session {helper!r} runs an agent of its own (a sub-agent of {ran['session_id']!r}, "
        "which runs it; system prompt 'You are a helper sub-agent."
    )
    assert _events(tmp_path) == before
