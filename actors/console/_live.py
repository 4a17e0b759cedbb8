"""What keeps the console's live views live: one watcher of the log's head for every open
page, fed by the store (``EventStore.changes``), so a commit of any process shows.

The pages' own process is not the only writer: a ``powertrio send`` from another
terminal, a node of a fleet, a worker appends to the same log. The store says when its
head moved, whoever moved it (SQLite: its change counter; PostgreSQL: ``NOTIFY``); the
beacon passes that to every page's event stream and says when the feed is lost.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import final

import attrs
import trio

from protocols.errors import StoreClosedError, StoreError
from runtime import EventStore

__all__ = ["RETRY_SECONDS", "LogBeacon", "change_events", "sse"]

logger = logging.getLogger("powertrio.console")

RETRY_SECONDS = 1.0
"""How long the watcher waits before it watches again after losing the store."""


@final
@attrs.define(eq=False)
class LogBeacon:
    """The log's head as one watcher follows it, shared by every live page of a console.

    The watcher runs while a page watches (a system task: a console has no nursery of
    its own) and stops with the last one. ``offline`` says why the feed is lost; the
    watcher retries every :data:`RETRY_SECONDS` meanwhile.
    """

    store: EventStore
    head: int = -1
    """The newest head seen (-1 until the first)."""
    offline: str = ""
    """Why the feed is lost (the store's error), or ``""`` while it is live."""
    _moved: trio.Event = attrs.Factory(trio.Event)
    _watchers: int = 0
    _scope: trio.CancelScope | None = None

    @property
    def state(self) -> tuple[int, str]:
        """``(head, offline)`` now: what a page last showed, to wait for a change of."""
        return self.head, self.offline

    def join(self) -> None:
        """A page begins to watch (the first starts the watcher)."""
        self._watchers += 1
        if self._scope is None:
            self._scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(self._watch, self._scope, name="console log watcher")

    def leave(self) -> None:
        """A page stops watching (the last stops the watcher)."""
        self._watchers -= 1
        if self._watchers <= 0 and self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def first(self) -> tuple[int, str]:
        """The state once the watcher has seen a head (or lost the feed)."""
        if self.head < 0 and not self.offline:
            return await self.wait(self.state)
        return self.state

    async def next_state(self, shown: tuple[int, str], quiet: float) -> tuple[int, str]:
        """The next state, or ``shown`` again after ``quiet`` seconds without one."""
        with trio.move_on_after(quiet):
            return await self.wait(shown)
        return shown

    async def wait(self, shown: tuple[int, str]) -> tuple[int, str]:
        """Wait until the head or the feed's state differ from ``shown``; the new state."""
        while self.state == shown:
            await self._moved.wait()
        return self.state

    def _set(self, head: int, offline: str) -> None:
        if (head, offline) != self.state:
            self.head, self.offline = head, offline
            self._moved.set()
            self._moved = trio.Event()

    async def _watch(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                try:
                    async with aclosing(self.store.changes()) as heads:
                        async for head in heads:
                            self._set(head, "")
                    self._set(self.head, "the log was closed")
                    return
                except StoreClosedError:
                    self._set(self.head, "the log was closed")
                    return
                except StoreError as exc:
                    self._set(self.head, f"[{exc.code}] {exc}")
                except Exception as exc:  # a system task must not raise: say it, retry
                    logger.exception("the console's log watcher failed")
                    self._set(self.head, f"{type(exc).__name__}: {exc}")
                await trio.sleep(RETRY_SECONDS)


async def change_events(beacon: LogBeacon, heartbeat: float) -> AsyncIterator[str]:
    """Server-sent events of the log's head: ``changed`` (with the head) each time the
    log grows, whoever appended; ``offline`` (with the store's error) and ``online`` as
    the feed is lost and back; ``beat`` after ``heartbeat`` seconds of quiet."""
    beacon.join()
    try:
        shown = await beacon.first()
        yield sse("offline", shown[1]) if shown[1] else sse("online", str(shown[0]))
        while True:
            state, shown = shown, await beacon.next_state(shown, heartbeat)
            if state == shown:
                yield sse("beat", "")
                continue
            if state[1] != shown[1]:
                yield sse("offline", shown[1]) if shown[1] else sse("online", "")
            if not shown[1]:
                yield sse("changed", str(shown[0]))
    finally:
        beacon.leave()


def sse(event: str, text: str) -> str:
    """One server-sent event: its name and its text, a ``data:`` line per line."""
    lines = "".join(f"data: {line}\n" for line in str(text).splitlines() or [""])
    return f"event: {event}\n{lines}\n"
