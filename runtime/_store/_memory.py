"""An in-memory ``EventStore`` for tests, with fault injection."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import final

import attrs
import trio

from protocols.errors import ConcurrencyConflictError, StoreClosedError, StoreError

from ._contract import (
    AppendResult,
    CommitSignal,
    EventStoreStatistics,
    NewEvent,
    RecordedEvent,
    Snapshot,
    StreamInfo,
    Subscription,
    check_append_args,
    check_from,
    check_stream_name,
)

__all__ = ["InMemoryEventStore"]


@attrs.define(eq=False)
class _Stream:
    events: list[RecordedEvent] = attrs.field(factory=list)
    created_at: float = 0.0


@final
@attrs.define(eq=False, repr=False)
class InMemoryEventStore:
    """An ``EventStore`` held in dictionaries: same semantics as the SQLite store, no I/O.

    It passes ``check_event_store``, so tests of actors can use it in place of a file.
    Faults can be injected: :meth:`fail_next_commit` makes the next appends fail as a
    failed disk write would (nothing written, a ``StoreError`` raised).

    Args:
        clock (Callable[[], float]): the time source for ``recorded_at``.
    """

    _clock: Callable[[], float] = time.time
    _streams: dict[str, _Stream] = attrs.field(init=False, factory=dict)
    _log: list[RecordedEvent] = attrs.field(init=False, factory=list)
    _snapshots: dict[str, Snapshot] = attrs.field(init=False, factory=dict)
    _chunks: dict[bytes, bytes] = attrs.field(init=False, factory=dict)
    """Snapshot chunks by address, each once; ``_chunk_refs`` counts the snapshots that
    reference each (a chunk goes when its count does)."""
    _chunk_refs: dict[bytes, int] = attrs.field(init=False, factory=dict)
    _snapshot_chunks: dict[str, frozenset[bytes]] = attrs.field(init=False, factory=dict)
    _checkpoints: dict[str, tuple[int, bytes]] = attrs.field(init=False, factory=dict)
    _faults: list[BaseException] = attrs.field(init=False, factory=list)
    _signal: CommitSignal = attrs.field(init=False, factory=CommitSignal)
    _closed: bool = attrs.field(init=False, default=False)
    _appends: int = attrs.field(init=False, default=0)
    _events_appended: int = attrs.field(init=False, default=0)
    _conflicts: int = attrs.field(init=False, default=0)
    _failed: int = attrs.field(init=False, default=0)

    def __repr__(self) -> str:
        return f"<InMemoryEventStore streams={len(self._streams)} head={self._signal.head}>"

    # --- fault injection -------------------------------------------------------------

    def fail_next_commit(self, error: BaseException | None = None, *, times: int = 1) -> None:
        """Make the next ``times`` appends fail without writing anything.

        Args:
            error (BaseException | None): what to raise; by default a ``StoreError``
                saying the failure was injected.
            times (int): how many consecutive appends fail.
        """
        for _ in range(times):
            self._faults.append(
                error
                if error is not None
                else StoreError("injected commit failure (fail_next_commit); nothing was written")
            )

    # --- EventStore --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append events if the stream is at ``expected_version``; see ``EventStore``.

        Raises:
            ConcurrencyConflictError: the stream is at another version; nothing was written.
            StoreClosedError: the store is closed.
            StoreError: an injected failure; nothing was written.
            TypeError, ValueError: bad arguments.
        """
        check_append_args(stream, events, expected_version)
        await trio.lowlevel.checkpoint()
        self._check_open()
        state = self._streams.get(stream)
        current = 0 if state is None else len(state.events)
        if current != expected_version:
            self._conflicts += 1
            raise ConcurrencyConflictError(stream, expected_version, current)
        if self._faults:
            self._failed += 1
            raise self._faults.pop(0)
        now = self._clock()
        head = self._signal.head
        if events and state is None:
            first_stamp = events[0].recorded_at
            state = self._streams[stream] = _Stream(
                created_at=now if first_stamp is None else first_stamp
            )
        for offset, event in enumerate(events, start=1):
            assert state is not None
            recorded = RecordedEvent(
                stream=stream,
                version=current + offset,
                position=head + offset,
                type=event.type,
                schema_version=event.schema_version,
                data=event.data,
                metadata=event.metadata,
                recorded_at=now if event.recorded_at is None else event.recorded_at,
            )
            state.events.append(recorded)
            self._log.append(recorded)
        self._appends += 1
        self._events_appended += len(events)
        self._signal.advance(head + len(events))
        return AppendResult(
            stream=stream,
            version=current + len(events),
            first_position=head + 1,
            last_position=head + len(events),
        )

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream from ``from_version`` on; see ``EventStore.read``.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)
        check_from("from_version", from_version, limit)
        await trio.lowlevel.checkpoint()
        self._check_open()
        state = self._streams.get(stream)
        if state is None:
            return []
        end = None if limit is None else from_version - 1 + limit
        return state.events[from_version - 1 : end]

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read the whole log in global order; see ``EventStore.read_all``.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_from("from_position", from_position, limit)
        await trio.lowlevel.checkpoint()
        self._check_open()
        # Positions are dense except where streams were deleted: bisect on position.
        low, high = 0, len(self._log)
        while low < high:
            mid = (low + high) // 2
            if self._log[mid].position < from_position:
                low = mid + 1
            else:
                high = mid
        end = None if limit is None else low + limit
        return self._log[low:end]

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0 if absent).

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)
        await trio.lowlevel.checkpoint()
        self._check_open()
        state = self._streams.get(stream)
        return 0 if state is None else len(state.events)

    async def head_position(self) -> int:
        """The newest global position (0 when empty).

        Raises:
            StoreClosedError: the store is closed.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        return self._signal.head

    async def streams(self, prefix: str = "") -> list[StreamInfo]:
        """List streams starting with ``prefix``, sorted by name.

        Raises:
            StoreClosedError: the store is closed.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        return [
            StreamInfo(
                stream=name,
                version=len(state.events),
                created_at=state.created_at,
                updated_at=state.events[-1].recorded_at,
            )
            for name, state in sorted(self._streams.items())
            if name.startswith(prefix)
        ]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        """Delete whole streams and their snapshots.

        Raises:
            StoreClosedError: the store is closed.
        """
        names = set(streams)
        for name in names:
            check_stream_name(name)
        await trio.lowlevel.checkpoint()
        self._check_open()
        deleted = 0
        for name in names:
            state = self._streams.pop(name, None)
            self._snapshots.pop(name, None)
            self._replace_chunks(name, {})
            if state is not None:
                deleted += len(state.events)
        if deleted:
            self._log = [e for e in self._log if e.stream not in names]
        return deleted

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

        Chunks are kept once each, counted by the snapshots that reference them.

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``version`` is below 1 or beyond the stream's version, or a new
                chunk does not match its address.
        """
        check_stream_name(stream)
        if version < 1:
            raise ValueError(f"snapshot version must be >= 1, got {version}")
        await trio.lowlevel.checkpoint()
        self._check_open()
        state = self._streams.get(stream)
        current = 0 if state is None else len(state.events)
        if version > current:
            raise ValueError(
                f"snapshot of {stream!r} at version {version} is beyond the stream's "
                f"version {current}; fold the stream's events before snapshotting"
            )
        existing = self._snapshots.get(stream)
        if existing is None or existing.version <= version:
            self._replace_chunks(stream, dict(chunks or {}))
            self._snapshots[stream] = Snapshot(
                stream=stream,
                version=version,
                type=type,
                schema_version=schema_version,
                data=data,
                recorded_at=self._clock(),
            )

    async def load_checkpoint(self, name: str) -> tuple[int, bytes] | None:
        """A projection's checkpoint (see ``SqliteEventStore.load_checkpoint``).

        Raises:
            StoreClosedError: the store is closed.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        return self._checkpoints.get(name)

    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None:
        """Replace a projection's checkpoint (see ``SqliteEventStore.save_checkpoint``).

        Raises:
            StoreClosedError: the store is closed.
            ValueError: ``position`` is negative.
        """
        await trio.lowlevel.checkpoint()
        self._check_open()
        if position < 0:
            raise ValueError(f"checkpoint position must be >= 0, got {position}")
        self._checkpoints[name] = (position, bytes(data))

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """The newest snapshot of ``stream``, or ``None``.

        Raises:
            StoreClosedError: the store is closed.
        """
        check_stream_name(stream)
        await trio.lowlevel.checkpoint()
        self._check_open()
        snapshot = self._snapshots.get(stream)
        ids = self._snapshot_chunks.get(stream)
        if snapshot is None or not ids:
            return snapshot
        chunks = {id_: self._chunks[id_] for id_ in ids if id_ in self._chunks}
        return attrs.evolve(snapshot, chunks=chunks)

    def _replace_chunks(self, stream: str, chunks: Mapping[bytes, bytes]) -> None:
        """Make ``chunks`` the chunks of ``stream``'s snapshot; drop the unreferenced.

        Raises:
            ValueError: a new chunk's bytes do not match its address (nothing changed).
        """
        before = self._snapshot_chunks.get(stream, frozenset())
        after = frozenset(chunks)
        for id_ in after - before:
            if hashlib.sha256(chunks[id_]).digest() != id_:
                msg = f"snapshot chunk {id_.hex()} of {stream!r} does not match its content address"
                raise ValueError(msg)
        refs = self._chunk_refs
        for id_ in after - before:
            self._chunks.setdefault(id_, bytes(chunks[id_]))
            refs[id_] = refs.get(id_, 0) + 1
        for id_ in before - after:
            refs[id_] -= 1
            if not refs[id_]:
                del refs[id_]
                self._chunks.pop(id_, None)
        if after:
            self._snapshot_chunks[stream] = after
        else:
            self._snapshot_chunks.pop(stream, None)

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """Follow the log from ``from_position``; see ``EventStore.subscribe``."""

        async def read_batch(start: int, limit: int) -> list[RecordedEvent]:
            return await self.read_all(start, limit=limit)

        return Subscription(read_batch, self._signal, from_position, prefix)

    async def changes(self) -> AsyncGenerator[int, None]:
        """Follow the head; see ``EventStore.changes`` (one process: its commit signal)."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        signal = self._signal
        last = signal.head
        yield last
        while await signal.wait_beyond(last):
            last = signal.head
            yield last

    def statistics(self) -> EventStoreStatistics:
        """Current counters (``commits`` equals ``appends``: there is no group commit)."""
        return EventStoreStatistics(
            appends=self._appends,
            events_appended=self._events_appended,
            conflicts=self._conflicts,
            failed_appends=self._failed,
            commits=self._appends,
            pending_appends=0,
            head_position=self._signal.head,
            closed=self._closed,
        )

    def close(self) -> None:
        """Close the store; later calls raise ``StoreClosedError``. Idempotent."""
        self._closed = True
        self._signal.close()

    async def aclose(self) -> None:
        """Close the store (see :meth:`close`)."""
        self.close()
        await trio.lowlevel.checkpoint()
