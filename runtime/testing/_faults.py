"""Fault injection at the event store: crash an actor at its k-th event, fail a commit."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import final

import attrs

from protocols.errors import StoreError

from .._store._contract import (
    AppendResult,
    EventStore,
    EventStoreStatistics,
    NewEvent,
    RecordedEvent,
    Snapshot,
    StreamInfo,
    Subscription,
    check_append_args,
)
from .._store._memory import InMemoryEventStore

__all__ = ["FaultyEventStore", "InjectedFault"]


@final
@attrs.frozen(kw_only=True)
class InjectedFault:
    """One append that :class:`FaultyEventStore` made fail."""

    stream: str
    """The stream the append was for."""
    first_event: int
    """The version the append's first event would have had."""
    event_types: tuple[str, ...]
    """The types of the events that were not written."""
    reason: str
    """Which fault fired: ``crash_at`` or ``fail_next_append``."""


@attrs.define(eq=False)
class _CrashAt:
    stream: str
    event: int


@final
@attrs.define(eq=False, repr=False)
class FaultyEventStore:
    """An event store whose appends fail where you say, over any ``EventStore``.

    An event-sourced actor whose append fails crashes; its supervisor restarts it and it
    folds its log again. So failing the append that would write a stream's k-th event is
    how a test crashes an actor *at its k-th event*, at a point chosen by a property
    (``crash_at``), rather than by a timing-dependent kill. Nothing of a failed append is
    written, as with a failed disk write: the fault is raised before the append reaches
    :attr:`inner`, so it works the same over the in-memory store and over SQLite.

    Every other method goes to :attr:`inner` unchanged, so the store passes
    ``check_event_store``. Each fault fires once and is recorded in :attr:`faults`.

    Example::

        store = FaultyEventStore()
        store.crash_at("session/s1", 5)  # the append holding event 5 fails, once
        async with open_runtime(store=store, supervision=...) as runtime:
            ...
        assert [f.first_event for f in store.faults] == [5]  # or [] if it never got there

    Args:
        inner (EventStore): the store that holds the events; by default a fresh
            :class:`InMemoryEventStore`.
    """

    inner: EventStore = attrs.field(factory=InMemoryEventStore)
    """The store that holds the events; read it directly to bypass the faults."""
    faults: list[InjectedFault] = attrs.field(init=False, factory=list)
    """The faults that fired, in order."""
    _crashes: list[_CrashAt] = attrs.field(init=False, factory=list)
    _next: list[str | None] = attrs.field(init=False, factory=list)
    _failed: int = attrs.field(init=False, default=0)

    def __repr__(self) -> str:
        return f"<FaultyEventStore faults={len(self.faults)} inner={self.inner!r}>"

    # --- fault injection -------------------------------------------------------------

    def crash_at(self, stream: str, event: int) -> None:
        """Fail the append that would write ``stream``'s event number ``event`` (once).

        Args:
            stream (str): the actor's stream, e.g. ``"session/s1"``.
            event (int): the 1-based version of the event; an append of several events
                fails if any of them would have this version.

        Raises:
            ValueError: ``event`` is below 1.
        """
        if event < 1:
            msg = f"event must be >= 1 (versions start at 1), got {event}"
            raise ValueError(msg)
        self._crashes.append(_CrashAt(stream, event))

    def fail_next_append(self, stream: str | None = None) -> None:
        """Fail the next append to ``stream`` (to any stream when ``None``), once.

        With a stream, this crashes that actor at its next event, whenever it comes;
        without, whoever writes next fails (as ``InMemoryEventStore.fail_next_commit``).
        """
        self._next.append(stream)

    @property
    def armed(self) -> int:
        """How many injected faults have not fired yet."""
        return len(self._crashes) + len(self._next)

    def _fault_for(self, stream: str, events: Sequence[NewEvent], version: int) -> str | None:
        first, last = version + 1, version + len(events)
        for crash in self._crashes:
            if crash.stream == stream and first <= crash.event <= last:
                self._crashes.remove(crash)
                return "crash_at"
        for wanted in self._next:
            if wanted is None or wanted == stream:
                self._next.remove(wanted)
                return "fail_next_append"
        return None

    # --- EventStore --------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        """Append through :attr:`inner`, unless an injected fault makes this append fail.

        Raises:
            StoreError: an injected fault; nothing was written.
            ConcurrencyConflictError, StoreClosedError, TypeError, ValueError: as the
                inner store's ``append``.
        """
        batch = list(events)
        if not self.armed:
            return await self.inner.append(stream, batch, expected_version)
        check_append_args(stream, batch, expected_version)
        current = await self.inner.stream_version(stream)
        reason = self._fault_for(stream, batch, current) if current == expected_version else None
        if reason is None:
            return await self.inner.append(stream, batch, expected_version)
        self.faults.append(
            InjectedFault(
                stream=stream,
                first_event=current + 1,
                event_types=tuple(e.type for e in batch),
                reason=reason,
            )
        )
        self._failed += 1
        msg = (
            f"injected fault ({reason}): the append of {stream!r} from version "
            f"{current + 1} failed; nothing was written"
        )
        raise StoreError(msg)

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """See ``EventStore.read``."""
        return await self.inner.read(stream, from_version, limit=limit)

    async def read_all(
        self, from_position: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """See ``EventStore.read_all``."""
        return await self.inner.read_all(from_position, limit=limit)

    async def stream_version(self, stream: str) -> int:
        """See ``EventStore.stream_version``."""
        return await self.inner.stream_version(stream)

    async def head_position(self) -> int:
        """See ``EventStore.head_position``."""
        return await self.inner.head_position()

    def changes(self) -> AsyncGenerator[int, None]:
        """See ``EventStore.changes``."""
        return self.inner.changes()

    async def streams(self, prefix: str = "") -> list[StreamInfo]:
        """See ``EventStore.streams``."""
        return await self.inner.streams(prefix)

    async def delete_streams(self, streams: Sequence[str]) -> int:
        """See ``EventStore.delete_streams``."""
        return await self.inner.delete_streams(streams)

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
        """See ``EventStore.save_snapshot``."""
        await self.inner.save_snapshot(
            stream, version, type=type, schema_version=schema_version, data=data, chunks=chunks
        )

    async def load_snapshot(self, stream: str) -> Snapshot | None:
        """See ``EventStore.load_snapshot``."""
        return await self.inner.load_snapshot(stream)

    async def load_checkpoint(self, name: str) -> tuple[int, bytes] | None:
        """The inner store's checkpoint (``None`` if it keeps none)."""
        load = getattr(self.inner, "load_checkpoint", None)
        if load is None:
            return None
        found: tuple[int, bytes] | None = await load(name)
        return found

    async def save_checkpoint(self, name: str, position: int, data: bytes) -> None:
        """Save the checkpoint in the inner store, if it keeps them."""
        save = getattr(self.inner, "save_checkpoint", None)
        if save is not None:
            await save(name, position, data)

    def subscribe(self, from_position: int = 1, *, prefix: str = "") -> Subscription:
        """See ``EventStore.subscribe``."""
        return self.inner.subscribe(from_position, prefix=prefix)

    def statistics(self) -> EventStoreStatistics:
        """The inner store's counters, with the injected faults in ``failed_appends``."""
        stats = self.inner.statistics()
        return attrs.evolve(stats, failed_appends=stats.failed_appends + self._failed)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()
