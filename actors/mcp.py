"""MCP tool servers (stdio or HTTP) as tool sources; for now, their errors."""

from __future__ import annotations

from ._mcp._errors import McpServerError, McpToolError

__all__ = [
    "McpServerError",
    "McpToolError",
]
