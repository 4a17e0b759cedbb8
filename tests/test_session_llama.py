"""The session actor end to end over each transport: llama.cpp serving SmolLM2-135M on loopback.

No tool round here: SmolLM2's chat template has no tool support (llama.cpp's ``/props``
reports ``supports_tools: False``), so the server drops tool definitions and ``tool_choice``
(even ``required``) and the model always answers in text; the session does not set
``tool_choice`` either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs
import pytest
import trio
from _llama import LlamaServer

from actors import SessionState, spawn_session
from actors.events import (
    AssistantRecorded,
    DeltaReceived,
    Observation,
    RunFinished,
    RunStarted,
    SessionCreated,
)
from actors.observe import HookContext, LLMCallNext
from protocols import AssistantMessage, LLMRequest, LLMResponse, SystemMessage, UserMessage
from protocols.codec import decode_record
from protocols.streaming import LLMStream, TextDelta
from protocols.transports import (
    AnthropicTransport,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    Transport,
)
from runtime import open_runtime, open_sqlite_store

pytestmark = [pytest.mark.llama, pytest.mark.slow]

SYSTEM = "Answer briefly."
FIRST = "Say hello."
SECOND = "Now say goodbye."
MAX_TOKENS = 16
SESSION_ID = "e2e"
STREAM = f"session/{SESSION_ID}"


class CountingLLM:
    """The real transport, recording every call that reaches it and how it was made."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.calls: list[tuple[Literal["complete", "stream"], LLMRequest]] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls.append(("complete", request))
        return await self._transport.complete(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        self.calls.append(("stream", request))
        return self._transport.stream(request)


async def greedy(request: LLMRequest, call_next: LLMCallNext, context: HookContext) -> LLMResponse:
    """Pin greedy, short generation on every call of the session.

    The session leaves ``temperature`` and ``max_tokens`` to the provider, and llama.cpp's
    defaults are to sample at 0.8 and to generate until end of text (the OpenAI transport
    sends no limit). Greedy decoding with a small limit keeps answers reproducible and a
    run around a second. The log records the fingerprint of the unpinned request.
    """
    return await call_next(attrs.evolve(request, temperature=0.0, max_tokens=MAX_TOKENS))


def _unpinned(request: LLMRequest) -> LLMRequest:
    return attrs.evolve(request, temperature=None, max_tokens=None)


def _transport(server: LlamaServer, provider: str) -> Transport:
    config = ProviderConfig(
        provider="openai" if provider == "openai" else "anthropic",
        base_url=server.url + "/v1" if provider == "openai" else server.url,
        model="smollm2",
        retry=RetryPolicy(max_attempts=1),
    )
    return OpenAITransport(config) if provider == "openai" else AnthropicTransport(config)


async def _read_log(path: Path) -> list[object]:
    """The session's stream on disk, decoded, through a store opened afresh."""
    async with open_sqlite_store(path) as store:
        return [decode_record(r) for r in await store.read(STREAM)]


async def _first_run(transport: Transport, path: Path) -> tuple[SessionState, CountingLLM]:
    """A new session answers one input (non-streamed); checks what its user sees."""
    llm = CountingLLM(transport)
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(
            runtime,
            llm=llm,
            system_prompt=SYSTEM,
            max_rounds=3,
            llm_hooks=[greedy],
            session_id=SESSION_ID,
        )
        result = await session.send(FIRST)
        state = await session.state()

    assert result.status == "completed", result.error
    assert result.text.strip() != ""
    assert result.rounds == 1
    assert result.usage.prompt_tokens > 0
    assert result.usage.completion_tokens > 0
    assert result.usage.completion_tokens <= MAX_TOKENS
    assert [(mode, r.messages) for mode, r in llm.calls] == [
        ("complete", (SystemMessage(SYSTEM), UserMessage(FIRST)))
    ]
    assert state.transcript == (UserMessage(FIRST), AssistantMessage(content=result.text))
    assert state.results == {result.run_id: result}
    assert state.run is None
    return state, llm


def _drain(channel: trio.MemoryReceiveChannel[Observation]) -> list[Observation]:
    seen: list[Observation] = []
    while True:
        try:
            seen.append(channel.receive_nowait())
        except trio.WouldBlock:
            return seen


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_session_runs_logs_and_resumes(
    llama_server: LlamaServer, provider: str, tmp_path: Path
) -> None:
    """A session over a real transport completes a run, logs it, and resumes from the file.

    The run's answer, usage and transcript are what the user sees; the SQLite file holds
    the same story; a new runtime on that file rebuilds the same state without calling the
    model, and the next send (observed, so streamed over SSE) carries the recovered
    history to the server.
    """
    path = tmp_path / "log.sqlite"
    async with _transport(llama_server, provider) as transport:
        state, llm = await _first_run(transport, path)
        (result,) = state.results.values()

        events = await _read_log(path)
        assert [type(e) for e in events] == [
            SessionCreated,
            RunStarted,
            AssistantRecorded,
            RunFinished,
        ]
        created, started, answered, finished = events
        assert isinstance(created, SessionCreated)
        assert (created.session_id, created.system_prompt) == (SESSION_ID, SYSTEM)
        assert isinstance(started, RunStarted)
        assert (started.run_id, started.input) == (result.run_id, FIRST)
        assert isinstance(answered, AssistantRecorded)
        assert answered.message == AssistantMessage(content=result.text)
        assert answered.usage == result.usage
        assert answered.finish_reason in ("stop", "length")
        (_, sent), *_ = llm.calls
        assert (sent.temperature, sent.max_tokens) == (0.0, MAX_TOKENS)
        assert answered.request_fingerprint == _unpinned(sent).fingerprint()
        assert isinstance(finished, RunFinished)
        assert (finished.status, finished.text, finished.usage) == (
            "completed",
            result.text,
            result.usage,
        )

        resumed_llm = CountingLLM(transport)
        async with open_sqlite_store(path) as store, open_runtime(store=store, seed=2) as runtime:
            session = await spawn_session(
                runtime,
                llm=resumed_llm,
                system_prompt=SYSTEM,
                max_rounds=3,
                llm_hooks=[greedy],
                session_id=SESSION_ID,
            )
            resumed = await session.state()
            assert resumed == state
            assert resumed_llm.calls == []
            assert len(await store.read(STREAM)) == len(events)

            with session.observe() as observations:
                follow_up = await session.send(SECOND)
                seen = _drain(observations)

    assert follow_up.status == "completed", follow_up.error
    assert follow_up.text.strip() != ""
    assert follow_up.usage.completion_tokens > 0
    assert follow_up.usage.prompt_tokens > result.usage.prompt_tokens  # the history went too
    assert [(mode, r.messages) for mode, r in resumed_llm.calls] == [
        ("stream", (SystemMessage(SYSTEM), *state.transcript, UserMessage(SECOND)))
    ]
    pieces = [
        o.delta.text
        for o in seen
        if isinstance(o, DeltaReceived) and isinstance(o.delta, TextDelta)
    ]
    assert pieces
    assert "".join(pieces) == follow_up.text

    final = await _read_log(path)
    assert final[: len(events)] == events
    assert [type(e) for e in final[len(events) :]] == [RunStarted, AssistantRecorded, RunFinished]
    last_answer = final[-2]
    assert isinstance(last_answer, AssistantRecorded)
    assert last_answer.message == AssistantMessage(content=follow_up.text)
    assert last_answer.usage == follow_up.usage
