"""The agent-agnostic machinery: actors, refs and mailboxes, the runtime, event-sourced
actors and their replay, the event store and its embedded SQLite engine.

The rest lives in named namespaces: ``runtime.supervision`` (restart strategies and
lifecycle events), ``runtime.timers`` (durable timers), ``runtime.postgres`` (the
PostgreSQL store), ``runtime.cluster`` (nodes, leases and fencing),
``runtime.maintenance`` (check, export, import, retention of a log),
``runtime.lowlevel`` (extension points) and ``runtime.testing`` (test doubles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

# Names load on first use, so importing the package costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._actor import Actor as Actor
    from ._actor import ActorContext as ActorContext
    from ._actor import Supervisor as Supervisor
    from ._clock import Clock as Clock
    from ._clock import IdSource as IdSource
    from ._event_sourced import Decision as Decision
    from ._event_sourced import EventSourcedActor as EventSourcedActor
    from ._event_sourced import StepFailed as StepFailed
    from ._mailbox import MailboxStatistics as MailboxStatistics
    from ._mailbox import OverflowPolicy as OverflowPolicy
    from ._ref import ActorRef as ActorRef
    from ._ref import PriorityMessage as PriorityMessage
    from ._ref import Reply as Reply
    from ._ref import Request as Request
    from ._replay import Replayable as Replayable
    from ._replay import ReplayResult as ReplayResult
    from ._replay import replay as replay
    from ._runtime import Runtime as Runtime
    from ._runtime import RuntimeStatistics as RuntimeStatistics
    from ._runtime import open_runtime as open_runtime
    from ._sqlite._store import SqliteEventStore as SqliteEventStore
    from ._sqlite._store import open_sqlite_store as open_sqlite_store
    from ._store._contract import AppendResult as AppendResult
    from ._store._contract import EventStore as EventStore
    from ._store._contract import EventStoreStatistics as EventStoreStatistics
    from ._store._contract import NewEvent as NewEvent
    from ._store._contract import RecordedEvent as RecordedEvent
    from ._store._contract import Snapshot as Snapshot
    from ._store._contract import StreamInfo as StreamInfo
    from ._store._contract import Subscription as Subscription
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._actor": (
                "Actor",
                "ActorContext",
                "Supervisor",
            ),
            "._clock": (
                "Clock",
                "IdSource",
            ),
            "._event_sourced": (
                "Decision",
                "EventSourcedActor",
                "StepFailed",
            ),
            "._mailbox": (
                "MailboxStatistics",
                "OverflowPolicy",
            ),
            "._ref": (
                "ActorRef",
                "PriorityMessage",
                "Reply",
                "Request",
            ),
            "._replay": (
                "ReplayResult",
                "Replayable",
                "replay",
            ),
            "._runtime": (
                "Runtime",
                "RuntimeStatistics",
                "open_runtime",
            ),
            "._sqlite._store": (
                "SqliteEventStore",
                "open_sqlite_store",
            ),
            "._store._contract": (
                "AppendResult",
                "EventStore",
                "EventStoreStatistics",
                "NewEvent",
                "RecordedEvent",
                "Snapshot",
                "StreamInfo",
                "Subscription",
            ),
        },
    )
