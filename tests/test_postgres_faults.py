"""The PostgreSQL store through network faults: a server restarted under load, a commit
whose connection breaks, an outage longer than the store's retry deadline.

These tests stop and start a server of their own (not the session's shared one).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import _postgres
import psycopg
import pytest
import trio

from protocols.errors import StoreUnavailableError
from runtime import NewEvent
from runtime.postgres import PostgresEventStore, open_postgres_store
from runtime.testing import PostgresServer

WRITERS = 32


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server of this module's own, which its tests stop and restart."""
    yield from _postgres.serve_postgres()


@pytest.fixture
async def schema(server: PostgresServer) -> AsyncIterator[str]:
    name = _postgres.fresh_schema()
    yield name
    await _postgres.drop_schema(server, name)


def _event(writer: int, n: int) -> NewEvent:
    return NewEvent(type="t", schema_version=1, data=b'{"w":%d,"n":%d}' % (writer, n))


async def test_appends_ride_out_a_server_restart_under_load(
    server: PostgresServer, schema: str
) -> None:
    """32 tasks append while the server stops and starts: none sees an error, every
    acknowledged append is there afterwards, and none is written twice."""
    acked: list[list[int]] = [[] for _ in range(WRITERS)]
    restarted = trio.Event()
    done = trio.Event()
    reads_after_restart = 0
    progress = trio.lowlevel.ParkingLot()  # woken at each acknowledgement and read

    async def writer(store: PostgresEventStore, w: int) -> None:
        version = 0
        while not done.is_set():
            await store.append(f"w/{w}", [_event(w, version + 1)], version)
            version += 1
            acked[w].append(version)
            progress.unpark_all()

    async def reader(store: PostgresEventStore) -> None:
        nonlocal reads_after_restart
        while not done.is_set():
            await store.read("w/0")
            if restarted.is_set():
                reads_after_restart += 1
                progress.unpark_all()
            await trio.sleep(0.02)

    async def wait_for_each(more: list[int]) -> None:
        while any(len(acked[w]) < more[w] for w in range(WRITERS)):
            await progress.park()

    async with open_postgres_store(server.dsn(), schema=schema, retry_deadline=60) as store:
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for w in range(WRITERS):
                    nursery.start_soon(writer, store, w)
                nursery.start_soon(reader, store)
                await wait_for_each([3] * WRITERS)
                await trio.to_thread.run_sync(server.stop)
                at_stop = [len(a) for a in acked]
                await trio.sleep(1.0)  # the outage: appends and reads wait and retry
                await trio.to_thread.run_sync(server.start)
                restarted.set()
                await wait_for_each([n + 3 for n in at_stop])
                while reads_after_restart < 2:
                    await progress.park()
                done.set()
        assert store._writer.retrying.failures > 0  # the writer did meet the outage
        assert store._read_retrying.failures > 0  # and so did a reader
        for w in range(WRITERS):
            events = await store.read(f"w/{w}")
            assert [e.version for e in events] == list(range(1, len(events) + 1))
            assert [e.data for e in events] == [_event(w, e.version).data for e in events]
            assert acked[w] == list(range(1, len(acked[w]) + 1))
            assert len(events) == len(acked[w])  # every acknowledged one, nothing more


class _BreaksAtCommit:
    """The writer's connection, lost as ``COMMIT`` is sent, in one of three ways:
    ``landed`` (the commit reached the server), ``lost`` (it did not; the server saw the
    connection close and rolled back) or ``cut`` (it did not, and the server never saw
    the connection end: its process waits in the transaction, holding its rows' locks,
    as behind a network cut)."""

    def __init__(self, conn: psycopg.Connection, how: str) -> None:
        self.real = conn
        self._how = how
        self._gone = False

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT":
            if self._how == "landed":
                self.real.execute("COMMIT")
            self.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return self.real.execute(query, *args, **kwargs)

    def close(self) -> None:
        self._gone = True
        if self._how != "cut":
            self.real.close()

    @property
    def closed(self) -> bool:
        return self._gone

    @property
    def broken(self) -> bool:
        return self._gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("how", ["landed", "lost", "cut"])
async def test_a_commit_in_doubt_is_settled_by_its_transaction_id(
    server: PostgresServer, schema: str, how: str
) -> None:
    """The connection breaks during ``COMMIT``: the writer asks the server whether the
    transaction committed. If it did, the append is acknowledged as is; if not, it is
    written again; behind a cut, the lost connection's server process is ended first
    (else it would hold the versions' locks and the answer for hours). Either way the
    event is stored exactly once."""
    async with open_postgres_store(server.dsn(), schema=schema) as store:
        await store.append("s", [_event(0, 1)], 0)
        writer = store._writer
        assert writer._conn is not None
        broken = _BreaksAtCommit(writer._conn, how)
        writer._conn = broken  # type: ignore[assignment]  # a test double
        try:
            with trio.fail_after(30):
                result = await store.append("s", [_event(0, 2)], 1)
        finally:
            broken.real.close()
        assert result.version == 2
        assert [e.data for e in await store.read("s")] == [_event(0, 1).data, _event(0, 2).data]
        # Settled by asking, or written again after one failed try.
        assert writer.retrying.failures == (0 if how == "landed" else 1)
        assert store.statistics().failed_appends == 0


async def test_an_outage_longer_than_the_deadline_is_reported(
    server: PostgresServer, schema: str
) -> None:
    """Past ``retry_deadline`` appends and reads raise ``store.unavailable``, saying how
    long the store tried and that nothing was written; once the server is back, the
    same append goes through."""
    async with open_postgres_store(server.dsn(), schema=schema, retry_deadline=1.0) as store:
        await store.append("s", [_event(0, 1)], 0)
        await trio.to_thread.run_sync(server.stop)
        try:
            with pytest.raises(StoreUnavailableError) as appending:
                await store.append("s", [_event(0, 2)], 1)
            with pytest.raises(StoreUnavailableError) as reading:
                await store.read("s")
        finally:
            await trio.to_thread.run_sync(server.start)
        where = f"{server.host}:{server.port}/{server.database}"
        for caught in (appending.value, reading.value):
            assert caught.code == "store.unavailable"
            assert 0 < caught.retried_for <= 1.0
            assert not caught.outcome_unknown
            assert re.fullmatch(
                rf"event store server {re.escape(where)} (cannot be reached|dropped the "
                r"connection), still after retrying for \d\.\ds \(.+\); nothing was "
                r"written; retry once the server is back",
                str(caught),
            ), str(caught)
        assert store.statistics().failed_appends == 1
        result = await store.append("s", [_event(0, 2)], 1)  # version 2 is still free
        assert result.version == 2
        assert [e.version for e in await store.read("s")] == [1, 2]


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux socket options")
async def test_connections_give_up_on_a_silent_network_in_seconds(
    server: PostgresServer, schema: str
) -> None:
    """A server that vanishes without closing the connection is noticed by the kernel in
    about ten seconds (keepalives, ``tcp_user_timeout``), not after minutes of TCP
    retransmissions; an option the connection string sets wins."""
    dsn = server.dsn() + " keepalives_idle=7"
    async with open_postgres_store(dsn, schema=schema) as store:
        conn = store._writer._conn
        assert conn is not None
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 10_000
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 2
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3


def test_the_outage_bench_reports_no_loss_and_the_stall_beside_the_restart() -> None:
    """``python -m runtime.bench outage --quick``: a restart under 64 writers loses and
    duplicates nothing, no error reaches a writer, and the stall is printed beside the
    restart's own length."""
    import argparse

    from runtime.bench._outage import run

    figures = run(argparse.Namespace(quick=True, json=True))
    assert "skipped" not in figures, figures
    assert (figures["lost"], figures["duplicates"], figures["append_errors"]) == (0, 0, 0)
    assert figures["stored"] == figures["acked"]
    assert int(figures["writer_retries"]) > 0  # the writers did meet the outage
    assert float(figures["restart_s"]) > 0
    assert float(figures["append_stall_s"]) > 0
