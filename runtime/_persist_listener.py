"""The seam between event-sourced actors and the services that follow their streams."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

from ._ref import ActorRef


class PersistListener(Protocol):
    """Follows the streams of event-sourced actors: who owns each, and what they append.

    The runtime holds the listeners (:meth:`~runtime.Runtime.add_persist_listener`) and
    every :class:`~runtime.EventSourcedActor` tells each of them, in registration order,
    so a service that reacts to the log (the durable timers are one) needs no hook in the
    actor base. The calls run in the actor's own task: a listener must neither block nor
    raise (an error crashes the actor that called it, after its events are appended).

    Only events persisted from then on reach a listener added while actors run; add it
    before spawning the actors it follows (the runtime adds its timers service when it
    opens), and rebuild the past from the log.
    """

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        """``owner`` now runs and owns ``stream``, with its state folded from the log.

        Called once per incarnation, after recovery (and the events of ``recovered``),
        before the actor asks ``next_step`` or takes a message.
        """

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        """``stream``'s owner has just appended ``events`` (in order) and folded them.

        Called after the append succeeded, before any snapshot and before
        ``after_persist``; never during recovery.
        """

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        """``owner`` stopped in order and no longer owns ``stream``.

        An owner that crashed is not reported: its ref is no longer ``alive``.
        """


CommitObserver: TypeAlias = Callable[[str, int, float], None]
"""Told ``(stream, events, seconds)`` after each append of an event-sourced actor: which
stream, how many events, and how long the append took on the Trio clock."""
