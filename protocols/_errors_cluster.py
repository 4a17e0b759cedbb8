"""Errors of a fleet of nodes sharing one log: fencing (``store.fenced``), remote calls.

Kept apart from the single-process branches: they only arise when several runtimes
share a PostgreSQL log (``open_runtime(node=...)``); ``protocols.errors`` re-exports them.
"""

from __future__ import annotations

from ._errors_agents import BoardError, SessionError
from ._errors_log import StoreError

__all__ = ["FencedError", "RemoteBoardError", "RemoteSessionError"]


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


class RemoteSessionError(SessionError):
    """A call relayed to the node owning a session failed there with a typed error.

    ``remote_code`` is the stable code of the error the owner raised (e.g.
    ``session.busy``), ``remote_message`` its message.
    """

    code = "session.remote"

    def __init__(self, session_id: str, remote_code: str, remote_message: str) -> None:
        self.session_id = session_id
        self.remote_code = remote_code
        self.remote_message = remote_message
        super().__init__(
            f"session {session_id!r} failed on the node that owns it: "
            f"[{remote_code}] {remote_message}"
        )


class RemoteBoardError(BoardError):
    """A board call relayed to the node owning the board failed there with an error that
    is not one of the board's own (those come back as themselves: a compare-and-set
    that lost is a ``BoardConflictError`` wherever it was made).

    ``remote_code`` is the stable code of the owner's error (e.g. ``config``),
    ``remote_message`` its message.
    """

    code = "board.remote"

    def __init__(self, board_id: str, remote_code: str, remote_message: str) -> None:
        self.board_id = board_id
        self.remote_code = remote_code
        self.remote_message = remote_message
        super().__init__(
            f"board {board_id!r} failed on the node that owns it: [{remote_code}] {remote_message}"
        )
