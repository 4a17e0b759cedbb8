"""Errors of durable workflows (``workflow.*``); ``actors.workflows`` exports them."""

from __future__ import annotations

from protocols.errors import PowertrioError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "WorkflowCancelledError",
    "WorkflowError",
    "WorkflowFailedError",
]


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


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.workflows", globals())
del _fixup
