"""Following a SQLite log's head across processes: the file's change counter.

``PRAGMA data_version`` on a connection moves whenever another connection commits to the
file (another process, or this store's own writer thread), and asking it costs no read
of the log; the head is read only when it moved.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncGenerator, Callable

import trio

from .._store._contract import CommitSignal
from .._virtual_time import run_in_thread
from ._schema import connect, map_errors, read_head

__all__ = ["WATCH_POLL_SECONDS", "watch_head"]

WATCH_POLL_SECONDS = 0.1
"""How often a watcher of the head asks the file whether another process committed: a
page of the console shows another process's append within this and a read."""


async def watch_head(
    path: str, signal: CommitSignal, closing: Callable[[], bool]
) -> AsyncGenerator[int, None]:
    """The head now, then each newer head, until ``closing()``; see
    ``EventStore.changes``. The store's own commits (``signal``) wake it at once."""
    conn = await run_in_thread(functools.partial(_connection, path))
    try:
        counter: int | None = None
        last = -1
        while not closing():
            counter, head = await run_in_thread(functools.partial(_look, path, conn, counter))
            if head is not None and head > last:
                last = head
                yield head
            with trio.move_on_after(WATCH_POLL_SECONDS):
                await signal.wait_beyond(max(last, signal.head))
    finally:
        conn.close()


def _connection(path: str) -> sqlite3.Connection:
    with map_errors(path):
        return connect(path, read_only=True)


def _look(path: str, conn: sqlite3.Connection, seen: int | None) -> tuple[int, int | None]:
    """The change counter, and the head if the counter is not ``seen``."""
    with map_errors(path):
        now = int(conn.execute("PRAGMA data_version").fetchone()[0])
        return now, (None if now == seen else read_head(conn))
