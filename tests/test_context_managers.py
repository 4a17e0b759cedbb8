"""Errors arrive as raised: the package's context managers let a single error out bare."""

from __future__ import annotations

import asyncio
import traceback
from pathlib import Path

import pytest
import trio
import trio.testing

from actors import SessionBusyError, ToolRegistry, spawn_session, tool
from actors.lowlevel import open_tool_runner
from protocols.errors import IntensityExceededError, RuntimeClosedError, ToolNotFoundError
from protocols.lowlevel import unwrap_single_error
from runtime import Actor, open_runtime, open_sqlite_store
from runtime.supervision import Backoff, Supervision, SupervisorEscalated
from runtime.testing import ScriptedLLM


def fail_typed() -> None:
    """Raise a typed error with a cause, from inside a handler (so it has a context too)."""
    try:
        raise KeyError("the handler's own")
    except KeyError:
        raise SessionBusyError("s1", "run1") from ValueError("the cause")


def check_as_raised(error: BaseException) -> None:
    """``error`` is the one ``fail_typed`` raised, with its cause, context and traceback."""
    assert type(error) is SessionBusyError
    assert isinstance(error.__cause__, ValueError)
    assert isinstance(error.__context__, KeyError)
    assert error.__suppress_context__
    frames = [f.name for f in traceback.extract_tb(error.__traceback__)]
    assert frames[-1] == "fail_typed"


async def test_open_sqlite_store_lets_a_typed_error_out_bare(tmp_path: Path) -> None:
    """An error raised in the block is not wrapped by the store's nursery."""
    with pytest.raises(SessionBusyError) as raised:
        async with open_sqlite_store(tmp_path / "log.sqlite"):
            fail_typed()
    check_as_raised(raised.value)


async def test_the_readme_pattern_lets_a_typed_error_out_bare(tmp_path: Path) -> None:
    """``open_sqlite_store(...) as store, open_runtime(store=store)``: still bare."""
    with pytest.raises(SessionBusyError) as raised:
        async with (
            open_sqlite_store(tmp_path / "log.sqlite") as store,
            open_runtime(store=store, seed=1),
        ):
            fail_typed()
    check_as_raised(raised.value)


async def test_open_runtime_lets_a_typed_error_out_bare() -> None:
    """``open_runtime`` alone: bare, with its cause, context and traceback."""
    with pytest.raises(SessionBusyError) as raised:
        async with open_runtime(seed=1):
            fail_typed()
    check_as_raised(raised.value)


@tool(asyncio=True)
async def halve(x: int) -> float:
    """Halve (an asyncio tool, so the runner opens a trio-asyncio loop)."""
    await asyncio.sleep(0)
    return x / 2


async def test_open_tool_runner_with_an_asyncio_loop_lets_a_typed_error_out_bare() -> None:
    """The trio-asyncio loop's nursery does not wrap the block's error either."""
    with pytest.raises(ToolNotFoundError) as raised:
        async with open_tool_runner(ToolRegistry.of(halve)):
            raise ToolNotFoundError("nope", ("halve",))
    assert raised.value.code == "tool.not_found"


async def test_a_group_the_block_raises_itself_comes_out_as_raised(tmp_path: Path) -> None:
    """Two concurrent failures in the block stay a group: the block's own, not re-wrapped."""

    async def fail(error: Exception) -> None:
        raise error  # at its first step: both fail before either could be cancelled

    with pytest.raises(ExceptionGroup) as raised:
        async with open_sqlite_store(tmp_path / "log.sqlite"), trio.open_nursery() as nursery:
            nursery.start_soon(fail, KeyError("a"))
            nursery.start_soon(fail, ToolNotFoundError("b", ()))
    assert {KeyError, ToolNotFoundError} == {type(e) for e in raised.value.exceptions}


def test_unwrap_single_error_keeps_groups_of_several() -> None:
    """Several real errors are a group (the very one); cancellations do not count."""
    several = ExceptionGroup("two", [KeyError("a"), ValueError("b")])
    with pytest.raises(ExceptionGroup) as raised, unwrap_single_error():
        raise several
    assert several is raised.value
    with pytest.raises(KeyError), unwrap_single_error():
        raise ExceptionGroup("one", [ExceptionGroup("inner", [KeyError("a")])])


class Crasher(Actor[object]):
    async def receive(self, message: object) -> object:
        raise RuntimeError("boom")


async def test_spawning_after_the_root_gave_up_raises_runtime_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once the root supervisor escalates, ``Runtime.spawn`` and ``spawn_session`` raise
    the typed ``RuntimeClosedError``, not Trio's ``RuntimeError``, while the root stops and
    after; the escalation comes out of ``open_runtime`` bare."""
    give_up_at_once = Supervision(max_restarts=0, backoff=Backoff(initial=0, jitter=0))
    raised: list[Exception] = []
    with pytest.raises(IntensityExceededError):
        async with open_runtime(seed=2, supervision=give_up_at_once) as runtime:
            with runtime.subscribe() as events:
                ref = await runtime.spawn(Crasher, id="c")
                await ref.tell("crash")
                with trio.CancelScope(shield=True):
                    async for event in events:
                        if isinstance(event, SupervisorEscalated):
                            break
                    for _ in range(2):  # while the root stops, then once it has
                        try:
                            await runtime.spawn(Crasher)
                        except Exception as exc:
                            raised.append(exc)
                        await trio.testing.wait_all_tasks_blocked()
                    try:
                        await spawn_session(runtime, llm=ScriptedLLM([]))
                    except Exception as exc:
                        raised.append(exc)
    assert [RuntimeClosedError] * 3 == [type(e) for e in raised]
    assert {"actor.runtime_closed"} == {getattr(e, "code", None) for e in raised}


async def test_an_error_of_the_block_is_not_lost_when_the_root_gives_up_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The block fails while the root escalates: two concurrent failures, both reported."""
    give_up_at_once = Supervision(max_restarts=0, backoff=Backoff(initial=0, jitter=0))
    with pytest.raises(ExceptionGroup) as raised:
        async with open_runtime(seed=2, supervision=give_up_at_once) as runtime:
            with runtime.subscribe() as events:
                ref = await runtime.spawn(Crasher, id="c")
                await ref.tell("crash")
                with trio.CancelScope(shield=True):
                    async for event in events:
                        if isinstance(event, SupervisorEscalated):
                            break
                    await trio.testing.wait_all_tasks_blocked()
                    raise ToolNotFoundError("mine", ())
    leaves = {type(e) for e in raised.value.exceptions}
    assert {IntensityExceededError, ToolNotFoundError} == leaves
