"""Durable timers: the requests an owner sends the timer service, the events it records,
and the hooks that may veto or postpone a timer that falls due.

An owner asks with ``ScheduleTimer``, ``CancelTimer`` and ``ListTimers``; its stream
records ``TimerScheduled``, ``TimerFired`` and ``TimerCancelled``, so a restart re-arms
every timer from the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

__all__ = [
    "CancelTimer",
    "DueTimer",
    "ListTimers",
    "PendingTimer",
    "Postpone",
    "ScheduleTimer",
    "TimerCancelled",
    "TimerFired",
    "TimerHook",
    "TimerScheduled",
    "TimerService",
    "TimerServiceStatistics",
    "TimerVerdict",
    "Veto",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._timers._book import (
        CancelTimer,
        ListTimers,
        PendingTimer,
        ScheduleTimer,
        TimerCancelled,
        TimerFired,
        TimerScheduled,
    )
    from ._timers._service import (
        DueTimer,
        Postpone,
        TimerHook,
        TimerService,
        TimerServiceStatistics,
        TimerVerdict,
        Veto,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._timers._book": (
                "CancelTimer",
                "ListTimers",
                "PendingTimer",
                "ScheduleTimer",
                "TimerCancelled",
                "TimerFired",
                "TimerScheduled",
            ),
            "._timers._service": (
                "DueTimer",
                "Postpone",
                "TimerHook",
                "TimerService",
                "TimerServiceStatistics",
                "TimerVerdict",
                "Veto",
            ),
        },
    )
