"""The session decider as pure functions: no actor, no runtime, no event loop."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from actors import AgentSpec, SessionState, tool
from actors._session import _decider as decider
from actors._session._events import evolve
from actors._session._request_header import RequestFrame
from actors._session._steps import (
    Busy,
    CallLLM,
    LLMAnswered,
    RunTools,
    Send,
    SessionConfig,
    Stamped,
    ToolsDone,
    session_config,
)
from actors.events import (
    AssistantRecorded,
    CancelRequested,
    InputQueued,
    RunFinished,
    RunStarted,
    SessionCreated,
    ToolFinished,
    ToolStarted,
)
from protocols import (
    AssistantMessage,
    Cancel,
    LLMResponse,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    Usage,
    UserMessage,
)
from runtime import Decision
from runtime.testing import ScriptedLLM


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def _config(system_prompt: str = "Be brief.") -> SessionConfig:
    # The model is never asked: the decider only names the calls the shell makes.
    spec = AgentSpec(name="s", tools=[add], system_prompt=system_prompt, model="m")
    return session_config(spec, session_id="s1", llm=ScriptedLLM())


def _fold(state: SessionState, events: Iterable[object]) -> SessionState:
    for event in events:
        state = evolve(state, event)
    return state


def _send(run_id: str = "r1", input: str = "What is 2 + 3?") -> Send:
    return Send(
        run_id=run_id,
        input=input,
        max_rounds=None,
        tools=None,
        system_prompt=None,
        response_format=None,
        budget=None,
        started_at=100.0,
        if_busy=None,
    )


def _created(config: SessionConfig) -> SessionState:
    """A new session's state: what ``recovered`` appends to an empty stream, folded."""
    decision = decider.recovered(config, SessionState())
    assert decision is not None
    return _fold(SessionState(), decision.events)


def _in_flight(config: SessionConfig) -> tuple[SessionState, CallLLM]:
    """A session whose run r1 waits for the model's first answer, and that call."""
    created = _created(config)
    state = _fold(created, decider.handle(config, created, _send()).events)
    step = decider.next_step(config, state)
    assert isinstance(step, CallLLM)
    return state, step


def test_recovered_on_an_empty_stream_creates_the_session() -> None:
    """The first event of a stream comes from the configuration; a second start adds none."""
    config = _config()

    decision = decider.recovered(config, SessionState())

    assert decision is not None
    expected = SessionCreated(session_id="s1", system_prompt="Be brief.", max_rounds=10)
    assert (expected,) == decision.events
    assert decider.recovered(config, _fold(SessionState(), decision.events)) is None


def test_a_send_on_an_idle_session_starts_a_run() -> None:
    """The decision is one RunStarted event, filled from the session's defaults, and the
    reply is the run id."""
    config = _config()
    state = _created(config)

    decision = decider.handle(config, state, _send())

    expected = RunStarted(run_id="r1", input="What is 2 + 3?", max_rounds=10, started_at=100.0)
    assert (expected,) == decision.events
    assert decision.reply == "r1"
    assert not decision.cancel_step


def test_the_decider_is_a_pure_function() -> None:
    """The same configuration, state and message give the same decision, every time."""
    config = _config()
    state = _created(config)

    assert decider.handle(config, state, _send()) == decider.handle(config, state, _send())
    assert decider.next_step(config, state) == decider.next_step(config, state)


def test_a_retried_send_is_not_recorded_twice() -> None:
    """A send whose run the state already holds appends nothing and still replies."""
    config = _config()
    state, _ = _in_flight(config)

    decision = decider.handle(config, state, _send())

    assert decision.events == ()
    assert decision.reply == "r1"


def test_a_send_while_busy_is_rejected_or_queued_by_its_policy() -> None:
    """``reject`` replies with the active run and appends nothing; the default queues."""
    config = _config()
    state, _ = _in_flight(config)

    rejected = decider.handle(config, state, attrs.evolve(_send("r2"), if_busy="reject"))
    queued = decider.handle(config, state, _send("r2"))

    assert Busy("r1") == rejected.reply
    assert rejected.events == ()
    started = RunStarted(run_id="r2", input="What is 2 + 3?", max_rounds=10, started_at=100.0)
    assert (InputQueued(run=started),) == queued.events
    assert queued.reply == "r2"


def test_next_step_after_a_send_asks_for_an_llm_call() -> None:
    """The step is round 1 of r1, with the system prompt, the input and the run's tools."""
    config = _config()
    state = _created(config)
    state = _fold(state, decider.handle(config, state, _send()).events)

    step = decider.next_step(config, state)

    assert isinstance(step, CallLLM)
    assert (step.run_id, step.round) == ("r1", 1)
    expected = (SystemMessage("Be brief."), UserMessage("What is 2 + 3?"))
    assert expected == step.request.messages
    assert [t.name for t in step.request.tools] == ["add"]
    assert step.request.model == "m"
    assert step.deadline is None


def test_an_answer_is_recorded_and_then_ends_the_run() -> None:
    """An LLM answer becomes AssistantRecorded with the step's fingerprint; folded, the
    next step finishes the run as completed."""
    config = _config()
    state, step = _in_flight(config)
    answer = LLMResponse(content="5", usage=Usage(prompt_tokens=7, completion_tokens=1))

    decision = decider.handle(
        config, state, LLMAnswered(step.run_id, answer, step.fingerprint, step.header)
    )

    (recorded,) = decision.events
    assert isinstance(recorded, AssistantRecorded)
    assert (1, AssistantMessage(content="5")) == (recorded.round, recorded.message)
    assert (step.fingerprint, "m") == (recorded.request_fingerprint, recorded.model)
    state = _fold(state, decision.events)
    after = decider.next_step(config, state)
    assert isinstance(after, Decision)
    (finished,) = after.events
    expected = RunFinished(run_id="r1", status="completed", text="5", rounds=1, usage=answer.usage)
    assert finished == expected


def test_a_cancel_while_a_call_is_in_flight_keeps_the_partial_answer() -> None:
    """An immediate cancel records the request, the streamed text as an interrupted answer
    carrying the fingerprint of the call in flight (both from the shell's Stamped
    message), and the cancelled end of the run; the step in flight is cancelled."""
    config = _config()
    state, step = _in_flight(config)
    cancel = Cancel(reason="enough", by="test")

    decision = decider.handle(
        config,
        state,
        Stamped(message=cancel, at=105.0, partial="The ans", fingerprint=step.fingerprint),
    )

    requested = CancelRequested(run_id="r1", mode="immediate", reason="enough", by="test", at=105.0)
    interrupted = AssistantRecorded(
        run_id="r1",
        round=1,
        message=AssistantMessage(content="The ans"),
        usage=Usage(),
        model="m",
        finish_reason="interrupted",
        request_fingerprint=step.fingerprint,
    )
    cancelled = RunFinished(  # the run as it stood when the cancel arrived
        run_id="r1",
        status="cancelled",
        text="",
        rounds=0,
        usage=Usage(),
        error="cancelled by test: enough",
    )
    assert (requested, interrupted, cancelled) == decision.events
    assert (decision.reply, decision.cancel_step) == (True, True)
    assert _fold(state, decision.events).run is None


def test_a_cancel_with_nothing_streamed_records_no_answer() -> None:
    """Without streamed text (no observer) the cancel closes the run and nothing else."""
    config = _config()
    state, _ = _in_flight(config)

    decision = decider.handle(config, state, Stamped(message=Cancel(by="test"), at=105.0))

    assert [type(e).__name__ for e in decision.events] == ["CancelRequested", "RunFinished"]
    assert decision.cancel_step


def test_a_cancel_on_an_idle_session_answers_false() -> None:
    """No run, nothing to cancel: no events, reply False."""
    config = _config()

    decision = decider.handle(config, _created(config), Stamped(message=Cancel(), at=1.0))

    assert Decision(reply=False) == decision


def test_a_tool_round_is_started_run_and_closed() -> None:
    """A tool call in the answer is recorded as started, then run as one step; its
    outcome closes it."""
    config = _config()
    state, step = _in_flight(config)
    call = ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    answer = LLMResponse(tool_calls=[call], finish_reason="tool_calls")
    state = _fold(
        state,
        decider.handle(config, state, LLMAnswered("r1", answer, step.fingerprint)).events,
    )

    begin = decider.next_step(config, state)

    assert isinstance(begin, Decision)
    (started,) = begin.events
    assert isinstance(started, ToolStarted)
    assert (started.call_id, started.name, started.crash_policy) == ("c1", "add", "abort")
    state = _fold(state, begin.events)
    run_step = decider.next_step(config, state)
    assert RunTools("r1", 1, (started,)) == run_step
    outcome = ToolOutcome(call_id="c1", tool_name="add", status="ok", content="5")
    done = decider.handle(config, state, ToolsDone("r1", (outcome,)))
    assert (ToolFinished(run_id="r1", outcome=outcome),) == done.events


def test_recovered_closes_a_call_a_crash_left_open_by_its_policy() -> None:
    """A started call with the ``abort`` policy is closed as aborted at recovery."""
    config = _config()
    state, _ = _in_flight(config)
    call = ToolCall(id="c1", name="gone", arguments="{}")
    state = _fold(
        state,
        [
            AssistantRecorded(
                run_id="r1",
                round=1,
                message=AssistantMessage(tool_calls=(call,)),
                usage=Usage(),
                model="m",
                finish_reason="tool_calls",
                request_fingerprint="f",
            ),
            ToolStarted(
                run_id="r1",
                call_id="c1",
                name="gone",
                arguments="{}",
                idempotency_key="k",
                crash_policy="abort",
            ),
        ],
    )

    decision = decider.recovered(config, state)

    assert decision is not None
    (closed,) = decision.events
    assert isinstance(closed, ToolFinished)
    assert (closed.run_id, closed.outcome.call_id, closed.outcome.status) == ("r1", "c1", "aborted")


def test_replay_checks_a_recorded_answer_against_the_step() -> None:
    """The recorded answer of the same request matches; another request is a divergence."""
    config = _config()
    state, step = _in_flight(config)
    answered = decider.handle(
        config, state, LLMAnswered("r1", LLMResponse(content="5"), step.fingerprint, step.header)
    )
    (recorded,) = answered.events

    assert decider.answers_effect(recorded)
    assert decider.replay_check(step, recorded) is None
    assert decider.step_settled(step, _fold(state, answered.events), recorded)
    other = _config(system_prompt="Be verbose.")
    _, changed = _in_flight(other)
    problem = decider.replay_check(changed, recorded)
    assert problem is not None
    assert "system" in problem
    assert decider.replay_check(None, recorded) == (
        "the log has an answer of the model here, but the code asks for "
        "nothing (it would wait for a message)"
    )


def test_a_kept_request_frame_makes_the_request_made_from_scratch() -> None:
    """The running actor keeps what a run's model calls share between steps: each call's
    request, fingerprint and header equal those made with nothing kept, one frame serves
    every call of a run and the next usual run, and a run of its own system prompt gets a
    frame of its own."""
    config = _config()
    frames: list[RequestFrame] = []
    state = _created(config)
    state = _fold(state, decider.handle(config, state, _send()).events)
    calls: list[CallLLM] = []
    used: list[RequestFrame] = []
    answers = [
        LLMResponse(
            tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}')],
            finish_reason="tool_calls",
        ),
        LLMResponse(content="5"),
    ]
    while state.run is not None:
        kept = decider.next_step(config, state, frames)
        assert kept == decider.next_step(config, state)
        if isinstance(kept, CallLLM):
            calls.append(kept)
            used.extend(frames)
            answer = LLMAnswered("r1", answers[len(calls) - 1], kept.fingerprint, kept.header)
            state = _fold(state, decider.handle(config, state, answer).events)
        elif isinstance(kept, RunTools):
            outcome = ToolOutcome(call_id="c1", tool_name="add", status="ok", content="5")
            state = _fold(state, decider.handle(config, state, ToolsDone("r1", (outcome,))).events)
        else:
            assert isinstance(kept, Decision)
            state = _fold(state, kept.events)
    first, second = calls
    assert (first.header.messages, second.header.messages) == (1, 3)
    assert first.fingerprint != second.fingerprint
    frame, again = used
    assert frame is again
    assert frame.lead == (SystemMessage("Be brief."),)

    usual = _send("r2", "And 3 + 4?")
    state = _fold(state, decider.handle(config, state, usual).events)
    step = decider.next_step(config, state, frames)
    assert isinstance(step, CallLLM)
    assert step == decider.next_step(config, state)
    assert frames[0] is frame
    state = _fold(
        state, [RunFinished(run_id="r2", status="cancelled", text="", rounds=0, usage=Usage())]
    )

    own = attrs.evolve(_send("r3", "And 3 + 4?"), system_prompt="Be exact.")
    state = _fold(state, decider.handle(config, state, own).events)
    step = decider.next_step(config, state, frames)
    assert isinstance(step, CallLLM)
    assert step == decider.next_step(config, state)
    assert step.request.messages[0] == SystemMessage("Be exact.")
    assert step.header.system == "Be exact."
    assert frames[0] is not frame
