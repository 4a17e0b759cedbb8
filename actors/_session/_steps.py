"""The session actor's messages, effect steps and configuration (what its decider reads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, final

import attrs

from protocols import (
    LLM,
    Cancel,
    FollowUp,
    HumanReply,
    LLMRequest,
    LLMResponse,
    OutputType,
    ResponseFormat,
    ToolOutcome,
)
from protocols.errors import ConfigError, ToolNotFoundError
from protocols.jsonschema import check_schema
from runtime import PriorityMessage, Request

from .._tools._tool import ToolRegistry, tool
from ._agents import (
    DEFAULT_TOOL_CONCURRENCY,
    AgentSpec,
    child_tools,
    index_agents,
    resolve_format,
    spawn_agent_tool,
    top_level_tools,
)
from ._budget import Budget, Price
from ._context import ContextPolicy
from ._events import (
    ActiveRun,
    ChildFinished,
    RunResult,
    SessionState,
    ToolStarted,
)
from ._observe import LLMHook, Observer, ObserverBus, ToolHook
from ._recall import recall_tool
from ._request_header import RequestHeader

BusyPolicy = Literal["queue", "reject", "interrupt"]
"""What a ``send`` does while a run is active: ``queue`` it to run next, ``reject`` it
(:class:`~actors.SessionBusyError`), or ``interrupt`` the run after its current
turn and then run the new input."""

SNAPSHOT_EVERY = 1000
"""Events between two snapshots of a session, by default (``spawn_session(snapshot_every=)``)."""

PASSIVATE_AFTER = 120.0
"""Seconds a session stays idle before its actor is passivated, by default
(``spawn_session(passivate_after=)``; ``None``: never).

Two minutes, as Akka's sharded entities idle by default: long enough that the gap between
a person's turns, or between a tool's result and the next step of a workflow, finds the
actor warm; short enough that a fleet's idle sessions (most of them, most of the time)
hold only their name and configuration. A cold turn costs its re-activation, a snapshot
and the tail of the log read back (about a millisecond), which is small beside the model
call the turn makes anyway.
"""


TIMER_KEEPS_WARM = 3600.0
"""A session whose next durable timer is due within this many seconds is not passivated.

Re-activation reads the session's snapshot whole (every chunk of its history) and the
tail after it, so an agent woken by a timer every hour would pay, at each wake, a read
that grows with its age; kept warm it appends only what its run records. An agent woken
less often passivates between its wakes, and its due timer starts it again."""


def check_passivate_after(value: object) -> float | None:
    """``value`` as an idle time in seconds, or ``None`` (never passivate).

    Raises:
        ConfigError: ``value`` is not a positive, finite number of seconds nor ``None``.
    """
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        msg = (
            "passivate_after must be a positive number of seconds, or None to keep the "
            f"session's actor running while it is idle; got {value!r}"
        )
        raise ConfigError(msg)
    return float(value)


@tool
def ask_human(question: str) -> str:
    """Ask the human a question and wait for the answer. Use it when you need information
    or a decision only the human has.

    Args:
        question: what to ask, self-contained.
    """
    msg = "ask_human is answered by the session actor, which never runs this function"
    raise RuntimeError(msg)


# -- messages (internal to the package: the Session handle is the public face) ---------


@attrs.frozen(kw_only=True)
class Send(Request["str | RunResult | Busy | None"]):
    """``Session.send``'s message: start a run (or queue it); the reply is its run id, or
    with ``wait`` the run's result (as :class:`WaitRun` gives it) or :class:`Busy`: one
    ask per send, with no envelope around it."""

    run_id: str
    input: str
    max_rounds: int | None
    tools: tuple[str, ...] | None
    system_prompt: str | None
    response_format: ResponseFormat | None
    budget: Budget | None
    started_at: float
    if_busy: BusyPolicy | None
    wait: bool = False
    """Reply with the run's result once it ends or waits for a human, not its id."""


@attrs.frozen
class Urgent(PriorityMessage):
    """A control message for the session, on its mailbox's priority lane.

    Cancels and human replies steer the run: they overtake queued input (follow-ups,
    sends) and never wait for room in a full user lane. The session unwraps ``message``
    and handles it as if it had come alone.
    """

    message: Cancel | HumanReply


@attrs.frozen(kw_only=True)
class Stamped(Request[bool]):
    """A follow-up or cancel with the facts the pure decider may not look up itself.

    The one envelope such a message reaches the decider in. ``Session.follow_up`` sends
    one, stamped with the runtime's clock and its call's token; the shell builds one for
    a follow-up or cancel that comes alone, when it arrives: the clock, and what it knows
    of the LLM call in flight, which is not in the log (only its answer will be).
    """

    message: FollowUp | Cancel
    at: float
    """When the message arrived (the runtime's clock)."""
    partial: str = ""
    """Text streamed so far by the LLM call in flight (kept as an interrupted answer)."""
    fingerprint: str = ""
    """The request fingerprint of the LLM call in flight, recorded with ``partial``."""
    delivery: str = ""
    """The token of a ``Session.follow_up`` call (empty for other follow-ups)."""


@attrs.frozen
class PythonSpawn(Request[object]):
    """Spawn a child from Python; the reply is the child's ``Session`` handle."""

    spawn_id: str
    spec: AgentSpec
    task: str


@attrs.frozen
class ChildDone:
    """A child spawned from Python finished its task."""

    finished: ChildFinished


@attrs.frozen
class Busy:
    """The reply to a rejected ``Send``: the run that keeps the session busy."""

    run_id: str


@attrs.frozen
class NoRequest:
    """The reply to a ``HumanReply`` for a request the session is not waiting for."""

    request_id: str
    open: tuple[str, ...]


@attrs.frozen
class BadReply:
    """The reply to a ``HumanReply`` of the wrong kind (an answer to an approval)."""

    problem: str


@attrs.frozen
class WaitRun(Request[RunResult | None]):
    """Wait until a run ends or waits for a human; ``None`` for an unknown run."""

    run_id: str


@attrs.frozen
class GetState(Request[SessionState]):
    """Ask for the folded state."""


# -- effect steps and their results ------------------------------------------------------


@attrs.frozen
class CallLLM:
    """The step: ask the model for the next answer of a run."""

    run_id: str
    round: int
    request: LLMRequest
    fingerprint: str
    header: RequestHeader
    deadline: float | None
    """Epoch seconds after which the run's wall-time budget is spent."""


@attrs.frozen
class LLMAnswered:
    """The result of a ``CallLLM``."""

    run_id: str
    response: LLMResponse
    fingerprint: str
    header: RequestHeader | None = None
    first_token_s: float | None = None
    """Seconds to the first streamed delta; ``None`` for an answer not streamed."""


@attrs.frozen
class OutOfTime:
    """The result of a ``CallLLM`` asked after the run's deadline."""

    run_id: str
    reason: str


@attrs.frozen
class Summarise:
    """The step: ask the summariser to compact the run's transcript up to ``upto``."""

    run_id: str
    round: int
    """The round whose request the compaction makes room for (hooks are told it)."""
    upto: int
    since: int
    request: LLMRequest
    fingerprint: str
    tokens_before: int


@attrs.frozen
class Summarised:
    """The result of a ``Summarise``."""

    run_id: str
    upto: int
    response: LLMResponse
    fingerprint: str
    tokens_before: int


@attrs.frozen
class RunTools:
    """The step: run the open tool calls of a round (and the children they start)."""

    run_id: str
    round: int
    calls: tuple[ToolStarted, ...]


@attrs.frozen
class ToolsDone:
    """The result of a ``RunTools``."""

    run_id: str
    outcomes: tuple[ToolOutcome, ...]
    children: tuple[ChildFinished, ...] = ()


# -- configuration -------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class SessionConfig:
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
    agent: str | None = None
    """The agent's name, recorded in the session's first event (telemetry names spans
    after it)."""
    traceparent: str | None = None
    """A sub-agent's trace context (the spawning tool call), recorded likewise."""
    max_tokens: int | None = None
    temperature: float | None = None
    output_type: OutputType[Any] | None = None
    """The class the default response format was made from; applied to results where
    they are read (the log and the decider see only ``response_format``)."""
    context: ContextPolicy | None = None
    """How much of the conversation the model sees (``None``: all of it)."""
    snapshot_every: int | None = SNAPSHOT_EVERY
    """Snapshot the session every this many events, and at the end of a run once a tenth
    of that has been appended since the last one; ``None``: never (fold the log)."""
    passivate_after: float | None = PASSIVATE_AFTER
    """Seconds idle (no run, nothing queued, nobody waiting, no sub-agent alive) before
    the actor is passivated; ``None``: never. A sub-agent inherits its parent's."""


# What sessions without prices or sub-agents share (read-only), rather than an empty
# dict each: a million registered sessions hold their configuration.
_NO_PRICES: Mapping[str, Price] = MappingProxyType({})
_NO_AGENTS: Mapping[str, AgentSpec] = MappingProxyType({})

_REGISTRIES: dict[tuple[int, ...], tuple[tuple[object, ...], ToolRegistry]] = {}


def shared_registry(tools: tuple[object, ...]) -> ToolRegistry:
    """``ToolRegistry.of(*tools)``, one per set of tools: the sessions given the same
    tools share it (nothing adds to a session's registry once it is built). An entry
    holds its tools, so their ids are not reused while it is cached."""
    key = tuple(map(id, tools))
    cached = _REGISTRIES.get(key)
    if cached is not None:
        return cached[1]
    registry = ToolRegistry.of(*tools)  # type: ignore[arg-type]  # checked by add
    if len(_REGISTRIES) >= 256:
        _REGISTRIES.clear()
    _REGISTRIES[key] = (tools, registry)
    return registry


def add_context_tools(registry: ToolRegistry, context: ContextPolicy | None) -> None:
    """Give a session with a context policy the ``recall`` tool (unless it has one)."""
    if context is None or not context.recall or "recall" in registry.names():
        return
    registry.add(recall_tool())


def run_tools(config: SessionConfig, run: ActiveRun | None) -> ToolRegistry:
    """The tools of ``run``: the session's, or the subset its send named."""
    names = run.started.tools if run is not None else None
    return config.tools if names is None else config.tools.subset(names)


def check_limits(
    response_format: ResponseFormat | None, budget: Budget | None, prices: Mapping[str, Price]
) -> None:
    """Check a run's response format and budget against the session's prices.

    Raises:
        ToolDefinitionError: ``response_format`` holds a malformed JSON Schema.
        ConfigError: ``budget`` limits cost but ``prices`` is empty.
    """
    if response_format is not None:
        check_schema(response_format.schema)
    if budget is not None and budget.max_cost is not None and not prices:
        msg = "a cost budget needs prices: pass prices={model: Price(...)} to spawn_session"
        raise ConfigError(msg)


def session_config(
    spec: AgentSpec,
    *,
    session_id: str,
    llm: LLM,
    prices: Mapping[str, Price] | None = None,
    llm_hooks: Sequence[LLMHook] = (),
    tool_hooks: Sequence[ToolHook] = (),
    observers: Sequence[Observer] = (),
    on_busy: BusyPolicy = "queue",
    max_depth: int = 3,
    max_children: int = 8,
    snapshot_every: int | None = SNAPSHOT_EVERY,
    agent: str | None = None,
    passivate_after: float | None = PASSIVATE_AFTER,
) -> SessionConfig:
    """The actor's configuration: the agent's options from ``spec`` (checked when it was
    made), the rest from where and how this session runs (checked here).

    Raises:
        ValueError: ``max_depth`` or ``max_children`` is below 1, or ``snapshot_every`` is
            not a positive int or ``None``.
        ConfigError: ``spec`` names a tool instead of giving it (a top-level session has no
            parent to take it from), or its budget limits cost and ``prices`` is empty.
    """
    every = snapshot_every
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        msg = f"snapshot_every must be a positive int or None, got {snapshot_every!r}"
        raise ValueError(msg)
    idle = check_passivate_after(passivate_after)
    for label, value in (("max_depth", max_depth), ("max_children", max_children)):
        if value < 1:
            msg = f"{label} must be >= 1, got {value}"
            raise ValueError(msg)
    response_format, output_type = resolve_format(spec.response_format)
    agents = spec.agents
    tools = top_level_tools(spec)
    context = spec.context
    if agents or (context is not None and context.recall):
        registry = ToolRegistry.of(*tools)  # a copy, ours to extend; add checks each tool
        add_context_tools(registry, context)
        if agents:
            registry.add(spawn_agent_tool(agents))
    else:
        registry = shared_registry(tools)
    config = SessionConfig(
        session_id=session_id,
        llm=llm,
        tools=registry,
        system_prompt=spec.system_prompt,
        max_rounds=spec.max_rounds,
        model=spec.model,
        tool_concurrency=spec.tool_concurrency or DEFAULT_TOOL_CONCURRENCY,
        budget=spec.budget,
        response_format=response_format,
        prices=dict(prices) if prices else _NO_PRICES,
        llm_hooks=tuple(llm_hooks),
        tool_hooks=tuple(tool_hooks),
        bus=ObserverBus(observers),
        on_busy=on_busy,
        agents=index_agents(agents) if agents else _NO_AGENTS,
        max_depth=max_depth,
        max_children=max_children,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        output_type=output_type,
        context=context,
        snapshot_every=snapshot_every,
        agent=agent,
        passivate_after=idle,
    )
    check_limits(response_format, spec.budget, config.prices)
    return config


def child_config(
    parent: SessionConfig,
    spec: AgentSpec,
    child_id: str,
    tools: ToolRegistry,
    depth: int,
    *,
    traceparent: str | None = None,
) -> SessionConfig:
    """The configuration of a sub-agent: its spec, filling gaps from its parent's;
    ``traceparent`` is the trace context of the tool call that spawned it.

    Raises:
        ToolNotFoundError: the spec names a tool missing from ``tools``.
    """
    registry, missing = child_tools(spec, tools)
    if missing:
        raise ToolNotFoundError(missing[0], tools.names())
    if spec.agents:
        registry.add(spawn_agent_tool(spec.agents))
    response_format, output_type = resolve_format(spec.response_format)
    context = spec.context or parent.context
    add_context_tools(registry, context)
    return attrs.evolve(
        parent,
        session_id=child_id,
        llm=spec.llm or parent.llm,
        tools=registry,
        system_prompt=spec.system_prompt,
        max_rounds=spec.max_rounds,
        model=spec.model or parent.model,
        budget=None,  # the task's send carries the child's budget
        response_format=response_format,
        output_type=output_type,
        on_busy="queue",
        agents=index_agents(spec.agents),
        parent_id=parent.session_id,
        depth=depth,
        agent=spec.name,
        traceparent=traceparent,
        context=context,
        max_tokens=parent.max_tokens if spec.max_tokens is None else spec.max_tokens,
        temperature=parent.temperature if spec.temperature is None else spec.temperature,
        tool_concurrency=(
            parent.tool_concurrency if spec.tool_concurrency is None else spec.tool_concurrency
        ),
    )
