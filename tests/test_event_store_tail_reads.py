"""What a stream read of the SQLite store costs beside the unindexed tail of the log.

The per-stream index lags behind the log (the store's schema says why); a stream read adds
the events above it by a scan. These tests count the SQLite virtual machine's steps of a
read (a count that does not move with the machine's load), so they say what the scan
visits, not how fast it runs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runtime import NewEvent, open_sqlite_store
from runtime._sqlite._dialect import SqliteDialect
from runtime._sqlite._schema import connect, read_head, sweep


def _event(n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"n":%d}' % n)


async def _log(path: Path, *, own: int, others: int, indexed: bool) -> None:
    """Stream ``s`` with ``own`` events (swept into the index if ``indexed``), then
    ``others`` events of 20 other streams, which stay in the unindexed tail."""
    lag = 10**9  # the writer never sweeps by itself
    async with open_sqlite_store(path, synchronous="OFF", index_lag=lag) as store:
        await store.append("s", [_event(n) for n in range(1, own + 1)], 0)
    if indexed:
        conn = connect(str(path), read_only=False)
        conn.execute("BEGIN IMMEDIATE")
        sweep(conn, 0, read_head(conn))
        conn.execute("COMMIT")
        conn.close()
    async with open_sqlite_store(path, synchronous="OFF", index_lag=lag) as store:
        per_stream = others // 20
        for k in range(20):
            await store.append(f"o{k}", [_event(n) for n in range(1, per_stream + 1)], 0)


def _steps(path: Path, from_version: int, limit: int | None = None) -> tuple[int, list[int]]:
    """The VM steps of one read of ``s`` from ``from_version``, and the versions read."""
    conn = connect(str(path), read_only=True)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(count, 1)
    try:
        events = SqliteDialect(str(path), lambda: None).read_stream(conn, "s", from_version, limit)
    finally:
        conn.set_progress_handler(None, 0)
        conn.close()
    return steps[0], [e.version for e in events]


async def test_an_indexed_stream_reads_without_scanning_the_tail(tmp_path: Path) -> None:
    """A stream whose events are all indexed reads in as many steps whether the tail holds
    no other event or 4,000 of other streams (a re-activated idle session's read)."""
    quiet, busy = tmp_path / "quiet.db", tmp_path / "busy.db"
    await _log(quiet, own=8, others=0, indexed=True)
    await _log(busy, own=8, others=4000, indexed=True)
    quiet_steps, quiet_versions = _steps(quiet, 1)
    busy_steps, busy_versions = _steps(busy, 1)
    assert list(range(1, 9)) == quiet_versions == busy_versions
    assert busy_steps == quiet_steps


async def test_a_read_past_the_head_scans_nothing(tmp_path: Path) -> None:
    """Reading after a stream's head (a snapshot at its head, then the empty tail after
    it) costs the same however many events the tail holds, its own or others'."""
    small, large = tmp_path / "small.db", tmp_path / "large.db"
    await _log(small, own=8, others=0, indexed=False)
    await _log(large, own=2000, others=4000, indexed=False)
    small_steps, small_versions = _steps(small, 9)
    large_steps, large_versions = _steps(large, 2001)
    assert [] == small_versions == large_versions
    assert large_steps == small_steps


async def test_the_newest_events_of_a_stream_read_without_its_older_ones(
    tmp_path: Path,
) -> None:
    """The last three events of a stream in the tail (a snapshot's tail) read in as many
    steps whether 5 or 2,000 older events of the stream lie before them in the tail."""
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    await _log(short, own=8, others=0, indexed=False)
    await _log(long, own=2003, others=0, indexed=False)
    short_steps, short_versions = _steps(short, 6, limit=4096)
    long_steps, long_versions = _steps(long, 2001, limit=4096)
    assert short_versions == [6, 7, 8]
    assert long_versions == [2001, 2002, 2003]
    assert long_steps == short_steps


async def test_a_partly_indexed_stream_reads_each_version_once(tmp_path: Path) -> None:
    """Versions in the index and in the tail join into one run, a limit counted over both."""
    path = tmp_path / "log.db"
    await _log(path, own=6, others=40, indexed=True)
    async with open_sqlite_store(path, synchronous="OFF", index_lag=10**9) as store:
        await store.append("s", [_event(n) for n in range(7, 11)], 6)
    assert _steps(path, 1)[1] == list(range(1, 11))
    assert _steps(path, 4, limit=5)[1] == [4, 5, 6, 7, 8]
    assert _steps(path, 8, limit=2)[1] == [8, 9]
    assert _steps(path, 11)[1] == []
    with sqlite3.connect(path) as conn:
        indexed = conn.execute("SELECT count(*) FROM stream_index WHERE stream = 's'")
        assert indexed.fetchall() == [(6,)]
    conn.close()
