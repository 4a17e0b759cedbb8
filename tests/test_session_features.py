"""Session features around the tool loop: structured output, budgets, hooks, observers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from _gated_store import GatedStore

import actors._session._transcript
from actors import Budget, Price, spawn_session, tool
from actors.events import (
    DeltaReceived,
    LLMCallFinished,
    Observation,
    RoundBegan,
    RunBegan,
    RunEnded,
    ToolCallBegan,
    ToolCallFinished,
    UsageUpdated,
)
from actors.lowlevel import is_provider_valid
from actors.observe import HookContext, HookVetoError, LLMCallNext, ToolCallNext
from protocols import (
    LLMRequest,
    LLMResponse,
    ResponseFormat,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    Usage,
)
from protocols.codec import decode_record
from protocols.errors import ConfigError, LLMServerError, ToolDefinitionError
from protocols.streaming import LLMStream, StreamDelta, TextDelta
from runtime import open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM

PERSON = ResponseFormat(
    name="person",
    schema={
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep, then say so."""
    await trio.sleep(seconds)
    return "rested"


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def answer(text: str = "", *calls: ToolCall, tokens: int = 10, model: str = "m") -> LLMResponse:
    return LLMResponse(
        content=text,
        tool_calls=calls,
        usage=Usage(prompt_tokens=tokens, completion_tokens=2),
        model=model,
    )


# -- structured output -----------------------------------------------------------------


async def test_a_matching_answer_is_parsed_into_output() -> None:
    """The schema goes to the provider; a matching answer comes back parsed."""
    llm = ScriptedLLM([answer('{"name": "Ada", "age": 36}')])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        result = await session.send("who?", response_format=PERSON)
    assert result.status == "completed"
    assert result.output == {"name": "Ada", "age": 36}
    assert llm.requests[0].response_format == PERSON
    llm.assert_complete()


async def test_a_fenced_answer_is_accepted() -> None:
    """Small models wrap JSON in a Markdown fence; the fence is not part of the value."""
    llm = ScriptedLLM([answer('```json\n{"name": "Ada", "age": 36}\n```')])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, response_format=PERSON)
        result = await session.send("who?")
    assert result.output == {"name": "Ada", "age": 36}


async def test_an_invalid_answer_gets_one_repair_round() -> None:
    """The model is told exactly what was wrong and answers again, past the round limit."""
    llm = ScriptedLLM([answer('{"name": "Ada"}'), answer('{"name": "Ada", "age": 36}')])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        result = await session.send("who?", response_format=PERSON, max_rounds=1)
    assert (result.status, result.rounds, result.output) == (
        "completed",
        2,
        {"name": "Ada", "age": 36},
    )
    repair = llm.requests[1].messages[-1]
    assert repair.role == "user"
    assert "does not match the required JSON schema" in repair.text
    assert "age" in repair.text


async def test_a_second_invalid_answer_fails_with_the_raw_text_kept() -> None:
    """After the one repair round the run fails with a typed code; nothing is asked again."""
    llm = ScriptedLLM([answer("not json"), answer('{"name": 7, "age": 1}')])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        result = await session.send("who?", response_format=PERSON)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("session.output_invalid: the answer does not match")
    assert "$.name" in result.error
    assert result.text == '{"name": 7, "age": 1}'
    assert result.output is None
    assert "not valid JSON" in llm.requests[1].messages[-1].text
    llm.assert_complete()


async def test_a_malformed_schema_is_refused_at_send() -> None:
    llm = ScriptedLLM([])
    bad = ResponseFormat(name="bad", schema={"type": "nonsense"})
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        with pytest.raises(ToolDefinitionError, match="nonsense"):
            await session.send("x", response_format=bad)
        with pytest.raises(ToolDefinitionError, match="nonsense"):
            await spawn_session(runtime, llm=llm, response_format=bad)


# -- budgets ---------------------------------------------------------------------------


async def test_a_token_budget_stops_the_run_at_a_round_boundary() -> None:
    """The call that crosses the limit finishes its tools; the next call is not made."""
    llm = ScriptedLLM(
        [
            answer("", call("c1", "add", '{"a": 1, "b": 1}'), tokens=50),
            answer("", call("c2", "add", '{"a": 2, "b": 2}'), tokens=50),
            answer("never asked"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add])
        result = await session.send("go", budget=Budget(max_tokens=100))
        state = await session.state()
    assert result.status == "budget_exceeded"
    assert result.error == "tokens: 104 used, the budget is 100"
    assert result.rounds == 2
    assert result.usage.total_tokens == 104
    assert len(llm.requests) == 2
    assert is_provider_valid(state.transcript)
    assert isinstance(state.transcript[-1], ToolResultMessage)


async def test_a_cost_budget_uses_the_price_table_and_dated_model_names() -> None:
    prices = {"gpt-x": Price(prompt=1_000_000, completion=0)}  # 1 unit per prompt token
    llm = ScriptedLLM(
        [
            answer("", call("c1", "add", '{"a": 1, "b": 1}'), tokens=3, model="gpt-x-2026-01"),
            answer("never asked"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add], prices=prices)
        result = await session.send("go", budget=Budget(max_cost=2.5))
    assert result.status == "budget_exceeded"
    assert result.error == "cost: 3 spent, the budget is 2.5"


def test_price_cost_counts_cached_tokens_at_their_rate() -> None:
    price = Price(prompt=2.0, completion=10.0, cached_prompt=0.5)
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=400_000, completion_tokens=100_000)
    assert price.cost(usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 10.0)


async def test_a_cost_budget_without_prices_is_refused() -> None:
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=ScriptedLLM([]))
        with pytest.raises(ConfigError, match="a cost budget needs prices"):
            await session.send("x", budget=Budget(max_cost=1.0))


async def test_a_wall_time_budget_is_checked_before_each_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Virtual time: a tool that naps past the budget ends the run before the next call."""
    llm = ScriptedLLM([answer("", call("c1", "nap", '{"seconds": 120}')), answer("late")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[nap], budget=Budget(max_seconds=60))
        result = await session.send("go")
    assert result.status == "budget_exceeded"
    assert result.error == "wall time: the budget is 60 s"
    assert len(llm.requests) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be positive or None, got 0"),
        ({"max_cost": -1.0}, "max_cost must be positive or None, got -1.0"),
        ({"max_seconds": 0.0}, "max_seconds must be positive or None, got 0.0"),
    ],
)
def test_budget_limits_must_be_positive(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_prices_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="prompt must be >= 0, got -1"):
        Price(prompt=-1, completion=0)


# -- hooks -----------------------------------------------------------------------------


async def test_an_llm_hook_can_modify_the_request_and_see_the_response() -> None:
    seen: list[tuple[HookContext, str]] = []

    async def add_rule(
        request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        changed = LLMRequest(
            messages=(SystemMessage("be brief"), *request.messages), model=request.model
        )
        response = await call_next(changed)
        seen.append((context, response.content))
        return response

    llm = ScriptedLLM([answer("brief")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, llm_hooks=[add_rule], session_id="s")
        result = await session.send("hi")
    assert result.text == "brief"
    assert llm.requests[0].messages[0] == SystemMessage("be brief")
    assert seen == [(HookContext(session_id="s", run_id=result.run_id, round=1), "brief")]


async def test_an_llm_hook_can_short_circuit_the_call() -> None:
    async def cached(
        request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        return answer("from cache")

    llm = ScriptedLLM([])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, llm_hooks=[cached])
        result = await session.send("hi")
    assert (result.status, result.text) == ("completed", "from cache")
    assert llm.requests == []


async def test_hooks_run_in_order_first_outermost() -> None:
    order: list[str] = []

    def named(name: str) -> object:
        async def hook(
            request: LLMRequest, call_next: LLMCallNext, context: HookContext
        ) -> LLMResponse:
            order.append(f"{name} in")
            response = await call_next(request)
            order.append(f"{name} out")
            return response

        return hook

    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime,
            llm=ScriptedLLM([answer("x")]),
            llm_hooks=[named("a"), named("b")],  # type: ignore[list-item]
        )
        await session.send("hi")
    assert order == ["a in", "b in", "b out", "a out"]


async def test_an_llm_hook_veto_fails_the_run_and_the_session_goes_on() -> None:
    vetoing = True

    async def guard(
        request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        if vetoing:
            raise HookVetoError("no calls after hours")
        return await call_next(request)

    llm = ScriptedLLM([answer("fine")])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, llm_hooks=[guard])
        vetoed = await session.send("hi")
        vetoing = False
        later = await session.send("again")
    assert vetoed.status == "failed"
    assert vetoed.error == "session.hook_vetoed: vetoed by a hook: no calls after hours"
    assert (later.status, later.text) == ("completed", "fine")


async def test_a_hook_error_surfaces_as_the_run_failure() -> None:
    async def broken(
        request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        raise KeyError("missing setting")

    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=ScriptedLLM([]), llm_hooks=[broken])
        result = await session.send("hi")
    assert (result.status, result.error) == ("failed", "KeyError: 'missing setting'")


async def test_tool_hooks_veto_modify_and_short_circuit() -> None:
    """A veto reaches the model as a denied result; a rewrite and a canned outcome too."""

    async def policy(call: ToolCall, call_next: ToolCallNext, context: HookContext) -> ToolOutcome:
        if call.id == "veto":
            raise HookVetoError("adding is forbidden today")
        if call.id == "canned":
            return ToolOutcome(call_id=call.id, tool_name=call.name, status="ok", content="42")
        return await call_next(ToolCall(id=call.id, name=call.name, arguments='{"a": 5, "b": 5}'))

    llm = ScriptedLLM(
        [
            answer(
                "",
                call("veto", "add", '{"a": 1, "b": 1}'),
                call("canned", "add", '{"a": 1, "b": 1}'),
                call("rewrite", "add", '{"a": 1, "b": 1}'),
            ),
            answer("done"),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add], tool_hooks=[policy])
        result = await session.send("go")
    assert result.status == "completed"
    results = {m.tool_call_id: m for m in llm.requests[1].messages if m.role == "tool"}
    assert results["veto"].is_error
    assert "adding is forbidden today" in results["veto"].content
    assert (results["canned"].content, results["canned"].is_error) == ("42", False)
    assert (results["rewrite"].content, results["rewrite"].is_error) == ("10", False)


async def test_a_tool_hook_error_fails_the_run_and_closes_its_calls() -> None:
    async def broken(call: ToolCall, call_next: ToolCallNext, context: HookContext) -> ToolOutcome:
        raise RuntimeError("hook bug")

    llm = ScriptedLLM([answer("", call("c1", "add", '{"a": 1, "b": 1}'))])
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, tools=[add], tool_hooks=[broken])
        result = await session.send("go")
        state = await session.state()
    assert (result.status, result.error) == ("failed", "RuntimeError: hook bug")
    assert state.run is None
    assert is_provider_valid(state.transcript)
    closing = state.transcript[-1]
    assert isinstance(closing, ToolResultMessage)
    assert closing.is_error


# -- observers and streaming -----------------------------------------------------------


async def test_the_model_is_asked_while_the_run_start_commits_but_nobody_hears_before() -> None:
    """A model call goes out while the events that ask for it are committed (it changes
    nothing outside the session); its answer is recorded after them, and observers hear
    of the run and the round only once the run's start is in the log."""
    store = GatedStore("session.run_started")
    asked: list[int] = []
    seen: list[Observation] = []

    def model(request: LLMRequest) -> LLMResponse:
        asked.append(store.waiting if not store.gate.is_set() else 0)
        return LLMResponse(content="hello")

    async with open_runtime(store=store.as_store()) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(model), observers=[seen.append], session_id="early"
        )
        async with trio.open_nursery() as nursery:
            results: list[str] = []

            async def send() -> None:
                results.append((await session.send("hi")).text)

            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert asked == [1]  # asked while the first append is held
            assert seen == []
            store.gate.set()
        logged = [r.type for r in await store.inner.read("session/early")]
    assert results == ["hello"]
    assert [type(o).__name__ for o in seen][:2] == ["RunBegan", "RoundBegan"]
    assert logged.index("session.run_started") < logged.index("session.assistant")


async def test_observers_see_the_run_in_order_with_live_deltas() -> None:
    seen: list[Observation] = []
    store = InMemoryEventStore()
    llm = ScriptedLLM(
        [answer("", call("c1", "add", '{"a": 1, "b": 2}')), answer("the answer is three")],
        chunk_size=4,
    )
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=llm, tools=[add], observers=[seen.append], session_id="obs"
        )
        result = await session.send("1+2?")
    kinds = [type(o).__name__ for o in seen if not isinstance(o, DeltaReceived)]
    assert kinds == [
        "RunBegan",
        "RoundBegan",
        "LLMCallFinished",
        "UsageUpdated",
        "ToolCallBegan",
        "ToolCallFinished",
        "RoundBegan",
        "LLMCallFinished",
        "UsageUpdated",
        "RunEnded",
    ]
    assert isinstance(seen[0], RunBegan)
    assert seen[0].input == "1+2?"
    streamed = "".join(
        o.delta.text for o in seen if isinstance(o, DeltaReceived) and o.delta.type == "text"
    )
    assert streamed == "the answer is three"
    assert sum(isinstance(o, DeltaReceived) and o.delta.type == "text" for o in seen) == 5
    finished = [o for o in seen if isinstance(o, LLMCallFinished)]
    assert [(f.round, f.tool_calls) for f in finished] == [(1, 1), (2, 0)]
    usage = [o for o in seen if isinstance(o, UsageUpdated)]
    assert usage[-1].run_usage == result.usage
    assert next(o for o in seen if isinstance(o, ToolCallBegan)).name == "add"
    assert next(o for o in seen if isinstance(o, ToolCallFinished)).outcome.content == "3"
    assert isinstance(seen[-1], RunEnded)
    assert seen[-1].result == result
    # Only whole answers are in the log, never the deltas.
    events = [decode_record(r) for r in await store.read("session/obs")]
    assert [type(e).__name__ for e in events].count("AssistantRecorded") == 2


class _BurstLLM:
    """A model whose whole answer arrives in one read: its stream hands out every delta
    without a schedule point between them, counting how many it has handed out."""

    def __init__(self) -> None:
        self.handed_out = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise AssertionError("observed sessions stream")

    def stream(self, request: LLMRequest) -> LLMStream:
        async def source() -> AsyncIterator[StreamDelta | LLMResponse]:
            await trio.lowlevel.checkpoint()
            for word in ("one ", "two ", "three"):
                self.handed_out += 1
                yield TextDelta(word)
            yield LLMResponse(content="one two three")

        self.handed_out = 0
        return LLMStream(source)


async def test_a_first_delta_reaches_observers_before_the_rest_of_its_burst() -> None:
    """Time to first token: the observers run on the first delta of a read before the
    session turns to the next one, whatever order Trio runs a batch in."""
    llm = _BurstLLM()
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        for _ in range(24):  # a 50 % chance each, if only one order worked
            first_seen_at: list[int] = []
            with session.observe(buffer=64) as observations:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.send, "count")
                    async for observation in observations:
                        if isinstance(observation, DeltaReceived) and not first_seen_at:
                            first_seen_at.append(llm.handed_out)
                        if isinstance(observation, RunEnded):
                            break
            assert first_seen_at == [1]


async def test_an_observer_error_is_contained_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(observation: Observation) -> None:
        raise ValueError("observer bug")

    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=ScriptedLLM([answer("ok")]), observers=[broken])
        with caplog.at_level(logging.WARNING, logger="powertrio.session"):
            result = await session.send("hi")
    assert result.status == "completed"
    assert session.observer_errors > 3
    assert "session observer" in caplog.text
    assert "observer bug" in caplog.text


async def test_a_watched_model_call_fails_with_the_typed_error_not_a_group(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With an observer the model's answer streams inside a nursery of the session; its
    failure is still the provider's typed error, in the result and in the log line."""

    def down(request: LLMRequest) -> LLMResponse:
        raise LLMServerError("openai: HTTP 503: try later", status=503)

    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(down), observers=[lambda observation: None]
        )
        with caplog.at_level(logging.ERROR, logger="powertrio.session"):
            result = await session.send("hi")
    assert (result.status, result.error_code) == ("failed", "llm.server")
    (record,) = [r for r in caplog.records if r.name == "powertrio.session"]
    assert record.getMessage().endswith("raised LLMServerError")
    assert record.exc_info is not None and type(record.exc_info[1]) is LLMServerError


async def test_a_failed_tool_round_logs_the_error_itself_not_a_group(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool hook's bug ends the run with its own class as the code, and the log line
    names and carries that error, not the nursery's group around it."""

    async def broken(call: ToolCall, run: ToolCallNext, context: HookContext) -> ToolOutcome:
        raise RuntimeError("hook bug")

    def model(request: LLMRequest) -> LLMResponse:
        return LLMResponse(tool_calls=[ToolCall(id="c", name="add", arguments='{"a": 1, "b": 2}')])

    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime,
            llm=FunctionLLM(model),
            tools=[add],
            tool_hooks=[broken],
            observers=[lambda observation: None],
        )
        with caplog.at_level(logging.ERROR, logger="powertrio.session"):
            result = await session.send("go")
    assert (result.status, result.error_code) == ("failed", "RuntimeError")
    (record,) = [r for r in caplog.records if r.name == "powertrio.session"]
    assert record.getMessage().endswith("raised RuntimeError")
    assert record.exc_info is not None and type(record.exc_info[1]) is RuntimeError


async def test_observe_yields_a_channel_and_streams_only_while_open() -> None:
    llm = ScriptedLLM([answer("streamed answer"), answer("plain")], chunk_size=5)
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        with session.observe() as observations:
            result = await session.send("one")
            received: list[Observation] = []
            while True:
                observation = observations.receive_nowait()
                received.append(observation)
                if isinstance(observation, RunEnded):
                    break
        assert result.text == "streamed answer"
        rounds = [o for o in received if isinstance(o, RoundBegan)]
        assert len(rounds) == 1
        assert any(isinstance(o, DeltaReceived) for o in received)
        streams_before = llm.streamed
        await session.send("two")
    assert llm.streamed == streams_before  # nobody observing: a plain completion


# -- history growth --------------------------------------------------------------------


async def test_a_send_hashes_only_its_own_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """History growth: building a request never re-hashes or re-pairs the history."""
    hashed: list[int] = []
    chain = actors._session._transcript.chain_messages

    def counting(digest: str, messages: object) -> str:
        batch = tuple(messages)  # type: ignore[call-overload]
        hashed.append(len(batch))
        return chain(digest, batch)

    monkeypatch.setattr(actors._session._transcript, "chain_messages", counting)

    def respond(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].role == "tool":
            return answer("done")
        return answer("", call("c", "add", '{"a": 1, "b": 2}'))

    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(respond), tools=[add])
        per_send: list[int] = []
        for i in range(60):
            before = sum(hashed)
            await session.send(f"message {i}")
            per_send.append(sum(hashed) - before)
    assert set(per_send) == {4}  # user, assistant, tool result, assistant


class _SpawnCounter(trio.abc.Instrument):
    """Counts the tasks Trio starts while it is installed."""

    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def test_a_watched_model_call_starts_no_task_of_its_own() -> None:
    """Time to first token: watching a session costs its model call no task beside it.
    The round is told when the run's start is logged, by the actor that logs it, and the
    first delta waits for that log only while it is not there yet."""
    llm = ScriptedLLM([answer("first"), answer("second"), answer("third")], chunk_size=2)
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm)
        await session.send("warm up")  # the session's actor and its step runner exist
        counter = _SpawnCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            await session.send("unwatched")
            unwatched, counter.spawned = counter.spawned, 0
            seen: list[Observation] = []
            with session.observe(buffer=64) as observations:
                result = await session.send("watched")
                while True:
                    observation = observations.receive_nowait()
                    seen.append(observation)
                    if isinstance(observation, RunEnded):
                        break
            watched = counter.spawned
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert result.text == "third"
    assert [type(o).__name__ for o in seen if not isinstance(o, DeltaReceived)] == [
        "RunBegan",
        "RoundBegan",
        "LLMCallFinished",
        "UsageUpdated",
        "RunEnded",
    ]
    assert (
        "".join(
            o.delta.text for o in seen if isinstance(o, DeltaReceived) and o.delta.type == "text"
        )
        == "third"
    )
    assert watched == unwatched


async def test_a_delta_that_comes_before_its_run_is_logged_waits_for_the_log() -> None:
    """A streamed model call may go out while the events that ask for it commit; nobody
    hears of its round or its deltas before they are in the log, and then in order."""
    store = GatedStore("session.run_started")
    seen: list[tuple[str, bool]] = []
    llm = ScriptedLLM([answer("streamed before the log")], chunk_size=4)

    def watch(observation: Observation) -> None:
        seen.append((type(observation).__name__, store.gate.is_set()))

    async with open_runtime(store=store.as_store()) as runtime:
        session = await spawn_session(runtime, llm=llm, observers=[watch])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.send, "hi")
            await trio.testing.wait_all_tasks_blocked()
            assert len(llm.requests) == 1  # the request is out, its run not logged yet
            assert seen == []
            store.gate.set()
    kinds = [kind for kind, _ in seen]
    assert kinds[:3] == ["RunBegan", "RoundBegan", "DeltaReceived"]
    assert all(logged for _, logged in seen)
