"""MCP tool servers as tool sources: describe a server (``mcp_stdio``, ``mcp_http``), give
its tools to an agent (``mcp_tools``), and the errors a call to it may end with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._mcp._errors import McpServerError, McpToolError

__all__ = [
    "McpServer",
    "McpServerError",
    "McpToolError",
    "McpTransport",
    "mcp_http",
    "mcp_stdio",
    "mcp_tools",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._mcp._sources import McpServer, McpTransport, mcp_http, mcp_stdio, mcp_tools
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._mcp._sources": (
                "McpServer",
                "McpTransport",
                "mcp_http",
                "mcp_stdio",
                "mcp_tools",
            ),
        },
    )
