"""What a property test does to a running agent: one frozen class per kind of operation."""

from __future__ import annotations

from typing import Literal, TypeAlias, final

import attrs

from protocols import JsonValue

__all__ = [
    "AdvanceClock",
    "CancelRun",
    "ClearTimer",
    "CrashSession",
    "FailNextCommit",
    "Operation",
    "RestartRuntime",
    "Send",
    "SendFollowUp",
    "SetTimer",
    "WriteBoard",
]

# Each repr is valid Python (attrs' default), so a failing example printed by Hypothesis
# can be pasted into a regression test as it is.


@final
@attrs.frozen
class Send:
    """``session.send(text, if_busy=if_busy)``: a new run (by default queued behind an
    active one).

    With ``wait`` the harness waits for the run's result before the next operation;
    otherwise the send goes on in the background, so the operations after it happen
    while the run is in flight.
    """

    text: str
    """The user's input."""
    wait: bool = False
    """Wait for the run's result before the next operation."""
    if_busy: Literal["queue", "reject", "interrupt"] | None = None
    """What the send does while a run is active; ``None``: the session's policy."""


@final
@attrs.frozen
class SendFollowUp:
    """``session.follow_up(text, id=id)``: joins the active run, or starts one when idle.

    Ids are drawn from a small pool, so repeats (which must be no-ops) are common.
    """

    text: str
    """What the model reads."""
    id: str
    """The deduplication key."""
    kind: str = "user"
    """``user``, ``system``...: consecutive follow-ups of one kind make one user turn."""


@final
@attrs.frozen
class CancelRun:
    """``session.cancel(mode=mode)``: stop the active run now or after its turn."""

    mode: Literal["immediate", "after_turn"] = "immediate"
    """The cancel mode."""


@final
@attrs.frozen
class SetTimer:
    """``runtime.timers.schedule(session.ref, delay=delay, every=every)``: a durable timer."""

    delay: float
    """Seconds (virtual) until it is due."""
    every: float | None = None
    """Seconds between firings of a recurring timer; ``None``: one-shot."""
    note: str = "wake up"
    """Delivered back to the model with each firing."""


@final
@attrs.frozen
class ClearTimer:
    """``runtime.timers.cancel_timer(...)`` of the ``index``-th timer set so far (modulo).

    A timer that fired already is not found: a typed error, recorded as the outcome.
    """

    index: int = 0
    """Which of the timers set so far, counted modulo their number."""


@final
@attrs.frozen
class WriteBoard:
    """``board.put(key, value)`` on the harness's board, which the session watches.

    Each change reaches the session as a follow-up of kind ``board``.
    """

    key: str
    """The entry's key."""
    value: JsonValue
    """The new value."""


@final
@attrs.frozen
class CrashSession:
    """Crash the session at its next event: its next append fails, nothing is written,
    and its supervisor restarts it from the log (``FaultyEventStore.fail_next_append``)."""


@final
@attrs.frozen
class FailNextCommit:
    """Fail the store's next commit, whoever writes it (session, board...); that actor
    crashes and restarts from its log."""


@final
@attrs.frozen
class RestartRuntime:
    """Stop the runtime, as a process that exits, and open a new one on the same log.

    Every actor and task stops (sends in flight are abandoned, not answered); the new
    runtime's session folds its log and goes on with what was running, its timers are
    re-armed from the log. The clock goes on; the new runtime's seed is the next one.
    """


@final
@attrs.frozen
class AdvanceClock:
    """Let ``seconds`` of virtual time pass (``trio.sleep``): runs progress, timers fire."""

    seconds: float
    """How long, on the Trio clock (a ``MockClock`` in the harness)."""


Operation: TypeAlias = (
    Send
    | SendFollowUp
    | CancelRun
    | SetTimer
    | ClearTimer
    | WriteBoard
    | CrashSession
    | FailNextCommit
    | RestartRuntime
    | AdvanceClock
)
"""One step of an operation sequence (see :func:`operations`)."""
