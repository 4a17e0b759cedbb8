"""The seam between a runtime and a fleet it may be a node of: all the kernel knows of one.

``open_runtime(node=...)`` takes anything that can :class:`Join` the runtime's store (a
``runtime.Node`` is one) and keeps what joining gives, a :class:`Membership`, as
``Runtime.node``. The kernel only runs it (before the timers, so its fence is up before
any append), adds its persist listeners, lets it stop actors, and asks it one thing when
an actor fails fenced: may this runtime still write the stream, and when to try again.
Leases, shards, inboxes and the SQL behind them live with the node (``runtime._cluster``);
the kernel imports none of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from ._persist_listener import PersistListener
    from ._ref import ActorRef
    from ._store._contract import EventStore
    from ._timers._service import TimerRunner

__all__ = ["Join", "Membership"]


class Membership(Protocol):
    """A runtime's place among runtimes that share one log (``Runtime.node``)."""

    @property
    def retry_after(self) -> float:
        """Seconds a fenced actor waits before it starts again (the next lease round)."""
        ...

    def may_write(self, stream: str) -> bool:
        """Whether an append to ``stream`` would be made under a lease this runtime holds
        (or the stream is not fenced at all)."""
        ...

    def persist_listeners(self, timers: TimerRunner) -> Sequence[PersistListener]:
        """The listeners to add, in order, the runtime's ``timers`` among them (the
        membership may wrap them: a stream's timers follow the stream across nodes)."""
        ...

    def attach(self, stop: Callable[[ActorRef[object]], Awaitable[None]]) -> None:
        """How to stop an actor for good (the runtime's ``stop``)."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join (the fence is up once started), then keep the membership until cancelled."""
        ...

    async def aclose(self) -> None:
        """Leave: hand back what is held, before the runtime's nursery is cancelled."""
        ...


class Join(Protocol):
    """What ``open_runtime(node=...)`` takes: how to join the others sharing a store."""

    def join(self, store: EventStore | None) -> Membership:
        """The membership of a runtime on ``store`` (``None``: the in-memory default).

        Raises:
            ConfigError: ``store`` cannot be shared (the message says which can).
        """
        ...
