"""Spans over OTLP, configured the way every OpenTelemetry SDK is: by ``OTEL_*`` variables.

An operator points a node at a collector with the variables their other services use
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ...);
nothing powertrio-specific to learn. Nothing is exported unless asked for: an endpoint or
``OTEL_TRACES_EXPORTER=otlp`` turns it on (the SDK's own default would send to
``localhost:4318`` from every process that merely imports it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.sdk.resources import (
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from protocols.errors import ConfigError

from ._otel import telemetry_tracer_provider

__all__ = ["DEFAULT_SERVICE_NAME", "otlp_tracer_provider"]

DEFAULT_SERVICE_NAME = "powertrio"
"""``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES``
names the service."""

_SUPPORTED_PROTOCOL = "http/protobuf"
_HINT = "pip install 'powertrio[otel]'"


def otlp_tracer_provider(
    *, instance: str | None = None, environ: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """A tracer provider exporting through OTLP/HTTP as the ``OTEL_*`` variables say, or
    ``None`` when they ask for no export.

    Export is on when ``OTEL_TRACES_EXPORTER`` is ``otlp``, or is unset and
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set;
    ``OTEL_TRACES_EXPORTER=none`` turns it off. The exporter reads the endpoint, headers,
    timeout and compression variables itself, the batch processor the ``OTEL_BSP_*``
    ones. The resource is the SDK's (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``)
    with ``service.name`` ``powertrio`` and ``service.instance.id`` ``instance`` (the
    node's name) where those do not say.

    Args:
        instance: the ``service.instance.id`` to use when the environment gives none.
        environ: where to read the variables that decide (``os.environ`` when ``None``);
            the exporter and the resource read ``os.environ``.

    Raises:
        ConfigError: an exporter other than ``otlp``/``none``, a protocol other than
            ``http/protobuf``, or the OTLP exporter package is missing (the message says
            what to install).
    """
    env = os.environ if environ is None else environ
    exporters = [
        name.strip().lower()
        for name in env.get("OTEL_TRACES_EXPORTER", "").split(",")
        if name.strip()
    ]
    if "none" in exporters:
        return None
    unsupported = [name for name in exporters if name != "otlp"]
    if unsupported:
        msg = (
            f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']} is not supported: "
            "powertrio exports spans through otlp (or none)"
        )
        raise ConfigError(msg)
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not exporters and not endpoint:
        return None
    variable = (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        else "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    protocol = (env.get(variable) or _SUPPORTED_PROTOCOL).strip().lower()
    if protocol != _SUPPORTED_PROTOCOL:
        msg = (
            f"{variable}={env[variable]} is not supported: powertrio exports OTLP over "
            f"{_SUPPORTED_PROTOCOL}"
        )
        raise ConfigError(msg)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
    except ImportError as exc:
        msg = f"exporting spans needs the otel extra ({exc.name or exc} is missing): {_HINT}"
        raise ConfigError(msg) from None
    resource = _resource(instance)
    provider = telemetry_tracer_provider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _resource(instance: str | None) -> Resource:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the SDK's
    own attributes), with our defaults where the environment says nothing."""
    given = OTELResourceDetector().detect().attributes
    defaults: dict[str, str] = {}
    if SERVICE_NAME not in given:
        defaults[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    if instance and SERVICE_INSTANCE_ID not in given:
        defaults[SERVICE_INSTANCE_ID] = instance
    return Resource.create(defaults)
