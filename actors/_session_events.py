"""The events of a session's stream, its folded state, and what a run returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, final

import attrs

from protocols import (
    AssistantMessage,
    CrashPolicy,
    JsonValue,
    Message,
    ResponseFormat,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    Usage,
    UserMessage,
    event_type,
)

from ._budget import Budget
from ._transcript import ValidTranscript

RunStatus = Literal[
    "completed", "hit_round_limit", "budget_exceeded", "cancelled", "waiting_for_human", "failed"
]
"""How a run ended."""


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
    """When the send was made (epoch seconds on the runtime's clock): wall-time budgets."""


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


@final
@attrs.frozen(kw_only=True)
class RunResult:
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
    output: JsonValue | None = None
    """The parsed structured answer when the send asked for a response format."""


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
    awaiting_tools: bool = False
    """The last answer asked for tools whose results are not all in."""
    usage_by_model: Mapping[str, Usage] = attrs.field(factory=dict)
    """This run's usage per model (for cost budgets)."""
    repaired: bool = False
    """The answer was rejected once and the repair round has been asked for."""


@final
@attrs.frozen(kw_only=True)
class SessionState:
    """The fold of a session stream."""

    session_id: str = ""
    system_prompt: str = ""
    max_rounds: int = 10
    history: ValidTranscript = attrs.field(factory=ValidTranscript)
    """The conversation as the model sees it, kept provider-valid as it grows."""
    run: ActiveRun | None = None
    queued: tuple[RunStarted, ...] = ()
    results: Mapping[str, RunResult] = attrs.field(factory=dict)
    usage: Usage = attrs.field(factory=Usage)
    """Tokens used by the whole session."""

    @property
    def transcript(self) -> tuple[Message, ...]:
        """User, assistant and tool messages, in order (the system prompt is separate)."""
        return self.history.messages


def evolve(state: SessionState, event: object) -> SessionState:
    """Apply one session event (pure and total over stored events)."""
    if isinstance(event, AssistantRecorded):
        run = state.run
        assert run is not None
        calls = event.message.tool_calls
        by_model = dict(run.usage_by_model)
        by_model[event.model] = by_model.get(event.model, Usage()) + event.usage
        return attrs.evolve(
            state,
            history=state.history.append(event.message),
            run=attrs.evolve(
                run,
                rounds=event.round,
                usage=run.usage + event.usage,
                text=event.message.content or run.text,
                pending_calls=calls,
                awaiting_tools=bool(calls),
                usage_by_model=by_model,
            ),
            usage=state.usage + event.usage,
        )
    if isinstance(event, ToolStarted):
        run = state.run
        assert run is not None
        return attrs.evolve(
            state,
            run=attrs.evolve(
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
        return attrs.evolve(
            state,
            history=state.history.append(reply),
            run=attrs.evolve(
                run,
                open_calls=open_calls,
                awaiting_tools=bool(open_calls or run.pending_calls),
            ),
        )
    if isinstance(event, RunStarted):
        return attrs.evolve(
            state,
            history=state.history.append(UserMessage(event.input)),
            run=ActiveRun(started=event),
            queued=tuple(q for q in state.queued if q.run_id != event.run_id),
        )
    if isinstance(event, OutputRejected):
        run = state.run
        assert run is not None
        return attrs.evolve(
            state,
            history=state.history.append(UserMessage(repair_prompt(event.problems))),
            run=attrs.evolve(run, repaired=True),
        )
    if isinstance(event, InputQueued):
        return attrs.evolve(state, queued=(*state.queued, event.run))
    if isinstance(event, RunFinished):
        result = RunResult(
            session_id=state.session_id,
            run_id=event.run_id,
            status=event.status,
            text=event.text,
            rounds=event.rounds,
            usage=event.usage,
            error=event.error,
            output=event.output,
        )
        return attrs.evolve(state, run=None, results={**state.results, event.run_id: result})
    if isinstance(event, SessionCreated):
        return attrs.evolve(
            state,
            session_id=event.session_id,
            system_prompt=event.system_prompt,
            max_rounds=event.max_rounds,
        )
    return state  # events of later schema additions that this code does not fold
