"""The session actor: the LLM tool loop as an event-sourced actor (DESIGN.md §4)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import attrs
import orjson
import trio

from protocols import (
    AssistantMessage,
    Cancel,
    FollowUp,
    HumanReply,
    LLMRequest,
    LLMResponse,
    Message,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    Usage,
    aborted_outcome,
    denied_outcome,
    idempotency_key,
    interrupted_outcome,
)
from protocols.errors import (
    ActorExistsError,
    ActorNotFoundError,
    HookVetoError,
    OutputInvalidError,
    ToolError,
    ToolNotFoundError,
)
from runtime import (
    Decision,
    EventSourcedActor,
    Reply,
    StepFailed,
    TimerFired,
    timer_decision,
)

from ._agents import SPAWN_AGENT, AgentSpec, child_tools
from ._board_events import BoardChanged
from ._budget import Budget, cost_of
from ._observe import (
    DeltaReceived,
    HookContext,
    LLMCallFinished,
    Observation,
    RoundBegan,
    RunBegan,
    RunEnded,
    ToolCallBegan,
    ToolCallFinished,
    ToolCallNext,
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
    SessionCreated,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
)
from ._tool_runner import run_tool_calls
from ._tools import ToolRegistry

if TYPE_CHECKING:
    from ._session_handle import Session
    pass


from ._session_steps import (
    _CRASHED,
    _DECIDED_BETWEEN_CALLS,
    _BadReply,
    _board_follow_up,
    _Busy,
    _CallLLM,
    _cancelled,
    _child_outcome,
    _ChildDone,
    _Config,
    _Deliver,
    _describe,
    _describe_step,
    _finish,
    _GetState,
    _LLMAnswered,
    _NoRequest,
    _OutOfTime,
    _parse_output,
    _PythonSpawn,
    _question,
    _RunTools,
    _Send,
    _Stamped,
    _ToolsDone,
    _WaitRun,
    ask_human,
    child_config,
)


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
            return self._with_wake_up(state, message, Decision.from_outcome(timers))
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

    def _inbox_run(
        self, state: SessionState, run_id: str, at: float, trigger: str = "follow_up"
    ) -> RunStarted:
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
            trigger=trigger,
        )

    def _with_wake_up(self, state: SessionState, message: object, decision: Decision) -> Decision:
        """A recorded firing on an idle session also starts a run to read it."""
        if not (isinstance(message, TimerFired) and decision.events):
            return decision
        if state.run is not None or state.queued:
            return decision  # injected at the active run's next round boundary
        run_id = f"tm-{message.timer_id}@{message.due_at!r}"
        started = self._inbox_run(state, run_id, message.fired_at, trigger="timer")
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
        return cost_of(run.usage_by_model, self._config.prices)

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
        from ._session_handle import Session  # noqa: PLC0415  # that module imports this one

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
        delivery = ""
        if isinstance(message, BoardChanged):
            message = _board_follow_up(message)
        elif isinstance(message, _Deliver):
            delivery = message.token
            message = message.follow_up
        if isinstance(message, FollowUp | Cancel):
            partial = "".join(self._partial) if self._partial else ""
            now = self.context.runtime.clock.now()
            message = _Stamped(message, now, partial, delivery)
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

