"""The runtime's idle sweeper (``ActorContext.watch_idle``): one task runs every actor's
idle checks at their deadlines, only while the incarnation that asked runs."""

from __future__ import annotations

import itertools
import logging

import pytest
import trio
import trio.testing

from runtime import Actor, open_runtime


class _Watching(Actor[object]):
    """Asks for a look at ``first`` (Trio time from its start), then every ``every``
    seconds, ``times`` looks in all; a message ``"crash"`` crashes it."""

    def __init__(self, seen: list[tuple[int, float]], *, every: float, times: int) -> None:
        self._seen = seen
        self._every = every
        self._times = times

    async def on_start(self) -> None:
        self.context.watch_idle(trio.current_time() + self._every, self._look)

    def _look(self) -> float | None:
        self._seen.append((self.context.incarnation, trio.current_time()))
        if len(self._seen) >= self._times:
            return None
        return trio.current_time() + self._every

    async def receive(self, message: object) -> object:
        if message == "crash":
            raise RuntimeError("crash")
        return message


async def test_a_check_runs_at_its_deadline_and_again_when_it_says(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under a virtual clock the looks come at exactly the times asked for, and a check
    that returns ``None`` is never called again."""
    seen: list[tuple[int, float]] = []
    async with open_runtime(seed=1) as runtime:
        began = trio.current_time()
        await runtime.spawn(lambda: _Watching(seen, every=10, times=3))
        await trio.sleep(100)
    assert [(i, t - began) for i, t in seen] == [(1, 10.0), (1, 20.0), (1, 30.0)]


async def test_the_check_of_an_ended_incarnation_is_never_called(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A crashed incarnation's look does not come (its state is gone, and its verdict
    would reach the next incarnation's loop); the restarted one's does."""
    seen: list[tuple[int, float]] = []
    async with open_runtime(seed=1) as runtime:
        began = trio.current_time()
        ref = await runtime.spawn(lambda: _Watching(seen, every=10, times=5))
        await trio.sleep(5)
        ref.tell_nowait("crash")
        await trio.sleep(40)
    # Only the second incarnation (restarted after a short backoff) looks, every 10 s.
    assert [i for i, _ in seen] == [2, 2, 2]
    times = [t - began for _, t in seen]
    assert 15 < times[0] < 16
    assert [round(b - a, 6) for a, b in itertools.pairwise(times)] == [10.0, 10.0]


class _Broken(Actor[object]):
    async def on_start(self) -> None:
        self.context.watch_idle(trio.current_time() + 1, self._look)

    def _look(self) -> float | None:
        raise ValueError("a broken check")

    async def receive(self, message: object) -> object:
        return message


async def test_a_failing_check_is_logged_and_dropped_and_the_others_go_on(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """One actor's check that raises is reported and never called again; neither the
    sweeper, nor that actor, nor any other actor's looks stop."""
    seen: list[tuple[int, float]] = []
    with caplog.at_level(logging.ERROR, logger="powertrio.runtime"):
        async with open_runtime(seed=1) as runtime:
            broken = await runtime.spawn(_Broken, id="broken")
            await runtime.spawn(lambda: _Watching(seen, every=2, times=3))
            await trio.sleep(10)
            assert await broken.ask("still here") == "still here"
    assert len(seen) == 3
    assert "actor /broken: its idle check failed; it is not checked again" in caplog.text
