"""Errors of calls relayed to the node that owns a session or a board (``*.remote``).

They only arise when several nodes share a PostgreSQL log; ``actors.cluster`` exports them.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._board_errors import BoardError
from ._session_errors import SessionError

__all__ = [
    "RemoteBoardError",
    "RemoteSessionError",
]


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


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.cluster", globals())
del _fixup
