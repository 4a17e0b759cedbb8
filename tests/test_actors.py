"""Actors, refs and mailboxes: tell, ask, replies, priority lane, overflow, registry."""

from __future__ import annotations

import threading

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import (
    ActorCrashedError,
    ActorExistsError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    MailboxFullError,
    RuntimeClosedError,
)
from runtime import (
    Actor,
    ActorRef,
    PriorityMessage,
    Reply,
    Request,
    Runtime,
    open_runtime,
)


@attrs.frozen
class Add:
    n: int


@attrs.frozen
class Total(Request[int]):
    pass


@attrs.frozen
class Fail:
    reason: str


@attrs.frozen
class Urgent(PriorityMessage):
    tag: str


class Counter(Actor[object]):
    def __init__(self) -> None:
        self.total = 0
        self.seen: list[object] = []

    async def receive(self, message: object) -> object:
        self.seen.append(message)
        if isinstance(message, Add):
            self.total += message.n
            return None
        if isinstance(message, Total):
            return self.total
        if isinstance(message, Fail):
            raise ValueError(message.reason)
        return ("echo", message)


async def test_tell_then_ask_sees_every_message_in_order() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter, name="counter")
        for n in range(1, 101):
            await ref.tell(Add(n))
        assert await ref.ask(Total()) == 5050


async def test_ask_returns_what_receive_returned() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter)
        assert await ref.ask("hi") == ("echo", "hi")


async def test_ask_timeout_raises_typed_error(autojump_clock: trio.testing.MockClock) -> None:
    class Slow(Actor[object]):
        async def receive(self, message: object) -> object:
            await trio.sleep(10)
            return "late"

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Slow, id="slow")
        with pytest.raises(AskTimeoutError) as info:
            await ref.ask("x", timeout=1.5)
        assert info.value.code == "actor.ask_timeout"
        assert str(info.value) == "actor 'slow' did not reply to str within 1.5 s"
        assert isinstance(info.value, TimeoutError)


async def test_ask_rejects_a_bad_timeout() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter)
        with pytest.raises(ValueError, match="timeout must be a non-negative number"):
            await ref.ask("x", timeout=-1)


async def test_ask_that_crashes_the_actor_gets_crashed_error_with_cause() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter, id="c")
        with pytest.raises(ActorCrashedError) as info:
            await ref.ask(Fail("boom"))
        assert info.value.code == "actor.crashed"
        assert str(info.value) == "actor 'c' crashed while handling a Fail message"
        assert isinstance(info.value.__cause__, ValueError)
        assert str(info.value.__cause__) == "boom"


async def test_ask_to_a_stopped_actor_fails_and_never_hangs() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter, id="gone")
        await runtime.stop(ref)
        assert not ref.alive
        with pytest.raises(ActorStoppedError) as info:
            await ref.ask(Total())
        assert info.value.code == "actor.stopped"
        assert str(info.value) == "actor 'gone' is stopped and accepts no more messages"
        with pytest.raises(ActorStoppedError):
            await ref.tell(Add(1))
        with pytest.raises(ActorStoppedError):
            ref.tell_nowait(Add(1))


async def test_queued_asks_fail_when_the_actor_stops() -> None:
    gate = trio.Event()

    class Blocked(Actor[object]):
        async def receive(self, message: object) -> object:
            await gate.wait()
            return message

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Blocked, shutdown_timeout=0.01)
        errors: list[BaseException] = []

        async def asker(i: int) -> None:
            try:
                await ref.ask(i)
            except ActorStoppedError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(asker, i)
            await trio.testing.wait_all_tasks_blocked()
            await runtime.stop(ref)
        # The one in flight was cancelled with the actor; the four queued were refused.
        assert len(errors) == 5


async def test_deferred_reply_answers_after_long_work() -> None:
    class Worker(Actor[object]):
        async def receive(self, message: object) -> object:
            reply = self.context.defer_reply()
            self.context.start_soon(self._work, reply, message)
            return "ignored"

        async def _work(self, reply: Reply[object], message: object) -> None:
            await trio.sleep(0.01)
            reply.send(("done", message))

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Worker)
        async with trio.open_nursery() as nursery:
            results: list[object] = []

            async def ask(i: int) -> None:
                results.append(await ref.ask(i))

            for i in range(3):
                nursery.start_soon(ask, i)
        assert sorted(results, key=str) == [("done", 0), ("done", 1), ("done", 2)]


async def test_deferred_reply_fails_when_the_actor_crashes() -> None:
    class Forgetful(Actor[object]):
        async def receive(self, message: object) -> object:
            if message == "defer":
                self.context.defer_reply()
                return None
            raise RuntimeError("crash")

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Forgetful, restart="temporary")
        async with trio.open_nursery() as nursery:
            outcome: list[BaseException] = []

            async def ask_deferred() -> None:
                try:
                    await ref.ask("defer")
                except ActorCrashedError as exc:
                    outcome.append(exc)

            nursery.start_soon(ask_deferred)
            await trio.testing.wait_all_tasks_blocked()
            await ref.tell("crash")
        assert len(outcome) == 1


async def test_system_messages_overtake_queued_user_messages() -> None:
    order: list[str] = []
    gate = trio.Event()

    class Recorder(Actor[object]):
        async def receive(self, message: object) -> object:
            if message == "first":
                await gate.wait()
            order.append(message.tag if isinstance(message, Urgent) else str(message))
            return None

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Recorder)
        await ref.tell("first")
        await trio.testing.wait_all_tasks_blocked()
        for i in range(3):
            await ref.tell(f"user-{i}")
        await ref.tell(Urgent("cancel"))
        ref.tell_nowait(Urgent("stop"))
        gate.set()
        await ref.ask("flush")
    assert order == ["first", "cancel", "stop", "user-0", "user-1", "user-2", "flush"]


async def test_tell_waits_while_the_mailbox_is_full() -> None:
    gate = trio.Event()

    class Gated(Actor[object]):
        async def receive(self, message: object) -> object:
            await gate.wait()
            return None

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Gated, mailbox_capacity=2)
        await ref.tell(0)  # taken by the actor, which blocks on the gate
        await trio.testing.wait_all_tasks_blocked()
        await ref.tell(1)
        await ref.tell(2)
        sent = trio.Event()

        async def third() -> None:
            await ref.tell(3)
            sent.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(third)
            await trio.testing.wait_all_tasks_blocked()
            assert not sent.is_set()
            assert ref.statistics().waiting_senders == 1
            gate.set()
        assert sent.is_set()


@pytest.mark.parametrize(
    ("policy", "expected_dropped", "expected_order"),
    [("drop_oldest", 2, [0, 3, 4]), ("drop_newest", 2, [0, 1, 2])],
)
async def test_overflow_policies_of_tell_nowait(
    policy: str, expected_dropped: int, expected_order: list[int]
) -> None:
    gate = trio.Event()
    seen: list[int] = []

    class Gated(Actor[object]):
        async def receive(self, message: object) -> object:
            if message == 0:
                await gate.wait()
            if isinstance(message, int):
                seen.append(message)
            return None

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Gated, mailbox_capacity=2, overflow=policy)  # type: ignore[arg-type]
        await ref.tell(0)
        await trio.testing.wait_all_tasks_blocked()
        for i in (1, 2, 3, 4):
            ref.tell_nowait(i)
        assert ref.statistics().dropped == expected_dropped
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
    assert seen == expected_order


async def test_reject_overflow_raises_mailbox_full() -> None:
    gate = trio.Event()

    class Gated(Actor[object]):
        async def receive(self, message: object) -> object:
            await gate.wait()
            return None

    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Gated, id="tight", mailbox_capacity=1)
        await ref.tell(0)
        await trio.testing.wait_all_tasks_blocked()
        ref.tell_nowait(1)
        with pytest.raises(MailboxFullError) as info:
            ref.tell_nowait(2)
        assert info.value.code == "actor.mailbox_full"
        assert str(info.value).startswith("mailbox of actor 'tight' is full (1 messages)")
        gate.set()


async def test_tell_from_a_foreign_thread() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Counter)

        def from_thread() -> None:
            for _ in range(10):
                ref.tell_from_thread(Add(2))

        await trio.to_thread.run_sync(from_thread)
        assert await ref.ask(Total()) == 20

        errors: list[BaseException] = []

        def plain_thread() -> None:
            try:
                # A thread Trio did not start needs the runtime's token: it is on the ref.
                ref.tell_from_thread(Add(1))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=plain_thread)
        thread.start()
        await trio.to_thread.run_sync(thread.join)
        assert errors == []
        assert await ref.ask(Total()) == 21


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mailbox_capacity": 0}, ValueError, "mailbox capacity must be >= 1, got 0"),
        ({"mailbox_capacity": "9"}, TypeError, "mailbox capacity must be an int, got str"),
        ({"overflow": "spill"}, ValueError, "overflow must be one of reject, drop_oldest"),
        ({"restart": "sometimes"}, ValueError, "restart must be one of permanent, transient"),
        ({"shutdown_timeout": -1}, ValueError, "shutdown_timeout must be a non-negative number"),
        ({"name": "a/b"}, ValueError, "name must be a non-empty string without '/'"),
    ],
)
async def test_spawn_rejects_bad_options(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    async with open_runtime(seed=1) as runtime:
        with pytest.raises(error, match=message):
            await runtime.spawn(Counter, **kwargs)  # type: ignore[arg-type]


async def test_registry_finds_actors_by_id_and_path() -> None:
    class Parent(Actor[object]):
        async def on_start(self) -> None:
            await self.context.spawn(Counter, name="kid", id="kid-1")

    async with open_runtime(seed=1) as runtime:
        parent = await runtime.spawn(Parent, name="parent", id="p")
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.lookup("p") is parent
        kid = runtime.lookup_path("/parent/kid")
        assert kid.id == "kid-1"
        assert kid.path == "/parent/kid"
        assert runtime.lookup("kid-1") is kid
        with pytest.raises(ActorNotFoundError) as info:
            runtime.lookup("nobody")
        assert info.value.code == "actor.not_found"
        assert str(info.value) == "no actor is registered as 'nobody'"
        with pytest.raises(ActorNotFoundError):
            runtime.lookup_path("/parent/nobody")
        with pytest.raises(ActorExistsError) as exists:
            await runtime.spawn(Counter, id="p")
        assert exists.value.code == "actor.exists"
        assert "already running" in str(exists.value)
        with pytest.raises(ActorExistsError):
            await runtime.spawn(Counter, name="parent")


async def test_spawn_after_close_is_refused() -> None:
    runtime: Runtime | None = None
    async with open_runtime(seed=1) as opened:
        runtime = opened
    with pytest.raises(RuntimeClosedError) as info:
        await runtime.spawn(Counter)
    assert info.value.code == "actor.runtime_closed"


async def test_refs_and_contexts_are_made_by_the_runtime() -> None:
    with pytest.raises(TypeError, match="ActorRef is made by the runtime"):
        ActorRef()
    with pytest.raises(TypeError, match="Runtime is made by open_runtime"):
        Runtime()


async def test_default_receive_refuses_messages() -> None:
    async with open_runtime(seed=1) as runtime:
        ref = await runtime.spawn(Actor, restart="temporary")
        with pytest.raises(ActorCrashedError) as info:
            await ref.ask(Add(1))
        assert str(info.value.__cause__) == "Actor does not handle Add messages"


async def test_public_async_operations_checkpoint() -> None:
    async with open_runtime(seed=1) as runtime:
        with trio.testing.assert_checkpoints():
            ref = await runtime.spawn(Counter)
        with trio.testing.assert_checkpoints():
            await ref.tell(Add(1))
        with trio.testing.assert_checkpoints():
            await ref.tell(Urgent("x"))
        with trio.testing.assert_checkpoints():
            await ref.ask(Total())
        other = await runtime.spawn(Counter)
        await runtime.stop(other)
        with trio.testing.assert_checkpoints():
            await runtime.stop(other)


async def test_runtime_clock_follows_the_mock_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from runtime import Clock

    async with open_runtime(clock=Clock(start=1_000.0), seed=7) as runtime:
        assert runtime.clock.now() == pytest.approx(1_000.0)
        await trio.sleep(86_400)
        assert runtime.clock.now() == pytest.approx(1_000.0 + 86_400)
        first, second = runtime.ids.new("s"), runtime.ids.new("s")
        assert first < second
        assert first.startswith("s_") and len(first) == 28


@given(st.floats(0, 4e9), st.integers(0, 2**32), st.integers(1, 50))
def test_ids_are_the_crockford_digits_of_time_counter_and_randomness(
    now: float, seed: int, count: int
) -> None:
    """Ids are 26 Crockford base-32 digits of (ms << 80 | counter << 40 | random 40 bits),
    most significant first, and sort in the order they were made."""
    from runtime import IdSource

    class Fixed:  # a clock stopped at ``now``
        def now(self) -> float:
            return now

    source = IdSource(Fixed(), seed)  # type: ignore[arg-type]  # duck-typed clock
    ids = [source.new() for _ in range(count)]
    digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    for made in ids:
        value = 0
        for char in made:
            value = value * 32 + digits.index(char)
        assert len(made) == 26
        assert value >> 80 == int(now * 1000)
    assert ids == sorted(ids)
    assert len(set(ids)) == count


class Starts(Actor[object]):
    """Counts its starts in a list shared across incarnations."""

    def __init__(self, starts: list[str]) -> None:
        self.starts = starts

    async def on_start(self) -> None:
        self.starts.append("start")

    async def receive(self, message: object) -> object:
        if message == "crash":
            raise ValueError("crash")
        return f"got {message}"


async def test_a_lazy_actor_starts_at_its_first_message() -> None:
    """``lazy=True``: spawn returns at once and nothing runs until a message arrives; the
    actor is found by id meanwhile, and then serves like any other."""
    starts: list[str] = []
    async with open_runtime() as runtime:
        ref = await runtime.spawn(lambda: Starts(starts), id="lazy", lazy=True)
        await trio.testing.wait_all_tasks_blocked()
        assert starts == []
        assert runtime.lookup("lazy") is ref
        assert ref.alive
        assert await ref.ask("a") == "got a"
        assert starts == ["start"]
        await ref.tell("b")
        assert await ref.ask("c") == "got c"
        assert starts == ["start"]


async def test_a_lazy_actor_restarts_like_any_other_after_a_crash() -> None:
    starts: list[str] = []
    async with open_runtime() as runtime:
        ref = await runtime.spawn(lambda: Starts(starts), lazy=True)
        with pytest.raises(ActorCrashedError):
            await ref.ask("crash")
        assert await ref.ask("again") == "got again"
        assert starts == ["start", "start"]


async def test_a_lazy_actor_never_messaged_never_runs_and_stops_in_order() -> None:
    """Stopping it (or closing the runtime) starts nothing; a message after the stop fails."""
    starts: list[str] = []
    async with open_runtime() as runtime:
        ref = await runtime.spawn(lambda: Starts(starts), lazy=True)
        kept = await runtime.spawn(lambda: Starts(starts), lazy=True)
        await runtime.stop(ref)
        assert not ref.alive
        with pytest.raises(ActorStoppedError):
            await ref.ask("late")
        assert kept.alive
    assert starts == []
    assert not kept.alive


class Sleeper(Starts):
    async def receive(self, message: object) -> object:
        if message == "rest":
            self.context.passivate()
            return "resting"
        return await super().receive(message)


async def test_a_passivated_actor_starts_again_at_its_next_message() -> None:
    """``passivate()`` ends the incarnation (no restart is counted); messages that
    arrive meanwhile or later start a fresh one."""
    starts: list[str] = []
    async with open_runtime() as runtime:
        ref = await runtime.spawn(lambda: Sleeper(starts))
        assert await ref.ask("rest") == "resting"
        await ref.tell("queued while resting")
        await trio.testing.wait_all_tasks_blocked()
        assert starts == ["start", "start"]
        assert await ref.ask("rest") == "resting"
        await trio.testing.wait_all_tasks_blocked()
        assert starts == ["start", "start"]
        assert await ref.ask("x") == "got x"
        assert starts == ["start", "start", "start"]
