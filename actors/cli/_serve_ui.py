"""``powertrio serve --ui-port N``: the node serves the web console beside its agents.

Kept apart from ``serve`` itself: the options (argparse only, so ``--help`` stays quick)
and a :data:`~actors.fleet.NodeService` that serves the console for as long as the node
serves. The rules are ``powertrio ui``'s: loopback by default, and any other
``--ui-host`` needs ``--ui-token`` (or ``POWERTRIO_UI_TOKEN``). The console is
read-only here: the node drives the fleet's sessions, and the forms of ``powertrio ui``
would resume them from the log behind its back.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import os
from functools import partial
from typing import TYPE_CHECKING

import trio

from ._argtypes import port

if TYPE_CHECKING:
    from .._fleet._node import FleetNode, NodeService
    from ._common import CliContext

__all__ = ["add_serve_ui_options", "console_services"]


def add_serve_ui_options(serve: argparse.ArgumentParser) -> None:
    """``--ui-port``, ``--ui-host`` and ``--ui-token`` on ``serve``."""
    serve.add_argument(
        "--ui-port",
        type=port,
        default=None,
        metavar="N",
        help="also serve the web console on this port (0: any free one; needs the console extra)",
    )
    serve.add_argument(
        "--ui-host",
        default="127.0.0.1",
        metavar="H",
        help="the console's address (default 127.0.0.1; any other needs --ui-token)",
    )
    serve.add_argument(
        "--ui-token",
        default=None,
        metavar="T",
        help="a bearer token every console request must carry (or $POWERTRIO_UI_TOKEN)",
    )


def console_services(ctx: CliContext, args: argparse.Namespace) -> list[NodeService]:
    """The console as a node service, if ``--ui-port`` asks for it (else none).

    Raises:
        ConsoleTokenRequiredError: ``--ui-host`` is not loopback and there is no token
            (checked here, before the node starts).
    """
    if getattr(args, "ui_port", None) is None:
        return []
    from actors.console import check_bind

    token = args.ui_token or os.environ.get("POWERTRIO_UI_TOKEN") or None
    check_bind(args.ui_host, token)

    async def serve_ui(node: FleetNode) -> None:
        from actors.console import console_app, serve_console

        app = console_app(
            node.runtime.store,
            token=token,
            where=f"{ctx.db} · node {node.node}",
        )
        async with trio.open_nursery() as nursery:
            serving = partial(serve_console, app, host=args.ui_host, port=args.ui_port, token=token)
            url: str = await nursery.start(serving)
            login = " (open it with ?token=... once)" if token else ""
            ctx.err.print(f"console on {url}/{login}", soft_wrap=True, markup=False)

    return [serve_ui]
