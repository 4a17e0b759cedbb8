"""What an event-sourced actor's steps run on: the task that runs them, and the links
between an append in flight and the step result decided while it commits."""

from __future__ import annotations

import trio


class Waiter:
    """The actor's task parked until an append it began is decided."""

    __slots__ = ("parked", "task")

    def __init__(self) -> None:
        self.task = trio.lowlevel.current_task()
        self.parked = False

    def wake(self) -> None:
        if self.parked:
            self.parked = False
            trio.lowlevel.reschedule(self.task)

    async def park(self) -> None:
        self.parked = True
        # Not cancellable: what was begun is decided within a commit or two (as a plain
        # append the writer has taken), and the actor must know how it ended.
        await trio.lowlevel.wait_task_rescheduled(_keep_waiting)


def _keep_waiting(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


class Gate:
    """Opened once the append that asked for an early step is done: what the step's
    ``wait_logged`` waits for. A lighter :class:`trio.Event`: no collection of waiters is
    made unless a task waits, which most early steps never do."""

    __slots__ = ("open", "waiters")

    def __init__(self) -> None:
        self.open = False
        self.waiters: list[trio.lowlevel.Task] | None = None

    def set(self) -> None:
        self.open = True
        waiters = self.waiters
        if waiters:
            self.waiters = None
            for task in waiters:
                trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Wait until :meth:`set` (a checkpoint if it was already); cancellable."""
        if self.open:
            await trio.lowlevel.checkpoint()
            return
        task = trio.lowlevel.current_task()
        waiters = self.waiters
        if waiters is None:
            waiters = self.waiters = []
        waiters.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            waiters.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


class StepRunner:
    """The task that runs an actor's steps, one after another: a step costs a wake-up,
    not a new task and cancel scope. Cancelling the step cancels the task (``scope``); the
    actor's next step starts a new one. ``next`` is the step given and not yet taken, with
    its token; ``cancelled`` says the result of the step running now is not wanted.

    ``deciding``: the task is handling its step's result itself, in the actor's turn (the
    actor was idle): no step of its own runs then, so a cancel only marks it (its scope
    left alone, or it would cut that handling, an append, short) and the task ends once
    the handling does, without taking ``next``."""

    __slots__ = ("cancelled", "deciding", "idle", "next", "scope", "task")

    def __init__(self, step: object, token: object) -> None:
        self.scope = trio.CancelScope()
        self.next: tuple[object, object] | None = (step, token)
        self.task: trio.lowlevel.Task | None = None
        self.idle = False
        self.cancelled = False
        self.deciding = False

    def cancel(self) -> None:
        self.cancelled = True
        if not self.deciding:
            self.scope.cancel()

    def give(self, step: object, token: object) -> None:
        self.next = (step, token)
        if self.idle:
            self.idle = False
            assert self.task is not None
            trio.lowlevel.reschedule(self.task)

    async def wait_for_work(self) -> None:
        self.idle = True
        await trio.lowlevel.wait_task_rescheduled(self._stop_waiting)

    def _stop_waiting(self, _: object) -> trio.lowlevel.Abort:
        self.idle = False  # cancelled: the actor stops, or cancelled its step
        return trio.lowlevel.Abort.SUCCEEDED


class Link:
    """One append begun by the pipelined path, and whether it is decided yet; while the
    actor waits for it, what the early step's result is decided on (``state``, the fold
    of its events, and ``version``, the version they leave) and, once it is, the follow."""

    __slots__ = ("done", "follow", "pending", "state", "token", "version", "waiter")

    def __init__(self, waiter: Waiter) -> None:
        self.waiter = waiter
        self.pending: object = None
        self.done = False
        self.token: object | None = None
        self.state: object = None
        self.version = 0
        self.follow: Follow | None = None

    def decided(self) -> None:
        self.done = True
        self.waiter.wake()


class Follow:
    """An early step's result decided while the append that asked for it commits: its
    events (queued behind that append), their fold, the step ``next_step`` asked for on
    it, whether a decision stops the actor, the version the events leave, and when their
    append began (``None``: no commit observer, so it is not timed)."""

    __slots__ = ("began", "events", "link", "state", "step", "stop", "version")

    def __init__(  # noqa: PLR0917  # private, built in one place
        self,
        link: Link,
        events: list[object],
        state: object,
        step: object | None,
        stop: bool,
        version: int,
        began: float | None,
    ) -> None:
        self.link = link
        self.events = events
        self.state = state
        self.step = step
        self.stop = stop
        self.version = version
        self.began = began
