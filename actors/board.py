"""The blackboard beyond ``actors.open_board``: its entries, the changes a watcher
receives, its folded state and statistics, and the errors of a write or a watch it refused.

``open_board``, ``Board`` and the agents' ``board_tools`` are at the top of ``actors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

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
    "BoardChanged",
    "BoardConflictError",
    "BoardEntryTooLargeError",
    "BoardError",
    "BoardFullError",
    "BoardState",
    "BoardStatistics",
    "BoardWatchOverflowError",
    "Entry",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._board._events import BoardChanged, BoardState, BoardStatistics, Entry
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._board._events": (
                "BoardChanged",
                "BoardState",
                "BoardStatistics",
                "Entry",
            ),
        },
    )
