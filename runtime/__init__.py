"""The agent-agnostic machinery: actors, mailboxes, supervisors, the event store."""

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
    from ._cluster._node import ClusterNode as ClusterNode
    from ._cluster._node import Node as Node
    from ._event_sourced import Decision as Decision
    from ._event_sourced import EventSourcedActor as EventSourcedActor
    from ._event_sourced import StepFailed as StepFailed
    from ._mailbox import MailboxStatistics as MailboxStatistics
    from ._mailbox import OverflowPolicy as OverflowPolicy
    from ._postgres._store import PostgresEventStore as PostgresEventStore
    from ._postgres._store import open_postgres_store as open_postgres_store
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
    from ._store._ops import CheckProblem as CheckProblem
    from ._store._ops import CheckReport as CheckReport
    from ._store._ops import TransferResult as TransferResult
    from ._store._ops import apply_retention as apply_retention
    from ._store._ops import check_store as check_store
    from ._store._ops import export_jsonl as export_jsonl
    from ._store._ops import import_jsonl as import_jsonl
    from ._store._ops import in_tree as in_tree
    from ._supervision import ActorCrashed as ActorCrashed
    from ._supervision import ActorRestarting as ActorRestarting
    from ._supervision import ActorStarted as ActorStarted
    from ._supervision import ActorStopped as ActorStopped
    from ._supervision import Backoff as Backoff
    from ._supervision import ChildSpec as ChildSpec
    from ._supervision import GiveUpPolicy as GiveUpPolicy
    from ._supervision import LifecycleEvent as LifecycleEvent
    from ._supervision import RestartIntensity as RestartIntensity
    from ._supervision import RestartType as RestartType
    from ._supervision import StopReason as StopReason
    from ._supervision import Strategy as Strategy
    from ._supervision import Supervision as Supervision
    from ._supervision import SupervisorEscalated as SupervisorEscalated
    from ._timers._book import CancelTimer as CancelTimer
    from ._timers._book import ListTimers as ListTimers
    from ._timers._book import PendingTimer as PendingTimer
    from ._timers._book import ScheduleTimer as ScheduleTimer
    from ._timers._book import TimerCancelled as TimerCancelled
    from ._timers._book import TimerFired as TimerFired
    from ._timers._book import TimerScheduled as TimerScheduled
    from ._timers._service import DueTimer as DueTimer
    from ._timers._service import Postpone as Postpone
    from ._timers._service import TimerHook as TimerHook
    from ._timers._service import TimerService as TimerService
    from ._timers._service import TimerServiceStatistics as TimerServiceStatistics
    from ._timers._service import TimerVerdict as TimerVerdict
    from ._timers._service import Veto as Veto
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._actor": ("Actor", "ActorContext", "Supervisor"),
            "._clock": ("Clock", "IdSource"),
            "._event_sourced": ("Decision", "EventSourcedActor", "StepFailed"),
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
            "._mailbox": ("MailboxStatistics", "OverflowPolicy"),
            "._cluster._node": ("ClusterNode", "Node"),
            "._postgres._store": ("PostgresEventStore", "open_postgres_store"),
            "._ref": ("ActorRef", "PriorityMessage", "Reply", "Request"),
            "._replay": ("Replayable", "ReplayResult", "replay"),
            "._runtime": ("Runtime", "RuntimeStatistics", "open_runtime"),
            "._sqlite._store": ("SqliteEventStore", "open_sqlite_store"),
            "._store._ops": (
                "CheckProblem",
                "CheckReport",
                "TransferResult",
                "apply_retention",
                "check_store",
                "export_jsonl",
                "import_jsonl",
                "in_tree",
            ),
            "._supervision": (
                "ActorCrashed",
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
