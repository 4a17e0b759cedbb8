"""Taking an item back from a writer thread's queue, for the SQLite and PostgreSQL stores.

A task waiting for a queued append or maintenance write is cancelled: if the writer thread
has not taken the item yet it never will, else the item's outcome is decided by the work in
flight and the task keeps waiting for it.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import trio

from ._virtual_time import Flight


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
