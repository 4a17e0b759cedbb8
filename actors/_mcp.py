"""MCP tool sources: the tools of a Model Context Protocol server, as ordinary tools.

An :class:`McpServer` says how to reach a server (a subprocess over stdio, or streamable
HTTP). :func:`mcp_tools` connects to it through a connection actor under the runtime's
root, lists the server's tools and builds one :class:`~actors.Tool` per server tool; each
calls the server through the connection. Nothing else in the session changes: the tool
runner validates the arguments against the server's schema, applies the crash policy and
timeout, and records the result as text in the log, so replay never needs the server.

The connection actor keeps the server up: when a call finds the connection broken (a
stdio server that died, an HTTP server that went away) the call ends with a
:class:`~protocols.errors.McpServerError` the model reads as the tool's error, and the
actor reconnects (restarting a stdio server) after a backoff. The ``mcp`` package (the
``mcp`` extra) is imported only when a connection is opened.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Literal, TypeAlias, final

import attrs
import orjson
import trio

from protocols import CrashPolicy, JsonObject, JsonValue, validate_tool_name
from protocols.errors import ConfigError, McpServerError, McpToolError, ToolDefinitionError
from runtime import Actor, Backoff

from ._tools import Tool, ToolRegistry, tool

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult, ContentBlock
    from mcp.types import Tool as McpTool

    from runtime import ActorRef, Runtime

__all__ = ["McpServer", "McpTransport", "mcp_http", "mcp_stdio", "mcp_tools"]

_log = logging.getLogger("powertrio.mcp")

McpTransport: TypeAlias = Literal["stdio", "http"]
"""How a server is reached: a subprocess over stdin/stdout, or streamable HTTP."""

_CRASH_POLICIES = ("retry", "abort", "ask")
_DEFAULT_BACKOFF = Backoff(initial=0.05, factor=2.0, maximum=5.0, jitter=0.2)


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _optional_names(items: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if items is None else tuple(items)


def _policy_map(policies: Mapping[str, CrashPolicy] | None) -> Mapping[str, CrashPolicy]:
    return dict(policies or {})


@final
@attrs.frozen(kw_only=True, eq=False)
class McpServer:
    """How to reach one MCP server, and how its tools are offered to a model.

    Build one with :func:`mcp_stdio` or :func:`mcp_http`, then turn it into tools with
    :func:`mcp_tools` (or give it to ``spawn_session(tools=[...])``, which does that).
    """

    name: str
    """Identifies the server (its connection actor is ``mcp-<name>``)."""
    transport: McpTransport
    """``stdio`` or ``http``."""
    command: str = ""
    """The executable of a stdio server."""
    args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """Its arguments."""
    env: Mapping[str, str] | None = None
    """Extra environment variables of a stdio server."""
    cwd: str | None = None
    """The working directory of a stdio server."""
    url: str = ""
    """The endpoint of an HTTP server (``http://127.0.0.1:8000/mcp``)."""
    prefix: str = ""
    """Put before every tool name (``fs_`` gives ``fs_read``), to keep servers apart."""
    include: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)
    """Only these server tools (their names on the server); ``None``: all of them."""
    crash_policy: CrashPolicy = "abort"
    """What recovery does with a call that never finished (default for every tool)."""
    crash_policies: Mapping[str, CrashPolicy] = attrs.field(factory=dict, converter=_policy_map)
    """Per-tool crash policies, by the tool's name on the server."""
    timeout: float | None = None
    """Seconds before a call ends with a ``timeout`` outcome; ``None``: no limit."""
    connect_timeout: float = 30.0
    """Seconds a call waits for the connection (a server restarting) before failing."""
    backoff: Backoff = _DEFAULT_BACKOFF
    """Delays between reconnection attempts."""

    def __attrs_post_init__(self) -> None:
        problems = _server_problems(self)
        if problems:
            raise ConfigError(f"MCP server {self.name!r}: " + "; ".join(problems))

    def policy_for(self, tool_name: str) -> CrashPolicy:
        """The crash policy of the server tool ``tool_name``."""
        return self.crash_policies.get(tool_name, self.crash_policy)


def _server_problems(server: McpServer) -> list[str]:
    problems: list[str] = []
    if not server.name or not all(c.isalnum() or c in "_-." for c in server.name):
        problems.append("name must be non-empty letters, digits, '_', '-' or '.'")
    if server.transport == "stdio" and not server.command:
        problems.append("a stdio server needs a command")
    elif server.transport == "http" and not server.url.startswith(("http://", "https://")):
        problems.append(f"an http server needs an http(s) url, got {server.url!r}")
    elif server.transport not in ("stdio", "http"):
        problems.append(f"transport must be 'stdio' or 'http', got {server.transport!r}")
    for policy in (server.crash_policy, *server.crash_policies.values()):
        if policy not in _CRASH_POLICIES:
            problems.append(f"crash policy must be 'retry', 'abort' or 'ask', got {policy!r}")
    if server.timeout is not None and not server.timeout > 0:
        problems.append(f"timeout must be > 0 s, got {server.timeout!r}")
    if not server.connect_timeout > 0:
        problems.append(f"connect_timeout must be > 0 s, got {server.connect_timeout!r}")
    return problems


def mcp_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    prefix: str = "",
    include: Iterable[str] | None = None,
    crash_policy: CrashPolicy = "abort",
    crash_policies: Mapping[str, CrashPolicy] | None = None,
    timeout: float | None = None,
    connect_timeout: float = 30.0,
    backoff: Backoff = _DEFAULT_BACKOFF,
) -> McpServer:
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    Args:
        command (str): the executable (``sys.executable``, ``npx``, ...).
        args (Sequence[str]): its arguments.
        name (str | None): identifies the server; defaults to the last argument's stem,
            else the command's.
        env (Mapping[str, str] | None): extra environment variables.
        cwd (str | None): the working directory.
        prefix (str): put before every tool name.
        include (Iterable[str] | None): offer only these server tools.
        crash_policy (CrashPolicy): the default crash policy of its tools (``abort``).
        crash_policies (Mapping[str, CrashPolicy] | None): per-tool crash policies.
        timeout (float | None): seconds per call.
        connect_timeout (float): seconds a call waits for a (re)connection.
        backoff (Backoff): delays between restarts of the server.

    Raises:
        ConfigError: an option is invalid (the message names it).
    """
    return McpServer(
        name=name or _default_name(command, args),
        transport="stdio",
        command=command,
        args=tuple(args),
        env=None if env is None else dict(env),
        cwd=cwd,
        prefix=prefix,
        include=include,
        crash_policy=crash_policy,
        crash_policies=crash_policies,
        timeout=timeout,
        connect_timeout=connect_timeout,
        backoff=backoff,
    )


def mcp_http(
    url: str,
    *,
    name: str | None = None,
    prefix: str = "",
    include: Iterable[str] | None = None,
    crash_policy: CrashPolicy = "abort",
    crash_policies: Mapping[str, CrashPolicy] | None = None,
    timeout: float | None = None,
    connect_timeout: float = 30.0,
    backoff: Backoff = _DEFAULT_BACKOFF,
) -> McpServer:
    """An MCP server reached over streamable HTTP at ``url``.

    Args:
        url (str): the endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        name (str | None): identifies the server; defaults to the host and port.
        prefix, include, crash_policy, crash_policies, timeout, connect_timeout, backoff:
            as for :func:`mcp_stdio`.

    Raises:
        ConfigError: an option is invalid (the message names it).
    """
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return McpServer(
        name=name or host.replace(":", "-") or "http",
        transport="http",
        url=url,
        prefix=prefix,
        include=include,
        crash_policy=crash_policy,
        crash_policies=crash_policies,
        timeout=timeout,
        connect_timeout=connect_timeout,
        backoff=backoff,
    )


def _default_name(command: str, args: Sequence[str]) -> str:
    last = args[-1] if args else command
    stem = last.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    cleaned = "".join(c if c.isalnum() or c in "_-" else "-" for c in stem)
    return cleaned or "stdio"


# --- the connection -------------------------------------------------------------------


@attrs.define(eq=False)
class _Link:
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
        with trio.move_on_after(self.server.connect_timeout):
            while self.session is None:
                await self.ready.wait()
        if self.session is None:
            detail = f"not connected after {self.server.connect_timeout:g} s"
            if self.last_error:
                detail += f" (last error: {self.last_error})"
            raise McpServerError(self.server.name, tool_name, detail)
        return self.session

    async def call(self, tool_name: str, arguments: JsonObject) -> str:
        session = await self.wait_session(tool_name)
        try:
            result = await session.call_tool(tool_name, dict(arguments))
        except Exception as exc:
            detail = _describe_error(exc)
            self.mark_broken(session, detail)
            raise McpServerError(self.server.name, tool_name, detail) from exc
        return render_result(self.server.name, tool_name, _as_call_result(result))


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        if leaves:
            return _describe_error(leaves[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _as_call_result(result: object) -> CallToolResult:
    from mcp.types import CallToolResult  # noqa: PLC0415 - the mcp extra is optional

    if not isinstance(result, CallToolResult):
        msg = f"the server answered with {type(result).__name__}, not a tool result"
        raise McpToolError("?", "?", msg)
    return result


@final
class _GetLink:
    """Ask a connection actor for its link."""


class _McpConnection(Actor[object]):
    """Keeps one MCP server connected: connects, waits until broken, reconnects."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    async def on_start(self) -> None:
        self.context.start_soon(self._maintain, name=f"mcp {self._link.server.name}")

    async def receive(self, message: object) -> object:
        if isinstance(message, _GetLink):
            return self._link
        return await super().receive(message)

    async def on_stop(self) -> None:
        self._link.disconnected("")

    async def _maintain(self) -> None:
        link = self._link
        server = link.server
        rng = self.context.ids.random
        attempt = 0
        while True:
            error = ""
            try:
                async with _open_session(server) as session:
                    listing = await _list_tools(session)
                    link.connected(session, listing)
                    attempt = 0
                    await link.broken.wait()
            except Exception as exc:
                error = _describe_error(exc)
                _log.warning("MCP server %r: %s", server.name, error)
            link.disconnected(error)
            attempt += 1
            await trio.sleep(server.backoff.delay(attempt, rng))


@asynccontextmanager
async def _open_session(server: McpServer) -> AsyncIterator[ClientSession]:
    """Connect, initialize, and yield the client session (mcp imported here only)."""
    from mcp import ClientSession  # noqa: PLC0415 - the mcp extra is optional

    if server.transport == "stdio":
        from mcp import StdioServerParameters, stdio_client  # noqa: PLC0415

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=None if server.env is None else dict(server.env),
            cwd=server.cwd,
        )
        async with (
            stdio_client(params, errlog=sys.stderr) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    else:
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        async with (
            streamable_http_client(server.url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def _list_tools(session: ClientSession) -> tuple[McpTool, ...]:
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


# --- tools --------------------------------------------------------------------------------


def _endpoint(server: McpServer) -> tuple[object, ...]:
    return (server.transport, server.command, server.args, server.cwd, server.url)


def _actor_id(server: McpServer) -> str:
    return f"mcp-{server.name}"


async def _link_for(runtime: Runtime, server: McpServer) -> _Link:
    """The link of ``server``'s connection actor, spawning the actor if none runs."""
    from protocols.errors import ActorNotFoundError  # noqa: PLC0415

    try:
        ref: ActorRef[object] = runtime.lookup(_actor_id(server))
    except ActorNotFoundError:
        link = _Link(server)
        ref = await runtime.spawn(lambda: _McpConnection(link), id=_actor_id(server))
    found = await ref.ask(_GetLink())
    assert isinstance(found, _Link)
    if _endpoint(found.server) != _endpoint(server):
        msg = f"another MCP server named {server.name!r} is already connected"
        raise ConfigError(msg)
    return found


def _build_tool(link: _Link, server: McpServer, remote: McpTool) -> Tool[..., object]:
    remote_name = remote.name
    schema = dict(remote.input_schema)
    schema.setdefault("type", "object")

    async def call(**arguments: JsonValue) -> str:
        return await link.call(remote_name, arguments)

    call.__name__ = remote_name
    try:
        return tool(
            name=validate_tool_name(server.prefix + remote_name),
            description=remote.description or "",
            crash_policy=server.policy_for(remote_name),
            timeout=server.timeout,
            parameters=schema,
        )(call)
    except ToolDefinitionError as exc:
        msg = f"MCP server {server.name!r}: {exc}"
        raise ToolDefinitionError(msg) from exc


async def mcp_tools(runtime: Runtime, *servers: McpServer) -> tuple[Tool[..., object], ...]:
    """Connect to each server and return its tools as ordinary :class:`~actors.Tool` objects.

    Each server gets one connection actor under the runtime's root (``mcp-<name>``),
    shared by every session using its tools; it reconnects with backoff when the server
    dies. Each tool's schema is the server's, compiled like a local tool's; its calls go
    to the server and its result becomes text (see :func:`render_result`).

    Args:
        runtime (Runtime): the runtime that owns the connections.
        *servers (McpServer): from :func:`mcp_stdio` / :func:`mcp_http`.

    Returns:
        The tools of all servers, in the servers' order then each server's listing order.

    Raises:
        McpServerError: a server could not be reached within its ``connect_timeout``.
        ToolDefinitionError: a server tool has an unusable name or schema, or two tools
            share a name (give the servers a ``prefix``).
        ConfigError: another server with the same name is already connected.
    """
    found: list[Tool[..., object]] = []
    for server in servers:
        link = await _link_for(runtime, server)
        await link.wait_session("tools/list")
        listing = link.listing or ()
        wanted = set(server.include) if server.include is not None else None
        for remote in listing:
            if wanted is None or remote.name in wanted:
                found.append(_build_tool(link, server, remote))
        if wanted is not None:
            missing = sorted(wanted - {r.name for r in listing})
            if missing:
                msg = f"MCP server {server.name!r} has no tool named {', '.join(missing)}"
                raise ToolDefinitionError(msg)
    ToolRegistry.of(*found)  # two tools with one name fail here, naming it
    return tuple(found)


async def expand_tool_sources(
    runtime: Runtime, tools: Iterable[object] | ToolRegistry
) -> Iterable[object] | ToolRegistry:
    """``tools`` with each :class:`McpServer` replaced by its tools (for ``spawn_session``)."""
    if isinstance(tools, ToolRegistry):
        await trio.lowlevel.checkpoint()
        return tools
    items = list(tools)
    if not any(isinstance(item, McpServer) for item in items):
        await trio.lowlevel.checkpoint()
        return items
    expanded: list[object] = []
    for item in items:
        if isinstance(item, McpServer):
            expanded.extend(await mcp_tools(runtime, item))
        else:
            expanded.append(item)
    return expanded
