"""The runtime's clock and id source: the only places actor logic gets time and identity from."""

from __future__ import annotations

import random
import time
from typing import final

import trio

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]
"""Every pair of digits, by the 10-bit value it writes."""
_SHIFTS = range(120, -1, -10)


@final
class Clock:
    """Wall-clock time derived from the Trio clock.

    Actors read time here, never from :func:`time.time`, so that under
    ``trio.testing.MockClock`` a day of timers passes in milliseconds and a replay sees the
    same times as the live run (invariant 6, determinism). The wall time is
    ``start + (trio.current_time() - trio time at start)``; the origin is fixed the first time
    the clock is read inside ``trio.run``.

    Args:
        start (float | None): the epoch seconds the clock shows at its origin; ``None`` takes
            :func:`time.time` when the clock is first read.
    """

    __slots__ = ("_start", "_trio_origin")

    def __init__(self, start: float | None = None) -> None:
        self._start = start
        self._trio_origin: float | None = None

    def now(self) -> float:
        """Return the current wall time in epoch seconds."""
        current = trio.current_time()
        if self._trio_origin is None:
            self._trio_origin = current
            if self._start is None:
                self._start = time.time()
        assert self._start is not None
        return self._start + (current - self._trio_origin)

    def monotonic(self) -> float:
        """Return Trio's monotonic time (what deadlines and cancel scopes use)."""
        return trio.current_time()

    def deadline_for(self, epoch_seconds: float) -> float:
        """Translate a wall time into a Trio deadline for ``trio.sleep_until``."""
        return trio.current_time() + (epoch_seconds - self.now())


@final
class IdSource:
    """Makes sortable, unique ids (ULID-shaped) from the clock and a seeded generator.

    With a seed the sequence is reproducible, which tests and replays rely on; without one
    it is seeded from the operating system.

    Args:
        clock (Clock): time for the id's leading 48 bits.
        seed (int | None): seed of the random part.
    """

    __slots__ = ("_clock", "_counter", "_last_ms", "_random")

    def __init__(self, clock: Clock, seed: int | None = None) -> None:
        self._clock = clock
        self._random = random.Random(seed)
        self._last_ms = -1
        self._counter = 0

    @property
    def random(self) -> random.Random:
        """The seeded generator, for jitter and other randomness actors need."""
        return self._random

    def new(self, prefix: str = "") -> str:
        """Return a new id: ``prefix`` + ``_`` + 26 Crockford base-32 characters.

        Ids made by one source sort in creation order, even within one millisecond.
        """
        try:
            ms = int(self._clock.now() * 1000)
        except RuntimeError:  # outside trio.run: fall back to the host clock
            ms = int(time.time() * 1000)
        if ms <= self._last_ms:
            ms = self._last_ms
            self._counter += 1
        else:
            self._last_ms = ms
            self._counter = self._random.getrandbits(39)  # headroom so +1 never overflows
        value = (ms << 80) | (self._counter << 40) | self._random.getrandbits(40)
        pairs = _PAIRS  # 13 pairs of digits, 10 bits each, most significant first
        body = "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])
        return f"{prefix}_{body}" if prefix else body
