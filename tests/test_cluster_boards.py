"""Blackboards on a fleet: one owner per board, compare-and-set and watches from any node."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import cast

import _cluster_agents
import _postgres
import orjson
import pytest
import trio

from actors import Board, open_board
from actors._board._blackboard import perform as perform_board_call
from actors.board import BoardConflictError
from actors.cluster import NodeHost, RemoteBoardError
from protocols.errors import ActorNotFoundError, ConfigError, FencedError
from runtime import ActorRef
from runtime.testing import PostgresServer


def _host(server: PostgresServer, schema: str, name: str) -> AbstractAsyncContextManager[NodeHost]:
    return _postgres.node_host(server, schema, name, _cluster_agents.catalog())


_split = _postgres.wait_for_split


def _two_nodes(
    server: PostgresServer, schema: str
) -> AbstractAsyncContextManager[tuple[NodeHost, NodeHost]]:
    return _postgres.two_nodes(server, schema, _cluster_agents.catalog())


def _runs(host: NodeHost, board_id: str) -> bool:
    """Whether the board's actor runs on this node."""
    try:
        host.runtime.lookup(f"board:{board_id}")
    except ActorNotFoundError:
        return False
    return True


def _board_on(host: NodeHost, *, owned: bool) -> str:
    n = 0
    while host.node.owns_target(f"board/b{n}") != owned:
        n += 1
    return f"b{n}"


async def _increment(host: NodeHost, board_id: str, times: int, author: str) -> int:
    """Add 1 to ``count`` ``times`` times by compare-and-set; how many conflicts it met."""
    board = await open_board(host.runtime, board_id)
    conflicts = 0
    for _ in range(times):
        while True:
            entry = await board.get("count")
            now, version = (0, 0) if entry is None else (entry.value, entry.version)
            assert isinstance(now, int)
            try:
                await board.put("count", now + 1, expected_version=version, author=author)
                break
            except BoardConflictError:
                conflicts += 1
    return conflicts


async def test_concurrent_compare_and_set_from_two_nodes_loses_no_update(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, b):
        board_id = _board_on(a, owned=True)
        conflicts: list[int] = []

        async def run(host: NodeHost, author: str) -> None:
            conflicts.append(await _increment(host, board_id, 15, author))

        async with trio.open_nursery() as nursery:
            for n, host in enumerate((a, b, a, b)):
                nursery.start_soon(run, host, f"w{n}")
        for host in (a, b):
            entry = await (await open_board(host.runtime, board_id)).get("count")
            assert entry is not None
            assert (entry.value, entry.version) == (60, 60)
        # Exactly one write per increment reached the log: a lost race wrote nothing.
        records = await a.runtime.store.read(f"board/{board_id}")
        assert [r.type for r in records] == ["board.entry_put"] * 60
        assert _runs(a, board_id)
        assert not _runs(b, board_id)
        # The board's stream is fenced: b may not append to it, even by hand.
        with pytest.raises(FencedError, match=r"this node does not hold its shard's lease"):
            b.node.claim(f"board/{board_id}")


async def test_a_conflict_on_the_owner_comes_back_as_itself(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, _b):
        board = await open_board(a.runtime, _board_on(a, owned=False), max_entries=10)
        first = await board.put("plan", {"step": 1}, expected_version=0)
        assert (first.version, first.author, first.value) == (1, "python", {"step": 1})
        with pytest.raises(BoardConflictError) as caught:
            await board.put("plan", {"step": 2}, expected_version=0)
        assert (caught.value.key, caught.value.expected, caught.value.actual) == ("plan", 0, 1)
        assert "key 'plan' is at version 1, the write expected version 0" in str(caught.value)
        assert await board.list() == (first,)
        assert await board.delete("plan", expected_version=1) is True
        assert await board.get("plan") is None
        assert (await board.state()).deleted == {"plan": 2}
        # A handle asking for other limits than the owner's running board is refused there.
        other = await open_board(a.runtime, board.id, max_entries=20)
        with pytest.raises(RemoteBoardError) as refused:
            await other.get("plan")
        assert refused.value.code == "board.remote"
        assert refused.value.remote_code == "config.invalid"
        assert str(refused.value).startswith(
            f"board {board.id!r} failed on the node that owns it: [config.invalid] "
            f"board {board.id!r} is running with max_entries=10, not 20"
        )
        with pytest.raises(ConfigError, match=r"watch_actor names a live ref of one runtime"):
            await board.watch_actor(cast("ActorRef[object]", object()))


async def test_a_watcher_on_one_node_sees_the_puts_made_on_another(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, b):
        for board_id in (_board_on(a, owned=True), _board_on(a, owned=False)):
            writer = await open_board(a.runtime, board_id)
            watcher = await open_board(b.runtime, board_id)
            await writer.put("before", 0)  # before the watch: not delivered
            with trio.fail_after(10):
                async with watcher.watch(prefix="plan/") as changes:
                    await writer.put("other", 1)  # not watched
                    await writer.put("plan/1", "draft", author="planner")
                    await writer.delete("plan/1")
                    seen = [await changes.receive(), await changes.receive()]
            assert [(c.key, c.version, c.value, c.deleted, c.author) for c in seen] == [
                ("plan/1", 1, "draft", False, "planner"),
                ("plan/1", 2, None, True, "python"),
            ]
            assert [c.board_version for c in seen] == [3, 4]


async def test_a_board_keeps_its_data_when_its_owner_leaves(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _host(postgres_server, schema, "a") as a:
        async with _host(postgres_server, schema, "b") as b:
            await _split(a, b)
            board_id = _board_on(a, owned=False)
            board = await open_board(a.runtime, board_id)
            await board.put("count", 1, expected_version=0)
            assert _runs(b, board_id)
            assert not _runs(a, board_id)
        # b left: a takes its shards, and the board with them, from the log.
        with trio.fail_after(10):
            while not a.node.owns_target(f"board/{board_id}"):
                await a.node.change_event.wait()
        entry = await board.get("count")
        assert entry is not None
        assert (entry.value, entry.version) == (1, 1)
        assert (await board.put("count", 2, expected_version=1)).version == 2
        assert _runs(a, board_id)


async def test_a_session_watching_a_board_on_another_node_is_told_once(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, b):
        session = await a.create("worker", session_id=_session_on(b))
        await session.send("start", id="r1")  # runs on b
        board_id = _board_on(a, owned=True)
        watch = await (await open_board(b.runtime, board_id)).watch_session(session.id, keys=["go"])
        await (await open_board(a.runtime, board_id)).put("go", True, author="lead")
        told = f"board:{board_id}:2:go"  # the watch was the board's event 1
        with trio.fail_after(10):
            for _ in range(1000):
                if told in (await b._local[session.id].state()).seen_follow_ups:
                    break
                await trio.sleep(0.05)
        state = await b._local[session.id].state()
        assert told in state.seen_follow_ups
        board = await open_board(a.runtime, board_id)
        assert [w.watcher for w in (await board.state()).watches.values()] == [session.id]
        assert await board.unwatch_session(watch) is True


def _session_on(host: NodeHost) -> str:
    n = 0
    while not host.node.owns(f"s{n}"):
        n += 1
    return f"s{n}"


async def test_a_relayed_write_performed_again_by_the_next_owner_writes_nothing(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The owner appends a relayed write and dies before answering: the message stays
    pending, and the next owner performs it again. It finds the request in the log and
    answers as the first time (a compare-and-set does not report a conflict with itself)."""
    put = {"op": "put", "key": "count", "value": 1, "expected": 0, "author": "python"}
    delete = {"op": "delete", "key": "count", "expected": 1, "author": "python"}
    async with _host(postgres_server, schema, "a") as a:
        async with _host(postgres_server, schema, "b") as b:
            await _split(a, b)
            stream = f"board/{_board_on(a, owned=False)}"
            first = await perform_board_call(b.runtime, stream, _body(put, "m1"))
            assert orjson.loads(first)["ok"]["entry"]["version"] == 1
        with trio.fail_after(10):
            while not a.node.owns_target(stream):
                await a.node.change_event.wait()
        assert await perform_board_call(a.runtime, stream, _body(put, "m1")) == first
        # Another request with the same arguments is a new write: its CAS fails.
        other = orjson.loads(await perform_board_call(a.runtime, stream, _body(put, "m3")))
        assert other["error"]["code"] == "board.conflict"
        removed = await perform_board_call(a.runtime, stream, _body(delete, "m2"))
        assert await perform_board_call(a.runtime, stream, _body(delete, "m2")) == removed
        assert orjson.loads(removed) == {"ok": {"plain": True}}
        records = await a.runtime.store.read(stream)
        assert [(r.type, orjson.loads(r.data)["request"]) for r in records] == [
            ("board.entry_put", "m1"),
            ("board.entry_deleted", "m2"),
        ]


def _body(call: dict[str, object], request: str) -> bytes:
    return orjson.dumps({**call, "request": request})


async def test_a_watch_goes_on_across_a_failover_of_the_board(
    postgres_server: PostgresServer, schema: str
) -> None:
    seen: list[tuple[object, int]] = []
    first = trio.Event()

    async def watch(board: Board, *, task_status: trio.TaskStatus[None]) -> None:
        async with board.watch(keys=["k"]) as changes:
            task_status.started()
            async for change in changes:
                seen.append((change.value, change.version))
                first.set()
                if len(seen) == 2:
                    return

    async with _host(postgres_server, schema, "a") as a:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                async with _host(postgres_server, schema, "b") as b:
                    await _split(a, b)
                    board = await open_board(a.runtime, _board_on(a, owned=False))
                    await nursery.start(watch, board)
                    await board.put("k", 1)  # made by b
                    await first.wait()  # seen on a while b owned the board
                # b left: a takes the board over; the watch reads on from the log.
                while not a.node.owns_target(f"board/{board.id}"):
                    await a.node.change_event.wait()
                await board.put("k", 2)  # made by a
    assert seen == [(1, 1), (2, 2)]


async def test_a_board_moves_to_a_node_that_joins(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _host(postgres_server, schema, "a") as a:
        with trio.fail_after(10):
            while len(a.node.held) < 4:
                await a.node.change_event.wait()
        n = 0
        while a.node.shard_of_target(f"board/b{n}") < 2:  # a hands back its last shards
            n += 1
        board = await open_board(a.runtime, f"b{n}")
        await board.put("k", 1)
        assert _runs(a, board.id)
        async with _host(postgres_server, schema, "b") as b:
            await _split(a, b)
            entry = await board.put("k", 2, expected_version=1)  # relayed to b now
            assert (entry.value, entry.version) == (2, 2)
            assert not _runs(a, board.id)  # stopped when its shard was handed back
            assert _runs(b, board.id)
