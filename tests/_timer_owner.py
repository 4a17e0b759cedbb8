"""A small event-sourced actor that owns timers, shared by the timer tests and crash child."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from protocols.codec import EventRegistry
from runtime import Decision, EventSourcedActor, RecordedEvent, Request
from runtime.lowlevel import TimerBook, is_timer_event, register_timer_events, timer_decision
from runtime.timers import TimerFired

registry = EventRegistry()
register_timer_events(registry)

STREAM = "owner/1"


@registry.event_type("test.owner_state")
@attrs.frozen
class OwnerState:
    """The owner's state: its timers plus a count of recorded firings."""

    timers: TimerBook = attrs.field(factory=TimerBook)
    """Its pending timers."""
    fired: int = 0
    """How many firings it recorded."""


@attrs.frozen
class GetState(Request[OwnerState]):
    """Ask for the folded state."""


def evolve(state: OwnerState, event: object) -> OwnerState:
    """The owner's fold (a plain function, so tests can fold the log themselves)."""
    if is_timer_event(event):
        state = attrs.evolve(state, timers=state.timers.evolve(event))
    if isinstance(event, TimerFired):
        state = attrs.evolve(state, fired=state.fired + 1)
    return state


def fold(records: Sequence[RecordedEvent]) -> OwnerState:
    """Fold stored records of the owner's stream from the empty state."""
    state = OwnerState()
    for record in records:
        state = evolve(state, registry.decode_record(record))
    return state


class Owner(EventSourcedActor[OwnerState]):
    """Owns timers in ``stream``; ``on_fired`` hears each recorded firing.

    ``crash_budget`` is a one-item list shared across restarts: while it is positive, a
    ``TimerFired`` message crashes the actor before anything is recorded (and counts it
    down), losing that delivery the way a crash would.
    """

    registry = registry

    def __init__(
        self,
        stream: str = STREAM,
        *,
        on_fired: Callable[[TimerFired], None] | None = None,
        snapshot_every: int | None = None,
        crash_budget: list[int] | None = None,
    ) -> None:
        self._name = stream
        self._on_fired = on_fired
        self.snapshot_every = snapshot_every
        self._crash_budget = crash_budget

    def stream_name(self) -> str:
        return self._name

    def initial_state(self) -> OwnerState:
        return OwnerState()

    def evolve(self, state: OwnerState, event: object) -> OwnerState:
        return evolve(state, event)

    def handle(self, state: OwnerState, message: object) -> Decision:
        if isinstance(message, TimerFired) and self._crash_budget and self._crash_budget[0] > 0:
            self._crash_budget[0] -= 1
            raise RuntimeError("crash while handling a firing")
        outcome = timer_decision(state.timers, message)
        if outcome is not None:
            return Decision.from_outcome(outcome)
        if isinstance(message, GetState):
            return Decision(reply=state)
        raise TypeError(f"Owner does not handle {type(message).__name__}")

    def after_persist(self, events: Sequence[object]) -> None:
        if self._on_fired is not None:
            for event in events:
                if isinstance(event, TimerFired):
                    self._on_fired(event)
