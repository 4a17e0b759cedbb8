"""Supervision: how a supervisor restarts its children, and the lifecycle events it reports.

A ``Supervisor`` subclass declares its children as ``ChildSpec`` values; ``Supervision``
(a ``Strategy``, a ``RestartIntensity``, a ``Backoff``, a ``GiveUpPolicy``) says what a
crash costs. What happened to an actor (started, crashed, restarting, passivated, stopped,
a supervisor escalating) arrives as a ``LifecycleEvent``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

__all__ = [
    "ActorCrashed",
    "ActorPassivated",
    "ActorRestarting",
    "ActorStarted",
    "ActorStopped",
    "Backoff",
    "ChildSpec",
    "GiveUpPolicy",
    "LifecycleEvent",
    "RestartIntensity",
    "RestartType",
    "StopReason",
    "Strategy",
    "Supervision",
    "SupervisorEscalated",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._supervision import (
        ActorCrashed,
        ActorPassivated,
        ActorRestarting,
        ActorStarted,
        ActorStopped,
        Backoff,
        ChildSpec,
        GiveUpPolicy,
        LifecycleEvent,
        RestartIntensity,
        RestartType,
        StopReason,
        Strategy,
        Supervision,
        SupervisorEscalated,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._supervision": (
                "ActorCrashed",
                "ActorPassivated",
                "ActorRestarting",
                "ActorStarted",
                "ActorStopped",
                "Backoff",
                "ChildSpec",
                "GiveUpPolicy",
                "LifecycleEvent",
                "RestartIntensity",
                "RestartType",
                "StopReason",
                "Strategy",
                "Supervision",
                "SupervisorEscalated",
            ),
        },
    )
