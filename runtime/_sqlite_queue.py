"""What callers queue for the SQLite store's writer thread: appends and maintenance writes.

Each item carries what the writer thread needs to decide it and how its caller waits:
parked on its task, or woken through a callback (an append begun without waiting).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import final

from ._event_store import NewEvent
from ._sqlite_schema import map_errors
from ._virtual_time import Flight
from ._writer_queue import QueuedAppend, QueuedWrite

__all__ = ["PendingAppend", "WriteJob"]


@final
class PendingAppend(QueuedAppend):
    """An append queued for the SQLite writer thread. One begun without waiting
    (``SqliteEventStore.begin_append``) has ``wake`` called instead of its task
    rescheduled, and may be queued ``after`` another of its stream."""

    __slots__ = ("after", "wake")

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
        super().__init__(stream, events, expected_version, queue, mutex, flight=flight)
        # Queued behind ``after`` (same stream, before it is decided): commits only if
        # ``after`` does, at the version ``after`` leaves (see SqliteEventStore.begin_append).
        self.after = after
        # Called (in Trio) once decided, instead of rescheduling the task.
        self.wake = wake


@final
class WriteJob(QueuedWrite[sqlite3.Connection]):
    """A maintenance write (snapshot, deletion, vacuum) queued for the writer thread."""

    __slots__ = ()

    def run(self, conn: sqlite3.Connection, path: str) -> None:
        """Run in the writer thread; the outcome waits in ``result`` or ``error``."""
        try:
            with map_errors(path):
                self.result = self.fn(conn)
        except BaseException as exc:  # handed to the waiting task
            self.error = exc
