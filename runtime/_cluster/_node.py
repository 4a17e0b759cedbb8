"""A node of a fleet: leases over shards of streams, the fence on appends, the durable inbox.

Several runtimes (processes, machines) share one PostgreSQL log. Each stream that is
*placed* (a session's, by default) belongs to one of ``Node.shards`` shards by a hash of
its placement key, and each shard is leased to at most one live node at a time. A lease
has an epoch that grows at every takeover; the store checks, in the transaction of every
append, that this node still holds the shard at the epoch it believes it holds (the node
is the fence it installs, ``PostgresEventStore.install_fence``), so a node that was paused
or cut off past its lease writes nothing once another has taken over: its append fails
with ``store.fenced``.

The node renews its leases in the background every ``ttl / 3`` seconds and takes
expired shards up to its fair share (all shards over the live nodes); a node holding
more than its share hands the surplus back once the host (``actors.cluster.host_node``) has
stopped their actors. One task follows the leases and hands each change to whoever
registered (:meth:`ClusterNode.add_shard_listener`: a host of sessions, a fleet's agents).
docs/cluster.md tells why it is built this way.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import zlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, final

import attrs
import trio

from protocols.errors import ConfigError, FencedError, StoreError

from .._virtual_time import run_in_thread
from . import _sql as sql
from ._node_timers import NodeTimers
from ._placement import fence_admits, settle_round
from ._sql import check_shards

if TYPE_CHECKING:
    import psycopg

    from .._persist_listener import PersistListener
    from .._postgres._store import PostgresEventStore
    from .._ref import ActorRef
    from .._runtime import Runtime
    from .._store._contract import EventStore
    from .._timers._service import TimerRunner

__all__ = [
    "ClusterNode",
    "Node",
    "ShardChange",
    "ShardListener",
    "live_nodes",
    "placement_key",
    "shard_of",
]

logger = logging.getLogger("powertrio.node")

T = TypeVar("T")

_KEEP_ANSWERS = 3600.0
"""Seconds an answered inbox message is kept (a retry within it gets the answer at once)."""
_PRUNE_EVERY = 180
"""Lease rounds between two prunings of old answers."""


def _check_ttl(_instance: object, _attribute: object, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.1 <= value <= 600:
        msg = f"ttl must be a number of seconds from 0.1 to 600, got {value!r}"
        raise ValueError(msg)


def _check_name(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 200:
        msg = f"name must be a non-empty string of at most 200 characters, got {value!r}"
        raise ValueError(msg)


def _check_shards(_instance: object, _attribute: object, value: int) -> None:
    check_shards(value)


def _check_poll(_instance: object, _attribute: object, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        msg = f"poll_interval must be a positive number of seconds, got {value!r}"
        raise ValueError(msg)


@final
@attrs.frozen(kw_only=True)
class Node:
    """How a runtime joins a fleet sharing one PostgreSQL log: ``open_runtime(node=...)``.

    Raises:
        ValueError: an option is out of range (the message names it).
    """

    name: str = attrs.field(validator=_check_name)
    """This node's name, unique in the fleet while it runs (a restarted node may reuse it)."""
    shards: int = attrs.field(default=16, validator=_check_shards)
    """How many shards the placed streams are split into; the same on every node."""
    ttl: float = attrs.field(default=3.0, validator=_check_ttl)
    """Seconds a lease lasts unrenewed: a dead node's shards move after at most this."""
    poll_interval: float = attrs.field(default=0.5, validator=_check_poll)
    """The inbox's backstop: how often pending messages and answers are read even when
    no ``NOTIFY`` came (a doorbell may be lost with a connection)."""
    placed: tuple[str, ...] = ("session", "board")
    """Kinds of streams (``kind/key``) that are placed on shards and fenced; other
    streams are written by any node (the optimistic version check still holds). A kind
    may have several segments (``"fleet/agent"`` places ``fleet/agent/<name>`` by
    ``fleet/agent:<name>`` and leaves the other ``fleet/...`` streams alone)."""

    def join(self, store: EventStore | None) -> ClusterNode:
        """This node of a fleet on ``store`` (what ``open_runtime(node=...)`` runs).

        Raises:
            ConfigError: the store is not a PostgreSQL store.
        """
        return ClusterNode(self, check_node_store(store))


def placement_key(stream: str, placed: tuple[str, ...] = ("session", "board")) -> str | None:
    """The key a stream is placed by, or ``None`` if its kind is not placed.

    A sub-agent's id extends its root's (``ses_x.1.2``), so a whole agent tree lives in
    the shard of its root session and moves with it. Any other kind is placed by its
    whole key, prefixed with the kind (a board ``board/notes`` by ``board:notes``: its id
    may hold dots, and it shares no tree).
    """
    for kind in placed:
        prefix = kind + "/"
        if stream.startswith(prefix) and len(stream) > len(prefix):
            key = stream[len(prefix) :]
            return key.split(".", 1)[0] if kind == "session" else f"{kind}:{key}"
    return None


def shard_of(key: str, shards: int) -> int:
    """The shard of a placement key (CRC-32, stable across processes and versions)."""
    return zlib.crc32(key.encode()) % shards


async def live_nodes(store: PostgresEventStore) -> frozenset[str]:
    """The names of the nodes of a fleet on ``store`` whose heartbeat lease has not lapsed.

    A node renews it with its shards' leases every ``ttl / 3`` seconds and drops it as it
    leaves, so a node the log says is running but that is missing here was killed or cut
    off: ``powertrio fleet status`` calls it lost.

    Raises:
        StoreUnavailableError: the server cannot be reached.
    """
    return await store.call(sql.live_nodes)


def _channel(schema: str) -> str:
    return "powertrio_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


@final
@attrs.frozen
class ShardChange:
    """What moved since a :class:`ShardListener` last heard: shards are numbers."""

    came: frozenset[int]
    """Shards this node now holds (within its fair share) that it did not, or at
    another epoch: start what runs there."""
    gone: frozenset[int]
    """Shards it held that it no longer holds within its share (lost, or surplus):
    stop what runs there."""
    surplus: frozenset[int]
    """Of ``gone``, the shards the node hands back as soon as every listener returned."""


class ShardListener(Protocol):
    """Whoever runs things per shard on a node: told each change, one at a time."""

    async def shards_changed(self, change: ShardChange) -> None:
        """Start and stop what ``change`` says; the node waits for it (the surplus is
        released only afterwards), and cancels it when the listener is removed."""
        ...


@final
class _Registration:
    __slots__ = ("listener", "scope", "seen")

    def __init__(self, listener: ShardListener) -> None:
        self.listener = listener
        self.seen: dict[int, int] = {}
        self.scope: trio.CancelScope | None = None


@final
class ClusterNode:
    """The running node of a runtime: its leases, its fence, its inbox (``Runtime.node``)."""

    def __init__(self, node: Node, store: PostgresEventStore) -> None:
        self.config = node
        self._store = store
        self._held: dict[int, int] = {}
        self._surplus: dict[int, int] = {}
        # Shards handed back but still held by an append in flight: the next rounds
        # hand them back (this node no longer writes under them).
        self._handing_back: dict[int, int] = {}
        self._fair = 0
        self._changed = trio.Event()
        self._doorbell = trio.Event()
        self._waiting: dict[str, trio.Event] = {}
        self._replies: dict[str, bytes] = {}
        self._channel = _channel(store.schema)
        self._stop_listening = threading.Event()
        self._closed = False
        self._refused = 0
        self._listeners: list[_Registration] = []
        self._timers: NodeTimers | None = None
        # The live owners of placed streams here (this node is a persist listener), so
        # that losing a shard stops them whether or not a host runs.
        self._owners: dict[str, ActorRef[object]] = {}
        self._stop_owner: Callable[[ActorRef[object]], Awaitable[None]] | None = None
        self._nursery: trio.Nursery | None = None
        # The lease loop's own connection: renewals never queue behind inbox traffic.
        self._lease_conn: psycopg.Connection | None = None
        self._lease_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ClusterNode {self.config.name!r} holding {sorted(self._held)}>"

    @classmethod
    def of(cls, runtime: Runtime) -> ClusterNode | None:
        """The node ``runtime`` runs as (``open_runtime(node=Node(...))``), or ``None``."""
        node = runtime.node
        return node if isinstance(node, ClusterNode) else None

    @property
    def store(self) -> PostgresEventStore:
        """The log the node's fleet shares."""
        return self._store

    # -- the kernel's side (runtime._membership.Membership) ---------------------------

    @property
    def retry_after(self) -> float:
        """A lease round: a fenced actor starts again after it if the lease held."""
        return self.config.ttl / 3

    def persist_listeners(self, timers: TimerRunner) -> Sequence[PersistListener]:
        """The node's timers in place of the runtime's, then the node itself (a lost
        shard stops its actors, hosted or not)."""
        self._timers = NodeTimers(
            timers, lambda stream: self.shard_of_stream(stream) is not None, self._store
        )
        return (self._timers, self)

    # -- placement --------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The node's name."""
        return self.config.name

    @property
    def held(self) -> dict[int, int]:
        """Shard -> epoch of the leases this node holds now (a copy)."""
        return dict(self._held)

    @property
    def surplus(self) -> dict[int, int]:
        """Shards held beyond the fair share, to be handed back by the host."""
        return dict(self._surplus)

    def shard_of_session(self, session_id: str) -> int:
        """The shard of a session (and of its sub-agents)."""
        return shard_of(session_id.split(".", 1)[0], self.config.shards)

    def shard_of_stream(self, stream: str) -> int | None:
        """The shard of a stream, or ``None`` if this node does not place its kind."""
        key = placement_key(stream, self.config.placed)
        return None if key is None else shard_of(key, self.config.shards)

    def may_write(self, stream: str) -> bool:
        """Whether this node holds the lease an append to ``stream`` is made under (or
        the stream is not placed): :meth:`claim` would not refuse it."""
        shard = self.shard_of_stream(stream)
        return shard is None or shard in self._held or shard in self._surplus

    def owns(self, session_id: str) -> bool:
        """Whether this node holds the session's shard now."""
        return self.shard_of_session(session_id) in self._held

    def shard_of_target(self, target: str) -> int:
        """The shard of an inbox target: a session id, or a placed stream (``board/x``)."""
        key = placement_key(target, self.config.placed) if "/" in target else None
        if key is None:
            return self.shard_of_session(target)
        return shard_of(key, self.config.shards)

    def owns_target(self, target: str) -> bool:
        """Whether this node holds the shard of an inbox target now."""
        return self.shard_of_target(target) in self._held

    def owners_in(self, shards: Collection[int]) -> list[ActorRef[object]]:
        """The live local owners of placed streams in ``shards`` (forgotten here: the
        caller stops them)."""
        found = []
        for stream, owner in list(self._owners.items()):
            key = placement_key(stream, self.config.placed)
            if key is not None and shard_of(key, self.config.shards) in shards:
                del self._owners[stream]
                found.append(owner)
        return found

    # -- the store's fence (runtime._postgres._fence.Fence) ------------------------------

    def claim(self, stream: str) -> tuple[int, int] | None:
        """The lease an append to ``stream`` is made under (asked before it is queued).

        Raises:
            FencedError: this node does not hold the stream's shard.
        """
        key = placement_key(stream, self.config.placed)
        if key is None:
            return None
        shard = shard_of(key, self.config.shards)
        # A surplus shard is still ours until its actors have stopped and it is released.
        epoch = self._held.get(shard, self._surplus.get(shard))
        if epoch is None:
            self._refused += 1
            raise FencedError(stream, shard, self.name, "this node does not hold its shard's lease")
        return shard, epoch

    def admitted(
        self, conn: psycopg.Connection, claims: Collection[tuple[int, int]]
    ) -> Collection[tuple[int, int]]:
        """Of ``claims``, those this node still holds, read in the append's transaction
        ``FOR KEY SHARE``: a takeover waits for its commit (runs in the writer thread)."""
        shards = sorted({shard for shard, _epoch in claims})
        held = {
            (int(shard), int(epoch))
            for shard, epoch in conn.execute(sql.CHECK_LEASES, (self.name, shards)).fetchall()
        }
        return {claim for claim in claims if fence_admits(claim, held)}

    @property
    def fenced_appends(self) -> int:
        """Appends refused because this node did not hold (or no longer held) the lease:
        before queueing, or in the commit's own check."""
        return self._refused + self._store.fenced_appends

    # -- following the leases --------------------------------------------------------

    def add_shard_listener(self, listener: ShardListener) -> None:
        """Tell ``listener`` every change of this node's shards from now on; first the
        shards held now (all ``came``)."""
        self._listeners.append(_Registration(listener))
        self._notify_change()

    def remove_shard_listener(self, listener: ShardListener) -> None:
        """Tell ``listener`` nothing more (a call in flight is cancelled)."""
        for registration in list(self._listeners):
            if registration.listener is listener:
                self._listeners.remove(registration)
                if registration.scope is not None:
                    registration.scope.cancel()

    async def _follow(self) -> None:
        """The one follower of the leases: hand each change to every listener, in the
        order they registered, then release the surplus (its actors stopped)."""
        while True:
            changed = self._changed
            held = dict(self._held)
            surplus = frozenset(self._surplus)
            for registration in list(self._listeners):
                seen = registration.seen
                gone = frozenset(s for s, e in seen.items() if held.get(s) != e)
                came = frozenset(s for s, e in held.items() if seen.get(s) != e)
                if not (came or gone or surplus):
                    continue
                registration.seen = held
                with trio.CancelScope() as registration.scope:
                    await registration.listener.shards_changed(ShardChange(came, gone, surplus))
                registration.scope = None
            if surplus:
                await self.stop_owners(surplus)  # what no listener stopped
                await self.release({s: self._surplus[s] for s in surplus if s in self._surplus})
            if self._held == held and not self._surplus:
                await changed.wait()

    @property
    def change_event(self) -> trio.Event:
        """Set when the held shards or the surplus change (take it, read, then wait)."""
        return self._changed

    def _notify_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- the lease loop ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prepare the tables, fence the store, take a first share; renew until cancelled."""
        config = self.config
        await self._store.call(lambda conn: sql.prepare_cluster_schema(conn, config.shards))
        await self._store.install_fence(self, idle=config.ttl)
        await self._tick()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._listen)
            nursery.start_soon(self._backstop)
            nursery.start_soon(self._follow)
            if self._timers is not None:
                self._timers.start(nursery)
            task_status.started()
            rounds = 0
            while True:
                await trio.sleep(config.ttl / 3)
                await self._tick()
                rounds += 1
                if rounds % _PRUNE_EVERY == 0:
                    with contextlib.suppress(StoreError):
                        await self._store.call(lambda conn: sql.prune_answers(conn, _KEEP_ANSWERS))

    async def _tick(self) -> None:
        config = self.config
        held = {**self._held, **self._surplus}
        handing_back = dict(self._handing_back)
        take = not self._surplus

        def round_(conn: psycopg.Connection) -> tuple[dict[int, int], sql.LeaseTick] | None:
            if self._closed:  # left meanwhile: take nothing again
                return None
            # Before taking: a shard kept for an append that has committed since goes
            # back to the fleet first (this round might take it again, at a new epoch).
            kept = sql.release_shards(conn, config.name, handing_back)
            tick = sql.lease_tick(
                conn, config.name, held, ttl=config.ttl, shards=config.shards, take=take
            )
            return kept, tick

        try:
            answer = await self._lease_call(round_)
        except StoreError as exc:
            # Leases lapse on their own; the fence keeps writes safe meanwhile.
            logger.warning("node %s could not renew its leases: %s", config.name, exc)
            return
        if answer is None:
            return
        kept, tick = answer
        for shard, epoch in handing_back.items():
            if shard not in kept and self._handing_back.get(shard) == epoch:
                del self._handing_back[shard]
        result = settle_round(self._held, self._surplus, tick.held, tick.fair_share)
        self._fair = tick.fair_share
        if result.lost:
            logger.warning("node %s lost shards %s", config.name, result.lost)
            self._stop_owners(set(result.lost))
        if result.changed:
            self._held = result.held
            self._surplus = result.surplus
            self._notify_change()

    # -- the owners of placed streams (a PersistListener) --------------------------------

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        """Remember who owns a placed stream here."""
        if placement_key(stream, self.config.placed) is not None:
            self._owners[stream] = owner

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        """Nothing: the fence is in the store."""

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        """Forget an owner that stopped."""
        if self._owners.get(stream) is owner:
            del self._owners[stream]

    def attach(self, stop: Callable[[ActorRef[object]], Awaitable[None]]) -> None:
        """How to stop an actor for good (the runtime's ``stop``)."""
        self._stop_owner = stop

    async def stop_owners(self, shards: Collection[int]) -> None:
        """Stop (and wait for) the local owners of placed streams in ``shards``: a host
        does so before it hands surplus shards back, so nothing of theirs is fenced."""
        stop = self._stop_owner
        if stop is None:
            return
        for owner in self.owners_in(shards):
            await stop(owner)

    def _stop_owners(self, shards: set[int]) -> None:
        """Stop the actors of streams in lost shards: whatever they would append is fenced."""
        stop, nursery = self._stop_owner, self._nursery
        if stop is None or nursery is None:
            return
        for owner in self.owners_in(shards):
            nursery.start_soon(stop, owner)

    async def _lease_call(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run ``fn`` on the lease loop's connection in a worker thread.

        Raises:
            StoreUnavailableError: the server cannot be reached.
            StoreError: the server refused.
        """
        store = self._store

        def run() -> T:
            with self._lease_lock:
                conn = self._lease_conn
                if conn is None or conn.broken or conn.closed:
                    conn = self._lease_conn = store.connect()
                with store.errors():
                    return fn(conn)

        return await run_in_thread(run)

    async def release(self, shards: dict[int, int]) -> None:
        """Hand shards back now (their actors have stopped): another node may take them.

        This node writes nothing under them from now on; a shard an append already in
        flight holds goes back at the next lease round, once that append has committed.
        """
        name = self.name
        shards = dict(shards)
        for shard in shards:
            self._held.pop(shard, None)
            self._surplus.pop(shard, None)
        # Owners a host did not stop (none runs, or a board it does not track): whatever
        # they would append now is fenced before it is queued.
        self._stop_owners(set(shards))
        kept = await self._lease_call(lambda conn: sql.release_shards(conn, name, dict(shards)))
        # An append in flight still holds these rows: handed back once it has committed.
        self._handing_back.update(kept)
        self._notify_change()

    async def aclose(self) -> None:
        """Leave the fleet: hand every shard back and stop counting towards the share."""
        if self._closed:
            return
        self._closed = True
        self._stop_listening.set()
        held = {**self._held, **self._surplus, **self._handing_back}
        self._held = {}
        self._surplus = {}
        self._handing_back = {}
        name = self.name
        with trio.CancelScope(shield=True), contextlib.suppress(StoreError):

            def leave(conn: psycopg.Connection) -> None:
                sql.release_shards(conn, name, held)
                sql.leave(conn, name)  # and whatever a tick in flight took meanwhile

            await self._lease_call(leave)
        with self._lease_lock:
            conn, self._lease_conn = self._lease_conn, None
        if conn is not None:
            conn.close()

    # -- placements -------------------------------------------------------------------

    async def place(self, session_id: str, agent: str, *, traceparent: str | None = None) -> str:
        """Record that ``session_id`` runs ``agent`` (first writer wins); the agent recorded.

        ``traceparent``: the W3C trace context of the work the session is created for,
        kept with the placement so whichever node starts the session records it (and its
        runs join that trace); the first placement's stays.
        """
        shard = self.shard_of_session(session_id)
        return await self._store.call(
            lambda conn: sql.record_placement(conn, session_id, shard, agent, traceparent)
        )

    async def placement(self, session_id: str) -> str | None:
        """The agent a session was placed with, or ``None``."""
        return await self._store.call(lambda conn: sql.placement_of(conn, session_id))

    async def placed_with(self, session_id: str) -> tuple[str, str | None] | None:
        """The agent and the trace context (``None``: placed without one) a session was
        placed with, or ``None`` if it was never placed."""
        return await self._store.call(lambda conn: sql.placed_with(conn, session_id))

    async def placements(self, shards: list[int]) -> list[tuple[str, str]]:
        """``(session_id, agent)`` of the sessions in ``shards``."""
        return await self._store.call(lambda conn: sql.placements_in(conn, shards))

    # -- the inbox --------------------------------------------------------------------

    async def post(self, session_id: str, message_id: str, body: bytes) -> bytes:
        """Put a message in the inbox of ``session_id``'s owner and wait for its answer.

        ``session_id`` may also be a placed stream (``board/<id>``): the message goes to
        the owner of that stream's shard. Posting the same ``message_id`` again (a retry)
        adds nothing and waits for the same answer.
        """
        shard = self.shard_of_target(session_id)
        channel = self._channel
        event = self._waiting.setdefault(message_id, trio.Event())
        try:
            await self._store.call(
                lambda conn: sql.post_message(
                    conn, channel, message_id, target=session_id, shard=shard, body=body
                )
            )
            while message_id not in self._replies:
                await self._check_replies([message_id])
                if message_id in self._replies:
                    break
                await event.wait()
                event = self._waiting[message_id] = trio.Event()
            return self._replies.pop(message_id)
        finally:
            self._waiting.pop(message_id, None)

    def post_soon(self, target: str, message_id: str, body: bytes) -> None:
        """Put a message in ``target``'s owner's inbox in the background, waiting for no
        answer (once per id; a lost post is not retried: for notices, not calls)."""
        nursery = self._nursery
        if nursery is None or self._closed:
            return
        shard = self.shard_of_target(target)
        channel = self._channel

        async def post() -> None:
            try:
                await self._store.call(
                    lambda conn: sql.post_message(
                        conn, channel, message_id, target=target, shard=shard, body=body
                    )
                )
            except StoreError as exc:
                logger.warning("node %s could not post %s: %s", self.name, message_id, exc)

        nursery.start_soon(post)

    async def _check_replies(self, ids: list[str]) -> None:
        found = await self._store.call(lambda conn: sql.read_replies(conn, ids))
        for message_id, reply in found.items():
            if message_id in self._waiting:
                self._replies[message_id] = reply
                self._waiting[message_id].set()

    async def messages(
        self, limit: int = 256, *, skip: Collection[str] = ()
    ) -> list[tuple[str, str, bytes]]:
        """Wait for the doorbell (or the backstop), then ``(id, session_id, body)`` of the
        unanswered messages to the shards this node holds, oldest first, but ``skip``
        (the ones being performed now)."""
        await self._doorbell.wait()
        self._doorbell = trio.Event()
        shards = sorted(self._held)
        if not shards:
            return []
        skipped = list(skip)
        return await self._store.call(
            lambda conn: sql.pending_messages(conn, shards, limit, skipped)
        )

    def ring(self) -> None:
        """Have :meth:`messages` read the inbox again now."""
        self._doorbell.set()

    async def answer(self, message_id: str, reply: bytes) -> None:
        """Record the answer to a message (the first wins) and wake its caller."""
        channel = self._channel
        await self._store.call(lambda conn: sql.answer_message(conn, channel, message_id, reply))

    async def _backstop(self) -> None:
        while True:
            await trio.sleep(self.config.poll_interval)
            self.ring()
            if self._waiting:
                with contextlib.suppress(StoreError):
                    await self._check_replies(list(self._waiting))

    def _heard(self, payload: str) -> None:
        """A ``NOTIFY`` (Trio thread)."""
        if payload.startswith("i"):
            with contextlib.suppress(ValueError):
                if int(payload[1:]) in self._held:
                    self.ring()
        elif payload.startswith("r"):
            event = self._waiting.get(payload[1:])
            if event is not None:
                event.set()

    async def _listen(self) -> None:
        """Run the ``LISTEN`` connection in its own thread while the node runs."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        store = self._store
        channel = self._channel
        stop = self._stop_listening
        poll = self.config.poll_interval

        def heard(payload: str) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._heard, payload)

        def main() -> None:
            try:
                _listen_loop(store, channel, stop, poll, heard)
            finally:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(done.set)

        threading.Thread(target=main, name=f"powertrio-listen {self.name}", daemon=True).start()
        try:
            await done.wait()
        finally:
            stop.set()


def _listen_loop(
    store: PostgresEventStore,
    channel: str,
    stop: threading.Event,
    poll: float,
    heard: Callable[[str], None],
) -> None:
    """``LISTEN`` until ``stop``; reconnect after a loss (the backstop covers the gap)."""
    from psycopg import sql as psql  # noqa: PLC0415  # the optional extra

    while not stop.is_set():
        try:
            conn = store.connect()
        except StoreError:
            stop.wait(poll)
            continue
        try:
            conn.execute(psql.SQL("LISTEN {}").format(psql.Identifier(channel)))
            while not stop.is_set():
                for notify in conn.notifies(timeout=min(poll, 1.0)):
                    heard(notify.payload)
        except Exception:  # a lost connection: listen again
            logger.debug("node listener lost its connection", exc_info=True)
            stop.wait(poll)
        finally:
            conn.close()


def check_node_store(store: object) -> PostgresEventStore:
    """The store a node runs on: PostgreSQL only.

    Raises:
        ConfigError: the store is not a PostgreSQL store.
    """
    from .._postgres._store import PostgresEventStore  # noqa: PLC0415  # psycopg stays lazy

    if not isinstance(store, PostgresEventStore):
        msg = (
            f"open_runtime(node=...) needs a PostgreSQL store (open_postgres_store), got "
            f"{type(store).__name__}: SQLite and in-memory logs serve one process, no fleet"
        )
        raise ConfigError(msg)
    return store
