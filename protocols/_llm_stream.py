"""Streaming from a model: the deltas, the assembler that folds them into a response, the
stream object a transport returns, and the ``LLM`` protocol every model implements.

Kept apart from the request and response types (``_llm``), which know nothing of streams.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Literal, Protocol, Self, TypeAlias, final

import attrs
import trio

from ._llm import (
    FinishReason,
    LLMRequest,
    LLMResponse,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from .errors import LLMMalformedStreamError

__all__ = [
    "FinishDelta",
    "LLM",
    "LLMStream",
    "StreamAssembler",
    "StreamDelta",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "UsageDelta",
    "response_deltas",
]


# --- stream deltas -------------------------------------------------------------------


@final
@attrs.frozen
class TextDelta:
    """The next piece of the answer's text."""

    text: str
    """The new text."""
    type: Literal["text"] = attrs.field(default="text", kw_only=True)
    """The union tag; always ``"text"``."""


@final
@attrs.frozen(kw_only=True)
class ThinkingDelta:
    """The next piece of a reasoning block (Anthropic extended thinking)."""

    index: int
    """Which reasoning block this extends, counting from 0 within the response."""
    text: str = ""
    """New reasoning text (or the data of a redacted block)."""
    signature: str | None = None
    """The block's signature, when this delta carries it."""
    redacted: bool = False
    """True when the block is a redacted one."""
    type: Literal["thinking"] = "thinking"
    """The union tag; always ``"thinking"``."""


@final
@attrs.frozen(kw_only=True)
class ToolCallDelta:
    """A fragment of a tool call: the first fragment of a call carries its id and name.

    Fragments of one call share an ``index``; their ``arguments`` concatenate to the full
    JSON text.
    """

    index: int
    """Which tool call this extends, counting from 0 within the response."""
    id: str | None = None
    """The call id (first fragment only)."""
    name: str | None = None
    """The tool name (first fragment only)."""
    arguments: str = ""
    """The next piece of the arguments' JSON text."""
    type: Literal["tool_call"] = "tool_call"
    """The union tag; always ``"tool_call"``."""


@final
@attrs.frozen
class UsageDelta:
    """Token counts reported during the stream; later reports replace earlier ones."""

    usage: Usage
    """The counts so far."""
    type: Literal["usage"] = attrs.field(default="usage", kw_only=True)
    """The union tag; always ``"usage"``."""


@final
@attrs.frozen
class FinishDelta:
    """The model stopped; the stream ends soon after."""

    reason: FinishReason
    """Why the model stopped."""
    type: Literal["finish"] = attrs.field(default="finish", kw_only=True)
    """The union tag; always ``"finish"``."""


#: One item of a response stream, tagged by ``type``.
StreamDelta: TypeAlias = TextDelta | ThinkingDelta | ToolCallDelta | UsageDelta | FinishDelta


@final
@attrs.define(eq=False)
class StreamAssembler:
    """Folds stream deltas into the final :class:`LLMResponse`.

    Transports and test doubles share it so every stream assembles the same way: text
    concatenates, tool-call fragments join by index, the last usage report wins.
    """

    _text: list[str] = attrs.field(init=False, factory=list)
    _calls: dict[int, list[str]] = attrs.field(init=False, factory=dict)
    _call_heads: dict[int, tuple[str, str]] = attrs.field(init=False, factory=dict)
    _thinking: dict[int, list[str]] = attrs.field(init=False, factory=dict)
    _thinking_meta: dict[int, tuple[str | None, bool]] = attrs.field(init=False, factory=dict)
    usage: Usage = attrs.field(init=False, factory=Usage)
    """The last usage reported."""
    finish_reason: FinishReason | None = attrs.field(init=False, default=None)
    """The finish reason reported, if any."""

    def add(self, delta: StreamDelta) -> None:
        """Fold one delta in.

        Raises:
            LLMMalformedStreamError: a tool-call fragment arrives for a call whose first
                fragment (with id and name) was never seen.
        """
        if isinstance(delta, TextDelta):
            self._text.append(delta.text)
        elif isinstance(delta, ToolCallDelta):
            if delta.index not in self._call_heads:
                if delta.id is None or delta.name is None:
                    msg = (
                        f"tool call fragment #{delta.index} arrived before the fragment "
                        "carrying its id and name"
                    )
                    raise LLMMalformedStreamError(msg)
                self._call_heads[delta.index] = (delta.id, delta.name)
                self._calls[delta.index] = []
            self._calls[delta.index].append(delta.arguments)
        elif isinstance(delta, ThinkingDelta):
            self._thinking.setdefault(delta.index, []).append(delta.text)
            old_signature, old_redacted = self._thinking_meta.get(delta.index, (None, False))
            self._thinking_meta[delta.index] = (
                delta.signature if delta.signature is not None else old_signature,
                old_redacted or delta.redacted,
            )
        elif isinstance(delta, UsageDelta):
            self.usage = delta.usage
        else:
            self.finish_reason = delta.reason

    def response(self, *, model: str = "", id: str | None = None) -> LLMResponse:
        """The response assembled from every delta so far.

        Args:
            model (str): the model name the provider reported.
            id (str | None): the provider's response id.

        Returns:
            (LLMResponse): the response; ``finish_reason`` defaults to ``tool_calls`` when
            calls were made and no finish was reported, else ``stop``.
        """
        calls = tuple(
            ToolCall(
                id=self._call_heads[i][0],
                name=self._call_heads[i][1],
                arguments="".join(self._calls[i]),
            )
            for i in sorted(self._call_heads)
        )
        thinking = tuple(
            ThinkingBlock(
                thinking="".join(self._thinking[i]),
                signature=self._thinking_meta[i][0],
                redacted=self._thinking_meta[i][1],
            )
            for i in sorted(self._thinking)
        )
        reason: FinishReason = self.finish_reason or ("tool_calls" if calls else "stop")
        return LLMResponse(
            content="".join(self._text),
            tool_calls=calls,
            finish_reason=reason,
            usage=self.usage,
            model=model,
            thinking=thinking,
            id=id,
        )


def response_deltas(response: LLMResponse, *, chunk_size: int = 16) -> tuple[StreamDelta, ...]:
    """Split a whole response into the deltas a provider would stream for it.

    Test doubles use it to stream scripted responses; assembling the deltas with
    :class:`StreamAssembler` gives back ``response`` (apart from ``model`` and ``id``).

    Args:
        response (LLMResponse): the response to split.
        chunk_size (int): characters per text or arguments fragment; must be positive.

    Returns:
        (tuple[StreamDelta, ...]): thinking, text, tool-call fragments, usage, finish.

    Raises:
        ValueError: ``chunk_size`` is not positive.
    """
    if chunk_size <= 0:
        msg = f"chunk_size must be positive, got {chunk_size}"
        raise ValueError(msg)

    def pieces(text: str) -> list[str]:
        return [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)] or [""]

    out: list[StreamDelta] = []
    for i, block in enumerate(response.thinking):
        out.append(
            ThinkingDelta(
                index=i,
                text=block.thinking,
                signature=block.signature,
                redacted=block.redacted,
            )
        )
    if response.content:
        out.extend(TextDelta(p) for p in pieces(response.content))
    for i, call in enumerate(response.tool_calls):
        for j, p in enumerate(pieces(call.arguments)):
            if j == 0:
                out.append(ToolCallDelta(index=i, id=call.id, name=call.name, arguments=p))
            else:
                out.append(ToolCallDelta(index=i, arguments=p))
    out.append(UsageDelta(response.usage))
    out.append(FinishDelta(response.finish_reason))
    return tuple(out)


# --- the stream object and the protocol ----------------------------------------------


@final
class LLMStream:
    """A response being streamed: an async context manager and an async iterator of deltas.

    Use it as::

        async with llm.stream(request) as stream:
            async for delta in stream:
                ...
            response = await stream.final_response()

    Entering is a cancel point but lets no other task run first: the first read, which
    sends the request, follows at once. Leaving the ``async with`` block (normally, by an
    error or by cancellation) closes the underlying source at once, which for HTTP
    transports closes the connection, so the provider stops generating.
    :meth:`final_response` reads whatever is left and returns the assembled
    :class:`LLMResponse`; it can be called without iterating at all.

    Sources are async generators yielding deltas and, last, the assembled
    :class:`LLMResponse`; transports and test doubles build them. Users get streams from
    :meth:`LLM.stream`, they do not build them.

    Args:
        source (Callable[[], AsyncIterator[StreamDelta | LLMResponse]]): opens the source; it
            is called on entering the ``async with`` block, not before.
    """

    def __init__(self, source: Callable[[], AsyncIterator[StreamDelta | LLMResponse]]) -> None:
        self._open = source
        self._source: AsyncIterator[StreamDelta | LLMResponse] | None = None
        self._response: LLMResponse | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        if self._source is not None or self._closed:
            msg = "an LLMStream can be entered only once; ask the LLM for a new stream"
            raise RuntimeError(msg)
        self._source = self._open()
        # A cancel point, not a schedule point: the first read sends the request, and a
        # trip through the scheduler here would only delay it (time to first token).
        await trio.lowlevel.checkpoint_if_cancelled()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the source (and its HTTP connection) now; safe to call twice."""
        self._closed = True
        source, self._source = self._source, None
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
        else:
            await trio.lowlevel.checkpoint()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamDelta:
        if self._response is not None:
            await trio.lowlevel.checkpoint()
            raise StopAsyncIteration
        if self._source is None:
            msg = "iterate an LLMStream inside `async with llm.stream(request) as stream:`"
            raise RuntimeError(msg)
        try:
            item = await self._source.__anext__()
        except StopAsyncIteration:
            msg = "the stream ended before the response was complete"
            raise LLMMalformedStreamError(msg) from None
        if isinstance(item, LLMResponse):
            self._response = item
            raise StopAsyncIteration
        return item

    @property
    def response(self) -> LLMResponse | None:
        """The assembled response once the stream is exhausted, else ``None``."""
        return self._response

    async def final_response(self) -> LLMResponse:
        """Read the rest of the stream and return the assembled response.

        Returns:
            (LLMResponse): the whole answer.

        Raises:
            LLMError: the source failed (any subclass, e.g. ``LLMMalformedStreamError``).
            RuntimeError: called outside the ``async with`` block.
        """
        async for _ in self:
            pass
        assert self._response is not None  # the loop ends only once the response arrived
        return self._response


class LLM(Protocol):
    """Anything that answers LLM requests: a provider transport or a test double.

    The session actor depends on this protocol only; it never builds an HTTP client.
    """

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` in one piece.

        Raises:
            LLMError: the call failed; the subclass and its ``code`` say how.
        """
        ...

    def stream(self, request: LLMRequest) -> LLMStream:
        """Answer ``request`` as a stream of deltas; see :class:`LLMStream`.

        Nothing is sent before the stream's ``async with`` block is entered.
        """
        ...
