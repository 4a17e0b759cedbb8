"""The actor base class, the context an actor acts through, and the plain supervisor."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar, final

from ._mailbox import DEFAULT_CAPACITY
from ._ref import ActorRef, MsgT, Reply
from ._supervision import ChildSpec, GiveUpPolicy, RestartType, Supervision

if TYPE_CHECKING:
    from ._cell import _Cell
    from ._clock import Clock, IdSource
    from ._idle import IdleCheck, IdleWatch
    from ._mailbox import OverflowPolicy
    from ._runtime import Runtime

ChildMsgT = TypeVar("ChildMsgT")

logger = logging.getLogger("powertrio.runtime")


class Actor(Generic[MsgT]):
    """Base class of every actor: override :meth:`receive`, optionally the lifecycle hooks.

    The runtime calls :meth:`receive` with one message at a time (a serial mailbox); its
    return value answers an ``ask``. Work that takes long runs in the actor's own nursery
    (``self.context.start_soon``) and reports back with a message, so the actor keeps
    receiving meanwhile. A supervisor makes a fresh instance for every restart: keep what
    must survive in the event log, not in attributes.

    Set the class attribute :attr:`supervision` to choose how this actor's children are
    supervised.
    """

    supervision: ClassVar[Supervision] = Supervision()
    """How this actor supervises the children it spawns."""

    _cell: _Cell
    _context: ActorContext[MsgT]

    @property
    def context(self) -> ActorContext[MsgT]:
        """The actor's handle on the runtime: its ref, children, nursery, clock."""
        return self._context

    async def on_start(self) -> None:
        """Called before the first message of each incarnation; a crash here is a crash."""

    async def receive(self, message: MsgT) -> object:
        """Handle one message; the return value is the reply to an ``ask``.

        The default refuses every message: a subclass that does not override it takes none.

        Raises:
            TypeError: always, in this default.
        """
        msg = f"{type(self).__name__} does not handle {type(message).__name__} messages"
        raise TypeError(msg)

    async def on_stop(self) -> None:
        """Called on an orderly stop, after the children have stopped."""


@final
class ActorContext(Generic[MsgT]):
    """What an actor acts through: its identity, its children, its nursery, the clock.

    Made by the runtime; reach it as ``self.context`` inside an actor.
    """

    __slots__ = ("_cell",)
    _cell: _Cell

    def __init__(self) -> None:
        msg = "ActorContext is made by the runtime: use `self.context` inside an actor"
        raise TypeError(msg)

    @classmethod
    def _create(cls, cell: _Cell) -> ActorContext[MsgT]:
        self = object.__new__(cls)
        self._cell = cell
        return self

    @property
    def ref(self) -> ActorRef[MsgT]:
        """This actor's own ref."""
        return self._cell.ref  # type: ignore[return-value]  # a cell erases the message type

    @property
    def id(self) -> str:
        return self._cell.id

    @property
    def path(self) -> str:
        return self._cell.path

    @property
    def incarnation(self) -> int:
        """1 for the first start, then one more for each restart."""
        return self._cell.incarnation

    @property
    def runtime(self) -> Runtime:
        return self._cell.runtime

    @property
    def clock(self) -> Clock:
        """The runtime clock: the only source of time for actor logic."""
        return self._cell.runtime.clock

    @property
    def ids(self) -> IdSource:
        """The runtime id source: the only source of ids and randomness for actor logic."""
        return self._cell.runtime.ids

    @property
    def children(self) -> tuple[ActorRef[object], ...]:
        """Refs of the live children, in start order."""
        children = self._cell._children
        return tuple(cell.ref for cell in children.cells.values()) if children else ()

    async def spawn(
        self,
        factory: Callable[[], Actor[ChildMsgT]],
        *,
        name: str | None = None,
        id: str | None = None,
        restart: RestartType = "permanent",
        on_give_up: GiveUpPolicy = "escalate",
        shutdown_timeout: float = 5.0,
        mailbox_capacity: int = DEFAULT_CAPACITY,
        overflow: OverflowPolicy = "reject",
        lazy: bool = False,
    ) -> ActorRef[ChildMsgT]:
        """Start a child supervised by this actor (see :class:`ChildSpec` for the options).

        The child runs in this actor's nursery: stopping or crashing this actor ends it.
        Returns once the child's ``on_start`` has run (or crashed, which its supervisor
        then handles), so children start in order.

        Raises:
            ActorExistsError: an actor with this ``id`` or a sibling with this ``name``
                is running.
            ActorStoppedError: this actor is stopping or has stopped (for the root:
                :class:`~protocols.errors.RuntimeClosedError`, the runtime is closing).
            ValueError, TypeError: an option is invalid (the message names it).
        """
        spec = ChildSpec(
            factory=factory,  # type: ignore[arg-type]  # ChildSpec erases the message type
            name=name,
            id=id,
            restart=restart,
            on_give_up=on_give_up,
            shutdown_timeout=shutdown_timeout,
            mailbox_capacity=mailbox_capacity,
            overflow=overflow,
            lazy=lazy,
        )
        return await self.spawn_spec(spec)  # type: ignore[return-value]  # see above

    async def spawn_spec(self, spec: ChildSpec) -> ActorRef[object]:
        """Start a child from a :class:`ChildSpec`."""
        self._cell.runtime._check_open()
        cell = await self._cell.children().start(spec)
        return cell.ref

    async def stop_child(self, child: ActorRef[object]) -> None:
        """Stop a child for good, in order (it will not be restarted).

        Raises:
            ValueError: ``child`` is not a child of this actor.
        """
        children = self._cell._children
        cell = child._cell
        if children is None or children.cells.get(cell.id) is not cell:
            msg = f"{child!r} is not a child of {self._cell.path}"
            raise ValueError(msg)
        await children.stop_child(cell, final=True)

    def start_soon(
        self, fn: Callable[..., Awaitable[object]], *args: object, name: str | None = None
    ) -> None:
        """Run long work in this actor's nursery; it is cancelled when the actor stops.

        An exception escaping ``fn`` crashes the actor (structured concurrency): report
        ordinary failures back to the actor as messages instead.
        """
        self._cell.nursery.start_soon(fn, *args, name=name or f"{self._cell.path} work")

    def defer_reply(self) -> Reply[object]:
        """Take over the reply to the message being handled; answer it later.

        The return value of ``receive`` is then ignored. If the actor stops or crashes
        before answering, the asker gets the typed error instead of waiting forever. For a
        message that was told (not asked) the reply goes nowhere.
        """
        return self._cell.defer_reply()

    def stop(self) -> None:
        """Stop this actor after the current message (an orderly stop).

        Whether its supervisor restarts it depends on its restart type: a ``permanent``
        child is restarted even after a normal stop.
        """
        self._cell.request_stop()

    def passivate(self) -> None:
        """Stop this incarnation after the current message to free its memory; the next
        message starts the actor again, as its first message starts a lazy one.

        For an actor whose state is in the log (an event-sourced actor folds it back at
        start). No restart is counted; replies still deferred fail with
        :class:`~protocols.errors.ActorStoppedError`, so passivate only when none is.
        """
        self._cell.passivating = True
        self._cell.request_stop()

    def watch_idle(self, deadline: float, check: IdleCheck) -> IdleWatch:
        """Call ``check()`` at ``deadline`` (Trio time) while this incarnation runs, and
        again at the time it returns (``None``: done); :meth:`IdleWatch.cancel` stops it.

        For an actor that passivates when idle: the runtime's one idle sweeper calls the
        checks of every actor, where a sleeping task of each actor's own would cost it
        about 3 KB. ``check`` runs in the sweeper's task, between any two steps of the
        actor's: it must not block, and it decides through :meth:`passivate_if_idle`.
        """
        return self._cell.runtime._idle.watch(self._cell, deadline, check)

    def passivate_if_idle(self, idle: Callable[[], bool]) -> None:
        """Passivate (see :meth:`passivate`) once the actor is between messages, if no
        message is queued by then and ``idle()`` still holds; else go on as before.

        For an idle check (:meth:`watch_idle`) or a timer task: it cannot see whether a
        message is being handled (an ``await`` inside :meth:`Actor.receive` lets it run),
        so the decision is made in the serial loop. ``idle`` runs there, between two
        messages.
        """
        self._cell.passivate_if_idle(idle)


class Supervisor(Actor[object]):
    """An actor whose only job is to run a fixed list of children under a strategy.

    Use it to build the tree: a child spec's factory may return another ``Supervisor``.
    It handles no messages of its own.

    Args:
        children (Sequence[ChildSpec]): started in order; stopped in reverse order.
        supervision (Supervision): strategy, restart intensity and backoff.
    """

    def __init__(
        self, children: Sequence[ChildSpec], supervision: Supervision | None = None
    ) -> None:
        self._specs = tuple(children)
        self.supervision = supervision or Supervision()  # type: ignore[misc]  # per-instance

    async def on_start(self) -> None:
        for spec in self._specs:
            await self.context.spawn_spec(spec)
