"""The blackboard beyond ``actors.open_board``: its errors."""

from __future__ import annotations

from ._board._errors import (
    BoardBadKeyError,
    BoardBadValueError,
    BoardConflictError,
    BoardEntryTooLargeError,
    BoardError,
    BoardFullError,
    BoardWatchOverflowError,
)

__all__ = [
    "BoardBadKeyError",
    "BoardBadValueError",
    "BoardConflictError",
    "BoardEntryTooLargeError",
    "BoardError",
    "BoardFullError",
    "BoardWatchOverflowError",
]
