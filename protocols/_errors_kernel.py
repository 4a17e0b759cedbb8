"""Errors of the actor kernel: actors and asks (``actor.*``), supervision, timers.

The branches ``runtime`` raises while it runs actors, their supervisors and their
timers; ``protocols.errors`` re-exports them.
"""

from __future__ import annotations

from ._errors_base import PowertrioError

__all__ = [
    "ActorCrashedError",
    "ActorError",
    "ActorExistsError",
    "ActorFailedError",
    "ActorNotFoundError",
    "ActorStoppedError",
    "AskTimeoutError",
    "IntensityExceededError",
    "MailboxFullError",
    "RuntimeClosedError",
    "SupervisorError",
    "TimerArgumentError",
    "TimerError",
    "TimerNotFoundError",
    "TimerOwnerUnavailableError",
]


# --- actors --------------------------------------------------------------------------


class ActorError(PowertrioError):
    """Something went wrong talking to an actor."""

    code = "actor"


class ActorStoppedError(ActorError):
    """The actor has stopped for good; it will not handle this message."""

    code = "actor.stopped"

    def __init__(self, actor_id: str, message: str | None = None) -> None:
        self.actor_id = actor_id
        super().__init__(message or f"actor {actor_id!r} is stopped and accepts no more messages")


class ActorFailedError(ActorStoppedError):
    """The actor stopped for good because of an error a restart cannot fix.

    Its supervisor gave up on it alone: the actor's own data does not load (a
    :class:`~protocols.errors.CodecError` or a
    :class:`~protocols.errors.CorruptLogError` while it folds its log), its stream went
    backwards under it (a :class:`~protocols.errors.StreamRewoundError`), or it
    crashed faster than its restart policy allows. Its siblings and the runtime keep
    running. The error it failed with is the ``__cause__``; ``cause_code`` is that error's
    code (``None`` for an exception that is not a powertrio error).
    """

    code = "actor.failed"

    def __init__(self, actor_id: str, cause: BaseException) -> None:
        self.cause_code: str | None = cause.code if isinstance(cause, PowertrioError) else None
        self.cause_type = type(cause).__name__
        label = self.cause_code or self.cause_type
        super().__init__(
            actor_id,
            f"actor {actor_id!r} failed for good and will not be restarted [{label}]: {cause}",
        )
        self.__cause__ = cause


class ActorNotFoundError(ActorError, LookupError):
    """No live actor has this id or path."""

    code = "actor.not_found"

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no actor is registered as {key!r}")


class ActorExistsError(ActorError, ValueError):
    """An actor with this id is already running."""

    code = "actor.exists"

    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id
        super().__init__(f"an actor with id {actor_id!r} is already running; pick another id")


class ActorCrashedError(ActorError):
    """The actor crashed while handling the message that was asked.

    The original exception is the ``__cause__``.
    """

    code = "actor.crashed"

    def __init__(self, actor_id: str, message_type: str) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        super().__init__(f"actor {actor_id!r} crashed while handling a {message_type} message")


class AskTimeoutError(ActorError, TimeoutError):
    """No reply arrived within the ask timeout."""

    code = "actor.ask_timeout"

    def __init__(self, actor_id: str, message_type: str, timeout: float) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(f"actor {actor_id!r} did not reply to {message_type} within {timeout:g} s")


class MailboxFullError(ActorError):
    """A non-waiting send found the mailbox full and the overflow policy is ``reject``."""

    code = "actor.mailbox_full"

    def __init__(self, actor_id: str, capacity: int) -> None:
        self.actor_id = actor_id
        self.capacity = capacity
        super().__init__(
            f"mailbox of actor {actor_id!r} is full ({capacity} messages); "
            "use the waiting `tell`, raise the capacity, or pick another overflow policy"
        )


class RuntimeClosedError(ActorError):
    """The runtime is closed or closing and starts nothing new."""

    code = "actor.runtime_closed"

    def __init__(self, message: str = "the runtime is closed; open a new one") -> None:
        super().__init__(message)


# --- supervision ---------------------------------------------------------------------


class SupervisorError(PowertrioError):
    """A supervisor gave up."""

    code = "supervisor"


class IntensityExceededError(SupervisorError):
    """Children crashed more often than the restart intensity allows.

    The supervisor stops its children and fails, escalating to its own parent.
    """

    code = "supervisor.intensity_exceeded"

    def __init__(self, supervisor_id: str, max_restarts: int, within: float) -> None:
        self.supervisor_id = supervisor_id
        self.max_restarts = max_restarts
        self.within = within
        super().__init__(
            f"supervisor {supervisor_id!r} saw more than {max_restarts} restarts "
            f"within {within:g} s and gave up; the last crash is the cause"
        )


# --- timers --------------------------------------------------------------------------


class TimerError(PowertrioError):
    """A durable timer could not be scheduled, found or cancelled."""

    code = "timer"


class TimerNotFoundError(TimerError, LookupError):
    """No pending timer has this id (it never existed, already fired, or was cancelled)."""

    code = "timer.not_found"

    def __init__(self, timer_id: str) -> None:
        self.timer_id = timer_id
        super().__init__(
            f"no pending timer has id {timer_id!r}; it never existed, already fired "
            "(a one-shot) or was cancelled"
        )


class TimerArgumentError(TimerError, ValueError):
    """A timer was described with a bad value; ``argument`` names it."""

    code = "timer.invalid_args"

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)


class TimerOwnerUnavailableError(TimerError):
    """The actor that owns a timer is not running, so nobody can record a change to it.

    Only the owner appends to its stream (one writer per stream): start the owner, then
    try again.
    """

    code = "timer.owner_unavailable"

    def __init__(self, timer_id: str, stream: str) -> None:
        self.timer_id = timer_id
        self.stream = stream
        super().__init__(
            f"timer {timer_id!r} belongs to stream {stream!r}, whose actor is not running; "
            "start that actor, then try again"
        )
