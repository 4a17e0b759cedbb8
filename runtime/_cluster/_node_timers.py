"""The timers of a node: each fires by the node that owns its stream, once, across failover.

A runtime's timers service indexes the timers of the log when it opens and then follows
the appends of its own actors. On a node that is not enough: a stream that comes to
this node from another (a takeover, a rebalance) may have scheduled, fired or cancelled
timers there since. So before its owner is registered here, the stream's timer events
are read again from the log (one indexed query) and its index entry replaced. Timers
are only delivered to a live local owner, and only the node holding the stream's shard
runs one: a node that lost the shard cannot record the firing (its append is fenced),
and the new owner, reloading, delivers it once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, final

import trio

from protocols.codec import default_registry
from protocols.errors import CodecError, StoreError

from .._postgres._schema import row_to_event
from .._timers._book import TIMER_EVENT_CLASSES, TIMER_EVENT_NAMES

if TYPE_CHECKING:
    import psycopg

    from .._postgres._store import PostgresEventStore
    from .._ref import ActorRef
    from .._timers._service import TimerRunner

__all__ = ["NodeTimers"]

logger = logging.getLogger("powertrio.timers")

_READ_TIMER_EVENTS = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, e.data, e.metadata, "
    "e.recorded_at, e.blob_id FROM events e WHERE e.stream = %s AND e.type = ANY(%s::text[]) "
    "ORDER BY e.version"
)


@final
class NodeTimers:
    """The persist listener a node's runtime adds in place of its timers runner."""

    def __init__(
        self, runner: TimerRunner, placed: Callable[[str], bool], store: PostgresEventStore
    ) -> None:
        self._runner = runner
        self._placed = placed  # whether a stream is placed on a shard (moves between nodes)
        self._store = store
        self._nursery: trio.Nursery | None = None
        # Streams being reloaded -> the events their owner appended meanwhile.
        self._held_back: dict[str, list[object]] = {}
        self._waiting_owner: dict[str, ActorRef[object]] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Reload in ``nursery`` from now on (the runtime's own)."""
        self._nursery = nursery

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        """Reload the stream's timers from the log, then deliver them to ``owner``."""
        nursery = self._nursery
        if nursery is None or not self._placed(stream):
            self._runner.on_owner_ready(stream, owner)
            return
        self._waiting_owner[stream] = owner
        if stream not in self._held_back:
            self._held_back[stream] = []
            nursery.start_soon(self._reload, stream)

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        """Index the owner's timer events (after the reload if one is running)."""
        held = self._held_back.get(stream)
        if held is None:
            self._runner.on_persisted(stream, events)
        else:
            held.extend(events)

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        """Due timers of ``stream`` wait for its next owner, here or elsewhere."""
        if self._waiting_owner.get(stream) is owner:
            del self._waiting_owner[stream]
        self._runner.on_owner_gone(stream, owner)

    async def _reload(self, stream: str) -> None:
        where = repr(self._store)

        def read(conn: psycopg.Connection) -> list[object]:
            rows = conn.execute(
                _READ_TIMER_EVENTS, (stream, sorted(TIMER_EVENT_NAMES)), binary=True
            )
            events: list[object] = []
            for row in rows:
                try:
                    events.append(default_registry.decode_record(row_to_event(where, row)))
                except CodecError as exc:  # the owner fails alone with it when it folds
                    logger.warning("timers: skipped an undecodable timer event: %s", exc)
            return events

        try:
            events = await self._store.call(read)
        except StoreError as exc:
            # Keep what the index has; the owner's next start reloads again.
            logger.warning("timers: could not reload %s: %s", stream, exc)
            events = None
        held = self._held_back.pop(stream, [])
        if events is not None:
            self._runner.reload(stream, events)
        # What the owner appended during the read: applying a timer event again is a
        # no-op (the book keeps the latest state per timer id), so overlap is harmless.
        if held:
            self._runner.on_persisted(stream, [e for e in held if type(e) in TIMER_EVENT_CLASSES])
        owner = self._waiting_owner.pop(stream, None)
        if owner is not None and owner.alive:
            self._runner.on_owner_ready(stream, owner)
