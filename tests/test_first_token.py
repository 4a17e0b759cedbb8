"""A streamed model answer records its time to first token; old logs still decode."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import trio

from actors import replay_session, spawn_session
from actors.events import AssistantRecorded, Observation
from protocols import LLMRequest, LLMResponse
from protocols.codec import decode as decode_event
from protocols.codec import decode_record
from protocols.streaming import LLMStream, StreamDelta, TextDelta
from runtime import open_runtime
from runtime.testing import InMemoryEventStore, ScriptedLLM


class _SlowFirstToken:
    """A model whose first delta comes 0.25 s (Trio time) after the request goes out."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise AssertionError("an observed session streams")

    def stream(self, request: LLMRequest) -> LLMStream:
        async def source() -> AsyncIterator[StreamDelta | LLMResponse]:
            await trio.sleep(0.25)
            yield TextDelta("hello ")
            await trio.sleep(1.0)
            yield TextDelta("there")
            yield LLMResponse(content="hello there", model="m")

        return LLMStream(source)


async def _assistants(store: InMemoryEventStore, session_id: str) -> list[AssistantRecorded]:
    events = [decode_record(r) for r in await store.read(f"session/{session_id}")]
    return [e for e in events if isinstance(e, AssistantRecorded)]


async def test_a_streamed_answer_records_its_first_token_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Observation] = []
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=_SlowFirstToken(), observers=[seen.append], session_id="ttft"
        )
        result = await session.send("hi")
    assert result.status == "completed"
    (recorded,) = await _assistants(store, "ttft")
    # The runtime's clock (virtual here): the first delta, not the whole answer (1.25 s).
    assert recorded.first_token_s == 0.25
    # A measurement, not part of the request: the session replays as it was.
    assert (await replay_session(store, "ttft")).checked == 1


async def test_an_answer_not_streamed_records_no_first_token_time() -> None:
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=ScriptedLLM([LLMResponse(content="ok")]), session_id="plain"
        )
        await session.send("hi")
    (recorded,) = await _assistants(store, "plain")
    assert recorded.first_token_s is None


def test_an_assistant_event_logged_before_the_field_decodes() -> None:
    old = {
        "run_id": "r1",
        "round": 1,
        "message": {"content": "ok", "tool_calls": [], "thinking": []},
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        "model": "m",
        "finish_reason": "stop",
        "request_fingerprint": "f",
    }
    event = decode_event("session.assistant", 1, orjson.dumps(old))
    assert isinstance(event, AssistantRecorded)
    assert event.first_token_s is None
    assert event.message.content == "ok"
