"""The events of a session's stream, its folded state, and what a run returns."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Literal, final

import attrs
from typing_extensions import TypeVar

from protocols import (
    AssistantMessage,
    CancelMode,
    CrashPolicy,
    FollowUp,
    JsonValue,
    Message,
    OutputType,
    ResponseFormat,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import event_type
from protocols.lowlevel import denied_outcome
from runtime.lowlevel import TimerBook, is_timer_event
from runtime.timers import TimerFired

from ._agents import Lifecycle
from ._budget import Budget
from ._context import ContextCompacted
from ._errors import OutputTypeError
from ._persistent import GrowMap, grow_map
from ._replace import maker, replacer
from ._request_header import RequestHeader
from ._transcript import ValidTranscript

RunStatus = Literal[
    "completed", "hit_round_limit", "budget_exceeded", "cancelled", "waiting_for_human", "failed"
]
"""How a run ended (``RunResult.status``).

``completed``: the model gave its final answer (check ``RunResult.truncated`` and
``unknown_tool_results`` too); ``hit_round_limit``: it was still calling tools after
``max_rounds`` model calls; ``budget_exceeded``: a token, cost or time budget ran out before
the next model call; ``cancelled``: a cancel ended it (open tool calls were closed as
interrupted); ``waiting_for_human``: it stopped for a question or an approval (answer with
``Session.reply``, ``approve`` or ``deny``); ``failed``: an error ended it
(``RunResult.error_code`` and ``error_message`` say which).
"""


@final
@event_type("session.created")
@attrs.frozen(kw_only=True)
class SessionCreated:
    """The first event of every session stream."""

    session_id: str
    system_prompt: str
    """The default system prompt of every run."""
    max_rounds: int
    """The default round limit of every run."""
    parent_id: str | None = None
    """The parent session of a sub-agent."""
    depth: int = 0
    """0 for a top-level session."""
    forked_from: str | None = None
    """For a fork: the session it was forked from..."""
    forked_at: int | None = None
    """...and the version of that session's stream it starts from."""
    agent: str | None = None
    """The name of the agent it runs (a sub-agent's or a fleet agent's spec), for
    telemetry; ``None`` for a session that was given none."""
    traceparent: str | None = None
    """For a sub-agent: the W3C trace context of the tool call that spawned it, so its
    runs join its parent's trace in any process."""
    provider: str | None = None
    """The provider its model is called through (``openai``, ``anthropic``: the
    transport's name), for telemetry; ``None`` when the model does not say (a test
    double, a model of your own)."""


@final
@event_type("session.run_started")
@attrs.frozen(kw_only=True)
class RunStarted:
    """A send began a run with this user input."""

    run_id: str
    input: str
    max_rounds: int
    """This run's round limit (the session default or the send's override)."""
    tools: tuple[str, ...] | None = None
    """The tool subset for this run; ``None`` means every tool of the session."""
    system_prompt: str | None = None
    """A per-send system prompt override."""
    response_format: ResponseFormat | None = None
    """The JSON Schema the final answer must match; ``None`` for free text."""
    budget: Budget | None = None
    """This run's limits (the session default or the send's override)."""
    started_at: float = 0.0
    """When the send was made (epoch seconds on the runtime's clock): wall-time budgets.
    0 when unknown (a run the session started for follow-ups left in its inbox), which
    leaves the run without a wall-time limit."""
    trigger: str = "send"
    """``send``, or ``follow_up`` for a run started by a follow-up to an idle session."""


@final
@event_type("session.input_queued")
@attrs.frozen(kw_only=True)
class InputQueued:
    """A send arrived while a run was active; it starts its own run afterwards."""

    run: RunStarted


@final
@event_type("session.assistant")
@attrs.frozen(kw_only=True)
class AssistantRecorded:
    """The model answered; this is the only copy of the answer (never requested again)."""

    run_id: str
    round: int
    message: AssistantMessage
    usage: Usage
    model: str
    finish_reason: str
    request_fingerprint: str
    """Fingerprint of the request that produced it (replay checks it)."""
    request_header: RequestHeader | None = None
    """How the request was shaped, for replay's readable diff."""
    first_token_s: float | None = None
    """Seconds from the request going out to the first streamed delta, on the runtime's
    clock; ``None`` when the answer was not streamed (or was logged before this field).
    A measurement: replay never compares it."""


@final
@event_type("session.tool_started")
@attrs.frozen(kw_only=True)
class ToolStarted:
    """A tool call is about to run; with ``ToolFinished`` it forms the tool ledger."""

    run_id: str
    call_id: str
    name: str
    arguments: str
    idempotency_key: str
    crash_policy: CrashPolicy


@final
@event_type("session.tool_finished")
@attrs.frozen(kw_only=True)
class ToolFinished:
    """A tool call ended: success, error, timeout, interrupted or aborted."""

    run_id: str
    outcome: ToolOutcome


@final
@event_type("session.follow_up_received")
@attrs.frozen(kw_only=True)
class FollowUpReceived:
    """A follow-up arrived; it waits in the inbox for the next round boundary."""

    follow_up: FollowUp
    delivery: str = ""
    """The token of the ``Session.follow_up`` call that delivered it ("" from elsewhere),
    so a call retried after a crash learns that it was the one that delivered it."""


@final
@event_type("session.follow_ups_injected")
@attrs.frozen(kw_only=True)
class FollowUpsInjected:
    """The inbox's follow-ups became user turns of the run, one turn per run of a kind."""

    run_id: str
    ids: tuple[str, ...]


@final
@event_type("session.cancel_requested")
@attrs.frozen(kw_only=True)
class CancelRequested:
    """Someone cancelled the run: who, why, when and how."""

    run_id: str
    mode: CancelMode
    reason: str
    by: str
    at: float
    """Epoch seconds on the runtime's clock."""


HumanRequestKind = Literal["question", "approval", "crash"]
"""``question``: the model asked (``ask_human``); ``approval``: a tool that needs one;
``crash``: a tool with the ``ask`` crash policy was interrupted by a crash: run it again?"""


@final
@event_type("session.human_requested")
@attrs.frozen(kw_only=True)
class HumanRequested:
    """The run waits for a human; the request id is the tool call's id."""

    run_id: str
    request_id: str
    kind: HumanRequestKind
    prompt: str
    """What the human is asked."""
    call: ToolCall
    """The tool call the answer settles."""


@final
@event_type("session.human_answered")
@attrs.frozen(kw_only=True)
class HumanAnswered:
    """A human answered a request of the run."""

    run_id: str
    request_id: str
    answer: str
    approve: bool | None
    by: str


@final
@event_type("session.child_spawned")
@attrs.frozen(kw_only=True)
class ChildSpawned:
    """A sub-agent was started on a task; its own stream is ``session/<child_id>``."""

    run_id: str
    """The parent's run ("" for a child spawned from Python between runs)."""
    call_id: str
    """The ``spawn_agent`` call it answers (or the Python spawn's id)."""
    child_id: str
    agent: str
    """The spec's name."""
    task: str
    lifecycle: Lifecycle
    budget: Budget | None = None
    """The child's limits: its spec's, capped by what remained of the parent's run budget."""


@final
@event_type("session.child_finished")
@attrs.frozen(kw_only=True)
class ChildFinished:
    """A sub-agent's run ended; its usage is added to the parent's run and session."""

    run_id: str
    child_id: str
    status: RunStatus
    usage: Usage


@final
@event_type("session.output_rejected")
@attrs.frozen(kw_only=True)
class OutputRejected:
    """The final answer did not match the response format; the model gets one repair round."""

    run_id: str
    problems: tuple[str, ...]


def repair_prompt(problems: tuple[str, ...]) -> str:
    """What the model is told after :class:`OutputRejected`."""
    listed = "\n".join(f"- {p}" for p in problems)
    return (
        "Your answer does not match the required JSON schema:\n"
        f"{listed}\n"
        "Reply again with only the corrected JSON value, no other text."
    )


@final
@event_type("session.run_finished")
@attrs.frozen(kw_only=True)
class RunFinished:
    """A run ended; ``usage`` is the run's total."""

    run_id: str
    status: RunStatus
    text: str
    rounds: int
    usage: Usage
    error: str | None = None
    """For ``failed``: the error code and message; for ``budget_exceeded``: which limit."""
    output: JsonValue | None = None
    """The parsed answer, when the run had a response format and completed."""
    error_code: str | None = None
    """For ``failed``: the stable code of the error (its class name for an exception that
    is not powertrio's, e.g. ``IndexError``). ``None`` in logs written before it existed."""


OutputT = TypeVar("OutputT", default=Any)
"""The type of ``RunResult.output``: the class given as ``response_format``, else ``Any``."""


@final
@attrs.frozen(kw_only=True)
class RunResult(Generic[OutputT]):
    """What ``Session.send`` returns."""

    session_id: str
    run_id: str
    status: RunStatus
    text: str
    """The final assistant text (the last one, for a run that did not complete)."""
    rounds: int
    """LLM calls made by this run."""
    usage: Usage
    """Tokens used by this run."""
    error: str | None = None
    """For ``failed``: the typed error's code and message (for an answer that did not
    match the response format, ``text`` keeps the raw answer); for ``budget_exceeded``:
    which limit was reached."""
    output: OutputT | None = None
    """The structured answer when the run had a response format and completed: an
    instance of the class given as ``response_format`` (built from ``raw_output`` when
    the result is read), or the parsed JSON for a :class:`~protocols.ResponseFormat`."""
    human_requests: tuple[HumanRequested, ...] = ()
    """For ``waiting_for_human``: what the run waits for; answer each with
    ``Session.reply`` (or ``approve``/``deny``), in any order."""
    truncated: bool = False
    """The model's last answer was cut off by the token limit (finish reason ``length``):
    a ``completed`` run may then hold half an answer. Raise ``max_tokens``."""
    unknown_tool_results: tuple[str, ...] = ()
    """Ids of tool calls whose result is unknown: they were running when the process
    stopped and crash recovery closed them as ``aborted`` (their side effects may or may
    not have happened). The run may still complete; check these calls by hand."""
    error_code: str | None = None
    """For ``failed``: the stable code of what failed (``llm.server``,
    ``session.output_invalid``..., or the class name of an exception raised by a model
    function, a tool runner or a hook, e.g. ``IndexError``); ``None`` otherwise."""
    error_message: str | None = None
    """For ``failed``: the error's message (``error`` is ``"code: message"``); ``None``
    otherwise."""
    raw_output: JsonValue | None = None
    """The structured answer as the log records it (JSON), whatever class was asked for."""


def typed_result(result: RunResult[Any], output_type: OutputType[Any] | None) -> RunResult[Any]:
    """``result`` with its recorded JSON output structured into ``output_type``'s class.

    The log holds JSON only; this runs wherever a result is handed to a caller, so a
    replay or a restart that folds the same JSON gives an equal instance.

    Raises:
        OutputTypeError: the recorded JSON does not fit the class (it changed since).
    """
    raw = result.raw_output if result.raw_output is not None else result.output
    if output_type is None or raw is None or result.status != "completed":
        return result
    try:
        instance = output_type.structure(raw)
    except ValueError as exc:
        raise OutputTypeError(
            result.run_id, output_type.cls.__qualname__, tuple(str(exc).split("; "))
        ) from exc
    return attrs.evolve(result, output=instance)


@final
@attrs.frozen(kw_only=True)
class ActiveRun:
    """The run in progress, folded from its events."""

    started: RunStarted
    rounds: int = 0
    usage: Usage = attrs.field(factory=Usage)
    text: str = ""
    pending_calls: tuple[ToolCall, ...] = ()
    """Tool calls of the last answer not yet recorded as started."""
    open_calls: tuple[ToolStarted, ...] = ()
    """Tool calls started and not finished."""
    usage_by_model: Mapping[str, Usage] = attrs.field(factory=dict)
    """This run's usage per model (for cost budgets)."""
    repaired: bool = False
    """The answer was rejected once and the repair round has been asked for."""
    round_limit: int = 0
    """LLM calls allowed: ``max_rounds``, raised by one for a repair or for follow-ups
    injected when the limit was already reached."""
    cancel: CancelRequested | None = None
    """An ``after_turn`` cancel waiting for the round to end."""
    human: tuple[HumanRequested, ...] = ()
    """Requests waiting for a human's answer."""
    approved: tuple[str, ...] = ()
    """Ids of tool calls a human approved (they may run)."""
    children: tuple[str, ...] = ()
    """Ids of the sub-agents this run spawned."""
    finish_reason: str = ""
    """Why the model's last answer ended (``length``: cut off by the token limit)."""
    unknown_results: tuple[str, ...] = ()
    """Ids of tool calls closed as ``aborted`` by crash recovery (their result unknown)."""

    @property
    def parked(self) -> bool:
        """Nothing can happen until a human answers."""
        return bool(self.human) and not self.pending_calls and not self.open_calls


@final
@attrs.frozen(kw_only=True)
class SessionState:
    """The fold of a session stream."""

    session_id: str = ""
    system_prompt: str = ""
    max_rounds: int = 10
    parent_id: str | None = None
    """The session that spawned this one, for a sub-agent."""
    depth: int = 0
    """0 for a top-level session, 1 for its children..."""
    history: ValidTranscript = attrs.field(factory=ValidTranscript)
    """The conversation as the model sees it, kept provider-valid as it grows."""
    run: ActiveRun | None = None
    queued: tuple[RunStarted, ...] = ()
    """Runs sent while another was active, in the order they will start."""
    inbox: tuple[FollowUp, ...] = ()
    """Follow-ups received and not yet injected."""
    seen_follow_ups: Mapping[str, str] = attrs.field(factory=GrowMap, converter=grow_map)
    """Every follow-up id ever received (a repeat is a no-op), with its delivery token."""
    children: tuple[ChildSpawned, ...] = ()
    """Every sub-agent this session spawned, in order."""
    child_status: Mapping[str, RunStatus] = attrs.field(factory=GrowMap, converter=grow_map)
    """How each finished sub-agent's run ended, by child id."""
    timers: TimerBook = attrs.field(factory=TimerBook)
    """The session's durable timers (see ``runtime.timers``)."""
    results: Mapping[str, RunResult] = attrs.field(factory=GrowMap, converter=grow_map)
    usage: Usage = attrs.field(factory=Usage)
    """Tokens used by the whole session."""
    compacted: ContextCompacted | None = None
    """The latest compaction of the model's view (``None``: it sees the whole transcript)."""
    prompt_report: tuple[int, int, int] | None = None
    """The latest input tokens a provider reported, the number of transcript messages of
    that request and where its view started (``compacted.upto``): calibrates the estimate
    of the next request (``ContextPolicy``)."""

    @property
    def transcript(self) -> tuple[Message, ...]:
        """User, assistant and tool messages, in order (the system prompt is separate)."""
        return self.history.messages

    @property
    def waiting_for(self) -> tuple[HumanRequested, ...]:
        """What the session waits for: the open human requests of its active run, if that
        run cannot go on without an answer. Input sent meanwhile waits behind it, in
        :attr:`queued` (a ``send`` of it waits too: answer these first)."""
        run = self.run
        return run.human if run is not None and run.parked else ()


_NO_USAGE = Usage()
"""The usage of a model not called yet in a run (one shared value: Usage is frozen)."""

_run_result = maker(RunResult)
"""``RunResult(...)`` less its frozen guard per field: a run's end makes one."""

_evolve_state = replacer(SessionState)
"""``attrs.evolve`` for a state: the fold makes one per event."""
_evolve_run = replacer(ActiveRun)
"""``attrs.evolve`` for the active run."""


def timer_follow_up(fired: TimerFired, note: str) -> FollowUp:
    """A firing as the model reads it: a follow-up of kind ``timer``, once per due time."""
    when = datetime.fromtimestamp(fired.due_at, UTC).isoformat(timespec="seconds")
    return FollowUp(
        id=f"timer:{fired.timer_id}@{fired.due_at!r}",
        content=f"[timer {fired.timer_id}, due {when}] {note or 'wake up'}",
        kind="timer",
    )


def evolve(state: SessionState, event: object) -> SessionState:
    """Apply one session event (pure and total over stored events)."""
    if is_timer_event(event):
        return _timer(state, event)
    if isinstance(event, AssistantRecorded):
        return _assistant(state, event)
    if isinstance(event, ToolStarted):
        run = state.run
        assert run is not None
        return _evolve_state(
            state,
            run=_evolve_run(
                run,
                pending_calls=tuple(c for c in run.pending_calls if c.id != event.call_id),
                open_calls=(*run.open_calls, event),
            ),
        )
    if isinstance(event, ToolFinished):
        run = state.run
        assert run is not None
        outcome = event.outcome
        open_calls = tuple(c for c in run.open_calls if c.call_id != outcome.call_id)
        reply = ToolResultMessage(
            tool_call_id=outcome.call_id, content=outcome.content, is_error=outcome.is_error
        )
        unknown = run.unknown_results
        if outcome.status == "aborted":
            unknown = (*unknown, outcome.call_id)
        return _evolve_state(
            state,
            history=state.history.append(reply),
            run=_evolve_run(run, open_calls=open_calls, unknown_results=unknown),
        )
    if isinstance(event, RunStarted):
        history = state.history
        if event.input:
            history = history.append(UserMessage(event.input))
        return _evolve_state(
            state,
            history=history,
            run=ActiveRun(started=event, round_limit=event.max_rounds),
            queued=tuple(q for q in state.queued if q.run_id != event.run_id),
        )
    if isinstance(event, FollowUpReceived):
        return _evolve_state(
            state,
            inbox=(*state.inbox, event.follow_up),
            seen_follow_ups=grow_map(state.seen_follow_ups).set(event.follow_up.id, event.delivery),
        )
    if isinstance(event, FollowUpsInjected):
        return _inject(state, event)
    if isinstance(event, CancelRequested):
        run = state.run
        assert run is not None
        return _evolve_state(state, run=_evolve_run(run, cancel=event))
    if isinstance(event, HumanRequested):
        run = state.run
        assert run is not None
        call_id = event.call.id
        return _evolve_state(
            state,
            run=_evolve_run(
                run,
                pending_calls=tuple(c for c in run.pending_calls if c.id != call_id),
                open_calls=tuple(c for c in run.open_calls if c.call_id != call_id),
                human=(*run.human, event),
            ),
        )
    if isinstance(event, HumanAnswered):
        return _answered(state, event)
    if isinstance(event, OutputRejected):
        run = state.run
        assert run is not None
        return _evolve_state(
            state,
            history=state.history.append(UserMessage(repair_prompt(event.problems))),
            run=_evolve_run(run, repaired=True, round_limit=max(run.round_limit, run.rounds + 1)),
        )
    if isinstance(event, InputQueued):
        return _evolve_state(state, queued=(*state.queued, event.run))
    if isinstance(event, ContextCompacted):
        return _compacted(state, event)
    if isinstance(event, RunFinished):
        return _finished(state, event)
    if isinstance(event, SessionCreated):
        return _evolve_state(
            state,
            session_id=event.session_id,
            system_prompt=event.system_prompt,
            max_rounds=event.max_rounds,
            parent_id=event.parent_id,
            depth=event.depth,
        )
    if isinstance(event, ChildSpawned):
        run = state.run
        if run is not None and run.started.run_id == event.run_id:
            run = _evolve_run(run, children=(*run.children, event.child_id))
        return _evolve_state(state, run=run, children=(*state.children, event))
    if isinstance(event, ChildFinished):
        run = state.run
        if run is not None and run.started.run_id == event.run_id:
            run = _evolve_run(run, usage=run.usage + event.usage)
        return _evolve_state(
            state,
            run=run,
            usage=state.usage + event.usage,
            child_status=grow_map(state.child_status).set(event.child_id, event.status),
        )
    return state  # events of later schema additions that this code does not fold


def _finished(state: SessionState, event: RunFinished) -> SessionState:
    results = grow_map(state.results).set(event.run_id, run_result(state, event))
    return _evolve_state(state, run=None, results=results)


def run_result(state: SessionState, event: RunFinished) -> RunResult:
    """What a run that ``event`` ends in ``state`` returns (kept in ``state.results``)."""
    run = state.run
    code, message = event.error_code, None
    if event.status == "failed" and event.error is not None:
        if code is None and ": " in event.error:  # a log from before error_code
            code = event.error.split(": ", 1)[0]
        prefix = f"{code}: "
        message = event.error[len(prefix) :] if event.error.startswith(prefix) else event.error
    return _run_result(
        session_id=state.session_id,
        run_id=event.run_id,
        status=event.status,
        text=event.text,
        rounds=event.rounds,
        usage=event.usage,
        error=event.error,
        output=event.output,
        raw_output=event.output,
        truncated=run is not None and run.finish_reason == "length",
        unknown_tool_results=run.unknown_results if run is not None else (),
        error_code=code,
        error_message=message,
    )


def _assistant(state: SessionState, event: AssistantRecorded) -> SessionState:
    run = state.run
    assert run is not None
    calls = event.message.tool_calls
    by_model = dict(run.usage_by_model)
    by_model[event.model] = by_model.get(event.model, _NO_USAGE) + event.usage
    report = state.prompt_report
    if event.usage.prompt_tokens:
        sent = len(state.history) + len(state.history.pending)
        upto = state.compacted.upto if state.compacted is not None else 0
        report = (event.usage.prompt_tokens, sent, upto)
    return _evolve_state(
        state,
        prompt_report=report,
        history=state.history.append(event.message),
        run=_evolve_run(
            run,
            rounds=event.round,
            usage=run.usage + event.usage,
            text=event.message.content or run.text,
            pending_calls=calls,
            usage_by_model=by_model,
            finish_reason=event.finish_reason,
        ),
        usage=state.usage + event.usage,
    )


def _compacted(state: SessionState, event: ContextCompacted) -> SessionState:
    run = state.run
    if run is not None and event.usage.total_tokens:
        by_model = dict(run.usage_by_model)
        by_model[event.model] = by_model.get(event.model, _NO_USAGE) + event.usage
        run = _evolve_run(run, usage=run.usage + event.usage, usage_by_model=by_model)
    return _evolve_state(state, compacted=event, run=run, usage=state.usage + event.usage)


def _timer(state: SessionState, event: object) -> SessionState:
    book = state.timers
    state = _evolve_state(state, timers=book.evolve(event))
    if not isinstance(event, TimerFired):
        return state
    # Recorded once per due time: the firing waits in the inbox like a follow-up.
    timer = book.get(event.timer_id)
    follow_up = timer_follow_up(event, timer.note if timer is not None else "")
    return _evolve_state(
        state,
        inbox=(*state.inbox, follow_up),
        seen_follow_ups=grow_map(state.seen_follow_ups).set(follow_up.id, ""),
    )


def _inject(state: SessionState, event: FollowUpsInjected) -> SessionState:
    run = state.run
    assert run is not None
    ids = set(event.ids)
    taken = [f for f in state.inbox if f.id in ids]
    history = state.history
    turn: list[FollowUp] = []
    for follow_up in taken:  # one user turn per run of consecutive follow-ups of a kind
        if turn and turn[-1].kind != follow_up.kind:
            history = history.append(UserMessage("\n\n".join(f.content for f in turn)))
            turn = []
        turn.append(follow_up)
    if turn:
        history = history.append(UserMessage("\n\n".join(f.content for f in turn)))
    return _evolve_state(
        state,
        history=history,
        inbox=tuple(f for f in state.inbox if f.id not in ids),
        # Input that arrives during the last round earns the model a round to read it.
        run=_evolve_run(run, round_limit=max(run.round_limit, run.rounds + 1)),
    )


def _answered(state: SessionState, event: HumanAnswered) -> SessionState:
    run = state.run
    assert run is not None
    request = next(r for r in run.human if r.request_id == event.request_id)
    human = tuple(r for r in run.human if r.request_id != event.request_id)
    call = request.call
    if request.kind == "question":
        reply = ToolResultMessage(tool_call_id=call.id, content=event.answer)
    elif event.approve:
        return _evolve_state(
            state,
            run=_evolve_run(
                run,
                human=human,
                pending_calls=(*run.pending_calls, call),
                approved=(*run.approved, call.id),
            ),
        )
    else:
        reason = f"a human did not allow it ({event.answer or 'no reason given'})"
        outcome = denied_outcome(call.id, call.name, reason)
        reply = ToolResultMessage(tool_call_id=call.id, content=outcome.content, is_error=True)
    return _evolve_state(
        state, history=state.history.append(reply), run=_evolve_run(run, human=human)
    )
