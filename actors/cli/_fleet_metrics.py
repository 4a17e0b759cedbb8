"""``powertrio serve``'s telemetry: Prometheus ``/metrics`` (``--metrics-port N``) and spans
exported over OTLP as the standard ``OTEL_*`` variables say, as node services."""

# ruff: noqa: PLC0415

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import trio

from protocols.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.sdk.trace import TracerProvider

    from runtime import Runtime

    from .._fleet._node import FleetNode, NodeService

    class _MetricsInstall(Protocol):
        def __call__(
            self, runtime: Runtime, *, spans: TracerProvider | None = None
        ) -> NodeService: ...


__all__ = ["metrics_service", "telemetry_services"]

_SPAN_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
"""Any of these set asks for spans (``actors.telemetry.otlp_tracer_provider`` decides)."""

OTEL_HINT = "pip install 'powertrio[otel]'"


def metrics_service(node: str, host: str, port: int) -> _MetricsInstall:
    """Given the node's runtime: install telemetry on it (before any agent starts, so
    every owner is counted) and the service that serves ``/metrics``.

    Checked when the command starts, before the log is opened, so a node never starts
    without the endpoint it was asked for.

    Raises:
        ConfigError: the ``otel`` extra (``prometheus-client``, ``opentelemetry-sdk``) is
            missing (the message says what to install), or the port is out of range.
    """
    if not 0 <= port <= 65535:
        msg = f"--metrics-port must be from 0 to 65535, got {port}"
        raise ConfigError(msg)
    try:
        from actors.telemetry import FleetMetrics, Telemetry, serve_metrics
    except ImportError as exc:
        msg = f"--metrics-port needs the otel extra ({exc.name or exc} is missing): {OTEL_HINT}"
        raise ConfigError(msg) from None

    def install(runtime: Runtime, *, spans: TracerProvider | None = None) -> NodeService:
        metrics = FleetMetrics(node=node)
        Telemetry(metrics=metrics, tracer_provider=spans).install(runtime)

        async def serve(_fleet: FleetNode) -> None:
            await serve_metrics(metrics, host, port)

        return serve

    return install


def telemetry_services(
    node: str,
    host: str,
    port: int | None,
    environ: Mapping[str, str] | None = None,
) -> Callable[[Runtime], list[NodeService]]:
    """Given the node's runtime: install telemetry on it and return the services that
    serve it: ``/metrics`` when ``port`` is given, spans over OTLP when the ``OTEL_*``
    variables ask for them (flushed when the node stops serving; the SDK flushes the
    rest, spans of runs the drain ended, when the process exits). Nothing when neither.

    Checked when the command starts, before the log is opened.

    Raises:
        ConfigError: as :func:`metrics_service`; or the ``OTEL_*`` variables ask for an
            exporter or protocol powertrio does not speak, or for spans without the
            ``otel`` extra (the message says what to install).
    """
    env = os.environ if environ is None else environ
    metrics = metrics_service(node, host, port) if port is not None else None
    wanted = [name for name in _SPAN_VARIABLES if env.get(name)]
    tracer_provider = None
    if wanted:
        try:
            from actors.telemetry import otlp_tracer_provider
        except ImportError as exc:
            msg = (
                f"{wanted[0]} asks for spans, which need the otel extra "
                f"({exc.name or exc} is missing): {OTEL_HINT}"
            )
            raise ConfigError(msg) from None
        tracer_provider = otlp_tracer_provider(instance=node, environ=env)
    if tracer_provider is None:
        if metrics is None:
            return lambda _runtime: []
        only_metrics = metrics
        return lambda runtime: [only_metrics(runtime)]
    from actors.telemetry import Telemetry

    provider = tracer_provider

    def install(runtime: Runtime) -> list[NodeService]:
        services = []
        if metrics is not None:
            services.append(metrics(runtime, spans=provider))
        else:
            Telemetry(tracer_provider=provider).install(runtime)

        async def flush(_fleet: FleetNode) -> None:
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(provider.force_flush)

        services.append(flush)
        return services

    return install
