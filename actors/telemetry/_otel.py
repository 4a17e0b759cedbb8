"""OpenTelemetry spans and Prometheus counts from what the log and the runtime already know.

:class:`Telemetry` is a persist listener: the runtime tells it every event an actor has
appended, after the append. It keeps no history of its own; a span is the fold of the
events that opened and closed it (:mod:`actors.telemetry._spans`), a counter the count of
events of a kind.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from protocols.codec import decode_record
from protocols.errors import ConfigError
from runtime import ActorRef, EventStore, Runtime

from ._metrics import FleetMetrics
from ._spans import SpanBuilder, SpanRecord

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

logger = logging.getLogger("powertrio.telemetry")

_SESSION = "session/"
_NS = 1_000_000_000


@final
class LogIdGenerator(IdGenerator):
    """Hands the tracer the ids the log derived for the span being started.

    Give it to the ``TracerProvider`` that :class:`Telemetry` exports through
    (``TracerProvider(id_generator=LogIdGenerator())``); spans started by other code on the
    same provider get random ids, as with the SDK's default generator.
    """

    __slots__ = ("_random", "_span", "_trace")

    def __init__(self) -> None:
        self._trace: int | None = None
        self._span: int | None = None
        self._random = RandomIdGenerator()

    def _set(self, trace_id: int | None, span_id: int | None) -> None:
        self._trace, self._span = trace_id, span_id

    def generate_trace_id(self) -> int:
        trace_id, self._trace = self._trace, None
        return trace_id if trace_id is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        span_id, self._span = self._span, None
        return span_id if span_id is not None else self._random.generate_span_id()


def telemetry_tracer_provider(**kwargs: object) -> TracerProvider:
    """A ``TracerProvider`` whose ids :class:`Telemetry` can set (other arguments are the
    SDK's: ``resource``, ``sampler``, ...); add your span processors to it."""
    return TracerProvider(id_generator=LogIdGenerator(), **kwargs)  # type: ignore[arg-type]


@final
class Telemetry:
    """Spans and metrics of every session of a runtime, derived from the events it appends.

    Install it before spawning the sessions it follows (:meth:`install`). Spans are emitted
    when the event that ends them is committed: a model call's with its answer, a tool
    call's with its result, a run's with its end.

    Args:
        tracer_provider: where spans go; made by :func:`telemetry_tracer_provider` (its
            ids must come from a :class:`LogIdGenerator`). ``None``: no spans.
        metrics (FleetMetrics | None): the Prometheus counts to keep. ``None``: none.
        provider (str | None): ``gen_ai.provider.name`` of every span (``openai``,
            ``azure.ai.openai``, ...). ``None``: each session's own, as its first event
            records it (its transport's name), ``_OTHER`` when it records none.

    Raises:
        ConfigError: the tracer provider does not take its ids from a ``LogIdGenerator``.
    """

    __slots__ = ("_builder", "_ids", "_runtime", "_tracer", "metrics")

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        metrics: FleetMetrics | None = None,
        provider: str | None = None,
    ) -> None:
        self.metrics = metrics
        self._tracer: Tracer | None = None
        self._ids: LogIdGenerator | None = None
        if tracer_provider is not None:
            ids = getattr(tracer_provider, "id_generator", None)
            if not isinstance(ids, LogIdGenerator):
                msg = (
                    "the tracer provider must take its ids from the log: make it with "
                    "telemetry_tracer_provider() or TracerProvider(id_generator=LogIdGenerator())"
                )
                raise ConfigError(msg)
            self._ids = ids
            self._tracer = tracer_provider.get_tracer("powertrio")
        self._builder = SpanBuilder(self._emit, provider=provider)
        self._runtime: Runtime | None = None

    def install(self, runtime: Runtime) -> None:
        """Follow ``runtime``'s streams and commits from now on."""
        self._runtime = runtime
        runtime.add_persist_listener(self)
        if self.metrics is not None:
            self.metrics.follow(runtime)

    # -- the persist listener ---------------------------------------------------------

    def on_owner_ready(self, stream: str, owner: ActorRef[object]) -> None:
        if self.metrics is not None:
            self.metrics.owner_ready(stream)
        if self._tracer is not None and stream.startswith(_SESSION):
            assert self._runtime is not None
            session_id = stream[len(_SESSION) :]
            self._builder.ready(session_id, self._runtime.clock.now())
            # A resumed session's first event was committed before this process: read it
            # (its agent name, its trace context) before folding the session's new ones.
            self._builder.hold(session_id)
            trio.lowlevel.spawn_system_task(self._read_first, stream, self._runtime.store)

    def on_owner_gone(self, stream: str, owner: ActorRef[object]) -> None:
        if self.metrics is not None:
            self.metrics.owner_gone(stream)
        if stream.startswith(_SESSION):
            self._builder.forget(stream[len(_SESSION) :])

    def on_persisted(self, stream: str, events: Sequence[object]) -> None:
        metrics = self.metrics
        if metrics is not None:
            try:
                metrics.persisted(stream, events)
            except Exception:  # a listener must not raise into the actor
                logger.exception("telemetry: could not count the events of %s", stream)
        if self._tracer is None or not stream.startswith(_SESSION):
            return
        assert self._runtime is not None
        now = self._runtime.clock.now()
        session_id = stream[len(_SESSION) :]
        feed = self._builder.feed
        try:
            for event in events:
                feed(session_id, event, now)
        except Exception:  # a listener must not raise into the actor
            logger.exception("telemetry: could not fold the events of %s", stream)

    async def _read_first(self, stream: str, store: EventStore) -> None:
        first: object | None = None
        try:
            records = await store.read(stream, limit=1)
            if records:
                first = decode_record(records[0])
        except Exception:  # a system task must not raise: the spans go on without it
            logger.exception("telemetry: could not read the first event of %s", stream)
        finally:
            self._builder.release(stream[len(_SESSION) :], first)

    # -- spans ------------------------------------------------------------------------

    def _emit(self, record: SpanRecord) -> None:
        tracer, ids = self._tracer, self._ids
        assert tracer is not None
        assert ids is not None
        emit_span(tracer, ids, record)


def emit_span(tracer: Tracer, ids: LogIdGenerator, record: SpanRecord) -> None:
    """Start and end one span with the record's ids and times."""
    context = None
    if record.parent_id is not None:
        parent = SpanContext(
            trace_id=record.trace_id,
            span_id=record.parent_id,
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        context = trace.set_span_in_context(NonRecordingSpan(parent))
    ids._set(record.trace_id, record.span_id)
    span = tracer.start_span(
        record.name,
        context=context,
        kind=SpanKind.CLIENT if record.kind == "client" else SpanKind.INTERNAL,
        attributes=dict(record.attributes),
        start_time=int(record.start * _NS),
    )
    ids._set(None, None)  # a sampler that made no span took none
    if record.error is not None:
        span.set_status(Status(StatusCode.ERROR, record.error))
    span.end(end_time=int(record.end * _NS))


async def export_session_spans(
    store: EventStore,
    session_ids: Sequence[str],
    tracer_provider: TracerProvider,
    *,
    provider: str | None = None,
) -> int:
    """Emit the spans of the finished runs of sessions from their log (a backfill, or a
    check that the live spans match the log). A sub-agent's runs join its parent's trace
    (its log records the spawning call's trace context). Returns the number of spans
    emitted.

    Raises:
        ConfigError: the tracer provider does not take its ids from a ``LogIdGenerator``.
    """
    ids = getattr(tracer_provider, "id_generator", None)
    if not isinstance(ids, LogIdGenerator):
        msg = "the tracer provider must take its ids from the log (telemetry_tracer_provider())"
        raise ConfigError(msg)
    tracer = tracer_provider.get_tracer("powertrio")
    emitted = 0

    def emit(record: SpanRecord) -> None:
        nonlocal emitted
        emit_span(tracer, ids, record)
        emitted += 1

    builder = SpanBuilder(emit, provider=provider)
    for session_id in session_ids:
        version = 0
        while True:
            page = await store.read(f"{_SESSION}{session_id}", version + 1, limit=1024)
            for record in page:
                builder.feed(session_id, decode_record(record), record.recorded_at)
            if len(page) < 1024:
                break
            version = page[-1].version
    return emitted
