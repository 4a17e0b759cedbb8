"""Leases and the fence: nodes sharing one PostgreSQL log split its shards, and a node that
lost a shard writes nothing to it (``store.fenced``)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TypeVar

import _postgres
import psycopg
import pytest
import trio
from _wait import wait_until_async

from protocols.errors import ConfigError, FencedError
from runtime import NewEvent, Runtime, open_runtime
from runtime._cluster._node import placement_key, shard_of
from runtime.cluster import Node
from runtime.postgres import open_postgres_store
from runtime.testing import PostgresServer

T = TypeVar("T")


@pytest.fixture
async def schema(postgres_server: PostgresServer) -> AsyncIterator[str]:
    name = _postgres.fresh_schema()
    yield name
    await _postgres.drop_schema(postgres_server, name)


@asynccontextmanager
async def _node(server: PostgresServer, schema: str, node: Node) -> AsyncIterator[Runtime]:
    async with (
        open_postgres_store(server.dsn(), schema=schema) as store,
        open_runtime(store=store, node=node) as runtime,
    ):
        yield runtime


async def _until(done: Callable[[], bool]) -> None:
    """Wait (10 s at most) until ``done()``: leases move at the nodes' own pace."""
    with trio.fail_after(10):
        for _ in range(1000):
            if done():
                return
            await trio.sleep(0.05)


def _event() -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b"{}")


def _stream_in(shard: int, shards: int) -> str:
    """A session stream whose key falls in ``shard``."""
    n = 0
    while shard_of(f"ses_{n}", shards) != shard:
        n += 1
    return f"session/ses_{n}"


def test_placement_key_puts_a_tree_in_its_roots_shard() -> None:
    assert placement_key("session/ses_a.1.2") == "ses_a"
    assert placement_key("session/ses_a") == "ses_a"
    # A board is placed by its whole id (dots included), apart from sessions of that name.
    assert placement_key("board/main.v2") == "board:main.v2"
    assert placement_key("workflow/w1") is None
    assert placement_key("timers") is None
    assert placement_key("board/main", ("session",)) is None
    # A kind of several segments places only its own streams.
    placed = ("session", "fleet/agent")
    assert placement_key("fleet/agent/digest", placed) == "fleet/agent:digest"
    assert placement_key("fleet/node/a", placed) is None
    assert placement_key("fleet", placed) is None
    assert placement_key("fleet/agent/", placed) is None


def test_node_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"ttl must be a number of seconds from 0\.1 to 600"):
        Node(name="a", ttl=0)
    with pytest.raises(ValueError, match="shards must be an int from 1 to 4096, got 0"):
        Node(name="a", shards=0)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Node(name="")
    with pytest.raises(ValueError, match="poll_interval must be a positive number"):
        Node(name="a", poll_interval=-1)


async def test_a_node_needs_a_postgres_store() -> None:
    with pytest.raises(ConfigError, match=r"open_runtime\(node=\.\.\.\) needs a PostgreSQL store"):
        async with open_runtime(node=Node(name="a")):
            pass


async def test_a_lone_node_holds_every_shard_and_appends(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _node(postgres_server, schema, Node(name="a", shards=4)) as runtime:
        assert runtime.node is not None
        assert sorted(runtime.node.held) == [0, 1, 2, 3]
        result = await runtime.store.append("session/ses_x", [_event()], 0)
        assert result.version == 1
        # Unplaced streams are not fenced.
        await runtime.store.append("board/main", [_event()], 0)


async def test_two_nodes_split_the_shards(postgres_server: PostgresServer, schema: str) -> None:
    async with _node(postgres_server, schema, Node(name="a", shards=4, ttl=0.6)) as a:
        assert a.node is not None
        async with _node(postgres_server, schema, Node(name="b", shards=4, ttl=0.6)) as b:
            assert b.node is not None
            await _until(lambda: len(b.node.held) == 2 == len(a.node.held))
            assert set(a.node.held).isdisjoint(b.node.held)
            # A stream of b's shard: a may not write it.
            stream = _stream_in(min(b.node.held), 4)
            with pytest.raises(FencedError) as caught:
                await a.store.append(stream, [_event()], 0)
            assert caught.value.code == "store.fenced"
            assert str(caught.value) == (
                f"node 'a' may not write stream {stream!r}: this node does not hold its "
                f"shard's lease (shard {min(b.node.held)}); nothing was written, the "
                "shard's current owner serves it"
            )
            await b.store.append(stream, [_event()], 0)
        # b left in order: a takes its shards back.
        await _until(lambda: len(a.node.held) == 4)


async def test_appends_waiting_for_a_paused_writers_lock_keep_the_lease(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Another process holds the position lock for twice the TTL (a node paused inside
    its insert): this node's appends wait for it, and its lease rounds go on meanwhile,
    so no lease lapses and nothing is fenced."""
    from runtime._postgres._schema import lock_key

    ttl = 0.6
    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=ttl)) as runtime:
        assert runtime.node is not None
        locked, release = threading.Event(), threading.Event()
        locked_at: list[datetime] = []

        def pause_holding_the_lock() -> None:
            with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
                row = conn.execute("SELECT clock_timestamp()").fetchone()
                assert row is not None
                locked_at.append(row[0])
                locked.set()
                release.wait(30)
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(schema),))
                conn.execute("COMMIT")

        def renewed_a_ttl_after_the_lock() -> bool:
            """Every lease of node a expires more than two TTLs after the lock was taken:
            renewed more than a TTL into the pause, past where unrenewed it would lapse."""
            with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
                conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
                row = conn.execute(
                    "SELECT count(*), min(expires_at) FROM shard_leases WHERE node = 'a'"
                ).fetchone()
            assert row is not None
            held, first_to_lapse = row
            return bool(held == 2 and first_to_lapse > locked_at[0] + timedelta(seconds=2 * ttl))

        async def renewed() -> bool:
            return await trio.to_thread.run_sync(renewed_a_ttl_after_the_lock)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, pause_holding_the_lock)
            await trio.to_thread.run_sync(locked.wait, 30)
            waiting, appended = trio.Event(), trio.Event()

            async def first_append() -> None:
                waiting.set()
                await runtime.store.append(_stream_in(0, 2), [_event()], 0)
                appended.set()

            nursery.start_soon(first_append)
            await waiting.wait()
            await wait_until_async(renewed, "node a's lease rounds to go on under the lock")
            assert not appended.is_set()  # the append waited for the lock all along
            release.set()
        # Right after: both shards still take appends under the same epochs.
        for shard, expected in ((0, 1), (1, 0)):
            result = await runtime.store.append(_stream_in(shard, 2), [_event()], expected)
            assert result.version == expected + 1
        assert runtime.node.fenced_appends == 0
        assert sorted(runtime.node.held) == [0, 1]


async def test_a_stale_epoch_is_fenced_in_the_commit(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The node believes it holds the shard, but another took it over: the commit refuses."""
    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=30)) as runtime:
        node = runtime.node
        assert node is not None
        stream = _stream_in(0, 2)
        await runtime.store.append(stream, [_event()], 0)
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
            conn.execute("UPDATE shard_leases SET node = 'b', epoch = epoch + 1 WHERE shard = 0")
        assert 0 in node.held  # not renewed yet: the node still believes
        with pytest.raises(FencedError) as caught:
            await runtime.store.append(stream, [_event()], 1)
        assert str(caught.value) == (
            f"node 'a' may not write stream {stream!r}: its lease of epoch "
            f"{node.held[0]} has expired or was taken over (shard 0); nothing was written, "
            "the shard's current owner serves it"
        )
        assert await runtime.store.stream_version(stream) == 1
        # Other shards' appends in the same group go through.
        await runtime.store.append(_stream_in(1, 2), [_event()], 0)


def _lease_row(server: PostgresServer, schema: str, shard: int) -> tuple[str | None, int]:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        row = conn.execute(
            "SELECT node, epoch FROM shard_leases WHERE shard = %s", (shard,)
        ).fetchone()
    assert row is not None
    return row[0], int(row[1])


def _waiting_for_lock(server: PostgresServer, key: int) -> bool:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        ).fetchone()
    return row is not None and int(row[0]) > 0


async def test_a_shard_is_handed_back_only_after_the_appends_that_checked_its_lease_commit(
    postgres_server: PostgresServer, schema: str
) -> None:
    """An append checked its lease and waits for the position lock (another process holds
    it, like a node paused inside its insert) when its node hands the shard back: the
    lease row keeps naming the node until that append has committed, and is handed back
    right after. Else the append would commit after its node released the lease."""
    from runtime._postgres._schema import lock_key

    key = lock_key(schema)
    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=0.6)) as runtime:
        node = runtime.node
        assert node is not None
        epoch = node.held[1]
        stream = _stream_in(1, 2)
        locked, unlock = threading.Event(), threading.Event()

        def pause_holding_the_lock() -> None:
            with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                locked.set()
                unlock.wait(30)
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

        versions: list[int] = []

        async def append() -> None:
            versions.append((await runtime.store.append(stream, [_event()], 0)).version)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, pause_holding_the_lock)
            await trio.to_thread.run_sync(locked.wait, 30)
            nursery.start_soon(append)
            await wait_until_async(
                lambda: trio.to_thread.run_sync(_waiting_for_lock, postgres_server, key),
                "the append, its lease checked, waiting for the position lock",
                timeout=10,
            )
            await node.release({1: epoch})
            while_in_flight = await trio.to_thread.run_sync(_lease_row, postgres_server, schema, 1)
            unlock.set()
        assert versions == [1]  # the append was made under the lease: it commits
        assert while_in_flight == ("a", epoch), (
            f"shard 1 was handed back ({while_in_flight}) while an append that checked "
            "its lease was in flight: that append committed after its node released it"
        )
        # Once the append committed, a later round hands the shard back.
        await wait_until_async(
            lambda: trio.to_thread.run_sync(
                lambda: _lease_row(postgres_server, schema, 1) != ("a", epoch)
            ),
            "shard 1 handed back after the append committed",
            timeout=10,
        )
        assert 1 not in node.held or node.held[1] > epoch


async def test_every_node_must_use_the_same_shard_count(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _node(postgres_server, schema, Node(name="a", shards=4)):
        pass
    with pytest.raises(ConfigError, match=r"this log is split into 4 shards, the node asks for 8"):
        async with _node(postgres_server, schema, Node(name="b", shards=8)):
            pass


async def test_old_answers_are_pruned_pending_messages_kept(
    postgres_server: PostgresServer, schema: str
) -> None:
    from runtime._cluster import _sql as sql

    async with _node(postgres_server, schema, Node(name="a", shards=2)):
        pass
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        for message in ("old", "new", "pending"):
            sql.post_message(conn, "ch", message, target="s", shard=0, body=b"{}")
        sql.answer_message(conn, "ch", "old", b"1")
        sql.answer_message(conn, "ch", "new", b"2")
        conn.execute("UPDATE inbox SET answered_at = now() - interval '2 hours' WHERE id = 'old'")
        assert sql.prune_answers(conn, 3600) == 1
        assert sql.read_replies(conn, ["old", "new", "pending"]) == {"new": b"2"}
        assert sql.pending_messages(conn, [0], 10) == [("pending", "s", b"{}")]
        assert sql.pending_messages(conn, [0], 10, ["pending"]) == []


async def test_a_lost_shard_stops_its_actors_without_a_host(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Another node took the shard over: the next lease round stops the local owner."""
    from actors import spawn_session
    from protocols import LLMResponse
    from runtime.testing import FunctionLLM

    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=0.6)) as runtime:
        assert runtime.node is not None
        session_id = _stream_in(0, 2).removeprefix("session/")
        llm = FunctionLLM(lambda request: LLMResponse(content="hi"))
        session = await spawn_session(runtime, llm=llm, session_id=session_id)
        await session.send("hello")
        assert session.ref.alive
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
            conn.execute(
                "UPDATE shard_leases SET node = 'b', epoch = epoch + 1, "
                "expires_at = now() + interval '1 hour' WHERE shard = 0"
            )
        await _until(lambda: not session.ref.alive)
        assert 0 not in runtime.node.held
        assert runtime.node.fenced_appends == 0  # stopped before it tried to write


async def test_an_actor_fenced_off_a_lost_shard_stops_without_a_crash_loop(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Another node took the shard, and the local session writes before the next lease
    round tells its node: the append is fenced, and the session waits for that round
    (one restart scheduled, none used up), which stops it for good."""
    from actors import spawn_session
    from protocols import LLMResponse
    from protocols.errors import ActorStoppedError
    from runtime.supervision import ActorRestarting
    from runtime.testing import FunctionLLM

    ttl = 0.6
    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=ttl)) as runtime:
        assert runtime.node is not None
        session_id = _stream_in(0, 2).removeprefix("session/")
        llm = FunctionLLM(lambda request: LLMResponse(content="hi"))
        session = await spawn_session(runtime, llm=llm, session_id=session_id)
        await session.send("hello")

        async def send_again() -> None:
            with pytest.raises(ActorStoppedError):  # its run's append is fenced
                await session.send("again")

        with (
            runtime.subscribe() as lifecycle,
            psycopg.connect(postgres_server.dsn(), autocommit=True) as rounds,
            psycopg.connect(postgres_server.dsn(), autocommit=True) as leases,
        ):
            for conn in (rounds, leases):
                conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
            async with trio.open_nursery() as nursery:
                # The node's lease rounds wait (each starts by renewing its heartbeat)
                # while another node takes the shard: the session writes before its
                # node knows, and waits for the next round.
                rounds.execute("BEGIN")
                rounds.execute("LOCK TABLE cluster_nodes IN SHARE ROW EXCLUSIVE MODE")
                leases.execute(
                    "UPDATE shard_leases SET node = 'b', epoch = epoch + 1, "
                    "expires_at = now() + interval '1 hour' WHERE shard = 0"
                )
                nursery.start_soon(send_again)
                await _until(lambda: runtime.node is not None and runtime.node.fenced_appends > 0)
                rounds.execute("COMMIT")  # the round finds the shard lost, stops the session
            await _until(lambda: not session.ref.alive)
            await trio.sleep(2 * ttl)  # nothing comes back
            restarts = _drain(lifecycle, ActorRestarting)
        assert runtime.node.fenced_appends >= 1
        assert len(restarts) == 1
        assert not session.ref.alive


async def test_an_actor_fenced_off_a_shard_its_node_knows_lost_is_handed_over(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The node knows it does not hold the shard, and an actor of it writes anyway: it
    stops for good at once, with no restart, and calls to it fail with the fence as the
    cause (a host sends them to the shard's owner)."""
    from actors import spawn_session
    from protocols import LLMResponse
    from protocols.errors import ActorFailedError
    from runtime.supervision import ActorRestarting
    from runtime.testing import FunctionLLM

    async with _node(postgres_server, schema, Node(name="a", shards=2, ttl=0.6)) as runtime:
        node = runtime.node
        assert node is not None
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
            conn.execute(
                "UPDATE shard_leases SET node = 'b', epoch = epoch + 1, "
                "expires_at = now() + interval '1 hour' WHERE shard = 1"
            )
        await _until(lambda: 1 not in node.held)
        session_id = _stream_in(1, 2).removeprefix("session/")
        llm = FunctionLLM(lambda request: LLMResponse(content="hi"))
        with runtime.subscribe() as lifecycle:
            session = await spawn_session(runtime, llm=llm, session_id=session_id)
            with pytest.raises(ActorFailedError) as caught, trio.fail_after(10):
                await session.send("hello")  # a restart loop would keep it waiting
            await trio.sleep(0.5)
            restarts = _drain(lifecycle, ActorRestarting)
        assert caught.value.cause_code == FencedError.code
        assert restarts == []
        assert not session.ref.alive


def _drain(channel: trio.MemoryReceiveChannel[object], kind: type[T]) -> list[T]:
    """What ``channel`` holds now, of ``kind``."""
    found: list[T] = []
    while True:
        try:
            item = channel.receive_nowait()
        except trio.WouldBlock:
            return found
        if isinstance(item, kind):
            found.append(item)
