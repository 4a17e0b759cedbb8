"""Prometheus metrics of a runtime, and a ``/metrics`` endpoint on Trio.

Counters move when events are appended (the persist listener); gauges are read from the
runtime when scraped. Nothing is counted twice or kept apart from the log: a counter is the
number of events of its kind this process appended since it started, which is what
Prometheus expects of a counter (it starts again from 0 with the process).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, final

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import (
    CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE,
)
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector

from actors._limiter._core import BackoffRecorded, GrantIssued
from actors._session._events import AssistantRecorded, RunFinished, RunStarted, ToolFinished
from runtime.cluster import ClusterNode

if TYPE_CHECKING:
    from runtime import Runtime

logger = logging.getLogger("powertrio.telemetry")

_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@final
class FleetMetrics:
    """The Prometheus metrics of one runtime (a node), in their own registry.

    Give it to :class:`~actors.telemetry.Telemetry` (``metrics=``), which feeds it; read it
    with :meth:`render`, or serve it with :func:`serve_metrics`.

    Args:
        node (str): the node's name, the ``node`` label of the lease gauge.
        registry (CollectorRegistry | None): where the metrics live; a new one when
            ``None`` (not the process-wide default, so two runtimes never share counts).
    """

    def __init__(self, *, node: str = "local", registry: CollectorRegistry | None = None) -> None:
        self.node = node
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.runs_started = Counter(
            "powertrio_runs_started", "Runs started (RunStarted appended).", registry=r
        )
        self.runs = Counter("powertrio_runs", "Runs finished, by status.", ["status"], registry=r)
        self.llm_calls = Counter(
            "powertrio_llm_calls", "Model answers recorded, by model.", ["model"], registry=r
        )
        self.tokens = Counter(
            "powertrio_llm_tokens",
            "Tokens the providers reported, by model and type (input, output).",
            ["model", "type"],
            registry=r,
        )
        self.tool_calls = Counter(
            "powertrio_tool_calls",
            "Tool calls finished, by tool and status.",
            ["tool", "status"],
            registry=r,
        )
        self.errors = Counter(
            "powertrio_errors",
            "Failed runs and failed tool calls, by stable error code.",
            ["code"],
            registry=r,
        )
        self.events = Counter(
            "powertrio_events_appended", "Events appended by this node's actors.", registry=r
        )
        self.grants = Counter(
            "powertrio_limiter_grants",
            "Grants the fleet limiter issued, by provider and model.",
            ["model"],
            registry=r,
        )
        self.backoffs = Counter(
            "powertrio_limiter_backoffs",
            "429s that closed a provider and model in the fleet limiter.",
            ["model"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "powertrio_commit_seconds",
            "How long an actor's append took, from the call to the acknowledgement.",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self._owned: set[str] = set()
        self._runtime: Runtime | None = None
        r.register(_RuntimeCollector(self))
        # The process's CPU, memory, open files and start time (process_*), as every
        # Prometheus client exposes them; read from /proc at each scrape (none elsewhere).
        ProcessCollector(registry=r)

    def follow(self, runtime: Runtime) -> None:
        """Read ``runtime``'s mailboxes when scraped and time its commits."""
        self._runtime = runtime
        runtime.add_commit_observer(self._committed)

    def _committed(self, stream: str, events: int, seconds: float) -> None:
        self.commit_seconds.observe(seconds)

    def owner_ready(self, stream: str) -> None:
        self._owned.add(stream)

    def owner_gone(self, stream: str) -> None:
        self._owned.discard(stream)

    def persisted(self, stream: str, events: Sequence[object]) -> None:
        """Count what an actor has just appended."""
        self.events.inc(len(events))
        if stream.startswith("limiter/"):
            for event in events:
                if isinstance(event, GrantIssued):
                    self.grants.labels(f"{event.provider}/{event.model}").inc()
                elif isinstance(event, BackoffRecorded):
                    self.backoffs.labels(f"{event.provider}/{event.model}").inc()
            return
        if not stream.startswith("session/"):
            return
        for event in events:
            if isinstance(event, AssistantRecorded):
                model = event.model or "unknown"
                self.llm_calls.labels(model).inc()
                self.tokens.labels(model, "input").inc(event.usage.prompt_tokens)
                self.tokens.labels(model, "output").inc(event.usage.completion_tokens)
            elif isinstance(event, ToolFinished):
                outcome = event.outcome
                self.tool_calls.labels(outcome.tool_name, outcome.status).inc()
                if outcome.status != "ok":
                    self.errors.labels(outcome.error_code or f"tool.{outcome.status}").inc()
            elif isinstance(event, RunStarted):
                self.runs_started.inc()
            elif isinstance(event, RunFinished):
                self.runs.labels(event.status).inc()
                if event.status == "failed":
                    self.errors.labels(event.error_code or "unknown").inc()

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition and its content type (for any HTTP server to answer
        ``GET /metrics`` with): OpenMetrics (ending ``# EOF``) when the request's
        ``Accept`` header prefers ``application/openmetrics-text``, else the Prometheus
        text format. Call it in the runtime's Trio thread: the gauges read the runtime's
        live actors."""
        if prefers_openmetrics(accept):
            body: bytes = openmetrics_latest(self.registry)  # type: ignore[no-untyped-call]
            return body, OPENMETRICS_CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def prefers_openmetrics(accept: str | None) -> bool:
    """Whether an ``Accept`` header ranks OpenMetrics (any version) at least as high as
    the text format (``text/plain``, ``*/*``); quality values are honoured, ``q=0``
    refuses."""
    best_openmetrics = best_text = 0.0
    for item in (accept or "").split(","):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        if media == "application/openmetrics-text":
            best_openmetrics = max(best_openmetrics, quality)
        elif media in ("text/plain", "text/*", "*/*"):
            best_text = max(best_text, quality)
    return best_openmetrics > 0 and best_openmetrics >= best_text


@final
class _RuntimeCollector(Collector):
    """Gauges read from the runtime at each scrape."""

    def __init__(self, metrics: FleetMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        leases = GaugeMetricFamily(
            "powertrio_leases",
            "What this node owns, by state: `owned` counts the streams whose actor runs "
            "here; on a node of a fleet (PostgreSQL), `shards_held` the shards it holds a "
            "lease on and `shards_surplus` those it is handing back.",
            labels=["node", "state"],
        )
        leases.add_metric([metrics.node, "owned"], len(metrics._owned))
        runtime = metrics._runtime
        cluster = None if runtime is None else ClusterNode.of(runtime)
        if cluster is not None:
            leases.add_metric([metrics.node, "shards_held"], len(cluster.held))
            leases.add_metric([metrics.node, "shards_surplus"], len(cluster.surplus))
        yield leases
        if runtime is None:
            return
        mailboxes = runtime.mailboxes()
        depth = GaugeMetricFamily(
            "powertrio_mailbox_depth",
            "Messages waiting in an actor's mailbox (both lanes); only non-empty mailboxes.",
            labels=["actor"],
        )
        deepest = 0
        queued = 0
        for path, stats in sorted(mailboxes.items()):
            waiting = stats.queued + stats.queued_system
            queued += waiting
            deepest = max(deepest, waiting)
            if waiting:
                depth.add_metric([path], waiting)
        yield depth
        yield GaugeMetricFamily(
            "powertrio_mailbox_depth_max", "The deepest mailbox now.", value=deepest
        )
        yield GaugeMetricFamily(
            "powertrio_mailbox_queued", "Messages waiting in all mailboxes.", value=queued
        )
        yield GaugeMetricFamily(
            "powertrio_actors", "Live actors.", value=runtime.statistics().actors
        )


_MAX_REQUEST = 8192


async def serve_metrics(
    metrics: FleetMetrics,
    host: str = "127.0.0.1",
    port: int = 9464,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer ``GET /metrics`` over HTTP/1.1 on ``host:port`` until cancelled (in the
    format the request's ``Accept`` header prefers: :meth:`FleetMetrics.render`).

    ``await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)`` returns the listeners
    (port 0 picks a free port). Any other path answers 404; each connection serves one
    request.
    """

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, metrics)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            logger.debug("metrics connection closed early: %s", exc)
        finally:
            await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host=host)
    task_status.started(listeners)
    await trio.serve_listeners(handle, listeners)


async def _answer(stream: trio.SocketStream, metrics: FleetMetrics) -> None:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _MAX_REQUEST:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        data += chunk
    request = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    line, *fields = request.split("\r\n")
    parts = line.split(" ")
    method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    accept = ", ".join(
        value.strip()
        for name, _, value in (field.partition(":") for field in fields)
        if name.strip().lower() == "accept"
    )
    if method in ("GET", "HEAD") and path.split("?", 1)[0] == "/metrics":
        body, content_type = metrics.render(accept)
        status = "200 OK"
    else:
        body, content_type, status = b"not found\n", "text/plain; charset=utf-8", "404 Not Found"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nVary: Accept\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    await stream.send_all(head + (b"" if method == "HEAD" else body))
