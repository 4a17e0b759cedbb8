"""The actor mailbox: a bounded user lane, an unbounded system lane, one receiver."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar, final

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
A = TypeVar("A")

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
        "_on_put_arg",
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
        # Made at the first message: an actor that never gets one (a registered session
        # not used yet) costs no queue, whose first block alone is over 600 bytes.
        self._user: deque[T] | None = None
        self._system: deque[T] | None = None
        self._receiver: Task | None = None
        self._not_full: trio.lowlevel.ParkingLot | None = None
        self._closed = False
        self._dropped = 0
        self._on_put: Callable[[Any], None] | None = None
        self._on_put_arg: object = None

    def shrink(self) -> None:
        """Drop the queues while they are empty (each holds a block of over 600 bytes):
        for an actor that rests until its next message, as a lazy one does."""
        if not self._user:
            self._user = None
        if not self._system:
            self._system = None

    def call_on_first_put(self, hook: Callable[[A], None], arg: A) -> None:
        """Call ``hook(arg)`` (once) when a message arrives with no receiver waiting: how
        an actor that starts lazily is started by its first message. (A hook and its
        argument rather than a closure: a million lazy actors would each hold one.)"""
        self._on_put = hook
        self._on_put_arg = arg

    # -- sending ------------------------------------------------------------------

    def put_nowait(self, item: T) -> None:
        """Queue a user message without waiting, applying the overflow policy when full."""
        if self._closed:
            raise ActorStoppedError(self._owner)
        user = self._user_lane()
        if len(user) >= self._capacity:
            if self._overflow == "reject":
                raise MailboxFullError(self._owner, self._capacity)
            self._dropped += 1
            if self._overflow == "drop_newest":
                return
            user.popleft()
        user.append(item)
        self._wake()

    async def put(self, item: T) -> None:
        """Queue a user message, waiting while the user lane is full."""
        await checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise ActorStoppedError(self._owner)
            user = self._user_lane()
            if len(user) < self._capacity:
                user.append(item)
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
        self._user_lane().append(item)
        self._wake()

    def _user_lane(self) -> deque[T]:
        user = self._user
        if user is None:
            user = self._user = deque()
        return user

    def empty(self) -> bool:
        """Whether no message is queued in either lane."""
        return not self._user and not self._system

    def has_room(self) -> bool:
        """Whether a user message fits now."""
        return self._user is None or len(self._user) < self._capacity

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
            hook, arg = self._on_put, self._on_put_arg
            self._on_put = self._on_put_arg = None
            hook(arg)

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

    def peek_system(self) -> T | None:
        """The system message :meth:`get_nowait` would return next, left queued; ``None``
        if the system lane is empty."""
        system = self._system
        return system[0] if system else None

    async def wait(self) -> None:
        """Park until something is queued or :meth:`interrupt` is called."""
        if self._user or self._system:
            return
        task = current_task()
        self._receiver = task
        task.custom_sleep_data = self  # parked here: see give_back

        def abort(_: object) -> Abort:
            self._receiver = None
            task.custom_sleep_data = None
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)

    def lend(self) -> Task | None:
        """Take the parked receiver's turn, if it is parked with nothing queued: the caller
        handles one item in its stead, then hands the receiver back to
        :meth:`give_back`. ``None`` (nothing lent) if the receiver is busy, absent, or has
        something queued to handle first.

        How a task that has the next item in hand (a step's result) handles it without a
        hop through the queue and two task switches. The receiver stays parked meanwhile
        and nothing wakes it: messages that arrive queue up, and :meth:`give_back` wakes
        it for them, so the mailbox stays serial.
        """
        receiver = self._receiver
        if receiver is None or self._user or self._system or self._closed:
            return None
        self._receiver = None
        return receiver

    def give_back(self, receiver: Task, *, wake: bool) -> None:
        """Return the turn :meth:`lend` took: park ``receiver`` again, or wake it if a
        message came or the mailbox closed meanwhile, or ``wake`` says to (a stop was
        requested: :meth:`interrupt` found nobody to wake)."""
        if receiver.custom_sleep_data is not self:
            return  # cancelled meanwhile: it has left :meth:`wait`
        if wake or self._user or self._system or self._closed:
            reschedule(receiver)
        else:
            self._receiver = receiver

    def interrupt(self) -> None:
        """Wake the receiver even though nothing was queued (a stop was requested)."""
        self._wake()

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> list[T]:
        """Refuse further messages; return what was still queued (system lane first)."""
        self._closed = True
        pending: list[T] = list(self._system or ()) + list(self._user or ())
        self._dropped += len(pending)
        self._user = None
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
            queued=len(self._user or ()),
            queued_system=len(self._system or ()),
            capacity=self._capacity,
            waiting_senders=len(self._not_full) if self._not_full is not None else 0,
            dropped=self._dropped,
            closed=self._closed,
        )
