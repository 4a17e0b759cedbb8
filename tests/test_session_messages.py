"""Everything is a message: follow-ups, cancels, double-texting and human input."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from actors import (
    BusyPolicy,
    HumanRequestNotFoundError,
    Session,
    SessionBusyError,
    ToolContext,
    ask_human,
    spawn_session,
    tool,
)
from actors.events import (
    AssistantRecorded,
    CancelRequested,
    FollowUpsInjected,
    HumanRequested,
    ToolFinished,
)
from actors.lowlevel import is_provider_valid
from protocols import (
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import decode_record
from protocols.streaming import LLMStream, StreamDelta, TextDelta
from runtime import NewEvent, open_runtime, open_sqlite_store
from runtime.supervision import Backoff, Supervision
from runtime.testing import InMemoryEventStore, ScriptedLLM

FAST_RESTART = Supervision(max_restarts=100, within=1, backoff=Backoff(initial=0))


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def answer(text: str = "", *calls: ToolCall) -> LLMResponse:
    return LLMResponse(
        content=text, tool_calls=calls, usage=Usage(prompt_tokens=5, completion_tokens=1)
    )


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (a human approves each call)."""
    return f"deleted {path}"


class GatedLLM:
    """Answers from a script, but each call first waits until the test opens the gate."""

    def __init__(self, script: Sequence[LLMResponse]) -> None:
        self.inner = ScriptedLLM(script)
        self.entered = trio.Event()
        self.gate = trio.Event()

    @property
    def requests(self) -> list[LLMRequest]:
        return self.inner.requests

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.entered.set()
        await self.gate.wait()
        return await self.inner.complete(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        raise NotImplementedError


async def events_of(store: InMemoryEventStore, session: Session) -> list[object]:
    return [decode_record(r) for r in await store.read(f"session/{session.id}")]


# -- follow-ups ------------------------------------------------------------------------


async def test_a_follow_up_to_an_idle_session_starts_a_run() -> None:
    llm = ScriptedLLM([answer("hello back")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        assert await session.follow_up("hello", id="m1")
        result = await session.wait("fu-m1")
        state = await session.state()
    assert (result.status, result.text) == ("completed", "hello back")
    assert state.transcript[0] == UserMessage("hello")
    assert llm.requests[0].messages == (UserMessage("hello"),)


async def test_follow_ups_join_the_run_at_the_next_round_merged_by_kind() -> None:
    """Two user follow-ups become one turn; a timer wake-up stays a turn of its own."""
    llm = GatedLLM([answer("first"), answer("second")])
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm, max_rounds=1)
        results = []

        async def send() -> None:
            results.append(await session.send("start"))

        nursery.start_soon(send)
        await llm.entered.wait()
        await session.follow_up("also this", id="a")
        await session.follow_up("and this", id="b")
        await session.follow_up("wake up: 9:00", id="t", kind="timer")
        llm.gate.set()
    (result,) = results
    # The follow-ups arrived during the last allowed round: one more round to read them.
    assert (result.status, result.rounds, result.text) == ("completed", 2, "second")
    assert llm.requests[1].messages == (
        UserMessage("start"),
        AssistantMessage(content="first"),
        UserMessage("also this\n\nand this"),
        UserMessage("wake up: 9:00"),
    )
    injected = [e for e in await events_of(store, session) if isinstance(e, FollowUpsInjected)]
    assert [e.ids for e in injected] == [("a", "b", "t")]


async def test_a_repeated_follow_up_id_is_a_no_op_forever() -> None:
    llm = ScriptedLLM([answer("one"), answer("two")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        assert await session.follow_up("hi", id="same")
        await session.wait("fu-same")
        await session.send("something else")
        assert not await session.follow_up("hi again", id="same")
        state = await session.state()
    assert state.run is None
    assert len(llm.requests) == 2
    assert sum(m == UserMessage("hi") for m in state.transcript) == 1


async def test_a_crash_between_receipt_and_injection_neither_loses_nor_duplicates() -> None:
    """The append of the injection fails once: the actor restarts and injects exactly once."""
    store = InMemoryEventStore()
    failed: list[bool] = []

    class FailingOnce:
        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def append(self, stream: str, events: Sequence[NewEvent], expected: int) -> object:
            if not failed and any(e.type == "session.follow_ups_injected" for e in events):
                failed.append(True)
                store.fail_next_commit()
            return await store.append(stream, events, expected)

    llm = GatedLLM([answer("first"), answer("second")])
    async with (
        open_runtime(store=FailingOnce(), supervision=FAST_RESTART) as runtime,  # type: ignore[arg-type]
        trio.open_nursery() as nursery,
    ):
        session = await spawn_session(runtime, llm=llm)
        results = []

        async def send() -> None:
            results.append(await session.send("start"))

        nursery.start_soon(send)
        await llm.entered.wait()
        await session.follow_up("late news", id="n")
        llm.gate.set()
    assert failed
    assert results[0].status == "completed"
    state_messages = llm.requests[-1].messages
    assert state_messages.count(UserMessage("late news")) == 1
    injected = [e for e in await events_of(store, session) if isinstance(e, FollowUpsInjected)]
    assert [e.ids for e in injected] == [("n",)]


def test_follow_up_validation() -> None:
    from protocols import Cancel, FollowUp

    with pytest.raises(ValueError, match=r"FollowUp\.id must not be empty"):
        FollowUp(id="", content="x")
    with pytest.raises(ValueError, match=r"Cancel\.mode must be 'immediate' or 'after_turn'"):
        Cancel(mode="later")  # type: ignore[arg-type]


# -- cancellation ----------------------------------------------------------------------


class SlowStreamLLM:
    """Streams some text, then stalls until cancelled; records whether its stream closed."""

    def __init__(self) -> None:
        self.streaming = trio.Event()
        self.closed = False
        self.after = ScriptedLLM([answer("fresh start")])

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.after.complete(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        if self.streaming.is_set():
            return self.after.stream(request)

        async def source() -> AsyncIterator[StreamDelta | LLMResponse]:
            try:
                yield TextDelta("I was about to ")
                self.streaming.set()
                await trio.sleep_forever()
                yield answer("never")  # pragma: no cover
            finally:
                self.closed = True

        return LLMStream(source)


async def test_an_immediate_cancel_closes_the_stream_and_keeps_the_partial_text() -> None:
    llm = SlowStreamLLM()
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm)
        results = []
        with session.observe():

            async def send() -> None:
                results.append(await session.send("go"))

            nursery.start_soon(send)
            await llm.streaming.wait()
            assert await session.cancel("user pressed stop")
        await trio.testing.wait_all_tasks_blocked()
        after = await session.send("again")
    (cancelled,) = results
    assert cancelled.status == "cancelled"
    assert cancelled.error == "cancelled by python: user pressed stop"
    assert llm.closed
    events = await events_of(store, session)
    (requested,) = [e for e in events if isinstance(e, CancelRequested)]
    assert (requested.mode, requested.reason, requested.by) == (
        "immediate",
        "user pressed stop",
        "python",
    )
    assert requested.at > 0
    partial = next(e for e in events if isinstance(e, AssistantRecorded))
    assert (partial.message.content, partial.finish_reason) == ("I was about to ", "interrupted")
    assert after.status == "completed"
    assert is_provider_valid(llm.after.requests[0].messages)


async def test_an_immediate_cancel_interrupts_running_tools_and_closes_their_calls() -> None:
    started = trio.Event()
    thread_saw_cancel = trio.Event()
    token = trio.lowlevel.current_trio_token()

    @tool
    async def wait_forever() -> str:
        """Never returns."""
        started.set()
        await trio.sleep_forever()
        return "never"  # pragma: no cover

    @tool
    def poll(context: ToolContext) -> str:
        """A thread tool that stops when told."""
        while not context.cancelled:
            trio.from_thread.run_sync(lambda: None, trio_token=token)
        trio.from_thread.run_sync(thread_saw_cancel.set, trio_token=token)
        return "stopped"

    llm = ScriptedLLM(
        [answer("", call("w", "wait_forever", "{}"), call("p", "poll", "{}")), answer("ok")]
    )
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm, tools=[wait_forever, poll])
        results = []

        async def send() -> None:
            results.append(await session.send("go"))

        nursery.start_soon(send)
        await started.wait()
        assert await session.cancel("enough")
        with trio.fail_after(5):
            await thread_saw_cancel.wait()
        state = await session.state()
        again = await session.send("next")
    assert results[0].status == "cancelled"
    finished = [e for e in await events_of(store, session) if isinstance(e, ToolFinished)]
    assert {(e.outcome.call_id, e.outcome.status) for e in finished} == {
        ("w", "interrupted"),
        ("p", "interrupted"),
    }
    assert state.run is None
    assert is_provider_valid(state.transcript)
    assert again.status == "completed"


async def test_an_after_turn_cancel_lets_the_round_finish() -> None:
    llm = GatedLLM([answer("", call("c", "add", '{"a": 1, "b": 2}')), answer("never")])
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm, tools=[add])
        results = []

        async def send() -> None:
            results.append(await session.send("go"))

        nursery.start_soon(send)
        await llm.entered.wait()
        assert await session.cancel("wrap up", mode="after_turn")
        llm.gate.set()
    (result,) = results
    assert result.status == "cancelled"
    assert result.rounds == 1
    assert len(llm.requests) == 1


async def test_cancel_with_no_active_run_does_nothing() -> None:
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=ScriptedLLM([]))
        assert not await session.cancel("nothing to stop")


# -- double-texting --------------------------------------------------------------------


async def test_reject_policy_refuses_a_send_while_busy() -> None:
    llm = GatedLLM([answer("done")])
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm, on_busy="reject", session_id="s")
        nursery.start_soon(session.send, "first")
        await llm.entered.wait()
        with pytest.raises(SessionBusyError, match="session 's' is busy with run 'run_") as info:
            await session.send("second")
        assert info.value.code == "session.busy"
        llm.gate.set()


async def test_interrupt_policy_cancels_after_the_turn_and_runs_the_new_input() -> None:
    llm = GatedLLM([answer("", call("c", "add", '{"a": 1, "b": 2}')), answer("new answer")])
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        session = await spawn_session(runtime, llm=llm, tools=[add])
        results = {}

        async def send(text: str, policy: BusyPolicy | None = None) -> None:
            results[text] = await session.send(text, if_busy=policy)

        nursery.start_soon(send, "old")
        await llm.entered.wait()
        nursery.start_soon(send, "new", "interrupt")
        await trio.testing.wait_all_tasks_blocked()
        llm.gate.set()
    assert results["old"].status == "cancelled"
    assert results["old"].error is not None
    assert "interrupted by the new input" in results["old"].error
    assert (results["new"].status, results["new"].text) == ("completed", "new answer")
    assert llm.requests[1].messages[-1] == UserMessage("new")


# -- human input -----------------------------------------------------------------------


async def test_ask_human_parks_the_run_and_a_reply_resumes_it() -> None:
    llm = ScriptedLLM(
        [answer("", call("q1", "ask_human", '{"question": "Which city?"}')), answer("Paris it is")]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human])
        waiting = await session.send("book a trip")
        assert waiting.status == "waiting_for_human"
        (request,) = waiting.human_requests
        assert (request.request_id, request.kind, request.prompt) == (
            "q1",
            "question",
            "Which city?",
        )
        done = await session.reply("q1", "Paris")
    assert (done.status, done.text, done.run_id) == ("completed", "Paris it is", waiting.run_id)
    assert llm.requests[1].messages[-1] == ToolResultMessage(tool_call_id="q1", content="Paris")


async def test_parallel_requests_are_answered_by_id_in_any_order() -> None:
    llm = ScriptedLLM(
        [
            answer(
                "",
                call("q1", "ask_human", '{"question": "Name?"}'),
                call("q2", "ask_human", '{"question": "Age?"}'),
                call("a", "add", '{"a": 1, "b": 1}'),
            ),
            answer("thanks"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human, add])
        waiting = await session.send("register me")
        assert {r.request_id for r in waiting.human_requests} == {"q1", "q2"}
        still = await session.reply("q2", "36")
        assert still.status == "waiting_for_human"
        assert [r.request_id for r in still.human_requests] == ["q1"]
        done = await session.reply("q1", "Ada")
    assert done.status == "completed"
    results = {m.tool_call_id: m.content for m in llm.requests[1].messages if m.role == "tool"}
    assert results == {"a": "2", "q2": "36", "q1": "Ada"}
    assert is_provider_valid(llm.requests[1].messages)


async def test_a_tool_that_needs_approval_waits_then_runs_or_is_denied() -> None:
    llm = ScriptedLLM(
        [
            answer("", call("d1", "delete_file", '{"path": "/tmp/a"}')),
            answer("", call("d2", "delete_file", '{"path": "/etc"}')),
            answer("done"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[delete_file])
        first = await session.send("clean up")
        (request,) = first.human_requests
        assert request.kind == "approval"
        assert request.prompt == 'Allow the tool delete_file to run with {"path": "/tmp/a"}?'
        with pytest.raises(ValueError, match="asks for an approval: answer it with approve"):
            await session.reply("d1", "sure")
        second = await session.approve("d1")
        assert second.human_requests[0].request_id == "d2"
        done = await session.deny("d2", "never touch /etc")
    assert done.status == "completed"
    results = {m.tool_call_id: m for m in llm.requests[2].messages if m.role == "tool"}
    assert results["d1"].content == "deleted /tmp/a"
    assert results["d2"].is_error
    assert "never touch /etc" in results["d2"].content


async def test_a_reply_to_no_open_request_is_a_typed_error() -> None:
    llm = ScriptedLLM([answer("", call("q1", "ask_human", '{"question": "?"}'))])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human], session_id="s")
        await session.send("go")
        with pytest.raises(HumanRequestNotFoundError) as info:
            await session.reply("nope", "x")
    assert str(info.value) == (
        "session 's' is not waiting for request 'nope' (answered already, or its run ended); "
        "open requests: q1"
    )
    assert info.value.code == "session.unknown_request"


async def test_a_bad_ask_human_call_is_an_argument_error_for_the_model() -> None:
    llm = ScriptedLLM([answer("", call("q1", "ask_human", '{"q": 1}')), answer("sorry")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[ask_human])
        result = await session.send("go")
    assert result.status == "completed"
    (reply,) = [m for m in llm.requests[1].messages if m.role == "tool"]
    assert reply.is_error
    assert "invalid arguments for tool 'ask_human'" in reply.content


async def test_a_reply_resumes_the_run_after_the_process_restarted(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    first = ScriptedLLM([answer("", call("q1", "ask_human", '{"question": "Go?"}'))])
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=first, tools=[ask_human], session_id="s")
        waiting = await session.send("deploy")
    assert waiting.status == "waiting_for_human"
    second = ScriptedLLM([answer("deployed")])
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=second, tools=[ask_human], session_id="s")
        state = await session.state()
        assert state.run is not None
        assert [r.request_id for r in state.run.human] == ["q1"]
        done = await session.reply("q1", "yes")
    assert (done.status, done.text, done.run_id) == ("completed", "deployed", waiting.run_id)
    second.assert_complete()


async def test_a_crashed_ask_policy_tool_waits_for_a_human_to_rerun_it() -> None:
    runs: list[str] = []

    @tool(crash_policy="ask")
    def charge(amount: int) -> str:
        """Charge a card (not idempotent: ask before running it again)."""
        runs.append("charged")
        return f"charged {amount}"

    store = InMemoryEventStore()
    failed: list[bool] = []

    class FailFirstFinish:
        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def append(self, stream: str, events: Sequence[NewEvent], expected: int) -> object:
            if not failed and any(e.type == "session.tool_finished" for e in events):
                failed.append(True)
                store.fail_next_commit()
            return await store.append(stream, events, expected)

    llm = ScriptedLLM([answer("", call("c1", "charge", '{"amount": 5}')), answer("paid")])
    async with open_runtime(store=FailFirstFinish(), supervision=FAST_RESTART) as runtime:  # type: ignore[arg-type]
        session = await spawn_session(runtime, llm=llm, tools=[charge])
        waiting = await session.send("pay")
        assert waiting.status == "waiting_for_human"
        (request,) = waiting.human_requests
        assert request.kind == "crash"
        assert "was running when the process stopped" in request.prompt
        done = await session.approve("c1")
    assert done.status == "completed"
    assert runs == ["charged", "charged"]
    kinds = [type(e).__name__ for e in await events_of(store, session)]
    assert kinds.count("ToolStarted") == 2
    assert any(isinstance(e, HumanRequested) for e in await events_of(store, session))


# -- board changes ---------------------------------------------------------------------


async def test_a_watched_board_change_wakes_an_idle_session_once() -> None:
    from actors import open_board

    llm = ScriptedLLM([answer("noted the new plan")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="watcher")
        board = await open_board(runtime, "team")
        await board.watch_actor(session.ref, prefix="plan")
        await board.put("plan", {"step": 1}, author="alice")
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
    (result,) = state.results.values()
    assert (result.status, result.text) == ("completed", "noted the new plan")
    assert llm.requests[0].messages == (
        UserMessage("[board team] 'plan' is now {\"step\":1} (version 1, by alice)"),
    )


async def test_an_empty_send_is_refused_and_an_empty_task_fails_its_run_cleanly() -> None:
    from actors import AgentSpec

    llm = ScriptedLLM([answer("fine")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        with pytest.raises(ValueError, match="input must not be empty"):
            await session.send("")
        child = await session.spawn(AgentSpec(name="blank"), "")
        assert (child.status, child.error) == ("failed", "ValueError: the run has no input")
        assert (await session.send("hello")).status == "completed"


async def test_a_send_is_one_ask_and_a_follow_up_reaches_the_decider_in_one_envelope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Session.send`` asks the actor once (its reply is the run's result), and a
    follow-up arrives as the ``Stamped`` message the decider reads, not wrapped again."""
    from actors._session import _decider as decider
    from actors._session._actor import SessionActor
    from actors._session._steps import Send, Stamped
    from protocols import FollowUp

    received: list[object] = []
    decided: list[object] = []
    receive, handle = SessionActor.receive, decider.handle

    async def counting_receive(self: SessionActor, message: object) -> object:
        received.append(message)
        return await receive(self, message)

    def counting_handle(config: object, state: object, message: object) -> object:
        decided.append(message)
        return handle(config, state, message)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionActor, "receive", counting_receive)
    monkeypatch.setattr(decider, "handle", counting_handle)
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(
            runtime, llm=ScriptedLLM([LLMResponse(content="one"), LLMResponse(content="two")])
        )
        result = await session.send("hello")
        assert result.text == "one"
        asks = [m for m in received if not type(m).__name__.startswith("_")]
        assert [type(m) for m in asks] == [Send]  # no second ask for the result
        received.clear()
        decided.clear()
        assert await session.follow_up("more", id="f1")
        second = await session.wait("fu-f1")  # an idle session's follow-up starts a run
        assert second.text == "two"
    follow_ups = [m for m in decided if isinstance(m, Stamped)]
    assert len(follow_ups) == 1
    assert follow_ups[0] in received  # the message the actor was given, as it was given
    assert follow_ups[0].message == FollowUp(id="f1", content="more")
    assert follow_ups[0].delivery  # the call's token
