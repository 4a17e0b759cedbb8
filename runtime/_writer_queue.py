"""What callers queue for a writer thread, the SQLite store's and the PostgreSQL store's:
appends and maintenance writes, and taking them back.

A task waiting for a queued append or maintenance write is cancelled: if the writer thread
has not taken the item yet it never will, else the item's outcome is decided by the work in
flight and the task keeps waiting for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import trio

from protocols.lowlevel import slot_setter

from ._event_store import AppendResult, NewEvent
from ._virtual_time import Flight

ConnT = TypeVar("ConnT")
"""The writer thread's connection (``sqlite3.Connection``, ``psycopg.Connection``)."""

_new_object = object.__new__
_SET_STREAM = slot_setter(AppendResult, "stream")
_SET_VERSION = slot_setter(AppendResult, "version")
_SET_FIRST = slot_setter(AppendResult, "first_position")
_SET_LAST = slot_setter(AppendResult, "last_position")


def _set_result_slots(
    result: AppendResult, stream: str, version: int, first: int, last: int
) -> None:
    """Fill a new AppendResult's slots directly (once per append: the hot path).

    AppendResult is a frozen, slotted attrs class, whose ``__init__`` goes through the
    frozen ``__setattr__`` guard for each field; writing the slots through their
    descriptors builds the same object (a test compares them) at half the cost.
    """
    _SET_STREAM(result, stream)
    _SET_VERSION(result, version)
    _SET_FIRST(result, first)
    _SET_LAST(result, last)


class Queued(Protocol):
    """An item queued for a writer thread (an append or a maintenance write)."""

    @property
    def queue(self) -> list[Any]:
        """The queue it waits in (items of its own kind)."""

    @property
    def mutex(self) -> threading.Lock:
        """The lock the queue is shared under."""

    @property
    def flight(self) -> Flight | None:
        """Under virtual time, the flight that lands once the item is decided."""


def take_back(item: Queued) -> trio.lowlevel.Abort:
    """``abort_fn`` of a task parked on ``item``: ``SUCCEEDED`` if it was still queued
    (now removed, its flight landed), ``FAILED`` if the thread has it (bounded by one
    commit or one write; the cancellation is delivered at the task's next checkpoint)."""
    with item.mutex:
        try:
            item.queue.remove(item)
        except ValueError:
            return trio.lowlevel.Abort.FAILED
    if item.flight is not None:
        item.flight.land()  # never handed to the thread: nothing to wait for
    return trio.lowlevel.Abort.SUCCEEDED


class QueuedAppend:
    """One queued append, waiting for its group commit (a plain slotted class: hot path).

    The caller parks its task directly (``wait_task_rescheduled``) and is rescheduled
    once its group is committed: no ``trio.Event`` or parking lot per append. Each store
    subclasses it with what its writer needs besides.
    """

    __slots__ = (
        "events",
        "expected_version",
        "first_position",
        "flight",
        "last_position",
        "mutex",
        "outcome",
        "queue",
        "stream",
        "task",
        "version",
    )

    def __init__(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        queue: list[Any],
        mutex: threading.Lock,
        *,
        flight: Flight | None,
    ) -> None:
        self.stream = stream
        self.events = events
        self.expected_version = expected_version
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        self.task = trio.lowlevel.current_task()
        # An error, or None: once the caller is resumed, None means committed, with the
        # figures below (set by the writer thread; the caller builds the AppendResult).
        self.outcome: BaseException | None = None
        self.version = 0
        self.first_position = 0
        self.last_position = 0

    def result(self) -> AppendResult:
        """What the append came to, once decided: its result, or its error raised."""
        if self.outcome is not None:
            raise self.outcome
        # AppendResult(...) without its frozen-attribute guard: see _set_result_slots.
        result: AppendResult = _new_object(AppendResult)
        _set_result_slots(
            result, self.stream, self.version, self.first_position, self.last_position
        )
        return result

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if still queued, else wait for the commit in flight.

        Once the writer thread has taken the append out of the queue its outcome is
        decided by the commit in flight (bounded by one commit), so the caller keeps
        waiting and learns what happened; the cancellation is delivered at its next
        checkpoint.
        """
        return take_back(self)


class QueuedWrite(Generic[ConnT]):
    """A maintenance write queued for the writer thread; the outcome waits in ``result``
    or ``error``."""

    __slots__ = ("error", "flight", "fn", "mutex", "queue", "result", "task")

    def __init__(
        self,
        fn: Callable[[ConnT], object],
        queue: list[Any],
        mutex: threading.Lock,
        flight: Flight | None,
    ) -> None:
        self.fn = fn
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        self.task = trio.lowlevel.current_task()
        self.result: object = None
        self.error: BaseException | None = None

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if not started, else wait for it (like ``to_thread``)."""
        return take_back(self)
