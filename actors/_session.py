"""The session actor: the LLM tool loop as an event-sourced actor (DESIGN.md §4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, final

import attrs

from protocols import (
    LLM,
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    Message,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    aborted_outcome,
    idempotency_key,
)
from protocols.errors import ActorCrashedError, PowertrioError, ToolNotFoundError
from runtime import Decision, EventSourcedActor, Reply, Request, StepFailed

from ._session_events import (
    ActiveRun,
    AssistantRecorded,
    InputQueued,
    RunFinished,
    RunResult,
    RunStarted,
    SessionCreated,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
)
from ._tool_runner import run_tool_calls
from ._tools import ToolRegistry
from ._transcript import provider_valid

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime


# -- messages and steps (private: the Session facade is the public face) --------------


@attrs.frozen(kw_only=True)
class _Send(Request[str]):
    run_id: str
    input: str
    max_rounds: int | None
    tools: tuple[str, ...] | None
    system_prompt: str | None


@attrs.frozen
class _WaitRun(Request["RunResult | None"]):
    run_id: str


@attrs.frozen
class _GetState(Request[SessionState]):
    pass


@attrs.frozen
class _CallLLM:
    run_id: str
    request: LLMRequest


@attrs.frozen
class _LLMAnswered:
    run_id: str
    response: LLMResponse
    fingerprint: str


@attrs.frozen
class _RunTools:
    run_id: str
    calls: tuple[ToolStarted, ...]


@attrs.frozen
class _ToolsDone:
    run_id: str
    outcomes: tuple[ToolOutcome, ...]


_CRASHED = "the process stopped while this tool ran; its result is unknown"


@final
class SessionActor(EventSourcedActor[SessionState]):
    """One conversation: runs of LLM rounds and tool calls, folded from its own stream.

    Each round the actor appends the model's answer before acting on it, records every
    tool call as started before running it and as finished after, and after a restart
    continues from the log: a recorded answer is never requested again; a tool that
    started but did not finish follows its crash policy (``retry`` runs it again with the
    same idempotency key, ``abort`` and, until human input exists, ``ask`` close it with an
    ``aborted`` result).
    """

    def __init__(
        self,
        *,
        session_id: str,
        llm: LLM,
        tools: ToolRegistry,
        system_prompt: str = "",
        max_rounds: int = 10,
        model: str | None = None,
        tool_concurrency: int = 8,
    ) -> None:
        self._session_id = session_id
        self._llm = llm
        self._tools = tools
        self._system_prompt = system_prompt
        self._max_rounds = max_rounds
        self._model = model
        self._tool_concurrency = tool_concurrency
        self._waiters: dict[str, list[Reply[object]]] = {}

    def stream_name(self) -> str:
        return f"session/{self._session_id}"

    # -- the decider -----------------------------------------------------------------

    def initial_state(self) -> SessionState:
        return SessionState()

    def evolve(self, state: SessionState, event: object) -> SessionState:
        return evolve(state, event)

    def recovered(self, state: SessionState) -> Decision | None:
        if not state.session_id:
            return Decision(
                events=[
                    SessionCreated(
                        session_id=self._session_id,
                        system_prompt=self._system_prompt,
                        max_rounds=self._max_rounds,
                    )
                ]
            )
        run = state.run
        if run is None or not run.open_calls:
            return None
        closed = [
            ToolFinished(
                run_id=run.started.run_id,
                outcome=aborted_outcome(call.call_id, call.name, _CRASHED),
            )
            for call in run.open_calls
            if call.crash_policy != "retry"
        ]
        return Decision(events=closed) if closed else None

    def handle(self, state: SessionState, message: object) -> Decision:
        if isinstance(message, _Send):
            return self._handle_send(state, message)
        run = state.run
        run_id = run.started.run_id if run is not None else None
        if isinstance(message, _LLMAnswered) and message.run_id == run_id:
            assert run is not None
            response = message.response
            answer = AssistantMessage(
                content=response.content,
                tool_calls=response.tool_calls,
                thinking=response.thinking,
            )
            return Decision(
                events=[
                    AssistantRecorded(
                        run_id=message.run_id,
                        round=run.rounds + 1,
                        message=answer,
                        usage=response.usage,
                        model=response.model,
                        finish_reason=response.finish_reason,
                        request_fingerprint=message.fingerprint,
                    )
                ]
            )
        if isinstance(message, _ToolsDone) and message.run_id == run_id:
            assert run is not None
            open_ids = {call.call_id for call in run.open_calls}
            return Decision(
                events=[
                    ToolFinished(run_id=message.run_id, outcome=outcome)
                    for outcome in message.outcomes
                    if outcome.call_id in open_ids
                ]
            )
        if isinstance(message, StepFailed) and run is not None:
            return Decision(events=[self._finish(run, "failed", error=_describe(message.error))])
        if isinstance(message, _GetState):
            return Decision(reply=state)
        return Decision()  # late news about a run that already ended

    def _handle_send(self, state: SessionState, send: _Send) -> Decision:
        known = (
            send.run_id in state.results
            or (state.run is not None and state.run.started.run_id == send.run_id)
            or any(q.run_id == send.run_id for q in state.queued)
        )
        if known:  # a retried send after a crash: already recorded
            return Decision(reply=send.run_id)
        started = RunStarted(
            run_id=send.run_id,
            input=send.input,
            max_rounds=send.max_rounds if send.max_rounds is not None else state.max_rounds,
            tools=send.tools,
            system_prompt=send.system_prompt,
        )
        if state.run is None and not state.queued:
            return Decision(events=[started], reply=send.run_id)
        return Decision(events=[InputQueued(run=started)], reply=send.run_id)

    def next_step(self, state: SessionState) -> object | None:
        run = state.run
        if run is None:
            return Decision(events=[state.queued[0]]) if state.queued else None
        run_id = run.started.run_id
        if run.pending_calls:
            return Decision(events=[self._started(state, run, call) for call in run.pending_calls])
        if run.open_calls:
            return _RunTools(run_id, run.open_calls)
        last = state.transcript[-1]
        if isinstance(last, AssistantMessage) and not last.tool_calls:
            return Decision(events=[self._finish(run, "completed")])
        if run.rounds >= run.started.max_rounds:
            return Decision(events=[self._finish(run, "hit_round_limit")])
        return _CallLLM(run_id, self._request(state, run))

    def _started(self, state: SessionState, run: ActiveRun, call: ToolCall) -> ToolStarted:
        try:
            policy = self._tools.get(call.name).spec.crash_policy
        except ToolNotFoundError:
            policy = "abort"
        return ToolStarted(
            run_id=run.started.run_id,
            call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            idempotency_key=idempotency_key(state.session_id, call.id, round_index=run.rounds),
            crash_policy=policy,
        )

    @staticmethod
    def _finish(run: ActiveRun, status: str, error: str | None = None) -> RunFinished:
        return RunFinished(
            run_id=run.started.run_id,
            status=status,  # type: ignore[arg-type]  # callers pass RunStatus literals
            text=run.text,
            rounds=run.rounds,
            usage=run.usage,
            error=error,
        )

    def _request(self, state: SessionState, run: ActiveRun) -> LLMRequest:
        system = run.started.system_prompt
        if system is None:
            system = state.system_prompt
        messages: tuple[Message, ...] = provider_valid(state.transcript)
        if system:
            messages = (SystemMessage(system), *messages)
        tools = self._run_tools(run)
        return LLMRequest(messages=messages, tools=tools.definitions(), model=self._model)

    def _run_tools(self, run: ActiveRun) -> ToolRegistry:
        names = run.started.tools
        return self._tools if names is None else self._tools.subset(names)

    # -- effects ---------------------------------------------------------------------

    async def execute(self, step: object) -> object:
        if isinstance(step, _CallLLM):
            response = await self._llm.complete(step.request)
            return _LLMAnswered(step.run_id, response, step.request.fingerprint())
        assert isinstance(step, _RunTools)
        calls = [ToolCall(id=c.call_id, name=c.name, arguments=c.arguments) for c in step.calls]
        run = self.state.run
        registry = self._run_tools(run) if run is not None else self._tools
        outcomes = await run_tool_calls(
            calls,
            registry,
            session_id=self._session_id,
            limit=self._tool_concurrency,
            idempotency_keys={c.call_id: c.idempotency_key for c in step.calls},
        )
        return _ToolsDone(step.run_id, tuple(outcomes))

    # -- answering the callers -------------------------------------------------------

    async def receive(self, message: object) -> object:
        if isinstance(message, _WaitRun):
            result = self.state.results.get(message.run_id)
            if result is not None or not self._is_pending(message.run_id):
                return result
            self._waiters.setdefault(message.run_id, []).append(self.context.defer_reply())
            return None
        return await super().receive(message)

    def _is_pending(self, run_id: str) -> bool:
        run = self.state.run
        return (run is not None and run.started.run_id == run_id) or any(
            q.run_id == run_id for q in self.state.queued
        )

    def after_persist(self, events: Sequence[object]) -> None:
        for event in events:
            if isinstance(event, RunFinished):
                result = self.state.results[event.run_id]
                for reply in self._waiters.pop(event.run_id, ()):
                    reply.send(result)


def _describe(error: Exception) -> str:
    code = error.code if isinstance(error, PowertrioError) else type(error).__name__
    return f"{code}: {error}"


@final
class Session:
    """A handle on a session actor: send it input, read its state.

    Made by :func:`spawn_session`. ``send`` survives crashes of the actor: the run goes on
    from the log after the supervisor restarts it, and ``send`` waits for its end.
    """

    __slots__ = ("_ref", "_runtime", "_tool_names")
    _ref: ActorRef[object]
    _runtime: Runtime
    _tool_names: frozenset[str]

    def __init__(self) -> None:
        msg = "Session is made by spawn_session()"
        raise TypeError(msg)

    @classmethod
    def _create(
        cls, ref: ActorRef[object], runtime: Runtime, tool_names: Iterable[str]
    ) -> Session:
        self = object.__new__(cls)
        self._ref = ref
        self._runtime = runtime
        self._tool_names = frozenset(tool_names)
        return self

    @property
    def id(self) -> str:
        """The session id (its stream is ``session/<id>``)."""
        return self._ref.id

    @property
    def ref(self) -> ActorRef[object]:
        """The session actor's ref."""
        return self._ref

    async def send(
        self,
        input: str,
        *,
        max_rounds: int | None = None,
        tools: Iterable[str] | None = None,
        system_prompt: str | None = None,
    ) -> RunResult:
        """Run the agent on ``input`` and return how the run ended.

        If a run is active the input is queued and runs after it.

        Args:
            input (str): the user's message.
            max_rounds (int | None): this run's round limit; the session default if ``None``.
            tools (Iterable[str] | None): the subset of the session's tools for this run.
            system_prompt (str | None): this run's system prompt instead of the session's.

        Returns:
            RunResult: status, final text, rounds and usage of this run.

        Raises:
            ToolNotFoundError: ``tools`` names a tool the session does not have.
            ValueError: ``max_rounds`` is below 1.
            ActorStoppedError: the session actor stopped for good.
        """
        if max_rounds is not None and max_rounds < 1:
            msg = f"max_rounds must be >= 1, got {max_rounds}"
            raise ValueError(msg)
        subset = None if tools is None else tuple(tools)
        for name in subset or ():
            if name not in self._tool_names:
                raise ToolNotFoundError(name, tuple(sorted(self._tool_names)))
        send = _Send(
            run_id=self._runtime.ids.new("run"),
            input=input,
            max_rounds=max_rounds,
            tools=subset,
            system_prompt=system_prompt,
        )
        while True:
            try:
                await self._ref.ask(send)
                result = await self._ref.ask(_WaitRun(send.run_id))
            except ActorCrashedError:
                continue  # restarted from the log; the send is idempotent by run id
            assert result is not None
            return result

    async def state(self) -> SessionState:
        """The session's folded state (transcript, active run, results, usage)."""
        return await self._ref.ask(_GetState())


async def spawn_session(
    runtime: Runtime,
    *,
    llm: LLM,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str = "",
    max_rounds: int = 10,
    model: str | None = None,
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
        session_id (str | None): resume this session; a new id when ``None``.
        name (str | None): path segment in the tree; defaults to the id.

    Returns:
        Session: the handle.
    """
    registry = (
        tools if isinstance(tools, ToolRegistry) else ToolRegistry.of(*tools)  # type: ignore[arg-type]
    )
    session_id = session_id or runtime.ids.new("ses")

    def factory() -> SessionActor:
        return SessionActor(
            session_id=session_id,
            llm=llm,
            tools=registry,
            system_prompt=system_prompt,
            max_rounds=max_rounds,
            model=model,
        )

    ref = await runtime.spawn(factory, id=session_id, name=name)
    return Session._create(ref, runtime, registry.names())


