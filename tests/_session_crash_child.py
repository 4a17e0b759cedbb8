"""Crash-test child for sessions: run one scenario on an on-disk log, dying where told.

Usage: ``python tests/_session_crash_child.py SCENARIO PHASE DB_PATH [DIE]``.

``SCENARIO`` is ``follow_up``, ``human``, ``timers``, ``tree`` or ``tool_result``
(``PHASE`` picks the part of it this process plays). ``DIE`` is ``POINT:K``: the process
SIGKILLs itself the K-th time it reaches ``POINT`` (``llm``: a model call begins;
``received``, ``injected``, ``answered``, ``fired``, ``spawned``, ``child_finished``,
``run_finished``: right after an append holding that event was acknowledged; ``due``: the
timers service is about to deliver; ``queued``, ``waiting``: a scenario's own marker).
The parent may also kill it at any moment after ``ready``.

Every line goes out with one ``os.write`` (atomic on a pipe): ``ready``, one line per
point reached (``<point> <details>``), ``result <name> <json>`` for each run outcome, and
``done``. A broken invariant the child can see itself (a model asked again for an answer
the log already holds, a transcript that is not provider-valid) exits with status 3.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from collections.abc import Sequence

import orjson
import trio

from actors import (
    AgentSpec,
    HumanRequestNotFoundError,
    RunResult,
    ask_human,
    spawn_agent,
    spawn_session,
    tool,
)
from actors.events import AssistantRecorded, RunStarted
from actors.lowlevel import is_provider_valid
from protocols import LLMRequest, LLMResponse, Message, SystemMessage, ToolCall, Usage, UserMessage
from protocols.codec import decode_record
from runtime import (
    AppendResult,
    EventStore,
    NewEvent,
    SqliteEventStore,
    open_runtime,
    open_sqlite_store,
)
from runtime.testing import FunctionLLM
from runtime.timers import DueTimer

ONE_SHOTS = 8
"""One-shot timers of the ``timers`` scenario (``t0`` ...), due 0.03 s apart."""
EVERY = 0.1
"""Period of the ``timers`` scenario's recurring timer ``tick``, in seconds."""

_APPEND_POINTS = {
    "session.follow_up_received": "received",
    "session.follow_ups_injected": "injected",
    "session.human_answered": "answered",
    "timer.fired": "fired",
    "session.child_spawned": "spawned",
    "session.child_finished": "child_finished",
    "session.run_finished": "run_finished",
}


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def fail(problem: str) -> None:
    """An invariant broke: tell the parent and exit at once (not a kill: status 3)."""
    os.write(2, f"invariant broken: {problem}\n".encode())
    os._exit(3)


class Points:
    """Counts the points this process reaches, reports them, and dies at the chosen one."""

    def __init__(self, die: str | None) -> None:
        self.counts: Counter[str] = Counter()
        self.die: tuple[str, int] | None = None
        if die:
            point, k = die.split(":")
            self.die = (point, int(k))

    def reach(self, point: str, details: str = "") -> None:
        self.counts[point] += 1
        say(f"{point} {details}".rstrip())
        if self.die == (point, self.counts[point]):
            os.kill(os.getpid(), signal.SIGKILL)


class ReportingStore:
    """The SQLite store, reporting each acknowledged append of an interesting event."""

    def __init__(self, inner: SqliteEventStore, points: Points) -> None:
        self.inner = inner
        self.points = points

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        result = await self.inner.append(stream, events, expected_version)
        for event in events:
            point = _APPEND_POINTS.get(event.type)
            if point is not None:
                self.points.reach(point, f"{stream} {event.data.decode()}")
        return result


def as_store(store: ReportingStore) -> EventStore:
    return store  # type: ignore[return-value]  # duck-typed: delegates to the real store


def usage() -> Usage:
    return Usage(prompt_tokens=10, completion_tokens=1)


def text_of(message: Message) -> str:
    if isinstance(message, UserMessage):
        return message.text
    return message.content if isinstance(message.content, str) else ""


async def check_request(store: SqliteEventStore, stream: str, request: LLMRequest) -> None:
    """A model call: provider-valid, and never a request whose answer is in the log."""
    rest = [m for m in request.messages if not isinstance(m, SystemMessage)]
    if not is_provider_valid(rest):
        fail(f"{stream}: a request that is not provider-valid: {rest!r}")
    recorded = {
        event.request_fingerprint
        for event in map(decode_record, await store.read(stream))
        if isinstance(event, AssistantRecorded)
    }
    if request.fingerprint() in recorded:
        fail(f"{stream}: a recorded answer was requested again")


def result_line(name: str, result: RunResult) -> None:
    payload = {
        "run_id": result.run_id,
        "status": result.status,
        "text": result.text,
        "tokens": result.usage.total_tokens,
        "human": [r.request_id for r in result.human_requests],
        "unknown": list(result.unknown_tool_results),
    }
    say(f"result {name} {orjson.dumps(payload).decode()}")


async def first_run_id(store: SqliteEventStore, stream: str) -> str:
    for event in map(decode_record, await store.read(stream)):
        if isinstance(event, RunStarted):
            return event.run_id
    fail(f"{stream} holds no run")
    raise AssertionError  # unreachable: fail() exits


# -- follow-ups --------------------------------------------------------------------------


def seen_since_last_answer(request: LLMRequest) -> str:
    """The user turns after the model's last answer, as the model would read them."""
    turns: list[str] = []
    for message in request.messages:
        if message.role == "assistant":
            turns = []
        elif isinstance(message, UserMessage):
            turns.append(message.text)
    return "seen: " + " | ".join(turns)


async def follow_up(phase: str, store: SqliteEventStore, points: Points) -> None:
    """``queue``: a send whose model call never returns, and follow-ups received meanwhile.
    ``resume``: finish that run, then start one from a follow-up to the idle session."""
    entered = trio.Event()

    async def blocked(request: LLMRequest) -> LLMResponse:
        points.reach("llm")
        entered.set()
        await trio.sleep_forever()
        raise AssertionError  # unreachable

    async def answer(request: LLMRequest) -> LLMResponse:
        await check_request(store, "session/s", request)
        points.reach("llm")
        await trio.sleep(0.005)
        return LLMResponse(content=seen_since_last_answer(request), usage=usage())

    llm = FunctionLLM(blocked if phase == "queue" else answer)
    async with open_runtime(store=as_store(ReportingStore(store, points))) as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s")
        say("ready")
        if phase == "queue":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.send, "start")
                await entered.wait()
                for content, id, kind in (
                    ("also a", "a", "user"),
                    ("also b", "b", "user"),
                    ("wake", "w", "system"),
                    ("also a, again", "a", "user"),
                ):
                    fresh = await session.follow_up(content, id=id, kind=kind)
                    say(f"follow_up {id} {fresh}")
                points.reach("queued")
                nursery.cancel_scope.cancel()
            return
        say(f"follow_up b {await session.follow_up('also b, again', id='b')}")
        result_line("start", await session.wait(await first_run_id(store, "session/s")))
        say(f"follow_up h {await session.follow_up('hello', id='h')}")
        result_line("h", await session.wait("fu-h"))


# -- human input -------------------------------------------------------------------------


async def human(phase: str, store: SqliteEventStore, points: Points) -> None:
    """``ask``: a run that waits for a human. ``reply``: answer it in a later process."""

    async def model(request: LLMRequest) -> LLMResponse:
        await check_request(store, "session/s", request)
        points.reach("llm")
        replies = [m for m in request.messages if m.role == "tool"]
        if not replies:
            question = ToolCall(
                id="q1", name="ask_human", arguments='{"question": "Deploy to prod?"}'
            )
            return LLMResponse(tool_calls=[question], usage=usage())
        return LLMResponse(content=f"deployed: {text_of(replies[-1])}", usage=usage())

    llm = FunctionLLM(model)
    async with open_runtime(store=as_store(ReportingStore(store, points))) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human], session_id="s")
        say("ready")
        if phase == "ask":
            result_line("ask", await session.send("deploy"))
            points.reach("waiting")
            return
        run_id = await first_run_id(store, "session/s")
        result_line("before", await session.wait(run_id))
        try:
            result = await session.reply("q1", "yes")
        except HumanRequestNotFoundError:
            say("reply not_found")
            result = await session.wait(run_id)
        result_line("after", result)


# -- timers ------------------------------------------------------------------------------


async def timers(phase: str, store: SqliteEventStore, points: Points) -> None:
    """Schedule the same timers in every process (known ids are no-ops) and let them fire;
    each firing wakes the idle session or joins its run. Ends when every one-shot fired
    and, with the recurring timer cancelled, the session is idle."""
    del phase

    async def model(request: LLMRequest) -> LLMResponse:
        await check_request(store, "session/s", request)
        points.reach("llm")
        await trio.sleep(0.01)
        return LLMResponse(content=seen_since_last_answer(request), usage=usage())

    def announce(due: DueTimer) -> None:
        points.reach("due", f"{due.timer_id} {due.due_at!r}")

    async with open_runtime(store=as_store(ReportingStore(store, points))) as runtime:
        runtime.timers.set_hook(announce)
        session = await spawn_session(runtime, llm=FunctionLLM(model), session_id="s")
        service = runtime.timers
        await service.schedule(session.ref, delay=EVERY, every=EVERY, timer_id="tick")
        for index in range(ONE_SHOTS):
            await service.schedule(
                session.ref, delay=0.03 * index, timer_id=f"t{index}", note=f"one-shot {index}"
            )
        say("ready")
        cancelled = False
        while True:
            state = await session.state()
            idle = state.run is None and not state.inbox and not state.queued
            if idle and all(t.timer_id == "tick" for t in state.timers.pending):
                if cancelled:
                    break
                if state.timers.pending:
                    await service.cancel_timer("tick", reason="the test is over")
                cancelled = True  # then wait for any run it started meanwhile
            await trio.sleep(0.01)


# -- agent trees -------------------------------------------------------------------------

WORKER = AgentSpec(name="worker", system_prompt="worker", description="does one piece")
# AgentSpec.agents uses converter=tuple, which the attrs mypy plugin types as
# Iterable[_T_co]: any argument is an arg-type error until it gets a typed converter.
MANAGER = AgentSpec(name="manager", system_prompt="manager", agents=(WORKER,))  # type: ignore[arg-type]
ROOT = AgentSpec(name="root", system_prompt="root", agents=(MANAGER,))  # type: ignore[arg-type]


def spawn_call(call_id: str, agent: str, task: str) -> ToolCall:
    arguments = orjson.dumps({"agent": agent, "task": task}).decode()
    return ToolCall(id=call_id, name="spawn_agent", arguments=arguments)


async def tree(phase: str, store: SqliteEventStore, points: Points) -> None:
    """A root that spawns two managers that spawn two workers each (as ``TreeModel`` in
    ``tests/test_agents.py``), started by a follow-up with a fixed id so that every
    process asks for the same run: the first starts it, the next ones wait for it."""
    del phase

    async def model(request: LLMRequest) -> LLMResponse:
        system = request.messages[0]
        assert isinstance(system, SystemMessage)
        role = system.content
        task = text_of(request.messages[1])
        session_id = "r" + task.removeprefix("go")  # task go.1.2 is session r.1.2
        await check_request(store, f"session/{session_id}", request)
        results = [text_of(m) for m in request.messages if m.role == "tool"]
        points.reach("llm", f"{role}:{task}:{'answer' if results else 'ask'}")
        await trio.sleep(0.01)
        if role == "worker":
            return LLMResponse(content=f"worker({task})", usage=usage())
        child = "manager" if role == "root" else "worker"
        if not results:
            calls = [spawn_call(f"{task}-{i}", child, f"{task}.{i}") for i in (1, 2)]
            return LLMResponse(tool_calls=calls, usage=usage())
        return LLMResponse(content=f"{role}({task})[{' + '.join(results)}]", usage=usage())

    async with open_runtime(store=as_store(ReportingStore(store, points))) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(model), session_id="r")
        say("ready")
        say(f"follow_up go {await root.follow_up('go', id='go')}")
        result_line("root", await root.wait("fu-go"))


# -- a tool's result and the next model call ------------------------------------------------


async def tool_result(phase: str, store: SqliteEventStore, points: Points) -> None:
    """``send``: a run whose tool (crash policy ``abort``) writes a line next to the log
    before the model call that reads its result; ``wait``: wait for that run in a later
    process. On the store itself, so appends are pipelined as in production."""
    marks = f"{store.path}.touched"

    @tool
    def touch(name: str) -> str:
        """Touch a file (not safe to run twice)."""
        fd = os.open(marks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, f"{name}\n".encode())
        finally:
            os.close(fd)
        return f"touched {name}"

    async def model(request: LLMRequest) -> LLMResponse:
        points.reach("llm")  # first: the read below lets the writer commit meanwhile
        await check_request(store, "session/s", request)
        if request.messages[-1].role != "tool":
            call = ToolCall(id="c1", name="touch", arguments='{"name": "x"}')
            return LLMResponse(tool_calls=[call], usage=usage())
        return LLMResponse(content=f"done: {text_of(request.messages[-1])}", usage=usage())

    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(model), tools=[touch], session_id="s"
        )
        say("ready")
        if phase == "send":
            result_line("run", await session.send("touch x", id="r1"))
        else:
            result_line("run", await session.wait("r1"))


SCENARIOS = {
    "follow_up": follow_up,
    "human": human,
    "timers": timers,
    "tree": tree,
    "tool_result": tool_result,
}


async def main(scenario: str, phase: str, path: str, die: str | None) -> None:
    points = Points(die)
    async with open_sqlite_store(path) as store:
        await SCENARIOS[scenario](phase, store, points)
    say("done")


if __name__ == "__main__":
    trio.run(
        main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None
    )
