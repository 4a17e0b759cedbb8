"""Sessions folded from a log: summaries, agent trees, recorded setups, transcript lines."""

# Lazy imports of the agents inside functions: the CLI's `--help` stays quick.
# ruff: noqa: PLC0415

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from protocols.codec import decode_record
from protocols.errors import CodecError
from runtime import RecordedEvent

from ._format import fmt_iso
from ._log import (
    READ_PAGE,
    SESSION_PREFIX,
    decode_or_none,
    in_session_tree,
    read_stream,
    session_id_of,
)
from ._tree import AgentTree

if TYPE_CHECKING:
    from ._log import LogStore

__all__ = [
    "RecordedSetup",
    "SessionSummary",
    "build_tree",
    "read_tree",
    "recorded_setup",
    "summaries",
    "transcript_entry",
    "tree_streams",
]


async def tree_streams(store: LogStore, root_id: str) -> list[str]:
    """The streams of a session and of its sub-agents, sorted."""
    infos = await store.streams(SESSION_PREFIX + root_id)
    return [
        info.stream
        for info in infos
        if (sid := session_id_of(info.stream)) is not None and in_session_tree(root_id, sid)
    ]


async def read_tree(store: LogStore, root_id: str) -> list[RecordedEvent]:
    """The events of a session tree, in global (commit) order."""
    events: list[RecordedEvent] = []
    for stream in await tree_streams(store, root_id):
        events.extend(await read_stream(store, stream))
    events.sort(key=lambda e: e.position)
    return events


async def build_tree(store: LogStore, root_id: str, *, live: bool) -> AgentTree:
    """The agent tree of ``root_id`` folded from the log."""
    tree = AgentTree(root_id)
    for record in await read_tree(store, root_id):
        event = decode_or_none(record)
        sid = session_id_of(record.stream)
        if event is not None and sid is not None:
            tree.apply(sid, event)
    if not live:
        tree.mark_interrupted()
    return tree


@final
@attrs.frozen(kw_only=True)
class RecordedSetup:
    """How a session was driven, as its first recorded request says."""

    recorded: bool
    """Whether the session made any request (else the other fields are defaults)."""
    ask_human: bool = False
    """``ask_human`` was among its tools (a person was at the terminal)."""
    max_tokens: int | None = None
    """The ``max_tokens`` its requests asked for."""
    model: str | None = None
    """The model name its requests asked for."""
    temperature: float | None = None
    """The temperature its requests asked for."""


async def recorded_setup(store: LogStore, session_id: str) -> RecordedSetup:
    """The setup of ``session_id`` from its first recorded request, so a resumed session
    (``send``, ``reply``) and a replay get the tools and parameters it had."""
    from actors.events import AssistantRecorded

    for record in await read_stream(store, SESSION_PREFIX + session_id):
        if record.type != "session.assistant":
            continue
        event = decode_or_none(record)
        header = (
            getattr(event, "request_header", None) if isinstance(event, AssistantRecorded) else None
        )
        if header is not None:
            return RecordedSetup(
                recorded=True,
                ask_human="ask_human" in header.tools,
                max_tokens=header.max_tokens,
                model=header.model,
                temperature=header.temperature,
            )
    return RecordedSetup(recorded=False)


# -- sessions ----------------------------------------------------------------------------


@final
@attrs.define(eq=False)
class SessionSummary:
    """One line of ``powertrio sessions``, folded from the session's events."""

    session_id: str
    parent_id: str | None = None
    depth: int = 0
    status: str = "new"
    runs: int = 0
    rounds: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    events: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    waiting_for: list[str] = attrs.Factory(list)
    """Open human requests."""
    error: str | None = None
    """The code of the first event this code cannot decode: the session cannot be folded,
    so its status is ``failed`` (a runtime would stop it with that error)."""
    queued: list[str] = attrs.Factory(list)
    """Runs sent while another was active, waiting to start (behind a human request, maybe)."""

    def apply(self, event: object) -> None:
        """Fold one event in."""
        from actors.events import (
            AssistantRecorded,
            HumanAnswered,
            HumanRequested,
            InputQueued,
            RunFinished,
            RunStarted,
            SessionCreated,
        )

        if isinstance(event, SessionCreated):
            self.parent_id, self.depth = event.parent_id, event.depth
        elif isinstance(event, InputQueued):
            self.queued.append(event.run.run_id)
        elif isinstance(event, RunStarted):
            self.status, self.runs = "running", self.runs + 1
            self.queued = [r for r in self.queued if r != event.run_id]
        elif isinstance(event, AssistantRecorded):
            self.rounds += 1
            self.prompt_tokens += event.usage.prompt_tokens
            self.completion_tokens += event.usage.completion_tokens
        elif isinstance(event, HumanRequested):
            self.status = "waiting_for_human"
            self.waiting_for.append(event.request_id)
        elif isinstance(event, HumanAnswered):
            self.waiting_for = [r for r in self.waiting_for if r != event.request_id]
            if not self.waiting_for:
                self.status = "running"
        elif isinstance(event, RunFinished):
            self.status, self.waiting_for = event.status, []

    def to_json(self) -> dict[str, object]:
        """The summary as JSON."""
        return {
            "kind": "session",
            "session_id": self.session_id,
            "parent_id": self.parent_id,
            "depth": self.depth,
            "status": self.status,
            "error": self.error,
            "runs": self.runs,
            "rounds": self.rounds,
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
            "events": self.events,
            "waiting_for": self.waiting_for,
            "queued": self.queued,
            "created_at": fmt_iso(self.created_at),
            "updated_at": fmt_iso(self.updated_at),
        }


async def summaries(store: LogStore) -> list[SessionSummary]:
    """A summary of every session in the log (one pass over the log): top-level sessions
    oldest first, each followed by its sub-agents."""
    found: dict[str, SessionSummary] = {}
    position = 1
    while True:
        page = await store.read_all(position, limit=READ_PAGE)
        for record in page:
            sid = session_id_of(record.stream)
            if sid is None:
                continue
            summary = found.get(sid)
            if summary is None:
                summary = found[sid] = SessionSummary(sid, created_at=record.recorded_at)
            summary.events += 1
            summary.updated_at = record.recorded_at
            try:
                event = decode_record(record)
            except CodecError as exc:
                summary.error = summary.error or exc.code
                continue
            summary.apply(event)
        if len(page) < READ_PAGE:
            break
        position = page[-1].position + 1
    for summary in found.values():
        if summary.error is not None:
            summary.status = "failed"

    def tree_order(summary: SessionSummary) -> tuple[float, str, tuple[int, ...]]:
        # Sub-agents follow their root in spawn order (``root.2`` before ``root.10``),
        # whatever order their own first events were committed in.
        root, *path = summary.session_id.split(".")
        number = tuple(int(p) if p.isdigit() else 0 for p in path)
        started = found[root].created_at if root in found else summary.created_at
        return (started, root, number)

    return sorted(found.values(), key=tree_order)


# -- show: the transcript ------------------------------------------------------------------


def transcript_entry(record: RecordedEvent, event: object) -> dict[str, object] | None:
    """One line of a transcript (``powertrio show``, the console's session page), or
    ``None`` for bookkeeping events."""
    from actors.events import (
        AssistantRecorded,
        CancelRequested,
        ChildFinished,
        ChildSpawned,
        ContextCompacted,
        FollowUpReceived,
        HumanAnswered,
        HumanRequested,
        RunFinished,
        RunStarted,
        SessionCreated,
        ToolFinished,
    )

    base: dict[str, object] = {"version": record.version, "at": fmt_iso(record.recorded_at)}
    if isinstance(event, SessionCreated):
        return base | {
            "kind": "session",
            "session_id": event.session_id,
            "parent_id": event.parent_id,
            "depth": event.depth,
            "system_prompt": event.system_prompt,
            "forked_from": getattr(event, "forked_from", None),
            "forked_at": getattr(event, "forked_at", None),
        }
    if isinstance(event, RunStarted):
        return base | {"kind": "run_started", "run_id": event.run_id, "text": event.input}
    if isinstance(event, FollowUpReceived):
        follow_up = event.follow_up
        return base | {"kind": "follow_up", "text": follow_up.content, "of": follow_up.kind}
    if isinstance(event, AssistantRecorded):
        return base | {
            "kind": "assistant",
            "round": event.round,
            "model": event.model,
            "text": event.message.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in event.message.tool_calls
            ],
            "tokens": event.usage.total_tokens,
        }
    if isinstance(event, ToolFinished):
        outcome = event.outcome
        return base | {
            "kind": "tool_result",
            "call_id": outcome.call_id,
            "name": outcome.tool_name,
            "status": outcome.status,
            "text": outcome.content,
        }
    if isinstance(event, ChildSpawned):
        return base | {
            "kind": "child_spawned",
            "child_id": event.child_id,
            "agent": event.agent,
            "text": event.task,
        }
    if isinstance(event, ChildFinished):
        return base | {"kind": "child_finished", "child_id": event.child_id, "status": event.status}
    if isinstance(event, HumanRequested):
        return base | {
            "kind": "human_requested",
            "request_id": event.request_id,
            "of": event.kind,
            "text": event.prompt,
        }
    if isinstance(event, HumanAnswered):
        return base | {
            "kind": "human_answered",
            "request_id": event.request_id,
            "text": event.answer,
            "approve": event.approve,
            "by": event.by,
        }
    if isinstance(event, ContextCompacted):
        return base | {
            "kind": "compacted",
            "method": event.method,
            "upto": event.upto,
            "tokens_before": event.tokens_before,
            "tokens": event.usage.total_tokens,
            "text": event.summary,
        }
    if isinstance(event, CancelRequested):
        return base | {"kind": "cancel", "mode": event.mode, "by": event.by, "text": event.reason}
    if isinstance(event, RunFinished):
        return base | {
            "kind": "run_finished",
            "run_id": event.run_id,
            "status": event.status,
            "rounds": event.rounds,
            "tokens": event.usage.total_tokens,
            "text": event.text,
            "error": event.error,
        }
    return None
