"""Durable workflows: steps recorded once, re-runs answered from the log, divergence named."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import AgentSpec
from actors.events import StepCompleted, WorkflowFinished, WorkflowStarted
from actors.workflows import (
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowFailedError,
    run_workflow,
    start_workflow,
    workflow,
)
from protocols import LLMRequest, LLMResponse
from protocols.codec import decode_record, default_registry
from protocols.errors import ReplayDivergenceError
from runtime import open_runtime
from runtime.testing import FaultyEventStore, FunctionLLM, InMemoryEventStore

EXECUTED: Counter[str] = Counter()


def record(label: str) -> str:
    """A step body that counts its executions."""
    EXECUTED[label] += 1
    return label


async def arecord(label: str) -> str:
    EXECUTED[label] += 1
    await trio.sleep(0.001)
    return label


def echo_llm() -> FunctionLLM:
    return FunctionLLM(lambda request: LLMResponse(content=f"re: {request.messages[-1].text}"))


ANALYST = AgentSpec(name="analyst", system_prompt="answer")


@workflow
async def pipeline(wf: WorkflowContext, topic: str) -> dict[str, object]:
    first = await wf.step(record, f"{topic}-a")
    both = await wf.parallel(lambda: wf.step(arecord, "p0"), lambda: wf.step(arecord, "p1"))
    await wf.sleep(timedelta(seconds=30))
    each = await wf.for_each(["x", "y", "z"], lambda item: wf.step(arecord, item), limit=2)
    answer = await wf.run(ANALYST, f"about {first}")
    signal = await wf.wait_for("approve")
    return {"first": first, "both": both, "each": each, "answer": answer.text, "signal": signal}


async def steps_of(store: object, workflow_id: str) -> dict[str, object]:
    records = await store.read(f"workflow/{workflow_id}", 1)  # type: ignore[attr-defined]
    return {
        e.index: e.result
        for e in map(decode_record, records)
        if isinstance(e, StepCompleted) and e.kind != "agent"
    }


@pytest.fixture(autouse=True)
def _reset() -> None:
    EXECUTED.clear()


async def run_pipeline(store: object, workflow_id: str = "wf1") -> object:
    async with open_runtime(store=store) as runtime:  # type: ignore[arg-type]
        handle = await start_workflow(
            runtime, pipeline, "t", workflow_id=workflow_id, llm=echo_llm()
        )
        await handle.signal("approve", {"by": "ann"})
        return await handle.result()


EXPECTED = {
    "first": "t-a",
    "both": ["p0", "p1"],
    "each": ["x", "y", "z"],
    "answer": "re: about t-a",
    "signal": {"by": "ann"},
}


async def test_a_workflow_records_each_step_and_returns_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every step is a StepCompleted event; the function's result is WorkflowFinished."""
    store = InMemoryEventStore()
    assert await run_pipeline(store) == EXPECTED
    records = await store.read("workflow/wf1", 1)
    events = [decode_record(r) for r in records]
    assert isinstance(events[0], WorkflowStarted)
    assert isinstance(events[-1], WorkflowFinished)
    kinds = {e.index: e.kind for e in events if isinstance(e, StepCompleted)}
    assert kinds == {
        "0": "call",
        "1": "parallel",
        "1.0.0": "call",
        "1.1.0": "call",
        "2": "sleep",
        "3": "for_each",
        "3.0.0": "call",
        "3.1.0": "call",
        "3.2.0": "call",
        "4": "agent",
        "5": "signal",
    }
    assert all(n == 1 for n in EXECUTED.values())


async def test_a_finished_workflow_resumed_on_the_same_store_runs_nothing_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A new runtime on the same log returns the recorded result; no step runs again."""
    store = InMemoryEventStore()
    assert await run_pipeline(store) == EXPECTED
    executed = dict(EXECUTED)
    assert await run_pipeline(store) == EXPECTED
    assert executed == dict(EXECUTED)


async def test_a_workflow_stopped_mid_sleep_resumes_from_its_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Stop the runtime during the durable sleep: a new one goes on without re-running."""
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        handle = await start_workflow(runtime, pipeline, "t", workflow_id="w2", llm=echo_llm())
        await trio.sleep(10)  # inside the 30 s sleep
        state = await handle.state()
        assert "2" not in state.steps
        assert "1" in state.steps
    before = dict(EXECUTED)
    async with open_runtime(store=store) as runtime:
        handle = await start_workflow(runtime, pipeline, "t", workflow_id="w2", llm=echo_llm())
        await handle.signal("approve", {"by": "ann"})
        assert await handle.result() == EXPECTED
    assert {k: EXECUTED[k] for k in before} == {"t-a": 1, "p0": 1, "p1": 1}
    assert all(n == 1 for n in EXECUTED.values())


@workflow(name="shape")
async def shape_v1(wf: WorkflowContext, _: None) -> object:
    await wf.step(record, "one")
    await wf.sleep(100)
    return await wf.wait_for("never")


@workflow(name="shape")
async def shape_v2(wf: WorkflowContext, _: None) -> object:
    await wf.step(record, "one")
    return await wf.wait_for("something")  # a different step at position 1


async def test_a_different_step_sequence_on_resume_is_a_divergence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The re-run asks for another step where the log has one: ReplayDivergenceError."""
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        await start_workflow(runtime, shape_v1, workflow_id="d1")
        await trio.sleep(200)  # the sleep is over, the workflow waits for a signal
    async with open_runtime(store=store) as runtime:
        handle = await start_workflow(runtime, shape_v2, workflow_id="d1")
        with pytest.raises(ReplayDivergenceError) as info:
            await handle.result()
    assert info.value.code == "replay.divergence"
    assert "step 1" in info.value.difference
    assert "sleep" in info.value.difference
    assert info.value.stream == "workflow/d1"


@workflow
async def shorter(wf: WorkflowContext, _: None) -> object:
    return "nothing"


async def test_a_rerun_that_skips_a_recorded_step_is_a_divergence() -> None:
    """Finishing without asking for a recorded step is named too."""

    @workflow(name="shorter")
    async def longer(wf: WorkflowContext, _: None) -> object:
        await wf.step(record, "x")
        await wf.wait_for("never")
        return None

    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        await start_workflow(runtime, longer, workflow_id="d2")
        await trio.sleep(0.05)
    async with open_runtime(store=store) as runtime:
        handle = await start_workflow(runtime, shorter, workflow_id="d2")
        with pytest.raises(ReplayDivergenceError, match="step 0"):
            await handle.result()


async def test_for_each_runs_at_most_limit_branches_at_once() -> None:
    """``limit`` bounds the concurrency; results keep the items' order."""
    running = 0
    peak = 0

    async def work(item: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.01)
        running -= 1
        return item * item

    @workflow
    async def squares(wf: WorkflowContext, n: int) -> object:
        return await wf.for_each(range(n), lambda i: wf.step(work, i), limit=3)

    async with open_runtime() as runtime:
        assert [i * i for i in range(8)] == await run_workflow(runtime, squares, 8)
    assert peak == 3


async def test_signals_sent_before_and_after_the_wait_are_consumed_in_order() -> None:
    """A signal waits in the log until a ``wait_for`` takes it; one each, in order."""

    @workflow
    async def two(wf: WorkflowContext, _: None) -> object:
        a = await wf.wait_for("go")
        b = await wf.wait_for("go")
        return [a, b]

    async with open_runtime() as runtime:
        handle = await start_workflow(runtime, two)
        await handle.signal("go", 1)
        await trio.sleep(0.01)
        await handle.signal("go", 2)
        assert await handle.result() == [1, 2]


async def test_a_failing_function_is_recorded_and_not_run_again() -> None:
    """The error is in WorkflowFinished; a resume returns it without re-running."""

    @workflow
    async def boom(wf: WorkflowContext, _: None) -> object:
        await wf.step(record, "before")
        raise ValueError("no luck")

    store = InMemoryEventStore()
    for _ in range(2):
        async with open_runtime(store=store) as runtime:
            handle = await start_workflow(runtime, boom, workflow_id="f1")
            with pytest.raises(WorkflowFailedError, match="ValueError: no luck") as info:
                await handle.result()
    assert info.value.code == "workflow.failed"
    assert EXECUTED["before"] == 1


async def test_a_step_result_that_is_not_json_fails_the_workflow() -> None:
    """Results must be JSON: the workflow fails with the TypeError."""

    @workflow
    async def bad(wf: WorkflowContext, _: None) -> object:
        return await wf.step(object)

    async with open_runtime() as runtime:
        with pytest.raises(WorkflowFailedError, match="TypeError"):
            await run_workflow(runtime, bad)


async def test_cancel_stops_the_function_and_its_running_agent_runs() -> None:
    """Cancelling is tree-wide: the agent run waiting for its model ends ``cancelled``."""
    release = trio.Event()

    async def slow(request: LLMRequest) -> LLMResponse:
        await release.wait()
        return LLMResponse(content="late")

    @workflow
    async def waits(wf: WorkflowContext, _: None) -> object:
        return (await wf.run(AgentSpec(name="slow"), "think")).text

    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        handle = await start_workflow(runtime, waits, workflow_id="c1", llm=FunctionLLM(slow))
        await trio.sleep(0.05)
        assert await handle.cancel("enough")
        with pytest.raises(WorkflowCancelledError, match="enough"):
            await handle.result()
        assert not await handle.cancel()
        await trio.sleep(0.05)
        records = await store.read("session/c1.0", 1)
        statuses = [getattr(decode_record(r), "status", None) for r in records]
        assert "cancelled" in statuses


async def test_the_agent_session_id_is_derived_from_the_workflow_and_step() -> None:
    """``wf.run`` at step 0 of ``w`` is session ``w.0``: a resume finds it again."""

    @workflow
    async def ask(wf: WorkflowContext, _: None) -> object:
        result = await wf.run(ANALYST, "hi")
        return result.session_id

    async with open_runtime() as runtime:
        assert await run_workflow(runtime, ask, workflow_id="w", llm=echo_llm()) == "w.0"


async def test_an_agent_run_in_flight_is_reattached_after_a_workflow_crash() -> None:
    """The workflow actor crashes while its agent runs: the same run is waited for."""
    asked = 0

    async def model(request: LLMRequest) -> LLMResponse:
        nonlocal asked
        asked += 1
        await trio.sleep(0.05)
        return LLMResponse(content="answer")

    @workflow
    async def one_agent(wf: WorkflowContext, _: None) -> object:
        return (await wf.run(ANALYST, "q")).text

    store = FaultyEventStore()
    store.crash_at("workflow/r1", 2)  # the StepCompleted of the agent run
    async with open_runtime(store=store) as runtime:
        result = await run_workflow(runtime, one_agent, workflow_id="r1", llm=FunctionLLM(model))
    assert result == "answer"
    assert asked == 1
    assert len(store.faults) == 1


def test_workflow_needs_an_async_function() -> None:
    """``@workflow`` on a plain function is a TypeError."""
    with pytest.raises(TypeError, match="async def"):
        workflow(lambda wf, x: x)  # type: ignore[arg-type, return-value]


async def test_start_workflow_rejects_a_plain_function() -> None:
    """Only ``@workflow`` functions can be started."""

    async def plain(wf: WorkflowContext, x: None) -> None:
        return None

    async with open_runtime() as runtime:
        with pytest.raises(TypeError, match="@workflow"):
            await start_workflow(runtime, plain)  # type: ignore[arg-type]


def test_workflow_events_round_trip_through_the_codec() -> None:
    """Every workflow event encodes and decodes to itself."""
    events = [
        WorkflowStarted(workflow="w", input={"a": [1, 2]}),
        StepCompleted(index="1.0.2", kind="call", name="f", result=[1, "x", None]),
        WorkflowFinished(status="failed", error="ValueError: x"),
    ]
    for event in events:
        encoded = default_registry.encode(event)
        assert event == default_registry.decode(encoded.type, encoded.schema_version, encoded.data)


@workflow
async def small(wf: WorkflowContext, _: None) -> object:
    a = await wf.step(record, "s0")
    group = await wf.parallel(lambda: wf.step(arecord, "g0"), lambda: wf.step(arecord, "g1"))
    await wf.sleep(5)
    b = await wf.run(ANALYST, "q")
    c = await wf.wait_for("go")
    return [a, group, b.text, c]


async def _run_small(store: object) -> object:
    async with open_runtime(store=store) as runtime:  # type: ignore[arg-type]
        handle = await start_workflow(runtime, small, workflow_id="p", llm=echo_llm())
        await handle.signal("go", "yes")
        return await handle.result()


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_workflow_killed_at_any_event_ends_as_if_never_killed(data: st.DataObject) -> None:
    """Crash the workflow at its k-th append: same result, same step results, and no
    step whose result was recorded runs again."""

    async def clean() -> tuple[object, dict[str, object], int]:
        EXECUTED.clear()
        store = InMemoryEventStore()
        result = await _run_small(store)
        return result, await steps_of(store, "p"), len(await store.read("workflow/p", 1))

    clean_result, clean_steps, total = trio.run(
        clean, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    k = data.draw(st.integers(1, total), label="crash_at")

    async def crashed() -> tuple[object, dict[str, object], list[object]]:
        EXECUTED.clear()
        store = FaultyEventStore()
        store.crash_at("workflow/p", k)
        result = await _run_small(store)
        inner = store.inner
        records = await inner.read("workflow/p", 1)
        return result, await steps_of(inner, "p"), [decode_record(r) for r in records]

    result, steps, events = trio.run(crashed, clock=trio.testing.MockClock(autojump_threshold=0))
    assert clean_result == result
    assert clean_steps == steps
    # Steps recorded before the failed append never run again; a step that ran but whose
    # record was lost with the crash (the failed one, a concurrent branch's) runs once more.
    durable = {
        e.result for e in events[: k - 1] if isinstance(e, StepCompleted) and e.kind == "call"
    }
    assert {"s0", "g0", "g1"} == set(EXECUTED)
    assert all(EXECUTED[label] == 1 for label in durable)
    assert all(EXECUTED[label] <= 2 for label in EXECUTED)
