"""What the SQLite and PostgreSQL writers share about their queued items: taking one back,
and when a pipelined append may not commit.

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


class _Decided(Protocol):
    """An append as its plan or commit left it."""

    @property
    def outcome(self) -> BaseException | None:
        """Its error, once decided; ``None`` while it is accepted or committed."""

    @property
    def version(self) -> int:
        """The version it leaves (0 while refused or not planned)."""


class _Pipelined(Protocol):
    """An append that may be queued behind another of its stream."""

    @property
    def after(self) -> _Decided | None:
        """The append it was queued behind, if any."""

    @property
    def expected_version(self) -> int:
        """The version it expects its stream at."""


def behind_failure(pending: _Pipelined) -> bool:
    """Whether ``pending`` was queued behind an append that failed, or that conflicted
    or left another version in this plan: it then conflicts too, never landing on top of
    what another writer wrote meanwhile, even at its expected version."""
    after = pending.after
    return after is not None and (
        after.outcome is not None or after.version != pending.expected_version
    )
