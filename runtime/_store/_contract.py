"""The event store interface: value classes, the ``EventStore`` protocol and subscriptions."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs
import trio

from protocols.errors import StoreClosedError
from protocols.lowlevel import slot_setter

if TYPE_CHECKING:
    from protocols.codec import EncodedEvent

__all__ = [
    "AppendResult",
    "EventStore",
    "EventStoreStatistics",
    "NewEvent",
    "PipelinedAppends",
    "RecordedEvent",
    "Snapshot",
    "StreamInfo",
    "Subscription",
]


@final
@attrs.frozen(kw_only=True)
class NewEvent:
    """An event about to be appended: bytes produced by the codec, not an event object.

    The store moves bytes; ``protocols.codec.encode`` turns an attrs event into the ``type``,
    ``schema_version`` and ``data`` here (see :meth:`from_encoded`).
    """

    type: str
    """The registered event type name."""
    schema_version: int
    """The schema version ``data`` was written with."""
    data: bytes
    """The payload (a JSON object from the codec). Large payloads go to the blob table."""
    metadata: bytes | None = None
    """Optional opaque metadata (e.g. JSON with a correlation id); stored and returned as is."""
    recorded_at: float | None = None
    """Normally ``None`` (the store stamps the time); an import sets it to keep the original."""

    @classmethod
    def from_encoded(cls, encoded: EncodedEvent, *, metadata: bytes | None = None) -> NewEvent:
        """Build a new event from the codec's output.

        Args:
            encoded (protocols.codec.EncodedEvent): the result of ``protocols.codec.encode(event)``.
            metadata (bytes | None): optional opaque metadata.

        Returns:
            NewEvent: ready for :meth:`EventStore.append`.
        """
        return cls(
            type=encoded.type,
            schema_version=encoded.schema_version,
            data=encoded.data,
            metadata=metadata,
        )


_new_object = object.__new__
_SET_TYPE = slot_setter(NewEvent, "type")
_SET_SCHEMA_VERSION = slot_setter(NewEvent, "schema_version")
_SET_DATA = slot_setter(NewEvent, "data")
_SET_METADATA = slot_setter(NewEvent, "metadata")
_SET_RECORDED_AT = slot_setter(NewEvent, "recorded_at")


def new_event(type: str, schema_version: int, data: bytes, metadata: bytes | None) -> NewEvent:
    """``NewEvent(type=..., ...)`` for the hot path: an event-sourced actor makes one per
    event it appends, straight from its class's encoder. The slots are written through
    their descriptors, not the frozen-attribute guard of ``__init__``: the same object
    (a test compares them) at about half the cost."""
    event: NewEvent = _new_object(NewEvent)
    _SET_TYPE(event, type)
    _SET_SCHEMA_VERSION(event, schema_version)
    _SET_DATA(event, data)
    _SET_METADATA(event, metadata)
    _SET_RECORDED_AT(event, None)
    return event


def new_event_from_encoded(encoded: EncodedEvent, metadata: bytes | None) -> NewEvent:
    """``NewEvent.from_encoded(encoded, metadata=metadata)`` for the hot path: an
    event-sourced actor makes one per event it appends. The slots are written through
    their descriptors, not the frozen-attribute guard of ``__init__``: the same object
    (a test compares them) at about half the cost."""
    event: NewEvent = _new_object(NewEvent)
    _SET_TYPE(event, encoded.type)
    _SET_SCHEMA_VERSION(event, encoded.schema_version)
    _SET_DATA(event, encoded.data)
    _SET_METADATA(event, metadata)
    _SET_RECORDED_AT(event, None)
    return event


@final
@attrs.frozen(kw_only=True)
class RecordedEvent:
    """An event as stored: where it sits in its stream and in the whole log, and its bytes."""

    stream: str
    """The stream it belongs to, e.g. ``"session/3f2a"``."""
    version: int
    """Its 1-based version in the stream; a stream's version is its event count."""
    position: int
    """Its global position: strictly increasing across the whole log, never reused."""
    type: str
    """The registered event type name."""
    schema_version: int
    """The schema version of ``data``."""
    data: bytes
    """The payload, with blobs already resolved."""
    metadata: bytes | None
    """The opaque metadata given at append time, if any."""
    recorded_at: float
    """When the store committed it (seconds since the Unix epoch)."""


@final
@attrs.frozen(kw_only=True)
class AppendResult:
    """What an acknowledged append wrote. The events are durable when this is returned."""

    stream: str
    """The stream appended to."""
    version: int
    """The stream's version after the append (its event count)."""
    first_position: int
    """Global position of the first appended event (``last_position + 1`` if none)."""
    last_position: int
    """Global position of the last appended event (the head before, if none)."""


@final
@attrs.frozen(kw_only=True)
class Snapshot:
    """A cached fold of a stream up to ``version``. Only a cache: the log stays the authority."""

    stream: str
    """The stream it summarises."""
    version: int
    """The stream version the state was folded up to (inclusive)."""
    type: str
    """The state's registered type name (so the codec can decode it)."""
    schema_version: int
    """The state's schema version; a reader may ignore snapshots of other versions."""
    data: bytes
    """The encoded state."""
    recorded_at: float
    """When the snapshot was saved."""
    chunks: Mapping[bytes, bytes] = attrs.field(factory=dict, eq=False, hash=False)
    """The parts of the state stored apart (content address: sha256 digest -> bytes) that
    the store still holds, as ``save_snapshot`` got them. Unchecked: the decoder checks
    each against its address (``runtime.lowlevel.snapshot_chunk``); one that is missing
    or altered makes the snapshot not decode, and the stream is folded instead."""


@final
@attrs.frozen(kw_only=True)
class StreamInfo:
    """One stream in a listing."""

    stream: str
    """The stream name."""
    version: int
    """Its current version (event count)."""
    created_at: float
    """When its first event was recorded."""
    updated_at: float
    """When its last event was recorded."""


@final
@attrs.frozen(kw_only=True)
class EventStoreStatistics:
    """A snapshot of an event store's counters (see ``statistics()``)."""

    appends: int
    """Acknowledged append calls."""
    events_appended: int
    """Events written by those appends."""
    conflicts: int
    """Appends refused with ``ConcurrencyConflictError``."""
    failed_appends: int
    """Appends that failed for any other reason (I/O error, injected fault)."""
    commits: int
    """Transactions committed; with group commit this is below ``appends`` under load."""
    pending_appends: int
    """Appends queued or being committed right now."""
    head_position: int
    """The global position of the newest event (0 when the log is empty)."""
    closed: bool
    """Whether the store is closed."""
    checkpoint_failures: int = 0
    """WAL checkpoints that failed with an error (each is also logged, ``powertrio.store``)."""
    checkpoints_blocked: int = 0
    """Blocking WAL checkpoints that readers kept from truncating the WAL (tried again)."""
    wal_checkpoints: int = 0
    """Blocking checkpoints that truncated a WAL grown past its bound."""
    sweep_failures: int = 0
    """Index sweeps that failed (logged; reads still see the unindexed events)."""
    guard_trips: int = 0
    """Group commits the database's one-writer guard refused on a stale version cache
    (re-planned, then retried; each is logged). A wrong expected version on a stream the
    writer had not seen yet is counted as a conflict, not here."""


class PipelinedAppends(Protocol):
    """A store whose appends can be queued without waiting, one behind another of the
    same stream: the pipelined path of an event-sourced actor, which decides its next
    events while these commit. The SQLite and PostgreSQL stores have it."""

    def begin_append(
        self,
        stream: str,
        events: tuple[NewEvent, ...],
        expected_version: int,
        *,
        after: Any,
        wake: Callable[[], object],
    ) -> Any:
        """Queue an append and return at once; ``wake()`` is called (in Trio) once it is
        decided, then :meth:`finish_append` gives its result. ``None``: not queued (the
        store says why); ``append`` instead, which raises the reason.

        ``after``, an append of the same stream begun before and not yet finished, makes
        this one commit only if that one does, right behind it (its ``expected_version``
        is the version that one leaves). The caller must see every append it began
        decided. Returns the store's own handle of the append.
        """
        ...

    def finish_append(self, pending: Any) -> AppendResult:
        """The result of a decided append, or its error raised as ``append`` would."""
        ...


class EventStore(Protocol):
    """An append-only log of named streams of events, with snapshots as a cache.

    Implementations: ``runtime.open_sqlite_store`` (the embedded default) and
    ``runtime.testing.InMemoryEventStore``; both pass ``runtime.testing.check_event_store``.
    Every method is a Trio checkpoint. The store moves bytes; the codec in ``protocols``
    turns them into events.
    """

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append events to a stream, all or nothing, if the stream is at ``expected_version``.

        Returns once the events are durable. If the caller is cancelled before the store
        took the append, nothing is written and ``Cancelled`` propagates; once taken, the
        call waits for the commit and returns its outcome.

        Args:
            stream (str): the stream name (non-empty).
            events (Sequence[NewEvent]): the events, in order (may be empty: a version check).
            expected_version (int): the stream's version the caller folded (0 for a new stream).

        Returns:
            AppendResult: the new version and the events' global positions.

        Raises:
            ConcurrencyConflictError: the stream is at another version; nothing was written.
            StoreClosedError: the store is closed.
            StoreError: the write failed (I/O error); nothing was written.
            TypeError, ValueError: bad arguments.
        """
        ...

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream's events from ``from_version`` on, in version order.

        A stream that does not exist reads as empty (version 0).

        Raises:
            StoreClosedError: the store is closed.
            CorruptLogError: the file is damaged.
        """
        ...

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read events of every stream from global position ``from_position`` on, in order.

        Raises:
            StoreClosedError: the store is closed.
            CorruptLogError: the file is damaged.
        """
        ...

    async def stream_version(self, stream: str) -> int:
        """The stream's current version (0 if it does not exist).

        Raises:
            StoreClosedError: the store is closed.
        """
        ...

    async def head_position(self) -> int:
        """The global position of the newest event (0 when empty).

        Raises:
            StoreClosedError: the store is closed.
        """
        ...

    async def streams(self, prefix: str = "") -> list[StreamInfo]:
        """List the streams whose name starts with ``prefix``, sorted by name.

        Raises:
            StoreClosedError: the store is closed.
        """
        ...

    async def delete_streams(self, streams: Sequence[str]) -> int:
        """Delete whole streams with their snapshots (retention). Missing names are skipped.

        Global positions are never reused afterwards.

        Returns:
            int: how many events were deleted.

        Raises:
            StoreClosedError: the store is closed.
        """
        ...

    async def save_snapshot(
        self,
        stream: str,
        version: int,
        *,
        type: str,
        schema_version: int,
        data: bytes,
        chunks: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Cache a folded state of ``stream`` at ``version``; an older one never replaces newer.

        ``chunks`` are the parts of the state stored apart, by content address (the sha256
        digest of their bytes). Each is stored once, however many snapshots reference it,
        so a state that grows by sealed chunks costs a snapshot write of its new chunks
        only (``runtime.lowlevel.encode_snapshot`` makes them). A chunk that no snapshot
        references any more (the snapshot was replaced, the stream deleted) is dropped.

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``version`` is below 1 or beyond the stream's version, or a new
                chunk's bytes do not match its address.
        """
        ...

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream`` with the chunks it references, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
        """
        ...

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log: yield stored events from ``from_position``, then new ones as
        they are committed, until the store closes.

        Args:
            from_position (int): the first global position to deliver.
            prefix (str): only deliver events of streams starting with this.
        """
        ...

    def changes(self) -> AsyncGenerator[int, None]:
        """Follow the log's head across processes: yield the head position now, then
        the new head each time a commit moves it, whoever made the commit (this store,
        another connection, another process).

        A watcher reads on from where it was (``read_all``) at each position it gets;
        positions are coalesced (a slow watcher gets the newest) and only ever grow.
        A commit shows within a second: SQLite watches its change counter
        (``PRAGMA data_version``), PostgreSQL listens for the store's ``NOTIFY`` with a
        poll behind it. It ends when the store closes; close it early with
        ``contextlib.aclosing``.

        Raises:
            StoreClosedError: the store is closed when the iteration starts.
            StoreUnavailableError: the server cannot be reached (PostgreSQL); watch
                again to retry.
        """
        ...

    def statistics(self) -> EventStoreStatistics:
        """Current counters."""
        ...

    async def aclose(self) -> None:
        """Close the store; pending appends are committed first. Idempotent."""
        ...


@final
class CommitSignal:
    """Wakes subscribers when the head position moves (shared by the store backends)."""

    def __init__(self, head: int = 0) -> None:
        self.head = head
        self.closed = False
        self._event = trio.Event()

    def advance(self, head: int) -> None:
        """Record a new head position and wake waiters."""
        if head > self.head:
            self.head = head
            self._event.set()
            self._event = trio.Event()

    def close(self) -> None:
        """Wake every waiter for good."""
        self.closed = True
        self._event.set()

    async def wait_beyond(self, position: int) -> bool:
        """Wait until the head passes ``position``; ``False`` if the store closed instead."""
        while self.head <= position:
            if self.closed:
                return False
            await self._event.wait()
        return True


@final
class Subscription:
    """An async iterator over the log: stored events first, then live ones.

    Built by ``EventStore.subscribe``. It ends (``StopAsyncIteration``) when the store
    closes, after delivering what was committed. Iterate it with ``async for``.
    """

    def __init__(
        self,
        read_all: Callable[[int, int], Awaitable[list[RecordedEvent]]],
        signal: CommitSignal,
        from_position: int,
        prefix: str,
        batch_size: int = 1000,
    ) -> None:
        if from_position < 1:
            raise ValueError(f"from_position must be >= 1, got {from_position}")
        self._read_all = read_all
        self._signal = signal
        self._next = from_position
        self._prefix = prefix
        self._batch_size = batch_size
        self._buffer: list[RecordedEvent] = []
        self._index = 0

    @property
    def next_position(self) -> int:
        """The global position the subscription will look at next."""
        return self._next

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> RecordedEvent:
        while True:
            if self._index < len(self._buffer):
                event = self._buffer[self._index]
                self._index += 1
                await trio.lowlevel.checkpoint()
                return event
            if self._signal.closed and self._signal.head < self._next:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            try:
                batch = await self._read_all(self._next, self._batch_size)
            except StoreClosedError:
                raise StopAsyncIteration from None
            if batch:
                self._next = batch[-1].position + 1
                self._buffer = [e for e in batch if e.stream.startswith(self._prefix)]
                self._index = 0
                continue
            if not await self._signal.wait_beyond(self._next - 1):
                raise StopAsyncIteration


def check_append_args(stream: object, events: object, expected_version: object) -> None:
    """Validate ``append`` arguments the same way in every backend.

    Raises:
        TypeError: a wrong type.
        ValueError: an empty stream name or a negative expected version.
    """
    # The fast path runs on every append: exact type checks only (NewEvent is final).
    if (
        type(stream) is str
        and stream
        and type(expected_version) is int
        and expected_version >= 0
        and type(events) in (list, tuple)
    ):
        for event in events:  # type: ignore[attr-defined]  # list or tuple
            if type(event) is not NewEvent or not event.type or type(event.data) is not bytes:
                break
        else:
            return
    check_stream_name(stream)
    if not isinstance(expected_version, int) or isinstance(expected_version, bool):
        raise TypeError(f"expected_version must be an int, got {type(expected_version).__name__}")
    if expected_version < 0:
        raise ValueError(f"expected_version must be >= 0, got {expected_version}")
    if not isinstance(events, Sequence) or isinstance(events, str | bytes):
        raise TypeError("events must be a sequence of NewEvent")
    for event in events:
        if not isinstance(event, NewEvent):
            raise TypeError(f"events must be NewEvent instances, got {type(event).__name__}")
        if not event.type:
            raise ValueError("an event's type must be a non-empty string")
        if not isinstance(event.data, bytes):
            raise TypeError(f"NewEvent.data must be bytes, got {type(event.data).__name__}")


def check_stream_name(stream: object) -> None:
    """Validate a stream name.

    Raises:
        TypeError: not a string.
        ValueError: empty.
    """
    if not isinstance(stream, str):
        raise TypeError(f"stream must be a str, got {type(stream).__name__}")
    if not stream:
        raise ValueError("stream must be a non-empty string")


def check_from(name: str, value: int, limit: int | None) -> None:
    """Validate ``from_version``/``from_position`` and ``limit``.

    Raises:
        ValueError: a start below 1 or a negative limit.
    """
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")


def effective_limit(limit: int | None) -> int:
    """SQL-friendly limit: ``None`` becomes -1 (SQLite's "no limit")."""
    return -1 if limit is None else limit
