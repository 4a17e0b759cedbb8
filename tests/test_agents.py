"""Agent trees: specs, sub-agents from the model and from Python, limits, usage, cancel, crash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import orjson
import pytest
import trio
import trio.testing

from actors import (
    AgentSpec,
    Budget,
    SessionState,
    replay_session,
    spawn_agent,
    spawn_session,
    tool,
)
from actors.events import ChildFinished, ChildSpawned, RunFinished, ToolFinished
from protocols import (
    LLMRequest,
    LLMResponse,
    Message,
    ResponseFormat,
    SystemMessage,
    ToolCall,
    Usage,
    UserMessage,
)
from protocols.codec import decode_record
from protocols.errors import AgentSpecError, ConfigError, ToolNotFoundError
from runtime import NewEvent, Request, open_runtime
from runtime.supervision import Backoff, Supervision
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM


def _state_request() -> Request[SessionState]:
    from actors._session._steps import GetState

    return GetState()


FAST_RESTART = Supervision(max_restarts=100, within=1, backoff=Backoff(initial=0))


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def usage() -> Usage:
    return Usage(prompt_tokens=10, completion_tokens=1)


def text_of(message: Message) -> str:
    """The text of any message kind."""
    if isinstance(message, UserMessage):
        return message.text
    return message.content if isinstance(message.content, str) else ""


def spawn_call(call_id: str, agent: str, task: str) -> ToolCall:
    return ToolCall(
        id=call_id,
        name="spawn_agent",
        arguments=orjson.dumps({"agent": agent, "task": task}).decode(),
    )


class TreeModel:
    """One deterministic model for a three-level tree, answering by the agent's prompt.

    root spawns two managers, each manager spawns two workers, workers answer. Each level
    reports what its children said, so the root's answer shows the whole tree.
    """

    def __init__(self, *, worker_gate: trio.Event | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.worker_gate = worker_gate
        self.workers_in_flight = 0
        self.most_workers_in_flight = 0
        self.four_workers = trio.Event()

    async def __call__(self, request: LLMRequest) -> LLMResponse:
        system = request.messages[0]
        assert isinstance(system, SystemMessage)
        role = system.content
        task = text_of(request.messages[1])
        results = [text_of(m) for m in request.messages if m.role == "tool"]
        self.calls[f"{role}:{task}:{'answer' if results else 'ask'}"] += 1
        if role == "worker":
            self.workers_in_flight += 1
            self.most_workers_in_flight = max(self.most_workers_in_flight, self.workers_in_flight)
            if self.workers_in_flight == 4:
                self.four_workers.set()
            try:
                if self.worker_gate is not None:
                    await self.worker_gate.wait()
                else:
                    await trio.sleep(0.01)
            finally:
                self.workers_in_flight -= 1
            return LLMResponse(content=f"worker({task})", usage=usage())
        child = "manager" if role == "root" else "worker"
        if not results:
            return LLMResponse(
                tool_calls=[
                    spawn_call(f"{task}-1", child, f"{task}.1"),
                    spawn_call(f"{task}-2", child, f"{task}.2"),
                ],
                usage=usage(),
            )
        return LLMResponse(content=f"{role}({task})[{' + '.join(results)}]", usage=usage())


WORKER = AgentSpec(name="worker", system_prompt="worker", description="does one piece")
MANAGER = AgentSpec(name="manager", system_prompt="manager", agents=[WORKER])
ROOT = AgentSpec(name="root", system_prompt="root", agents=[MANAGER])

EXPECTED_ANSWER = (
    "root(go)[manager(go.1)[worker(go.1.1) + worker(go.1.2)] + "
    "manager(go.2)[worker(go.2.1) + worker(go.2.2)]]"
)


async def stream(store: InMemoryEventStore, session_id: str) -> list[object]:
    return [decode_record(r) for r in await store.read(f"session/{session_id}")]


# -- specs -----------------------------------------------------------------------------


def test_a_spec_reports_every_problem_at_once() -> None:
    with pytest.raises(AgentSpecError) as info:
        AgentSpec(
            name="9 lives",
            max_rounds=0,
            lifecycle="forever",  # type: ignore[arg-type]
            tools=["add", "add", 3],  # type: ignore[list-item]
            response_format=ResponseFormat(name="x", schema={"type": "bogus"}),
            agents=[WORKER, WORKER],
        )
    error = info.value
    assert error.code == "config.agent_spec"
    assert len(error.problems) == 7
    text = str(error)
    assert text.startswith("agent spec '9 lives' is invalid:\n  - name '9 lives' must start")
    for fragment in (
        "max_rounds must be an int >= 1, got 0",
        "lifecycle must be one of ephemeral, linked, detached, got 'forever'",
        "tool 'add' is listed twice",
        "tools holds 3: give a tool name or a Tool (@tool)",
        "response_format: ",
        "two sub-agents are named 'worker'",
    ):
        assert fragment in text


async def test_a_top_level_agent_needs_a_model_and_tool_objects() -> None:
    async with open_runtime() as runtime:
        with pytest.raises(ConfigError, match="agent spec 'root' has no llm"):
            await spawn_agent(runtime, ROOT)
        with pytest.raises(ConfigError, match=r"names tools \(add\) but a top-level agent"):
            await spawn_agent(runtime, AgentSpec(name="a", tools=["add"]), llm=ScriptedLLM())
    # Replaying a top-level agent from its spec asks the same of the spec.
    with pytest.raises(ConfigError, match=r"names tools \(add\) but a top-level agent"):
        await replay_session(InMemoryEventStore(), "a", AgentSpec(name="a", tools=["add"]))


# -- trees -----------------------------------------------------------------------------


async def test_a_three_level_tree_runs_children_in_parallel_and_sums_usage() -> None:
    model = TreeModel()
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(model), session_id="r")
        result = await root.send("go")
    assert (result.status, result.text) == ("completed", EXPECTED_ANSWER)
    # 2 root calls + 2 managers x 2 calls + 4 workers x 1 call, 11 tokens each.
    assert result.usage.total_tokens == 10 * 11
    assert model.most_workers_in_flight >= 2
    assert set(model.calls.values()) == {1}
    root_events = await stream(store, "r")
    spawned = [e for e in root_events if isinstance(e, ChildSpawned)]
    finished = [e for e in root_events if isinstance(e, ChildFinished)]
    assert [(e.child_id, e.agent, e.task) for e in spawned] == [
        ("r.1", "manager", "go.1"),
        ("r.2", "manager", "go.2"),
    ]
    assert {(e.child_id, e.status, e.usage.total_tokens) for e in finished} == {
        ("r.1", "completed", 44),
        ("r.2", "completed", 44),
    }
    grandchildren = [e for e in await stream(store, "r.1") if isinstance(e, ChildSpawned)]
    assert [e.child_id for e in grandchildren] == ["r.1.1", "r.1.2"]
    worker_stream = await stream(store, "r.1.2")
    assert type(worker_stream[0]).__name__ == "SessionCreated"
    assert (worker_stream[0].parent_id, worker_stream[0].depth) == ("r.1", 2)  # type: ignore[attr-defined]


async def test_a_tree_wide_budget_stops_the_whole_tree() -> None:
    model = TreeModel()
    async with open_runtime() as runtime:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(model), session_id="r")
        result = await root.send("go", budget=Budget(max_tokens=30))
        state = await root.state()
    assert result.status == "budget_exceeded"
    assert "root:go:answer" not in model.calls  # the answer round was never asked for
    assert set(state.child_status.values()) == {"budget_exceeded"}
    spawned = state.children
    assert all(c.budget is not None and c.budget.max_tokens == 19 for c in spawned)


async def test_depth_and_fan_out_limits_are_tool_errors_the_model_reads() -> None:
    model = TreeModel()
    async with open_runtime() as runtime:
        root = await spawn_agent(
            runtime, ROOT, llm=FunctionLLM(model), session_id="r", max_depth=1, max_children=1
        )
        result = await root.send("go")
    assert result.status == "completed"
    # One manager ran (fan-out 1); it could not spawn workers (depth 1).
    assert "cannot spawn 'manager': a run may start at most 1 sub-agents" in result.text
    assert "cannot spawn 'worker': agent trees are limited to depth 1" in result.text
    assert not any(key.startswith("worker") for key in model.calls)
    assert sum(key.startswith("manager") for key in model.calls) == 2  # one manager


async def test_a_child_never_gets_tools_its_parent_lacks() -> None:
    greedy = AgentSpec(name="greedy", tools=["add"])
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[spawn_call("s1", "greedy", "sum")], usage=usage()),
            LLMResponse(content="gave up", usage=usage()),
        ]
    )
    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=llm, agents=[greedy])
        result = await session.send("go")
    assert result.status == "completed"
    (refusal,) = [m for m in llm.requests[1].messages if m.role == "tool"]
    assert refusal.content == (
        "cannot spawn 'greedy': it needs tools this agent does not have: add"
    )


async def test_a_child_inherits_the_parents_tools_by_default() -> None:
    helper = AgentSpec(name="helper", system_prompt="helper")

    def respond(request: LLMRequest) -> LLMResponse:
        system = text_of(request.messages[0])
        tools = [t.name for t in request.tools]
        if system == "helper":
            assert tools == ["add"]
            if request.messages[-1].role == "tool":
                return LLMResponse(content=f"sum is {text_of(request.messages[-1])}", usage=usage())
            return LLMResponse(
                tool_calls=[ToolCall(id="a", name="add", arguments='{"a": 2, "b": 3}')],
                usage=usage(),
            )
        assert tools == ["add", "spawn_agent"]
        if request.messages[-1].role == "tool":
            return LLMResponse(content=text_of(request.messages[-1]), usage=usage())
        return LLMResponse(tool_calls=[spawn_call("s", "helper", "add 2 and 3")], usage=usage())

    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(respond), tools=[add], agents=[helper], system_prompt="boss"
        )
        result = await session.send("go")
    assert result.text == "sum is 5"


async def test_cancelling_the_root_cancels_the_whole_tree() -> None:
    gate = trio.Event()
    model = TreeModel(worker_gate=gate)
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(model), session_id="r")
        results = []

        async def send() -> None:
            results.append(await root.send("go"))

        nursery.start_soon(send)
        with trio.fail_after(5):
            await model.four_workers.wait()
        assert await root.cancel("stop everything")
        await trio.testing.wait_all_tasks_blocked()
        assert model.workers_in_flight == 0
        for child_id in ("r.1", "r.2"):  # retired once their ends are recorded: read the log
            records = await runtime.store.read(f"session/{child_id}")
            (outcome,) = [e for e in map(decode_record, records) if isinstance(e, RunFinished)]
            assert outcome.status == "cancelled"
        # Each child's end is in the parent's log too (its usage rolled up into the run).
        records = await runtime.store.read("session/r")
        finished = [e for e in map(decode_record, records) if isinstance(e, ChildFinished)]
        assert sorted((f.child_id, f.status) for f in finished) == [
            ("r.1", "cancelled"),
            ("r.2", "cancelled"),
        ]
        gate.set()
    assert results[0].status == "cancelled"


async def test_a_restarted_parent_reattaches_its_children_without_repeating_them() -> None:
    """The root crashes when recording its first child's result; nothing runs twice."""
    store = InMemoryEventStore()
    failed: list[bool] = []

    class FailFirstChildFinished:
        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def append(self, stream: str, events: Sequence[NewEvent], expected: int) -> object:
            if (
                stream == "session/r"
                and not failed
                and any(e.type == "session.child_finished" for e in events)
            ):
                failed.append(True)
                store.fail_next_commit()
            return await store.append(stream, events, expected)

    model = TreeModel()
    async with open_runtime(store=FailFirstChildFinished(), supervision=FAST_RESTART) as runtime:  # type: ignore[arg-type]
        root = await spawn_agent(runtime, ROOT, llm=FunctionLLM(model), session_id="r")
        result = await root.send("go")
    assert failed
    assert (result.status, result.text) == ("completed", EXPECTED_ANSWER)
    assert set(model.calls.values()) == {1}, f"a recorded answer was requested again: {model.calls}"
    spawned = [e for e in await stream(store, "r") if isinstance(e, ChildSpawned)]
    assert [e.child_id for e in spawned] == ["r.1", "r.2"]


# -- from Python -----------------------------------------------------------------------


async def test_spawning_from_python_links_the_child_and_rolls_up_usage() -> None:
    store = InMemoryEventStore()
    summarizer = AgentSpec(name="summarizer", system_prompt="summarize", tools=[add])
    llm = ScriptedLLM([LLMResponse(content="short", usage=usage())])
    async with open_runtime(store=store) as runtime:
        parent = await spawn_session(runtime, llm=llm, session_id="p")
        result = await parent.spawn(summarizer, "a long text")
        await trio.testing.wait_all_tasks_blocked()
        state = await parent.state()
    assert (result.status, result.text) == ("completed", "short")
    assert state.usage == usage()
    assert [c.child_id for c in state.children] == ["p.1"]
    assert state.child_status == {"p.1": "completed"}
    assert llm.requests[0].tools[0].name == "add"


async def test_spawning_from_python_refuses_unknown_tool_names() -> None:
    async with open_runtime() as runtime:
        parent = await spawn_session(runtime, llm=ScriptedLLM(), tools=[add])
        with pytest.raises(ToolNotFoundError, match="no tool named 'search'"):
            await parent.spawn(AgentSpec(name="s", tools=["search"]), "x")


async def test_an_ephemeral_child_loses_its_stream_only_when_it_completes() -> None:
    store = InMemoryEventStore()
    scratch = AgentSpec(name="scratch", lifecycle="ephemeral")
    llm = ScriptedLLM([LLMResponse(content="ok", usage=usage()), ValueError("model down")])
    async with open_runtime(store=store) as runtime:
        parent = await spawn_session(runtime, llm=llm, session_id="p")
        ok = await parent.spawn(scratch, "one")
        failed = await parent.spawn(scratch, "two")
        await trio.testing.wait_all_tasks_blocked()
    assert (ok.status, failed.status) == ("completed", "failed")
    streams = {s.stream for s in await store.streams("session/")}
    assert "session/p.1" not in streams
    assert "session/p.2" in streams


def test_child_finished_is_recorded_with_the_tool_result() -> None:
    """ToolFinished and ChildFinished of one spawn land in the same append."""

    async def scenario() -> list[object]:
        store = InMemoryEventStore()
        llm = ScriptedLLM(
            [
                LLMResponse(tool_calls=[spawn_call("s", "worker", "w")], usage=usage()),
                LLMResponse(content="done", usage=usage()),
                LLMResponse(content="parent done", usage=usage()),
            ]
        )
        async with open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=llm, agents=[WORKER], session_id="p")
            await session.send("go")
        return await stream(store, "p")

    events = trio.run(scenario)
    kinds = [type(e).__name__ for e in events]
    finished_at = kinds.index("ToolFinished")
    assert kinds[finished_at + 1] == "ChildFinished"
    tool_finished = events[finished_at]
    assert isinstance(tool_finished, ToolFinished)
    assert tool_finished.outcome.content == "done"


# -- one source of an agent's options ------------------------------------------------------


def test_the_keywords_of_spawn_session_are_the_spec_s_fields() -> None:
    """An agent's options are the spec's fields: ``spawn_session`` lists none of them
    itself, so an option added to the spec is a keyword at once, with its default."""
    import inspect

    import attrs

    from actors._session._agents import AGENT_OPTIONS

    identity = {"name", "description", "lifecycle", "llm"}
    assert {f.name for f in attrs.fields(AgentSpec)} - identity == AGENT_OPTIONS
    own = set(inspect.signature(spawn_session).parameters)
    assert own & AGENT_OPTIONS == set()


def test_a_spec_refuses_bad_model_parameters_with_every_problem() -> None:
    with pytest.raises(AgentSpecError) as info:
        AgentSpec(name="a", max_tokens=0, temperature=-0.5, tool_concurrency=True)
    assert info.value.problems == (
        "max_tokens must be an int >= 1 or None, got 0",
        "tool_concurrency must be an int >= 1 or None, got True",
        "temperature must be a number >= 0 or None, got -0.5",
    )


async def test_spawn_session_takes_a_spec_and_keywords_replace_its_fields() -> None:
    spec = AgentSpec(
        name="writer", system_prompt="Write.", max_tokens=64, temperature=0.5, tools=[add]
    )
    llm = ScriptedLLM([LLMResponse(content="one", usage=usage())] * 2)
    async with open_runtime() as rt:
        session = await spawn_session(rt, spec, llm=llm)
        assert (await session.send("go")).text == "one"
        tuned = await spawn_session(rt, spec, llm=llm, temperature=0.0, system_prompt="Edit.")
        assert (await tuned.send("go")).text == "one"
        created = (await stream(rt.store, session.id))[0]
    first, second = llm.requests
    assert (first.max_tokens, first.temperature) == (64, 0.5)
    assert (second.max_tokens, second.temperature) == (64, 0.0)
    assert [text_of(m) for m in first.messages[:1]] == ["Write."]
    assert [text_of(m) for m in second.messages[:1]] == ["Edit."]
    assert [t.name for t in first.tools] == ["add"]
    assert getattr(created, "agent", None) == "writer"


async def test_spawn_session_refuses_bad_options_with_messages() -> None:
    async with open_runtime() as rt:
        with pytest.raises(AgentSpecError) as info:
            await spawn_session(rt, llm=ScriptedLLM(), max_rounds=0, tool_concurrency=0)
        assert str(info.value) == (
            "agent spec 'session' is invalid:\n"
            "  - max_rounds must be an int >= 1, got 0\n"
            "  - tool_concurrency must be an int >= 1 or None, got 0"
        )
        with pytest.raises(TypeError, match="spawn_session\\(\\) got an unexpected keyword "):
            await spawn_session(rt, llm=ScriptedLLM(), max_round=3)  # type: ignore[call-arg]
        with pytest.raises(ConfigError) as no_model:
            await spawn_session(rt, AgentSpec(name="idle"))
        assert str(no_model.value) == (
            "agent spec 'idle' has no llm: set AgentSpec.llm or pass llm="
        )
        with pytest.raises(ConfigError, match="names tools \\(add\\) but a top-level agent"):
            await spawn_session(rt, AgentSpec(name="named", tools=["add"]), llm=ScriptedLLM())


async def test_a_child_takes_its_spec_s_model_parameters_else_its_parent_s() -> None:
    own = AgentSpec(name="own", max_tokens=32, temperature=0.25)
    inherit = AgentSpec(name="inherit")
    calls = [
        ToolCall(id="c1", name="spawn_agent", arguments='{"agent": "own", "task": "a"}'),
        ToolCall(id="c2", name="spawn_agent", arguments='{"agent": "inherit", "task": "b"}'),
    ]

    def answer(request: LLMRequest) -> LLMResponse:
        if request.messages[0].role == "system" and text_of(request.messages[0]) == "boss":
            if any(m.role == "tool" for m in request.messages):
                return LLMResponse(content="done", usage=usage())
            return LLMResponse(content="", tool_calls=tuple(calls), usage=usage())
        return LLMResponse(content="child", usage=usage())

    llm = FunctionLLM(answer)
    async with open_runtime() as rt:
        session = await spawn_session(
            rt,
            llm=llm,
            system_prompt="boss",
            agents=[own, inherit],
            max_tokens=100,
            temperature=1.0,
        )
        assert (await session.send("go")).text == "done"
    seen = {(r.max_tokens, r.temperature) for r in llm.requests if text_of(r.messages[0]) != "boss"}
    assert seen == {(32, 0.25), (100, 1.0)}
