"""Ready-made invariants for agents: each an assertion with a message that says what broke."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

import actors
import actors.events
import actors.lowlevel
from protocols import LLMRequest, Usage
from protocols.codec import decode_record
from runtime import RecordedEvent
from runtime.timers import TimerFired, TimerScheduled

from .._session._events import evolve as session_evolve
from .._session._events import timer_follow_up
from ._deterministic_llm import LLMCall
from ._harness import Trace

if TYPE_CHECKING:
    from actors import Price, SessionState

__all__ = [
    "assert_budgets_respected",
    "assert_crash_equivalent",
    "assert_follow_ups_read_once",
    "assert_invariants",
    "assert_no_repeated_requests",
    "assert_replay_matches",
    "assert_requests_provider_valid",
    "assert_runs_end_once",
    "assert_states_are_folds",
    "assert_timers_fire_once",
]

_REPR_LIMIT = 300


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _differences(expected: object, actual: object, *, left: str, right: str) -> list[str]:
    """Readable lines for the fields where two attrs values differ (one level deep)."""
    kind = type(expected)
    if not (attrs.has(kind) and kind is type(actual)):
        return [f"{left}: {_short(expected)}", f"{right}: {_short(actual)}"]
    lines: list[str] = []
    for field in attrs.fields(kind):
        a, b = getattr(expected, field.name), getattr(actual, field.name)
        if a != b:
            lines.append(f"{field.name}:")
            lines.append(f"  {left}: {_short(a)}")
            lines.append(f"  {right}: {_short(b)}")
    return lines


def assert_replay_matches(trace: Trace) -> None:
    """Replay equals live state: folding the log with the current code gives the state
    the live session had, and replay asks for exactly the recorded requests.

    The harness replays with ``actors.replay_session`` after the run; this checks its
    outcome (the log is the authority; replay is deterministic).

    Args:
        trace (Trace): a harness run.

    Raises:
        AssertionError: the replay raised (a divergence: the message has its diff), or
            its state differs from the live one (the message names each field).
    """
    __tracebackhide__ = True
    if trace.replay_error is not None:
        error = trace.replay_error
        msg = (
            f"replay of {trace.stream} failed, so the log does not reproduce the live "
            f"session: {type(error).__name__}: {error}"
        )
        raise AssertionError(msg) from error
    if trace.replayed != trace.state:
        lines = _differences(trace.state, trace.replayed, left="live", right="replayed")
        msg = f"replay of {trace.stream} differs from the live state:\n" + "\n".join(lines)
        raise AssertionError(msg)


def assert_crash_equivalent(clean: Trace, crashed: Trace) -> None:
    """Crash anywhere equals no crash: the same transcript, usage and run results.

    Run the same script and operations twice, once with ``crash_at=k``. The crashed
    session restarts from its log and must end exactly as the clean one: no answer lost
    or asked twice, no tool result invented. Holds when the operations are sequential
    (``Send(..., wait=True)``) and every tool is idempotent (``crash_policy="retry"``):
    a tool that is not is closed as aborted by a crash, which is a different, correct,
    transcript.

    Args:
        clean (Trace): the run without faults.
        crashed (Trace): the run with a crash.

    Raises:
        AssertionError: the first difference, with the fault that caused it.
    """
    __tracebackhide__ = True
    faults = (
        ", ".join(
            f"{f.reason} at {f.stream} event {f.first_event} ({', '.join(f.event_types)})"
            for f in crashed.faults
        )
        or "none fired"
    )
    problems: list[str] = []
    left, right = clean.state.transcript, crashed.state.transcript
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            problems.append(
                f"transcript message {index} differs:\n  clean:   {_short(a)}\n"
                f"  crashed: {_short(b)}"
            )
            break
    else:
        if len(left) != len(right):
            problems.append(
                f"the transcripts have {len(left)} (clean) and {len(right)} (crashed) messages"
            )
    if clean.state.usage != crashed.state.usage:
        problems.append(f"usage: clean {clean.state.usage}, crashed {crashed.state.usage}")
    ends = {i: (r.status, r.text, r.rounds, r.usage) for i, r in clean.results.items()}
    crashed_ends = {i: (r.status, r.text, r.rounds, r.usage) for i, r in crashed.results.items()}
    if ends != crashed_ends:
        problems.append(f"run results: clean {ends}, crashed {crashed_ends}")
    if problems:
        msg = f"the crashed run (faults: {faults}) does not end as the clean run:\n" + "\n".join(
            problems
        )
        raise AssertionError(msg)


def assert_requests_provider_valid(requests: Iterable[LLMRequest]) -> None:
    """Every request is provider-valid: each tool call has exactly one result, right after
    its assistant message, and no result answers no call (provider-valid transcripts).

    Args:
        requests (Iterable[LLMRequest]): what the model received (``trace.requests``).

    Raises:
        AssertionError: names the first bad request and the first message that differs
            from the provider-valid form.
    """
    __tracebackhide__ = True
    for number, request in enumerate(requests):
        messages = tuple(request.messages)
        if actors.lowlevel.is_provider_valid(messages):
            continue
        fixed = actors.lowlevel.provider_valid(messages)
        index = next(
            (i for i, (a, b) in enumerate(zip(messages, fixed, strict=False)) if a != b),
            min(len(messages), len(fixed)),
        )
        got = _short(messages[index]) if index < len(messages) else "(the end)"
        want = _short(fixed[index]) if index < len(fixed) else "(the end)"
        msg = (
            f"request #{number} is not provider-valid: at message {index} it has {got}, "
            f"where a valid transcript has {want}"
        )
        raise AssertionError(msg)


def assert_no_repeated_requests(calls: Iterable[LLMCall], records: Iterable[RecordedEvent]) -> None:
    """No recorded answer is requested again: once the log holds the model's answer to a
    request, the agent must take it from there (after a crash too), never call again.

    A request asked twice is fine while its answer is not recorded (a crash between the
    call and the append loses the answer), and so is the same request from another
    session (two sub-agents given the same task). An event records an answer when it has
    a ``request_fingerprint`` attribute (the session's ``AssistantRecorded`` and
    ``ContextCompacted``); a call whose ``caller`` is unknown is checked against every
    session's answers.

    A model call's request names its moment: it carries the conversation (after a
    compaction, a summary that says where it cuts, then the turns since), which only grows,
    so the same request again is the same moment. A summary's request does not: it carries
    only the previous summary and the turns it folds in, so a later compaction may ask it
    again for other turns (identical turns after an empty summary). A compaction's moment
    is the cut it starts from (``since``), recorded with its answer: a summary asked again
    is a repeat when the log records the call's answer at the cut of the earlier one (a
    session that lost track of its compaction starts from the old cut again).

    Args:
        calls (Iterable[LLMCall]): the model calls, with the log position when each was
            made (``trace.calls``).
        records (Iterable[RecordedEvent]): the log (``trace.records``).

    Raises:
        AssertionError: names the call, and where its answer was already recorded.
    """
    __tracebackhide__ = True
    # By fingerprint: each answer to that request, in log order, with its event.
    recorded: dict[str, list[tuple[RecordedEvent, object]]] = {}
    for record in records:
        event = decode_record(record)
        fingerprint = getattr(event, "request_fingerprint", None)
        if isinstance(fingerprint, str) and fingerprint:
            recorded.setdefault(fingerprint, []).append((record, event))
    for call in calls:
        if call.log_position is None:
            continue
        answers = [
            (record, event)
            for record, event in recorded.get(call.fingerprint, ())
            if call.caller is None or record.stream == f"session/{call.caller}"
        ]
        first = next(
            (
                record
                for record, event in answers
                if record.position <= call.log_position
                and _same_moment(call, record, event, answers)
            ),
            None,
        )
        if first is None:
            continue
        msg = (
            f"model call #{call.index} asked for a request whose answer was already "
            f"recorded at {first.stream} version {first.version} (position {first.position}, "
            f"the log was at {call.log_position}): the answer must come from the log"
        )
        raise AssertionError(msg)


def _same_moment(
    call: LLMCall,
    record: RecordedEvent,
    event: object,
    answers: Iterable[tuple[RecordedEvent, object]],
) -> bool:
    """Whether ``call``, made after ``event`` recorded an answer to its request, asks for
    that answer again (rather than asking the same request at a later moment).

    Only a summary's request can come back at another moment: the call's own answer (the
    next one to its request in the same stream) says which cut it was for. One recorded at
    the cut of ``event`` asks for it again; one recorded at another cut is a new
    compaction. One never recorded (its run cancelled, the process gone before the append)
    says nothing of its cut: it passes.
    """
    if not isinstance(event, actors.events.ContextCompacted):
        return True
    assert call.log_position is not None
    own = next(
        (
            later
            for later_record, later in answers
            if later_record.stream == record.stream and later_record.position > call.log_position
        ),
        None,
    )
    return isinstance(own, actors.events.ContextCompacted) and own.since == event.since


def _cost(by_model: Mapping[str, Usage], prices: Mapping[str, Price]) -> float:
    """The cost of usage per model at ``prices``, a dated model name priced by its prefix."""
    total = 0.0
    for model, usage in by_model.items():
        names = [name for name in prices if model.startswith(name)]
        if names:
            total += prices[max(names, key=len)].cost(usage)
    return total


def assert_budgets_respected(
    records: Iterable[RecordedEvent], *, prices: Mapping[str, Price] | None = None
) -> None:
    """Budgets are never exceeded by more than one call: every model call of every run
    was made while the run was within its token and cost budget and its round limit.

    Only the call that crosses a limit may end beyond it; the check before the next call
    stops the run. Each session stream of the log is folded, and before each recorded
    answer the run is checked as the session checks it before calling the model (usage
    includes the sub-agents that finished; input arriving in the last round earns one
    more round). Wall-time limits are not checked: the log does not say when a call began.

    Args:
        records (Iterable[RecordedEvent]): the log (``trace.records``).
        prices (Mapping[str, Price] | None): the session's prices, for cost budgets.

    Raises:
        AssertionError: names the session, the run, the round and the limit.
    """
    __tracebackhide__ = True
    prices = prices or {}
    states: dict[str, SessionState] = {}
    for record in records:
        if not record.stream.startswith("session/"):
            continue
        event = decode_record(record)
        state = states.get(record.stream) or actors.SessionState()
        run = state.run
        if isinstance(event, actors.events.AssistantRecorded) and run is not None:
            where = f"{record.stream} run {event.run_id!r} round {event.round}"
            if run.rounds >= run.round_limit:
                msg = (
                    f"{where} (version {record.version}): the model was called after the "
                    f"round limit {run.round_limit}"
                )
                raise AssertionError(msg)
            budget = run.started.budget
            over = (
                None
                if budget is None
                else budget.exceeded(run.usage, _cost(run.usage_by_model, prices))
            )
            if over is not None:
                msg = (
                    f"{where} (version {record.version}): the model was called with the "
                    f"budget already spent ({over}); only the call that crosses a limit may "
                    "go beyond it"
                )
                raise AssertionError(msg)
        states[record.stream] = session_evolve(state, event)


def _session_events(records: Iterable[RecordedEvent]) -> dict[str, list[object]]:
    """The decoded events of each session stream of the log."""
    streams: dict[str, list[object]] = {}
    for record in records:
        if record.stream.startswith("session/"):
            streams.setdefault(record.stream, []).append(decode_record(record))
    return streams


def _repeated(items: Iterable[object]) -> list[object]:
    counts = Counter(items)
    return sorted((item for item, count in counts.items() if count > 1), key=repr)


def assert_follow_ups_read_once(records: Iterable[RecordedEvent]) -> None:
    """Every follow-up is received once per id and read by the model exactly once.

    A follow-up's id is recorded once however often it is delivered; each received
    follow-up, timer firing and board change is injected into the conversation once,
    never twice; and once the session has settled (the harness's end) none is left
    unread. Per session stream of the log.

    Args:
        records (Iterable[RecordedEvent]): the log of a settled run (``trace.records``).

    Raises:
        AssertionError: names the stream and the ids received twice, injected twice,
            or never injected.
    """
    __tracebackhide__ = True
    for stream, events in _session_events(records).items():
        received = [e.follow_up.id for e in events if isinstance(e, actors.events.FollowUpReceived)]
        notes = {e.timer_id: e.note for e in events if isinstance(e, TimerScheduled)}
        wake_ups = [
            timer_follow_up(e, notes.get(e.timer_id, "")).id
            for e in events
            if isinstance(e, TimerFired)
        ]
        injected = [
            i for e in events if isinstance(e, actors.events.FollowUpsInjected) for i in e.ids
        ]
        problems: list[str] = []
        if _repeated(received):
            problems.append(f"received twice: {_repeated(received)}")
        if _repeated(injected):
            problems.append(f"read by the model twice: {_repeated(injected)}")
        unread = sorted((set(received) | set(wake_ups)) - set(injected))
        if unread:
            problems.append(f"never read by the model: {unread}")
        if problems:
            raise AssertionError(f"follow-ups of {stream}: " + "; ".join(problems))


def assert_timers_fire_once(records: Iterable[RecordedEvent]) -> None:
    """Every timer fires at most once per due time, and only if it was scheduled.

    Timers are durable and re-armed after restarts; a firing delivered again after a
    crash must be dropped (effectively once).

    Args:
        records (Iterable[RecordedEvent]): the log (``trace.records``).

    Raises:
        AssertionError: names the stream and the timer.
    """
    __tracebackhide__ = True
    streams: dict[str, list[object]] = {}
    for record in records:
        if record.type.startswith("timer."):
            streams.setdefault(record.stream, []).append(decode_record(record))
    for stream, events in streams.items():
        scheduled = {e.timer_id for e in events if isinstance(e, TimerScheduled)}
        fired = [(e.timer_id, e.due_at) for e in events if isinstance(e, TimerFired)]
        twice = _repeated(fired)
        if twice:
            msg = f"timers of {stream} fired twice for one due time: {twice}"
            raise AssertionError(msg)
        unknown = sorted({timer_id for timer_id, _ in fired} - scheduled)
        if unknown:
            msg = f"timers of {stream} fired without being scheduled: {unknown}"
            raise AssertionError(msg)


def assert_runs_end_once(records: Iterable[RecordedEvent]) -> None:
    """Every run starts once and, the session settled, ends exactly once.

    Args:
        records (Iterable[RecordedEvent]): the log of a settled run (``trace.records``).

    Raises:
        AssertionError: names the stream and the runs started twice, ended twice or
            never ended.
    """
    __tracebackhide__ = True
    for stream, events in _session_events(records).items():
        started = [e.run_id for e in events if isinstance(e, actors.events.RunStarted)]
        ended = [e.run_id for e in events if isinstance(e, actors.events.RunFinished)]
        problems: list[str] = []
        if _repeated(started):
            problems.append(f"started twice: {_repeated(started)}")
        if _repeated(ended):
            problems.append(f"ended twice: {_repeated(ended)}")
        if sorted(set(started) - set(ended)):
            problems.append(f"never ended: {sorted(set(started) - set(ended))}")
        if sorted(set(ended) - set(started)):
            problems.append(f"ended, never started: {sorted(set(ended) - set(started))}")
        if problems:
            raise AssertionError(f"runs of {stream}: " + "; ".join(problems))


def assert_states_are_folds(trace: Trace) -> None:
    """Every state the session reported was the fold of a prefix of its log.

    With ``RuntimeHarness(observe_states=True)`` the harness asks for the state after
    each operation, across crashes and runtime restarts; each must equal folding the
    stream's first events, as many as were logged by then or fewer (the log is
    the authority: nothing else is a source of truth).

    Args:
        trace (Trace): a harness run with observed states.

    Raises:
        AssertionError: names the operation after which the state was no fold.
    """
    __tracebackhide__ = True
    folds = [actors.SessionState()]
    for record in trace.records:
        if record.stream == trace.stream:
            folds.append(session_evolve(folds[-1], decode_record(record)))
    for seen in trace.observed:
        if seen.state not in folds[: seen.version + 1]:
            msg = (
                f"after {seen.after} the session reported a state that is the fold of no "
                f"prefix of {trace.stream} (of its first {seen.version} events)"
            )
            raise AssertionError(msg)


def assert_invariants(trace: Trace) -> None:
    """Check every single-run invariant of a harness run.

    :func:`assert_replay_matches`, :func:`assert_requests_provider_valid`,
    :func:`assert_no_repeated_requests`, :func:`assert_budgets_respected`,
    :func:`assert_follow_ups_read_once`, :func:`assert_timers_fire_once`,
    :func:`assert_runs_end_once`, and :func:`assert_states_are_folds` when the run
    observed states (crash equivalence needs two runs: :func:`assert_crash_equivalent`).

    Example::

        @property_settings()
        @given(conversation=conversations([add]), ops=operations())
        def test_my_agent(runtime_harness, conversation, ops):
            assert_invariants(runtime_harness.run(conversation, ops))

    Raises:
        AssertionError: the first invariant that does not hold, with the operations and
            what each did.
    """
    __tracebackhide__ = True
    try:
        assert_replay_matches(trace)
        assert_requests_provider_valid(trace.requests)
        assert_no_repeated_requests(trace.calls, trace.records)
        assert_budgets_respected(trace.records, prices=trace.prices)
        assert_follow_ups_read_once(trace.records)
        assert_timers_fire_once(trace.records)
        assert_runs_end_once(trace.records)
        if trace.observed:
            assert_states_are_folds(trace)
    except AssertionError as error:
        steps = "\n".join(
            f"  {op!r}: {outcome}"
            for op, outcome in zip(trace.operations, trace.outcomes, strict=False)
        )
        raise AssertionError(f"{error}\n\noperations:\n{steps or '  (none)'}") from error
