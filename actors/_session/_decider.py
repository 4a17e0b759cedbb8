"""The session's decider: what a message means and what to do next, as pure functions.

Every function here reads only its arguments (the session's configuration, its folded
state, a message, a step or an event) and returns events or a step: no clock, no I/O, no
actor. Facts only the running actor knows (the time a message arrived, the text streamed
by the LLM call in flight) reach the decider inside the message the shell builds
(:class:`Stamped`). :class:`~actors.SessionActor` is the shell that calls these functions
and runs the effects they ask for; replay calls them too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs
import orjson

from protocols import (
    AssistantMessage,
    Cancel,
    FollowUp,
    HumanReply,
    JsonValue,
    LLMRequest,
    ResponseFormat,
    ToolCall,
    ToolDefinition,
    ToolOutcome,
    Usage,
)
from protocols.errors import PowertrioError
from protocols.jsonschema import validate_json
from protocols.lowlevel import aborted_outcome, interrupted_outcome
from runtime import Decision, StepFailed
from runtime.lowlevel import timer_decision
from runtime.timers import TimerFired

from ._budget import cost_of
from ._calls import begin_calls
from ._compaction import compaction_step, projection, projection_lead, summarised
from ._context import ContextCompacted
from ._errors import OutputInvalidError
from ._events import (
    ActiveRun,
    AssistantRecorded,
    CancelRequested,
    FollowUpReceived,
    FollowUpsInjected,
    HumanAnswered,
    HumanRequested,
    InputQueued,
    OutputRejected,
    RunFinished,
    RunStarted,
    RunStatus,
    SessionCreated,
    SessionState,
    ToolFinished,
    ToolStarted,
)
from ._replace import maker
from ._request_header import RequestFrame, RequestHeader
from ._steps import (
    BadReply,
    Busy,
    CallLLM,
    ChildDone,
    GetState,
    LLMAnswered,
    NoRequest,
    OutOfTime,
    RunTools,
    Send,
    SessionConfig,
    Stamped,
    Summarise,
    Summarised,
    ToolsDone,
    run_tools,
)

_CRASHED = "the process stopped while this tool ran; its result is unknown"

# The hot path's values, made as their classes make them less the frozen guard per field.
_assistant_message = maker(AssistantMessage)
_assistant_recorded = maker(AssistantRecorded)
_call_llm = maker(CallLLM)
_run_finished = maker(RunFinished)
_run_started = maker(RunStarted)
_tool_finished = maker(ToolFinished)

_DECIDED_BETWEEN_CALLS = (
    FollowUpsInjected,
    ToolStarted,
    OutputRejected,
    HumanRequested,
    ContextCompacted,
)
"""Events the session decides only while no model call is in flight."""


# -- recovery ----------------------------------------------------------------------------


def _provider_of(llm: object) -> str | None:
    """The provider a model is called through, as its transport names it."""
    provider = getattr(llm, "provider", None)
    return provider if isinstance(provider, str) and provider else None


def recovered(config: SessionConfig, state: SessionState) -> Decision | None:
    """What to append once the log is folded at start: the first event of a new session,
    or how to close the tool calls a crash left open (each by its crash policy)."""
    if not state.session_id:
        return Decision(
            events=[
                SessionCreated(
                    session_id=config.session_id,
                    system_prompt=config.system_prompt,
                    max_rounds=config.max_rounds,
                    parent_id=config.parent_id,
                    depth=config.depth,
                    agent=config.agent,
                    traceparent=config.traceparent,
                    provider=_provider_of(config.llm),
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


# -- messages ----------------------------------------------------------------------------


def _unencodable(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate, which no UTF-8 encoder (nor orjson) takes."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _replaced(text: str) -> str:
    """``text`` with each lone surrogate turned into U+FFFD (a pair written apart is joined)."""
    if not _unencodable(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _recordable_outcome(outcome: ToolOutcome) -> ToolOutcome:
    """``outcome`` with its text made encodable (a tool may return a lone surrogate)."""
    if _unencodable(outcome.content):
        return attrs.evolve(outcome, content=_replaced(outcome.content))
    return outcome


def _plain(answer: AssistantMessage) -> bool:
    """Whether every text of ``answer`` is ASCII, so none needs a look for lone surrogates:
    nearly every answer, checked with no generator or call per field."""
    if not answer.content.isascii():
        return False
    for call in answer.tool_calls:
        if not (call.arguments.isascii() and call.name.isascii() and call.id.isascii()):
            return False
    for block in answer.thinking:
        if not (block.thinking.isascii() and (block.signature or "").isascii()):
            return False
    return True


def _recordable(answer: AssistantMessage) -> AssistantMessage:
    """``answer`` with no text the log cannot encode.

    The HTTP transports repair a provider's lone surrogates, but any other LLM (a function,
    a user's own class) may hand one over, and an event holding it cannot be written: the
    session would crash and ask the model again, in a loop. Text becomes U+FFFD. A call's
    arguments keep what the model wrote, each lone surrogate escaped as JSON writes it
    (``\\ud800``): the log can hold that, and the tool layer refuses it as invalid arguments
    (``tool.invalid_args``) the model reads, as it does when a provider sends the escape.
    """
    if _plain(answer):
        return answer
    calls = answer.tool_calls
    bad_calls = any(
        _unencodable(c.arguments) or _unencodable(c.name) or _unencodable(c.id) for c in calls
    )
    bad_text = _unencodable(answer.content) or any(
        _unencodable(block.thinking) or _unencodable(block.signature or "")
        for block in answer.thinking
    )
    if not (bad_calls or bad_text):
        return answer
    return AssistantMessage(
        content=_replaced(answer.content),
        tool_calls=tuple(
            ToolCall(
                id=_replaced(c.id),
                name=_replaced(c.name),
                arguments=c.arguments.encode("utf-8", "backslashreplace").decode("utf-8"),
            )
            for c in calls
        ),
        thinking=tuple(
            attrs.evolve(
                block,
                thinking=_replaced(block.thinking),
                signature=None if block.signature is None else _replaced(block.signature),
            )
            for block in answer.thinking
        ),
    )


def handle(config: SessionConfig, state: SessionState, message: object) -> Decision:
    """What ``message`` means in ``state``: the events to append and the reply."""
    # A step's answer first: two of a send's four messages.
    run = state.run
    run_id = run.started.run_id if run is not None else None
    if isinstance(message, LLMAnswered) and message.run_id == run_id:
        assert run is not None
        response = message.response
        answer = _recordable(
            _assistant_message(
                content=response.content,
                tool_calls=response.tool_calls,
                thinking=response.thinking,
            )
        )
        return Decision(
            events=[
                _assistant_recorded(
                    run_id=message.run_id,
                    round=run.rounds + 1,
                    message=answer,
                    usage=response.usage,
                    model=response.model or config.model or "",
                    finish_reason=response.finish_reason,
                    request_fingerprint=message.fingerprint,
                    request_header=message.header,
                    first_token_s=message.first_token_s,
                )
            ]
        )
    if isinstance(message, ToolsDone) and message.run_id == run_id:
        assert run is not None
        open_ids = {call.call_id for call in run.open_calls}
        events: list[object] = [
            _tool_finished(run_id=message.run_id, outcome=_recordable_outcome(outcome))
            for outcome in message.outcomes
            if outcome.call_id in open_ids
        ]
        if message.children:
            events.extend(c for c in message.children if c.child_id in run.children)
        return Decision(events=events)
    if isinstance(message, Send):
        return _handle_send(config, state, message)
    if isinstance(message, Stamped):
        if isinstance(message.message, FollowUp):
            return _handle_follow_up(config, state, message.message, message)
        return _handle_cancel(config, state, message.message, message)
    if isinstance(message, HumanReply):
        return _handle_reply(state, message)
    timers = timer_decision(state.timers, message)
    if timers is not None:
        return _with_wake_up(config, state, message, Decision.from_outcome(timers))
    if isinstance(message, ChildDone):
        done = message.finished.child_id in state.child_status
        return Decision(events=[] if done else [message.finished])
    if isinstance(message, Summarised) and message.run_id == run_id:
        compacted = summarised(config, state, message)
        return Decision(events=[compacted] if compacted is not None else [])
    if isinstance(message, OutOfTime) and message.run_id == run_id:
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
        failed = _failed(run, message.error)
        return Decision(events=[*closing, failed])
    if isinstance(message, GetState):
        return Decision(reply=state)
    return Decision()  # late news about a run that already ended


def _handle_send(config: SessionConfig, state: SessionState, send: Send) -> Decision:
    known = (
        send.run_id in state.results
        or (state.run is not None and state.run.started.run_id == send.run_id)
        or any(q.run_id == send.run_id for q in state.queued)
    )
    if known:  # a retried send after a crash: already recorded
        return Decision(reply=send.run_id)
    started = _run_started(
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
        return Decision(reply=Busy(active))
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
    config: SessionConfig, state: SessionState, follow_up: FollowUp, stamped: Stamped
) -> Decision:
    delivery = stamped.delivery
    seen = state.seen_follow_ups.get(follow_up.id)
    if seen is not None:  # once per id, forever; True again for a retried delivery
        return Decision(reply=bool(delivery) and seen == delivery)
    events: list[object] = [FollowUpReceived(follow_up=follow_up, delivery=delivery)]
    if state.run is None and not state.queued:
        events.append(_inbox_run(config, state, f"fu-{follow_up.id}", stamped.at))
    return Decision(events=events, reply=True)


def _inbox_run(
    config: SessionConfig,
    state: SessionState,
    run_id: str,
    at: float,
    trigger: str = "follow_up",
) -> RunStarted:
    """A run started to read the inbox (its input is the follow-ups it injects)."""
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


def _with_wake_up(
    config: SessionConfig, state: SessionState, message: object, decision: Decision
) -> Decision:
    """A recorded firing on an idle session also starts a run to read it."""
    if not (isinstance(message, TimerFired) and decision.events):
        return decision
    if state.run is not None or state.queued:
        return decision  # injected at the active run's next round boundary
    run_id = f"tm-{message.timer_id}@{message.due_at!r}"
    started = _inbox_run(config, state, run_id, message.fired_at, trigger="timer")
    return attrs.evolve(decision, events=(*decision.events, started))


def _handle_cancel(
    config: SessionConfig, state: SessionState, cancel: Cancel, stamped: Stamped
) -> Decision:
    run = state.run
    if run is None:
        return Decision(reply=False)
    run_id = run.started.run_id
    requested = CancelRequested(
        run_id=run_id, mode=cancel.mode, reason=cancel.reason, by=cancel.by, at=stamped.at
    )
    if cancel.mode == "after_turn":
        return Decision(events=[] if run.cancel else [requested], reply=True)
    events: list[object] = [requested]
    if stamped.partial:
        events.append(
            AssistantRecorded(
                run_id=run_id,
                round=run.rounds + 1,
                message=AssistantMessage(content=_replaced(stamped.partial)),
                usage=Usage(),
                model=config.model or "",
                finish_reason="interrupted",
                request_fingerprint=stamped.fingerprint,
            )
        )
    # A running child is cancelled too and its run's end recorded (ChildFinished, its usage
    # rolled up) before this run ends: its spawn call stays open until then.
    children = _running_children(state, run)
    events.extend(
        ToolFinished(run_id=run_id, outcome=interrupted_outcome(call.call_id, call.name))
        for call in run.open_calls
        if call.call_id not in children
    )
    if not children:
        events.append(_cancelled(run, requested))
    return Decision(events=events, reply=True, cancel_step=True)


def _running_children(state: SessionState, run: ActiveRun) -> dict[str, str]:
    """The open spawn calls of ``run`` whose child has not finished: call id -> child id."""
    open_ids = {call.call_id for call in run.open_calls}
    return {
        c.call_id: c.child_id
        for c in state.children
        if c.call_id in open_ids
        and c.child_id in run.children
        and c.child_id not in state.child_status
    }


def _handle_reply(state: SessionState, reply: HumanReply) -> Decision:
    run = state.run
    open_requests = run.human if run is not None else ()
    request = next((r for r in open_requests if r.request_id == reply.request_id), None)
    if run is None or request is None:
        return Decision(
            reply=NoRequest(reply.request_id, tuple(r.request_id for r in open_requests))
        )
    if request.kind != "question" and reply.approve is None:
        problem = (
            f"request {reply.request_id!r} asks for an approval: answer it with approve() or deny()"
        )
        return Decision(reply=BadReply(problem))
    answered = HumanAnswered(
        run_id=run.started.run_id,
        request_id=reply.request_id,
        answer=reply.answer,
        approve=reply.approve,
        by=reply.by,
    )
    return Decision(events=[answered], reply=run.started.run_id)


# -- the next step -----------------------------------------------------------------------


def next_step(
    config: SessionConfig, state: SessionState, frames: list[RequestFrame] | None = None
) -> object | None:
    """The effect to run next (:class:`CallLLM`, :class:`RunTools`), events to append at
    once (a :class:`~runtime.Decision`), or ``None`` to wait for a message.

    ``frames``: where to keep the frame of the run's model calls between steps (the
    running actor's own list); the step is the same with or without it."""
    run = state.run
    if run is None:
        if state.queued:
            return Decision(events=[state.queued[0]])
        if state.inbox:  # left by a run that ended before its next round boundary
            first = state.inbox[0]
            return Decision(events=[_inbox_run(config, state, f"fu-{first.id}", 0.0)])
        return None
    run_id = run.started.run_id
    stopping = run.cancel is not None and run.cancel.mode == "immediate"
    if run.pending_calls and not stopping:
        return Decision(events=begin_calls(config, state, run))
    if run.open_calls:
        return RunTools(run_id, run.rounds, run.open_calls)
    if run.cancel is not None:
        return Decision(events=[_cancelled(run, run.cancel)])
    if run.human and run.parked:  # human first: a property costs a call per step
        return None  # until a human answers
    if state.inbox:
        return Decision(
            events=[FollowUpsInjected(run_id=run_id, ids=tuple(f.id for f in state.inbox))]
        )
    last = state.history.last
    if last is None:
        return Decision(events=[_failed(run, ValueError("the run has no input"))])
    if run.rounds and isinstance(last, AssistantMessage) and not last.tool_calls:
        return Decision(events=[_answered(run, last.content)])
    if run.rounds >= run.round_limit:
        return Decision(events=[_finish(run, "hit_round_limit")])
    budget = run.started.budget
    if budget is not None:
        reason = budget.exceeded(run.usage, cost_of(run.usage_by_model, config.prices))
        if reason is not None:
            return Decision(events=[_finish(run, "budget_exceeded", error=reason)])
    if config.context is not None:  # no policy, no compaction: nothing to work out
        compaction = compaction_step(config, state, run, _system(config, run), _tools(config, run))
        if compaction is not None:
            return compaction
    request, fingerprint, header = _request(config, state, run, frames)
    deadline = None
    if budget is not None and budget.max_seconds is not None and run.started.started_at:
        deadline = run.started.started_at + budget.max_seconds
    return _call_llm(run_id, run.rounds + 1, request, fingerprint, header, deadline)


def _answered(run: ActiveRun, text: str) -> RunFinished | OutputRejected:
    response_format = run.started.response_format
    if response_format is None:
        return _finish(run, "completed")
    output, problems = _parse_output(response_format, text)
    if not problems:
        return _finish(run, "completed", output=output)
    if not run.repaired:
        return OutputRejected(run_id=run.started.run_id, problems=problems)
    return _failed(run, OutputInvalidError(problems))


def _system(config: SessionConfig, run: ActiveRun) -> str:
    system = run.started.system_prompt
    if system is None:
        # The code's prompt, not the one recorded at creation: a changed prompt is a
        # change of behaviour, which replay must be able to see.
        system = config.system_prompt
    return system


def _tools(config: SessionConfig, run: ActiveRun) -> tuple[ToolDefinition, ...]:
    return tuple(run_tools(config, run).definitions())


def _request(
    config: SessionConfig,
    state: SessionState,
    run: ActiveRun,
    frames: list[RequestFrame] | None,
) -> tuple[LLMRequest, str, RequestHeader]:
    tools = run_tools(config, run).definitions()
    started, compacted = run.started, state.compacted
    # What a request holds besides the conversation comes from the configuration (the
    # same for every call of the actor that keeps ``frames``) and from these, each
    # compared by identity: the usual sends of a session (no prompt or format of their
    # own) share one frame.
    system, response_format = started.system_prompt, started.response_format
    frame = frames[0] if frames else None
    if frame is None or not (
        frame.key[0] is system
        and frame.key[1] is response_format
        and frame.key[2] is tools
        and frame.key[3] is compacted
    ):
        frame = RequestFrame(
            (system, response_format, tools, compacted),
            LLMRequest(
                messages=projection_lead(_system(config, run), compacted),
                tools=tools,
                model=config.model,
                response_format=response_format,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
            ),
        )
        if frames is not None:
            frames[:] = (frame,)
    # The projection: the whole transcript, or what the latest compaction left of it.
    history, start, digest = projection(state)
    return frame.request(history.view(start, frame.lead), len(history) - start, digest)


# -- pipelining (EventSourcedActor.starts_before_commit) --------------------------------


def starts_before_commit(step: object, events: Sequence[object]) -> bool:
    """Whether ``step`` may go out while ``events``, the append that asks for it, commit.

    A model call (or a summary) changes nothing outside the session until its answer is
    recorded, so it may, unless ``events`` record a tool's result: the tool has acted on
    the world, and that append is the only place its result is kept. A crash before the
    commit would leave the next incarnation a call it must close as unknown
    (``RunResult.unknown_tool_results``), though the request already read its result.
    Whatever else a request reads is durable already, or is still held by whoever gave
    it and has not been answered yet, who gives it again (a send's input, a human's
    reply); a lost follow-up injection is decided again from the recorded follow-ups.
    """
    if type(step) is not CallLLM and type(step) is not Summarise:
        return False
    return ToolFinished not in map(type, events)  # (in C: no generator made per append)


# -- replay (runtime.replay) -------------------------------------------------------------


def answers_effect(event: object) -> bool:
    """An answer of the model (or of the summariser) is what replay checks the code against."""
    if isinstance(event, ContextCompacted):
        return event.method == "summary"
    return isinstance(event, AssistantRecorded)


def replay_check(step: object | None, event: object) -> str | None:
    """``None`` if ``step`` asks for the request whose answer ``event`` records, else how
    the request differs."""
    if isinstance(event, ContextCompacted):
        return _summary_check(step, event)
    assert isinstance(event, AssistantRecorded)
    if not isinstance(step, CallLLM):
        return (
            f"the log has an answer of the model here, but the code asks for {_describe_step(step)}"
        )
    if step.fingerprint == event.request_fingerprint:
        return None
    recorded = event.request_header
    if recorded is None:
        return "the request differs (the log has no request header to show how)"
    lines = recorded.differences(step.header)
    return "\n".join(lines) or "the request differs in a parameter the header omits"


def _summary_check(step: object | None, event: ContextCompacted) -> str | None:
    if not isinstance(step, Summarise):
        return (
            "the log has a summary of the context here (a compaction), but the code asks "
            f"for {_describe_step(step)} (is the session's context policy the same?)"
        )
    if step.upto != event.upto:
        return (
            f"the log's compaction summarised messages [0, {event.upto}), the code would "
            f"summarise [0, {step.upto}) (a changed context policy or token count)"
        )
    if step.fingerprint != event.request_fingerprint:
        return "the summariser's request differs (its instructions, model or input changed)"
    return None


def step_settled(step: object, state: SessionState, event: object) -> bool:
    """Whether the effect ``step`` is over once ``event`` is folded into ``state``."""
    run = state.run
    if isinstance(step, Summarise):
        if run is None or run.started.run_id != step.run_id:
            return True
        compacted = state.compacted
        return (compacted is not None and compacted.upto >= step.upto) or isinstance(
            event, (*_DECIDED_BETWEEN_CALLS, AssistantRecorded)
        )
    if run is None or not isinstance(step, CallLLM | RunTools):
        return True
    if isinstance(step, CallLLM) and isinstance(event, _DECIDED_BETWEEN_CALLS):
        return True  # decided by a restarted actor: the call in flight was abandoned
    if run.started.run_id != step.run_id:
        return True
    if isinstance(step, CallLLM):
        return run.rounds >= step.round
    return not run.open_calls


# -- helpers -----------------------------------------------------------------------------


def _finish(
    run: ActiveRun,
    status: RunStatus,
    *,
    error: str | None = None,
    output: JsonValue = None,
    error_code: str | None = None,
) -> RunFinished:
    return _run_finished(
        run_id=run.started.run_id,
        status=status,
        text=run.text,
        rounds=run.rounds,
        usage=run.usage,
        error=error,
        output=output,
        error_code=error_code,
    )


def _failed(run: ActiveRun, error: BaseException) -> RunFinished:
    code, message = _error_parts(error)
    return _finish(run, "failed", error=f"{code}: {message}", error_code=code)


def _cancelled(run: ActiveRun, cancel: CancelRequested) -> RunFinished:
    why = f": {cancel.reason}" if cancel.reason else ""
    return _finish(run, "cancelled", error=f"cancelled by {cancel.by}{why}")


def _describe_step(step: object | None) -> str:
    if step is None:
        return "nothing (it would wait for a message)"
    if isinstance(step, RunTools):
        return "tool calls " + ", ".join(c.name for c in step.calls)
    if isinstance(step, Summarise):
        return f"a compaction of the context (a summary of messages [0, {step.upto}))"
    return type(step).__name__.lstrip("_")


def _parse_output(response_format: ResponseFormat, text: str) -> tuple[JsonValue, tuple[str, ...]]:
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


def _error_parts(error: BaseException) -> tuple[str, str]:
    """The stable code of ``error`` (its class name for a foreign one) and its message."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]  # a hook's error raised inside the tool round's nursery
    code = error.code if isinstance(error, PowertrioError) else type(error).__name__
    return code, str(error)
