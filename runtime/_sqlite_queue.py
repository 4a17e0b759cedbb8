"""What callers queue for the SQLite store's writer thread: appends and maintenance writes.

Each item carries what the writer thread needs to decide it and how its caller waits:
parked on its task, or woken through a callback (an append begun without waiting).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import final

import trio

from protocols.lowlevel import slot_setter

from ._event_store import AppendResult, NewEvent
from ._sqlite_schema import map_errors
from ._virtual_time import Flight
from ._writer_queue import take_back

__all__ = ["PendingAppend", "WriteJob"]

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


@final
class PendingAppend:
    """One queued append, waiting for its group commit (a plain slotted class: hot path).

    The caller parks its task directly (``wait_task_rescheduled``) and is rescheduled
    once its group is committed: no ``trio.Event`` or parking lot per append. An append
    begun without waiting (``SqliteEventStore.begin_append``) has ``wake`` called instead,
    and may be queued ``after`` another of its stream.
    """

    __slots__ = (
        "after",
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
        "wake",
    )

    def __init__(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        queue: list[PendingAppend],
        mutex: threading.Lock,
        *,
        flight: Flight | None = None,
        after: PendingAppend | None = None,
        wake: Callable[[], object] | None = None,
    ) -> None:
        self.stream = stream
        self.events = events
        self.expected_version = expected_version
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        # Queued behind ``after`` (same stream, before it is decided): commits only if
        # ``after`` does, at the version ``after`` leaves (see SqliteEventStore.begin_append).
        self.after = after
        # Called (in Trio) once decided, instead of rescheduling the task.
        self.wake = wake
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


@final
class WriteJob:
    """A maintenance write (snapshot, deletion, vacuum) queued for the writer thread."""

    __slots__ = ("error", "flight", "fn", "mutex", "queue", "result", "task")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], object],
        queue: list[WriteJob],
        mutex: threading.Lock,
        flight: Flight | None = None,
    ) -> None:
        self.fn = fn
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        self.task = trio.lowlevel.current_task()
        self.result: object = None
        self.error: BaseException | None = None

    def run(self, conn: sqlite3.Connection, path: str) -> None:
        """Run in the writer thread; the outcome waits in ``result`` or ``error``."""
        try:
            with map_errors(path):
                self.result = self.fn(conn)
        except BaseException as exc:  # handed to the waiting task
            self.error = exc

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """Cancellation: give up if not started, else wait for it (like ``to_thread``)."""
        return take_back(self)
