"""Replay and fork of sessions and their trees, from the log alone (no model, no tool)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import final

import attrs

from protocols import LLMRequest, LLMResponse
from protocols.codec import decode_record, encode
from protocols.errors import ConfigError, StreamNotFoundError, ToolNotFoundError
from protocols.streaming import LLMStream
from runtime import EventStore, NewEvent, RecordedEvent, replay
from runtime.lowlevel import CONTINUES

from .._mcp._sources import expand_tool_sources
from .._tools._tool import ToolRegistry
from ._actor import SessionActor
from ._agents import AgentOptions, AgentSpec, FormatArg, top_level_tools, with_options
from ._budget import Budget, Price
from ._context import ContextCompacted, ContextPolicy
from ._events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    SessionCreated,
    SessionState,
)
from ._request_header import RequestHeader
from ._steps import CallLLM, SessionConfig, child_config, session_config
from ._trace_ids import child_traceparent


@final
class _NoModel:
    """The model of a replay: never asked, since every answer comes from the log."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        msg = "replay never calls the model"
        raise AssertionError(msg)

    def stream(self, request: LLMRequest) -> LLMStream:
        msg = "replay never calls the model"
        raise AssertionError(msg)


@final
@attrs.frozen(kw_only=True)
class SessionReplay:
    """A session replayed against the current code, with its sub-agents."""

    session_id: str
    state: SessionState
    """The state folded from the log (what the live session had)."""
    version: int
    checked: int
    """Recorded model answers whose request the code asked for again, identically."""
    children: tuple[SessionReplay, ...] = ()

    @property
    def total_checked(self) -> int:
        """``checked`` over the whole tree."""
        return self.checked + sum(child.total_checked for child in self.children)


_SPEC_FIELDS = (
    "tools",
    "system_prompt",
    "model",
    "agents",
    "response_format",
    "budget",
    "context",
)


async def replay_session(
    store: EventStore,
    session_id: str,
    spec: AgentSpec | None = None,
    *,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str | None = None,
    model: str | None = None,
    agents: Iterable[AgentSpec] = (),
    max_tokens: int | None = None,
    temperature: float | None = None,
    response_format: FormatArg = None,
    budget: Budget | None = None,
    prices: Mapping[str, Price] | None = None,
    max_depth: int = 3,
    max_children: int = 8,
    recorded_tools: bool = False,
    context: ContextPolicy | None = None,
    from_version: int = 0,
) -> SessionReplay:
    """Replay a session (and its tree) with the code as configured here, at fold speed.

    Give what the session was started with: the :class:`AgentSpec` of
    :func:`spawn_agent` (``replay_session(store, id, APP)``), or ``spawn_session``'s
    arguments. What you changed is what replay checks: each recorded model answer must
    have been asked for by an identical request (model, messages, tools, parameters);
    sub-agents are replayed with their specs from the tree.

    No tool runs in a replay: every result comes from the log. Tools need only be
    described, so the built-ins can be given as they are in an app's spec
    (``board_tools("team")``, ``wakeup_tools()``: no board or runtime has to run). An MCP
    server (``mcp_stdio``/``mcp_http``) is accepted as ``spawn_session`` accepts it: it is
    connected once to list its tools (the model was offered them), and none is called. With
    ``recorded_tools=True`` the tool set recorded with each request stands in for the
    code's (for a log whose tools this code does not have, as ``powertrio replay`` does):
    the prompt, the model parameters and the conversation (every call, in order) are
    still checked, the tools' descriptions and schemas are not; sub-agents whose spec is
    unknown are replayed with their recorded prompt.

    Args:
        store (EventStore): the log.
        session_id (str): the session to replay.
        spec (AgentSpec | None): the agent as the app spawned it with
            :func:`spawn_agent`; then leave out ``tools``, ``system_prompt``, ``model``,
            ``agents``, ``response_format``, ``budget`` and ``context`` (the spec has
            them).
        system_prompt (str | None): the code's system prompt; ``None`` takes the one
            recorded when the session was created.
        recorded_tools (bool): take the tools recorded with each request instead of
            checking the code's.
        from_version (int): replay from this version of the session's stream: the log up
            to it is taken as recorded (its state then) and only the model answers after it
            are checked, in the session and in its sub-agents (theirs logged after it); 0,
            the default, checks from the start.
        tools, model, agents, max_tokens, temperature, response_format, budget, prices,
            max_depth, max_children, context: as for ``spawn_session`` (a session that
            compacted its context replays only with the same ``context`` policy; its
            summaries come from the log, the summariser is never called).

    Returns:
        SessionReplay: the folded state of each session of the tree and what was checked.

    Raises:
        ReplayDivergenceError: the code asks for something else than the log holds; the
            message names the stream, the event version and the differences.
        StreamNotFoundError: no such session in the log.
        ConfigError: ``spec`` and one of the arguments it replaces are both given, the
            spec names a tool instead of giving it, or ``from_version`` is negative or past
            the session's last event.
        ToolDefinitionError: ``tools`` holds something that is no tool source (the
            message says what to give).
        McpServerError: an MCP server in ``tools`` could not be reached to list its tools.
    """
    stream = f"session/{session_id}"
    max_rounds = 10
    if spec is not None:
        given = [
            name
            for name, value in zip(
                _SPEC_FIELDS,
                (tools, system_prompt, model, agents, response_format, budget, context),
                strict=True,
            )
            if value is not None and value != ()
        ]
        if given:
            msg = f"replay_session: give spec or {', '.join(given)}, not both (the spec has them)"
            raise ConfigError(msg)
        tools, system_prompt, model = top_level_tools(spec), spec.system_prompt, spec.model
        agents, response_format, budget = spec.agents, spec.response_format, spec.budget
        context = spec.context
        max_rounds = spec.max_rounds
    tools = await expand_tool_sources(None, tools)
    if system_prompt is None:
        created = await _created(store, session_id)
        if created is None:
            raise StreamNotFoundError(stream)
        system_prompt = created.system_prompt
    options: AgentOptions = {
        "tools": tuple(tools),
        "system_prompt": system_prompt,
        "max_rounds": max_rounds,
        "model": model,
        "agents": agents,
        "response_format": response_format,
        "budget": budget,
        "context": _without_model(context),
    }
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    if temperature is not None:
        options["temperature"] = temperature
    agent = with_options(spec, options, caller="replay_session")
    config = session_config(
        agent,
        session_id=session_id,
        llm=_NoModel(),
        prices=prices,
        max_depth=max_depth,
        max_children=max_children,
    )
    cutoff = 0
    if from_version:
        length = await store.stream_version(stream)
        if length == 0:
            raise StreamNotFoundError(stream)
        if 1 <= from_version <= length:
            (at,) = await store.read(stream, from_version, limit=1)
            cutoff = at.position
    # An out-of-range version is refused by the replay itself, with its message.
    return await _replay_tree(
        store, config, recorded_tools=recorded_tools, from_version=from_version, cutoff=cutoff
    )


def _without_model(context: ContextPolicy | None) -> ContextPolicy | None:
    """The policy with its summariser stood in for: replay never calls it."""
    if context is None or context.summariser is None or context.summariser == "session":
        return context
    return attrs.evolve(context, summariser="session")


async def _created(store: EventStore, session_id: str) -> SessionCreated | None:
    first = await store.read(f"session/{session_id}", 1, limit=1)
    if not first:
        return None
    created = decode_record(first[0])
    assert isinstance(created, SessionCreated)
    return created


async def _first_header(store: EventStore, session_id: str) -> RequestHeader | None:
    for record in await store.read(f"session/{session_id}"):
        if record.type != "session.assistant":
            continue
        event = decode_record(record)
        if isinstance(event, AssistantRecorded) and event.request_header is not None:
            return event.request_header
    return None


@final
class _RecordedTools:
    """A session's decider whose requests are checked with the recorded tool set.

    Everything but the check is the session's own; the check compares the recorded
    request header with the code's, the tool names and schemas taken as recorded. With no
    context policy given, the recorded compactions are taken as recorded too (the log
    does not hold the policy): each later request is still checked, built from them.
    """

    def __init__(self, actor: SessionActor, *, recorded_compactions: bool = False) -> None:
        self._actor = actor
        self._recorded_compactions = recorded_compactions

    def initial_state(self) -> SessionState:
        return self._actor.initial_state()

    def evolve(self, state: SessionState, event: object) -> SessionState:
        return self._actor.evolve(state, event)

    def next_step(self, state: SessionState) -> object | None:
        return self._actor.next_step(state)

    def answers_effect(self, event: object) -> bool:
        if self._recorded_compactions and isinstance(event, ContextCompacted):
            return False
        return self._actor.answers_effect(event)

    def step_settled(self, step: object, state: SessionState, event: object) -> bool:
        return self._actor.step_settled(step, state, event)

    def replay_check(self, step: object | None, event: object) -> str | None:
        problem = self._actor.replay_check(step, event)
        if problem is None or not isinstance(step, CallLLM):
            return problem
        assert isinstance(event, AssistantRecorded)
        recorded = event.request_header
        if recorded is None:
            return None  # an answer cut short by a cancel records no header: nothing to compare
        replayed = attrs.evolve(
            step.header, tools=recorded.tools, tools_digest=recorded.tools_digest
        )
        return "\n".join(recorded.differences(replayed)) or None


async def _replay_tree(
    store: EventStore,
    config: SessionConfig,
    *,
    recorded_tools: bool = False,
    from_version: int = 0,
    cutoff: int = 0,
) -> SessionReplay:
    """Replay one session and its children; ``cutoff`` (a log position) is where a
    replay from a version of the root starts checking, in every stream of the tree."""
    actor = SessionActor(config)
    decider = (
        _RecordedTools(actor, recorded_compactions=config.context is None)
        if recorded_tools
        else actor
    )
    stream = actor.stream_name()
    if cutoff and not from_version:  # a child: its last event at or before the cutoff
        before = [r.version for r in await store.read(stream) if r.position <= cutoff]
        from_version = before[-1] if before else 0
    result = await replay(store, stream, decider, from_version=from_version)
    state = result.state
    depth = state.depth
    children = []
    for spawned in state.children:
        if not await store.stream_version(f"session/{spawned.child_id}"):
            continue  # an ephemeral child, deleted after it completed
        spec = config.agents.get(spawned.agent)
        if spec is None and not recorded_tools:
            continue  # spawned from Python with a spec this configuration does not know
        child: SessionConfig | None = None
        traceparent = child_traceparent(
            config.session_id, config.traceparent, spawned.run_id, spawned.call_id
        )
        if spec is not None:
            try:
                child = child_config(
                    config, spec, spawned.child_id, config.tools, depth + 1, traceparent=traceparent
                )
            except ToolNotFoundError:
                if not recorded_tools:
                    raise
        if child is None:  # known by its log only: its recorded prompt and model
            spec = await _recorded_spec(store, spawned)
            child = child_config(
                config, spec, spawned.child_id, config.tools, depth + 1, traceparent=traceparent
            )
        children.append(
            await _replay_tree(store, child, recorded_tools=recorded_tools, cutoff=cutoff)
        )
    return SessionReplay(
        session_id=config.session_id,
        state=state,
        version=result.version,
        checked=result.checked,
        children=tuple(children),
    )


async def _recorded_spec(store: EventStore, spawned: ChildSpawned) -> AgentSpec:
    """The spec of a sub-agent as its log has it: its prompt and model, no tools."""
    created = await _created(store, spawned.child_id)
    header = await _first_header(store, spawned.child_id)
    return AgentSpec(
        name=spawned.agent,
        system_prompt=created.system_prompt if created is not None else "",
        tools=(),
        model=header.model if header is not None else None,
        max_rounds=created.max_rounds if created is not None else 10,
    )


async def fork_session(store: EventStore, session_id: str, *, at_version: int, new_id: str) -> str:
    """Start a new session whose history is ``session_id``'s up to ``at_version``.

    Nothing is asked of a model: the fork's stream is a copy of the original's events
    (the original is untouched), its ``SessionCreated`` records the lineage, and its
    sub-agents are forked with it: a child that had finished by then is copied whole, a
    child still running is copied as of that moment. Spawn the fork with
    ``spawn_session(session_id=new_id, ...)`` and send it new input; a fork taken in the
    middle of a run goes on with that run when it starts.

    Args:
        store (EventStore): the log.
        session_id (str): the session to fork.
        at_version (int): the last event of the original to keep (>= 1).
        new_id (str): the fork's session id.

    Returns:
        str: ``new_id``.

    Raises:
        StreamNotFoundError: no such session.
        ConfigError: ``at_version`` is outside the stream or inside one decision (events
            appended together, such as a tool call and the sub-agent it starts), or
            ``new_id`` is taken.
    """
    stream = f"session/{session_id}"
    length = await store.stream_version(stream)
    if length == 0:
        raise StreamNotFoundError(stream)
    if not 1 <= at_version <= length:
        msg = f"{stream!r} has events 1 to {length}: fork at one of them, not at {at_version}"
        raise ConfigError(msg)
    if await store.stream_version(f"session/{new_id}"):
        msg = f"session {new_id!r} already exists; pick another id for the fork"
        raise ConfigError(msg)
    records = await store.read(stream, 1, limit=at_version)
    if records[-1].metadata == CONTINUES:
        end = at_version
        for record in await store.read(stream, at_version + 1):
            end = record.version
            if record.metadata != CONTINUES:
                break
        msg = (
            f"version {at_version} of {stream!r} is inside one decision (its events up to "
            f"version {end} were appended together); fork at a version before it or at {end}"
        )
        raise ConfigError(msg)
    await _copy(store, session_id, new_id, records, lineage=(session_id, at_version))
    return new_id


async def _copy(
    store: EventStore,
    old_id: str,
    new_id: str,
    records: list[RecordedEvent],
    *,
    lineage: tuple[str, int] | None,
    new_parent: str | None = None,
    traceparent: str | None = None,
) -> None:
    """Write ``records`` of ``old_id`` as ``new_id``'s stream, children forked along
    (each with its new parent and the trace context of its spawn in that parent)."""
    events = [decode_record(r) for r in records]
    cutoff = records[-1].position
    finished = {e.child_id for e in events if isinstance(e, ChildFinished)}

    def renamed(child_id: str) -> str:
        return new_id + child_id[len(old_id) :]

    def rewritten(event: object) -> object:
        if isinstance(event, SessionCreated):
            created = attrs.evolve(event, session_id=new_id)
            if lineage is not None:
                created = attrs.evolve(created, forked_from=lineage[0], forked_at=lineage[1])
            if new_parent is not None:
                created = attrs.evolve(created, parent_id=new_parent, traceparent=traceparent)
            return created
        if isinstance(event, ChildSpawned | ChildFinished):
            return attrs.evolve(event, child_id=renamed(event.child_id))
        return event

    out = [rewritten(event) for event in events]
    await store.append(
        f"session/{new_id}",
        [
            NewEvent.from_encoded(encode(e), metadata=r.metadata)
            for e, r in zip(out, records, strict=True)
        ],
        0,
    )
    own_traceparent = next((e.traceparent for e in out if isinstance(e, SessionCreated)), None)
    for event in events:
        if not isinstance(event, ChildSpawned):
            continue
        child_stream = f"session/{event.child_id}"
        child_records = await store.read(child_stream)
        if event.child_id not in finished:  # as of the fork point
            child_records = [r for r in child_records if r.position < cutoff]
        if child_records:
            await _copy(
                store,
                event.child_id,
                renamed(event.child_id),
                child_records,
                lineage=None,
                new_parent=new_id,
                traceparent=child_traceparent(new_id, own_traceparent, event.run_id, event.call_id),
            )


async def delete_session(store: EventStore, session_id: str) -> list[str]:
    """Delete a session's stream with its linked and ephemeral sub-agents, recursively.

    Detached sub-agents live on (that is what detached means). Stop the sessions first: a
    session still running stops for good at its next step or message
    (:class:`~protocols.errors.StreamRewoundError`, ``store.stream_rewound``).

    Args:
        store (EventStore): the log.
        session_id (str): the session to delete.

    Returns:
        list[str]: the streams deleted, parents first.

    Raises:
        StreamNotFoundError: no such session.
    """
    stream = f"session/{session_id}"
    if not await store.stream_version(stream):
        raise StreamNotFoundError(stream)
    doomed = await _linked_streams(store, session_id)
    await store.delete_streams(doomed)
    return doomed


async def _linked_streams(store: EventStore, session_id: str) -> list[str]:
    streams = [f"session/{session_id}"]
    for event in map(decode_record, await store.read(streams[0])):
        if not isinstance(event, ChildSpawned) or event.lifecycle == "detached":
            continue
        if await store.stream_version(f"session/{event.child_id}"):
            streams.extend(await _linked_streams(store, event.child_id))
    return streams
