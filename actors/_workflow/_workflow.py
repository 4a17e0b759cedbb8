"""Durable workflows: an async Python function whose steps are events in its own stream.

A workflow is a function decorated with :func:`workflow`, run by :func:`start_workflow`
as an event-sourced actor that owns the stream ``workflow/<id>``. The function gets a
:class:`WorkflowContext` (``wf``) and does its durable work through it: agent runs
(``wf.run``), function calls (``wf.step``), groups of branches (``wf.parallel``,
``wf.for_each``), durable sleeps (``wf.sleep``) and signals (``wf.wait_for``). Each step's
result is recorded as a :class:`StepCompleted` event when it finishes.

After a crash the function simply runs again from the top: a step whose result is in the
log returns it at once, without running again; the first step not in the log is where
the work goes on. So the function must be deterministic in its steps: a re-run that asks
for another step at a recorded position fails with
:class:`~protocols.errors.ReplayDivergenceError` naming the step. Work outside steps runs
again on every re-run; keep it cheap and free of side effects.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Generic, TypeVar, final, overload

import attrs
import orjson
import trio

from protocols import JsonValue
from protocols.codec import make_converter
from protocols.errors import (
    ActorExistsError,
    ConfigError,
    ReplayDivergenceError,
)
from runtime import Decision, EventSourcedActor, Reply
from runtime.lowlevel import timer_decision
from runtime.timers import TimerFired, TimerScheduled

from .._session._agents import AgentSpec, resolve_format
from .._session._events import RunResult, typed_result
from .._session._spawn import spawn_agent
from ._events import (
    SignalReceived,
    StepCompleted,
    StepKind,
    WorkflowCancelRequested,
    WorkflowFinished,
    WorkflowStarted,
    WorkflowState,
    evolve_workflow,
)

if TYPE_CHECKING:
    from protocols import LLM
    from runtime import ActorRef, Runtime

    from .._session._handle import Session

__all__ = [
    "Cancel",
    "GetState",
    "Signal",
    "Start",
    "WaitResult",
    "WorkflowActor",
    "WorkflowContext",
    "WorkflowFunction",
    "to_json",
    "workflow",
]

I = TypeVar("I")  # noqa: E741 - the input type, as in the docs
O = TypeVar("O")  # noqa: E741 - the output type
T = TypeVar("T")

_CONVERTER = make_converter()


@final
@attrs.frozen
class WorkflowFunction(Generic[I, O]):
    """A function made into a workflow by :func:`workflow`; start it with
    :func:`start_workflow`."""

    name: str
    """Recorded in :class:`WorkflowStarted`."""
    function: Callable[[WorkflowContext, I], Awaitable[O]]
    """``async def f(wf, input)``."""


@overload
def workflow(
    function: Callable[[WorkflowContext, I], Awaitable[O]], /
) -> WorkflowFunction[I, O]: ...


@overload
def workflow(
    *, name: str | None = None
) -> Callable[[Callable[[WorkflowContext, I], Awaitable[O]]], WorkflowFunction[I, O]]: ...


def workflow(
    function: Callable[[WorkflowContext, I], Awaitable[O]] | None = None,
    /,
    *,
    name: str | None = None,
) -> (
    WorkflowFunction[I, O]
    | Callable[[Callable[[WorkflowContext, I], Awaitable[O]]], WorkflowFunction[I, O]]
):
    """Make ``async def f(wf, input)`` a durable workflow; use bare or with ``name=``.

    Raises:
        TypeError: the function is not an ``async def``.
    """

    def build(fn: Callable[[WorkflowContext, I], Awaitable[O]]) -> WorkflowFunction[I, O]:
        if not inspect.iscoroutinefunction(fn):
            msg = f"@workflow needs an 'async def' function, got {fn!r}"
            raise TypeError(msg)
        return WorkflowFunction(name or _name_of(fn), fn)

    return build(function) if function is not None else build


def _name_of(fn: object) -> str:
    found: object = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return found if isinstance(found, str) else repr(fn)


def to_json(value: object) -> JsonValue:
    """``value`` as the JSON the log records (attrs classes unstructured, tuples as lists).

    Raises:
        TypeError: the value cannot be turned into JSON.
    """
    try:
        data = orjson.dumps(_CONVERTER.unstructure(value), option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as exc:
        msg = f"a workflow step result must be JSON-serializable: {exc}"
        raise TypeError(msg) from exc
    loaded: JsonValue = orjson.loads(data)
    return loaded


# --- messages between the function, the handle and the actor -------------------------


@attrs.frozen
class Start:
    workflow: str
    input: JsonValue


@attrs.frozen
class Record:
    step: StepCompleted


@attrs.frozen
class Sleep:
    index: str
    name: str
    due_at: float


@attrs.frozen
class WaitSignal:
    index: str
    name: str


@attrs.frozen
class Signal:
    name: str
    payload: JsonValue


@attrs.frozen
class Cancel:
    reason: str


@attrs.frozen
class Finished:
    event: WorkflowFinished


@attrs.frozen
class Diverged:
    error: ReplayDivergenceError


@attrs.frozen
class WaitResult:
    pass


@attrs.frozen
class GetState:
    pass


@attrs.frozen
class RunFunction:
    pass


# --- the position of a step ------------------------------------------------------------


@attrs.define(eq=False)
class _Scope:
    prefix: str
    counter: int = 0

    def next(self) -> str:
        index = f"{self.prefix}{self.counter}"
        self.counter += 1
        return index


_SCOPE: contextvars.ContextVar[_Scope] = contextvars.ContextVar("powertrio_workflow_scope")


# --- the actor ----------------------------------------------------------------------------


class WorkflowActor(EventSourcedActor[WorkflowState]):
    """Runs one workflow: folds ``workflow/<id>``, runs the function, records its steps."""

    def __init__(
        self, workflow_id: str, definition: WorkflowFunction[I, O], llm: LLM | None
    ) -> None:
        self.workflow_id = workflow_id
        self.definition: WorkflowFunction[object, object] = definition  # type: ignore[assignment]  # erased: the input was recorded as JSON
        self.llm = llm
        self.sessions: dict[str, Session] = {}
        self._waiters: dict[str, tuple[StepKind, str, Reply[object]]] = {}
        self._signal_waiters: dict[str, list[str]] = {}
        self._result_waiters: list[Reply[object]] = []
        self._diverged: ReplayDivergenceError | None = None

    def stream_name(self) -> str:
        return f"workflow/{self.workflow_id}"

    def initial_state(self) -> WorkflowState:
        return WorkflowState()

    def evolve(self, state: WorkflowState, event: object) -> WorkflowState:
        return evolve_workflow(state, event)

    def next_step(self, state: WorkflowState) -> object | None:
        if state.started is None or state.finished is not None or self._diverged is not None:
            return None
        return RunFunction()

    async def execute(self, step: object) -> object:
        assert isinstance(step, RunFunction)
        started = self.state.started
        assert started is not None
        context = WorkflowContext._create(self)
        _SCOPE.set(_Scope(""))
        try:
            value = await self.definition.function(context, started.input)
            result = to_json(value)
            context._check_all_visited()
        except Exception as exc:
            diverged = _find_divergence(exc)
            if diverged is not None:
                return Diverged(diverged)
            error = _leaf(exc)
            return Finished(
                WorkflowFinished(status="failed", error=f"{type(error).__name__}: {error}")
            )
        return Finished(WorkflowFinished(status="completed", result=result))

    def handle(self, state: WorkflowState, message: object) -> Decision:
        if isinstance(message, Start):
            if state.started is not None:
                return Decision()
            started = WorkflowStarted(workflow=message.workflow, input=message.input)
            return Decision(events=[started])
        if isinstance(message, Record):
            if message.step.index in state.steps or state.finished is not None:
                return Decision()
            return Decision(events=[message.step])
        if isinstance(message, Finished):
            if state.finished is not None:
                return Decision()
            return Decision(events=[message.event])
        if isinstance(message, Diverged):
            self._diverged = message.error
            for waiter in self._result_waiters:
                waiter.send(message.error)
            self._result_waiters.clear()
            return Decision()
        if isinstance(message, WaitResult):
            return self._wait_result(state)
        if isinstance(message, GetState):
            return Decision(reply=state)
        if isinstance(message, Signal):
            return self._signal(state, message)
        if isinstance(message, WaitSignal):
            return self._wait_signal(state, message)
        if isinstance(message, Sleep):
            return self._sleep(state, message)
        if isinstance(message, TimerFired):
            return self._timer_fired(state, message)
        if isinstance(message, Cancel):
            return self._cancel(state, message)
        outcome = timer_decision(state.timers, message)
        if outcome is not None:
            return Decision.from_outcome(outcome)
        msg = f"a workflow does not handle {type(message).__name__} messages"
        raise TypeError(msg)

    def _wait_result(self, state: WorkflowState) -> Decision:
        if state.finished is not None:
            return Decision(reply=state.finished)
        if self._diverged is not None:
            return Decision(reply=self._diverged)
        self._result_waiters.append(self.context.defer_reply())
        return Decision()

    def _signal(self, state: WorkflowState, message: Signal) -> Decision:
        events: list[object] = [SignalReceived(name=message.name, payload=message.payload)]
        waiting = self._signal_waiters.get(message.name, [])
        if waiting and not state.pending_signal(message.name)[0]:
            index = waiting.pop(0)
            if index not in state.steps:
                events.append(
                    StepCompleted(
                        index=index, kind="signal", name=message.name, result=message.payload
                    )
                )
        return Decision(events=events)

    def _wait_signal(self, state: WorkflowState, message: WaitSignal) -> Decision:
        done = state.steps.get(message.index)
        if done is not None:
            return Decision(reply=done.result)
        available, payload = state.pending_signal(message.name)
        if available:
            step = StepCompleted(
                index=message.index, kind="signal", name=message.name, result=payload
            )
            return Decision(events=[step], reply=payload)
        self._waiters[message.index] = ("signal", message.name, self.context.defer_reply())
        self._signal_waiters.setdefault(message.name, []).append(message.index)
        return Decision()

    def _timer_id(self, index: str) -> str:
        return f"workflow/{self.workflow_id}/sleep/{index}"

    def _sleep(self, state: WorkflowState, message: Sleep) -> Decision:
        if message.index in state.steps:
            return Decision()
        self._waiters[message.index] = ("sleep", message.name, self.context.defer_reply())
        timer_id = self._timer_id(message.index)
        if state.timers.get(timer_id) is not None or timer_id in state.timers.finished:
            return Decision()
        note = orjson.dumps([message.index, message.name]).decode()
        timer = TimerScheduled(timer_id=timer_id, due_at=message.due_at, note=note)
        return Decision(events=[timer])

    def _timer_fired(self, state: WorkflowState, message: TimerFired) -> Decision:
        pending = state.timers.get(message.timer_id)
        outcome = timer_decision(state.timers, message)
        assert outcome is not None
        if pending is None or not outcome.events:
            return Decision.from_outcome(outcome)
        index, name = orjson.loads(pending.note)
        events: list[object] = list(outcome.events)
        if index not in state.steps:
            events.append(StepCompleted(index=index, kind="sleep", name=name))
        return Decision(events=events)

    def _cancel(self, state: WorkflowState, message: Cancel) -> Decision:
        if state.finished is not None:
            return Decision(reply=False)
        sessions = list(self.sessions.values())
        self.sessions.clear()
        if sessions:
            self.context.start_soon(_cancel_sessions, sessions, message.reason)
        return Decision(
            events=[
                WorkflowCancelRequested(reason=message.reason),
                WorkflowFinished(status="cancelled", error=message.reason),
            ],
            reply=True,
            cancel_step=True,
        )

    def after_persist(self, events: Sequence[object]) -> None:
        for event in events:
            if isinstance(event, StepCompleted):
                waiter = self._waiters.pop(event.index, None)
                if waiter is None:
                    continue
                kind, name, reply = waiter
                if (kind, name) == (event.kind, event.name):
                    reply.send(event.result)
                else:  # e.g. a timer of an older version of the code fired here
                    reply.fail(
                        ReplayDivergenceError(
                            self.stream_name(),
                            self.state.step_versions.get(event.index, 0),
                            "workflow.step_completed",
                            f"step {event.index}: the log has {event.kind} {event.name!r}, "
                            f"the code asks for {kind} {name!r}",
                        )
                    )
            elif isinstance(event, WorkflowFinished):
                for result_waiter in self._result_waiters:
                    result_waiter.send(event)
                self._result_waiters.clear()


async def _cancel_sessions(sessions: Sequence[Session], reason: str) -> None:
    for session in sessions:
        await session.cancel(reason or "the workflow was cancelled", by="workflow")


def _find_divergence(exc: BaseException) -> ReplayDivergenceError | None:
    if isinstance(exc, ReplayDivergenceError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_divergence(inner)
            if found is not None:
                return found
    return None


def _leaf(exc: Exception) -> Exception:
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# --- what the function sees -------------------------------------------------------------


@final
class WorkflowContext:
    """What a workflow function does its durable work through (``wf``).

    Every method is a step: it has a position (the order of calls in the function, per
    branch), and its result is recorded when it finishes. A re-run after a crash gets
    recorded results back without running anything.
    """

    __slots__ = ("_actor", "_visited")
    _actor: WorkflowActor
    _visited: set[str]

    def __init__(self) -> None:
        msg = "WorkflowContext is made by the workflow actor and passed to your function"
        raise TypeError(msg)

    @classmethod
    def _create(cls, actor: WorkflowActor) -> WorkflowContext:
        self = object.__new__(cls)
        self._actor = actor
        self._visited = set()
        return self

    @property
    def id(self) -> str:
        """The workflow id (its stream is ``workflow/<id>``)."""
        return self._actor.workflow_id

    @property
    def runtime(self) -> Runtime:
        """The runtime the workflow runs in."""
        return self._actor.context.runtime

    # -- positions and recorded results ------------------------------------------------

    def _next_index(self) -> str:
        scope = _SCOPE.get(None)
        if scope is None:
            msg = "workflow steps must be called from the workflow function or its branches"
            raise RuntimeError(msg)
        index = scope.next()
        if "." not in index:
            self._visited.add(index)
        return index

    def _recorded(self, index: str, kind: StepKind, name: str) -> StepCompleted | None:
        state = self._actor.state
        step = state.steps.get(index)
        if step is None:
            return None
        if step.kind != kind or step.name != name:
            raise ReplayDivergenceError(
                self._actor.stream_name(),
                state.step_versions.get(index, 0),
                "workflow.step_completed",
                f"step {index}: the log has {step.kind} {step.name!r}, "
                f"the code asks for {kind} {name!r}",
            )
        return step

    def _check_all_visited(self) -> None:
        state = self._actor.state
        for index, step in state.steps.items():
            if "." not in index and index not in self._visited:
                raise ReplayDivergenceError(
                    self._actor.stream_name(),
                    state.step_versions.get(index, 0),
                    "workflow.step_completed",
                    f"step {index}: the log has {step.kind} {step.name!r}, "
                    "the code finished without asking for it",
                )

    async def _record(self, index: str, kind: StepKind, name: str, result: JsonValue) -> None:
        step = StepCompleted(index=index, kind=kind, name=name, result=result)
        await self._ask(Record(step))

    async def _ask(self, message: object) -> object:
        ref: ActorRef[object] = self._actor.context.ref
        return await ref.ask(message)

    # -- steps -------------------------------------------------------------------------

    async def step(self, fn: Callable[..., object], *args: object) -> JsonValue:
        """Call ``fn(*args)`` once: its result is recorded and returned as JSON.

        A plain function is called directly, an ``async def`` awaited. The result is what
        the log holds (a tuple comes back as a list, an attrs class as a dict), the same on
        the first run and on every re-run.

        Raises:
            ReplayDivergenceError: the log holds another step at this position.
            TypeError: the result is not JSON-serializable.
        """
        index = self._next_index()
        name = _name_of(fn)
        recorded = self._recorded(index, "call", name)
        if recorded is not None:
            await trio.lowlevel.checkpoint()
            return recorded.result
        value: object = fn(*args)
        if inspect.isawaitable(value):
            value = await value
        result = to_json(value)
        await self._record(index, "call", name, result)
        return result

    async def run(self, spec: AgentSpec, input: str) -> RunResult:
        """Run an agent on ``input`` and return how the run ended.

        The agent is a session with a deterministic id, ``<workflow id>.<step index>``, so
        a re-run after a crash reattaches to the same session, whose run goes on from its
        own log instead of starting again.

        Raises:
            ReplayDivergenceError: the log holds another step at this position.
            ConfigError: the spec has no model and the workflow was started without one.
        """
        index = self._next_index()
        recorded = self._recorded(index, "agent", spec.name)
        _, output_type = resolve_format(spec.response_format)
        if recorded is not None:
            await trio.lowlevel.checkpoint()
            return typed_result(_CONVERTER.structure(recorded.result, RunResult), output_type)
        session_id = f"{self.id}.{index}"
        session = await self._attach(spec, session_id)
        self._actor.sessions[session_id] = session
        try:
            result = await session._submit(input, run_id=f"{session_id}:run", budget=spec.budget)
        finally:
            self._actor.sessions.pop(session_id, None)
        # The log keeps the JSON answer; the spec's class is applied on the way out.
        raw = attrs.evolve(result, output=result.raw_output)
        await self._record(index, "agent", spec.name, to_json(raw))
        return result

    async def _attach(self, spec: AgentSpec, session_id: str) -> Session:
        runtime = self.runtime
        llm = spec.llm or self._actor.llm
        if llm is None:
            msg = (
                f"agent spec {spec.name!r} has no llm: set AgentSpec.llm or pass llm= to "
                "start_workflow"
            )
            raise ConfigError(msg)
        try:
            return await spawn_agent(runtime, spec, llm=llm, session_id=session_id)
        except ActorExistsError:
            # A previous incarnation of this workflow started it: stop that actor and
            # spawn it again, so the session folds its log and goes on with the run.
            await runtime.stop(runtime.lookup(session_id))
            return await spawn_agent(runtime, spec, llm=llm, session_id=session_id)

    async def parallel(
        self, *branches: Callable[[], Awaitable[object]], name: str = "parallel"
    ) -> list[JsonValue]:
        """Run ``branches`` concurrently (each a no-argument async function using ``wf``)
        and return their results, in order.

        Each branch has positions of its own (``<index>.<branch>.<n>``), so the steps of
        concurrent branches are told apart however they interleave. A branch that raises
        cancels the others and the error propagates.

        Raises:
            ReplayDivergenceError: the log holds another step at this position.
        """
        return await self._group("parallel", name, branches, limit=None)

    async def for_each(
        self,
        items: Iterable[T],
        fn: Callable[[T], Awaitable[object]],
        *,
        limit: int = 8,
        name: str | None = None,
    ) -> list[JsonValue]:
        """Run ``fn(item)`` for every item, at most ``limit`` at once; results in order.

        Raises:
            ValueError: ``limit`` is below 1.
            ReplayDivergenceError: the log holds another step at this position.
        """
        if limit < 1:
            msg = f"limit must be at least 1, got {limit!r}"
            raise ValueError(msg)
        values = list(items)
        label = name or _name_of(fn)

        def branch(item: T) -> Callable[[], Awaitable[object]]:
            return lambda: fn(item)

        return await self._group("for_each", label, [branch(v) for v in values], limit=limit)

    async def _group(
        self,
        kind: StepKind,
        name: str,
        branches: Sequence[Callable[[], Awaitable[object]]],
        *,
        limit: int | None,
    ) -> list[JsonValue]:
        index = self._next_index()
        recorded = self._recorded(index, kind, name)
        if recorded is not None:
            await trio.lowlevel.checkpoint()
            assert isinstance(recorded.result, list)
            return recorded.result
        results: list[JsonValue] = [None] * len(branches)
        limiter = trio.CapacityLimiter(limit or max(1, len(branches)))

        async def one(position: int, branch: Callable[[], Awaitable[object]]) -> None:
            _SCOPE.set(_Scope(f"{index}.{position}."))
            async with limiter:
                results[position] = to_json(await branch())

        async with trio.open_nursery() as nursery:
            for position, branch in enumerate(branches):
                nursery.start_soon(one, position, branch)
        await self._record(index, kind, name, list(results))
        return results

    async def sleep(self, delay: timedelta | float) -> None:
        """Sleep durably: a timer in the workflow's stream, kept across restarts.

        Raises:
            ValueError: ``delay`` is negative.
            ReplayDivergenceError: the log holds another step at this position.
        """
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if seconds < 0:
            msg = f"delay must be >= 0, got {delay!r}"
            raise ValueError(msg)
        index = self._next_index()
        name = f"{seconds:g}s"
        if self._recorded(index, "sleep", name) is not None:
            await trio.lowlevel.checkpoint()
            return
        due_at = self.runtime.clock.now() + seconds
        await self._ask(Sleep(index, name, due_at))

    async def wait_for(self, signal: str) -> JsonValue:
        """Wait for the next signal called ``signal`` (see :meth:`Workflow.signal`).

        Signals are recorded when they arrive, so one sent before the workflow waits is
        not lost; each ``wait_for`` consumes one, in arrival order.

        Raises:
            ReplayDivergenceError: the log holds another step at this position.
        """
        index = self._next_index()
        recorded = self._recorded(index, "signal", signal)
        if recorded is not None:
            await trio.lowlevel.checkpoint()
            return recorded.result
        payload = await self._ask(WaitSignal(index, signal))
        return payload  # type: ignore[return-value]  # the actor replies with the JSON payload


# --- the handle ---------------------------------------------------------------------------
