"""Errors about an event store reached over the network: its server is gone or too slow.

Kept apart from the log's story (``_errors_log``) and from local files (``_errors_files``):
these say the database server could not be reached, dropped the connection or did not
answer in time, which the user fixes by bringing the server back, never with a restore.
"""

from __future__ import annotations

from typing import Literal

from ._errors_log import StoreError

__all__ = ["StoreUnavailableError"]


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
    ) -> None:
        self.server = server
        self.reason = reason
        self.detail = detail
        self.outcome_unknown = outcome_unknown
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
        super().__init__(f"event store server {server} {what} ({detail}); {after}")
