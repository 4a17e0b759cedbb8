"""The console's ASGI app: Starlette routes over one event store, pages rendered on the
server, live updates as server-sent events.

Security, in one place: every page goes through the autoescaping templates; a strict
Content-Security-Policy allows the console's own script file only; every mutating
request (a POST) must carry the app's CSRF token (a form field or ``X-CSRF-Token``), which
only the console's own pages hold; with a bearer token set, every request must carry it
(``Authorization: Bearer``, or the cookie that ``?token=`` sets once).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import final
from urllib.parse import quote, urlencode

import attrs
import orjson
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from protocols import SystemMessage
from protocols.errors import ConfigError, PowertrioError, StoreError, StreamNotFoundError
from runtime import EventStore

from .._reading._format import fmt_age, fmt_iso
from .._reading._log import SESSION_PREFIX
from .._session._budget import Price
from ._chart import stacked_bars
from ._data import (
    LOG_PAGE_SIZE,
    FleetFold,
    SessionView,
    log_page,
    natural_key,
    now_day,
    run_span,
    session_view,
    state_at,
    tree_events_since,
    tree_order,
)
from ._fleet import LogFleetSource
from ._live import LogBeacon, change_events
from ._live import sse as _sse
from ._operator import FleetSource, Operator, Verdict
from ._replay_view import side_by_side
from ._static import CACHE_FOREVER, CONSOLE_CSS, CONSOLE_JS
from ._templates import fragment, render

__all__ = ["console_app"]

HEARTBEAT_SECONDS = 5.0
"""How often a live page's stream says it is still there when the log is quiet (the page
calls its feed lost after a few missed)."""
FOLD_BUDGET_SECONDS = 1.0
"""The most a fleet or usage page folds before it answers with what it has (a long log's
first fold spreads over a few loads)."""
TRANSCRIPT_ENTRIES = 200
"""The newest transcript entries the session page shows (the log page has them all)."""
_COOKIE = "powertrio_ui"
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_STATIC_HEADERS = {"Cache-Control": CACHE_FOREVER}
_KINDS = (
    "session.run",
    "session.assistant",
    "session.tool",
    "session.human",
    "session.child",
    "session.follow_up",
    "session.cancel",
    "session.context",
    "timer",
)


@final
@attrs.define(eq=False)
class _Console:
    store: EventStore
    operator: Operator | None
    token: str | None
    live: Callable[[], bool]
    fleet_source: FleetSource | None
    where: str
    beacon: LogBeacon
    csrf: str = attrs.Factory(lambda: secrets.token_urlsafe(32))
    fold: FleetFold = attrs.Factory(FleetFold)
    flashes: dict[str, tuple[str, str]] = attrs.Factory(dict)

    # -- common ------------------------------------------------------------------------

    def page(self, request: Request, name: str, *, title: str, **values: object) -> HTMLResponse:
        flash_id = request.query_params.get("flash", "")
        kind, text = self.flashes.pop(flash_id, ("", ""))
        html = render(
            name,
            root=_root(request),
            csrf=self.csrf,
            title=title,
            where=self.where,
            flash=text,
            flash_kind=kind,
            writable=self.operator is not None,
            **values,
        )
        return HTMLResponse(html)

    def flash(self, kind: str, text: str) -> str:
        flash_id = secrets.token_urlsafe(8)
        self.flashes[flash_id] = (kind, text)
        while len(self.flashes) > 100:
            del self.flashes[next(iter(self.flashes))]
        return flash_id

    def error_page(self, request: Request, error: PowertrioError, status: int) -> Response:
        if _wants_json(request):
            body = {"error": {"code": error.code, "message": str(error)}}
            return JSONResponse(body, status_code=status)
        response = self.page(
            request,
            "error",
            title="error",
            heading="Not possible",
            code=error.code,
            message=str(error),
        )
        response.status_code = status
        return response

    async def resolve(self, given: str) -> str:
        """A session id, a stream name or a unique prefix (as the CLI takes them)."""
        from .._reading._log import resolve_session  # noqa: PLC0415

        return await resolve_session(self.store, given)  # type: ignore[arg-type]

    # -- pages ---------------------------------------------------------------------------

    async def fleet(self, request: Request) -> Response:
        # A page never waits for a whole long log: it shows what is folded so far.
        caught_up = await self.fold.refresh(self.store, budget=FOLD_BUDGET_SECONDS)
        agents: Mapping[str, Mapping[str, str]] = {}
        columns: tuple[str, ...] = ()
        if self.fleet_source is not None:
            agents = await self.fleet_source.agents()
            columns = tuple(self.fleet_source.columns)
        nodes = self._nodes()
        live, now, today = self.live(), time.time(), now_day()
        rows = []
        for sid, row in sorted(self.fold.rows.items(), key=lambda kv: tree_order(kv[0])):
            s = row.summary
            status = "interrupted" if s.status == "running" and not live else s.status
            text = status.replace("_", " ") + (f" [{s.error}]" if s.error else "")
            rows.append(
                {
                    "id": sid,
                    "root": sid.split(".")[0],
                    "sub": "." in sid,
                    "depth": min(s.depth, 4),
                    "status": status,
                    "status_text": text,
                    "runs": s.runs,
                    "rounds": s.rounds,
                    "tokens": s.prompt_tokens + s.completion_tokens,
                    "today": self.fold.tokens_on(sid, today),
                    "last_run": row.last_run,
                    "updated": fmt_age(now - s.updated_at) + " ago",
                    "errors": sorted(row.errors.items()),
                    "wake_up": _wake_up(row.next_wake_up, now),
                }
            )
        head = self.fold.position if caught_up else await self.store.head_position()
        fleet = [
            {"name": name, **values}
            for name, values in sorted(agents.items(), key=lambda kv: natural_key(kv[0]))
        ]
        if _wants_json(request):
            return JSONResponse(
                {
                    "agents": fleet,
                    "nodes": nodes,
                    "sessions": rows,
                    "position": self.fold.position,
                    "head": head,
                }
            )
        note = "" if fleet else "agents and usage from the log"
        if not caught_up:
            note = (
                f"still folding the log: {self.fold.position:,} of {head:,} events so far "
                "(reload for more)"
            )
        return self.page(
            request,
            "fleet",
            title="fleet",
            rows=rows,
            events=self.fold.position,
            today=today,
            errors=sorted(self.fold.errors_by_code().items()),
            agents=fleet,
            agent_columns=columns,
            nodes=nodes,
            fleet_note=note,
            strips=self._strips(request),
        )

    def _nodes(self) -> list[dict[str, object]]:
        """The fleet's nodes as ``powertrio fleet status --json`` has them: one whose lease
        lapsed with no recorded stop is ``lost`` (known only to the log's own source)."""
        source = self.fleet_source
        if not isinstance(source, LogFleetSource):
            return []
        return [
            {**attrs.asdict(n), "started_at": fmt_iso(n.started_at)}
            for n in sorted(source.nodes, key=lambda n: natural_key(n.name))
        ]

    def _strips(self, request: Request) -> dict[str, Markup]:
        """Each fleet agent's latest runs as a strip of small bars (height: duration)."""
        from ._pictures import runs_strip  # noqa: PLC0415

        source = self.fleet_source
        if not isinstance(source, LogFleetSource):
            return {}
        return {
            name: runs_strip(runs, root=_root(request), now=time.time())
            for name, runs in source.recent.items()
        }

    async def usage(self, request: Request) -> Response:
        await self.fold.refresh(self.store, budget=FOLD_BUDGET_SECONDS)
        days = self.fold.days()
        tokens: dict[str, list[float]] = {}
        cost: dict[str, list[float]] = {}
        for (sid, day), summary in self.fold.daily.items():
            index = days.index(day)
            tokens.setdefault(sid, [0.0] * len(days))[index] += (
                summary.prompt_tokens + summary.completion_tokens
            )
            cost.setdefault(sid, [0.0] * len(days))[index] += self.fold.daily_cost.get(
                (sid, day), 0.0
            )
        agents = [
            {
                "id": sid,
                "root": sid.split(".")[0],
                "counts": [int(v) for v in values],
                "total": int(sum(values)),
            }
            for sid, values in sorted(tokens.items(), key=lambda kv: -sum(kv[1]))
        ]
        if _wants_json(request):
            return JSONResponse({"days": days, "agents": agents})
        priced = bool(self.fold.prices)
        return self.page(
            request,
            "usage",
            title="usage",
            days=days,
            agents=agents,
            priced=priced,
            tokens_svg=stacked_bars("tokens per day", days, tokens),
            cost_svg=stacked_bars("cost per day (USD)", days, cost, unit="$") if priced else "",
            group_charts=await self._group_charts(days, priced=priced),
        )

    async def _group_charts(self, days: list[str], *, priced: bool) -> list[tuple[str, Markup]]:
        """Tokens (and cost) per day per session tree, and per fleet agent if a fleet file
        declared agents: the same fold as the charts above, summed by group."""
        from ._pictures import invert, usage_by_group  # noqa: PLC0415

        tokens = {
            key: float(s.prompt_tokens + s.completion_tokens) for key, s in self.fold.daily.items()
        }
        groups: list[tuple[str, Mapping[str, str] | None]] = [("tree", None)]
        source = self.fleet_source
        if isinstance(source, LogFleetSource):
            await source.agents()
            if source.sessions:
                groups.append(("fleet agent", invert(source.sessions)))
        charts = []
        for name, group_of in groups:
            charts.append(
                (
                    f"Tokens per {name}",
                    stacked_bars(
                        f"tokens per day per {name}", days, usage_by_group(tokens, days, group_of)
                    ),
                )
            )
            if priced:
                cost = usage_by_group(self.fold.daily_cost, days, group_of)
                charts.append(
                    (
                        f"Cost per {name}",
                        stacked_bars(f"cost per day per {name} (USD)", days, cost, unit="$"),
                    )
                )
        return charts

    async def session(self, request: Request) -> Response:
        sid = await self.resolve(request.path_params["sid"])
        view = await session_view(self.store, sid, live=self.live())
        if _wants_json(request):
            return JSONResponse(
                {
                    "session_id": sid,
                    "version": view.version,
                    "tree": view.tree.to_json(),
                    "requests": [attrs.asdict(q) for q in view.requests],
                    "runs": [attrs.asdict(r) for r in view.runs],
                }
            )
        entries = view.entries[-TRANSCRIPT_ENTRIES:]
        return self.page(
            request,
            "session",
            title=f"session {sid}",
            sid=sid,
            version=view.version,
            tree_html=self._tree_html(view),
            requests_html=self._requests_html(request, sid, view),
            runs=view.runs,
            open_run=any(r.status == "running" for r in view.runs),
            entries=entries,
            omitted=len(view.entries) - len(entries),
        )

    def _tree_html(self, view: SessionView) -> Markup:
        tree = view.tree
        return fragment(
            "tree",
            nodes=[tree.root.to_json(tree)],
            count=len(tree.nodes),
            total=tree.total_tokens,
        )

    def _requests_html(self, request: Request, sid: str, view: SessionView) -> Markup:
        return fragment(
            "requests",
            requests=view.requests,
            writable=self.operator is not None,
            csrf=self.csrf,
            root=_root(request),
            sid=sid,
        )

    async def stream(self, request: Request) -> Response:
        """Server-sent events: the tree (and the open requests) each time the tree's
        streams grow, whoever appended (the log's head as the store follows it); a
        ``changed`` event for the page's other live parts; ``offline``/``online`` as the
        feed is lost and back."""
        sid = await self.resolve(request.path_params["sid"])
        beacon = self.beacon

        async def events() -> AsyncIterator[str]:
            beacon.join()
            try:
                shown = await beacon.first()
                while shown[0] < 0:  # no head seen yet: the page keeps what it rendered
                    yield _sse("offline", shown[1]) if shown[1] else _sse("beat", "")
                    shown = await beacon.next_state(shown, HEARTBEAT_SECONDS)
                view = await session_view(self.store, sid, live=self.live(), head=shown[0])
                tree, position = view.tree, view.position
                shown_requests = view.requests
                # Both at once: the page may have been rendered before what this view saw.
                yield _sse("tree", self._tree_html(view))
                yield _sse("requests", self._requests_html(request, sid, view))
                if shown[1]:
                    yield _sse("offline", shown[1])
                while True:
                    state, shown = shown, await beacon.next_state(shown, HEARTBEAT_SECONDS)
                    if state == shown:
                        yield _sse("beat", "")
                        continue
                    if state[1] != shown[1]:
                        yield _sse("offline", shown[1]) if shown[1] else _sse("online", "")
                    if shown[1]:
                        continue
                    try:
                        position, changed, asked = await tree_events_since(
                            self.store, tree, position
                        )
                        fresh = None
                        if asked:
                            fresh = await session_view(self.store, sid, live=self.live())
                    except StoreError as exc:
                        yield _sse("offline", f"[{exc.code}] {exc}")
                        continue
                    if not changed:
                        continue
                    view = attrs.evolve(view, tree=tree)
                    yield _sse("tree", self._tree_html(view))
                    yield _sse("changed", str(position))
                    if fresh is not None and fresh.requests != shown_requests:
                        shown_requests = fresh.requests
                        yield _sse("requests", self._requests_html(request, sid, fresh))
            finally:
                beacon.leave()

        return _event_stream(events())

    async def changes(self, request: Request) -> Response:
        """Server-sent events: ``changed`` (with the log's head) each time the log grows,
        whoever appended; ``offline``/``online`` as the feed is lost and back. The live
        pages fetch themselves again on it and swap their live parts in."""
        return _event_stream(change_events(self.beacon, HEARTBEAT_SECONDS))

    async def log(self, request: Request) -> Response:
        sid = await self.resolve(request.path_params["sid"])
        params = request.query_params
        before = _int_param(params.get("before"), "before")
        kind = params.get("kind", "")
        run = params.get("run", "")
        span = None
        low, high = 1, None
        if run:
            span = await run_span(self.store, sid, run)
            if span is None:
                raise StreamNotFoundError(f"{SESSION_PREFIX}{sid} (run {run})")
            low, high = span.first, span.last
        page = await log_page(
            self.store, SESSION_PREFIX + sid, before=before, kind=kind, low=low, high=high
        )
        rows = [
            {
                "version": r.version,
                "position": r.position,
                "at": fmt_iso(r.recorded_at),
                "type": r.type,
                "data": _shorten(r.data.decode("utf-8", errors="replace"), 600),
            }
            for r in page.records
        ]
        if _wants_json(request):
            return JSONResponse({"version": page.version, "events": rows, "older": page.older})
        keep = {k: v for k, v in (("kind", kind), ("run", run)) if v}
        older = urlencode(keep | {"before": page.older}) if page.older else ""
        newer = ""
        if before is not None and before <= page.version:
            newer = urlencode(keep | {"before": min(page.version + 1, before + LOG_PAGE_SIZE)})
        return self.page(
            request,
            "log",
            title=f"log {sid}",
            sid=sid,
            page=page,
            rows=rows,
            kinds=_KINDS,
            kind=kind,
            run=run,
            span=span,
            older=older,
            newer=newer,
            live_log=before is None,
        )

    async def state(self, request: Request) -> Response:
        sid = await self.resolve(request.path_params["sid"])
        version = await self.store.stream_version(SESSION_PREFIX + sid)
        at = _int_param(request.query_params.get("at"), "at") or version
        at = max(1, min(at, version))
        state = await state_at(self.store, sid, at)
        from actors import SessionState  # noqa: PLC0415

        assert isinstance(state, SessionState)
        run = state.run
        facts = [
            ("run", run.started.run_id if run is not None else "(idle)"),
            ("runs finished", str(len(state.results))),
            ("waiting for", ", ".join(r.request_id for r in run.human) if run else ""),
            ("queued", ", ".join(q.run_id for q in state.queued)),
            ("sub-agents", ", ".join(c.child_id for c in state.children)),
            ("timers", str(len(state.timers.pending))),
            ("tokens", f"{state.usage.total_tokens:,}"),
            ("parent", state.parent_id or ""),
        ]
        messages = [{"role": "system", "text": state.system_prompt}] if state.system_prompt else []
        for message in state.transcript:
            role = "system" if isinstance(message, SystemMessage) else message.role
            text = getattr(message, "text", None) or getattr(message, "content", "") or ""
            calls = getattr(message, "tool_calls", ())
            if calls:
                text = f"{text}\n" + "\n".join(f"→ {c.name}({c.arguments})" for c in calls)
            messages.append({"role": role, "text": str(text)})
        if _wants_json(request):
            return JSONResponse({"at": at, "facts": dict(facts), "messages": messages})
        return self.page(
            request,
            "state",
            title=f"{sid} at v{at}",
            sid=sid,
            at=at,
            facts=facts,
            messages=messages,
        )

    async def replay(self, request: Request) -> Response:
        from actors import replay_session  # noqa: PLC0415
        from protocols.errors import ReplayDivergenceError, ReplayError  # noqa: PLC0415

        from .._reading._sessions import recorded_setup  # noqa: PLC0415

        sid = await self.resolve(request.path_params["sid"])
        from_version = _int_param(request.query_params.get("from"), "from") or 0
        setup = await recorded_setup(self.store, sid)  # type: ignore[arg-type]
        divergence: ReplayDivergenceError | None = None
        error = ""
        nodes: list[dict[str, object]] = []
        checked = 0
        try:
            replayed = await replay_session(
                self.store,
                sid,
                recorded_tools=True,
                model=setup.model,
                max_tokens=setup.max_tokens,
                temperature=setup.temperature,
                from_version=from_version,
            )
            checked = replayed.total_checked
            todo = [replayed]
            while todo:
                node = todo.pop(0)
                nodes.append(
                    {
                        "session_id": node.session_id,
                        "version": node.version,
                        "checked": node.checked,
                    }
                )
                todo.extend(node.children)
        except ReplayDivergenceError as exc:
            divergence = exc
        except ReplayError as exc:
            error = f"[{exc.code}] {exc}"
        diff = []
        if divergence is not None:
            for line in divergence.difference.splitlines():
                cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
                diff.append({"cls": cls, "text": line})
        if _wants_json(request):
            return JSONResponse(
                {
                    "ok": divergence is None and not error,
                    "from": from_version,
                    "checked": checked,
                    "divergence": None
                    if divergence is None
                    else {
                        "stream": divergence.stream,
                        "version": divergence.version,
                        "event_type": divergence.event_type,
                        "difference": divergence.difference,
                    },
                    "error": error or None,
                }
            )
        return self.page(
            request,
            "replay",
            title=f"replay {sid}",
            sid=sid,
            from_version=from_version,
            divergence=divergence,
            diff=diff,
            error=error,
            checked=checked,
            nodes=nodes,
            rows=side_by_side(divergence.difference) if divergence is not None else [],
        )

    async def trace(self, request: Request) -> Response:
        """The trace of a run: its bars on one time axis (a live run's refresh themselves)."""
        from ._trace_view import layout, load_trace, svg_rows  # noqa: PLC0415

        sid = await self.resolve(request.path_params["sid"])
        run = request.query_params.get("run") or None
        trace = await load_trace(
            self.store, sid, run_id=run, now=time.time(), prices=self.fold.prices
        )
        if run is not None and run not in trace.runs:
            raise StreamNotFoundError(f"{SESSION_PREFIX}{sid} (run {run})")
        if not self.live() and trace.live:
            trace = attrs.evolve(trace, live=False)
        if _wants_json(request):
            return JSONResponse(
                {
                    "session_id": sid,
                    "run_id": trace.run_id,
                    "status": trace.status,
                    "start": trace.start,
                    "end": trace.end,
                    "runs": list(trace.runs),
                    "bars": [attrs.asdict(b) for b in trace.bars],
                }
            )
        lay = layout(trace)
        chart = fragment("trace_chart", trace=trace, lay=lay, rows_svg=svg_rows(lay))
        if request.query_params.get("part") == "chart":
            return HTMLResponse(chart, headers={"Cache-Control": "no-store"})
        title = f"trace {sid}" + (f" {trace.run_id}" if trace.run_id else "")
        return self.page(request, "trace", title=title, sid=sid, trace=trace, chart_html=chart)

    async def event(self, request: Request) -> Response:
        """One event of a session, pretty-printed, with the links to act from there."""
        from ._trace_view import event_fields  # noqa: PLC0415

        sid = await self.resolve(request.path_params["sid"])
        version = _int_param(request.query_params.get("v"), "v") or 1
        found = await self.store.read(SESSION_PREFIX + sid, version, limit=1)
        if not found or found[0].version != version:
            raise StreamNotFoundError(f"{SESSION_PREFIX}{sid} (version {version})")
        record = found[0]
        html = render(
            "trace_event",
            root=_root(request),
            sid=sid,
            record=record,
            at=fmt_iso(record.recorded_at),
            fields=event_fields(record.data),
            child=request.query_params.get("child", ""),
            writable=self.operator is not None,
            csrf=self.csrf,
        )
        return HTMLResponse(html)

    # -- actions -------------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        """A POST: check the CSRF token, ask the operator, redirect back (or JSON)."""
        form: Mapping[str, object]
        if request.headers.get("content-type", "").startswith("application/json"):
            body = orjson.loads(await request.body() or b"{}")
            form = body if isinstance(body, dict) else {}
        else:
            form = dict(await request.form())
        given = request.headers.get("x-csrf-token") or str(form.get("csrf", ""))
        if not given or not hmac.compare_digest(given.encode(), self.csrf.encode()):
            return PlainTextResponse(
                "forbidden: this action needs the console's CSRF token", status_code=403
            )
        if self.operator is None:
            return PlainTextResponse(
                "this console is read-only: no operator drives its sessions", status_code=409
            )
        action = request.path_params["action"]
        sid = await self.resolve(request.path_params["sid"])
        back = str(form.get("back") or sid).split(".")[0]
        new_id: str | None = None
        try:
            if action == "follow-up":
                text = str(form.get("text", "")).strip()
                if not text:
                    raise ConfigError("the follow-up is empty: write something for the model")
                note = await self.operator.follow_up(sid, text)
            elif action == "answer":
                verdict = str(form.get("verdict", "reply"))
                if verdict not in {"reply", "approve", "deny"}:
                    raise ConfigError(f"verdict must be reply, approve or deny, got {verdict!r}")
                checked: Verdict = verdict  # type: ignore[assignment]
                note = await self.operator.answer(
                    sid, str(form.get("request", "")), str(form.get("answer", "")), checked
                )
            elif action == "cancel":
                note = await self.operator.cancel(
                    sid, str(form.get("reason", "")) or "from the console"
                )
            elif action == "fork":
                at = _int_param(str(form.get("at", "")), "at")
                if at is None or at < 1:
                    raise ConfigError("fork needs a version of at least 1 (the last event to keep)")
                wanted = str(form.get("as", "")).strip() or None
                new_id = await self.operator.fork(sid, at, wanted)
                note = f"forked {sid} at version {at} as {new_id}"
                back = new_id
            else:
                return PlainTextResponse("no such action", status_code=404)
        except PowertrioError as exc:
            if _wants_json(request):
                return self.error_page(request, exc, 409)
            flash_id = self.flash("error", f"[{exc.code}] {exc}")
            return RedirectResponse(
                f"{_root(request)}/sessions/{quote(back, safe='')}?flash={flash_id}",
                status_code=303,
            )
        if _wants_json(request):
            return JSONResponse({"ok": True, "note": note, "session_id": new_id or sid})
        flash_id = self.flash("ok", note)
        return RedirectResponse(
            f"{_root(request)}/sessions/{quote(back, safe='')}?flash={flash_id}", status_code=303
        )

    async def csrf_token(self, request: Request) -> Response:
        return JSONResponse({"csrf": self.csrf})


# -- helpers ---------------------------------------------------------------------------------


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(f"{_root(request)}/api/")


def _int_param(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {text!r}") from None


def _wake_up(due: float | None, now: float) -> str:
    if due is None:
        return ""
    return "due" if due <= now else "in " + fmt_age(due - now)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _event_stream(events: AsyncIterator[str]) -> Response:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


@final
class _Guard:
    """The outer layer: the bearer token, the security headers, errors as pages."""

    def __init__(self, app: ASGIApp, console: _Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        token = self.console.token
        response: Response
        if token is None and not _loopback_host(request.headers.get("host", "")):
            # No token: the console trusts whoever reaches loopback. A page of another
            # site whose name was re-pointed at 127.0.0.1 (DNS rebinding) comes with its
            # own name in Host; it gets nothing.
            response = PlainTextResponse(
                "forbidden: with no token this console answers only to a loopback address "
                "(127.0.0.1, localhost, [::1]); give it --token to serve other names",
                status_code=403,
            )
            await response(scope, receive, send)
            return
        if token is not None:
            given = request.query_params.get("token")
            if given is not None and hmac.compare_digest(given.encode(), token.encode()):
                # Trade the token in the address for a cookie, and drop it from the address.
                response = RedirectResponse(request.url.path, status_code=303)
                response.set_cookie(_COOKIE, token, httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
            if not _authorised(request, token):
                response = PlainTextResponse(
                    "unauthorised: this console needs its token (open /?token=... once, or "
                    "send Authorization: Bearer ...)",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return

        async def send_with_headers(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))  # type: ignore[call-overload]
                headers += [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                ]
                message = message | {"headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)  # type: ignore[arg-type]


def _loopback_host(host: str) -> bool:
    """Whether a Host header names this machine's loopback (any port)."""
    from ._serve import is_loopback  # noqa: PLC0415

    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if host.startswith("["):
        name = host[1:].split("]", 1)[0]
    return is_loopback(name)


def _authorised(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer ") and hmac.compare_digest(
        header[len("Bearer ") :].encode(), token.encode()
    ):
        return True
    cookie = request.cookies.get(_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), token.encode())


def console_app(
    store: EventStore,
    *,
    operator: Operator | None = None,
    token: str | None = None,
    live: Callable[[], bool] | None = None,
    prices: Mapping[str, Price] | None = None,
    fleet: FleetSource | None = None,
    where: str = "",
) -> ASGIApp:
    """The web console over ``store``, as an ASGI app (mount it, or serve it with
    :func:`serve_console`).

    Args:
        store (EventStore): the log it shows (read only, but through ``operator``).
        operator (Operator | None): what acts on sessions (follow-ups, answers, cancels,
            forks); ``None``: a read-only console, with no forms.
        token (str | None): a bearer token every request must carry; required by
            :func:`serve_console` beyond loopback.
        live (Callable[[], bool] | None): whether a process drives the log's sessions now
            (else an open run shows as ``interrupted``, as in the CLI); default: yes.
        prices (Mapping[str, Price] | None): model prices, for the cost chart.
        fleet (FleetSource | None): the fleet's agents for the fleet page; default: the
            agents a fleet file declared in this log (``powertrio fleet apply``), with
            their status as ``powertrio fleet status`` folds it.
        where (str): what the header says the console shows (e.g. the log's path).
    """
    console = _Console(
        store=store,
        operator=operator,
        token=token,
        live=live or (lambda: True),
        fleet_source=fleet if fleet is not None else LogFleetSource(store),
        where=where,
        beacon=LogBeacon(store),
        fold=FleetFold(prices=dict(prices or {})),
    )

    async def js(request: Request) -> Response:
        return Response(CONSOLE_JS, media_type="text/javascript", headers=_STATIC_HEADERS)

    async def css(request: Request) -> Response:
        return Response(CONSOLE_CSS, media_type="text/css", headers=_STATIC_HEADERS)

    routes = [
        Route("/", console.fleet),
        Route("/usage", console.usage),
        Route("/static/console.js", js),
        Route("/static/console.css", css),
        Route("/sessions/{sid}", console.session),
        Route("/sessions/{sid}/stream", console.stream),
        Route("/changes", console.changes),
        Route("/sessions/{sid}/log", console.log),
        Route("/sessions/{sid}/state", console.state),
        Route("/sessions/{sid}/replay", console.replay),
        Route("/sessions/{sid}/trace", console.trace),
        Route("/sessions/{sid}/event", console.event),
        Route("/sessions/{sid}/{action}", console.act, methods=["POST"]),
        Route("/api/csrf", console.csrf_token),
        Route("/api/fleet", console.fleet),
        Route("/api/usage", console.usage),
        Route("/api/sessions/{sid}", console.session),
        Route("/api/sessions/{sid}/log", console.log),
        Route("/api/sessions/{sid}/state", console.state),
        Route("/api/sessions/{sid}/replay", console.replay),
        Route("/api/sessions/{sid}/trace", console.trace),
        Route("/api/sessions/{sid}/{action}", console.act, methods=["POST"]),
    ]

    async def failed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PowertrioError)
        return console.error_page(request, exc, 404 if isinstance(exc, LookupError) else 400)

    app = Starlette(routes=routes, exception_handlers={PowertrioError: failed})
    return _Guard(app, console)
