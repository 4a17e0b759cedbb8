"""The timers index opens from a checkpoint plus the tail, and gives what a full fold gives."""

from __future__ import annotations

import logging
from pathlib import Path
from unittest import mock

import _postgres
import psycopg
import pytest
import trio
import trio.testing
from _timer_owner import STREAM, Owner

import runtime._timers._checkpoint as checkpoints
from runtime import Clock, EventStore, NewEvent, open_runtime, open_sqlite_store
from runtime._postgres._schema import INSERT_EVENTS, lock_key
from runtime.postgres import open_postgres_store
from runtime.testing import InMemoryEventStore, PostgresServer
from runtime.timers import PendingTimer

T0 = 1_700_000_000.0
HOUR = 3600.0


def make_clock() -> Clock:
    return Clock(start=T0)


class _Reads:
    """The store, noting where each ``read_all`` starts."""

    def __init__(self, store: InMemoryEventStore) -> None:
        self._store = store
        self.starts: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def read_all(self, start: int = 1, *, limit: int | None = None) -> object:
        self.starts.append(start)
        return await self._store.read_all(start, limit=limit)


async def _pending_after_open(store: EventStore) -> dict[str, tuple[PendingTimer, ...]]:
    async with open_runtime(clock=make_clock(), store=store, seed=1) as runtime:
        streams = [STREAM, "owner/2"]
        return {s: runtime.timers.pending(s) for s in streams if runtime.timers.pending(s)}


async def _schedule(store: EventStore, stream: str, *ids: str, cancel: str = "") -> None:
    async with open_runtime(clock=make_clock(), store=store, seed=1) as runtime:
        owner = await runtime.spawn(lambda: Owner(stream), id=stream.replace("/", "-"))
        for i, timer_id in enumerate(ids):
            await runtime.timers.schedule(
                owner, at=T0 + (i + 1) * HOUR, note=timer_id, timer_id=timer_id
            )
        if cancel:
            await runtime.timers.cancel_timer(cancel)


async def test_an_open_saves_a_checkpoint_and_the_next_folds_only_the_tail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InMemoryEventStore()
    await _schedule(store, STREAM, "a", "b", "c", cancel="b")
    assert await store.load_checkpoint("timers") is None  # the first open had no log
    first = await _pending_after_open(store)  # folds the log, saves a checkpoint
    position, _ = await store.load_checkpoint("timers") or (0, b"")
    assert position == await store.head_position()
    await _schedule(store, "owner/2", "d")  # the tail after the checkpoint
    counting = _Reads(store)
    reopened = await _pending_after_open(counting)  # type: ignore[arg-type]  # a proxy
    assert counting.starts[0] == position + 1  # only the tail is read
    assert reopened == {**first, "owner/2": reopened["owner/2"]}
    assert [t.timer_id for t in reopened[STREAM]] == ["a", "c"]
    assert [t.timer_id for t in reopened["owner/2"]] == ["d"]
    # The same as a fold of the whole log, with no checkpoint at all.
    store._checkpoints.clear()
    assert await _pending_after_open(store) == reopened


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"format": 99, "books": {}}', "format 99, expected 1"),
        (b"not json", "not JSON"),
        (b'{"format": 1, "books": {"owner/1": [{"nope": 1}]}}', "IterableValidationError"),
    ],
)
async def test_a_checkpoint_of_another_format_or_that_does_not_decode_is_ignored(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    data: bytes,
    reason: str,
) -> None:
    store = InMemoryEventStore()
    await _schedule(store, STREAM, "a", "b")
    folded = await _pending_after_open(store)
    await store.save_checkpoint("timers", await store.head_position(), data)
    with caplog.at_level(logging.WARNING, logger="powertrio.timers"):
        assert await _pending_after_open(store) == folded
    assert "timers: ignored the checkpoint at position" in caplog.text
    assert reason in caplog.text


async def test_a_running_service_checkpoints_every_so_many_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InMemoryEventStore()
    with mock.patch.object(checkpoints, "CHECKPOINT_EVERY", 3):
        async with open_runtime(clock=make_clock(), store=store, seed=1) as runtime:
            owner = await runtime.spawn(Owner)
            for i in range(7):
                await runtime.timers.schedule(owner, at=T0 + HOUR, timer_id=f"t{i}")
            await trio.testing.wait_all_tasks_blocked()
            position, data = await store.load_checkpoint("timers") or (0, b"")
            assert position >= 6
            books = checkpoints.decode(data)
            assert len(books[STREAM].pending) == position


async def test_the_sqlite_store_keeps_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store:
        assert await store.load_checkpoint("timers") is None
        await store.save_checkpoint("timers", 0, b"one")
        await store.save_checkpoint("timers", 7, b"two")
        with pytest.raises(ValueError, match="checkpoint position must be >= 0, got -1"):
            await store.save_checkpoint("timers", -1, b"x")
    async with open_sqlite_store(path) as store:
        assert await store.load_checkpoint("timers") == (7, b"two")
        report = await store.audit()
        assert not report.problems


async def test_the_memory_store_refuses_a_negative_position() -> None:
    store = InMemoryEventStore()
    with pytest.raises(ValueError, match="checkpoint position must be >= 0, got -2"):
        await store.save_checkpoint("timers", -2, b"x")


async def test_the_postgres_store_keeps_checkpoints_and_opening_reads_only_the_tail(
    autojump_clock: trio.testing.MockClock, postgres_server: PostgresServer
) -> None:
    """On PostgreSQL as on SQLite: the checkpoint survives reopening the store, and the
    timers service opening on it reads the log only from the position after it."""
    async with _postgres.postgres_backend(postgres_server)() as store:
        assert await store.load_checkpoint("timers") is None  # type: ignore[attr-defined]  # the optional capability
        with pytest.raises(ValueError, match="checkpoint position must be >= 0, got -1"):
            await store.save_checkpoint("timers", -1, b"x")  # type: ignore[attr-defined]
        await _schedule(store, STREAM, "a", "b", "c", cancel="b")
        first = await _pending_after_open(store)  # folds the log, saves a checkpoint
        position, _ = await store.load_checkpoint("timers") or (0, b"")  # type: ignore[attr-defined]
        assert position == await store.head_position()
        await _schedule(store, "owner/2", "d")  # the tail after the checkpoint
        counting = _Reads(store)  # type: ignore[arg-type]  # a proxy of any store
        reopened = await _pending_after_open(counting)  # type: ignore[arg-type]
        assert counting.starts[0] == position + 1  # only the tail is read
        assert [t.timer_id for t in reopened[STREAM]] == ["a", "c"]
        assert [t.timer_id for t in reopened["owner/2"]] == ["d"]
        assert reopened[STREAM] == first[STREAM]


async def test_a_postgres_checkpoint_stops_below_a_transaction_still_in_flight(
    autojump_clock: trio.testing.MockClock, postgres_server: PostgresServer
) -> None:
    """Another node's append is in flight while timers are scheduled after it: the
    checkpoint is saved below it (where ``read_all`` stopped), not at the head, so once
    it commits, the next open still folds it and the timers scheduled after it."""
    schema = _postgres.fresh_schema()
    try:
        async with open_postgres_store(postgres_server.dsn(), schema=schema) as store:
            await store.append("other/1", [NewEvent(type="t", schema_version=1, data=b"{}")], 0)
            with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
                conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
                columns = (["other/2"], [1], ["t"], [1], [b"{}"], [None], [None], [0.0])
                row = conn.execute(INSERT_EVENTS, columns).fetchone()
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(schema),))
                assert row == (2,)  # in flight: read_all stops before it
                await _schedule(store, STREAM, "a", "b")  # committed after it
                assert await _pending_after_open(store) == {}  # held back, not yet seen
                position, _ = await store.load_checkpoint("timers") or (0, b"")
                assert position == 1
                conn.execute("COMMIT")
            reopened = await _pending_after_open(store)
            assert [t.timer_id for t in reopened[STREAM]] == ["a", "b"]
            position, _ = await store.load_checkpoint("timers") or (0, b"")
            assert position == await store.head_position()
    finally:
        await _postgres.drop_schema(postgres_server, schema)
