"""Event-sourced actors on the log: recovery, one writer per stream, snapshots, steps."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from _depth import examples
from _gated_store import GatedStore, writer_paused
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.codec import EventRegistry
from protocols.errors import (
    ActorCrashedError,
    ActorStoppedError,
    ConcurrencyConflictError,
    ConfigError,
)
from runtime import (
    ActorRef,
    Decision,
    EventSourcedActor,
    NewEvent,
    Request,
    StepFailed,
    open_runtime,
    open_sqlite_store,
)
from runtime.supervision import ActorCrashed, ActorStopped, Backoff, Supervision
from runtime.testing import InMemoryEventStore

registry = EventRegistry()


@registry.event_type("test.added")
@attrs.frozen
class Added:
    amount: int


@registry.event_type("test.tally")
@attrs.frozen
class Tally:
    total: int = 0
    count: int = 0


@attrs.frozen
class Add:
    amount: int


@attrs.frozen
class Get(Request[Tally]):
    pass


@attrs.frozen
class Crash:
    pass


class Counter(EventSourcedActor[Tally]):
    registry = registry

    def __init__(self, stream: str = "counter/1", snapshot_every: int | None = None) -> None:
        self._name = stream
        self.snapshot_every = snapshot_every

    def stream_name(self) -> str:
        return self._name

    def initial_state(self) -> Tally:
        return Tally()

    def evolve(self, state: Tally, event: object) -> Tally:
        assert isinstance(event, Added)
        return Tally(total=state.total + event.amount, count=state.count + 1)

    def handle(self, state: Tally, message: object) -> Decision:
        if isinstance(message, Add):
            return Decision(events=[Added(message.amount)], reply=state.total + message.amount)
        if isinstance(message, Get):
            return Decision(reply=state)
        raise RuntimeError("crash requested")


async def test_state_survives_a_process_restart_through_the_sqlite_log(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Counter)
        for amount in range(1, 11):
            await ref.tell(Add(amount))
        assert await ref.ask(Get()) == Tally(total=55, count=10)
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=2) as runtime:
        ref = await runtime.spawn(Counter)
        assert await ref.ask(Get()) == Tally(total=55, count=10)
        assert await store.stream_version("counter/1") == 10


async def test_a_supervisor_restart_refolds_the_log(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime(seed=1, supervision=Supervision(backoff=Backoff(initial=0))) as runtime:
        ref = await runtime.spawn(Counter)
        await ref.ask(Add(5))
        with pytest.raises(ActorCrashedError):
            await ref.ask(Crash())
        await trio.sleep(1)
        assert await ref.ask(Get()) == Tally(total=5, count=1)


async def test_a_second_writer_on_the_same_stream_fails_loudly() -> None:
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        with runtime.subscribe() as events:
            first = await runtime.spawn(Counter, restart="temporary")
            second = await runtime.spawn(Counter, restart="temporary")
            await first.ask(Add(1))
            with pytest.raises(ActorCrashedError) as info:
                await second.ask(Add(1))
            conflict = info.value.__cause__
            assert isinstance(conflict, ConcurrencyConflictError)
            assert conflict.code == "store.conflict"
            assert str(conflict) == (
                "stream 'counter/1' is at version 1, the append expected 0; "
                "nothing was written (another writer owns this stream?)"
            )
            await trio.testing.wait_all_tasks_blocked()
            crashed = [e for e in drain(events) if isinstance(e, ActorCrashed)]
            assert [c.error_code for c in crashed] == ["store.conflict"]
    assert await store.stream_version("counter/1") == 1


def drain(channel: trio.MemoryReceiveChannel[object]) -> list[object]:
    out: list[object] = []
    while True:
        try:
            out.append(channel.receive_nowait())
        except trio.WouldBlock:
            return out


@settings(max_examples=examples(40), deadline=None)
@given(amounts=st.lists(st.integers(-1000, 1000), max_size=60), every=st.integers(1, 7))
def test_a_snapshot_equals_the_fold_of_the_events_before_it(amounts: list[int], every: int) -> None:
    async def scenario() -> None:
        store = InMemoryEventStore()
        async with open_runtime(store=store, seed=1) as runtime:
            ref = await runtime.spawn(lambda: Counter(snapshot_every=every))
            for amount in amounts:
                await ref.tell(Add(amount))
            await ref.ask(Get())
        snapshot = await store.load_snapshot("counter/1")
        if len(amounts) < every:
            assert snapshot is None
            return
        assert snapshot is not None
        assert snapshot.version == len(amounts) - len(amounts) % every
        records = await store.read("counter/1")
        folded = Tally()
        for record in records[: snapshot.version]:
            event = registry.decode_record(record)
            assert isinstance(event, Added)
            folded = Tally(total=folded.total + event.amount, count=folded.count + 1)
        assert registry.decode(snapshot.type, snapshot.schema_version, snapshot.data) == folded
        # Recovery from snapshot + tail equals the full fold.
        async with open_runtime(store=store, seed=2) as runtime:
            ref = await runtime.spawn(lambda: Counter(snapshot_every=every))
            assert await ref.ask(Get()) == Tally(total=sum(amounts), count=len(amounts))

    trio.run(scenario)


async def test_recovery_ignores_a_snapshot_of_an_unknown_state_type() -> None:
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Counter)
        await ref.ask(Add(3))
    await store.save_snapshot("counter/1", 1, type="gone.state", schema_version=1, data=b"{}")
    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Counter)
        assert await ref.ask(Get()) == Tally(total=3, count=1)


class Unregistered(EventSourcedActor[object]):
    registry = registry
    snapshot_every = 10

    def initial_state(self) -> object:
        return object()


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: Counter(snapshot_every=0), "snapshot_every must be a positive int or None, got 0"),
        (
            Unregistered,
            "Unregistered.snapshot_every is set but its state class object is not registered",
        ),
    ],
)
async def test_bad_snapshot_configuration_is_a_typed_error(factory: object, message: str) -> None:
    async with open_runtime(seed=1) as runtime:
        with runtime.subscribe() as events:
            await runtime.spawn(factory, restart="temporary")  # type: ignore[arg-type]
            await trio.testing.wait_all_tasks_blocked()
            crashed = [e for e in drain(events) if isinstance(e, ActorCrashed)]
    assert [c.error_code for c in crashed] == [ConfigError.code]
    assert crashed[0].error_message.startswith(message)


# -- steps: effects run in the nursery and come back as messages ----------------------


@registry.event_type("test.job_queued")
@attrs.frozen
class JobQueued:
    job: str


@registry.event_type("test.job_done")
@attrs.frozen
class JobDone:
    job: str
    result: str


@attrs.frozen
class Jobs:
    queued: tuple[str, ...] = ()
    done: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Submit:
    job: str


@attrs.frozen
class Worked:
    job: str
    result: str


@attrs.frozen
class Status(Request[Jobs]):
    pass


@attrs.frozen
class Abort:
    pass


executed: list[str] = []


class Worker(EventSourcedActor[Jobs]):
    registry = registry

    def stream_name(self) -> str:
        return "worker/1"

    def initial_state(self) -> Jobs:
        return Jobs()

    def evolve(self, state: Jobs, event: object) -> Jobs:
        if isinstance(event, JobQueued):
            return attrs.evolve(state, queued=(*state.queued, event.job))
        assert isinstance(event, JobDone)
        return Jobs(
            queued=tuple(j for j in state.queued if j != event.job),
            done=(*state.done, (event.job, event.result)),
        )

    def handle(self, state: Jobs, message: object) -> Decision:
        if isinstance(message, Submit):
            return Decision(events=[JobQueued(message.job)])
        if isinstance(message, Worked):
            return Decision(events=[JobDone(message.job, message.result)])
        if isinstance(message, StepFailed):
            return Decision(events=[JobDone(str(message.step), f"failed: {message.error}")])
        if isinstance(message, Abort):
            return Decision(cancel_step=True, stop=True)
        return Decision(reply=state)

    def next_step(self, state: Jobs) -> object | None:
        return state.queued[0] if state.queued else None

    async def execute(self, step: object) -> object:
        assert isinstance(step, str)
        executed.append(step)
        await trio.sleep(1)
        if step == "bad":
            raise ValueError("no good")
        return Worked(step, step.upper())


async def test_steps_run_while_the_actor_keeps_receiving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executed.clear()
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Worker)
        await ref.tell(Submit("a"))
        await ref.tell(Submit("bad"))
        await ref.tell(Submit("c"))
        # While "a" runs the actor still answers.
        status = await ref.ask(Status())
        assert status.queued == ("a", "bad", "c")
        await trio.sleep(10)
        status = await ref.ask(Status())
    assert status.done == (("a", "A"), ("bad", "failed: no good"), ("c", "C"))
    assert executed == ["a", "bad", "c"]


async def test_a_restart_resumes_pending_steps_from_the_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executed.clear()
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Worker, restart="transient")
        await ref.tell(Submit("a"))
        await ref.tell(Submit("b"))
        await trio.sleep(1.5)  # "a" done, "b" in flight
        await ref.tell(Abort())  # cancel "b" mid-flight and stop: like a crash
        await trio.sleep(0.1)
    assert executed == ["a", "b"]
    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Worker)
        await trio.sleep(5)
        status = await ref.ask(Status())
    assert status.done == (("a", "A"), ("b", "B"))
    assert executed == ["a", "b", "b"]  # "b" had no recorded result, so it ran again


@attrs.frozen
class Skip:
    pass


step_tasks: list[tuple[str, trio.lowlevel.Task]] = []


class TaskNoting(Worker):
    """A worker that notes which task runs each step, and can give up the running one."""

    def handle(self, state: Jobs, message: object) -> Decision:
        if isinstance(message, Skip):
            return Decision(events=[JobDone(state.queued[0], "skipped")], cancel_step=True)
        return super().handle(state, message)

    async def execute(self, step: object) -> object:
        step_tasks.append((str(step), trio.lowlevel.current_task()))
        return await super().execute(step)


async def test_steps_share_one_task_until_one_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executed.clear()
    step_tasks.clear()
    async with open_runtime(store=InMemoryEventStore(), seed=1) as runtime:
        ref = await runtime.spawn(TaskNoting)
        for job in ("a", "b", "c", "d"):
            await ref.tell(Submit(job))
        await trio.sleep(2.5)  # "a" and "b" done, "c" in flight
        await ref.tell(Skip())
        await trio.sleep(10)
        status = await ref.ask(Status())
    # "c" never came back: its task was cancelled with it.
    assert status.done == (("a", "A"), ("b", "B"), ("c", "skipped"), ("d", "D"))
    assert [job for job, _ in step_tasks] == ["a", "b", "c", "d"]
    first = step_tasks[0][1]
    assert step_tasks[1][1] is first
    assert step_tasks[2][1] is first
    assert step_tasks[3][1] is not first


class _TaskSteps(trio.abc.Instrument):
    """Counts how often each task runs, by name."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] = self.steps.get(task.name, 0) + 1


async def test_an_idle_actor_has_its_step_results_decided_by_the_step_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A step's result that finds the actor idle is decided by the step's task in the
    actor's turn: the actor's own task is not woken for it, and the step it asks for next
    runs in the same task, without a wake-up of its own."""
    executed.clear()
    step_tasks.clear()
    steps = _TaskSteps()
    async with open_runtime(store=InMemoryEventStore(), seed=1) as runtime:
        ref = await runtime.spawn(TaskNoting, name="jobs")
        await ref.tell(Submit("a"))
        await ref.tell(Submit("b"))
        await trio.testing.wait_all_tasks_blocked()  # "a" runs; the actor waits
        trio.lowlevel.add_instrument(steps)
        try:
            await trio.sleep(5)  # "a" and "b" finish
        finally:
            trio.lowlevel.remove_instrument(steps)
        status = await ref.ask(Status())
    assert status.done == (("a", "A"), ("b", "B"))
    assert [job for job, _ in step_tasks] == ["a", "b"]
    assert step_tasks[0][1] is step_tasks[1][1]
    assert steps.steps.get("actor /jobs", 0) == 0
    # Each step wakes once, from its sleep, and its result's append parks it once more.
    assert steps.steps["/jobs step"] == 4


async def test_a_message_waits_while_a_step_task_decides_in_the_actor_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The mailbox stays serial while a step's task decides its result: a message that
    comes while that decision's append is in flight is handled after it, on its state."""
    executed.clear()
    store = GatedStore("test.job_done")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(TaskNoting, name="jobs")
        async with trio.open_nursery() as nursery:
            await ref.tell(Submit("a"))
            await trio.testing.wait_all_tasks_blocked()
            assert store.waiting == 0
            statuses: list[Jobs] = []

            async def ask() -> None:
                statuses.append(await ref.ask(Status()))

            await trio.sleep(1.5)  # "a" is done, and its result's append is held
            assert store.waiting == 1
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert statuses == []  # queued behind the decision in flight
            store.gate.set()
        assert statuses == [Jobs(queued=(), done=(("a", "A"),))]
        assert executed[-1] == "a"


async def test_a_stop_asked_while_a_step_task_decides_in_the_actor_turn_stops_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stop that comes while a step's task decides in the actor's turn finds nobody to
    wake; the actor's task is woken for it once that decision is appended, and stops."""
    executed.clear()
    store = GatedStore("test.job_done")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(TaskNoting, name="jobs")
            await ref.tell(Submit("a"))
            await trio.sleep(1.5)  # "a" is done, and its result's append is held
            assert store.waiting == 1
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runtime.stop, ref)
                await trio.testing.wait_all_tasks_blocked()
                assert ref.alive  # asked to stop, but the decision is not appended yet
                store.gate.set()
            stopped = [e for e in drain(events) if isinstance(e, ActorStopped)]
        # In order, at once: not killed once its shutdown timeout ran out.
        assert [(e.path, e.reason) for e in stopped] == [("/jobs", "shutdown")]
    assert [(r.version, r.type) for r in await store.inner.read("worker/1")] == [
        (1, "test.job_queued"),
        (2, "test.job_done"),
    ]


async def test_an_actor_killed_while_a_step_task_decides_in_its_turn_ends_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Killed (its shutdown timeout ran out) while a step's task decides in its turn, the
    actor ends like any killed actor: the decision's append never happens, and nothing
    wakes the actor's task again once it has left."""
    executed.clear()
    store = GatedStore("test.job_done")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(TaskNoting, name="jobs", shutdown_timeout=1)
            await ref.tell(Submit("a"))
            await trio.sleep(1.5)  # "a" is done, and its result's append is held
            assert store.waiting == 1
            await runtime.stop(ref)
            stopped = [e for e in drain(events) if isinstance(e, ActorStopped)]
        assert [(e.path, e.reason) for e in stopped] == [("/jobs", "killed")]
        assert not ref.alive
    assert [r.type for r in await store.inner.read("worker/1")] == ["test.job_queued"]


class EarlyNoting(TaskNoting):
    """A worker whose jobs, a second each, may start while the append asking for them is
    in flight."""

    def starts_before_commit(self, step: object, events: Sequence[object]) -> bool:
        return True


async def test_a_step_task_deciding_in_the_actor_turn_starts_an_early_step_beside_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A result decided by a step's task in the actor's turn may ask for a step that starts
    early: it runs in a task of its own while that task waits for the append (the task
    cannot run it and wait at once), and the first task ends."""
    executed.clear()
    step_tasks.clear()
    store = GatedStore("test.job_done")
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(EarlyNoting, name="jobs")
        await ref.tell(Submit("a"))
        await ref.tell(Submit("b"))
        await trio.sleep(1.5)  # "a" is done, and its result's append is held
        assert store.waiting == 1
        assert [job for job, _ in step_tasks] == ["a", "b"]  # "b" started meanwhile
        assert step_tasks[1][1] is not step_tasks[0][1]
        store.gate.set()
        await trio.sleep(5)
        assert (await ref.ask(Status())).done == (("a", "A"), ("b", "B"))
    assert executed == ["a", "b"]


class Answering(TaskNoting):
    """A worker that notes which incarnation answers each ``Status``."""

    answered_by: list[int]

    def handle(self, state: Jobs, message: object) -> Decision:
        if isinstance(message, Status):
            self.answered_by.append(self.context.incarnation)
        return super().handle(state, message)


async def test_a_message_queued_behind_a_decision_whose_append_fails_waits_for_the_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A step's task deciding in the actor's turn whose append fails crashes the actor,
    whose task handles nothing more: a message queued meanwhile is handled by the next
    incarnation, on the fold of the log, never on a working state that holds what was
    not appended."""
    executed.clear()
    store = GatedStore("test.job_done")
    store.fail = True
    Answering.answered_by = []
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(Answering, name="jobs")
        await ref.tell(Submit("a"))
        await trio.sleep(1.5)  # "a" is done, and its result's append is held
        assert store.waiting == 1
        async with trio.open_nursery() as nursery:
            statuses: list[Jobs] = []

            async def ask() -> None:
                statuses.append(await ref.ask(Status()))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            store.gate.set()  # the append fails
        assert Answering.answered_by == [2]
        assert statuses == [Jobs(queued=("a",))]
    assert executed == ["a", "a"]


class Failing(TaskNoting):
    """A worker whose decider fails on the result of job "boom", the first time."""

    fail = True

    def handle(self, state: Jobs, message: object) -> Decision:
        if isinstance(message, Worked) and message.job == "boom" and Failing.fail:
            Failing.fail = False
            raise RuntimeError("the decider failed")
        return super().handle(state, message)


async def test_a_decider_that_fails_on_a_step_result_crashes_the_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Decided in the step's task or in the actor's, a result the decider fails on crashes
    the actor (its supervisor hears of the error), and its next incarnation folds the log
    and runs the step again."""
    executed.clear()
    Failing.fail = True
    async with open_runtime(store=InMemoryEventStore(), seed=1) as runtime:
        with runtime.subscribe() as events:
            ref = await runtime.spawn(Failing, name="jobs")
            await ref.tell(Submit("boom"))
            await trio.sleep(10)
            crashed = [e for e in drain(events) if isinstance(e, ActorCrashed)]
        assert [(c.error_type, c.error_message) for c in crashed] == [
            ("RuntimeError", "the decider failed")
        ]
        assert (await ref.ask(Status())).done == (("boom", "BOOM"),)
    assert executed == ["boom", "boom"]  # its result was not logged: it ran again


# -- the persist-listener seam ---------------------------------------------------------------


class Opening(Counter):
    """A counter that opens a fresh stream with ``Added(100)`` (an event of ``recovered``)."""

    def recovered(self, state: Tally) -> Decision | None:
        return Decision(events=[Added(100)]) if state.count == 0 else None


@attrs.define
class Recorder:
    """A persist listener that writes down every call it gets."""

    calls: list[tuple[str, str, object]] = attrs.Factory(list)

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        self.calls.append(("ready", stream, owner))

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        self.calls.append(("persisted", stream, tuple(events)))

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        self.calls.append(("gone", stream, owner))


async def test_a_persist_listener_follows_an_owner_from_start_to_stop() -> None:
    """A listener added to the runtime hears, from the actor base alone: the events of
    ``recovered``, then that the actor owns its stream, then each append exactly as logged
    (none for a message that decides nothing), then its stop. The timers service is the
    runtime's own listener and comes first."""
    recorder = Recorder()
    store = InMemoryEventStore()
    async with open_runtime(store=store, seed=1) as runtime:
        runtime.add_persist_listener(recorder)
        assert len(runtime.persist_listeners) == 2
        assert recorder is runtime.persist_listeners[-1]
        ref = await runtime.spawn(Opening)
        assert await ref.ask(Add(2)) == 102
        assert Tally(total=102, count=2) == await ref.ask(Get())
        assert await ref.ask(Add(3)) == 105
        await runtime.stop(ref)
        logged = [registry.decode_record(record) for record in await store.read("counter/1")]
    assert [
        ("persisted", "counter/1", (Added(100),)),
        ("ready", "counter/1", ref),
        ("persisted", "counter/1", (Added(2),)),
        ("persisted", "counter/1", (Added(3),)),
        ("gone", "counter/1", ref),
    ] == recorder.calls
    assert [Added(100), Added(2), Added(3)] == logged


# -- steps that start before their commit ----------------------------------------------------


class EarlyWorker(Worker):
    """A worker whose jobs may start while the append that queued them is in flight."""

    seen: list[str]

    def starts_before_commit(self, step: object, events: Sequence[object]) -> bool:
        return True

    async def execute(self, step: object) -> object:
        assert isinstance(step, str)
        self.seen.append(f"started {step}")
        await self.wait_logged()
        self.seen.append(f"logged {step}")
        return Worked(step, step.upper())

    def handle(self, state: Jobs, message: object) -> Decision:
        if isinstance(message, Worked):
            self.seen.append(f"handled {message.job}")
        return super().handle(state, message)

    def after_persist(self, events: Sequence[object]) -> None:
        self.seen.extend(f"persisted {type(e).__name__}" for e in events)


async def test_a_step_that_may_start_early_runs_while_its_commit_is_in_flight() -> None:
    """The step starts before the append that asked for it returns; ``wait_logged`` holds it
    until that append is done and told, and its result is handled only after."""
    store = GatedStore("test.job_queued")
    seen: list[str] = []
    EarlyWorker.seen = seen
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(EarlyWorker)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ref.tell, Submit("a"))
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["started a"]  # the append is still held
            store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert (await ref.ask(Status())).done == (("a", "A"),)
    assert seen == [
        "started a",
        "persisted JobQueued",
        "logged a",
        "handled a",
        "persisted JobDone",
    ]


class CarefulWorker(EarlyWorker):
    """Starts a job early unless the events asking for it queue the job ``fact``: a step
    that reads what only that append holds."""

    def starts_before_commit(self, step: object, events: Sequence[object]) -> bool:
        return not any(isinstance(e, JobQueued) and e.job == "fact" for e in events)


async def test_a_step_whose_events_it_reads_waits_for_their_commit() -> None:
    """``starts_before_commit`` sees the events of the append that asks for the step; a
    step it refuses for them starts only once they are durable."""
    store = GatedStore("test.job_queued")
    seen: list[str] = []
    CarefulWorker.seen = seen
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(CarefulWorker)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ref.tell, Submit("fact"))
            await trio.testing.wait_all_tasks_blocked()
            assert seen == []  # the append is still held, and the step waits for it
            store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert (await ref.ask(Status())).done == (("fact", "FACT"),)
    assert seen == [
        "persisted JobQueued",
        "started fact",
        "logged fact",
        "handled fact",
        "persisted JobDone",
    ]


async def test_a_step_started_early_is_cancelled_when_its_commit_fails() -> None:
    """An append that fails crashes the actor: the step that started before it never gets
    past ``wait_logged``, and its result is never handled."""
    store = GatedStore("test.job_queued")
    store.fail = True
    seen: list[str] = []
    EarlyWorker.seen = seen
    async with open_runtime(store=store.as_store(), seed=1) as runtime:
        ref = await runtime.spawn(EarlyWorker, restart="temporary")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ref.tell, Submit("a"))
            await trio.testing.wait_all_tasks_blocked()
            store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert await store.inner.read("worker/1") == []
    assert seen == ["started a"]


async def test_wait_logged_is_a_checkpoint_for_a_step_started_after_its_commit() -> None:
    """A step that did not start early has nothing to wait for, but ``wait_logged`` still
    checkpoints, as every async function of the runtime does."""
    executed.clear()
    store = InMemoryEventStore()

    class Plain(Worker):
        async def execute(self, step: object) -> object:
            with trio.testing.assert_checkpoints():
                await self.wait_logged()
            return Worked(str(step), "ok")

    async with open_runtime(store=store, seed=1) as runtime:
        ref = await runtime.spawn(Plain)
        await ref.tell(Submit("a"))
        await trio.testing.wait_all_tasks_blocked()
        assert (await ref.ask(Status())).done == (("a", "ok"),)


# -- an early step's result decided while its commit is in flight ----------------------------


class QuickWorker(EarlyWorker):
    """An early step that answers at once, as a function model or a replay does: its
    result is in the mailbox before the append that asked for it is durable."""

    async def execute(self, step: object) -> object:
        assert isinstance(step, str)
        self.seen.append(f"started {step}")
        return Worked(step, step.upper())


async def test_an_early_result_is_decided_while_its_commit_is_in_flight(tmp_path: Path) -> None:
    """The step's result is decided on the state the queued events fold to, and its own
    events are queued right behind them: both commit together, in order, and the actor
    tells of each append only once it is durable."""
    seen: list[str] = []
    QuickWorker.seen = seen
    async with (
        open_sqlite_store(tmp_path / "log.db") as store,
        open_runtime(store=store, seed=1) as runtime,
    ):
        ref = await runtime.spawn(QuickWorker)
        await ref.ask(Status())  # started: its stream is folded
        before = store.statistics()
        async with trio.open_nursery() as nursery, writer_paused(store):
            nursery.start_soon(ref.tell, Submit("a"))
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["started a", "handled a"]  # decided, and nothing told yet
            assert store.statistics().pending_appends == 2
        assert (await ref.ask(Status())).done == (("a", "A"),)
        assert store.statistics().commits - before.commits == 1
        logged = [(r.version, r.type) for r in await store.read("worker/1")]
    assert logged == [(1, "test.job_queued"), (2, "test.job_done")]
    assert seen == ["started a", "handled a", "persisted JobQueued", "persisted JobDone"]


async def test_pipelined_appends_leave_no_reference_cycles(tmp_path: Path) -> None:
    """What an actor and the writer hold of a begun append dies when it is decided, not
    at the next garbage collection: cycles there kept every state and event of a send
    alive until a collection, and made each collection walk tens of thousands of them."""
    QuickWorker.seen = []
    async with (
        open_sqlite_store(tmp_path / "log.db") as store,
        open_runtime(store=store, seed=1) as runtime,
    ):
        ref = await runtime.spawn(QuickWorker)
        await ref.ask(Submit("warm up"))
        before = store.statistics().commits
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what a collection finds, to name it
        try:
            for job in "abcdefgh":
                await ref.ask(Submit(job))
            await ref.ask(Status())
            gc.collect()
            # Ours only: a thread another test left behind may make garbage meanwhile.
            left = {
                type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.startswith(("runtime.", "protocols.", __name__))
            }
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert store.statistics().commits > before
        assert len((await ref.ask(Status())).done) == 9
    assert left == set()


async def test_an_early_result_is_never_logged_behind_an_append_that_failed(
    tmp_path: Path,
) -> None:
    """Another writer took the stream while the actor's append was queued: that append
    conflicts, the actor crashes, and the result decided behind it is neither logged on
    top of the other writer's events nor told to anyone."""
    seen: list[str] = []
    QuickWorker.seen = seen
    async with (
        open_sqlite_store(tmp_path / "log.db") as store,
        open_runtime(store=store, seed=1) as runtime,
    ):
        ref = await runtime.spawn(QuickWorker, restart="temporary")
        await ref.ask(Status())
        async with trio.open_nursery() as nursery, writer_paused(store):
            nursery.start_soon(store.append, "worker/1", [_other_writers_event()], 0)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ref.tell, Submit("a"))
            await trio.testing.wait_all_tasks_blocked()
            assert store.statistics().pending_appends == 3
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ActorStoppedError):  # crashed on the conflict, not restarted
            await ref.ask(Status())
        logged = [r.type for r in await store.read("worker/1")]
    assert logged == ["test.job_queued"]  # the other writer's event alone
    assert seen == ["started a", "handled a"]


def _other_writers_event() -> NewEvent:
    return NewEvent.from_encoded(registry.encode(JobQueued("theirs")))
