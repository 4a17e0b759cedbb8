"""Telemetry of a runtime: OpenTelemetry spans and Prometheus metrics derived from the
events it appends, a ``/metrics`` endpoint on Trio, and structured JSON logs.

Needs the ``otel`` extra (``pip install 'powertrio[otel]'``: ``opentelemetry-api``,
``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``, ``prometheus-client``).
See docs/telemetry.md.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._export import otlp_tracer_provider as otlp_tracer_provider
from ._logs import JsonFormatter as JsonFormatter
from ._logs import use_json_logs as use_json_logs
from ._metrics import FleetMetrics as FleetMetrics
from ._metrics import serve_metrics as serve_metrics
from ._otel import LogIdGenerator as LogIdGenerator
from ._otel import Telemetry as Telemetry
from ._otel import export_session_spans as export_session_spans
from ._otel import telemetry_tracer_provider as telemetry_tracer_provider
from ._spans import SpanRecord as SpanRecord
from ._spans import llm_span_id as llm_span_id
from ._spans import run_span_id as run_span_id
from ._spans import tool_span_id as tool_span_id
from ._spans import trace_id_of as trace_id_of

_fixup(__name__, globals())
del _fixup
