"""Sessions on a fleet: placed by id, reached from any node, resumed by the next owner."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager

import _cluster_agents
import _postgres
import psycopg
import pytest
import trio

from actors.cluster import NodeHost, RemoteSessionError, host_node
from protocols.errors import ConfigError
from runtime import open_runtime
from runtime.testing import PostgresServer


def _host(server: PostgresServer, schema: str, name: str) -> AbstractAsyncContextManager[NodeHost]:
    return _postgres.node_host(server, schema, name, _cluster_agents.catalog())


_split = _postgres.wait_for_split


def _two_nodes(
    server: PostgresServer, schema: str
) -> AbstractAsyncContextManager[tuple[NodeHost, NodeHost]]:
    return _postgres.two_nodes(server, schema, _cluster_agents.catalog())


def _session_in(host: NodeHost, *, owned: bool) -> str:
    n = 0
    while host.node.owns(f"s{n}") != owned:
        n += 1
    return f"s{n}"


async def test_host_node_needs_a_node() -> None:
    async with open_runtime() as runtime:
        with pytest.raises(ConfigError, match=r"host_node needs a runtime opened with node="):
            async with host_node(runtime, {}):
                pass


async def test_sends_reach_sessions_on_either_node(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, b):
        local = await a.create("worker", session_id=_session_in(a, owned=True))
        remote = await a.create("worker", session_id=_session_in(a, owned=False))
        for session in (local, remote):
            result = await session.send("task one", id="r1")
            assert (result.status, result.text, result.run_id) == (
                "completed",
                "answer (done: task one)",
                "r1",
            )
            # The same id again is the same run, from either node.
            again = await (await b.session(session.id)).send("ignored", id="r1")
            assert again == result
        assert remote.id in b.sessions
        assert remote.id not in a.sessions
        assert await remote.follow_up("more", id="f1") is True
        # A repeat is the same inbox message: it gets the first answer, and does nothing.
        assert await remote.follow_up("more", id="f1") is True
        state = await b._local[remote.id].state()
        assert "f1" in state.seen_follow_ups
        assert await remote.cancel() in (True, False)


async def test_a_failure_on_the_owner_comes_back_typed(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _two_nodes(postgres_server, schema) as (a, _b):
        remote = await a.create("worker", session_id=_session_in(a, owned=False))
        await remote.send("hello", id="r1")
        with pytest.raises(RemoteSessionError) as caught:
            await remote.reply("q9", "yes")
        assert caught.value.code == "session.remote"
        assert caught.value.remote_code == "session.unknown_request"
        assert str(caught.value).startswith(
            f"session {remote.id!r} failed on the node that owns it: [session.unknown_request] "
        )


async def test_placement_is_checked(postgres_server: PostgresServer, schema: str) -> None:
    async with _host(postgres_server, schema, "a") as a:
        with pytest.raises(ConfigError, match=r"agent 'nobody' is not in this node's catalog"):
            await a.create("nobody")
        with pytest.raises(LookupError, match=r"no session 'missing' in this fleet"):
            await a.session("missing")


async def test_the_next_owner_resumes_the_sessions_of_a_node_that_left(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with _host(postgres_server, schema, "a") as a:
        async with _host(postgres_server, schema, "b") as b:
            await _split(a, b)
            moving = await a.create("worker", session_id=_session_in(a, owned=False))
            first = await moving.send("before", id="r1")
        # b left: a takes its shards and spawns their sessions again.
        with trio.fail_after(10):
            for _ in range(1000):
                if moving.id in a.sessions:
                    break
                await trio.sleep(0.05)
        assert await moving.send("whatever", id="r1") == first
        after = await moving.send("after", id="r2")
        assert after.text == "answer (done: after)"


async def test_a_timer_fires_once_on_the_node_that_took_its_session_over(
    postgres_server: PostgresServer, schema: str
) -> None:
    """Node b schedules a wake-up and leaves before it is due: node a learns the timer
    from the log when it takes the session, and fires it, once."""
    async with _host(postgres_server, schema, "a") as a:
        async with _host(postgres_server, schema, "b") as b:
            await _split(a, b)
            moving = await a.create("sleeper", session_id=_session_in(a, owned=False))
            await moving.send("nap", id="r1")  # runs on b; its wake-up is due in 1 s
            assert moving.id in b.sessions
        with trio.fail_after(20):
            for _ in range(2000):
                if any(r.type == "timer.fired" for r in await a.runtime.store.read_all()):
                    break
                await trio.sleep(0.05)
        state = await a._local[moving.id].state()
        assert state.timers.pending == ()
        records = await a.runtime.store.read(f"session/{moving.id}")
        assert [r.type for r in records].count("timer.scheduled") == 1
        assert [r.type for r in records].count("timer.fired") == 1


async def test_a_session_fenced_while_its_node_keeps_the_shard_fires_its_timer(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The node's leases lapse again and again (a stalled node), but no other node takes
    them: the session's writes are fenced as its wake-up comes due. Each fenced crash
    waits for the next lease round instead of using up the session's restarts, so once
    the leases hold again the session is back and its timer fires, once."""
    async with _host(postgres_server, schema, "a") as a:
        session = await a.create("sleeper", session_id="s0")
        await session.send("nap", id="r1")  # its wake-up is due in 1 s

        def lapse() -> None:
            # Hold the node's lease rounds back (each starts by renewing its heartbeat),
            # and let its leases expire; no other node takes them.
            with (
                psycopg.connect(postgres_server.dsn(), autocommit=True) as rounds,
                psycopg.connect(postgres_server.dsn(), autocommit=True) as leases,
            ):
                for conn in (rounds, leases):
                    conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
                rounds.execute("BEGIN")
                rounds.execute("LOCK TABLE cluster_nodes IN SHARE ROW EXCLUSIVE MODE")
                leases.execute(
                    "UPDATE shard_leases SET expires_at = clock_timestamp() - "
                    "interval '1 second' WHERE node = 'a'"
                )
                time.sleep(2.5)
                rounds.execute("COMMIT")

        await trio.to_thread.run_sync(lapse)
        assert a.node.fenced_appends > 0  # the wake-up came due while fenced
        with trio.fail_after(20):
            for _ in range(2000):
                if any(r.type == "timer.fired" for r in await a.runtime.store.read_all()):
                    break
                await trio.sleep(0.05)
        state = await a._local[session.id].state()
        assert state.timers.pending == ()
        records = await a.runtime.store.read(f"session/{session.id}")
        assert [r.type for r in records].count("timer.fired") == 1
