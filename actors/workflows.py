"""Durable workflows: functions whose steps are recorded; for now, their errors."""

from __future__ import annotations

from ._workflow._errors import WorkflowCancelledError, WorkflowError, WorkflowFailedError

__all__ = [
    "WorkflowCancelledError",
    "WorkflowError",
    "WorkflowFailedError",
]
