"""The machinery behind one actor: its incarnations, its serial loop and its children.

A ``_Cell`` outlives the actor objects it runs: the id, path and mailbox stay while the
supervisor restarts the actor, so refs and queued messages survive a crash. Children run
in the parent's own nursery, which makes the supervision tree the nursery tree: cancelling
a node cancels its subtree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import UnionType
from typing import TYPE_CHECKING, TypeVar

import trio

from protocols.errors import (
    ActorCrashedError,
    ActorFailedError,
    ActorStoppedError,
    CodecError,
    CorruptLogError,
    FencedError,
    IntensityExceededError,
    PowertrioError,
    RuntimeClosedError,
    StreamRewoundError,
)

from ._actor import ActorContext
from ._mailbox import _Mailbox
from ._ref import ActorRef, PriorityMessage, Reply
from ._supervision import (
    ActorRestarting,
    ChildSpec,
    RestartIntensity,
    StopReason,
    Supervision,
    SupervisorEscalated,
)

if TYPE_CHECKING:
    from ._actor import Actor
    from ._runtime import Runtime

logger = logging.getLogger("powertrio.runtime")

_Item = tuple[object, Reply[object] | None]

_CHECKPOINT_EVERY = 64
"""Messages handled back to back before the loop yields to other tasks."""


class _ChildExited(PriorityMessage):
    """A child's incarnation ended; its parent's loop decides what happens next."""

    __slots__ = ("cell", "error", "incarnation")

    def __init__(self, cell: _Cell, incarnation: int, error: Exception | None) -> None:
        self.cell = cell
        self.incarnation = incarnation
        self.error = error


class _PassivateIfIdle(PriorityMessage):
    """Passivate if, when the loop reaches this, nothing else is queued and ``idle()``
    still holds: decided between two messages, never while one is being handled."""

    __slots__ = ("idle",)

    def __init__(self, idle: Callable[[], bool]) -> None:
        self.idle = idle


def _first_error(exc: BaseException) -> Exception | None:
    """The first real error inside ``exc`` (which may be a group), ignoring cancellations."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_error(inner)
            if found is not None:
                return found
        return None
    if isinstance(exc, Exception):
        return exc
    return None


E = TypeVar("E", bound=BaseException)


def _cause_of(error: BaseException, kinds: type[E] | UnionType) -> E | None:
    """``error`` or what caused it, if one of ``kinds``."""
    seen: BaseException | None = error
    for _ in range(8):  # a cause chain is short; a cycle must not hang the supervisor
        if seen is None:
            return None
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__
    return None


def _restart_cannot_fix(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is about the actor's data, not its run.

    A log that does not decode or a damaged store decodes the same way after a restart:
    restarting only loops, and escalating restarts the same fold one level higher. A
    stream that went backwards under its actor would be folded into a state the actor
    never had, and acted on again from there.
    """
    return _cause_of(error, CodecError | CorruptLogError | StreamRewoundError) is not None


class _Cell:
    """One actor's identity, mailbox and lifecycle (see the module docstring)."""

    __slots__ = (
        "_children",
        "_deferred",
        "_exit_event",
        "_nursery",
        "_scope",
        "actor",
        "current_reply",
        "failure",
        "id",
        "incarnation",
        "intensity",
        "known_version",
        "mailbox",
        "name",
        "no_snapshot",
        "parent",
        "passivating",
        "path",
        "ref",
        "restart_count",
        "restart_token",
        "running",
        "runtime",
        "spec",
        "started_at",
        "stop_requested",
        "stopping",
    )

    def __init__(
        self, runtime: Runtime, parent: _Cell | None, spec: ChildSpec, actor_id: str, name: str
    ) -> None:
        self.runtime = runtime
        self.parent = parent
        self.spec = spec
        self.id = actor_id
        self.name = name
        if parent is None:
            self.path = "/"
        elif parent.parent is None:
            self.path = "/" + name
        else:
            self.path = parent.path + "/" + name
        self.mailbox: _Mailbox[_Item] = _Mailbox(actor_id, spec.mailbox_capacity, spec.overflow)
        self.ref: ActorRef[object] = ActorRef._create(self)
        self.actor: Actor[object] | None = None
        self.incarnation = 0
        self.running = False
        self.stopping = False
        self.stop_requested = False
        self.passivating = False
        self.no_snapshot = False
        """Set by an event-sourced incarnation that passivated knowing its stream had no
        snapshot: the next one skips looking for one (a hint; a snapshot is a cache)."""
        self.restart_count = 0
        self.restart_token: object | None = None
        self.started_at = 0.0
        self.current_reply: Reply[object] | None = None
        self.failure: Exception | None = None
        self.known_version = 0
        """The newest version of its stream an event-sourced incarnation folded (0: none).
        Kept across restarts and passivation: the next incarnation checks that its stream
        has not gone backwards meanwhile."""
        """The error the actor failed with for good (``None`` while it runs or stopped)."""
        self.intensity: RestartIntensity | None = None
        """This child's own restart window (``on_give_up="stop"``)."""
        self._children: _Children | None = None
        self._deferred: set[Reply[object]] | None = None
        self._exit_event: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._scope: trio.CancelScope | None = None

    # -- used by the actor's context -------------------------------------------------

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            msg = f"actor {self.id!r} is not running; its nursery exists only while it runs"
            raise RuntimeError(msg)
        return self._nursery

    def children(self) -> _Children:
        if self._children is None:
            actor = self.actor
            supervision = actor.supervision if actor is not None else Supervision()
            self._children = _Children(self, supervision)
        return self._children

    def defer_reply(self) -> Reply[object]:
        reply = self.current_reply
        if reply is None:
            return Reply()  # a tell: nobody waits, the answer goes nowhere
        self.current_reply = None
        if self._deferred is None:
            self._deferred = set()
        self._deferred.add(reply)
        return reply

    def request_stop(self) -> None:
        self.stop_requested = True
        self.mailbox.interrupt()

    def passivate_if_idle(self, idle: Callable[[], bool]) -> None:
        if not self.mailbox.closed:
            self.mailbox.put_system((_PassivateIfIdle(idle), None))

    def stopped_error(self) -> ActorStoppedError:
        """What a send to this actor raises once it has stopped for good."""
        if self.failure is not None:
            return ActorFailedError(self.id, self.failure)
        return ActorStoppedError(self.id)

    def kill(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def wait_exited(self) -> None:
        if not self.running:
            return
        if self._exit_event is None:
            self._exit_event = trio.Event()
        await self._exit_event.wait()

    # -- one incarnation -------------------------------------------------------------

    async def run_task(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run one incarnation and report how it ended to the parent (the child's task)."""
        incarnation = self.incarnation
        runtime = self.runtime
        runtime._publish_started(self)
        try:
            error = await self._run_incarnation(task_status)
        except BaseException:
            # Cancelled from outside: the parent crashed or the runtime is torn down.
            self._end_incarnation(ActorStoppedError(self.id))
            self.terminate("killed")
            raise
        crashed: ActorCrashedError | None = None
        if error is not None:
            crashed = ActorCrashedError(self.id, "deferred")
            crashed.__cause__ = error
        self._end_incarnation(crashed)
        parent = self.parent
        if parent is None:
            if error is not None:
                runtime._closed = True  # the root gave up: nothing new may start
                raise error
            return
        if not parent.mailbox.closed:
            parent.mailbox.put_system((_ChildExited(self, incarnation, error), None))

    async def _run_incarnation(self, task_status: trio.TaskStatus[None]) -> Exception | None:
        actor = self.spec.factory()
        actor._cell = self
        actor._context = ActorContext._create(self)  # asked for on every message: made once
        self.actor = actor
        self.started_at = trio.current_time()
        started = False
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    await actor.on_start()
                    started = True
                    task_status.started()
                    await self._serve(actor)
                    if self._children is not None:
                        await self._children.stop_all()
                    await actor.on_stop()
                    nursery.cancel_scope.cancel()
        except BaseException as exc:
            error = _first_error(exc)
            if error is None:
                raise
            if not started:  # a crash in on_start is reported like any other crash
                task_status.started()
            return error
        return None

    def _end_incarnation(self, error: BaseException | None) -> None:
        self.running = False
        self.actor = None
        self._nursery = None
        self._scope = None
        if self._children is not None:
            # Its running children ended with its nursery; one waiting to be restarted
            # (or whose exit it had not handled yet) had its restart die with it. Left
            # registered, it would hold its id forever: the next incarnation could not
            # spawn it again and would find a cell that never runs.
            for cell in list(self._children.cells.values()):
                cell.terminate("killed")
        self._children = None
        self.current_reply = None
        if self._deferred:
            for reply in self._deferred:
                reply.fail(error or ActorStoppedError(self.id))
        self._deferred = None
        if self._exit_event is not None:
            self._exit_event.set()
            self._exit_event = None

    async def _serve(self, actor: Actor[object]) -> None:
        mailbox = self.mailbox
        receive = actor.receive
        handled = 0
        while not self.stop_requested:
            item = mailbox.get_nowait()
            if item is None:
                await mailbox.wait()
                handled = 0
                continue
            message, reply = item
            if type(message) is _ChildExited:
                await self.children().on_exit(message)
                continue
            if type(message) is _PassivateIfIdle:
                if mailbox.empty() and message.idle():
                    self.passivating = True
                    self.stop_requested = True
                continue
            self.current_reply = reply
            try:
                result = await receive(message)
            except BaseException as exc:
                if reply is not None and self.current_reply is reply:
                    if isinstance(exc, Exception):
                        error: ActorCrashedError | ActorStoppedError = ActorCrashedError(
                            self.id, type(message).__name__
                        )
                        error.__cause__ = exc
                    else:
                        error = ActorStoppedError(self.id)
                    reply.fail(error)
                raise
            if reply is not None and self.current_reply is reply:
                reply.send(result)
            handled += 1
            if handled >= _CHECKPOINT_EVERY:
                handled = 0
                await trio.lowlevel.checkpoint()

    # -- the end ---------------------------------------------------------------------

    def terminate(self, reason: StopReason, error: Exception | None = None) -> None:
        """Stop for good: close the mailbox, fail pending asks, leave the registry.

        With ``reason="failed"``, ``error`` is kept: every later send raises
        :class:`ActorFailedError` with it as the cause.
        """
        if self.mailbox.closed:
            return
        if reason == "failed":
            self.failure = error
        for _message, reply in self.mailbox.close():
            if reply is not None:
                reply.fail(self.stopped_error())
        parent = self.parent
        if parent is not None and parent._children is not None:
            parent._children.cells.pop(self.id, None)
        code = error.code if isinstance(error, PowertrioError) else None
        self.runtime._deregister(self, reason, code)


class _Children:
    """The children of one actor and the OTP rules that restart them."""

    __slots__ = ("_intensity", "_launch_lazily", "cells", "closing", "owner", "supervision")

    def __init__(self, owner: _Cell, supervision: Supervision) -> None:
        self.owner = owner
        self.supervision = supervision
        # One bound method for every lazy child's mailbox to call, not one each.
        self._launch_lazily = self._launch_on_message
        self.cells: dict[str, _Cell] = {}
        self.closing = False
        self._intensity = RestartIntensity(supervision.max_restarts, supervision.within)

    async def start(self, spec: ChildSpec) -> _Cell:
        owner = self.owner
        if self.closing or not owner.running or owner.mailbox.closed:
            # The parent is going away (for the root: it gave up or the runtime closes).
            if owner.parent is None:
                raise RuntimeClosedError()
            raise owner.stopped_error()
        runtime = owner.runtime
        actor_id = spec.id if spec.id is not None else runtime.ids.new("a")
        name = spec.name if spec.name is not None else actor_id
        cell = _Cell(runtime, self.owner, spec, actor_id, name)
        runtime._register(cell)  # raises ActorExistsError before anything runs
        self.cells[actor_id] = cell
        if spec.lazy:  # like a child waiting to restart, until its first message
            cell.mailbox.call_on_first_put(self._launch_lazily, cell)
            return cell
        await self._launch(cell)
        return cell

    def _rest(self, cell: _Cell) -> None:
        """A passivated child waits for its next message (or has one already)."""
        cell.passivating = False
        cell.started_at = 0.0  # set again at its next start; a resting cell holds no float
        cell.runtime._publish_passivated(cell)
        if cell.mailbox.empty():
            cell.mailbox.shrink()
            cell.mailbox.call_on_first_put(self._launch_lazily, cell)
        else:
            self._launch_on_message(cell)

    def _launch_on_message(self, cell: _Cell) -> None:
        """Start a lazy or passivated child: a message has arrived for it."""
        owner = self.owner
        if self.closing or cell.running or cell.mailbox.closed or not owner.running:
            return  # going away: the message fails with the mailbox when it is closed
        cell.incarnation += 1
        cell.running = True
        cell.stopping = False
        cell.stop_requested = False
        cell.passivating = False
        owner.nursery.start_soon(cell.run_task, name=f"actor {cell.path}")

    async def _launch(self, cell: _Cell) -> None:
        """Start an incarnation and wait for its ``on_start``, so siblings start in order."""
        cell.incarnation += 1
        cell.running = True
        cell.stopping = False
        cell.stop_requested = False
        cell.passivating = False
        await self.owner.nursery.start(cell.run_task, name=f"actor {cell.path}")

    async def on_exit(self, notice: _ChildExited) -> None:
        cell = notice.cell
        if cell.stopping or cell.incarnation != notice.incarnation or self.closing:
            return  # an exit we asked for, or news about an earlier incarnation
        error = notice.error
        if cell.passivating and error is None:
            self._rest(cell)
            return
        runtime = cell.runtime
        if error is not None:
            runtime._publish_crashed(cell, error)
            if _restart_cannot_fix(error):
                self._give_up_on(cell, error)
                return
        restart = cell.spec.restart
        if restart == "temporary" or (restart == "transient" and error is None):
            cell.terminate("crashed" if error is not None else "normal", error)
            return
        node = runtime.node
        fenced = None if error is None or node is None else _cause_of(error, FencedError)
        if fenced is not None and node is not None:
            # Its node's lease lapsed, or its shard moved on: the actor did nothing wrong,
            # so this costs none of its restarts. It starts again after the node's next
            # lease round if the lease is renewed by then; if the shard is lost, its new
            # owner serves the stream, and the actor stops here for good.
            if node.may_write(fenced.stream):
                self._schedule_restart([cell], node.retry_after, fenced=fenced)
            else:
                self._hand_over(cell, fenced)
            return
        now = trio.current_time()
        if cell.spec.on_give_up == "stop":
            if cell.intensity is None:
                supervision = self.supervision
                cell.intensity = RestartIntensity(supervision.max_restarts, supervision.within)
            if cell.intensity.record(now):
                self._give_up_on(cell, error)
                return
        elif self._intensity.record(now):
            await self.stop_all()
            supervision = self.supervision
            runtime._publish(
                SupervisorEscalated(
                    supervisor_id=self.owner.id,
                    path=self.owner.path,
                    restarts=supervision.max_restarts,
                    within=supervision.within,
                    at=runtime.clock.now(),
                )
            )
            failure = IntensityExceededError(
                self.owner.id, supervision.max_restarts, supervision.within
            )
            raise failure from error
        group = self._restart_group(cell)
        for other in reversed(group):
            if other is not cell and other.running:
                await self.stop_child(other, final=False)
        if now - cell.started_at > self.supervision.within:
            cell.restart_count = 0  # it had been stable: start the backoff over
        cell.restart_count += 1
        self._schedule_restart(
            group, self.supervision.backoff.delay(cell.restart_count, runtime.ids.random)
        )

    def _schedule_restart(
        self, group: list[_Cell], delay: float, *, fenced: FencedError | None = None
    ) -> None:
        """Restart ``group`` (stopped already) after ``delay`` seconds, unless stopped
        for good meanwhile. ``fenced``: why the one actor of ``group`` crashed; if its
        node no longer holds the stream's shard by then, it is handed over instead
        (:meth:`_hand_over`)."""
        runtime = group[0].runtime
        token = object()
        for member in group:
            member.restart_token = token
            runtime._publish(
                ActorRestarting(
                    actor_id=member.id,
                    path=member.path,
                    incarnation=member.incarnation + 1,
                    delay=delay,
                    at=runtime.clock.now(),
                )
            )
        runtime._restarts += len(group)
        self.owner.nursery.start_soon(self._restart_later, group, delay, token, fenced)

    def _give_up_on(self, cell: _Cell, error: Exception | None) -> None:
        """Stop ``cell`` alone for good; its siblings and this supervisor go on."""
        if error is None:  # a permanent child that keeps stopping by itself
            cell.terminate("normal")
            return
        logger.error(
            "actor %s failed for good and will not be restarted: %s: %s",
            cell.path,
            type(error).__name__,
            error,
        )
        cell.terminate("failed", error)

    def _restart_group(self, cell: _Cell) -> list[_Cell]:
        strategy = self.supervision.strategy
        if strategy == "one_for_one":
            return [cell]
        cells = list(self.cells.values())
        if strategy == "one_for_all":
            return cells
        return cells[cells.index(cell) :]

    async def _restart_later(
        self,
        group: list[_Cell],
        delay: float,
        token: object,
        fenced: FencedError | None = None,
    ) -> None:
        if delay > 0:
            await trio.sleep(delay)
        for cell in group:
            if (
                cell.restart_token is token
                and not cell.running
                and not cell.mailbox.closed
                and not self.closing
            ):
                cell.restart_token = None
                node = cell.runtime.node
                if fenced is not None and node is not None and not node.may_write(fenced.stream):
                    self._hand_over(cell, fenced)
                    continue
                await self._launch(cell)

    def _hand_over(self, cell: _Cell, fenced: FencedError) -> None:
        """Stop a fenced actor for good: its node no longer holds the stream's shard,
        whose new owner serves it. Callers get :class:`ActorFailedError` caused by
        ``fenced`` (so a node's host sends them to the new owner)."""
        logger.info(
            "actor %s stopped: node %r no longer holds shard %s, whose owner serves %s",
            cell.path,
            fenced.node,
            fenced.shard,
            fenced.stream,
        )
        cell.terminate("failed", fenced)

    async def stop_child(
        self, cell: _Cell, *, final: bool, reason: StopReason = "shutdown"
    ) -> None:
        """Stop ``cell`` in order: ask, wait up to its shutdown timeout, then cancel it."""
        cell.stopping = True
        cell.restart_token = None
        if cell.running:
            cell.request_stop()
            with trio.move_on_after(cell.spec.shutdown_timeout):
                await cell.wait_exited()
            if cell.running:
                reason = "killed"
                cell.kill()
                await cell.wait_exited()
        if final:
            cell.terminate(reason)

    async def stop_all(self) -> None:
        """Stop every child for good, in reverse start order."""
        self.closing = True
        for cell in reversed(list(self.cells.values())):
            await self.stop_child(cell, final=True)
