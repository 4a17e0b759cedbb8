"""The property-testing kit (``actors.testing``) on the project's own session agent.

The properties run 100 examples each in the everyday run (the cases they once found are
pinned as ``@example``); ``pytest --hypothesis-profile=deep`` makes it 10,000
(``tests/_depth.py``).
Then every invariant helper is shown to fail, with its message, on a broken case.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from pathlib import Path

import attrs
import orjson
import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import event, example, given
from hypothesis import strategies as st

from actors import AgentSpec, Budget, ask_human, replay_session, spawn_session, tool
from actors.events import (
    AssistantRecorded,
    ContextCompacted,
    FollowUpReceived,
    FollowUpsInjected,
    RunStarted,
    SessionCreated,
)
from actors.testing import (
    UNKNOWN_TOOL,
    AdvanceClock,
    CancelRun,
    ClearTimer,
    CrashSession,
    DeterministicLLM,
    FailNextCommit,
    LLMCall,
    RestartRuntime,
    RuntimeHarness,
    Send,
    SendFollowUp,
    SetTimer,
    Trace,
    WriteBoard,
    assert_budgets_respected,
    assert_crash_equivalent,
    assert_follow_ups_read_once,
    assert_invariants,
    assert_no_repeated_requests,
    assert_replay_matches,
    assert_requests_provider_valid,
    assert_runs_end_once,
    assert_states_are_folds,
    assert_timers_fire_once,
    conversations,
    json_values,
    operations,
    property_settings,
    tool_calls,
)
from protocols import (
    AssistantMessage,
    FollowUp,
    LLMRequest,
    LLMResponse,
    SystemMessage,
    ToolCall,
    Usage,
    UserMessage,
)
from protocols.codec import encode
from protocols.errors import (
    LLMError,
    PowertrioError,
    ReplayDivergenceError,
    ScriptExhaustedError,
    StoreError,
)
from protocols.jsonschema import compile_schema
from runtime import EventStore, NewEvent, open_runtime, open_sqlite_store
from runtime.supervision import Backoff
from runtime.testing import (
    FaultyEventStore,
    FunctionLLM,
    InMemoryEventStore,
    ScriptedLLM,
    check_event_store,
)
from runtime.timers import TimerFired, TimerScheduled

# -- the agent under test ----------------------------------------------------------------


@tool(crash_policy="retry")
async def add(a: int, b: int) -> int:
    """Add two integers (idempotent: re-run after a crash).

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool(crash_policy="retry")
async def lookup(city: str, days: int | None = None) -> str:
    """Look up the weather of a city.

    Args:
        city: the city.
        days: how many days ahead.
    """
    return f"sunny in {city} for {days or 1} day(s)"


CALCULATOR = AgentSpec(
    name="calculator",
    system_prompt="Be exact.",
    tools=[add, lookup, ask_human],
    max_rounds=3,
    budget=Budget(max_tokens=300),
)
"""The agent of the properties: tools, a human to ask, a round limit and a token budget."""

IDEMPOTENT = AgentSpec(name="idempotent", system_prompt="Be exact.", tools=[add, lookup])
"""For crash equivalence: every tool may run again after a crash."""


@pytest.fixture
def harness_agent() -> AgentSpec:
    """The plugin's ``runtime_harness`` runs this agent in this module."""
    return CALCULATOR


# -- the properties -----------------------------------------------------------------------


HARNESS = RuntimeHarness(CALCULATOR, observe_states=True)
SQLITE_HARNESS = RuntimeHarness(CALCULATOR, observe_states=True, store="sqlite")


def check_operations(harness: RuntimeHarness, conversation: object, ops: object) -> None:
    """Run the operations and check every invariant of the trace."""
    trace = harness.run(conversation, ops)  # type: ignore[arg-type]
    for status in sorted({result.status for result in trace.state.results.values()}):
        event(f"a run {status}")
    event(f"faults fired: {len(trace.faults)}")
    assert_invariants(trace)


@property_settings(examples=examples(100))
@given(conversation=conversations(CALCULATOR, max_rounds=4), ops=operations())
def test_operations_on_a_session_keep_every_invariant(
    conversation: tuple[object, ...], ops: tuple[object, ...]
) -> None:
    """Any script and any operations, crashes, failed commits and runtime restarts
    included: replay equals the live state, every reported state is a fold of the log,
    every request is provider-valid, no recorded answer is asked again, budgets hold to
    within one call, follow-ups and firings are read once, runs end once."""
    check_operations(HARNESS, conversation, ops)


@property_settings(max_examples=examples(50))
@given(conversation=conversations(CALCULATOR, max_rounds=4), ops=operations())
def test_operations_on_sqlite_keep_every_invariant(
    conversation: tuple[object, ...], ops: tuple[object, ...]
) -> None:
    """The same property with the log in an SQLite file (fewer examples: real I/O)."""
    check_operations(SQLITE_HARNESS, conversation, ops)


FOUND_USAGE = Usage(prompt_tokens=69, completion_tokens=45, cached_tokens=68)
FOUND_CONVERSATION = (
    LLMResponse(
        content="hyx fef",
        tool_calls=(
            ToolCall(id="call_0_0", name="add", arguments='{"a":-61,"b":1000}'),
            ToolCall(id="call_0_1", name="ask_human", arguments='{"question":"h ecxjaizahi"}'),
        ),
        finish_reason="tool_calls",
        usage=FOUND_USAGE,
    ),
    LLMResponse(content="yxy", finish_reason="stop", usage=FOUND_USAGE),
)
FOUND_OPERATIONS = (
    CrashSession(),
    CrashSession(),
    AdvanceClock(seconds=0.5),
    CrashSession(),
    SendFollowUp(text="fhiyhe", id="f1", kind="user"),
    SetTimer(delay=0.0, every=None, note="wake up"),
)
"""A generated case that gave two histories on SQLite under virtual time
(``timer.cancelled`` in one play, ``timer.fired`` in the other)."""


@property_settings(max_examples=examples(15))
@given(conversation=conversations(CALCULATOR, max_rounds=3), ops=operations(max_size=6))
@example(conversation=FOUND_CONVERSATION, ops=FOUND_OPERATIONS)
def test_a_run_on_sqlite_is_reproducible(
    conversation: tuple[object, ...], ops: tuple[object, ...]
) -> None:
    """Two plays of the same operations on SQLite give the same trace, record for record.

    The example is the case this property found: a timer due at once, read for by the
    timer service in one thread while the settling harness read in another, was fired in
    one play and cancelled in the other. Store work in threads now lands in a fixed pass
    of the scheduler (``runtime/_virtual_time.py``); ``tests/test_virtual_time.py`` slows
    each read of this case in turn.
    """
    first = SQLITE_HARNESS.run(conversation, ops)  # type: ignore[arg-type]
    second = SQLITE_HARNESS.run(conversation, ops)  # type: ignore[arg-type]
    assert first.records == second.records
    assert first.outcomes == second.outcomes
    assert first.faults == second.faults
    assert trio.run(first.store.read_all) == list(first.records)  # the copy is the log


WORKER = AgentSpec(name="worker", description="adds numbers", tools=[add], max_rounds=2)
MANAGER = AgentSpec(name="manager", agents=[WORKER], max_rounds=3, budget=Budget(max_tokens=500))
"""A tree: the model may spawn workers (``spawn_agent``), which share the script."""


TREE_HARNESS = RuntimeHarness(MANAGER)

ORPHAN_CONVERSATION = (
    LLMResponse(
        content="",
        tool_calls=(
            ToolCall(id="call_0_0", name="spawn_agent", arguments='{"agent":"worker","task":"a"}'),
        ),
        finish_reason="tool_calls",
    ),
    LLMResponse(content="", finish_reason="stop"),
)
ORPHAN_OPERATIONS = (
    SendFollowUp(text="a", id="f1", kind="user"),
    RestartRuntime(),
    AdvanceClock(seconds=2.0),
    CrashSession(),
    FailNextCommit(),
    SendFollowUp(text="a", id="f2", kind="user"),
)
"""A generated case that hung: the worker crashed, and its parent crashed while the
worker waited for its restart. The worker's cell stayed registered with its restart gone,
so the parent's next incarnation found it under the worker's id and waited for it forever."""


@property_settings(examples=examples(100))
@given(
    conversation=conversations(MANAGER, max_rounds=3, invalid_calls=False),
    ops=operations(board=False),
)
@example(conversation=ORPHAN_CONVERSATION, ops=ORPHAN_OPERATIONS)
def test_a_tree_of_agents_keeps_every_invariant(
    conversation: tuple[object, ...], ops: tuple[object, ...]
) -> None:
    """With sub-agents spawned by the model, crashes and restarts: the tree replays
    (children included), every request of every session is provider-valid, answers are
    never asked twice, every session's follow-ups and runs are done once."""
    trace = TREE_HARNESS.run(conversation, ops)  # type: ignore[arg-type]
    event(f"sub-agents: {len(trace.state.children)}")
    assert_invariants(trace)


def test_two_sub_agents_with_one_task_may_ask_the_same_request() -> None:
    """Found by the tree property: the same request from two sessions is no repeat (each
    call knows its caller)."""
    spawn = '{"agent": "worker", "task": "a"}'
    calls = [ToolCall(id=f"c{i}", name="spawn_agent", arguments=spawn) for i in (1, 2)]
    trace = TREE_HARNESS.run([LLMResponse(tool_calls=calls)], [Send("go", wait=True)])
    workers = [c for c in trace.calls if c.caller != "s1"]
    assert sorted(c.caller or "" for c in workers) == ["s1.1", "s1.2"]
    assert workers[0].fingerprint == workers[1].fingerprint
    assert_invariants(trace)


CRASH_HARNESS = RuntimeHarness(IDEMPOTENT, llm_latency=0.0)


@property_settings(examples=examples(100))
@given(
    conversation=conversations(IDEMPOTENT, max_rounds=3, unknown_tools=False),
    texts=st.lists(st.sampled_from(["one", "two", "three"]), min_size=1, max_size=2),
    data=st.data(),
)
def test_a_crash_at_any_event_ends_as_no_crash(
    conversation: tuple[object, ...], texts: list[str], data: st.DataObject
) -> None:
    """Crash the session at its k-th event, for any k: same transcript, usage and results."""
    ops = [Send(text, wait=True) for text in texts]
    clean = CRASH_HARNESS.run(conversation, ops)  # type: ignore[arg-type]
    crash_at = data.draw(st.integers(1, clean.session_events), label="crash_at")
    crashed = CRASH_HARNESS.run(conversation, ops, crash_at=crash_at)  # type: ignore[arg-type]
    assert len(crashed.faults) == 1
    assert_crash_equivalent(clean, crashed)
    assert_invariants(crashed)


@property_settings(examples=examples(100))
@given(conversation=conversations(CALCULATOR, max_rounds=3), ops=operations(max_size=5))
def test_a_run_is_reproducible_event_for_event(
    runtime_harness: RuntimeHarness, conversation: tuple[object, ...], ops: tuple[object, ...]
) -> None:
    """The same inputs give the same log: types, payloads and timestamps."""

    def log(trace: Trace) -> list[tuple[str, str, bytes, float]]:
        return [(r.stream, r.type, r.data, r.recorded_at) for r in trace.records]

    first = runtime_harness.run(conversation, ops)  # type: ignore[arg-type]
    second = runtime_harness.run(conversation, ops)  # type: ignore[arg-type]
    assert log(first) == log(second)


# -- the strategies ----------------------------------------------------------------------


SCHEMAS = {t.name: compile_schema(t.spec.parameters) for t in (add, lookup)}


@property_settings(examples=examples(100))
@given(
    good=tool_calls([add, lookup], valid=True),
    bad=tool_calls([add, lookup], valid=False, call_id="x"),
)
def test_tool_calls_are_valid_or_refused_as_asked(good: ToolCall, bad: ToolCall) -> None:
    """Valid calls pass the tool's schema; invalid ones are not JSON, fail it, or name no
    tool."""
    assert SCHEMAS[good.name].is_valid(orjson.loads(good.arguments))
    assert bad.id == "x"
    if bad.name == UNKNOWN_TOOL:
        return
    try:
        value = orjson.loads(bad.arguments)
    except orjson.JSONDecodeError:
        return
    assert not SCHEMAS[bad.name].is_valid(value)


@property_settings(examples=examples(100))
@given(conversation=conversations(CALCULATOR, max_rounds=3, max_calls=2))
def test_conversations_end_in_a_final_answer_within_the_bound(
    conversation: tuple[object, ...],
) -> None:
    """At most ``max_rounds`` answers plus errors, unique call ids, a final text last."""
    answers = [item for item in conversation if isinstance(item, LLMResponse)]
    errors = [item for item in conversation if isinstance(item, LLMError)]
    assert len(answers) + len(errors) == len(conversation)
    assert 1 <= len(answers) <= 3
    assert answers[-1] is conversation[-1]
    assert answers[-1].tool_calls == ()
    assert all(1 <= len(a.tool_calls) <= 2 for a in answers[:-1])
    ids = [c.id for a in answers for c in a.tool_calls]
    assert len(ids) == len(set(ids))


@property_settings(examples=examples(100))
@given(data=st.data())
def test_json_values_satisfy_the_schemas_tools_have(data: st.DataObject) -> None:
    """Values for ``@tool`` schemas (optional fields, unions, arrays, objects) are valid."""

    @tool
    def shapes(
        count: int,
        ratio: float,
        tags: list[str],
        pair: tuple[int, str],
        mode: str | None = None,
        scores: dict[str, int] | None = None,
    ) -> str:
        """Many shapes."""
        return ""

    schema = shapes.spec.parameters
    value = data.draw(json_values(schema))
    assert compile_schema(schema).is_valid(value)


def test_operations_print_as_python_and_cover_every_kind() -> None:
    """Every kind of operation can be drawn; a printed sequence pastes back as code."""
    kinds = {
        AdvanceClock,
        CancelRun,
        ClearTimer,
        CrashSession,
        FailNextCommit,
        RestartRuntime,
        Send,
        SendFollowUp,
        SetTimer,
        WriteBoard,
    }
    namespace = {kind.__name__: kind for kind in kinds}
    seen: set[type] = set()

    @property_settings(examples=examples(300))
    @given(ops=operations())
    def collect(ops: tuple[object, ...]) -> None:
        for op in ops:
            seen.add(type(op))
            assert eval(repr(op), namespace) == op

    collect()
    assert seen == kinds


def test_strategies_refuse_bad_arguments() -> None:
    """Misuse names the argument."""
    with pytest.raises(ValueError, match="max_rounds and max_calls must be >= 1"):
        conversations(max_rounds=0)
    with pytest.raises(ValueError, match="valid tool calls need at least one tool"):
        tool_calls([], valid=True)
    with pytest.raises(TypeError, match="give Tool objects"):
        tool_calls([42])


# -- the harness and its parts -------------------------------------------------------------


def test_the_harness_runs_every_operation_and_reports_it() -> None:
    """A hand-written sequence: each operation's outcome, the faults, the settled state."""
    harness = RuntimeHarness(CALCULATOR, tool_delays={"add": 2.0})
    conversation = [
        LLMResponse(
            tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')],
            usage=Usage(prompt_tokens=10),
        ),
        LLMResponse(content="3", usage=Usage(prompt_tokens=10)),
    ]
    ops = [
        Send("1+2?"),
        AdvanceClock(1.5),
        SendFollowUp("and show your work", "f1"),
        SendFollowUp("and show your work", "f1"),
        SetTimer(30.0),
        WriteBoard("plan", 1),
        CrashSession(),
        Send("thanks", wait=True),
        CancelRun("after_turn"),
        ClearTimer(0),
        FailNextCommit(),
    ]
    trace = harness.run(conversation, ops)
    outcomes = dict(zip(range(len(ops)), trace.outcomes, strict=True))
    assert outcomes[0].startswith("sent (runs in the background); then completed")
    assert (outcomes[2], outcomes[3]) == ("accepted", "a repeated id: no-op")
    assert outcomes[4].startswith("timer tmr_")
    assert outcomes[5] == "plan at version 1"
    assert outcomes[6] == "armed: the session's next append fails"
    assert outcomes[7].startswith("completed")
    assert [f.reason for f in trace.faults] == ["fail_next_append"]
    assert trace.state.run is None
    assert trace.state.timers.pending == ()
    assert [r.status for r in trace.results.values()] == ["completed", "completed"]
    assert trace.calls[0].request.messages[0] == SystemMessage("Be exact.")
    assert_invariants(trace)


def test_a_runtime_restart_abandons_sends_and_the_session_goes_on() -> None:
    """After a restart the session folds its log and finishes the run it had begun."""
    trace = HARNESS.run(
        [LLMResponse(content="one"), LLMResponse(content="two")],
        [Send("first"), AdvanceClock(0.5), RestartRuntime(), Send("second", wait=True)],
    )
    assert trace.outcomes[0] == "sent (runs in the background); then abandoned: the runtime stopped"
    assert trace.outcomes[2] == "a new runtime on the same log"
    assert trace.outcomes[3].startswith("completed")
    assert [r.status for r in trace.state.results.values()] == ["completed", "completed"]
    assert_invariants(trace)


def test_a_parked_run_is_answered_by_the_harness() -> None:
    """``ask_human`` and approvals get ``human_answer``, so a run never waits forever."""
    harness = RuntimeHarness(CALCULATOR, human_answer="forty-two")
    question = ToolCall(id="q1", name="ask_human", arguments='{"question": "which?"}')
    trace = harness.run([LLMResponse(tool_calls=[question]), LLMResponse(content="ok")])
    (parked,) = trace.results.values()  # what send returned: the run stopped for a human
    assert parked.status == "waiting_for_human"
    assert trace.state.results[parked.run_id].status == "completed"
    assert trace.calls[1].request.messages[-1].content == "forty-two"  # type: ignore[union-attr]


def test_input_in_the_last_round_earns_a_round_within_the_limit() -> None:
    """Found by the long run: a follow-up injected after the last round's human answer
    earns one more round, which the budget invariant must count as within the limit."""
    harness = RuntimeHarness(CALCULATOR)
    calls = [
        [ToolCall(id="c1", name="add", arguments='{"a": 0, "b": 0}')],
        [ToolCall(id="c2", name="add", arguments='{"a": 1, "b": 0}')],
        [ToolCall(id="c3", name="ask_human", arguments='{"question": "go on?"}')],
    ]
    trace = harness.run(
        [*(LLMResponse(tool_calls=c) for c in calls), LLMResponse(content="done")],
        [Send("a"), AdvanceClock(5.0), SendFollowUp("also this", "f1")],
    )
    (result,) = trace.state.results.values()
    assert (result.status, result.rounds) == ("completed", 4)  # max_rounds is 3
    assert_invariants(trace)


def test_a_hang_fails_with_the_operations_done() -> None:
    """A model that never answers: the run fails after ``max_virtual_seconds``, at once."""

    harness = RuntimeHarness(CALCULATOR, llm_latency=10_000.0, max_virtual_seconds=3600.0)
    with pytest.raises(AssertionError, match=r"did not settle within 3600 virtual seconds"):
        harness.run([LLMResponse(content="late")], [Send("hi", wait=True)])


def test_the_harness_refuses_bad_settings() -> None:
    """Tool names instead of tools, and negative delays, are refused when it is made."""
    from protocols.errors import ConfigError

    with pytest.raises(ConfigError, match="names tools \\(add\\)"):
        RuntimeHarness(AgentSpec(name="x", tools=["add"]))
    with pytest.raises(ValueError, match=r"tool_delays\['add'\] must be >= 0 seconds"):
        RuntimeHarness(tool_delays={"add": -1.0})


async def test_play_runs_inside_an_async_test(
    runtime_harness: RuntimeHarness, virtual_clock: trio.testing.MockClock
) -> None:
    """In a pytest-trio test, ``play`` runs on the test's virtual clock."""
    start = trio.current_time()
    trace = await runtime_harness.play([LLMResponse(content="hi")], [Send("hello", wait=True)])
    assert trace.results[0].text == "hi"
    assert trio.current_time() - start == pytest.approx(1.0)  # one call, latency 1 s


async def test_the_faulty_store_is_an_event_store() -> None:
    """Unarmed, it passes the conformance suite."""

    @asynccontextmanager
    async def make() -> AsyncIterator[EventStore]:
        store = FaultyEventStore()
        try:
            yield store
        finally:
            await store.aclose()

    await check_event_store(make)


async def test_the_faulty_store_fails_the_chosen_append_once() -> None:
    """``crash_at`` hits the append holding that version; ``fail_next_append`` the next."""
    store = FaultyEventStore()
    event = NewEvent(type="t", schema_version=1, data=b"{}")
    store.crash_at("a", 2)
    await store.append("a", [event], 0)
    with pytest.raises(StoreError, match=r"injected fault \(crash_at\)"):
        await store.append("a", [event, event], 1)
    await store.append("a", [event, event], 1)
    store.fail_next_append("b")
    await store.append("a", [event], 3)
    with pytest.raises(StoreError, match="fail_next_append"):
        await store.append("b", [event], 0)
    assert [(f.stream, f.first_event, f.reason) for f in store.faults] == [
        ("a", 2, "crash_at"),
        ("b", 1, "fail_next_append"),
    ]
    assert await store.stream_version("a") == 4
    with pytest.raises(ValueError, match="event must be >= 1"):
        store.crash_at("a", 0)


async def test_the_faulty_store_fails_an_append_to_sqlite_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """Over an SQLite store the fault is raised before the append: nothing is written."""
    event = NewEvent(type="t", schema_version=1, data=b"{}")
    async with open_sqlite_store(tmp_path / "events.db") as sqlite:
        store = FaultyEventStore(sqlite)
        await store.append("a", [event], 0)
        store.crash_at("a", 2)
        with pytest.raises(StoreError, match=r"injected fault \(crash_at\).*nothing was written"):
            await store.append("a", [event], 1)
        assert await sqlite.stream_version("a") == 1
        assert await sqlite.head_position() == 1
        assert store.statistics().failed_appends == 1
        await store.append("a", [event], 1)
        assert [(f.stream, f.first_event) for f in store.faults] == [("a", 2)]
        assert [r.version for r in await sqlite.read("a")] == [1, 2]


async def test_the_deterministic_llm_answers_a_repeated_request_alike() -> None:
    """One script item per new request; the same answer to a request seen before."""
    llm = DeterministicLLM([LLMResponse(content="one"), LLMResponse(content="two")], then=None)
    first = LLMRequest(messages=[UserMessage("a")])
    second = LLMRequest(messages=[UserMessage("b")])
    assert (await llm.complete(first)).content == "one"
    assert (await llm.complete(first)).content == "one"
    async with llm.stream(second) as stream:
        assert (await stream.final_response()).content == "two"
    assert [c.repeated for c in llm.calls] == [False, True, False]
    llm.assert_complete()
    with pytest.raises(ScriptExhaustedError, match="no script item left for call #4"):
        await llm.complete(LLMRequest(messages=[UserMessage("c")]))
    llm.add(LLMResponse(content="late"))
    with pytest.raises(AssertionError, match="1 script item\\(s\\) not used"):
        llm.assert_complete()
    assert (await DeterministicLLM().complete(first)).content == "done"


# -- each invariant fails on a broken case ---------------------------------------------------


def plain_trace() -> Trace:
    conversation = [
        LLMResponse(
            tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')],
            usage=Usage(prompt_tokens=10),
        ),
        LLMResponse(content="3", usage=Usage(prompt_tokens=10)),
    ]
    return RuntimeHarness(IDEMPOTENT, llm_latency=0.0).run(
        conversation, [Send("1+2?", wait=True), Send("thanks", wait=True)]
    )


def test_replay_matches_fails_on_a_changed_prompt_and_on_a_wrong_state() -> None:
    """A divergence is reported with its diff; a differing state field by field."""
    trace = plain_trace()
    assert_replay_matches(trace)

    async def replay_with_another_prompt() -> None:
        await replay_session(
            trace.store, trace.session_id, tools=[add, lookup], system_prompt="Be brief."
        )

    with pytest.raises(ReplayDivergenceError) as info:
        trio.run(replay_with_another_prompt)
    diverged = attrs.evolve(trace, replay_error=info.value, replayed=None)
    with pytest.raises(AssertionError, match="replay of session/s1 failed") as failed:
        assert_replay_matches(diverged)
    assert "+Be brief." in str(failed.value)
    assert trace.replayed is not None
    wrong = attrs.evolve(trace, replayed=attrs.evolve(trace.replayed, usage=Usage()))
    with pytest.raises(AssertionError, match="differs from the live state:\nusage:\n  live: "):
        assert_replay_matches(wrong)


def test_crash_equivalence_fails_for_a_tool_that_is_not_idempotent() -> None:
    """A crash while an ``abort`` tool runs closes it as aborted: not the clean transcript."""

    @tool
    async def charge(amount: int) -> str:
        """Charge a card (not idempotent: aborted by a crash)."""
        return f"charged {amount}"

    harness = RuntimeHarness(AgentSpec(name="shop", tools=[charge]), llm_latency=0.0)
    conversation = [
        LLMResponse(tool_calls=[ToolCall(id="c1", name="charge", arguments='{"amount": 5}')]),
        LLMResponse(content="paid"),
    ]
    ops = [Send("pay", wait=True)]
    clean = harness.run(conversation, ops)
    finished = next(r.version for r in clean.records if r.type == "session.tool_finished")
    crashed = harness.run(conversation, ops, crash_at=finished)
    with pytest.raises(AssertionError) as info:
        assert_crash_equivalent(clean, crashed)
    message = str(info.value)
    assert message.startswith(
        f"the crashed run (faults: crash_at at session/s1 event {finished} "
        "(session.tool_finished)) does not end as the clean run:\ntranscript message 2 differs"
    )
    assert "charged 5" in message
    assert "the process stopped while this tool ran" in message


def test_provider_validity_fails_on_a_call_without_a_result() -> None:
    """An assistant tool call followed by a user message is named, with the fix."""
    call = ToolCall(id="c9", name="add", arguments="{}")
    broken = LLMRequest(
        messages=[UserMessage("hi"), AssistantMessage(tool_calls=[call]), UserMessage("next")]
    )
    assert_requests_provider_valid(plain_trace().requests)
    with pytest.raises(
        AssertionError, match="request #1 is not provider-valid: at message 2"
    ) as info:
        assert_requests_provider_valid([LLMRequest(messages=[UserMessage("ok")]), broken])
    assert "tool_call_id='c9'" in str(info.value)


def test_no_repeated_requests_fails_when_a_recorded_answer_is_asked_again() -> None:
    """A call made after its answer was logged (an agent that forgot its log) is named."""
    trace = plain_trace()
    assert_no_repeated_requests(trace.calls, trace.records)
    first = trace.calls[0]
    head = trace.records[-1].position
    again = attrs.evolve(first, index=len(trace.calls), log_position=head, repeated=True)
    with pytest.raises(AssertionError) as info:
        assert_no_repeated_requests([*trace.calls, again], trace.records)
    recorded = next(r for r in trace.records if r.type == "session.assistant")
    assert str(info.value) == (
        f"model call #{len(trace.calls)} asked for a request whose answer was already recorded "
        f"at session/s1 version {recorded.version} (position {recorded.position}, the log was "
        f"at {head}): the answer must come from the log"
    )


SUMMARY_OF_A = LLMRequest(messages=[SystemMessage("Summarise."), UserMessage("user: a")])


async def compactions_asking_alike(second_since: int) -> tuple[list[LLMCall], InMemoryEventStore]:
    """Two compactions whose summariser was asked the same request (the turn ``user: a``
    after no summary, then after an empty one), the second recorded at ``second_since``."""
    store = InMemoryEventStore()
    fingerprint = SUMMARY_OF_A.fingerprint()

    def compacted(since: int, upto: int) -> ContextCompacted:
        return ContextCompacted(
            run_id="r1",
            upto=upto,
            since=since,
            method="summary",
            summary="",
            tokens_before=400,
            request_fingerprint=fingerprint,
        )

    def call(index: int, position: int) -> LLMCall:
        return LLMCall(
            index=index,
            request=SUMMARY_OF_A,
            fingerprint=fingerprint,
            answer=LLMResponse(content=""),
            repeated=index > 0,
            log_position=position,
        )

    await append(
        store,
        "session/c",
        SessionCreated(session_id="c", system_prompt="", max_rounds=3),
        RunStarted(run_id="r1", input="a", max_rounds=3),
    )
    calls = [call(0, await store.head_position())]
    await append(store, "session/c", compacted(0, 1))
    calls.append(call(1, await store.head_position()))
    await append(store, "session/c", compacted(second_since, 2))
    return calls, store


async def test_no_repeated_requests_passes_a_summary_asked_alike_for_a_later_cut() -> None:
    """The summariser's request names the turns, not where they sit: the same request for
    the next turn, after an empty summary, is a new compaction, not its answer asked again."""
    calls, store = await compactions_asking_alike(second_since=1)
    assert_no_repeated_requests(calls, await store.read_all())


async def test_no_repeated_requests_fails_when_a_summary_is_asked_again_for_its_cut() -> None:
    """A summary asked again for the cut whose answer the log holds (a session that lost
    track of its compaction) is named, as a model call asked again is."""
    calls, store = await compactions_asking_alike(second_since=0)
    records = await store.read_all()
    with pytest.raises(AssertionError) as info:
        assert_no_repeated_requests(calls, records)
    assert str(info.value) == (
        "model call #1 asked for a request whose answer was already recorded at session/c "
        f"version 3 (position 3, the log was at {calls[1].log_position}): the answer must "
        "come from the log"
    )


async def test_budgets_fail_when_a_call_is_made_past_the_limit() -> None:
    """Two calls of 120 tokens under a 100-token budget: the second should not have been made."""
    store = FaultyEventStore().inner
    usage = Usage(prompt_tokens=120)

    def answer(round_: int) -> AssistantRecorded:
        return AssistantRecorded(
            run_id="r1",
            round=round_,
            message=AssistantMessage(content="..."),
            usage=usage,
            model="m",
            finish_reason="stop",
            request_fingerprint=f"sha256:{round_}",
        )

    events = [
        SessionCreated(session_id="b", system_prompt="", max_rounds=10),
        RunStarted(run_id="r1", input="go", max_rounds=10, budget=Budget(max_tokens=100)),
        answer(1),
    ]
    await store.append("session/b", [NewEvent.from_encoded(encode(e)) for e in events], 0)
    assert_budgets_respected(await store.read_all())  # one call may cross the limit
    await store.append("session/b", [NewEvent.from_encoded(encode(answer(2)))], 3)
    with pytest.raises(AssertionError) as info:
        assert_budgets_respected(await store.read_all())
    assert str(info.value) == (
        "session/b run 'r1' round 2 (version 4): the model was called with the budget "
        "already spent (tokens: 120 used, the budget is 100); only the call that crosses a "
        "limit may go beyond it"
    )


async def append(store: InMemoryEventStore, stream: str, *events: object) -> None:
    """Append events to a stream, as an actor would."""
    version = await store.stream_version(stream)
    await store.append(stream, [NewEvent.from_encoded(encode(e)) for e in events], version)


async def test_follow_ups_read_once_fails_on_a_repeat_and_on_an_unread_one() -> None:
    """A follow-up injected twice, and one never injected, are named."""
    store = InMemoryEventStore()
    started = RunStarted(run_id="r1", input="", max_rounds=3)
    await append(
        store,
        "session/f",
        SessionCreated(session_id="f", system_prompt="", max_rounds=3),
        FollowUpReceived(follow_up=FollowUp(id="a", content="one")),
        started,
        FollowUpsInjected(run_id="r1", ids=("a",)),
    )
    assert_follow_ups_read_once(await store.read_all())
    await append(
        store,
        "session/f",
        FollowUpsInjected(run_id="r1", ids=("a",)),
        FollowUpReceived(follow_up=FollowUp(id="b", content="two")),
    )
    with pytest.raises(AssertionError) as info:
        assert_follow_ups_read_once(await store.read_all())
    assert str(info.value) == (
        "follow-ups of session/f: read by the model twice: ['a']; never read by the model: ['b']"
    )


async def test_timers_fire_once_fails_on_a_second_firing_of_one_due_time() -> None:
    """A re-delivered firing that was recorded again is named with its due time."""
    store = InMemoryEventStore()
    fired = TimerFired(timer_id="t1", due_at=60.0, fired_at=61.0)
    await append(store, "session/t", TimerScheduled(timer_id="t1", due_at=60.0), fired)
    assert_timers_fire_once(await store.read_all())
    await append(store, "session/t", fired)
    with pytest.raises(AssertionError) as info:
        assert_timers_fire_once(await store.read_all())
    assert str(info.value) == "timers of session/t fired twice for one due time: [('t1', 60.0)]"


async def test_runs_end_once_fails_on_a_run_that_never_ends() -> None:
    """A run left open at the end of a settled run is named."""
    store = InMemoryEventStore()
    await append(
        store,
        "session/r",
        SessionCreated(session_id="r", system_prompt="", max_rounds=3),
        RunStarted(run_id="r1", input="go", max_rounds=3),
    )
    with pytest.raises(AssertionError) as info:
        assert_runs_end_once(await store.read_all())
    assert str(info.value) == "runs of session/r: never ended: ['r1']"


def test_states_are_folds_fails_on_a_state_the_log_never_had() -> None:
    """A reported state that no prefix of the log folds to is named with its operation."""
    trace = HARNESS.run([LLMResponse(content="hi")], [Send("hello", wait=True), AdvanceClock(1)])
    assert [seen.after for seen in trace.observed] == [
        "Send(text='hello', wait=True, if_busy=None)",
        "AdvanceClock(seconds=1)",
    ]
    assert_states_are_folds(trace)
    seen = trace.observed[0]
    forged = attrs.evolve(seen, state=attrs.evolve(seen.state, usage=Usage(prompt_tokens=1)))
    with pytest.raises(AssertionError) as info:
        assert_states_are_folds(attrs.evolve(trace, observed=(forged,)))
    assert str(info.value) == (
        "after Send(text='hello', wait=True, if_busy=None) the session reported a state that "
        f"is the fold of no prefix of session/s1 (of its first {seen.version} events)"
    )


def test_assert_invariants_lists_the_operations_of_a_failing_run() -> None:
    """The first broken invariant, then each operation with what it did."""
    trace = plain_trace()
    assert trace.replayed is not None
    broken = attrs.evolve(trace, replayed=attrs.evolve(trace.replayed, usage=Usage()))
    with pytest.raises(AssertionError) as info:
        assert_invariants(broken)
    first = "  Send(text='1+2?', wait=True, if_busy=None): completed after 2 round(s)\n"
    assert f"\n\noperations:\n{first}" in str(info.value)


# -- the pytest plugin ----------------------------------------------------------------------


async def test_scripted_llm_fixture_serves_a_session(scripted_llm: ScriptedLLM) -> None:
    """``scripted_llm`` is an empty script the test fills; it must be used up."""
    scripted_llm.add(LLMResponse(content="hi"))
    async with open_runtime(seed=1) as runtime:
        session = await spawn_session(runtime, llm=scripted_llm)
        assert (await session.send("hello")).text == "hi"


async def test_virtual_clock_fixture_makes_a_day_instant(
    virtual_clock: trio.testing.MockClock,
) -> None:
    """A day of sleep passes on the virtual clock."""
    start = trio.current_time()
    await trio.sleep(86_400)
    assert trio.current_time() - start == 86_400


@pytest.mark.slow
def test_the_plugin_is_installed_for_any_project(tmp_path: Path) -> None:
    """A user's test file with no conftest gets the fixtures; an unused answer fails."""
    plugins = {ep.value for ep in entry_points(group="pytest11")}
    if "actors.testing._pytest_plugin" not in plugins:
        pytest.skip("powertrio is installed without its pytest11 entry point: pip install -e .")
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            from hypothesis import given, settings
            from protocols import LLMResponse
            from actors.testing import assert_invariants, conversations, property_settings

            @settings(property_settings(), max_examples=5)
            @given(conversation=conversations())
            def test_agent(runtime_harness, conversation):
                assert_invariants(runtime_harness.run(conversation))

            def test_leftover(scripted_llm):
                scripted_llm.add(LLMResponse(content="never asked"))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "2 passed, 1 error" in done.stdout, done.stdout + done.stderr
    assert "ScriptedLLM: 1 scripted answer(s) not used after 0 request(s)" in done.stdout


# -- defects the kit found, fixed: regression tests -----------------------------------------


def test_replay_matches_a_session_that_crashed_during_a_model_call(
    runtime_harness: RuntimeHarness,
) -> None:
    """A follow-up arrives during a model call, then the answer's append fails: the
    restarted session injects the follow-up and asks again; replay must follow it."""
    trace = runtime_harness.run(
        [LLMResponse(content="")],
        [SendFollowUp("a", "f1"), SendFollowUp("b", "f2"), CrashSession()],
    )
    # The answer and the injection of the follow-ups it is followed by: one decision chain.
    assert [f.event_types for f in trace.faults] == [
        ("session.assistant", "session.follow_ups_injected")
    ]
    assert_replay_matches(trace)


async def test_an_empty_input_does_not_poison_the_session(
    virtual_clock: trio.testing.MockClock,
) -> None:
    """Whether an empty input is refused or answered, the session goes on afterwards."""
    llm = DeterministicLLM([LLMResponse(content="hi")])
    with trio.fail_after(3600):
        async with open_runtime(seed=1) as runtime:
            session = await spawn_session(runtime, llm=llm)
            with contextlib.suppress(ValueError, PowertrioError):
                await session.send("")
            assert (await session.send("hello")).status == "completed"


def test_backoff_is_capped_however_many_restarts() -> None:
    """The delay of the 2000th restart is the maximum, not an overflow."""
    assert Backoff(jitter=0).delay(2000, random.Random(0)) == 5.0


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_log_path_names_the_sqlite_file_only_while_a_run_is_in_progress(store: str) -> None:
    """What a model sees mid-run: the file, on SQLite (for a look at what a run wrote);
    ``None`` in memory, and before and after ``run``, when there is no file."""
    seen: list[tuple[Path | None, bool]] = []
    harness: RuntimeHarness

    def model(request: LLMRequest) -> LLMResponse:
        path = harness.log_path
        seen.append((path, path is not None and path.is_file()))
        return LLMResponse(content="ok")

    harness = RuntimeHarness(store=store, llm=FunctionLLM(model))  # type: ignore[arg-type]
    assert harness.log_path is None
    harness.run(operations=[Send("hi")])
    assert harness.log_path is None
    ((path, exists),) = seen
    if store == "sqlite":
        assert path is not None and path.name == "events.db" and exists
        assert not path.exists()  # the run's directory is gone
    else:
        assert (path, exists) == (None, False)
