"""Server-sent events: parse a ``text/event-stream`` body into events."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import final

import attrs

__all__ = ["SSEDecoder", "ServerSentEvent", "iter_sse"]

_BOM = "\ufeff"


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


@final
@attrs.define(eq=False)
class SSEDecoder:
    """The SSE parser as a synchronous state machine: bytes or lines in, complete events out.

    The transports feed it the response body's chunks as they arrive (:meth:`feed`), so one
    network read becomes a list of events with no async hop per line; :func:`iter_sse` feeds
    it lines (:meth:`feed_line`). Lines end with LF, CRLF or CR, also when a CRLF is split
    between two chunks; a line split between chunks waits for its end, so a multi-byte
    character cut in two decodes whole. Bytes that are not UTF-8 become U+FFFD, and one
    leading byte order mark is dropped, as the spec says.

    An event is dispatched at a blank line. An event still open when the body ends is never
    returned: a stream cut mid-event must not yield half an event, and the transports then
    notice that the stream ended without its terminal event.
    """

    _pending: list[bytes] = attrs.field(init=False, factory=list)
    """The pieces of a line whose end has not arrived, joined once when it does."""
    _after_cr: bool = attrs.field(init=False, default=False)
    """The last chunk ended with CR: an LF opening the next one ends no line."""
    _lines: list[str] = attrs.field(init=False, factory=list)
    """Complete lines not parsed yet (from ``_next`` on)."""
    _next: int = attrs.field(init=False, default=0)
    _first_line: bool = attrs.field(init=False, default=True)
    _event: str = attrs.field(init=False, default="message")
    _data: list[str] = attrs.field(init=False, factory=list)
    _last_id: str | None = attrs.field(init=False, default=None)
    _retry: int | None = attrs.field(init=False, default=None)

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        """Take the next piece of the body.

        The events are parsed as the iterator is advanced, so the first one is out before
        the rest of a large chunk is read; lines an iterator did not reach are parsed by the
        next one.

        Args:
            chunk (bytes): the bytes that arrived, cut anywhere.

        Returns:
            (Iterator[ServerSentEvent]): the events that this piece completed, in order.
        """
        # Only the new chunk is scanned: the pending pieces hold no line ending, so a line
        # that spans many reads (one event of many megabytes) costs its bytes once, not
        # once per read.
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk[0] == 0x0A:  # the LF of a CRLF cut after its CR
                chunk = chunk[1:]
        if not chunk:
            return self._events()
        if b"\r" in chunk:
            self._after_cr = chunk[-1] == 0x0D
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending.append(chunk)
            return self._events()
        if self._pending:
            self._pending.append(chunk[:end])
            data = b"".join(self._pending)
            self._pending.clear()
        else:
            data = chunk[:end]
        if end + 1 < len(chunk):
            self._pending.append(chunk[end + 1 :])
        # Cutting at LF never splits a UTF-8 sequence, so the complete lines decode at once.
        lines = data.decode("utf-8", "replace").split("\n")
        if self._next < len(self._lines):
            lines = self._lines[self._next :] + lines
        self._lines, self._next = lines, 0
        return self._events()

    def _events(self) -> Iterator[ServerSentEvent]:
        lines = self._lines
        while self._next < len(lines):
            line = lines[self._next]
            self._next += 1
            event = self.feed_line(line)
            if event is not None:
                yield event

    def feed_line(self, line: str) -> ServerSentEvent | None:
        """Take one line, without its line ending.

        Returns:
            (ServerSentEvent | None): the event this line completed (a blank line after
            data), else None.
        """
        if self._first_line:
            self._first_line = False
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            event = None
            if self._data:
                event = ServerSentEvent(
                    event=self._event,
                    data="\n".join(self._data),
                    id=self._last_id,
                    retry=self._retry,
                )
                self._data = []
            self._event, self._retry = "message", None
            return event
        if line[0] == ":":
            return None  # a comment (servers send them as keep-alives)
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or "message"
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Parse SSE lines (without line endings) into events.

    An event is dispatched at a blank line. An event still open when the lines run out is
    dropped, as the spec says: a stream cut mid-event must not yield half an event. The
    transports then notice that the stream ended without its terminal event. (They feed
    body chunks to :class:`SSEDecoder` themselves, which saves a hop per line.)

    Args:
        lines (AsyncIterable[str]): the body's lines, e.g. ``response.aiter_lines()``.

    Returns:
        (AsyncIterator[ServerSentEvent]): the complete events, in order.
    """
    decoder = SSEDecoder()
    async for raw in lines:
        event = decoder.feed_line(raw.rstrip("\r\n"))
        if event is not None:
            yield event
