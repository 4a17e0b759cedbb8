"""Supervision trees: strategies, restart types, intensity, backoff, ordered shutdown."""

from __future__ import annotations

import itertools
import random

import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import (
    ActorFailedError,
    ActorStoppedError,
    EventDecodeError,
    IntensityExceededError,
)
from runtime import Actor, ActorRef, Supervisor, open_runtime
from runtime.supervision import (
    ActorCrashed,
    ActorRestarting,
    ActorStopped,
    Backoff,
    ChildSpec,
    LifecycleEvent,
    RestartIntensity,
    Supervision,
    SupervisorEscalated,
)

NO_DELAY = Backoff(initial=0, jitter=0)


class Journal:
    """What the children of a test did, in order."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []
        self.starts: dict[str, int] = {}

    def record(self, what: str, name: str) -> None:
        self.entries.append((what, name))
        if what == "start":
            self.starts[name] = self.starts.get(name, 0) + 1


def child(journal: Journal, name: str) -> ChildSpec:
    return ChildSpec(factory=lambda: Child(journal, name), name=name, id=name)


class Child(Actor[object]):
    def __init__(self, journal: Journal, name: str) -> None:
        self.journal = journal
        self.name = name

    async def on_start(self) -> None:
        self.journal.record("start", self.name)

    async def on_stop(self) -> None:
        self.journal.record("stop", self.name)

    async def receive(self, message: object) -> object:
        if message == "crash":
            raise RuntimeError(f"{self.name} crashed")
        if message == "exit":
            self.context.stop()
        if message == "hang":
            await trio.sleep_forever()
        return self.context.incarnation


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


def drain(events: trio.MemoryReceiveChannel[LifecycleEvent]) -> list[LifecycleEvent]:
    seen: list[LifecycleEvent] = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except trio.WouldBlock:
            return seen


@pytest.mark.parametrize(
    ("strategy", "expected_starts", "expected_stops"),
    [
        ("one_for_one", {"a": 1, "b": 2, "c": 1}, []),
        ("one_for_all", {"a": 2, "b": 2, "c": 2}, [("stop", "c"), ("stop", "a")]),
        ("rest_for_one", {"a": 1, "b": 2, "c": 2}, [("stop", "c")]),
    ],
)
async def test_strategy_decides_who_restarts(
    strategy: str,
    expected_starts: dict[str, int],
    expected_stops: list[tuple[str, str]],
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    supervision = Supervision(strategy=strategy, backoff=NO_DELAY)  # type: ignore[arg-type]
    async with open_runtime(seed=3) as runtime:
        await runtime.spawn(
            lambda: Supervisor([child(journal, n) for n in "abc"], supervision), name="sup"
        )
        await settle()
        journal.entries.clear()
        await runtime.lookup("b").tell("crash")
        await settle()
        assert journal.starts == expected_starts
        stops = [entry for entry in journal.entries if entry[0] == "stop"]
        assert stops == expected_stops
        # Restarts come back in start order.
        restarted = [name for what, name in journal.entries if what == "start"]
        assert restarted == sorted(restarted)


@pytest.mark.parametrize(
    ("restart", "exit_kind", "restarted"),
    [
        ("permanent", "exit", True),
        ("permanent", "crash", True),
        ("transient", "exit", False),
        ("transient", "crash", True),
        ("temporary", "exit", False),
        ("temporary", "crash", False),
    ],
)
async def test_restart_types(
    restart: str, exit_kind: str, restarted: bool, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    async with open_runtime(seed=3, supervision=Supervision(backoff=NO_DELAY)) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(
                lambda: Child(journal, "x"),
                id="x",
                restart=restart,  # type: ignore[arg-type]
            )
            await settle()
            await ref.tell(exit_kind)
            await settle()
            assert ref.alive is restarted
            assert journal.starts["x"] == (2 if restarted else 1)
            seen = drain(events)
        if restarted:
            assert await_incarnation_is_two(seen)
        else:
            stopped = [e for e in seen if isinstance(e, ActorStopped)]
            assert [e.reason for e in stopped] == ["crashed" if exit_kind == "crash" else "normal"]
            with pytest.raises(ActorStoppedError):
                await ref.ask("anything")


def await_incarnation_is_two(events: list[LifecycleEvent]) -> bool:
    return any(isinstance(e, ActorRestarting) and e.incarnation == 2 for e in events)


async def test_intensity_escalates_to_the_parent_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    inner = Supervision(max_restarts=2, within=10, backoff=NO_DELAY)
    outer = Supervision(max_restarts=5, within=10, backoff=NO_DELAY)
    async with open_runtime(seed=3, supervision=outer) as runtime:
        with runtime.subscribe() as events:
            await runtime.spawn(lambda: Supervisor([child(journal, "w")], inner), id="team")
            await settle()
            for _ in range(3):
                await runtime.lookup("w").tell("crash")
                await settle()
            seen = drain(events)
        escalations = [e for e in seen if isinstance(e, SupervisorEscalated)]
        assert [(e.supervisor_id, e.restarts, e.within) for e in escalations] == [("team", 2, 10)]
        crashes = [e for e in seen if isinstance(e, ActorCrashed)]
        assert [c.actor_id for c in crashes] == ["w", "w", "w", "team"]
        assert crashes[-1].error_code == "supervisor.intensity_exceeded"
        # The root restarted the team, which started a fresh worker.
        assert runtime.lookup("w").alive
        assert await runtime.lookup("w").ask("who") == 1
        assert journal.starts["w"] == 4


async def test_root_escalation_raises_out_of_the_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with pytest.raises(IntensityExceededError) as info:
        async with open_runtime(
            seed=3, supervision=Supervision(max_restarts=1, within=60, backoff=NO_DELAY)
        ) as runtime:
            ref = await runtime.spawn(lambda: Child(journal, "x"), id="x")
            await ref.tell("crash")
            await settle()
            await ref.tell("crash")
            await trio.sleep_forever()
    assert info.value.code == "supervisor.intensity_exceeded"
    assert str(info.value) == (
        "supervisor 'root' saw more than 1 restarts within 60 s and gave up; "
        "the last crash is the cause"
    )
    assert isinstance(info.value.__cause__, RuntimeError)
    assert journal.entries[-1] == ("start", "x")  # crashed, so no on_stop


async def test_backoff_grows_exponentially_under_mock_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []

    class Flaky(Actor[object]):
        async def on_start(self) -> None:
            starts.append(trio.current_time())
            if len(starts) <= 5:
                raise RuntimeError("not yet")

    backoff = Backoff(initial=1.0, factor=2.0, maximum=8.0, jitter=0)
    async with open_runtime(
        seed=3, supervision=Supervision(max_restarts=10, within=1000, backoff=backoff)
    ) as runtime:
        await runtime.spawn(Flaky)
        await trio.sleep(100)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 8.0]


async def test_backoff_resets_after_a_stable_run(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    backoff = Backoff(initial=1.0, factor=10.0, maximum=100.0, jitter=0)
    async with open_runtime(
        seed=3, supervision=Supervision(max_restarts=10, within=5, backoff=backoff)
    ) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(lambda: Child(journal, "x"))
            await ref.tell("crash")
            await trio.sleep(2)
            await ref.tell("crash")
            await trio.sleep(20)
            await trio.sleep(10)  # stable for longer than `within`
            await ref.tell("crash")
            await trio.sleep(2)
            delays = [e.delay for e in drain(events) if isinstance(e, ActorRestarting)]
    assert delays == [1.0, 10.0, 1.0]


@settings(max_examples=examples(200), deadline=None)
@given(
    initial=st.floats(0, 10),
    factor=st.floats(1, 4),
    maximum=st.floats(0, 100),
    jitter=st.floats(0, 1),
    attempt=st.integers(1, 30),
    seed=st.integers(0, 2**32),
)
def test_backoff_delay_stays_within_its_jitter_band(
    initial: float, factor: float, maximum: float, jitter: float, attempt: int, seed: int
) -> None:
    backoff = Backoff(initial=initial, factor=factor, maximum=maximum, jitter=jitter)
    base = min(maximum, initial * factor ** (attempt - 1))
    delay = backoff.delay(attempt, random.Random(seed))
    assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9


@given(
    times=st.lists(st.floats(0, 100, allow_nan=False), max_size=30).map(sorted),
    max_restarts=st.integers(0, 5),
    within=st.floats(0.1, 20),
)
def test_restart_intensity_matches_a_sliding_window_model(
    times: list[float], max_restarts: int, within: float
) -> None:
    intensity = RestartIntensity(max_restarts, within)
    for i, now in enumerate(times):
        in_window = [t for t in times[: i + 1] if t > now - within]
        assert intensity.record(now) == (len(in_window) > max_restarts)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "all_for_none"}, "strategy must be one of one_for_one, one_for_all"),
        ({"max_restarts": -1}, "max_restarts must be a non-negative int, got -1"),
        ({"within": float("nan")}, "within must be a non-negative number, got nan"),
    ],
)
def test_supervision_rejects_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Supervision(**kwargs)  # type: ignore[arg-type]


def test_backoff_rejects_jitter_above_one() -> None:
    with pytest.raises(ValueError, match=r"jitter must be between 0 and 1, got 1\.5"):
        Backoff(jitter=1.5)


async def test_orderly_shutdown_stops_children_in_reverse_start_order() -> None:
    journal = Journal()

    class Parent(Actor[object]):
        async def on_start(self) -> None:
            for name in ("p1", "p2"):
                await self.context.spawn(lambda name=name: Child(journal, name), name=name)

        async def on_stop(self) -> None:
            journal.record("stop", "parent")

    async with open_runtime(seed=3) as runtime:
        await runtime.spawn(lambda: Child(journal, "first"), name="first")
        await runtime.spawn(Parent, name="parent")
        await runtime.spawn(lambda: Child(journal, "last"), name="last")
        await settle()
        journal.entries.clear()
    assert journal.entries == [
        ("stop", "last"),
        ("stop", "p2"),
        ("stop", "p1"),
        ("stop", "parent"),
        ("stop", "first"),
    ]


async def test_a_child_that_ignores_stop_is_cancelled_after_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    async with open_runtime(seed=3) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(lambda: Child(journal, "stuck"), shutdown_timeout=2.5)
            await ref.tell("hang")
            await settle()
            before = trio.current_time()
            await runtime.stop(ref)
            assert trio.current_time() - before == pytest.approx(2.5)
            stopped = [e for e in drain(events) if isinstance(e, ActorStopped)]
    assert [e.reason for e in stopped] == ["killed"]
    assert ("stop", "stuck") not in journal.entries


async def test_stopping_a_node_stops_its_whole_subtree() -> None:
    journal = Journal()

    class Node(Actor[object]):
        def __init__(self, depth: int) -> None:
            self.depth = depth

        async def on_start(self) -> None:
            if self.depth < 3:
                for i in range(2):
                    await self.context.spawn(lambda: Node(self.depth + 1), name=f"n{i}")

    async with open_runtime(seed=3) as runtime:
        top = await runtime.spawn(lambda: Node(0), name="top")
        keep = await runtime.spawn(lambda: Child(journal, "keep"), name="keep")
        await settle()
        assert runtime.statistics().actors == 1 + 2 + 4 + 8 + 1
        leaf = runtime.lookup_path("/top/n1/n0/n1")
        await runtime.stop(top)
        assert runtime.statistics().actors == 1
        assert not leaf.alive
        assert keep.alive


class KidsParent(Actor[object]):
    """Starts one child, ``kid``; crashes on every message."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def on_start(self) -> None:
        await self.context.spawn(lambda: Child(self.journal, "kid"), name="kid", id="kid")

    async def receive(self, message: object) -> object:
        raise RuntimeError("parent down")


async def test_a_crashing_parent_takes_its_children_down_and_restarts_fresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    async with open_runtime(seed=3, supervision=Supervision(backoff=NO_DELAY)) as runtime:
        parent = await runtime.spawn(lambda: KidsParent(journal), name="parent")
        await settle()
        old_kid = runtime.lookup("kid")
        await parent.tell("boom")
        await settle()
        new_kid = runtime.lookup("kid")
        assert not old_kid.alive
        assert new_kid.alive and new_kid is not old_kid
        assert journal.starts["kid"] == 2


async def test_a_child_waiting_for_its_restart_goes_when_its_parent_crashes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The child crashed and waits out its backoff when the parent crashes too: its restart
    dies with the parent, and so does the child (it does not keep its id registered).
    The parent's next incarnation spawns it again, and it runs."""
    journal = Journal()
    slow_restarts = Supervision(backoff=Backoff(initial=60, jitter=0))
    async with open_runtime(seed=3, supervision=slow_restarts) as runtime:
        parent = await runtime.spawn(lambda: KidsParent(journal), name="parent")
        await settle()
        old_kid = runtime.lookup("kid")
        await old_kid.tell("crash")
        await settle()
        assert journal.starts["kid"] == 1  # waiting a minute for its restart
        await parent.tell("boom")
        await trio.sleep(61)  # the parent waits out its own backoff, then starts again
        new_kid = runtime.lookup("kid")
        assert not old_kid.alive
        assert new_kid is not old_kid
        assert await new_kid.ask("incarnation?") == 1
        assert journal.starts["kid"] == 2


def test_strategies_match_a_model_for_random_crash_sequences() -> None:
    @settings(max_examples=examples(60), deadline=None)
    @given(
        strategy=st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"]),
        size=st.integers(1, 6),
        crashes=st.lists(st.integers(0, 5), max_size=12),
    )
    def check(strategy: str, size: int, crashes: list[int]) -> None:
        crashes = [c % size for c in crashes]
        expected = [1] * size
        for victim in crashes:
            if strategy == "one_for_one":
                expected[victim] += 1
            elif strategy == "one_for_all":
                expected = [n + 1 for n in expected]
            else:
                expected = [n + 1 if i >= victim else n for i, n in enumerate(expected)]
        journal = Journal()

        async def scenario() -> None:
            supervision = Supervision(
                strategy=strategy,  # type: ignore[arg-type]
                max_restarts=1000,
                backoff=Backoff(initial=0.5, jitter=0.5),
            )
            names = [f"c{i}" for i in range(size)]
            async with open_runtime(seed=11) as runtime:
                await runtime.spawn(
                    lambda: Supervisor([child(journal, n) for n in names], supervision)
                )
                await trio.sleep(1)
                for victim in crashes:
                    await runtime.lookup(names[victim]).tell("crash")
                    await trio.sleep(100)  # past any backoff
                assert [journal.starts[n] for n in names] == expected
                for n, incarnations in zip(names, expected, strict=True):
                    assert await runtime.lookup(n).ask("which") == incarnations

        trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))

    check()


@pytest.mark.slow
async def test_ten_thousand_actors_with_random_crashes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Everything crashed is restarted or removed per its restart type; nothing outlives close."""
    rng = random.Random(2026)
    count = 10_000
    kinds = ["permanent", "transient", "temporary"]
    restart_of = {f"w{i}": kinds[i % 3] for i in range(count)}
    victims = rng.sample(sorted(restart_of), 3_000)
    crashes = {name: rng.randint(1, 3) for name in victims}
    journal = Journal()
    refs: list[ActorRef[object]] = []
    tasks_before = trio.lowlevel.current_statistics().tasks_living
    async with open_runtime(
        seed=5, supervision=Supervision(max_restarts=100_000, within=1, backoff=NO_DELAY)
    ) as runtime:
        for name, restart in restart_of.items():
            refs.append(
                await runtime.spawn(
                    lambda name=name: Child(journal, name),
                    id=name,
                    restart=restart,  # type: ignore[arg-type]
                )
            )
        await settle()
        for round_ in range(3):
            for name, times in crashes.items():
                if times > round_ and runtime_has(runtime, name):
                    await runtime.lookup(name).tell("crash")
            await settle()
        alive = {ref.id for ref in refs if ref.alive}
        for name, restart in restart_of.items():
            crashed = crashes.get(name, 0)
            if restart == "temporary" and crashed:
                assert name not in alive
                assert journal.starts[name] == 1
            else:
                assert name in alive
                assert journal.starts[name] == 1 + crashed
        assert runtime.statistics().actors == len(alive)
    assert all(not ref.alive for ref in refs)
    assert trio.lowlevel.current_statistics().tasks_living == tasks_before


def runtime_has(runtime: object, name: str) -> bool:
    from runtime import Runtime

    assert isinstance(runtime, Runtime)
    try:
        runtime.lookup(name)
    except LookupError:
        return False
    return True


@pytest.mark.slow
async def test_ten_thousand_actors_escalate_when_crashes_exceed_intensity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    refs: list[ActorRef[object]] = []
    with pytest.raises(IntensityExceededError):
        async with open_runtime(
            seed=5, supervision=Supervision(max_restarts=50, within=10, backoff=NO_DELAY)
        ) as runtime:
            for i in range(10_000):
                refs.append(await runtime.spawn(lambda i=i: Child(journal, f"w{i}")))
            await settle()
            for ref in refs[:60]:
                await ref.tell("crash")
            await trio.sleep_forever()
    assert all(not ref.alive for ref in refs)
    # Orderly: the survivors were stopped, newest first.
    stops = [name for what, name in journal.entries if what == "stop"]
    assert stops[:3] == ["w9999", "w9998", "w9997"]


# -- faults stay where they happen -------------------------------------------------------


class Undecodable(Actor[object]):
    """Fails at every start the way an actor whose log does not decode does."""

    starts = 0

    async def on_start(self) -> None:
        Undecodable.starts += 1
        raise EventDecodeError("thing.happened", "payload is not JSON", "actor/x", 2)


class CrashLoop(Actor[object]):
    """Crashes at every start for a reason a restart might fix."""

    async def on_start(self) -> None:
        raise RuntimeError("flaky")


async def test_a_data_error_is_not_restarted_and_does_not_escalate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A crash caused by undecodable data stops that child at once, failed with the error,
    even under the default ``escalate`` policy: restarting it, or its supervisor, would fold
    the same bytes again. The sibling keeps running."""
    journal = Journal()
    Undecodable.starts = 0
    async with open_runtime(seed=3, supervision=Supervision(max_restarts=0)) as runtime:
        with runtime.subscribe() as events:
            sibling = await runtime.spawn(lambda: Child(journal, "s"), id="s")
            bad = await runtime.spawn(Undecodable, id="x")
            await settle()
            seen = drain(events)
        assert Undecodable.starts == 1
        assert not bad.alive
        with pytest.raises(ActorFailedError) as failed:
            await bad.ask("anything")
        assert (
            failed.value.actor_id,
            failed.value.cause_code,
            failed.value.cause_type,
        ) == ("x", "codec.decode", "EventDecodeError")
        assert isinstance(failed.value.__cause__, EventDecodeError)
        with pytest.raises(ActorFailedError):
            await bad.tell("anything")
        with pytest.raises(ActorFailedError):
            bad.tell_nowait("anything")
        assert await sibling.ask("who") == 1
        assert [
            (e.actor_id, e.reason, e.error_code) for e in seen if isinstance(e, ActorStopped)
        ] == [("x", "failed", "codec.decode")]
        assert not any(isinstance(e, ActorRestarting | SupervisorEscalated) for e in seen)


async def test_a_stop_child_crash_loop_stops_only_that_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``on_give_up="stop"``: the child's crashes are counted apart; past the limit only it
    stops, failed with its last error, and the supervisor never escalates."""
    journal = Journal()
    supervision = Supervision(max_restarts=2, within=10, backoff=NO_DELAY)
    async with open_runtime(seed=3, supervision=supervision) as runtime:
        with runtime.subscribe() as events:
            sibling = await runtime.spawn(lambda: Child(journal, "s"), id="s")
            await runtime.spawn(CrashLoop, id="loop", on_give_up="stop")
            await settle()
            # The sibling's own crashes still count against the root, apart from the loop's.
            await sibling.tell("crash")
            await settle()
            seen = drain(events)
        restarts = [e.actor_id for e in seen if isinstance(e, ActorRestarting)]
        assert restarts == ["loop", "loop", "s"]
        stopped = [(e.actor_id, e.reason) for e in seen if isinstance(e, ActorStopped)]
        assert stopped == [("loop", "failed")]
        assert await sibling.ask("who") == 2


def test_child_spec_rejects_an_unknown_give_up_policy() -> None:
    """``on_give_up`` is checked like the other options, naming itself."""
    with pytest.raises(ValueError, match="on_give_up must be one of escalate, stop"):
        ChildSpec(factory=CrashLoop, on_give_up="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize("cause", ["crash_loop", "data_error"])
async def test_a_storm_of_a_thousand_failing_children_leaves_the_sibling_subtree_running(
    autojump_clock: trio.testing.MockClock, cause: str
) -> None:
    """1,000 children of one supervisor crash at every start (a crash loop under ``stop``,
    or a data error under the default policy): each stops alone, the storm's supervisor
    and the sibling subtree keep running, and the root never escalates."""
    journal = Journal()
    quick = Supervision(max_restarts=3, within=10, backoff=NO_DELAY)
    if cause == "crash_loop":
        specs = [ChildSpec(factory=CrashLoop, id=f"c{i}", on_give_up="stop") for i in range(1000)]
    else:
        specs = [ChildSpec(factory=Undecodable, id=f"c{i}") for i in range(1000)]
    async with open_runtime(seed=9, supervision=quick) as runtime:
        with runtime.subscribe(buffer=100_000) as events:
            calm = await runtime.spawn(lambda: Supervisor([child(journal, "w")], quick), id="calm")
            storm = await runtime.spawn(lambda: Supervisor(specs, quick), id="storm")
            await settle()
            seen = drain(events)
        assert storm.alive and calm.alive
        assert await runtime.lookup("w").ask("who") == 1
        assert journal.starts["w"] == 1
        failed = [e for e in seen if isinstance(e, ActorStopped) and e.reason == "failed"]
        assert len(failed) == 1000
        assert not any(isinstance(e, SupervisorEscalated) for e in seen)
        assert runtime.statistics().actors == 3  # calm, its worker and storm: all 1,000 left
