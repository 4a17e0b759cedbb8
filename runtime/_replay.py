"""Replay: re-run an actor's decisions over its recorded log, at fold speed, with no effects.

Live execution, crash resume and replay are one loop (the decider pattern): fold the
stream, ask ``next_step``, execute, append. Replay folds the recorded events one by one and, before
each event that answers an effect (an LLM answer, a tool result...), asks the *current
code* what it would do in that state; the recorded answer stands in for the effect, so
no model or tool is called. If the code asks for something else than what was recorded,
the replay stops with :class:`~protocols.errors.ReplayDivergenceError` naming the stream,
the event version and a readable diff. Use it as a regression test: record runs once
with a real provider, then check that changed prompt-building or tool code still replays.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar, final

import attrs

from protocols.codec import EventRegistry, default_registry
from protocols.errors import ConfigError, ReplayDivergenceError, StreamNotFoundError

from ._event_sourced import Decision
from ._store._contract import EventStore

StateT = TypeVar("StateT")

_PAGE = 4096


class Replayable(Protocol[StateT]):
    """The decider an actor kind replays with: its pure pieces plus three replay checks.

    An ``EventSourcedActor`` already has ``initial_state``, ``evolve`` and ``next_step``.
    """

    def initial_state(self) -> StateT: ...

    def evolve(self, state: StateT, event: object) -> StateT: ...

    def next_step(self, state: StateT) -> object | None: ...

    def answers_effect(self, event: object) -> bool:
        """Whether ``event`` records the answer of an effect (to be checked)."""
        ...

    def replay_check(self, step: object | None, event: object) -> str | None:
        """``None`` if ``step`` (the effect the code asked for, ``None`` if it asked for
        none) is the one ``event`` answers; else a readable description of the difference."""
        ...

    def step_settled(self, step: object, state: StateT, event: object) -> bool:
        """Whether the effect ``step`` is over once ``event`` is folded into ``state``:
        answered, cancelled, or abandoned (an event only a restarted actor decides while
        no effect is in flight shows the process stopped during the effect)."""
        ...


@final
@attrs.frozen(kw_only=True)
class ReplayResult(Generic[StateT]):
    """What a replay that matched the log found."""

    stream: str
    state: StateT
    """The state after the last event (equal to the live actor's)."""
    version: int
    """The last version replayed."""
    checked: int
    """Events whose effect request was compared with the code's."""


async def replay(
    store: EventStore,
    stream: str,
    decider: Replayable[StateT],
    *,
    registry: EventRegistry = default_registry,
    to_version: int | None = None,
    from_version: int = 0,
) -> ReplayResult[StateT]:
    """Re-run ``decider`` over ``stream`` and check every recorded effect against it.

    Args:
        store (EventStore): the log.
        stream (str): the stream to replay.
        decider (Replayable): the current code of the stream's actor kind.
        registry (EventRegistry): the codec registry of its events.
        to_version (int | None): stop after this version.
        from_version (int): replay from here: the events up to this version are folded as
            recorded (the state the log had then) and only the effects answered after it
            are checked; 0, the default, checks them all.

    Returns:
        ReplayResult: the final state, the version and how many effects were checked.

    Raises:
        ReplayDivergenceError: the code asks for a different effect than the recorded one.
        StreamNotFoundError: the stream has no events.
        ConfigError: ``from_version`` is negative or past the stream's last event.
    """
    if from_version:
        length = await store.stream_version(stream)
        if length == 0:
            raise StreamNotFoundError(stream)
        if not 0 <= from_version <= length:
            msg = (
                f"{stream!r} has events 1 to {length}: replay from one of them "
                f"(0 from the start), not from {from_version}"
            )
            raise ConfigError(msg)
    state = decider.initial_state()
    version = 0
    checked = 0
    step: object | None = None  # the effect in flight, as the live loop would have it
    while True:
        page = await store.read(stream, version + 1, limit=_PAGE)
        for record in page:
            if to_version is not None and record.version > to_version:
                return ReplayResult(stream=stream, state=state, version=version, checked=checked)
            event = registry.decode_record(record)
            if record.version > from_version and decider.answers_effect(event):
                problem = decider.replay_check(step, event)
                if problem is not None:
                    raise ReplayDivergenceError(stream, record.version, record.type, problem)
                checked += 1
            state = decider.evolve(state, event)
            version = record.version
            if step is not None and decider.step_settled(step, state, event):
                step = None
            if step is None:
                # What the live loop asks after each append; a Decision's events are the
                # next ones in the log, an effect stays in flight until it is settled.
                wanted = decider.next_step(state)
                step = None if isinstance(wanted, Decision) else wanted
        if len(page) < _PAGE:
            break
    if version == 0:
        raise StreamNotFoundError(stream)
    return ReplayResult(stream=stream, state=state, version=version, checked=checked)
