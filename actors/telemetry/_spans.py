"""Spans as a fold of session events: what a run, a model call and a tool call looked like.

Pure: :class:`SpanBuilder` takes each session event with the time it was committed and
emits a :class:`SpanRecord` when the event that closes a span arrives (the answer of a model
call, the result of a tool call, the end of a run). The live exporter feeds it from the
runtime's persist listener (the time is the commit's), the log exporter from a stream's
records (the time is ``recorded_at``): both emit the same spans.

Ids come from the log, never from randomness: a run's trace id and span id hash its session
and run ids, a model call's span id its round, a tool call's its call id. A span is emitted
once, when its closing event is committed, and that event is committed once; so a run
resumed after a crash (in this process or another) continues the same trace with the same
ids, and exporting a finished session from its log gives the spans the live run gave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import final

import attrs

from actors._session._events import (
    AssistantRecorded,
    ChildSpawned,
    RunFinished,
    RunStarted,
    SessionCreated,
    ToolFinished,
    ToolStarted,
)
from actors._session._trace_ids import (
    llm_span_id,
    parse_traceparent,
    run_span_id,
    tool_span_id,
    trace_id_of,
)

__all__ = [
    "AttributeValue",
    "SpanBuilder",
    "SpanRecord",
    "llm_span_id",
    "run_span_id",
    "tool_span_id",
    "trace_id_of",
]

AttributeValue = str | int | float | bool | Sequence[str]

TOOL_TYPE = "function"
"""``gen_ai.tool.type`` of every tool call: the model gives the arguments, this process
(or the MCP server it calls for it) runs the tool."""


@final
@attrs.frozen(kw_only=True)
class SpanRecord:
    """One finished span, with log-derived ids and times in epoch seconds."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    end: float
    attributes: Mapping[str, AttributeValue]
    error: str | None = None
    """The error's description when the span failed."""
    kind: str = "internal"
    """``internal`` (runs, tools) or ``client`` (model calls)."""


@attrs.define
class _Run:
    run_id: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    last: float
    """When the newest event of the run was committed: a model call starts after it."""
    resumed: bool
    tools: dict[str, tuple[str, float]] = attrs.Factory(dict)
    model: str | None = None
    """The model the run's last call asked for (a failed call's span is named after it)."""


@attrs.define
class _Stream:
    session_id: str
    parent_id: str | None = None
    agent: str | None = None
    """The agent's name, from the session's first event or its parent's spawn."""
    link: tuple[int, int] | None = None
    """A sub-agent's (trace id, spawning span id), from its first event."""
    provider: str | None = None
    """The provider its model is called through, from its first event."""
    run: _Run | None = None
    ready_at: float | None = None
    """When this process's actor of the session started (a resumed run's spans that
    began in an earlier process start here)."""
    held: list[tuple[object, float]] | None = None
    """Events kept back, in order, until the session's first event is known (see
    :meth:`SpanBuilder.hold`); ``None``: none are."""


@final
class SpanBuilder:
    """Folds the events of session streams into spans, handing each to ``emit``.

    Args:
        emit: told every finished span, in order.
        provider (str | None): the ``gen_ai.provider.name`` of every span; ``None``: each
            session's own, as its first event records it (the transport's name:
            ``openai``, ``anthropic``), ``_OTHER`` when it records none.
    """

    __slots__ = ("_children", "_emit", "_streams", "provider")

    def __init__(self, emit: Callable[[SpanRecord], None], *, provider: str | None = None) -> None:
        self._emit = emit
        self.provider = provider
        self._streams: dict[str, _Stream] = {}
        self._children: dict[str, tuple[int, int, str]] = {}
        """Child session id → (trace id, span id of the spawning tool call, agent name)."""

    def ready(self, session_id: str, at: float) -> None:
        """The session's actor started at ``at`` (its state folded from the log)."""
        stream = self._streams.get(session_id)
        if stream is None:
            stream = self._streams[session_id] = _Stream(session_id)
        stream.ready_at = at

    def hold(self, session_id: str) -> None:
        """Keep the session's events back until :meth:`release`: a process that resumes a
        session never sees its first event (its agent name and trace context) go by, so
        its owner reads it from the log meanwhile."""
        stream = self._streams.get(session_id)
        if stream is None:
            stream = self._streams[session_id] = _Stream(session_id)
        if stream.held is None:
            stream.held = []

    def release(self, session_id: str, first: object | None) -> None:
        """Fold the session's first event (``None``: it has none yet, or it could not be
        read), then the events kept back since :meth:`hold`."""
        stream = self._streams.get(session_id)
        if stream is None or stream.held is None:
            return
        held, stream.held = stream.held, None
        if isinstance(first, SessionCreated):
            self.feed(session_id, first, 0.0)
        for event, at in held:
            self.feed(session_id, event, at)

    def forget(self, session_id: str) -> None:
        """Drop what is kept of a session between its events (its actor stopped)."""
        self._streams.pop(session_id, None)

    def feed(self, session_id: str, event: object, at: float) -> None:
        """One event of ``session/<session_id>``, committed at ``at`` (epoch seconds)."""
        stream = self._streams.get(session_id)
        if stream is None:
            stream = self._streams[session_id] = _Stream(session_id)
        if stream.held is not None:
            stream.held.append((event, at))
            return
        if isinstance(event, SessionCreated):
            stream.parent_id = event.parent_id
            stream.agent = event.agent
            stream.link = parse_traceparent(event.traceparent)
            stream.provider = event.provider
            return
        run_id = getattr(event, "run_id", None)
        if not isinstance(run_id, str) or not run_id:
            return
        run = stream.run
        if isinstance(event, RunStarted) or run is None or run.run_id != run_id:
            if isinstance(event, RunStarted):
                start = event.started_at or at
                run = stream.run = self._open(stream, run_id, start, at, resumed=False)
            else:  # the run began before this process saw the stream: it resumed
                since = stream.ready_at if stream.ready_at is not None else at
                run = stream.run = self._open(stream, run_id, since, since, resumed=True)
        if isinstance(event, AssistantRecorded):
            self._llm(stream, run, event, at)
        elif isinstance(event, ToolStarted):
            run.tools[event.call_id] = (event.name, at)
        elif isinstance(event, ChildSpawned):
            parent = tool_span_id(session_id, run_id, event.call_id)
            self._children[event.child_id] = (run.trace_id, parent, event.agent)
        elif isinstance(event, ToolFinished):
            self._tool(stream, run, event, at)
        elif isinstance(event, RunFinished):
            self._finish(stream, run, event, at)
            stream.run = None
            return
        run.last = at

    def _open(
        self, stream: _Stream, run_id: str, start: float, at: float, *, resumed: bool
    ) -> _Run:
        spawned = self._children.get(stream.session_id)
        if spawned is not None:
            trace_id, parent_id, agent = spawned
            stream.agent = stream.agent or agent
        elif stream.link is not None:
            trace_id, parent_id = stream.link
        else:
            trace_id, parent_id = trace_id_of(stream.session_id, run_id), None
        return _Run(
            run_id=run_id,
            trace_id=trace_id,
            span_id=run_span_id(stream.session_id, run_id),
            parent_id=parent_id,
            start=min(start, at),
            last=at,
            resumed=resumed,
        )

    def _common(self, stream: _Stream, run: _Run, operation: str) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": self.provider or stream.provider or "_OTHER",
            "gen_ai.conversation.id": stream.session_id,
            "gen_ai.agent.id": stream.session_id,
        }
        if stream.agent:
            attributes["gen_ai.agent.name"] = stream.agent
        attributes["powertrio.run.id"] = run.run_id
        return attributes

    def _llm(self, stream: _Stream, run: _Run, event: AssistantRecorded, at: float) -> None:
        header = event.request_header
        requested = (header.model if header is not None else None) or event.model or None
        run.model = requested
        attributes = self._common(stream, run, "chat")
        if requested:
            attributes["gen_ai.request.model"] = requested
        if event.model:
            attributes["gen_ai.response.model"] = event.model
        if event.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (event.finish_reason,)
        attributes["gen_ai.usage.input_tokens"] = event.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = event.usage.completion_tokens
        attributes["powertrio.round"] = event.round
        if header is not None and header.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = header.max_tokens
        if header is not None and header.temperature is not None:
            attributes["gen_ai.request.temperature"] = header.temperature
        self._emit(
            SpanRecord(
                name=f"chat {requested}" if requested else "chat",
                trace_id=run.trace_id,
                span_id=llm_span_id(stream.session_id, run.run_id, event.round),
                parent_id=run.span_id,
                start=run.last,
                end=at,
                attributes=attributes,
                kind="client",
            )
        )

    def _tool(self, stream: _Stream, run: _Run, event: ToolFinished, at: float) -> None:
        outcome = event.outcome
        name, start = run.tools.pop(outcome.call_id, (outcome.tool_name, run.last))
        attributes = self._common(stream, run, "execute_tool")
        attributes["gen_ai.tool.name"] = name
        attributes["gen_ai.tool.call.id"] = outcome.call_id
        attributes["gen_ai.tool.type"] = TOOL_TYPE
        attributes["powertrio.tool.status"] = outcome.status
        failed = outcome.status != "ok"
        if failed:
            attributes["error.type"] = outcome.error_code or f"tool.{outcome.status}"
        self._emit(
            SpanRecord(
                name=f"execute_tool {name}",
                trace_id=run.trace_id,
                span_id=tool_span_id(stream.session_id, run.run_id, outcome.call_id),
                parent_id=run.span_id,
                start=start,
                end=at,
                attributes=attributes,
                error=f"{outcome.status}: {outcome.content}" if failed else None,
            )
        )

    def _finish(self, stream: _Stream, run: _Run, event: RunFinished, at: float) -> None:
        code = event.error_code
        if event.status == "failed" and code is not None and code.startswith("llm."):
            # The model call in flight failed: its span ends with the run, in error.
            round_ = event.rounds + 1
            attributes = self._common(stream, run, "chat")
            if run.model:
                attributes["gen_ai.request.model"] = run.model
            attributes["powertrio.round"] = round_
            attributes["error.type"] = code
            self._emit(
                SpanRecord(
                    name=f"chat {run.model}" if run.model else "chat",
                    trace_id=run.trace_id,
                    span_id=llm_span_id(stream.session_id, run.run_id, round_),
                    parent_id=run.span_id,
                    start=run.last,
                    end=at,
                    attributes=attributes,
                    error=event.error,
                    kind="client",
                )
            )
        attributes = self._common(stream, run, "invoke_agent")
        attributes["gen_ai.usage.input_tokens"] = event.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = event.usage.completion_tokens
        attributes["powertrio.run.status"] = event.status
        attributes["powertrio.run.rounds"] = event.rounds
        attributes["powertrio.run.resumed"] = run.resumed
        if stream.parent_id is not None:
            attributes["powertrio.parent_session.id"] = stream.parent_id
        failed = event.status == "failed"
        if failed:
            attributes["error.type"] = code or "_OTHER"
        self._emit(
            SpanRecord(
                name=f"invoke_agent {stream.agent}" if stream.agent else "invoke_agent",
                trace_id=run.trace_id,
                span_id=run.span_id,
                parent_id=run.parent_id,
                start=run.start,
                end=at,
                attributes=attributes,
                error=event.error if failed else None,
            )
        )
