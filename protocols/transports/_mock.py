"""A transport that answers from a function: the complete test double for a provider."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import final

import trio

from protocols._llm import LLMRequest, LLMResponse
from protocols._llm_stream import LLMStream, StreamDelta, response_deltas

from ._base import Transport

__all__ = ["MockHandler", "MockTransport"]

#: Computes the response to a request, synchronously or not; it may raise any LLMError.
MockHandler = Callable[[LLMRequest], LLMResponse | Awaitable[LLMResponse]]


@final
class MockTransport(Transport):
    """Answers every request with ``handler(request)``, as httpx's ``MockTransport`` does.

    The handler may be a plain or an async function, and may raise (an ``LLMError`` to
    simulate a provider failure). Streams split the handler's response into deltas with
    :func:`~protocols.response_deltas`. No network, no retries.

    Args:
        handler (MockHandler): request -> response (or an awaitable of one).
        chunk_size (int): characters per streamed text or arguments fragment.
    """

    def __init__(self, handler: MockHandler, *, chunk_size: int = 16) -> None:
        self._handler = handler
        self._chunk_size = chunk_size

    def __repr__(self) -> str:
        return f"MockTransport({getattr(self._handler, '__name__', self._handler)!r})"

    async def _answer(self, request: LLMRequest) -> LLMResponse:
        result = self._handler(request)
        if inspect.isawaitable(result):
            return await result
        await trio.lowlevel.checkpoint()
        return result

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The handler's response to ``request``.

        Raises:
            Exception: whatever the handler raises.
        """
        return await self._answer(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        """The handler's response, streamed as deltas; the handler runs on entering."""
        return LLMStream(lambda: self._source(request))

    async def _source(
        self, request: LLMRequest
    ) -> AsyncGenerator[StreamDelta | LLMResponse, None]:
        response = await self._answer(request)
        for delta in response_deltas(response, chunk_size=self._chunk_size):
            await trio.lowlevel.checkpoint()
            yield delta
        yield response
