"""The trace page: read one run's events, fold them into bars (:mod:`._trace`), lay the
bars out on one time axis as SVG.

The page reads the root stream's run boundaries (decoding only the run events), then the
chosen run's versions and the whole streams of the sub-agents it spawned; it never folds
the session's other runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import final

import attrs
import orjson
from markupsafe import Markup, escape

from runtime import EventStore, RecordedEvent

from .._reading._log import SESSION_PREFIX, decode_or_none
from .._session._budget import Price
from .._session._events import ChildSpawned, RunFinished, RunStarted
from ._trace import Bar, Trace, TraceEvent, trace_bars

__all__ = ["TraceLayout", "event_fields", "layout", "load_trace", "svg_rows"]

_PAGE = 2000
WIDTH = 1160
"""The SVG's width; the bars' area is what the labels leave."""
LABEL_WIDTH = 420
ROW = 22


async def _read(store: EventStore, stream: str, low: int, high: int | None) -> list[RecordedEvent]:
    records: list[RecordedEvent] = []
    at = low
    while high is None or at <= high:
        limit = _PAGE if high is None else min(_PAGE, high - at + 1)
        page = await store.read(stream, at, limit=limit)
        records.extend(page)
        if len(page) < limit:
            break
        at = page[-1].version + 1
    return records


async def load_trace(
    store: EventStore,
    session_id: str,
    *,
    run_id: str | None,
    now: float,
    prices: Mapping[str, Price] | None = None,
) -> Trace:
    """The trace of run ``run_id`` of ``session_id`` (default: its latest), from the log.

    One read of the session's stream: every run's start is decoded (the page's run
    picker), the rest only inside the chosen run; sub-agents' streams are read whole.
    """
    events: list[TraceEvent] = []
    kept: list[RecordedEvent] = []
    inside = False
    for record in await _read(store, SESSION_PREFIX + session_id, 1, None):
        if record.type == "session.run_started":
            event = decode_or_none(record)
            if isinstance(event, RunStarted):
                events.append(TraceEvent(session_id, record.version, record.recorded_at, event))
                if run_id is None or event.run_id == run_id:
                    # The latest run wins when none is named: forget an earlier one.
                    kept, inside = [], True
                continue
        if inside:
            kept.append(record)
            if record.type == "session.run_finished" and run_id is not None:
                finished = decode_or_none(record)
                inside = not (isinstance(finished, RunFinished) and finished.run_id == run_id)
    todo: list[tuple[str, list[RecordedEvent]]] = [(session_id, kept)]
    while todo:
        sid, records = todo.pop()
        for record in records:
            event = decode_or_none(record)
            if event is None:
                continue
            events.append(TraceEvent(sid, record.version, record.recorded_at, event))
            if isinstance(event, ChildSpawned):
                child = await _read(store, SESSION_PREFIX + event.child_id, 1, None)
                todo.append((event.child_id, child))
    # The fold reads each session's events in stream order; sessions do not interleave.
    events.sort(key=lambda e: (e.session_id, e.version))
    return trace_bars(events, session_id, now=now, run_id=run_id, prices=prices)


@final
@attrs.frozen
class Row:
    """One bar as the SVG draws it."""

    bar: Bar
    y: int
    x: float
    w: float
    indent: int
    text: str
    summary: str


@final
@attrs.frozen
class TraceLayout:
    """The bars placed: one row each, x by time."""

    rows: tuple[Row, ...]
    ticks: tuple[tuple[float, str], ...]
    width: int
    height: int
    left: int
    row: int


def layout(trace: Trace) -> TraceLayout:
    """Where each bar goes: one row per bar, on one axis from the first start to the last
    end (a pending timer is cut at that end)."""
    span = max(trace.end - trace.start, 1e-6)
    room = WIDTH - LABEL_WIDTH - 10
    rows = []
    for i, bar in enumerate(trace.bars):
        start = min(max(bar.start, trace.start), trace.end)
        end = min(bar.end, trace.end)
        x = LABEL_WIDTH + room * (start - trace.start) / span
        w = max(2.0, room * (end - start) / span)
        rows.append(
            Row(
                bar=bar,
                y=24 + i * ROW,
                x=round(x, 1),
                w=round(min(w, WIDTH - 10 - x), 1),
                indent=8 + 14 * min(bar.depth, 12),
                text=_short(bar.label, 44 - 2 * min(bar.depth, 12)) + " · " + seconds(bar),
                summary=summary(bar),
            )
        )
    ticks = tuple(
        (round(LABEL_WIDTH + room * k / 5, 1), _fmt_seconds(span * k / 5)) for k in range(6)
    )
    return TraceLayout(
        rows=tuple(rows),
        ticks=ticks,
        width=WIDTH,
        height=34 + len(rows) * ROW,
        left=LABEL_WIDTH,
        row=ROW,
    )


def svg_rows(lay: TraceLayout) -> Markup:
    """The bars' SVG, one ``<g>`` each. Written here rather than in a template: a run of
    1,000 rounds has 3,000 bars, which a Jinja loop renders six times slower. Every text
    goes through :func:`markupsafe.escape`; the rest are numbers."""
    width, height = lay.width, lay.row - 8
    parts = []
    for r in lay.rows:
        b = r.bar
        kind = escape(b.kind)
        child = f' data-child="{escape(b.child_id)}"' if b.child_id else ""
        parts.append(
            f'<g class="bar kind-{kind}{" open" if b.open else ""}" id="bar-{escape(b.key)}" '
            f'tabindex="0" data-kind="{kind}" data-session="{escape(b.session_id)}" '
            f'data-version="{int(b.version)}"{child}><title>{escape(r.summary)}</title>'
            f'<rect class="row" x="0" y="{r.y}" width="{width}" height="{lay.row}"/>'
            f'<text x="{r.indent}" y="{r.y + 15}" font-size="12">{escape(r.text)}</text>'
            f'<rect class="span" x="{r.x}" y="{r.y + 4}" width="{r.w}" height="{height}" '
            'rx="2"/></g>\n'
        )
    return Markup("".join(parts))  # every text above is escaped


def seconds(bar: Bar) -> str:
    """The bar's duration for people (``open`` while it runs)."""
    if bar.open and bar.kind == "timer":
        return "pending"
    text = _fmt_seconds(bar.duration)
    return text + "…" if bar.open else text


def summary(bar: Bar) -> str:
    """What a bar's tooltip and the detail panel say of it."""
    parts = [bar.label, bar.status, seconds(bar)]
    if bar.kind == "model":
        first = bar.first_token
        parts.append("first token " + ("not recorded" if first is None else f"{first:.3f} s"))
    if bar.usage is not None:
        parts.append(f"{bar.usage.prompt_tokens:,} in + {bar.usage.completion_tokens:,} out tokens")
    if bar.cost is not None:
        parts.append(f"${bar.cost:,.6f}")
    parts.append(
        f"{bar.session_id} v{bar.version}" + (f" to v{bar.end_version}" if bar.end_version else "")
    )
    return " · ".join(p for p in parts if p)


def event_fields(data: bytes) -> list[tuple[str, str]]:
    """An event's stored JSON as (field, pretty JSON) pairs, for a collapsible view."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return [("(raw)", data.decode("utf-8", errors="replace"))]
    if not isinstance(value, dict):
        return [("(value)", orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())]
    return [
        (str(k), v if isinstance(v, str) else orjson.dumps(v, option=orjson.OPT_INDENT_2).decode())
        for k, v in value.items()
    ]


def _fmt_seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"
