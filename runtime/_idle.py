"""The runtime's idle sweeper: one task that runs every actor's idle checks when due.

An actor that passivates when idle (a session) needs to look at itself once its idle time
has run out. A sleeping task per actor did that, at about 3 KB per warm actor (its
coroutine, its task, its cancel status) for a wait that is almost always moot; a heap
entry does the same for a few hundred bytes. The check runs in the sweeper's task, not in
the actor's serial loop: it only reads the actor's state and may ask the loop to decide
(``ActorContext.passivate_if_idle``), as the actor's own task did.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, final

import trio

if TYPE_CHECKING:
    from ._cell import _Cell

logger = logging.getLogger("powertrio.runtime")

IdleCheck = Callable[[], float | None]
"""Called when due, in the sweeper's task: returns when to call it again (Trio time), or
``None`` to be done."""


@final
class IdleWatch:
    """One actor incarnation's idle check in the sweeper (:meth:`cancel` drops it)."""

    __slots__ = ("_cell", "_check", "_incarnation")

    def __init__(self, cell: _Cell, check: IdleCheck) -> None:
        self._cell = cell
        self._incarnation = cell.incarnation
        self._check: IdleCheck | None = check

    def cancel(self) -> None:
        """Never call the check again (it drops its actor at once; its heap slot, empty,
        goes when due)."""
        self._check = None

    def _fire(self) -> float | None:
        check = self._check
        cell = self._cell
        if check is None or not cell.running or cell.incarnation != self._incarnation:
            self._check = None  # its incarnation is over: never look at that actor again
            return None
        try:
            return check()
        except Exception:  # one actor's broken check must not stop every other's
            logger.exception("actor %s: its idle check failed; it is not checked again", cell.path)
            self._check = None
            return None


@final
class IdleSweeper:
    """The heap of idle checks by deadline, and the one task that runs them."""

    __slots__ = ("_count", "_heap", "_scope", "_stopped")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, IdleWatch]] = []
        # Ties run in the order they were scheduled: the same on every run (virtual time).
        self._count = itertools.count()
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.CancelScope()

    def watch(self, cell: _Cell, deadline: float, check: IdleCheck) -> IdleWatch:
        """Call ``check`` at ``deadline`` (Trio time), and again whenever it says, while
        ``cell``'s current incarnation runs."""
        watch = IdleWatch(cell, check)
        self._push(deadline, watch)
        return watch

    def __len__(self) -> int:
        return len(self._heap)

    def _push(self, deadline: float, watch: IdleWatch) -> None:
        heapq.heappush(self._heap, (deadline, next(self._count), watch))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline  # wakes the sweeper sooner

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the checks as they fall due, until :meth:`close`."""
        heap = self._heap
        with self._stopped:
            task_status.started()
            while True:
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                self._scope = None
                now = trio.current_time()
                while heap and heap[0][0] <= now:
                    watch = heapq.heappop(heap)[2]
                    again = watch._fire()
                    if again is not None:
                        heapq.heappush(heap, (again, next(self._count), watch))

    def close(self) -> None:
        """Stop the sweeper's task (the runtime is closing)."""
        self._stopped.cancel()
        self._heap.clear()
