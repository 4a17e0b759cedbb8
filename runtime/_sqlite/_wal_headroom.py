"""When the SQLite writer must truncate the WAL so that it never passes its bound.

The writer truncates between two group commits. Truncating only once the WAL had passed
``wal_limit`` let it overshoot by the group that crossed it (1-2% at 64 MiB under 256
writers). So the writer keeps headroom below the limit: the most one group has grown the
WAL so far, and at least a quarter of the limit, and truncates before the crossing group.
"""

from __future__ import annotations

from typing import final


@final
class WalHeadroom:
    """The writer thread's record of how fast groups grow the WAL (that thread only)."""

    __slots__ = ("after", "limit", "seen_at", "size", "step")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """The bound in bytes (0: none)."""
        self.size = 0
        """The WAL's size at the last look."""
        self.seen_at = -2
        """The number of commits at the last look."""
        self.step = 0
        """The most one group has grown the WAL (capped at half the limit)."""
        self.after = 0
        """No look before this many commits (set after a checkpoint failed or was blocked)."""

    def due(self, size: int, commits: int) -> bool:
        """Whether to truncate the WAL, now ``size`` bytes, after ``commits`` commits."""
        if not self.limit or commits < self.after:
            return False
        return self.crossing(size, commits)

    def crossing(self, size: int, commits: int) -> bool:
        """Whether the WAL, now ``size`` bytes after ``commits`` commits, should be
        truncated before the next group: that group could take it past the limit."""
        if commits == self.seen_at + 1:  # one group's growth, not several
            self.step = min(max(self.step, size - self.size), self.limit // 2)
        self.size, self.seen_at = size, commits
        return size + max(self.step, self.limit // 4) > self.limit

    def truncated(self) -> None:
        """The WAL was emptied."""
        self.size = 0
