"""The session handle and the functions that start sessions and agents."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, final

import trio

from protocols import (
    LLM,
    Cancel,
    CancelMode,
    FollowUp,
    HumanReply,
    ResponseFormat,
    check_schema,
)
from protocols.errors import (
    ActorCrashedError,
    ConfigError,
    HumanRequestNotFoundError,
    SessionBusyError,
    ToolNotFoundError,
)

from ._agents import AgentSpec, index_agents, spawn_agent_tool
from ._budget import Budget, Price
from ._observe import (
    LLMHook,
    Observation,
    Observer,
    ObserverBus,
    ToolHook,
)
from ._session_events import (
    ChildFinished,
    RunResult,
    SessionState,
)
from ._tools import ToolRegistry

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime


from ._session import SessionActor
from ._session_steps import (
    BusyPolicy,
    _BadReply,
    _Busy,
    _ChildDone,
    _Config,
    _Deliver,
    _GetState,
    _NoRequest,
    _PythonSpawn,
    _Send,
    _WaitRun,
)


@final
class Session:
    """A handle on a session actor: send it input, read its state, watch it work.

    Made by :func:`spawn_session`. ``send`` survives crashes of the actor: the run goes on
    from the log after the supervisor restarts it, and ``send`` waits for its end.
    """

    __slots__ = ("_bus", "_prices", "_ref", "_runtime", "_tool_names")
    _ref: ActorRef[object]
    _runtime: Runtime
    _tool_names: frozenset[str]
    _bus: ObserverBus
    _prices: Mapping[str, Price]

    def __init__(self) -> None:
        msg = "Session is made by spawn_session()"
        raise TypeError(msg)

    @classmethod
    def _create(cls, ref: ActorRef[object], runtime: Runtime, config: _Config) -> Session:
        self = object.__new__(cls)
        self._ref = ref
        self._runtime = runtime
        self._tool_names = frozenset(config.tools.names())
        self._bus = config.bus
        self._prices = config.prices
        return self

    @property
    def id(self) -> str:
        """The session id (its stream is ``session/<id>``)."""
        return self._ref.id

    @property
    def ref(self) -> ActorRef[object]:
        """The session actor's ref."""
        return self._ref

    @property
    def observer_errors(self) -> int:
        """How many times an observer callback raised (each was logged and ignored)."""
        return self._bus.errors

    async def send(
        self,
        input: str,
        *,
        max_rounds: int | None = None,
        tools: Iterable[str] | None = None,
        system_prompt: str | None = None,
        response_format: ResponseFormat | None = None,
        budget: Budget | None = None,
        if_busy: BusyPolicy | None = None,
    ) -> RunResult:
        """Run the agent on ``input`` and return how the run ended.

        If a run is active, ``if_busy`` (default: the session's ``on_busy``, itself
        ``queue`` by default) decides. Each override applies to this run only; ``None``
        keeps the session's default.

        Args:
            input (str): the user's message.
            max_rounds (int | None): this run's round limit.
            tools (Iterable[str] | None): the subset of the session's tools for this run.
            system_prompt (str | None): this run's system prompt.
            response_format (ResponseFormat | None): a JSON Schema the final answer must
                match; the parsed answer is ``RunResult.output``. An answer that does not
                match gets one repair round, then the run fails with
                ``session.output_invalid`` and the raw text in ``RunResult.text``.
            budget (Budget | None): token, cost and wall-time limits for this run.
            if_busy (BusyPolicy | None): ``queue``, ``reject`` or ``interrupt``.

        Returns:
            RunResult: status, final text, structured output, rounds and usage of this run.
            For ``waiting_for_human`` answer its ``human_requests`` with :meth:`reply`,
            :meth:`approve` or :meth:`deny`, which return the run's next result.

        Raises:
            ToolNotFoundError: ``tools`` names a tool the session does not have.
            ToolDefinitionError: ``response_format`` holds a malformed JSON Schema.
            ConfigError: ``budget`` limits cost but the session has no prices.
            SessionBusyError: a run is active and the policy is ``reject``.
            ValueError: ``max_rounds`` is below 1, or ``input`` is empty.
            ActorStoppedError: the session actor stopped for good.
        """
        if max_rounds is not None and max_rounds < 1:
            msg = f"max_rounds must be >= 1, got {max_rounds}"
            raise ValueError(msg)
        if not input:
            msg = "input must not be empty: a model needs something to answer"
            raise ValueError(msg)
        subset = None if tools is None else tuple(tools)
        for name in subset or ():
            if name not in self._tool_names:
                raise ToolNotFoundError(name, tuple(sorted(self._tool_names)))
        _check_limits(response_format, budget, self._prices)
        send = _Send(
            run_id=self._runtime.ids.new("run"),
            input=input,
            max_rounds=max_rounds,
            tools=subset,
            system_prompt=system_prompt,
            response_format=response_format,
            budget=budget,
            started_at=self._runtime.clock.now(),
            if_busy=if_busy,
        )
        accepted = await self._ask(send)
        if isinstance(accepted, _Busy):
            raise SessionBusyError(self.id, accepted.run_id)
        return await self.wait(send.run_id)

    async def _submit(self, input: str, *, run_id: str, budget: Budget | None) -> RunResult:
        """A send with a run id chosen by the caller (idempotent: a parent's retry after a
        crash finds the run already recorded and waits for it)."""
        send = _Send(
            run_id=run_id,
            input=input,
            max_rounds=None,
            tools=None,
            system_prompt=None,
            response_format=None,
            budget=budget,
            started_at=self._runtime.clock.now(),
            if_busy="queue",
        )
        await self._ask(send)
        return await self.wait(run_id)

    async def spawn(self, spec: AgentSpec, task: str) -> RunResult:
        """Run a sub-agent of this session on ``task`` and return its result.

        The child is a session actor supervised by this one, with its own stream; the
        parent's stream records it (``ChildSpawned``, ``ChildFinished``) and its usage is
        added to the session's. From Python a child may get any of the session's tools by
        name, and any ``Tool`` object.

        Raises:
            ToolNotFoundError: ``spec.tools`` names a tool this session does not have.
        """
        granted = {t.name for t in spec.own_tools()}
        for name in spec.tool_names():
            if name not in self._tool_names and name not in granted:
                raise ToolNotFoundError(name, tuple(sorted(self._tool_names)))
        spawn_id = self._runtime.ids.new("spawn")
        child = await self._ask(_PythonSpawn(spawn_id, spec, task))
        assert isinstance(child, Session)
        result = await child._submit(task, run_id=f"{child.id}:task", budget=spec.budget)
        finished = ChildFinished(
            run_id="", child_id=child.id, status=result.status, usage=result.usage
        )
        await self._ref.tell(_ChildDone(finished))
        return result

    async def wait(self, run_id: str) -> RunResult:
        """Wait until the run ends, or stops to wait for a human, and return its result.

        Raises:
            LookupError: the session has no run with this id.
        """
        result = await self._ask(_WaitRun(run_id))
        if result is None:
            msg = f"session {self.id!r} has no run {run_id!r}"
            raise LookupError(msg)
        assert isinstance(result, RunResult)
        return result

    async def follow_up(self, content: str, *, id: str | None = None, kind: str = "user") -> bool:
        """Give the session more input: it starts a run when idle, else joins the run.

        During a run the follow-up is recorded at once and injected at the next round
        boundary (see :class:`~protocols.FollowUp`). Use :meth:`wait` with the active run's
        id (``(await state()).run``) to wait for the outcome.

        Args:
            content (str): what the model reads.
            id (str | None): deduplication key; a new one if ``None``.
            kind (str): ``user``, ``timer``, ``board``, ``system``...; kinds are never
                merged into one turn.

        Returns:
            bool: ``False`` if the session had already received this id (nothing done).
        """
        follow_up = FollowUp(id=id or self._runtime.ids.new("fu"), content=content, kind=kind)
        accepted = await self._ask(_Deliver(follow_up, self._runtime.ids.new("dlv")))
        return bool(accepted)

    async def cancel(
        self, reason: str = "", *, mode: CancelMode = "immediate", by: str = "python"
    ) -> bool:
        """Cancel the active run; its result has status ``cancelled``.

        ``immediate`` stops now: the LLM stream closes (text streamed so far is kept as an
        interrupted answer), running tools are cancelled and their calls closed with an
        interrupted result. ``after_turn`` lets the current round finish. Either way the
        session stays usable: the next send needs no repair.

        Returns:
            bool: ``False`` when no run was active.
        """
        return bool(await self._ask(Cancel(reason=reason, mode=mode, by=by)))

    async def reply(self, request_id: str, answer: str, *, by: str = "human") -> RunResult:
        """Answer a question the run asked (``ask_human``) and wait for the run's next result.

        Raises:
            HumanRequestNotFoundError: the session is not waiting for ``request_id``.
            ValueError: the request asks for an approval (use :meth:`approve`/:meth:`deny`).
        """
        return await self._reply(HumanReply(request_id=request_id, answer=answer, by=by))

    async def approve(self, request_id: str, *, by: str = "human") -> RunResult:
        """Allow a tool call waiting for approval; it runs and the run goes on."""
        return await self._reply(HumanReply(request_id=request_id, approve=True, by=by))

    async def deny(self, request_id: str, reason: str = "", *, by: str = "human") -> RunResult:
        """Refuse a tool call waiting for approval; the model reads ``reason``."""
        return await self._reply(
            HumanReply(request_id=request_id, answer=reason, approve=False, by=by)
        )

    async def _reply(self, reply: HumanReply) -> RunResult:
        outcome = await self._ask(reply)
        if isinstance(outcome, _NoRequest):
            raise HumanRequestNotFoundError(self.id, outcome.request_id, outcome.open)
        if isinstance(outcome, _BadReply):
            raise ValueError(outcome.problem)  # noqa: TRY004  # a wrong kind of answer
        assert isinstance(outcome, str)
        return await self.wait(outcome)

    async def _ask(self, message: object) -> object:
        """Ask the actor, again after a crash: every message here is idempotent."""
        while True:
            try:
                return await self._ref.ask(message)
            except ActorCrashedError:
                continue  # restarted from the log

    async def state(self) -> SessionState:
        """The session's folded state (transcript, active run, results, usage)."""
        return await self._ref.ask(_GetState())

    @contextmanager
    def observe(self, buffer: int = 256) -> Iterator[trio.MemoryReceiveChannel[Observation]]:
        """Receive the session's observations while the ``with`` block lasts.

        While anyone observes, the session streams the model's answers and each piece
        arrives as a :class:`DeltaReceived`. A slow reader never slows the session: when
        the buffer is full further observations are dropped for it.

        Args:
            buffer (int): observations held for a reader that falls behind.

        Yields:
            trio.MemoryReceiveChannel[Observation]: the observations, in order.
        """
        with self._bus.channel(buffer) as channel:
            yield channel


def _check_limits(
    response_format: ResponseFormat | None, budget: Budget | None, prices: Mapping[str, Price]
) -> None:
    if response_format is not None:
        check_schema(response_format.schema)
    if budget is not None and budget.max_cost is not None and not prices:
        msg = "a cost budget needs prices: pass prices={model: Price(...)} to spawn_session"
        raise ConfigError(msg)


async def spawn_session(
    runtime: Runtime,
    *,
    llm: LLM,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str = "",
    max_rounds: int = 10,
    model: str | None = None,
    budget: Budget | None = None,
    response_format: ResponseFormat | None = None,
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
    session_id: str | None = None,
    name: str | None = None,
) -> Session:
    """Start a session actor under the runtime's root supervisor (or resume it from the log).

    Args:
        runtime (Runtime): the runtime; its event store holds the session's stream.
        llm (LLM): the model (a provider transport, or ``ScriptedLLM`` in tests).
        tools: ``Tool`` objects or a ``ToolRegistry``.
        system_prompt (str): the default system prompt.
        max_rounds (int): the default round limit of a run.
        model (str | None): the model name to ask for.
        budget (Budget | None): the default limits of a run.
        response_format (ResponseFormat | None): the default response format of a run.
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
        session_id (str | None): resume this session; a new id when ``None``.
        name (str | None): path segment in the tree; defaults to the id.

    Returns:
        Session: the handle.

    Raises:
        ToolDefinitionError: ``response_format`` holds a malformed JSON Schema.
        ConfigError: ``budget`` limits cost and ``prices`` is empty.
        ValueError: ``max_rounds`` or ``tool_concurrency`` is below 1.
    """
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
    )
    ref = await runtime.spawn(lambda: SessionActor(config), id=config.session_id, name=name)
    return Session._create(ref, runtime, config)


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

    Raises:
        ConfigError: no model (neither ``spec.llm`` nor ``llm``), or a tool given by name.
    """
    model = spec.llm or llm
    if model is None:
        msg = f"agent spec {spec.name!r} has no llm: set AgentSpec.llm or pass llm="
        raise ConfigError(msg)
    named = [t for t in spec.tools or () if isinstance(t, str)]
    if named:
        msg = (
            f"agent spec {spec.name!r} names tools ({', '.join(named)}) but a top-level agent "
            "has no parent to take them from: give Tool objects"
        )
        raise ConfigError(msg)
    return await spawn_session(
        runtime,
        llm=model,
        tools=spec.own_tools(),
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
    )


def session_config(
    *,
    session_id: str,
    llm: LLM,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str = "",
    max_rounds: int = 10,
    model: str | None = None,
    budget: Budget | None = None,
    response_format: ResponseFormat | None = None,
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
) -> _Config:
    """Check :func:`spawn_session`'s arguments and build the actor's configuration."""
    limits = (
        ("max_rounds", max_rounds),
        ("tool_concurrency", tool_concurrency),
        ("max_depth", max_depth),
        ("max_children", max_children),
    )
    for label, value in limits:
        if value < 1:
            msg = f"{label} must be >= 1, got {value}"
            raise ValueError(msg)
    registry = ToolRegistry.of(*tools)  # a copy: ours to extend
    agents = tuple(agents)
    if agents:
        registry.add(spawn_agent_tool(agents))
    config = _Config(
        session_id=session_id,
        llm=llm,
        tools=registry,
        system_prompt=system_prompt,
        max_rounds=max_rounds,
        model=model,
        tool_concurrency=tool_concurrency,
        budget=budget,
        response_format=response_format,
        prices=dict(prices or {}),
        llm_hooks=tuple(llm_hooks),
        tool_hooks=tuple(tool_hooks),
        bus=ObserverBus(observers),
        on_busy=on_busy,
        agents=index_agents(agents),
        max_depth=max_depth,
        max_children=max_children,
        max_tokens=max_tokens,
        temperature=temperature,
    )
    _check_limits(response_format, budget, config.prices)
    return config
