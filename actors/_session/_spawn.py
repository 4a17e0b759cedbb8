"""The functions that start sessions and agents."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, final

from protocols import LLM
from protocols.errors import ConfigError

from .._mcp._sources import expand_tool_sources
from .._tools._tool import ToolRegistry
from ._actor import SessionActor
from ._agents import AgentSpec, FormatArg, top_level_tools
from ._budget import Budget, Price
from ._context import ContextPolicy
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
    *,
    llm: LLM,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str = "",
    max_rounds: int = 10,
    model: str | None = None,
    budget: Budget | None = None,
    response_format: FormatArg = None,
    prices: Mapping[str, Price] | None = None,
    llm_hooks: Sequence[LLMHook] = (),
    tool_hooks: Sequence[ToolHook] = (),
    observers: Sequence[Observer] = (),
    on_busy: BusyPolicy = "queue",
    agents: Iterable[AgentSpec] = (),
    max_depth: int = 3,
    max_children: int = 8,
    max_tokens: int | None = None,
    temperature: float | None = None,
    tool_concurrency: int = 8,
    snapshot_every: int | None = SNAPSHOT_EVERY,
    session_id: str | None = None,
    name: str | None = None,
    agent_name: str | None = None,
    context: ContextPolicy | None = None,
    passivate_after: float | None = PASSIVATE_AFTER,
) -> Session:
    """Start a session actor under the runtime's root supervisor (or resume it from the log).

    A session fails alone: when its log does not decode or it keeps crashing, the
    supervisor stops it for good and its calls raise
    :class:`~protocols.errors.ActorFailedError` whose ``cause_code`` names the error
    (``codec.decode``, ``store.corrupt``, ...); the runtime and other sessions go on.

    Args:
        runtime (Runtime): the runtime; its event store holds the session's stream.
        llm (LLM): the model (a provider transport, or ``ScriptedLLM`` in tests).
        tools: ``Tool`` objects, MCP servers (``mcp_stdio``/``mcp_http``, connected and
            listed here), or a ``ToolRegistry``.
        system_prompt (str): the default system prompt.
        max_rounds (int): the default round limit of a run.
        model (str | None): the model name to ask for.
        budget (Budget | None): the default limits of a run.
        response_format (ResponseFormat | type | None): the default response format of a
            run: a JSON Schema, or an attrs class or a pydantic model (results then hold
            an instance in ``RunResult.output``; give the same class again when the
            session is resumed).
        prices (Mapping[str, Price] | None): model name → price, for cost budgets; a
            dated model name (``gpt-4o-2024-08-06``) matches its prefix (``gpt-4o``).
        llm_hooks: middleware around each LLM call, the first outermost.
        tool_hooks: middleware around each tool call, the first outermost.
        observers: callbacks told every observation (see :meth:`Session.observe`).
        on_busy (BusyPolicy): what a send does while a run is active (``queue``).
        agents: sub-agents the model may start with the ``spawn_agent`` tool (added to
            the tools when any are given).
        max_depth (int): the deepest an agent tree may grow (this session is depth 0).
        max_children (int): sub-agents one run may start.
        max_tokens (int | None): the most tokens per LLM answer; the provider's default
            when ``None``.
        temperature (float | None): sampling temperature; the provider's when ``None``.
        tool_concurrency (int): the most tool calls of one round running at once.
        snapshot_every (int | None): save a snapshot of the folded state every this many
            events (and at the end of a run, once a tenth of that has been appended since
            the last one), so reopening folds only the tail; ``None``: never.
        session_id (str | None): resume this session; a new id when ``None``.
        name (str | None): path segment in the tree; defaults to the id.
        agent_name (str | None): the agent this session runs, recorded in its first
            event; telemetry names its runs' spans after it (``invoke_agent NAME``).
            :func:`spawn_agent` gives the spec's name.
        context (ContextPolicy | None): how much of the conversation the model sees and
            how the rest is compacted (also adds the ``recall`` tool unless switched
            off); ``None``: the whole conversation, always.
        passivate_after (float | None): passivate the session's actor after this many
            idle seconds (no run, nothing queued, nobody waiting, no sub-agent alive),
            freeing its memory: its next message, or its next due timer, starts it again
            from its snapshot and log. Two minutes by default (``PASSIVATE_AFTER``, see
            there why); ``None``: the actor stays while the runtime runs. Its sub-agents
            inherit it.

    Returns:
        Session: the handle.

    Raises:
        ToolDefinitionError: ``response_format`` holds a malformed JSON Schema, or
            ``tools`` holds something that is no tool source (the message says what to
            give).
        UnsupportedTypeError: ``response_format`` is a class with no JSON Schema form.
        McpServerError: an MCP server in ``tools`` could not be reached.
        ConfigError: ``budget`` limits cost and ``prices`` is empty, or
            ``passivate_after`` is neither ``None`` nor a positive, finite number.
        ValueError: ``max_rounds`` or ``tool_concurrency`` is below 1.
        RuntimeClosedError: the runtime is closing (or its root supervisor gave up).
    """
    check_passivate_after(passivate_after)  # before MCP servers are reached
    tools = await expand_tool_sources(runtime, tools)
    config = session_config(
        session_id=session_id or runtime.ids.new("ses"),
        llm=llm,
        tools=tools,
        system_prompt=system_prompt,
        max_rounds=max_rounds,
        model=model,
        budget=budget,
        response_format=response_format,
        prices=prices,
        llm_hooks=llm_hooks,
        tool_hooks=tool_hooks,
        observers=observers,
        on_busy=on_busy,
        agents=agents,
        max_depth=max_depth,
        max_children=max_children,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_concurrency=tool_concurrency,
        context=context,
        snapshot_every=snapshot_every,
        agent=agent_name,
        passivate_after=passivate_after,
    )
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
) -> Session:
    """Start a top-level agent from a spec (or resume it from the log, by ``session_id``).

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

    Raises:
        ConfigError: no model (neither ``spec.llm`` nor ``llm``), a tool given by name, or
            a bad ``passivate_after``.
    """
    model = spec.llm or llm
    if model is None:
        msg = f"agent spec {spec.name!r} has no llm: set AgentSpec.llm or pass llm="
        raise ConfigError(msg)
    return await spawn_session(
        runtime,
        llm=model,
        tools=top_level_tools(spec),
        system_prompt=spec.system_prompt,
        max_rounds=spec.max_rounds,
        model=spec.model,
        budget=spec.budget,
        response_format=spec.response_format,
        agents=spec.agents,
        max_depth=max_depth,
        max_children=max_children,
        observers=observers,
        prices=prices,
        session_id=session_id,
        agent_name=spec.name,
        context=spec.context,
        passivate_after=passivate_after,
    )
