"""What an owner of durable timers folds and decides: events, ``TimerBook``, messages.

A timer lives in its owner's stream: the owner (an event-sourced actor) appends
``TimerScheduled``, ``TimerFired`` and ``TimerCancelled`` (one writer per stream); the
runtime's timers service (``runtime._timers._service``) only reads them. The owner records each
firing with the timer id and due time, so a re-delivery (after a crash, or a restart of the
owner) is dropped: effectively once.

An actor owns timers by keeping a :class:`TimerBook` in its state and handing timer
messages to :func:`timer_decision`::

    @event_type("reminder.state")  # only needed for snapshots
    @attrs.frozen
    class Reminders:
        timers: TimerBook = attrs.field(factory=TimerBook)
        woken: int = 0

    class Reminder(EventSourcedActor[Reminders]):
        def initial_state(self) -> Reminders:
            return Reminders()

        def evolve(self, state: Reminders, event: object) -> Reminders:
            if is_timer_event(event):
                state = attrs.evolve(state, timers=state.timers.evolve(event))
            if isinstance(event, TimerFired):  # only recorded firings get here
                state = attrs.evolve(state, woken=state.woken + 1)
            return state

        def handle(self, state: Reminders, message: object) -> Decision:
            outcome = timer_decision(state.timers, message)
            if outcome is not None:
                return Decision.from_outcome(outcome)
            ...  # the actor's own messages

    timer_id = await runtime.timers.schedule(ref, delay=3600, note="check the build")

An actor with its own ``registry`` calls :func:`register_timer_events` on it once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import final

import attrs

from protocols.codec import EventRegistry, default_registry
from protocols.errors import TimerArgumentError

from .._ref import PriorityMessage, Request

# -- validation ------------------------------------------------------------------------


def check_seconds(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{argument} must be a number of seconds, got {type(value).__name__}"
        raise TypeError(msg)
    if not math.isfinite(value):
        msg = f"{argument} must be a finite number of seconds, got {value!r}"
        raise TimerArgumentError(argument, msg)
    return float(value)


def check_every(argument: str, value: object) -> float | None:
    if value is None:
        return None
    every = check_seconds(argument, value)
    if every <= 0:
        msg = (
            f"{argument} must be > 0 seconds (the gap between firings of a recurring "
            f"timer), got {value!r}"
        )
        raise TimerArgumentError(argument, msg)
    return every


def check_text(argument: str, value: object, *, empty: bool) -> str:
    if not isinstance(value, str):
        msg = f"{argument} must be a str, got {type(value).__name__}"
        raise TypeError(msg)
    if not empty and not value:
        raise TimerArgumentError(argument, f"{argument} must be a non-empty string")
    return value


def _validate_id(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_text(attribute.name, value, empty=False)


def _validate_due(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    check_seconds(attribute.name, value)


def _validate_note(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_text(attribute.name, value, empty=True)


def _validate_every(
    _instance: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    check_every(attribute.name, value)


# -- events (in the owner's stream) ----------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class TimerScheduled:
    """A timer was scheduled (event in the owner's stream)."""

    timer_id: str
    """The timer's id, unique in the runtime."""
    due_at: float
    """When it is first due, in epoch seconds of the runtime clock."""
    note: str = ""
    """What the timer is for; delivered back with every firing."""
    every: float | None = None
    """Seconds from one firing to the next due time (fixed delay); ``None``: one-shot."""


@final
@attrs.frozen(kw_only=True)
class TimerFired(PriorityMessage):
    """A timer fired: the message the service delivers, and the event the owner records.

    The same value serves both, so the owner records exactly what was delivered. It takes
    the mailbox's priority lane: a busy or full mailbox neither delays nor drops a firing,
    and the timers service never waits on one owner.
    """

    timer_id: str
    """The timer that fired."""
    due_at: float
    """The due time this firing is for: with ``timer_id``, the key that drops duplicates."""
    fired_at: float
    """When it was delivered (never before ``due_at``); a recurring timer's next due time
    is ``fired_at + every``."""


@final
@attrs.frozen(kw_only=True)
class TimerCancelled:
    """A timer was cancelled or vetoed before it fired (event in the owner's stream)."""

    timer_id: str
    """The cancelled timer."""
    reason: str
    """Why, for people: ``"cancelled"`` by default, ``"vetoed: ..."`` from the hook."""


TIMER_EVENT_NAMES: frozenset[str] = frozenset({"timer.scheduled", "timer.fired", "timer.cancelled"})
"""The stored type names of the timer events (what the service scans the log for)."""

TIMER_EVENT_CLASSES: frozenset[type[object]] = frozenset(
    {TimerScheduled, TimerFired, TimerCancelled}
)


def register_timer_events(registry: EventRegistry) -> None:
    """Register the timer events in ``registry`` under their stable names.

    The default registry has them already; an actor with its own ``registry`` calls this
    once, at import time, so it can append them.

    Raises:
        ValueError: ``registry`` already holds one of these classes or names.
    """
    registry.register(TimerScheduled, name="timer.scheduled")
    registry.register(TimerFired, name="timer.fired")
    registry.register(TimerCancelled, name="timer.cancelled")


register_timer_events(default_registry)


def is_timer_event(event: object) -> bool:
    """Whether ``event`` is one of the timer events (so :meth:`TimerBook.evolve` uses it)."""
    return type(event) in TIMER_EVENT_CLASSES


# -- the owner's book --------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class PendingTimer:
    """A timer that has not finished: it is waiting for ``due_at``."""

    timer_id: str
    """The timer's id."""
    due_at: float
    """When it is next due, in epoch seconds of the runtime clock."""
    note: str = ""
    """What the timer is for."""
    every: float | None = None
    """The fixed delay of a recurring timer; ``None`` for a one-shot."""


def _by_due(timer: PendingTimer) -> tuple[float, str]:
    return (timer.due_at, timer.timer_id)


def _sorted_timers(timers: Iterable[PendingTimer]) -> tuple[PendingTimer, ...]:
    return tuple(sorted(timers, key=_by_due))


def _as_frozenset(ids: Iterable[str]) -> frozenset[str]:
    return frozenset(ids)


@final
@attrs.frozen(kw_only=True)
class TimerBook:
    """The timers one owner holds: the part of its state its timer events fold into.

    Keep one in an event-sourced actor's state (snapshots then carry it), fold timer
    events with :meth:`evolve` and decide timer messages with :func:`timer_decision`.
    Duplicate firings need no growing set of past firings: a firing is recorded only
    while its ``due_at`` is the timer's current due time, and recording it moves the due
    time on (recurring) or finishes the timer (one-shot).
    """

    pending: tuple[PendingTimer, ...] = attrs.field(default=(), converter=_sorted_timers)
    """Pending timers, by due time then id."""
    finished: frozenset[str] = attrs.field(default=frozenset(), converter=_as_frozenset)
    """Ids of timers that fired (one-shot) or were cancelled: scheduling one again is a
    no-op, so a retried ``ScheduleTimer`` cannot revive a finished timer."""

    @property
    def next_due(self) -> float | None:
        """When the next pending timer is due (the clock's epoch seconds), if any."""
        return self.pending[0].due_at if self.pending else None

    def get(self, timer_id: str) -> PendingTimer | None:
        """The pending timer with this id, or ``None``."""
        for timer in self.pending:
            if timer.timer_id == timer_id:
                return timer
        return None

    def evolve(self, event: object) -> TimerBook:
        """Fold one event: pure and total (anything but a timer event returns ``self``)."""
        if isinstance(event, TimerScheduled):
            timer = PendingTimer(
                timer_id=event.timer_id, due_at=event.due_at, note=event.note, every=event.every
            )
            return TimerBook(
                pending=[*self._without(event.timer_id), timer], finished=self.finished
            )
        if isinstance(event, TimerFired):
            current = self.get(event.timer_id)
            if current is None or current.due_at != event.due_at:
                return self
            if current.every is None:
                return self._finish(event.timer_id)
            # Fixed delay: the next period starts when this firing happened, so periods
            # missed while the runtime was down collapse into this one firing.
            following = attrs.evolve(current, due_at=event.fired_at + current.every)
            return TimerBook(
                pending=[*self._without(event.timer_id), following], finished=self.finished
            )
        if isinstance(event, TimerCancelled):
            if self.get(event.timer_id) is None:
                return self
            return self._finish(event.timer_id)
        return self

    def _without(self, timer_id: str) -> list[PendingTimer]:
        return [timer for timer in self.pending if timer.timer_id != timer_id]

    def _finish(self, timer_id: str) -> TimerBook:
        return TimerBook(pending=self._without(timer_id), finished=self.finished | {timer_id})


# -- messages to the owner -----------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class ScheduleTimer(Request[str]):
    """Ask an owner to schedule a timer; it replies with the timer id.

    The id comes from the caller, so asking again with the same id (a retry after a
    timeout) schedules nothing new. Built by :meth:`TimerService.schedule`.

    Raises:
        TimerArgumentError: ``timer_id`` is empty, ``due_at`` is not finite or ``every``
            is not > 0.
        TypeError: a field has the wrong type.
    """

    timer_id: str = attrs.field(validator=_validate_id)
    """The new timer's id."""
    due_at: float = attrs.field(validator=_validate_due)
    """When it is first due, in epoch seconds of the runtime clock."""
    note: str = attrs.field(default="", validator=_validate_note)
    """What the timer is for."""
    every: float | None = attrs.field(default=None, validator=_validate_every)
    """Fixed delay between firings; ``None`` for a one-shot."""


@final
@attrs.frozen(kw_only=True)
class CancelTimer(Request[bool], PriorityMessage):
    """Ask an owner to cancel a pending timer; it replies whether one was pending.

    Takes the priority lane, like other cancellations: it overtakes queued user messages.
    """

    timer_id: str
    """The timer to cancel."""
    reason: str = "cancelled"
    """Recorded in :class:`TimerCancelled`."""


@final
@attrs.frozen
class ListTimers(Request[tuple[PendingTimer, ...]]):
    """Ask an owner for its pending timers (by due time)."""


def _as_tuple(events: Iterable[object]) -> tuple[object, ...]:
    return tuple(events)


@final
@attrs.frozen
class TimerOutcome:
    """What a timer message means for its owner: events to append, then a reply.

    Plain data, so timers need nothing from the actor base: the owner's ``handle`` returns
    ``Decision.from_outcome(outcome)``.
    """

    events: tuple[object, ...] = attrs.field(default=(), converter=_as_tuple)
    """Timer events to append, in order (may be empty)."""
    reply: object = None
    """The answer to the message's ``ask``."""


def timer_decision(book: TimerBook, message: object) -> TimerOutcome | None:
    """What a timer message means for an owner holding ``book``. Pure.

    * :class:`ScheduleTimer`: append :class:`TimerScheduled`, reply with the id (nothing
      new if the id is already pending or finished).
    * :class:`CancelTimer`: append :class:`TimerCancelled`, reply ``True``; ``False`` if
      no such timer is pending.
    * :class:`TimerFired`: append it if it is for the timer's current due time; a
      re-delivery, or a firing of a cancelled timer, appends nothing.
    * :class:`ListTimers`: reply with the pending timers.

    Returns:
        The events and reply, or ``None`` when ``message`` is not a timer message.
    """
    if isinstance(message, TimerFired):
        current = book.get(message.timer_id)
        if current is None or current.due_at != message.due_at:
            return TimerOutcome()
        return TimerOutcome(events=[message])
    if isinstance(message, ScheduleTimer):
        timer_id = message.timer_id
        if timer_id in book.finished or book.get(timer_id) is not None:
            return TimerOutcome(reply=timer_id)
        scheduled = TimerScheduled(
            timer_id=timer_id, due_at=message.due_at, note=message.note, every=message.every
        )
        return TimerOutcome(events=[scheduled], reply=timer_id)
    if isinstance(message, CancelTimer):
        if book.get(message.timer_id) is None:
            return TimerOutcome(reply=False)
        cancelled = TimerCancelled(timer_id=message.timer_id, reason=message.reason)
        return TimerOutcome(events=[cancelled], reply=True)
    if isinstance(message, ListTimers):
        return TimerOutcome(reply=book.pending)
    return None
