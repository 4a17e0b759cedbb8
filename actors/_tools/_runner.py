"""The tool runner: runs a round of a model's tool calls, every failure becoming an outcome."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, final

import attrs
import orjson
import trio

from protocols import ToolCall, ToolOutcome, ToolStatus
from protocols.errors import (
    PowertrioError,
    ToolArgumentsError,
    ToolError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from protocols.lowlevel import (
    denied_outcome,
    idempotency_key,
    interrupted_outcome,
    parse_tool_arguments,
    unwrap_single_error,
)
from runtime.lowlevel import run_sync_in_thread

from ._tool import _CONVERTER, Tool, ToolContext, ToolRegistry

if TYPE_CHECKING:
    from runtime import Runtime

logger = logging.getLogger("powertrio.session")

__all__ = ["CallWrapper", "ToolRunner", "open_tool_runner", "run_tool_calls"]

CallWrapper = Callable[
    [ToolCall, Callable[[ToolCall], Awaitable[ToolOutcome]]], Awaitable[ToolOutcome]
]
"""Runs around each call: ``wrap(call, run)`` must return ``await run(call)`` or an outcome."""


@final
@attrs.frozen
class ToolRunner:
    """Runs rounds of tool calls against one registry, with an asyncio loop if one is needed.

    Get one from :func:`open_tool_runner`, which opens the trio-asyncio loop only when the
    registry holds an asyncio tool and no loop is running yet.
    """

    registry: ToolRegistry
    """The tools this runner serves."""

    async def run(
        self,
        calls: Sequence[ToolCall],
        *,
        session_id: str,
        limit: int = 8,
        approved: Collection[str] = frozenset(),
        idempotency_keys: Mapping[str, str] | None = None,
        cancel_scope: trio.CancelScope | None = None,
    ) -> list[ToolOutcome]:
        """Run one round of calls; see :func:`run_tool_calls` for the arguments."""
        return await run_tool_calls(
            calls,
            self.registry,
            session_id=session_id,
            limit=limit,
            approved=approved,
            idempotency_keys=idempotency_keys,
            cancel_scope=cancel_scope,
        )


@asynccontextmanager
async def open_tool_runner(registry: ToolRegistry) -> AsyncIterator[ToolRunner]:
    """Open a :class:`ToolRunner`, owning a trio-asyncio loop if the registry needs one.

    Without an asyncio tool nothing is opened, so plain Trio programs pay nothing.

    Args:
        registry (ToolRegistry): the tools to serve.

    Yields:
        The runner, valid inside the ``async with`` block.
    """
    if any(t.kind == "asyncio" for t in registry) and _loop_missing():
        import trio_asyncio  # noqa: PLC0415 - only asyncio tools pay for loading it

        with unwrap_single_error():  # the loop's nursery would wrap the block's error
            async with trio_asyncio.open_loop():
                yield ToolRunner(registry)
    else:
        await trio.lowlevel.checkpoint()
        yield ToolRunner(registry)


def _loop_missing() -> bool:
    """Whether no trio-asyncio loop runs here; imports trio-asyncio only if it was never loaded.

    ``import actors`` does not load trio-asyncio (nor asyncio through it): a program
    without asyncio tools never pays for it. If it was never imported, no loop can be open.
    """
    module = sys.modules.get("trio_asyncio")
    return module is None or module.current_loop.get() is None


async def run_tool_calls(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    *,
    session_id: str,
    limit: int = 8,
    approved: Collection[str] = frozenset(),
    idempotency_keys: Mapping[str, str] | None = None,
    cancel_scope: trio.CancelScope | None = None,
    wrap: CallWrapper | None = None,
    runtime: Runtime | None = None,
    traceparent_of: Callable[[str], str | None] | None = None,
) -> list[ToolOutcome]:
    """Run one round of tool calls concurrently and return one outcome per call, in order.

    Nothing a model sends can make this raise: an unknown tool, non-JSON or invalid
    arguments, a tool that raises or times out all become outcomes the model can read.
    Cancelling ``cancel_scope`` interrupts the round: running async tools are cancelled,
    sync tools are abandoned (their :class:`ToolContext` is marked cancelled and their late
    result discarded), and every unfinished call gets an ``interrupted`` outcome. A cancel
    from further out (the caller's own scope) propagates as usual.

    Args:
        calls (Sequence[ToolCall]): the model's calls of this round.
        registry (ToolRegistry): the tools available.
        session_id (str): the caller's identity, stamped into each :class:`ToolContext`.
        limit (int): the most calls running at once.
        approved (Collection[str]): ids of calls a human approved; a call to a tool that
            ``needs_approval`` and is not listed gets a ``denied`` outcome and never runs.
        idempotency_keys (Mapping[str, str] | None): call id → key, as recorded in the
            ``ToolStarted`` events; missing ids get :func:`idempotency_key` of the session
            and call ids.
        cancel_scope (trio.CancelScope | None): a fresh scope the caller may cancel to
            interrupt the round.
        wrap (CallWrapper | None): middleware around each call (the session's tool
            hooks); what it raises propagates, unlike the tools' own errors.
        runtime (Runtime | None): the caller's runtime, given to each :class:`ToolContext`.
        traceparent_of (Callable[[str], str | None] | None): call id → the W3C trace
            context of that call's span, which :attr:`ToolContext.traceparent` asks
            (made only when a tool reads it); ``None``: the calls are in no trace.

    Returns:
        One :class:`ToolOutcome` per call, in the order of ``calls``.

    Raises:
        ValueError: ``limit`` is smaller than 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit!r}")
    asyncio_call = False
    for call in calls:  # (a loop: no generator made per round)
        if call.name in registry and registry.get(call.name).kind == "asyncio":
            asyncio_call = True
            break
    if asyncio_call and _loop_missing():
        import trio_asyncio  # noqa: PLC0415 - only asyncio tools pay for loading it

        async with trio_asyncio.open_loop():
            return await _run_round(
                calls,
                registry,
                session_id=session_id,
                limit=limit,
                approved=approved,
                idempotency_keys=idempotency_keys,
                cancel_scope=cancel_scope,
                wrap=wrap,
                runtime=runtime,
                traceparent_of=traceparent_of,
            )
    return await _run_round(
        calls,
        registry,
        session_id=session_id,
        limit=limit,
        approved=approved,
        idempotency_keys=idempotency_keys,
        cancel_scope=cancel_scope,
        wrap=wrap,
        runtime=runtime,
        traceparent_of=traceparent_of,
    )


async def _run_round(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    *,
    session_id: str,
    limit: int,
    approved: Collection[str],
    idempotency_keys: Mapping[str, str] | None,
    cancel_scope: trio.CancelScope | None,
    wrap: CallWrapper | None,
    runtime: Runtime | None,
    traceparent_of: Callable[[str], str | None] | None,
) -> list[ToolOutcome]:
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    # A limiter that could never make a call wait is not built (a send's usual round).
    limiter = trio.CapacityLimiter(limit) if len(calls) > limit else None
    keys = idempotency_keys or {}

    async def run(call: ToolCall) -> ToolOutcome:
        key = keys.get(call.id) or idempotency_key(session_id, call.id)
        context = ToolContext(
            call.id, call.name, session_id, key, runtime=runtime, traceparent_of=traceparent_of
        )
        return await _run_call(call, registry, context, limiter, approved)

    async def one(index: int, call: ToolCall) -> None:
        outcomes[index] = await (run(call) if wrap is None else wrap(call, run))

    if len(calls) == 1 and wrap is None and cancel_scope is None:
        # One call, no middleware and no scope to interrupt the round by: nothing can
        # escape the call but the caller's own cancel, so it needs no task, nursery or
        # scope of its own (a send's usual round).
        await one(0, calls[0])
    else:
        with cancel_scope if cancel_scope is not None else trio.CancelScope():
            async with trio.open_nursery() as nursery:
                for index, call in enumerate(calls):
                    nursery.start_soon(one, index, call)
    await trio.lowlevel.checkpoint()
    return [
        outcome if outcome is not None else interrupted_outcome(call.id, call.name)
        for outcome, call in zip(outcomes, calls, strict=True)
    ]


def _outcome(
    call: ToolCall, status: ToolStatus, error: PowertrioError | None, text: str
) -> ToolOutcome:
    return ToolOutcome(
        call_id=call.id,
        tool_name=call.name,
        status=status,
        content=text,
        error_code=None if error is None else error.code,
    )


def _prepare(
    call: ToolCall, target: Tool[..., object], context: ToolContext
) -> tuple[list[object], dict[str, object]]:
    """Parse, validate and convert a call's arguments (ToolArgumentsError if they are bad)."""
    arguments = parse_tool_arguments(call.name, call.arguments)
    problems = target.validator.problems(arguments)
    if problems:
        raise ToolArgumentsError(call.name, problems)
    assert isinstance(arguments, dict)  # the schema's root is "type": "object"
    return target.bind(arguments, context)


async def _run_call(
    call: ToolCall,
    registry: ToolRegistry,
    context: ToolContext,
    limiter: trio.CapacityLimiter | None,
    approved: Collection[str],
) -> ToolOutcome:
    try:
        target = registry.get(call.name)
    except ToolNotFoundError as exc:
        return _outcome(call, "error", exc, str(exc))
    if target.spec.needs_approval and call.id not in approved:
        return denied_outcome(call.id, call.name, "it needs a human's approval, none was given")
    try:
        positional, keywords = _prepare(call, target, context)
    except ToolArgumentsError as exc:
        return _outcome(call, "invalid_arguments", exc, str(exc))
    if limiter is None:
        # What acquiring the limiter did first: a call cancelled before it starts never runs.
        await trio.lowlevel.checkpoint_if_cancelled()
        return await _execute(call, target, positional, keywords, context)
    async with limiter:
        return await _execute(call, target, positional, keywords, context)


async def _execute(
    call: ToolCall,
    target: Tool[..., object],
    positional: list[object],
    keywords: dict[str, object],
    context: ToolContext,
) -> ToolOutcome:
    """Run the tool within its timeout (a tool with none gets no cancel scope) and turn
    what it returned or raised into its outcome."""
    timeout = target.spec.timeout
    try:
        if timeout is None:
            value = await _invoke(target, positional, keywords, context)
        else:
            with trio.move_on_after(timeout) as scope:
                value = await _invoke(target, positional, keywords, context)
            if scope.cancelled_caught:
                expired = ToolTimeoutError(call.name, timeout)
                return _outcome(call, "timeout", expired, str(expired))
    except Exception as exc:
        # The model reads the error; the traceback is for the people running it.
        logger.warning(
            "session %s: the tool %s (call %s) raised %s",
            context.session_id,
            call.name,
            call.id,
            type(exc).__name__,
            exc_info=exc,
        )
        error = exc if isinstance(exc, PowertrioError) else ToolError(str(exc))
        return _outcome(call, "error", error, f"{type(exc).__name__}: {exc}")
    try:
        text = _render(value)
    except TypeError as exc:
        failed = ToolError(str(exc))
        return _outcome(
            call, "error", failed, f"the tool's result cannot be turned into JSON: {exc}"
        )
    return _outcome(call, "ok", None, text)


async def _invoke(
    target: Tool[..., object],
    positional: list[object],
    keywords: dict[str, object],
    context: ToolContext,
) -> object:
    try:
        if target.kind == "sync":
            bound = functools.partial(target.function, *positional, **keywords)
            return await run_sync_in_thread(bound, abandon_on_cancel=True)
        if target.kind == "asyncio":
            import trio_asyncio  # noqa: PLC0415 - only asyncio tools pay for loading it

            return await trio_asyncio.aio_as_trio(target.function)(*positional, **keywords)
        # A coroutine function's result (``await`` itself refuses anything else, and the
        # call's outcome says so): no check per call.
        return await target.function(*positional, **keywords)  # type: ignore[misc]
    except trio.Cancelled:
        context.cancel()  # a thread keeps running: tell it through the context
        raise


def _render(value: object) -> str:
    """The text the model sees: a str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(_CONVERTER.unstructure(value), option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"{type(value).__name__} is not JSON-serializable ({exc})") from exc
