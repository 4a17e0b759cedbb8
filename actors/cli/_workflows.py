"""Workflows in the reading commands: their rows in ``sessions``, ``show``, ``tree``, ``log``.

A workflow is an event-sourced actor on ``workflow/<id>``; each agent step runs a session
``<id>.<step index>``, so its sessions are the streams under ``session/<id>.``.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Literal, final

import attrs

from protocols.errors import ConfigError, StreamNotFoundError

from .._reading._format import fmt_iso, shorten
from .._reading._log import (
    SESSION_PREFIX,
    decode_or_none,
    read_stream,
    resolve_session,
    session_id_of,
)
from .._reading._tree import AgentTree
from ._common import CliContext, db_lock, open_log

if TYPE_CHECKING:
    from actors.events import WorkflowState
    from runtime import RecordedEvent

    from .._reading._log import LogStore

__all__ = [
    "WORKFLOW_PREFIX",
    "WorkflowSummary",
    "build_workflow_tree",
    "fold_workflow",
    "print_workflow",
    "resolve_log_target",
    "resolve_target",
    "workflow_json",
    "workflow_summaries",
]

WORKFLOW_PREFIX = "workflow/"


def workflow_id_of(stream: str) -> str | None:
    """The workflow id of a ``workflow/<id>`` stream, else ``None``."""
    return stream[len(WORKFLOW_PREFIX) :] if stream.startswith(WORKFLOW_PREFIX) else None


async def resolve_target(store: LogStore, given: str) -> tuple[Literal["session", "workflow"], str]:
    """What ``given`` names: a session (as :func:`resolve_session`) or a workflow (its id,
    ``workflow/<id>`` or a unique prefix of its id).

    Raises:
        StreamNotFoundError: nothing matches.
        ConfigError: the prefix matches several sessions or workflows.
    """
    if given.startswith(SESSION_PREFIX):
        return "session", await resolve_session(store, given)
    wanted = given.removeprefix(WORKFLOW_PREFIX)
    if not wanted:
        raise StreamNotFoundError(WORKFLOW_PREFIX)
    infos = await store.streams(WORKFLOW_PREFIX + wanted)
    workflows = sorted(wid for info in infos if (wid := workflow_id_of(info.stream)) is not None)
    if wanted in workflows:
        return "workflow", wanted
    session: str | None = None
    if not given.startswith(WORKFLOW_PREFIX):
        try:
            session = await resolve_session(store, given)
        except StreamNotFoundError:
            session = None
    if session is not None and (session == wanted or not workflows):
        return "session", session
    candidates = workflows + ([session] if session is not None else [])
    if len(candidates) == 1:
        return "workflow", candidates[0]
    if not candidates:
        raise StreamNotFoundError(
            (WORKFLOW_PREFIX if given.startswith(WORKFLOW_PREFIX) else SESSION_PREFIX) + wanted
        )
    listed = ", ".join(candidates[:5]) + (", ..." if len(candidates) > 5 else "")
    msg = f"{given!r} matches {len(candidates)} sessions or workflows ({listed}); give more"
    raise ConfigError(msg)


async def resolve_log_target(
    store: LogStore, given: str
) -> tuple[Literal["session", "workflow", "stream"], str]:
    """What ``powertrio log`` shows: ``("stream", name)`` for any stream named in full
    (``fleet/agent/watch``, ``board/main``), else a session or a workflow as
    :func:`resolve_target` finds it.

    Raises:
        StreamNotFoundError: nothing matches (a name with a ``/`` is named as given).
        ConfigError: a prefix matches several sessions or workflows.
    """
    if not given.startswith((SESSION_PREFIX, WORKFLOW_PREFIX)):
        if await store.stream_version(given):
            return "stream", given
        if "/" in given:  # no session or workflow id has one: a stream that is not there
            raise StreamNotFoundError(given)
    return await resolve_target(store, given)


def fold_workflow(records: list[RecordedEvent]) -> tuple[WorkflowState, str | None]:
    """The state of a workflow from its records, and the code of the first one the codec
    cannot read (``None`` when all decode)."""
    from actors._workflow._events import WorkflowState, evolve_workflow
    from protocols.codec import decode_record
    from protocols.errors import CodecError

    state, error = WorkflowState(), None
    for record in records:
        try:
            event = decode_record(record)
        except CodecError as exc:
            error = error or exc.code
            continue
        state = evolve_workflow(state, event)
    return state, error


def _index_key(index: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in index.split("."))


# -- sessions -------------------------------------------------------------------------------


@final
@attrs.define(eq=False)
class WorkflowSummary:
    """One workflow row of ``powertrio sessions``."""

    workflow_id: str
    name: str = ""
    status: str = "running"
    steps: int = 0
    """Top-level steps done (a group counts once, when all its branches are done)."""
    events: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        """The row as JSON."""
        return {
            "kind": "workflow",
            "workflow_id": self.workflow_id,
            "workflow": self.name,
            "status": self.status,
            "error": self.error,
            "steps": self.steps,
            "events": self.events,
            "created_at": fmt_iso(self.created_at),
            "updated_at": fmt_iso(self.updated_at),
        }


async def workflow_summaries(store: LogStore) -> list[WorkflowSummary]:
    """A summary of every workflow in the log, oldest first."""
    found: list[WorkflowSummary] = []
    for info in await store.streams(WORKFLOW_PREFIX):
        wid = workflow_id_of(info.stream)
        if wid is None:
            continue
        records = await read_stream(store, info.stream)
        if not records:
            continue
        state, error = fold_workflow(records)
        summary = WorkflowSummary(
            wid,
            name=state.started.workflow if state.started is not None else "",
            status="failed" if error is not None else state.status,
            steps=sum(1 for index in state.steps if "." not in index),
            events=len(records),
            created_at=records[0].recorded_at,
            updated_at=records[-1].recorded_at,
            error=error
            or (state.finished.error if state.finished and state.finished.error else None),
        )
        found.append(summary)
    return sorted(found, key=lambda s: (s.created_at, s.workflow_id))


# -- show -----------------------------------------------------------------------------------


def workflow_json(workflow_id: str, records: list[RecordedEvent]) -> dict[str, object]:
    """What ``show`` says of a workflow: its status, input, steps and result."""
    state, error = fold_workflow(records)
    finished = state.finished
    return {
        "kind": "workflow",
        "workflow_id": workflow_id,
        "workflow": state.started.workflow if state.started is not None else None,
        "status": "failed" if error is not None else state.status,
        "error": error or (finished.error if finished is not None and finished.error else None),
        "input": state.started.input if state.started is not None else None,
        "steps": [
            {
                "index": step.index,
                "kind": step.kind,
                "name": step.name,
                "result": step.result,
                "version": state.step_versions.get(index),
            }
            for index, step in sorted(state.steps.items(), key=lambda item: _index_key(item[0]))
        ],
        "signals": {name: list(payloads) for name, payloads in state.signals.items()},
        "cancel_requested": (
            state.cancel_requested.reason if state.cancel_requested is not None else None
        ),
        "result": finished.result if finished is not None else None,
    }


def _short(value: object, width: int) -> str:
    import orjson

    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return shorten(text, width)


def _step_result(step: dict[str, object]) -> str:
    """A step's result in a line: an agent step's session, status and text."""
    result = step["result"]
    if step["kind"] == "agent" and isinstance(result, dict) and "session_id" in result:
        text = _short(result.get("text") or result.get("error") or "", 80)
        return f"{result['session_id']} {result.get('status')}: {text}"
    return _short(result, 100)


def print_workflow(ctx: CliContext, shown: dict[str, object]) -> None:
    """``show`` of a workflow, for people."""
    from rich.markup import escape
    from rich.rule import Rule

    out = ctx.out
    out.print(f"[bold]workflow {escape(str(shown['workflow_id']))}[/] ({shown['workflow']})")
    if shown["input"] is not None:
        out.print(f"[bold green]input[/]: {escape(_short(shown['input'], 200))}")
    steps = shown["steps"]
    assert isinstance(steps, list)
    for step in steps:
        depth = str(step["index"]).count(".") // 2
        indent = "  " * (depth + 1)
        out.print(
            f"{indent}[cyan]{escape(str(step['index']))} {step['kind']}[/] "
            f"[bold]{escape(str(step['name']))}[/] → {escape(_step_result(step))}"
        )
    if shown["cancel_requested"] is not None:
        out.print(f"[magenta]cancel requested[/]: {escape(str(shown['cancel_requested']))}")
    status = str(shown["status"])
    detail = ""
    if shown["error"]:
        detail = f" · {escape(str(shown['error']))}"
    elif status == "completed":
        detail = f" · {escape(_short(shown['result'], 100))}"
    out.print(
        Rule(
            f"workflow {status} · {len(steps)} steps{detail}",
            style="green" if status == "completed" else "yellow",
        )
    )


# -- tree -----------------------------------------------------------------------------------


async def build_workflow_tree(store: LogStore, workflow_id: str, *, live: bool) -> AgentTree:
    """The workflow as the root, its agent steps' sessions (and their sub-agents) below."""
    from actors.events import SessionCreated

    state, _ = fold_workflow(await read_stream(store, WORKFLOW_PREFIX + workflow_id))
    name = state.started.workflow if state.started is not None else "workflow"
    tree = AgentTree(workflow_id, root_name=f"workflow {name}")
    records: list[RecordedEvent] = []
    for info in await store.streams(SESSION_PREFIX + workflow_id + "."):
        records.extend(await read_stream(store, info.stream))
    records.sort(key=lambda r: r.position)
    decoded = [(r, decode_or_none(r)) for r in records]
    # The sessions of agent steps are top-level sessions: hang them on the workflow, however
    # deep their step index (``wf.3.1.0`` is an agent in branch 1 of step 3).
    steps = sorted(
        (
            event.session_id
            for _, event in decoded
            if isinstance(event, SessionCreated) and event.parent_id is None
        ),
        key=lambda sid: _index_key(sid[len(workflow_id) + 1 :]),
    )
    names = {
        str(step.result["session_id"]): step.name
        for step in state.steps.values()
        if step.kind == "agent" and isinstance(step.result, dict) and "session_id" in step.result
    }
    for step_session in steps:
        tree.parents[step_session] = workflow_id
        tree.node(step_session).name = names.get(step_session, "agent")
    for record, event in decoded:
        sid = session_id_of(record.stream)
        if event is not None and sid is not None:
            tree.apply(sid, event)
    if not live:
        tree.mark_interrupted()
    root = tree.root
    root.seen = True
    root.status = state.status
    root.task = _short(state.started.input, 200) if state.started is not None else ""
    return tree


async def cmd_signal(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio signal ID NAME [PAYLOAD]``: send a workflow a signal from outside.

    The signal is appended to the workflow's stream, as ``Workflow.signal`` records it, so
    the workflow gets it whenever it runs next (now, if a process is driving it: its next
    append sees the new version, and it folds the signal in after a restart). ``PAYLOAD``
    is JSON (default ``null``).

    Raises:
        ConfigError: ``PAYLOAD`` is not JSON, or the workflow has finished.
        StreamNotFoundError: no workflow matches ``ID``.
    """
    import orjson

    from actors._workflow._events import SignalReceived
    from protocols.codec import default_registry
    from runtime import NewEvent

    try:
        payload = orjson.loads(args.payload) if args.payload is not None else None
    except orjson.JSONDecodeError as exc:
        msg = f'the payload must be JSON, e.g. \'{{"by": "ann"}}\' or \'"yes"\': {exc}'
        raise ConfigError(msg) from None
    with db_lock(ctx, "signal"):
        async with open_log(ctx) as store:
            given = args.workflow
            if not given.startswith(WORKFLOW_PREFIX):
                given = WORKFLOW_PREFIX + given
            _kind, workflow_id = await resolve_target(store, given)
            stream = WORKFLOW_PREFIX + workflow_id
            state, _error = fold_workflow(await read_stream(store, stream))
            if state.finished is not None:
                msg = (
                    f"workflow {workflow_id!r} has finished ({state.finished.status}); "
                    "a signal would never be read"
                )
                raise ConfigError(msg)
            encoded = default_registry.encode(SignalReceived(name=args.name, payload=payload))
            version = await store.stream_version(stream)
            result = await store.append(stream, [NewEvent.from_encoded(encoded)], version)
    if ctx.json:
        ctx.emit({"workflow_id": workflow_id, "signal": args.name, "version": result.version})
    else:
        ctx.out.print(f"signalled {args.name!r} to workflow {workflow_id} (event {result.version})")
    return 0
