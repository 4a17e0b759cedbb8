"""The watches of a blackboard: who is told about which keys, and how the telling is done.

A watch is a Python channel or an actor; each gets the changes to the keys it asked for,
in order. Kept apart from the board actor, which only decides what a change is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import attrs
import trio

from protocols.errors import ActorStoppedError, MailboxFullError
from runtime import ActorRef

from ._events import BoardChanged, detached, key_problem

__all__ = ["Watch", "WatchTable", "watch_filter"]

logger = logging.getLogger("powertrio.board")


@attrs.define(eq=False)
class Watch:
    id: str
    keys: frozenset[str] | None
    prefix: str
    target: ActorRef[object] | trio.MemorySendChannel[BoardChanged]
    overflowed: bool = False

    def matches(self, key: str) -> bool:
        return key in self.keys if self.keys is not None else key.startswith(self.prefix)

    def same_as(self, other: Watch) -> bool:
        mine, theirs = self.target, other.target
        return (
            isinstance(mine, ActorRef)
            and isinstance(theirs, ActorRef)
            and mine.id == theirs.id
            and (self.keys, self.prefix) == (other.keys, other.prefix)
        )


@attrs.define(eq=False)
class WatchTable:
    """The watches of one board, shared by every incarnation of its actor.

    Watches are live refs and channels, so they are not events: they survive a restart of
    the board actor (a crash) but not the end of the runtime. See :class:`Board`.
    """

    watches: dict[str, Watch] = attrs.Factory(dict)
    dropped: int = 0

    def add(self, watch: Watch) -> str:
        for existing in self.watches.values():
            if existing.same_as(watch):
                return existing.id  # an agent that watches twice gets each change once
        self.watches[watch.id] = watch
        return watch.id

    def remove(self, watch_id: str) -> bool:
        return self.watches.pop(watch_id, None) is not None

    def deliver(self, change: BoardChanged) -> None:
        """Hand ``change`` to every matching watcher without waiting for any of them.

        Each watcher gets its own copy of the value, so none can change another's (or the
        board's).
        """
        shared = change
        for watch in tuple(self.watches.values()):
            if not watch.matches(change.key):
                continue
            change = attrs.evolve(shared, value=detached(shared.value))
            target = watch.target
            if isinstance(target, ActorRef):
                try:
                    target.tell_nowait(change)
                except ActorStoppedError:
                    self.remove(watch.id)  # the watcher is gone for good
                except MailboxFullError:
                    logger.warning(
                        "board %r dropped the watch %s of %s: its mailbox is full",
                        change.board_id,
                        watch.id,
                        target.path,
                    )
                    self.remove(watch.id)
                    self.dropped += 1
                continue
            try:
                target.send_nowait(change)
            except trio.WouldBlock:
                watch.overflowed = True
                target.close()  # the watcher drains what it has, then learns of the loss
                self.remove(watch.id)
                self.dropped += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.remove(watch.id)


def watch_filter(
    keys: Iterable[str] | None, prefix: str | None
) -> tuple[frozenset[str] | None, str]:
    if keys is not None and prefix is not None:
        msg = "watch keys or a prefix, not both"
        raise ValueError(msg)
    if keys is None:
        prefix = prefix or ""
        bad = key_problem(prefix, prefix=True)
        if bad is not None:
            raise bad
        return None, prefix
    if isinstance(keys, str):
        msg = f"keys must be an iterable of keys, not the str {keys!r}; wrap it: keys=[{keys!r}]"
        raise TypeError(msg)
    chosen = frozenset(keys)
    if not chosen:
        msg = "keys is empty: pass at least one key, or a prefix"
        raise ValueError(msg)
    for key in sorted(chosen, key=repr):
        bad = key_problem(key)
        if bad is not None:
            raise bad
    return chosen, ""


# -- the actor ------------------------------------------------------------------------
