"""The event store: conformance over every backend, plus the SQLite file's own behaviour."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from pathlib import Path

import _postgres
import pytest
import trio
import trio.testing

from protocols.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    ForeignDatabaseError,
    StoreClosedError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreSchemaVersionError,
)
from runtime import EventStore, NewEvent, SqliteEventStore, open_sqlite_store
from runtime._sqlite._schema import APPLICATION_ID, SCHEMA_VERSION
from runtime.testing import EVENT_STORE_CHECKS, InMemoryEventStore, check_event_store

BackendFactory = Callable[[Path], Callable[[], AbstractAsyncContextManager[EventStore]]]


def _sqlite_backend(
    tmp_path: Path, index_lag: int = 4096, *, group_statement: bool = True
) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    counter = iter(range(10**6))

    @asynccontextmanager
    async def make() -> AsyncIterator[EventStore]:
        # NORMAL sync keeps the suite light on the shared disk; durability is FULL by
        # default and is exercised by the crash test and the benchmark.
        path = tmp_path / f"conformance-{next(counter)}.db"
        async with open_sqlite_store(
            path, blob_threshold=1024, synchronous="NORMAL", index_lag=index_lag
        ) as store:
            store._writer.group_statement = group_statement
            yield store

    return make


def _sqlite_transactions_backend(
    tmp_path: Path,
) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    """Every group commits in an explicit transaction, as when the statement can't be used."""
    return _sqlite_backend(tmp_path, group_statement=False)


def _sqlite_indexed_backend(
    tmp_path: Path,
) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    """Every commit indexes its events: stream reads go through the index, not the tail."""
    return _sqlite_backend(tmp_path, index_lag=0)


def _sqlite_mixed_backend(
    tmp_path: Path,
) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    """A tiny lag: stream reads mix indexed events and the unindexed tail."""
    return _sqlite_backend(tmp_path, index_lag=2)


def _memory_backend(_tmp_path: Path) -> Callable[[], AbstractAsyncContextManager[EventStore]]:
    @asynccontextmanager
    async def make() -> AsyncIterator[EventStore]:
        store = InMemoryEventStore()
        try:
            yield store
        finally:
            await store.aclose()

    return make


BACKENDS: dict[str, BackendFactory] = {
    "sqlite": _sqlite_backend,
    "sqlite_indexed": _sqlite_indexed_backend,
    "sqlite_mixed": _sqlite_mixed_backend,
    "sqlite_transactions": _sqlite_transactions_backend,
    "memory": _memory_backend,
}


@pytest.mark.parametrize("check", sorted(EVENT_STORE_CHECKS))
@pytest.mark.parametrize("backend", [*sorted(BACKENDS), "postgres"])
async def test_conformance(
    backend: str, check: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each backend passes each conformance check (reported one by one).

    PostgreSQL runs on the session's server, each store in a fresh schema.
    """
    if backend == "postgres":
        make = _postgres.postgres_backend(request.getfixturevalue("postgres_server"))
    else:
        make = BACKENDS[backend](tmp_path)
    await EVENT_STORE_CHECKS[check](make)


async def test_check_event_store_runs_every_check(tmp_path: Path) -> None:
    """The public entry point runs the whole suite against a backend."""
    await check_event_store(_memory_backend(tmp_path))


async def test_check_event_store_catches_a_broken_store(tmp_path: Path) -> None:
    """The suite fails a store that breaks the contract (here: a conflict that writes)."""

    class Sloppy:
        """Wraps a real store but ignores the expected version."""

        def __init__(self, inner: InMemoryEventStore) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

        async def append(self, stream: str, events: list[NewEvent], expected: int) -> object:
            current = await self._inner.stream_version(stream)
            return await self._inner.append(stream, events, current)

    @asynccontextmanager
    async def make() -> AsyncIterator[EventStore]:
        yield Sloppy(InMemoryEventStore())  # type: ignore[misc]  # a broken store on purpose

    with pytest.raises(AssertionError, match="must raise ConcurrencyConflictError"):
        await EVENT_STORE_CHECKS["check_conflict_writes_nothing"](make)


def _event(n: int, size: int = 10) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d,"p":"%s"}' % (n, b"y" * size))


async def test_events_survive_reopening(tmp_path: Path) -> None:
    """Acknowledged events, snapshots and positions are there after closing and reopening."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1), _event(2)], 0)
        await store.append("b", [_event(3)], 0)
        await store.save_snapshot("a", 2, type="st", schema_version=1, data=b"{}")
        await store.delete_streams(["b"])
    async with open_sqlite_store(path) as store:
        assert [e.version for e in await store.read("a")] == [1, 2]
        assert await store.head_position() == 3
        snapshot = await store.load_snapshot("a")
        assert snapshot is not None
        assert snapshot.version == 2
        result = await store.append("c", [_event(4)], 0)
        assert result.first_position == 4


async def test_replacing_a_snapshot_writes_about_its_own_pages(tmp_path: Path) -> None:
    """A snapshot's update writes its new pages and little else: the pages it frees (its
    old overflow pages, a chunk no snapshot references any more) are not zeroed and
    written too, as they were where SQLite is built with SECURE_DELETE (Debian's is):
    there a run that snapshotted wrote half as many pages again as the snapshot needed."""
    wal = tmp_path / "log.db-wal"

    def text(seed: int, size: int) -> bytes:  # incompressible, like a snapshot's chunks
        digests = (hashlib.sha256(b"%d/%d" % (seed, i)).hexdigest() for i in range(size))
        return "".join(digests).encode()[:size]

    chunks = {hashlib.sha256(text(n, 512)).digest(): text(n, 512) for n in range(3)}
    # No background checkpoint: the WAL then holds every page each write changed.
    async with open_sqlite_store(tmp_path / "log.db", checkpoint_interval=3600.0) as store:
        await store.append("a", [_event(1), _event(2)], 0)
        frames = []
        for n in range(3, 9):
            # As a sealing snapshot does: one chunk dropped, one added, the row rewritten
            # (and a little longer each time, as the chunk still filling grows).
            chunks.pop(next(iter(chunks)))
            chunks[hashlib.sha256(text(n, 512)).digest()] = text(n, 512)
            before = wal.stat().st_size if wal.exists() else 0
            data = text(-n, 6_000 + 600 * n)
            await store.save_snapshot("a", 2, type="st", schema_version=1, data=data, chunks=chunks)
            written = (wal.stat().st_size - before) // (1024 + 24)  # 1 KiB pages
            frames.append((written, -(-len(data) // 1020)))  # and the row's overflow pages
        snapshot = await store.load_snapshot("a")
    assert snapshot is not None
    assert (snapshot.data, snapshot.chunks) == (data, chunks)
    # Beside the row's overflow pages: the snapshots' leaf, the new chunk, the chunk
    # references, the free list (7 at most here). Zeroing what was freed made it 12 to 16.
    assert all(written <= overflow + 8 for written, overflow in frames), frames


async def test_group_commit_batches_concurrent_appends(tmp_path: Path) -> None:
    """Appends queued together share one transaction: fewer commits than appends."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(store.append, f"s/{i}", [_event(i)], 0)
        stats = store.statistics()
        assert (stats.appends, stats.events_appended) == (100, 100)
        assert stats.commits < stats.appends
        assert stats.pending_appends == 0


async def test_large_payloads_go_to_the_blob_table_once(tmp_path: Path) -> None:
    """Payloads over the threshold are stored once by content hash and read back whole."""
    path = tmp_path / "log.db"
    big = b'{"text":"' + b"z" * 5000 + b'"}'
    async with open_sqlite_store(path, blob_threshold=1000) as store:
        await store.append("a", [NewEvent(type="t", schema_version=1, data=big)] * 3, 0)
        await store.append("b", [NewEvent(type="t", schema_version=1, data=big)], 0)
        await store.append("c", [_event(1, size=500)], 0)
        assert [e.data for e in await store.read_all()] == [big] * 4 + [_event(1, 500).data]
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
            inline = conn.execute("SELECT count(*) FROM events WHERE data IS NULL").fetchone()
            assert inline[0] == 4
        await store.delete_streams(["a"])
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
        await store.delete_streams(["b"])
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0


async def test_missing_blob_is_reported_as_corruption(tmp_path: Path) -> None:
    """An event whose blob row is gone raises CorruptLogError naming stream and version."""
    path = tmp_path / "log.db"
    big = b"q" * 3000
    async with open_sqlite_store(path, blob_threshold=1000) as store:
        await store.append("a", [_event(1), NewEvent(type="t", schema_version=1, data=big)], 0)
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM blobs")
        with pytest.raises(CorruptLogError) as info:
            await store.read("a")
        assert info.value.code == "store.corrupt"
        assert "of 'a' version 2 is missing" in str(info.value)
        assert "restore it from a backup" in str(info.value)
        assert [e.version for e in await store.read("a", limit=1)] == [1]


async def test_writes_from_another_connection_are_respected(tmp_path: Path) -> None:
    """Versions are checked inside the write transaction, not from a stale cache."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store, open_sqlite_store(path) as other:
        await store.append("a", [_event(1)], 0)
        await other.append("a", [_event(2)], 1)
        with pytest.raises(ConcurrencyConflictError) as info:
            await store.append("a", [_event(3)], 1)
        assert (info.value.code, info.value.expected, info.value.actual) == ("store.conflict", 1, 2)
        assert [e.version for e in await store.read("a")] == [1, 2]


async def test_failed_commit_fails_the_group_and_the_store_carries_on(tmp_path: Path) -> None:
    """An SQLite error during a commit fails that group with StoreError; later appends work."""
    path = tmp_path / "log.db"
    async with open_sqlite_store(path) as store:
        await store.append("a", [_event(1)], 0)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.stream = 'bad' "
                "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        with pytest.raises(StoreError) as info:
            await store.append("bad", [_event(1)], 0)
        assert info.value.code == "store"
        assert "disk on fire" in str(info.value)
        assert await store.stream_version("bad") == 0
        assert store.statistics().failed_appends == 1
        await store.append("a", [_event(2)], 1)
        assert await store.stream_version("a") == 2


async def test_backup_and_vacuum(tmp_path: Path) -> None:
    """An online backup opens as a full copy; vacuum keeps every event."""
    path = tmp_path / "log.db"
    copy = tmp_path / "copy.db"
    async with open_sqlite_store(path, blob_threshold=100) as store:
        await store.append("a", [_event(i, 300) for i in range(50)], 0)
        await store.append("b", [_event(i) for i in range(5)], 0)
        await store.backup(copy)
        await store.delete_streams(["a"])
        await store.vacuum()
        assert [e.version for e in await store.read("b")] == [1, 2, 3, 4, 5]
        assert await store.integrity_check() == []
    async with open_sqlite_store(copy) as backup:
        assert len(await backup.read("a")) == 50
        assert (await backup.read("a"))[7].data == _event(7, 300).data
        assert [i.stream for i in await backup.streams()] == ["a", "b"]


# --- bad files ------------------------------------------------------------------------


async def _fill(path: Path, streams: int = 20, per_stream: int = 50) -> None:
    async with open_sqlite_store(path) as store:
        for s in range(streams):
            await store.append(f"s/{s}", [_event(i, 200) for i in range(per_stream)], 0)


def _overwrite(path: Path, *, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def _snapshot_bytes(path: Path) -> bytes:
    return path.read_bytes()


async def test_truncated_file_is_reported_and_left_untouched(tmp_path: Path) -> None:
    """A truncated database raises CorruptLogError and the file is not modified."""
    path = tmp_path / "log.db"
    await _fill(path)
    os.truncate(path, path.stat().st_size // 2)
    before = _snapshot_bytes(path)
    with pytest.raises(CorruptLogError) as info:
        async with open_sqlite_store(path):
            pass
    assert info.value.code == "store.corrupt"
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"event log {str(path)!r} is damaged: ")
    assert "restore it from a backup" in str(info.value)
    assert _snapshot_bytes(path) == before


async def test_corrupted_pages_are_reported(tmp_path: Path) -> None:
    """Garbage written over data pages raises CorruptLogError and does not rewrite the file."""
    path = tmp_path / "log.db"
    await _fill(path)
    _overwrite(path, offset=4096 * 2, data=os.urandom(4096 * 3))
    before = _snapshot_bytes(path)
    with pytest.raises(CorruptLogError) as info:
        async with open_sqlite_store(path):
            pass
    assert info.value.code == "store.corrupt"
    assert "is damaged" in str(info.value)
    assert _snapshot_bytes(path) == before


async def test_not_a_database_is_reported(tmp_path: Path) -> None:
    """A file that is not SQLite at all gives CorruptLogError naming the bad header."""
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 10)
    with pytest.raises(CorruptLogError) as info:
        async with open_sqlite_store(path):
            pass
    assert info.value.code == "store.corrupt"
    assert info.value.detail == "the file is not an SQLite database (bad header)"
    assert path.read_bytes() == b"these are my notes, not a database\n" * 10


async def test_a_folder_is_not_a_log(tmp_path: Path) -> None:
    """A folder where the file should be is ``store.not_found`` saying so, not a bare
    ``IsADirectoryError``."""
    with pytest.raises(StoreNotFoundError) as info:
        async with open_sqlite_store(tmp_path):
            pass
    assert info.value.code == "store.not_found"
    assert str(info.value) == (
        f"no event log at {str(tmp_path)!r}: it is a folder: name the log's file "
        "(new or existing) in it"
    )


def _read_only_connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection SQLite itself opens read-only: what a read-only file or folder gives a
    process (the tests may run as root, whom file modes do not stop)."""
    del read_only
    return sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )


async def test_a_read_only_log_says_so_with_its_own_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's "attempt to write a readonly database" is ``store.read_only`` with what to
    do, not the generic ``store``."""
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store:
        await store.append("s", [_event(1)], 0)
    monkeypatch.setattr("runtime._sqlite._schema.connect", _read_only_connect)
    with pytest.raises(StoreReadOnlyError) as info:
        async with open_sqlite_store(path) as store:
            await store.append("s", [_event(2)], 1)
    assert info.value.code == "store.read_only"
    assert info.value.path == str(path)
    assert str(info.value) == (
        f"the event log {str(path)!r} is read-only (attempt to write a readonly database): "
        "let this user write the file and its folder (SQLite keeps its -wal and -shm files "
        "beside it), or copy the log to a writable folder and point --db at the copy"
    )


async def test_two_processes_creating_one_log_at_once_both_open_it(tmp_path: Path) -> None:
    """Two openers of a new file at the same moment (``powertrio sessions`` beside the
    ``run`` that makes the log) both open it and write to it: one creates the schema, the
    other finds it made; neither fails with "table events already exists" nor takes the
    half-made file for another application's."""
    for attempt in range(20):
        path = tmp_path / f"log-{attempt}.sqlite"

        async def open_and_append(stream: str, path: Path = path) -> None:
            async with open_sqlite_store(path) as store:
                await store.append(stream, [_event(0, 10)], 0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(open_and_append, "a")
            nursery.start_soon(open_and_append, "b")
        async with open_sqlite_store(path) as store:
            assert [i.stream for i in await store.streams("")] == ["a", "b"]


async def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    """Another application's SQLite file raises ForeignDatabaseError and keeps its data."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (name TEXT)")
        conn.execute("INSERT INTO customers VALUES ('ada')")
    conn.close()
    with pytest.raises(ForeignDatabaseError) as info:
        async with open_sqlite_store(path):
            pass
    assert info.value.code == "store.foreign"
    assert info.value.path == str(path)
    assert str(info.value) == (
        f"{str(path)!r} is not a powertrio event log (it has other tables); "
        "point the store at a new or a powertrio file"
    )
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM customers").fetchall() == [("ada",)]
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0
    conn.close()


async def test_foreign_application_id_is_refused(tmp_path: Path) -> None:
    """An SQLite file stamped with another application id is refused even without tables."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()
    with pytest.raises(ForeignDatabaseError) as info:
        async with open_sqlite_store(path):
            pass
    assert info.value.code == "store.foreign"


async def test_future_schema_version_is_refused(tmp_path: Path) -> None:
    """A log written by a newer powertrio raises StoreSchemaVersionError with both versions."""
    path = tmp_path / "log.db"
    await _fill(path, streams=1, per_stream=3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreSchemaVersionError) as info:
        async with open_sqlite_store(path):
            pass
    error = info.value
    assert (error.code, error.found, error.supported) == (
        "store.schema_version",
        SCHEMA_VERSION + 1,
        SCHEMA_VERSION,
    )
    assert str(error) == (
        f"event log {str(path)!r} has storage schema {SCHEMA_VERSION + 1}, this powertrio "
        f"reads up to {SCHEMA_VERSION}; upgrade powertrio to open it"
    )
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 3
    conn.close()


async def test_incomplete_schema_is_reported(tmp_path: Path) -> None:
    """A file with our id but missing tables is reported as damaged."""
    path = tmp_path / "log.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute("CREATE TABLE events (x)")
    conn.close()
    with pytest.raises(CorruptLogError) as info:
        async with open_sqlite_store(path):
            pass
    assert "storage schema 1 with tables ['events'] is incomplete" in str(info.value)


async def test_unwritable_location_is_a_store_error(tmp_path: Path) -> None:
    """A path in a missing directory raises StoreError saying SQLite cannot open it."""
    with pytest.raises(StoreError) as info:
        async with open_sqlite_store(tmp_path / "missing" / "log.db"):
            pass
    assert info.value.code == "store"
    assert "unable to open database file" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"blob_threshold": -1}, "blob_threshold must be >= 0"),
        ({"max_batch": 0}, "max_batch must be >= 1"),
        ({"index_lag": -1}, "index_lag must be >= 0"),
        ({"synchronous": "SOMETIMES"}, "synchronous must be"),
    ],
)
async def test_bad_options_are_refused(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    """Bad options raise ValueError naming the option before any file is touched."""
    with pytest.raises(ValueError, match=message):
        async with open_sqlite_store(tmp_path / "log.db", **kwargs):  # type: ignore[arg-type]
            pass
    assert not (tmp_path / "log.db").exists()


async def test_store_repr_and_type(tmp_path: Path) -> None:
    """The store is the public SqliteEventStore and its repr names the file."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        assert isinstance(store, SqliteEventStore)
        assert repr(store) == f"<SqliteEventStore {str(tmp_path / 'log.db')!r}>"
        assert store.path == str(tmp_path / "log.db")


async def test_memory_store_fault_injection() -> None:
    """fail_next_commit makes the next appends fail with StoreError and write nothing."""
    store = InMemoryEventStore()
    store.fail_next_commit(times=2)
    for _ in range(2):
        with pytest.raises(StoreError) as info:
            await store.append("s", [_event(1)], 0)
        assert (info.value.code, str(info.value)) == (
            "store",
            "injected commit failure (fail_next_commit); nothing was written",
        )
    assert await store.stream_version("s") == 0
    assert store.statistics().failed_appends == 2
    store.fail_next_commit(OSError("disk gone"))
    with pytest.raises(OSError, match="disk gone"):
        await store.append("s", [_event(1)], 0)
    result = await store.append("s", [_event(1)], 0)
    assert (result.version, result.first_position) == (1, 1)
    assert repr(store) == "<InMemoryEventStore streams=1 head=1>"


async def test_subscribe_refuses_a_position_below_one() -> None:
    """subscribe(0) raises ValueError naming from_position."""
    store = InMemoryEventStore()
    with pytest.raises(ValueError, match="from_position must be >= 1, got 0"):
        store.subscribe(0)


async def test_backup_to_an_unwritable_place_is_a_store_error(tmp_path: Path) -> None:
    """A backup into a missing directory raises StoreError and leaves the log usable."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await store.append("s", [_event(1)], 0)
        with pytest.raises(StoreError) as info:
            await store.backup(tmp_path / "missing" / "copy.db")
        assert info.value.code == "store"
        assert "unable to open database file" in str(info.value)
        assert await store.stream_version("s") == 1


async def test_closing_commits_what_was_queued(tmp_path: Path) -> None:
    """aclose waits for queued appends: each one is either acknowledged and durable, or
    refused with StoreClosedError, never lost."""
    path = tmp_path / "log.db"
    acked: list[int] = []
    refused: list[int] = []
    async with open_sqlite_store(path) as store:

        async def writer(i: int) -> None:
            try:
                await store.append(f"s/{i}", [_event(i)], 0)
            except StoreClosedError:
                refused.append(i)
            else:
                acked.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(writer, i)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(store.aclose)
            for i in range(50, 60):
                nursery.start_soon(writer, i)
    assert sorted(acked + refused) == list(range(60))
    assert set(range(50)) <= set(acked)
    async with open_sqlite_store(path) as store:
        assert sorted(int(i.stream[2:]) for i in await store.streams()) == sorted(acked)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_changes_sees_another_connection_s_commit_within_a_second(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A watcher of one store sees a commit made through another store on the same log
    (another connection, as another process would be) well within a second."""
    import time

    from runtime.postgres import open_postgres_store

    schema = _postgres.fresh_schema()

    def opener() -> AbstractAsyncContextManager[EventStore]:
        if backend == "sqlite":
            return open_sqlite_store(tmp_path / "shared.db", synchronous="NORMAL")
        server = request.getfixturevalue("postgres_server")
        return open_postgres_store(server.dsn(), schema=schema)

    try:
        async with opener() as watched, opener() as other:
            await other.append("s", [_event(1)], 0)
            async with aclosing(watched.changes()) as heads:
                with trio.fail_after(10):
                    assert await anext(heads) == 1
                    for n in range(2, 5):
                        await other.append("s", [_event(n)], n - 1)
                        sent = time.monotonic()
                        assert await anext(heads) == n
                        took = time.monotonic() - sent
                        assert took < 1.0, f"another connection's commit showed after {took:.2f} s"
            # The watched store's own commit signal never moved: only changes saw them.
            assert watched.statistics().head_position == 0
    finally:
        if backend == "postgres":
            with trio.CancelScope(shield=True):
                await _postgres.drop_schema(request.getfixturevalue("postgres_server"), schema)
