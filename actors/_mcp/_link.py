"""The connection to one MCP server: a link shared by its tools, the actor that keeps it
up (watching a stdio server's process), and the text a tool result becomes."""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import sys
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TextIO, final

import attrs
import orjson
import trio

from protocols import JsonObject, JsonValue
from runtime import Actor
from runtime.supervision import RestartIntensity

from ._config import McpServer
from ._errors import McpServerError, McpToolError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage
    from mcp.types import CallToolResult, ContentBlock
    from mcp.types import Tool as McpTool

__all__ = [
    "GetLink",
    "Link",
    "McpConnection",
    "describe_error",
    "list_tools",
    "open_session",
    "render_result",
]

_log = logging.getLogger("powertrio.mcp")


@attrs.define(eq=False)
class Link:
    """The live connection to one server, shared by its tools and its connection actor.

    It outlives the actor's incarnations (the actor's factory holds it), so tools built
    once keep working across reconnections.
    """

    server: McpServer
    session: ClientSession | None = None
    listing: tuple[McpTool, ...] | None = None
    last_error: str = ""
    connections: int = 0
    ready: trio.Event = attrs.field(factory=trio.Event)
    broken: trio.Event = attrs.field(factory=trio.Event)
    wanted: trio.Event = attrs.field(factory=trio.Event)
    """Set by a call that finds no session: wakes a connection that stopped restarting."""
    waiters: int = 0
    """Calls waiting for a session."""

    def connected(self, session: ClientSession, listing: tuple[McpTool, ...]) -> None:
        self.session = session
        self.listing = listing
        self.connections += 1
        self.last_error = ""
        self.broken = trio.Event()
        self.ready.set()

    def disconnected(self, error: str) -> None:
        if self.ready.is_set():
            self.ready = trio.Event()
        self.session = None
        if error:
            self.last_error = error

    def mark_broken(self, session: ClientSession, error: str) -> None:
        # Later calls wait for the reconnection at once, not for the old session's close.
        if self.session is session:
            self.broken.set()
            self.disconnected(error)

    async def wait_session(self, tool_name: str) -> ClientSession:
        """The live session, waiting up to ``connect_timeout`` for a (re)connection."""
        self.waiters += 1
        try:
            with trio.move_on_after(self.server.connect_timeout):
                while self.session is None:
                    self.wanted.set()
                    await self.ready.wait()
        finally:
            self.waiters -= 1
        if self.session is None:
            detail = f"not connected after {self.server.connect_timeout:g} s"
            if self.last_error:
                detail += f" (last error: {self.last_error})"
            raise McpServerError(self.server.name, tool_name, detail)
        return self.session

    async def call(self, tool_name: str, arguments: JsonObject) -> str:
        session = await self.wait_session(tool_name)
        server = self.server
        try:
            result = await session.call_tool(tool_name, dict(arguments))
        except Exception as exc:
            detail = describe_error(server, exc)
            self.mark_broken(session, detail)
            raise McpServerError(server.name, tool_name, detail) from exc
        try:
            text = render_result(server.name, tool_name, _as_call_result(result))
        except McpToolError as exc:
            raise McpToolError(server.name, tool_name, server.masked(exc.detail)) from None
        return server.masked(text)


def describe_error(server: McpServer, exc: BaseException) -> str:
    """A line naming ``exc``, with the server's secrets cut out."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        if leaves:
            return describe_error(server, leaves[0])
    text = str(exc)
    return server.masked(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _as_call_result(result: object) -> CallToolResult:
    from mcp.types import CallToolResult  # noqa: PLC0415 - the mcp extra is optional

    if not isinstance(result, CallToolResult):
        msg = f"the server answered with {type(result).__name__}, not a tool result"
        raise McpToolError("?", "?", msg)
    return result


@final
class GetLink:
    """Ask a connection actor for its link."""


_EXITED = "the server process exited"


class McpConnection(Actor[object]):
    """Keeps one MCP server connected: connects, waits until broken or exited, restarts."""

    def __init__(self, link: Link) -> None:
        self._link = link

    async def on_start(self) -> None:
        self.context.start_soon(self._maintain, name=f"mcp {self._link.server.name}")

    async def receive(self, message: object) -> object:
        if isinstance(message, GetLink):
            return self._link
        return await super().receive(message)

    async def on_stop(self) -> None:
        self._link.disconnected("")

    async def _maintain(self) -> None:
        link = self._link
        server = link.server
        rng = self.context.ids.random
        intensity = RestartIntensity(server.max_restarts, server.restart_window)
        attempt = 0
        while True:
            error = ""
            try:
                async with open_session(server) as (session, exited):
                    listing = await list_tools(session)
                    link.connected(session, listing)
                    attempt = 0
                    async with trio.open_nursery() as watch:
                        watch.start_soon(_watch_exit, link, session, exited)
                        await link.broken.wait()
                        watch.cancel_scope.cancel()
                    if exited.is_set():
                        error = _EXITED
            except Exception as exc:
                error = describe_error(server, exc)
            link.disconnected(error)
            attempt += 1
            if intensity.record(trio.current_time()):
                _log.error(
                    "MCP server %r: more than %d restarts in %g s (last error: %s); it is "
                    "started again when a call needs it",
                    server.name,
                    server.max_restarts,
                    server.restart_window,
                    error or "none",
                )
                if not link.waiters:
                    link.wanted = trio.Event()
                    await link.wanted.wait()
                intensity = RestartIntensity(server.max_restarts, server.restart_window)
                attempt = 0
            else:
                delay = server.backoff.delay(attempt, rng)
                _log.warning(
                    "MCP server %r: %s; restarting it in %.3g s",
                    server.name,
                    error or "the connection broke",
                    delay,
                )
                await trio.sleep(delay)


async def _watch_exit(link: Link, session: ClientSession, exited: trio.Event) -> None:
    """Mark the connection broken as soon as the server's process is gone, idle or not."""
    await exited.wait()
    link.mark_broken(session, _EXITED)


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[tuple[ClientSession, trio.Event]]:
    """Connect, initialize, and yield the client session and an event set when a stdio
    server's process has exited (never set for HTTP); mcp is imported here only."""
    from mcp import ClientSession  # noqa: PLC0415 - the mcp extra is optional

    exited = trio.Event()
    if server.transport == "stdio":
        import anyio  # noqa: PLC0415 - comes with mcp
        from mcp import StdioServerParameters, stdio_client  # noqa: PLC0415
        from mcp.shared.message import SessionMessage  # noqa: PLC0415

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=None if server.env is None else {k: v.reveal() for k, v in server.env.items()},
            cwd=server.cwd,
        )
        async with trio.open_nursery() as tasks:
            stderr_done = trio.Event()
            errlog = _stderr_for(server, tasks, stderr_done)
            try:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    if errlog is not sys.stderr:
                        errlog.close()  # the server has its own end: its exit ends the pipe
                    # The process is watched through its stdout: the end of its output is
                    # the end of the server, reported before any call has to find out.
                    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                    tasks.start_soon(_relay_output, read, send, exited)
                    async with ClientSession(receive, write) as session:
                        await session.initialize()
                        yield session, exited
            finally:
                if errlog is not sys.stderr:
                    errlog.close()
                with trio.move_on_after(_STDERR_GRACE):  # its last lines, unless a child
                    await stderr_done.wait()  # of the server still holds the pipe open
                tasks.cancel_scope.cancel()
    else:
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        async with (
            streamable_http_client(server.url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session, exited


_STDERR_GRACE = 0.5
"""Seconds the stderr relay may take to pass on a stopped server's last lines."""
_STDERR_LINE = 65536
"""Bytes of stderr without a newline passed on as one line (a bound on the buffer)."""


def _stderr_for(server: McpServer, tasks: trio.Nursery, done: trio.Event) -> TextIO:
    """Where a stdio server writes its stderr: ours, or, when its environment holds
    values to hide, a pipe whose lines reach ours with those values cut out."""
    if not server.env or sys.platform == "win32":
        done.set()
        return sys.stderr
    read_fd, write_fd = os.pipe()
    tasks.start_soon(_relay_stderr, server, trio.lowlevel.FdStream(read_fd), done)
    return os.fdopen(write_fd, "w")


async def _relay_stderr(
    server: McpServer, stream: trio.lowlevel.FdStream, done: trio.Event
) -> None:
    """Copy the server's stderr to ours line by line, its secrets cut out."""

    def emit(line: bytes) -> None:
        sys.stderr.write(server.masked(line.decode(errors="replace")) + "\n")
        sys.stderr.flush()

    pending = b""
    try:
        async with stream:
            while chunk := await stream.receive_some():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    emit(line)
                if len(pending) > _STDERR_LINE:
                    emit(pending)
                    pending = b""
        if pending:
            emit(pending)
    finally:
        done.set()


async def _relay_output(
    read: AsyncIterable[SessionMessage | Exception],
    send: MemoryObjectSendStream[SessionMessage | Exception],
    exited: trio.Event,
) -> None:
    """Pass the server's messages on to the session; set ``exited`` when they end."""
    import anyio  # noqa: PLC0415 - comes with mcp

    async with send:
        try:
            async for item in read:
                await send.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # our side closed first: a shutdown, not an exit
    exited.set()


async def list_tools(session: ClientSession) -> tuple[McpTool, ...]:
    from mcp.types import PaginatedRequestParams  # noqa: PLC0415

    found: list[McpTool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        found.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tuple(found)


# --- results as text --------------------------------------------------------------------


def render_result(server: str, tool_name: str, result: CallToolResult) -> str:
    """The text the model reads (and the log records) for an MCP tool result.

    Text content is the text itself (several blocks joined by newlines); anything else
    (images, audio, resources, links) makes the whole result a JSON list in which each
    binary block is a small description (type, MIME type, size, digest), never the bytes.

    Raises:
        McpToolError: the server reported the call as failed (``isError``).
    """
    blocks = [_describe_block(block) for block in result.content]
    if result.is_error:
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        raise McpToolError(server, tool_name, "\n".join(texts) or "no details given")
    if all(b.get("type") == "text" for b in blocks):
        if not blocks and result.structured_content is not None:
            return orjson.dumps(result.structured_content).decode()
        return "\n".join(str(b.get("text", "")) for b in blocks)
    return orjson.dumps(blocks).decode()


def _binary(data: str) -> dict[str, JsonValue]:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raw = data.encode()
    return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()[:16]}


def _describe_block(block: ContentBlock) -> dict[str, JsonValue]:
    from mcp.types import (  # noqa: PLC0415
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, (ImageContent, AudioContent)):
        return {"type": block.type, "mime_type": block.mime_type, **_binary(block.data)}
    if isinstance(block, EmbeddedResource):
        contents = block.resource
        described: dict[str, JsonValue] = {
            "type": "resource",
            "uri": str(contents.uri),
            "mime_type": contents.mime_type,
        }
        if isinstance(contents, TextResourceContents):
            described["text"] = contents.text
        else:
            described.update(_binary(contents.blob))
        return described
    link: ResourceLink = block
    return {
        "type": "resource_link",
        "uri": str(link.uri),
        "name": link.name,
        "mime_type": link.mime_type,
    }
