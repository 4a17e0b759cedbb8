"""Sessions across real crashes: SIGKILL a child process mid-scenario, restart, read the log.

Each test runs ``tests/_session_crash_child.py`` several times on one SQLite file. Most
kills are exact: the child SIGKILLs itself right after an append was acknowledged (or as
a model call or a timer delivery begins); the timers and tree tests add kills at random
moments. After the last (uninterrupted) process, the test reads the log and checks what
the runtime promises: each follow-up injected once, the human reply resumes the
run, each timer fires once per due time, each child runs and finishes once, and the
tree's answer equals an uninterrupted run's.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TypeVar

import attrs
import orjson
import pytest
import trio

from actors import SessionState
from actors._session._events import evolve, timer_follow_up
from actors.events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    FollowUpReceived,
    FollowUpsInjected,
    HumanAnswered,
    HumanRequested,
    RunFinished,
    RunStarted,
    SessionCreated,
)
from actors.lowlevel import is_provider_valid
from protocols import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from protocols.codec import decode_record
from runtime import open_sqlite_store
from runtime.timers import TimerCancelled, TimerFired, TimerScheduled

CHILD = Path(__file__).with_name("_session_crash_child.py")
ROOT = Path(__file__).resolve().parent.parent
ONE_SHOTS = 8  # as in the child
EVERY = 0.1  # the child's recurring period

pytestmark = pytest.mark.slow

T = TypeVar("T")


@attrs.frozen
class Run:
    """What one child process printed, and how it ended."""

    lines: list[str]
    returncode: int

    @property
    def finished(self) -> bool:
        """It printed ``done`` and exited by itself."""
        return self.returncode == 0 and self.lines[-1:] == ["done"]

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def points(self, name: str) -> list[str]:
        """The details of every ``name`` line, in order."""
        return [line.partition(" ")[2] for line in self.lines if line.split(" ")[0] == name]

    def result(self, name: str) -> dict[str, object]:
        """The last ``result <name>`` this process printed."""
        (*_, last) = (r for r in self.points("result") if r.split(" ")[0] == name)
        payload = orjson.loads(last.partition(" ")[2])
        assert isinstance(payload, dict)
        return payload

    def died_at(self, die: str) -> bool:
        """It killed itself at ``POINT:K``: its K-th ``POINT`` line is its last point."""
        point, k = die.split(":")
        marks = [line for line in self.lines if line.split(" ")[0] == point]
        return self.killed and len(marks) == int(k) and self.lines[-1] == marks[-1]


def run_child(
    scenario: str,
    phase: str,
    path: Path,
    *,
    die: str | None = None,
    kill_after: float | None = None,
) -> Run:
    """Run the child once; it kills itself at ``die``, or is killed ``kill_after`` seconds
    after ``ready`` (unless it finished first), or runs to the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    args = [sys.executable, str(CHILD), scenario, phase, str(path)]
    if die is not None:
        args.append(die)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    lines: list[str] = []
    ready = threading.Event()
    ended = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode().rstrip("\n")
            lines.append(line)
            if line == "ready":
                ready.set()
        ended.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(60), "the child did not start"
        if kill_after is not None and not ended.wait(kill_after):
            proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(60)
    assert proc.stderr is not None
    errors = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.returncode in (0, -signal.SIGKILL), f"child failed:\n{errors}"
    return Run(lines, proc.returncode)


def read_log(path: Path) -> dict[str, list[object]]:
    """Every session stream of the log, decoded; the file must pass its integrity check."""

    async def read() -> dict[str, list[object]]:
        async with open_sqlite_store(path) as store:
            assert await store.integrity_check() == []
            streams = await store.streams("session/")
            return {
                info.stream: [decode_record(r) for r in await store.read(info.stream)]
                for info in streams
            }

    return trio.run(read)


def fold(events: list[object]) -> SessionState:
    state = SessionState()
    for event in events:
        state = evolve(state, event)
    return state


def of(kind: type[T], events: list[object]) -> list[T]:
    return [e for e in events if isinstance(e, kind)]


# -- (a) follow-ups ----------------------------------------------------------------------


def test_a_queued_follow_up_survives_sigkill_and_is_injected_exactly_once(tmp_path: Path) -> None:
    """Killed while the model call is blocked and three follow-ups wait in the inbox, then
    right after the injection was recorded, then in the next model call; and the same for
    a follow-up that woke the idle session: each id is injected exactly once."""
    path = tmp_path / "follow_up.db"
    plan = [
        ("queue", "queued:1"),  # received a, b, w; the model call never returned
        ("resume", "injected:1"),  # the injection is recorded, the model not asked yet
        ("resume", "llm:1"),  # the model asked, its answer never recorded
        # run 1 done; "h" received, its run started and its injection recorded, all in one
        # append (one decision chain), the model not asked yet
        ("resume", "received:1"),
        ("resume", "llm:1"),
        ("resume", None),
    ]
    runs = [run_child("follow_up", phase, path, die=die) for phase, die in plan]
    for run, (_, die) in zip(runs[:-1], plan, strict=False):
        assert die is not None
        assert run.died_at(die), (die, run.lines)
    final = runs[-1]
    assert final.finished, final.lines

    # Repeated ids were no-ops, before and after the crashes ("h" was received by the
    # process killed inside that follow_up call, which never printed its answer).
    assert runs[0].points("follow_up") == ["a True", "b True", "w True", "a False"]
    later = [line for run in runs[1:] for line in run.points("follow_up")]
    assert set(later) == {"b False", "h False"}

    (events,) = read_log(path).values()
    received = [e.follow_up.id for e in of(FollowUpReceived, events)]
    assert received == ["a", "b", "w", "h"]
    assert [e.ids for e in of(FollowUpsInjected, events)] == [("a", "b", "w"), ("h",)]
    started = [e.run_id for e in of(RunStarted, events)]
    assert started[1:] == ["fu-h"]
    assert [(e.run_id, e.status) for e in of(RunFinished, events)] == [
        (started[0], "completed"),
        ("fu-h", "completed"),
    ]
    assert final.result("start")["text"] == "seen: start | also a\n\nalso b | wake"
    assert final.result("h")["text"] == "seen: hello"

    state = fold(events)
    assert (state.run, state.inbox, state.queued) == (None, (), ())
    assert set(state.seen_follow_ups) == set("abwh")
    users = [m.text for m in state.transcript if isinstance(m, UserMessage)]
    assert users == ["start", "also a\n\nalso b", "wake", "hello"]
    assert is_provider_valid(state.transcript)


# -- (b) human input ---------------------------------------------------------------------


def test_a_run_waiting_for_a_human_resumes_with_the_reply_after_sigkill(tmp_path: Path) -> None:
    """Killed while parked on ``ask_human``; a new process still reports the wait and its
    reply resumes the run; killed again right after the reply was recorded, and in the
    model call that reads it: the run completes with the answer, read once."""
    path = tmp_path / "human.db"
    plan = [
        ("ask", "waiting:1"),
        ("reply", "answered:1"),
        ("reply", "llm:1"),
        ("reply", None),
    ]
    runs = [run_child("human", phase, path, die=die) for phase, die in plan]
    for run, (_, die) in zip(runs[:-1], plan, strict=False):
        assert die is not None
        assert run.died_at(die), (die, run.lines)
    final = runs[-1]
    assert final.finished, final.lines

    asked = runs[0].result("ask")
    assert (asked["status"], asked["human"]) == ("waiting_for_human", ["q1"])
    # After the kill a fresh process knows the run waits for q1...
    parked = runs[1].result("before")
    assert (parked["run_id"], parked["status"], parked["human"]) == (
        asked["run_id"],
        "waiting_for_human",
        ["q1"],
    )
    # ...and once the reply is in the log, the request is closed for good.
    assert final.points("reply") == ["not_found"]
    done = final.result("after")
    assert (done["run_id"], done["status"], done["text"]) == (
        asked["run_id"],
        "completed",
        "deployed: yes",
    )

    (events,) = read_log(path).values()
    assert [e.request_id for e in of(HumanRequested, events)] == ["q1"]
    assert [(e.request_id, e.answer) for e in of(HumanAnswered, events)] == [("q1", "yes")]
    assert [e.run_id for e in of(RunStarted, events)] == [asked["run_id"]]
    assert [(e.run_id, e.status) for e in of(RunFinished, events)] == [
        (asked["run_id"], "completed")
    ]
    assert len(of(AssistantRecorded, events)) == 2
    state = fold(events)
    question = ToolCall(id="q1", name="ask_human", arguments='{"question": "Deploy to prod?"}')
    assert state.transcript == (
        UserMessage("deploy"),
        AssistantMessage(tool_calls=(question,)),
        ToolResultMessage(tool_call_id="q1", content="yes"),
        AssistantMessage(content="deployed: yes"),
    )
    assert state.run is None


# -- a tool's result and the next model call --------------------------------------------


def test_a_kill_as_the_model_call_reading_a_tool_result_begins_keeps_that_result(
    tmp_path: Path,
) -> None:
    """Killed as the model call that reads a tool's result goes out (pipelined appends on
    SQLite): the result is already in the log, so the next process asks the model again
    with it, and the run completes with no unknown tool result; the tool ran once."""
    path = tmp_path / "tool.db"
    first = run_child("tool_result", "send", path, die="llm:2")
    assert first.died_at("llm:2"), first.lines
    final = run_child("tool_result", "wait", path)
    assert final.finished, final.lines
    result = final.result("run")
    assert (result["run_id"], result["status"], result["unknown"]) == ("r1", "completed", [])
    assert result["text"] == "done: touched x"
    assert Path(f"{path}.touched").read_text() == "x\n"
    (events,) = read_log(path).values()
    assert len(of(AssistantRecorded, events)) == 2
    state = fold(events)
    assert [m for m in state.transcript if isinstance(m, ToolResultMessage)] == [
        ToolResultMessage(tool_call_id="c1", content="touched x")
    ]


# -- (c) timers --------------------------------------------------------------------------


def test_session_timers_fire_exactly_once_across_sigkills(tmp_path: Path) -> None:
    """Killed just before deliveries, right after firings were recorded, in the runs they
    started, and at random moments: every one-shot fires once, the recurring timer once
    per due time, and every firing is read once, by one run."""
    rng = random.Random(os.environ.get("CRASH_SEED", "powertrio-session-timers"))
    path = tmp_path / "timers.db"
    plans: list[tuple[str | None, float | None]] = [
        ("due:2", None),
        ("fired:1", None),
        ("llm:1", None),
    ]
    for _ in range(9):
        roll = rng.random()
        if roll < 0.25:
            plans.append((f"due:{rng.randint(1, 4)}", None))
        elif roll < 0.5:
            plans.append((f"fired:{rng.randint(1, 4)}", None))
        elif roll < 0.7:
            plans.append((f"llm:{rng.randint(1, 3)}", None))
        else:
            plans.append((None, rng.uniform(0, 0.3)))
    runs: list[Run] = []
    cut_off: set[tuple[str, float]] = set()
    for die, kill_after in plans:
        runs.append(run_child("timers", "-", path, die=die, kill_after=kill_after))
        if die is not None and not runs[-1].finished:
            assert runs[-1].died_at(die), (die, runs[-1].lines)
            if die.startswith("due:"):  # killed in the hook, before the delivery
                timer_id, due = runs[-1].points("due")[-1].split(" ")
                cut_off.add((timer_id, float(due)))
        if runs[-1].finished:
            break
    if not runs[-1].finished:
        runs.append(run_child("timers", "-", path))
    assert runs[-1].finished
    assert sum(run.killed for run in runs) >= 3

    (events,) = read_log(path).values()
    scheduled = [e.timer_id for e in of(TimerScheduled, events)]
    one_shots = [f"t{i}" for i in range(ONE_SHOTS)]
    # Each once, though every process asked to schedule them all.
    assert sorted(scheduled) == sorted([*one_shots, "tick"])
    fired = of(TimerFired, events)
    keys = [(f.timer_id, f.due_at) for f in fired]
    assert len(keys) == len(set(keys)), "a due time was recorded twice"
    assert sorted(f.timer_id for f in fired if f.timer_id != "tick") == one_shots
    ticks = [f for f in fired if f.timer_id == "tick"]
    assert ticks
    for before, after in itertools.pairwise(ticks):
        assert before.fired_at + EVERY == after.due_at  # fixed delay, across restarts too
    assert [e.timer_id for e in of(TimerCancelled, events)] == ["tick"]

    # Firings a process acknowledged are in the log; those a kill cut off before the
    # owner saw them were delivered again by a later process.
    acknowledged = set()
    for run in runs:
        for line in run.points("fired"):
            data = orjson.loads(line.partition(" ")[2])
            acknowledged.add((data["timer_id"], data["due_at"]))
    assert acknowledged <= set(keys)
    assert cut_off
    assert cut_off <= set(keys)

    # Each firing is read once: injected into exactly one run; a run started by a timer
    # starts once, for a firing that is in the log.
    notes = {e.timer_id: e.note for e in of(TimerScheduled, events)}
    injected = Counter(i for e in of(FollowUpsInjected, events) for i in e.ids)
    assert {timer_follow_up(f, notes[f.timer_id]).id: 1 for f in fired} == dict(injected)
    started = of(RunStarted, events)
    run_ids = [e.run_id for e in started]
    assert len(run_ids) == len(set(run_ids)), "a run was started twice"
    assert all(e.trigger == "timer" for e in started)
    assert {e.run_id for e in started} <= {f"tm-{f.timer_id}@{f.due_at!r}" for f in fired}
    finished = Counter(e.run_id for e in of(RunFinished, events))
    assert finished == Counter(run_ids)
    assert {e.status for e in of(RunFinished, events)} == {"completed"}
    state = fold(events)
    assert (state.run, state.inbox, state.timers.pending) == (None, (), ())


# -- (d) agent trees ---------------------------------------------------------------------

EXPECTED_ANSWER = (
    "root(go)[manager(go.1)[worker(go.1.1) + worker(go.1.2)] + "
    "manager(go.2)[worker(go.2.1) + worker(go.2.2)]]"
)
TREE = {
    "r": ["r.1", "r.2"],
    "r.1": ["r.1.1", "r.1.2"],
    "r.2": ["r.2.1", "r.2.2"],
    "r.1.1": [],
    "r.1.2": [],
    "r.2.1": [],
    "r.2.2": [],
}


def tree_plans(schedule: str) -> list[tuple[str | None, float | None]]:
    """``exact``: kills at chosen points, then at random ones; ``random``: kills at random
    moments from the start (``(die, kill_after)`` pairs for :func:`run_child`)."""
    rng = random.Random(os.environ.get("CRASH_SEED", f"powertrio-session-tree-{schedule}"))
    if schedule == "random":
        return [(None, rng.uniform(0, 0.12)) for _ in range(6)]
    plans: list[tuple[str | None, float | None]] = [
        ("spawned:1", None),  # the root recorded its children; neither has started
        ("llm:2", None),
        ("child_finished:1", None),
        ("run_finished:2", None),
    ]
    for _ in range(4):
        point = rng.choice(["llm", "spawned", "child_finished", "run_finished"])
        plans.append((f"{point}:{rng.randint(1, 3)}", None))
    return plans


@pytest.mark.parametrize("schedule", ["exact", "random"])
def test_a_tree_killed_mid_run_finishes_each_child_once_with_the_same_answer(
    tmp_path: Path, schedule: str
) -> None:
    """Kill a three-level tree after spawns, in model calls, after children finished, and
    at random moments; restart by asking the root for the same run (a follow-up with a
    fixed id): no child is spawned or run twice, each finishes once, and every transcript
    and the answer equal an uninterrupted run's."""
    baseline = run_child("tree", "-", tmp_path / "baseline.db")
    assert baseline.finished
    clean = baseline.result("root")
    assert (clean["status"], clean["text"], clean["tokens"]) == ("completed", EXPECTED_ANSWER, 110)
    clean_log = read_log(tmp_path / "baseline.db")

    path = tmp_path / "tree.db"
    plans = tree_plans(schedule)
    runs: list[Run] = []
    for die, kill_after in plans:
        runs.append(run_child("tree", "-", path, die=die, kill_after=kill_after))
        if die is not None and not runs[-1].finished:
            assert runs[-1].died_at(die), (die, runs[-1].lines)
        if runs[-1].finished:
            break
    if not runs[-1].finished:
        runs.append(run_child("tree", "-", path))
    final = runs[-1]
    assert final.finished
    assert sum(run.killed for run in runs) >= (4 if schedule == "exact" else 1)
    assert runs[0].points("follow_up") == [] or runs[0].points("follow_up") == ["go True"]
    assert all(run.points("follow_up") in ([], ["go False"]) for run in runs[1:])
    result = final.result("root")
    assert (result["status"], result["text"], result["tokens"]) == (
        clean["status"],
        clean["text"],
        clean["tokens"],
    )

    log = read_log(path)
    assert sorted(log) == sorted(f"session/{s}" for s in TREE)
    for session_id, children in TREE.items():
        events = log[f"session/{session_id}"]
        assert len(of(SessionCreated, events)) == 1
        run_id = "fu-go" if session_id == "r" else f"{session_id}:task"
        assert [e.run_id for e in of(RunStarted, events)] == [run_id], session_id
        finished = [(e.run_id, e.status) for e in of(RunFinished, events)]
        assert finished == [(run_id, "completed")], session_id
        assert [e.child_id for e in of(ChildSpawned, events)] == children, session_id
        assert sorted(e.child_id for e in of(ChildFinished, events)) == children, session_id
        state = fold(events)
        clean_state = fold(clean_log[f"session/{session_id}"])
        assert state.transcript == clean_state.transcript, session_id
        assert state.usage == clean_state.usage, session_id
        assert is_provider_valid(state.transcript)
