"""What a session waits for, retried sends and truthful results, in Python and in the CLI."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest
import trio
from _cli import run_cli

from actors import RunResult, ask_human, spawn_session
from actors._reading._tree import AgentTree
from actors.cli._common import CliContext
from actors.cli._model import ModelChoice, max_tokens_for
from actors.cli._run import RunView, report, result_warnings
from protocols import LLMRequest, LLMResponse, ToolCall, Usage
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM


def asking_model() -> FunctionLLM:
    """Asks the human first; answers once it has heard back."""

    def model(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].role == "tool":
            return LLMResponse(content="thanks", usage=Usage(prompt_tokens=3))
        question = ToolCall(id="q1", name="ask_human", arguments='{"question": "Which day?"}')
        return LLMResponse(tool_calls=(question,), usage=Usage(prompt_tokens=2))

    return FunctionLLM(model)


async def _waiting_session(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Run ``study-1`` until it waits for a human; queue ``study-2`` behind it."""
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=asking_model(), tools=[ask_human], session_id="study"
        )
        first = await session.send("plan the picnic", id="study-1")
        assert first.status == "waiting_for_human"
        with trio.move_on_after(0.5):  # a send behind a run that waits for a human waits too
            await session.send("and the drinks", id="study-2")
        state = await session.state()
    assert [r.request_id for r in state.waiting_for] == ["q1"]
    assert [q.run_id for q in state.queued] == ["study-2"]
    (warning,) = [r for r in caplog.records if r.name == "powertrio.session"]
    assert "study-2 is queued behind run study-1, which waits for a human" in warning.message


async def test_a_repeated_send_of_a_run_waiting_for_a_human_returns_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's restart-safe pattern: the same send after a restart starts nothing and
    returns the waiting run's result; ``state()`` says what it waits for and what is queued."""
    caplog.set_level(logging.WARNING, logger="powertrio.session")
    path = tmp_path / "agents.sqlite"
    await _waiting_session(path, caplog)
    llm = asking_model()
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human], session_id="study")
        with trio.fail_after(5):
            again = await session.send("plan the picnic", id="study-1")
        state = await session.state()
    assert again.status == "waiting_for_human"
    assert [r.request_id for r in again.human_requests] == ["q1"]
    assert llm.requests == []
    assert set(state.results) == set()
    assert [r.request_id for r in state.waiting_for] == ["q1"]
    assert [q.run_id for q in state.queued] == ["study-2"]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "POWERTRIO_DEMO_DELAY": "0"}
    return run_cli(*args, cwd=cwd, env=env)


async def test_show_and_sessions_say_what_a_session_waits_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``show`` prints the open request and the queued input; ``sessions`` lists both."""
    caplog.set_level(logging.WARNING, logger="powertrio.session")
    await _waiting_session(tmp_path / "powertrio.sqlite", caplog)
    shown = await trio.to_thread.run_sync(_cli, tmp_path, "show", "study", "--json")
    assert shown.returncode == 0, shown.stderr
    waiting = json.loads(shown.stdout)["waiting"]
    assert waiting == {
        "human_requests": [{"request_id": "q1", "kind": "question", "prompt": "Which day?"}],
        "queued": [{"run_id": "study-2", "text": "and the drinks"}],
    }
    people = await trio.to_thread.run_sync(_cli, tmp_path, "show", "study")
    assert "waiting for a human (question): Which day?" in people.stdout
    assert "powertrio reply study q1" in people.stdout
    assert "queued: run study-2: and the drinks" in people.stdout
    listed = await trio.to_thread.run_sync(_cli, tmp_path, "sessions", "--json")
    [session] = json.loads(listed.stdout)
    assert (session["waiting_for"], session["queued"]) == (["q1"], ["study-2"])
    table = await trio.to_thread.run_sync(_cli, tmp_path, "sessions")
    assert "waiting for human (q1) · 1 queued" in table.stdout


def test_send_with_an_id_runs_once_however_often_it_is_repeated(tmp_path: Path) -> None:
    """``powertrio send ID text --id X`` twice: one run X, the same result both times."""
    started = _cli(tmp_path, "run", "--demo", "plan a picnic", "--json")
    assert started.returncode == 0, started.stderr
    sid = json.loads(started.stdout)["session_id"]
    first = _cli(tmp_path, "send", sid, "and the drinks", "--id", "drinks", "--demo", "--json")
    again = _cli(tmp_path, "send", sid, "and the drinks", "--id", "drinks", "--demo", "--json")
    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    one, two = json.loads(first.stdout), json.loads(again.stdout)
    assert one["run_id"] == two["run_id"] == "drinks"
    assert (one["status"], one["text"]) == (two["status"], two["text"])
    log = _cli(tmp_path, "log", sid, "--json")
    runs = [json.loads(line) for line in log.stdout.splitlines()]
    assert sum(r["type"] == "session.run_started" for r in runs) == 2  # the task, then drinks


def test_the_offline_model_may_answer_at_length() -> None:
    """The local model's answers are no longer cut at 256 tokens."""
    args = argparse.Namespace(max_tokens=None)
    assert max_tokens_for(args, ModelChoice(kind="local", label="local")) == 1024
    assert max_tokens_for(args, ModelChoice(kind="demo", label="demo")) is None


async def test_the_run_summary_warns_of_truncation_and_unknown_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``powertrio run``'s summary has a line for each thing the status does not say."""
    result = RunResult(
        session_id="s",
        run_id="r",
        status="completed",
        text="The plan has three par",
        rounds=1,
        usage=Usage(),
        truncated=True,
        unknown_tool_results=("c1", "c2"),
    )
    assert result_warnings(RunResult(session_id="s", run_id="r", status="completed",
                                     text="", rounds=1, usage=Usage())) == []  # fmt: skip
    ctx = CliContext.create(db=str(tmp_path / "powertrio.sqlite"), json=False, debug=False)
    async with open_runtime() as runtime:
        view = RunView(ctx, AgentTree("s"))
        code = report(ctx, result, view, ModelChoice(kind="demo", label="demo"), runtime)
    out = capsys.readouterr().out
    assert code == 0
    assert "warning: the last answer was cut off by the token limit" in out
    assert "warning: tool results unknown (the process stopped while they ran): c1, c2" in out


async def test_show_warns_of_a_truncated_answer_and_gives_the_error_code(tmp_path: Path) -> None:
    """``show`` has a line for a run cut off by the token limit; JSON carries the fields."""
    cut = LLMResponse(content="The plan has three par", finish_reason="length", model="m")

    def model(request: LLMRequest) -> LLMResponse:
        if len(request.messages) > 1:
            return [cut][len(request.messages)]  # an IndexError in the model function
        return cut

    async with (
        open_sqlite_store(tmp_path / "powertrio.sqlite") as store,
        open_runtime(store=store) as runtime,
    ):
        session = await spawn_session(runtime, llm=FunctionLLM(model), session_id="s")
        await session.send("plan", id="r1")
        await session.send("again", id="r2")
    people = await trio.to_thread.run_sync(_cli, tmp_path, "show", "s")
    assert people.stdout.count("warning: the last answer was cut off by the token limit") == 1
    shown = await trio.to_thread.run_sync(_cli, tmp_path, "show", "s", "--json")
    finished = [e for e in json.loads(shown.stdout)["entries"] if e["kind"] == "run_finished"]
    assert [(e["truncated"], e["error_code"]) for e in finished] == [
        (True, None),
        (False, "IndexError"),
    ]
