"""MCP tool sources: the tools of a Model Context Protocol server, as ordinary tools.

An :class:`McpServer` says how to reach a server (a subprocess over stdio, or streamable
HTTP). :func:`mcp_tools` connects to it through a connection actor under the runtime's
root, lists the server's tools and builds one :class:`~actors.Tool` per server tool; each
calls the server through the connection. Nothing else in the session changes: the tool
runner validates the arguments against the server's schema, applies the crash policy and
timeout, and records the result as text in the log, so replay never needs the server.

The connection actor keeps the server up. It watches a stdio server's output: when the
process exits, even while no call is in flight, the actor starts it again after a backoff,
so the model's next call finds it running (a call arriving meanwhile waits for it). When
a call finds the connection broken (a server that died during the call, an HTTP server
that went away) the call ends with a :class:`~actors.mcp.McpServerError` the model
reads as the tool's error, and the actor reconnects. More than ``max_restarts`` restarts
within ``restart_window`` seconds and it stops restarting on its own: the next call then
tries once more. The ``mcp`` package (the ``mcp`` extra) is imported only when a
connection is opened.

A stdio server's environment is where its tokens go: its values are kept as
:class:`~protocols.transports.Secret` (masked in reprs), and cut out of every error, log
line and result text that could quote them.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from protocols import JsonValue
from protocols.errors import ConfigError, ToolDefinitionError
from protocols.lowlevel import validate_tool_name

from .._tools._tool import Tool, ToolRegistry, tool
from ._config import McpServer, McpTransport, mcp_http, mcp_stdio
from ._errors import McpServerError
from ._link import GetLink, Link, McpConnection, describe_error, list_tools, open_session

if TYPE_CHECKING:
    from mcp.types import Tool as McpTool

    from runtime import ActorRef, Runtime

__all__ = ["McpServer", "McpTransport", "mcp_http", "mcp_stdio", "mcp_tools"]


def _endpoint(server: McpServer) -> tuple[object, ...]:
    return (server.transport, server.command, server.args, server.cwd, server.url)


def _actor_id(server: McpServer) -> str:
    return f"mcp-{server.name}"


async def _link_for(runtime: Runtime, server: McpServer) -> Link:
    """The link of ``server``'s connection actor, spawning the actor if none runs."""
    from protocols.errors import ActorNotFoundError  # noqa: PLC0415

    try:
        ref: ActorRef[object] = runtime.lookup(_actor_id(server))
    except ActorNotFoundError:
        link = Link(server)
        ref = await runtime.spawn(lambda: McpConnection(link), id=_actor_id(server))
    found = await ref.ask(GetLink())
    assert isinstance(found, Link)
    if _endpoint(found.server) != _endpoint(server):
        msg = f"another MCP server named {server.name!r} is already connected"
        raise ConfigError(msg)
    return found


def _build_tool(link: Link, server: McpServer, remote: McpTool) -> Tool[..., object]:
    remote_name = remote.name
    schema = dict(remote.input_schema)
    schema.setdefault("type", "object")

    async def call(**arguments: JsonValue) -> str:
        return await link.call(remote_name, arguments)

    call.__name__ = remote_name
    try:
        return tool(
            name=validate_tool_name(server.prefix + remote_name),
            description=server.masked(remote.description or ""),
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
        found.extend(_server_tools(link, server, link.listing or ()))
    ToolRegistry.of(*found)  # two tools with one name fail here, naming it
    return tuple(found)


def _server_tools(
    link: Link, server: McpServer, listing: tuple[McpTool, ...]
) -> list[Tool[..., object]]:
    wanted = set(server.include) if server.include is not None else None
    found = [
        _build_tool(link, server, remote)
        for remote in listing
        if wanted is None or remote.name in wanted
    ]
    if wanted is not None:
        missing = sorted(wanted - {r.name for r in listing})
        if missing:
            msg = f"MCP server {server.name!r} has no tool named {', '.join(missing)}"
            raise ToolDefinitionError(msg)
    return found


async def _described_tools(server: McpServer) -> list[Tool[..., object]]:
    """The tools of ``server`` as described by a connection opened only to list them.

    For a replay, which calls no tool but checks what the model was offered: the tools
    are never connected, and a call would fail with :class:`McpServerError`.
    """
    detail = f"not connected after {server.connect_timeout:g} s"
    listing: tuple[McpTool, ...] | None = None
    with trio.move_on_after(server.connect_timeout):
        try:
            async with open_session(server) as (session, _):
                listing = await list_tools(session)
        except Exception as exc:
            detail = describe_error(server, exc)
    if listing is None:
        raise McpServerError(server.name, "tools/list", detail)
    return _server_tools(Link(server), server, listing)


_short = reprlib.Repr()
_short.maxother = 80


def _not_a_source(item: object) -> ToolDefinitionError:
    shown = _short.repr(item)
    if callable(item):
        return ToolDefinitionError(
            f"tools holds {shown}, a plain callable: decorate it with @tool to make it a Tool"
        )
    return ToolDefinitionError(
        f"tools holds {shown}, which is not a tool source: give Tool objects (@tool), MCP "
        "servers (mcp_stdio, mcp_http) or a ToolRegistry"
    )


async def expand_tool_sources(
    runtime: Runtime | None, tools: Iterable[object] | ToolRegistry
) -> Iterable[object] | ToolRegistry:
    """``tools`` with each :class:`McpServer` replaced by its tools, every item checked.

    The one reading of a ``tools=`` argument, shared by ``spawn_session`` and
    ``replay_session``. With a runtime, each server is connected through its connection
    actor; with none (a replay), it is connected once to list its tools and left.

    Raises:
        ToolDefinitionError: an item is neither a Tool nor an MCP server (the message
            says what to give), or what :func:`mcp_tools` raises.
        McpServerError, ConfigError: as :func:`mcp_tools` raises them.
    """
    if isinstance(tools, ToolRegistry):
        await trio.lowlevel.checkpoint()
        return tools
    items = list(tools)
    if all(isinstance(item, Tool) for item in items):
        await trio.lowlevel.checkpoint()
        return items
    expanded: list[object] = []
    for item in items:
        if isinstance(item, Tool):
            expanded.append(item)
        elif not isinstance(item, McpServer):
            raise _not_a_source(item)
        elif runtime is None:
            expanded.extend(await _described_tools(item))
        else:
            expanded.extend(await mcp_tools(runtime, item))
    return expanded
