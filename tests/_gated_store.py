"""Appends held for the test, for tests of what happens while one is: a store whose
appends wait for a gate, and a writer thread (SQLite's or PostgreSQL's) kept busy."""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from protocols.errors import StoreError
from runtime import AppendResult, EventStore, NewEvent, SqliteEventStore
from runtime.postgres import PostgresEventStore
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


def hold_in_thread() -> tuple[Callable[..., None], threading.Event, threading.Event]:
    """A function that blocks the thread calling it until released, and its two events."""
    entered = threading.Event()
    release = threading.Event()

    def hold(*_args: object) -> None:
        entered.set()
        release.wait(30)

    return hold, entered, release


@asynccontextmanager
async def writer_paused(store: SqliteEventStore | PostgresEventStore) -> AsyncIterator[None]:
    """Keep the store's writer thread busy in a maintenance write; appends queue up
    meanwhile, and are committed (in one group) once the block is left."""
    hold, entered, release = hold_in_thread()
    if isinstance(store, PostgresEventStore):
        write = functools.partial(store._run_write, hold, retry=False)
    else:
        write = functools.partial(store._run_write, hold)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        assert await trio.to_thread.run_sync(entered.wait, 30)
        try:
            yield
        finally:
            release.set()
