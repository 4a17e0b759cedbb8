"""The session decider's part in context compaction: pure, like the rest of the decider.

The projection (what a request holds of the conversation) is a function of the folded
state alone: the latest :class:`ContextCompacted` says where the view starts and what
stands for the messages before it. So a replay, which folds the same events, builds the
same requests without a policy's help; the policy only decides *when* to compact, and
that decision is checked against the log like a model call.
"""

from __future__ import annotations

from protocols import LLMResponse, Message, SystemMessage, ToolDefinition
from runtime import Decision

from ._context import (
    ContextCompacted,
    clip_summary,
    estimate_tokens,
    plan_cut,
    projection_digest,
    summary_message,
    summary_request,
)
from ._events import ActiveRun, SessionState
from ._steps import SessionConfig, Summarise, Summarised
from ._transcript import ValidTranscript


def projection_lead(system: str, compacted: ContextCompacted | None) -> tuple[Message, ...]:
    """The system messages a request sends before its conversation: the system prompt
    and, after a compaction, the message that stands for what it left out."""
    lead: tuple[Message, ...] = (SystemMessage(system),) if system else ()
    if compacted is None:
        return lead
    return (*lead, summary_message(compacted.upto, compacted.summary, compacted.method))


def projection(state: SessionState) -> tuple[ValidTranscript, int, str]:
    """The transcript a request's conversation is a view of (its open calls closed),
    where that view starts, and the view's fingerprint chain, as the state's latest
    compaction has it.

    The conversation is a view of the transcript's buffer from there, not a copy: O(1)
    however long the history."""
    history = state.history.closed()
    compacted = state.compacted
    if compacted is None:
        return history, 0, history.digest
    return history, compacted.upto, projection_digest(history.digest, compacted.upto)


def compaction_step(
    config: SessionConfig,
    state: SessionState,
    run: ActiveRun,
    system: str,
    tools: tuple[ToolDefinition, ...],
) -> Decision | Summarise | None:
    """What to do before the next model call so its request fits the budget: ask for a
    summary (:class:`Summarise`), record a dropped range (a :class:`Decision`), or
    nothing."""
    policy = config.context
    if policy is None:
        return None
    lead: tuple[Message, ...] = (SystemMessage(system),) if system else ()
    messages = state.history.closed().view()
    compacted = state.compacted
    since = compacted.upto if compacted is not None else 0
    summary = (
        summary_message(compacted.upto, compacted.summary, compacted.method)
        if compacted is not None
        else None
    )
    report = state.prompt_report
    calibrate = policy.count_tokens is estimate_tokens  # a count of your own is exact
    reported = None
    if calibrate and report is not None and report[2] == since:
        reported = (report[0], report[1])
    cut = plan_cut(policy, lead, messages, since, tools, summary=summary, reported=reported)
    if cut is None:
        return None
    run_id = run.started.run_id
    if policy.summariser is None:
        event = ContextCompacted(
            run_id=run_id,
            upto=cut.upto,
            since=since,
            method="drop",
            summary="",
            tokens_before=cut.tokens_before,
        )
        return Decision(events=[event])
    previous = compacted.summary if compacted is not None else ""
    # The session's model name for its own model; another summariser uses its default.
    model = config.model if policy.summariser == "session" else None
    request = summary_request(policy, previous, messages[since : cut.upto], model)
    return Summarise(
        run_id=run_id,
        round=run.rounds + 1,
        upto=cut.upto,
        since=since,
        request=request,
        fingerprint=request.fingerprint(),
        tokens_before=cut.tokens_before,
    )


def summarised(
    config: SessionConfig, state: SessionState, message: Summarised
) -> ContextCompacted | None:
    """The event that records a summariser's answer (``None`` for a stale answer)."""
    policy = config.context
    run = state.run
    if policy is None or run is None or run.started.run_id != message.run_id:
        return None
    compacted = state.compacted
    since = compacted.upto if compacted is not None else 0
    if since >= message.upto:
        return None
    response: LLMResponse = message.response
    return ContextCompacted(
        run_id=message.run_id,
        upto=message.upto,
        since=since,
        method="summary",
        summary=clip_summary(policy, response.content.strip()),
        tokens_before=message.tokens_before,
        usage=response.usage,
        model=response.model,
        request_fingerprint=message.fingerprint,
    )
