"""A named lock on a PostgreSQL server, held by a connection of its own while a block runs.

The ``powertrio`` CLI lets one process drive the sessions of a log at a time; on SQLite
that is an advisory file lock beside the log, on PostgreSQL it is this: a session-level
advisory lock, which the server releases by itself when the holder's connection ends
(a killed process never leaves it behind). The holder names itself in its connection's
``application_name``, so a refused taker can say who holds it.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator

from protocols.errors import StoreLockedError

from ._schema import check_dsn, connect, describe, map_errors

__all__ = ["postgres_lock", "postgres_lock_held"]

_HOLDER = (
    "SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _key(name: str) -> int:
    digest = hashlib.sha256(b"powertrio-lock/" + name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _halves(key: int) -> tuple[int, int]:
    """How ``pg_locks`` shows a bigint advisory key: high and low 32 bits (unsigned)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


@contextlib.contextmanager
def postgres_lock(
    dsn: str, name: str, *, holder: str, wait: float = 1.0, connect_timeout: float = 10.0
) -> Iterator[None]:
    """Hold the advisory lock ``name`` in ``dsn``'s database for the length of the block.

    Args:
        dsn (str): a libpq connection string or URI.
        name (str): the lock's name (one lock per name and database).
        holder (str): who holds it, shown to whoever is refused (e.g. ``pid 12 (run)``).
        wait (float): seconds to keep trying before giving up.
        connect_timeout (float): seconds to wait for the connection.

    Raises:
        BadConnectionStringError: ``dsn`` does not parse.
        StoreUnavailableError: the server cannot be reached.
        StoreRefusedError: the server refused the connection.
        StoreLockedError: another connection holds the lock (named by its holder).
    """
    check_dsn(dsn)
    server = describe(dsn)
    key = _key(name)
    conn = connect(dsn, "public", server=server, connect_timeout=connect_timeout)
    try:
        with map_errors(server):
            conn.execute("SELECT set_config('application_name', %s, false)", (holder[:63],))
            deadline = time.monotonic() + wait
            while True:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if row is not None and row[0]:
                    break
                if time.monotonic() >= deadline:
                    raise StoreLockedError(f"{server} ({name})", _holder(conn, key))
                time.sleep(0.05)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # a lost connection released it anyway
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        conn.close()


def _holder(conn: object, key: int) -> str:
    import psycopg  # noqa: PLC0415  # the optional extra

    assert isinstance(conn, psycopg.Connection)
    row = conn.execute(_HOLDER, _halves(key)).fetchone()
    if row is None:
        return "another process"
    application, pid = row
    return str(application) if application else f"server process {pid}"


def postgres_lock_held(dsn: str, name: str, *, connect_timeout: float = 10.0) -> bool:
    """Whether some connection holds the advisory lock ``name`` right now.

    Raises:
        BadConnectionStringError, StoreUnavailableError, StoreRefusedError: as
            :func:`postgres_lock`.
    """
    check_dsn(dsn)
    server = describe(dsn)
    conn = connect(dsn, "public", server=server, connect_timeout=connect_timeout)
    try:
        with map_errors(server):
            return conn.execute(_HOLDER, _halves(_key(name))).fetchone() is not None
    finally:
        conn.close()
