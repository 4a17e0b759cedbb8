"""A store whose appends wait for the test, for tests of what happens while one is held."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from protocols.errors import StoreError
from runtime import AppendResult, EventStore, NewEvent
from runtime.testing import InMemoryEventStore


class GatedStore:
    """An in-memory store whose appends of chosen event types wait for a gate.

    ``fail`` makes the next gated append fail (nothing written), as a disk error would.
    """

    def __init__(self, gated: str) -> None:
        self.inner = InMemoryEventStore()
        self.gated = gated
        self.gate = trio.Event()
        self.waiting = 0
        self.fail = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int
    ) -> AppendResult:
        batch = list(events)
        if any(e.type == self.gated for e in batch) and not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
            if self.fail:
                self.fail = False
                self.inner.fail_next_commit(StoreError("injected: the disk is gone"))
        return await self.inner.append(stream, batch, expected_version)

    def as_store(self) -> EventStore:
        return self  # type: ignore[return-value]  # a duck-typed EventStore
