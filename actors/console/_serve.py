"""Serving the console: Hypercorn's Trio worker, on loopback unless a token guards it."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

import trio

from ._errors import ConsoleTokenRequiredError

__all__ = ["check_bind", "serve_console"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback with no token.

    Raises:
        ConsoleTokenRequiredError: ``host`` is not a loopback address and ``token`` is
            empty.
    """
    if not is_loopback(host) and not token:
        raise ConsoleTokenRequiredError(host)


async def serve_console(
    app: object,
    *,
    host: str = "127.0.0.1",
    port: int = 8321,
    token: str | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (from :func:`console_app`) until cancelled or ``shutdown`` returns.

    ``task_status.started`` gets the console's address (``port=0`` picks a free port).

    Raises:
        ConsoleTokenRequiredError: ``host`` is not loopback and there is no ``token``.
    """
    check_bind(host, token)
    from hypercorn.config import Config  # noqa: PLC0415  # the `console` extra
    from hypercorn.trio import serve  # noqa: PLC0415

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        found: list[str] = await nursery.start(_serve, serve, app, config, shutdown)
        task_status.started(found[0] if found else f"http://{host}:{port}")


async def _serve(
    serve: Callable[..., Awaitable[None]],
    app: object,
    config: object,
    shutdown: Callable[[], Awaitable[None]] | None,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    await serve(app, config, shutdown_trigger=shutdown, task_status=task_status)
