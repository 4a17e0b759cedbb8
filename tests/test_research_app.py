"""The research app of examples/07: killed mid-run, restarted, replayed, property-tested."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio
from hypothesis import given

from actors import replay_session
from actors.events import AssistantRecorded, ToolFinished
from actors.testing import (
    Operation,
    RuntimeHarness,
    Send,
    assert_invariants,
    operations,
    property_settings,
)
from protocols.codec import decode_record
from runtime import open_sqlite_store
from runtime.testing import FunctionLLM

CHILD = Path(__file__).parent / "_research_app_child.py"
ROOT = Path(__file__).parent.parent


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


async def _recorded_fingerprints(db: Path) -> list[str]:
    async with open_sqlite_store(db) as store:
        events = [decode_record(r) for r in await store.read_all()]
    return [e.request_fingerprint for e in events if isinstance(e, AssistantRecorded)]


async def _board_writes(db: Path) -> tuple[int, int]:
    """The researchers' ``board_write`` calls that finished ``ok`` and those the restart
    closed as ``aborted`` (started before the kill, result unknown: the default crash
    policy never runs a call twice)."""
    async with open_sqlite_store(db) as store:
        records = [r for r in await store.read_all() if r.stream.startswith("session/planner.")]
    outcomes = [
        e.outcome.status
        for e in map(decode_record, records)
        if isinstance(e, ToolFinished) and e.outcome.tool_name == "board_write"
    ]
    return outcomes.count("ok"), outcomes.count("aborted")


@pytest.mark.slow
async def test_the_app_killed_mid_run_finishes_without_asking_a_recorded_answer_again(
    tmp_path: Path,
) -> None:
    """SIGKILL while the researchers work; the restarted app finishes the same work, and
    no request whose answer the log held is sent to the model again."""
    db, calls = tmp_path / "research.sqlite", tmp_path / "calls.txt"
    env = _environment()
    child = subprocess.Popen(  # noqa: ASYNC220  # a real process, killed below
        [sys.executable, str(CHILD), str(db), str(calls), "4"], env=env
    )
    try:
        deadline = time.monotonic() + 60
        while "hanging" not in (calls.read_text() if calls.exists() else ""):
            assert child.poll() is None, "the app ended before its 4th model call"
            assert time.monotonic() < deadline, "the app never reached its 4th model call"
            await trio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    before = calls.read_text().split()
    recorded = await _recorded_fingerprints(db)
    assert recorded, "something was recorded before the kill"
    calls.unlink()
    done = subprocess.run(  # noqa: ASYNC221
        [sys.executable, str(CHILD), str(db), str(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    after = calls.read_text().split()
    assert sorted(set(after) & set(recorded)) == [], "a recorded answer was asked again"
    assert {f: n for f, n in Counter(after).items() if n > 1} == {}
    assert len(before) == 4
    # The kill lands while the researchers work: a write whose call was recorded as
    # started but never finished is closed as aborted, not run again, so the daily check
    # counts the findings that were written, plus the editor's.
    written, aborted = await _board_writes(db)
    assert written + aborted == 3
    assert done.stdout.splitlines() == [
        "[completed] published the report",
        "[completed] noted the board change",
        f"[completed] daily check: {written + 1} findings",
    ]
    # The whole log replays, from Python with the app's spec and with the CLI.
    async with open_sqlite_store(db) as store:
        replayed = await replay_session(store, "planner", APP.PLANNER)
    assert 1 + len(replayed.children) == 4
    cli = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-m", "actors.cli", "replay", "planner", "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "replayed planner:" in cli.stdout
    assert "divergence" not in cli.stdout + cli.stderr


def _app():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(CHILD.parent))
    try:
        from _research_app_child import load_app
    finally:
        sys.path.remove(str(CHILD.parent))
    return load_app()


APP = _app()
HARNESS = RuntimeHarness(
    APP.PLANNER,
    llm=FunctionLLM(APP.model),
    approve=True,
    board_id="research",
    session_id="planner",
)


def test_the_harness_runs_the_app_as_it_is() -> None:
    """The kit takes the app's spec tree, its built-in tools and its model function: the
    planner spawns its researchers, they write the board, publish is approved."""
    trace = HARNESS.run((), [Send(APP.TASK, wait=True)])
    assert_invariants(trace)
    assert [r.status for r in trace.results.values()] == ["waiting_for_human"]
    (final,) = trace.state.results.values()  # approved by the harness, then published
    assert (final.status, final.text) == ("completed", "published the report")
    callers = Counter(call.caller for call in trace.calls)
    assert sum(1 for caller in callers if caller != "planner") == 3


@property_settings(examples=15)
@given(
    ops=operations(
        max_size=5, board_keys=("findings/extra", "notes/x"), cancels=False, faults=False
    )
)
def test_the_app_keeps_the_kits_invariants(ops: tuple[Operation, ...]) -> None:
    """Whatever happens to the app (sends, board writes, timers, crashes, restarts), the
    kit's invariants hold: replay equals the live state, no recorded answer is asked
    again, requests are provider-valid, each run ends once."""
    assert_invariants(HARNESS.run((), (Send(APP.TASK, wait=True), *ops)))
