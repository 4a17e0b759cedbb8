"""A reusable conformance suite every ``EventStore`` implementation must pass."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, aclosing
from functools import partial
from typing import TypeAlias, TypeVar

import trio
import trio.testing

from protocols.errors import ConcurrencyConflictError, StoreClosedError

from .._store._contract import EventStore, NewEvent, RecordedEvent

__all__ = ["EVENT_STORE_CHECKS", "StoreFactory", "check_event_store"]

StoreFactory: TypeAlias = Callable[[], AbstractAsyncContextManager[EventStore]]
"""Opens a new, empty store for one check (an async context manager)."""

E = TypeVar("E", bound=BaseException)

Check: TypeAlias = Callable[[StoreFactory], Awaitable[None]]


def _event(n: int, size: int = 0, *, type: str = "test.happened") -> NewEvent:
    payload = b'{"n":%d,"pad":"%s"}' % (n, b"x" * size)
    return NewEvent(type=type, schema_version=1, data=payload)


async def _raises(error: type[E], call: Callable[[], Awaitable[object]], what: str) -> E:
    """Await ``call`` and return the ``error`` it raised; fail if it raised nothing."""
    try:
        await call()
    except error as exc:
        return exc
    raise AssertionError(f"{what} must raise {error.__name__}")


def _payloads(events: list[RecordedEvent]) -> list[bytes]:
    return [e.data for e in events]


async def check_empty_store(make_store: StoreFactory) -> None:
    """A new store has no streams, no events, head 0; a missing stream reads as empty."""
    async with make_store() as store:
        assert await store.read("nobody") == []
        assert await store.stream_version("nobody") == 0
        assert await store.read_all() == []
        assert await store.streams() == []
        assert await store.head_position() == 0
        assert None is await store.load_snapshot("nobody")
        assert store.statistics().head_position == 0


async def check_append_and_read(make_store: StoreFactory) -> None:
    """Appended events read back in order with 1-based versions and increasing positions."""
    async with make_store() as store:
        events = [_event(i) for i in range(3)]
        events.append(
            NewEvent(type="test.meta", schema_version=4, data=b"{}", metadata=b'{"corr":"c1"}')
        )
        result = await store.append("s/1", events, 0)
        assert (result.stream, result.version) == ("s/1", 4)
        assert (result.first_position, result.last_position) == (1, 4)
        read = await store.read("s/1")
        assert [e.version for e in read] == [1, 2, 3, 4]
        assert [e.position for e in read] == [1, 2, 3, 4]
        assert _payloads(read) == [e.data for e in events]
        assert (
            read[3].type,
            read[3].schema_version,
            read[3].metadata,
        ) == ("test.meta", 4, b'{"corr":"c1"}')
        assert None is read[0].metadata
        assert all(e.stream == "s/1" for e in read)
        assert all(isinstance(e.recorded_at, float) for e in read)
        more = await store.append("s/1", [_event(9)], 4)
        assert (more.version, more.first_position, more.last_position) == (5, 5, 5)
        assert await store.stream_version("s/1") == 5
        assert await store.head_position() == 5
        stats = store.statistics()
        assert (stats.appends, stats.events_appended, stats.head_position) == (2, 5, 5)


async def check_read_ranges(make_store: StoreFactory) -> None:
    """``from_version``/``from_position`` are inclusive and ``limit`` caps the count."""
    async with make_store() as store:
        await store.append("a", [_event(i) for i in range(5)], 0)
        await store.append("b", [_event(i) for i in range(3)], 0)
        await store.append("a", [_event(5)], 5)
        assert [e.version for e in await store.read("a", 3, limit=2)] == [3, 4]
        assert [e.version for e in await store.read("a", 6)] == [6]
        assert await store.read("a", 7) == []
        assert await store.read("a", 1, limit=0) == []
        whole = await store.read_all()
        assert list(range(1, 10)) == [e.position for e in whole]
        assert [e.stream for e in whole] == ["a"] * 5 + ["b"] * 3 + ["a"]
        assert [e.position for e in await store.read_all(7, limit=2)] == [7, 8]
        assert await store.read_all(10) == []
        for bad in (0, -1):
            exc = await _raises(ValueError, partial(store.read, "a", bad), "read(from_version<1)")
            assert "from_version must be >= 1" in str(exc)


async def check_conflict_writes_nothing(make_store: StoreFactory) -> None:
    """A wrong expected version raises ``ConcurrencyConflictError`` and writes nothing."""
    async with make_store() as store:
        await store.append("s", [_event(1), _event(2)], 0)
        for expected in (0, 1, 3):
            exc = await _raises(
                ConcurrencyConflictError,
                partial(store.append, "s", [_event(3), _event(4)], expected),
                f"append with expected_version={expected}",
            )
            assert ("store.conflict", "s", expected, 2) == (
                exc.code,
                exc.stream,
                exc.expected,
                exc.actual,
            )
            assert f"stream 's' is at version 2, the append expected {expected}" in str(exc)
        assert [e.version for e in await store.read("s")] == [1, 2]
        assert await store.head_position() == 2
        assert store.statistics().conflicts == 3
        missing = await _raises(
            ConcurrencyConflictError,
            lambda: store.append("new", [_event(1)], 1),
            "appending to a missing stream at version 1",
        )
        assert (missing.expected, missing.actual) == (1, 0)
        assert await store.streams("new") == []


async def check_empty_append(make_store: StoreFactory) -> None:
    """An append of no events checks the version and writes nothing."""
    async with make_store() as store:
        result = await store.append("s", [], 0)
        assert (result.version, result.first_position, result.last_position) == (0, 1, 0)
        assert await store.streams() == []
        await store.append("s", [_event(1)], 0)
        result = await store.append("s", [], 1)
        assert (result.version, result.first_position, result.last_position) == (1, 2, 1)
        exc = await _raises(
            ConcurrencyConflictError, lambda: store.append("s", [], 0), "an empty stale append"
        )
        assert (exc.expected, exc.actual) == (0, 1)


async def check_bad_arguments(make_store: StoreFactory) -> None:
    """Misuse raises ``TypeError``/``ValueError`` naming the argument, and writes nothing."""
    async with make_store() as store:
        cases: list[tuple[Callable[[], Awaitable[object]], type[Exception], str]] = [
            (lambda: store.append("", [_event(1)], 0), ValueError, "stream must be"),
            (lambda: store.append("s", [_event(1)], -1), ValueError, "expected_version"),
            (lambda: store.append("s", [b"raw"], 0), TypeError, "NewEvent"),  # type: ignore[list-item]  # misuse on purpose
            (lambda: store.append("s", [_event(1)], None), TypeError, "expected_version"),  # type: ignore[arg-type]  # misuse on purpose
            (lambda: store.read_all(0), ValueError, "from_position"),
            (lambda: store.read("s", 1, limit=-1), ValueError, "limit"),
        ]
        for call, error, text in cases:
            exc = await _raises(error, call, f"misuse mentioning {text!r}")
            assert text in str(exc), str(exc)
        assert await store.head_position() == 0


async def check_concurrent_appends(make_store: StoreFactory) -> None:
    """Many tasks append at once: each gets its own result; racing on one version, one wins."""
    async with make_store() as store:
        results: dict[int, int] = {}
        conflicts: list[ConcurrencyConflictError] = []

        async def writer(i: int) -> None:
            version = 0
            for k in range(5):
                result = await store.append(f"w/{i}", [_event(k)], version)
                version = result.version
            results[i] = version

        async def racer(i: int) -> None:
            try:
                await store.append("contested", [_event(i)], 0)
            except ConcurrencyConflictError as exc:
                conflicts.append(exc)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(writer, i)
                for i in range(10):
                    nursery.start_soon(racer, i)
        assert {i: 5 for i in range(40)} == results
        assert len(conflicts) == 9
        assert all((e.expected, e.actual) == (0, 1) for e in conflicts)
        assert await store.stream_version("contested") == 1
        everything = await store.read_all()
        positions = [e.position for e in everything]
        assert positions == sorted(set(positions))
        assert len(everything) == 201
        for i in range(40):
            assert [e.version for e in await store.read(f"w/{i}")] == [1, 2, 3, 4, 5]


async def check_streams_listing(make_store: StoreFactory) -> None:
    """``streams(prefix)`` lists matching streams sorted by name with versions and times."""
    async with make_store() as store:
        await store.append("session/b", [_event(1)], 0)
        await store.append("session/a", [_event(1), _event(2)], 0)
        await store.append("board/x", [_event(1)], 0)
        await store.append("session/a", [_event(3)], 2)
        infos = await store.streams()
        assert [i.stream for i in infos] == ["board/x", "session/a", "session/b"]
        assert [i.version for i in infos] == [1, 3, 1]
        listing = await store.streams("session/")
        assert [i.stream for i in listing] == ["session/a", "session/b"]
        info_a = listing[0]
        events_a = await store.read("session/a")
        assert events_a[0].recorded_at == info_a.created_at
        assert events_a[-1].recorded_at == info_a.updated_at
        assert await store.streams("zzz") == []


async def check_delete_streams(make_store: StoreFactory) -> None:
    """Deleting streams removes their events and snapshots; positions are never reused."""
    async with make_store() as store:
        await store.append("keep", [_event(1)], 0)
        await store.append("drop/1", [_event(1), _event(2)], 0)
        await store.append("drop/2", [_event(1)], 0)
        await store.save_snapshot("drop/1", 2, type="state", schema_version=1, data=b"{}")
        assert await store.delete_streams(["drop/1", "drop/2", "never-existed"]) == 3
        assert [i.stream for i in await store.streams()] == ["keep"]
        assert await store.read("drop/1") == []
        assert None is await store.load_snapshot("drop/1")
        assert [e.position for e in await store.read_all()] == [1]
        result = await store.append("drop/1", [_event(7)], 0)
        assert result.first_position == 5
        assert await store.delete_streams([]) == 0


async def check_snapshots(make_store: StoreFactory) -> None:
    """Snapshots save and load; a newer one wins; one beyond the stream is refused."""
    async with make_store() as store:
        await store.append("s", [_event(i) for i in range(5)], 0)
        await store.save_snapshot("s", 3, type="state", schema_version=2, data=b'{"n":3}')
        snap = await store.load_snapshot("s")
        assert snap is not None
        assert (
            snap.stream,
            snap.version,
            snap.type,
            snap.schema_version,
            snap.data,
        ) == ("s", 3, "state", 2, b'{"n":3}')
        await store.save_snapshot("s", 5, type="state", schema_version=2, data=b'{"n":5}')
        await store.save_snapshot("s", 4, type="state", schema_version=2, data=b'{"n":4}')
        snap = await store.load_snapshot("s")
        assert snap is not None
        assert (snap.version, snap.data) == (5, b'{"n":5}')
        for version in (6, 0):
            exc = await _raises(
                ValueError,
                partial(store.save_snapshot, "s", version, type="s", schema_version=2, data=b""),
                f"a snapshot at version {version}",
            )
            assert "snapshot" in str(exc)
        snap = await store.load_snapshot("s")
        assert snap is not None
        assert snap.version == 5
        assert await store.stream_version("s") == 5


def _chunk(text: bytes) -> tuple[bytes, bytes]:
    return hashlib.sha256(text).digest(), text


async def check_snapshot_chunks(make_store: StoreFactory) -> None:
    """A snapshot's chunks come back with it; chunks shared by snapshots outlive one of
    them; a new chunk that does not match its address is refused, changing nothing; an
    older snapshot changes no chunks."""
    a, b, c, d = (_chunk(b"chunk %d" % i * 50) for i in range(4))
    async with make_store() as store:
        await store.append("x", [_event(i) for i in range(3)], 0)
        await store.append("y", [_event(1)], 0)
        await store.save_snapshot(
            "x", 2, type="state", schema_version=1, data=b"{}", chunks=dict([a, b])
        )
        await store.save_snapshot(
            "y", 1, type="state", schema_version=1, data=b"{}", chunks=dict([b, c])
        )
        snap = await store.load_snapshot("x")
        assert snap is not None
        assert dict(snap.chunks) == dict([a, b]), "a snapshot loads with its chunks"
        # The next snapshot of x references b and d: a is no longer x's.
        await store.save_snapshot(
            "x", 3, type="state", schema_version=1, data=b"{}", chunks=dict([b, d])
        )
        snap = await store.load_snapshot("x")
        assert snap is not None
        assert dict(snap.chunks) == dict([b, d])
        # An older snapshot is not saved, nor are its chunks.
        await store.save_snapshot(
            "x", 2, type="state", schema_version=1, data=b"{}", chunks=dict([a])
        )
        snap = await store.load_snapshot("x")
        assert snap is not None
        assert (snap.version, dict(snap.chunks)) == (3, dict([b, d]))
        forged = {a[0]: b"not the bytes of a"}
        exc = await _raises(
            ValueError,
            partial(
                store.save_snapshot,
                "x",
                3,
                type="state",
                schema_version=1,
                data=b"{}",
                chunks=forged,
            ),
            "a chunk that does not match its address",
        )
        assert "does not match its content address" in str(exc), exc
        snap = await store.load_snapshot("x")
        assert snap is not None
        assert dict(snap.chunks) == dict([b, d]), "a refused snapshot changes nothing"
        # Deleting x keeps the chunk y shares with it.
        await store.delete_streams(["x"])
        snap = await store.load_snapshot("y")
        assert snap is not None
        assert dict(snap.chunks) == dict([b, c]), "a chunk another snapshot references stays"
        # A snapshot without chunks drops them all.
        await store.save_snapshot("y", 1, type="state", schema_version=1, data=b"{}")
        snap = await store.load_snapshot("y")
        assert snap is not None
        assert dict(snap.chunks) == {}


async def check_large_payloads(make_store: StoreFactory) -> None:
    """Large payloads (the blob path in stores that have one) come back byte for byte."""
    async with make_store() as store:
        big = bytes(range(256)) * 1024  # 256 KiB, not valid UTF-8 on purpose
        events = [
            NewEvent(type="big", schema_version=1, data=big),
            NewEvent(type="big", schema_version=1, data=big),
            _event(1),
            NewEvent(type="big", schema_version=1, data=big[::-1]),
        ]
        await store.append("b", events, 0)
        await store.append("c", [NewEvent(type="big", schema_version=1, data=big)], 0)
        read = await store.read("b")
        assert [big, big, events[2].data, big[::-1]] == _payloads(read)
        assert [big] == _payloads(await store.read("c"))
        assert [big, big, events[2].data, big[::-1], big] == _payloads(await store.read_all())
        await store.delete_streams(["b"])
        assert [big] == _payloads(await store.read("c"))


async def check_subscribe(make_store: StoreFactory) -> None:
    """A subscription yields stored events, then new ones, and ends when the store closes."""
    async with make_store() as store:
        await store.append("x/1", [_event(1)], 0)
        await store.append("y/1", [_event(1)], 0)
        seen: list[tuple[str, int]] = []
        filtered: list[tuple[str, int]] = []

        async def follow(target: list[tuple[str, int]], prefix: str, count: int) -> None:
            async for event in store.subscribe(1, prefix=prefix):
                target.append((event.stream, event.position))
                if len(target) == count:
                    return

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow, seen, "", 5)
                nursery.start_soon(follow, filtered, "x/", 3)
                await trio.testing.wait_all_tasks_blocked()
                await store.append("x/1", [_event(2)], 1)
                await store.append("y/1", [_event(2)], 1)
                await store.append("x/2", [_event(1)], 0)
        assert seen == [("x/1", 1), ("y/1", 2), ("x/1", 3), ("y/1", 4), ("x/2", 5)]
        assert filtered == [("x/1", 1), ("x/1", 3), ("x/2", 5)]
        later = store.subscribe(4)
        assert later.next_position == 4
        assert ((e := await later.__anext__()).stream, e.position) == ("y/1", 4)
        ended: list[int] = []

        async def until_end() -> None:
            async for event in store.subscribe(6):
                ended.append(event.position)
            ended.append(-1)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(until_end)
                await trio.testing.wait_all_tasks_blocked()
                await store.aclose()
        assert ended == [-1]


async def check_changes(make_store: StoreFactory) -> None:
    """``changes`` yields the head now, then each newer head a commit makes (growing
    only), closes early when asked, and ends when the store closes."""
    async with make_store() as store:
        await store.append("s", [_event(1)], 0)
        async with aclosing(store.changes()) as early:
            with trio.fail_after(30):
                assert await anext(early) == 1, "changes must first yield the head now"
        seen: list[int] = []
        ended = trio.Event()
        moved = trio.Event()

        async def watch() -> None:
            nonlocal moved
            async for head in store.changes():
                seen.append(head)
                moved.set()
                moved = trio.Event()
            ended.set()

        async def until(last: int) -> None:
            while not seen or seen[-1] < last:
                await moved.wait()

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await until(1)
                await store.append("s", [_event(2), _event(3)], 1)
                await until(3)
                await store.append("t", [_event(1)], 0)
                await until(4)
                await store.aclose()
                await ended.wait()
        assert seen[0] == 1, f"changes gave {seen}"
        assert seen[-1] == 4, f"changes gave {seen}"
        assert seen == sorted(set(seen)), f"changes must only grow, gave {seen}"
        assert set(seen) <= {1, 2, 3, 4}, f"changes gave positions never written: {seen}"


async def check_checkpoints(make_store: StoreFactory) -> None:
    """Every public async method is a Trio checkpoint, also on its fast paths."""
    async with make_store() as store:
        with trio.testing.assert_checkpoints():
            await store.append("s", [_event(1)], 0)
        with trio.testing.assert_checkpoints():
            await store.read("s")
        with trio.testing.assert_checkpoints():
            await store.read("missing")
        with trio.testing.assert_checkpoints():
            await store.read_all()
        with trio.testing.assert_checkpoints():
            await store.stream_version("s")
        with trio.testing.assert_checkpoints():
            await store.head_position()
        with trio.testing.assert_checkpoints():
            await store.streams()
        with trio.testing.assert_checkpoints():
            await store.load_snapshot("s")
        with trio.testing.assert_checkpoints():
            await store.aclose()


async def check_cancelled_append_writes_nothing(make_store: StoreFactory) -> None:
    """An append cancelled before the store takes it raises ``Cancelled`` and writes nothing."""
    async with make_store() as store:
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.append("s", [_event(1)], 0)
        assert scope.cancelled_caught
        assert await store.stream_version("s") == 0
        assert store.statistics().pending_appends == 0
        await store.append("s", [_event(1)], 0)
        assert await store.stream_version("s") == 1


async def check_closed_store(make_store: StoreFactory) -> None:
    """After ``aclose`` every operation raises ``StoreClosedError``; ``aclose`` is idempotent."""
    async with make_store() as store:
        await store.append("s", [_event(1)], 0)
        await store.aclose()
        await store.aclose()
        assert store.statistics().closed
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.append("s", [_event(2)], 1),
            lambda: store.read("s"),
            store.read_all,
            lambda: store.stream_version("s"),
            store.streams,
            lambda: store.load_snapshot("s"),
            lambda: store.save_snapshot("s", 1, type="t", schema_version=1, data=b""),
            lambda: store.delete_streams(["s"]),
            store.head_position,
        ]
        for call in calls:
            exc = await _raises(StoreClosedError, call, "a call on a closed store")
            assert (exc.code, str(exc)) == ("store.closed", "the event store is closed")


EVENT_STORE_CHECKS: Mapping[str, Check] = {
    check.__name__: check
    for check in (
        check_empty_store,
        check_append_and_read,
        check_read_ranges,
        check_conflict_writes_nothing,
        check_empty_append,
        check_bad_arguments,
        check_concurrent_appends,
        check_streams_listing,
        check_delete_streams,
        check_snapshots,
        check_snapshot_chunks,
        check_large_payloads,
        check_subscribe,
        check_changes,
        check_checkpoints,
        check_cancelled_append_writes_nothing,
        check_closed_store,
    )
}
"""Every conformance check by name, for test runners that report them one by one."""


async def check_event_store(make_store: StoreFactory) -> None:
    """Check that an ``EventStore`` implementation behaves as the interface promises.

    Like ``trio.testing.check_one_way_stream``: third-party backends run this against
    their own class. Each check opens a fresh, empty store through ``make_store``.

    Args:
        make_store (StoreFactory): returns an async context manager yielding a new,
            empty store; leaving it releases the store (it may already be closed).

    Raises:
        AssertionError: the store broke the contract; the message says where.
    """
    __tracebackhide__ = True
    for check in EVENT_STORE_CHECKS.values():
        await check(make_store)
