"""Session snapshots are caches: snapshot + tail equals the full fold, and a stale or broken
snapshot is ignored (the log is folded) rather than trusted or fatal."""

from __future__ import annotations

import logging
from unittest import mock

import attrs
import orjson
import pytest
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import actors._session._persistent as persistent
from actors import spawn_session
from actors._session._events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    FollowUpReceived,
    FollowUpsInjected,
    RunFinished,
    RunStarted,
    SessionCreated,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
)
from actors._session._snapshot import SESSION_STATE_VERSION
from actors.events import ContextCompacted
from protocols import (
    AssistantMessage,
    FollowUp,
    LLMRequest,
    LLMResponse,
    ToolCall,
    ToolOutcome,
    Usage,
)
from protocols.codec import default_registry
from protocols.errors import EventDecodeError
from runtime import Snapshot, open_runtime
from runtime.lowlevel import decode_snapshot, encode_snapshot
from runtime.testing import FunctionLLM, InMemoryEventStore
from runtime.timers import TimerFired, TimerScheduled


@st.composite
def session_events(draw: st.DrawFn) -> list[object]:
    """A valid session stream: runs with answers, tool calls (some left open), follow-ups,
    timers and children, in an order the session could have written."""
    events: list[object] = [SessionCreated(session_id="s", system_prompt="p", max_rounds=5)]
    n_runs = draw(st.integers(0, 6))
    fu = 0
    for r in range(n_runs):
        run_id = f"r{r}"
        events.append(RunStarted(run_id=run_id, input=draw(st.text(max_size=5)), max_rounds=5))
        for round_ in range(1, draw(st.integers(0, 3)) + 1):
            if draw(st.booleans()):
                fu += 1
                follow_up = FollowUp(id=f"f{fu}", content="more", kind=draw(st.sampled_from("ab")))
                events.append(FollowUpReceived(follow_up=follow_up, delivery=f"d{fu}"))
                events.append(FollowUpsInjected(run_id=run_id, ids=(follow_up.id,)))
            calls = tuple(
                ToolCall(id=f"{run_id}c{round_}{i}", name="t", arguments="{}")
                for i in range(draw(st.integers(0, 2)))
            )
            events.append(
                AssistantRecorded(
                    run_id=run_id,
                    round=round_,
                    message=AssistantMessage(content=f"a{round_}", tool_calls=calls),
                    usage=Usage(prompt_tokens=draw(st.integers(0, 9)), completion_tokens=1),
                    model=draw(st.sampled_from(["m1", "m2"])),
                    finish_reason="stop",
                    request_fingerprint="fp",
                )
            )
            for call in calls:
                events.append(
                    ToolStarted(
                        run_id=run_id,
                        call_id=call.id,
                        name="t",
                        arguments="{}",
                        idempotency_key=call.id,
                        crash_policy="retry",
                    )
                )
                if draw(st.booleans()):  # some calls stay open (a crash, a cancel)
                    outcome = ToolOutcome(call_id=call.id, tool_name="t", status="ok", content="ok")
                    events.append(ToolFinished(run_id=run_id, outcome=outcome))
        if draw(st.booleans()):
            child = f"k{r}"
            events.append(
                ChildSpawned(
                    run_id=run_id,
                    call_id="x",
                    child_id=child,
                    agent="a",
                    task="t",
                    lifecycle="ephemeral",
                )
            )
            events.append(
                ChildFinished(run_id=run_id, child_id=child, status="completed", usage=Usage())
            )
        if draw(st.booleans()):
            events.append(TimerScheduled(timer_id=f"t{r}", due_at=10.0 * r, note="n"))
        if r < n_runs - 1 or draw(st.booleans()):  # the last run may still be active
            events.append(
                RunFinished(run_id=run_id, status="completed", text="done", rounds=1, usage=Usage())
            )
        if draw(st.booleans()):
            events.append(TimerFired(timer_id=f"t{r}", due_at=10.0 * r, fired_at=10.0 * r))
    return events


def _fold(events: list[object], state: SessionState | None = None) -> SessionState:
    state = SessionState() if state is None else state
    for event in events:
        state = evolve(state, event)
    return state


def _roundtrip(state: SessionState) -> SessionState:
    """``state`` through a snapshot, its sealed chunks stored apart; checked against the
    same state encoded whole (every chunk inline)."""
    encoded, chunks = encode_snapshot(default_registry, state)
    assert encoded.type == "session.state"
    assert encoded.schema_version == SESSION_STATE_VERSION
    snapshot = Snapshot(
        stream="session/s",
        version=1,
        type=encoded.type,
        schema_version=encoded.schema_version,
        data=encoded.data,
        recorded_at=0.0,
        chunks=chunks,
    )
    decoded = decode_snapshot(default_registry, snapshot, stream="session/s")
    assert isinstance(decoded, SessionState)
    whole = default_registry.encode(state)
    assert default_registry.decode(whole.type, whole.schema_version, whole.data) == decoded
    return decoded


@settings(max_examples=examples(150), deadline=None)
@given(session_events(), st.data())
def test_snapshot_plus_tail_equals_the_full_fold(events: list[object], data: st.DataObject) -> None:
    # Chunks of 3 messages, so generated sessions cross chunk boundaries.
    with mock.patch.object(persistent, "CHUNK", 3):
        cut = data.draw(st.integers(0, len(events)))
        full = _fold(events)
        at_cut = _fold(events[:cut])
        resumed = _fold(events[cut:], _roundtrip(at_cut))
        assert resumed == full
        assert resumed.transcript == full.transcript
        assert dict(resumed.results) == dict(full.results)
        # A snapshot of a resumed state (lazy chunks, cached texts) holds the same state.
        # (Not the same bytes: a frozenset of finished timer ids may list in any order.)
        assert _roundtrip(resumed) == full


def test_a_snapshot_holds_every_field_of_the_state() -> None:
    """A field added to ``SessionState`` must be added to the snapshot too: a field the
    snapshot forgot would come back as its default after a restart."""
    compacted = ContextCompacted(
        run_id="r1", upto=4, since=0, method="summary", summary="the gist", tokens_before=900
    )
    state = attrs.evolve(
        _fold([SessionCreated(session_id="s", system_prompt="be brief", max_rounds=3)]),
        compacted=compacted,
        prompt_report=(812, 6, 4),
    )
    encoded = orjson.loads(default_registry.encode(state).data)
    assert {f.name for f in attrs.fields(SessionState)} == set(encoded)
    decoded = _roundtrip(state)
    assert decoded == state
    assert decoded.compacted == compacted
    assert decoded.prompt_report == (812, 6, 4)


def _answer(request: LLMRequest) -> LLMResponse:
    return LLMResponse(content=f"seen {len(request.messages)}")


async def _sends(store: InMemoryEventStore, n: int, **kwargs: object) -> SessionState:
    async with open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(
            runtime,
            llm=FunctionLLM(_answer),
            session_id="s",
            **kwargs,  # type: ignore[arg-type]
        )
        for i in range(n):
            await session.send(f"hello {i}")
        return await session.state()


async def test_a_session_snapshots_itself_and_reopens_from_the_snapshot() -> None:
    store = InMemoryEventStore()
    await _sends(store, 12, snapshot_every=10)
    snapshot = await store.load_snapshot("session/s")
    assert snapshot is not None
    assert snapshot.type == "session.state"
    # Every 10 events, and at the end of each run once 1 event was appended since.
    assert snapshot.version == await store.stream_version("session/s")
    reopened = await _sends(store, 1, snapshot_every=10)
    records = await store.read("session/s")
    assert reopened == _fold([default_registry.decode_record(r) for r in records])


async def test_snapshot_every_none_saves_none() -> None:
    store = InMemoryEventStore()
    await _sends(store, 3, snapshot_every=None)
    assert await store.load_snapshot("session/s") is None


async def test_a_bad_snapshot_argument_is_refused() -> None:
    async with open_runtime(seed=1) as runtime:
        with pytest.raises(ValueError, match="snapshot_every must be a positive int or None"):
            await spawn_session(runtime, llm=FunctionLLM(_answer), snapshot_every=0)


@pytest.mark.parametrize(
    ("schema_version", "data", "message"),
    [
        (SESSION_STATE_VERSION + 1, b"{}", f"schema version {SESSION_STATE_VERSION + 1} is not"),
        (SESSION_STATE_VERSION - 1, b"{}", f"schema version {SESSION_STATE_VERSION - 1} is not"),
        (SESSION_STATE_VERSION, b'{"history": 1}', "which does not decode"),
        (SESSION_STATE_VERSION, b"not json", "which does not decode"),
    ],
)
async def test_a_stale_or_broken_snapshot_is_ignored_and_the_log_folded(
    schema_version: int, data: bytes, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryEventStore()
    folded = await _sends(store, 2, snapshot_every=None)
    version = await store.stream_version("session/s")
    await store.save_snapshot(
        "session/s", version, type="session.state", schema_version=schema_version, data=data
    )
    with caplog.at_level(logging.INFO, logger="powertrio.event_sourced"):
        reopened = await _sends(store, 0, snapshot_every=None)
    assert reopened == folded
    assert message in caplog.text
    assert "session/s: ignored the snapshot at version" in caplog.text


def test_an_older_snapshot_is_not_upcast() -> None:
    """The actor ignores an older snapshot before decoding it; anyone who decodes one
    anyway is told to fold the log."""
    with pytest.raises(EventDecodeError, match="is not upcast; fold the log instead"):
        default_registry.decode("session.state", SESSION_STATE_VERSION - 1, b"{}")


def test_a_malformed_map_chunk_does_not_decode() -> None:
    """A map's chunk packs its keys apart from its values; a chunk without both, or a map
    that is not an array of texts, makes the snapshot not decode (the log is folded)."""
    state = _fold(
        [
            RunStarted(run_id="r", input="hi", max_rounds=3),
            RunFinished(run_id="r", status="completed", text="done", rounds=1, usage=Usage()),
        ]
    )
    assert _roundtrip(state) == state
    raw = orjson.loads(default_registry.encode(state).data)
    raw["results"] = ["keys-and-values-in-one"]
    with pytest.raises(EventDecodeError, match="its packed keys and packed values"):
        default_registry.decode("session.state", SESSION_STATE_VERSION, orjson.dumps(raw))
    raw["results"] = {"keys": [], "chunks": []}  # version 1's form
    with pytest.raises(EventDecodeError, match="a map's or a transcript's chunks must be a JSON"):
        default_registry.decode("session.state", SESSION_STATE_VERSION, orjson.dumps(raw))
    raw["results"] = [{"sha256": "00"}]  # version 3's form
    with pytest.raises(EventDecodeError, match=r'a chunk must be its text, or first \{"tree": its'):
        default_registry.decode("session.state", SESSION_STATE_VERSION, orjson.dumps(raw))
