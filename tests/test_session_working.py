"""The session's working state, folded in place, is the pure fold after every event.

``evolve`` is the specification; the running session folds into one working state
instead (``actors._session._working.apply``). Generated histories, from the session's own
strategy and from whole kit runs (crashes, failed commits, restarts, timers, follow-ups,
cancels, compactions, sub-agents), are folded both ways and compared after every event,
from the start, from a snapshot and on a fork; copies taken on the way must not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import hypothesis
import trio
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_session_snapshot import _roundtrip, session_events
from trio.testing import MockClock

import actors._session._persistent as persistent
from actors import (
    AgentSpec,
    Budget,
    ContextPolicy,
    ask_human,
    fork_session,
    spawn_session,
    tool,
)
from actors._session._events import SessionState, evolve
from actors._session._working import apply, copies, detached
from actors.testing import RuntimeHarness, conversations, operations, property_settings
from protocols import LLMRequest, LLMResponse
from protocols.codec import decode_record
from runtime import open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore


def _both_ways(events: Sequence[object], pure: SessionState, work: SessionState) -> SessionState:
    """Fold ``events`` purely from ``pure`` and in place from ``work`` (a state of its own,
    equal to ``pure``), comparing after each; copies of the working state taken on the way
    must still equal the pure states of their time at the end. Returns the pure fold."""
    taken: list[tuple[SessionState, SessionState]] = []
    for i, event in enumerate(events):
        pure = evolve(pure, event)
        work = apply(work, event)
        assert work == pure, f"after event {i} ({type(event).__name__})"
        assert work.transcript == pure.transcript
        assert dict(work.results) == dict(pure.results)
        if work.run is not None:
            assert dict(work.run.usage_by_model) == dict(pure.run.usage_by_model)  # type: ignore[union-attr]
        taken.append((detached(work), pure))
    for i, (copy, then) in enumerate(taken):
        assert copy == then, f"the copy taken after event {i} changed"
    return pure


def _check_history(events: Sequence[object], cut: int) -> None:
    """From the start, and from a snapshot taken at ``cut`` (the working state is then the
    decoded snapshot, as a reopened session's is)."""
    full = _both_ways(events, SessionState(), SessionState())
    at_cut = _both_ways(events[:cut], SessionState(), SessionState())
    resumed = _both_ways(events[cut:], at_cut, _roundtrip(at_cut))
    assert resumed == full


@settings(max_examples=examples(150), deadline=None)
@given(session_events(), st.data())
def test_the_working_state_is_the_fold_of_a_generated_stream(
    events: list[object], data: st.DataObject
) -> None:
    with mock.patch.object(persistent, "CHUNK", 3):  # snapshots cross chunk boundaries
        _check_history(events, data.draw(st.integers(0, len(events)), label="cut"))


@tool(crash_policy="retry")
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool
async def note(text: str) -> str:
    """Write a note down (aborted by a crash: its result is then unknown).

    Args:
        text: what to note.
    """
    return f"noted: {text}"


WORKER = AgentSpec(name="worker", description="adds numbers", tools=[add], max_rounds=2)
AGENT = AgentSpec(
    name="compacting",
    system_prompt="Be exact.",
    tools=[add, note, ask_human],
    agents=[WORKER],
    max_rounds=4,
    budget=Budget(max_tokens=2_000),
    context=ContextPolicy(window=200, summary_tokens=20),
)
"""Tools of every crash policy, a human, sub-agents, a budget and a context policy that
compacts: most kinds of event a session writes."""

HARNESS = RuntimeHarness(AGENT)


def _answer(request: LLMRequest) -> LLMResponse:
    return LLMResponse(content=f"seen {len(request.messages)}")


async def _fork_and_send(store: InMemoryEventStore, session_id: str, at: int) -> None:
    """Fork ``session_id`` at version ``at`` and send the fork some input: a fork taken
    in the middle of a run goes on with that run (its open calls closed by their crash
    policy) before it answers."""
    await fork_session(store, session_id, at_version=at, new_id="fork")
    async with open_runtime(store=store, seed=7) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(_answer), session_id="fork", tools=[add, note]
        )
        # A fork taken while its run waits for a human queues the send behind it: the
        # virtual hour runs out instead (what was written by then is what is checked).
        with trio.move_on_after(3600):
            await session.send("and now?")


@property_settings(examples=examples(60))
@given(
    conversation=conversations(AGENT, max_rounds=4, invalid_calls=False),
    ops=operations(board=False),
    data=st.data(),
)
def test_the_working_state_is_the_fold_of_every_stream_of_a_kit_run(
    conversation: tuple[object, ...], ops: tuple[object, ...], data: st.DataObject
) -> None:
    trace = HARNESS.run(conversation, ops)  # type: ignore[arg-type]
    streams: dict[str, list[object]] = {}
    for record in trace.records:
        if record.stream.startswith("session/"):
            streams.setdefault(record.stream, []).append(decode_record(record))
    hypothesis.event(f"sessions: {len(streams)}")
    compactions = sum(
        type(e).__name__ == "ContextCompacted" for events in streams.values() for e in events
    )
    hypothesis.event(f"compactions: {min(compactions, 3)}+")
    for events in streams.values():
        _check_history(events, data.draw(st.integers(0, len(events)), label="cut"))
    # A fork is taken between two decisions (not inside one append).
    boundaries = [
        r.version
        for r in trace.records
        if r.stream == trace.stream and b'"continues"' not in (r.metadata or b"")
    ]
    if boundaries:
        at = data.draw(st.sampled_from(boundaries), label="fork at")
        store = trace.store
        trio.run(_fork_and_send, store, trace.session_id, at, clock=MockClock(autojump_threshold=0))
        forked = [decode_record(r) for r in trio.run(store.read, "session/fork")]
        _check_history(forked, data.draw(st.integers(0, len(forked)), label="fork cut"))


def test_a_state_asked_for_is_a_copy_later_events_leave_alone() -> None:
    """``Session.state()`` answers a copy of the working state (one per ask), which the
    session's next send does not change."""

    async def main() -> tuple[SessionState, SessionState, int]:
        async with open_runtime(seed=1) as runtime:
            session = await spawn_session(runtime, llm=FunctionLLM(_answer))
            await session.send("one")
            before = copies()
            first = await session.state()
            asked = copies() - before
            kept = detached(first)
            await session.send("two")
            await session.state()
            return first, kept, asked

    first, kept, asked = trio.run(main)
    assert asked == 1
    assert first == kept
    assert len(first.results) == 1
    assert first.run is None
