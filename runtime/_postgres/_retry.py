"""Riding out a PostgreSQL outage: retry within a deadline, and settle commits left in doubt.

A server restart, a failover or a dropped network path is a few seconds of
``StoreUnavailableError`` (``connect``, ``lost`` or ``timeout``); the store retries such
calls with a growing pause until its deadline (``retry_deadline``, 30 s by default), so
callers see the outage only when it lasts longer than that, and then as that same typed
error saying how long the store tried. A server that answers but refuses us
(``StoreRefusedError``) or any other error is never retried: waiting does not fix it.

What is retried, and why it is safe:

* reads: they change nothing;
* a group of appends whose connection failed *before* its ``COMMIT`` was sent: the
  server rolls the transaction back when the connection ends, so nothing was written and
  the group is planned again from the streams' current versions;
* a group whose connection failed *during* ``COMMIT`` (the outcome is unknown): the
  writer asks the server, on a new connection, for the fate of the transaction's id
  (``pg_xact_status``); committed means acknowledged, aborted means retry as above. So an
  acknowledged append is durable and none is written twice;
* maintenance writes that are idempotent (snapshots, checkpoints, deletions).

Behind a network cut the server may not notice the lost connection for hours: its
process stays in the transaction, holding the locks of the rows it inserted (a retry of
the same versions would wait on them) and leaving the commit's fate ``in progress``. So
the writer remembers its connection's server process, and the next connection ends it
(``end_orphan``) before anything else.

During a long outage the writer does not spend a whole deadline on every queued group:
the deadline counts from the first failure of the outage, so the groups failing after it
share it (together they never wait past it, the last ones give up after one try), and
the first success ends the outage.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, final

import attrs
import trio

from protocols.errors import StoreUnavailableError

from ._schema import map_errors

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "DEFAULT_RETRY_DEADLINE",
    "Backend",
    "Retrying",
    "end_orphan",
    "identify",
    "xact_committed",
]

T = TypeVar("T")

DEFAULT_RETRY_DEADLINE = 30.0
"""Seconds a store keeps retrying through an outage by default: longer than a restart or
a managed failover usually takes, short enough that a caller hears of a real outage."""

_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 0.5
"""The longest pause between two tries: at most this long is lost after the server is back
(one connection attempt per pause is nothing to a server coming up)."""


def _given_up(error: StoreUnavailableError, tried: float) -> StoreUnavailableError:
    given_up = StoreUnavailableError(
        error.server,
        error.reason,
        error.detail,
        outcome_unknown=error.outcome_unknown,
        retried_for=tried,
    )
    return given_up


@final
@attrs.define(eq=False)
class Retrying:
    """A retry policy with the state of the outage it is riding out (one per caller side).

    Args:
        deadline (float): seconds to keep retrying, counted from the outage's first
            failure; 0 fails at once.
        clock (Callable[[], float]): the time source (monotonic seconds).
        sleep (Callable[[float], None]): how a thread pauses between tries.
    """

    deadline: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    failures: int = 0
    """Failed attempts so far (for tests and statistics)."""
    _down_since: float | None = None

    def _pause_or_give_up(self, error: StoreUnavailableError, pause: float) -> float:
        """The pause before the next attempt; raises ``error`` (with how long) when past."""
        self.failures += 1
        now = self.clock()
        if self._down_since is None:
            self._down_since = now
        tried = now - self._down_since
        if tried + pause > self.deadline:
            raise _given_up(error, tried if self.deadline > 0 else 0.0) from error.__cause__
        return pause

    def _healthy(self) -> None:
        self._down_since = None

    def call(self, attempt: Callable[[], T], *, after_failure: Callable[[], None]) -> T:
        """Call ``attempt`` (in a thread) until it does not fail for want of the server.

        Args:
            attempt (Callable[[], T]): one try; raises ``StoreUnavailableError`` when the
                server was out of reach and nothing was written.
            after_failure (Callable[[], None]): called after each failed attempt (e.g. to
                drop pooled connections).

        Raises:
            StoreUnavailableError: the deadline passed (``retried_for`` says how long),
                or an error with ``outcome_unknown`` (never retried blindly).
        """
        pause = _FIRST_PAUSE
        while True:
            try:
                result = attempt()
            except StoreUnavailableError as exc:
                if exc.outcome_unknown:
                    raise
                after_failure()
                self.sleep(self._pause_or_give_up(exc, pause))
                pause = min(pause * 2, _LONGEST_PAUSE)
                continue
            self._healthy()
            return result

    def settle(self, xid: int, ask: Callable[[int], bool]) -> bool:
        """Whether transaction ``xid``, whose ``COMMIT`` was in flight as the connection
        broke, committed; ``ask`` finds out on a new connection, retried to the deadline.

        Raises:
            StoreUnavailableError: with ``outcome_unknown``: the server stayed out of
                reach past the deadline, so the outcome is still unknown.
        """
        pause = _FIRST_PAUSE
        while True:
            try:
                committed = ask(xid)
            except StoreUnavailableError as exc:
                try:
                    self.sleep(self._pause_or_give_up(exc, pause))
                except StoreUnavailableError as final:
                    raise StoreUnavailableError(
                        final.server,
                        final.reason,
                        final.detail,
                        outcome_unknown=True,
                        retried_for=final.retried_for,
                    ) from exc
                pause = min(pause * 2, _LONGEST_PAUSE)
                continue
            self._healthy()
            return committed

    async def acall(
        self, attempt: Callable[[], Awaitable[T]], *, after_failure: Callable[[], None]
    ) -> T:
        """``call`` for Trio: the pauses are ``trio.sleep`` (cancellable, virtual-time aware).

        Raises:
            StoreUnavailableError: the deadline passed (``retried_for`` says how long).
        """
        pause = _FIRST_PAUSE
        started: float | None = None
        while True:
            try:
                return await attempt()
            except StoreUnavailableError as exc:
                if exc.outcome_unknown:
                    raise
                after_failure()
                now = trio.current_time()
                started = now if started is None else started
                self.failures += 1
                if now - started + pause > self.deadline:
                    raise _given_up(exc, now - started) from exc.__cause__
            await trio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE)


_IN_PROGRESS_WAIT = 5.0
"""Seconds to wait for an ended server process's transaction to be decided."""


def xact_committed(conn: psycopg.Connection, xid: int, server: str) -> bool:
    """Whether transaction ``xid`` committed (``pg_xact_status``, PostgreSQL 13+).

    The lost connection's server process was ended when this connection was made (see
    :func:`end_orphan`), so an ``in progress`` transaction is decided within moments;
    it is asked again until then.

    Raises:
        StoreUnavailableError: still undecided after a few seconds (``timeout``); the
            caller asks again until its deadline.
    """
    waited = 0.0
    while True:
        row = conn.execute("SELECT pg_xact_status(%s::text::xid8)", (str(xid),)).fetchone()
        status = None if row is None else row[0]
        if status != "in progress":
            return status == "committed"
        if waited >= _IN_PROGRESS_WAIT:
            raise StoreUnavailableError(
                server, "timeout", f"transaction {xid} of a lost connection is still in progress"
            )
        time.sleep(0.01)
        waited += 0.01


Backend = tuple[int, float]
"""A server process: its pid and start time (a pid alone may be reused)."""


def identify(conn: psycopg.Connection, server: str) -> Backend:
    """The server process behind ``conn``.

    Raises:
        StoreUnavailableError: the connection broke.
    """
    with map_errors(server):
        row = conn.execute(
            "SELECT pid, extract(epoch FROM backend_start)::float8 FROM pg_stat_activity "
            "WHERE pid = pg_backend_pid()"
        ).fetchone()
    return (0, 0.0) if row is None else (int(row[0]), float(row[1]))


def end_orphan(conn: psycopg.Connection, orphan: Backend) -> None:
    """End the server process of a lost connection, if it still runs.

    A network cut leaves the server side of a connection waiting, maybe for hours (the
    server's TCP keepalive), inside its transaction and holding the locks of the rows it
    inserted: a retry inserting the same versions would wait on them, and a commit in
    doubt would stay ``in progress``. Ending it rolls back whatever it had not committed.
    A process we may not signal (another role) is left alone.
    """
    import psycopg  # noqa: PLC0415  # the optional extra

    pid, started = orphan
    if pid == 0:
        return
    with contextlib.suppress(psycopg.Error):
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s "
            "AND extract(epoch FROM backend_start)::float8 = %s",
            (pid, started),
        )
