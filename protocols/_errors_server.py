"""Errors about an event store reached over the network: its server is gone or too slow,
or this node's lease on a shard is gone (``store.fenced``).

Kept apart from the log's story (``_errors_log``) and from local files (``_errors_files``):
these say the database server could not be reached, dropped the connection or did not
answer in time, which the user fixes by bringing the server back, never with a restore.
A fenced append is the store's refusal too: the runtime raises it, so it stays here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._errors_base import ConfigError
from ._errors_log import StoreError

__all__ = [
    "BadConnectionStringError",
    "FencedError",
    "StoreRefusedError",
    "StoreUnavailableError",
    "UnsupportedLogSchemeError",
]


class StoreUnavailableError(StoreError):
    """The store's server could not be reached, dropped the connection, or timed out.

    ``reason`` says which: ``"connect"`` (no connection could be made), ``"lost"`` (an
    open connection broke) or ``"timeout"`` (the server cancelled a statement that ran
    too long). ``outcome_unknown`` is true when an append's commit was in flight as the
    connection broke: it may or may not be durable, so re-read the stream to find out.
    """

    code = "store.unavailable"

    def __init__(
        self,
        server: str,
        reason: Literal["connect", "lost", "timeout"],
        detail: str,
        *,
        outcome_unknown: bool = False,
        retried_for: float = 0.0,
    ) -> None:
        self.server = server
        self.reason = reason
        self.detail = detail
        self.outcome_unknown = outcome_unknown
        self.retried_for = retried_for
        """Seconds the store kept retrying before giving up (0: it did not retry)."""
        what = {
            "connect": "cannot be reached",
            "lost": "dropped the connection",
            "timeout": "did not answer in time",
        }[reason]
        after = (
            "the commit in flight may or may not have been written: re-read the stream"
            if outcome_unknown
            else "nothing was written; retry once the server is back"
        )
        tried = f", still after retrying for {retried_for:.1f}s" if retried_for > 0 else ""
        super().__init__(f"event store server {server} {what}{tried} ({detail}); {after}")


class StoreRefusedError(StoreError):
    """The store's server answered but refused us: no such database or role, bad password.

    Unlike :class:`StoreUnavailableError` this does not heal by waiting, so it is never
    retried: fix the connection string (or the server's users and databases).
    """

    code = "store.refused"

    def __init__(self, server: str, detail: str) -> None:
        self.server = server
        self.detail = detail
        super().__init__(
            f"event store server {server} refused the connection ({detail}); check the "
            "database, user and password in the connection string"
        )


class BadConnectionStringError(ConfigError):
    """A PostgreSQL connection string (``--db``, ``POWERTRIO_DB``) does not parse.

    The message never repeats the string: it may hold a password.
    """

    code = "config.connection_string"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"the PostgreSQL connection string is not valid ({detail}); write it as "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or 'host=HOST dbname=DATABASE'"
        )


class UnsupportedLogSchemeError(ConfigError):
    """``--db`` (or ``POWERTRIO_DB``) is a URI of a kind of database powertrio cannot use.

    Only the scheme is repeated: the rest of the URI may hold a password.
    """

    code = "config.db_scheme"

    def __init__(self, scheme: str, supported: Sequence[str]) -> None:
        self.scheme = scheme
        self.supported = tuple(supported)
        listed = ", ".join(f"{s}://" for s in self.supported)
        super().__init__(
            f"the event log cannot be a {scheme}:// database: give a SQLite file's path, "
            f"or a PostgreSQL URI ({listed})"
        )


class FencedError(StoreError):
    """This node no longer holds the lease on the stream's shard; nothing was written.

    Another node took the shard over (its lease expired: the process was paused, cut
    off or too slow to renew it), or this node never held it. The session now belongs
    to the shard's new owner: its actors here are stopped, and callers reach the session
    through the owner's inbox.
    """

    code = "store.fenced"

    def __init__(self, stream: str, shard: int, node: str, detail: str) -> None:
        self.stream = stream
        self.shard = shard
        self.node = node
        self.detail = detail
        super().__init__(
            f"node {node!r} may not write stream {stream!r}: {detail} (shard {shard}); "
            "nothing was written, the shard's current owner serves it"
        )
