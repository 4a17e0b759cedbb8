"""Crash-test child for timers: schedule timers, report each recorded firing, exit when done.

Usage: ``python tests/_timers_crash_child.py DB_PATH ONE_SHOTS``. Every run asks the owner
to schedule the same timer ids (``tmr_0`` ... and one recurring ``tmr_every``): ids the
owner already knows are no-ops, so a run killed half-way through scheduling just finishes
the job. Prints ``ready`` once the runtime is open and the timers are scheduled, then one
``fired <timer id> <due_at>`` line per firing the owner recorded, written with a single
``os.write`` only after the append, ``due <timer id> <due_at>`` just before each delivery,
and ``done`` when no one-shot is pending and the recurring timer has fired in this run
(then it exits).
The parent kills it with SIGKILL at chosen moments.
"""

from __future__ import annotations

import os
import sys

import trio
from _timer_owner import GetState, Owner

from runtime import open_runtime, open_sqlite_store
from runtime.timers import DueTimer, TimerFired

EVERY = 0.01
"""Period of the recurring timer, in seconds."""


async def main(path: str, one_shots: int) -> None:
    """Open the log, (re)schedule the timers, report firings until every one-shot fired."""

    recurring_fired = False

    def on_fired(event: TimerFired) -> None:
        nonlocal recurring_fired
        recurring_fired = recurring_fired or event.timer_id == "tmr_every"
        os.write(1, f"fired {event.timer_id} {event.due_at!r}\n".encode())

    def announce(due: DueTimer) -> None:
        # The hook runs just before each delivery: the parent learns what was in flight.
        os.write(1, f"due {due.timer_id} {due.due_at!r}\n".encode())

    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        owner = await runtime.spawn(lambda: Owner(on_fired=on_fired))
        timers = runtime.timers
        timers.set_hook(announce)
        await timers.schedule(owner, delay=EVERY, every=EVERY, timer_id="tmr_every")
        for index in range(one_shots):
            await timers.schedule(owner, delay=0.004 * index, timer_id=f"tmr_{index}")
        os.write(1, b"ready\n")
        while True:
            state = await owner.ask(GetState())
            # A delivery of the recurring timer that a kill cut off is overdue here, so it
            # is made again first: once the timer has fired in this run, it is recorded.
            one_shots_done = all(timer.every is not None for timer in state.timers.pending)
            if one_shots_done and recurring_fired:
                break
            await trio.sleep(EVERY)
        os.write(1, b"done\n")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
