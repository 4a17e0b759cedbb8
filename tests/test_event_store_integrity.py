"""The SQLite log's integrity: the one-writer guard, checksums, audits, the WAL bound."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from protocols.errors import ConcurrencyConflictError, CorruptLogError, StoreError
from runtime import EventStoreStatistics, NewEvent, open_sqlite_store
from runtime._sqlite import _schema as _sqlite_schema
from runtime._sqlite import _store as _sqlite_store
from runtime._sqlite import _writer as _sqlite_writer
from runtime._sqlite._schema import GUARD_MESSAGE, SCHEMA_VERSION, event_checksum
from runtime._sqlite._wal_headroom import WalHeadroom
from runtime.maintenance import check_store

pytestmark = pytest.mark.trio


def _event(n: int, *, size: int = 0) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n + b" " * size)


async def _fill(path: Path, streams: dict[str, int]) -> None:
    async with open_sqlite_store(path, synchronous="OFF") as store:
        for stream, count in streams.items():
            await store.append(stream, [_event(n) for n in range(1, count + 1)], 0)


def _sql(path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, params)
    conn.close()


# --- 1. the one-writer guard ------------------------------------------------------------


async def test_the_database_refuses_a_taken_version_and_a_gap(tmp_path: Path) -> None:
    """The guard lives in the file: any connection inserting (stream, version) that is not
    the stream's head + 1 is refused by SQLite itself, and writes nothing."""
    path = tmp_path / "log.db"
    await _fill(path, {"a": 3})
    insert = (
        "INSERT INTO events (position, stream, version, type, schema_version, data, "
        "recorded_at, checksum) VALUES (?, 'a', ?, 't', 1, x'7b7d', 0, 0)"
    )
    for version in (3, 1, 5):  # taken, taken, a gap
        with pytest.raises(sqlite3.IntegrityError, match=GUARD_MESSAGE):
            _sql(path, insert, (100 + version, version))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchall() == [(3,)]
        assert conn.execute("SELECT version FROM heads WHERE stream = 'a'").fetchall() == [(3,)]
    conn.close()


@pytest.mark.parametrize("group_statement", [True, False])
async def test_a_stale_version_cache_meets_the_guard_and_fails_as_a_conflict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, group_statement: bool
) -> None:
    """If the writer's cache is wrong (a bug, or a writer that bypassed it), SQLite refuses
    the group; the writer re-plans from the file: the conflicting append fails with
    ``store.conflict`` naming the stream and its version, the others in its group commit."""
    async with open_sqlite_store(tmp_path / "log.db", synchronous="OFF") as store:
        store._writer.group_statement = group_statement
        await store.append("a", [_event(1), _event(2), _event(3)], 0)
        store._writer._versions["a"] = 0  # the cache forgets: version 1 looks free
        results: dict[str, object] = {}

        async def append(stream: str) -> None:
            try:
                results[stream] = await store.append(stream, [_event(9)], 0)
            except ConcurrencyConflictError as exc:
                results[stream] = exc

        with caplog.at_level(logging.WARNING, logger="powertrio.store"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append, "a")
                nursery.start_soon(append, "b")
        conflict = results["a"]
        assert isinstance(conflict, ConcurrencyConflictError)
        assert (
            conflict.code,
            conflict.stream,
            conflict.expected,
            conflict.actual,
        ) == ("store.conflict", "a", 0, 3)
        assert "stream 'a' is at version 3" in str(conflict)
        assert [e.version for e in await store.read("a")] == [1, 2, 3]
        assert [e.version for e in await store.read("b")] == [1]
        stats = store.statistics()
        assert (stats.guard_trips, stats.conflicts) == (1, 1)
        assert "one-writer guard refused" in caplog.text


_V1_SCHEMA = """
CREATE TABLE events (
    position       INTEGER PRIMARY KEY AUTOINCREMENT,
    stream         TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    data           BLOB,
    blob_id        BLOB,
    metadata       BLOB,
    recorded_at    REAL    NOT NULL
);
CREATE TABLE stream_index (
    stream   TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (stream, version)
) WITHOUT ROWID;
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('indexed_upto', 0);
CREATE INDEX events_blob ON events (blob_id) WHERE blob_id IS NOT NULL;
CREATE TABLE streams (
    stream TEXT PRIMARY KEY, version INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE snapshots (
    stream TEXT PRIMARY KEY, version INTEGER NOT NULL, type TEXT NOT NULL,
    schema_version INTEGER NOT NULL, data BLOB NOT NULL, recorded_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE blobs (id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
"""
"""The storage schema 1 DDL, as the previous release wrote it."""

_BIG = b'{"n":2}' + b" " * 200


def _make_v1_log(path: Path) -> None:
    """A log as the previous release left it: three events of two streams, one in a blob."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(
        "BEGIN;" + _V1_SCHEMA + f"PRAGMA application_id = {_sqlite_schema.APPLICATION_ID};"
        "PRAGMA user_version = 1; COMMIT;"
    )
    blob_id = hashlib.sha256(_BIG).digest()
    conn.execute("INSERT INTO blobs VALUES (?, ?)", (blob_id, _BIG))
    rows = [
        (1, "a", 1, b'{"n":1}', None, b'{"m":1}'),
        (2, "a", 2, None, blob_id, None),
        (3, "b", 1, b'{"n":3}', None, None),
    ]
    conn.executemany(
        "INSERT INTO events (position, stream, version, type, schema_version, data, blob_id, "
        "metadata, recorded_at) VALUES (?, ?, ?, 't', 1, ?, ?, ?, 100.0)",
        rows,
    )
    conn.close()


async def test_a_version_1_file_is_upgraded_on_open(tmp_path: Path) -> None:
    """A file of the previous schema gets its checksums and the guard when opened, in one
    transaction; it then reads, refuses taken versions, and ``check`` says what happened."""
    path = tmp_path / "v1.db"
    _make_v1_log(path)
    async with open_sqlite_store(path) as store:
        events = await store.read("a")
        assert [(e.version, e.data, e.metadata) for e in events] == [
            (1, b'{"n":1}', b'{"m":1}'),
            (2, _BIG, None),
        ]
        assert await store.stream_version("b") == 1
        with pytest.raises(ConcurrencyConflictError):
            await store.append("a", [_event(3)], 1)
        await store.append("a", [_event(3)], 2)
        report = await check_store(store)
    assert [p for p in report.problems if not p.code.startswith("codec.")] == []
    assert report.notes == (
        "3 event rows got their checksums when this file was upgraded from storage schema 1; "
        "damage done to them before that upgrade cannot be detected",
    )
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("SELECT count(*) FROM events WHERE checksum IS NULL").fetchall() == [
            (0,)
        ]
        assert conn.execute("SELECT stream, version FROM heads ORDER BY stream").fetchall() == [
            ("a", 3),
            ("b", 1),
        ]
    conn.close()


async def test_a_failed_upgrade_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade is one transaction: if it fails, the file is still a version-1 log."""
    path = tmp_path / "v1.db"
    _make_v1_log(path)

    def broken(*_args: object) -> int:
        raise OSError("injected")

    monkeypatch.setattr(_sqlite_schema, "_checksum_or_null", broken)
    with pytest.raises(StoreError):
        async with open_sqlite_store(path):
            pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchall() == [(1,)]
        columns = [row[1] for row in conn.execute("PRAGMA table_info(events)")]
        assert "checksum" not in columns
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'heads'").fetchall() == []
    conn.close()
    monkeypatch.undo()
    async with open_sqlite_store(path) as store:
        assert len(await store.read("a")) == 2


# --- 2. damage is never read as truth ---------------------------------------------------


def _flip_payload(path: Path, stream: str, version: int) -> None:
    """A flipped byte that still parses: {"n":5} becomes {"n":7}."""
    with sqlite3.connect(path) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM events WHERE stream = ? AND version = ?", (stream, version)
        ).fetchall()
        changed = bytes(data).replace(b'"n":5', b'"n":7')
        assert changed != data
        json.loads(changed)
        conn.execute(
            "UPDATE events SET data = ? WHERE stream = ? AND version = ?",
            (changed, stream, version),
        )
    conn.close()


def _damage_kinds(path: Path) -> None:
    """One of each damage the campaign found, each on its own stream."""
    _flip_payload(path, "flipped", 5)
    _sql(path, "DELETE FROM events WHERE stream = 'gap' AND version = 7")
    _sql(path, "DELETE FROM events WHERE stream = 'short' AND version = 13")
    _sql(path, "UPDATE events SET version = 'four' WHERE stream = 'text' AND version = 4")
    with sqlite3.connect(path) as conn:  # a consistent edit (checksum and all) of a version
        conn.create_function("checksum", 6, event_checksum)
        conn.execute(
            "UPDATE events SET version = 2, checksum = checksum(stream, 2, type, schema_version, "
            "data, metadata) WHERE stream = 'twice' AND version = 3"
        )
    conn.close()
    _sql(path, "UPDATE blobs SET data = CAST(replace(CAST(data AS TEXT), ' ', '_') AS BLOB)")


async def _damaged_log(path: Path, index_lag: int) -> None:
    async with open_sqlite_store(path, synchronous="OFF", index_lag=index_lag) as store:
        for stream in ("flipped", "gap", "short", "text", "twice", "fine"):
            await store.append(stream, [_event(n) for n in range(1, 14)], 0)
        await store.append("blob", [_event(1, size=100_000)], 0)
    _damage_kinds(path)


@pytest.mark.parametrize("index_lag", [0, 4096], ids=["indexed", "tail"])
async def test_reads_refuse_every_damage_kind_naming_stream_and_version(
    tmp_path: Path, index_lag: int
) -> None:
    """A flipped payload byte, a deleted event (in the middle, or the last: 12 of 13), a
    version stored as text, a duplicated version and an altered blob: each read is a
    ``store.corrupt`` naming the stream and the version, never a shorter or other history."""
    path = tmp_path / "log.db"
    await _damaged_log(path, index_lag)
    expected = {
        "flipped": ("checksum", 5),
        "gap": ("gap", 7),
        "short": ("gap", 13),
        "text": ("mistyped", None),  # its stored version is no version at all
        "twice": ("duplicate", 3),
        "blob": ("blob_hash", 1),
    }
    async with open_sqlite_store(path) as store:
        found: dict[str, tuple[str | None, int | None]] = {}
        for stream in expected:
            with pytest.raises(CorruptLogError) as info:
                await store.read(stream)
            assert info.value.code == "store.corrupt"
            assert stream == info.value.stream
            assert repr(stream) in str(info.value)
            found[stream] = (info.value.kind, info.value.version)
        assert len(await store.read("fine")) == 13
        with pytest.raises(CorruptLogError):
            await store.read_all()
    assert expected == found


async def test_check_finds_every_damage_kind(tmp_path: Path) -> None:
    """``check_store`` (and so ``powertrio check``) lists each damage with its stream,
    version and kind, and keeps going past the first."""
    path = tmp_path / "log.db"
    await _damaged_log(path, index_lag=0)
    async with open_sqlite_store(path) as store:
        report = await check_store(store)
    found = {(p.stream, p.version, p.code, p.kind) for p in report.problems}
    assert {
        ("flipped", 5, "store.corrupt", "checksum"),
        ("gap", 7, "store.corrupt", "gap"),
        ("short", 13, "store.corrupt", "gap"),
        ("text", 4, "store.corrupt", "mistyped"),
        ("twice", 2, "store.corrupt", "duplicate"),
        ("twice", 3, "store.corrupt", "gap"),
        ("blob", 1, "store.corrupt", "blob_hash"),
    } <= found
    assert "fine" not in {p.stream for p in report.problems if p.code == "store.corrupt"}
    assert not report.ok


async def test_powertrio_check_fails_on_a_damaged_file(tmp_path: Path) -> None:
    """The CLI: exit 1 and a line per problem, each with stream, version and kind."""
    path = tmp_path / "log.db"
    await _damaged_log(path, 0)
    command = [sys.executable, "-c", "from actors.cli import main; raise SystemExit(main())"]
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [*command, "--db", str(path), "check", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=os.environ | {"COLUMNS": "200"},
        )
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    kinds = {(p["stream"], p["version"], p["kind"]) for p in report["problems"]}
    assert ("flipped", 5, "checksum") in kinds
    assert ("short", 13, "gap") in kinds
    assert ("blob", 1, "blob_hash") in kinds
    assert report["ok"] is False


# --- 3. failures are logged, counted and reported ---------------------------------------


async def test_a_failed_index_sweep_is_logged_counted_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle index sweep that fails leaves the tail unindexed (reads still see it), and
    says so: an error in the ``powertrio.store`` log, a count, a ``check`` problem."""

    def broken(*_args: object) -> int:
        raise sqlite3.OperationalError("disk I/O error (injected)")

    async with open_sqlite_store(tmp_path / "log.db", synchronous="OFF", index_lag=1) as store:
        monkeypatch.setattr(_sqlite_writer, "sweep", broken)
        with caplog.at_level(logging.ERROR, logger="powertrio.store"):
            await store.append("a", [_event(1), _event(2), _event(3)], 0)
            while store.statistics().sweep_failures == 0:  # noqa: ASYNC110  # a thread's counter
                await trio.sleep(0.01)
        assert len(await store.read("a")) == 3
        report = await check_store(store)
    assert "the index sweep failed" in caplog.text
    assert "disk I/O error (injected)" in caplog.text
    assert [
        (p.code, p.kind, p.stream) for p in report.problems if not p.code.startswith("codec.")
    ] == [("check.sweep_failed", "sweep_failed", None)]


class _FailingCheckpoints:
    """A connection whose checkpoints fail (a stand-in for an I/O error)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if "wal_checkpoint" in sql:
            raise sqlite3.OperationalError("disk I/O error (injected)")
        return self._conn.execute(sql, *args)

    def close(self) -> None:
        self._conn.close()


async def test_a_failed_checkpoint_is_logged_counted_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The background WAL checkpoint no longer swallows its errors."""
    real = _sqlite_store.connect

    def connect(path: str, *, read_only: bool) -> object:
        conn = real(path, read_only=read_only)
        return conn if read_only else _FailingCheckpoints(conn)

    monkeypatch.setattr(_sqlite_store, "connect", connect)
    with caplog.at_level(logging.ERROR, logger="powertrio.store"):
        async with open_sqlite_store(
            tmp_path / "log.db", synchronous="OFF", checkpoint_interval=0.01
        ) as store:
            await store.append("a", [_event(1)], 0)
            while store.statistics().checkpoint_failures == 0:  # noqa: ASYNC110  # ditto
                await trio.sleep(0.01)
            report = await check_store(store)
    assert "the WAL checkpoint failed" in caplog.text
    assert "check.checkpoint_failed" in {p.code for p in report.problems}


# --- 4. a bounded WAL -------------------------------------------------------------------


async def test_the_writer_truncates_before_the_group_that_would_cross_the_bound() -> None:
    """The headroom kept below the bound is the largest growth of one group (measured
    between consecutive commits only), at least a quarter of the bound, at most half."""
    room = WalHeadroom(1000)
    assert not room.crossing(100, 1)  # 100 + 250 (a quarter) <= 1000
    assert not room.crossing(400, 2)  # grew 300 in one group: 400 + 300 <= 1000
    assert room.step == 300
    assert room.crossing(710, 3)  # 710 + 310 > 1000: the next group could cross
    room.truncated()
    assert not room.crossing(100, 10)  # several groups since the last look: no step
    assert room.step == 310
    assert room.crossing(900, 11)  # one group of 800 is capped at half the bound
    assert room.step == 500


async def _largest_wal_under_writers(
    path: Path, limit: int, **options: Any
) -> tuple[int, EventStoreStatistics]:
    """The largest the WAL file grew while 64 writers appended for two seconds to a store
    with ``wal_limit=limit`` (and ``options``), with the store's statistics."""
    wal = f"{path}-wal"
    biggest = 0
    async with open_sqlite_store(
        path, wal_limit=limit, checkpoint_interval=10.0, **options
    ) as store:
        deadline = trio.current_time() + 2.0

        async def writer(index: int) -> None:
            version = 0
            while trio.current_time() < deadline:
                version = (await store.append(f"w/{index}", [_event(version)], version)).version

        async def watch() -> None:
            nonlocal biggest
            while trio.current_time() < deadline:
                with contextlib.suppress(FileNotFoundError):
                    biggest = max(biggest, os.stat(wal).st_size)
                await trio.sleep(0.002)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            for index in range(64):
                nursery.start_soon(writer, index)
        return biggest, store.statistics()


async def test_the_wal_never_passes_its_bound_when_groups_are_small(tmp_path: Path) -> None:
    """With every group small beside the bound (the index written in every commit, no
    deferred sweep), the WAL never passes the bound at all: the writer truncates it
    before the group that would take it past."""
    limit = 1024 * 1024
    biggest, stats = await _largest_wal_under_writers(tmp_path / "log.db", limit, index_lag=0)
    assert stats.wal_checkpoints >= 1, stats
    assert biggest <= limit, (biggest, stats)


async def test_the_wal_stays_under_its_bound_through_sustained_writes(tmp_path: Path) -> None:
    """64 writers append for two seconds with a 1 MiB bound: the WAL file never passes
    the bound by more than one group's worth of pages, because the writer truncates it
    between groups."""
    limit = 1024 * 1024
    # One group's worth: at most 64 appends of ~100 bytes (a few dozen 1 KiB pages), but
    # the group that carries the deferred index sweep (every 16k events here) also writes
    # the index and streams pages of every stream: measured up to ~400 KiB on a busy box.
    slack = 512 * 1024
    biggest, stats = await _largest_wal_under_writers(tmp_path / "log.db", limit)
    assert stats.wal_checkpoints >= 1, stats
    assert biggest <= limit + slack, (biggest, stats)


async def test_sequential_commits_reuse_the_wal_instead_of_growing_it(tmp_path: Path) -> None:
    """One appender, one commit after another, never idle: the checkpointer copies the
    WAL and the writer restarts it, so commits overwrite the pages the file already
    holds. Before, the commits made while a background checkpoint ran kept the WAL from
    ever being wholly copied when the next commit started: SQLite never restarted it,
    and every commit grew the file (and paid the file system a journal commit)."""
    path = tmp_path / "log.db"
    wal = f"{path}-wal"
    appends, grew, size = 3_000, 0, 0
    async with open_sqlite_store(path, synchronous="OFF", checkpoint_interval=0.05) as store:
        version = 0
        for n in range(appends):
            version = (await store.append("s", [_event(n, size=400)], version)).version
            now = os.stat(wal).st_size
            grew += now > size
            size = now
    # About four 1 KiB pages a commit: 12 MiB written to the WAL, which before grew by
    # every one of them. Now it grows to its reuse size (256 KiB, where the writer asks
    # for a checkpoint) and by what commits while a checkpoint runs (more on a busy box).
    assert grew < appends // 2, (grew, size)
    assert size < 4 * 1024 * 1024, (grew, size)
