"""The transports against a real server: llama.cpp (xllamacpp) serving SmolLM2-135M on loopback."""

from __future__ import annotations

import httpx
import pytest
import trio
from _llama import LlamaServer

from protocols import LLMRequest, LLMResponse, SystemMessage, UserMessage
from protocols.errors import LLMContextOverflowError
from protocols.streaming import FinishDelta, TextDelta, UsageDelta
from protocols.transports import (
    AnthropicTransport,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    open_http_client,
)

pytestmark = pytest.mark.llama

REQUEST = LLMRequest(
    messages=[SystemMessage("Answer briefly."), UserMessage("Say hello.")],
    max_tokens=8,
    temperature=0.0,
)


def _config(server: LlamaServer, provider: str) -> ProviderConfig:
    base = server.url + "/v1" if provider == "openai" else server.url
    return ProviderConfig(
        provider="openai" if provider == "openai" else "anthropic",
        base_url=base,
        model="smollm2",
        retry=RetryPolicy(max_attempts=1),
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_complete(llama_server: LlamaServer, provider: str) -> None:
    """A non-streamed call returns text, a finish reason and usage counts."""
    config = _config(llama_server, provider)
    cls = OpenAITransport if provider == "openai" else AnthropicTransport
    async with cls(config) as transport:
        response = await transport.complete(REQUEST)
    assert response.content.strip() != ""
    assert response.finish_reason in ("stop", "length")
    assert response.usage.completion_tokens > 0
    assert response.usage.completion_tokens <= 8
    assert response.usage.prompt_tokens > 0
    assert response.tool_calls == ()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_stream(llama_server: LlamaServer, provider: str) -> None:
    """An SSE stream yields text deltas, usage and a finish; they assemble to the response."""
    config = _config(llama_server, provider)
    cls = OpenAITransport if provider == "openai" else AnthropicTransport
    deltas = []
    async with cls(config) as transport, transport.stream(REQUEST) as stream:
        async for delta in stream:
            deltas.append(delta)
        response = await stream.final_response()
    texts = [d.text for d in deltas if isinstance(d, TextDelta)]
    assert len(texts) >= 2
    assert response.content == "".join(texts)
    assert [d.reason for d in deltas if isinstance(d, FinishDelta)] == [response.finish_reason]
    usages = [d.usage for d in deltas if isinstance(d, UsageDelta)]
    assert usages
    assert usages[-1] == response.usage
    assert response.usage.completion_tokens > 0
    assert isinstance(response, LLMResponse)


async def _slot_busy(server: LlamaServer) -> bool:
    async with httpx.AsyncClient() as client:
        slots = (await client.get(server.url + "/slots")).json()
    return any(slot.get("is_processing") for slot in slots)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_cancel_mid_stream_closes_it(llama_server: LlamaServer, provider: str) -> None:
    """Cancelling a consumer mid-stream closes the HTTP stream: the server stops generating.

    The request asks for 1500 tokens (many seconds on two shared cores); after three
    deltas the consumer is cancelled. The server's slots must all be idle again soon,
    which happens only when it notices the closed connection.
    """
    config = _config(llama_server, provider)
    cls = OpenAITransport if provider == "openai" else AnthropicTransport
    long_request = LLMRequest(
        messages=[UserMessage("Write a very long story about a dragon, with many chapters.")],
        max_tokens=1500,
        temperature=0.8,
    )
    seen = 0
    async with open_http_client() as client:
        transport = cls(config, client=client)
        with trio.move_on_after(60) as scope:
            async with transport.stream(long_request) as stream:
                async for delta in stream:
                    if isinstance(delta, TextDelta):
                        seen += 1
                    if seen == 3:
                        assert await _slot_busy(llama_server)
                        scope.cancel()
        assert scope.cancelled_caught
        assert seen == 3
        start = trio.current_time()
        while await _slot_busy(llama_server):
            assert trio.current_time() - start < 5, "the server kept generating"
            await trio.sleep(0.05)


async def test_context_overflow_is_typed(llama_server: LlamaServer) -> None:
    """A prompt longer than the server's 2048-token context is an llm.context_overflow."""
    config = _config(llama_server, "openai")
    huge = LLMRequest(messages=[UserMessage("hello " * 5000)], max_tokens=4)
    async with OpenAITransport(config) as transport:
        with pytest.raises(LLMContextOverflowError) as info:
            await transport.complete(huge)
    assert info.value.code == "llm.context_overflow"
    assert info.value.status == 400
    assert str(info.value).startswith("openai: HTTP 400: ")
    assert "context" in str(info.value)
