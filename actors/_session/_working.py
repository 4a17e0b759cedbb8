"""The session's working state: the fold of its events, applied in place.

:func:`~actors._session._events.evolve` is the specification of a session's state: a pure
function that makes a new :class:`SessionState` (and a new :class:`ActiveRun`) for every
event. A running session folds several events per send, and each of those copies of two
classes of some fifteen fields each was most of the fold's cost, for states nobody but
the next event ever saw.

The running actor keeps one **working state** instead and folds each event into it in
place (:func:`apply`): the events of a send change a few fields of the same two objects.
It is the same value ``evolve`` makes (a property test folds generated histories both
ways, crashes, compactions, snapshots and forks included, and compares them after every
event). What makes that safe:

* The working state is the actor's own: made by its fold (its initial state, a decoded
  snapshot, or :func:`apply`), read by its decider between two events, never handed out.
  Whatever must outlive a step, such as the state a caller asked for, gets a copy of its
  own (:func:`detached`), which later events do not touch.
* Everything a state holds besides its two records is a value already: events, tuples,
  and the grow-only transcript and maps (``actors._session._persistent``), whose older versions
  never change. Only the records' fields are set in place.
* An event this module does not fold itself (rarer ones: timers, compactions, humans,
  children...) goes through ``evolve``, which returns a new state: the working state is
  then that one (the caller always takes :func:`apply`'s result).
"""

from __future__ import annotations

from typing import Any

from protocols import ToolResultMessage, Usage, UserMessage
from protocols.lowlevel import slot_setter

from ._events import (
    ActiveRun,
    AssistantRecorded,
    RunFinished,
    RunStarted,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
    run_result,
)
from ._persistent import grow_map
from ._replace import replacer

__all__ = ["apply", "copies", "detached"]

_NO_USAGE = Usage()

_copy_state = replacer(SessionState)
_copy_run = replacer(ActiveRun)
_BLANK_RUN = ActiveRun(started=RunStarted(run_id="", input="", max_rounds=0))


def _setters(cls: type[Any], *names: str) -> tuple[Any, ...]:
    return tuple(slot_setter(cls, name) for name in names)


(
    _set_history,
    _set_run,
    _set_queued,
    _set_results,
    _set_usage,
    _set_report,
) = _setters(SessionState, "history", "run", "queued", "results", "usage", "prompt_report")
(
    _set_rounds,
    _set_run_usage,
    _set_text,
    _set_pending,
    _set_open,
    _set_by_model,
    _set_finish_reason,
    _set_unknown,
) = _setters(
    ActiveRun,
    "rounds",
    "usage",
    "text",
    "pending_calls",
    "open_calls",
    "usage_by_model",
    "finish_reason",
    "unknown_results",
)

_copies = [0]


def copies() -> int:
    """How many working states were copied in this process (:func:`detached`): what the
    benchmarks report per send."""
    return _copies[0]


def detached(state: SessionState) -> SessionState:
    """A copy of the working ``state`` that later events leave as it is: for whatever
    outlives the step it was taken in (a caller's ``Session.state()``)."""
    _copies[0] += 1
    run = state.run
    if run is None:
        return _copy_state(state)
    return _copy_state(state, run=_copy_run(run, usage_by_model=dict(run.usage_by_model)))


def apply(state: SessionState, event: object) -> SessionState:
    """Fold ``event`` into the working ``state`` in place; returns the working state
    (``state`` itself, or a new one for an event folded by ``evolve``)."""
    kind = type(event)
    if kind is ToolStarted:
        return _tool_started(state, event)  # type: ignore[arg-type]
    if kind is ToolFinished:
        return _tool_finished(state, event)  # type: ignore[arg-type]
    if kind is AssistantRecorded:
        return _assistant(state, event)  # type: ignore[arg-type]
    if kind is RunStarted:
        return _run_started(state, event)  # type: ignore[arg-type]
    if kind is RunFinished:
        return _run_finished(state, event)  # type: ignore[arg-type]
    return evolve(state, event)


def _tool_started(state: SessionState, event: ToolStarted) -> SessionState:
    run = state.run
    assert run is not None
    call_id = event.call_id
    pending = run.pending_calls
    if len(pending) == 1 and pending[0].id == call_id:  # the usual round: one call
        _set_pending(run, ())
    else:
        _set_pending(run, tuple(c for c in pending if c.id != call_id))
    _set_open(run, (*run.open_calls, event))
    return state


def _tool_finished(state: SessionState, event: ToolFinished) -> SessionState:
    run = state.run
    assert run is not None
    outcome = event.outcome
    call_id = outcome.call_id
    calls = run.open_calls
    if len(calls) == 1 and calls[0].call_id == call_id:
        _set_open(run, ())
    else:
        _set_open(run, tuple(c for c in calls if c.call_id != call_id))
    if outcome.status == "aborted":
        _set_unknown(run, (*run.unknown_results, call_id))
    reply = ToolResultMessage(
        tool_call_id=call_id, content=outcome.content, is_error=outcome.is_error
    )
    _set_history(state, state.history.append(reply))
    return state


def _run_started(state: SessionState, event: RunStarted) -> SessionState:
    if event.input:
        _set_history(state, state.history.append(UserMessage(event.input)))
    # A run of the blank one's fields: ``ActiveRun(...)`` less its frozen guard and
    # factories (a run's usage is replaced, never changed; its dict is its own).
    _set_run(
        state,
        _copy_run(_BLANK_RUN, started=event, round_limit=event.max_rounds, usage_by_model={}),
    )
    if state.queued:
        _set_queued(state, tuple(q for q in state.queued if q.run_id != event.run_id))
    return state


def _assistant(state: SessionState, event: AssistantRecorded) -> SessionState:
    run = state.run
    assert run is not None
    usage = event.usage
    by_model = run.usage_by_model
    if type(by_model) is not dict:  # the run's own dict from here on
        by_model = dict(by_model)
        _set_by_model(run, by_model)
    by_model[event.model] = by_model.get(event.model, _NO_USAGE) + usage
    if usage.prompt_tokens:
        history = state.history
        upto = state.compacted.upto if state.compacted is not None else 0
        _set_report(state, (usage.prompt_tokens, len(history) + len(history.pending), upto))
    message = event.message
    _set_history(state, state.history.append(message))
    _set_rounds(run, event.round)
    _set_run_usage(run, run.usage + usage)
    if message.content:
        _set_text(run, message.content)
    _set_pending(run, message.tool_calls)
    _set_finish_reason(run, event.finish_reason)
    _set_usage(state, state.usage + usage)
    return state


def _run_finished(state: SessionState, event: RunFinished) -> SessionState:
    result = run_result(state, event)
    _set_results(state, grow_map(state.results).set(event.run_id, result))
    _set_run(state, None)
    return state
