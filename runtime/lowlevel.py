"""The kernel's extension points, for those who build actor kinds or stores on it.

Everyday code needs none of this: ``runtime`` has the actors, the stores and the timers.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._cluster._node import live_nodes
from ._event_sourced import CONTINUES, Outcome
from ._gc_tuning import RUNTIME_GC_THRESHOLD
from ._idle import IdleWatch
from ._persist_listener import CommitObserver, PersistListener
from ._postgres._lock import postgres_lock, postgres_lock_held
from ._store._snapshot_chunks import (
    chunk_address,
    decode_snapshot,
    encode_snapshot,
    snapshot_chunk,
    stash_chunk,
)
from ._timers._book import (
    TIMER_EVENT_NAMES,
    TimerBook,
    TimerOutcome,
    is_timer_event,
    register_timer_events,
    timer_decision,
)
from ._virtual_time import hold_virtual_clock, run_sync_in_thread

__all__ = [
    "CONTINUES",
    "CommitObserver",
    "IdleWatch",
    "Outcome",
    "PersistListener",
    "RUNTIME_GC_THRESHOLD",
    "TIMER_EVENT_NAMES",
    "TimerBook",
    "TimerOutcome",
    "chunk_address",
    "decode_snapshot",
    "encode_snapshot",
    "hold_virtual_clock",
    "is_timer_event",
    "live_nodes",
    "postgres_lock",
    "postgres_lock_held",
    "register_timer_events",
    "run_sync_in_thread",
    "snapshot_chunk",
    "stash_chunk",
    "timer_decision",
]

_fixup(__name__, globals())
del _fixup
