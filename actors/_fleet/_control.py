"""What operators do to a fleet through its log: apply a file, pause, resume, drain, read.

Every command appends to the control stream (``fleet``) with optimistic concurrency: it
reads the stream, folds it, decides, and appends at the version it folded; a conflict
(another command, or a node, appended meanwhile) makes it read and decide again. So
``apply`` run twice, or by two operators at once, declares each agent once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, final

import attrs

from protocols.codec import decode_record, encode
from protocols.errors import ConcurrencyConflictError
from runtime import EventStore, NewEvent

from ._errors import FleetAgentNotFoundError, FleetNodeNotFoundError
from ._events import (
    CONTROL_STREAM,
    NODE_PREFIX,
    FleetAgentChanged,
    FleetAgentDeclared,
    FleetAgentPaused,
    FleetAgentResumed,
    FleetAgentRetired,
    FleetNodeDrainRequested,
    FleetStatus,
    fleet_status,
)
from ._file import AgentDecl, FleetFile

__all__ = [
    "ApplyReport",
    "ControlState",
    "DeclaredAgent",
    "apply_fleet",
    "read_control",
    "read_fleet_status",
    "request_drain",
    "set_paused",
]

_ATTEMPTS = 20


@final
@attrs.frozen(kw_only=True)
class DeclaredAgent:
    """An agent as the control stream has it."""

    decl: AgentDecl
    spec_hash: str
    paused: bool = False
    retired: bool = False


@final
@attrs.frozen(kw_only=True)
class ControlState:
    """The fold of the control stream."""

    agents: dict[str, DeclaredAgent] = attrs.field(factory=dict)
    drains: tuple[tuple[int, str], ...] = ()
    """``(version, node)`` of each drain request."""
    version: int = 0

    def live(self) -> list[str]:
        return sorted(name for name, a in self.agents.items() if not a.retired)


def fold_control(events: Sequence[object], start: ControlState | None = None) -> ControlState:
    """Fold control events (in order) onto ``start``. Pure."""
    agents = dict(start.agents) if start else {}
    drains = list(start.drains) if start else []
    version = start.version if start else 0
    for event in events:
        version += 1
        if isinstance(event, FleetAgentDeclared | FleetAgentChanged):
            before = agents.get(event.name)
            agents[event.name] = DeclaredAgent(
                decl=AgentDecl.from_json(event.decl),
                spec_hash=event.spec_hash,
                paused=before.paused if before and not before.retired else False,
            )
        elif isinstance(event, FleetAgentRetired) and event.name in agents:
            agents[event.name] = attrs.evolve(agents[event.name], retired=True)
        elif isinstance(event, FleetAgentPaused | FleetAgentResumed) and event.name in agents:
            paused = isinstance(event, FleetAgentPaused)
            agents[event.name] = attrs.evolve(agents[event.name], paused=paused)
        elif isinstance(event, FleetNodeDrainRequested):
            drains.append((version, event.node))
    return ControlState(agents=agents, drains=tuple(drains), version=version)


async def read_control(store: EventStore, start: ControlState | None = None) -> ControlState:
    """The control stream folded (from ``start`` on, if given)."""
    since = start.version if start else 0
    records = await store.read(CONTROL_STREAM, since + 1)
    return fold_control([decode_record(r) for r in records], start)


async def _decide_and_append(
    store: EventStore, decide: Callable[[ControlState], list[object]]
) -> tuple[ControlState, list[object]]:
    attempt = 0
    while True:
        state = await read_control(store)
        events = decide(state)
        if not events:
            return state, events
        try:
            await store.append(
                CONTROL_STREAM, [NewEvent.from_encoded(encode(e)) for e in events], state.version
            )
        except ConcurrencyConflictError:
            attempt += 1
            if attempt >= _ATTEMPTS:  # someone appends without pause: say so
                raise
            continue
        return state, events


@final
@attrs.frozen(kw_only=True)
class ApplyReport:
    """What ``apply`` changed."""

    created: tuple[str, ...]
    changed: dict[str, tuple[str, ...]]
    """Agent -> the fields that changed."""
    retired: tuple[str, ...]
    unchanged: tuple[str, ...]


def _changed_fields(old: AgentDecl, new: AgentDecl) -> tuple[str, ...]:
    before, after = old.to_json(), new.to_json()
    return tuple(k for k in after if before.get(k) != after[k])


async def apply_fleet(
    store: EventStore, fleet: FleetFile, *, hashes: dict[str, str] | None = None
) -> ApplyReport:
    """Reconcile the log with a fleet file, idempotently.

    New agents are declared; an agent whose declaration (or tools' schemas) changed gets
    ``FleetAgentChanged`` (its next run uses it); agents missing from the file are retired
    (their history stays). The same file applied again appends nothing.

    Args:
        hashes: agent -> spec hash; computed from the file (importing its tools) if not given.
    """
    spec_hashes = hashes if hashes is not None else {a.name: a.spec_hash() for a in fleet.agents}
    report: dict[str, Any] = {}

    def decide(state: ControlState) -> list[object]:
        events: list[object] = []
        created, changed, retired, unchanged = [], {}, [], []
        for decl in fleet.agents:
            spec_hash = spec_hashes[decl.name]
            known = state.agents.get(decl.name)
            if known is None or known.retired:
                events.append(
                    FleetAgentDeclared(name=decl.name, decl=decl.to_json(), spec_hash=spec_hash)
                )
                created.append(decl.name)
            elif known.spec_hash != spec_hash or known.decl != decl:
                fields = _changed_fields(known.decl, decl) or ("tool schemas",)
                events.append(
                    FleetAgentChanged(
                        name=decl.name,
                        decl=decl.to_json(),
                        spec_hash=spec_hash,
                        previous_hash=known.spec_hash,
                        changed=fields,
                    )
                )
                changed[decl.name] = fields
            else:
                unchanged.append(decl.name)
        for name in state.live():
            if name not in spec_hashes:
                events.append(FleetAgentRetired(name=name))
                retired.append(name)
        report.update(created=created, changed=changed, retired=retired, unchanged=unchanged)
        return events

    await _decide_and_append(store, decide)
    return ApplyReport(
        created=tuple(report["created"]),
        changed=report["changed"],
        retired=tuple(report["retired"]),
        unchanged=tuple(report["unchanged"]),
    )


async def set_paused(store: EventStore, name: str, *, paused: bool, reason: str = "") -> bool:
    """Pause or resume an agent; whether that changed anything.

    Raises:
        FleetAgentNotFoundError: no live agent has that name.
    """

    def decide(state: ControlState) -> list[object]:
        known = state.agents.get(name)
        if known is None or known.retired:
            raise FleetAgentNotFoundError(name, state.live())
        if known.paused == paused:
            return []
        return [
            FleetAgentPaused(name=name, reason=reason) if paused else FleetAgentResumed(name=name)
        ]

    _, events = await _decide_and_append(store, decide)
    return bool(events)


async def request_drain(store: EventStore, node: str) -> None:
    """Ask ``node`` to drain: it stops taking work, lets runs finish their turn, exits.

    Raises:
        FleetNodeNotFoundError: no node of that name ever served this fleet (a typo would
            otherwise be asked, and never answer).
    """
    known = sorted(info.stream[len(NODE_PREFIX) :] for info in await store.streams(NODE_PREFIX))
    if node not in known:
        raise FleetNodeNotFoundError(node, known)

    def decide(state: ControlState) -> list[object]:
        return [FleetNodeDrainRequested(node=node)]

    await _decide_and_append(store, decide)


async def read_fleet_status(store: EventStore, *, now: float) -> FleetStatus:
    """The fleet's status from the log (the control stream and every ``fleet/`` stream)."""
    pairs: list[tuple[int, str, object]] = []
    for record in await store.read(CONTROL_STREAM):
        pairs.append((record.position, record.stream, decode_record(record)))
    for info in await store.streams("fleet/"):
        for record in await store.read(info.stream):
            pairs.append((record.position, record.stream, decode_record(record)))
    pairs.sort(key=lambda p: p[0])
    return fleet_status(((stream, event) for _, stream, event in pairs), now=now)
