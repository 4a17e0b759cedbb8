"""Errors of the blackboard (``board.*``): a write or a watch refused; nothing was written.

Only the agents raise them; ``actors.board`` exports them, ``actors.cluster`` the one of a
call relayed to the node that owns the board.
"""

from __future__ import annotations

from typing import Literal

from protocols.errors import PowertrioError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "BoardBadKeyError",
    "BoardBadValueError",
    "BoardConflictError",
    "BoardEntryTooLargeError",
    "BoardError",
    "BoardFullError",
    "BoardWatchOverflowError",
    "RemoteBoardError",
]


class BoardError(PowertrioError):
    """A blackboard refused a read, a write or a watch; nothing was written."""

    code = "board"


def _shown(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 66 else text[:60] + "...'"


class BoardConflictError(BoardError):
    """A compare-and-set write expected another version of the key; nothing was written."""

    code = "board.conflict"

    def __init__(self, board_id: str, key: str, expected: int, actual: int) -> None:
        self.board_id = board_id
        self.key = key
        self.expected = expected
        self.actual = actual
        now = f"is at version {actual}" if actual else "does not exist (version 0)"
        super().__init__(
            f"board {board_id!r}: key {_shown(key)} {now}, the write expected version "
            f"{expected}; nothing was written (read the key again, then decide and retry)"
        )


class BoardEntryTooLargeError(BoardError, ValueError):
    """An entry (key plus JSON-encoded value) is over the board's ``max_entry_bytes``."""

    code = "board.entry_too_large"

    def __init__(self, board_id: str, key: str, size: int, limit: int) -> None:
        self.board_id = board_id
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(
            f"board {board_id!r}: the entry for key {_shown(key)} is {size} bytes (key plus "
            f"JSON value), over the limit of {limit}; nothing was written (store less, or "
            "split it across keys)"
        )


class BoardFullError(BoardError):
    """A write would add a key to a board that already holds ``max_entries`` entries."""

    code = "board.full"

    def __init__(self, board_id: str, key: str, limit: int) -> None:
        self.board_id = board_id
        self.key = key
        self.limit = limit
        super().__init__(
            f"board {board_id!r} is full ({limit} entries); key {_shown(key)} was not added "
            "(delete entries that are no longer needed, or open the board with a larger "
            "max_entries)"
        )


class BoardBadKeyError(BoardError, ValueError):
    """A board key (or a watch's prefix) breaks the rules for keys.

    ``what`` says which one it was; ``reason`` says what is wrong and states the rule.
    """

    code = "board.bad_key"

    def __init__(self, key: object, reason: str, what: Literal["key", "prefix"] = "key") -> None:
        self.key = key
        self.reason = reason
        self.what = what
        super().__init__(f"bad board {what} {_shown(key)}: {reason}")


class BoardBadValueError(BoardError, TypeError):
    """A value to write is not plain JSON (a set, a tuple, NaN, an object, ...)."""

    code = "board.bad_value"

    def __init__(self, board_id: str, key: str, detail: str) -> None:
        self.board_id = board_id
        self.key = key
        self.detail = detail
        super().__init__(
            f"board {board_id!r}: the value for key {_shown(key)} is not plain JSON: {detail}"
        )


class BoardWatchOverflowError(BoardError):
    """A watcher fell ``buffer`` changes behind; the board dropped its watch.

    Every change delivered before the overflow was received in order; none after it was.
    """

    code = "board.watch_overflow"

    def __init__(self, board_id: str, buffer: int) -> None:
        self.board_id = board_id
        self.buffer = buffer
        super().__init__(
            f"a watch on board {board_id!r} fell {buffer} changes behind and was dropped; "
            "later changes were not delivered (read the board again and watch anew, or "
            "watch with a larger buffer)"
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
_fixup("actors.board", {n: v for n, v in globals().items() if n != "RemoteBoardError"})
# Raised when the owner of the board is another node: with the cluster's other errors.
_fixup("actors.cluster", {"RemoteBoardError": RemoteBoardError})
del _fixup
