"""Actor benchmarks: tell and ask against raw Trio channels, idle memory, spawn rate."""

from __future__ import annotations

import argparse
import gc
import time

import trio
import trio.lowlevel

from runtime import Actor, open_runtime

from ._main import in_fresh_process, rss_bytes

_CAPACITY = 1000


class _Sink(Actor[object]):
    """Counts messages; answers any ask with the count."""

    def __init__(self) -> None:
        self.count = 0

    async def receive(self, message: object) -> object:
        self.count += 1
        return self.count


class _Idle(Actor[object]):
    pass


async def _raw_channel(n: int) -> float:
    send, receive = trio.open_memory_channel[int](_CAPACITY)
    done = trio.Event()

    async def consume() -> None:
        count = 0
        async for _ in receive:
            count += 1
            if count == n:
                done.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        start = time.perf_counter()
        for i in range(n):
            await send.send(i)
        await done.wait()
        return n / (time.perf_counter() - start)


async def _tell(n: int) -> float:
    async with open_runtime(seed=0) as runtime:
        ref = await runtime.spawn(_Sink, mailbox_capacity=_CAPACITY)
        start = time.perf_counter()
        for i in range(n):
            await ref.tell(i)
        await ref.ask("flush")
        return n / (time.perf_counter() - start)


async def _raw_pingpong(n: int) -> float:
    to_echo, echo_in = trio.open_memory_channel[int](1)
    to_caller, caller_in = trio.open_memory_channel[int](1)

    async def echo() -> None:
        async for value in echo_in:
            await to_caller.send(value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        start = time.perf_counter()
        for i in range(n):
            await to_echo.send(i)
            await caller_in.receive()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed / n * 1e6


async def _ask(n: int) -> float:
    async with open_runtime(seed=0) as runtime:
        ref = await runtime.spawn(_Sink)
        start = time.perf_counter()
        for i in range(n):
            await ref.ask(i)
        return (time.perf_counter() - start) / n * 1e6


async def idle_and_spawn(count: str) -> tuple[float, float]:
    """RSS per idle bare actor and spawns per second (run in a fresh process)."""
    n = int(count)
    async with open_runtime(seed=0) as runtime:
        await trio.lowlevel.checkpoint()
        gc.collect()
        before = rss_bytes()
        start = time.perf_counter()
        for _ in range(n):
            await runtime.spawn(_Idle)
        spawn_elapsed = time.perf_counter() - start
        await trio.sleep(0.05)  # let every actor reach its idle wait
        gc.collect()
        after = rss_bytes()
        assert runtime.statistics().actors == n
    return (after - before) / n, n / spawn_elapsed


def _best(values: list[float], higher_is_better: bool) -> float:
    return max(values) if higher_is_better else min(values)


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    """Measure each figure beside its raw-Trio baseline, interleaved, best of a few rounds."""
    quick = bool(getattr(args, "quick", False))
    n_tell = 20_000 if quick else 200_000
    n_ask = 5_000 if quick else 50_000
    n_idle = 2_000 if quick else 20_000
    rounds = 1 if quick else 3
    raw_tell, tell, raw_rtt, rtt = [], [], [], []
    for _ in range(rounds):
        raw_tell.append(trio.run(_raw_channel, n_tell))
        tell.append(trio.run(_tell, n_tell))
        raw_rtt.append(trio.run(_raw_pingpong, n_ask))
        rtt.append(trio.run(_ask, n_ask))
    # In a fresh process: the loops above grew the heap, which would hide the actors' cost.
    idle_bytes, spawn_rate = in_fresh_process("runtime.bench._actors:idle_and_spawn", str(n_idle))
    tell_best, raw_tell_best = _best(tell, True), _best(raw_tell, True)
    rtt_best, raw_rtt_best = _best(rtt, False), _best(raw_rtt, False)
    return {
        "tell_msgs_per_s": round(tell_best),
        "raw_channel_msgs_per_s": round(raw_tell_best),
        "tell_ratio": round(tell_best / raw_tell_best, 3),
        "ask_rtt_us": round(rtt_best, 2),
        "raw_pingpong_rtt_us": round(raw_rtt_best, 2),
        "ask_ratio": round(rtt_best / raw_rtt_best, 3),
        "idle_actor_bytes": round(idle_bytes),
        "spawn_per_s": round(spawn_rate),
        "idle_actors_measured": n_idle,
    }
