"""Durable workflows: plain async functions whose steps (agent runs, activities, timers)
are recorded, so a crash resumes where the log says and a replay calls nothing.

Declare one with ``workflow``; run it with ``run_workflow`` or ``start_workflow``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._workflow._errors import WorkflowCancelledError, WorkflowError, WorkflowFailedError

__all__ = [
    "Workflow",
    "WorkflowCancelledError",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowFailedError",
    "WorkflowFunction",
    "run_workflow",
    "start_workflow",
    "workflow",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._workflow._handle import Workflow, run_workflow, start_workflow
    from ._workflow._workflow import WorkflowContext, WorkflowFunction, workflow
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._workflow._handle": (
                "Workflow",
                "run_workflow",
                "start_workflow",
            ),
            "._workflow._workflow": (
                "WorkflowContext",
                "WorkflowFunction",
                "workflow",
            ),
        },
    )
