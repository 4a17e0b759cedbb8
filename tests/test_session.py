"""The session actor end to end with scripted LLMs, and crash-resume from the log."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import Session, ToolRegistry, spawn_session, tool
from actors.events import AssistantRecorded, ToolFinished
from actors.lowlevel import is_provider_valid, provider_valid
from protocols import (
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import decode_record
from protocols.errors import LLMServerError, ToolNotFoundError
from runtime import AppendResult, EventStore, NewEvent, RecordedEvent, open_runtime
from runtime.lowlevel import CONTINUES
from runtime.supervision import Backoff, Supervision
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM

FAST_RESTART = Supervision(max_restarts=100, within=1, backoff=Backoff(initial=0))


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool
async def slow_echo(text: str, seconds: float) -> str:
    """Echo after a delay."""
    await trio.sleep(seconds)
    return text


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


retry_calls: list[str] = []


@tool(crash_policy="retry")
def fetch(url: str) -> str:
    """Idempotent fetch (retried after a crash)."""
    retry_calls.append(url)
    return f"content of {url}"


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def answer(text: str = "", *calls: ToolCall, tokens: int = 10) -> LLMResponse:
    return LLMResponse(
        content=text,
        tool_calls=calls,
        usage=Usage(prompt_tokens=tokens, completion_tokens=1),
        model="scripted",
    )


async def test_multi_round_tool_use_records_a_valid_transcript() -> None:
    llm = ScriptedLLM(
        [
            answer("", call("c1", "add", '{"a": 2, "b": 3}')),
            answer("", call("c2", "add", '{"a": 5, "b": 10}')),
            answer("the sum is 15"),
        ]
    )
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add], system_prompt="Be exact.")
        result = await session.send("add 2, 3 and 10")
        state = await session.state()
    llm.assert_complete()
    assert (result.status, result.text, result.rounds) == ("completed", "the sum is 15", 3)
    assert result.usage == Usage(prompt_tokens=30, completion_tokens=3)
    assert [type(m).__name__ for m in state.transcript] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert state.transcript[2] == ToolResultMessage(tool_call_id="c1", content="5")
    first, last = llm.requests[0], llm.requests[-1]
    assert first.messages[0] == SystemMessage("Be exact.")
    assert [t.name for t in first.tools] == ["add"]
    assert last.messages[-1] == ToolResultMessage(tool_call_id="c2", content="15")
    assert all(is_provider_valid(r.messages[1:]) for r in llm.requests)


async def test_tool_calls_of_one_round_run_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    llm = ScriptedLLM(
        [
            answer(
                "",
                call("a", "slow_echo", '{"text": "one", "seconds": 5}'),
                call("b", "slow_echo", '{"text": "two", "seconds": 5}'),
            ),
            answer("done"),
        ]
    )
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[slow_echo])
        start = trio.current_time()
        result = await session.send("echo twice")
        assert trio.current_time() - start == pytest.approx(5)
    assert result.status == "completed"
    results = [m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [("a", "one"), ("b", "two")]


async def test_bad_arguments_and_tool_errors_go_back_to_the_model() -> None:
    llm = ScriptedLLM(
        [
            answer(
                "",
                call("bad-json", "add", '{"a": 1,'),
                call("bad-type", "add", '{"a": "x", "b": 2}'),
                call("boom", "explode", '{"reason": "disk full"}'),
                call("nope", "missing_tool", "{}"),
            ),
            answer("I could not do it"),
        ]
    )
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add, explode])
        result = await session.send("try")
    assert result.status == "completed"
    results = {
        m.tool_call_id: m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)
    }
    assert all(m.is_error for m in results.values())
    assert "not valid JSON" in results["bad-json"].content
    assert "$.a: expected integer" in results["bad-type"].content
    assert "RuntimeError" in results["boom"].content
    assert "disk full" in results["boom"].content
    assert "no tool named 'missing_tool'" in results["nope"].content


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


async def _tool_finished(store: InMemoryEventStore, session: Session) -> list[ToolFinished]:
    records = await store.read(f"session/{session.id}")
    return [e for e in map(decode_record, records) if isinstance(e, ToolFinished)]


async def test_deeply_nested_arguments_are_invalid_and_the_run_goes_on() -> None:
    """Arguments nested 10,000 deep are invalid arguments the model reads, not a crash."""
    deep = '{"text": ' + "[" * 10_000 + "]" * 10_000 + "}"
    llm = ScriptedLLM([answer("", call("deep", "echo", deep)), answer("I will not nest")])
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[echo])
        bystander = await spawn_session(runtime, llm=ScriptedLLM([answer("fine")]))
        result = await session.send("nest")
        other = await bystander.send("hello")
        (finished,) = await _tool_finished(store, session)
    llm.assert_complete()
    assert (result.status, result.text) == ("completed", "I will not nest")
    assert (other.status, other.text) == ("completed", "fine")
    expected = (
        "invalid arguments for tool 'echo': $: arrays and objects nest more than 128 levels deep"
    )
    assert llm.requests[1].messages[-1] == ToolResultMessage(
        tool_call_id="deep", content=expected, is_error=True
    )
    assert (finished.outcome.status, finished.outcome.error_code) == (
        "invalid_arguments",
        "tool.invalid_args",
    )


async def test_a_lone_surrogate_in_arguments_is_invalid_and_the_model_is_asked_once_more() -> None:
    """An LLM handing over a lone surrogate (not a JSON escape) gets invalid arguments back.

    The log cannot encode a lone surrogate: the call is recorded with it escaped as JSON
    writes it, the model reads ``tool.invalid_args``, and it is asked once more, not again
    and again by a crash-looping session.
    """

    def model(request: LLMRequest) -> LLMResponse:
        if isinstance(request.messages[-1], ToolResultMessage):
            return answer("sorry")
        return answer("a \udc00 here", call("c1", "echo", '{"text": "a\ud800b"}'))

    llm = FunctionLLM(model)
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[echo])
        result = await session.send("echo")
        (finished,) = await _tool_finished(store, session)
        state = await session.state()
    assert (result.status, result.text) == ("completed", "sorry")
    assert len(llm.requests) == 2
    recorded = state.transcript[1]
    assert isinstance(recorded, AssistantMessage)
    assert recorded.content == "a \ufffd here"
    assert recorded.tool_calls == (call("c1", "echo", '{"text": "a\\ud800b"}'),)
    (result_message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert result_message.is_error
    assert result_message.content == (
        "invalid arguments for tool 'echo': $: not valid JSON "
        "(no low surrogate in string: line 1 column 12 (char 11))"
    )
    assert (finished.outcome.status, finished.outcome.error_code) == (
        "invalid_arguments",
        "tool.invalid_args",
    )


@tool
def lone_surrogate() -> str:
    """Return text holding a lone surrogate."""
    return "x\udc00y"


async def test_a_tool_result_with_a_lone_surrogate_is_recorded_with_a_replacement() -> None:
    """A tool's text the log cannot encode is recorded with U+FFFD, with no crash."""
    llm = ScriptedLLM([answer("", call("c1", "lone_surrogate", "{}")), answer("ok")])
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[lone_surrogate])
        result = await session.send("go")
    assert (result.status, result.text) == ("completed", "ok")
    assert llm.requests[1].messages[-1] == ToolResultMessage(tool_call_id="c1", content="x\ufffdy")


async def test_round_limit_stops_the_run() -> None:
    loop_forever = FunctionLLM(
        lambda request: answer("", call(f"c{len(request.messages)}", "add", '{"a": 1, "b": 1}'))
    )
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=loop_forever, tools=[add], max_rounds=3)
        result = await session.send("loop")
        second = await session.send("loop again", max_rounds=1)
    assert (result.status, result.rounds) == ("hit_round_limit", 3)
    assert (second.status, second.rounds) == ("hit_round_limit", 1)
    assert len(loop_forever.requests) == 4


async def test_a_provider_error_fails_the_run_with_its_code_and_the_session_goes_on() -> None:
    llm = ScriptedLLM([LLMServerError("upstream 503", status=503), answer("fine now")])
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm)
        failed = await session.send("hello")
        ok = await session.send("again")
    assert failed.status == "failed"
    assert failed.error == "llm.server: upstream 503"
    assert (ok.status, ok.text) == ("completed", "fine now")


async def test_per_send_overrides() -> None:
    llm = ScriptedLLM([answer("a"), answer("b")])
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(
            runtime, llm=llm, tools=[add, explode], system_prompt="default"
        )
        await session.send("one", tools=["add"], system_prompt="override")
        await session.send("two")
        with pytest.raises(ToolNotFoundError) as info:
            await session.send("three", tools=["nope"])
        assert info.value.code == "tool.not_found"
        assert str(info.value) == "no tool named 'nope'; available tools: add, explode"
        with pytest.raises(ValueError, match="max_rounds must be >= 1, got 0"):
            await session.send("four", max_rounds=0)
    assert llm.requests[0].messages[0] == SystemMessage("override")
    assert [t.name for t in llm.requests[0].tools] == ["add"]
    assert llm.requests[1].messages[0] == SystemMessage("default")
    assert [t.name for t in llm.requests[1].tools] == ["add", "explode"]


async def test_sends_during_a_run_are_queued_and_run_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: LLMRequest) -> LLMResponse:
        await trio.sleep(1)
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        return answer(f"re: {last.content[0].text}")  # type: ignore[union-attr]

    llm = FunctionLLM(slow)
    results: dict[str, str] = {}
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm)

        async def send(text: str) -> None:
            results[text] = (await session.send(text)).text

        async with trio.open_nursery() as nursery:
            for text in ("first", "second", "third"):
                nursery.start_soon(send, text)
                await trio.sleep(0.1)
    assert results == {"first": "re: first", "second": "re: second", "third": "re: third"}
    assert trio.current_time() == pytest.approx(3.0)  # three serial one-second runs


def test_provider_valid_closes_open_calls_and_drops_orphans() -> None:
    calls = (call("x", "add", "{}"), call("y", "add", "{}"))
    messages = (
        UserMessage("hi"),
        AssistantMessage(tool_calls=calls),
        ToolResultMessage(tool_call_id="y", content="2"),
        ToolResultMessage(tool_call_id="zzz", content="orphan"),
        UserMessage("next"),
    )
    fixed = provider_valid(messages)
    assert [type(m).__name__ for m in fixed] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "UserMessage",
    ]
    assert fixed[2] == ToolResultMessage(tool_call_id="y", content="2")
    closing = fixed[3]
    assert isinstance(closing, ToolResultMessage)
    assert (closing.tool_call_id, closing.is_error) == ("x", True)
    assert closing.content.startswith("interrupted:")
    assert not is_provider_valid(messages)
    assert is_provider_valid(fixed)


# -- crash resume ---------------------------------------------------------------------


class SpyStore:
    """Delegates to an in-memory store; counts reads and can fail chosen appends."""

    def __init__(self, fail_when: Callable[[int, list[NewEvent]], bool] | None = None) -> None:
        self.inner = InMemoryEventStore()
        self.fail_when = fail_when
        self.appends = 0
        self.reads = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        self.appends += 1
        batch = list(events)
        if self.fail_when is not None and self.fail_when(self.appends, batch):
            self.inner.fail_next_commit()
        return await self.inner.append(stream, batch, expected_version)

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        self.reads += 1
        return await self.inner.read(stream, from_version, limit=limit)


def spawn_args(store: SpyStore) -> EventStore:
    return store  # type: ignore[return-value]  # a duck-typed EventStore


@tool(crash_policy="retry")
def plus(a: int, b: int) -> int:
    """Add two integers (idempotent, so re-run after a crash)."""
    return a + b


def conversation_llm(plan: list[int], store: SpyStore, stream: str) -> FunctionLLM:
    """Round i asks for plan[i] `plus` calls; after the plan, a final answer.

    Answers depend only on the request, like a deterministic model's; before answering it
    checks the log: a request whose answer is already recorded must never come again.
    """

    async def reply(request: LLMRequest) -> LLMResponse:
        records = await store.inner.read(stream)
        recorded = {
            event.request_fingerprint
            for event in map(decode_record, records)
            if isinstance(event, AssistantRecorded)
        }
        assert request.fingerprint() not in recorded, "a recorded answer was requested again"
        assert is_provider_valid(request.messages)
        round_index = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if round_index < len(plan):
            calls = [
                call(f"r{round_index}c{i}", "plus", f'{{"a": {round_index}, "b": {i}}}')
                for i in range(plan[round_index])
            ]
            return answer(f"round {round_index}", *calls, tokens=round_index + 1)
        return answer("final", tokens=100)

    return FunctionLLM(reply)


async def run_conversation(plan: list[int], crash_at: int | None) -> tuple[object, Usage]:
    store = SpyStore(lambda count, _batch: count == crash_at)
    llm = conversation_llm(plan, store, "session/s1")
    async with open_runtime(store=spawn_args(store), seed=1, supervision=FAST_RESTART) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[plus], session_id="s1")
        result = await session.send("go", max_rounds=len(plan) + 1)
        state = await session.state()
    assert result.status == "completed"
    return state.transcript, result.usage


@settings(max_examples=examples(100), deadline=None)
@given(
    plan=st.lists(st.integers(0, 3), min_size=0, max_size=4),
    crash_at=st.integers(1, 30),
)
def test_crash_anywhere_resumes_to_the_same_transcript_and_usage(
    plan: list[int], crash_at: int
) -> None:
    """A failed append crashes the actor; the restarted one folds the log and finishes."""

    async def both() -> None:
        clean_transcript, clean_usage = await run_conversation(plan, None)
        transcript, usage = await run_conversation(plan, crash_at)
        assert transcript == clean_transcript
        assert usage == clean_usage

    trio.run(both)


async def test_a_tool_left_open_by_a_crash_follows_its_crash_policy() -> None:
    """ToolStarted is recorded, the ToolFinished append fails: abort closes, retry reruns."""
    retry_calls.clear()
    failed: list[int] = []

    def first_tool_finished(count: int, batch: list[NewEvent]) -> bool:
        if failed or not batch or batch[0].type != "session.tool_finished":
            return False
        failed.append(count)
        return True

    store = SpyStore(first_tool_finished)
    llm = ScriptedLLM(
        [
            answer("", call("a1", "add", '{"a": 1, "b": 1}'), call("f1", "fetch", '{"url": "u"}')),
            answer("ok"),
        ]
    )
    async with open_runtime(store=spawn_args(store), seed=1, supervision=FAST_RESTART) as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add, fetch], session_id="s")
        result = await session.send("go")
    llm.assert_complete()
    assert result.status == "completed"
    results = {
        m.tool_call_id: m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)
    }
    assert results["a1"].is_error
    assert "the process stopped while this tool ran" in results["a1"].content
    assert (results["f1"].content, results["f1"].is_error) == ("content of u", False)
    assert retry_calls == ["u", "u"]


async def test_a_send_reads_nothing_back_from_the_log() -> None:
    """History growth: state is incremental; a send never re-reads the stream."""
    store = SpyStore()
    llm = FunctionLLM(lambda request: answer("ok"))
    async with open_runtime(store=spawn_args(store), seed=1) as runtime:
        session: Session = await spawn_session(runtime, llm=llm, tools=ToolRegistry.of(add))
        reads_after_start = store.reads
        for i in range(200):
            await session.send(f"message {i}")
        assert store.reads == reads_after_start
        state = await session.state()
    assert len(state.transcript) == 400
    assert len(state.results) == 200


def test_session_events_round_trip_through_the_codec() -> None:
    from protocols.codec import encode

    async def scenario() -> list[object]:
        store = InMemoryEventStore()
        llm = ScriptedLLM([answer("", call("c", "add", '{"a": 1, "b": 2}')), answer("3")])
        async with open_runtime(store=store, seed=1) as runtime:
            session = await spawn_session(runtime, llm=llm, tools=[add], session_id="rt")
            await session.send("1+2")
        return [decode_record(r) for r in await store.read("session/rt")]

    events = trio.run(scenario)
    assert len(events) == 7
    for event in events:
        encoded = encode(event)
        from protocols.codec import decode

        assert decode(encoded.type, encoded.schema_version, encoded.data) == event
        assert attrs.has(type(event))


async def test_a_new_session_writes_nothing_until_its_first_send() -> None:
    """Creating a session costs no commit: its ``SessionCreated`` is the first event of
    its first send's first append (one commit), and its state before that is the fold of
    its (empty) log. A session resumed by id is recovered from its log as before."""
    store = InMemoryEventStore()
    llm = ScriptedLLM([LLMResponse(content="hi", usage=Usage(prompt_tokens=1))] * 2)
    async with open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(runtime, llm=llm, system_prompt="Be brief.")
        assert await store.read_all() == []
        assert (await session.state()).session_id == ""  # nothing logged, nothing shown
        assert (await session.send("hello")).text == "hi"
        records = await store.read(f"session/{session.id}")
        assert [r.type for r in records][:2] == ["session.created", "session.run_started"]
        assert records[0].metadata == CONTINUES  # one append: RunStarted's
        assert (await session.state()).session_id == session.id
        again = await spawn_session(runtime, llm=llm, session_id="other")
        assert (await again.state()).session_id == ""
    async with open_runtime(store=store, seed=2) as runtime:
        resumed = await spawn_session(runtime, llm=llm, session_id=session.id)
        state = await resumed.state()
        assert (state.session_id, state.system_prompt) == (session.id, "Be brief.")


async def test_an_idle_session_passivates_and_its_next_send_folds_it_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``passivate_after``: idle that long, the session's actor stops (no new start is
    counted as a crash or restart); the next send starts it again from its log, with the
    whole conversation."""
    seen: list[int] = []

    def answer(request: LLMRequest) -> LLMResponse:
        seen.append(len(request.messages))
        return LLMResponse(content=f"answer {len(seen)}", usage=Usage(prompt_tokens=1))

    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            session = await spawn_session(runtime, llm=FunctionLLM(answer), passivate_after=60)
            assert (await session.send("one")).text == "answer 1"
            await trio.sleep(30)
            assert (await session.send("two")).text == "answer 2"
            await trio.sleep(120)  # idle: passivated
            assert (await session.send("three")).text == "answer 3"
            state = await session.state()
            lifecycle = []
            while True:
                try:
                    lifecycle.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
    starts = [e.incarnation for e in lifecycle if type(e).__name__ == "ActorStarted"]
    assert starts == [1, 2]
    assert [type(e).__name__ for e in lifecycle].count("ActorCrashed") == 0
    assert seen == [1, 3, 5]  # the third send saw the whole conversation
    assert len(state.results) == 3


async def test_passivate_after_must_be_positive() -> None:
    async with open_runtime() as runtime:
        with pytest.raises(ValueError, match="passivate_after must be a positive number"):
            llm = FunctionLLM(lambda r: LLMResponse())
            await spawn_session(runtime, llm=llm, passivate_after=0)
