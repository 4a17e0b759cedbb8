"""Which fleet nodes hold their lease now, so a status can call the others ``lost``.

``powertrio fleet status`` and the console's fleet page both call :func:`with_leases`: the
log alone cannot tell a node killed with SIGKILL (it records nothing) from one still
running, so both ask the same lease, and say the same thing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from runtime import EventStore

from ._events import FleetStatus

__all__ = ["driver_lock_held", "driver_lock_holder", "driver_lock_path", "with_leases"]


def driver_lock_path(db: Path) -> Path:
    """The SQLite log's driver lock file (``<db>.lock``)."""
    return db.with_name(db.name + ".lock")


def driver_lock_held(db: Path) -> bool:
    """Whether a process holds the SQLite log's driver lock right now (its runs are live)."""
    try:
        import fcntl  # noqa: PLC0415  # POSIX only
    except ImportError:  # pragma: no cover
        return False
    path = driver_lock_path(db)
    if not path.exists():
        return False
    with path.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def driver_lock_holder(db: Path) -> str | None:
    """Who holds the SQLite log's driver lock right now, as it wrote itself in the lock
    file (``pid N (`powertrio serve`)``), or ``None`` when no process holds it."""
    if not driver_lock_held(db):
        return None
    with contextlib.suppress(OSError):
        return driver_lock_path(db).read_text(encoding="utf-8").strip() or None
    return None


async def live_nodes(store: EventStore, status: FleetStatus) -> frozenset[str] | None:
    """The nodes of ``status`` whose lease holds now, or ``None`` when ``store`` keeps no
    lease (a log in memory).

    On PostgreSQL, those whose heartbeat lease has not lapsed; on SQLite the one node
    holding the log's driver lock (the kernel drops it when its process dies, however it
    dies), known by the pid it recorded.

    Raises:
        StoreUnavailableError: the PostgreSQL server cannot be reached.
    """
    from runtime import SqliteEventStore  # noqa: PLC0415
    from runtime.postgres import PostgresEventStore  # noqa: PLC0415

    if isinstance(store, PostgresEventStore):
        from runtime.lowlevel import live_nodes as heartbeats  # noqa: PLC0415

        return frozenset(await heartbeats(store))
    if isinstance(store, SqliteEventStore):
        holder = driver_lock_holder(Path(store.path))
        if holder is None:
            return frozenset()
        return frozenset(n.name for n in status.nodes if holder.startswith(f"pid {n.pid} "))
    return None


async def with_leases(store: EventStore, status: FleetStatus) -> FleetStatus:
    """``status``, with each node the log has running or draining but whose lease lapsed
    marked ``lost`` (unchanged where ``store`` keeps no lease).

    Raises:
        StoreUnavailableError: the PostgreSQL server cannot be reached.
    """
    live = await live_nodes(store, status)
    return status if live is None else status.with_live_nodes(live)
