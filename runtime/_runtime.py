"""The runtime: root supervisor, registry, clock, id source and lifecycle event stream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TypeVar, final

import attrs
import trio

from protocols.errors import (
    ActorExistsError,
    ActorNotFoundError,
    PowertrioError,
    RuntimeClosedError,
)
from protocols.lowlevel import unwrap_single_error

from ._actor import Actor, ActorContext
from ._cell import _Cell
from ._clock import Clock, IdSource
from ._gc_tuning import RUNTIME_GC_THRESHOLD, runtime_gc_threshold
from ._idle import IdleSweeper
from ._mailbox import DEFAULT_CAPACITY, MailboxStatistics, OverflowPolicy
from ._membership import Join, Membership
from ._persist_listener import CommitObserver, PersistListener
from ._ref import ActorRef
from ._store._contract import EventStore
from ._store._memory import InMemoryEventStore
from ._supervision import (
    ActorCrashed,
    ActorPassivated,
    ActorStarted,
    ActorStopped,
    ChildSpec,
    GiveUpPolicy,
    LifecycleEvent,
    RestartType,
    StopReason,
    Supervision,
)
from ._timers._service import TimerRunner, TimerService

logger = logging.getLogger("powertrio.runtime")

MsgT = TypeVar("MsgT")


@final
@attrs.frozen
class RuntimeStatistics:
    """A snapshot of a runtime."""

    actors: int
    """Live actors (registered, running or waiting to restart), the root excluded."""
    started: int
    """Incarnations started, restarts included."""
    restarts: int
    """Restarts scheduled by supervisors."""
    crashes: int
    """Incarnations that ended with an exception."""
    lifecycle_events_dropped: int
    """Lifecycle events a slow subscriber did not take in time."""


class _Root(Actor[object]):
    def __init__(self, supervision: Supervision) -> None:
        self.supervision = supervision  # type: ignore[misc]  # per-instance setting


@final
class Runtime:
    """Owns the root supervisor, the registry, the clock and the id source.

    Open it with :func:`open_runtime`; leaving the block stops every actor in reverse start
    order and returns only when all their tasks have ended.
    """

    __slots__ = (
        "_by_id",
        "_by_path",
        "_closed",
        "_commit_observers",
        "_crashes",
        "_dropped",
        "_idle",
        "_persist_listeners",
        "_restarts",
        "_root",
        "_started",
        "_subscribers",
        "clock",
        "ids",
        "node",
        "store",
        "timers",
        "trio_token",
    )

    clock: Clock
    """The wall clock actors read."""
    ids: IdSource
    """The id source (and seeded randomness) actors use."""
    store: EventStore
    """The event log: the only authority for the history of event-sourced actors."""
    timers: TimerService
    """The durable timers service: schedule, cancel and list timers of event-sourced actors."""
    node: Membership | None
    """This runtime's place in a fleet (``open_runtime(node=...)``); ``None``: alone.
    ``runtime.cluster.ClusterNode.of(runtime)`` gives a fleet node's whole interface."""
    trio_token: trio.lowlevel.TrioToken
    """Token of the Trio run this runtime lives in (for ``tell_from_thread``)."""
    _by_id: dict[str, _Cell]
    _by_path: dict[str, _Cell]
    _subscribers: list[trio.MemorySendChannel[LifecycleEvent]]
    _closed: bool
    _started: int
    _restarts: int
    _crashes: int
    _dropped: int
    _persist_listeners: tuple[PersistListener, ...]
    _commit_observers: tuple[CommitObserver, ...]
    _root: _Cell
    _idle: IdleSweeper

    def __init__(self) -> None:
        msg = "Runtime is made by open_runtime(): `async with open_runtime() as runtime:`"
        raise TypeError(msg)

    @classmethod
    def _create(cls, clock: Clock, ids: IdSource, store: EventStore) -> Runtime:
        self = object.__new__(cls)
        self.clock = clock
        self.ids = ids
        self.store = store
        self.node = None
        self.trio_token = trio.lowlevel.current_trio_token()
        self._by_id = {}
        self._by_path = {}
        self._subscribers = []
        self._closed = False
        self._started = 0
        self._restarts = 0
        self._crashes = 0
        self._dropped = 0
        self._persist_listeners = ()
        self._commit_observers = ()
        self._idle = IdleSweeper()
        return self

    # -- actors ----------------------------------------------------------------------

    @property
    def root(self) -> ActorContext[object]:
        """The root supervisor's context: spawn top-level actors through it or :meth:`spawn`."""
        return ActorContext._create(self._root)

    async def spawn(
        self,
        factory: Callable[[], Actor[MsgT]],
        *,
        name: str | None = None,
        id: str | None = None,
        restart: RestartType = "permanent",
        on_give_up: GiveUpPolicy = "escalate",
        shutdown_timeout: float = 5.0,
        mailbox_capacity: int = DEFAULT_CAPACITY,
        overflow: OverflowPolicy = "reject",
        lazy: bool = False,
    ) -> ActorRef[MsgT]:
        """Start a top-level actor under the root supervisor.

        Args:
            factory: makes the actor; called again for every restart.
            name (str | None): path segment (``/name``); defaults to the id.
            id (str | None): stable id unique in this runtime; generated when ``None``.
            restart: ``permanent`` (always restarted), ``transient`` (only after a crash)
                or ``temporary`` (never).
            on_give_up: what the actor's crash loop stops: ``escalate``, the root and with
                it the runtime (OTP); ``stop``, only this actor (see :class:`ChildSpec`).
            shutdown_timeout (float): seconds an orderly stop may take before cancelling.
            mailbox_capacity (int): bound of the mailbox's user lane.
            overflow: what a non-waiting send does when the mailbox is full.
            lazy (bool): start the actor at its first message, not now (see
                :attr:`ChildSpec.lazy`).

        Returns:
            The new actor's ref; messages sent before it has started wait in its mailbox.

        Raises:
            RuntimeClosedError: the runtime is closing.
            ActorExistsError: the id or the name is taken.
            ValueError, TypeError: an option is invalid (the message names it).
        """
        return await self.root.spawn(
            factory,
            name=name,
            id=id,
            restart=restart,
            on_give_up=on_give_up,
            shutdown_timeout=shutdown_timeout,
            mailbox_capacity=mailbox_capacity,
            overflow=overflow,
            lazy=lazy,
        )

    async def stop(self, ref: ActorRef[object]) -> None:
        """Stop an actor for good, in order, wherever it is in the tree."""
        cell = ref._cell
        parent = cell.parent
        if parent is None or parent._children is None or cell.mailbox.closed:
            await trio.lowlevel.checkpoint()
            return
        await parent._children.stop_child(cell, final=True)

    def lookup(self, actor_id: str) -> ActorRef[object]:
        """The ref of the live actor with this id.

        Raises:
            ActorNotFoundError: no live actor has this id.
        """
        cell = self._by_id.get(actor_id)
        if cell is None:
            raise ActorNotFoundError(actor_id)
        return cell.ref

    def lookup_path(self, path: str) -> ActorRef[object]:
        """The ref of the live actor at this path, e.g. ``/planner/researcher-1``.

        Raises:
            ActorNotFoundError: no live actor has this path.
        """
        cell = self._by_path.get(path)
        if cell is None:
            raise ActorNotFoundError(path)
        return cell.ref

    # -- lifecycle events ------------------------------------------------------------

    @contextmanager
    def subscribe(self, buffer: int = 1024) -> Iterator[trio.MemoryReceiveChannel[LifecycleEvent]]:
        """Receive every lifecycle event (start, crash, restart, passivation, stop, escalation).

        A subscriber never slows supervision down: when its buffer is full, further events
        are dropped for it and counted in :meth:`statistics`.
        """
        send, receive = trio.open_memory_channel[LifecycleEvent](buffer)
        self._subscribers.append(send)
        try:
            yield receive
        finally:
            self._subscribers.remove(send)
            send.close()

    def _publish(self, event: LifecycleEvent) -> None:
        for channel in self._subscribers:
            try:
                channel.send_nowait(event)
            except trio.WouldBlock:
                self._dropped += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._dropped += 1

    def _publish_started(self, cell: _Cell) -> None:
        self._started += 1
        if self._subscribers:
            self._publish(
                ActorStarted(
                    actor_id=cell.id,
                    path=cell.path,
                    incarnation=cell.incarnation,
                    at=self.clock.now(),
                )
            )

    def _publish_passivated(self, cell: _Cell) -> None:
        if self._subscribers:
            self._publish(
                ActorPassivated(
                    actor_id=cell.id,
                    path=cell.path,
                    incarnation=cell.incarnation,
                    at=self.clock.now(),
                )
            )

    def _publish_crashed(self, cell: _Cell, error: Exception) -> None:
        self._crashes += 1
        logger.warning(
            "actor %s crashed (incarnation %d): %s: %s",
            cell.path,
            cell.incarnation,
            type(error).__name__,
            error,
        )
        if self._subscribers:
            self._publish(
                ActorCrashed(
                    actor_id=cell.id,
                    path=cell.path,
                    incarnation=cell.incarnation,
                    error_type=type(error).__name__,
                    error_message=str(error),
                    error_code=error.code if isinstance(error, PowertrioError) else None,
                    at=self.clock.now(),
                )
            )

    # -- persist listeners -----------------------------------------------------------

    def add_persist_listener(self, listener: PersistListener) -> None:
        """Have ``listener`` follow the streams of event-sourced actors from now on.

        Every :class:`~runtime.EventSourcedActor` tells each listener, in the order they
        were added, when it owns its stream (its state folded), what it appends and when it
        stops; see ``PersistListener``. ``open_runtime`` adds the timers service this way.
        Add a listener before spawning the actors it should follow: it hears nothing of
        what happened before.
        """
        self._persist_listeners = (*self._persist_listeners, listener)

    @property
    def persist_listeners(self) -> tuple[PersistListener, ...]:
        """The listeners event-sourced actors tell about their streams, in order."""
        return self._persist_listeners

    def add_commit_observer(self, observer: CommitObserver) -> None:
        """Have ``observer`` told how long each append of an event-sourced actor took
        (``observer(stream, events, seconds)``, Trio clock), from now on.

        For metrics (commit latency). With no observer an append is not timed at all.
        The call runs in the actor's task after the append: it must neither block nor
        raise.
        """
        self._commit_observers = (*self._commit_observers, observer)

    @property
    def commit_observers(self) -> tuple[CommitObserver, ...]:
        """The observers told how long each append took."""
        return self._commit_observers

    def mailboxes(self) -> dict[str, MailboxStatistics]:
        """Each live actor's mailbox now, by actor path (the root excluded)."""
        return {path: cell.mailbox.statistics() for path, cell in self._by_path.items()}

    # -- registry --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosedError()

    def _register(self, cell: _Cell) -> None:
        if cell.id in self._by_id:
            raise ActorExistsError(cell.id)
        if cell.path in self._by_path:
            raise ActorExistsError(cell.path)
        self._by_id[cell.id] = cell
        self._by_path[cell.path] = cell

    def _deregister(self, cell: _Cell, reason: StopReason, error_code: str | None = None) -> None:
        if self._by_id.get(cell.id) is cell:
            del self._by_id[cell.id]
            del self._by_path[cell.path]
        if self._subscribers:
            self._publish(
                ActorStopped(
                    actor_id=cell.id,
                    path=cell.path,
                    reason=reason,
                    at=self.clock.now(),
                    error_code=error_code,
                )
            )

    def statistics(self) -> RuntimeStatistics:
        return RuntimeStatistics(
            actors=len(self._by_id),
            started=self._started,
            restarts=self._restarts,
            crashes=self._crashes,
            lifecycle_events_dropped=self._dropped,
        )

    # -- lifecycle -------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every actor in reverse start order; return when all have ended."""
        self._closed = True
        root = self._root
        if root.running:
            root.request_stop()
            await root.wait_exited()
        else:
            # Not a cancel point: when the root has failed, ``open_runtime``'s nursery is
            # cancelled, and a Cancelled raised here would replace (and so lose) the error
            # the block is leaving with.
            await trio.lowlevel.cancel_shielded_checkpoint()


@asynccontextmanager
async def open_runtime(
    *,
    clock: Clock | None = None,
    seed: int | None = None,
    supervision: Supervision | None = None,
    store: EventStore | None = None,
    node: Join | None = None,
    gc_threshold: tuple[int, int, int] | None = RUNTIME_GC_THRESHOLD,
) -> AsyncIterator[Runtime]:
    """Open a runtime: the root supervisor runs for the duration of the block.

    Args:
        clock (Clock | None): the wall clock actors read; the default follows Trio's clock
            (so ``trio.testing.MockClock`` drives it) from the host's current time.
        seed (int | None): seed of the id source and of all runtime randomness (backoff
            jitter); set it for reproducible runs.
        supervision (Supervision | None): how the root supervises top-level actors.
        store (EventStore | None): the event log. ``None`` keeps events in memory (lost
            when the process ends): pass ``open_sqlite_store(path)`` for durability.
        node (Join | None): join a fleet of runtimes sharing ``store`` (``Node(...)`` on a
            PostgreSQL store): the node takes leases on shards of the sessions' streams, and its
            appends to streams of shards it does not hold fail with ``store.fenced``.
            ``actors.cluster.host_node`` runs the sessions of its shards. ``None``: this runtime
            owns its log alone, with no leases (the SQLite and in-memory default).
        gc_threshold (tuple[int, int, int] | None): the cyclic collector's thresholds
            while the runtime is open, if the process still has CPython's defaults
            (restored when the last runtime closes); ``None`` leaves the collector alone.

    Raises:
        ConfigError: ``node`` is given with a store that is not PostgreSQL.
        IntensityExceededError: top-level actors crashed faster than ``supervision``
            allows; every actor has been stopped.
    """
    member = None if node is None else node.join(store)
    clock = clock or Clock()
    if store is None:
        store = InMemoryEventStore(clock.now)
    ids = IdSource(clock, seed)
    runtime = Runtime._create(clock, ids, store)
    runtime.node = member
    timers = TimerRunner(clock, ids, store)
    runtime.timers = timers.service
    if member is None:
        runtime.add_persist_listener(timers)
    else:  # its listeners take the timers' place (a lost shard stops its actors, hosted or not)
        for listener in member.persist_listeners(timers):
            runtime.add_persist_listener(listener)
        member.attach(runtime.stop)
    root = _Cell(
        runtime,
        None,
        ChildSpec(factory=lambda: _Root(supervision or Supervision()), id="root", name="root"),
        "root",
        "",
    )
    runtime._root = root
    with (
        runtime_gc_threshold(gc_threshold),
        unwrap_single_error(),  # one error comes out bare; several stay a group
    ):
        async with trio.open_nursery() as nursery:
            root.incarnation = 1
            root.running = True
            await nursery.start(root.run_task)
            if member is not None:
                await nursery.start(member.run)  # leases and the fence before any append
            # Re-arms every pending timer from the log before anyone can spawn an owner.
            await nursery.start(timers.run)
            await nursery.start(runtime._idle.run)
            try:
                yield runtime
            finally:
                try:
                    await runtime.aclose()
                finally:
                    runtime._idle.close()
                    timers.close()
                    if member is not None:
                        await member.aclose()
                        nursery.cancel_scope.cancel()
