"""Typed outputs and parameters: an attrs class or a pydantic model as ``response_format``
and as a tool parameter, through real session runs on SQLite, across a restart.

The log keeps JSON: the schema in ``RunStarted``, the answer in ``RunFinished``; the
instance is built where the result is read, so a reopened session gives an equal one.
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import attrs
import pydantic
import pytest

from actors import AgentSpec, OutputTypeError, replay_session, spawn_agent, spawn_session, tool
from actors._session._events import typed_result
from actors._tools._runner import _render
from actors.events import RunFinished, RunStarted
from actors.workflows import WorkflowContext, start_workflow, workflow
from protocols import LLMRequest, LLMResponse, OutputType, ToolCall
from protocols.codec import decode_record
from protocols.errors import AgentSpecError, UnsupportedTypeError
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM, ScriptedLLM


class Kind(enum.Enum):
    PROJECT = "project"
    CHORE = "chore"


@attrs.frozen
class Step:
    title: str
    minutes: int | None = None


@attrs.frozen
class Plan:
    """A plan to reach a goal."""

    goal: str
    kind: Kind
    steps: list[Step]
    owner: Literal["me", "you"] | None = None
    ref: int | str = 0


class PStep(pydantic.BaseModel):
    title: str
    minutes: int | None = None


class PPlan(pydantic.BaseModel):
    goal: str
    kind: Kind
    steps: list[PStep]
    owner: Literal["me", "you"] | None = None
    ref: int | str = 0


ANSWER = {
    "goal": "ship",
    "kind": "project",
    "steps": [{"title": "write", "minutes": 30}, {"title": "test"}],
    "owner": "me",
    "ref": "r-1",
}
PLAN = Plan("ship", Kind.PROJECT, [Step("write", 30), Step("test")], "me", "r-1")
PPLAN = PPlan(
    goal="ship",
    kind=Kind.PROJECT,
    steps=[PStep(title="write", minutes=30), PStep(title="test")],
    owner="me",
    ref="r-1",
)


def text(value: object) -> LLMResponse:
    return LLMResponse(content=value if isinstance(value, str) else json.dumps(value))


def no_model(request: LLMRequest) -> LLMResponse:
    msg = "a recorded answer was asked for again"
    raise AssertionError(msg)


async def events_of(store: object, session_id: str) -> list[object]:
    records = await store.read(f"session/{session_id}", 1)  # type: ignore[attr-defined]
    return [decode_record(r) for r in records]


@pytest.mark.parametrize(("cls", "expected"), [(Plan, PLAN), (PPlan, PPLAN)])
async def test_a_class_as_response_format_gives_an_instance_and_logs_json(
    tmp_path: Path, cls: type[object], expected: object
) -> None:
    """The schema generated from the class is asked for and recorded; the answer is
    recorded as JSON and handed back as an instance."""
    llm = ScriptedLLM([text(ANSWER)])
    async with open_sqlite_store(tmp_path / "log.sqlite") as store, open_runtime(store=store) as rt:
        session = await spawn_session(rt, llm=llm, session_id="s")
        result = await session.send("plan it", response_format=cls, id="r1")
        events = await events_of(store, "s")
    assert result.status == "completed"
    assert result.output == expected
    assert type(result.output) is cls
    assert result.raw_output == ANSWER
    asked = llm.requests[0].response_format
    assert asked == OutputType.of(cls).format
    assert asked is not None
    assert asked.name == cls.__name__
    started = next(e for e in events if isinstance(e, RunStarted))
    finished = next(e for e in events if isinstance(e, RunFinished))
    assert started.response_format == asked
    assert finished.output == ANSWER


async def test_a_restarted_session_gives_the_same_instance_from_the_log(tmp_path: Path) -> None:
    """Reopen the SQLite log and resume the session with the same class: the repeated send
    finds its run and structures the recorded JSON again; the model is not asked."""
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(
            rt, llm=ScriptedLLM([text(ANSWER)]), response_format=Plan, session_id="s"
        )
        first = await session.send("plan it", id="r1")
    assert first.output == PLAN
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(
            rt, llm=FunctionLLM(no_model), response_format=Plan, session_id="s"
        )
        again = await session.send("plan it", id="r1")
        waited = await session.wait("r1")
    assert again.output == waited.output == PLAN
    assert again == first


async def test_a_send_class_overrides_the_session_one_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    """A class given to one send applies to that run; without a class the session reads
    the recorded JSON (``output`` and ``raw_output`` are then the same)."""
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(rt, llm=ScriptedLLM([text(ANSWER)]), session_id="s")
        first = await session.send("plan it", response_format=PPlan, id="r1")
    assert first.output == PPLAN
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(rt, llm=FunctionLLM(no_model), session_id="s")
        raw = await session.wait("r1")
        typed = await session.send("plan it", response_format=PPlan, id="r1")
    assert raw.output == raw.raw_output == ANSWER
    assert typed.output == PPLAN


@attrs.frozen
class PlanV2:
    goal: str
    deadline: str


async def test_a_class_changed_since_the_run_was_recorded_is_a_typed_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(rt, llm=ScriptedLLM([text(ANSWER)]), session_id="s")
        await session.send("plan it", response_format=Plan, id="r1")
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        session = await spawn_session(rt, llm=FunctionLLM(no_model), session_id="s")
        with pytest.raises(OutputTypeError) as caught:
            await session.send("plan it", response_format=PlanV2, id="r1")
    assert caught.value.code == "session.output_type"
    assert (caught.value.run_id, caught.value.type_name) == ("r1", "PlanV2")
    assert str(caught.value) == (
        "the recorded output of run 'r1' does not fit PlanV2: $.deadline: KeyError: 'deadline'"
    )


@pytest.mark.parametrize("cls", [Plan, PPlan])
async def test_a_bad_answer_gets_the_repair_round_then_an_instance(cls: type[object]) -> None:
    """A wrong enum value and a missing field are told to the model, which answers again."""
    bad = {**ANSWER, "kind": "epic"}
    del bad["goal"]
    llm = ScriptedLLM([text(bad), text(ANSWER)])
    async with open_runtime() as rt:
        session = await spawn_session(rt, llm=llm)
        result = await session.send("plan it", response_format=cls)
    assert result.status == "completed"
    assert result.rounds == 2
    assert type(result.output) is cls
    repair = llm.requests[1].messages[-1].text
    assert "does not match the required JSON schema" in repair
    assert "$.kind:" in repair
    assert "goal" in repair


async def test_a_second_bad_answer_fails_with_no_instance() -> None:
    llm = ScriptedLLM([text("not json"), text({**ANSWER, "steps": [{"minutes": 3}]})])
    async with open_runtime() as rt:
        session = await spawn_session(rt, llm=llm)
        result = await session.send("plan it", response_format=Plan)
    assert result.status == "failed"
    assert result.error_code == "session.output_invalid"
    assert result.error_message is not None
    assert "$.steps[0]" in result.error_message
    assert "title" in result.error_message
    assert result.output is None
    assert result.raw_output is None


@attrs.frozen
class Timed:
    when: complex


async def test_a_class_without_a_schema_is_refused_naming_the_field() -> None:
    async with open_runtime() as rt:
        session = await spawn_session(rt, llm=ScriptedLLM())
        with pytest.raises(UnsupportedTypeError, match=r"field Timed\.when: unsupported type"):
            await session.send("x", response_format=Timed)
        with pytest.raises(UnsupportedTypeError, match=r"field Timed\.when: unsupported type"):
            await spawn_session(rt, llm=ScriptedLLM(), response_format=Timed)
    with pytest.raises(AgentSpecError) as caught:
        AgentSpec(name="bad", response_format=Timed)
    assert "response_format Timed: field Timed.when: unsupported type complex" in str(caught.value)
    with pytest.raises(AgentSpecError, match="str is not an attrs class or a pydantic model"):
        AgentSpec(name="bad", response_format=str)


async def test_an_agent_spec_class_types_its_results_top_level_and_as_a_child(
    tmp_path: Path,
) -> None:
    """``AgentSpec(response_format=cls)``: ``spawn_agent``'s session and a child spawned
    from Python both hand back instances; a resumed spawn_agent reads the same one."""
    planner = AgentSpec(name="planner", response_format=PPlan)
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        root = await spawn_agent(
            rt, planner, llm=ScriptedLLM([text(ANSWER), text(ANSWER)]), session_id="p"
        )
        top = await root.send("plan it", id="r1")
        child = await root.spawn(AgentSpec(name="sub", response_format=Plan), "plan a part")
    assert top.output == PPLAN
    assert child.output == PLAN
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        root = await spawn_agent(rt, planner, llm=FunctionLLM(no_model), session_id="p")
        assert (await root.send("plan it", id="r1")).output == PPLAN


@workflow
async def run_planner(wf: WorkflowContext, goal: str) -> str:
    result = await wf.run(AgentSpec(name="planner", response_format=Plan), goal)
    assert isinstance(result.output, Plan)
    return result.output.steps[0].title


async def test_a_workflow_agent_step_gives_an_instance_recorded_as_json(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    for llm in (ScriptedLLM([text(ANSWER)]), FunctionLLM(no_model)):
        async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
            handle = await start_workflow(rt, run_planner, "ship", workflow_id="w", llm=llm)
            assert await handle.result() == "write"


# -- tool parameters ----------------------------------------------------------------------


@attrs.frozen
class Query:
    """A search."""

    terms: list[str]
    kind: Kind = Kind.CHORE


class PQuery(pydantic.BaseModel):
    terms: list[str]
    limit: int = 3


SEEN: list[object] = []


@tool
def search(query: Query) -> str:
    """Search the notes."""
    SEEN.append(query)
    return f"{len(query.terms)} terms"


@tool
def psearch(query: PQuery, page: int = 1) -> str:
    """Search the notes with a model."""
    SEEN.append(query)
    return f"limit {query.limit} page {page}"


def test_a_class_parameter_gets_its_schema_from_the_class() -> None:
    assert search.spec.parameters["properties"] == {"query": {"$ref": "#/$defs/Query"}}
    defs = psearch.spec.parameters["$defs"]
    assert isinstance(defs, dict)
    assert defs["PQuery"] == {
        "type": "object",
        "title": "PQuery",
        "properties": {
            "terms": {"type": "array", "items": {"type": "string"}, "title": "Terms"},
            "limit": {"type": "integer", "default": 3, "title": "Limit"},
        },
        "required": ["terms"],
    }


async def test_tools_receive_instances_and_bad_arguments_are_told_to_the_model() -> None:
    SEEN.clear()
    calls = [
        ToolCall(id="c1", name="search", arguments='{"query": {"terms": ["a", "b"]}}'),
        ToolCall(id="c2", name="psearch", arguments='{"query": {"terms": ["a"], "limit": 9}}'),
        ToolCall(id="c3", name="psearch", arguments='{"query": {"terms": "a"}}'),
    ]
    llm = ScriptedLLM([LLMResponse(tool_calls=tuple(calls)), text("done")])
    async with open_runtime() as rt:
        session = await spawn_session(rt, llm=llm, tools=[search, psearch])
        result = await session.send("look")
    assert result.status == "completed"
    found = sorted(SEEN, key=lambda q: type(q).__name__)  # the tools run concurrently
    assert found == [PQuery(terms=["a"], limit=9), Query(["a", "b"])]
    results = [m for m in llm.requests[1].messages if m.role == "tool"]
    assert [m.text for m in results[:2]] == ["2 terms", "limit 9 page 1"]
    assert "$.query.terms" in results[2].text


# -- the optional extra -------------------------------------------------------------------


def test_importing_powertrio_never_imports_pydantic() -> None:
    """pydantic is an optional extra: nothing loads it unless the app does."""
    code = (
        "import sys, protocols, runtime, actors, actors.testing, runtime.testing\n"
        "from protocols import OutputType\n"
        "import attrs\n"
        "@attrs.frozen\n"
        "class A:\n"
        "    x: int\n"
        "OutputType.of(A).structure({'x': 1})\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_a_model_a_tool_returns_is_told_to_the_model_as_json() -> None:
    assert _render(PQuery(terms=["a"], limit=2)) == '{"terms":["a"],"limit":2}'
    assert _render(Query(["a"])) == '{"terms":["a"],"kind":"chore"}'


async def test_a_typed_session_replays_from_its_log(tmp_path: Path) -> None:
    """The recorded schema and answer replay against the spec with the class: the same
    request is asked for, and the folded result structures into the same instance."""
    planner = AgentSpec(name="planner", response_format=Plan)
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store) as rt:
        root = await spawn_agent(rt, planner, llm=ScriptedLLM([text(ANSWER)]), session_id="p")
        await root.send("plan it", id="r1")
    async with open_sqlite_store(path) as store:
        replayed = await replay_session(store, "p", planner)
    assert replayed.checked == 1
    result = replayed.state.results["r1"]
    assert result.output == result.raw_output == ANSWER
    assert typed_result(result, OutputType.of(Plan)).output == PLAN
