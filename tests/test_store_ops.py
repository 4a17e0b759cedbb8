"""Store operations: JSON Lines export/import, retention, and the check operation."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import attrs
import pytest

from protocols.codec import EventRegistry
from protocols.errors import (
    BadInputFileError,
    ConcurrencyConflictError,
    ImportConflictError,
    InputFileNotFoundError,
    StreamNotFoundError,
)
from runtime import EventStore, NewEvent, open_sqlite_store
from runtime.maintenance import (
    TransferResult,
    apply_retention,
    check_store,
    export_jsonl,
    import_jsonl,
    in_tree,
)
from runtime.testing import InMemoryEventStore


@attrs.frozen
class Added:
    """A sample event."""

    amount: int


@attrs.frozen
class Total:
    """A sample folded state."""

    total: int = 0


def _registry() -> EventRegistry:
    registry = EventRegistry()
    registry.register(Added, name="ops.added")
    registry.register(Total, name="ops.total")
    return registry


REGISTRY = _registry()


def _added(amount: int) -> NewEvent:
    return NewEvent.from_encoded(REGISTRY.encode(Added(amount)))


def _evolve(state: Total, event: object) -> Total:
    assert isinstance(event, Added)
    if event.amount < 0:
        raise ValueError("negative amount")
    return Total(state.total + event.amount)


@asynccontextmanager
async def _sqlite(path: Path, now: list[float] | None = None) -> AsyncIterator[EventStore]:
    clock = (lambda: now[0]) if now is not None else None
    if clock is None:
        async with open_sqlite_store(path, blob_threshold=64, synchronous="OFF") as store:
            yield store
    else:
        async with open_sqlite_store(
            path, blob_threshold=64, synchronous="OFF", clock=clock
        ) as store:
            yield store


async def _fill(store: EventStore) -> None:
    await store.append("session/a", [_added(1), _added(2)], 0)
    await store.append("session/a/child", [_added(3)], 0)
    await store.append("session/ab", [_added(4)], 0)
    binary = NewEvent(type="raw", schema_version=2, data=bytes(range(256)), metadata=b"\xff\x00")
    spaced = NewEvent(type="raw", schema_version=1, data=b'{"a": 1}', metadata=b'{"corr":"x"}')
    big = NewEvent(type="raw", schema_version=1, data=b'{"text":"' + b"w" * 500 + b'"}')
    await store.append("session/a", [binary, spaced, big], 2)
    await store.append("board/1", [_added(5)], 0)


def _strip(events: list[object]) -> list[tuple[object, ...]]:
    return [
        (e.stream, e.version, e.type, e.schema_version, e.data, e.metadata, e.recorded_at)  # type: ignore[attr-defined]
        for e in events
    ]


async def test_export_import_round_trip_is_exact(tmp_path: Path) -> None:
    """Exporting, importing into an empty store and exporting again gives identical bytes."""
    async with _sqlite(tmp_path / "a.db") as source:
        await _fill(source)
        result = await export_jsonl(source, tmp_path / "all.jsonl")
        assert (result.streams, result.events) == (4, 8)
        original = await source.read_all()
    async with _sqlite(tmp_path / "b.db") as target:
        imported = await import_jsonl(target, tmp_path / "all.jsonl")
        assert (imported.streams, imported.events) == (4, 8)
        copy = await target.read_all()
        await export_jsonl(target, tmp_path / "again.jsonl")
    assert _strip(copy) == _strip(original)  # type: ignore[arg-type]
    assert [e.position for e in copy] == [e.position for e in original]
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "all.jsonl").read_bytes()
    lines = (tmp_path / "all.jsonl").read_bytes().splitlines()
    assert b'"data":{"amount":1}' in lines[0]  # canonical JSON stays readable
    assert b'"data_b64":' in lines[4]  # binary payloads are base64
    assert b'"data_b64":' in lines[5]  # non-canonical JSON keeps its exact bytes


async def test_export_stream_and_tree(tmp_path: Path) -> None:
    """A stream export holds one stream; a tree export holds root and children, not siblings."""
    store = InMemoryEventStore()
    await _fill(store)
    one = await export_jsonl(store, tmp_path / "one.jsonl", stream="session/a")
    assert (one.streams, one.events) == (1, 5)
    tree = await export_jsonl(store, tmp_path / "tree.jsonl", tree="session/a")
    assert (tree.streams, tree.events) == (2, 6)
    target = InMemoryEventStore()
    await import_jsonl(target, tmp_path / "tree.jsonl")
    assert [i.stream for i in await target.streams()] == ["session/a", "session/a/child"]
    assert _strip(await target.read("session/a")) == _strip(await store.read("session/a"))  # type: ignore[arg-type]
    assert in_tree("session/a", "session/a/x/y")
    assert not in_tree("session/a", "session/ab")
    assert in_tree("session/a", "session/a.1")
    assert in_tree("session/a", "session/a.1.2")
    assert not in_tree("session/a", "session/a1")


async def test_export_unknown_stream_fails(tmp_path: Path) -> None:
    """Exporting a stream or tree that does not exist raises StreamNotFoundError."""
    store = InMemoryEventStore()
    await _fill(store)
    with pytest.raises(StreamNotFoundError) as info:
        await export_jsonl(store, tmp_path / "x.jsonl", stream="session")
    assert (info.value.code, info.value.stream, str(info.value)) == (
        "store.stream_not_found",
        "session",
        "no stream named 'session' in the event log",
    )
    with pytest.raises(StreamNotFoundError):
        await export_jsonl(store, tmp_path / "x.jsonl", tree="nothing")
    with pytest.raises(ValueError, match="give stream or tree, not both"):
        await export_jsonl(store, tmp_path / "x.jsonl", stream="a", tree="b")


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"{not json}\n", "line 2: not JSON"),
        (b"[1]\n", "line 2: not a JSON object"),
        (
            b'{"stream":"s","version":2,"type":"t","schema_version":1,"recorded_at":1}\n',
            "line 2: missing 'data' (or 'data_b64')",
        ),
        (
            b'{"stream":"s","version":2,"type":"t","schema_version":1,"recorded_at":1,'
            b'"data_b64":"@@@"}\n',
            "line 2: 'data_b64' is not base64",
        ),
        (
            b'{"stream":"","version":2,"type":"t","schema_version":1,"recorded_at":1,"data":{}}\n',
            "line 2: 'stream' must be a non-empty string",
        ),
        (
            b'{"stream":"s","version":0,"type":"t","schema_version":1,"recorded_at":1,"data":{}}\n',
            "line 2: 'version' must be a positive integer",
        ),
        (
            b'{"stream":"s","version":2,"type":"","schema_version":1,"recorded_at":1,"data":{}}\n',
            "line 2: 'type' must be a non-empty string",
        ),
        (
            b'{"stream":"s","version":2,"type":"t","schema_version":1,"recorded_at":"x","data":{}}\n',
            "line 2: 'recorded_at' must be a number",
        ),
        (
            b'{"stream":"s","version":3,"type":"t","schema_version":1,"recorded_at":1,"data":{}}\n',
            "line 2: 's' version 3 follows version 1",
        ),
    ],
)
async def test_import_rejects_bad_lines_and_writes_nothing(
    tmp_path: Path, content: bytes, detail: str
) -> None:
    """A malformed line is bad input (not a damaged log) naming the line; nothing is imported."""
    path = tmp_path / "in.jsonl"
    first = b'{"stream":"s","version":1,"type":"t","schema_version":1,"recorded_at":1,"data":{}}\n'
    path.write_bytes(first + content)
    store = InMemoryEventStore()
    with pytest.raises(BadInputFileError) as info:
        await import_jsonl(store, path)
    assert info.value.code == "io.bad_input"
    assert info.value.path == str(path)
    assert f"line {info.value.line}: {info.value.detail}".startswith(detail), info.value.detail
    assert "is not a powertrio export" in str(info.value)
    assert await store.read_all() == []


async def test_import_of_a_missing_file_names_it(tmp_path: Path) -> None:
    """A path with no file is ``io.not_found`` naming the path, not an internal error."""
    missing = tmp_path / "nosuch.jsonl"
    with pytest.raises(InputFileNotFoundError) as info:
        await import_jsonl(InMemoryEventStore(), missing)
    assert info.value.code == "io.not_found"
    assert str(info.value) == f"no file at {str(missing)!r}: check the path"


async def test_import_into_a_store_that_has_the_stream_conflicts(tmp_path: Path) -> None:
    """A stream whose stored history differs from the file's raises a conflict before
    writing anything."""
    store = InMemoryEventStore()
    await _fill(store)
    await export_jsonl(store, tmp_path / "all.jsonl")
    target = InMemoryEventStore()
    await target.append("board/1", [_added(9)], 0)
    with pytest.raises(ConcurrencyConflictError) as info:
        await import_jsonl(target, tmp_path / "all.jsonl")
    assert (info.value.stream, info.value.expected, info.value.actual) == ("board/1", 0, 1)
    assert [i.stream for i in await target.streams()] == ["board/1"]


@asynccontextmanager
async def _memory(_path: Path) -> AsyncIterator[EventStore]:
    yield InMemoryEventStore()


@pytest.mark.parametrize("opener", [_sqlite, _memory], ids=["sqlite", "memory"])
async def test_importing_events_already_there_is_a_no_op(
    tmp_path: Path, opener: Callable[[Path], AbstractAsyncContextManager[EventStore]]
) -> None:
    """``export out.jsonl ; import out.jsonl`` into the same log writes nothing and counts
    every event as skipped; a store holding the first events of a stream gets the rest."""
    async with opener(tmp_path / "a.db") as store:
        await _fill(store)
        await export_jsonl(store, tmp_path / "out.jsonl")
        before = await store.read_all()
        again = await import_jsonl(store, tmp_path / "out.jsonl")
        assert TransferResult(streams=0, events=0, skipped=8) == again
        assert _strip(before) == _strip(await store.read_all())  # type: ignore[arg-type]
    async with opener(tmp_path / "b.db") as partial:
        await partial.append("session/a", [_added(1), _added(2)], 0)
        rest = await import_jsonl(partial, tmp_path / "out.jsonl")
        assert TransferResult(streams=4, events=6, skipped=2) == rest
        after = await partial.read_all()
        # The two events appended here keep their own times; everything else is the file's.
        assert [e[:-1] for e in _strip(before)] == [e[:-1] for e in _strip(after)]  # type: ignore[arg-type]
        assert _strip(before)[2:] == _strip(after)[2:]  # type: ignore[arg-type]


async def test_a_real_import_conflict_names_the_stream_and_version_that_differ(
    tmp_path: Path,
) -> None:
    """Same stream and version, other content: ``store.import_conflict`` naming the stream,
    the version, what differs and the line; nothing is written."""
    async with _sqlite(tmp_path / "a.db") as store:
        await _fill(store)
        await export_jsonl(store, tmp_path / "out.jsonl")
    async with _sqlite(tmp_path / "b.db") as target:
        await target.append("session/a", [_added(1), _added(7)], 0)
        with pytest.raises(ImportConflictError) as info:
            await import_jsonl(target, tmp_path / "out.jsonl")
        error = info.value
        assert (
            error.code,
            error.stream,
            error.version,
            error.field,
            error.line,
        ) == ("store.import_conflict", "session/a", 2, "data", 2)
        assert isinstance(error, ConcurrencyConflictError)
        assert (
            "the imported event 'session/a' version 2 (line 2) differs from the stored one "
            "in its data; nothing was written"
        ) in str(error)
        assert [i.stream for i in await target.streams()] == ["session/a"]
        assert await target.stream_version("session/a") == 2


async def test_retention_by_age_predicate_and_prefix(tmp_path: Path) -> None:
    """Retention deletes idle streams, filtered by predicate and prefix; never by default."""
    now = [1000.0]
    async with _sqlite(tmp_path / "r.db", now) as store:
        await store.append("session/old", [_added(1)], 0)
        await store.append("board/old", [_added(1)], 0)
        now[0] = 5000.0
        await store.append("session/new", [_added(1)], 0)
        await store.append("session/big", [_added(1)] * 3, 0)
        deleted = await apply_retention(store, older_than=3600, prefix="session/", now=5000.0)
        assert deleted == ("session/old",)
        deleted = await apply_retention(store, predicate=lambda info: info.version > 2)
        assert deleted == ("session/big",)
        assert [i.stream for i in await store.streams()] == ["board/old", "session/new"]
        assert await apply_retention(store, older_than=1e9, now=5000.0) == ()
        with pytest.raises(ValueError, match="retention never deletes by default"):
            await apply_retention(store)


async def test_check_reports_every_problem_and_keeps_checking(tmp_path: Path) -> None:
    """Unknown types, future versions, bad payloads, fold errors and corrupt rows are listed."""
    path = tmp_path / "c.db"
    async with _sqlite(path) as store:
        await store.append("good", [_added(1), _added(2)], 0)
        await store.save_snapshot(
            "good", 2, type="ops.total", schema_version=1, data=b'{"total":3}'
        )
        await store.append("unknown", [NewEvent(type="ops.gone", schema_version=1, data=b"{}")], 0)
        await store.append("future", [NewEvent(type="ops.added", schema_version=7, data=b"{}")], 0)
        await store.append(
            "garbled", [_added(1), NewEvent(type="ops.added", schema_version=1, data=b"[")], 0
        )
        await store.append("negative", [_added(1), _added(-1), _added(5)], 0)
        await store.append("stale", [_added(1), _added(1)], 0)
        await store.save_snapshot(
            "stale", 2, type="ops.total", schema_version=1, data=b'{"total":9}'
        )
        await store.append(
            "blob",
            [NewEvent(type="ops.added", schema_version=1, data=b'{"amount":1}' + b" " * 100)],
            0,
        )
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM blobs")
        conn.close()

        report = await check_store(
            store, registry=REGISTRY, initial=lambda _s: Total(), evolve=_evolve
        )
        found = {(p.stream, p.version, p.code) for p in report.problems}
        assert found == {
            ("blob", 1, "store.corrupt"),  # the audit names the event
            ("unknown", 1, "codec.unknown_type"),
            ("future", 1, "codec.future_version"),
            ("garbled", 2, "codec.decode"),
            ("negative", 2, "check.fold"),
            ("stale", 2, "check.snapshot_mismatch"),
        }
        assert not report.ok
        assert report.streams == 7
        messages = {p.stream: p.message for p in report.problems}
        assert "unknown event type 'ops.gone' at 'unknown' version 1" in messages["unknown"]
        assert "evolve raised ValueError: negative amount on 'ops.added'" in messages["negative"]
        assert "delete it (snapshots are only a cache)" in messages["stale"]
        assert "is missing" in messages["blob"]

        decode_only = await check_store(store, registry=REGISTRY, prefix="g")
        assert {(p.stream, p.code) for p in decode_only.problems} == {("garbled", "codec.decode")}
        assert (decode_only.streams, decode_only.events) == (2, 3)
        healthy = await check_store(
            store, registry=REGISTRY, prefix="good", initial=lambda _s: Total(), evolve=_evolve
        )
        assert healthy.ok
        assert (healthy.streams, healthy.events) == (1, 2)
        # The check read everything it could and changed nothing.
        assert [e.version for e in await store.read("good")] == [1, 2]
        with pytest.raises(ValueError, match="give both initial and evolve"):
            await check_store(store, initial=lambda _s: Total())


async def test_check_reports_file_level_damage(tmp_path: Path) -> None:
    """check_store includes SQLite's integrity check for the SQLite backend."""
    async with _sqlite(tmp_path / "d.db") as store:
        await store.append("s", [_added(1)], 0)
        report = await check_store(store, registry=REGISTRY)
        assert report.ok
        assert report.problems == ()
