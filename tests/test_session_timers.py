"""Durable timers on sessions: wake-ups from Python and from the model, under virtual time."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio
import trio.testing

from actors import spawn_session, wakeup_tools
from actors.events import Observation, RunEnded
from protocols import LLMRequest, LLMResponse, ToolCall, Usage, UserMessage
from runtime import Clock, open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM, ScriptedLLM
from runtime.timers import TimerFired

DAY = 86_400.0


def answer(text: str = "", *calls: ToolCall) -> LLMResponse:
    return LLMResponse(
        content=text, tool_calls=calls, usage=Usage(prompt_tokens=5, completion_tokens=1)
    )


def last_user_text(request: LLMRequest) -> str:
    message = request.messages[-1]
    assert isinstance(message, UserMessage)
    return message.text


async def test_a_timer_wakes_an_idle_session_at_its_due_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    llm = ScriptedLLM([answer("checked the build")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s")
        start = runtime.clock.now()
        timer_id = await runtime.timers.schedule(session.ref, delay=3600, note="check the build")
        await trio.sleep(3599)
        assert llm.requests == []
        await trio.sleep(2)
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
    (result,) = state.results.values()
    assert (result.status, result.text) == ("completed", "checked the build")
    text = last_user_text(llm.requests[0])
    assert text.startswith(f"[timer {timer_id}, due ")
    assert text.endswith("] check the build")
    assert state.timers.pending == ()
    assert runtime.clock.now() - start >= 3600


async def test_days_of_a_recurring_timer_run_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    llm = FunctionLLM(lambda request: answer("daily report sent"))
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        await runtime.timers.schedule(session.ref, delay=DAY, every=DAY, note="daily report")
        await trio.sleep(3 * DAY + 60)
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
    assert len(state.results) == 3
    assert all(r.status == "completed" for r in state.results.values())
    assert len(state.timers.pending) == 1


async def test_a_firing_during_a_run_joins_it_at_the_next_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: LLMRequest) -> LLMResponse:
        if len(request.messages) == 1:
            await trio.sleep(120)  # the timer fires while the model thinks
            return answer("first")
        return answer("saw the reminder")

    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(slow), max_rounds=1)
        await runtime.timers.schedule(session.ref, delay=60, note="stand-up")
        result = await session.send("work")
    assert (result.status, result.rounds, result.text) == ("completed", 2, "saw the reminder")


async def test_a_repeated_delivery_is_recorded_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    llm = ScriptedLLM([answer("once")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        timer_id = await runtime.timers.schedule(session.ref, delay=10, note="n")
        (pending,) = (await session.state()).timers.pending
        fired = TimerFired(timer_id=timer_id, due_at=pending.due_at, fired_at=pending.due_at)
        await session.ref.tell(fired)
        await session.ref.tell(fired)
        await trio.sleep(20)
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
    assert len(state.results) == 1
    llm.assert_complete()


async def test_a_timer_survives_a_restart_and_fires_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "log.sqlite"
    clock = Clock()  # one wall clock for both "processes", following virtual time
    first = ScriptedLLM([])
    async with open_sqlite_store(path) as store, open_runtime(store=store, clock=clock) as runtime:
        session = await spawn_session(runtime, llm=first, session_id="s")
        await runtime.timers.schedule(session.ref, delay=600, note="after the restart")
    await trio.sleep(3600)  # the process is "down" past the due time
    second = ScriptedLLM([answer("woke up late")])
    async with open_sqlite_store(path) as store, open_runtime(store=store, clock=clock) as runtime:
        ended = trio.Event()

        def on_end(observation: Observation) -> None:
            if isinstance(observation, RunEnded):
                ended.set()

        # Store work happens in a thread, which autojump counts as idle: wait for the run
        # to end rather than for virtual time to pass.
        session = await spawn_session(runtime, llm=second, session_id="s", observers=[on_end])
        await ended.wait()
        state = await session.state()
    assert [r.text for r in state.results.values()] == ["woke up late"]
    second.assert_complete()


async def test_the_model_schedules_lists_and_cancels_its_own_wake_ups(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def call(call_id: str, name: str, **arguments: object) -> ToolCall:
        return ToolCall(id=call_id, name=name, arguments=orjson.dumps(arguments).decode())

    llm = ScriptedLLM(
        [
            answer(
                "",
                call("t", "current_time"),
                call("a", "schedule_wakeup", action="schedule", delay_seconds=60, note="tea"),
                call("b", "schedule_wakeup", action="schedule", at="2100-01-01T00:00:00"),
            ),
            answer("", call("l", "schedule_wakeup", action="list")),
            answer("scheduled"),
            answer("tea time"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=wakeup_tools(runtime))
        result = await session.send("remind me")
        assert result.status == "completed"
        results = {m.tool_call_id: m.content for m in llm.requests[1].messages if m.role == "tool"}
        assert results["t"].startswith("20")
        scheduled = orjson.loads(results["a"])
        far = orjson.loads(results["b"])
        assert far["due"] == "2100-01-01T00:00:00+00:00"
        tool_results = [m for m in llm.requests[2].messages if m.role == "tool"]
        listed = orjson.loads(next(m.content for m in tool_results if m.tool_call_id == "l"))
        assert [t["timer_id"] for t in listed] == [scheduled["timer_id"], far["timer_id"]]
        await trio.sleep(61)
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
        assert [r.text for r in state.results.values()][-1] == "tea time"
        assert last_user_text(llm.requests[3]).endswith("] tea")
        llm.add(answer("", call("c", "schedule_wakeup", action="cancel", timer_id=far["timer_id"])))
        llm.add(answer("cancelled"))
        await session.send("never mind the far one")
        assert (await session.state()).timers.pending == ()
        bad = ScriptedLLM(
            [answer("", call("x", "schedule_wakeup", action="schedule")), answer("ok")]
        )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=bad, tools=wakeup_tools(runtime))
        await session.send("go")
    (reply,) = [m for m in bad.requests[1].messages if m.role == "tool"]
    assert reply.is_error
    assert "schedule needs exactly one of delay_seconds or at" in reply.content
