"""Errors of MCP tool servers (``tool.mcp_*``), tool errors the model reads as the call's
result; ``actors.mcp`` exports them.
"""

from __future__ import annotations

from protocols.errors import ToolError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "McpServerError",
    "McpToolError",
]


class McpServerError(ToolError):
    """An MCP server could not be reached, or its connection broke during a call.

    The model reads it as the call's error; the connection is restarted with backoff, so
    a later call may work again.
    """

    code = "tool.mcp_server"

    def __init__(self, server: str, tool: str, detail: str) -> None:
        self.server = server
        self.tool = tool
        self.detail = detail
        super().__init__(
            f"MCP server {server!r} failed during {tool!r}: {detail} "
            "(the connection is being restarted; a later call may work)"
        )


class McpToolError(ToolError):
    """An MCP server ran the tool and reported an error (``isError``) as its result."""

    code = "tool.mcp_error"

    def __init__(self, server: str, tool: str, detail: str) -> None:
        self.server = server
        self.tool = tool
        self.detail = detail
        super().__init__(f"MCP tool {tool!r} of server {server!r} reported an error: {detail}")


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.mcp", globals())
del _fixup
