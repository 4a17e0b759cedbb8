"""The queued append both SQL writers take, and its rules: taking one back, when a
pipelined append may not commit, resuming its caller. The writer thread's shared state
and rules are ``_store._writer.GroupCommitWriter``.

A task waiting for a queued append or maintenance write is cancelled: if the writer thread
has not taken the item yet it never will, else the item's outcome is decided by the work in
flight and the task keeps waiting for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, final

import trio

from protocols.lowlevel import slot_setter

from .._virtual_time import Flight
from ._contract import AppendResult, NewEvent


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
    begun without waiting (``begin_append`` of either store) has ``wake`` called instead,
    and may be queued ``after`` another of its stream. On PostgreSQL, ``fence`` is the
    (shard, epoch) of the lease it is made under (``None``: not fenced).
    """

    __slots__ = (
        "after",
        "events",
        "expected_version",
        "fence",
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

    def __init__(  # noqa: PLR0917  # built on every append: positional is the cheaper call
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        queue: list[PendingAppend],
        mutex: threading.Lock,
        flight: Flight | None = None,
        fence: tuple[int, int] | None = None,
        after: PendingAppend | None = None,
        wake: Callable[[], object] | None = None,
    ) -> None:
        self.stream = stream
        self.fence = fence
        self.events = events
        self.expected_version = expected_version
        self.queue = queue
        self.mutex = mutex
        self.flight = flight
        # Queued behind ``after`` (same stream, before it is decided): commits only if
        # ``after`` does, at the version ``after`` leaves (see ``PipelinedAppends``).
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


def behind_failure(pending: PendingAppend) -> bool:
    """Whether ``pending`` was queued behind an append that failed, or that conflicted
    or left another version in this plan: it then conflicts too, never landing on top of
    what another writer wrote meanwhile, even at its expected version."""
    after = pending.after
    return after is not None and (
        after.outcome is not None or after.version != pending.expected_version
    )


def resume(decided: list[PendingAppend]) -> None:
    """Resume the callers of decided appends (Trio thread): wake what began one without
    waiting, reschedule the task parked on each other."""
    for pending in decided:
        pending.after = None  # decided: a chain of them must not keep the first alive
        wake, pending.wake = pending.wake, None  # a bound method of what holds pending
        if wake is None:
            trio.lowlevel.reschedule(pending.task)
        else:
            wake()
