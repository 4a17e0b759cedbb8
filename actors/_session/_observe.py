"""Watching and steering a session: observer events, the observer bus, and hooks.

Observers only watch: what they are told happened is already in the log (stream deltas
excepted: those are live and never persisted), and an observer that raises is contained
and counted, never allowed to disturb the run. Hooks steer: a small middleware chain
around each LLM call and each tool call that may inspect, modify, veto (raise
:class:`~actors.observe.HookVetoError`) or short-circuit (return without calling
``call_next``). A hook's own error surfaces: the run fails with it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, Protocol, TypeAlias, final

import attrs
import trio

from protocols import LLMRequest, LLMResponse, ToolCall, ToolOutcome, Usage
from protocols.streaming import StreamDelta

from ._events import RunResult

logger = logging.getLogger("powertrio.session")


@final
@attrs.frozen(kw_only=True)
class RunBegan:
    """A run started (its ``RunStarted`` event is in the log)."""

    session_id: str
    run_id: str
    input: str


@final
@attrs.frozen(kw_only=True)
class RoundBegan:
    """An LLM call of the run is about to be made."""

    session_id: str
    run_id: str
    round: int


@final
@attrs.frozen(kw_only=True)
class DeltaReceived:
    """A piece of the answer streamed in (live only: the log keeps the whole answer)."""

    session_id: str
    run_id: str
    round: int
    delta: StreamDelta


@final
@attrs.frozen(kw_only=True)
class LLMCallFinished:
    """The model's answer of one round is recorded."""

    session_id: str
    run_id: str
    round: int
    model: str
    finish_reason: str
    usage: Usage
    tool_calls: int


@final
@attrs.frozen(kw_only=True)
class ToolCallBegan:
    """A tool call is recorded as started and about to run."""

    session_id: str
    run_id: str
    call_id: str
    name: str


@final
@attrs.frozen(kw_only=True)
class ToolCallFinished:
    """A tool call's outcome is recorded."""

    session_id: str
    run_id: str
    outcome: ToolOutcome


@final
@attrs.frozen(kw_only=True)
class UsageUpdated:
    """Token totals after an LLM call."""

    session_id: str
    run_id: str
    run_usage: Usage
    session_usage: Usage


@final
@attrs.frozen(kw_only=True)
class RunEnded:
    """A run finished; ``result`` is what ``send`` returns."""

    result: RunResult


#: What observers receive.
Observation: TypeAlias = (
    RunBegan
    | RoundBegan
    | DeltaReceived
    | LLMCallFinished
    | ToolCallBegan
    | ToolCallFinished
    | UsageUpdated
    | RunEnded
)

Observer: TypeAlias = Callable[[Observation], None]
"""A callback told every :data:`Observation`; it must not block."""


@final
@attrs.frozen(kw_only=True)
class HookContext:
    """Where a hooked call happens, and what it is for."""

    session_id: str
    run_id: str
    round: int
    """The run's round the call belongs to; a summary's is the round it makes room for."""
    purpose: Literal["round", "summary"] = "round"
    """``"round"``: the model's next answer in a run. ``"summary"``: a compaction's summary
    (:class:`~actors.ContextPolicy`), a model call the application pays for too, whichever
    model the policy's summariser is."""


LLMCallNext: TypeAlias = Callable[[LLMRequest], Awaitable[LLMResponse]]
ToolCallNext: TypeAlias = Callable[[ToolCall], Awaitable[ToolOutcome]]


class LLMHook(Protocol):
    """Middleware around an LLM call.

    Call ``await call_next(request)`` (perhaps with a changed request) and return its
    response (perhaps changed); or return a response without calling it; or raise
    :class:`~actors.observe.HookVetoError` to stop the run.
    """

    async def __call__(
        self, request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse: ...


class ToolHook(Protocol):
    """Middleware around one tool call.

    Call ``await call_next(call)`` (perhaps with changed arguments) and return its outcome;
    or return an outcome without running the tool; or raise
    :class:`~actors.observe.HookVetoError`, which the model reads as a denied result.
    """

    async def __call__(
        self, call: ToolCall, call_next: ToolCallNext, context: HookContext
    ) -> ToolOutcome: ...


def chain_llm_hooks(
    hooks: Sequence[LLMHook], innermost: LLMCallNext, context: HookContext
) -> LLMCallNext:
    """``innermost`` wrapped by ``hooks``, the first hook outermost."""
    call = innermost
    for hook in reversed(hooks):
        call = _bind_llm(hook, call, context)
    return call


def _bind_llm(hook: LLMHook, call_next: LLMCallNext, context: HookContext) -> LLMCallNext:
    async def call(request: LLMRequest) -> LLMResponse:
        return await hook(request, call_next, context)

    return call


def chain_tool_hooks(
    hooks: Sequence[ToolHook], innermost: ToolCallNext, context: HookContext
) -> ToolCallNext:
    """``innermost`` wrapped by ``hooks``, the first hook outermost."""
    call = innermost
    for hook in reversed(hooks):
        call = _bind_tool(hook, call, context)
    return call


def _bind_tool(hook: ToolHook, call_next: ToolCallNext, context: HookContext) -> ToolCallNext:
    async def call(tool_call: ToolCall) -> ToolOutcome:
        return await hook(tool_call, call_next, context)

    return call


@final
class ObserverBus:
    """Fans observations out to callbacks and channels; lives as long as the session handle.

    It outlives restarts of the session actor, so observers keep watching a run that
    resumes from the log.
    """

    __slots__ = ("_callbacks", "_channels", "active", "dropped", "errors")

    def __init__(self, callbacks: Sequence[Observer] = ()) -> None:
        self._callbacks = tuple(callbacks)
        # A list once someone opens a channel: most sessions never do, and a million
        # registered ones would each hold an empty list.
        self._channels: list[trio.MemorySendChannel[Observation]] | tuple[()] = ()
        self.active = bool(self._callbacks)
        """Whether anyone listens (the session streams answers only then). A field kept
        as channels open and close, not a property: the session reads it on every
        append."""
        self.errors = 0
        """Observer callbacks that raised (each one is logged and otherwise ignored)."""
        self.dropped = 0
        """Observations not delivered to a channel whose buffer was full."""

    def publish(self, observation: Observation) -> None:
        """Tell every observer; never raises."""
        for callback in self._callbacks:
            try:
                callback(observation)
            except Exception:
                self.errors += 1
                logger.warning(
                    "session observer %r raised on %s; ignored",
                    callback,
                    type(observation).__name__,
                    exc_info=True,
                )
        for channel in self._channels:
            try:
                channel.send_nowait(observation)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self.dropped += 1

    def backlog(self) -> int:
        """The most observations a channel holds unread (a reader waiting for the next
        is handed it at once and holds none): each costs its reader a schedule point."""
        return max((c.statistics().current_buffer_used for c in self._channels), default=0)

    @contextmanager
    def channel(self, buffer: int) -> Iterator[trio.MemoryReceiveChannel[Observation]]:
        """A receive channel of observations while the ``with`` block lasts."""
        send, receive = trio.open_memory_channel[Observation](buffer)
        channels = self._channels
        if isinstance(channels, tuple):
            channels = self._channels = []
        channels.append(send)
        self.active = True
        try:
            yield receive
        finally:
            channels.remove(send)
            self.active = bool(self._callbacks or channels)
            send.close()
