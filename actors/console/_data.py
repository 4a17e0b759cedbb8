"""What the console's pages show, folded from the log with the folds the CLI shows too.

The fleet and usage pages share one incremental fold (:class:`FleetFold`) over the whole
log: it applies the :class:`~actors._reading._sessions.SessionSummary` fold (the fold of
``powertrio sessions``) per session and per (session, day), so the console's tokens are
the CLI's. The log page never folds: it reads one window of versions (keyset on the
version), so it costs the same on a stream of ten events or a million.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import final

import attrs
import trio

from protocols import Usage
from protocols.codec import decode_record
from protocols.errors import CodecError
from runtime import EventStore, RecordedEvent
from runtime.lowlevel import TimerBook

from .._reading._log import SESSION_PREFIX, decode_or_none, session_id_of
from .._reading._sessions import SessionSummary, read_tree
from .._reading._tree import AgentTree
from .._session._budget import Price, price_for

__all__ = [
    "FleetFold",
    "LogPage",
    "OpenRequest",
    "RunSpan",
    "SessionView",
    "day_of",
    "log_page",
    "natural_key",
    "session_view",
    "state_at",
    "tree_order",
]

_PAGE = 2000
LOG_PAGE_SIZE = 50
"""Events on one page of the log."""
SCAN_LIMIT = 20_000
"""The most events one filtered page reads before it stops and offers the next window."""


def day_of(epoch: float) -> str:
    """The UTC day of an epoch time, ``YYYY-MM-DD`` (usage is bucketed by it)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")


# -- the fleet: every session, folded once and then incrementally -----------------------


@final
@attrs.define(eq=False)
class AgentRow:
    """One session of the fleet page: the CLI's summary and what the console adds."""

    summary: SessionSummary
    last_run: str | None = None
    """The id of its latest run."""
    last_run_at: float = 0.0
    errors: Counter[str] = attrs.Factory(Counter)
    """Failed runs by error code."""
    timers: TimerBook = attrs.Factory(TimerBook)
    """Its durable timers, folded from its own timer events (the runtime's own fold)."""

    @property
    def next_wake_up(self) -> float | None:
        """When its next timer is due (epoch seconds), if any is pending."""
        return self.timers.next_due


@final
@attrs.define(eq=False)
class FleetFold:
    """Every session of the log, folded once and then only the events appended since.

    ``refresh`` reads from the last position it saw; concurrent page loads share one
    fold (a lock keeps them from folding the same events twice).
    """

    prices: Mapping[str, Price] = attrs.Factory(dict)
    position: int = 0
    rows: dict[str, AgentRow] = attrs.Factory(dict)
    daily: dict[tuple[str, str], SessionSummary] = attrs.Factory(dict)
    """(session, UTC day) → the same fold over that day's events only (its tokens)."""
    daily_cost: defaultdict[tuple[str, str], float] = attrs.Factory(lambda: defaultdict(float))
    """(session, UTC day) → cost in USD at ``prices`` (models with no price cost 0)."""
    _lock: trio.Lock = attrs.Factory(trio.Lock)

    async def refresh(self, store: EventStore, *, budget: float | None = None) -> bool:
        """Fold the events appended since the last refresh; with ``budget`` (seconds),
        stop after the page that overruns it. Whether the fold reached the log's head."""
        from actors.events import AssistantRecorded, RunFinished, RunStarted  # noqa: PLC0415

        deadline = None if budget is None else time.monotonic() + budget
        async with self._lock:
            while True:
                page = await store.read_all(self.position + 1, limit=_PAGE)
                for record in page:
                    sid = session_id_of(record.stream)
                    if sid is None:
                        continue
                    row = self.rows.get(sid)
                    if row is None:
                        summary = SessionSummary(sid, created_at=record.recorded_at)
                        row = self.rows[sid] = AgentRow(summary)
                    row.summary.events += 1
                    row.summary.updated_at = record.recorded_at
                    try:
                        event = decode_record(record)
                    except CodecError as exc:
                        row.summary.error = row.summary.error or exc.code
                        row.summary.status = "failed"
                        continue
                    row.summary.apply(event)
                    row.timers = row.timers.evolve(event)
                    if isinstance(event, RunStarted):
                        row.last_run, row.last_run_at = event.run_id, record.recorded_at
                    elif isinstance(event, RunFinished) and event.status == "failed":
                        row.errors[event.error_code or "unknown"] += 1
                    elif isinstance(event, AssistantRecorded):
                        key = (sid, day_of(record.recorded_at))
                        daily = self.daily.get(key)
                        if daily is None:
                            daily = self.daily[key] = SessionSummary(sid)
                        daily.apply(event)
                        price = price_for(self.prices, event.model) if self.prices else None
                        if price is not None:
                            self.daily_cost[key] += price.cost(event.usage)
                if page:
                    self.position = page[-1].position
                if len(page) < _PAGE:
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return False

    def tokens_on(self, session_id: str, day: str) -> int:
        """Tokens ``session_id`` used on ``day`` (UTC), by the CLI's fold."""
        daily = self.daily.get((session_id, day))
        return 0 if daily is None else daily.prompt_tokens + daily.completion_tokens

    def days(self) -> list[str]:
        """Every day with usage, oldest first."""
        return sorted({day for _, day in self.daily})

    def errors_by_code(self) -> Counter[str]:
        """Failed runs of the whole fleet by error code."""
        total: Counter[str] = Counter()
        for row in self.rows.values():
            total.update(row.errors)
        return total


# -- a session: its tree, its runs and what it waits for ----------------------------------


@final
@attrs.frozen
class OpenRequest:
    """A human request no one has answered yet."""

    session_id: str
    request_id: str
    kind: str
    prompt: str


@final
@attrs.define
class RunSpan:
    """A run of the root session and the versions it spans (for the log's run filter)."""

    run_id: str
    first: int
    last: int | None = None
    status: str = "running"
    text: str = ""


@final
@attrs.frozen
class SessionView:
    """A session tree as its page shows it."""

    tree: AgentTree
    requests: tuple[OpenRequest, ...]
    runs: tuple[RunSpan, ...]
    version: int
    """The root stream's version."""
    entries: tuple[dict[str, object], ...]
    """The root's transcript entries (the shape of ``powertrio show --json``)."""
    position: int
    """The log's head when this view was read (live updates go on from there)."""


async def session_view(
    store: EventStore, root_id: str, *, live: bool, head: int | None = None
) -> SessionView:
    """The tree of ``root_id`` (the :class:`AgentTree` fold of ``powertrio tree``), its open human
    requests, the root's runs and transcript, in one read of the tree's streams.

    ``head``: fold only the events up to this position (a live page goes on from it);
    ``None``: every event the read found, whoever appended it.
    """
    from actors.events import HumanAnswered, HumanRequested, RunFinished, RunStarted  # noqa: PLC0415

    from .._reading._sessions import transcript_entry  # noqa: PLC0415  # the transcript line of `show`

    cut = head
    tree = AgentTree(root_id)
    requests: dict[tuple[str, str], OpenRequest] = {}
    runs: dict[str, RunSpan] = {}
    entries: list[dict[str, object]] = []
    version = 0
    for record in await read_tree(store, root_id):  # type: ignore[arg-type]
        if cut is not None and record.position > cut:
            continue
        event = decode_or_none(record)
        sid = session_id_of(record.stream)
        if event is None or sid is None:
            continue
        tree.apply(sid, event)
        if isinstance(event, HumanRequested):
            requests[(sid, event.request_id)] = OpenRequest(
                sid, event.request_id, event.kind, event.prompt
            )
        elif isinstance(event, HumanAnswered):
            requests.pop((sid, event.request_id), None)
        elif isinstance(event, RunFinished):
            for key in [k for k in requests if k[0] == sid]:
                del requests[key]
        if sid != root_id:
            continue
        version = record.version
        if isinstance(event, RunStarted):
            runs[event.run_id] = RunSpan(event.run_id, record.version, text=event.input)
        elif isinstance(event, RunFinished) and event.run_id in runs:
            span = runs[event.run_id]
            span.last, span.status = record.version, event.status
        entry = transcript_entry(record, event)
        if entry is not None:
            entries.append(entry)
    if not live:
        tree.mark_interrupted()
    return SessionView(
        tree=tree,
        requests=tuple(requests.values()),
        runs=tuple(runs.values()),
        version=version,
        entries=tuple(entries),
        position=cut if cut is not None else await store.head_position(),
    )


async def tree_events_since(
    store: EventStore, tree: AgentTree, position: int
) -> tuple[int, bool, bool]:
    """Fold the tree's events appended after ``position`` into ``tree``; the new
    position, whether anything of the tree changed, and whether its human requests may
    have (a request, an answer or a run's end was among the events)."""
    from .._reading._log import in_session_tree  # noqa: PLC0415

    changed = asked = False
    while True:
        page = await store.read_all(position + 1, limit=_PAGE)
        for record in page:
            sid = session_id_of(record.stream)
            if sid is None or not in_session_tree(tree.root_id, sid):
                continue
            event = decode_or_none(record)
            if event is not None:
                tree.apply(sid, event)
                changed = True
                asked = asked or record.type.startswith(("session.human", "session.run_"))
        if page:
            position = page[-1].position
        if len(page) < _PAGE:
            return position, changed, asked


# -- the log: one keyset window of versions --------------------------------------------------


@final
@attrs.frozen
class LogPage:
    """One page of a stream's events, newest first."""

    stream: str
    version: int
    """The stream's version (its newest event)."""
    records: tuple[RecordedEvent, ...]
    older: int | None
    """``before`` of the next (older) page, or ``None`` at the start of the stream."""
    scanned: int
    """Events read to fill the page (a filter may read more than it shows)."""


async def log_page(
    store: EventStore,
    stream: str,
    *,
    before: int | None = None,
    kind: str = "",
    low: int = 1,
    high: int | None = None,
    limit: int = LOG_PAGE_SIZE,
) -> LogPage:
    """The newest ``limit`` events of ``stream`` below version ``before`` (keyset).

    ``kind`` keeps only types that start with it (``session.tool`` keeps both tool events);
    ``low``..``high`` bound the versions (a run's span). A filtered page reads back in
    windows until it is full, at most :data:`SCAN_LIMIT` events, and then offers the next
    window: a page never reads the whole stream.
    """
    version = await store.stream_version(stream)
    top = version if high is None else min(high, version)
    if before is not None:
        top = min(top, before - 1)
    found: list[RecordedEvent] = []
    scanned = 0
    window = limit if not kind else max(limit, 500)
    while top >= low and len(found) < limit and scanned < SCAN_LIMIT:
        start = max(low, top - window + 1)
        chunk = await store.read(stream, start, limit=top - start + 1)
        scanned += len(chunk)
        for record in reversed(chunk):
            if len(found) < limit and (not kind or record.type.startswith(kind)):
                found.append(record)
                top = record.version - 1
            elif len(found) >= limit:
                break
        else:
            top = start - 1
    return LogPage(
        stream=stream,
        version=version,
        records=tuple(found),
        older=top + 1 if top >= low else None,
        scanned=scanned,
    )


async def run_span(store: EventStore, session_id: str, run_id: str) -> RunSpan | None:
    """The versions run ``run_id`` of ``session_id`` spans (a scan of the stream's run
    boundaries; only the two run events are decoded)."""
    span: RunSpan | None = None
    stream = SESSION_PREFIX + session_id
    version = 1
    while True:
        page = await store.read(stream, version, limit=_PAGE)
        for record in page:
            if record.type not in {"session.run_started", "session.run_finished"}:
                continue
            event = decode_or_none(record)
            found = getattr(event, "run_id", None)
            if found != run_id:
                continue
            if span is None:
                span = RunSpan(run_id, record.version)
            else:
                span.last, span.status = record.version, str(getattr(event, "status", ""))
                return span
        if len(page) < _PAGE:
            return span
        version = page[-1].version + 1


async def state_at(store: EventStore, session_id: str, version: int) -> object:
    """The session's state (``SessionState``) folded up to ``version``: time travel."""
    from actors._session._events import SessionState, evolve  # noqa: PLC0415

    state = SessionState()
    stream = SESSION_PREFIX + session_id
    at = 1
    while at <= version:
        page = await store.read(stream, at, limit=min(_PAGE, version - at + 1))
        for record in page:
            event = decode_or_none(record)
            if event is not None:
                state = evolve(state, event)
        if not page:
            break
        at = page[-1].version + 1
    return state


def usage_total(summary: SessionSummary) -> Usage:
    """A summary's tokens as a :class:`Usage`."""
    return Usage(prompt_tokens=summary.prompt_tokens, completion_tokens=summary.completion_tokens)


def now_day() -> str:
    """Today (UTC)."""
    return day_of(time.time())


def natural_key(text: str) -> tuple[str | int, ...]:
    """Sorts names as people count: ``watch-2`` before ``watch-10`` (runs of digits
    compare as numbers; text and numbers alternate, so the parts always compare)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(text)))


_DIGITS = re.compile(r"(\d+)")


def tree_order(sid: str) -> tuple[tuple[str | int, ...], tuple[int, ...]]:
    """A session tree's order: roots in natural order, each followed by its sub-agents
    in spawn order (``root.2`` before ``root.10``)."""
    root, *path = sid.split(".")
    return (natural_key(root), tuple(int(p) if p.isdigit() else 0 for p in path))
