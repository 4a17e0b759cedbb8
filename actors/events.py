"""What sessions, boards and workflows record in the log, and what observers see live.

Log readers (``powertrio log``, a fold of your own, a test that checks a stream) decode
records into the first kind with ``protocols.codec.decode_record``; ``Session.observe()`` and
observers receive the second kind, which is never recorded.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._board._events import EntryDeleted, EntryPut, WatchAdded, WatchRemoved
from ._fleet._events import (
    FleetAgentChanged,
    FleetAgentDeclared,
    FleetAgentHosted,
    FleetAgentPaused,
    FleetAgentResumed,
    FleetAgentRetired,
    FleetAgentUnavailable,
    FleetNodeDraining,
    FleetNodeDrainRequested,
    FleetNodeStarted,
    FleetNodeStopped,
    FleetRunFinished,
    FleetRunSkipped,
    FleetRunStarted,
)
from ._limiter._core import BackoffRecorded, GrantIssued, GrantSettled, GrantsExpired
from ._session._context import ContextCompacted
from ._session._events import (
    ActiveRun,
    AssistantRecorded,
    CancelRequested,
    ChildFinished,
    ChildSpawned,
    FollowUpReceived,
    FollowUpsInjected,
    HumanAnswered,
    HumanRequested,
    InputQueued,
    OutputRejected,
    RunFinished,
    RunStarted,
    SessionCreated,
    ToolFinished,
    ToolStarted,
)
from ._session._observe import (
    DeltaReceived,
    LLMCallFinished,
    Observation,
    RoundBegan,
    RunBegan,
    RunEnded,
    ToolCallBegan,
    ToolCallFinished,
    UsageUpdated,
)
from ._session._request_header import RequestHeader
from ._workflow._events import (
    SignalReceived,
    StepCompleted,
    StepKind,
    WorkflowCancelRequested,
    WorkflowFinished,
    WorkflowStarted,
    WorkflowState,
    WorkflowStatus,
)

__all__ = [
    "ActiveRun",
    "AssistantRecorded",
    "BackoffRecorded",
    "CancelRequested",
    "ChildFinished",
    "ChildSpawned",
    "ContextCompacted",
    "DeltaReceived",
    "EntryDeleted",
    "EntryPut",
    "FleetAgentChanged",
    "FleetAgentDeclared",
    "FleetAgentHosted",
    "FleetAgentPaused",
    "FleetAgentResumed",
    "FleetAgentRetired",
    "FleetAgentUnavailable",
    "FleetNodeDrainRequested",
    "FleetNodeDraining",
    "FleetNodeStarted",
    "FleetNodeStopped",
    "FleetRunFinished",
    "FleetRunSkipped",
    "FleetRunStarted",
    "FollowUpReceived",
    "FollowUpsInjected",
    "GrantIssued",
    "GrantSettled",
    "GrantsExpired",
    "HumanAnswered",
    "HumanRequested",
    "InputQueued",
    "LLMCallFinished",
    "Observation",
    "OutputRejected",
    "RequestHeader",
    "RoundBegan",
    "RunBegan",
    "RunEnded",
    "RunFinished",
    "RunStarted",
    "SessionCreated",
    "SignalReceived",
    "StepCompleted",
    "StepKind",
    "ToolCallBegan",
    "ToolCallFinished",
    "ToolFinished",
    "ToolStarted",
    "UsageUpdated",
    "WatchAdded",
    "WatchRemoved",
    "WorkflowCancelRequested",
    "WorkflowFinished",
    "WorkflowStarted",
    "WorkflowState",
    "WorkflowStatus",
]

_fixup(__name__, globals())
del _fixup
