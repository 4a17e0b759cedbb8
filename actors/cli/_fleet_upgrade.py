"""``powertrio fleet upgrade --check FILE``: what a new fleet file would change."""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import attrs

from .._reading._format import plural
from ._common import CliContext, open_log

if TYPE_CHECKING:
    from .._fleet._file import FleetFile

__all__ = ["cmd_upgrade_check"]


async def cmd_upgrade_check(ctx: CliContext, args: argparse.Namespace, fleet: FleetFile) -> int:
    """Replay a sample of each agent's recent runs against ``fleet``; exit 1 if any run
    would go otherwise (the report says where), 0 if none would."""
    from actors._fleet._upgrade import upgrade_check

    async with open_log(ctx) as store:
        report = await upgrade_check(store, fleet, sample=args.sample)
    diverging = sum(1 for agent in report for run in agent.runs if run.diverges)
    if ctx.json:
        ctx.emit({"agents": [attrs.asdict(a) for a in report], "diverging_runs": diverging})
        return 1 if diverging else 0
    from rich.markup import escape

    for agent in report:
        what = f" ({', '.join(agent.changed)})" if agent.changed else ""
        ctx.out.print(f"[bold]{agent.name}[/]: {agent.action}{escape(what)}")
        if agent.old_version != agent.new_version:
            ctx.out.print(f"  code version {agent.old_version} -> {agent.new_version}")
        for run in agent.runs:
            mark = "[yellow]diverges[/]" if run.diverges else "[green]same[/]"
            ctx.out.print(f"  {run.run_id} ({run.recorded_version}): {mark}")
            if run.diverges:
                ctx.out.print("    " + escape(run.detail).replace("\n", "\n    "))
    runs = plural(diverging, "recorded run")
    ctx.out.print(f"{runs} would go otherwise with this file")
    return 1 if diverging else 0
