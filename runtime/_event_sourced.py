"""Event-sourced actors: the decider pattern over the event log.

An actor kind is three pure functions plus effects:

* ``evolve(state, event) -> state``: the only way state changes;
* ``handle(state, message) -> Decision``: what a message means, as events to append;
* ``next_step(state) -> step | None``: which effect to run next, given the folded state.

The runtime appends a decision's events *before* anyone acts on them, folds them into the
state, replies, then asks ``next_step``. Effects (``execute``) run in the actor's nursery
and come back as messages, so the actor keeps receiving while one is in flight. An effect
that changes nothing outside the actor until its result is recorded, and reads nothing
that append alone holds (a model call that reads no new tool result:
``starts_before_commit``), starts while that append is in flight; a result that comes
before the append is durable is decided on the fold of its events and queued behind it
(on a store that can: ``PipelinedAppends``), and nothing acts on either before each is
durable. A restart is nothing special: fold the log (from a snapshot if one exists), ask
``next_step``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar, cast, final

import attrs
import trio

from protocols.codec import EventRegistry, default_registry
from protocols.errors import (
    CodecError,
    ConcurrencyConflictError,
    ConfigError,
    EventEncodeError,
    StoreClosedError,
    StoreError,
    StreamRewoundError,
    UnknownEventTypeError,
)
from protocols.lowlevel import unwrap_single_error

from ._actor import Actor
from ._ref import PriorityMessage
from ._steps import Follow, Gate, Link, StepRunner, Waiter
from ._store._contract import (
    EventStore,
    NewEvent,
    PipelinedAppends,
    RecordedEvent,
    Snapshot,
    new_event,
)
from ._store._snapshot_chunks import decode_snapshot, encode_snapshot

StateT = TypeVar("StateT")

logger = logging.getLogger("powertrio.event_sourced")

PASSIVATION_SNAPSHOT_TAIL = 16
"""Events since the last snapshot from which a passivating actor saves one (when it keeps
snapshots at all): re-activation then reads the snapshot and a short tail."""

_PAGE = 4096

CONTINUES = b'{"continues":true}'
"""Metadata on each event but the last of one append: they were decided together, and a
history cut after such an event (a fork) would hold half a decision."""

_UNASKED: object = object()
"""``next_step`` was not asked for the current state (``None`` would mean "nothing")."""


def _as_tuple(events: Iterable[object]) -> tuple[object, ...]:
    return tuple(events)


class Outcome(Protocol):
    """Events to append and a reply: what a helper decides for part of an actor's state.

    :func:`~runtime.lowlevel.timer_decision` returns one (a
    :class:`~runtime.lowlevel.TimerOutcome`); the actor's ``handle`` turns it into its own
    decision with :meth:`Decision.from_outcome`.
    """

    @property
    def events(self) -> Sequence[object]:
        """Events to append, in order (may be empty)."""
        ...

    @property
    def reply(self) -> object:
        """The answer to an ``ask``."""
        ...


@final
@attrs.frozen(kw_only=True)
class Decision:
    """What a message means: events to append, then a reply, maybe more.

    The events are appended atomically and folded before the reply is sent, so whoever
    hears the reply can rely on the log already holding them.
    """

    events: tuple[object, ...] = attrs.field(default=(), converter=_as_tuple)
    """Events to append, in order (may be empty)."""
    reply: object = None
    """The answer to an ``ask`` (ignored for a ``tell``)."""
    cancel_step: bool = False
    """Cancel the effect in flight (its result is discarded) once the events are appended,
    before asking ``next_step``; if the append fails, the effect is left running."""
    stop: bool = False
    """Stop the actor after appending (an orderly stop)."""

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> Decision:
        """The decision that appends ``outcome.events``, then replies ``outcome.reply``.

        For ``handle`` to return what a helper such as :func:`~runtime.lowlevel.timer_decision`
        decided; ``attrs.evolve`` the result to add events or flags of the actor's own.
        """
        return cls(events=outcome.events, reply=outcome.reply)


@final
@attrs.frozen
class StepFailed:
    """The message ``handle`` receives when ``execute`` raised: the decider decides."""

    step: object
    """The step that failed."""
    error: Exception
    """What ``execute`` raised."""


class _StepResult(PriorityMessage):
    __slots__ = ("result", "token")

    def __init__(self, token: object, result: object) -> None:
        self.token = token
        self.result = result


class EventSourcedActor(Actor[object], Generic[StateT]):
    """An actor whose state is the fold of its own stream in the runtime's event store.

    Subclasses implement :meth:`initial_state`, :meth:`evolve` and :meth:`handle`, and for
    actors that act on their own, :meth:`next_step` and :meth:`execute`. One actor owns
    one stream (:meth:`stream_name`); appends carry the version it folded, so a second
    writer fails loudly (:class:`~protocols.errors.ConcurrencyConflictError`) and crashes
    instead of corrupting the history. A stream found behind the version the actor folded,
    at an append or when a later incarnation folds it (deleted or cut back under it),
    stops the actor for good (:class:`~protocols.errors.StreamRewoundError`): started over
    on what is left, it would act again on what it had already done.

    Set ``snapshot_every`` to save a snapshot every N events (the state class must be
    registered in ``registry``); snapshots are caches, checked against the fold in tests.
    """

    snapshot_every: int | None = None
    """Save a snapshot each time the version crosses a multiple of this; ``None``: never."""
    defer_creation: bool = False
    """On an empty stream, fold the events of :meth:`recovered` at once but append them with
    the actor's first append: an actor that never decides anything writes nothing (a new
    session costs no commit of its own). Only for events the actor's configuration alone
    decides, since a crash before that append loses them and :meth:`recovered` decides
    them again."""
    registry: EventRegistry = default_registry
    """The codec registry that knows this actor's events (and state, for snapshots)."""

    state: StateT
    """The folded state (read-only for subclasses: change it with events)."""
    version: int
    """The stream version folded into :attr:`state`."""
    snapshot_version: int
    """The version of the newest snapshot this actor loaded or saved (0: none)."""

    # -- to implement ----------------------------------------------------------------

    def initial_state(self) -> StateT:
        """The state of an empty stream."""
        raise NotImplementedError

    def evolve(self, state: StateT, event: object) -> StateT:
        """Apply one event. Pure, total: it runs again at every recovery and replay."""
        raise NotImplementedError

    def apply(self, state: StateT, event: object) -> StateT:
        """Fold one event into the actor's **working state**; returns the working state.

        :meth:`evolve` by default. An actor whose fold copies a large state per event may
        keep one working state instead and change it in place here (returning ``state``
        itself, or a new one): the runtime folds every event of the actor's own stream
        through this method (recovery, decisions, their appends) and never keeps a state
        it handed here. It must reach the state :meth:`evolve` reaches, and the actor must
        copy whatever of it outlives a step (a reply that holds the state). Replay, fork
        and tests fold with :meth:`evolve`, the specification.
        """
        return self.evolve(state, event)

    def handle(self, state: StateT, message: object) -> Decision:
        """Decide what a message means. Pure: no I/O, no clock, no randomness."""
        raise NotImplementedError

    def next_step(self, state: StateT) -> object | None:
        """The effect to run next, or ``None`` to wait for messages. Pure.

        Returning a :class:`Decision` instead of an effect appends its events at once (a
        transition that needs no I/O, e.g. "record these tool calls as started"); the
        runtime then asks again.
        """
        return None

    def recovered(self, state: StateT) -> Decision | None:
        """Events to append once the log has been folded at start, before ``next_step``.

        Akka's ``RecoveryCompleted``: e.g. close the tool calls a crash left open. Pure.
        """
        return None

    async def execute(self, step: object) -> object:
        """Run an effect (an LLM call, a tool batch, ...); return the message to handle.

        Runs in the actor's nursery while the actor keeps receiving. An exception becomes a
        :class:`StepFailed` message.
        """
        raise NotImplementedError

    def starts_before_commit(self, step: object, events: Sequence[object]) -> bool:
        """Whether ``step`` may start while the append of ``events``, the events that
        asked for it, is still in flight. Pure; ``False`` by default.

        Only for an effect that changes nothing outside the actor until its result is
        recorded, such as a model call, and only when it reads nothing that ``events``
        alone hold: a fact nobody else keeps (the result of a tool that acted on the
        world) must be durable before anything reads it, or a crash before that commit
        leaves the actor's next incarnation without what its effect already used.
        :meth:`execute` awaits :meth:`wait_logged` before it tells anyone of the step (an
        observer, a hook). The effect then runs while the commit does, instead of after
        it; a crash before the commit loses the effect's work, as a crash during the
        effect always has. A result that comes before that append is durable is decided
        at once, on the fold of its events, as it would be next anyway; its events are
        queued behind that append, and nothing acts on them (``after_persist``, the next
        step) before they are durable.
        """
        return False

    async def wait_logged(self) -> None:
        """Wait until the events that asked for the running step are appended and folded.

        For :meth:`execute`, before it tells anyone of a step that started early
        (:meth:`starts_before_commit`); for any other step they already are. Cancelled
        with the step if the append fails (the actor then crashes).
        """
        gate = self._step_gate
        if gate is None:
            await trio.lowlevel.checkpoint()
        else:
            await gate.wait()

    def after_persist(self, events: Sequence[object]) -> None:
        """Called after events are appended and folded (Akka's ``thenRun``).

        For telling others about what is now in the log, e.g. waking the callers waiting
        for a run to finish. Never called during recovery.
        """

    def snapshot_due(self, events: Sequence[object]) -> bool:
        """Whether to save a snapshot now, after appending ``events``, besides every
        ``snapshot_every`` events (e.g. at the end of a run). Pure; ``False`` by default.

        Only asked when ``snapshot_every`` is set.
        """
        return False

    def stream_name(self) -> str:
        """The stream this actor owns; ``actor/<id>`` unless overridden."""
        return f"actor/{self.context.id}"

    # -- machinery -------------------------------------------------------------------

    @property
    def store(self) -> EventStore:
        """The runtime's event store."""
        return self.context.runtime.store

    async def on_start(self) -> None:
        # Looked up on every commit: kept here, not through two properties each time.
        self._running_in = self.context.runtime
        self._stream = self.stream_name()
        self._step_token: object | None = None
        self._step_gate: Gate | None = None
        self._runner: StepRunner | None = None
        self.snapshot_version = 0
        if self.snapshot_every is not None:
            self._check_snapshot_config()
        self._unwritten: list[object] = []
        self._open_link: Link | None = None
        # The class must say so: a wrapper that forwards unknown names (a test's store that
        # holds appends) must not be bypassed by appends begun on the store it wraps.
        store = self.store
        self._pipelined_store: PipelinedAppends | None = (
            cast("PipelinedAppends", store) if hasattr(type(store), "begin_append") else None
        )
        await self.recover()
        decision = self.recovered(self.state)
        if decision is not None and decision.events:
            if self.defer_creation and self.version == 0:
                state = self.state
                for event in decision.events:
                    state = self.apply(state, event)
                self.state = state
                self._unwritten = list(decision.events)
            else:
                await self.persist(decision.events)
        # Only now is the state folded: a listener may act for this owner from here on (the
        # timers service delivers its due timers, again any a previous incarnation lost).
        owner = self.context.ref
        for listener in self.context.runtime.persist_listeners:
            listener.on_owner_ready(self._stream, owner)
        await self._advance()

    async def on_stop(self) -> None:
        """Tell the persist listeners this stream's owner is gone (call it when overriding).

        An actor that passivates first saves a snapshot if ``snapshot_every`` is set and
        at least :data:`PASSIVATION_SNAPSHOT_TAIL` events came since its last one: its
        next start, likely soon, then folds little beyond it.
        """
        if (
            self._cell.passivating
            and self.snapshot_every is not None
            and self.version - self.snapshot_version >= PASSIVATION_SNAPSHOT_TAIL
        ):
            try:
                await self._save_snapshot(self.state)
            except StoreError as exc:  # a cache: the next start folds the log instead
                logger.warning("%s: no snapshot on passivation: %s", self._stream, exc)
        if self._cell.passivating:
            self._cell.no_snapshot = self.snapshot_version == 0
        owner = self.context.ref
        for listener in self.context.runtime.persist_listeners:
            listener.on_owner_gone(self._stream, owner)

    def stream_is_new(self) -> bool:
        """Whether the stream is known to be empty without reading it: recovery then reads
        nothing. E.g. a stream named by an id the runtime has just made, for the first
        incarnation only; should the stream exist after all, the first append fails with a
        version conflict and the restarted actor folds it."""
        return False

    async def recover(self) -> None:
        """Rebuild :attr:`state` from the latest snapshot plus the events after it.

        A snapshot is a cache: one of another schema version, or one that does not decode,
        is logged and ignored, and the whole stream is folded instead.

        Raises:
            StreamRewoundError: the stream is behind the version an earlier incarnation of
                this actor folded (deleted or cut back meanwhile).
        """
        registry = self.registry
        state = self.initial_state()
        version = 0
        if self.stream_is_new():
            self.state = state
            self.version = version
            self._check_not_rewound(version)
            return
        cell = self._cell
        # Started again after a passivation that knew of no snapshot: one read fewer (the
        # usual idle session is short). A snapshot is a cache, so a wrong hint only
        # costs a longer fold.
        skip, cell.no_snapshot = cell.no_snapshot, False
        # Started again in this process (after a passivation, most often): its snapshot,
        # if it has one, lies within the last events it folded (a passivating actor saves
        # one beyond that), so those are read beside it, in one wait for the store.
        ahead_from = max(1, cell.known_version - PASSIVATION_SNAPSHOT_TAIL + 1)
        ahead: list[RecordedEvent] | None = None
        if skip:
            snapshot = None
        elif cell.known_version:
            snapshot, ahead = await self._snapshot_beside(ahead_from)
        else:
            snapshot = await self.store.load_snapshot(self._stream)
        if snapshot is not None and not self._snapshot_is_current(
            snapshot.type, snapshot.schema_version
        ):
            logger.info(
                "%s: ignored the snapshot at version %s (%s schema version %s is not "
                "current); folding the log",
                self._stream,
                snapshot.version,
                snapshot.type,
                snapshot.schema_version,
            )
        elif snapshot is not None:
            try:
                state = decode_snapshot(registry, snapshot, stream=self._stream)  # type: ignore[assignment]  # registered state
            except CodecError as exc:
                logger.warning(
                    "%s: ignored the snapshot at version %s, which does not decode (%s); "
                    "folding the log",
                    self._stream,
                    snapshot.version,
                    exc,
                )
            else:
                version = self.snapshot_version = snapshot.version
        apply = self.apply
        decode = registry.decode_record
        if ahead is not None and ahead_from <= version + 1:
            for record in ahead:
                if record.version > version:
                    state = apply(state, decode(record))
                    version = record.version
            if len(ahead) < _PAGE:  # that was the whole tail
                self._check_not_rewound(version)
                self.state = state
                self.version = version
                return
        while True:
            page = await self.store.read(self._stream, version + 1, limit=_PAGE)
            for record in page:
                state = apply(state, decode(record))
            if page:
                version = page[-1].version
            if len(page) < _PAGE:
                break
        self._check_not_rewound(version)
        self.state = state
        self.version = version

    async def _snapshot_beside(self, start: int) -> tuple[Snapshot | None, list[RecordedEvent]]:
        """The stream's snapshot and a page of its events from version ``start``, read at
        once (two worker threads, one wait: each trip to a thread is most of a short read)."""
        found: list[list[RecordedEvent]] = []

        async def read() -> None:
            found.append(await self.store.read(self._stream, start, limit=_PAGE))

        with unwrap_single_error():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                snapshot = await self.store.load_snapshot(self._stream)
        return snapshot, found[0]

    def _check_not_rewound(self, version: int) -> None:
        """Raise if the stream, folded up to ``version``, is behind what an earlier
        incarnation of this actor folded: it was deleted or cut back under the actor,
        which must not start over on what is left (and run again what it ran)."""
        cell = self._cell
        if version < cell.known_version:
            raise StreamRewoundError(self._stream, cell.known_version, version)
        cell.known_version = version

    def _rewound(self, conflict: ConcurrencyConflictError) -> None:
        """Raise :class:`StreamRewoundError` if an append's conflict says the stream holds
        fewer events than this actor folded (streams only grow, so another writer cannot
        explain it)."""
        if conflict.actual < self.version:
            raise StreamRewoundError(self._stream, self.version, conflict.actual) from conflict

    async def receive(self, message: object) -> object:
        if isinstance(message, _StepResult):
            if message.token is not self._step_token:
                return None  # the result of a step that was cancelled meanwhile
            self._step_token = None
            self._step_gate = None
            message = message.result
        decision = self.handle(self.state, message)
        if not decision.events:
            if decision.cancel_step:
                self._cancel_step()
            if decision.stop:
                self._cancel_step()
                self.context.stop()
            else:
                await self._advance()
            return decision.reply
        # The decisions ``next_step`` would take right after this one (the transitions that
        # need no I/O) are decided now, on the state these events will fold to, and join
        # their append: one commit per decision chain, not one per link. ``next_step`` is
        # pure, so this is what the loop would decide after the commit anyway.
        idle = self._step_token is None
        events, state, step, stop = self._decide_ahead(
            self.state, list(decision.events), decision.stop, chain=idle or decision.cancel_step
        )
        early = None
        if idle and not stop and not decision.cancel_step:
            early = self._start_early(step, events)
        written, follow = await self._commit_early(events, state, started=early is not None)
        # Log first: the step is cancelled only once the events that say so are durable
        # (an append that fails crashes the actor with the step's fate still undecided).
        if decision.cancel_step:
            self._cancel_step()
        self.after_persist(written)
        if early is not None:
            early.set()
        if stop:
            self._cancel_step()
            self.context.stop()
        elif follow is None:
            await self._advance(step)
        else:  # the early step's result was decided while these events committed
            await self._settle_follow(follow)
        return decision.reply

    async def persist(self, events: Sequence[object], *, folded: StateT | None = None) -> None:
        """Append events to the stream, then fold them into :attr:`state`.

        ``folded``, when given, is that fold already (:attr:`state` with ``events``
        applied), for an actor that keeps it as it decides: the events are not folded twice.

        Raises:
            ConcurrencyConflictError: another writer appended to this stream.
            EventEncodeError: an event class is not registered or holds non-JSON values.
        """
        state = folded
        if state is None:
            state = self.state
            apply = self.apply
            for event in events:
                state = apply(state, event)
        await self._commit(events, state)

    def _decide_ahead(
        self, state: StateT, events: list[object], stop: bool, *, chain: bool
    ) -> tuple[list[object], StateT, object | None, bool]:
        """Fold ``events`` onto ``state``; while ``chain``, add the events of the decisions
        ``next_step`` returns on the folded state. Returns the events, the state they fold
        to, the step ``next_step`` asked for last (:data:`_UNASKED` if it was not asked)
        and whether a decision stops the actor. Nothing is appended; the events are
        folded into the working state (:meth:`apply`) ahead of their append, which the
        actor waits for before it handles anything else (if that append fails, the actor
        crashes and its next incarnation folds the log)."""
        apply = self.apply
        for event in events:
            state = apply(state, event)
        step: object | None = _UNASKED
        while chain and not stop:
            step = self.next_step(state)
            if not isinstance(step, Decision) or not step.events:
                break
            for event in step.events:
                events.append(event)
                state = apply(state, event)
            stop = step.stop
            step = _UNASKED
        return events, state, step, stop

    async def _commit(self, events: Sequence[object], state: StateT) -> Sequence[object]:
        """Append ``events`` (one decision chain: all but the last marked :data:`CONTINUES`),
        then make ``state`` (their fold) the actor's and tell the persist listeners.

        Returns the events appended: ``events`` after any :attr:`defer_creation` held back.
        """
        if self._unwritten:
            events = [*self._unwritten, *events]
        new = self._encode(events)
        began = self._commit_began()
        try:
            result = await self._running_in.store.append(self._stream, new, self.version)
        except ConcurrencyConflictError as conflict:
            self._rewound(conflict)
            raise
        if began is not None:
            self._observe_commit(len(new), began)
        await self._committed(events, state, result.version)
        return events

    def _encode(self, events: Sequence[object]) -> tuple[NewEvent, ...]:
        """The events of one append: all but the last marked :data:`CONTINUES`."""
        encoder = self.registry.encoder
        last = len(events) - 1
        new: list[NewEvent] = []
        for i, event in enumerate(events):
            # Encoded once, by its class's encoder, into the store's record: no other
            # object stands between the event and the row.
            coder = encoder(type(event))
            data = coder.dump(event)
            new.append(
                new_event(coder.name, coder.schema_version, data, CONTINUES if i < last else None)
            )
        return tuple(new)

    def _commit_began(self) -> float | None:
        """When an append begins, if a commit observer is there to be told how long it
        took; ``None``: with no observer, an append is not timed at all."""
        return trio.current_time() if self._running_in.commit_observers else None

    def _observe_commit(self, count: int, began: float) -> None:
        took = trio.current_time() - began
        for observe in self._running_in.commit_observers:
            observe(self._stream, count, took)

    async def _committed(self, events: Sequence[object], state: StateT, version: int) -> None:
        """``events`` are appended, up to ``version``: make ``state`` (their fold) the
        actor's, tell the persist listeners, save a snapshot if one is due."""
        self._unwritten = []
        self.state = state
        previous, self.version = self.version, version
        self._cell.known_version = version
        for listener in self._running_in.persist_listeners:
            listener.on_persisted(self._stream, events)
        every = self.snapshot_every
        if every is not None and (
            previous // every != self.version // every or self.snapshot_due(events)
        ):
            await self._save_snapshot(state)

    async def _commit_early(
        self, events: list[object], state: StateT, *, started: bool
    ) -> tuple[Sequence[object], Follow | None]:
        """:meth:`_commit`; if a step ``started`` early for these events: should its
        result come before they are durable, it is decided then and its events queued
        right behind them (:class:`Follow`; :meth:`_settle_follow` sees them through).

        With a model that answers at once (a function model, a replay) this takes the
        actor's own decision off the critical path between two dependent commits. The
        result is decided on the state these events fold to, as it would be once they
        are durable, and only when no other system message is ahead of it (step results
        jump the queue of user messages): the same decision, made sooner, by the step's
        task as it finishes (no hop through the mailbox; the actor's task is parked
        here). Nothing acts on it before its events are durable.
        """
        store = self._pipelined_store
        if store is None or not started:
            return await self._commit(events, state), None
        written = [*self._unwritten, *events] if self._unwritten else events
        new = self._encode(written)
        began = self._commit_began()
        link = Link(Waiter())
        pending = store.begin_append(self._stream, new, self.version, after=None, wake=link.decided)
        if pending is None:  # the store is closing: ``append`` says so
            return await self._commit(events, state), None
        link.pending = pending
        follow = await self._wait_for(link, self.version + len(new), state)
        try:
            result = store.finish_append(pending)
        except ConcurrencyConflictError as conflict:
            self._rewound(conflict)
            raise
        if began is not None:
            self._observe_commit(len(new), began)
        await self._committed(written, state, result.version)
        return written, follow

    async def _wait_for(self, link: Link, version: int, state: StateT) -> Follow | None:
        """Wait until ``link``'s append is decided. Meanwhile the running early step, if
        it finishes first, decides its own result on ``state`` (the fold of that append's
        events; ``version``, the version it leaves) and queues its events behind it
        (:meth:`_run_step`): returns that follow, if any."""
        link.token = self._step_token
        link.state = state
        link.version = version
        self._open_link = link
        try:
            while not link.done:
                await link.waiter.park()
        finally:
            self._open_link = None
        return link.follow

    def _decide_follow(
        self, result: object, state: StateT, version: int, link: Link
    ) -> Follow | None:
        """Decide the early step's ``result`` on ``state`` and queue its events behind
        ``link``'s; ``None`` (nothing queued) if that decision appends nothing or stops
        or cancels: those wait for their turn in the mailbox."""
        decision = self.handle(state, result)
        if not decision.events or decision.stop or decision.cancel_step:
            return None
        store = self._pipelined_store
        assert store is not None
        events, folded, step, stop = self._decide_ahead(
            state, list(decision.events), False, chain=True
        )
        new = self._encode(events)
        follow = Follow(
            Link(link.waiter),
            events,
            folded,
            step,
            stop,
            version + len(new),
            self._commit_began(),
        )
        pending = store.begin_append(
            self._stream, new, version, after=link.pending, wake=follow.link.decided
        )
        if pending is None:
            # The store is closing (every later append fails as well): the working state
            # already holds these events, so the actor must not go on from it.
            raise StoreClosedError()
        follow.link.pending = pending
        self._step_token = None  # the step is over: its result is decided
        self._step_gate = None
        return follow

    async def _settle_follow(self, follow: Follow) -> None:
        """See a follow's events through: wait for their append (deciding the next early
        step's result meanwhile, the same way), then what :meth:`receive` does after
        a commit."""
        store = self._pipelined_store
        assert store is not None
        while True:
            early = None if follow.stop else self._start_early(follow.step, follow.events)
            state = cast("StateT", follow.state)
            after = await self._wait_for(follow.link, follow.version, state)
            try:
                result = store.finish_append(follow.link.pending)
            except ConcurrencyConflictError as conflict:
                self._rewound(conflict)
                raise
            if follow.began is not None:
                self._observe_commit(len(follow.events), follow.began)
            await self._committed(follow.events, state, result.version)
            self.after_persist(follow.events)
            if early is not None:
                early.set()
            if follow.stop:
                self._cancel_step()
                self.context.stop()
                return
            if after is None:
                await self._advance(follow.step)
                return
            follow = after

    async def _save_snapshot(self, state: StateT) -> None:
        try:
            encoded, chunks = encode_snapshot(self.registry, state)
        except EventEncodeError as exc:  # a cache: the actor goes on without it
            logger.warning("%s: no snapshot at version %s: %s", self._stream, self.version, exc)
            return
        await self.store.save_snapshot(
            self._stream,
            self.version,
            type=encoded.type,
            schema_version=encoded.schema_version,
            data=encoded.data,
            chunks=chunks,
        )
        self.snapshot_version = self.version

    async def _advance(self, step: object | None = _UNASKED) -> None:
        """Ask ``next_step`` until it names an effect (then start it) or nothing.

        ``step``: what ``next_step`` already answered for the current state, if it was
        asked (else :data:`_UNASKED`).
        """
        while self._step_token is None:
            if step is _UNASKED:
                step = self.next_step(self.state)
            if step is None:
                return
            if isinstance(step, Decision):
                events, state, step, stop = self._decide_ahead(
                    self.state, list(step.events), step.stop, chain=True
                )
                early = None if stop else self._start_early(step, events)
                written, follow = await self._commit_early(events, state, started=early is not None)
                self.after_persist(written)
                if early is not None:
                    early.set()
                if stop:
                    self.context.stop()
                    return
                if follow is not None:
                    await self._settle_follow(follow)
                    return
                continue
            self._start_step(step)
            return

    def _start_early(self, step: object | None, events: Sequence[object]) -> Gate | None:
        """Start ``step`` before the append of ``events``, which asks for it, if it may
        (:meth:`starts_before_commit`); returns the event to set once that append is done."""
        if (
            step is _UNASKED
            or step is None
            or isinstance(step, Decision)
            or not self.starts_before_commit(step, events)
        ):
            return None
        gate = Gate()
        self._start_step(step, gate)
        return gate

    def _start_step(self, step: object, gate: Gate | None = None) -> None:
        token = object()
        self._step_token = token
        self._step_gate = gate
        runner = self._runner
        if runner is None or (gate is not None and runner.deciding):
            # An early step must run while the append that asks for it commits: not in
            # the task that waits for that append, deciding in the actor's turn.
            if runner is not None:
                runner.cancelled = True  # it ends once its handling does
            runner = self._runner = StepRunner(step, token)
            self.context.start_soon(self._run_steps, runner, name=f"{self.context.path} step")
        else:
            runner.give(step, token)

    async def _run_steps(self, runner: StepRunner) -> None:
        """Run the steps given to ``runner``, one after another, until it is cancelled
        (:meth:`_cancel_step`; the next step starts a new runner)."""
        runner.task = trio.lowlevel.current_task()
        with runner.scope:
            while True:
                work = runner.next
                if work is None:
                    await runner.wait_for_work()
                    continue
                runner.next = None
                step, token = work
                result: object
                try:
                    result = await self.execute(step)
                except Exception as exc:
                    result = StepFailed(step, exc)
                if runner.cancelled:
                    return  # cancelled as it finished: its result is not wanted
                lent = self._step_finished(token, result)
                if lent is None:
                    continue
                # The actor is idle and lent this task its turn: handle the result here,
                # as its loop would (one message at a time: messages that come meanwhile
                # wait for it), and go on to the step it asks for without a wake-up.
                runner.deciding = True
                cell = self._cell
                cell.current_reply = None
                try:
                    await self.receive(_StepResult(token, result))
                finally:
                    runner.deciding = False
                # Given back only now: if that raised, the actor crashes (or is cancelled)
                # with the error, and its task must handle nothing more, not even a
                # message queued meanwhile, on a working state holding what was not
                # appended.
                cell.mailbox.give_back(lent, wake=cell.stop_requested)
                if self._runner is not runner:
                    return  # cancelled, or an early step went to a runner of its own

    def _step_finished(self, token: object, result: object) -> trio.lowlevel.Task | None:
        """Deliver a finished step's result: decided as a follow of the append in flight,
        or queued for the actor. If the actor is idle instead, its loop is lent to the
        calling step task, which must handle the result now: returns the actor's task,
        to give back (:meth:`~runtime._mailbox._Mailbox.give_back`)."""
        cell = self._cell
        mailbox = cell.mailbox
        if mailbox.closed:
            return None
        link = self._open_link
        if (
            link is not None
            and link.token is token
            and link.follow is None
            and mailbox.peek_system() is None
        ):
            # The actor waits for the append that asked for this step, and no other system
            # message is ahead of this result: it is what the actor decides next, on the
            # fold of that append. Decide it now and queue its events behind it.
            state = cast("StateT", link.state)
            link.follow = self._decide_follow(result, state, link.version, link)
            if link.follow is not None:
                return None
        if not cell.stop_requested:
            lent = mailbox.lend()
            if lent is not None:
                return lent
        mailbox.put_system((_StepResult(token, result), None))
        return None

    def _cancel_step(self) -> None:
        if self._step_token is not None and self._runner is not None:
            self._runner.cancel()
            self._runner = None
        self._step_token = None
        self._step_gate = None

    def _check_snapshot_config(self) -> None:
        every = self.snapshot_every
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            msg = f"snapshot_every must be a positive int or None, got {every!r}"
            raise ConfigError(msg)
        state = self.initial_state()
        try:
            self.registry.name_of(type(state))
        except EventEncodeError as exc:
            msg = (
                f"{type(self).__name__}.snapshot_every is set but its state class "
                f"{type(state).__name__} is not registered: decorate it with @event_type(...)"
            )
            raise ConfigError(msg) from exc

    def _snapshot_is_current(self, type_name: str, schema_version: int) -> bool:
        try:
            return self.registry.current_version(type_name) == schema_version
        except UnknownEventTypeError:
            return False  # a cache of a state class that is gone: ignore it
