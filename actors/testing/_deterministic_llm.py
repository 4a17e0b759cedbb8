"""A scripted LLM that behaves like a deterministic model: same request, same answer."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, final

import attrs
import trio

from protocols import LLM, LLMRequest, LLMResponse, Message, SystemMessage
from protocols.lowlevel import EMPTY_CHAIN, chain_messages
from protocols.streaming import LLMStream
from runtime.testing import FunctionLLM, ScriptItem

if TYPE_CHECKING:
    from runtime import EventStore

__all__ = ["DeterministicLLM", "LLMCall"]

#: The session on whose behalf the current task calls the model; the harness sets it
#: from an LLM hook, so calls of sub-agents sharing one model are told apart.
CALLER: ContextVar[str | None] = ContextVar("powertrio_testing_caller", default=None)


@final
@attrs.frozen(kw_only=True)
class LLMCall:
    """One request a :class:`DeterministicLLM` answered (or failed)."""

    index: int
    """0-based, in the order the calls were made."""
    request: LLMRequest
    fingerprint: str
    """``request.fingerprint()``: what replay and the log compare."""
    answer: ScriptItem
    """The response returned, or the exception raised."""
    repeated: bool
    """The same request was asked before (it got the same answer again)."""
    log_position: int | None
    """The store's head position when the call was made (``None`` without a store): what
    the log held then, for :func:`assert_no_repeated_requests`."""
    caller: str | None = None
    """The id of the session that made the call, when known (the harness knows it)."""


@final
class DeterministicLLM:
    """An LLM that answers a script in order, one item per *distinct* request.

    A real model asked the same request twice may answer differently; a test needs a
    model that does not, so that a run which crashed and resumed can be compared with
    one that did not. This one gives each new request (by fingerprint) the next item of
    the script, and a request it has seen before the answer it gave then. After the
    script it asks ``model`` (an app's own model logic, such as a ``FunctionLLM``) if one
    is given, else answers ``then``, a final answer, so every run ends.

    Of the three LLM doubles (``FunctionLLM``, ``ScriptedLLM`` on it, and this one, also
    built on ``FunctionLLM``), this is the one for tests with crashes and restarts, such
    as the :class:`RuntimeHarness`'s: a ``ScriptedLLM`` would give a retried request the
    next answer instead.

    Each call waits ``latency`` seconds of Trio time first (virtual under ``MockClock``),
    so operations can happen while a call is in flight. Every call is recorded in
    :attr:`calls`, with the store's head position when ``store`` is given.

    Example::

        llm = DeterministicLLM(
            [LLMResponse(tool_calls=[ToolCall(id="c1", name="add", arguments="{}")]),
             LLMServerError("upstream 503", status=503),
             LLMResponse(content="done")],
            latency=1.0,
        )

    Args:
        script (Iterable[ScriptItem]): responses and exceptions, in order.
        then (LLMResponse | None): the answer after the script; ``None`` raises
            ``ScriptExhaustedError`` instead, as :class:`ScriptedLLM` does.
        latency (float): seconds each call takes on the Trio clock.
        store (EventStore | None): the log whose head position each call records.
        chunk_size (int): characters per streamed fragment.
        model (LLM | None): answers each new request after the script (its answers are
            remembered like the script's); ``then`` is not used when it is given.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        then: LLMResponse | None = LLMResponse(content="done"),  # noqa: B008  # frozen
        latency: float = 0.0,
        store: EventStore | None = None,
        chunk_size: int = 16,
        model: LLM | None = None,
    ) -> None:
        if latency < 0:
            msg = f"latency must be >= 0 seconds, got {latency!r}"
            raise ValueError(msg)
        self._script: deque[ScriptItem] = deque(script)
        self._then = then
        self._latency = latency
        self._store = store
        self._model = model
        # (chain so far, id of the next message) -> (chain after it, that message): a
        # request repeats its conversation's earlier messages, so each is hashed once and
        # a session of months costs the kit a lookup per message, not a hash.
        self._chain: dict[tuple[str, int], tuple[str, Message]] = {}
        # Each caller's last conversation and its chain: the next request of a session
        # extends it, which a tuple comparison (in C, by identity first) confirms.
        self._last: dict[str | None, tuple[Sequence[Message], str]] = {}
        self._answers: dict[str, ScriptItem] = {}
        self._inner = FunctionLLM(self._answer, chunk_size=chunk_size)
        self.calls: list[LLMCall] = []
        """Every call, in order."""

    def __repr__(self) -> str:
        return f"DeterministicLLM(remaining={len(self._script)}, calls={len(self.calls)})"

    @property
    def requests(self) -> tuple[LLMRequest, ...]:
        """Every request received, in order."""
        return tuple(call.request for call in self.calls)

    @property
    def remaining(self) -> tuple[ScriptItem, ...]:
        """The script items no request has taken yet."""
        return tuple(self._script)

    def _messages_digest(self, request: LLMRequest) -> str:
        """``chain_messages(EMPTY_CHAIN, ...)`` of the messages after the leading system
        ones, as ``LLMRequest.fingerprint`` computes it, from the memo."""
        messages = request.messages
        lead = 0
        while lead < len(messages) and isinstance(messages[lead], SystemMessage):
            lead += 1
        rest = messages[lead:]
        caller = CALLER.get()
        last, last_digest = self._last.get(caller, ((), EMPTY_CHAIN))
        if len(last) <= len(rest) and rest[: len(last)] == last:
            digest = chain_messages(last_digest, rest[len(last) :])
        else:
            digest = self._chained(rest)
        self._last[caller] = (rest, digest)
        return digest

    def _chained(self, rest: Sequence[Message]) -> str:
        digest, memo = EMPTY_CHAIN, self._chain
        for message in rest:
            key = (digest, id(message))
            hit = memo.get(key)
            if hit is not None and hit[1] is message:
                digest = hit[0]
            else:
                after = chain_messages(digest, (message,))
                memo[key] = (after, message)
                digest = after
        return digest

    async def _answer(self, request: LLMRequest) -> LLMResponse:
        fingerprint = request.fingerprint(messages_digest=self._messages_digest(request))
        position = None if self._store is None else await self._store.head_position()
        repeated = fingerprint in self._answers
        if not repeated:
            if self._script:
                self._answers[fingerprint] = self._script.popleft()
            elif self._model is not None:
                try:
                    answer: ScriptItem = await self._model.complete(request)
                except Exception as exc:  # the model's error is its answer, as a script's
                    answer = exc
                self._answers[fingerprint] = answer
            elif self._then is not None:
                self._answers[fingerprint] = self._then
            else:
                # Not memoised: a later script item (add) may still answer it.
                from protocols.errors import ScriptExhaustedError  # noqa: PLC0415

                msg = f"DeterministicLLM: no script item left for call #{len(self.calls) + 1}"
                exhausted = ScriptExhaustedError(msg, provider="scripted")
                self._record(request, fingerprint, exhausted, repeated, position)
                raise exhausted
        item = self._answers[fingerprint]
        self._record(request, fingerprint, item, repeated, position)
        await trio.sleep(self._latency)
        if isinstance(item, BaseException):
            raise item
        return item

    def _record(
        self,
        request: LLMRequest,
        fingerprint: str,
        item: ScriptItem,
        repeated: bool,
        position: int | None,
    ) -> None:
        self.calls.append(
            LLMCall(
                index=len(self.calls),
                caller=CALLER.get(),
                request=request,
                fingerprint=fingerprint,
                answer=item,
                repeated=repeated,
                log_position=position,
            )
        )

    def add(self, *items: ScriptItem) -> None:
        """Append items to the end of the script."""
        self._script.extend(items)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` (see the class docstring).

        Raises:
            BaseException: the script item, when it is an exception.
            ScriptExhaustedError: the script is used up and ``then`` is ``None``.
        """
        return await self._inner.complete(request)

    def stream(self, request: LLMRequest) -> LLMStream:
        """Stream the answer to ``request`` as deltas (taken when the stream is first read)."""
        return self._inner.stream(request)

    def assert_complete(self) -> None:
        """Check that every script item was used.

        Raises:
            AssertionError: items are left; the message counts them.
        """
        __tracebackhide__ = True
        if self._script:
            msg = (
                f"DeterministicLLM: {len(self._script)} script item(s) not used after "
                f"{len(self.calls)} call(s): {list(self._script)!r}"
            )
            raise AssertionError(msg)
