"""The session actor's messages, effect steps, configuration and pure helpers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, final

import attrs
import orjson

from protocols import (
    LLM,
    Cancel,
    FollowUp,
    JsonValue,
    LLMRequest,
    LLMResponse,
    ResponseFormat,
    ToolCall,
    ToolOutcome,
    validate_json,
)
from protocols.errors import (
    PowertrioError,
    ToolNotFoundError,
)
from runtime import (
    Request,
)

from ._agents import SPAWN_AGENT, AgentSpec, child_tools, index_agents, spawn_agent_tool
from ._board_events import BoardChanged
from ._budget import Budget, Price
from ._observe import (
    LLMHook,
    ObserverBus,
    ToolHook,
)
from ._session_events import (
    ActiveRun,
    CancelRequested,
    ChildFinished,
    ChildSpawned,
    FollowUpsInjected,
    HumanRequested,
    OutputRejected,
    RequestHeader,
    RunFinished,
    RunResult,
    RunStatus,
    SessionState,
    ToolStarted,
)
from ._tools import ToolRegistry, tool

BusyPolicy = Literal["queue", "reject", "interrupt"]
"""What a ``send`` does while a run is active: ``queue`` it to run next, ``reject`` it
(:class:`~protocols.errors.SessionBusyError`), or ``interrupt`` the run after its current
turn and then run the new input."""


@tool
def ask_human(question: str) -> str:
    """Ask the human a question and wait for the answer. Use it when you need information
    or a decision only the human has.

    Args:
        question: what to ask, self-contained.
    """
    msg = "ask_human is answered by the session actor, which never runs this function"
    raise RuntimeError(msg)


# -- messages and steps (private: the Session facade is the public face) --------------


@attrs.frozen(kw_only=True)
class _Send(Request[str]):
    run_id: str
    input: str
    max_rounds: int | None
    tools: tuple[str, ...] | None
    system_prompt: str | None
    response_format: ResponseFormat | None
    budget: Budget | None
    started_at: float
    if_busy: BusyPolicy | None


@attrs.frozen
class _Stamped:
    """A follow-up or cancel with what the pure decider may not look up itself."""

    message: FollowUp | Cancel
    at: float
    partial: str
    """Text streamed so far by the LLM call in flight (kept as an interrupted answer)."""
    delivery: str = ""


@attrs.frozen
class _Deliver(Request[bool]):
    """``Session.follow_up``'s message: the follow-up and a token for this call."""

    follow_up: FollowUp
    token: str


@attrs.frozen
class _PythonSpawn(Request[object]):
    """Spawn a child from Python; the reply is the child's ``Session`` handle."""

    spawn_id: str
    spec: AgentSpec
    task: str


@attrs.frozen
class _ChildDone:
    finished: ChildFinished


@attrs.frozen
class _Busy:
    run_id: str


@attrs.frozen
class _NoRequest:
    request_id: str
    open: tuple[str, ...]


@attrs.frozen
class _BadReply:
    problem: str


@attrs.frozen
class _WaitRun(Request["RunResult | None"]):
    run_id: str


@attrs.frozen
class _GetState(Request[SessionState]):
    pass


@attrs.frozen
class _CallLLM:
    run_id: str
    round: int
    request: LLMRequest
    fingerprint: str
    header: RequestHeader
    deadline: float | None
    """Epoch seconds after which the run's wall-time budget is spent."""


@attrs.frozen
class _LLMAnswered:
    run_id: str
    response: LLMResponse
    fingerprint: str
    header: RequestHeader | None = None


@attrs.frozen
class _OutOfTime:
    run_id: str
    reason: str


@attrs.frozen
class _RunTools:
    run_id: str
    round: int
    calls: tuple[ToolStarted, ...]


@attrs.frozen
class _ToolsDone:
    run_id: str
    outcomes: tuple[ToolOutcome, ...]
    children: tuple[ChildFinished, ...] = ()


_CRASHED = "the process stopped while this tool ran; its result is unknown"


@final
@attrs.frozen(kw_only=True)
class _Config:
    """What a session actor is made with; shared by every incarnation."""

    session_id: str
    llm: LLM
    tools: ToolRegistry
    system_prompt: str
    max_rounds: int
    model: str | None
    tool_concurrency: int
    budget: Budget | None
    response_format: ResponseFormat | None
    prices: Mapping[str, Price]
    llm_hooks: tuple[LLMHook, ...]
    tool_hooks: tuple[ToolHook, ...]
    bus: ObserverBus
    on_busy: BusyPolicy
    agents: Mapping[str, AgentSpec] = attrs.field(factory=dict)
    """The sub-agents the model may spawn (through the ``spawn_agent`` tool)."""
    max_depth: int = 3
    max_children: int = 8
    """Sub-agents one run may spawn."""
    parent_id: str | None = None
    depth: int = 0
    max_tokens: int | None = None
    temperature: float | None = None



def _finish(
    run: ActiveRun, status: RunStatus, *, error: str | None = None, output: JsonValue = None
) -> RunFinished:
    return RunFinished(
        run_id=run.started.run_id,
        status=status,
        text=run.text,
        rounds=run.rounds,
        usage=run.usage,
        error=error,
        output=output,
    )


def child_config(
    parent: _Config, spec: AgentSpec, child_id: str, tools: ToolRegistry, depth: int
) -> _Config:
    """The configuration of a sub-agent: its spec, filling gaps from its parent's.

    Raises:
        ToolNotFoundError: the spec names a tool missing from ``tools``.
    """
    registry, missing = child_tools(spec, tools)
    if missing:
        raise ToolNotFoundError(missing[0], tools.names())
    if spec.agents:
        registry.add(spawn_agent_tool(spec.agents))
    return attrs.evolve(
        parent,
        session_id=child_id,
        llm=spec.llm or parent.llm,
        tools=registry,
        system_prompt=spec.system_prompt,
        max_rounds=spec.max_rounds,
        model=spec.model or parent.model,
        budget=None,  # the task's send carries the child's budget
        response_format=spec.response_format,
        on_busy="queue",
        agents=index_agents(spec.agents),
        parent_id=parent.session_id,
        depth=depth,
    )


def _child_outcome(spawned: ChildSpawned, result: RunResult) -> ToolOutcome:
    """What the parent's model reads of a child's run."""
    if result.status == "completed":
        text = result.text if result.output is None else orjson.dumps(result.output).decode()
        return ToolOutcome(
            call_id=spawned.call_id, tool_name=SPAWN_AGENT, status="ok", content=text
        )
    why = f" ({result.error})" if result.error else ""
    content = (
        f"the sub-agent {spawned.agent!r} ended with status {result.status}{why}; "
        f"its last text: {result.text or '(none)'}"
    )
    return ToolOutcome(
        call_id=spawned.call_id,
        tool_name=SPAWN_AGENT,
        status="error",
        content=content,
        error_code=f"session.child_{result.status}",
    )


def _board_follow_up(change: BoardChanged) -> FollowUp:
    """A watched board changed: the session reads it like a follow-up of kind ``board``."""
    if change.deleted:
        what = f"{change.key!r} was deleted"
    else:
        what = f"{change.key!r} is now {orjson.dumps(change.value).decode()}"
    return FollowUp(
        id=f"board:{change.board_id}:{change.board_version}:{change.key}",
        content=(
            f"[board {change.board_id}] {what} (version {change.version}, by {change.author})"
        ),
        kind="board",
    )


_DECIDED_BETWEEN_CALLS = (FollowUpsInjected, ToolStarted, OutputRejected, HumanRequested)
"""Events the session decides only while no model call is in flight."""


def _describe_step(step: object | None) -> str:
    if step is None:
        return "nothing (it would wait for a message)"
    if isinstance(step, _RunTools):
        return "tool calls " + ", ".join(c.name for c in step.calls)
    return type(step).__name__.lstrip("_")


def _cancelled(run: ActiveRun, cancel: CancelRequested) -> RunFinished:
    why = f": {cancel.reason}" if cancel.reason else ""
    return _finish(run, "cancelled", error=f"cancelled by {cancel.by}{why}")


def _question(call: ToolCall) -> str | None:
    """The question of a well-formed ``ask_human`` call."""
    try:
        arguments = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    if ask_human.validator.problems(arguments):
        return None
    question = arguments["question"]
    return question if isinstance(question, str) else None


def _parse_output(
    response_format: ResponseFormat, text: str
) -> tuple[JsonValue, tuple[str, ...]]:
    """The answer parsed and checked against the schema; problems if it does not match."""
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced is not None:  # small models wrap JSON in a Markdown fence despite being told
        body = fenced.group(1)
    try:
        value: JsonValue = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return None, (f"$: not valid JSON ({exc})",)
    return value, validate_json(response_format.schema, value)


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.DOTALL)


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]  # a hook's error raised inside the tool round's nursery
    code = error.code if isinstance(error, PowertrioError) else type(error).__name__
    return f"{code}: {error}"

