"""Replay against the current code, and fork, of sessions and trees: no model is asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from _llama import LlamaServer

from actors import (
    AgentSpec,
    delete_session,
    fork_session,
    replay_session,
    spawn_agent,
    spawn_session,
    tool,
)
from actors._session._trace_ids import tool_span_id, trace_id_of
from actors.events import ChildSpawned
from protocols import AssistantMessage, LLMResponse, SystemMessage, ToolCall, Usage, UserMessage
from protocols.codec import decode_record
from protocols.errors import ConfigError, ReplayDivergenceError, StreamNotFoundError
from protocols.transports import OpenAITransport, ProviderConfig, RetryPolicy
from runtime import open_runtime, open_sqlite_store
from runtime.lowlevel import CONTINUES
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def usage() -> Usage:
    return Usage(prompt_tokens=10, completion_tokens=1)


def script() -> ScriptedLLM:
    return ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')],
                usage=usage(),
            ),
            LLMResponse(content="three", usage=usage()),
            LLMResponse(content="you're welcome", usage=usage()),
        ]
    )


async def record(store: InMemoryEventStore) -> None:
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=script(), tools=[add], system_prompt="Be exact.", session_id="s"
        )
        await session.send("1+2?")
        await session.follow_up("thanks", id="f1")
        await session.wait("fu-f1")


async def test_a_replay_with_the_same_code_matches_and_calls_no_model() -> None:
    store = InMemoryEventStore()
    await record(store)
    async with open_runtime(store=store) as runtime:
        resumed = await spawn_session(runtime, llm=ScriptedLLM(), tools=[add], session_id="s")
        live = await resumed.state()
    replayed = await replay_session(store, "s", tools=[add], system_prompt="Be exact.")
    assert replayed.checked == 3
    assert replayed.state == live
    assert replayed.version == await store.stream_version("session/s")


async def test_a_changed_system_prompt_diverges_with_a_readable_diff() -> None:
    store = InMemoryEventStore()
    await record(store)
    with pytest.raises(ReplayDivergenceError) as info:
        await replay_session(store, "s", tools=[add], system_prompt="Be brief.")
    error = info.value
    assert (error.code, error.stream, error.event_type) == (
        "replay.divergence",
        "session/s",
        "session.assistant",
    )
    assert error.version == 3  # SessionCreated, RunStarted, then the first answer
    assert str(error).startswith("replay of 'session/s' diverges at version 3 (session.assistant):")
    assert "-Be exact." in error.difference
    assert "+Be brief." in error.difference


async def test_a_changed_tool_set_diverges_naming_the_tools() -> None:
    store = InMemoryEventStore()
    await record(store)
    with pytest.raises(ReplayDivergenceError, match=r"tools: recorded \('add',\), replayed \(\)"):
        await replay_session(store, "s", tools=[], system_prompt="Be exact.")


async def test_a_changed_tool_schema_is_named_too() -> None:
    store = InMemoryEventStore()
    await record(store)

    @tool(name="add")
    def add_floats(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    with pytest.raises(ReplayDivergenceError, match="same names, but a description or schema"):
        await replay_session(store, "s", tools=[add_floats], system_prompt="Be exact.")


async def test_replaying_an_unknown_session_is_a_typed_error() -> None:
    with pytest.raises(StreamNotFoundError):
        await replay_session(InMemoryEventStore(), "nope")


WORKER = AgentSpec(name="worker", description="does a piece", system_prompt="worker")
MANAGER = AgentSpec(name="manager", system_prompt="manager", agents=[WORKER])
ROOT = AgentSpec(name="root", system_prompt="root", agents=[MANAGER])


def tree_model(request: object) -> LLMResponse:
    from protocols import LLMRequest

    assert isinstance(request, LLMRequest)
    first = request.messages[0]
    assert isinstance(first, SystemMessage)
    role = first.content
    done = [m for m in request.messages if m.role == "tool"]
    if role == "worker":
        return LLMResponse(content="w", usage=usage())
    child = "manager" if role == "root" else "worker"
    if not done:
        calls = [
            ToolCall(
                id=f"{role}{i}",
                name="spawn_agent",
                arguments=f'{{"agent": "{child}", "task": "t{i}"}}',
            )
            for i in (1, 2)
        ]
        return LLMResponse(tool_calls=calls, usage=usage())
    return LLMResponse(content=f"{role} done", usage=usage())


async def test_a_whole_tree_replays_without_a_model() -> None:
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(tree_model), session_id="r")
        assert (await root.send("go")).status == "completed"
    replayed = await replay_session(store, "r", agents=[MANAGER])
    assert replayed.total_checked == 10  # 2 root + 2x2 managers + 4 workers
    assert [c.session_id for c in replayed.children] == ["r.1", "r.2"]
    assert [g.session_id for g in replayed.children[0].children] == ["r.1.1", "r.1.2"]
    # The spawn_agent tool lists descriptions: the managers' requests stay the same.
    changed = AgentSpec(name="worker", description="does a piece", system_prompt="other")
    manager = AgentSpec(name="manager", system_prompt="manager", agents=[changed])
    with pytest.raises(ReplayDivergenceError, match=r"session/r\.1\.1"):
        await replay_session(store, "r", agents=[manager])
    # From a version of the root on, its sub-agents are checked from that moment too.
    with pytest.raises(ReplayDivergenceError, match=r"session/r\.1\.1"):
        await replay_session(store, "r", agents=[manager], from_version=3)
    end = await store.stream_version("session/r")
    folded = await replay_session(store, "r", agents=[manager], from_version=end)
    assert folded.total_checked == 0
    assert [c.session_id for c in folded.children] == ["r.1", "r.2"]


# -- fork ------------------------------------------------------------------------------


async def test_a_fork_keeps_history_up_to_a_version_and_goes_its_own_way() -> None:
    store = InMemoryEventStore()
    await record(store)
    events = [decode_record(r) for r in await store.read("session/s")]
    first_run_end = next(i + 1 for i, e in enumerate(events) if type(e).__name__ == "RunFinished")
    original_length = len(events)
    new_id = await fork_session(store, "s", at_version=first_run_end, new_id="s-fork")
    assert new_id == "s-fork"
    llm = ScriptedLLM([LLMResponse(content="forked answer", usage=usage())])
    async with open_runtime(store=store) as runtime:
        fork = await spawn_session(
            runtime, llm=llm, tools=[add], system_prompt="Be exact.", session_id="s-fork"
        )
        result = await fork.send("and 2+2?")
        state = await fork.state()
    assert result.text == "forked answer"
    assert llm.requests[0].messages[1:] == (
        UserMessage("1+2?"),
        AssistantMessage(tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')]),
        *llm.requests[0].messages[3:4],
        AssistantMessage(content="three"),
        UserMessage("and 2+2?"),
    )
    assert len(state.results) == 2
    assert await store.stream_version("session/s") == original_length  # untouched
    created = decode_record((await store.read("session/s-fork", 1, limit=1))[0])
    assert (created.forked_from, created.forked_at) == ("s", first_run_end)  # type: ignore[attr-defined]


async def test_a_fork_of_a_tree_forks_its_children() -> None:
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(tree_model), session_id="r")
        await root.send("go")
    length = await store.stream_version("session/r")
    await fork_session(store, "r", at_version=length, new_id="f")
    streams = sorted(s.stream for s in await store.streams("session/f"))
    assert streams == [
        "session/f",
        "session/f.1",
        "session/f.1.1",
        "session/f.1.2",
        "session/f.2",
        "session/f.2.1",
        "session/f.2.2",
    ]
    child = decode_record((await store.read("session/f.1", 1, limit=1))[0])
    assert (child.session_id, child.parent_id) == ("f.1", "f")  # type: ignore[attr-defined]
    # The forked children's spans belong to the fork's trace, not the original's.
    spawned = next(
        e
        for e in map(decode_record, await store.read("session/f"))
        if isinstance(e, ChildSpawned) and e.child_id == "f.1"
    )
    trace = f"{trace_id_of('f', spawned.run_id):032x}"
    assert child.traceparent == (  # type: ignore[attr-defined]
        f"00-{trace}-{tool_span_id('f', spawned.run_id, spawned.call_id):016x}-01"
    )
    grandchild = decode_record((await store.read("session/f.1.1", 1, limit=1))[0])
    assert grandchild.traceparent.split("-")[1] == trace  # type: ignore[attr-defined]
    replayed = await replay_session(store, "f", agents=[MANAGER])
    assert replayed.total_checked == 10


async def test_fork_refuses_bad_arguments() -> None:
    store = InMemoryEventStore()
    await record(store)
    length = await store.stream_version("session/s")
    with pytest.raises(ConfigError) as refused:
        await fork_session(store, "s", at_version=length + 1, new_id="x")
    expected = f"'session/s' has events 1 to {length}: fork at one of them, not at {length + 1}"
    assert expected == str(refused.value)
    await fork_session(store, "s", at_version=2, new_id="x")
    with pytest.raises(ConfigError, match="session 'x' already exists"):
        await fork_session(store, "s", at_version=2, new_id="x")
    with pytest.raises(StreamNotFoundError):
        await fork_session(store, "nope", at_version=1, new_id="y")


# -- a real provider's recording -------------------------------------------------------


@pytest.mark.slow
async def test_a_recording_from_a_real_server_replays_without_it(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    """Record against llama.cpp, replay with no model at all, then change the prompt."""
    path = tmp_path / "recorded.sqlite"
    transport = OpenAITransport(
        ProviderConfig(
            provider="openai",
            base_url=llama_server.url + "/v1",
            model="smollm2",
            retry=RetryPolicy(max_attempts=1),
        )
    )
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime,
            llm=transport,
            system_prompt="Answer in one word.",
            max_tokens=8,
            temperature=0.0,
            session_id="rec",
        )
        result = await session.send("What color is the sky?")
    assert result.status == "completed"
    with trio.fail_after(30):
        async with open_sqlite_store(path) as store:
            same = await replay_session(
                store, "rec", max_tokens=8, temperature=0.0, system_prompt="Answer in one word."
            )
            assert same.checked == 1
            with pytest.raises(ReplayDivergenceError) as info:
                await replay_session(
                    store, "rec", max_tokens=8, temperature=0.0, system_prompt="Answer at length."
                )
    assert "+Answer at length." in info.value.difference


async def test_deleting_a_session_deletes_its_linked_children_not_detached_ones() -> None:
    store = InMemoryEventStore()
    loner = AgentSpec(name="loner", lifecycle="detached", system_prompt="worker")
    async with open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(tree_model), session_id="r")
        await root.send("go")
        await root.spawn(loner, "on its own")
    deleted = await delete_session(store, "r")
    assert deleted == [
        "session/r",
        "session/r.1",
        "session/r.1.1",
        "session/r.1.2",
        "session/r.2",
        "session/r.2.1",
        "session/r.2.2",
    ]
    assert [s.stream for s in await store.streams("session/")] == ["session/r.3"]
    with pytest.raises(StreamNotFoundError):
        await delete_session(store, "r")


async def test_a_fork_never_cuts_inside_one_decision() -> None:
    """A spawn_agent call and the child it starts are appended together: no fork between."""
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(tree_model), session_id="r")
        await root.send("go")
    records = await store.read("session/r")
    # The model's answer, its calls started and the child spawned: one decision chain.
    inside = next(
        r for r in records if r.metadata == CONTINUES and r.type == "session.tool_started"
    )
    with pytest.raises(ConfigError, match=f"version {inside.version} of 'session/r' is inside"):
        await fork_session(store, "r", at_version=inside.version, new_id="f")
    end = next(r.version for r in records if r.version > inside.version and r.metadata is None)
    await fork_session(store, "r", at_version=end, new_id="f")
    forked = await store.read("session/f")
    assert [r.metadata for r in forked] == [r.metadata for r in records[:end]]


# -- replay from a version ---------------------------------------------------------------


async def record_a_prompt_change(store: InMemoryEventStore) -> int:
    """Session ``p``: a run under "Be exact.", then (the app's prompt changed) a run under
    "Be brief."; returns the last version of the first run."""
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime,
            llm=ScriptedLLM([LLMResponse(content="one", usage=usage())]),
            system_prompt="Be exact.",
            session_id="p",
        )
        assert (await session.send("first")).status == "completed"
    changed_at = await store.stream_version("session/p")
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime,
            llm=ScriptedLLM([LLMResponse(content="two", usage=usage())]),
            system_prompt="Be brief.",
            session_id="p",
        )
        assert (await session.send("second")).status == "completed"
    return changed_at


async def test_a_replay_from_a_version_checks_only_the_answers_after_it() -> None:
    store = InMemoryEventStore()
    changed_at = await record_a_prompt_change(store)
    with pytest.raises(ReplayDivergenceError) as whole:
        await replay_session(store, "p", system_prompt="Be brief.")
    assert whole.value.version == 3  # the first run's answer, asked under "Be exact."
    with pytest.raises(ReplayDivergenceError) as before:
        await replay_session(store, "p", system_prompt="Be brief.", from_version=2)
    assert before.value.version == 3
    after = await replay_session(store, "p", system_prompt="Be brief.", from_version=changed_at)
    assert after.checked == 1  # the second run's answer only
    assert after.version == await store.stream_version("session/p")
    length = await store.stream_version("session/p")
    folded = await replay_session(store, "p", system_prompt="Be exact.", from_version=length)
    assert (folded.checked, folded.state) == (0, after.state)  # the log, folded as recorded
    with pytest.raises(ReplayDivergenceError) as old_code:
        await replay_session(store, "p", system_prompt="Be exact.", from_version=changed_at)
    assert old_code.value.version > changed_at


@pytest.mark.parametrize("offset", [1, None])
async def test_a_replay_from_outside_the_stream_is_refused(offset: int | None) -> None:
    store = InMemoryEventStore()
    await record(store)
    length = await store.stream_version("session/s")
    at = -1 if offset is None else length + offset
    with pytest.raises(ConfigError) as refused:
        await replay_session(store, "s", tools=[add], system_prompt="Be exact.", from_version=at)
    assert refused.value.code == "config.invalid"
    expected = (
        f"'session/s' has events 1 to {length}: replay from one of them (0 from the start), "
        f"not from {at}"
    )
    assert str(refused.value) == expected
