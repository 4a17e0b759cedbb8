"""Test doubles for the LLM protocol: a function LLM, and a scripted FIFO of answers on it."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import final

import trio

from protocols import LLMRequest, LLMResponse
from protocols.errors import ScriptExhaustedError
from protocols.streaming import LLMStream, StreamDelta, response_deltas

__all__ = ["FunctionLLM", "ScriptItem", "ScriptedLLM"]

#: One scripted answer: a response to return, or an exception to raise (an ``LLMError``
#: such as ``LLMRateLimitedError(...)`` to simulate a provider failure).
ScriptItem = LLMResponse | BaseException


def _describe(item: ScriptItem) -> str:
    if isinstance(item, BaseException):
        return f"raise {item!r}"
    parts: list[str] = []
    if item.content:
        text = item.content if len(item.content) <= 40 else item.content[:37] + "..."
        parts.append(f"content={text!r}")
    if item.tool_calls:
        parts.append("tool_calls=[" + ", ".join(c.name for c in item.tool_calls) + "]")
    parts.append(f"finish_reason={item.finish_reason!r}")
    return "LLMResponse(" + ", ".join(parts) + ")"


@final
class FunctionLLM:
    """An LLM whose answers are computed from the request by your function.

    The general double: :class:`ScriptedLLM` is one built on it, and so is the command
    line's demo model. Use it when answers depend on the request (echo the last message,
    call a tool whose name appears in the prompt, fail on the third call...). The
    function may be plain or async, and may raise an ``LLMError`` to simulate a provider
    failure. Every request is recorded in :attr:`requests`; a call cancelled before it
    reaches the function leaves no trace.

    Example::

        def answer(request: LLMRequest) -> LLMResponse:
            return LLMResponse(content=f"you said: {request.messages[-1].text}")

        llm = FunctionLLM(answer)

    Args:
        function (Callable[[LLMRequest], LLMResponse | Awaitable[LLMResponse]]): the answer.
        chunk_size (int): characters per streamed text or arguments fragment.
        latency (float): seconds of Trio time each answer takes (virtual under
            ``MockClock``), spread over the pieces of a streamed one, so a cancel or a
            follow-up can arrive while a call is in flight, or a person can watch.

    Raises:
        ValueError: ``latency`` is negative.
    """

    def __init__(
        self,
        function: Callable[[LLMRequest], LLMResponse | Awaitable[LLMResponse]],
        *,
        chunk_size: int = 16,
        latency: float = 0.0,
    ) -> None:
        if latency < 0:
            msg = f"latency must be >= 0 seconds, got {latency!r}"
            raise ValueError(msg)
        self._function = function
        self._chunk_size = chunk_size
        self._latency = latency
        self.requests: list[LLMRequest] = []
        """Every request received, in order."""

    def __repr__(self) -> str:
        name = getattr(self._function, "__name__", repr(self._function))
        return f"FunctionLLM({name}, requests={len(self.requests)})"

    async def _answer(self, request: LLMRequest) -> LLMResponse:
        await trio.lowlevel.checkpoint()  # a call cancelled here never reached the model
        self.requests.append(request)
        result = self._function(request)
        if inspect.isawaitable(result):
            return await result
        return result

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record ``request`` and return the function's answer, after ``latency``.

        Raises:
            Exception: whatever the function raises.
        """
        response = await self._answer(request)
        if self._latency:
            await trio.sleep(self._latency)
        return response

    def stream(self, request: LLMRequest) -> LLMStream:
        """Stream the function's answer as deltas (computed when the stream is first read),
        ``latency`` spread between them."""

        async def source() -> AsyncGenerator[StreamDelta | LLMResponse, None]:
            response = await self._answer(request)
            deltas = response_deltas(response, chunk_size=self._chunk_size)
            pause = self._latency / max(1, len(deltas))
            for delta in deltas:
                if pause:
                    await trio.sleep(pause)
                else:
                    await trio.lowlevel.checkpoint()
                yield delta
            yield response

        return LLMStream(source)


@final
class ScriptedLLM:
    """An LLM that answers from a script: a first-in, first-out queue of responses and errors.

    A :class:`FunctionLLM` whose function takes the next answer of a list. Each call
    (``complete`` or ``stream``) takes the next item: a response is returned (or streamed
    as deltas, as a provider would), an exception is raised. Every request is recorded in
    :attr:`requests`, so a test can check what the agent sent. At the end,
    :meth:`assert_complete` fails if the agent did not use the whole script.

    Example::

        llm = ScriptedLLM([
            LLMResponse(tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1}')],
                        finish_reason="tool_calls"),
            LLMRateLimitedError("slow down", status=429),
            LLMResponse(content="The answer is 2."),
        ])
        ...  # run the agent with `llm`
        llm.assert_complete()
        assert llm.requests[1].messages[-1].role == "tool"

    Args:
        script (Iterable[ScriptItem]): the answers, in order; :meth:`add` appends more.
        chunk_size (int): characters per streamed text or arguments fragment.
    """

    def __init__(self, script: Iterable[ScriptItem] = (), *, chunk_size: int = 16) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self._inner = FunctionLLM(self._next, chunk_size=chunk_size)
        self.streamed = 0
        """How many of the calls were made with :meth:`stream` rather than ``complete``."""

    @property
    def requests(self) -> list[LLMRequest]:
        """Every request received, in order (including those answered with an error)."""
        return self._inner.requests

    def __repr__(self) -> str:
        return f"ScriptedLLM(remaining={len(self._script)}, requests={len(self.requests)})"

    def add(self, *items: ScriptItem) -> None:
        """Append answers to the end of the script."""
        self._script.extend(items)

    @property
    def remaining(self) -> tuple[ScriptItem, ...]:
        """The answers not used yet, in order."""
        return tuple(self._script)

    def _next(self, request: LLMRequest) -> LLMResponse:
        if not self._script:
            msg = (
                f"ScriptedLLM was asked for answer #{len(self.requests)} but its script "
                f"held only {len(self.requests) - 1}; add more answers or check why the "
                "agent called the model again"
            )
            raise ScriptExhaustedError(msg, provider="scripted")
        item = self._script.popleft()
        if isinstance(item, BaseException):
            raise item
        return item

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record ``request`` and return the next scripted response.

        Raises:
            ScriptExhaustedError: the script is empty.
            BaseException: the next scripted item, when it is an exception.
        """
        return await self._inner.complete(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        """Stream the next scripted response as deltas.

        The request is recorded and the answer taken when the stream is first read (as a
        transport sends its request then), not when ``stream`` is called.

        Raises:
            ScriptExhaustedError: on the first read, when the script is empty.
            BaseException: on the first read, the next scripted item when it is an exception.
        """
        self.streamed += 1
        return self._inner.stream(request)

    def assert_complete(self) -> None:
        """Check that every scripted answer was used.

        Raises:
            AssertionError: answers are left; the message lists each of them.
        """
        __tracebackhide__ = True
        if self._script:
            lines = "\n".join(
                f"  {i}. {_describe(item)}" for i, item in enumerate(self._script, start=1)
            )
            msg = (
                f"ScriptedLLM: {len(self._script)} scripted answer(s) not used after "
                f"{len(self.requests)} request(s):\n{lines}"
            )
            raise AssertionError(msg)
