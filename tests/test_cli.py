"""The ``powertrio`` console script, in a temporary directory.

Commands run in this process (``tests/_cli.py``); the ones that watch another process, a
terminal or a signal start the real console script.

Offline throughout: ``--demo`` forces the scripted demo model (``POWERTRIO_DEMO_DELAY=0``
makes it answer at once). The live view and Ctrl-C are tested in a real terminal under
tmux; one test drives the llama.cpp server.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import shlex
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest
import trio
import trio.testing
from _cli import command, environment, run_cli
from _wait import wait_until, wait_until_async

from actors import AgentSpec, spawn_session
from actors.workflows import WorkflowContext, run_workflow, start_workflow, workflow
from protocols import LLMRequest, LLMResponse, Usage
from runtime import NewEvent, open_runtime, open_sqlite_store
from runtime._sqlite._schema import event_checksum
from runtime.testing import FunctionLLM

TASK = "plan a picnic"


def cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``powertrio ARGS`` in ``cwd`` (in this process) and return what it did."""
    return run_cli(*args, cwd=cwd, env=env)


def cli_json(cwd: Path, *args: str) -> object:
    """Run a command with ``--json``, check it succeeded and parse its output."""
    done = cli(cwd, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A directory whose log holds one completed demo run (a root and two helpers)."""
    where = tmp_path_factory.mktemp("finished")
    result = cli_json(where, "run", "--offline", "--demo", TASK)
    assert isinstance(result, dict)
    return where, result


@pytest.fixture
def workdir(tmp_path: Path, finished: tuple[Path, dict[str, object]]) -> Path:
    """A copy of the finished log, for commands that write to it."""
    shutil.copy(finished[0] / "powertrio.sqlite", tmp_path / "powertrio.sqlite")
    return tmp_path


def root_id(finished: tuple[Path, dict[str, object]]) -> str:
    return str(finished[1]["session_id"])


# -- run -------------------------------------------------------------------------------------


def test_run_offline_completes_a_tree_and_reports_it_as_json(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``run --offline --demo --json``: the root spawns two helpers, all complete, exit 0."""
    _, result = finished
    assert result["status"] == "completed"
    assert result["model"] == "demo (scripted, offline)"
    assert str(result["text"]).startswith(f"Done with {TASK!r}")
    tree = result["tree"]
    assert isinstance(tree, dict)
    sid = result["session_id"]
    assert [f"{sid}.1", f"{sid}.2"] == [c["session_id"] for c in tree["children"]]
    assert {("helper", "completed")} == {(c["name"], c["status"]) for c in tree["children"]}
    assert result["usage"]["total_tokens"] > 0  # type: ignore[index]


def test_run_for_people_streams_the_text_and_prints_the_tree(tmp_path: Path) -> None:
    """Without --json (and without a terminal): the answer streams, then the tree and a
    summary with the commands to look further."""
    done = cli(tmp_path, "run", "--demo", TASK)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "I will split this between two helpers." in out
    assert "⤷ sub-agent" in out and "⤶ helper" in out
    assert "✔ helper" in out and "task: part 2 of: plan a picnic" in out
    assert "completed · session ses_" in out and "powertrio show ses_" in out
    assert "model demo (scripted, offline)" in done.stderr


def test_run_without_a_provider_explains_the_settings_and_offers_offline(tmp_path: Path) -> None:
    """No provider configured: exit 2, the variables to set and ``--offline``; no log made."""
    done = cli(tmp_path, "run", TASK)
    assert done.returncode == 2
    assert "error [config.missing]" in done.stderr
    for needed in ("POWERTRIO_API_KEY", "POWERTRIO_MODEL", "POWERTRIO_PROVIDER", "--offline"):
        assert needed in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "powertrio.sqlite").exists()


def test_the_settings_help_names_every_provider_of_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variables to set, their providers, keys and example models come from
    ``PROVIDERS``: a provider added to the table is offered with no other change."""
    import protocols.transports
    from protocols.transports import _providers

    help_lines = [
        "Set these environment variables:",
        "  POWERTRIO_PROVIDER   openai (any OpenAI-compatible server; the default) or anthropic",
        "  POWERTRIO_API_KEY    the API key (or OPENAI_API_KEY / ANTHROPIC_API_KEY)",
        "  POWERTRIO_MODEL      the model, e.g. gpt-4o-mini or claude-sonnet-4-5",
        "  POWERTRIO_BASE_URL   optional: another server speaking its API (vLLM, llama.cpp, ...)",
    ]
    done = cli(tmp_path, "run", TASK)
    assert done.returncode == 2
    assert all(line in done.stderr.splitlines() for line in help_lines), done.stderr
    added = _providers.Provider(
        name="mistral",  # type: ignore[arg-type]  # a name the type does not know yet
        base_url="https://api.mistral.ai/v1",
        key_variable="MISTRAL_API_KEY",
        example_model="mistral-small-latest",
        also="Mistral's API",
    )
    table = MappingProxyType({**_providers.PROVIDERS, added.name: added})
    monkeypatch.setattr(_providers, "PROVIDERS", table)
    monkeypatch.setattr(protocols.transports, "PROVIDERS", table, raising=False)
    lines = cli(tmp_path, "run", TASK).stderr.splitlines()
    assert (
        "  POWERTRIO_PROVIDER   openai (any OpenAI-compatible server; the default) or "
        "anthropic or mistral (Mistral's API)"
    ) in lines
    assert (
        "  POWERTRIO_API_KEY    the API key (or OPENAI_API_KEY / ANTHROPIC_API_KEY / "
        "MISTRAL_API_KEY)"
    ) in lines
    assert (
        "  POWERTRIO_MODEL      the model, e.g. gpt-4o-mini or claude-sonnet-4-5 or "
        "mistral-small-latest"
    ) in lines


def test_offline_falls_back_to_the_demo_model_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--offline`` without the llama.cpp packages: the demo model, with the reason given
    (in-process: this machine has the packages, so the subprocess would not fall back)."""
    from actors.cli import _model as _cli_model

    monkeypatch.setattr(_cli_model, "local_llm_missing", lambda: "xllamacpp is not installed")
    offline = argparse.Namespace(offline=True, demo=False)
    choice = _cli_model.choose_model(offline, environ={})
    assert (choice.kind, choice.label) == ("demo", "demo (scripted, offline)")
    assert "xllamacpp is not installed" in choice.note and "demo model" in choice.note
    monkeypatch.setattr(_cli_model, "local_llm_missing", lambda: None)
    assert _cli_model.choose_model(offline, environ={}).kind == "local"
    configured = {"POWERTRIO_API_KEY": "k", "POWERTRIO_MODEL": "m"}
    online = argparse.Namespace(offline=False, demo=False)
    assert (
        _cli_model.choose_model(online, environ=configured).kind,
        _cli_model.choose_model(online, environ=configured).label,
    ) == ("provider", "m (openai)")


def test_errors_in_json_mode_are_json_with_the_code(tmp_path: Path) -> None:
    """``--json`` errors are a JSON object with the stable code, on stdout."""
    done = cli(tmp_path, "run", TASK, "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "config.missing"


# -- reading the log -------------------------------------------------------------------------


def test_sessions_lists_the_tree_with_status_usage_and_parents(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``sessions``: root and helpers, completed, with tokens; ``--roots`` only the root."""
    where, _ = finished
    sid = root_id(finished)
    listed = cli_json(where, "sessions")
    assert isinstance(listed, list)
    assert [(sid, None), (f"{sid}.1", sid), (f"{sid}.2", sid)] == [
        (s["session_id"], s["parent_id"]) for s in listed
    ]
    assert {"completed"} == {s["status"] for s in listed}
    assert all(s["usage"]["total_tokens"] > 0 and s["runs"] == 1 for s in listed)
    assert [sid] == [s["session_id"] for s in cli_json(where, "sessions", "--roots")]  # type: ignore[union-attr]
    table = cli(where, "sessions")
    assert table.returncode == 0 and f"{sid}.2" in table.stdout and "completed" in table.stdout
    assert "own tokens" in table.stdout and "tree tokens" in table.stdout


def test_sessions_says_own_and_tree_usage_apart(finished: tuple[Path, dict[str, object]]) -> None:
    """A root's ``tree_tokens`` is its own plus its sub-agents', the same total as its
    run's ``RunResult.usage``; a leaf's tree is itself."""
    where, result = finished
    sid = root_id(finished)
    rows = {s["session_id"]: s for s in cli_json(where, "sessions")}  # type: ignore[union-attr]
    own = {i: r["usage"]["total_tokens"] for i, r in rows.items()}
    assert rows[sid]["tree_tokens"] == sum(own.values())
    assert rows[sid]["tree_tokens"] == result["usage"]["total_tokens"]  # type: ignore[index]
    assert rows[f"{sid}.1"]["tree_tokens"] == own[f"{sid}.1"]


def test_show_prints_the_transcript(finished: tuple[Path, dict[str, object]]) -> None:
    """``show``: the user's task, the answers, the spawns and the tool results, in order."""
    where, _ = finished
    sid = root_id(finished)
    shown = cli_json(where, "show", sid[:10])  # a unique prefix is enough
    assert isinstance(shown, dict) and sid == shown["session_id"]
    kinds = [e["kind"] for e in shown["entries"]]
    assert kinds == [
        "session", "run_started", "assistant", "child_spawned", "child_spawned",
        "tool_result", "tool_result", "child_finished", "child_finished", "assistant",
        "run_finished",
    ]  # fmt: skip
    assert shown["entries"][1]["text"] == TASK
    text = cli(where, "show", sid).stdout
    assert f"user: {TASK}" in text and "→ spawn_agent" in text and "run completed" in text


def test_tree_shows_the_agents_from_the_child_links(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``tree``: nested JSON from ``ChildSpawned`` links; a rich tree for people."""
    where, _ = finished
    sid = root_id(finished)
    tree = cli_json(where, "tree", sid)
    assert isinstance(tree, dict)
    assert (sid, "completed", 2) == (tree["session_id"], tree["status"], tree["rounds"])
    assert [c["task"] for c in tree["children"]] == [
        "part 1 of: plan a picnic",
        "part 2 of: plan a picnic",
    ]
    text = cli(where, "tree", sid).stdout
    assert "helper" in text and "3 agents" in text


def test_log_prints_events_as_json_lines_and_the_tree_with_tree(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``log --json`` is JSON Lines of the stream's events; ``--tree`` adds the helpers'."""
    where, _ = finished
    sid = root_id(finished)
    done = cli(where, "log", sid, "--json")
    assert done.returncode == 0
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "session.created" and events[-1]["type"] == "session.run_finished"
    assert list(range(1, len(events) + 1)) == [e["version"] for e in events]
    assert sid == events[0]["data"]["session_id"]
    tree = [
        json.loads(line) for line in cli(where, "log", sid, "--tree", "--json").stdout.splitlines()
    ]
    assert {f"session/{sid}", f"session/{sid}.1", f"session/{sid}.2"} == {e["stream"] for e in tree}
    assert sorted(e["position"] for e in tree) == [e["position"] for e in tree]
    assert "session.run_started" in cli(where, "log", sid).stdout


def test_log_takes_any_stream_by_its_full_name(workdir: Path) -> None:
    """``log`` shows a fleet agent's or a board's stream by name, as ``export --stream``
    takes it, besides session ids; a name that is not there is named as given."""

    async def append() -> None:
        async with open_sqlite_store(workdir / "powertrio.sqlite") as store:
            note = NewEvent(type="test.note", schema_version=1, data=b'{"n": 1}')
            await store.append("fleet/agent/watch", [note, note], 0)
            await store.append("board/x", [note], 0)

    trio.run(append)
    done = cli(workdir, "log", "fleet/agent/watch", "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["stream"], e["version"], e["type"]) for e in lines] == [
        ("fleet/agent/watch", 1, "test.note"),
        ("fleet/agent/watch", 2, "test.note"),
    ]
    assert "test.note" in cli(workdir, "log", "board/x").stdout
    missing = cli(workdir, "log", "board/nosuch")
    assert missing.returncode == 1
    assert "error [store.stream_not_found]: no stream named 'board/nosuch' in the event log" in (
        missing.stderr
    )


def test_counts_read_as_people_say_them(tmp_path: Path) -> None:
    """One of a thing is singular: ``1 round``, ``1 agent``, never ``1 rounds``."""

    async def main() -> None:
        log = tmp_path / "powertrio.sqlite"
        async with open_sqlite_store(log) as store, open_runtime(store=store) as runtime:
            llm = FunctionLLM(lambda _request: LLMResponse(content="done"))
            session = await spawn_session(runtime, llm=llm, session_id="single")
            await session.send("one thing")

    trio.run(main)
    shown = cli(tmp_path, "show", "single").stdout
    assert "run completed · 1 round · " in shown and "1 rounds" not in shown
    assert "1 agent · " in cli(tmp_path, "tree", "single").stdout


def test_every_positional_argument_has_help() -> None:
    """``powertrio COMMAND --help`` explains every positional argument (ID, FILE, TEXT...),
    not only the options; and every command and sub-command has a line in its list."""
    from actors.cli._main import build_parser

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                missing.extend(
                    f"{parser.prog} {name}" for name in action.choices if name not in helped
                )
                for sub in action.choices.values():
                    walk(sub)
            elif not action.option_strings and not action.help:
                missing.append(f"{parser.prog} {action.metavar or action.dest}")

    walk(build_parser())
    assert missing == []


def test_log_follow_sees_what_another_process_appends(workdir: Path) -> None:
    """``log --follow`` prints the events a ``send`` in another process appends, until Ctrl-C."""
    sid = json.loads(cli(workdir, "sessions", "--roots", "--json").stdout)[0]["session_id"]
    printed = workdir / "follow.jsonl"

    def finished_runs() -> int:
        lines = printed.read_text(encoding="utf-8").splitlines()
        return sum(json.loads(line)["type"] == "session.run_finished" for line in lines)

    with printed.open("w", encoding="utf-8") as out:
        follower = subprocess.Popen(
            [*command(), "log", sid, "--follow", "--json"],
            cwd=workdir, env=environment(), stdout=out, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    try:
        wait_until(lambda: finished_runs() == 1, "the follower to print the history")
        sent = cli(workdir, "send", sid, "and bring lemonade", "--demo", "--json")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["text"] == "(demo) You said: and bring lemonade"
        wait_until(lambda: finished_runs() == 2, "the follower to print the second run")
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            _, err = follower.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            follower.kill()  # a failure, not a follower left running
            follower.communicate()
            raise
    assert follower.returncode == 130, err
    types = [json.loads(line)["type"] for line in printed.read_text().splitlines()]
    assert "session.follow_up_received" in types
    assert [t for t in types if t == "session.run_finished"] == [
        "session.run_finished",
        "session.run_finished",
    ]


# -- workflows ---------------------------------------------------------------------------------


def shout(text: str) -> str:
    return text.upper()


@workflow
async def review(wf: WorkflowContext, topic: str) -> object:
    outline = await wf.step(shout, topic)
    answer = await wf.run(AgentSpec(name="writer", system_prompt="write"), f"about {outline}")
    return {"outline": outline, "draft": answer.text}


def test_show_prints_the_timer_input_that_starts_a_wake_up_run(tmp_path: Path) -> None:
    """A run a timer started shows its input, ``[timer ID, due ...] note``, as the model
    read it."""

    def answer(request: LLMRequest) -> LLMResponse:
        return LLMResponse(content=f"ok: {request.messages[-1].text}")

    async def main() -> None:
        log = tmp_path / "powertrio.sqlite"
        async with open_sqlite_store(log) as store, open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=FunctionLLM(answer), session_id="waker")
            await runtime.timers.schedule(session.ref, delay=60, note="check the board")
            await trio.sleep(61)
            assert len((await session.state()).results) == 1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    shown = cli_json(tmp_path, "show", "waker")
    inputs = [e for e in shown["entries"] if e["kind"] == "follow_up"]  # type: ignore[index]
    assert [e["of"] for e in inputs] == ["timer"]
    assert inputs[0]["text"].startswith("[timer ")
    assert inputs[0]["text"].endswith("] check the board")
    assert "] check the board" in cli(tmp_path, "show", "waker").stdout


@workflow
async def gate(wf: WorkflowContext, topic: str) -> object:
    approval = await wf.wait_for("approve")
    return {"topic": topic, "approval": approval}


def test_signal_from_the_command_line_reaches_a_waiting_workflow(tmp_path: Path) -> None:
    """``powertrio signal ID NAME PAYLOAD`` records the signal in a parked workflow's log;
    resumed, the workflow reads it; a finished workflow or bad JSON is a typed error."""

    log = tmp_path / "powertrio.sqlite"

    async def park() -> None:
        async with open_sqlite_store(log) as store, open_runtime(store=store) as runtime:
            handle = await start_workflow(runtime, gate, "launch", workflow_id="gate-1")

            async def started() -> bool:
                return (await handle.state()).started is not None

            # Its start is in the log; it parks on wait_for, and the process goes away.
            await wait_until_async(started, "the workflow to record its start")

    async def resume() -> object:
        async with open_sqlite_store(log) as store, open_runtime(store=store) as runtime:
            handle = await start_workflow(runtime, gate, "launch", workflow_id="gate-1")
            return await handle.result()

    trio.run(park)
    bad = cli(tmp_path, "signal", "gate", "approve", "{not json")
    assert bad.returncode == 2 and "error [config.invalid]: the payload must be JSON" in (
        bad.stderr
    )
    sent = cli_json(tmp_path, "signal", "gate", "approve", '{"by": "ann"}')
    assert sent == {"workflow_id": "gate-1", "signal": "approve", "version": sent["version"]}  # type: ignore[index]
    assert trio.run(resume) == {"topic": "launch", "approval": {"by": "ann"}}
    late = cli(tmp_path, "signal", "gate-1", "approve")
    assert late.returncode == 2
    assert "workflow 'gate-1' has finished (completed); a signal would never be read" in (
        late.stderr
    )


@pytest.fixture(scope="module")
def with_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose log holds one completed workflow: a call step, then an agent step."""
    where = tmp_path_factory.mktemp("workflow")

    def answer(request: LLMRequest) -> LLMResponse:
        usage = Usage(prompt_tokens=7, completion_tokens=3)
        return LLMResponse(content=f"draft {request.messages[-1].text}", usage=usage)

    async def main() -> None:
        async with (
            open_sqlite_store(where / "powertrio.sqlite") as store,
            open_runtime(store=store) as runtime,
        ):
            await run_workflow(
                runtime, review, "rivers", workflow_id="review-7", llm=FunctionLLM(answer)
            )

    trio.run(main)
    return where


def test_sessions_lists_a_workflow_with_its_kind_and_status(with_workflow: Path) -> None:
    """``sessions``: the workflow is a row of kind ``workflow``; its agent is a session."""
    listed = cli_json(with_workflow, "sessions")
    assert isinstance(listed, list)
    sessions = [s for s in listed if s["kind"] == "session"]
    workflows = [s for s in listed if s["kind"] == "workflow"]
    assert [s["session_id"] for s in sessions] == ["review-7.1"]
    rows = [(w["workflow_id"], w["workflow"], w["status"], w["steps"]) for w in workflows]
    assert rows == [("review-7", "review", "completed", 2)]
    table = cli(with_workflow, "sessions").stdout
    assert "review-7 " in table and "workflow review" in table and "completed" in table


def test_log_and_show_take_a_workflow_id_prefix(with_workflow: Path) -> None:
    """``log`` prints the workflow's events; ``show`` its steps and status."""
    done = cli(with_workflow, "log", "review", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert {"workflow/review-7"} == {e["stream"] for e in events}
    assert events[0]["type"] == "workflow.started" and events[-1]["type"] == "workflow.finished"
    assert "workflow.step_completed" in cli(with_workflow, "log", "workflow/review-7").stdout
    shown = cli_json(with_workflow, "show", "rev")
    assert isinstance(shown, dict)
    head = (shown["kind"], shown["workflow_id"], shown["status"])
    assert head == ("workflow", "review-7", "completed")
    steps = [(s["index"], s["kind"], s["name"]) for s in shown["steps"]]
    assert steps == [("0", "call", "shout"), ("1", "agent", "writer")]
    assert shown["steps"][0]["result"] == "RIVERS"
    text = cli(with_workflow, "show", "review-7").stdout
    assert "workflow review-7" in text and "shout" in text and "workflow completed" in text


def test_tree_of_a_workflow_has_its_agent_steps_below(with_workflow: Path) -> None:
    """``tree``: the workflow is the root, the agent step's session its child."""
    tree = cli_json(with_workflow, "tree", "review-7")
    assert isinstance(tree, dict)
    root = (tree["kind"], tree["session_id"], tree["status"])
    assert root == ("workflow", "review-7", "completed")
    children = [(c["session_id"], c["status"], c["rounds"], c["tokens"]) for c in tree["children"]]
    assert children == [("review-7.1", "completed", 1, 10)]
    text = cli(with_workflow, "tree", "workflow/review-7").stdout
    assert "workflow review" in text and "writer review-7.1" in text and "rounds 1" in text


def test_check_passes_on_a_good_log(finished: tuple[Path, dict[str, object]]) -> None:
    """``check``: every event decodes and every session stream folds."""
    where, _ = finished
    report = cli_json(where, "check")
    assert isinstance(report, dict)
    assert (report["ok"], report["streams"], report["problems"]) == (True, 3, [])


def test_check_on_a_damaged_file_names_the_problem_and_fails(workdir: Path) -> None:
    """Bytes overwritten inside the file: a clear ``store.corrupt`` finding, exit 1."""
    db = workdir / "powertrio.sqlite"
    with db.open("r+b") as raw:
        raw.seek(4096)
        raw.write(b"\xde\xad" * 1500)
    done = cli(workdir, "check")
    assert done.returncode == 1
    assert "store.corrupt" in done.stdout and "damaged" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    report = json.loads(cli(workdir, "check", "--json").stdout)
    assert [p["code"] for p in report["problems"]] == ["store.corrupt"]
    listing = cli(workdir, "sessions")
    assert listing.returncode == 1 and "error [store.corrupt]" in listing.stderr


def test_check_on_an_undecodable_event_names_the_stream_and_version(workdir: Path) -> None:
    """An event whose payload is not what its type says: ``codec.*``, with stream and version.

    The row is rewritten with a matching checksum (as a buggy writer would), so what is
    left to find is the codec error.
    """
    with sqlite3.connect(workdir / "powertrio.sqlite") as db:
        db.create_function("checksum", 6, event_checksum)
        db.execute(  # {} for an answer
            "UPDATE events SET data = X'7B7D', checksum = checksum(stream, version, type, "
            "schema_version, X'7B7D', metadata) WHERE position = 3"
        )
    done = cli(workdir, "check", "--json")
    assert done.returncode == 1
    [problem] = json.loads(done.stdout)["problems"]
    assert problem["code"].startswith("codec.") and problem["version"] == 3


def test_export_then_import_into_a_new_log(workdir: Path) -> None:
    """``export`` writes JSON Lines that ``import`` appends to another log, which checks."""
    exported = cli_json(workdir, "export", "all.jsonl")
    imported = cli_json(workdir, "--db", "copy.sqlite", "import", "all.jsonl")
    assert exported | {"skipped": 0} == imported | {"file": "all.jsonl"}
    assert cli_json(workdir, "--db", "copy.sqlite", "check")["ok"]  # type: ignore[index]
    again = cli_json(workdir, "--db", "copy.sqlite", "import", "all.jsonl")
    assert isinstance(exported, dict)
    assert {"streams": 0, "events": 0, "skipped": exported["events"]} == {
        key: again[key]  # type: ignore[index]
        for key in ("streams", "events", "skipped")
    }


def test_export_then_import_into_the_same_log_is_a_no_op(workdir: Path) -> None:
    """The README's ``powertrio export out.jsonl ; powertrio import out.jsonl``: nothing to
    import, nothing written, exit 0."""
    exported = cli_json(workdir, "export", "out.jsonl")
    assert isinstance(exported, dict)
    done = cli(workdir, "import", "out.jsonl")
    assert done.returncode == 0, done.stderr
    assert "imported 0 events of 0 streams" in done.stdout
    assert f"({exported['events']:,} already there, skipped)" in done.stdout


def test_timers_lists_none_when_nothing_is_scheduled(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``timers --json`` on a log without wake-ups."""
    assert cli_json(finished[0], "timers") == []


# -- replay and fork -------------------------------------------------------------------------


def test_replay_asks_for_every_recorded_answer_again(
    finished: tuple[Path, dict[str, object]],
) -> None:
    """``replay``: the tree's six model answers were asked for again, identically."""
    where, _ = finished
    sid = root_id(finished)
    replayed = cli_json(where, "replay", sid)
    assert isinstance(replayed, dict)
    assert (replayed["ok"], replayed["total_checked"], replayed["checked"]) == (True, 6, 2)
    assert [c["checked"] for c in replayed["children"]] == [2, 2]
    assert "6 model answers asked for again" in cli(where, "replay", sid).stdout


def test_replay_of_a_tampered_log_reports_the_divergence(workdir: Path) -> None:
    """A user input changed in the log: the recorded answer was asked for by another
    request, so replay stops there with ``replay.divergence`` and exit 1."""
    with sqlite3.connect(workdir / "powertrio.sqlite") as db:
        [(data,)] = db.execute("SELECT data FROM events WHERE position = 2").fetchall()
        changed = bytes(data).replace(TASK.encode(), b"plan a party")
        db.create_function("checksum", 6, event_checksum)  # a deliberate, consistent edit
        db.execute(
            "UPDATE events SET data = ?1, checksum = checksum(stream, version, type, "
            "schema_version, ?1, metadata) WHERE position = 2",
            (changed,),
        )
    sid = json.loads(cli(workdir, "sessions", "--roots", "--json").stdout)[0]["session_id"]
    done = cli(workdir, "replay", sid)
    assert done.returncode == 1
    assert "error [replay.divergence]" in done.stderr and "version 3" in done.stderr
    assert "Traceback" not in done.stderr
    # From the end of the log: everything taken as recorded, nothing to check.
    end = json.loads(cli(workdir, "log", sid, "--json").stdout.splitlines()[-1])["version"]
    folded = cli_json(workdir, "replay", sid, "--from", str(end))
    assert isinstance(folded, dict)
    assert (folded["ok"], folded["checked"]) == (True, 0)
    # From version 3 on: the first answer is taken as recorded, the next one is checked.
    later = cli(workdir, "replay", sid, "--from", "3")
    assert later.returncode == 1
    assert "error [replay.divergence]" in later.stderr and "version 3 " not in later.stderr
    refused = cli(workdir, "replay", sid, "--from", "-1")
    assert refused.returncode != 0
    assert "error [config.invalid]" in refused.stderr
    assert "replay from one of them (0 from the start), not from -1" in refused.stderr


def test_fork_branches_a_session_that_then_goes_on_by_itself(workdir: Path) -> None:
    """``fork --at 7`` keeps the task and the first answer with its two spawn calls
    started (one decision: a fork at 3 would cut inside it); ``send`` to the fork runs
    them and completes; the original is untouched."""
    sid = json.loads(cli(workdir, "sessions", "--roots", "--json").stdout)[0]["session_id"]
    inside = cli(workdir, "fork", sid, "--at", "3", "--as", "branch")
    assert inside.returncode == 2
    assert "fork at a version before it or at 7" in inside.stderr
    forked = cli_json(workdir, "fork", sid, "--at", "7", "--as", "branch")
    assert {"session_id": "branch", "forked_from": sid, "at_version": 7, "events": 7} == forked
    shown = cli_json(workdir, "show", "branch")
    assert (sid, 7) == (shown["entries"][0]["forked_from"], shown["entries"][0]["forked_at"])  # type: ignore[index]
    sent = cli_json(workdir, "send", "branch", "go on", "--demo")
    assert sent["status"] == "completed"  # type: ignore[index]
    tree = cli_json(workdir, "tree", "branch")
    assert [c["session_id"] for c in tree["children"]] == ["branch.1", "branch.2"]  # type: ignore[index]
    assert len(cli(workdir, "log", sid, "--json").stdout.splitlines()) == 13
    assert cli_json(workdir, "replay", "branch")["ok"]  # type: ignore[index]
    again = cli(workdir, "fork", sid, "--at", "99")
    assert again.returncode == 2
    assert "has events 1 to 13: fork at one of them, not at 99" in again.stderr


def _by_id(tree: dict[str, object]) -> dict[str, dict[str, object]]:
    nodes = {str(tree["session_id"]): tree}
    for child in tree["children"]:  # type: ignore[attr-defined]
        nodes.update(_by_id(child))
    return nodes


def test_tree_and_sessions_count_usage_alike_after_a_fork_and_a_send(workdir: Path) -> None:
    """One fold of usage: a forked tree (whose sub-agents' streams were copied after the
    parent's ``ChildFinished``) shows each agent's own tokens once, and after a ``send``
    every node shows the rounds and tokens ``sessions`` shows."""
    sid = json.loads(cli(workdir, "sessions", "--roots", "--json").stdout)[0]["session_id"]
    cli_json(workdir, "fork", sid, "--at", "13", "--as", "copy")
    cli_json(workdir, "send", "copy", "one more thing", "--demo")
    listed = {s["session_id"]: s for s in cli_json(workdir, "sessions")}  # type: ignore[union-attr]
    nodes = _by_id(cli_json(workdir, "tree", "copy"))  # type: ignore[arg-type]
    assert sorted(nodes) == ["copy", "copy.1", "copy.2"]
    for session_id, node in nodes.items():
        summary = listed[session_id]
        expected = (summary["rounds"], summary["usage"]["total_tokens"])  # type: ignore[index]
        assert (node["rounds"], node["tokens"]) == expected, session_id


# -- steering sessions from another process -------------------------------------------------


@pytest.mark.slow
def test_an_interrupted_run_is_listed_so_and_cancel_ends_it(tmp_path: Path) -> None:
    """A ``run`` killed mid-flight leaves an open run: ``sessions`` says interrupted,
    ``cancel`` resumes the session and ends it cancelled; a second cancel has nothing to do."""
    slow = subprocess.Popen(
        [*command(), "run", "--demo", TASK], cwd=tmp_path,
        env=environment(POWERTRIO_DEMO_DELAY="30"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        listed: list[dict[str, object]] = []
        while time.monotonic() < deadline and [s["status"] for s in listed] != ["running"]:
            time.sleep(0.2)
            done = cli(tmp_path, "sessions", "--json")
            listed = json.loads(done.stdout) if done.returncode == 0 else []
    finally:
        slow.kill()
        _, slow_err = slow.communicate()
    assert len(listed) == 1, (done.returncode, done.stdout, done.stderr, slow_err)
    [session] = listed
    assert session["status"] == "running"  # its process held the log then
    sid = str(session["session_id"])
    assert cli_json(tmp_path, "sessions")[0]["status"] == "interrupted"  # type: ignore[index]
    shown = cli_json(tmp_path, "show", sid)
    assert isinstance(shown, dict)
    run_id = shown["open_run"]
    assert shown["status"] == "interrupted" and str(run_id).startswith("run_")
    text = cli(tmp_path, "show", sid).stdout
    assert " ".join(text.split()).endswith(
        f"interrupted: run {run_id} never finished (no process drives this log); `powertrio "
        f'send {sid} "..."` resumes it, `powertrio cancel {sid}` ends it'
    )
    cancelled = cli_json(tmp_path, "cancel", sid)
    assert isinstance(cancelled, dict)
    assert (cancelled["session_id"], cancelled["cancelled"], cancelled["status"]) == (
        sid,
        True,
        "cancelled",
    )
    again = cli(tmp_path, "cancel", sid, "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"] == {
        "code": "session.no_open_run",
        "message": f"session {sid!r} has no open run: nothing to cancel",
    }
    assert cli_json(tmp_path, "sessions")[0]["status"] == "cancelled"  # type: ignore[index]
    assert cli_json(tmp_path, "show", sid)["status"] == "cancelled"  # type: ignore[index]


def _wait_on_pty(master: int, needle: bytes, timeout: float = 20) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not printed within {timeout} s: {seen[-2000:]!r}")
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            seen += os.read(master, 65536)
    return seen


def test_a_question_left_open_is_answered_with_reply(tmp_path: Path) -> None:
    """At a terminal (a pty) the agent asks a question; the process dies while waiting.
    ``sessions`` shows the open request and ``reply`` answers it: the run goes on and
    completes, with the CLI's tools as recorded (so the session still replays)."""
    master, slave = pty.openpty()
    asking = subprocess.Popen(
        [*command(), "run", "--demo", "ask me first, then plan a picnic"], cwd=tmp_path,
        env=environment(TERM="xterm"), stdin=slave, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    try:
        _wait_on_pty(master, b"your answer>")
    finally:
        asking.kill()
        asking.wait()
        os.close(master)
    [session] = cli_json(tmp_path, "sessions")  # type: ignore[misc]
    assert session["status"] == "waiting_for_human"
    [request] = session["waiting_for"]
    answered = cli_json(tmp_path, "reply", session["session_id"], request, "outdoors", "--demo")
    assert answered["status"] == "completed"  # type: ignore[index]
    assert answered["text"].endswith("I heard back: outdoors")  # type: ignore[index]
    assert cli_json(tmp_path, "replay", session["session_id"])["ok"]  # type: ignore[index]


def test_reply_to_no_open_request_is_a_typed_error(workdir: Path) -> None:
    """``reply`` names the open requests (none) with the session's error code."""
    sid = json.loads(cli(workdir, "sessions", "--roots", "--json").stdout)[0]["session_id"]
    done = cli(workdir, "reply", sid, "req-1", "yes", "--demo")
    assert done.returncode == 1
    assert "error [session.unknown_request]" in done.stderr and "Traceback" not in done.stderr


# -- usage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "required: COMMAND"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("run",), "required: task"),
        (("run", "--demo", "--max-rounds", "0", TASK), "must be at least 1"),
        (("show",), "required: ID"),
    ],
)
def test_bad_usage_exits_2_with_a_message(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Argument errors: exit code 2 and a usage message, nothing run."""
    done = cli(tmp_path, *args)
    assert done.returncode == 2
    assert message in done.stderr and "usage: powertrio" in done.stderr


def test_reading_commands_need_an_existing_log(tmp_path: Path) -> None:
    """No log in the directory: a clear error instead of an empty new file."""
    done = cli(tmp_path, "sessions")
    assert done.returncode == 1
    assert "error [store.not_found]: no event log at 'powertrio.sqlite'" in done.stderr
    assert not (tmp_path / "powertrio.sqlite").exists()
    missing = cli(tmp_path, "--db", "nowhere.sqlite", "show", "x", "--json")
    assert json.loads(missing.stdout)["error"]["code"] == "store.not_found"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ("--db", "no/such/dir/x.sqlite", "run", "--demo", TASK),
            "store.not_found",
            "no event log at 'no/such/dir/x.sqlite': its folder 'no/such/dir' does not exist",
        ),
        (("--db", ".", "run", "--demo", TASK), "config.invalid", "--db names the folder '.'"),
        (
            ("--db", "mysql://me:secret@db/logs", "sessions"),
            "config.db_scheme",
            "the event log cannot be a mysql:// database: give a SQLite file's path, "
            "or a PostgreSQL URI (postgresql://, postgres://)",
        ),
        (("run", "--demo", "  "), "config.invalid", "the task is empty"),
        (("import", "nosuch.jsonl"), "io.not_found", "no file at 'nosuch.jsonl'"),
        (
            ("export", "no/such/dir/out.jsonl"),
            "io.write_failed",
            "could not write 'no/such/dir/out.jsonl': its folder 'no/such/dir' does not exist",
        ),
        (("export", "/dev/full"), "io.write_failed", "No space left on device"),
    ],
)
def test_ordinary_mistakes_get_a_code_of_their_own(
    workdir: Path, args: tuple[str, ...], code: str, message: str
) -> None:
    """A missing folder or file, a folder for a file, an empty task, a full disk: each a
    typed error with its code, never ``internal`` (exit 2 for configuration, else 1);
    nothing is left behind."""
    before = sorted(p.name for p in workdir.iterdir())
    done = cli(workdir, *args)
    assert done.returncode == (2 if code.startswith("config.") else 1), done.stderr
    assert f"error [{code}]: " in done.stderr and message in done.stderr, done.stderr
    assert "internal" not in done.stderr
    assert before == sorted(p.name for p in workdir.iterdir())


def test_a_read_only_log_is_its_own_error_with_a_hint(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite refusing to write (a read-only file or folder) is ``store.read_only`` with
    what to do, not ``error [store]`` and SQLite's raw text."""

    def read_only(path: str, *, read_only: bool) -> sqlite3.Connection:
        del read_only  # as a read-only file opens for every connection, even as root
        return sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )

    monkeypatch.setattr("runtime._sqlite._schema.connect", read_only)
    done = cli(workdir, "run", "--demo", TASK)
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())
    # The session's actor may meet it first (then it is the cause of actor.failed).
    assert "[store.read_only]: the event log 'powertrio.sqlite' is read-only (attempt to " in said
    assert "write a readonly database): let this user write the file and its folder" in said
    assert "internal" not in said


def test_import_of_a_file_that_is_no_export_blames_the_file(workdir: Path) -> None:
    """Text that is not JSON Lines is bad input (``io.bad_input``), not a damaged log."""
    (workdir / "notes.txt").write_text("dear diary\n")
    done = cli(workdir, "import", "notes.txt")
    assert done.returncode == 1
    assert "error [io.bad_input]: 'notes.txt' is not a powertrio export: line 1: not JSON" in (
        done.stderr
    )


def test_export_of_one_session_takes_its_id_prefix(
    workdir: Path, finished: tuple[Path, dict[str, object]]
) -> None:
    """``export --stream`` takes a session id prefix as the other commands do; a stream that
    is not there leaves no empty file behind."""
    sid = root_id(finished)
    exported = cli_json(workdir, "export", "one.jsonl", "--stream", sid[:8])
    assert exported == {"file": "one.jsonl", "streams": 1, "events": exported["events"]}  # type: ignore[index]
    lines = (workdir / "one.jsonl").read_text().splitlines()
    assert {json.loads(line)["stream"] for line in lines} == {f"session/{sid}"}
    missing = cli(workdir, "export", "none.jsonl", "--stream", "nosuch")
    assert missing.returncode == 1 and "error [store.stream_not_found]" in missing.stderr
    assert not (workdir / "none.jsonl").exists()


def test_a_bad_number_is_explained_without_internal_names(tmp_path: Path) -> None:
    """``--at abc``: argparse's message says what is wrong, not the name of a parser."""
    done = cli(tmp_path, "fork", "x", "--at", "abc")
    assert done.returncode == 2
    assert "argument --at: must be a whole number, got 'abc'" in done.stderr
    assert "_positive" not in done.stderr


def test_an_unknown_session_is_a_typed_error(finished: tuple[Path, dict[str, object]]) -> None:
    """``show`` of an id that is not there: ``store.stream_not_found``, exit 1."""
    done = cli(finished[0], "show", "nosuch")
    assert done.returncode == 1 and "error [store.stream_not_found]" in done.stderr


def test_bench_runs_a_suite_and_prints_json(tmp_path: Path) -> None:
    """``bench --quick --suite actors --json``: the suite's figures under its name."""
    figures = cli_json(tmp_path, "bench", "--quick", "--suite", "actors")
    assert isinstance(figures, dict) and list(figures) == ["actors"]
    assert figures["actors"]["tell_msgs_per_s"] > 0


# -- a real model ----------------------------------------------------------------------------


@pytest.mark.llama
def test_run_against_a_configured_provider(tmp_path: Path, llama_server: object) -> None:
    """The provider from the environment (llama.cpp serving SmolLM2 on loopback)."""
    url = str(getattr(llama_server, "url"))  # noqa: B009  # the fixture's type is in tests/_llama
    env = environment(
        POWERTRIO_BASE_URL=url + "/v1", POWERTRIO_API_KEY="none", POWERTRIO_MODEL="smollm2"
    )
    done = cli(tmp_path, "run", "Say hello.", "--max-tokens", "8", "--json", env=env)
    result = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert (result["status"], result["model"]) == ("completed", "smollm2 (openai)")
    assert result["rounds"] == 1 and result["text"]


# -- a real terminal -------------------------------------------------------------------------


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A private tmux server (its own socket); the test runs commands in its one window."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the terminal test needs it (apt-get install tmux)")
    socket = tmp_path / "tmux.sock"  # goes with the directory (a Unix socket path is short)
    base = ["tmux", "-S", str(socket)] if len(str(socket)) < 100 else ["tmux", "-L", tmp_path.name]
    try:
        yield base
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def _pane(tmux: list[str]) -> str:
    return subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", "cli"], capture_output=True, text=True, check=True
    ).stdout


def _wait_for(tmux: list[str], *needles: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        pane = _pane(tmux)
        if all(n in pane for n in needles):
            return pane
        if time.monotonic() > deadline:
            raise AssertionError(f"{needles} not on the screen within {timeout} s:\n{pane}")
        time.sleep(0.1)


def _start_in_tmux(tmux: list[str], cwd: Path, task: str, delay: str) -> None:
    """``powertrio run --demo TASK`` in the tmux window, then ``EXIT=<code>``."""
    kept = {"PATH", "HOME", "LANG", "LC_ALL", "POWERTRIO_DEMO_DELAY"}
    variables = environment(POWERTRIO_DEMO_DELAY=delay).items()
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables if k in kept)
    run = " ".join(shlex.quote(part) for part in [*command(), "run", "--demo", task])
    # A clean environment: a tmux server passes its own, not this process's.
    shell = f"env -i {env} TERM=xterm-256color {run}; echo EXIT=$?; sleep 60"
    window = ["-s", "cli", "-x", "150", "-y", "40", "-c", str(cwd)]
    subprocess.run([*tmux, "new-session", "-d", *window, shell], check=True)


@pytest.mark.parametrize("presses", [1, 2])
def test_run_in_a_terminal_shows_the_live_tree_and_ctrl_c_cancels(
    tmp_path: Path, tmux: list[str], presses: int
) -> None:
    """In a terminal ``run`` draws the tree live (helpers running, a tool in flight); one
    Ctrl-C cancels after the current turn, two stop at once; either way the run ends
    ``cancelled``, exit code 1, and the log says so."""
    _start_in_tmux(tmux, tmp_path, TASK, delay="1.5")
    live = _wait_for(
        tmux, "● helper", "thinking…", "⚙ spawn_agent", "Ctrl-C: cancel after this turn"
    )
    assert "● agent ses_" in live and "task: part 1 of: plan a picnic" in live
    subprocess.run([*tmux, "send-keys", "-t", "cli", "C-c"], check=True)
    if presses == 2:
        # The second press must find the first one handled, or it would only be the first.
        _wait_for(tmux, "Ctrl-C: cancelling after the current turn")
        subprocess.run([*tmux, "send-keys", "-t", "cli", "C-c"], check=True)
    done = _wait_for(tmux, "EXIT=")
    assert "EXIT=1" in done
    assert "Ctrl-C: cancelling after the current turn" in done
    assert ("Ctrl-C again: stopping now" in done) == (presses == 2)
    assert "■ agent ses_" in done and "cancelled · session ses_" in done
    assert "Traceback" not in done
    listed = cli_json(tmp_path, "sessions")
    assert isinstance(listed, list)
    assert {"cancelled"} == {s["status"] for s in listed}


def test_run_in_a_terminal_asks_the_person_and_goes_on(tmp_path: Path, tmux: list[str]) -> None:
    """At a terminal the agent has ``ask_human``: the question is printed, the typed
    answer goes to the model, the run completes (exit 0) and replays."""
    _start_in_tmux(tmux, tmp_path, "ask me first, then plan a picnic", delay="0.2")
    asked = _wait_for(tmux, "your answer>")
    assert "? the agent asks: Before I start: indoors or outdoors?" in asked
    subprocess.run([*tmux, "send-keys", "-t", "cli", "outdoors", "Enter"], check=True)
    done = _wait_for(tmux, "EXIT=")
    assert "EXIT=0" in done and "I heard back: outdoors" in done
    [session] = cli_json(tmp_path, "sessions")  # type: ignore[misc]
    assert session["status"] == "completed"
    assert cli_json(tmp_path, "replay", session["session_id"])["ok"]  # type: ignore[index]
