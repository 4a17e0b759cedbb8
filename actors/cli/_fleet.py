"""``powertrio serve`` and ``powertrio fleet ...``: host a fleet, declare it, watch and steer it.

``serve`` is one node. On SQLite it holds the log's driver lock (one node owns every
agent). On PostgreSQL it joins the fleet as a node (``Node(NAME)``, no driver lock:
several run at once): it hosts the agents whose shards it holds, and the sessions of
those shards (``host_node``), and hands them over as leases move. It runs the agents'
schedules. SIGTERM
(or Ctrl-C, or ``powertrio fleet drain NODE``) drains it: no new runs, running ones stop
after their current turn within ``--drain-deadline``, exit 0. A second signal cancels
what is left at once (transcripts stay valid: open tool calls are closed as interrupted).

The ``fleet`` commands only append to the log's control stream and read it, so they run
beside a serving node.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from protocols import LLM
from protocols.errors import ConfigError, InputFileNotFoundError

from .._reading._format import fmt_age, fmt_iso, fmt_time, plural
from ._common import CliContext, db_lock, open_log
from ._serve_ui import console_services

if TYPE_CHECKING:
    from runtime import Runtime

    from .._fleet._events import FleetStatus
    from .._fleet._file import AgentDecl, FleetFile
    from .._fleet._node import FleetNode, NodeService

__all__ = ["cmd_fleet", "cmd_serve"]


def tools_from_here() -> None:
    """Let tool paths name modules of the current folder, as ``python -m`` would (the
    ``powertrio`` script does not put the folder on ``sys.path``)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


def read_fleet_file(path: str) -> FleetFile:
    """The checked fleet file at ``path``.

    Raises:
        InputFileNotFoundError: no such file.
        FleetFileError: the file has problems (each with its line).
    """
    from .._fleet._file import parse_fleet_file

    tools_from_here()
    file = Path(path)
    if not file.is_file():
        raise InputFileNotFoundError(path)
    return parse_fleet_file(file.read_text(encoding="utf-8"), path)


# -- models -----------------------------------------------------------------------------------


def _llm_for(ctx: CliContext) -> Callable[[AgentDecl], LLM]:
    from protocols.transports import ProviderConfig, transport_from_config

    from ._fleet_demo import fleet_demo_llm

    made: dict[tuple[str, str | None], LLM] = {}

    def llm_for(decl: AgentDecl) -> LLM:
        key = (decl.provider, decl.model)
        if key not in made:
            if decl.provider == "demo":
                made[key] = fleet_demo_llm(float(os.environ.get("POWERTRIO_DEMO_DELAY", "0")))
            else:
                environ = dict(os.environ, POWERTRIO_PROVIDER=decl.provider)
                if decl.model:
                    environ["POWERTRIO_MODEL"] = decl.model
                made[key] = transport_from_config(ProviderConfig.from_env(environ))
        return made[key]

    return llm_for


# -- serve ------------------------------------------------------------------------------------


async def _signals(node: object, ctx: CliContext) -> None:
    from .._fleet._node import FleetNode

    assert isinstance(node, FleetNode)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if not node.draining:
                ctx.err.print(f"{name}: draining (again: stop now)")
                node.drain(name)
            else:
                ctx.err.print(f"{name} again: stopping now")
                node.stop_now()


async def cmd_serve(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio serve``: one node hosting the fleet until drained."""
    from runtime import open_runtime

    from .._fleet._node import FleetNode

    tools_from_here()
    name = args.node or socket.gethostname()
    if args.drain_deadline < 0 or args.poll <= 0:
        msg = "--drain-deadline must be >= 0 and --poll > 0 seconds"
        raise ConfigError(msg)
    metrics = _metrics_services(args, name)
    console = console_services(ctx, args)  # refuses a non-loopback console with no token

    def services(runtime: Runtime) -> list[NodeService]:
        return [*metrics(runtime), *console]

    if ctx.dsn is None:
        with db_lock(ctx, "serve"):
            async with open_log(ctx, create=True) as store, open_runtime(store=store) as runtime:
                node = FleetNode(
                    runtime,
                    node=name,
                    llm_for=_llm_for(ctx),
                    drain_deadline=args.drain_deadline,
                    poll=args.poll,
                    services=services(runtime),
                    on_hosting=_say_hosting(ctx, name),
                )
                await _serve_until_stopped(ctx, node, _metrics_address(args))
    else:
        node = await _serve_on_postgres(ctx, args, name, services)
    if ctx.json:
        ctx.emit({"node": name, "drained": True, "cancelled_runs": node.cancelled_runs})
    else:
        cancelled = plural(node.cancelled_runs, "run")
        ctx.err.print(f"node {name} drained ({cancelled} cancelled at once)")
    return 0


async def _serve_until_stopped(ctx: CliContext, node: FleetNode, metrics: str | None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_signals, node, ctx)
        await nursery.start(node.serve)
        agents = plural(len(node.agents()), "agent")
        ctx.err.print(f"node {node.node} serving {agents} · log {ctx.db}", soft_wrap=True)
        if metrics is not None:
            ctx.err.print(f"metrics on http://{metrics}/metrics", soft_wrap=True)
        await node.stopped.wait()
        nursery.cancel_scope.cancel()


def _say_hosting(ctx: CliContext, name: str) -> Callable[[list[str]], None]:
    """A line each time the agents a node hosts change: on PostgreSQL the start-up line
    counts only the shards the node took first (the others' surplus comes later), so
    without these the node would tell another story than ``fleet status``."""

    def say(agents: list[str]) -> None:
        listed = ", ".join(agents[:_LISTED]) + (", ..." if len(agents) > _LISTED else "")
        hosts = plural(len(agents), "agent") + (f": {listed}" if agents else "")
        ctx.err.print(f"node {name} now hosts {hosts}", soft_wrap=True)

    return say


_LISTED = 10
"""Agents named in a hosting line; past that it says how many."""


async def _serve_on_postgres(
    ctx: CliContext,
    args: argparse.Namespace,
    name: str,
    services: Callable[[Runtime], list[NodeService]],
) -> FleetNode:
    """One node of a fleet sharing the PostgreSQL log: no driver lock (the leases say who
    runs what); leaving (after the drain) hands every shard back at once."""
    from runtime import open_runtime
    from runtime.cluster import Node

    from .._fleet._cluster import host_node
    from .._fleet._node import FLEET_PLACED, FleetNode

    async with (
        open_log(ctx, create=True) as store,
        open_runtime(store=store, node=Node(name=name, placed=FLEET_PLACED)) as runtime,
        host_node(runtime, {}) as host,
    ):
        node = FleetNode(
            runtime,
            node=name,
            llm_for=_llm_for(ctx),
            drain_deadline=args.drain_deadline,
            poll=args.poll,
            services=services(runtime),
            host=host,
            on_hosting=_say_hosting(ctx, name),
        )
        await _serve_until_stopped(ctx, node, _metrics_address(args))
    return node


def _metrics_address(args: argparse.Namespace) -> str | None:
    if args.metrics_port is None:
        return None
    return f"{args.metrics_host}:{args.metrics_port}"


def _metrics_services(
    args: argparse.Namespace, name: str
) -> Callable[[Runtime], list[NodeService]]:
    """The ``/metrics`` endpoint when ``--metrics-port`` asks for it, spans over OTLP when
    the ``OTEL_*`` variables do (the ``otel`` extra), checked now, installed on the runtime
    once it is open."""
    from ._fleet_metrics import telemetry_services

    return telemetry_services(name, args.metrics_host, args.metrics_port)


# -- fleet ------------------------------------------------------------------------------------


async def cmd_fleet(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio fleet ACTION``."""
    action = args.fleet_command
    if action == "apply":
        return await _apply(ctx, args)
    if action == "status":
        return await _status(ctx)
    if action in {"pause", "resume"}:
        return await _pause(ctx, args.agent, paused=action == "pause")
    if action == "drain":
        return await _drain(ctx, args.node)
    from ._fleet_upgrade import cmd_upgrade_check

    return await cmd_upgrade_check(ctx, args, read_fleet_file(args.file))


async def _apply(ctx: CliContext, args: argparse.Namespace) -> int:
    from .._fleet._control import apply_fleet

    fleet = read_fleet_file(args.file)
    async with open_log(ctx, create=True) as store:
        report = await apply_fleet(store, fleet)
    if ctx.json:
        ctx.emit(attrs.asdict(report))
        return 0
    for name in report.created:
        ctx.out.print(f"created  {name}")
    for name, fields in report.changed.items():
        ctx.out.print(f"changed  {name} ({', '.join(fields)}; its next run uses it)")
    for name in report.retired:
        ctx.out.print(f"retired  {name} (its history stays)")
    if not (report.created or report.changed or report.retired):
        ctx.out.print(f"up to date ({plural(len(report.unchanged), 'agent')})")
    return 0


def status_json(status: FleetStatus) -> dict[str, object]:
    """``fleet status --json``: times as ISO 8601 (UTC)."""

    def when(value: float | None) -> str | None:
        return None if value is None else fmt_iso(value)

    return {
        "agents": [
            {
                **attrs.asdict(a),
                "last_finished_at": when(a.last_finished_at),
                "next_wakeup": when(a.next_wakeup),
            }
            for a in status.agents
        ],
        "nodes": [{**attrs.asdict(n), "started_at": when(n.started_at)} for n in status.nodes],
    }


async def _status(ctx: CliContext) -> int:
    import time

    from rich.table import Table

    from .._fleet._control import read_fleet_status
    from .._fleet._leases import with_leases

    async with open_log(ctx) as store:
        now = time.time()
        status = await read_fleet_status(store, now=now)
        status = await with_leases(store, status)
    if ctx.json:
        ctx.emit(status_json(status))
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("agent", "state", "node", "last run", "next wake-up", "today", "errors"):
        table.add_column(column)
    lost = {n.name for n in status.nodes if n.state == "lost"}
    for a in status.agents:
        last = "-"
        if a.last_run is not None and a.last_finished_at is not None:
            ago = fmt_age(now - a.last_finished_at)
            last = f"{a.last_run} {a.last_status} {ago} ago"
        limit = f"/{a.day_tokens}" if a.day_tokens else ""
        today = f"{plural(a.runs_today, 'run')} {a.tokens_today}{limit} tok"
        errors = str(a.errors) if not a.last_error else f"{a.errors} ({a.last_error})"
        pending = " (new spec at next run)" if a.running_hash not in {None, a.spec_hash} else ""
        table.add_row(
            a.name,
            a.state + pending,
            (a.node + " (lost)" if a.node in lost else a.node) if a.node else "-",
            last,
            fmt_time(a.next_wakeup) if a.next_wakeup else "-",
            today,
            errors,
        )
    if not status.agents:
        ctx.out.print("no agents: declare them with `powertrio fleet apply FILE`")
    else:
        ctx.out.print(table)
    for n in status.nodes:
        gone = ": its lease lapsed and it recorded no stop (killed?)" if n.state == "lost" else ""
        ctx.out.print(f"node {n.name}: {n.state} (pid {n.pid}, powertrio {n.version}){gone}")
    return 0


async def _pause(ctx: CliContext, name: str, *, paused: bool) -> int:
    from .._fleet._control import set_paused

    async with open_log(ctx) as store:
        changed = await set_paused(store, name, paused=paused, reason="powertrio fleet pause")
    word = "paused" if paused else "resumed"
    if ctx.json:
        ctx.emit({"agent": name, "state": word, "changed": changed})
    else:
        ctx.out.print(f"{name} {word}" + ("" if changed else " already"))
    return 0


async def _drain(ctx: CliContext, node: str) -> int:
    from .._fleet._control import request_drain

    async with open_log(ctx) as store:
        await request_drain(store, node)
    if ctx.json:
        ctx.emit({"node": node, "drain_requested": True})
    else:
        ctx.out.print(f"asked node {node} to drain")
    return 0
