"""The actor mailbox: a bounded user lane, an unbounded system lane, one receiver."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, TypeVar, final

import attrs
import trio
from trio.lowlevel import (
    Abort,
    Task,
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    current_task,
    reschedule,
    wait_task_rescheduled,
)

from protocols.errors import ActorStoppedError, MailboxFullError

T = TypeVar("T")

OverflowPolicy = Literal["reject", "drop_oldest", "drop_newest"]
"""What a non-waiting send does when the user lane is full.

``reject`` raises :class:`~protocols.errors.MailboxFullError`; ``drop_oldest`` evicts the
oldest queued user message to make room; ``drop_newest`` discards the new message. Drops
are counted in :class:`MailboxStatistics`. Waiting sends (``tell``) never drop: they wait.
"""

_OVERFLOW_POLICIES = ("reject", "drop_oldest", "drop_newest")

DEFAULT_CAPACITY = 1000
"""Bound of a mailbox's user lane unless a spawn says otherwise."""


@final
@attrs.frozen
class MailboxStatistics:
    """A snapshot of one mailbox."""

    queued: int
    """User messages waiting to be handled."""
    queued_system: int
    """System messages (priority lane) waiting to be handled."""
    capacity: int
    """Bound of the user lane."""
    waiting_senders: int
    """Tasks blocked in ``tell`` because the user lane is full."""
    dropped: int
    """Messages lost to the overflow policy or discarded when the actor stopped."""
    closed: bool
    """Whether the mailbox accepts no more messages."""


def check_mailbox_config(capacity: int, overflow: str) -> None:
    """Validate mailbox settings, naming the bad argument.

    Raises:
        TypeError: ``capacity`` is not an int.
        ValueError: ``capacity`` < 1 or ``overflow`` is not a known policy.
    """
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        msg = f"mailbox capacity must be an int, got {type(capacity).__name__}"
        raise TypeError(msg)
    if capacity < 1:
        msg = f"mailbox capacity must be >= 1, got {capacity}"
        raise ValueError(msg)
    if overflow not in _OVERFLOW_POLICIES:
        msg = f"overflow must be one of {', '.join(_OVERFLOW_POLICIES)}; got {overflow!r}"
        raise ValueError(msg)


class _Mailbox(Generic[T]):
    """A serial mailbox with a priority lane.

    Unlike a Trio memory channel it has two lanes, so system messages (Cancel, Stop, child
    exits) overtake queued user messages, and exactly one receiver that drains items with
    ``get_nowait`` in a loop: the cost per message stays close to a raw channel.
    """

    __slots__ = (
        "_capacity",
        "_closed",
        "_dropped",
        "_not_full",
        "_on_put",
        "_overflow",
        "_owner",
        "_receiver",
        "_system",
        "_user",
    )

    def __init__(self, owner: str, capacity: int, overflow: OverflowPolicy) -> None:
        self._owner = owner
        self._capacity = capacity
        self._overflow = overflow
        self._user: deque[T] = deque()
        self._system: deque[T] | None = None
        self._receiver: Task | None = None
        self._not_full: trio.lowlevel.ParkingLot | None = None
        self._closed = False
        self._dropped = 0
        self._on_put: Callable[[], None] | None = None

    def call_on_first_put(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (once) when a message arrives with no receiver waiting: how an
        actor that starts lazily is started by its first message."""
        self._on_put = hook

    # -- sending ------------------------------------------------------------------

    def put_nowait(self, item: T) -> None:
        """Queue a user message without waiting, applying the overflow policy when full."""
        if self._closed:
            raise ActorStoppedError(self._owner)
        if len(self._user) >= self._capacity:
            if self._overflow == "reject":
                raise MailboxFullError(self._owner, self._capacity)
            self._dropped += 1
            if self._overflow == "drop_newest":
                return
            self._user.popleft()
        self._user.append(item)
        self._wake()

    async def put(self, item: T) -> None:
        """Queue a user message, waiting while the user lane is full."""
        await checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise ActorStoppedError(self._owner)
            if len(self._user) < self._capacity:
                self._user.append(item)
                self._wake()
                await cancel_shielded_checkpoint()
                return
            if self._not_full is None:
                self._not_full = trio.lowlevel.ParkingLot()
            await self._not_full.park()

    def put_unchecked(self, item: T) -> None:
        """Queue a user message and do not wait; the caller waits for the reply next.

        Used by ``ask`` after :meth:`has_room`: the reply wait is its checkpoint, so this
        skips the one ``put`` would add.
        """
        if self._closed:
            raise ActorStoppedError(self._owner)
        self._user.append(item)
        self._wake()

    def empty(self) -> bool:
        """Whether no message is queued in either lane."""
        return not self._user and not self._system

    def has_room(self) -> bool:
        """Whether a user message fits now."""
        return len(self._user) < self._capacity

    def put_system(self, item: T) -> None:
        """Queue a system message ahead of every queued user message (never blocks)."""
        if self._closed:
            raise ActorStoppedError(self._owner)
        if self._system is None:
            self._system = deque()
        self._system.append(item)
        self._wake()

    def _wake(self) -> None:
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            reschedule(receiver)
        elif self._on_put is not None:
            hook, self._on_put = self._on_put, None
            hook()

    # -- receiving ----------------------------------------------------------------

    def get_nowait(self) -> T | None:
        """Return the next item, system lane first, or ``None`` when both lanes are empty."""
        system = self._system
        if system:
            return system.popleft()
        user = self._user
        if user:
            item = user.popleft()
            not_full = self._not_full
            if not_full is not None and not_full:
                not_full.unpark()
            return item
        return None

    async def wait(self) -> None:
        """Park until something is queued or :meth:`interrupt` is called."""
        if self._user or self._system:
            return
        self._receiver = current_task()

        def abort(_: object) -> Abort:
            self._receiver = None
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)

    def interrupt(self) -> None:
        """Wake the receiver even though nothing was queued (a stop was requested)."""
        self._wake()

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> list[T]:
        """Refuse further messages; return what was still queued (system lane first)."""
        self._closed = True
        pending: list[T] = list(self._system or ()) + list(self._user)
        self._dropped += len(pending)
        self._user.clear()
        self._system = None
        if self._not_full is not None:
            self._not_full.unpark_all()
        self._wake()
        return pending

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            queued=len(self._user),
            queued_system=len(self._system or ()),
            capacity=self._capacity,
            waiting_senders=len(self._not_full) if self._not_full is not None else 0,
            dropped=self._dropped,
            closed=self._closed,
        )
