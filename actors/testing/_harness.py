"""A deterministic harness: an agent, a script and operations in one run under virtual time."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import random
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, final

import attrs
import trio
import trio.testing

import actors
from protocols.errors import (
    ActorCrashedError,
    ConfigError,
    PowertrioError,
    StreamNotFoundError,
    TimerNotFoundError,
    TimerOwnerUnavailableError,
)
from runtime import (
    Clock,
    EventStore,
    NewEvent,
    RecordedEvent,
    Runtime,
    open_runtime,
    open_sqlite_store,
)
from runtime.supervision import Backoff, Supervision
from runtime.testing import FaultyEventStore, InjectedFault, InMemoryEventStore, ScriptItem

from ._deterministic_llm import CALLER, DeterministicLLM, LLMCall
from ._operations import (
    AdvanceClock,
    CancelRun,
    ClearTimer,
    CrashSession,
    FailNextCommit,
    Operation,
    RestartRuntime,
    Send,
    SendFollowUp,
    SetTimer,
    WriteBoard,
)

if TYPE_CHECKING:
    from actors import AgentSpec, Board, Price, RunResult, Session, SessionState
    from actors.events import ActiveRun
    from protocols import LLM, LLMRequest, LLMResponse, ToolCall, ToolOutcome

    from .._session._observe import HookContext, LLMCallNext, ToolCallNext, ToolHook

__all__ = ["DEFAULT_EPOCH", "ObservedState", "RuntimeHarness", "Trace"]

DEFAULT_EPOCH = 1_700_000_000.0
"""The wall time (epoch seconds) the harness's clock starts at, so runs are reproducible."""

_MAX_IDLE = 50  # passes with nothing to wait for before the harness calls itself stuck


@final
@attrs.frozen(kw_only=True, eq=False)
class ObservedState:
    """The state the session reported after an operation (``observe_states=True``)."""

    after: str
    """The operation, as Python."""
    state: SessionState
    version: int
    """The length of the session's stream read right after: the state must be the fold
    of one of its prefixes (:func:`assert_states_are_folds`)."""


@final
@attrs.frozen(kw_only=True, eq=False)
class Trace:
    """Everything one harness run produced, for the invariants to check.

    Made by :meth:`RuntimeHarness.run`; ``attrs.evolve`` it to build a broken case.
    """

    agent: AgentSpec
    """The agent that ran."""
    session_id: str
    operations: tuple[Operation, ...]
    outcomes: tuple[str, ...]
    """What each operation did, one line each, in order."""
    results: Mapping[int, RunResult]
    """The result of each ``Send``, by the operation's index."""
    state: SessionState
    """The live session's folded state at the end (``session.state()``)."""
    replayed: SessionState | None
    """``replay_session``'s state of the log at the end, ``None`` if the replay raised."""
    replay_error: Exception | None
    """What the replay raised (a ``ReplayDivergenceError``...), if it did."""
    calls: tuple[LLMCall, ...]
    """Every model call, in order."""
    records: tuple[RecordedEvent, ...]
    """The whole log at the end, in global order."""
    faults: tuple[InjectedFault, ...]
    """The injected faults that fired."""
    store: InMemoryEventStore
    """The log itself, for further checks (``replay_session`` with changed code...); a
    copy in memory, event for event, when the run was on SQLite."""
    prices: Mapping[str, Price] = attrs.field(factory=dict)
    """The prices the session ran with (for cost budgets)."""
    observed: tuple[ObservedState, ...] = ()
    """The state after each operation, with ``observe_states=True``."""

    @property
    def stream(self) -> str:
        """The session's stream name."""
        return f"session/{self.session_id}"

    @property
    def session_events(self) -> int:
        """How many events the session's stream holds: the places ``crash_at`` can hit."""
        return sum(1 for record in self.records if record.stream == self.stream)

    @property
    def requests(self) -> tuple[LLMRequest, ...]:
        """Every request the model received, in order."""
        return tuple(call.request for call in self.calls)


# Their field types come from `actors`, which runtime imports only for type checking, so
# fixup_module_metadata cannot resolve them and would leave the private module name.
Trace.__module__ = ObservedState.__module__ = "actors.testing"


@contextlib.contextmanager
def _seeded_scheduler(seed: int) -> Iterator[None]:
    """Make Trio's choice among runnable tasks a function of ``seed``.

    Trio shuffles each batch of runnable tasks with a module-level generator, and
    switches to a reproducible shuffle when asked (as Hypothesis and pytest-trio do). An
    internal of Trio: when it is missing the runs are still correct, only their
    interleavings are not reproducible across processes.
    """
    run_module = importlib.import_module("trio._core._run")
    rng = getattr(run_module, "_r", None)
    flag = getattr(run_module, "_ALLOW_DETERMINISTIC_SCHEDULING", None)
    if not isinstance(rng, random.Random) or flag is None:
        yield
        return
    saved = rng.getstate()
    rng.seed(seed)
    setattr(run_module, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010  # Final there
    try:
        yield
    finally:
        rng.setstate(saved)
        setattr(run_module, "_ALLOW_DETERMINISTIC_SCHEDULING", flag)  # noqa: B010


class _InjectedCrashFilter(logging.Filter):
    """Drops the runtime's warning about a crash the harness caused on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "injected fault (" not in record.getMessage()


@contextlib.contextmanager
def _quiet_injected_crashes() -> Iterator[None]:
    """Keep crashes injected by :class:`FaultyEventStore` out of the log; others stay."""
    logger = logging.getLogger("powertrio.runtime")
    quiet = _InjectedCrashFilter()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


async def _tell_caller(
    request: LLMRequest, call_next: LLMCallNext, context: HookContext
) -> LLMResponse:
    """An LLM hook that tells the model which session calls (sub-agents share it)."""
    token = CALLER.set(context.session_id)
    try:
        return await call_next(request)
    finally:
        CALLER.reset(token)


def _slow_tools(delays: Mapping[str, float]) -> ToolHook:
    """A tool hook that makes the named tools take ``delays[name]`` more seconds (virtual)."""

    async def hook(call: ToolCall, call_next: ToolCallNext, context: HookContext) -> ToolOutcome:
        delay = delays.get(call.name, 0.0)
        if delay:
            await trio.sleep(delay)
        return await call_next(call)

    return hook


@final
class RuntimeHarness:
    """Runs an agent through a script and operations, deterministically, with faults.

    Each :meth:`run` is one ``trio.run`` under ``MockClock(autojump_threshold=0)``: a
    fresh log (in memory, or with ``store="sqlite"`` an SQLite file in a temporary
    directory, copied into memory for the :class:`Trace` at the end), a runtime seeded
    with ``seed`` (ids, jitter) whose clock starts at :data:`DEFAULT_EPOCH`, Trio's
    scheduler seeded too, and the agent as a session whose model is a
    :class:`DeterministicLLM` over the script. Days of timers run in milliseconds, and
    the same inputs give the same log, event for event.

    The operations run in order (see :func:`operations`); a :class:`RestartRuntime`
    closes the runtime and opens the next one on the same log, clock and model. Then
    the harness settles: it waits for every run (answering any human request: questions
    with ``human_answer``, approvals denied), cancels the timers still pending so
    nothing fires later, and takes the live state. After the runtime closed it replays
    the log with ``replay_session`` and returns a :class:`Trace` for the invariants
    (:func:`assert_invariants`...).

    The crashes it injects are kept out of the runtime's log (other crashes are not),
    and an LLM hook tells the model which session calls, so that sub-agents sharing it
    are told apart (:attr:`LLMCall.caller`). The harness holds no state between runs, so
    one may serve every example of a property.

    Example::

        harness = RuntimeHarness(AgentSpec(name="calc", tools=[add]), tool_delays={"add": 2})
        trace = harness.run(
            [LLMResponse(tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')]),
             LLMResponse(content="3")],
            [Send("1+2?"), AdvanceClock(0.5), CancelRun("after_turn")],
            crash_at=4,
        )
        assert_invariants(trace)

    The agent is the app's own: its :class:`AgentSpec` tree, its tools (built-ins too:
    ``board_tools("team")``, ``wakeup_tools()`` and the ``spawn_agent`` tool of its
    ``agents`` find the harness's board and runtime through each call's context), and its
    model function (``llm=FunctionLLM(model)``, or the spec's ``llm``), which answers
    every request the scripted ``conversation`` leaves.

    Args:
        agent (AgentSpec | None): the agent under test; its ``tools`` must be ``Tool``
            objects. ``None``: a plain agent with no tools.
        llm (LLM | None): the app's model (a ``FunctionLLM`` over its model function);
            it answers each new request after the conversation's script. ``None``: the
            spec's ``llm`` if it has one, else the script then ``"done"``.
        approve (bool): approve the tool calls that need a human's approval (the
            default denies them).
        seed (int): seeds the runtime's ids and randomness and Trio's scheduler.
        llm_latency (float): virtual seconds each model call takes, so operations land
            while calls are in flight.
        tool_delays (Mapping[str, float] | None): virtual seconds added to each call of
            the named tools (slow tools).
        prices (Mapping[str, Price] | None): for agents with a cost budget.
        board_id (str | None): the board that ``WriteBoard`` writes to and the session
            watches (opened only when a sequence writes to it).
        human_answer (str): the answer to a question the agent asks a human; also the
            reason given when an approval is denied.
        session_id (str): the session's id (its stream is ``session/<id>``).
        max_virtual_seconds (float): a run that has not settled after this much virtual
            time fails: the agent hangs.
        supervision (Supervision | None): how the root restarts the session after a
            crash; the default restarts at once, up to 1000 times a second.
        observe_states (bool): after each operation, ask the session for its state and
            keep it in :attr:`Trace.observed`, for :func:`assert_states_are_folds`.
        store ("memory" | "sqlite"): where the log lives: an ``InMemoryEventStore``, or
            an SQLite file (``open_sqlite_store``) in a fresh temporary directory that every
            runtime of the run shares, so the properties also hold on the real store.

    Raises:
        ConfigError: the agent names a tool instead of giving it.
        ValueError: a delay, the latency or ``max_virtual_seconds`` is negative, or
            ``store`` is neither ``"memory"`` nor ``"sqlite"``.
    """

    def __init__(
        self,
        agent: AgentSpec | None = None,
        *,
        llm: LLM | None = None,
        approve: bool = False,
        seed: int = 0,
        llm_latency: float = 1.0,
        tool_delays: Mapping[str, float] | None = None,
        prices: Mapping[str, Price] | None = None,
        board_id: str | None = "shared",
        human_answer: str = "no human is available in this test",
        session_id: str = "s1",
        max_virtual_seconds: float = 7 * 86_400.0,
        supervision: Supervision | None = None,
        observe_states: bool = False,
        store: Literal["memory", "sqlite"] = "memory",
    ) -> None:
        if agent is None:
            agent = actors.AgentSpec(name="agent")
        assert agent is not None
        named = [t for t in agent.tools or () if isinstance(t, str)]
        if named:
            msg = (
                f"agent {agent.name!r} names tools ({', '.join(named)}); the harness runs it "
                "as a top-level agent, which has no parent to take them from: give Tool objects"
            )
            raise ConfigError(msg)
        delays = dict(tool_delays or {})
        limits = [("llm_latency", llm_latency), ("max_virtual_seconds", max_virtual_seconds)]
        limits.extend((f"tool_delays[{name!r}]", delay) for name, delay in delays.items())
        for label, value in limits:
            if not value >= 0:
                msg = f"{label} must be >= 0 seconds, got {value!r}"
                raise ValueError(msg)
        if store not in ("memory", "sqlite"):
            msg = f"store must be 'memory' or 'sqlite', got {store!r}"
            raise ValueError(msg)
        self._store = store
        self._agent: AgentSpec = agent
        self._llm = llm if llm is not None else agent.llm
        self._approve = approve
        self._seed = seed
        self._llm_latency = llm_latency
        self._tool_delays = delays
        self._prices: dict[str, Price] = dict(prices or {})
        self._board_id = board_id
        self._human_answer = human_answer
        self._session_id = session_id
        self._max_seconds = max_virtual_seconds
        self._observe_states = observe_states
        self._log_path: Path | None = None
        self._supervision = supervision or Supervision(
            max_restarts=1000, within=1.0, backoff=Backoff(initial=0.0)
        )

    def __repr__(self) -> str:
        store = "" if self._store == "memory" else f", store={self._store!r}"
        return f"RuntimeHarness(agent={self._agent.name!r}, seed={self._seed}{store})"

    @property
    def agent(self) -> AgentSpec:
        """The agent under test."""
        return self._agent

    @property
    def log_path(self) -> Path | None:
        """The SQLite file of the run in progress (``store="sqlite"``), else ``None``.

        For a look at the file itself while the agent runs (from a model or a tool the
        test gave it): what a run writes to which table, say. The file is gone after
        :meth:`run` returns.
        """
        return self._log_path

    def run(
        self,
        conversation: Iterable[ScriptItem] = (),
        operations: Iterable[Operation] = (Send("hello", wait=True),),
        *,
        crash_at: int | None = None,
    ) -> Trace:
        """Run the agent in a fresh ``trio.run`` under a ``MockClock``; see the class.

        Call it from synchronous code (a Hypothesis test); inside Trio use :meth:`play`.

        Args:
            conversation (Iterable[ScriptItem]): the model's answers (see
                :func:`conversations`); after it the model answers ``"done"``.
            operations (Iterable[Operation]): what to do to the session, in order.
            crash_at (int | None): crash the session at this event of its stream (the
                append that would write it fails once, and it restarts from the log).

        Returns:
            Trace: what happened.

        Raises:
            AssertionError: the agent did not settle within ``max_virtual_seconds``.
            RuntimeError: called inside ``trio.run`` (use :meth:`play`).
        """
        play = functools.partial(self.play, conversation, operations, crash_at=crash_at)
        with _seeded_scheduler(self._seed):
            return trio.run(play, clock=trio.testing.MockClock(autojump_threshold=0))

    async def play(
        self,
        conversation: Iterable[ScriptItem] = (),
        operations: Iterable[Operation] = (Send("hello", wait=True),),
        *,
        crash_at: int | None = None,
    ) -> Trace:
        """:meth:`run` inside the current Trio run (on its clock and scheduler).

        Use it from an async test with the ``virtual_clock`` fixture.

        Raises:
            AssertionError: the agent did not settle within ``max_virtual_seconds``.
        """
        clock = Clock(DEFAULT_EPOCH)
        ops = tuple(operations)
        async with self._open_log(clock) as inner:
            store = FaultyEventStore(inner)
            if crash_at is not None:
                store.crash_at(f"session/{self._session_id}", crash_at)
            llm = DeterministicLLM(
                conversation, latency=self._llm_latency, store=inner, model=self._llm
            )
            with _quiet_injected_crashes():
                return await self._play(clock, inner, store, llm, ops)

    @contextlib.asynccontextmanager
    async def _open_log(self, clock: Clock) -> AsyncIterator[EventStore]:
        """The log of one play: in memory, or an SQLite file in a fresh directory."""
        if self._store == "memory":
            yield InMemoryEventStore(clock.now)
            return
        # The store stamps events in its writer thread, where ``clock.now`` (Trio's time)
        # cannot be read: the same time, read from the run's clock object instead.
        start, origin = clock.now(), trio.current_time()
        source = trio.lowlevel.current_clock()

        def now() -> float:
            return start + (source.current_time() - origin)

        with tempfile.TemporaryDirectory(prefix="powertrio-harness-") as directory:
            path = Path(directory) / "events.db"
            self._log_path = path
            try:
                async with open_sqlite_store(path, synchronous="OFF", clock=now) as log:
                    yield log
            finally:
                self._log_path = None

    async def _play(
        self,
        clock: Clock,
        inner: EventStore,
        store: FaultyEventStore,
        llm: DeterministicLLM,
        ops: tuple[Operation, ...],
    ) -> Trace:
        agent = self._agent
        driver = _Driver(store, self._human_answer, approve=self._approve)
        segments: list[list[tuple[int, Operation]]] = [[]]
        for index, operation in enumerate(ops):
            if isinstance(operation, RestartRuntime):
                segments.append([])
            segments[-1].append((index, operation))
        board_id = self._board_id if any(isinstance(op, WriteBoard) for op in ops) else None
        state: SessionState | None = None
        try:
            with trio.fail_after(self._max_seconds):
                for number, segment in enumerate(segments):
                    async with open_runtime(
                        clock=clock,
                        seed=self._seed + number,
                        store=store,
                        supervision=self._supervision,
                    ) as runtime:
                        session = await self._spawn(runtime, llm)
                        board: Board | None = None
                        if board_id is not None:
                            board = await actors.open_board(runtime, board_id)
                            await board.watch_actor(session.ref, prefix="")
                        driver.attach(runtime, session, board)
                        async with trio.open_nursery() as nursery:
                            driver.nursery = nursery
                            for index, operation in segment:
                                driver.outcomes.append(await driver.apply(index, operation))
                                if self._observe_states:
                                    await driver.observe(repr(operation))
                            if number == len(segments) - 1:
                                await driver.settle()
                                state = await driver.state()
                            nursery.cancel_scope.cancel()  # sends in flight die with it
        except trio.TooSlowError:
            done = "\n".join(
                f"  {op!r}: {outcome}" for op, outcome in zip(ops, driver.outcomes, strict=False)
            )
            msg = (
                f"the agent did not settle within {self._max_seconds:g} virtual seconds "
                f"(a hang); operations done:\n{done or '  (none)'}"
            )
            raise AssertionError(msg) from None
        assert state is not None
        outcomes = list(driver.outcomes)
        for i, op in enumerate(ops):
            if isinstance(op, Send) and not op.wait and i in driver.finals:
                outcomes[i] += f"; then {driver.finals[i]}"
        replayed: SessionState | None = None
        replay_error: Exception | None = None
        try:
            replay = await actors.replay_session(
                inner, self._session_id, agent, prices=self._prices
            )
            replayed = replay.state
        except StreamNotFoundError:
            replayed = actors.SessionState()  # nothing was decided: a session's creation is
            # appended with its first decision, and the fold of no events is the start
        except Exception as exc:  # reported by assert_replay_matches
            replay_error = exc
        records = tuple(await inner.read_all())
        log = inner if isinstance(inner, InMemoryEventStore) else await _copy_log(inner, clock)
        return Trace(
            agent=agent,
            session_id=self._session_id,
            operations=ops,
            outcomes=tuple(outcomes),
            results=dict(driver.results),
            state=state,
            replayed=replayed,
            replay_error=replay_error,
            calls=tuple(llm.calls),
            records=records,
            faults=tuple(store.faults),
            store=log,
            prices=dict(self._prices),
            observed=tuple(driver.observed),
        )

    async def _spawn(self, runtime: Runtime, llm: DeterministicLLM) -> Session:
        agent = self._agent
        session: Session = await actors.spawn_session(
            runtime,
            llm=llm,
            tools=agent.own_tools(),
            system_prompt=agent.system_prompt,
            max_rounds=agent.max_rounds,
            model=agent.model,
            budget=agent.budget,
            response_format=agent.response_format,
            agents=agent.agents,
            prices=self._prices,
            llm_hooks=[_tell_caller],
            tool_hooks=[_slow_tools(self._tool_delays)] if self._tool_delays else [],
            session_id=self._session_id,
            context=agent.context,
        )
        return session


_GAP_STREAM = "harness/gap"


async def _copy_log(source: EventStore, clock: Clock) -> InMemoryEventStore:
    """An in-memory copy of ``source``: the same events at the same versions and
    positions, with the same payloads, metadata and ``recorded_at``, and its snapshots.

    The positions of deleted streams are skipped over with events of a scratch stream,
    deleted at the end, so that every event keeps its position.
    """
    copy = InMemoryEventStore(clock.now)
    head = 0
    for record in await source.read_all():
        gap = record.position - head - 1
        if gap > 0:
            await _skip(copy, gap)
        event = NewEvent(
            type=record.type,
            schema_version=record.schema_version,
            data=record.data,
            metadata=record.metadata,
            recorded_at=record.recorded_at,
        )
        result = await copy.append(record.stream, [event], record.version - 1)
        assert result.last_position == record.position, (result, record)
        head = record.position
    end = await source.head_position()
    if end > head:
        await _skip(copy, end - head)
    await copy.delete_streams([_GAP_STREAM])
    for info in await source.streams():
        snapshot = await source.load_snapshot(info.stream)
        if snapshot is not None:
            await copy.save_snapshot(
                snapshot.stream,
                snapshot.version,
                type=snapshot.type,
                schema_version=snapshot.schema_version,
                data=snapshot.data,
                chunks=snapshot.chunks,
            )
    return copy


async def _skip(copy: InMemoryEventStore, count: int) -> None:
    """Use up ``count`` positions of ``copy`` with events of the scratch stream."""
    filler = NewEvent(type="harness.gap", schema_version=1, data=b"{}")
    version = await copy.stream_version(_GAP_STREAM)
    await copy.append(_GAP_STREAM, [filler] * count, version)


def _describe_error(error: PowertrioError) -> str:
    return f"error {error.code}: {error}"


class _Driver:
    """Applies operations to the session and settles it; one per harness run, across the
    runtimes a :class:`RestartRuntime` opens."""

    def __init__(self, store: FaultyEventStore, human_answer: str, *, approve: bool) -> None:
        self.store = store
        self.human_answer = human_answer
        self.approve = approve
        self.nursery: trio.Nursery | None = None
        self.outcomes: list[str] = []
        self.results: dict[int, RunResult] = {}
        self.finals: dict[int, str] = {}
        """How each send ended, by operation index."""
        self.timers: list[str] = []
        self.pending = 0
        self.observed: list[ObservedState] = []

    def attach(self, runtime: Runtime, session: Session, board: Board | None) -> None:
        """Drive this runtime's session (a new one after each restart)."""
        self.runtime = runtime
        self.session = session
        self.board = board

    async def state(self) -> SessionState:
        """The session's state, asked again if the actor crashed under the question."""
        while True:
            try:
                return await self.session.state()
            except ActorCrashedError:
                await trio.lowlevel.checkpoint()

    async def observe(self, after: str) -> None:
        """Record the state the session reports now, and how long its stream is."""
        state = await self.state()
        version = await self.store.inner.stream_version(f"session/{self.session.id}")
        self.observed.append(ObservedState(after=after, state=state, version=version))

    async def apply(self, index: int, op: Operation) -> str:
        """Do one operation; return what it did, in a few words."""
        try:
            return await self._apply(index, op)
        except PowertrioError as exc:  # a typed refusal is an outcome, not a failure
            return _describe_error(exc)

    async def _apply(self, index: int, op: Operation) -> str:
        session = self.session
        if isinstance(op, Send):
            finished = self._send_in_background(index, op)
            if not op.wait:
                return "sent (runs in the background)"
            await self._drive(finished.is_set)
            return self.finals[index]
        if isinstance(op, SendFollowUp):
            accepted = await session.follow_up(op.text, id=op.id, kind=op.kind)
            return "accepted" if accepted else "a repeated id: no-op"
        if isinstance(op, CancelRun):
            cancelled = await session.cancel("cancelled by the harness", mode=op.mode)
            return "cancel recorded" if cancelled else "no active run"
        if isinstance(op, SetTimer):
            timer_id = await self.runtime.timers.schedule(
                session.ref, delay=op.delay, every=op.every, note=op.note
            )
            self.timers.append(timer_id)
            return f"timer {timer_id}"
        if isinstance(op, ClearTimer):
            if not self.timers:
                await trio.lowlevel.checkpoint()
                return "no timer set"
            timer_id = self.timers[op.index % len(self.timers)]
            await self.runtime.timers.cancel_timer(timer_id)
            return f"cleared {timer_id}"
        if isinstance(op, WriteBoard):
            assert self.board is not None
            entry = await self.board.put(op.key, op.value)
            return f"{op.key} at version {entry.version}"
        if isinstance(op, CrashSession):
            self.store.fail_next_append(f"session/{session.id}")
            await trio.lowlevel.checkpoint()
            return "armed: the session's next append fails"
        if isinstance(op, FailNextCommit):
            self.store.fail_next_append()
            await trio.lowlevel.checkpoint()
            return "armed: the next commit fails"
        if isinstance(op, RestartRuntime):
            await trio.lowlevel.checkpoint()
            return "a new runtime on the same log"
        assert isinstance(op, AdvanceClock)
        await trio.sleep(op.seconds)
        return f"{op.seconds:g} s passed"

    def _send_in_background(self, index: int, op: Send) -> trio.Event:
        finished = trio.Event()
        self.pending += 1

        async def send() -> None:
            try:
                result = await self.session.send(op.text, if_busy=op.if_busy)
            except PowertrioError as exc:
                self.finals[index] = _describe_error(exc)
            else:
                self.results[index] = result
                self.finals[index] = _summary(result)
            finally:
                self.pending -= 1
                self.finals.setdefault(index, "abandoned: the runtime stopped")
                finished.set()

        assert self.nursery is not None
        self.nursery.start_soon(send, name=f"harness send #{index}")
        return finished

    async def _wait_run(self, run: ActiveRun) -> None:
        """Wait for ``run`` to end; answer its human requests when it stops for them."""
        result = await self.session.wait(run.started.run_id)
        if result.status != "waiting_for_human":
            return
        for request in result.human_requests:
            with contextlib.suppress(PowertrioError, ValueError):  # answered meanwhile
                if request.kind == "question":
                    await self.session.reply(request.request_id, self.human_answer, by="harness")
                elif self.approve:
                    await self.session.approve(request.request_id, by="harness")
                else:
                    await self.session.deny(request.request_id, self.human_answer, by="harness")

    async def _drive(self, finished: Callable[[], bool]) -> None:
        """Wait (letting runs progress and answering humans) until ``finished()``."""
        idle = 0
        while not finished():
            state = await self.session.state()
            if state.run is not None:
                idle = 0
                await self._wait_run(state.run)
                continue
            idle = self._idle(idle)
            await trio.testing.wait_all_tasks_blocked()

    def _idle(self, idle: int) -> int:
        if idle >= _MAX_IDLE:
            msg = (
                "the harness is stuck: no run is active, yet a send has not returned "
                f"after {_MAX_IDLE} passes with every task blocked"
            )
            raise AssertionError(msg)
        return idle + 1

    async def _clear_timers(self) -> bool:
        """Cancel the session's pending timers; whether there were any."""
        timers = self.runtime.timers
        try:
            pending = await timers.list_timers(self.session.ref)
        except ActorCrashedError:
            return True
        for timer in pending:
            with contextlib.suppress(
                TimerNotFoundError, TimerOwnerUnavailableError, ActorCrashedError
            ):
                await timers.cancel_timer(timer.timer_id, reason="the harness settles")
        return bool(pending)

    async def settle(self) -> None:
        """Run until the session is idle, every send has returned and no timer is left."""
        idle = 0
        passes = 0
        while True:
            passes += 1
            if passes > 100 * _MAX_IDLE:
                msg = "the harness could not settle the session: timers keep coming back"
                raise AssertionError(msg)
            cleared = await self._clear_timers()
            state = await self.session.state()
            if state.run is not None:
                idle = 0
                await self._wait_run(state.run)
                continue
            if not state.queued and self.pending == 0 and not cleared:
                return
            idle = self._idle(idle) if not cleared else idle
            await trio.testing.wait_all_tasks_blocked()


def _summary(result: RunResult) -> str:
    why = f" ({result.error})" if result.error else ""
    return f"{result.status}{why} after {result.rounds} round(s)"
