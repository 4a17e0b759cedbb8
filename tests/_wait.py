"""One way for the suite to wait for something another task, thread or process does.

A fixed sleep is either too long (the suite pays it on every run) or too short (the test
flakes on a loaded machine). These poll a condition instead, starting fast and backing off,
until it holds or a deadline passes; the failure names what was awaited.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

T = TypeVar("T")

_FIRST_PAUSE = 0.002
"""The first pause between two looks: most conditions hold within milliseconds."""


def _name(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


def wait_until(
    done: Callable[[], T],
    what: str | Callable[[], str],
    *,
    timeout: float = 60,
    every: float = 0.1,
    check: Callable[[], None] | None = None,
) -> T:
    """Poll ``done()`` until it returns a true value, and return that value.

    Args:
      done: the condition; its first true result is returned.
      what: what is awaited, for the failure's message (a callable is asked only then).
      timeout: seconds before the wait fails.
      every: the longest pause between two looks (the pauses grow to it from 2 ms).
      check: called before each look; raises to end the wait early (e.g. when the
        process that was to do the thing has exited).

    Raises:
      AssertionError: ``done()`` stayed false for ``timeout`` seconds.
    """
    __tracebackhide__ = True
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while True:
        if check is not None:
            check()
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {_name(what)}")
        time.sleep(pause)
        pause = min(pause * 2, every)


async def wait_until_async(
    done: Callable[[], Awaitable[T]],
    what: str | Callable[[], str],
    *,
    timeout: float = 60,  # noqa: ASYNC109  # its failure names what was awaited; fail_after's cannot
    every: float = 0.1,
) -> T:
    """:func:`wait_until` for a Trio task: ``await done()`` until it gives a true value.

    The pauses are ``trio.sleep``, so under a ``MockClock`` the wait costs no real time.
    """
    __tracebackhide__ = True
    pause = _FIRST_PAUSE
    with trio.move_on_after(timeout):
        while True:
            value = await done()
            if value:
                return value
            await trio.sleep(pause)
            pause = min(pause * 2, every)
    raise AssertionError(f"timed out after {timeout} s waiting for {_name(what)}")
