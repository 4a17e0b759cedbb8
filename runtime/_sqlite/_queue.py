"""What callers queue for the SQLite store's writer thread besides appends (which both
writers share: ``_store._writer_queue.PendingAppend``): maintenance writes."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import final

import trio

from .._store._writer_queue import take_back
from .._virtual_time import Flight
from ._schema import map_errors

__all__ = ["WriteJob"]


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
