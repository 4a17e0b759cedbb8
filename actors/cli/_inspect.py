"""The reading commands of ``powertrio``: sessions, show, tree, log (--follow), timers."""

# Lazy imports of `rich` and of the agents inside functions: each command pays at start-up
# only for what it uses, and `--help` stays quick.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import time

import orjson
import trio

from runtime import RecordedEvent, open_runtime
from runtime.timers import PendingTimer

from .._reading._format import fmt_age, fmt_iso, fmt_time, plural, shorten
from .._reading._log import (
    READ_PAGE,
    SESSION_PREFIX,
    decode_or_none,
    in_session_tree,
    read_stream,
    session_id_of,
)
from .._reading._sessions import SessionSummary, build_tree, read_tree, summaries, transcript_entry
from ._common import CliContext, db_in_use, open_log
from ._tree_view import render_tree

__all__ = ["cmd_log", "cmd_sessions", "cmd_show", "cmd_timers", "cmd_tree"]


def load_actors() -> None:
    """Import ``actors`` so the session and board events are registered with the codec."""
    import actors  # noqa: F401


async def cmd_sessions(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio sessions``: every session with its status, age, usage and parent, and
    every workflow with its status and steps done."""
    from ._workflows import workflow_summaries

    load_actors()
    async with open_log(ctx) as store:
        listed = await summaries(store)
        workflows = await workflow_summaries(store)
    live = db_in_use(ctx)
    for summary in listed:
        if summary.status == "running" and not live:
            summary.status = "interrupted"
    # A session's own tokens, and its tree's: its own plus every sub-agent's (ids extend
    # their parent's), which is what a root's RunResult.usage adds up to.
    tree_tokens = {s.session_id: 0 for s in listed}
    for s in listed:
        own, ancestor = s.prompt_tokens + s.completion_tokens, s.session_id
        while True:
            if ancestor in tree_tokens:
                tree_tokens[ancestor] += own
            if "." not in ancestor:
                break
            ancestor = ancestor.rsplit(".", 1)[0]
    if args.roots:
        listed = [s for s in listed if s.parent_id is None]
    if ctx.json:
        rows = [s.to_json() | {"tree_tokens": tree_tokens[s.session_id]} for s in listed]
        ctx.emit(rows + [w.to_json() for w in workflows])
        return 0
    from rich.markup import escape
    from rich.table import Table

    if not listed and not workflows:
        ctx.err.print(f'no sessions in {str(ctx.db)!r} yet: start one with `powertrio run "task"`')
        return 0
    table = Table(title=f"sessions in {ctx.db}", title_justify="left")
    columns = (
        "id", "kind", "status", "runs", "steps", "rounds", "own tokens", "tree tokens", "age",
        "updated",
    )  # fmt: skip
    for column in (*columns, "parent"):
        if column == "steps" and not workflows:
            continue
        table.add_column(
            column,
            justify="left" if column in {"id", "kind", "status", "age", "updated"} else "right",
            no_wrap=column in {"id", "parent"},
        )
    now = time.time()
    for s in listed:
        status = s.status.replace("_", " ") + (f" [{s.error}]" if s.error else "")
        if s.waiting_for:
            status += f" ({', '.join(s.waiting_for)})"
        if s.queued:
            status += f" · {len(s.queued)} queued"
        table.add_row(
            s.session_id,
            "session",
            escape(status),
            str(s.runs),
            *([""] if workflows else []),
            str(s.rounds),
            f"{s.prompt_tokens + s.completion_tokens:,}",
            f"{tree_tokens[s.session_id]:,}",
            fmt_age(now - s.created_at),
            fmt_age(now - s.updated_at) + " ago",
            s.parent_id or "",
        )
    for w in workflows:
        status = w.status + (f" [{shorten(w.error, 40)}]" if w.error else "")
        table.add_row(
            w.workflow_id,
            f"workflow {w.name}".strip(),
            escape(status),
            "",
            str(w.steps),
            "",
            "",
            "",
            fmt_age(now - w.created_at),
            fmt_age(now - w.updated_at) + " ago",
            "",
        )
    ctx.out.print(table)
    return 0


# -- show: the transcript ------------------------------------------------------------------


def _compacted_line(entry: dict[str, object], text: str) -> str:
    what = "summarised" if entry["method"] == "summary" else "dropped"
    head = (
        f"[yellow]context: messages [0, {entry['upto']}) {what}[/] "
        f"[dim](the request was {entry['tokens_before']:,} tok)[/]"
    )
    return f"{head}: {text}" if text else head


def _print_entry(ctx: CliContext, entry: dict[str, object]) -> None:
    from rich.markup import escape
    from rich.rule import Rule

    kind = entry["kind"]
    text = escape(str(entry.get("text") or ""))
    out = ctx.out
    if kind == "session":
        parent = entry["parent_id"]
        where = f" · sub-agent of {parent} (depth {entry['depth']})" if parent else ""
        if entry["forked_from"]:
            where += f" · forked from {entry['forked_from']} at version {entry['forked_at']}"
        out.print(f"[bold]session {entry['session_id']}[/]{where}")
        if entry["system_prompt"]:
            out.print(f"[dim]system: {escape(str(entry['system_prompt']))}[/]")
    elif kind == "run_started":
        out.print(Rule(f"run {entry['run_id']}", style="dim"))
        if text:
            out.print(f"[bold green]user[/]: {text}")
    elif kind == "follow_up":
        out.print(f"[bold green]{entry['of']} follow-up[/]: {text}")
    elif kind == "assistant":
        head = f"[bold blue]assistant[/] [dim](round {entry['round']} · {entry['tokens']:,} tok)[/]"
        out.print(f"{head}: {text}" if text else head)
        calls = entry["tool_calls"]
        assert isinstance(calls, list)
        for call in calls:
            args = escape(shorten(str(call["arguments"]), 100))
            out.print(f"  [cyan]→ {call['name']}[/]({args}) [dim]{call['id']}[/]")
    elif kind == "tool_result":
        style = "cyan" if entry["status"] == "ok" else "red"
        status = "" if entry["status"] == "ok" else f" [{entry['status']}]"
        result = escape(shorten(str(entry["text"]), 200))
        out.print(f"  [{style}]← {entry['name']}{escape(status)}[/]: {result}")
    elif kind == "child_spawned":
        out.print(f"  [magenta]⤷ {entry['agent']} {entry['child_id']}[/]: {text}")
    elif kind == "child_finished":
        out.print(f"  [magenta]⤶ {entry['child_id']} {entry['status']}[/]")
    elif kind == "human_requested":
        out.print(f"[bold blue]? {entry['of']} {entry['request_id']}[/]: {text}")
    elif kind == "human_answered":
        approve = entry["approve"]
        verdict = " (approved)" if approve is True else " (denied)" if approve is False else ""
        out.print(f"[bold green]{entry['by']} answered {entry['request_id']}{verdict}[/]: {text}")
    elif kind == "compacted":
        out.print(_compacted_line(entry, text))
    elif kind == "cancel":
        out.print(f"[magenta]cancel ({entry['mode']}) by {entry['by']}[/]: {text}")
    elif kind == "run_finished":
        error = f" · {escape(str(entry['error']))}" if entry.get("error") else ""
        tokens = f"{plural(int(str(entry['rounds'])), 'round')} · {entry['tokens']:,} tok"
        out.print(
            Rule(
                f"run {entry['status']} · {tokens}{error}",
                style="green" if entry["status"] == "completed" else "yellow",
            )
        )
        _print_run_warnings(ctx, entry)


async def cmd_show(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio show ID``: the session's transcript, run by run; a workflow's steps."""
    from ._workflows import WORKFLOW_PREFIX, print_workflow, resolve_target, workflow_json

    load_actors()
    async with open_log(ctx) as store:
        kind, session_id = await resolve_target(store, args.session)
        prefix = WORKFLOW_PREFIX if kind == "workflow" else SESSION_PREFIX
        records = await read_stream(store, prefix + session_id)
    if kind == "workflow":
        shown = workflow_json(session_id, records)
        if ctx.json:
            ctx.emit(shown)
        else:
            print_workflow(ctx, shown)
        return 0
    from actors._session._events import SessionState, evolve, timer_follow_up
    from runtime.timers import TimerFired

    state = SessionState()
    summary = SessionSummary(session_id)
    entries: list[dict[str, object]] = []
    for record in records:
        event = decode_or_none(record)
        if event is None:
            continue
        summary.apply(event)
        entry = transcript_entry(record, event)
        if isinstance(event, TimerFired):  # the input of a wake-up run, as the model read it
            pending = state.timers.get(event.timer_id)
            wake_up = timer_follow_up(event, pending.note if pending is not None else "")
            entry = {
                "version": record.version,
                "at": fmt_iso(record.recorded_at),
                "kind": "follow_up",
                "text": wake_up.content,
                "of": "timer",
            }
        state = evolve(state, event)
        if entry is not None and entry["kind"] == "run_finished":
            result = state.results[str(entry["run_id"])]
            entry["error_code"] = result.error_code
            entry["truncated"] = result.truncated
            entry["unknown_tool_results"] = list(result.unknown_tool_results)
        if entry is not None:
            entries.append(entry)
    waiting = {
        "human_requests": [
            {"request_id": r.request_id, "kind": r.kind, "prompt": r.prompt}
            for r in state.waiting_for
        ],
        "queued": [{"run_id": q.run_id, "text": q.input} for q in state.queued],
    }
    # The status `sessions` gives it: a run open in the log that no process drives was
    # interrupted (the process died or was stopped), not running.
    status = summary.status
    if status == "running" and not db_in_use(ctx):
        status = "interrupted"
    open_run = state.run.started.run_id if state.run is not None else None
    if ctx.json:
        ctx.emit(
            {
                "session_id": session_id,
                "status": status,
                "open_run": open_run,
                "entries": entries,
                "waiting": waiting,
            }
        )
        return 0
    for entry in entries:
        _print_entry(ctx, entry)
    _print_waiting(ctx, session_id, waiting)
    if status == "interrupted":
        ctx.out.print(
            f"[yellow]interrupted: run {open_run} never finished (no process drives this log); "
            f'`powertrio send {session_id} "..."` resumes it, '
            f"`powertrio cancel {session_id}` ends it[/]"
        )
    return 0


def _print_run_warnings(ctx: CliContext, entry: dict[str, object]) -> None:
    """A line for each thing a run's status does not say (see ``RunResult``)."""
    from rich.markup import escape

    if entry.get("truncated"):
        ctx.out.print("[yellow]warning: the last answer was cut off by the token limit[/]")
    unknown = entry.get("unknown_tool_results")
    if isinstance(unknown, list) and unknown:
        listed = escape(", ".join(map(str, unknown)))
        ctx.out.print(f"[yellow]warning: tool results unknown (the process stopped): {listed}[/]")


def _print_waiting(
    ctx: CliContext, session_id: str, waiting: dict[str, list[dict[str, str]]]
) -> None:
    """What the session waits for, and the input waiting behind it."""
    from rich.markup import escape

    for request in waiting["human_requests"]:
        ctx.out.print(
            f"[bold blue]waiting for a human ({request['kind']}):[/] {escape(request['prompt'])}"
            f'\n  answer with: powertrio reply {session_id} {request["request_id"]} "..."'
        )
    for queued in waiting["queued"]:
        ctx.out.print(
            f"[yellow]queued: run {queued['run_id']}[/]: {escape(shorten(queued['text'], 100))}"
        )


# -- tree ----------------------------------------------------------------------------------


async def cmd_tree(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio tree ID``: the session's agent tree from its ``ChildSpawned`` links; a
    workflow's agent steps (and their sub-agents) under it."""
    from ._workflows import build_workflow_tree, resolve_target

    load_actors()
    async with open_log(ctx) as store:
        kind, session_id = await resolve_target(store, args.session)
        live = db_in_use(ctx)
        if kind == "workflow":
            tree = await build_workflow_tree(store, session_id, live=live)
        else:
            tree = await build_tree(store, session_id, live=live)
    if ctx.json:
        ctx.emit({"kind": kind, **tree.to_json()})
        return 0
    ctx.out.print(render_tree(tree))
    agents, tokens = plural(len(tree.nodes), "agent"), plural(tree.total_tokens, "token")
    ctx.out.print(f"[dim]{agents} · {tokens} in all[/]")
    return 0


# -- log -----------------------------------------------------------------------------------


def _record_json(record: RecordedEvent) -> dict[str, object]:
    try:
        data: object = orjson.loads(record.data)
    except orjson.JSONDecodeError:
        data = None
    return {
        "stream": record.stream,
        "version": record.version,
        "position": record.position,
        "type": record.type,
        "schema_version": record.schema_version,
        "recorded_at": fmt_iso(record.recorded_at),
        "data": data,
    }


def _print_record(ctx: CliContext, record: RecordedEvent, *, with_stream: bool) -> None:
    if ctx.json:
        ctx.emit(_record_json(record))
        return
    from rich.markup import escape

    where = f"{record.stream.removeprefix(SESSION_PREFIX)} " if with_stream else ""
    head = f"{record.position:>6} {fmt_time(record.recorded_at)} {where}v{record.version:<4} "
    kind = f"{record.type:<28}"
    room = max(20, ctx.out.width - len(head) - len(kind) - 1)
    data = escape(shorten(record.data.decode("utf-8", errors="replace"), room))
    ctx.out.print(f"[dim]{escape(head)}[/][bold]{kind}[/] [dim]{data}[/]", soft_wrap=True)


async def cmd_log(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio log ID [--tree] [--follow]``: the events of a session, a workflow or any
    stream (JSON Lines with --json); ``--tree`` adds a session's sub-agents' (a workflow's:
    its agent steps')."""
    from ._workflows import WORKFLOW_PREFIX, resolve_log_target

    async with open_log(ctx) as store:
        kind, session_id = await resolve_log_target(store, args.session)
        head = await store.head_position()
        if kind == "stream":
            named = session_id

            def wanted(stream: str) -> bool:
                return stream == named

            records = await read_stream(store, named)
        elif kind == "workflow":
            own = WORKFLOW_PREFIX + session_id

            def wanted(stream: str) -> bool:
                sid = session_id_of(stream)
                below = sid is not None and sid.startswith(session_id + ".")
                return stream == own or (args.tree and below)

            records = await read_stream(store, own)
            if args.tree:
                for info in await store.streams(SESSION_PREFIX + session_id + "."):
                    records.extend(await read_stream(store, info.stream))
                records.sort(key=lambda r: r.position)
        else:

            def wanted(stream: str) -> bool:
                sid = session_id_of(stream)
                if sid is None:
                    return False
                return sid == session_id or (args.tree and in_session_tree(session_id, sid))

            if args.tree:
                records = await read_tree(store, session_id)
            else:
                records = await read_stream(store, SESSION_PREFIX + session_id)
        for record in records:
            if record.position <= head:
                _print_record(ctx, record, with_stream=args.tree)
        if not args.follow:
            return 0
        # Another process writes the log: poll it (this store's own commit signal does not
        # see other processes' commits). Ctrl-C ends the follow.
        position = head + 1
        while True:
            page = await store.read_all(position, limit=READ_PAGE)
            for record in page:
                if wanted(record.stream):
                    _print_record(ctx, record, with_stream=args.tree)
            if page:
                position = page[-1].position + 1
            else:
                await trio.sleep(0.2)


# -- timers --------------------------------------------------------------------------------


async def cmd_timers(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio timers``: pending durable timers of every actor, by due time."""
    rows: list[tuple[str, PendingTimer]] = []
    async with open_log(ctx) as store, open_runtime(store=store) as runtime:
        for info in await store.streams():
            rows.extend((info.stream, timer) for timer in runtime.timers.pending(info.stream))
    rows.sort(key=lambda row: (row[1].due_at, row[1].timer_id))
    if ctx.json:
        ctx.emit(
            [
                {
                    "stream": stream,
                    "timer_id": timer.timer_id,
                    "due_at": fmt_iso(timer.due_at),
                    "every": timer.every,
                    "note": timer.note,
                }
                for stream, timer in rows
            ]
        )
        return 0
    if not rows:
        ctx.err.print("no pending timers")
        return 0
    from rich.table import Table

    now = time.time()
    table = Table(title="pending timers", title_justify="left")
    for column in ("owner", "timer", "due", "in", "every", "note"):
        table.add_column(column)
    for stream, timer in rows:
        table.add_row(
            stream,
            timer.timer_id,
            fmt_time(timer.due_at),
            fmt_age(timer.due_at - now) if timer.due_at > now else "due",
            "" if timer.every is None else f"{timer.every:g}s",
            shorten(timer.note, 60),
        )
    ctx.out.print(table)
    return 0
