"""The functions that start sessions and agents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, final

import attrs
from typing_extensions import Unpack

from protocols import LLM
from protocols.errors import ConfigError

from .._mcp._sources import expand_tool_sources
from ._actor import SessionActor
from ._agents import AgentOptions, AgentSpec, with_options
from ._budget import Price
from ._handle import Session
from ._observe import LLMHook, Observer, ToolHook
from ._steps import (
    PASSIVATE_AFTER,
    SNAPSHOT_EVERY,
    BusyPolicy,
    SessionConfig,
    check_passivate_after,
    session_config,
)

if TYPE_CHECKING:
    from runtime import Runtime


async def spawn_session(
    runtime: Runtime,
    spec: AgentSpec | None = None,
    *,
    llm: LLM | None = None,
    prices: Mapping[str, Price] | None = None,
    llm_hooks: Sequence[LLMHook] = (),
    tool_hooks: Sequence[ToolHook] = (),
    observers: Sequence[Observer] = (),
    on_busy: BusyPolicy = "queue",
    max_depth: int = 3,
    max_children: int = 8,
    snapshot_every: int | None = SNAPSHOT_EVERY,
    session_id: str | None = None,
    name: str | None = None,
    agent_name: str | None = None,
    passivate_after: float | None = PASSIVATE_AFTER,
    traceparent: str | None = None,
    **options: Unpack[AgentOptions],
) -> Session:
    """Start a session actor under the runtime's root supervisor (or resume it from the log).

    What the agent is (its prompt, tools, model, limits) is one value, an
    :class:`AgentSpec`: give one, or give its fields as keywords
    (``spawn_session(runtime, llm=llm, tools=[...], system_prompt="...")``), or both (the
    keywords then replace the spec's). The other arguments say where and how this session
    runs.

    A session fails alone: when its log does not decode or it keeps crashing, the
    supervisor stops it for good and its calls raise
    :class:`~protocols.errors.ActorFailedError` whose ``cause_code`` names the error
    (``codec.decode``, ``store.corrupt``, ...); the runtime and other sessions go on.

    Args:
        runtime (Runtime): the runtime; its event store holds the session's stream.
        spec (AgentSpec | None): the agent; its ``tools`` must be ``Tool`` objects (a
            top-level agent has no parent to take tools from by name). ``None``: the
            keywords alone make it.
        llm (LLM | None): the model when the spec has none (a provider transport, or
            ``ScriptedLLM`` in tests).
        **options: the spec's fields (:class:`AgentOptions`): ``system_prompt``,
            ``tools``, ``model``, ``max_rounds``, ``budget``, ``response_format``,
            ``agents``, ``context``, ``max_tokens``, ``temperature`` and
            ``tool_concurrency``, documented on :class:`AgentSpec`. ``tools`` also takes
            MCP servers (``mcp_stdio``/``mcp_http``, connected and listed here) or a
            ``ToolRegistry``. A ``response_format`` class makes results hold an instance
            in ``RunResult.output``: give the same class again when the session is
            resumed.
        prices (Mapping[str, Price] | None): model name → price, for cost budgets; a
            dated model name (``gpt-4o-2024-08-06``) matches its prefix (``gpt-4o``).
        llm_hooks: middleware around each LLM call, the first outermost.
        tool_hooks: middleware around each tool call, the first outermost.
        observers: callbacks told every observation (see :meth:`Session.observe`).
        on_busy (BusyPolicy): what a send does while a run is active (``queue``).
        max_depth (int): the deepest an agent tree may grow (this session is depth 0).
        max_children (int): sub-agents one run may start.
        snapshot_every (int | None): save a snapshot of the folded state every this many
            events (and at the end of a run, once a tenth of that has been appended since
            the last one), so reopening folds only the tail; ``None``: never.
        session_id (str | None): resume this session; a new id when ``None``.
        name (str | None): path segment in the tree; defaults to the id.
        agent_name (str | None): the agent this session runs, recorded in its first
            event; telemetry names its runs' spans after it (``invoke_agent NAME``).
            ``None``: the spec's name when a spec is given.
        passivate_after (float | None): passivate the session's actor after this many
            idle seconds (no run, nothing queued, nobody waiting, no sub-agent alive),
            freeing its memory: its next message, or its next due timer, starts it again
            from its snapshot and log. Two minutes by default (``PASSIVATE_AFTER``, see
            there why); ``None``: the actor stays while the runtime runs. Its sub-agents
            inherit it.
        traceparent (str | None): the W3C trace context of the work this session was
            started for (a tool call of a session on another node, a request of your own
            service), recorded in its first event: its runs' spans join that trace. A
            malformed one is ignored (its runs start traces of their own). ``None``: each
            run starts a trace of its own.

    Returns:
        Session: the handle.

    Raises:
        ToolDefinitionError: ``response_format`` holds a malformed JSON Schema, or
            ``tools`` holds something that is no tool source (the message says what to
            give).
        UnsupportedTypeError: ``response_format`` is a class with no JSON Schema form.
        AgentSpecError: the spec the keywords make is invalid, every problem listed
            (``max_rounds`` or ``tool_concurrency`` below 1, ...).
        McpServerError: an MCP server in ``tools`` could not be reached.
        ConfigError: no model (neither ``spec.llm`` nor ``llm``), the spec names a tool
            instead of giving it, ``budget`` limits cost and ``prices`` is empty, or
            ``passivate_after`` is neither ``None`` nor a positive, finite number.
        TypeError: a keyword is neither an argument nor one of :class:`AgentOptions`.
        ValueError: ``max_depth``, ``max_children`` or ``snapshot_every`` is below 1.
        RuntimeClosedError: the runtime is closing (or its root supervisor gave up).
    """
    check_passivate_after(passivate_after)  # before MCP servers are reached
    if "tools" in options:
        options["tools"] = tuple(await expand_tool_sources(runtime, options["tools"]))
    agent = with_options(spec, options, caller="spawn_session")
    model = agent.llm or llm
    if model is None:
        msg = f"agent spec {agent.name!r} has no llm: set AgentSpec.llm or pass llm="
        raise ConfigError(msg)
    config = session_config(
        agent,
        session_id=session_id or runtime.ids.new("ses"),
        llm=model,
        prices=prices,
        llm_hooks=llm_hooks,
        tool_hooks=tool_hooks,
        observers=observers,
        on_busy=on_busy,
        max_depth=max_depth,
        max_children=max_children,
        snapshot_every=snapshot_every,
        agent=agent_name if agent_name is not None or spec is None else spec.name,
        passivate_after=passivate_after,
    )
    if traceparent is not None:
        config = attrs.evolve(config, traceparent=traceparent)
    factory = _SessionFactory(config, session_id is None)
    # One session's bad log or crash loop stops that session alone, never its neighbours.
    # A new session's actor starts at its first message: until then it costs a name.
    ref = await runtime.spawn(
        factory,
        id=config.session_id,
        name=name,
        on_give_up="stop",
        lazy=session_id is None,
    )
    return Session._create(ref, runtime, config)


@final
class _SessionFactory:
    """Makes the session's actor at each (re)start; kept by every registered session, so
    a slotted object rather than a closure and its cells."""

    __slots__ = ("config", "new")

    def __init__(self, config: SessionConfig, new: bool) -> None:
        self.config = config
        # A session whose id was made here has no log to read: its first incarnation skips
        # the read (a restart reads, should the id have existed after all).
        self.new = new

    def __call__(self) -> SessionActor:
        fresh, self.new = self.new, False
        return SessionActor(self.config, new=fresh)


async def spawn_agent(
    runtime: Runtime,
    spec: AgentSpec,
    *,
    llm: LLM | None = None,
    session_id: str | None = None,
    max_depth: int = 3,
    max_children: int = 8,
    observers: Sequence[Observer] = (),
    prices: Mapping[str, Price] | None = None,
    passivate_after: float | None = PASSIVATE_AFTER,
    traceparent: str | None = None,
) -> Session:
    """Start a top-level agent from a spec (or resume it from the log, by ``session_id``):
    ``spawn_session(runtime, spec, ...)`` with the arguments an agent most often needs.

    Args:
        runtime (Runtime): the runtime.
        spec (AgentSpec): the agent; its ``tools`` must be ``Tool`` objects (a top-level
            agent has no parent to take tools from by name).
        llm (LLM | None): the model when the spec has none.
        session_id (str | None): resume this session; a new id when ``None``.
        max_depth (int): the deepest its tree of sub-agents may grow.
        max_children (int): sub-agents one run may start.
        observers: callbacks told every observation of the whole tree.
        prices (Mapping[str, Price] | None): for cost budgets.
        passivate_after (float | None): idle seconds before the agent's actor (and each
            of its sub-agents') is passivated; ``None``: never (see :func:`spawn_session`).
        traceparent (str | None): the W3C trace context its runs join (see
            :func:`spawn_session`).

    Raises:
        ConfigError: no model (neither ``spec.llm`` nor ``llm``), a tool given by name, or
            a bad ``passivate_after``.
    """
    return await spawn_session(
        runtime,
        spec,
        llm=llm,
        max_depth=max_depth,
        max_children=max_children,
        observers=observers,
        prices=prices,
        session_id=session_id,
        passivate_after=passivate_after,
        traceparent=traceparent,
    )
