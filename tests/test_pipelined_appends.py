"""Pipelined appends (``begin_append``), on both stores that have them: an append queued
behind another of its stream commits only if that one does, right behind it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import _postgres
import pytest
import trio
import trio.testing
from _gated_store import writer_paused

from protocols.errors import ConcurrencyConflictError, StoreClosedError
from runtime import AppendResult, NewEvent, SqliteEventStore, open_sqlite_store
from runtime.postgres import PostgresEventStore

Store = SqliteEventStore | PostgresEventStore


def _event(n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An empty store of each kind (PostgreSQL: a fresh schema on the session's server)."""
    opened: AbstractAsyncContextManager[Any]
    if request.param == "postgres":
        opened = _postgres.postgres_backend(request.getfixturevalue("postgres_server"))()
    else:
        opened = open_sqlite_store(tmp_path / "log.db")
    async with opened as made:
        yield made


class _Begun:
    """Appends begun with ``begin_append``, and a Trio event per append set when decided."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.decided: list[trio.Event] = []

    def begin(self, stream: str, events: list[NewEvent], expected: int, after: Any) -> Any:
        decided = trio.Event()
        self.decided.append(decided)
        pending = self.store.begin_append(
            stream, tuple(events), expected, after=after, wake=decided.set
        )
        assert pending is not None
        return pending

    async def all_decided(self) -> None:
        for decided in self.decided:
            await decided.wait()


async def test_an_append_begun_behind_another_commits_right_after_it(store: Store) -> None:
    """``after``: the second append is queued before the first is decided, expecting the
    version the first leaves; both commit, in order, in one group when queued together."""
    begun = _Begun(store)
    before = store.statistics().commits
    async with writer_paused(store):
        first = begun.begin("a", [_event(0), _event(1)], 0, None)
        second = begun.begin("a", [_event(2)], 2, first)
        assert store.statistics().pending_appends == 2
    await begun.all_decided()
    assert [store.finish_append(first), store.finish_append(second)] == [
        AppendResult(stream="a", version=2, first_position=1, last_position=2),
        AppendResult(stream="a", version=3, first_position=3, last_position=3),
    ]
    assert store.statistics().commits - before == 1
    assert [e.data for e in await store.read("a")] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']


@pytest.mark.parametrize("together", [True, False], ids=["one group", "two groups"])
async def test_an_append_behind_one_that_conflicted_never_commits(
    store: Store, together: bool
) -> None:
    """Another writer took the stream: the first append conflicts, and the one queued
    behind it fails too, even though the stream now stands at the version it expected. It
    was decided on the first one's events, not on the other writer's."""
    begun = _Begun(store)
    async with trio.open_nursery() as nursery:
        async with writer_paused(store):
            nursery.start_soon(store.append, "a", [_event(9)], 0)  # the other writer
            await trio.testing.wait_all_tasks_blocked()
            first = begun.begin("a", [_event(0)], 0, None)
            if together:
                second = begun.begin("a", [_event(1)], 1, first)
        if not together:  # behind an append decided, not finished yet
            await begun.decided[0].wait()
            second = begun.begin("a", [_event(1)], 1, first)
    await begun.all_decided()
    for pending, expected in ((first, 0), (second, 1)):
        with pytest.raises(ConcurrencyConflictError) as info:
            store.finish_append(pending)
        assert (info.value.stream, info.value.expected, info.value.actual) == ("a", expected, 1)
    assert [e.data for e in await store.read("a")] == [b'{"n":9}']


async def test_begin_append_checks_its_arguments_and_declines_when_closing(
    store: Store,
) -> None:
    """Bad arguments raise as ``append`` would; a closing store queues nothing and says so
    with ``None`` (the caller then appends and gets the typed error)."""
    with pytest.raises(ValueError, match="expected_version"):
        store.begin_append("a", (_event(0),), -1, after=None, wake=lambda: None)
    await store.aclose()
    assert store.begin_append("a", (_event(0),), 0, after=None, wake=lambda: None) is None
    with pytest.raises(StoreClosedError):
        await store.append("a", [_event(0)], 0)


async def _writer_waits_for_work(store: Store) -> None:
    writer = store._writer
    while True:
        with writer._mutex:
            if writer._idle and not writer._queue:
                return
        await trio.sleep(0.001)


def _still_queued(store: Store, pending: Any) -> bool:
    writer = store._writer
    with writer._mutex:
        return writer._queue == [pending]


async def test_an_idle_writer_is_woken_for_an_append_once_trio_waits_for_io(
    store: Store,
) -> None:
    """While the task that began the append runs on, the writer thread is left waiting
    (woken, it would take the GIL from that task); once Trio waits for I/O it is woken,
    and the append commits."""
    await _writer_waits_for_work(store)
    begun = _Begun(store)
    pending = begun.begin("a", [_event(0)], 0, None)
    for _ in range(3):  # rounds of a busy Trio thread, each 5 ms without the GIL
        time.sleep(0.005)  # noqa: ASYNC251  # on purpose: busy, and the GIL left free
        await trio.lowlevel.checkpoint()
    assert _still_queued(store, pending)
    await begun.all_decided()  # Trio waits for I/O
    assert store.finish_append(pending).version == 1


async def test_a_trio_thread_that_never_waits_wakes_its_writer_within_a_few_rounds(
    store: Store,
) -> None:
    await _writer_waits_for_work(store)
    begun = _Begun(store)
    pending = begun.begin("a", [_event(0)], 0, None)
    rounds = 0
    while not begun.decided[0].is_set():
        await trio.lowlevel.checkpoint()  # runnable again at once: Trio never waits
        rounds += 1
        assert rounds < 100_000, "the writer was never woken"
    assert store.finish_append(pending).version == 1
