"""Stateful property test: an event store against a list-of-lists model.

Hypothesis drives append / read / read_all / conflict / snapshot / delete rules against a
real store and a trivially correct model and checks they agree after every step. The
rules are synchronous (as Hypothesis wants); the store lives in a Trio loop on a helper
thread for the whole example, and each rule calls into it with ``trio.from_thread.run``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

import _postgres
import pytest
import trio
from _depth import examples
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocols.errors import ConcurrencyConflictError
from runtime import EventStore, NewEvent, open_sqlite_store
from runtime.testing import InMemoryEventStore, PostgresServer

T = TypeVar("T")

STREAMS = ["a", "b", "tree/c", "tree/c/d"]


class _StoreThread:
    """Runs a store inside ``trio.run`` on a thread, for synchronous callers."""

    def __init__(self, make: Callable[[], AbstractAsyncContextManager[EventStore]]) -> None:
        self._make = make
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.store: EventStore | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self._make() as store:
            self.store = store
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await fn()

        return trio.from_thread.run(run, trio_token=self._token)

    def close(self) -> None:
        if self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)
        if self._error is not None:
            raise self._error


class EventStoreMachine(RuleBasedStateMachine):
    """The store must agree with ``model`` (stream -> list of payloads) at every step."""

    def make_store(self) -> AbstractAsyncContextManager[EventStore]:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="powertrio-stateful-"))
        self.runner = _StoreThread(self.make_store)
        assert self.runner.store is not None
        self.store: EventStore = self.runner.store
        self.model: dict[str, list[bytes]] = {}
        self.order: list[tuple[str, int]] = []  # global order of (stream, version)
        self.snapshots: dict[str, int] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.runner.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _payloads(self, count: int) -> list[NewEvent]:
        events = []
        for _ in range(count):
            self.counter += 1
            events.append(NewEvent(type="e", schema_version=1, data=b"%d" % self.counter))
        return events

    @rule(stream=st.sampled_from(STREAMS), count=st.integers(0, 4))
    def append(self, stream: str, count: int) -> None:
        """Appending at the current version always succeeds."""
        events = self._payloads(count)
        current = len(self.model.get(stream, []))
        result = self.runner.call(lambda: self.store.append(stream, events, current))
        assert result.version == current + count
        if count:
            self.model.setdefault(stream, []).extend(e.data for e in events)
            self.order.extend((stream, current + i) for i in range(1, count + 1))

    @rule(
        stream=st.sampled_from(STREAMS),
        delta=st.sampled_from([-2, -1, 1, 3]),
        count=st.integers(0, 3),
    )
    def stale_append(self, stream: str, delta: int, count: int) -> None:
        """Appending at any other version conflicts and writes nothing."""
        current = len(self.model.get(stream, []))
        expected = current + delta
        if expected < 0:
            return
        events = self._payloads(count)
        with pytest.raises(ConcurrencyConflictError) as info:
            self.runner.call(lambda: self.store.append(stream, events, expected))
        error = info.value
        assert (error.code, error.expected, error.actual) == ("store.conflict", expected, current)

    @rule(
        stream=st.sampled_from(STREAMS),
        start=st.integers(1, 12),
        limit=st.none() | st.integers(0, 5),
    )
    def read(self, stream: str, start: int, limit: int | None) -> None:
        """Reading any range returns exactly the model's slice, in version order."""
        got = self.runner.call(lambda: self.store.read(stream, start, limit=limit))
        expected = self.model.get(stream, [])[start - 1 :]
        if limit is not None:
            expected = expected[:limit]
        assert [e.data for e in got] == expected
        assert [e.version for e in got] == list(range(start, start + len(expected)))

    @rule(stream=st.sampled_from(STREAMS))
    def snapshot(self, stream: str) -> None:
        """A snapshot at the current version is kept; one beyond it is refused."""
        current = len(self.model.get(stream, []))
        if current == 0:
            return
        data = b"state-%d" % current
        self.runner.call(
            lambda: self.store.save_snapshot(stream, current, type="s", schema_version=1, data=data)
        )
        self.snapshots[stream] = max(self.snapshots.get(stream, 0), current)
        with pytest.raises(ValueError, match="beyond the stream's version"):
            self.runner.call(
                lambda: self.store.save_snapshot(
                    stream, current + 1, type="s", schema_version=1, data=b""
                )
            )

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """Deleting a stream removes it and its snapshot; positions keep increasing."""
        stream = data.draw(st.sampled_from(sorted(self.model)))
        deleted = self.runner.call(lambda: self.store.delete_streams([stream]))
        assert deleted == len(self.model.pop(stream))
        self.snapshots.pop(stream, None)
        self.order = [(s, v) for s, v in self.order if s != stream]

    @invariant()
    def global_order_matches(self) -> None:
        """read_all lists every live event once, in the order appended, positions increasing."""
        everything = self.runner.call(self.store.read_all)
        assert [(e.stream, e.version) for e in everything] == self.order
        positions = [e.position for e in everything]
        assert positions == sorted(set(positions))

    @invariant()
    def listing_matches(self) -> None:
        """streams() reports each live stream with its version; snapshots are the newest."""
        infos = self.runner.call(self.store.streams)
        assert {i.stream: i.version for i in infos} == {s: len(v) for s, v in self.model.items()}
        for stream, version in self.snapshots.items():
            snap = self.runner.call(partial(self.store.load_snapshot, stream))
            assert snap is not None
            assert snap.version == version


class MemoryStoreMachine(EventStoreMachine):
    """The in-memory fake against the model."""

    def make_store(self) -> AbstractAsyncContextManager[EventStore]:
        @asynccontextmanager
        async def make() -> AsyncIterator[EventStore]:
            store = InMemoryEventStore()
            yield store
            await store.aclose()

        return make()


class SqliteStoreMachine(EventStoreMachine):
    """The SQLite store against the model, with a tiny index lag so reads mix both paths."""

    def make_store(self) -> AbstractAsyncContextManager[EventStore]:
        return open_sqlite_store(
            self.tmp / "log.db", synchronous="OFF", index_lag=3, checkpoint_interval=0.05
        )


class PostgresStoreMachine(EventStoreMachine):
    """The PostgreSQL store against the model, each example in a fresh schema."""

    server: PostgresServer | None = None  # set by the fixture below

    def make_store(self) -> AbstractAsyncContextManager[EventStore]:
        assert self.server is not None
        return _postgres.postgres_backend(self.server)()


STATEFUL = settings(max_examples=examples(40), stateful_step_count=25, deadline=None)
TestMemoryStore = MemoryStoreMachine.TestCase
TestMemoryStore.settings = STATEFUL
TestSqliteStore = SqliteStoreMachine.TestCase
TestSqliteStore.settings = STATEFUL
TestPostgresStore = PostgresStoreMachine.TestCase
TestPostgresStore.settings = STATEFUL


@pytest.fixture(autouse=True)
def _postgres_for_the_machine(request: pytest.FixtureRequest) -> None:
    """Hand the session's server to the PostgreSQL machine (rules cannot take fixtures)."""
    if request.cls is TestPostgresStore:
        PostgresStoreMachine.server = request.getfixturevalue("postgres_server")
