"""One fleet agent as an event-sourced actor: its schedules are durable timers it owns.

The actor owns ``fleet/agent/<name>``. A schedule is a timer in that stream: an interval is
a recurring timer (fixed delay from each firing), a cron schedule is a one-shot timer for
its next slot, scheduled again from each firing. Either way the slots missed while no node
ran collapse into one firing when a node comes back (the timers service delivers an
overdue timer once, and the next due time counts from that firing): no catch-up storm.

A firing starts a run (a fresh session, ``<agent>-<n>``) unless the agent is paused, a
run is still going, or the day's tokens are spent: then the slot is recorded as skipped.
The run is the actor's step; its end comes back as a message and is recorded. A node that
dies mid-run leaves ``FleetRunStarted`` without its end: the next node's actor takes the
step up again, and the session's exactly-once send (``id=run_id``) waits for that run
instead of starting another.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, final

import attrs

from runtime import Decision, EventSourcedActor, StepFailed
from runtime.lowlevel import TimerBook, is_timer_event, timer_decision
from runtime.timers import TimerCancelled, TimerFired, TimerScheduled

from ._cron import CronSchedule
from ._events import (
    AGENT_PREFIX,
    FleetAgentHosted,
    FleetRunFinished,
    FleetRunSkipped,
    FleetRunStarted,
)
from ._file import AgentDecl, ScheduleDecl
from ._file import _package_version as package_version

if TYPE_CHECKING:
    from .._session._events import RunResult

__all__ = ["AgentConfig", "FleetAgentActor", "FleetAgentState", "RunHost"]


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).date().isoformat()


@final
@attrs.frozen(kw_only=True)
class AgentConfig:
    """What the node tells an agent's actor: its declaration and the operators' flags.

    Also the message that updates them (``apply`` changed the spec, ``pause``...); ``now``
    is the node's clock reading, so deciding stays pure."""

    decl: AgentDecl
    spec_hash: str
    """Of the declaration and the tools as this node's code has them."""
    paused: bool
    retired: bool
    node: str
    now: float
    draining: bool = False
    """The node takes no new work: a firing is not recorded, so its timer stays pending
    in the log for the next node."""


@final
@attrs.frozen(kw_only=True)
class FleetAgentState:
    """The fold of ``fleet/agent/<name>``."""

    timers: TimerBook = attrs.field(factory=TimerBook)
    timer_seq: int = 0
    node: str | None = None
    hosted_hash: str | None = None
    runs: int = 0
    open_run: FleetRunStarted | None = None
    day: str = ""
    day_tokens: int = 0


@final
@attrs.frozen
class _RunDone:
    run_id: str
    result: RunResult
    now: float


@final
@attrs.frozen
class RunAgent:
    """The step: drive one run of the agent's session to its end."""

    started: FleetRunStarted


RunHost = Callable[[AgentDecl, FleetRunStarted], Awaitable["RunResult"]]
"""Runs one fleet run to its end (the node: spawn or resume the session, send, wait)."""


class FleetAgentActor(EventSourcedActor[FleetAgentState]):
    """The actor of one fleet agent (see the module's docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        run: RunHost,
        clock: Callable[[], float],
        on_finished: Callable[[str], None],
        on_started: Callable[[str], None] = lambda _key: None,
    ) -> None:
        self.config = config
        self._run = run
        self._clock = clock
        self._on_finished = on_finished
        self._on_started = on_started

    def stream_name(self) -> str:
        return AGENT_PREFIX + self.config.decl.name

    def initial_state(self) -> FleetAgentState:
        return FleetAgentState()

    def evolve(self, state: FleetAgentState, event: object) -> FleetAgentState:
        if is_timer_event(event):
            state = attrs.evolve(state, timers=state.timers.evolve(event))
            if isinstance(event, TimerScheduled):
                state = attrs.evolve(state, timer_seq=state.timer_seq + 1)
            return state
        if isinstance(event, FleetAgentHosted):
            return attrs.evolve(state, node=event.node, hosted_hash=event.spec_hash)
        if isinstance(event, FleetRunStarted):
            return attrs.evolve(state, runs=state.runs + 1, open_run=event)
        if isinstance(event, FleetRunFinished):
            day = _day(event.finished_at)
            used = (state.day_tokens if day == state.day else 0) + event.tokens
            return attrs.evolve(state, open_run=None, day=day, day_tokens=used)
        return state

    # -- deciding -----------------------------------------------------------------------

    def recovered(self, state: FleetAgentState) -> Decision | None:
        if state.open_run is not None:  # a run a previous node left: this node finishes it
            self._on_started(f"{state.open_run.run_id}@{self.config.decl.name}")
        events = self._configure(state, self.config)
        return Decision(events=events) if events else None

    def handle(self, state: FleetAgentState, message: object) -> Decision:
        if isinstance(message, AgentConfig):
            self.config = message
            return Decision(events=self._configure(state, message))
        if isinstance(message, TimerFired):
            if self.config.draining:
                return Decision()
            outcome = timer_decision(state.timers, message)
            if outcome is None or not outcome.events:
                return Decision()
            return Decision(events=[*outcome.events, *self._fired(state, message)])
        if isinstance(message, _RunDone):
            result = message.result
            return Decision(
                events=[
                    FleetRunFinished(
                        run_id=message.run_id,
                        status=result.status,
                        tokens=result.usage.total_tokens,
                        finished_at=message.now,
                        error=result.error,
                        error_code=result.error_code,
                    )
                ]
            )
        if isinstance(message, StepFailed) and isinstance(message.step, RunAgent):
            error = message.error
            return Decision(
                events=[
                    FleetRunFinished(
                        run_id=message.step.started.run_id,
                        status="failed",
                        tokens=0,
                        finished_at=self._clock(),
                        error=f"{type(error).__name__}: {error}",
                        error_code=getattr(error, "code", "internal"),
                    )
                ]
            )
        timers = timer_decision(state.timers, message)
        if timers is not None:
            return Decision.from_outcome(timers)
        return Decision()

    def _configure(self, state: FleetAgentState, config: AgentConfig) -> list[object]:
        """Host the agent on this node and make its timers match its schedules."""
        events: list[object] = []
        if state.node != config.node or state.hosted_hash != config.spec_hash:
            events.append(FleetAgentHosted(node=config.node, spec_hash=config.spec_hash))
        wanted = {} if config.retired else {s.key: s for s in config.decl.schedules}
        have = {t.note for t in state.timers.pending}
        for timer in state.timers.pending:
            if timer.note not in wanted:
                events.append(TimerCancelled(timer_id=timer.timer_id, reason="schedule removed"))
        seq = state.timer_seq
        for key, schedule in wanted.items():
            if key not in have:
                seq += 1
                events.append(self._timer(schedule, seq, after=config.now))
        return events

    def _timer(self, schedule: ScheduleDecl, seq: int, *, after: float) -> TimerScheduled:
        timer_id = f"{AGENT_PREFIX}{self.config.decl.name}/{seq}"
        if schedule.kind == "every":
            assert schedule.seconds is not None
            return TimerScheduled(
                timer_id=timer_id,
                due_at=after + schedule.seconds,
                note=schedule.key,
                every=schedule.seconds,
            )
        due = CronSchedule.parse(schedule.expression).next_after(after)
        assert due is not None  # parse checked that it matches some time
        return TimerScheduled(timer_id=timer_id, due_at=due, note=schedule.key)

    def _fired(self, state: FleetAgentState, fired: TimerFired) -> list[object]:
        config = self.config
        timer = state.timers.get(fired.timer_id)
        assert timer is not None  # timer_decision recorded it: it was pending
        schedules = {s.key: s for s in config.decl.schedules}
        schedule = schedules.get(timer.note)
        events: list[object] = []
        if schedule is not None and schedule.kind == "cron" and not config.retired:
            # The next slot after this firing: missed slots collapse into this one.
            events.append(self._timer(schedule, state.timer_seq + 1, after=fired.fired_at))
        if config.retired or schedule is None:
            return events
        reason = None
        if config.paused:
            reason = "paused"
        elif state.open_run is not None:
            reason = "busy"
        elif config.decl.day_tokens is not None:
            used = state.day_tokens if state.day == _day(fired.fired_at) else 0
            if used >= config.decl.day_tokens:
                reason = "budget.day"
        if reason is not None:
            events.append(FleetRunSkipped(trigger=schedule.key, reason=reason, at=fired.fired_at))
            return events
        number = state.runs + 1
        events.append(
            FleetRunStarted(
                run_id=f"run-{number}",
                session_id=f"{config.decl.name}-{number}",
                input=schedule.input or config.decl.input,
                trigger=schedule.key,
                spec_hash=config.spec_hash,
                package_version=package_version(),
                started_at=fired.fired_at,
            )
        )
        return events

    def next_step(self, state: FleetAgentState) -> object | None:
        return None if state.open_run is None else RunAgent(state.open_run)

    async def execute(self, step: object) -> object:
        assert isinstance(step, RunAgent)
        result = await self._run(self.config.decl, step.started)
        return _RunDone(step.started.run_id, result, self._clock())

    def after_persist(self, events: Sequence[object]) -> None:
        for event in events:
            if isinstance(event, FleetRunStarted):
                self._on_started(f"{event.run_id}@{self.config.decl.name}")
            elif isinstance(event, FleetRunFinished):
                self._on_finished(f"{event.run_id}@{self.config.decl.name}")
