"""The durable timers service: re-arms timers from the log and delivers them when due.

The owner's side (events, ``TimerBook``, ``timer_decision`` and an example of an actor that
owns timers) is in ``runtime._timers._book``.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
from collections.abc import Callable, Sequence
from typing import Literal, TypeAlias, TypeGuard, final

import attrs
import trio

from protocols.codec import default_registry
from protocols.errors import (
    ActorStoppedError,
    CodecError,
    CorruptLogError,
    TimerArgumentError,
    TimerNotFoundError,
    TimerOwnerUnavailableError,
)

from .._clock import Clock, IdSource
from .._ref import ActorRef
from .._store._contract import EventStore, RecordedEvent
from . import _checkpoint as checkpoints
from ._book import (
    TIMER_EVENT_CLASSES,
    TIMER_EVENT_NAMES,
    CancelTimer,
    ListTimers,
    PendingTimer,
    ScheduleTimer,
    TimerBook,
    TimerFired,
    check_every,
    check_seconds,
    check_text,
)

logger = logging.getLogger("powertrio.timers")

_PAGE = 4096
"""Records per ``read_all`` page while rebuilding the index."""


def _check_owner(owner: object) -> None:
    if not isinstance(owner, ActorRef):
        msg = f"owner must be an ActorRef (from spawn), got {type(owner).__name__}"
        raise TypeError(msg)


def _check_hook(hook: object) -> None:
    if hook is not None and not callable(hook):
        msg = f"hook must be callable or None, got {type(hook).__name__}"
        raise TypeError(msg)


def _validate_delay(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if check_seconds(attribute.name, value) <= 0:
        # Zero would re-arm at the same instant and ask the hook again forever.
        msg = f"{attribute.name} must be > 0 seconds, got {value!r}"
        raise TimerArgumentError(attribute.name, msg)


# -- the delivery hook -------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class DueTimer:
    """A timer about to be delivered: what the hook sees."""

    stream: str
    """The owner's stream."""
    timer_id: str
    """The timer's id."""
    due_at: float
    """The due time being delivered."""
    note: str
    """What the timer is for."""
    every: float | None
    """The fixed delay of a recurring timer; ``None`` for a one-shot."""


@final
@attrs.frozen
class Veto:
    """Hook verdict: do not deliver; the owner cancels the timer with this reason."""

    reason: str
    """Recorded as ``"vetoed: <reason>"`` in :class:`TimerCancelled`."""


@final
@attrs.frozen
class Postpone:
    """Hook verdict: ask again after ``delay`` seconds.

    A postponement lives in the service's memory, not in the log: after a restart the
    overdue timer comes back to the hook, which decides again.

    Raises:
        TimerArgumentError: ``delay`` is not a finite number > 0.
    """

    delay: float = attrs.field(validator=_validate_delay)
    """Seconds to wait (Trio clock) before asking the hook again."""


TimerVerdict: TypeAlias = Veto | Postpone | None
"""What a :data:`TimerHook` returns; ``None`` delivers."""

TimerHook: TypeAlias = Callable[[DueTimer], TimerVerdict]
"""Runs before each delivery (see :meth:`TimerService.set_hook`)."""


# -- the service ---------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class TimerServiceStatistics:
    """A snapshot of the timers service."""

    pending: int
    """Timers in the index (every pending timer of every stream in the log)."""
    armed: int
    """Pending timers waiting for their due time."""
    waiting_for_owner: int
    """Due timers whose owner is not running; delivered when it starts."""
    in_flight: int
    """Delivered (or vetoed) timers whose owner has not recorded the outcome yet."""
    delivered: int
    """``TimerFired`` messages sent, re-deliveries included."""
    vetoed: int
    """Deliveries the hook vetoed."""
    postponed: int
    """Deliveries the hook postponed."""
    dropped: int
    """Timers dropped because their stream is gone."""


_State = Literal["armed", "waiting", "in_flight"]


@attrs.define(eq=False)
class _Entry:
    stream: str
    timer: PendingTimer
    state: _State = "armed"
    deadline: float = 0.0
    generation: int = 0  # bumped at every change, so stale heap items are skipped


_NO_TIMERS = TimerBook()


@final
class TimerService:
    """The runtime's durable timers: schedule, cancel and list them; deliver them when due.

    Started by ``open_runtime`` (reach it as ``runtime.timers``): when the runtime opens it
    rebuilds its index of pending timers from the log, then one task sleeps on the Trio
    clock until the earliest is due. Owners keep it current: the runtime registers it as a
    persist listener, so every event an :class:`~runtime.EventSourcedActor` persists passes
    by it, and a starting one says which stream it owns. A due timer whose owner is not
    running waits for it to start; one whose stream is gone (retention) is dropped with a
    logged warning. A passivated owner is running in this sense: the timer's message starts
    it again.
    """

    __slots__ = (
        "_books",
        "_checkpoint_books",
        "_checkpoint_due",
        "_checkpoint_position",
        "_clock",
        "_counters",
        "_entries",
        "_heap",
        "_hook",
        "_ids",
        "_owners",
        "_scope",
        "_seq",
        "_since_checkpoint",
        "_sleep",
        "_store",
    )

    _clock: Clock
    _ids: IdSource
    _store: EventStore
    _books: dict[str, TimerBook]
    _entries: dict[str, _Entry]
    _heap: list[tuple[float, int, str, int]]
    _owners: dict[str, ActorRef[object]]
    _hook: TimerHook | None
    _scope: trio.CancelScope | None
    _sleep: trio.CancelScope | None
    _seq: int
    _counters: dict[str, int]
    _checkpoint_books: dict[str, TimerBook]
    _checkpoint_position: int
    _checkpoint_due: trio.Event
    _since_checkpoint: int

    def __init__(self) -> None:
        msg = "TimerService is made by open_runtime(): use `runtime.timers`"
        raise TypeError(msg)

    @classmethod
    def _create(cls, clock: Clock, ids: IdSource, store: EventStore) -> TimerService:
        self = object.__new__(cls)
        self._clock = clock
        self._ids = ids
        self._store = store
        self._books = {}  # stream -> its pending timers (``finished`` left out)
        self._entries = {}  # timer id -> delivery state
        self._heap = []  # (trio deadline, tie-breaker, timer id, generation)
        self._owners = {}  # stream -> the ref of the live actor that owns it
        self._hook = None
        self._scope = None
        self._sleep = None
        self._seq = 0
        self._counters = dict.fromkeys(("delivered", "vetoed", "postponed", "dropped"), 0)
        # The checkpoint's own fold of the log (see runtime._timers._checkpoint), apart from
        # the live index, which also hears appends it has not read back from the log yet.
        self._checkpoint_books = {}
        self._checkpoint_position = 0
        self._checkpoint_due = trio.Event()
        self._since_checkpoint = 0
        return self

    # -- public API ----------------------------------------------------------------------

    async def schedule(
        self,
        owner: ActorRef[object],
        *,
        at: float | None = None,
        delay: float | None = None,
        note: str = "",
        every: float | None = None,
        timer_id: str | None = None,
    ) -> str:
        """Schedule a durable timer owned by ``owner``; return its id.

        The owner appends ``TimerScheduled`` before it replies, so the timer survives a
        crash from then on. A recurring timer is due again ``every`` seconds after each
        firing (fixed delay); periods missed while the runtime was down collapse into one
        firing.

        Args:
            owner (ActorRef): an event-sourced actor whose ``handle`` passes timer messages
                to :func:`timer_decision`.
            at (float | None): when it is due, in epoch seconds of ``runtime.clock``.
            delay (float | None): or: seconds from now (>= 0). Give exactly one.
            note (str): what the timer is for; delivered back with every firing.
            every (float | None): seconds (> 0) between firings; ``None`` for a one-shot.
            timer_id (str | None): the id; a new one by default. Scheduling an id the owner
                already knows is a no-op, so a retry with the same id is safe.

        Returns:
            str: the timer id.

        Raises:
            TimerArgumentError: both or neither of ``at``/``delay``, a negative ``delay``,
                ``every`` not > 0, a non-finite time, or an empty ``timer_id``.
            TypeError: an argument has the wrong type.
            ActorStoppedError, ActorCrashedError: as ``owner.ask`` (an owner that does not
                handle timer messages crashes on them).
        """
        _check_owner(owner)
        if (at is None) == (delay is None):
            given = "both" if at is not None else "neither"
            msg = f"give exactly one of at= (epoch seconds) or delay= (seconds), got {given}"
            raise TimerArgumentError("at", msg)
        if at is not None:
            due_at = check_seconds("at", at)
        else:
            wait = check_seconds("delay", delay)
            if wait < 0:
                raise TimerArgumentError("delay", f"delay must be >= 0 seconds, got {delay!r}")
            due_at = self._clock.now() + wait
        every = check_every("every", every)
        check_text("note", note, empty=True)
        if timer_id is None:
            timer_id = self._ids.new("tmr")
        check_text("timer_id", timer_id, empty=False)
        message = ScheduleTimer(timer_id=timer_id, due_at=due_at, note=note, every=every)
        return await owner.ask(message)

    async def cancel_timer(self, timer_id: str, *, reason: str = "cancelled") -> None:
        """Cancel a pending timer: its owner appends ``TimerCancelled``.

        Args:
            timer_id (str): the id :meth:`schedule` returned.
            reason (str): recorded with the cancellation.

        Raises:
            TimerNotFoundError: no pending timer has this id (it may have just fired).
            TimerOwnerUnavailableError: the owner is not running, so nobody can record the
                cancellation; start it and cancel again.
            TypeError: ``timer_id`` or ``reason`` is not a str.
            ActorCrashedError: the owner crashed while handling the cancellation.
        """
        check_text("timer_id", timer_id, empty=True)
        check_text("reason", reason, empty=True)
        entry = self._entries.get(timer_id)
        owner = None if entry is None else self._live_owner(entry.stream)
        if entry is None or owner is None:
            await trio.lowlevel.checkpoint()
            if entry is None:
                raise TimerNotFoundError(timer_id)
            raise TimerOwnerUnavailableError(timer_id, entry.stream)
        try:
            cancelled = await owner.ask(CancelTimer(timer_id=timer_id, reason=reason))
        except ActorStoppedError as exc:
            raise TimerOwnerUnavailableError(timer_id, entry.stream) from exc
        if not cancelled:
            raise TimerNotFoundError(timer_id)

    async def list_timers(self, owner: ActorRef[object]) -> tuple[PendingTimer, ...]:
        """The pending timers of ``owner``, by due time, as its own state has them.

        Answered by the owner (an ask), not the index: its folded state is the authority
        and it has seen every message queued before this one.

        Raises:
            TypeError: ``owner`` is not an ActorRef.
            ActorStoppedError, ActorCrashedError: as ``owner.ask``.
        """
        _check_owner(owner)
        return await owner.ask(ListTimers())

    def pending(self, stream: str) -> tuple[PendingTimer, ...]:
        """The service's index of ``stream``'s pending timers, by due time.

        A rebuildable view for operators and tests; the owner's state is the authority
        (:meth:`list_timers`).
        """
        return self._books.get(stream, _NO_TIMERS).pending

    def set_hook(self, hook: TimerHook | None) -> None:
        """Install the hook that runs before each delivery (``None`` removes it).

        The hook gets a :class:`DueTimer` and returns ``None`` to deliver, :class:`Veto`
        to have the owner cancel the timer, or :class:`Postpone` to be asked again later.
        It runs in the service's task, so it must not block. If it raises or returns
        something else, the error is logged and the timer is delivered: a broken hook
        never loses a timer.

        Raises:
            TypeError: ``hook`` is neither callable nor ``None``.
        """
        _check_hook(hook)
        self._hook = hook

    def statistics(self) -> TimerServiceStatistics:
        """A snapshot of the index and the delivery counters."""
        states = [entry.state for entry in self._entries.values()]
        counters = self._counters
        return TimerServiceStatistics(
            pending=len(states),
            armed=states.count("armed"),
            waiting_for_owner=states.count("waiting"),
            in_flight=states.count("in_flight"),
            delivered=counters["delivered"],
            vetoed=counters["vetoed"],
            postponed=counters["postponed"],
            dropped=counters["dropped"],
        )

    # -- driven by TimerRunner ---------------------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild the index from the log, report started, then deliver until closed."""
        with trio.CancelScope() as scope:
            self._scope = scope
            await self._rebuild()
            task_status.started()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._checkpoints)
                while True:
                    await self._fire_due()
                    with trio.CancelScope(deadline=self._next_deadline()) as sleep:
                        self._sleep = sleep
                        await trio.sleep_forever()
                    self._sleep = None

    def _close(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _observe(self, stream: str, events: Sequence[object]) -> None:
        """Take note of events ``stream``'s owner has just appended."""
        self._since_checkpoint += len(events)
        if self._since_checkpoint >= checkpoints.CHECKPOINT_EVERY:
            self._checkpoint_due.set()
        for event in events:
            if type(event) in TIMER_EVENT_CLASSES:
                self._apply(stream, event)

    def _register(self, stream: str, owner: ActorRef[object]) -> None:
        """``owner`` now runs and owns ``stream``: deliver what waited for it, again what
        it may have lost (it drops what it already recorded)."""
        self._owners[stream] = owner
        book = self._books.get(stream)
        if book is None:
            return
        for timer in book.pending:
            entry = self._entries.get(timer.timer_id)
            if entry is not None and entry.state != "armed":
                # Its deadline has passed: it goes out now, in due order with the others.
                self._arm(entry, entry.deadline)

    def _reload(self, stream: str, events: Sequence[object]) -> None:
        """Index ``stream``'s timers anew from ``events`` (its timer events, in order): a
        node taking a stream over learns what the nodes before it recorded."""
        book = self._books.pop(stream, None)
        for timer in () if book is None else book.pending:
            entry = self._entries.get(timer.timer_id)
            if entry is not None and entry.stream == stream:
                del self._entries[timer.timer_id]
                entry.generation += 1
        for event in events:
            self._apply(stream, event)

    def _unregister(self, stream: str, owner: ActorRef[object]) -> None:
        # An owner with timers pending stays known while its ref is alive: a passivated
        # actor (its state in the log, its actor object gone) is started again by the
        # message a due timer sends it. One stopped for good is no longer alive, and its
        # timers wait for its next owner (``_live_owner``).
        if self._owners.get(stream) is owner and stream not in self._books:
            del self._owners[stream]

    # -- machinery -------------------------------------------------------------------------

    async def _rebuild(self) -> None:
        """Index every pending timer: the checkpoint's, then the events after it."""
        store = self._store
        position = 1
        found = await checkpoints.load(store)
        if found is not None:
            folded, books = found
            for stream, book in books.items():
                self._books[stream] = book
                for timer in book.pending:
                    entry = self._entries[timer.timer_id] = _Entry(stream, timer)
                    self._arm(entry, self._clock.deadline_for(timer.due_at))
            position = folded + 1
        # No actor runs yet: the index is exactly the fold of the log up to ``end``. That
        # is the last position read, not the head: on a shared (PostgreSQL) log the head
        # may be ahead of what ``read_all`` returns while another node's older
        # transaction is in flight, and a checkpoint there would skip its events forever.
        end = await self._fold_log(position)
        self._checkpoint_books = dict(self._books)
        self._checkpoint_position = end
        if end >= position:
            await checkpoints.save(store, end, self._checkpoint_books)

    async def _checkpoints(self) -> None:
        """Save a checkpoint each time enough events were appended (see ``_observe``)."""
        while True:
            await self._checkpoint_due.wait()
            self._checkpoint_due = trio.Event()
            self._since_checkpoint = 0
            books = self._checkpoint_books
            position = self._checkpoint_position + 1
            decode = default_registry.decode_record
            while True:
                try:
                    page = await self._store.read_all(position, limit=_PAGE)
                except CorruptLogError:
                    break  # keep the older checkpoint: the next open steps past the damage
                for record in page:
                    if record.type in TIMER_EVENT_NAMES:
                        with contextlib.suppress(CodecError):
                            _fold_book(books, record.stream, decode(record))
                if page:
                    self._checkpoint_position = page[-1].position
                if len(page) < _PAGE:
                    break
                position = page[-1].position + 1
            await checkpoints.save(self._store, self._checkpoint_position, books)

    async def _fold_log(self, position: int) -> int:
        """Index the log from ``position`` on; returns the last position folded."""
        store = self._store
        while True:
            try:
                page = await store.read_all(position, limit=_PAGE)
            except CorruptLogError:
                # One damaged event must not keep the runtime from opening (its stream's
                # owner fails alone when it folds): step past it one event at a time.
                position = await self._past_damage(position)
                continue
            self._index(page)
            if page:
                position = page[-1].position + 1
            if len(page) < _PAGE:
                return position - 1

    async def _past_damage(self, position: int) -> int:
        """Index the events from ``position`` one by one up to the first damaged one, and
        return the position after it (the end of the log if none is damaged)."""
        head = await self._store.head_position()
        while position <= head:
            try:
                page = await self._store.read_all(position, limit=1)
            except CorruptLogError as exc:
                logger.warning(
                    "timers: skipped a damaged event of %r version %s while re-arming: %s",
                    exc.stream,
                    exc.version,
                    exc.detail,
                )
                return position + 1
            if not page:
                break
            self._index(page)
            position = page[-1].position + 1
        return head + 1

    def _index(self, page: Sequence[RecordedEvent]) -> None:
        decode = default_registry.decode_record
        for record in page:
            if record.type not in TIMER_EVENT_NAMES:  # decode nothing else
                continue
            try:
                event = decode(record)
            except CodecError as exc:  # the owner fails alone with this error when it folds
                logger.warning("timers: skipped an undecodable timer event: %s", exc)
                continue
            self._apply(record.stream, event)

    def _apply(self, stream: str, event: object) -> None:
        """Fold one timer event into the index, exactly as the owner folds it."""
        folded = _fold_book(self._books, stream, event)
        if folded is None:
            return
        timer_id: str = event.timer_id  # type: ignore[attr-defined]  # a timer event
        timer = folded.get(timer_id)
        entry = self._entries.get(timer_id)
        if timer is None:
            if entry is not None and entry.stream == stream:
                del self._entries[timer_id]
                entry.generation += 1
            return
        if entry is None or entry.stream != stream:
            entry = self._entries[timer_id] = _Entry(stream, timer)
        else:
            entry.timer = timer
        self._arm(entry, self._clock.deadline_for(timer.due_at))

    def _arm(self, entry: _Entry, deadline: float) -> None:
        entry.state = "armed"
        entry.deadline = deadline
        entry.generation += 1
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, entry.timer.timer_id, entry.generation))
        if len(self._heap) > 64 + 2 * len(self._entries):
            self._compact()
        sleep = self._sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline

    def _compact(self) -> None:
        # Cancelled and re-armed timers leave stale items behind; drop them in one go so
        # the heap stays proportional to the armed timers.
        self._heap = [item for item in self._heap if self._is_current(item)]
        heapq.heapify(self._heap)

    def _is_current(self, item: tuple[float, int, str, int]) -> bool:
        entry = self._entries.get(item[2])
        return entry is not None and entry.state == "armed" and entry.generation == item[3]

    def _next_deadline(self) -> float:
        heap = self._heap
        while heap and not self._is_current(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    async def _fire_due(self) -> None:
        heap = self._heap
        while heap and heap[0][0] <= trio.current_time():
            item = heapq.heappop(heap)
            if self._is_current(item):
                await self._due(self._entries[item[2]])

    async def _due(self, entry: _Entry) -> None:
        """Deliver one due timer, or park it, or drop it, as the hook and the log say."""
        generation = entry.generation
        exists = await self._store.stream_version(entry.stream) > 0
        if self._entries.get(entry.timer.timer_id) is not entry or entry.generation != generation:
            return  # its owner recorded a change while we looked
        timer = entry.timer
        if not exists:
            self._drop(entry, "its stream is gone (deleted by retention?)")
            return
        owner = self._live_owner(entry.stream)
        if owner is None:
            self._park(entry)
            return
        verdict = self._ask_hook(entry)
        message: TimerFired | CancelTimer
        if isinstance(verdict, Postpone):
            self._counters["postponed"] += 1
            self._arm(entry, trio.current_time() + verdict.delay)
            return
        if isinstance(verdict, Veto):
            message = CancelTimer(timer_id=timer.timer_id, reason=f"vetoed: {verdict.reason}")
        else:
            fired_at = max(self._clock.now(), timer.due_at)
            message = TimerFired(timer_id=timer.timer_id, due_at=timer.due_at, fired_at=fired_at)
        try:
            owner.tell_nowait(message)  # the priority lane: never blocks, never drops
        except ActorStoppedError:
            self._unregister(entry.stream, owner)
            self._park(entry)
            return
        self._counters["vetoed" if isinstance(verdict, Veto) else "delivered"] += 1
        # Until the owner records the outcome; its next start delivers it again.
        entry.state = "in_flight"
        entry.generation += 1

    def _live_owner(self, stream: str) -> ActorRef[object] | None:
        owner = self._owners.get(stream)
        if owner is not None and not owner.alive:
            del self._owners[stream]
            return None
        return owner

    def _park(self, entry: _Entry) -> None:
        entry.state = "waiting"
        entry.generation += 1

    def _drop(self, entry: _Entry, reason: str) -> None:
        timer_id = entry.timer.timer_id
        logger.warning("timer %s of stream %s dropped: %s", timer_id, entry.stream, reason)
        self._counters["dropped"] += 1
        del self._entries[timer_id]
        entry.generation += 1
        book = self._books.get(entry.stream)
        if book is not None:
            rest = tuple(timer for timer in book.pending if timer.timer_id != timer_id)
            if rest:
                self._books[entry.stream] = TimerBook(pending=rest)
            else:
                del self._books[entry.stream]

    def _ask_hook(self, entry: _Entry) -> TimerVerdict:
        hook = self._hook
        if hook is None:
            return None
        timer = entry.timer
        due = DueTimer(
            stream=entry.stream,
            timer_id=timer.timer_id,
            due_at=timer.due_at,
            note=timer.note,
            every=timer.every,
        )
        try:
            verdict = hook(due)
        except Exception:
            logger.exception(
                "timer hook failed on timer %s of stream %s; delivering it",
                timer.timer_id,
                entry.stream,
            )
            return None
        if _is_verdict(verdict):
            return verdict
        logger.error(
            "timer hook returned %r for timer %s of stream %s, not Veto, Postpone or None; "
            "delivering it",
            verdict,
            timer.timer_id,
            entry.stream,
        )
        return None


@final
class TimerRunner:
    """The runtime's side of its timers service: run it, stop it, feed it the owners' streams.

    ``open_runtime`` makes one, hands out :attr:`service` as ``runtime.timers``, registers
    the runner as a persist listener (so the service hears every owner's appends, starts
    and stops), runs :meth:`run` in its nursery and calls :meth:`close` on the way out.
    Users reach the service, never this: a runtime-internal interface, kept apart so the
    service's public face has nothing to start or stop.
    """

    __slots__ = ("service",)

    service: TimerService
    """The service users reach as ``runtime.timers``."""

    def __init__(self, clock: Clock, ids: IdSource, store: EventStore) -> None:
        self.service = TimerService._create(clock, ids, store)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild the index from the log, report started, then deliver until :meth:`close`."""
        await self.service._run(task_status=task_status)

    def close(self) -> None:
        """Stop delivering: :meth:`run` returns (a no-op before it started)."""
        self.service._close()

    def reload(self, stream: str, events: Sequence[object]) -> None:
        """Index ``stream``'s timers anew from ``events`` (its timer events, in order, as
        the log holds them now): a node taking a stream over learns what others recorded."""
        self.service._reload(stream, events)

    # -- the persist listener (runtime._persist_listener.PersistListener) -------------------

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        """Deliver ``stream``'s timers to ``owner`` from now on (and again what it lost)."""
        self.service._register(stream, owner)

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        """Index the timer events among ``events``; ignore the rest."""
        self.service._observe(stream, events)

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        """Due timers of ``stream`` wait for its next owner."""
        self.service._unregister(stream, owner)


def _fold_book(books: dict[str, TimerBook], stream: str, event: object) -> TimerBook | None:
    """Fold a timer event into ``books`` in place; the stream's new book, or ``None`` if
    the event changed nothing."""
    book = books.get(stream, _NO_TIMERS)
    folded = book.evolve(event)
    if folded is book:
        return None
    if folded.pending:
        # The service never decides, so it keeps no finished ids: memory stays
        # proportional to the pending timers.
        books[stream] = TimerBook(pending=folded.pending)
    else:
        books.pop(stream, None)
    return folded


def _is_verdict(value: object) -> TypeGuard[TimerVerdict]:
    # Typed as object: the hook is user code, and its annotation is only a promise.
    return value is None or isinstance(value, Veto | Postpone)
