"""Context as a projection: compaction within a budget, its replay and crash resume,
recall over the whole history, and the memory board."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import hypothesis
import orjson
import pytest
import trio
from _cli import run_cli
from _depth import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from actors import (
    AgentSpec,
    ContextPolicy,
    estimate_tokens,
    memory_tools,
    open_board,
    recall_tool,
    replay_session,
    spawn_agent,
    spawn_session,
    tool,
)
from actors._session._context import SUMMARY_INSTRUCTIONS, plan_cut, tools_tokens
from actors.events import ContextCompacted, ToolFinished
from actors.lowlevel import ValidTranscript, is_provider_valid, search_history
from actors.observe import HookContext, HookVetoError, LLMCallNext
from actors.testing import (
    Operation,
    RuntimeHarness,
    Send,
    assert_invariants,
    conversations,
    operations,
    property_settings,
)
from protocols import (
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import decode_record
from protocols.errors import AgentSpecError, ConfigError, LLMServerError, ReplayDivergenceError
from runtime import EventStore, open_runtime, open_sqlite_store
from runtime.maintenance import check_store
from runtime.testing import FunctionLLM, InMemoryEventStore

SYSTEM = "You keep a ledger. Be brief."


@tool
def ledger(entry: str) -> str:
    """Write an entry in the ledger.

    Args:
        entry: what to write.
    """
    return f"written: {entry}"


def is_summary_request(request: LLMRequest) -> bool:
    return bool(request.messages) and request.messages[0].text == SUMMARY_INSTRUCTIONS


def request_tokens(request: LLMRequest) -> int:
    return sum(estimate_tokens(m) for m in request.messages) + tools_tokens(request.tools)


class Agent:
    """A deterministic model: a turn holding ``calls=N`` makes N ledger calls, one per
    round; summaries are numbered; every request is kept."""

    def __init__(self) -> None:
        self.summaries = 0
        self.llm = FunctionLLM(self.answer)

    def answer(self, request: LLMRequest) -> LLMResponse:
        if is_summary_request(request):
            self.summaries += 1
            return LLMResponse(
                content=f"summary number {self.summaries}",
                usage=Usage(prompt_tokens=7, completion_tokens=3),
                model="summariser",
            )
        last = request.messages[-1]
        turn = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        wanted = int(turn.text.split("calls=")[1].split()[0]) if "calls=" in turn.text else 0
        done = 0
        for message in reversed(request.messages):
            if message is turn:
                break
            done += isinstance(message, ToolResultMessage)
        if done < wanted:
            arguments = orjson.dumps({"entry": f"{turn.text[:12]} #{done}"}).decode()
            call = ToolCall(
                id=f"c{len(request.messages)}-{done}", name="ledger", arguments=arguments
            )
            return LLMResponse(tool_calls=[call], model="agent")
        return LLMResponse(content=f"ok: {last.text[:20]}", model="agent")

    @property
    def requests(self) -> list[LLMRequest]:
        return [r for r in self.llm.requests if not is_summary_request(r)]


async def events_of(store: EventStore, session_id: str) -> list[tuple[int, object]]:
    return [(r.version, decode_record(r)) for r in await store.read(f"session/{session_id}")]


def turn_text(i: int, pad: int, calls: int) -> str:
    return f"entry {i} calls={calls} " + "lorem " * pad


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"window": 0}, "window must be an int >= 1 (tokens), got 0"),
        ({"window": 100, "reserve": -1}, "reserve must be an int >= 0 (tokens), got -1"),
        ({"window": 100, "reserve": 100}, "reserve (100) must be smaller than window (100)"),
        ({"window": 100, "keep": 1.0}, "keep must be a fraction between 0 and 1"),
        ({"window": 100, "summary_tokens": 0}, "summary_tokens must be an int >= 1 or None"),
        ({"window": 100, "reserve": 50, "summary_tokens": 50}, "summary_tokens (50) must be"),
        ({"window": 100, "summariser": "mine"}, "summariser must be 'session'"),
        ({"window": 100, "count_tokens": 3}, "count_tokens must be callable, got 3"),
    ],
)
def test_bad_policies_are_refused_with_what_to_fix(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match="invalid ContextPolicy") as raised:
        ContextPolicy(**kwargs)  # type: ignore[arg-type]
    assert problem in str(raised.value)
    assert raised.value.code == "config.invalid"


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        ContextPolicy(window=-5, keep=2)
    message = str(raised.value)
    assert "window must be" in message
    assert "keep must be" in message


def test_an_agent_spec_checks_its_context() -> None:
    with pytest.raises(AgentSpecError, match="context must be a ContextPolicy or None, got 4000"):
        AgentSpec(name="a", context=4000)  # type: ignore[arg-type]
    spec = AgentSpec(name="a", context=ContextPolicy(window=4000, reserve=500))
    assert spec.context is not None
    assert spec.context.budget == 3500


def test_memory_tools_refuse_a_bad_board_id() -> None:
    with pytest.raises(ValueError, match="board id"):
        memory_tools("no spaces allowed")


# -- the cut (pure) ----------------------------------------------------------------------


@st.composite
def transcripts(draw: st.DrawFn) -> tuple[Message, ...]:
    """Provider-valid transcripts of user turns with tool rounds, some calls left open."""
    transcript = ValidTranscript()
    for turn in range(draw(st.integers(1, 12))):
        transcript = transcript.append(
            UserMessage(f"turn {turn} " + "x" * draw(st.integers(0, 300)))
        )
        for round_ in range(draw(st.integers(0, 3))):
            calls = [
                ToolCall(id=f"t{turn}r{round_}c{c}", name="ledger", arguments="{}")
                for c in range(draw(st.integers(1, 3)))
            ]
            transcript = transcript.append(AssistantMessage(tool_calls=calls))
            for call in calls:
                if draw(st.booleans()) or draw(st.booleans()):
                    transcript = transcript.append(
                        ToolResultMessage(
                            tool_call_id=call.id, content="y" * draw(st.integers(0, 200))
                        )
                    )
        if draw(st.booleans()):
            transcript = transcript.append(
                AssistantMessage(content="done " + "z" * draw(st.integers(0, 200)))
            )
    return transcript.closed().messages


@settings(max_examples=examples(300), deadline=None)
@given(
    messages=transcripts(),
    window=st.integers(50, 3000),
    keep=st.sampled_from([0.2, 0.5, 0.8]),
)
def test_a_cut_never_splits_a_tool_call_and_keeps_the_latest_turn(
    messages: tuple[Message, ...], window: int, keep: float
) -> None:
    policy = ContextPolicy(window=window, keep=keep, summary_tokens=1)
    lead: tuple[Message, ...] = (SystemMessage(SYSTEM),)
    latest = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    upto = 0
    summary = None
    while (cut := plan_cut(policy, lead, messages, upto, (), summary=summary)) is not None:
        assert upto < cut.upto <= latest
        assert isinstance(messages[cut.upto], UserMessage)  # a turn's start
        kept = messages[cut.upto :]
        assert is_provider_valid(kept)  # every call with its results, none split
        assert messages[latest] in kept
        upto = cut.upto
        summary = SystemMessage(f"[Summary of the first {upto} messages]")
    if summary is not None:  # it stopped because the projection fits or one turn is left
        sent = (*lead, summary, *messages[upto:])
        fits = sum(estimate_tokens(m) for m in sent) <= policy.budget
        assert fits or upto == latest


# -- end to end --------------------------------------------------------------------------


async def run_ledger(
    store: EventStore,
    turns: list[tuple[int, int]],
    policy: ContextPolicy,
    agent: Agent,
    session_id: str = "ledger",
) -> None:
    async with open_runtime(store=store, seed=3) as runtime:
        session = await spawn_session(
            runtime,
            llm=agent.llm,
            tools=[ledger],
            system_prompt=SYSTEM,
            context=policy,
            session_id=session_id,
            max_rounds=8,
        )
        for i, (pad, calls) in enumerate(turns):
            result = await session.send(turn_text(i, pad, calls), id=f"turn-{i}")
            assert result.status == "completed", result


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    turns=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 2)), min_size=3, max_size=18),
    window=st.integers(900, 2000),
    summarise=st.booleans(),
)
def test_every_request_is_within_budget_valid_and_keeps_prompt_and_turn(
    turns: list[tuple[int, int]], window: int, summarise: bool
) -> None:
    policy = ContextPolicy(window=window, reserve=100, summariser="session" if summarise else None)
    agent = Agent()
    store = InMemoryEventStore()
    trio.run(run_ledger, store, turns, policy, agent)
    for request in agent.requests:
        assert request_tokens(request) <= policy.budget
        assert request.messages[0] == SystemMessage(SYSTEM)
        conversation = [m for m in request.messages if not isinstance(m, SystemMessage)]
        assert isinstance(conversation[0], UserMessage)
        assert is_provider_valid(conversation)
        latest = next(m for m in reversed(conversation) if isinstance(m, UserMessage))
        assert latest.text.startswith("entry ")
    if not summarise:
        assert agent.summaries == 0


async def test_long_sessions_compact_and_replay_with_no_model() -> None:
    store = InMemoryEventStore()
    policy = ContextPolicy(window=900, reserve=100)
    agent = Agent()
    await run_ledger(store, [(20, i % 3) for i in range(30)], policy, agent)
    events = await events_of(store, "ledger")
    compactions = [e for _, e in events if isinstance(e, ContextCompacted)]
    assert len(compactions) >= 3
    assert [c.method for c in compactions] == ["summary"] * len(compactions)
    assert agent.summaries == len(compactions)  # one call each, never repeated
    ups = [c.upto for c in compactions]
    assert ups == sorted(set(ups))
    assert [c.since for c in compactions] == [0, *ups[:-1]]
    assert all(c.tokens_before > policy.budget for c in compactions)
    # the summary stands in for the compacted turns in the next request
    last = compactions[-1]
    assert any(
        f"{last.summary}" in m.text and f"first {last.upto} messages" in m.text
        for m in agent.requests[-1].messages
        if isinstance(m, SystemMessage)
    )
    # the summariser's tokens are the session's too
    assert sum(c.usage.total_tokens for c in compactions) == 10 * len(compactions)

    replayed = await replay_session(
        store, "ledger", tools=[ledger], system_prompt=SYSTEM, context=policy
    )
    assert replayed.checked == len(agent.requests) + len(compactions)
    assert replayed.state.compacted == last
    assert len(agent.llm.requests) == len(agent.requests) + agent.summaries  # nothing new

    # with the recorded tools (as `powertrio replay` does) compactions are taken as recorded
    as_recorded = await replay_session(store, "ledger", system_prompt=SYSTEM, recorded_tools=True)
    assert as_recorded.checked == len(agent.requests)
    assert as_recorded.state.compacted == last

    with pytest.raises(ReplayDivergenceError, match="a summary of the context here"):
        await replay_session(store, "ledger", tools=[ledger, recall_tool()], system_prompt=SYSTEM)
    smaller = ContextPolicy(window=700, reserve=100)
    with pytest.raises(ReplayDivergenceError, match="code asks for a compaction of the context"):
        await replay_session(store, "ledger", tools=[ledger], system_prompt=SYSTEM, context=smaller)
    keeps_less = ContextPolicy(window=900, reserve=100, keep=0.2)
    with pytest.raises(ReplayDivergenceError, match=r"the code would summarise \[0, "):
        await replay_session(
            store, "ledger", tools=[ledger], system_prompt=SYSTEM, context=keeps_less
        )


async def test_without_a_summariser_the_oldest_turns_are_dropped() -> None:
    store = InMemoryEventStore()
    policy = ContextPolicy(window=700, reserve=100, summariser=None)
    agent = Agent()
    await run_ledger(store, [(20, 1) for _ in range(20)], policy, agent)
    compactions = [
        e for _, e in await events_of(store, "ledger") if isinstance(e, ContextCompacted)
    ]
    assert compactions
    assert {(c.method, c.summary, c.usage) for c in compactions} == {("drop", "", Usage())}
    assert agent.summaries == 0
    notes = [m for m in agent.requests[-1].messages if isinstance(m, SystemMessage)][1:]
    assert len(notes) == 1
    assert notes[0].text.startswith(f"[The first {compactions[-1].upto} messages")
    replayed = await replay_session(
        store, "ledger", tools=[ledger], system_prompt=SYSTEM, context=policy
    )
    assert replayed.state.compacted == compactions[-1]


async def test_a_summariser_of_its_own_answers_for_the_session_model() -> None:
    agent = Agent()
    summariser = FunctionLLM(agent.answer)
    session_model = Agent()
    policy = ContextPolicy(window=700, reserve=100, summariser=summariser)
    store = InMemoryEventStore()
    await run_ledger(store, [(20, 0)] * 12, policy, session_model)
    assert session_model.summaries == 0
    assert agent.summaries >= 1
    assert all(is_summary_request(r) and r.model is None for r in summariser.requests)
    compacted = [e for _, e in await events_of(store, "ledger") if isinstance(e, ContextCompacted)]
    assert [c.summary for c in compacted] == [
        f"summary number {n + 1}" for n in range(agent.summaries)
    ]
    replayed = await replay_session(
        store, "ledger", tools=[ledger], system_prompt=SYSTEM, context=policy
    )
    assert replayed.state.compacted == compacted[-1]
    assert len(summariser.requests) == agent.summaries  # replay asked nothing


async def test_llm_hooks_wrap_a_summary_and_are_told_it_is_one() -> None:
    """The summariser's call goes through the session's hooks (its own model's or
    another's), with ``purpose="summary"`` and the round it makes room for; a hook's veto
    of it fails the run with the veto's code, and nothing is compacted."""
    agent = Agent()
    summariser = FunctionLLM(agent.answer)
    seen: list[tuple[str, int, bool]] = []
    veto_summaries = False

    async def watch(
        request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        seen.append((context.purpose, context.round, is_summary_request(request)))
        if veto_summaries and context.purpose == "summary":
            raise HookVetoError("summaries wait for the night rate")
        return await call_next(request)

    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=3) as runtime:
        session = await spawn_session(
            runtime,
            llm=Agent().llm,
            system_prompt=SYSTEM,
            context=ContextPolicy(window=700, reserve=100, summariser=summariser),
            llm_hooks=[watch],
            session_id="hooked",
        )
        for i in range(12):
            assert (await session.send(turn_text(i, 20, 0))).status == "completed"
        summaries = [entry for entry in seen if entry[0] == "summary"]
        assert len(summaries) == agent.summaries >= 1
        assert all(is_summary for _, _, is_summary in summaries)
        assert all(not is_summary for purpose, _, is_summary in seen if purpose == "round")
        # a summary makes room for a run's first round here (one round per send)
        assert {round_ for _, round_, _ in summaries} == {1}
        veto_summaries = True
        asked = agent.summaries
        result = await session.send(turn_text(12, 200, 0))
    assert (result.status, result.error_code) == ("failed", "session.hook_vetoed")
    assert result.error == (
        "session.hook_vetoed: vetoed by a hook: summaries wait for the night rate"
    )
    assert agent.summaries == asked  # the vetoed call never reached the summariser
    compacted = [e for _, e in await events_of(store, "hooked") if isinstance(e, ContextCompacted)]
    assert len(compacted) == asked


async def test_a_summary_longer_than_its_cap_is_cut() -> None:
    def wordy(request: LLMRequest) -> LLMResponse:
        if is_summary_request(request):
            return LLMResponse(content="very long summary " * 500)
        return LLMResponse(content="ok")

    store = InMemoryEventStore()
    policy = ContextPolicy(window=800, reserve=100, summary_tokens=60)
    llm = FunctionLLM(wordy)
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, context=policy, session_id="w")
        for i in range(20):
            await session.send(turn_text(i, 25, 0))
    compactions = [e for _, e in await events_of(store, "w") if isinstance(e, ContextCompacted)]
    assert compactions
    for compacted in compactions:
        assert estimate_tokens(SystemMessage(compacted.summary)) <= 60
        assert compacted.summary.startswith("very long summary")


class Gate:
    """Blocks the first matching model call forever (the process 'dies' there)."""

    def __init__(self, agent: Agent, *, summary: bool) -> None:
        self.agent = agent
        self.summary = summary
        self.entered = trio.Event()
        self.armed = True
        self.llm = FunctionLLM(self.answer)

    async def answer(self, request: LLMRequest) -> LLMResponse:
        hit = is_summary_request(request) if self.summary else _has_summary(request)
        if self.armed and hit:
            self.armed = False
            self.entered.set()
            await trio.sleep_forever()
        return self.agent.answer(request)


def _has_summary(request: LLMRequest) -> bool:
    return not is_summary_request(request) and any(
        m.text.startswith("[Summary of the first") for m in request.messages
    )


async def crash_at(store: EventStore, gate: Gate, policy: ContextPolicy, turns: int) -> None:
    """Send turns until the gate blocks a call, then stop the runtime under it."""
    async with open_runtime(store=store, seed=3) as runtime:
        session = await spawn_session(
            runtime,
            llm=gate.llm,
            tools=[ledger],
            system_prompt=SYSTEM,
            context=policy,
            session_id="crash",
        )
        async with trio.open_nursery() as nursery:

            async def drive() -> None:
                for i in range(turns):
                    await session.send(turn_text(i, 20, 0), id=f"turn-{i}")

            nursery.start_soon(drive)
            await gate.entered.wait()
            nursery.cancel_scope.cancel()


async def resume(store: EventStore, llm: FunctionLLM, policy: ContextPolicy, turns: int) -> None:
    async with open_runtime(store=store, seed=3) as runtime:
        session = await spawn_session(
            runtime,
            llm=llm,
            tools=[ledger],
            system_prompt=SYSTEM,
            context=policy,
            session_id="crash",
        )
        for i in range(turns):
            result = await session.send(turn_text(i, 20, 0), id=f"turn-{i}")
            assert result.status == "completed"


async def test_a_crash_during_a_summary_asks_again_once_and_never_after_it_is_recorded() -> None:
    policy = ContextPolicy(window=700, reserve=100)
    store = InMemoryEventStore()
    agent = Agent()
    gate = Gate(agent, summary=True)
    await crash_at(store, gate, policy, 12)
    assert agent.summaries == 0  # it died in the summariser's call
    assert not [e for _, e in await events_of(store, "crash") if isinstance(e, ContextCompacted)]
    asked = [r for r in gate.llm.requests if is_summary_request(r)]
    assert len(asked) == 1
    await resume(store, agent.llm, policy, 12)
    again = [r for r in agent.llm.requests if is_summary_request(r)]
    assert again[0].fingerprint() == asked[0].fingerprint()  # the same call, resumed
    compacted = [e for _, e in await events_of(store, "crash") if isinstance(e, ContextCompacted)]
    assert len(compacted) == agent.summaries


async def test_a_crash_after_a_recorded_summary_does_not_pay_for_it_again() -> None:
    policy = ContextPolicy(window=700, reserve=100)
    store = InMemoryEventStore()
    agent = Agent()
    gate = Gate(agent, summary=False)  # dies in the first request that uses a summary
    await crash_at(store, gate, policy, 12)
    recorded = [e for _, e in await events_of(store, "crash") if isinstance(e, ContextCompacted)]
    assert len(recorded) == 1
    assert agent.summaries == 1
    fresh = Agent()
    fresh.summaries = 1
    await resume(store, fresh.llm, policy, 12)
    after = [e for _, e in await events_of(store, "crash") if isinstance(e, ContextCompacted)]
    assert after[0] == recorded[0]
    # the restarted session asked the summariser only for later compactions
    assert fresh.summaries - 1 == len(after) - 1
    first = fresh.requests[0]
    assert any(
        recorded[0].summary in m.text for m in first.messages if isinstance(m, SystemMessage)
    )


# -- recall ------------------------------------------------------------------------------


async def test_recall_finds_compacted_text_with_its_version() -> None:
    store = InMemoryEventStore()
    policy = ContextPolicy(window=700, reserve=100)

    def answer(request: LLMRequest) -> LLMResponse:
        if is_summary_request(request):
            return LLMResponse(content="earlier entries were written")
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("where"):
            call = ToolCall(id="r1", name="recall", arguments='{"query": "aardvark"}')
            return LLMResponse(tool_calls=[call])
        return LLMResponse(content=f"ok: {last.text[:30]}")

    llm = FunctionLLM(answer)
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, context=policy, session_id="r")
        await session.send("the aardvark lives in drawer 7 " + "lorem " * 20)
        for i in range(15):
            await session.send(turn_text(i, 25, 0))
        state = await session.state()
        assert state.compacted is not None
        assert state.compacted.upto > 2  # the aardvark turn is out of the model's view
        result = await session.send("where is the aardvark?")
    assert result.status == "completed"
    events = await events_of(store, "r")
    found = next(e for _, e in events if isinstance(e, ToolFinished) and e.outcome.call_id == "r1")
    hits = orjson.loads(found.outcome.content)
    assert hits["count"] >= 1
    first_input = next(v for v, e in events if type(e).__name__ == "RunStarted")
    versions = {h["version"]: h for h in hits["results"]}
    assert first_input in versions
    assert "[aardvark]" in versions[first_input]["excerpt"]
    assert versions[first_input]["kind"] == "user"
    # searched again, the index reads only the new tail and finds the same
    again = await search_history(store, "r", "drawer aardvark", limit=3)
    assert first_input in {hit.version for hit in again}
    assert await search_history(store, "r", "nonexistentword") == []


async def test_recall_refuses_a_query_without_words() -> None:
    store = InMemoryEventStore()

    def answer(request: LLMRequest) -> LLMResponse:
        if isinstance(request.messages[-1], UserMessage):
            return LLMResponse(
                tool_calls=[ToolCall(id="q", name="recall", arguments='{"query": "?!"}')]
            )
        return LLMResponse(content="done")

    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(answer), context=ContextPolicy(window=5000), session_id="q"
        )
        await session.send("go")
    outcome = next(e for _, e in await events_of(store, "q") if isinstance(e, ToolFinished)).outcome
    assert outcome.is_error
    assert "the query '?!' has no words to search for" in outcome.content


async def test_recall_false_gives_no_recall_tool() -> None:
    llm = FunctionLLM(lambda request: LLMResponse(content="ok"))
    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime, llm=llm, context=ContextPolicy(window=5000, recall=False)
        )
        await session.send("hi")
        with_recall = await spawn_session(runtime, llm=llm, context=ContextPolicy(window=5000))
        await with_recall.send("hi")
    assert [t.name for t in llm.requests[0].tools] == []
    assert [t.name for t in llm.requests[1].tools] == ["recall"]


# -- memory ------------------------------------------------------------------------------


async def test_memory_is_stamped_by_the_runtime_and_shared_across_sessions() -> None:
    store = InMemoryEventStore()
    tools = memory_tools("memory:keeper")

    def answer(request: LLMRequest) -> LLMResponse:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("remember"):
            arguments = {"text": "the vault code is 4711", "author": "session:mallory"}
            forged = ToolCall(id="m0", name="remember", arguments=orjson.dumps(arguments).decode())
            honest = ToolCall(
                id="m1", name="remember", arguments='{"text": "the vault code is 4711"}'
            )
            keyed = ToolCall(
                id="m2", name="remember", arguments='{"text": "owner is Ada", "key": "owner"}'
            )
            return LLMResponse(tool_calls=[forged, honest, keyed])
        if isinstance(last, UserMessage) and last.text.startswith("what"):
            return LLMResponse(
                tool_calls=[
                    ToolCall(id="m3", name="recall_memory", arguments='{"query": "vault code"}')
                ]
            )
        return LLMResponse(content="ok")

    spec = AgentSpec(name="keeper", tools=tools, context=ContextPolicy(window=5000))
    async with open_runtime(store=store) as runtime:
        first = await spawn_agent(runtime, spec, llm=FunctionLLM(answer), session_id="first")
        await first.send("remember the vault code")
        second = await spawn_agent(runtime, spec, llm=FunctionLLM(answer), session_id="second")
        await second.send("what is the vault code?")
        board = await open_board(runtime, "memory:keeper")
        entries = await board.list()
    outcomes = {
        e.outcome.call_id: e.outcome
        for _, e in await events_of(store, "first")
        if isinstance(e, ToolFinished)
    }
    assert outcomes["m0"].is_error  # a forged author is not an argument
    assert "author" in outcomes["m0"].content
    assert orjson.loads(outcomes["m1"].content)["author"] == "session:first"
    assert len(entries) == 2  # the forged call wrote nothing
    assert {(e.author, e.version) for e in entries} == {("session:first", 1)}
    assert "owner" in {e.key for e in entries}
    found = next(
        e.outcome for _, e in await events_of(store, "second") if isinstance(e, ToolFinished)
    )
    hits = orjson.loads(found.content)
    assert hits["count"] == 1
    assert hits["results"][0]["text"] == "the vault code is 4711"
    assert hits["results"][0]["author"] == "session:first"
    assert hits["results"][0]["version"] == 1


def test_reported_input_tokens_calibrate_the_estimate() -> None:
    """A model that reports twice the estimate gets compacted about twice as often."""

    def compactions_with(factor: int) -> int:
        agent = Agent()

        def answer(request: LLMRequest) -> LLMResponse:
            response = agent.answer(request)
            reported = Usage(prompt_tokens=factor * request_tokens(request))
            return LLMResponse(content=response.content, usage=reported)

        agent.llm = FunctionLLM(answer)
        store = InMemoryEventStore()
        policy = ContextPolicy(window=1700, reserve=100)
        trio.run(run_ledger, store, [(20, 0)] * 40, policy, agent)
        compactions = [
            e for _, e in trio.run(events_of, store, "ledger") if isinstance(e, ContextCompacted)
        ]
        assert all(c.tokens_before > policy.budget for c in compactions)
        return len(compactions)

    without = compactions_with(0)
    doubled = compactions_with(2)
    assert doubled > without > 0, (without, doubled)


async def test_on_sqlite_the_recall_index_lives_in_the_log_file_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.sqlite"
    llm = FunctionLLM(lambda request: LLMResponse(content="noted"))
    async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s")
        await session.send("the quokka ate seven leaves")
        hits = await search_history(store, "s", "quokka")
        assert [(h.version, h.kind) for h in hits] == [(2, "user")]
    with sqlite3.connect(db) as conn:
        indexed = conn.execute("SELECT stream, version FROM recall_progress").fetchall()
    assert indexed == [("session/s", 4)]  # created, started, answered, finished
    async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(runtime, llm=llm, session_id="s")
        await session.send("and the quokka slept")
        hits = await search_history(store, "s", "quokka slept")
        assert [h.version for h in hits] == [5, 2]  # both words first, then one
        assert (await check_store(store)).ok  # the cache's tables do not disturb the log
        await store.backup(tmp_path / "copy.sqlite")
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT count(*) FROM recall_passages").fetchone()[0]
    assert rows == 4  # each passage indexed once, across both processes' searches


def test_the_benchmark_figure_is_within_its_bar_and_beside_its_baseline() -> None:
    from actors.bench._context import context_tokens_max_over_budget

    figures = context_tokens_max_over_budget(quick=True)
    assert figures["context_tokens_max_over_budget"] <= 1.0
    assert figures["raw_transcript_tokens_over_budget"] > 1.0  # it had to compact
    assert figures["compactions"] >= 1
    assert figures["recall_hits"] >= 1


def test_the_command_line_shows_and_replays_a_compacted_session(tmp_path: Path) -> None:
    db = tmp_path / "powertrio.sqlite"
    agent = Agent()
    policy = ContextPolicy(window=700, reserve=100)

    async def record() -> None:
        async with open_sqlite_store(db) as store:
            await run_ledger(store, [(20, 1)] * 12, policy, agent)

    trio.run(record)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_cli(*args, "--db", str(db), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done

    shown = json.loads(run("show", "ledger", "--json").stdout)
    compacted = [e for e in shown["entries"] if e["kind"] == "compacted"]
    assert [e["text"] for e in compacted] == [
        f"summary number {n + 1}" for n in range(agent.summaries)
    ]
    assert compacted[0]["upto"] > 0
    assert "summarised" in run("show", "ledger").stdout
    replayed = run("replay", "ledger").stdout
    assert f"{len(agent.requests)} model answers asked for again, identically" in replayed


@tool(crash_policy="retry")
async def forecast(city: str, days: int = 1) -> str:
    """The weather forecast of a city.

    Args:
        city: the city.
        days: how many days ahead.
    """
    return f"{city}: sunny for {days} day(s) " + "and calm " * 10


def exact_count(message: Message) -> int:
    """A count of one's own (taken as exact: the kit's scripted usage does not calibrate it)."""
    return estimate_tokens(message)


WEATHER = AgentSpec(
    name="weather",
    system_prompt="You answer questions about the weather.",
    tools=[forecast],
    max_rounds=4,
    context=ContextPolicy(window=340, summary_tokens=20, count_tokens=exact_count),
)
weather_harness = RuntimeHarness(WEATHER)


def _forecasts(*ids: str) -> LLMResponse:
    calls = tuple(ToolCall(id=i, name="forecast", arguments='{"city":""}') for i in ids)
    return LLMResponse(content="", tool_calls=calls, finish_reason="tool_calls")


FAILED_RUNS_AFTER_A_COMPACTION = (
    LLMServerError("upstream 503"),
    _forecasts("call_0_0", "call_0_1"),
    _forecasts("call_1_0"),
    LLMServerError("upstream 503"),
    _forecasts("call_2_0"),
    LLMServerError("upstream 503"),
    _forecasts("call_3_0"),
    LLMServerError("upstream 503"),
    LLMResponse(content=""),
)
"""Four sends of one text, runs failing on a provider's 503, every summary empty: the third
compaction (of the turn ``a`` after an empty summary) asks the summariser the request the
first (of the turn ``a``, nothing before it) asked, whose answer the log recorded at version
13. Two moments, one request: the kit once took it for an answer asked for again."""


@property_settings(examples=100)
@given(conversation=conversations(WEATHER, max_rounds=5), ops=operations())
@example(
    conversation=FAILED_RUNS_AFTER_A_COMPACTION, ops=[Send(text="a", wait=False, if_busy=None)] * 4
)
def test_the_kit_invariants_hold_for_an_agent_that_compacts(
    conversation: tuple[LLMResponse | BaseException, ...], ops: list[Operation]
) -> None:
    """Crashes, restarts, follow-ups, cancels: replay equals the live state, requests are
    provider-valid, no recorded answer (summaries included) is asked for again."""
    trace = weather_harness.run(conversation, ops)
    assert_invariants(trace)
    compacted = [decode_record(r) for r in trace.records if r.type == "session.context_compacted"]
    hypothesis.event(f"compactions: {len(compacted)}")
