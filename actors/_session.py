"""The session actor: the LLM tool loop as an event-sourced actor (DESIGN.md §4)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, final

import attrs
import orjson
import trio

from protocols import (
    LLM,
    AssistantMessage,
    Cancel,
    CancelMode,
    FollowUp,
    HumanReply,
    JsonValue,
    LLMRequest,
    LLMResponse,
    Message,
    ResponseFormat,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    Usage,
    aborted_outcome,
    check_schema,
    denied_outcome,
    idempotency_key,
    interrupted_outcome,
    validate_json,
)
from protocols.errors import (
    ActorCrashedError,
    ActorExistsError,
    ActorNotFoundError,
    ConfigError,
    HookVetoError,
    HumanRequestNotFoundError,
    OutputInvalidError,
    PowertrioError,
    SessionBusyError,
    ToolError,
    ToolNotFoundError,
)
from runtime import (
    Decision,
    EventSourcedActor,
    Reply,
    Request,
    StepFailed,
    TimerFired,
    timer_decision,
)

from ._agents import SPAWN_AGENT, AgentSpec, child_tools, index_agents, spawn_agent_tool
from ._board_events import BoardChanged
from ._budget import Budget, Price
from ._observe import (
    DeltaReceived,
    HookContext,
    LLMCallFinished,
    LLMHook,
    Observation,
    Observer,
    ObserverBus,
    RoundBegan,
    RunBegan,
    RunEnded,
    ToolCallBegan,
    ToolCallFinished,
    ToolCallNext,
    ToolHook,
    UsageUpdated,
    chain_llm_hooks,
    chain_tool_hooks,
)
from ._session_events import (
    ActiveRun,
    AssistantRecorded,
    CancelRequested,
    ChildFinished,
    ChildSpawned,
    FollowUpReceived,
    FollowUpsInjected,
    HumanAnswered,
    HumanRequested,
    InputQueued,
    OutputRejected,
    RequestHeader,
    RunFinished,
    RunResult,
    RunStarted,
    RunStatus,
    SessionCreated,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
)
from ._tool_runner import run_tool_calls
from ._tools import ToolRegistry, tool

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime


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
class _PythonSpawn(Request["Session"]):
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
_STOPPED = "the run stopped before this tool finished; its result is unknown"


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


@final
class SessionActor(EventSourcedActor[SessionState]):
    """One conversation: runs of LLM rounds and tool calls, folded from its own stream.

    Each round the actor checks the run's limits, appends the model's answer before acting
    on it, records every tool call as started before running it and as finished after, and
    after a restart continues from the log: a recorded answer is never requested again; a
    tool that started but did not finish follows its crash policy (``retry`` runs it again
    with the same idempotency key, ``abort`` and, until human input exists, ``ask`` close it
    with an ``aborted`` result).

    Made by :func:`spawn_session`; its messages are private to the :class:`Session` handle.
    """

    def __init__(self, config: _Config) -> None:
        self._config = config
        self._session_id = config.session_id
        self._waiters: dict[str, list[Reply[object]]] = {}
        self._partial: list[str] | None = None
        self._inflight_fingerprint = ""

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
                        system_prompt=self._config.system_prompt,
                        max_rounds=self._config.max_rounds,
                        parent_id=self._config.parent_id,
                        depth=self._config.depth,
                    )
                ]
            )
        run = state.run
        if run is None or not run.open_calls:
            return None
        events: list[object] = []
        for call in run.open_calls:
            if call.crash_policy == "abort":
                outcome = aborted_outcome(call.call_id, call.name, _CRASHED)
                events.append(ToolFinished(run_id=run.started.run_id, outcome=outcome))
            elif call.crash_policy == "ask":
                events.append(
                    HumanRequested(
                        run_id=run.started.run_id,
                        request_id=call.call_id,
                        kind="crash",
                        prompt=(
                            f"The tool {call.name} was running when the process stopped; its "
                            f"result is unknown. Run it again with {call.arguments}?"
                        ),
                        call=ToolCall(id=call.call_id, name=call.name, arguments=call.arguments),
                    )
                )
        return Decision(events=events) if events else None

    def handle(self, state: SessionState, message: object) -> Decision:
        if isinstance(message, _Send):
            return self._handle_send(state, message)
        if isinstance(message, _Stamped):
            if isinstance(message.message, FollowUp):
                return self._handle_follow_up(
                    state, message.message, message.at, message.delivery
                )
            return self._handle_cancel(state, message.message, message.at, message.partial)
        if isinstance(message, HumanReply):
            return self._handle_reply(state, message)
        timers = timer_decision(state.timers, message)
        if timers is not None:
            return self._with_wake_up(state, message, timers)
        if isinstance(message, _ChildDone):
            done = message.finished.child_id in state.child_status
            return Decision(events=[] if done else [message.finished])
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
                        model=response.model or self._config.model or "",
                        finish_reason=response.finish_reason,
                        request_fingerprint=message.fingerprint,
                        request_header=message.header,
                    )
                ]
            )
        if isinstance(message, _ToolsDone) and message.run_id == run_id:
            assert run is not None
            open_ids = {call.call_id for call in run.open_calls}
            events: list[object] = [
                ToolFinished(run_id=message.run_id, outcome=outcome)
                for outcome in message.outcomes
                if outcome.call_id in open_ids
            ]
            events.extend(c for c in message.children if c.child_id in run.children)
            return Decision(events=events)
        if isinstance(message, _OutOfTime) and message.run_id == run_id:
            assert run is not None
            return Decision(events=[_finish(run, "budget_exceeded", error=message.reason)])
        if isinstance(message, StepFailed) and run is not None:
            closing = [
                ToolFinished(
                    run_id=run.started.run_id,
                    outcome=interrupted_outcome(call.call_id, call.name),
                )
                for call in run.open_calls
            ]
            failed = _finish(run, "failed", error=_describe(message.error))
            return Decision(events=[*closing, failed])
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
        config = self._config
        started = RunStarted(
            run_id=send.run_id,
            input=send.input,
            max_rounds=send.max_rounds if send.max_rounds is not None else state.max_rounds,
            tools=send.tools,
            system_prompt=send.system_prompt,
            response_format=send.response_format or config.response_format,
            budget=send.budget or config.budget,
            started_at=send.started_at,
        )
        run = state.run
        if run is None and not state.queued:
            return Decision(events=[started], reply=send.run_id)
        policy = send.if_busy or config.on_busy
        active = run.started.run_id if run is not None else state.queued[0].run_id
        if policy == "reject":
            return Decision(reply=_Busy(active))
        events: list[object] = [InputQueued(run=started)]
        if policy == "interrupt" and run is not None and run.cancel is None:
            interrupt = CancelRequested(
                run_id=active,
                mode="after_turn",
                reason=f"interrupted by the new input of run {send.run_id}",
                by="send",
                at=send.started_at,
            )
            events.insert(0, interrupt)
        return Decision(events=events, reply=send.run_id)

    def _handle_follow_up(
        self, state: SessionState, follow_up: FollowUp, at: float, delivery: str
    ) -> Decision:
        seen = state.seen_follow_ups.get(follow_up.id)
        if seen is not None:  # once per id, forever; True again for a retried delivery
            return Decision(reply=bool(delivery) and seen == delivery)
        events: list[object] = [FollowUpReceived(follow_up=follow_up, delivery=delivery)]
        if state.run is None and not state.queued:
            events.append(self._inbox_run(state, f"fu-{follow_up.id}", at))
        return Decision(events=events, reply=True)

    def _inbox_run(self, state: SessionState, run_id: str, at: float) -> RunStarted:
        """A run started to read the inbox (its input is the follow-ups it injects)."""
        config = self._config
        if run_id in state.results:  # its first run ended before reading it (a cancel)
            run_id = f"{run_id}~{len(state.results)}"
        return RunStarted(
            run_id=run_id,
            input="",
            max_rounds=state.max_rounds,
            response_format=config.response_format,
            budget=config.budget,
            started_at=at,
            trigger="follow_up",
        )

    def _with_wake_up(self, state: SessionState, message: object, decision: Decision) -> Decision:
        """A recorded firing on an idle session also starts a run to read it."""
        if not (isinstance(message, TimerFired) and decision.events):
            return decision
        if state.run is not None or state.queued:
            return decision  # injected at the active run's next round boundary
        config = self._config
        started = RunStarted(
            run_id=f"tm-{message.timer_id}@{message.due_at!r}",
            input="",
            max_rounds=state.max_rounds,
            response_format=config.response_format,
            budget=config.budget,
            started_at=message.fired_at,
            trigger="timer",
        )
        return attrs.evolve(decision, events=(*decision.events, started))

    def _handle_cancel(
        self, state: SessionState, cancel: Cancel, at: float, partial: str
    ) -> Decision:
        run = state.run
        if run is None:
            return Decision(reply=False)
        run_id = run.started.run_id
        requested = CancelRequested(
            run_id=run_id, mode=cancel.mode, reason=cancel.reason, by=cancel.by, at=at
        )
        if cancel.mode == "after_turn":
            return Decision(events=[] if run.cancel else [requested], reply=True)
        events: list[object] = [requested]
        if partial:
            events.append(
                AssistantRecorded(
                    run_id=run_id,
                    round=run.rounds + 1,
                    message=AssistantMessage(content=partial),
                    usage=Usage(),
                    model=self._config.model or "",
                    finish_reason="interrupted",
                    request_fingerprint=self._inflight_fingerprint,
                )
            )
        events.extend(
            ToolFinished(run_id=run_id, outcome=interrupted_outcome(call.call_id, call.name))
            for call in run.open_calls
        )
        events.append(_cancelled(run, requested))
        return Decision(events=events, reply=True, cancel_step=True)

    def _handle_reply(self, state: SessionState, reply: HumanReply) -> Decision:
        run = state.run
        open_requests = run.human if run is not None else ()
        request = next((r for r in open_requests if r.request_id == reply.request_id), None)
        if run is None or request is None:
            return Decision(
                reply=_NoRequest(reply.request_id, tuple(r.request_id for r in open_requests))
            )
        if request.kind != "question" and reply.approve is None:
            problem = (
                f"request {reply.request_id!r} asks for an approval: "
                "answer it with approve() or deny()"
            )
            return Decision(reply=_BadReply(problem))
        answered = HumanAnswered(
            run_id=run.started.run_id,
            request_id=reply.request_id,
            answer=reply.answer,
            approve=reply.approve,
            by=reply.by,
        )
        return Decision(events=[answered], reply=run.started.run_id)

    def next_step(self, state: SessionState) -> object | None:
        run = state.run
        if run is None:
            if state.queued:
                return Decision(events=[state.queued[0]])
            if state.inbox:  # left by a run that ended before its next round boundary
                first = state.inbox[0]
                return Decision(events=[self._inbox_run(state, f"fu-{first.id}", 0.0)])
            return None
        run_id = run.started.run_id
        if run.pending_calls:
            events: list[object] = []
            children = len(state.children)
            for call in run.pending_calls:
                begun = self._begin_call(state, run, call, children)
                children += sum(isinstance(e, ChildSpawned) for e in begun)
                events.extend(begun)
            return Decision(events=events)
        if run.open_calls:
            return _RunTools(run_id, run.rounds, run.open_calls)
        if run.cancel is not None:
            return Decision(events=[_cancelled(run, run.cancel)])
        if run.parked:
            return None  # until a human answers
        if state.inbox:
            return Decision(
                events=[FollowUpsInjected(run_id=run_id, ids=tuple(f.id for f in state.inbox))]
            )
        if not state.transcript:
            return Decision(
                events=[_finish(run, "failed", error="ValueError: the run has no input")]
            )
        last = state.transcript[-1]
        if run.rounds and isinstance(last, AssistantMessage) and not last.tool_calls:
            return Decision(events=[self._answered(run, last.content)])
        if run.rounds >= run.round_limit:
            return Decision(events=[_finish(run, "hit_round_limit")])
        budget = run.started.budget
        if budget is not None:
            reason = budget.exceeded(run.usage, self._cost(run))
            if reason is not None:
                return Decision(events=[_finish(run, "budget_exceeded", error=reason)])
        request, fingerprint, header = self._request(state, run)
        deadline = None
        if budget is not None and budget.max_seconds is not None and run.started.started_at:
            deadline = run.started.started_at + budget.max_seconds
        return _CallLLM(run_id, run.rounds + 1, request, fingerprint, header, deadline)

    def _answered(self, run: ActiveRun, text: str) -> RunFinished | OutputRejected:
        response_format = run.started.response_format
        if response_format is None:
            return _finish(run, "completed")
        output, problems = _parse_output(response_format, text)
        if not problems:
            return _finish(run, "completed", output=output)
        if not run.repaired:
            return OutputRejected(run_id=run.started.run_id, problems=problems)
        return _finish(run, "failed", error=_describe(OutputInvalidError(problems)))

    def _begin_call(
        self, state: SessionState, run: ActiveRun, call: ToolCall, child_number: int
    ) -> list[object]:
        """Record a call as started, or as a request to a human it must wait for."""
        tools = self._run_tools(run)
        target = tools.get(call.name) if call.name in tools else None
        run_id = run.started.run_id
        if call.name == SPAWN_AGENT and target is not None and self._config.agents:
            return self._begin_spawn(state, run, call, child_number)
        if target is ask_human:
            question = _question(call)
            if question is not None:
                return [
                    HumanRequested(
                        run_id=run_id,
                        request_id=call.id,
                        kind="question",
                        prompt=question,
                        call=call,
                    )
                ]  # bad arguments fall through: the runner tells the model what is wrong
        elif target is not None and target.spec.needs_approval and call.id not in run.approved:
            return [
                HumanRequested(
                    run_id=run_id,
                    request_id=call.id,
                    kind="approval",
                    prompt=f"Allow the tool {call.name} to run with {call.arguments}?",
                    call=call,
                )
            ]
        return [self._started(state, run, call)]

    def _begin_spawn(
        self, state: SessionState, run: ActiveRun, call: ToolCall, child_number: int
    ) -> list[object]:
        """Record a ``spawn_agent`` call and its child, or refuse it with a tool error."""
        started = self._started(state, run, call)
        config = self._config

        def refuse(problem: str) -> list[object]:
            error = ToolError(problem)
            outcome = ToolOutcome(
                call_id=call.id,
                tool_name=call.name,
                status="error",
                content=problem,
                error_code=error.code,
            )
            return [started, ToolFinished(run_id=run.started.run_id, outcome=outcome)]

        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError as exc:
            return refuse(f"invalid arguments for tool 'spawn_agent': not valid JSON ({exc})")
        problems = self._run_tools(run).get(SPAWN_AGENT).validator.problems(arguments)
        if problems:
            return refuse("invalid arguments for tool 'spawn_agent': " + "; ".join(problems))
        spec = config.agents[arguments["agent"]]
        if state.depth + 1 > config.max_depth:
            return refuse(
                f"cannot spawn {spec.name!r}: agent trees are limited to depth "
                f"{config.max_depth} and this agent is at depth {state.depth}; do the task "
                "yourself"
            )
        spawned_by_run = len(run.children) + child_number - len(state.children)
        if spawned_by_run >= config.max_children:
            return refuse(
                f"cannot spawn {spec.name!r}: a run may start at most {config.max_children} "
                "sub-agents; use the answers you have"
            )
        _, missing = child_tools(spec, self._run_tools(run))
        if missing:
            return refuse(
                f"cannot spawn {spec.name!r}: it needs tools this agent does not have: "
                + ", ".join(missing)
            )
        spawned = ChildSpawned(
            run_id=run.started.run_id,
            call_id=call.id,
            child_id=f"{state.session_id}.{child_number + 1}",
            agent=spec.name,
            task=arguments["task"],
            lifecycle=spec.lifecycle,
            budget=self._child_budget(spec.budget, run),
        )
        return [started, spawned]

    def _child_budget(self, own: Budget | None, run: ActiveRun) -> Budget | None:
        """``own`` capped by what remains of the run's budget (a tree never gets more)."""
        parent = run.started.budget
        if parent is None:
            return own
        tokens = own.max_tokens if own is not None else None
        if parent.max_tokens is not None:
            left = max(1, parent.max_tokens - run.usage.total_tokens)
            tokens = left if tokens is None else min(tokens, left)
        cost = own.max_cost if own is not None else None
        if parent.max_cost is not None:
            left_cost = max(1e-9, parent.max_cost - self._cost(run))
            cost = left_cost if cost is None else min(cost, left_cost)
        seconds = own.max_seconds if own is not None else parent.max_seconds
        return Budget(max_tokens=tokens, max_cost=cost, max_seconds=seconds)

    def _started(self, state: SessionState, run: ActiveRun, call: ToolCall) -> ToolStarted:
        try:
            policy = self._config.tools.get(call.name).spec.crash_policy
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

    def _request(
        self, state: SessionState, run: ActiveRun
    ) -> tuple[LLMRequest, str, RequestHeader]:
        system = run.started.system_prompt
        if system is None:
            # The code's prompt, not the one recorded at creation: a changed prompt is a
            # change of behaviour, which replay must be able to see.
            system = self._config.system_prompt
        history = state.history.closed()
        messages: tuple[Message, ...] = history.messages
        if system:
            messages = (SystemMessage(system), *messages)
        request = LLMRequest(
            messages=messages,
            tools=self._run_tools(run).definitions(),
            model=self._config.model,
            response_format=run.started.response_format,
            max_tokens=self._config.max_tokens,
            temperature=self._config.temperature,
        )
        fingerprint = request.fingerprint(messages_digest=history.digest)
        return request, fingerprint, RequestHeader.of(request, history.digest)

    def _run_tools(self, run: ActiveRun | None) -> ToolRegistry:
        names = run.started.tools if run is not None else None
        return self._config.tools if names is None else self._config.tools.subset(names)

    def _cost(self, run: ActiveRun) -> float:
        prices = self._config.prices
        return sum(
            price.cost(usage)
            for model, usage in run.usage_by_model.items()
            if (price := _price_for(prices, model)) is not None
        )

    # -- replay (runtime.replay) -----------------------------------------------------

    def answers_effect(self, event: object) -> bool:
        """An answer of the model is what replay checks the code against."""
        return isinstance(event, AssistantRecorded)

    def replay_check(self, step: object | None, event: object) -> str | None:
        assert isinstance(event, AssistantRecorded)
        if not isinstance(step, _CallLLM):
            return (
                "the log has an answer of the model here, but the code asks for "
                f"{_describe_step(step)}"
            )
        if step.fingerprint == event.request_fingerprint:
            return None
        recorded = event.request_header
        if recorded is None:
            return "the request differs (the log has no request header to show how)"
        lines = recorded.differences(step.header)
        return "\n".join(lines) or "the request differs in a parameter the header omits"

    def step_settled(self, step: object, state: SessionState, event: object) -> bool:
        run = state.run
        if run is None or not isinstance(step, _CallLLM | _RunTools):
            return True
        if isinstance(step, _CallLLM) and isinstance(event, _DECIDED_BETWEEN_CALLS):
            return True  # decided by a restarted actor: the call in flight was abandoned
        if run.started.run_id != step.run_id:
            return True
        if isinstance(step, _CallLLM):
            return run.rounds >= step.round
        return not run.open_calls

    # -- effects ---------------------------------------------------------------------

    async def execute(self, step: object) -> object:
        if isinstance(step, _CallLLM):
            return await self._call_llm(step)
        assert isinstance(step, _RunTools)
        return await self._run_tool_round(step)

    async def _call_llm(self, step: _CallLLM) -> object:
        if step.deadline is not None and self.context.runtime.clock.now() >= step.deadline:
            budget = self.state.run.started.budget if self.state.run is not None else None
            limit = budget.max_seconds if budget is not None else None
            return _OutOfTime(step.run_id, f"wall time: the budget is {limit:g} s")
        bus = self._config.bus
        context = HookContext(session_id=self._session_id, run_id=step.run_id, round=step.round)
        if bus.active:
            bus.publish(
                RoundBegan(session_id=self._session_id, run_id=step.run_id, round=step.round)
            )

        async def innermost(request: LLMRequest) -> LLMResponse:
            if not bus.active:
                return await self._config.llm.complete(request)
            partial = self._partial = []
            async with self._config.llm.stream(request) as stream:
                async for delta in stream:
                    if delta.type == "text":
                        partial.append(delta.text)
                    bus.publish(
                        DeltaReceived(
                            session_id=self._session_id,
                            run_id=step.run_id,
                            round=step.round,
                            delta=delta,
                        )
                    )
                return await stream.final_response()

        call = chain_llm_hooks(self._config.llm_hooks, innermost, context)
        self._inflight_fingerprint = step.fingerprint
        try:
            response = await call(step.request)
        finally:
            self._partial = None
        return _LLMAnswered(step.run_id, response, step.fingerprint, step.header)

    async def _run_tool_round(self, step: _RunTools) -> object:
        calls = [ToolCall(id=c.call_id, name=c.name, arguments=c.arguments) for c in step.calls]
        hooks = self._config.tool_hooks
        wrap = None
        if hooks:
            context = HookContext(
                session_id=self._session_id, run_id=step.run_id, round=step.round
            )

            async def wrap(call: ToolCall, run: ToolCallNext) -> ToolOutcome:
                try:
                    return await chain_tool_hooks(hooks, run, context)(call)
                except HookVetoError as veto:
                    return denied_outcome(call.id, call.name, veto.reason)

        run = self.state.run
        spawns = {c.call_id: c for c in self.state.children if run and c.child_id in run.children}
        regular = [c for c in calls if c.id not in spawns]
        outcomes: dict[str, ToolOutcome] = {}
        finished: list[ChildFinished] = []

        async def run_regular() -> None:
            done = await run_tool_calls(
                regular,
                self._run_tools(run),
                session_id=self._session_id,
                limit=self._config.tool_concurrency,
                idempotency_keys={c.call_id: c.idempotency_key for c in step.calls},
                approved=run.approved if run is not None else (),
                wrap=wrap,
            )
            outcomes.update((o.call_id, o) for o in done)

        async def run_child(spawned: ChildSpawned) -> None:
            outcome, result = await self._run_child(spawned)
            outcomes[spawned.call_id] = outcome
            finished.append(result)

        async with trio.open_nursery() as nursery:
            if regular:
                nursery.start_soon(run_regular)
            for call in calls:
                if call.id in spawns:
                    nursery.start_soon(run_child, spawns[call.id])
        return _ToolsDone(
            step.run_id, tuple(outcomes[c.id] for c in calls), tuple(finished)
        )

    # -- sub-agents ------------------------------------------------------------------

    async def _run_child(self, spawned: ChildSpawned) -> tuple[ToolOutcome, ChildFinished]:
        """Run (or, after a crash, reattach to) a child and wait for its answer."""
        child = await self.spawn_child(self._config.agents[spawned.agent], spawned)
        try:
            result = await child._submit(
                spawned.task, run_id=f"{spawned.child_id}:task", budget=spawned.budget
            )
        except trio.Cancelled:
            with trio.move_on_after(5) as cleanup:
                cleanup.shield = True
                await child.cancel("the parent's run was cancelled", by=f"session:{self.id}")
            raise
        return _child_outcome(spawned, result), ChildFinished(
            run_id=spawned.run_id,
            child_id=spawned.child_id,
            status=result.status,
            usage=result.usage,
        )

    async def spawn_child(
        self, spec: AgentSpec, spawned: ChildSpawned, *, granted: bool = False
    ) -> Session:
        """Start the child session of ``spawned`` (or find it running) and return its handle.

        Its id is fixed by the parent's log, so a parent restarted after a crash finds the
        same child, which folds its own log: no orphan, no duplicate. ``granted``: spawned
        from Python, which may give the child any of the session's tools.
        """
        parent = self._config
        tools = parent.tools if granted else self._run_tools(self.state.run)
        config = child_config(parent, spec, spawned.child_id, tools, self.state.depth + 1)
        runtime = self.context.runtime
        name = f"{spec.name}.{spawned.child_id.rsplit('.', 1)[-1]}"
        try:
            if spec.lifecycle == "detached":
                ref = await runtime.spawn(lambda: SessionActor(config), id=config.session_id)
            else:
                ref = await self.context.spawn(
                    lambda: SessionActor(config), id=config.session_id, name=name
                )
        except ActorExistsError:
            ref = runtime.lookup(config.session_id)
        return Session._create(ref, runtime, config)

    async def _spawn_from_python(self, request: _PythonSpawn) -> Session:
        spawned = next((c for c in self.state.children if c.call_id == request.spawn_id), None)
        if spawned is None:  # not a retry of an ask the actor crashed under
            spawned = ChildSpawned(
                run_id="",
                call_id=request.spawn_id,
                child_id=f"{self.id}.{len(self.state.children) + 1}",
                agent=request.spec.name,
                task=request.task,
                lifecycle=request.spec.lifecycle,
                budget=request.spec.budget,
            )
            await self.persist([spawned])
            self.after_persist([spawned])
        return await self.spawn_child(request.spec, spawned, granted=True)

    @property
    def id(self) -> str:
        """The session id."""
        return self._session_id

    # -- answering the callers -------------------------------------------------------

    async def receive(self, message: object) -> object:
        if isinstance(message, _WaitRun):
            result = self.state.results.get(message.run_id) or self._parked(message.run_id)
            if result is not None or not self._is_pending(message.run_id):
                return result
            self._waiters.setdefault(message.run_id, []).append(self.context.defer_reply())
            return None
        if isinstance(message, _PythonSpawn):
            return await self._spawn_from_python(message)
        if isinstance(message, BoardChanged):
            message = _board_follow_up(message)
        if isinstance(message, _Deliver):
            partial = "".join(self._partial) if self._partial else ""
            now = self.context.runtime.clock.now()
            message = _Stamped(message.follow_up, now, partial, message.token)
        if isinstance(message, (FollowUp, Cancel)):
            partial = "".join(self._partial) if self._partial else ""
            now = self.context.runtime.clock.now()
            message = _Stamped(message, now, partial)
        return await super().receive(message)

    def _parked(self, run_id: str) -> RunResult | None:
        """The result to give for a run waiting for a human, if it is."""
        run = self.state.run
        if run is None or run.started.run_id != run_id or not run.parked:
            return None
        return RunResult(
            session_id=self._session_id,
            run_id=run_id,
            status="waiting_for_human",
            text=run.text,
            rounds=run.rounds,
            usage=run.usage,
            human_requests=run.human,
        )

    def _is_pending(self, run_id: str) -> bool:
        run = self.state.run
        return (run is not None and run.started.run_id == run_id) or any(
            q.run_id == run_id for q in self.state.queued
        )

    def after_persist(self, events: Sequence[object]) -> None:
        bus = self._config.bus
        for event in events:
            if isinstance(event, RunFinished):
                result = self.state.results[event.run_id]
                for reply in self._waiters.pop(event.run_id, ()):
                    reply.send(result)
            elif isinstance(event, ChildFinished):
                self._retire_child(event)
            elif isinstance(event, CancelRequested):
                self._cancel_children(event)
        run = self.state.run
        if run is not None and run.parked:
            parked = self._parked(run.started.run_id)
            for reply in self._waiters.pop(run.started.run_id, ()):
                reply.send(parked)
        if bus.active:
            for event in events:
                observation = self._observation(event)
                if observation is not None:
                    bus.publish(observation)

    def _retire_child(self, finished: ChildFinished) -> None:
        """Stop a finished child's actor (it folds back from its log if needed again); an
        ephemeral child that completed also loses its stream."""
        spawned = next(c for c in self.state.children if c.child_id == finished.child_id)
        if spawned.lifecycle == "detached":
            return
        drop_stream = spawned.lifecycle == "ephemeral" and finished.status == "completed"

        async def retire() -> None:
            try:
                ref = self.context.runtime.lookup(finished.child_id)
            except ActorNotFoundError:
                pass
            else:
                with contextlib.suppress(ValueError):  # not ours (anymore)
                    await self.context.stop_child(ref)
            if drop_stream:
                await self.store.delete_streams([f"session/{finished.child_id}"])

        self.context.start_soon(retire, name=f"retire {finished.child_id}")

    def _cancel_children(self, cancel: CancelRequested) -> None:
        """Pass a cancel on to the run's children still running."""
        run = self.state.run
        if run is None or cancel.mode != "after_turn":
            return  # an immediate cancel reaches them through the cancelled tool round
        for child_id in run.children:
            if child_id in self.state.child_status:
                continue
            with contextlib.suppress(ActorNotFoundError):
                self.context.runtime.lookup(child_id).tell_nowait(
                    Cancel(reason=cancel.reason, mode="after_turn", by=f"session:{self.id}")
                )

    def _observation(self, event: object) -> Observation | None:
        session_id = self._session_id
        if isinstance(event, RunStarted):
            return RunBegan(session_id=session_id, run_id=event.run_id, input=event.input)
        if isinstance(event, AssistantRecorded):
            run = self.state.run
            self._config.bus.publish(
                LLMCallFinished(
                    session_id=session_id,
                    run_id=event.run_id,
                    round=event.round,
                    model=event.model,
                    finish_reason=event.finish_reason,
                    usage=event.usage,
                    tool_calls=len(event.message.tool_calls),
                )
            )
            return UsageUpdated(
                session_id=session_id,
                run_id=event.run_id,
                run_usage=run.usage if run is not None else event.usage,
                session_usage=self.state.usage,
            )
        if isinstance(event, ToolStarted):
            return ToolCallBegan(
                session_id=session_id, run_id=event.run_id, call_id=event.call_id, name=event.name
            )
        if isinstance(event, ToolFinished):
            return ToolCallFinished(
                session_id=session_id, run_id=event.run_id, outcome=event.outcome
            )
        if isinstance(event, RunFinished):
            return RunEnded(result=self.state.results[event.run_id])
        return None


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


def _price_for(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of ``model``, or of the longest name it starts with (dated variants)."""
    price = prices.get(model)
    if price is not None:
        return price
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]  # a hook's error raised inside the tool round's nursery
    code = error.code if isinstance(error, PowertrioError) else type(error).__name__
    return f"{code}: {error}"


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
