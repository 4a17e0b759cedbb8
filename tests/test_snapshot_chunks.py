"""A session's sealed snapshot chunks are stored apart, once, by content address: a snapshot
write costs what is new, a missing or altered chunk makes the session fold its log, and
no chunk outlives the last snapshot that references it."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import orjson
import pytest

import actors._session._persistent as persistent
from actors import spawn_session
from actors._session._events import SessionState, evolve
from protocols import LLMRequest, LLMResponse
from protocols.codec import default_registry
from runtime import EventStore, NewEvent, open_runtime, open_sqlite_store
from runtime.lowlevel import chunk_address, decode_snapshot, snapshot_chunk, stash_chunk
from runtime.testing import FunctionLLM, InMemoryEventStore

STREAM = "session/s"


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 4 items, so a few sends seal several."""
    monkeypatch.setattr(persistent, "CHUNK", 4)


def _answer(request: LLMRequest) -> LLMResponse:
    return LLMResponse(content=f"seen {len(request.messages)}")


async def _sends(store: EventStore, n: int, start: int = 0) -> SessionState:
    async with open_runtime(store=store, seed=1) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(_answer), session_id="s", snapshot_every=10
        )
        for i in range(start, start + n):
            await session.send(f"hello {i}")
        return await session.state()


async def _folded(store: EventStore) -> SessionState:
    state = SessionState()
    for record in await store.read(STREAM):
        state = evolve(state, default_registry.decode_record(record))
    return state


def _trees(data: bytes) -> list[dict[str, object]]:
    """The index-tree entries of a snapshot's chunked fields (one per field with full chunks)."""
    raw = orjson.loads(data)
    entries = [*raw["history"]["chunks"], *raw["results"], *raw["seen_follow_ups"]]
    return [entry for entry in entries if isinstance(entry, dict)]


def _sealed(snapshot_chunks: dict[bytes, bytes]) -> set[bytes]:
    """The data chunks among a snapshot's chunks (ASCII: base64), not its index blobs
    (digests: binary)."""
    return {address for address, data in snapshot_chunks.items() if data.isascii()}


async def test_sealed_chunks_are_stored_apart_and_the_session_reopens_from_them() -> None:
    store = InMemoryEventStore()
    state = await _sends(store, 9)
    snapshot = await store.load_snapshot(STREAM)
    assert snapshot is not None
    trees = _trees(snapshot.data)
    # 18 messages and 9 results in chunks of 4: 4 + 2 sealed chunks, each field's under
    # one index tree.
    assert len(state.history) == 18
    assert [tree["chunks"] for tree in trees] == [4, 2]
    assert all(chunk_address(data) == address for address, data in snapshot.chunks.items())
    reopened = await _sends(store, 1, start=9)
    assert reopened == await _folded(store)
    assert reopened.transcript[:18] == state.transcript


async def test_a_snapshot_holds_one_address_however_many_chunks_are_sealed() -> None:
    """The snapshot row does not grow with the session's age: the full chunks' addresses
    live in an index tree stored apart, and the snapshot holds its root."""
    store = InMemoryEventStore()
    sizes = []
    for start in range(0, 160, 40):
        await _sends(store, 40, start=start)
        snapshot = await store.load_snapshot(STREAM)
        assert snapshot is not None
        assert len(_trees(snapshot.data)) == 2
        sizes.append(len(snapshot.data))
    # 80 to 320 messages: 20 to 80 sealed chunks of history alone, over several index blobs.
    assert max(sizes) - min(sizes) < 200, sizes
    reopened = await _sends(store, 1, start=160)
    assert reopened == await _folded(store)


async def test_a_snapshot_write_adds_only_the_chunks_sealed_since_the_last() -> None:
    store = InMemoryEventStore()
    await _sends(store, 9)
    before = _sealed(store._chunks)
    await _sends(store, 4, start=9)  # 8 more messages, 4 more results: 2 + 1 sealed
    after = _sealed(store._chunks)
    assert before < after
    assert len(after) - len(before) == 3
    # Besides the data chunks, only the index blob of each tree (both small yet).
    assert len(store._chunks) - len(after) == 2


@pytest.mark.parametrize("damage", ["missing", "altered"])
async def test_a_missing_or_altered_chunk_makes_the_session_fold_its_log(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store:
        await _sends(store, 9)
        folded = await _folded(store)
    with sqlite3.connect(path) as conn:
        (address,) = conn.execute("SELECT id FROM snapshot_chunks LIMIT 1").fetchone()
        if damage == "missing":
            conn.execute("DELETE FROM blobs WHERE id = ?", (address,))
        else:
            conn.execute("UPDATE blobs SET data = ? WHERE id = ?", (b"other bytes", address))
    expected = "is missing from the store" if damage == "missing" else "does not match its content"
    async with open_sqlite_store(path) as store:
        with caplog.at_level(logging.WARNING, logger="powertrio.event_sourced"):
            reopened = await _sends(store, 0)
    assert reopened == folded
    assert f"{STREAM}: ignored the snapshot at version" in caplog.text
    assert f"snapshot chunk {bytes(address).hex()} {expected}" in caplog.text


async def test_no_chunk_outlives_the_snapshots_that_reference_it(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store:
        await _sends(store, 9)
        other = await store.stream_version(STREAM)
        # Another stream whose snapshot shares every chunk, then references none.
        await store.append("copy", await _copy_events(store), 0)
        snapshot = await store.load_snapshot(STREAM)
        assert snapshot is not None
        await store.save_snapshot(
            "copy", other, type="x", schema_version=1, data=b"{}", chunks=snapshot.chunks
        )
        await store.delete_streams([STREAM])
        assert _count(path, "blobs") == len(snapshot.chunks)  # "copy" still holds them
        await store.save_snapshot("copy", other, type="x", schema_version=1, data=b"{}")
        assert _count(path, "blobs") == 0
        assert _count(path, "snapshot_chunks") == 0


async def _copy_events(store: EventStore) -> list[NewEvent]:
    return [
        NewEvent(type=r.type, schema_version=r.schema_version, data=r.data)
        for r in await store.read(STREAM)
    ]


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


async def test_a_retired_snapshot_chunk_is_dropped_from_memory() -> None:
    store = InMemoryEventStore()
    await _sends(store, 9)
    assert store._chunks
    await store.save_snapshot(
        STREAM, await store.stream_version(STREAM), type="x", schema_version=1, data=b"{}"
    )
    assert store._chunks == {}
    assert store._chunk_refs == {}


async def test_a_version_2_log_is_upgraded_and_keeps_its_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store:
        await _sends(store, 2)
    with sqlite3.connect(path) as conn:  # what a version-2 file looks like
        conn.execute("DROP TABLE snapshot_chunks")
        conn.execute("PRAGMA user_version = 2")
    async with open_sqlite_store(path) as store:
        reopened = await _sends(store, 9, start=2)
        assert reopened == await _folded(store)
        snapshot = await store.load_snapshot(STREAM)
        assert snapshot is not None
        assert snapshot.chunks
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)


def test_chunks_are_read_and_stashed_only_inside_a_snapshot_codec_call() -> None:
    address = chunk_address(b"data")
    assert stash_chunk(address, b"data") is False  # outside encode_snapshot: write inline
    with pytest.raises(ValueError, match=f"snapshot chunk {address.hex()} read outside"):
        snapshot_chunk(address)


async def test_a_reopened_session_structures_no_item_until_one_is_read() -> None:
    """Decoding a snapshot structures none of the chunk still filling (the run results, the
    newest messages): a re-activation reads few of them, and structuring them all took
    most of its time; each is structured when first read."""
    store = InMemoryEventStore()
    await _sends(store, 9)
    snapshot = await store.load_snapshot(STREAM)
    assert snapshot is not None
    state = decode_snapshot(default_registry, snapshot, stream=STREAM)
    assert isinstance(state, SessionState)
    newest = (len(state.results) - 1) // persistent.CHUNK
    assert newest in state.results._entries.lazy  # not structured
    assert (len(state.history) - 1) // persistent.CHUNK in state.history._items._buf.lazy
    last = list(state.results)[-1]
    assert state.results[last].status == "completed"  # structured now
    assert newest not in state.results._entries.lazy
    assert state.history.last == (await _folded(store)).history.last


@pytest.mark.parametrize("field", ["history", "results"])
async def test_an_altered_unsealed_chunk_makes_the_session_fold_its_log(
    field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The chunk still filling is stored inline, with no address to check it by: a byte
    altered in it still makes the snapshot not decode at load (its zlib checksum), so
    the session folds its log rather than failing when it reads the item later."""
    store = InMemoryEventStore()
    await _sends(store, 9)
    folded = await _folded(store)
    snapshot = await store.load_snapshot(STREAM)
    assert snapshot is not None
    raw = orjson.loads(snapshot.data)
    chunks = raw["history"]["chunks"] if field == "history" else raw["results"]
    text: str = chunks[-1]
    # A byte near the end of the values (the compressed stream's last bytes and checksum).
    at = len(text) - 6
    chunks[-1] = text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]
    await store.save_snapshot(
        STREAM,
        snapshot.version,
        type=snapshot.type,
        schema_version=snapshot.schema_version,
        data=orjson.dumps(raw),
        chunks=snapshot.chunks,
    )
    with caplog.at_level(logging.WARNING, logger="powertrio.event_sourced"):
        reopened = await _sends(store, 0)
    assert reopened == folded
    assert f"{STREAM}: ignored the snapshot at version" in caplog.text
