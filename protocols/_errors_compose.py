"""Errors of composition: MCP tool servers and durable workflows."""

from __future__ import annotations

from ._errors_base import PowertrioError
from ._errors_llm import ToolError

__all__ = [
    "McpServerError",
    "McpToolError",
    "WorkflowCancelledError",
    "WorkflowError",
    "WorkflowFailedError",
]


# --- MCP tool servers ------------------------------------------------------------------


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


# --- workflows ---------------------------------------------------------------------------


class WorkflowError(PowertrioError):
    """A durable workflow did not complete."""

    code = "workflow"


class WorkflowFailedError(WorkflowError):
    """The workflow function raised; the error is recorded in its stream."""

    code = "workflow.failed"

    def __init__(self, workflow_id: str, error: str) -> None:
        self.workflow_id = workflow_id
        self.error = error
        super().__init__(f"workflow {workflow_id!r} failed: {error}")


class WorkflowCancelledError(WorkflowError):
    """The workflow was cancelled before it completed."""

    code = "workflow.cancelled"

    def __init__(self, workflow_id: str, reason: str) -> None:
        self.workflow_id = workflow_id
        self.reason = reason
        because = f": {reason}" if reason else ""
        super().__init__(f"workflow {workflow_id!r} was cancelled{because}")
