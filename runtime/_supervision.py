"""Supervision settings, restart arithmetic and the typed lifecycle events supervisors publish."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, final

import attrs

from ._mailbox import DEFAULT_CAPACITY, OverflowPolicy, check_mailbox_config

if TYPE_CHECKING:
    from ._actor import Actor

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
"""Which children restart when one crashes (OTP): only it; all; it and those started after it."""

RestartType = Literal["permanent", "transient", "temporary"]
"""When a child is restarted: always; only after a crash; never."""

GiveUpPolicy = Literal["escalate", "stop"]
"""What a child's crash loop brings down: its supervisor (OTP), or only the child itself."""

_STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")
_RESTART_TYPES = ("permanent", "transient", "temporary")
_GIVE_UP_POLICIES = ("escalate", "stop")


def _non_negative(name: str) -> Callable[[object, object, float], None]:
    def check(_instance: object, _attribute: object, value: float) -> None:
        if not isinstance(value, int | float) or math.isnan(value) or value < 0:
            msg = f"{name} must be a non-negative number, got {value!r}"
            raise ValueError(msg)

    return check


def _one_of(name: str, allowed: tuple[str, ...]) -> Callable[[object, object, str], None]:
    def check(_instance: object, _attribute: object, value: str) -> None:
        if value not in allowed:
            msg = f"{name} must be one of {', '.join(allowed)}; got {value!r}"
            raise ValueError(msg)

    return check


@final
@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff with jitter between restarts of one child.

    The n-th consecutive restart waits ``min(maximum, initial * factor**(n-1))``, scaled by a
    random factor in ``[1 - jitter, 1 + jitter]`` from the runtime's seeded generator, so
    children that crash together do not come back in lockstep.
    """

    initial: float = attrs.field(default=0.01, validator=_non_negative("initial"))
    """Delay before the first restart, in seconds."""
    factor: float = attrs.field(default=2.0, validator=_non_negative("factor"))
    """Growth per consecutive restart."""
    maximum: float = attrs.field(default=5.0, validator=_non_negative("maximum"))
    """Upper bound of the delay, in seconds."""
    jitter: float = attrs.field(default=0.2, validator=_non_negative("jitter"))
    """Relative spread of the random factor, between 0 and 1."""

    def __attrs_post_init__(self) -> None:
        if self.jitter > 1:
            msg = f"jitter must be between 0 and 1, got {self.jitter!r}"
            raise ValueError(msg)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The delay before restart number ``attempt`` (1-based) of one child."""
        try:
            grown = self.initial * self.factor ** max(0, attempt - 1)
        except OverflowError:  # a child that crash-loops for long: the cap applies
            grown = math.inf
        base = min(self.maximum, grown)
        if self.jitter == 0 or base == 0:
            return base
        return base * (1 + self.jitter * (2 * rng.random() - 1))


@final
@attrs.frozen(kw_only=True)
class Supervision:
    """How an actor supervises its children (OTP supervisor flags plus backoff).

    More than ``max_restarts`` restarts within ``within`` seconds make the supervisor stop
    all its children in reverse start order and fail with
    :class:`~protocols.errors.IntensityExceededError`, escalating to its own parent.
    """

    strategy: Strategy = attrs.field(
        default="one_for_one", validator=_one_of("strategy", _STRATEGIES)
    )
    """Which children restart when one crashes."""
    max_restarts: int = attrs.field(default=3)
    """Restarts tolerated within the window."""
    within: float = attrs.field(default=5.0, validator=_non_negative("within"))
    """The window, in seconds of the Trio clock."""
    backoff: Backoff = attrs.field(factory=Backoff)
    """Delay between a crash and the restart."""

    @max_restarts.validator
    def _check_max_restarts(self, _attribute: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            msg = f"max_restarts must be a non-negative int, got {value!r}"
            raise ValueError(msg)


@final
@attrs.frozen(kw_only=True)
class ChildSpec:
    """How to start one child and when to restart it.

    The ``factory`` makes a fresh actor for every (re)start: state that must survive a
    restart belongs in the event log, not in the actor object.
    """

    factory: Callable[[], Actor[object]]
    """Makes the actor instance; called again for each restart."""
    name: str | None = None
    """Path segment in the tree; defaults to the id."""
    id: str | None = None
    """Stable id, unique in the runtime; generated when ``None``."""
    restart: RestartType = attrs.field(
        default="permanent", validator=_one_of("restart", _RESTART_TYPES)
    )
    """When to restart the child."""
    on_give_up: GiveUpPolicy = attrs.field(
        default="escalate", validator=_one_of("on_give_up", _GIVE_UP_POLICIES)
    )
    """What happens when the child crashes faster than the supervisor's intensity allows.

    ``escalate`` (OTP): its crashes count against the supervisor, which stops all its
    children and fails, escalating to its own parent. ``stop`` (Akka's restart with a
    limit): the child's crashes are counted apart, against the same limits, and when they
    exceed them only this child stops for good, failed with its last error
    (:class:`~protocols.errors.ActorFailedError`); its supervisor and siblings go on. Use
    ``stop`` for children that each serve one independent party, such as agent sessions.
    """
    shutdown_timeout: float = attrs.field(default=5.0, validator=_non_negative("shutdown_timeout"))
    """Seconds an orderly stop may take before the child is cancelled."""
    mailbox_capacity: int = DEFAULT_CAPACITY
    """Bound of the user lane of the mailbox."""
    overflow: OverflowPolicy = "reject"
    """What a non-waiting send does when the mailbox is full."""
    lazy: bool = False
    """Start the child at its first message, not at spawn: ``spawn`` returns at once, the
    first message (any ``tell`` or ``ask``, a stop excepted) starts it, and a child never
    messaged never runs. For actors made in large numbers, most of them idle, such as new
    agent sessions."""

    def __attrs_post_init__(self) -> None:
        check_mailbox_config(self.mailbox_capacity, self.overflow)
        factory: object = self.factory  # typed callable, but users may pass anything
        if not callable(factory):
            msg = f"factory must be callable, got {self.factory!r}"
            raise TypeError(msg)
        for label, value in (("name", self.name), ("id", self.id)):
            if value is not None and (not value or "/" in value):
                msg = f"{label} must be a non-empty string without '/', got {value!r}"
                raise ValueError(msg)


@final
class RestartIntensity:
    """Counts restarts in a sliding window (the OTP MaxR/MaxT rule)."""

    __slots__ = ("_max", "_times", "_within")

    def __init__(self, max_restarts: int, within: float) -> None:
        self._max = max_restarts
        self._within = within
        self._times: deque[float] = deque()

    def record(self, now: float) -> bool:
        """Record a restart at ``now``; return ``True`` if the intensity is now exceeded."""
        times = self._times
        times.append(now)
        horizon = now - self._within
        while times and times[0] <= horizon:
            times.popleft()
        return len(times) > self._max


# --- lifecycle events ----------------------------------------------------------------

StopReason = Literal["normal", "shutdown", "killed", "crashed", "failed"]
"""Why an actor stopped for good: it stopped itself; it was stopped; it ignored a stop and
was cancelled; it crashed and is not restarted (``temporary``); its supervisor gave up on
it alone (an error a restart cannot fix, or a crash loop under ``on_give_up="stop"``)."""


@final
@attrs.frozen(kw_only=True)
class ActorStarted:
    """An actor incarnation started (``incarnation`` 1 is the first start)."""

    actor_id: str
    path: str
    incarnation: int
    at: float
    """Wall time from the runtime clock."""


@final
@attrs.frozen(kw_only=True)
class ActorCrashed:
    """An actor raised out of its handler; its supervisor decides what happens next."""

    actor_id: str
    path: str
    incarnation: int
    error_type: str
    error_message: str
    error_code: str | None
    """The ``code`` of a powertrio error, else ``None``."""
    at: float


@final
@attrs.frozen(kw_only=True)
class ActorRestarting:
    """The supervisor will restart the actor after ``delay`` seconds."""

    actor_id: str
    path: str
    incarnation: int
    """The incarnation that will start."""
    delay: float
    at: float


@final
@attrs.frozen(kw_only=True)
class ActorPassivated:
    """An actor passivated itself (idle, its state in the log): its incarnation ended, no
    restart is counted, and its next message starts ``incarnation + 1``. It stays
    registered: its ref and id still reach it."""

    actor_id: str
    path: str
    incarnation: int
    """The incarnation that ended."""
    at: float


@final
@attrs.frozen(kw_only=True)
class ActorStopped:
    """The actor stopped for good; its mailbox is closed."""

    actor_id: str
    path: str
    reason: StopReason
    at: float
    error_code: str | None = None
    """For ``crashed`` and ``failed``: the ``code`` of the powertrio error it ended with."""


@final
@attrs.frozen(kw_only=True)
class SupervisorEscalated:
    """A supervisor exceeded its restart intensity and failed, escalating to its parent."""

    supervisor_id: str
    path: str
    restarts: int
    within: float
    at: float


LifecycleEvent = (
    ActorStarted
    | ActorCrashed
    | ActorRestarting
    | ActorPassivated
    | ActorStopped
    | SupervisorEscalated
)
"""Everything the supervision tree reports through ``Runtime.subscribe``."""
