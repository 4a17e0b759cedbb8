"""The trace of a run: its events, from the log alone, as nested bars on one time axis.

A pure fold (:func:`trace_bars`): events in, bars out, no store and no clock of its own, so
the console's trace page is a thin rendering and a unit test checks the bars themselves.
Times are the events' ``recorded_at``: a model call runs from the event that let the
session ask the model again (the run's start, a tool's or a child's result, a human's
answer) to the answer's record; a tool from its start to its result; a sub-agent from its
spawn to its result, with its own runs nested under it; a wait for a human from the
request to the answer; a timer from its scheduling to its firing (or its due time). A bar
still open (a live run) ends at ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, final

import attrs

from protocols import Usage
from runtime.timers import TimerCancelled, TimerFired, TimerScheduled

from .._session._budget import Price, price_for
from .._session._events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    FollowUpsInjected,
    HumanAnswered,
    HumanRequested,
    OutputRejected,
    RunFinished,
    RunStarted,
    ToolFinished,
    ToolStarted,
)

__all__ = ["Bar", "BarKind", "Trace", "TraceEvent", "trace_bars"]

BarKind = Literal["run", "round", "model", "tool", "child", "human", "timer"]

_RESUMES = (
    RunStarted,
    ToolFinished,
    ChildFinished,
    HumanAnswered,
    FollowUpsInjected,
    OutputRejected,
)
"""Events after which a session asks its model again: a model call starts at the last one."""


@final
@attrs.frozen
class TraceEvent:
    """One decoded event of a session tree, where and when it was recorded."""

    session_id: str
    version: int
    at: float
    """Its ``recorded_at`` (epoch seconds)."""
    event: object


@final
@attrs.frozen(kw_only=True)
class Bar:
    """One span of the trace: what ran (or waited), from when to when, under which bar."""

    key: str
    """Unique in the trace (``b1``, ``b2``, ...), for the page's selection."""
    kind: BarKind
    label: str
    session_id: str
    """The session whose stream holds the bar's first event."""
    version: int
    """That event's version (``state here``, ``fork here``)."""
    start: float
    end: float
    open: bool = False
    """Still running when the trace was drawn: ``end`` is ``now``."""
    depth: int = 0
    parent: str | None = None
    status: str = ""
    end_version: int | None = None
    """The version of the event that closed the bar, if it is in the same stream."""
    model: str = ""
    usage: Usage | None = None
    cost: float | None = None
    """USD at the prices given; ``None`` with no price for the model."""
    first_token: float | None = None
    """Seconds to the first token of a streamed model answer; ``None`` when not recorded
    (an answer not streamed, or logged before the log recorded it)."""
    child_id: str | None = None
    """A sub-agent's bar: the child's session (its own trace)."""

    @property
    def duration(self) -> float:
        """Seconds from start to end."""
        return max(0.0, self.end - self.start)


@final
@attrs.frozen(kw_only=True)
class Trace:
    """The bars of one run of a session, in display order (depth first, by start)."""

    session_id: str
    run_id: str | None
    status: str
    start: float
    end: float
    bars: tuple[Bar, ...]
    usage: Usage
    cost: float | None
    live: bool
    """Some bar is still open: the page refreshes itself."""
    runs: tuple[str, ...]
    """Every run of the session, oldest first (the page's run picker)."""


@attrs.define
class _Draft:
    key: str
    kind: BarKind
    label: str
    session_id: str
    version: int
    start: float
    parent: str | None
    seq: int
    end: float | None = None
    status: str = ""
    end_version: int | None = None
    model: str = ""
    usage: Usage | None = None
    cost: float | None = None
    first_token: float | None = None
    child_id: str | None = None


@attrs.define
class _Builder:
    prices: Mapping[str, Price]
    by_session: Mapping[str, Sequence[TraceEvent]]
    drafts: list[_Draft] = attrs.Factory(list)

    def add(
        self, kind: BarKind, label: str, e: TraceEvent, start: float, parent: str | None
    ) -> _Draft:
        draft = _Draft(
            key=f"b{len(self.drafts) + 1}",
            kind=kind,
            label=label,
            session_id=e.session_id,
            version=e.version,
            start=start,
            parent=parent,
            seq=len(self.drafts),
        )
        self.drafts.append(draft)
        return draft

    def session(self, session_id: str, parent: str | None, run_id: str | None) -> None:
        """Bars of ``session_id``'s events (only run ``run_id``'s, if given) under ``parent``."""
        walk = _Walk(self, parent)
        for e in self.by_session.get(session_id, ()):
            if isinstance(e.event, RunStarted):
                if run_id is None or e.event.run_id == run_id:
                    walk.start(e, e.event)
            elif walk.run is not None and walk.step(e, walk.run) and run_id is not None:
                break
        walk.answering()


@attrs.define
class _Walk:
    """One session's run(s) being folded into bars."""

    builder: _Builder
    parent: str | None
    run: _Draft | None = None
    run_id: str = ""
    round_bar: _Draft | None = None
    resumed_at: float | None = None
    waits: dict[tuple[str, str], _Draft] = attrs.Factory(dict)
    """Open tools, children, human requests and timers, by kind and id."""
    rounds: int = 0
    last: TraceEvent | None = None
    """The run's latest event (where an unanswered model call is anchored)."""

    def start(self, e: TraceEvent, event: RunStarted) -> None:
        self.run = self.builder.add("run", f"run {event.run_id}", e, e.at, self.parent)
        self.run.status, self.run_id = "running", event.run_id
        self.round_bar, self.resumed_at, self.rounds, self.last = None, e.at, 0, e

    def open(self, kind: BarKind, label: str, e: TraceEvent, run: _Draft, key: str) -> _Draft:
        bar = self.builder.add(kind, label, e, e.at, (self.round_bar or run).key)
        bar.status = {"human": "waiting", "timer": "scheduled"}.get(kind, "running")
        self.waits[(kind, key)] = bar
        return bar

    def close(self, kind: str, key: str, e: TraceEvent, status: str) -> None:
        bar = self.waits.pop((kind, key), None)
        if bar is not None:
            _close(bar, e, status)

    def answering(self) -> None:
        """An open run that waits for nothing but its model: the model call in flight,
        as an open round and an open model bar (its answer is not recorded yet)."""
        run, last = self.run, self.last
        if run is None or last is None or self.resumed_at is None:
            return
        if any(kind != "timer" for kind, _ in self.waits):
            return
        if self.round_bar is not None:
            self.round_bar.end = self.resumed_at
        label = f"round {self.rounds + 1}"
        round_bar = self.builder.add("round", label, last, self.resumed_at, run.key)
        model = self.builder.add("model", "model (answering)", last, self.resumed_at, round_bar.key)
        model.status = "answering"

    def step(self, e: TraceEvent, run: _Draft) -> bool:
        """Fold one event of the open run; whether it ended the run."""
        event = e.event
        self.last = e
        if isinstance(event, AssistantRecorded):
            self.model(e, event, run)
        elif isinstance(event, ToolStarted):
            self.open("tool", f"tool {event.name}", e, run, event.call_id)
        elif isinstance(event, ToolFinished):
            self.close("tool", event.outcome.call_id, e, event.outcome.status)
        elif isinstance(event, ChildSpawned):
            label = f"sub-agent {event.agent} {event.child_id}"
            bar = self.open("child", label, e, run, event.child_id)
            bar.child_id = event.child_id
            self.builder.session(event.child_id, bar.key, None)
        elif isinstance(event, ChildFinished):
            self.close("child", event.child_id, e, event.status)
        elif isinstance(event, HumanRequested):
            label = f"waiting for a human ({event.kind})"
            self.open("human", label, e, run, event.request_id)
        elif isinstance(event, HumanAnswered):
            verdict = {True: "approved", False: "denied", None: "answered"}[event.approve]
            self.close("human", event.request_id, e, verdict)
        elif isinstance(event, TimerScheduled):
            self.open("timer", f"timer {event.note or event.timer_id}", e, run, event.timer_id)
        elif isinstance(event, TimerFired | TimerCancelled):
            status = "fired" if isinstance(event, TimerFired) else "cancelled"
            self.close("timer", event.timer_id, e, status)
        elif isinstance(event, RunFinished) and event.run_id == self.run_id:
            self.finish(e, event, run)
            return True
        if isinstance(event, _RESUMES):
            self.resumed_at = e.at
        return False

    def model(self, e: TraceEvent, event: AssistantRecorded, run: _Draft) -> None:
        start = self.resumed_at if self.resumed_at is not None else e.at
        if self.round_bar is not None:
            self.round_bar.end = start
        self.rounds = event.round
        self.round_bar = self.builder.add("round", f"round {event.round}", e, start, run.key)
        model = self.builder.add("model", f"model {event.model}", e, start, self.round_bar.key)
        model.end, model.status, model.model = e.at, event.finish_reason, event.model
        model.usage, model.first_token = event.usage, event.first_token_s
        prices = self.builder.prices
        price = price_for(prices, event.model) if prices else None
        model.cost = None if price is None else price.cost(event.usage)
        self.resumed_at = None

    def finish(self, e: TraceEvent, event: RunFinished, run: _Draft) -> None:
        if self.round_bar is not None:
            self.round_bar.end = e.at
        # A run that ends leaves no tool running and no question open; a timer lives on.
        for key, bar in list(self.waits.items()):
            if key[0] in {"tool", "human"}:
                _close(bar, e, "interrupted" if key[0] == "tool" else "unanswered")
                del self.waits[key]
        _close(run, e, event.status)
        self.run = self.round_bar = None


def _key(round_bar: _Draft | None, run: _Draft) -> str:
    return (round_bar or run).key


def _close(bar: _Draft, e: TraceEvent, status: str) -> None:
    if bar.end is None:
        bar.end = e.at
    bar.status = status
    if e.session_id == bar.session_id:
        bar.end_version = e.version


def trace_bars(
    events: Sequence[TraceEvent],
    session_id: str,
    *,
    now: float,
    run_id: str | None = None,
    prices: Mapping[str, Price] | None = None,
) -> Trace:
    """The bars of run ``run_id`` of ``session_id`` (default: its latest run).

    ``events``: the decoded events of the session and of its sub-agents, in log order
    (other sessions' events are ignored); ``now``: where still-open bars end.
    """
    by_session: dict[str, list[TraceEvent]] = {}
    runs: list[str] = []
    for e in events:
        by_session.setdefault(e.session_id, []).append(e)
        if e.session_id == session_id and isinstance(e.event, RunStarted):
            runs.append(e.event.run_id)
    chosen = run_id if run_id is not None else (runs[-1] if runs else None)
    builder = _Builder(prices=dict(prices or {}), by_session=by_session)
    if chosen is not None:
        builder.session(session_id, None, chosen)
    children: dict[str | None, list[_Draft]] = {}
    for draft in builder.drafts:
        children.setdefault(draft.parent, []).append(draft)
    ordered: list[Bar] = []

    def emit(parent: str | None, depth: int) -> None:
        for draft in sorted(children.get(parent, ()), key=lambda d: (d.start, d.seq)):
            still_open = draft.end is None
            ordered.append(
                Bar(
                    key=draft.key,
                    kind=draft.kind,
                    label=draft.label,
                    session_id=draft.session_id,
                    version=draft.version,
                    start=draft.start,
                    end=max(draft.start, now if draft.end is None else draft.end),
                    open=still_open,
                    depth=depth,
                    parent=draft.parent,
                    status=draft.status,
                    end_version=draft.end_version,
                    model=draft.model,
                    usage=draft.usage,
                    cost=draft.cost,
                    first_token=draft.first_token,
                    child_id=draft.child_id,
                )
            )
            emit(draft.key, depth + 1)

    emit(None, 0)
    usage = Usage()
    costs: list[float] = []
    for bar in ordered:
        if bar.usage is not None:
            usage += bar.usage
        if bar.cost is not None:
            costs.append(bar.cost)
    run_bar = ordered[0] if ordered else None
    start = min((b.start for b in ordered), default=now)
    end = max((b.end for b in ordered if b.kind != "timer" or not b.open), default=start)
    return Trace(
        session_id=session_id,
        run_id=chosen,
        status=run_bar.status if run_bar is not None else "",
        start=start,
        end=max(end, start),
        bars=tuple(ordered),
        usage=usage,
        cost=sum(costs) if costs else None,
        live=any(b.open and b.kind != "timer" for b in ordered),
        runs=tuple(runs),
    )
