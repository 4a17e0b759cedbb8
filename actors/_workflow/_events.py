"""What a workflow records in its stream ``workflow/<id>``, and the state they fold into."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeAlias, final

import attrs

from protocols import JsonValue
from protocols.codec import event_type
from runtime.lowlevel import TimerBook, is_timer_event

__all__ = [
    "SignalReceived",
    "StepCompleted",
    "StepKind",
    "WorkflowCancelRequested",
    "WorkflowFinished",
    "WorkflowStarted",
    "WorkflowState",
    "WorkflowStatus",
    "evolve_workflow",
]

StepKind: TypeAlias = Literal["agent", "call", "parallel", "for_each", "sleep", "signal"]
"""What a step did: an agent run, a function call, a group of branches, a durable
sleep, or the consumption of a signal."""

WorkflowStatus: TypeAlias = Literal["running", "completed", "failed", "cancelled"]
"""Where a workflow is."""


@final
@event_type("workflow.started")
@attrs.frozen(kw_only=True)
class WorkflowStarted:
    """The workflow was started with this input."""

    workflow: str
    """The workflow's name (its ``@workflow`` function)."""
    input: JsonValue = None
    """The input given to ``start_workflow``."""


@final
@event_type("workflow.step_completed")
@attrs.frozen(kw_only=True)
class StepCompleted:
    """A step finished; a re-run of the function returns ``result`` instead of running it.

    ``index`` is the step's place in the function: ``"3"`` is the fourth step at the top
    level, ``"3.1.0"`` the first step of branch 1 of the group that is step 3.
    """

    index: str
    """The step's position (see above)."""
    kind: StepKind
    """What the step did."""
    name: str
    """The function, agent or signal name: a re-run must ask for the same one."""
    result: JsonValue = None
    """What the step returned, as JSON."""


@final
@event_type("workflow.signal_received")
@attrs.frozen(kw_only=True)
class SignalReceived:
    """A signal arrived from outside (``Workflow.signal``); ``wait_for`` consumes it."""

    name: str
    """The signal's name."""
    payload: JsonValue = None
    """What came with it."""


@final
@event_type("workflow.cancel_requested")
@attrs.frozen(kw_only=True)
class WorkflowCancelRequested:
    """Someone cancelled the workflow; its function and agent runs are being stopped."""

    reason: str = ""
    """Why, for people."""


@final
@event_type("workflow.finished")
@attrs.frozen(kw_only=True)
class WorkflowFinished:
    """The workflow ended."""

    status: Literal["completed", "failed", "cancelled"]
    """How it ended."""
    result: JsonValue = None
    """The function's return value, for ``completed``."""
    error: str = ""
    """The error (``Type: message``) for ``failed``; the reason for ``cancelled``."""


def _steps(value: Mapping[str, StepCompleted]) -> Mapping[str, StepCompleted]:
    return dict(value)


@final
@attrs.frozen(kw_only=True)
class WorkflowState:
    """A workflow, folded from its stream."""

    started: WorkflowStarted | None = None
    """The start event; ``None`` for an empty stream."""
    steps: Mapping[str, StepCompleted] = attrs.field(factory=dict, converter=_steps)
    """Completed steps by index."""
    step_versions: Mapping[str, int] = attrs.field(factory=dict)
    """The stream version of each step's event (to name it in a divergence)."""
    signals: Mapping[str, tuple[JsonValue, ...]] = attrs.field(factory=dict)
    """Every signal received, by name, in arrival order."""
    consumed: Mapping[str, int] = attrs.field(factory=dict)
    """How many signals of each name a ``wait_for`` step has consumed."""
    cancel_requested: WorkflowCancelRequested | None = None
    """The cancel, once asked for."""
    finished: WorkflowFinished | None = None
    """How it ended, once it has."""
    timers: TimerBook = attrs.field(factory=TimerBook)
    """The durable timers of its sleeps."""
    version: int = 0
    """Events folded."""

    @property
    def status(self) -> WorkflowStatus:
        """``running`` until a :class:`WorkflowFinished` says how it ended."""
        return "running" if self.finished is None else self.finished.status

    def pending_signal(self, name: str) -> tuple[bool, JsonValue]:
        """Whether a signal called ``name`` waits to be consumed, and its payload."""
        received = self.signals.get(name, ())
        used = self.consumed.get(name, 0)
        if used < len(received):
            return True, received[used]
        return False, None


def evolve_workflow(state: WorkflowState, event: object) -> WorkflowState:
    """Fold one event. Pure and total: unknown events only count."""
    version = state.version + 1
    if isinstance(event, WorkflowStarted):
        return attrs.evolve(state, started=event, version=version)
    if isinstance(event, StepCompleted):
        consumed = state.consumed
        if event.kind == "signal":
            consumed = {**consumed, event.name: consumed.get(event.name, 0) + 1}
        return attrs.evolve(
            state,
            steps={**state.steps, event.index: event},
            step_versions={**state.step_versions, event.index: version},
            consumed=consumed,
            version=version,
        )
    if isinstance(event, SignalReceived):
        received = state.signals.get(event.name, ())
        return attrs.evolve(
            state,
            signals={**state.signals, event.name: (*received, event.payload)},
            version=version,
        )
    if isinstance(event, WorkflowCancelRequested):
        return attrs.evolve(state, cancel_requested=event, version=version)
    if isinstance(event, WorkflowFinished):
        return attrs.evolve(state, finished=event, version=version)
    if is_timer_event(event):
        return attrs.evolve(state, timers=state.timers.evolve(event), version=version)
    return attrs.evolve(state, version=version)
