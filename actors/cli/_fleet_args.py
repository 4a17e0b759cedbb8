"""The arguments of ``powertrio serve`` and ``powertrio fleet ...`` (argparse only).

Kept apart from the commands (``_fleet``), which load the log and the agents, so that
building the parser for ``powertrio --help`` loads neither.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ._serve_ui import add_serve_ui_options

__all__ = ["add_fleet_commands"]


def add_fleet_commands(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``serve`` and ``fleet`` (with its sub-commands) to the parser."""
    serve = add(
        "serve",
        "host the fleet's agents and run their schedules until drained",
        "SIGTERM or Ctrl-C: drain (runs finish their turn, then exit 0); twice: stop now. "
        "Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or "
        "OTEL_TRACES_EXPORTER=otlp) is set (needs the otel extra).",
    )
    serve.add_argument("--node", default=None, help="this node's name (default: the host name)")
    serve.add_argument(
        "--drain-deadline",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds runs get to finish their turn when draining (default 30)",
    )
    serve.add_argument(
        "--poll",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between reads of the fleet's control stream (default 1)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve Prometheus /metrics on this port (needs the otel extra)",
    )
    serve.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address /metrics listens on (default 127.0.0.1)",
    )
    add_serve_ui_options(serve)
    fleet = add("fleet", "declare, watch and steer a fleet of long-running agents")
    commands = fleet.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)

    def sub(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, parents=[common])

    fleet_file = "the fleet file (TOML)"
    sub("apply", "reconcile the log with a fleet file (TOML)").add_argument("file", help=fleet_file)
    sub("status", "per agent: state, node, last run, next wake-up, usage today, errors")
    agent = "the agent's name, as the fleet file declares it"
    sub("pause", "no new runs for an agent until resumed").add_argument("agent", help=agent)
    sub("resume", "let a paused agent run again").add_argument("agent", help=agent)
    sub("drain", "ask a serving node to drain and exit").add_argument(
        "node", help="the node's name (serve --node), as `powertrio fleet status` lists it"
    )
    upgrade = sub("upgrade", "check a new fleet file against the agents' recent runs")
    upgrade.add_argument("file", help=fleet_file)
    upgrade.add_argument(
        "--check", action="store_true", required=True, help="replay, report, change nothing"
    )
    upgrade.add_argument(
        "--sample", type=int, default=3, metavar="N", help="recent runs per agent (default 3)"
    )
