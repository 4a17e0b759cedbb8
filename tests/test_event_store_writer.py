"""The SQLite store's writer thread: group commits with conflicts, cancellation, splitting."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from _depth import examples
from _gated_store import hold_in_thread, writer_paused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.codec import EncodedEvent
from protocols.errors import ConcurrencyConflictError, StoreClosedError
from runtime import (
    AppendResult,
    NewEvent,
    SqliteEventStore,
    open_sqlite_store,
)
from runtime._sqlite._schema import event_checksum
from runtime._sqlite._writer import _SPLIT_QUEUE, SqliteWriter
from runtime._store import _writer_queue
from runtime._store._contract import new_event_from_encoded
from runtime._store._writer_queue import PendingAppend

Outcome = AppendResult | ConcurrencyConflictError


def _event(n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n)


async def _queue_in_order(
    nursery: trio.Nursery, calls: list[Callable[[], Awaitable[None]]], store: SqliteEventStore
) -> None:
    """Start each call and let it queue before the next (Trio may run a batch in any order)."""
    for call in calls:
        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
    assert store.statistics().pending_appends == len(calls)


def _attempt(
    store: SqliteEventStore,
    outcomes: dict[str, Outcome],
    name: str,
    stream: str,
    expected: int,
    *,
    count: int = 1,
) -> Callable[[], Awaitable[None]]:
    """A call appending ``count`` events to ``stream`` at ``expected``, its outcome (the
    result or the conflict) kept in ``outcomes[name]``."""

    async def run() -> None:
        events = [_event(i) for i in range(count)]
        try:
            outcomes[name] = await store.append(stream, events, expected)
        except ConcurrencyConflictError as exc:
            outcomes[name] = exc

    return run


async def test_a_conflict_in_a_group_fails_alone(tmp_path: Path) -> None:
    """One group holding good and stale appends: each stale one raises the typed conflict
    and writes nothing, the others commit together, in queue order, in one transaction."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await store.append("a", [_event(0)], 0)
        before = store.statistics()
        outcomes: dict[str, Outcome] = {}
        calls = [
            _attempt(store, outcomes, "b1", "b", 0, count=2),
            _attempt(store, outcomes, "a-stale", "a", 0),
            _attempt(store, outcomes, "b2", "b", 2),  # builds on b1, in the same group
            _attempt(store, outcomes, "b-stale", "b", 2),  # stale once b2 is in
            _attempt(store, outcomes, "c", "c", 0),
        ]
        async with trio.open_nursery() as nursery, writer_paused(store):
            await _queue_in_order(nursery, calls, store)

        after = store.statistics()
        assert (
            after.commits - before.commits,
            after.appends - before.appends,
            after.events_appended - before.events_appended,
            after.conflicts - before.conflicts,
        ) == (1, 3, 4, 2)
        assert [outcomes["b1"], outcomes["b2"], outcomes["c"]] == [
            AppendResult(stream="b", version=2, first_position=2, last_position=3),
            AppendResult(stream="b", version=3, first_position=4, last_position=4),
            AppendResult(stream="c", version=1, first_position=5, last_position=5),
        ]
        stale = [outcomes["a-stale"], outcomes["b-stale"]]
        assert all(isinstance(e, ConcurrencyConflictError) for e in stale)
        assert [
            (e.stream, e.expected, e.actual)
            for e in stale
            if isinstance(e, ConcurrencyConflictError)
        ] == [("a", 0, 1), ("b", 2, 3)]
        assert [e.position for e in await store.read_all()] == [1, 2, 3, 4, 5]
        assert [(e.stream, e.version) for e in await store.read("b")] == [
            ("b", 1),
            ("b", 2),
            ("b", 3),
        ]
        assert await store.stream_version("a") == 1
        assert store.statistics().pending_appends == 0


async def test_a_long_queue_met_at_idle_is_committed_as_two_groups(tmp_path: Path) -> None:
    """So that one half's callers run while the other half syncs; both are acknowledged."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        before = store.statistics().commits
        results: list[AppendResult] = []

        async def one(i: int) -> None:
            results.append(await store.append(f"s/{i}", [_event(i)], 0))

        count = 2 * _SPLIT_QUEUE
        async with trio.open_nursery() as nursery, writer_paused(store):
            for i in range(count):
                nursery.start_soon(one, i)
            await trio.testing.wait_all_tasks_blocked()
            assert count == store.statistics().pending_appends
        assert store.statistics().commits - before == 2
        assert list(range(1, count + 1)) == sorted(r.first_position for r in results)
        assert count == len(await store.streams())


async def test_cancelling_an_append_the_writer_holds_returns_its_result(tmp_path: Path) -> None:
    """Once its group is being committed, a cancelled caller still learns the outcome
    (the append is durable) and the cancellation arrives at its next checkpoint."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        hold, entered, release = hold_in_thread()

        def arm(conn: sqlite3.Connection) -> None:
            conn.create_function("hold_insert", 0, hold)
            conn.execute(
                "CREATE TEMP TRIGGER hold_insert BEFORE INSERT ON main.events "
                "BEGIN SELECT hold_insert(); END"
            )

        await store._run_write(arm)
        got: list[AppendResult] = []
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_when_held() -> None:
                    assert await trio.to_thread.run_sync(entered.wait, 30)
                    scope.cancel()
                    release.set()

                nursery.start_soon(cancel_when_held)
                got.append(await store.append("s", [_event(1)], 0))
                await trio.lowlevel.checkpoint()
        assert scope.cancelled_caught
        assert [AppendResult(stream="s", version=1, first_position=1, last_position=1)] == got
        await store._run_write(lambda conn: conn.execute("DROP TRIGGER temp.hold_insert"))
        assert await store.stream_version("s") == 1
        assert store.statistics().pending_appends == 0


async def test_a_cancelled_maintenance_write_that_never_ran_writes_nothing(
    tmp_path: Path,
) -> None:
    """A snapshot still queued behind another write is dropped when its caller is cancelled."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await store.append("s", [_event(1)], 0)
        async with writer_paused(store):
            with trio.move_on_after(0.05) as scope:
                await store.save_snapshot("s", 1, type="st", schema_version=1, data=b"{}")
            assert scope.cancelled_caught
        assert await store.load_snapshot("s") is None
        await store.save_snapshot("s", 1, type="st", schema_version=1, data=b"{}")
        assert await store.load_snapshot("s") is not None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_an_unexpected_writer_error_answers_everyone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the writer thread dies of a bug, what it committed is acknowledged and every
    later append or write is refused with StoreClosedError instead of hanging."""
    take_work = SqliteWriter._take_work
    calls = 0

    def broken(self: SqliteWriter, *, holding: bool) -> object:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise RuntimeError("bug")
        return take_work(self, holding=holding)

    monkeypatch.setattr(SqliteWriter, "_take_work", broken)
    async with open_sqlite_store(tmp_path / "log.db") as store:
        # Call 1 waits for work and returns this append; call 2 hands it back (nothing
        # else queued); call 3 raises.
        result = await store.append("s", [_event(1)], 0)
        assert result.version == 1
        thread = store._writer.thread
        assert thread is not None
        await trio.to_thread.run_sync(thread.join, 30)
        with pytest.raises(StoreClosedError):
            await store.append("s", [_event(2)], 1)
        with pytest.raises(StoreClosedError):
            await store.save_snapshot("s", 1, type="st", schema_version=1, data=b"{}")
    async with open_sqlite_store(tmp_path / "log.db") as store:
        assert await store.stream_version("s") == 1


def test_append_results_built_through_slots_equal_constructed_ones() -> None:
    """The store fills AppendResult's slots directly; the result is the usual frozen value."""
    fast: AppendResult = _writer_queue._new_object(AppendResult)
    _writer_queue._set_result_slots(fast, "s", 3, 5, 7)
    built = AppendResult(stream="s", version=3, first_position=5, last_position=7)
    assert (fast, hash(fast), repr(fast)) == (built, hash(built), repr(built))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.version = 4  # type: ignore[misc]  # frozen: mypy knows, this checks the runtime


def _indexed_upto(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'indexed_upto'").fetchone()[0])


async def test_an_idle_writer_brings_the_index_up_to_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once more than index_lag events wait and no append is queued, the writer indexes
    them in a transaction of its own; reads see every event either way."""
    swept = threading.Event()
    sweep = SqliteWriter._sweep_when_idle

    def observed(self: SqliteWriter) -> None:
        sweep(self)
        swept.set()

    monkeypatch.setattr(SqliteWriter, "_sweep_when_idle", observed)
    path = tmp_path / "log.db"
    async with open_sqlite_store(path, index_lag=4, index_after=None) as store:
        for i in range(4):
            await store.append("s", [_event(i)], i)
        assert not swept.is_set()
        await store.append("s", [_event(4)], 4)
        assert await trio.to_thread.run_sync(swept.wait, 30)
        assert _indexed_upto(path) == 5
        assert [e.version for e in await store.read("s")] == [1, 2, 3, 4, 5]
        assert [(i.stream, i.version) for i in await store.streams()] == [("s", 5)]


async def test_a_writer_without_idle_moments_sweeps_inside_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no idle sweeps, a commit indexes the tail once it passes four times index_lag,
    in the same transaction as its own events."""

    def failed_sweep(self: SqliteWriter) -> None:
        self._cache_valid = False  # what a failed idle sweep does

    monkeypatch.setattr(SqliteWriter, "_sweep_when_idle", failed_sweep)
    path = tmp_path / "log.db"
    async with open_sqlite_store(path, index_lag=2) as store:
        await store.append("a", [_event(i) for i in range(8)], 0)
        assert _indexed_upto(path) == 0
        await store.append("b", [_event(8)], 0)
        assert _indexed_upto(path) == 9
        assert [e.version for e in await store.read("a")] == list(range(1, 9))
        assert await store.stream_version("b") == 1


async def test_a_failed_idle_sweep_leaves_the_tail_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error in an idle sweep costs nothing but the sweep: reads still see every event
    through the tail, and a later sweep catches up."""
    swept = threading.Event()
    sweep = SqliteWriter._sweep_when_idle

    def observed(self: SqliteWriter) -> None:
        sweep(self)
        swept.set()

    monkeypatch.setattr(SqliteWriter, "_sweep_when_idle", observed)
    path = tmp_path / "log.db"
    async with open_sqlite_store(path, index_lag=2) as store:
        await store._run_write(
            lambda conn: conn.execute(
                "CREATE TEMP TRIGGER no_index BEFORE INSERT ON main.stream_index "
                "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        )
        await store.append("s", [_event(i) for i in range(3)], 0)
        assert await trio.to_thread.run_sync(swept.wait, 30)
        assert _indexed_upto(path) == 0
        assert [e.version for e in await store.read("s")] == [1, 2, 3]
        assert await store.stream_version("s") == 3
        await store._run_write(lambda conn: conn.execute("DROP TRIGGER temp.no_index"))
        swept.clear()
        await store.append("s", [_event(3)], 3)
        assert await trio.to_thread.run_sync(swept.wait, 30)
        assert _indexed_upto(path) == 4
        assert [e.version for e in await store.read("s")] == [1, 2, 3, 4]


async def test_appends_that_keep_coming_are_indexed_once_the_oldest_has_waited(
    tmp_path: Path,
) -> None:
    """A writer with appends every moment but a moment free between them indexes far fewer
    than index_lag events once the oldest has waited index_after, with no quiet spell
    needed; the sweep indexes the whole tail."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path, index_lag=4096, index_after=0.05) as store:
        version = 0
        with trio.fail_after(30):
            while _indexed_upto(path) == 0:
                await store.append("s", [_event(version)], version)
                version += 1
        assert 0 < _indexed_upto(path) <= version < 4096
        assert [e.version for e in await store.read("s")] == list(range(1, version + 1))


async def test_a_tail_left_by_the_last_writer_is_indexed_once_the_next_one_idles(
    tmp_path: Path,
) -> None:
    """A log closed with a short unindexed tail (a process that stopped) has it indexed
    by the next writer once idle for index_after, though nothing more is appended."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path, index_after=None) as store:
        await store.append("s", [_event(i) for i in range(5)], 0)
    assert _indexed_upto(path) == 0
    async with open_sqlite_store(path, index_after=0.05) as store:
        with trio.fail_after(30):
            while _indexed_upto(path) != 5:  # noqa: ASYNC110  # the writer thread's work
                await trio.sleep(0.01)
        assert [e.version for e in await store.read("s")] == [1, 2, 3, 4, 5]
        assert store.statistics().sweep_failures == 0


def _count_transactions(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], threading.Event]:
    """Count groups committed in an explicit transaction (not the single statement)."""
    count = [0]
    entered = threading.Event()
    commit_transaction = SqliteWriter._commit_transaction

    def counted(
        self: SqliteWriter,
        conn: sqlite3.Connection,
        batch: list[PendingAppend],
        ready: Callable[[], None],
    ) -> None:
        count[0] += 1
        entered.set()
        commit_transaction(self, conn, batch, ready)

    monkeypatch.setattr(SqliteWriter, "_commit_transaction", counted)
    return count, entered


async def test_payloads_and_names_round_trip_on_both_commit_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group of plain-ASCII names goes through the single statement, its payloads packed
    in one blob; other names go through a transaction; both store exactly what was given."""
    count, _ = _count_transactions(monkeypatch)
    events = [
        NewEvent(type="t", schema_version=1, data=b""),
        NewEvent(type='q"\\', schema_version=2, data=b"\x00\xff", metadata=b""),
        NewEvent(type="t", schema_version=3, data=b"x", metadata=b"\x00m"),
    ]
    names = ['plain "quoted" \\ name', "ünï", "tab\tname", "nul\x00name"]
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await store.append("warm", [_event(0)], 0)  # the first commit fills the cache
        assert count == [1]
        await store.append(names[0], events, 0)
        assert count == [1]
        for name in names[1:]:
            await store.append(name, events, 0)
        assert count == [4]
        odd_type = NewEvent(type="tÿpe", schema_version=1, data=b"1", metadata=b"m")
        await store.append("odd type", [odd_type], 0)
        assert count == [5]
        stored = [
            (e.stream, e.version, e.type, e.schema_version, e.data, e.metadata)
            for e in await store.read_all()
        ]
    expected: list[tuple[str, int, str, int, bytes, bytes | None]]
    expected = [("warm", 1, "t", 1, _event(0).data, None)]
    for name in names:
        expected += [
            (name, v, e.type, e.schema_version, e.data, e.metadata) for v, e in enumerate(events, 1)
        ]
    expected.append(("odd type", 1, "tÿpe", 1, b"1", b"m"))
    assert stored == expected


async def test_an_append_only_a_stale_cache_refuses_commits(tmp_path: Path) -> None:
    """A group is planned on the cache without asking SQLite first. When the cache, stale
    since another connection committed, is all that refuses an append, the transaction
    decides it on the file: no conflict is reported that the log does not have."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store, open_sqlite_store(path) as other:
        await store.append("a", [_event(1)], 0)  # store's cache: a is at 1
        await other.append("a", [_event(2)], 1)
        result = await store.append("a", [_event(3)], 2)
        assert (result.version, result.first_position) == (3, 3)
        assert store.statistics().conflicts == 0
        assert [e.version for e in await store.read("a")] == [1, 2, 3]


_SHARED_STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1]),  # which of the two stores appends
        st.sampled_from(["a", "b"]),
        st.sampled_from([0, 0, 0, -1, 1]),  # off the stream's true version by this much
        st.integers(1, 3),
    ),
    max_size=12,
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_SHARED_STEPS)
def test_two_stores_on_one_file_agree_with_the_file(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, str, int, int]]
) -> None:
    """Two stores take turns on one file, each with its own version cache, stale as soon
    as the other commits: an append at the stream's true version commits, any other
    conflicts naming that version, and both stores read what the file holds."""
    path = tmp_path_factory.mktemp("shared") / "log.db"

    async def run() -> None:
        truth: dict[str, int] = {}
        async with open_sqlite_store(path) as first, open_sqlite_store(path) as second:
            stores = (first, second)
            for which, stream, off, count in steps:
                current = truth.get(stream, 0)
                expected = current + off
                events = [_event(i) for i in range(count)]
                if off == 0 or expected < 0:
                    result = await stores[which].append(stream, events, current)
                    assert result.version == current + count
                    truth[stream] = current + count
                    continue
                with pytest.raises(ConcurrencyConflictError) as info:
                    await stores[which].append(stream, events, expected)
                assert (info.value.expected, info.value.actual) == (expected, current)
            for store in stores:
                for stream, version in truth.items():
                    assert [e.version for e in await store.read(stream)] == list(
                        range(1, version + 1)
                    )

    trio.run(run)


class _CountedConnection:
    """The writer's connection, recording the first two words of each statement it runs."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        self.statements.append(sql.split(None, 2)[0] + " " + sql.split(None, 2)[1])
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


async def test_a_group_commit_on_a_current_cache_is_one_statement(tmp_path: Path) -> None:
    """The writer thread asks SQLite nothing else for a group on a current cache: each
    call into SQLite releases the GIL and takes it back, a wait for the Trio thread."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await store.append("a", [_event(1)], 0)
        await store.append("b", [_event(1)], 0)  # both streams are in the cache now
        writer = store._writer
        counted = _CountedConnection(writer._conn)
        writer._conn = counted  # type: ignore[assignment]
        try:
            await store.append("a", [_event(2), _event(3)], 1)
        finally:
            writer._conn = counted.conn
    assert counted.statements == ["INSERT INTO"]


async def test_a_stream_the_cache_has_not_seen_costs_no_read(tmp_path: Path) -> None:
    """A new stream's first append, or an old stream's first after reopening, is the one
    statement too: the plan takes the caller's version and the guard checks it."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1)], 0)  # fills the cache
        writer = store._writer
        counted = _CountedConnection(writer._conn)
        writer._conn = counted  # type: ignore[assignment]
        try:
            await store.append("new", [_event(1)], 0)
        finally:
            writer._conn = counted.conn
    assert counted.statements == ["INSERT INTO"]
    async with open_sqlite_store(path) as store:
        await store.append("b", [_event(1)], 0)  # fills the cache, without "a"
        writer = store._writer
        counted = _CountedConnection(writer._conn)
        writer._conn = counted  # type: ignore[assignment]
        try:
            result = await store.append("a", [_event(2)], 1)
        finally:
            writer._conn = counted.conn
        assert (result.version, result.first_position) == (2, 4)
    assert counted.statements == ["INSERT INTO"]


async def test_a_wrong_guess_is_decided_on_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale version on a stream the cache has not seen: the guard refuses the group,
    and the transaction decides every append in it on the file, including those that the
    wrong guess made look right or wrong. No stale cache is reported."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1), _event(2)], 0)
        await store.append("d", [_event(1), _event(2)], 0)
    async with open_sqlite_store(path) as store:
        await store.append("warm", [_event(0)], 0)  # fills the cache, without "a" or "d"
        outcomes: dict[str, Outcome] = {}
        calls = [
            # "a" is at 2; the guess puts it at 3
            _attempt(store, outcomes, "stale-a", "a", 0, count=3),
            # wrong by the guess, right by the file
            _attempt(store, outcomes, "on-the-file", "a", 2),
            # "d" is at 2; the guess puts it at 1
            _attempt(store, outcomes, "stale-d", "d", 0),
            # right by the guess, wrong by the file
            _attempt(store, outcomes, "by-the-guess", "d", 1),
            _attempt(store, outcomes, "other", "c", 0),
        ]
        before = store.statistics()
        async with trio.open_nursery() as nursery, writer_paused(store):
            await _queue_in_order(nursery, calls, store)
        after = store.statistics()
        conflicts = {
            name: (e.expected, e.actual)
            for name, e in outcomes.items()
            if isinstance(e, ConcurrencyConflictError)
        }
        assert conflicts == {"stale-a": (0, 2), "stale-d": (0, 2), "by-the-guess": (1, 2)}
        assert outcomes["on-the-file"] == AppendResult(
            stream="a", version=3, first_position=6, last_position=6
        )
        assert outcomes["other"] == AppendResult(
            stream="c", version=1, first_position=7, last_position=7
        )
        assert (after.conflicts - before.conflicts, after.guard_trips) == (3, 0)
        assert [e.version for e in await store.read("a")] == [1, 2, 3]
        assert [e.version for e in await store.read("d")] == [1, 2]
    assert "stale version cache" not in caplog.text


async def test_a_commit_from_elsewhere_after_the_plan_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If another connection commits between the plan and the single statement, the
    statement inserts nothing; the transaction that follows sees the new state (here a
    conflict), so an append is never checked against a stale version."""
    path = tmp_path / "log.db"
    count, _ = _count_transactions(monkeypatch)
    plan = SqliteWriter._plan
    interfere = [True]

    def plan_then_commit_elsewhere(
        self: SqliteWriter,
        conn: sqlite3.Connection,
        batch: list[PendingAppend],
        *,
        group: bool,
    ) -> object:
        made = plan(self, conn, batch, group=group)
        if group and interfere[0]:
            interfere[0] = False
            other = sqlite3.connect(path, isolation_level=None)
            try:
                other.execute(
                    "INSERT INTO events (position, stream, version, type, schema_version, "
                    "data, recorded_at, checksum) VALUES (2, 'a', 2, 'other', 1, x'00', 0, ?)",
                    (event_checksum("a", 2, "other", 1, b"\x00", None),),
                )
            finally:
                other.close()
        return made

    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1)], 0)
        monkeypatch.setattr(SqliteWriter, "_plan", plan_then_commit_elsewhere)
        with pytest.raises(ConcurrencyConflictError) as info:
            await store.append("a", [_event(2)], 1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert count == [2]
        assert [(e.version, e.type) for e in await store.read("a")] == [(1, "t"), (2, "other")]
        result = await store.append("a", [_event(3)], 2)
        assert (result.version, result.first_position) == (3, 3)


async def test_a_group_waiting_for_the_write_lock_sees_what_its_holder_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The single statement waits for a write lock held elsewhere (as BEGIN IMMEDIATE
    would); what the holder committed meanwhile is seen before anything is written."""
    path = tmp_path / "log.db"
    count, _ = _count_transactions(monkeypatch)
    planned = threading.Event()
    plan = SqliteWriter._plan

    def observed(
        self: SqliteWriter,
        conn: sqlite3.Connection,
        batch: list[PendingAppend],
        *,
        group: bool,
    ) -> object:
        made = plan(self, conn, batch, group=group)
        if group:
            planned.set()
        return made

    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1)], 0)
        monkeypatch.setattr(SqliteWriter, "_plan", observed)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            holder.execute(
                "INSERT INTO events (position, stream, version, type, schema_version, "
                "data, recorded_at, checksum) VALUES (2, 'a', 2, 'other', 1, x'00', 0, ?)",
                (event_checksum("a", 2, "other", 1, b"\x00", None),),
            )
            async with trio.open_nursery() as nursery:

                async def commit_once_planned() -> None:
                    assert await trio.to_thread.run_sync(planned.wait, 30)
                    await trio.sleep(0.05)  # most likely while the statement waits
                    holder.execute("COMMIT")

                nursery.start_soon(commit_once_planned)
                with pytest.raises(ConcurrencyConflictError) as info:
                    await store.append("a", [_event(2)], 1)
        finally:
            holder.close()
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert count == [2]
        assert [e.version for e in await store.read("a")] == [1, 2]


async def test_closing_catches_the_index_up(tmp_path: Path) -> None:
    """A writer closed right after a burst still sweeps, so the next opener's reads
    find the events indexed rather than in a long tail."""
    path = tmp_path / "log.db"
    # The appends and the close are all queued while the writer is busy: it never finds
    # itself idle before it is told to stop.
    async with (
        open_sqlite_store(path, index_lag=2) as store,
        trio.open_nursery() as nursery,
        writer_paused(store),
    ):
        for i in range(5):
            nursery.start_soon(store.append, f"s/{i}", [_event(i)], 0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(store.aclose)
        await trio.testing.wait_all_tasks_blocked()
    assert _indexed_upto(path) == 5


def test_new_events_built_through_slots_equal_constructed_ones() -> None:
    """An event-sourced actor builds its NewEvents through their slots; each is the usual
    frozen value, with metadata or without."""
    encoded = EncodedEvent(type="t", schema_version=2, data=b"{}")
    for metadata in (None, b'{"continues":true}'):
        fast = new_event_from_encoded(encoded, metadata)
        built = NewEvent.from_encoded(encoded, metadata=metadata)
        assert (fast, hash(fast), repr(fast)) == (built, hash(built), repr(built))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.data = b"[]"  # type: ignore[misc]  # frozen: mypy knows, this checks the runtime


# -- appends begun without waiting, one behind another (the pipelined path) ---------------
