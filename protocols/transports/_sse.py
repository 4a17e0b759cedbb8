"""Server-sent events: parse a ``text/event-stream`` body into events."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import final

import attrs

__all__ = ["ServerSentEvent", "iter_sse"]


@final
@attrs.frozen(kw_only=True)
class ServerSentEvent:
    """One event of an SSE stream, as the WHATWG HTML spec defines it."""

    event: str = "message"
    """The ``event:`` field (``message`` when absent)."""
    data: str = ""
    """The ``data:`` lines joined with newlines."""
    id: str | None = None
    """The ``id:`` field, if any."""
    retry: int | None = None
    """The ``retry:`` field in milliseconds, if any."""


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Parse SSE lines (without line endings) into events.

    An event is dispatched at a blank line. An event still open when the lines run out is
    dropped, as the spec says: a stream cut mid-event must not yield half an event. The
    transports then notice that the stream ended without its terminal event.

    Args:
        lines (AsyncIterable[str]): the body's lines, e.g. ``response.aiter_lines()``.

    Returns:
        (AsyncIterator[ServerSentEvent]): the complete events, in order.
    """
    event = "message"
    data: list[str] = []
    has_data = False
    last_id: str | None = None
    retry: int | None = None
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if has_data:
                yield ServerSentEvent(event=event, data="\n".join(data), id=last_id, retry=retry)
            event, data, has_data, retry = "message", [], False, None
            continue
        if line.startswith(":"):
            continue  # a comment (servers send them as keep-alives)
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value or "message"
        elif name == "data":
            data.append(value)
            has_data = True
        elif name == "id":
            if "\0" not in value:
                last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
