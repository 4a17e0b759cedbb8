"""The session actor: the shell that runs the session decider's effects."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal, final

import orjson
import trio

from protocols import Cancel, FollowUp, LLMRequest, LLMResponse, ToolCall, ToolOutcome
from protocols.errors import ActorExistsError, ActorNotFoundError
from protocols.lowlevel import denied_outcome
from runtime import Decision, EventSourcedActor, Reply, StepFailed
from runtime.lowlevel import IdleWatch

from .._tools._runner import run_tool_calls
from . import _decider as decider
from . import _working as working
from ._agents import SPAWN_AGENT, AgentSpec
from ._errors import HookVetoError
from ._events import (
    AssistantRecorded,
    CancelRequested,
    ChildFinished,
    ChildSpawned,
    InputQueued,
    RunFinished,
    RunResult,
    RunStarted,
    SessionState,
    ToolFinished,
    ToolStarted,
    evolve,
)
from ._follow_ups import FollowUpSource
from ._handle import Session
from ._observe import (
    DeltaReceived,
    HookContext,
    LLMCallFinished,
    LLMCallNext,
    Observation,
    RoundBegan,
    RunBegan,
    RunEnded,
    ToolCallBegan,
    ToolCallFinished,
    ToolCallNext,
    UsageUpdated,
    chain_llm_hooks,
    chain_tool_hooks,
)
from ._replace import maker
from ._request_header import RequestFrame
from ._snapshot import register_session_state
from ._steps import (
    TIMER_KEEPS_WARM,
    Busy,
    CallLLM,
    GetState,
    LLMAnswered,
    OutOfTime,
    PythonSpawn,
    RunTools,
    Send,
    SessionConfig,
    Stamped,
    Summarise,
    Summarised,
    ToolsDone,
    Urgent,
    WaitRun,
    child_config,
    run_tools,
)
from ._trace_ids import child_traceparent

logger = logging.getLogger("powertrio.session")

# A send's results and calls, made as their classes make them less the frozen guard.
_llm_answered = maker(LLMAnswered)
_tool_call = maker(ToolCall)
_tools_done = maker(ToolsDone)

register_session_state()  # snapshots: the state's codec (registered once, at import)


class _SubclassTest(dict[type, bool]):
    """``issubclass(cls, classes)``, remembered per class: the messages and events the
    session looks at on every message are a few types among many. Read it as
    ``test[cls]``: a dictionary look-up (the test runs the first time a class is seen),
    where a function call would be one more frame per message."""

    __slots__ = ("_classes",)

    def __init__(self, *classes: type) -> None:
        super().__init__()
        self._classes = classes

    def __missing__(self, cls: type) -> bool:
        found = self[cls] = issubclass(cls, self._classes)
        return found


# What ``receive`` looks at itself; the rest goes straight to the decider.
_looked_at = _SubclassTest(
    Send, Urgent, WaitRun, PythonSpawn, GetState, FollowUpSource, FollowUp, Cancel
)

_CATCH_UP = 8
"""The most observations a reader may be behind for the first delta to wait for it: one
further behind (busy elsewhere) is not waited for."""

# The events ``after_persist`` tells someone about.
_tells_callers = _SubclassTest(RunFinished, ChildFinished, CancelRequested, InputQueued)


@final
class SessionActor(EventSourcedActor[SessionState]):
    """One conversation: runs of LLM rounds and tool calls, folded from its own stream.

    Each round the actor checks the run's limits, appends the model's answer before acting
    on it, records every tool call as started before running it and as finished after (the
    model call that reads a result goes out only once it is recorded), and after a restart
    continues from the log: a recorded answer is never requested again; a
    tool that started but did not finish follows its crash policy (``retry`` runs it again
    with the same idempotency key, ``abort`` and, until human input exists, ``ask`` close it
    with an ``aborted`` result).

    What a message means and what to do next are pure functions of the configuration and
    the folded state (the session decider); this class runs the effects they ask for (LLM
    calls, tool rounds, sub-agents) and answers the callers.

    Made by :func:`spawn_session`; its messages are private to the :class:`Session` handle.
    """

    defer_creation = True  # SessionCreated joins the first send's append

    def __init__(self, config: SessionConfig, *, new: bool = False) -> None:
        self._new = new
        self._passivate_after = config.passivate_after
        self._last_active = 0.0
        # Trio's time, read from the run's clock itself once it is known (``on_start``):
        # a message stamps it, and ``trio.current_time`` is three calls to the same.
        self._now: Callable[[], float] = trio.current_time
        self._idle: IdleWatch | None = None
        self._config = config
        self._session_id = config.session_id
        self._waiters: dict[str, list[Reply[object]]] = {}
        # The LLM call in flight, which the log does not hold (only its answer will be):
        # the text it streamed so far (while someone observes) and its request's
        # fingerprint. A cancel's Stamped message carries them to the decider.
        self._partial: list[str] | None = None
        self._inflight_fingerprint = ""
        # What the run's model calls share (the decider's, kept here between steps).
        self._frames: list[RequestFrame] = []
        # A model call that went out before the events asking for it committed: they
        # are being appended (``_logging``), and its round is told once they are, by
        # ``after_persist``, which the kernel runs before it lets the step know.
        self._logging = False
        self._unannounced: RoundBegan | None = None
        self.snapshot_every = config.snapshot_every

    def stream_name(self) -> str:
        return f"session/{self._session_id}"

    def stream_is_new(self) -> bool:
        return self._new

    async def on_start(self) -> None:
        await super().on_start()
        after = self._passivate_after
        if after is not None:
            self._now = trio.lowlevel.current_clock().current_time
            self._last_active = self._now()
            self._idle = self.context.watch_idle(self._last_active + after, self._idle_check)

    async def on_stop(self) -> None:
        if self._idle is not None:
            self._idle.cancel()  # the sweeper lets go of this incarnation now
        await super().on_stop()

    def _idle_check(self) -> float | None:
        """Passivate the actor once it has been idle for ``passivate_after`` seconds: no
        message meanwhile, and :meth:`_quiet`. Its next message, or a due timer, starts it
        again from its log. Called by the runtime's idle sweeper; returns when to look
        again."""
        after = self._passivate_after
        assert after is not None
        quiet_since = self._last_active
        now = trio.current_time()
        if now < quiet_since + after:
            return quiet_since + after  # a message came meanwhile
        if self._quiet():
            # Decided in the serial loop, between two messages: one being handled now
            # (a send awaiting its append) or handled before then keeps the actor.
            self.context.passivate_if_idle(partial(self._quiet, quiet_since))
        return now + after  # still here then: look again an idle time later

    def _quiet(self, since: float | None = None) -> bool:
        """Nothing to do and nobody to answer: no run, nothing queued, nobody waiting for a
        result, no sub-agent alive (its actor runs in this one's nursery); with ``since``,
        also no message since then; no timer due within :data:`TIMER_KEEPS_WARM` (the
        timers service starts a passivated owner when a later one is due)."""
        state = self.state
        due = state.timers.next_due
        return (
            (since is None or self._last_active == since)
            and state.run is None
            and not state.queued
            and not state.inbox
            and not any(self._waiters.values())
            and not self.context.children
            and not (due is not None and due - self.context.runtime.clock.now() < TIMER_KEEPS_WARM)
        )

    # -- the decider (pure: see _decider) ---------------------------------------------

    def initial_state(self) -> SessionState:
        return SessionState()

    def evolve(self, state: SessionState, event: object) -> SessionState:
        return evolve(state, event)

    # The working state, folded in place (the decider's ``evolve`` is its spec): the
    # function itself, with no method of this class between the kernel and it.
    apply = staticmethod(working.apply)

    def snapshot_due(self, events: Sequence[object]) -> bool:
        # At a run's end, so a reopened session folds what came after it; not after
        # every short run, since a snapshot carries the run's newest chunk of messages.
        every = self.snapshot_every or 0
        if self.version - self.snapshot_version < (every // 10 if every >= 10 else 1):
            return False
        return any(type(event) is RunFinished for event in events)  # a final class

    def recovered(self, state: SessionState) -> Decision | None:
        return decider.recovered(self._config, state)

    def handle(self, state: SessionState, message: object) -> Decision:
        if isinstance(message, StepFailed):
            self._log_failure(message)
        return decider.handle(self._config, state, message)

    def _log_failure(self, failed: StepFailed) -> None:
        """The run fails with the error's code (``RunResult.error_code``); the traceback,
        which the log does not keep, goes to the people running the process."""
        step = failed.step
        logger.error(
            "session %s: %s of run %s raised %s",
            self._session_id,
            "the tool round" if isinstance(step, RunTools) else "the model call",
            getattr(step, "run_id", "?"),
            type(failed.error).__name__,
            exc_info=failed.error,
        )

    def next_step(self, state: SessionState) -> object | None:
        return decider.next_step(self._config, state, self._frames)

    def answers_effect(self, event: object) -> bool:
        return decider.answers_effect(event)

    def replay_check(self, step: object | None, event: object) -> str | None:
        return decider.replay_check(step, event)

    def step_settled(self, step: object, state: SessionState, event: object) -> bool:
        return decider.step_settled(step, state, event)

    # -- effects ---------------------------------------------------------------------

    def starts_before_commit(self, step: object, events: Sequence[object]) -> bool:
        # Observers and hooks hear of an early model call only once its events are
        # logged: ``after_persist`` tells its round, ``_call_llm`` waits for its deltas.
        early = decider.starts_before_commit(step, events)
        if early and type(step) is CallLLM:
            self._logging = True
        return early

    async def execute(self, step: object) -> object:
        if isinstance(step, CallLLM):
            return await self._call_llm(step)
        if isinstance(step, Summarise):
            return await self._summarise(step)
        assert isinstance(step, RunTools)
        try:
            return await self._run_tool_round(step)
        except BaseExceptionGroup as group:  # a hook's error, from the round's nurseries
            failed = _alone(group)
            if failed is None:
                raise
        raise failed  # outside the handler: the error keeps its own cause and context

    async def _call_llm(self, step: CallLLM) -> object:
        if step.deadline is not None and self.context.runtime.clock.now() >= step.deadline:
            await self.wait_logged()  # the state below holds the run
            budget = self.state.run.started.budget if self.state.run is not None else None
            limit = budget.max_seconds if budget is not None else None
            return OutOfTime(step.run_id, f"wall time: the budget is {limit:g} s")
        bus = self._config.bus
        if not bus.active and not self._config.llm_hooks:
            # Nobody watches and no middleware wraps the call (the usual send): ask the
            # model directly, with no context, closure or chain built for it.
            self._inflight_fingerprint = step.fingerprint
            response = await self._config.llm.complete(step.request)
            return _llm_answered(step.run_id, response, step.fingerprint, step.header)
        # Set by the stream below, whichever hooks wrap it; a measurement, not an input.
        first_token: list[float | None] = [None]
        round_began = RoundBegan(session_id=self._session_id, run_id=step.run_id, round=step.round)
        if self._logging:
            # Sent before the events that ask for it are logged: observers hear of the
            # round once they are (``after_persist``), while its request is out.
            self._unannounced = round_began
        elif bus.active:
            bus.publish(round_began)

        async def innermost(request: LLMRequest) -> LLMResponse:
            if not bus.active:
                return await self._config.llm.complete(request)
            partial = self._partial = []
            first = True
            clock = self.context.runtime.clock
            started = clock.monotonic()
            async with self._config.llm.stream(request) as stream:
                async for delta in stream:
                    if first:
                        first_token[0] = clock.monotonic() - started
                        if self._logging:  # nobody hears of a delta before its round
                            await self.wait_logged()
                    if delta.type == "text":
                        partial.append(delta.text)
                    bus.publish(
                        DeltaReceived(
                            session_id=self._session_id,
                            run_id=step.run_id,
                            round=step.round,
                            delta=delta,
                        )
                    )
                    if first:
                        first = False
                        # The first token's observers run now, not after the rest of a
                        # burst that came with it (a short answer comes in one read).
                        # A reader takes a schedule point per observation it holds (the
                        # round's start may still be unread, told a moment ago) and one
                        # for the delta, and Trio may run a batch in either order: two
                        # more than its backlog (two when it waited for this delta).
                        for _ in range(min(bus.backlog(), _CATCH_UP) + 2):
                            await trio.lowlevel.checkpoint()
                return await stream.final_response()

        hooks = self._config.llm_hooks
        self._inflight_fingerprint = step.fingerprint
        try:
            if not hooks:
                response = await innermost(step.request)
            else:
                response = await self._through_hooks(innermost, step.request, step, "round")
        finally:
            self._partial = None
        return LLMAnswered(
            step.run_id, response, step.fingerprint, step.header, first_token_s=first_token[0]
        )

    async def _summarise(self, step: Summarise) -> object:
        """Ask the summariser for a compaction (recorded before the next request uses it).

        A summary is a model call the application pays for: the LLM hooks wrap it as they
        wrap a round's (a limiter counts its tokens), told so by ``HookContext.purpose``."""
        policy = self._config.context
        assert policy is not None
        summariser = policy.summariser
        llm = self._config.llm if summariser == "session" or summariser is None else summariser
        if self._config.llm_hooks:
            response = await self._through_hooks(llm.complete, step.request, step, "summary")
        else:
            response = await llm.complete(step.request)
        return Summarised(step.run_id, step.upto, response, step.fingerprint, step.tokens_before)

    async def _through_hooks(
        self,
        call: LLMCallNext,
        request: LLMRequest,
        step: CallLLM | Summarise,
        purpose: Literal["round", "summary"],
    ) -> LLMResponse:
        """``call(request)`` wrapped by the session's LLM hooks, once the events that ask
        for it are logged: hooks are the application's code, and they act on the log."""
        await self.wait_logged()
        context = HookContext(
            session_id=self._session_id, run_id=step.run_id, round=step.round, purpose=purpose
        )
        return await chain_llm_hooks(self._config.llm_hooks, call, context)(request)

    async def _run_tool_round(self, step: RunTools) -> object:
        calls = [_tool_call(id=c.call_id, name=c.name, arguments=c.arguments) for c in step.calls]
        hooks = self._config.tool_hooks
        wrap = None
        if hooks:
            context = HookContext(session_id=self._session_id, run_id=step.run_id, round=step.round)

            async def wrap(call: ToolCall, run: ToolCallNext) -> ToolOutcome:
                try:
                    return await chain_tool_hooks(hooks, run, context)(call)
                except HookVetoError as veto:
                    return denied_outcome(call.id, call.name, veto.reason)

        run = self.state.run
        keys = {c.call_id: c.idempotency_key for c in step.calls}
        trace = partial(child_traceparent, self._session_id, self._config.traceparent, step.run_id)
        approved = run.approved if run is not None else ()
        if run is None or not run.children:
            spawns: dict[str, ChildSpawned] = {}
        else:
            spawns = {c.call_id: c for c in self.state.children if c.child_id in run.children}
        if not spawns and not hooks:
            # No sub-agent to run beside and no middleware (the usual round): the calls
            # go straight to the runner, which answers them in order.
            done = await run_tool_calls(
                calls,
                run_tools(self._config, run),
                session_id=self._session_id,
                limit=self._config.tool_concurrency,
                idempotency_keys=keys,
                approved=approved,
                runtime=self.context.runtime,
                traceparent_of=trace,
            )
            return _tools_done(step.run_id, tuple(done), ())
        regular = [c for c in calls if c.id not in spawns]
        outcomes: dict[str, ToolOutcome] = {}
        finished: list[ChildFinished] = []

        async def run_regular() -> None:
            done = await run_tool_calls(
                regular,
                run_tools(self._config, run),
                session_id=self._session_id,
                limit=self._config.tool_concurrency,
                idempotency_keys=keys,
                approved=approved,
                wrap=wrap,
                runtime=self.context.runtime,
                traceparent_of=trace,
            )
            outcomes.update((o.call_id, o) for o in done)

        async def run_child(spawned: ChildSpawned) -> None:
            outcome, result = await self._run_child(spawned)
            outcomes[spawned.call_id] = outcome
            finished.append(result)

        async with trio.open_nursery() as nursery:
            if regular:
                nursery.start_soon(run_regular)
            for call in calls:
                if call.id in spawns:
                    nursery.start_soon(run_child, spawns[call.id])
        return ToolsDone(step.run_id, tuple(outcomes[c.id] for c in calls), tuple(finished))

    # -- sub-agents ------------------------------------------------------------------

    async def _run_child(self, spawned: ChildSpawned) -> tuple[ToolOutcome, ChildFinished]:
        """Run (or, after a crash, reattach to) a child and wait for its answer."""
        child = await self.spawn_child(self._config.agents[spawned.agent], spawned)
        run_id = f"{spawned.child_id}:task"
        try:
            await child._start(spawned.task, run_id=run_id, budget=spawned.budget)
            cancel = self.state.run.cancel if self.state.run is not None else None
            if cancel is not None and cancel.mode == "immediate":
                # The parent's run is being cancelled: so is the child's, and its end (with
                # its usage) is recorded before the parent's run ends.
                await child.cancel(cancel.reason, by=f"session:{self.id}")
            result = await child.wait(run_id)
        except trio.Cancelled:
            with trio.move_on_after(5) as cleanup:
                cleanup.shield = True
                await child.cancel("the parent's run was cancelled", by=f"session:{self.id}")
            raise
        return _child_outcome(spawned, result), ChildFinished(
            run_id=spawned.run_id,
            child_id=spawned.child_id,
            status=result.status,
            usage=result.usage,
        )

    async def spawn_child(
        self, spec: AgentSpec, spawned: ChildSpawned, *, granted: bool = False
    ) -> Session:
        """Start the child session of ``spawned`` (or find it running) and return its handle.

        Its id is fixed by the parent's log, so a parent restarted after a crash finds the
        same child, which folds its own log: no orphan, no duplicate. ``granted``: spawned
        from Python, which may give the child any of the session's tools.
        """
        parent = self._config
        tools = parent.tools if granted else run_tools(parent, self.state.run)
        traceparent = child_traceparent(
            parent.session_id, parent.traceparent, spawned.run_id, spawned.call_id
        )
        config = child_config(
            parent, spec, spawned.child_id, tools, self.state.depth + 1, traceparent=traceparent
        )
        runtime = self.context.runtime
        name = f"{spec.name}.{spawned.child_id.rsplit('.', 1)[-1]}"
        try:
            if spec.lifecycle == "detached":
                ref = await runtime.spawn(
                    lambda: SessionActor(config), id=config.session_id, on_give_up="stop"
                )
            else:
                ref = await self.context.spawn(
                    lambda: SessionActor(config),
                    id=config.session_id,
                    name=name,
                    on_give_up="stop",
                )
        except ActorExistsError:
            ref = runtime.lookup(config.session_id)
        return Session._create(ref, runtime, config)

    async def _spawn_from_python(self, request: PythonSpawn) -> Session:
        spawned = next((c for c in self.state.children if c.call_id == request.spawn_id), None)
        if spawned is None:  # not a retry of an ask the actor crashed under
            spawned = ChildSpawned(
                run_id="",
                call_id=request.spawn_id,
                child_id=f"{self.id}.{len(self.state.children) + 1}",
                agent=request.spec.name,
                task=request.task,
                lifecycle=request.spec.lifecycle,
                budget=request.spec.budget,
            )
            await self.persist([spawned])
            self.after_persist([spawned])
        return await self.spawn_child(request.spec, spawned, granted=True)

    @property
    def id(self) -> str:
        """The session id."""
        return self._session_id

    # -- answering the callers -------------------------------------------------------

    async def receive(self, message: object) -> object:
        self._last_active = self._now() if self._passivate_after is not None else 0.0
        if not _looked_at[type(message)]:  # most of them: a step's result
            return await super().receive(message)
        if type(message) is Send:
            accepted = await super().receive(message)
            if not message.wait or isinstance(accepted, Busy):
                return accepted
            return self._wait_run(message.run_id)
        if isinstance(message, Urgent):
            message = message.message
        if isinstance(message, WaitRun):
            return self._wait_run(message.run_id)
        if isinstance(message, PythonSpawn):
            return await self._spawn_from_python(message)
        if isinstance(message, GetState):
            # The log is the authority: a creation not appended yet is not reported. The
            # working state changes with the next event: the caller gets its own copy.
            return working.detached(self.state) if self.version else SessionState()
        if isinstance(message, FollowUpSource):
            message = message.as_follow_up()
        if isinstance(message, FollowUp | Cancel):
            # What the decider may not look up itself: the clock and the call in flight.
            partial = "".join(self._partial) if self._partial else ""
            message = Stamped(
                message=message,
                at=self.context.runtime.clock.now(),
                partial=partial,
                fingerprint=self._inflight_fingerprint if partial else "",
            )
        return await super().receive(message)

    def _wait_run(self, run_id: str) -> RunResult | None:
        """The result of run ``run_id`` if it ended or waits for a human (``None`` for a
        run the session does not know); else the reply waits until it does."""
        result = self.state.results.get(run_id) or self._parked(run_id)
        if result is not None or not self._is_pending(run_id):
            return result
        self._waiters.setdefault(run_id, []).append(self.context.defer_reply())
        return None

    def _parked(self, run_id: str) -> RunResult | None:
        """The result to give for a run waiting for a human, if it is."""
        run = self.state.run
        if run is None or run.started.run_id != run_id or not run.parked:
            return None
        return RunResult(
            session_id=self._session_id,
            run_id=run_id,
            status="waiting_for_human",
            text=run.text,
            rounds=run.rounds,
            usage=run.usage,
            human_requests=run.human,
            truncated=run.finish_reason == "length",
            unknown_tool_results=run.unknown_results,
        )

    def _is_pending(self, run_id: str) -> bool:
        run = self.state.run
        return (run is not None and run.started.run_id == run_id) or any(
            q.run_id == run_id for q in self.state.queued
        )

    def after_persist(self, events: Sequence[object]) -> None:
        bus = self._config.bus
        for event in events:
            if not _tells_callers[type(event)]:  # most of them
                continue
            if isinstance(event, RunFinished):
                result = self.state.results[event.run_id]
                for reply in self._waiters.pop(event.run_id, ()):
                    reply.send(result)
            elif isinstance(event, ChildFinished):
                self._retire_child(event)
            elif isinstance(event, CancelRequested):
                self._cancel_children(event)
            elif isinstance(event, InputQueued) and self.state.waiting_for:
                waiting = ", ".join(r.request_id for r in self.state.waiting_for)
                logger.warning(
                    "session %s: run %s is queued behind run %s, which waits for a human "
                    "(requests %s): answer them (Session.reply/approve/deny) for it to start",
                    self._session_id,
                    event.run.run_id,
                    self.state.run.started.run_id if self.state.run is not None else "?",
                    waiting,
                )
        run = self.state.run
        if run is not None and run.human and run.parked:  # human first: rarely any
            parked = self._parked(run.started.run_id)
            for reply in self._waiters.pop(run.started.run_id, ()):
                reply.send(parked)
        if bus.active:
            for event in events:
                observation = self._observation(event)
                if observation is not None:
                    bus.publish(observation)
        if self._logging:  # these are the events that asked for the model call out now
            self._logging = False
            round_began, self._unannounced = self._unannounced, None
            if round_began is not None and bus.active:
                bus.publish(round_began)

    def _retire_child(self, finished: ChildFinished) -> None:
        """Stop a finished child's actor (it folds back from its log if needed again); an
        ephemeral child that completed also loses its stream."""
        spawned = next(c for c in self.state.children if c.child_id == finished.child_id)
        if spawned.lifecycle == "detached":
            return
        drop_stream = spawned.lifecycle == "ephemeral" and finished.status == "completed"

        async def retire() -> None:
            try:
                ref = self.context.runtime.lookup(finished.child_id)
            except ActorNotFoundError:
                pass
            else:
                with contextlib.suppress(ValueError):  # not ours (anymore)
                    await self.context.stop_child(ref)
            if drop_stream:
                await self.store.delete_streams([f"session/{finished.child_id}"])

        self.context.start_soon(retire, name=f"retire {finished.child_id}")

    def _cancel_children(self, cancel: CancelRequested) -> None:
        """Pass a cancel on to the run's children still running."""
        run = self.state.run
        if run is None or cancel.mode != "after_turn":
            return  # an immediate cancel reaches them through the cancelled tool round
        for child_id in run.children:
            if child_id in self.state.child_status:
                continue
            with contextlib.suppress(ActorNotFoundError):
                self.context.runtime.lookup(child_id).tell_nowait(
                    Urgent(Cancel(reason=cancel.reason, mode="after_turn", by=f"session:{self.id}"))
                )

    def _observation(self, event: object) -> Observation | None:
        session_id = self._session_id
        if isinstance(event, RunStarted):
            return RunBegan(session_id=session_id, run_id=event.run_id, input=event.input)
        if isinstance(event, AssistantRecorded):
            run = self.state.run
            self._config.bus.publish(
                LLMCallFinished(
                    session_id=session_id,
                    run_id=event.run_id,
                    round=event.round,
                    model=event.model,
                    finish_reason=event.finish_reason,
                    usage=event.usage,
                    tool_calls=len(event.message.tool_calls),
                )
            )
            if run is not None and run.started.run_id == event.run_id:
                run_usage = run.usage
            else:  # the run ended in the same append: its result holds its usage
                ended = self.state.results.get(event.run_id)
                run_usage = ended.usage if ended is not None else event.usage
            return UsageUpdated(
                session_id=session_id,
                run_id=event.run_id,
                run_usage=run_usage,
                session_usage=self.state.usage,
            )
        if isinstance(event, ToolStarted):
            return ToolCallBegan(
                session_id=session_id, run_id=event.run_id, call_id=event.call_id, name=event.name
            )
        if isinstance(event, ToolFinished):
            return ToolCallFinished(
                session_id=session_id, run_id=event.run_id, outcome=event.outcome
            )
        if isinstance(event, RunFinished):
            return RunEnded(result=self.state.results[event.run_id])
        return None


def _child_outcome(spawned: ChildSpawned, result: RunResult) -> ToolOutcome:
    """What the parent's model reads of a child's run."""
    if result.status == "completed":
        text = result.text if result.output is None else orjson.dumps(result.output).decode()
        return ToolOutcome(
            call_id=spawned.call_id, tool_name=SPAWN_AGENT, status="ok", content=text
        )
    why = f" ({result.error})" if result.error else ""
    content = (
        f"the sub-agent {spawned.agent!r} ended with status {result.status}{why}; "
        f"its last text: {result.text or '(none)'}"
    )
    return ToolOutcome(
        call_id=spawned.call_id,
        tool_name=SPAWN_AGENT,
        status="error",
        content=content,
        error_code=f"session.child_{result.status}",
    )


def _alone(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The one error in ``group``, when that is all it holds (``None`` otherwise).

    A tool round's nurseries wrap a hook's error in groups of one, which no caller should
    have to take apart.
    """
    if len(group.exceptions) != 1:
        return None
    inner = group.exceptions[0]
    if isinstance(inner, BaseExceptionGroup):
        return _alone(inner)
    return inner if isinstance(inner, Exception) else None
