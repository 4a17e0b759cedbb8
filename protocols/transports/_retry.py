"""Retries with exponential backoff and jitter, a total deadline, and a record of every attempt."""

from __future__ import annotations

import logging
import math
import random as _random
from collections.abc import Awaitable, Callable
from typing import TypeVar, final

import attrs
import trio

from protocols.errors import LLMError, LLMTimeoutError, PowertrioError

__all__ = ["Attempt", "AttemptObserver", "RetryPolicy", "call_with_retries"]

_T = TypeVar("_T")
logger = logging.getLogger("powertrio.transports")


@final
@attrs.frozen(kw_only=True)
class RetryPolicy:
    """When and how long to wait before trying a failed provider call again.

    Only errors whose class says ``retryable`` are retried: rate limits (429), server
    failures (5xx, 409), connection errors and timeouts (including 408). Other 4xx answers
    are never retried. The delay before retry ``n`` (counting from 1) is
    ``initial_delay * multiplier ** (n - 1)``, capped at ``max_delay``, then scaled by a
    random factor in ``[1 - jitter, 1 + jitter]``; a ``Retry-After`` from the provider
    replaces it. No retry starts if it could not begin before the ``deadline``.
    """

    max_attempts: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    """The most attempts in all, the first included (1 turns retries off)."""
    initial_delay: float = attrs.field(default=0.5, validator=attrs.validators.ge(0))
    """Seconds before the first retry, before jitter."""
    multiplier: float = attrs.field(default=2.0, validator=attrs.validators.ge(1))
    """Growth factor of the delay per retry."""
    max_delay: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    """The longest computed delay (a provider's ``Retry-After`` may ask for longer)."""
    jitter: float = attrs.field(
        default=0.25, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )
    """Relative spread of the random factor applied to computed delays."""
    deadline: float | None = 300.0
    """Seconds for all attempts and waits together; ``None``: no overall limit."""

    def delay_for(self, retry: int, error: LLMError, rand: float) -> float:
        """The wait before retry number ``retry`` (1 for the first retry).

        Args:
            retry (int): which retry this is, from 1.
            error (LLMError): the failure; its ``retry_after`` wins when set.
            rand (float): a random number in ``[0, 1)`` for the jitter.

        Returns:
            (float): seconds to wait.
        """
        if error.retry_after is not None:
            return error.retry_after
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return max(0.0, base * (1.0 - self.jitter + 2.0 * self.jitter * rand))


@final
@attrs.frozen(kw_only=True)
class Attempt:
    """What happened on one attempt of a provider call (reported to the attempt observer).

    Observers typically append these as events, so an operator sees every failed attempt
    and how long the transport waited. They never contain the API key.
    """

    provider: str
    """The provider name (``"openai"``, ``"anthropic"``)."""
    number: int
    """Which attempt this was, from 1."""
    error_code: str | None
    """The failure's stable code (e.g. ``"llm.rate_limited"``), or None on success."""
    error_message: str | None
    """The failure's message, or None on success."""
    status: int | None
    """The HTTP status of the failure, when there was one."""
    next_delay: float | None
    """Seconds until the next attempt, or None when there is none (success or giving up)."""
    elapsed: float
    """Seconds since the first attempt started (Trio clock)."""


#: Called with every :class:`Attempt`, synchronously, before any retry wait.
AttemptObserver = Callable[[Attempt], None]


async def call_with_retries(
    attempt: Callable[[], Awaitable[_T]],
    *,
    policy: RetryPolicy,
    provider: str,
    on_attempt: AttemptObserver | None = None,
    rand: Callable[[], float] = _random.random,
) -> _T:
    """Run ``attempt`` until it succeeds, a non-retryable error occurs, or the budget is spent.

    Waits use the Trio clock, so tests under ``MockClock`` do not sleep.

    Args:
        attempt (Callable[[], Awaitable[T]]): one try of the call.
        policy (RetryPolicy): attempts, delays and the overall deadline.
        provider (str): the provider name, for attempt records and messages.
        on_attempt (AttemptObserver | None): told about every attempt.
        rand (Callable[[], float]): the jitter source (inject a seeded one for determinism).

    Returns:
        (T): the first successful result.

    Raises:
        LLMError: the last failure, once no retry is left or the error is not retryable.
        LLMTimeoutError: ``phase="total"`` when the policy's deadline passes mid-attempt.
        ConfigError: a configuration problem found on the way (never retried).
    """
    start = trio.current_time()
    deadline = math.inf if policy.deadline is None else start + policy.deadline
    number = 0
    while True:
        number += 1
        try:
            with trio.move_on_at(deadline) as scope:
                result = await attempt()
            if scope.cancelled_caught:
                raise LLMTimeoutError(
                    f"{provider}: no answer within the {policy.deadline:g} s deadline "
                    f"for all attempts ({number} started)",
                    phase="total",
                    provider=provider,
                )
        except LLMError as error:
            now = trio.current_time()
            delay: float | None = None
            if error.retryable and number < policy.max_attempts:
                delay = policy.delay_for(number, error, rand())
                if now + delay >= deadline:
                    delay = None
            _report(
                on_attempt,
                provider,
                number=number,
                error=error,
                delay=delay,
                elapsed=now - start,
            )
            if delay is None:
                raise
            await trio.sleep(delay)
        except PowertrioError as error:
            _report(
                on_attempt,
                provider,
                number=number,
                error=error,
                delay=None,
                elapsed=trio.current_time() - start,
            )
            raise
        else:
            _report(
                on_attempt,
                provider,
                number=number,
                error=None,
                delay=None,
                elapsed=trio.current_time() - start,
            )
            return result


def _report(
    on_attempt: AttemptObserver | None,
    provider: str,
    *,
    number: int,
    error: PowertrioError | None,
    delay: float | None,
    elapsed: float,
) -> None:
    record = Attempt(
        provider=provider,
        number=number,
        error_code=None if error is None else error.code,
        error_message=None if error is None else error.message,
        status=getattr(error, "status", None),
        next_delay=delay,
        elapsed=elapsed,
    )
    if error is not None:
        if delay is not None:
            logger.warning(
                "%s: attempt %d failed (%s: %s); retrying in %.2f s",
                provider,
                number,
                error.code,
                error.message,
                delay,
            )
        else:
            logger.warning(
                "%s: attempt %d failed (%s: %s); giving up",
                provider,
                number,
                error.code,
                error.message,
            )
    if on_attempt is not None:
        on_attempt(record)
