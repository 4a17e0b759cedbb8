"""Virtual time that stays deterministic while work runs in threads.

``trio.testing.MockClock(autojump_threshold=0)`` jumps to the next deadline as soon as
every task is blocked, and a task waiting for a thread counts as blocked. So a test under
virtual time would see its timers fire *during* an fsync in the store's writer thread or a
sync tool in a worker thread, at a point that depends on how long the thread took: the
same test gives different results from run to run.

The runtime's own thread work therefore holds the virtual clock: while any is in flight, a
system task keeps the run loop busy (one checkpoint at a time), so the clock cannot jump
until the thread's result is back. With a real clock nothing happens: the hold costs one
type check.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import trio
import trio.testing

__all__ = ["hold_virtual_clock"]


class _Holds:
    __slots__ = ("count", "spinning")

    def __init__(self) -> None:
        self.count = 0
        self.spinning = False


_HOLDS: trio.lowlevel.RunVar[_Holds] = trio.lowlevel.RunVar("powertrio_virtual_clock_holds")


async def _keep_busy(holds: _Holds) -> None:
    try:
        while holds.count > 0:
            await trio.lowlevel.checkpoint()
            # Hand the GIL to the thread being waited for: a bare loop of checkpoints would
            # hold it for a whole switch interval (5 ms) each time the thread wants it.
            time.sleep(0)  # noqa: ASYNC251  # a zero sleep: it blocks nothing
    finally:
        holds.spinning = False


@contextmanager
def hold_virtual_clock() -> Iterator[None]:
    """Keep a ``MockClock`` from jumping while the block waits for a thread.

    Use it around the wait for a thread's result (``to_thread.run_sync``, a writer
    thread's reply). Nestable and shared by every task of the run; a no-op under a real
    clock.
    """
    if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        yield
        return
    try:
        holds = _HOLDS.get()
    except LookupError:
        holds = _Holds()
        _HOLDS.set(holds)
    holds.count += 1
    if not holds.spinning:
        holds.spinning = True
        trio.lowlevel.spawn_system_task(_keep_busy, holds, name="powertrio: hold virtual clock")
    try:
        yield
    finally:
        holds.count -= 1
