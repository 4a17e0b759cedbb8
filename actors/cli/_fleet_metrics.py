"""``powertrio serve --metrics-port N``: the node's Prometheus ``/metrics`` as a node service."""

# ruff: noqa: PLC0415

from __future__ import annotations

from typing import TYPE_CHECKING

from protocols.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from actors import FleetNode, NodeService
    from runtime import Runtime

__all__ = ["metrics_service"]

OTEL_HINT = "pip install 'powertrio[otel]'"


def metrics_service(node: str, host: str, port: int) -> Callable[[Runtime], NodeService]:
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

    def install(runtime: Runtime) -> NodeService:
        metrics = FleetMetrics(node=node)
        Telemetry(metrics=metrics).install(runtime)

        async def serve(_fleet: FleetNode) -> None:
            await serve_metrics(metrics, host, port)

        return serve

    return install
